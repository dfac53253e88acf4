//! The hot tier: a session's last turns from this process's memory (a
//! write-through ring that follows every change of the store, whoever
//! makes it) and ephemeral sessions, whose memories never reach the store.

use strata::{
    Agent, Config, Error, Filter, Forget, ForgetOptions, HotConfig, Kind, List, NewMemory, Patch,
    Recall,
};

use crate::harness::{MakeEngine, TestEngine, config_error, mem, scope, view};

backends!(engine:
    the_ring_serves_a_sessions_last_turns_and_follows_every_change,
    ephemeral_sessions_live_in_the_hot_tier_alone,
    an_ephemeral_agent_remembers_its_turns_in_memory_only,
    bad_hot_tier_requests_are_refused_and_change_nothing,
);

fn turns(e: &TestEngine, session: &str, n: usize) -> Vec<String> {
    e.last_turns(session, n)
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect()
}

fn hot_memories(e: &TestEngine) -> u64 {
    e.stats().unwrap().storage_tiers["hot"].memories
}

fn the_ring_serves_a_sessions_last_turns_and_follows_every_change(make: MakeEngine) {
    let e = make(&|c: &mut Config| {
        c.hot.turns = 4;
        c.max_items = 0;
    });
    let turn = |t: &str| NewMemory::new(scope("session/s1"), t).session("s1");
    for t in ["one", "two", "three"] {
        e.remember(turn(t)).unwrap();
    }
    assert_eq!(hot_memories(&e), 0, "a ring is filled by its first read");
    assert_eq!(turns(&e, "s1", 2), ["two", "three"]);
    assert_eq!(hot_memories(&e), 3);
    // This engine's writes go into the ring; the oldest leave past 4.
    e.remember(turn("four")).unwrap();
    e.remember_batch(vec![turn("five"), turn("six")], strata::Confirm::No)
        .unwrap();
    assert_eq!(
        turns(&e, "s1", 10),
        ["one", "two", "three", "four", "five", "six"],
        "more than the ring holds comes from the store"
    );
    assert_eq!(turns(&e, "s1", 4), ["three", "four", "five", "six"]);
    assert_eq!(hot_memories(&e), 4);

    // Changes made beside this engine (another process's, here straight
    // through the store) are seen at the next read.
    let five = e.last_turns("s1", 2).unwrap()[0].clone();
    assert_eq!(five.content, "five");
    assert_eq!(e.store().delete(std::slice::from_ref(&five.id)).unwrap(), 1);
    assert_eq!(turns(&e, "s1", 4), ["two", "three", "four", "six"]);
    let mut other = mem("session/s1", "seven, from another process");
    other.session = Some("s1".into());
    other.created_at = jiff::Timestamp::now();
    other.updated_at = other.created_at;
    e.store().put(&other).unwrap();
    assert_eq!(turns(&e, "s1", 2), ["six", "seven, from another process"]);

    // Updates and forgetting through the engine.
    let six = e.last_turns("s1", 2).unwrap()[0].clone();
    e.update(
        &six.id,
        Patch {
            content: Some("six, corrected".into()),
            ..Patch::default()
        },
        1,
    )
    .unwrap();
    assert_eq!(
        turns(&e, "s1", 2),
        ["six, corrected", "seven, from another process"]
    );
    let r = e
        .forget(&Forget::Id(six.id.clone()), ForgetOptions::default())
        .unwrap();
    assert_eq!(r.deleted, 1);
    assert_eq!(turns(&e, "s1", 2), ["four", "seven, from another process"]);
    assert!(
        e.last_turns("s1", 4)
            .unwrap()
            .iter()
            .all(|m| m.id != six.id),
        "a forgotten memory is in no ring"
    );
    // Archiving the session moves its memories out of the store's active set.
    e.archive_session("s1").unwrap();
    assert!(turns(&e, "s1", 4).is_empty());
}

