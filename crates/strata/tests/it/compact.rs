//! Session compaction: a session near its bound has its oldest memories
//! summarised into `summary` memories that name them, and archived; a
//! compaction cut short is finished, not repeated; forgetting a compacted
//! memory takes its lines out of the summary.

use strata::{ColdConfig, Config, Error, Filter, Forget, ForgetOptions, Kind, List, NewMemory};

use crate::harness::{MakeEngine, TestEngine, config_error, scope, view};

backends!(engine:
    a_full_session_is_compacted_into_a_summary_that_names_its_sources,
    a_compaction_cut_short_is_finished_not_repeated,
    forgetting_a_compacted_memory_takes_its_lines_out_of_the_summary,
    compacting_what_cannot_be_is_refused,
    a_write_to_a_full_session_compacts_it_first,
);

fn a_write_to_a_full_session_compacts_it_first(make: MakeEngine) {
    let e = make(&small_sessions);
    // 50 turns of ~100 bytes into a 4,000-byte session: no upkeep ran,
    // and no write fails.
    let ids = turns(&e, "chat", 50);
    assert_eq!(ids.len(), 50);
    let s = e.session_manifest("chat").unwrap().session;
    assert!(s.bytes <= 4000, "{s:?}");
    assert!(!summaries(&e, "chat").is_empty());
    // A batch that would overflow it compacts it too.
    let batch: Vec<NewMemory> = (0..10)
        .map(|i| {
            NewMemory::new(
                scope("session/chat"),
                format!("batch turn {i}: {}", "x".repeat(120)),
            )
            .session("chat")
        })
        .collect();
    e.remember_batch(batch, strata::Confirm::No).unwrap();
    // A memory larger than the room compaction can make fails at once,
    // and nothing is compacted.
    let before = summaries(&e, "chat").len();
    let err = e
        .remember(NewMemory::new(scope("session/chat"), "w".repeat(2500)).session("chat"))
        .unwrap_err();
    assert!(matches!(err, Error::SessionFull { .. }), "{err}");
    assert_eq!(summaries(&e, "chat").len(), before);
    // Off: the write past the bound fails, naming the session.
    let off = make(&|c: &mut Config| {
        small_sessions(c);
        c.compaction.enabled = false;
    });
    let mut err = None;
    for i in 0..60 {
        if let Err(e) = off.remember(
            NewMemory::new(
                scope("session/full"),
                format!("turn {i} {}", "y".repeat(90)),
            )
            .session("full"),
        ) {
            err = Some(e);
            break;
        }
    }
    let err = err.expect("the bound is met");
    assert!(matches!(err, Error::SessionFull { .. }), "{err}");
    assert!(err.to_string().contains("full"), "{err}");
}

/// A session bound of 4,000 bytes, compaction at 90 % down to 50 %.
fn small_sessions(c: &mut Config) {
    c.session_max_bytes = 4000;
    c.max_items = 0;
    c.learning.enabled = false;
}

/// Writes `n` turns of about 100 bytes into session `id`; their ids.
fn turns(e: &TestEngine, id: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let text = format!(
                "Turn {i} of {id}: the build of component {i} failed on the linker step. \
                 We pinned the toolchain {i}."
            );
            e.remember(
                NewMemory::new(scope(&format!("session/{id}")), text)
                    .kind(Kind::Conversation)
                    .session(id),
            )
            .unwrap()
            .id
        })
        .collect()
}

fn summaries(e: &TestEngine, id: &str) -> Vec<strata::Memory> {
    let mut l = List::new(view(&[&format!("session/{id}")]));
    l.filter = Filter::parse(&serde_json::json!({"kind": "summary"})).unwrap();
    e.list(&l).unwrap()
}