fn ephemeral_sessions_live_in_the_hot_tier_alone(make: MakeEngine) {
    let e = make(&|c: &mut Config| {
        c.hot.turns = 2;
        c.max_items = 0;
    });
    let s = e.open_ephemeral_session(Some("private"), None).unwrap();
    assert!(s.ephemeral);
    assert_eq!(s.scope.as_str(), "session/private");
    let warm = e
        .remember(
            NewMemory::new(scope("session/public"), "the deploy key rotates monthly")
                .session("public"),
        )
        .unwrap();
    let turn = |t: &str| NewMemory::new(scope("session/private"), t).session("private");
    e.remember(turn("my diagnosis is confidential")).unwrap();
    let keyed = e.remember(turn("blood type A").key("blood")).unwrap();
    let again = e
        .remember(turn("blood type AB, corrected").key("blood"))
        .unwrap();
    assert_eq!(
        (again.id.as_str(), again.version),
        (keyed.id.as_str(), 2),
        "a key supersedes"
    );
    let batch = e
        .remember_batch(
            vec![
                turn("the deploy waits for the tests"),
                NewMemory::new(scope("session/public"), "a public note").session("public"),
            ],
            strata::Confirm::No,
        )
        .unwrap();
    assert_eq!(batch[0].content, "the deploy waits for the tests");
    assert_eq!(batch[1].session.as_deref(), Some("public"));

    // Nothing of it is in the store.
    let st = e.store().stats().unwrap();
    assert_eq!(st.memories, 2, "only the public memories: {st:?}");
    assert!(e.store().get_session("private").unwrap().is_none());
    assert!(e.store().get(&keyed.id).unwrap().is_none());
    // The ring holds the last two: the first turn left.
    assert_eq!(
        turns(&e, "private", 10),
        ["blood type AB, corrected", "the deploy waits for the tests"]
    );
    assert!(e.get(&keyed.id).unwrap().is_some());
    let sessions = e.list_sessions().unwrap();
    assert!(sessions.iter().any(|s| s.id == "private" && s.ephemeral));
    let manifest = e.session_manifest("private").unwrap();
    assert_eq!(manifest.memories, 2);

    // Recall, list and context see it beside the store's memories.
    let both = view(&["session/private", "session/public"]);
    let found: Vec<String> = e
        .recall(&Recall::new("deploy", both.clone()))
        .unwrap()
        .into_iter()
        .map(|r| r.memory.content)
        .collect();
    assert!(
        found.contains(&"the deploy waits for the tests".to_string()),
        "{found:?}"
    );
    assert!(found.contains(&warm.content), "{found:?}");
    let listed = e.list(&List::new(both.clone())).unwrap();
    assert_eq!(listed.len(), 4, "{listed:?}");
    assert_eq!(listed[0].content, "a public note", "newest first");
    let mut filtered = List::new(both.clone());
    filtered.filter = Filter::parse(&serde_json::json!({"key": "blood"})).unwrap();
    assert_eq!(e.list(&filtered).unwrap().len(), 1);

    // Forget reaches it; ending the session removes the rest.
    let r = e
        .forget(&Forget::Id(keyed.id.clone()), ForgetOptions::default())
        .unwrap();
    assert_eq!(r.deleted, 1);
    assert!(e.get(&keyed.id).unwrap().is_none());
    let ended = e.archive_session("private").unwrap();
    assert!(ended.archived_at.is_some());
    assert!(e.list_sessions().unwrap().iter().all(|s| s.id != "private"));
    assert!(
        e.recall(&Recall::new("deploy", both))
            .unwrap()
            .iter()
            .all(|r| r.memory.session.as_deref() != Some("private"))
    );
    assert_eq!(hot_memories(&e), 0);
    // A write naming the ended session is refused, never stored.
    let err = e.remember(turn("after the end")).unwrap_err();
    assert!(matches!(err, Error::SessionArchived(_)), "{err}");
    assert!(e.store().get_session("private").unwrap().is_none());
    let err = e
        .remember_batch(
            vec![
                NewMemory::new(scope("session/public"), "not kept").session("public"),
                turn("nor this"),
            ],
            strata::Confirm::No,
        )
        .unwrap_err();
    assert!(matches!(err, Error::SessionArchived(_)), "{err}");
    assert_eq!(
        e.store().stats().unwrap().memories,
        2,
        "the batch changed nothing"
    );
}