fn sources(m: &strata::Memory) -> Vec<String> {
    m.payload.as_ref().unwrap()["compacted"]["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

fn a_full_session_is_compacted_into_a_summary_that_names_its_sources(make: MakeEngine) {
    let dir = tempfile::tempdir().unwrap();
    let e = make(&|c: &mut Config| {
        small_sessions(c);
        c.cold = ColdConfig {
            enabled: true,
            dir: Some(dir.path().to_path_buf()),
            demote_after_days: 0,
            demote_below_importance: 0.0,
            ..Default::default()
        };
    });
    let ids = turns(&e, "chat", 38);
    // The oldest turn is pinned: it stays.
    let first = e.get(&ids[0]).unwrap().unwrap();
    e.update(
        &first.id,
        strata::Patch {
            pinned: Some(true),
            ..Default::default()
        },
        1,
    )
    .unwrap();
    // A session under the bound is left alone.
    turns(&e, "short", 3);
    let before = e.session_manifest("chat").unwrap().session.bytes;
    assert!(before >= 3600, "{before}");
    let r = e.upkeep().unwrap();
    assert_eq!(r.sessions_compacted, 1, "{r:?}");
    let after = e.session_manifest("chat").unwrap().session.bytes;
    assert!(after <= 2000, "{before} → {after}");
    let s = summaries(&e, "chat");
    assert_eq!(s.len(), 1);
    let named = sources(&s[0]);
    assert_eq!(named.len(), r.compacted);
    assert_eq!(
        named,
        ids[1..=named.len()],
        "the oldest, in order, pinned left out"
    );
    assert!(s[0].content.starts_with(&format!(
        "Summary of {} earlier memories of session chat",
        named.len()
    )));
    assert!(
        named.iter().any(|id| s[0].content.contains(id.as_str())),
        "lines name their memories: {}",
        s[0].content
    );
    assert!(s[0].content.contains("linker step"), "{}", s[0].content);
    assert_eq!(
        s[0].session, None,
        "the summary takes none of the session's room"
    );
    // The sources went to the archive, and from there to cold.
    assert_eq!(r.moved_to_cold, named.len(), "{r:?}");
    for id in &named {
        let a = e.get_archived(id).unwrap().unwrap();
        assert_eq!(a.reason, "compacted");
        assert!(e.get(id).unwrap().is_none());
    }
    assert!(e.get(&ids[0]).unwrap().is_some(), "pinned stays");
    // Nothing more to do.
    let again = e.upkeep().unwrap();
    assert_eq!((again.sessions_compacted, again.compacted), (0, 0));
    assert_eq!(summaries(&e, "short").len(), 0);
}

fn a_compaction_cut_short_is_finished_not_repeated(make: MakeEngine) {
    let e = make(&small_sessions);
    let ids = turns(&e, "chat", 30);
    // What a crash between the two steps leaves: the summary, its sources
    // still active.
    let cut: Vec<&str> = ids[..12].iter().map(String::as_str).collect();
    e.remember(
        NewMemory::new(
            scope("session/chat"),
            "Summary of 12 earlier memories of session chat:\n- a line",
        )
        .kind(Kind::Summary)
        .payload(serde_json::json!({"compacted": {"session": "chat", "sources": cut}})),
    )
    .unwrap();
    let c = e.compact_session("chat").unwrap();
    assert!(c.compacted >= 12, "{c:?}");
    for id in &ids[..12] {
        assert_eq!(e.get_archived(id).unwrap().unwrap().reason, "compacted");
    }
    let all = summaries(&e, "chat");
    let mut named: Vec<String> = all.iter().flat_map(sources).collect();
    let n = named.len();
    named.sort();
    named.dedup();
    assert_eq!(named.len(), n, "no memory is named by two summaries");
    assert!(c.bytes_after <= 2000, "{c:?}");
}

fn forgetting_a_compacted_memory_takes_its_lines_out_of_the_summary(make: MakeEngine) {
    let e = make(&small_sessions);
    turns(&e, "chat", 30);
    let c = e.compact_session("chat").unwrap();
    let old = summaries(&e, "chat").remove(0);
    let quoted = sources(&old)
        .into_iter()
        .find(|id| old.content.contains(id.as_str()))
        .expect("a quoted source");
    let n = sources(&old).len();
    let r = e
        .forget(&Forget::Id(quoted.clone()), ForgetOptions::default())
        .unwrap();
    assert_eq!(r.deleted, 1);
    let now = summaries(&e, "chat");
    assert_eq!(now.len(), 1);
    assert_ne!(now[0].id, old.id, "a new summary replaces the old");
    assert!(!now[0].content.contains(&quoted), "{}", now[0].content);
    assert_eq!(sources(&now[0]).len(), n - 1);
    assert!(e.get(&old.id).unwrap().is_none());
    assert!(
        e.history(&old.id).unwrap().is_empty(),
        "the old text is in no version"
    );
    // Forgetting every source leaves no summary.
    let rest: Vec<String> = sources(&now[0]);
    e.forget(&Forget::Ids(rest), ForgetOptions::default())
        .unwrap();
    assert!(summaries(&e, "chat").is_empty());
    assert!(c.compacted > 0);
}

fn compacting_what_cannot_be_is_refused(make: MakeEngine) {
    let e = make(&small_sessions);
    let err = e.compact_session("nobody").unwrap_err();
    assert!(matches!(err, Error::SessionNotFound(_)), "{err}");
    let err = e.compact_session("a/b").unwrap_err();
    assert!(err.to_string().contains("session"), "{err}");
    turns(&e, "done", 2);
    e.archive_session("done").unwrap();
    let err = e.compact_session("done").unwrap_err();
    assert!(matches!(err, Error::SessionArchived(_)), "{err}");
    e.open_ephemeral_session(Some("quiet"), None).unwrap();
    let err = e.compact_session("quiet").unwrap_err();
    assert!(err.to_string().contains("ephemeral"), "{err}");
    // A session under its target: nothing happens.
    turns(&e, "small", 2);
    let c = e.compact_session("small").unwrap();
    assert_eq!((c.compacted, c.summaries.len()), (0, 0));
    for (toml, want) in [
        ("[compaction]\nat = 0\n", "compaction.at"),
        ("[compaction]\nat = 1.5\n", "compaction.at"),
        ("[compaction]\nto = 0.95\n", "compaction.to"),
        (
            "[compaction]\nsummary_tokens = 4\n",
            "compaction.summary_tokens",
        ),
        ("[compaction]\nevery = 3\n", "every"),
    ] {
        let err = config_error(toml);
        assert!(err.contains(want), "{toml}: {err}");
    }
}

/// On a thread that must not wait (a server's event loop), a write to a
/// full session is refused, nothing written, for a thread that may: there
/// it compacts the session and is written.
#[test]
fn a_hurried_write_to_a_full_session_is_refused_for_a_thread_that_may_wait() {
    let e = TestEngine::sqlite(small_sessions);
    let bytes = |e: &TestEngine| e.session_manifest("chat").unwrap().session.bytes;
    turns(&e, "chat", 1);
    let mut n = 1;
    while bytes(&e) + 110 <= 4000 {
        turns(&e, "chat", 1);
        n += 1;
    }
    let before = bytes(&e);
    let big = || NewMemory::new(scope("session/chat"), "z".repeat(200)).session("chat");
    let refused = strata::without_waiting(|| e.remember(big())).unwrap_err();
    assert_eq!(refused.why, strata::Refusal::Bound);
    assert_eq!(bytes(&e), before, "nothing written");
    assert!(summaries(&e, "chat").is_empty(), "nothing compacted");
    e.remember(big()).unwrap();
    assert!(bytes(&e) < before, "compacted, then written");
    assert!(n > 30);
}