fn an_ephemeral_agent_remembers_its_turns_in_memory_only(make: MakeEngine) {
    let e = make(&|c: &mut Config| c.max_items = 0);
    let mut a = Agent::ephemeral(&e, "nurse", Some("ward")).unwrap();
    assert!(a.is_ephemeral());
    a.remember_turn("the patient is allergic to penicillin", "noted")
        .unwrap();
    let pkg = a.context("allergy").unwrap();
    assert!(
        pkg.markdown().contains("allergic to penicillin"),
        "{}",
        pkg.markdown()
    );
    assert_eq!(e.store().stats().unwrap().memories, 0);
    let history = e.conversation_history(&a.session().unwrap().id).unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[0].kind, Kind::Conversation);
    a.new_session().unwrap();
    assert!(a.context("allergy").unwrap().items.is_empty());
    assert_eq!(hot_memories(&e), 0);
    assert_eq!(e.store().stats().unwrap().memories, 0);
}

fn bad_hot_tier_requests_are_refused_and_change_nothing(make: MakeEngine) {
    let e = make(&|_| {});
    e.create_session(Some("stored"), None, None).unwrap();
    let err = e.open_ephemeral_session(Some("stored"), None).unwrap_err();
    assert!(matches!(err, Error::DuplicateSession(_)), "{err}");
    e.open_ephemeral_session(Some("mine"), None).unwrap();
    let err = e.create_session(Some("mine"), None, None).unwrap_err();
    assert!(matches!(err, Error::DuplicateSession(_)), "{err}");
    assert!(e.store().get_session("mine").unwrap().is_none());
    let err = e.open_ephemeral_session(Some("bad/id"), None).unwrap_err();
    assert!(err.to_string().contains("session"), "{err}");
    let err = e
        .remember(NewMemory::new(scope("project/elsewhere"), "outside").session("mine"))
        .unwrap_err();
    assert!(err.to_string().contains("session/mine"), "{err}");
    assert_eq!(e.session_manifest("mine").unwrap().memories, 0);
    let err = e.last_turns("nobody", 5).unwrap_err();
    assert!(matches!(err, Error::SessionNotFound(_)), "{err}");
    let err = e.last_turns("a/b", 5).unwrap_err();
    assert!(err.to_string().contains("session"), "{err}");

    let off = TestEngine::memory(|c| c.hot.turns = 0);
    let err = off.open_ephemeral_session(None, None).unwrap_err();
    assert!(err.to_string().contains("hot.turns"), "{err}");
    assert!(!off.stats().unwrap().storage_tiers.contains_key("hot"));
    let one = TestEngine::memory(|c| c.hot.sessions = 1);
    one.open_ephemeral_session(None, None).unwrap();
    let err = one.open_ephemeral_session(None, None).unwrap_err();
    assert!(err.to_string().contains("hot.sessions"), "{err}");

    for (toml, want) in [
        ("[hot]\nturns = 100001\n", "hot.turns"),
        ("[hot]\nsessions = 0\n", "hot.sessions"),
        ("[hot]\nring = 3\n", "ring"),
    ] {
        let err = config_error(toml);
        assert!(err.contains(want), "{toml}: {err}");
    }
    let c = HotConfig::default();
    assert_eq!((c.turns, c.sessions), (100, 10_000));
}

#[test]
fn an_ephemeral_sessions_text_is_in_no_file() {
    let e = TestEngine::sqlite(|c| c.max_items = 0);
    e.open_ephemeral_session(Some("secret"), None).unwrap();
    e.remember(
        NewMemory::new(scope("session/secret"), "zebra-orchid-7731 is the code").session("secret"),
    )
    .unwrap();
    e.remember(NewMemory::new(scope("project/a"), "an ordinary note"))
        .unwrap();
    assert_eq!(e.last_turns("secret", 5).unwrap().len(), 1);
    e.flush_accesses().unwrap();
    let dir = e.dir.as_ref().unwrap().path();
    let mut seen = 0;
    for f in std::fs::read_dir(dir).unwrap() {
        let p = f.unwrap().path();
        if p.is_file() {
            let bytes = std::fs::read(&p).unwrap();
            seen += 1;
            assert!(
                !bytes.windows(17).any(|w| w == b"zebra-orchid-7731"),
                "{} holds the ephemeral text",
                p.display()
            );
        }
    }
    assert!(seen > 0);
}
