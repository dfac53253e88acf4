//! Learning: the detectors upkeep runs, what they write, and a person's
//! say over it.

use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use strata::{
    Agent, Config, Depth, Engine, Forget, ForgetOptions, Kind, Learned, LearnedStatus, NewMemory,
    Role, Scope, Source, View,
};

use crate::harness::TestEngine;

type Make<'a> = &'a dyn Fn(&dyn Fn(&mut Config)) -> TestEngine;

backends!(engine:
    preferences_are_learned_with_evidence,
    learning_is_incremental,
    a_turned_preference_supersedes_and_keeps_history,
    repeated_failures_become_one_pattern_with_its_fix,
    a_rejected_pattern_is_not_learned_again_from_its_evidence,
    forgetting_evidence_lowers_confidence_then_removes,
    talk_and_assistant_turns_teach_nothing,
    confirmed_patterns_do_not_decay,
    a_learning_agent_sees_what_was_learned,
    a_profile_takes_or_leaves_learned_memories,
    a_learned_memory_gives_way_to_what_was_said_in_a_context,
    near_duplicates_merge_into_the_earliest_and_a_restored_one_stays_apart,
    consolidation_can_be_turned_off,
    a_topic_said_to_be_unclear_and_asked_again_is_learned_as_confusion,
    a_fact_that_changes_without_a_key_is_answered_as_of,
    a_rejected_pattern_stays_rejected_once_it_is_cold,
    evidence_demoted_to_the_cold_tier_still_counts,
    a_recurring_topic_is_learned_once_and_a_rejected_one_stays_rejected,
    a_habit_not_seen_for_a_year_fades_to_the_archive_and_returns_when_said_again,
    what_an_import_brings_after_a_run_is_learned_at_the_next,
    an_older_statement_never_supersedes_a_newer_fact,
    a_value_said_to_have_ended_is_replaced_by_the_one_beside_it,
);

fn what_an_import_brings_after_a_run_is_learned_at_the_next(make: Make) {
    // Two statements from half a year ago (a habit not yet faded),
    // exported from one store…
    let from = make(&|_| {});
    let long_ago = Timestamp::now() - SignedDuration::from_hours(24 * 180);
    for (i, text) in [
        "Always run cargo fmt before committing.",
        "please always run cargo fmt before you commit",
    ]
    .into_iter()
    .enumerate()
    {
        from.remember(
            NewMemory::new(acme(), text)
                .kind(Kind::Conversation)
                .role(Role::User)
                .session(format!("old-{i}"))
                .created_at(long_ago + SignedDuration::from_hours(24 * i as i64)),
        )
        .unwrap();
    }
    let mut out = Vec::new();
    from.export(&strata::Export::default(), &mut out, &mut |_| {})
        .unwrap();
    // …into a store whose learning ran today: the watermark is after
    // their times, and the next run still examines them.
    let e = make(&|_| {});
    said(&e, "today", "What is the build status?");
    assert_eq!(e.learn().unwrap().examined, 1);
    e.import(&mut out.as_slice(), strata::OnConflict::Error, &mut |_| {})
        .unwrap();
    let r = e.learn().unwrap();
    assert_eq!(r.examined, 2, "{r:?}");
    let v = learned(&e, "preference");
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].1.evidence.len(), 2);
    // And once: a later run learns nothing new from them.
    let r = e.learn().unwrap();
    assert_eq!(r.learned, 0, "{r:?}");
    assert_eq!(learned(&e, "preference").len(), 1);
}

fn an_older_statement_never_supersedes_a_newer_fact(make: Make) {
    let mut e = make(&|_| {});
    let t = clock(&mut e);
    let old = said(&e, "s1", "I live in Lisbon.");
    later(&t, 30);
    said(&e, "s2", "Big news: we just moved to Porto!");
    e.learn().unwrap();
    let v = learned(&e, "fact");
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].0.content, "The user lives in Porto");
    // The old statement comes back (an import of an old backup, here a
    // plain update that changes nothing it says): the fact stays Porto.
    later(&t, 1);
    e.update(
        &old.id,
        strata::Patch {
            importance: Some(0.9),
            ..Default::default()
        },
        old.version,
    )
    .unwrap();
    e.learn().unwrap();
    let v = learned(&e, "fact");
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].0.content, "The user lives in Porto");
}

#[test]
fn learning_says_when_it_reads_phrases_only() {
    let c = Config {
        embedder: strata::EmbedderConfig::none(),
        ..Config::in_memory()
    };
    let e = Engine::open(c).unwrap();
    said(&e, "s1", "I really prefer answers in bullet points.");
    let r = e.learn().unwrap();
    assert!(!r.by_meaning);
    assert!(
        r.notes.iter().any(|n| n.contains("phrases")),
        "{:?}",
        r.notes
    );
    assert!(
        e.learning_by_meaning()
            .unwrap_err()
            .contains("no local model")
    );
}

/// The real all-MiniLM-L6-v2 (`.ci/run` fetches it and sets
/// STRATA_TEST_MODEL_DIR; under CI a missing model fails the test).
#[cfg(feature = "local-embed")]
fn real_model() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("STRATA_TEST_MODEL_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(strata::default_model_dir);
    if dir.join("model.safetensors").is_file() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "no model at {} under CI",
        dir.display()
    );
    eprintln!("skipped: no model at {}", dir.display());
    None
}

#[cfg(feature = "local-embed")]
#[test]
fn the_real_model_learns_preferences_facts_and_topics_by_meaning() {
    let Some(dir) = real_model() else { return };
    let c = Config {
        embedder: strata::EmbedderConfig::local(&dir),
        ..Config::in_memory()
    };
    let mut e = Engine::open(c).unwrap();
    let t = clock(&mut e);
    let mut bullets = Vec::new();
    let mut sourdough = Vec::new();
    let plan = [
        (
            "s1",
            vec![
                "Morning! How was your weekend?",
                "I live in Lisbon, by the way.",
                "Please keep answers short, I prefer bullet points over paragraphs.",
            ],
        ),
        (
            "s2",
            vec![
                "How do I keep my sourdough starter alive while travelling for a week?",
                "Make this one shorter.",
            ],
        ),
        (
            "s3",
            vec![
                "Again: bullet points please, I read these on my phone.",
                "Morning! How was your weekend?",
            ],
        ),
        (
            "s4",
            vec![
                "My levain smells like nail polish remover, is the bread starter dying?",
                "What's a good cast iron pan?",
            ],
        ),
        (
            "s5",
            vec![
                "Big news: we just moved to Porto!",
                "I really prefer when you answer in bullet points.",
            ],
        ),
        (
            "s6",
            vec![
                "Morning! How was your weekend?",
                "Should I feed the sourdough starter twice a day in summer?",
            ],
        ),
    ];
    for (session, turns) in plan {
        for text in turns {
            let m = said(&e, session, text);
            if text.contains("bullet") {
                bullets.push(m.id.clone());
            } else if text.contains("starter") {
                sourdough.push(m.id.clone());
            }
        }
        later(&t, 4);
    }
    let r = e.learn().unwrap();
    assert!(r.by_meaning, "{r:?}");
    let prefs = learned(&e, "preference");
    assert_eq!(prefs.len(), 1, "{prefs:?}");
    let mut want = bullets.clone();
    want.sort();
    let mut got = prefs[0].1.evidence.clone();
    got.sort();
    assert_eq!(got, want, "every statement, and nothing said once");
    let facts = learned(&e, "fact");
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert_eq!(facts[0].0.content, "The user lives in Porto");
    let topics = learned(&e, "topic");
    assert_eq!(topics.len(), 1, "{topics:?}");
    assert!(
        topics[0].1.evidence.iter().all(|id| sourdough.contains(id)),
        "{topics:?}"
    );
    // Small talk said in three sessions is no topic, and a one-off request
    // no preference: nothing else was learned.
    assert_eq!(e.learned(&View::subtree(acme())).unwrap().len(), 3);
}

/// A clock the test moves.
fn clock(e: &mut Engine) -> Arc<Mutex<Timestamp>> {
    let now = Arc::new(Mutex::new(Timestamp::now()));
    let c = now.clone();
    e.set_clock(move || *c.lock().unwrap());
    now
}

fn later(t: &Arc<Mutex<Timestamp>>, days: i64) {
    let mut g = t.lock().unwrap();
    *g += SignedDuration::from_hours(24 * days);
}

fn acme() -> Scope {
    Scope::parse("project/acme").unwrap()
}

fn said(e: &Engine, session: &str, text: &str) -> strata::Memory {
    e.remember(
        NewMemory::new(acme(), text)
            .kind(Kind::Conversation)
            .role(Role::User)
            .session(session),
    )
    .unwrap()
}

fn failed(e: &Engine, session: &str, text: &str) -> strata::Memory {
    e.remember(
        NewMemory::new(acme(), text)
            .kind(Kind::Failure)
            .session(session),
    )
    .unwrap()
}

fn learned(e: &Engine, detector: &str) -> Vec<(strata::Memory, Learned)> {
    e.learned(&View::subtree(acme()))
        .unwrap()
        .into_iter()
        .filter(|(_, l)| l.detector == detector)
        .collect()
}

fn preferences_are_learned_with_evidence(make: Make) {
    let mut e = make(&|_| {});
    let t = clock(&mut e);
    let a = said(&e, "s1", "Thanks. Always run cargo fmt before committing.");
    later(&t, 3);
    let b = said(&e, "s2", "please always run cargo fmt before you commit!");
    let before = e.get(&a.id).unwrap().unwrap();
    let r = e.upkeep().unwrap().learned.unwrap();
    assert_eq!(r.learned, 1, "{r:?}");
    let v = learned(&e, "preference");
    assert_eq!(v.len(), 1);
    let (m, l) = &v[0];
    assert_eq!(m.source, Source::Learned);
    assert_eq!(m.kind, Kind::Preference);
    assert!(m.key.as_deref().unwrap().starts_with("learned/preference/"));
    assert_eq!(l.evidence, vec![a.id.clone(), b.id.clone()]);
    assert_eq!(l.independent, 2);
    assert_eq!(l.confidence, 0.84);
    assert_eq!(l.first_seen, a.created_at);
    assert_eq!(l.last_seen, b.created_at);
    assert_eq!(l.status, LearnedStatus::Proposed);
    // The evidence is read, never edited.
    assert_eq!(e.get(&a.id).unwrap().unwrap(), before);
    let shown: Vec<String> = e
        .learned_evidence(&m.id)
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(shown, vec![a.id, b.id]);
}

fn learning_is_incremental(make: Make) {
    let mut e = make(&|_| {});
    let t = clock(&mut e);
    said(&e, "s1", "I prefer short answers with the code first.");
    said(&e, "s1", "The build is green now.");
    assert_eq!(e.learn().unwrap().examined, 2);
    later(&t, 1);
    assert_eq!(e.learn().unwrap().examined, 0, "nothing changed");
    later(&t, 1);
    let c = said(&e, "s2", "I'd prefer short answers with code first");
    let r = e.learn().unwrap();
    assert_eq!((r.examined, r.learned, r.updated), (1, 0, 1), "{r:?}");
    let l = &learned(&e, "preference")[0].1;
    assert_eq!(l.evidence.len(), 2);
    assert_eq!(l.evidence[1], c.id);
}

fn a_turned_preference_supersedes_and_keeps_history(make: Make) {
    let mut e = make(&|_| {});
    let t = clock(&mut e);
    said(&e, "s1", "Always squash commits before merging.");
    e.learn().unwrap();
    later(&t, 30);
    let now = said(&e, "s2", "Never squash commits before merging.");
    e.learn().unwrap();
    let v = learned(&e, "preference");
    assert_eq!(v.len(), 1);
    let (m, l) = &v[0];
    assert!(m.content.starts_with("Never squash"), "{}", m.content);
    assert_eq!(l.evidence, vec![now.id]);
    let history = e.history(&m.id).unwrap();
    assert!(
        history
            .iter()
            .any(|h| h.content.starts_with("Always squash")),
        "{history:?}"
    );
}

fn repeated_failures_become_one_pattern_with_its_fix(make: Make) {
    let mut e = make(&|_| {});
    let t = clock(&mut e);
    let f1 = failed(
        &e,
        "s1",
        "connection refused: could not reach db at 10.0.0.4:5432",
    );
    later(&t, 7);
    failed(
        &e,
        "s2",
        "disk quota exceeded while writing /var/log/app.log",
    );
    let f2 = failed(
        &e,
        "s3",
        "Connection refused: could not reach db at 10.0.0.9:5433",
    );
    e.learn().unwrap();
    let v = learned(&e, "failure");
    assert_eq!(v.len(), 1, "one repeated failure, not the single one");
    assert_eq!(v[0].1.evidence, vec![f1.id.clone(), f2.id.clone()]);
    assert!(v[0].0.content.starts_with("Repeated failure (2 times"));
    assert!(!v[0].0.content.contains("Fixed by"));
    later(&t, 1);
    let fix = e
        .remember(
            NewMemory::new(
                acme(),
                "Fixed the db connection refused errors: the pool pointed at the old port.",
            )
            .kind(Kind::Finding),
        )
        .unwrap();
    let r = e.learn().unwrap();
    assert_eq!(r.updated, 1, "{r:?}");
    let v = learned(&e, "failure");
    assert_eq!(v.len(), 1);
    assert!(v[0].0.content.contains("Fixed by: Fixed the db connection"));
    assert_eq!(v[0].1.evidence, vec![f1.id, f2.id, fix.id]);
    assert_eq!(v[0].0.kind, Kind::Pattern);
}

fn a_rejected_pattern_is_not_learned_again_from_its_evidence(make: Make) {
    let mut e = make(&|_| {});
    let t = clock(&mut e);
    failed(&e, "s1", "timeout waiting for the payments sandbox");
    failed(&e, "s2", "Timeout waiting for the payments sandbox");
    e.learn().unwrap();
    let id = learned(&e, "failure")[0].0.id.clone();
    e.reject_learned(&id).unwrap();
    assert!(e.get(&id).unwrap().is_none());
    assert_eq!(e.get_archived(&id).unwrap().unwrap().reason, "rejected");
    // Something else changes in the scope: the same two failures are looked
    // at again, and teach nothing.
    later(&t, 1);
    failed(&e, "s3", "out of memory in the image resizer");
    let r = e.learn().unwrap();
    assert_eq!(r.rejected_skipped, 1, "{r:?}");
    assert!(learned(&e, "failure").is_empty());
    // A new occurrence is new evidence.
    later(&t, 1);
    let again = failed(&e, "s4", "timeout waiting for the payments sandbox");
    e.learn().unwrap();
    let v = learned(&e, "failure");
    assert_eq!(v.len(), 1);
    assert!(v[0].1.evidence.contains(&again.id));
    // Nor can a memory that is not learned be confirmed or rejected.
    let err = e.confirm_learned(&again.id).unwrap_err().to_string();
    assert!(err.contains("not a learned memory"), "{err}");
    assert!(e.reject_learned("no-such-id").is_err());
}

fn forgetting_evidence_lowers_confidence_then_removes(make: Make) {
    let mut e = make(&|_| {});
    let t = clock(&mut e);
    let a = said(&e, "s1", "Never deploy on Fridays.");
    later(&t, 1);
    let b = said(&e, "s2", "never deploy on fridays");
    e.learn().unwrap();
    assert_eq!(learned(&e, "preference")[0].1.confidence, 0.84);
    e.forget(&Forget::Id(a.id), ForgetOptions::default())
        .unwrap();
    e.learn().unwrap();
    let v = learned(&e, "preference");
    assert_eq!(v[0].1.confidence, 0.6);
    assert_eq!(v[0].1.evidence, vec![b.id.clone()]);
    e.forget(&Forget::Id(b.id), ForgetOptions::default())
        .unwrap();
    let r = e.learn().unwrap();
    assert_eq!(r.removed, 1);
    assert!(learned(&e, "preference").is_empty());
}

fn talk_and_assistant_turns_teach_nothing(make: Make) {
    let e = make(&|_| {});
    said(
        &e,
        "s1",
        "Don't worry about it. Never mind. Should I always rebase?",
    );
    said(
        &e,
        "s1",
        "She said she prefers tea. I have always been curious about Rust.",
    );
    e.remember(
        NewMemory::new(
            acme(),
            "Always double-check the migration before running it.",
        )
        .kind(Kind::Conversation)
        .role(Role::Assistant)
        .session("s1"),
    )
    .unwrap();
    let r = e.learn().unwrap();
    assert_eq!(r.learned, 0, "{r:?}");
}

/// Two preferences learned; the one about spelling confirmed (its id, and
/// the other's).
fn two_preferences_one_confirmed(
    make: Make,
) -> (TestEngine, Arc<Mutex<Timestamp>>, String, String) {
    let mut e = make(&|_| {});
    let t = clock(&mut e);
    said(&e, "s1", "I prefer British spelling in documentation.");
    said(&e, "s1", "Always tag releases with a v prefix.");
    e.learn().unwrap();
    let v = learned(&e, "preference");
    assert_eq!(v.len(), 2);
    let (keep, other) = if v[0].0.content.contains("British") {
        (v[0].0.id.clone(), v[1].0.id.clone())
    } else {
        (v[1].0.id.clone(), v[0].0.id.clone())
    };
    e.confirm_learned(&keep).unwrap();
    (e, t, keep, other)
}

fn confirmed_patterns_do_not_decay(make: Make) {
    let (e, t, keep, _) = two_preferences_one_confirmed(make);
    later(&t, 180);
    e.learn().unwrap();
    for (m, l) in learned(&e, "preference") {
        if m.id == keep {
            assert_eq!((l.confidence, l.status), (1.0, LearnedStatus::Confirmed));
        } else {
            assert!(l.confidence < 0.2, "two half-lives later: {}", l.confidence);
        }
    }
}

fn a_learning_agent_sees_what_was_learned(make: Make) {
    let e = make(&|_| {});
    let learning = Agent::new(&e, "coder", Depth::Learning, Some("acme")).unwrap();
    learning
        .remember_turn("Always explain launch file changes.", "Will do.")
        .unwrap();
    let persistent = Agent::new(&e, "reviewer", Depth::Persistent, Some("acme")).unwrap();
    e.upkeep().unwrap();
    let own = Scope::parse("project/acme/agent/coder").unwrap();
    assert_eq!(e.learned(&View::scope(own)).unwrap().len(), 1);
    let md = learning.context("launch files").unwrap().markdown();
    assert!(md.contains("What was learned"), "{md}");
    assert_eq!(
        md.matches("Always explain launch file changes").count(),
        2,
        "the turn and the learned instruction: {md}"
    );
    let md = persistent.context("launch files").unwrap().markdown();
    assert!(!md.contains("What was learned"), "{md}");
}

fn a_profile_takes_or_leaves_learned_memories(make: Make) {
    let e = make(&|c| {
        c.apply_toml(
            "[profiles.plain]\nmax_tokens = 1000\n[[profiles.plain.sources]]\nscope = \"project/acme\"\n\
             filter = {source = {\"$ne\" = \"learned\"}}\n\
             [profiles.learned]\nmax_tokens = 1000\n[[profiles.learned.sources]]\nscope = \"project/acme\"\n\
             filter = {source = \"learned\"}\n",
            None,
        )
        .unwrap();
    });
    said(
        &e,
        "s1",
        "From now on, write release notes in plain English, thanks.",
    );
    e.learn().unwrap();
    let md = |p: &str| {
        e.context(&strata::ContextRequest::new(p))
            .unwrap()
            .markdown()
    };
    let plain = md("plain");
    assert!(
        plain.contains("From now on, write release notes"),
        "{plain}"
    );
    assert_eq!(plain.matches("release notes").count(), 1, "{plain}");
    let learned = md("learned");
    assert_eq!(learned.matches("release notes").count(), 1, "{learned}");
    assert!(
        !learned.contains("thanks."),
        "only the learned statement: {learned}"
    );
}

/// A learned memory restates what was said: in a source that holds both,
/// it comes after every memory that was said, however well its short
/// statement matches the query, and the memories that were said are the
/// same, in the same order, as before anything was learned (text search and
/// fusion score them among themselves).
fn a_learned_memory_gives_way_to_what_was_said_in_a_context(make: Make) {
    let e = make(&|c| {
        c.apply_toml(
            "[profiles.ask]\nmax_tokens = 2000\nstrategy = \"relevance\"\n\
             [[profiles.ask.sources]]\nscope = \"project/acme\"\n\
             [profiles.tight]\nmax_tokens = 60\nstrategy = \"relevance\"\n\
             [[profiles.tight.sources]]\nscope = \"project/acme\"\n\
             [profiles.nochat]\nmax_tokens = 2000\nstrategy = \"relevance\"\n\
             [[profiles.nochat.sources]]\nscope = \"project/acme\"\n\
             filter = {kind = {\"$ne\" = \"conversation\"}}\n",
            None,
        )
        .unwrap();
    });
    let turn = said(
        &e,
        "s1",
        "Thanks for the review of the staging deploy earlier today, it went out fine. \
         Always run cargo fmt before committing to the release branch.",
    );
    let other = e
        .remember(
            NewMemory::new(acme(), "The release branch build took 40 minutes").kind(Kind::Note),
        )
        .unwrap();
    for i in 0..6 {
        e.remember(
            NewMemory::new(
                acme(),
                format!("Branch {i} of the release train is cut on Fridays"),
            )
            .kind(Kind::Note),
        )
        .unwrap();
    }
    let ctx = |profile: &str| {
        e.context(&strata::ContextRequest::new(profile).query("cargo fmt release branch"))
            .unwrap()
    };
    let before: Vec<(String, String)> = ["ask", "tight"]
        .iter()
        .flat_map(|p| ctx(p).items.into_iter().map(|i| (p.to_string(), i.id)))
        .collect();
    e.learn().unwrap();
    let (learned, l) = learned(&e, "preference").remove(0);
    assert_eq!(l.evidence, vec![turn.id.clone()]);
    let pkg = ctx("ask");
    let ids: Vec<&str> = pkg.items.iter().map(|i| i.id.as_str()).collect();
    let at = |id: &str| ids.iter().position(|i| *i == id).unwrap();
    let score = |id: &str| pkg.items.iter().find(|i| i.id == id).unwrap().score;
    // The learned statement scores as high (the best match of all the
    // candidates: shorter, every word a match)…
    assert!(score(&learned.id) >= score(&turn.id), "{:?}", pkg.items);
    // …and still comes after what it was learned from, and after the rest.
    assert!(at(&turn.id) < at(&learned.id), "{ids:?}");
    assert!(at(&other.id) < at(&learned.id), "{ids:?}");
    assert_eq!(ids.last(), Some(&learned.id.as_str()));
    // What was said is what it was before learning, in both budgets; the
    // tight one has no room left for the learned memory.
    let after: Vec<(String, String)> = ["ask", "tight"]
        .iter()
        .flat_map(|p| ctx(p).items.into_iter().map(|i| (p.to_string(), i.id)))
        .filter(|(_, id)| *id != learned.id)
        .collect();
    assert_eq!(after, before);
    assert!(!ctx("tight").items.iter().any(|i| i.id == learned.id));
    // Without its evidence among the candidates it still comes after what
    // was said.
    let pkg = ctx("nochat");
    let ids: Vec<&str> = pkg.items.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids.last(), Some(&learned.id.as_str()), "{:?}", pkg.items);
    assert!(!ids.contains(&turn.id.as_str()));
}

fn note(e: &Engine, scope: &str, text: &str, importance: f64, tags: &[&str]) -> strata::Memory {
    let mut n = NewMemory::new(Scope::parse(scope).unwrap(), text)
        .kind(Kind::Finding)
        .importance(importance);
    for t in tags {
        n = n.tag(*t);
    }
    e.remember(n).unwrap()
}

fn near_duplicates_merge_into_the_earliest_and_a_restored_one_stays_apart(make: Make) {
    let mut e = make(&|_| {});
    let t = clock(&mut e);
    let a = note(
        &e,
        "project/acme",
        "The deploy script needs the VPN up.",
        0.4,
        &[],
    );
    later(&t, 1);
    let b = note(
        &e,
        "project/acme",
        "the deploy script needs the VPN up",
        0.9,
        &["ops"],
    );
    let c = note(
        &e,
        "project/beta",
        "The deploy script needs the VPN up!",
        0.5,
        &[],
    );
    let d = note(
        &e,
        "project/acme",
        "The deploy script needs the office VPN up.",
        0.5,
        &[],
    );
    let pinned = e
        .remember(
            NewMemory::new(acme(), "The deploy script needs the VPN up.")
                .kind(Kind::Finding)
                .pinned(true),
        )
        .unwrap();
    let turn = said(&e, "s1", "The deploy script needs the VPN up.");
    let r = e.upkeep().unwrap().learned.unwrap();
    assert_eq!(r.consolidated, 1, "{r:?}");
    let kept = e.get(&a.id).unwrap().unwrap();
    assert_eq!(kept.importance, 0.9, "the highest importance");
    assert_eq!(kept.tags, ["ops"]);
    assert_eq!(
        kept.payload.as_ref().unwrap()["consolidated"]["from"],
        serde_json::json!([b.id])
    );
    assert!(e.get(&b.id).unwrap().is_none());
    let gone = e
        .get_archived(&b.id)
        .unwrap()
        .expect("archived, not deleted");
    assert_eq!(gone.reason, strata::CONSOLIDATED);
    assert_eq!(gone.memory.content, b.content);
    for other in [&c, &d, &pinned, &turn] {
        assert!(e.get(&other.id).unwrap().is_some(), "{}", other.content);
    }
    // A person who restores it keeps it apart.
    assert_eq!(e.restore(std::slice::from_ref(&b.id)).unwrap(), 1);
    later(&t, 1);
    let again = note(
        &e,
        "project/acme",
        "The deploy script needs the VPN up",
        0.2,
        &[],
    );
    let r = e.upkeep().unwrap().learned.unwrap();
    assert_eq!(r.consolidated, 1, "{r:?}");
    assert!(e.get(&b.id).unwrap().is_some(), "restored stays");
    assert!(
        e.get(&again.id).unwrap().is_none(),
        "a new restatement merges"
    );
    let kept = e.get(&a.id).unwrap().unwrap();
    assert_eq!(
        kept.payload.as_ref().unwrap()["consolidated"]["from"],
        serde_json::json!([b.id, again.id])
    );
}

fn consolidation_can_be_turned_off(make: Make) {
    let e = make(&|c| c.learning.consolidate = false);
    let a = note(&e, "project/acme", "Backups run nightly at two.", 0.5, &[]);
    let b = note(&e, "project/acme", "backups run nightly at two", 0.5, &[]);
    assert_eq!(e.upkeep().unwrap().learned.unwrap().consolidated, 0);
    assert!(e.get(&a.id).unwrap().is_some() && e.get(&b.id).unwrap().is_some());
    let mut c = Config::default();
    let err = c
        .apply_toml("[learning]\nconsolidate_similarity = 0.2\n", None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("learning.consolidate_similarity"), "{err}");
}

fn a_topic_said_to_be_unclear_and_asked_again_is_learned_as_confusion(make: Make) {
    let mut e = make(&|_| {});
    let t = clock(&mut e);
    let q = said(
        &e,
        "s1",
        "How does the token refresh flow in the gateway work?",
    );
    let lost = said(&e, "s1", "Sorry, I still don't get it.");
    let timeout = "What does the search service return on a timeout?";
    said(&e, "s1", timeout);
    // Said with nothing asked before it in its session: about nothing known.
    said(&e, "s2", "I don't understand.");
    said(&e, "s2", timeout);
    let r = e.learn().unwrap();
    let v = learned(&e, "confusion");
    assert_eq!(
        r.learned,
        1,
        "{r:?} {:?}",
        e.learned(&View::subtree(acme())).unwrap()
    );
    assert_eq!(
        v.len(),
        1,
        "a question asked twice without a word of confusion is not one"
    );
    assert_eq!(v[0].1.evidence, [q.id.clone(), lost.id.clone()]);
    assert_eq!(v[0].0.kind, Kind::Pattern);
    assert!(
        v[0].0.content.contains("token refresh flow"),
        "{}",
        v[0].0.content
    );
    let first = v[0].1.confidence;
    // Asked again in another session: more evidence, more confidence.
    later(&t, 2);
    let again = said(
        &e,
        "s3",
        "Can you walk me through the token refresh flow in the gateway?",
    );
    e.learn().unwrap();
    let v = learned(&e, "confusion");
    assert_eq!(v[0].1.evidence.last(), Some(&again.id));
    assert!(v[0].1.confidence > first, "{} > {first}", v[0].1.confidence);
    // Forgetting evidence below two pieces removes the area.
    for id in [&lost.id, &again.id] {
        e.forget(&Forget::Id(id.clone()), ForgetOptions::default())
            .unwrap();
    }
    later(&t, 1);
    let r = e.learn().unwrap();
    assert_eq!(r.removed, 1, "{r:?}");
    assert!(learned(&e, "confusion").is_empty());
}

fn a_fact_that_changes_without_a_key_is_answered_as_of(make: Make) {
    let mut e = make(&|_| {});
    let t = clock(&mut e);
    let paris = said(&e, "s1", "By the way, Ana lives in Paris.");
    let day_paris = e.get(&paris.id).unwrap().unwrap().created_at;
    later(&t, 10);
    said(&e, "s2", "Ana might move to Lisbon one day.");
    said(&e, "s2", "Does Ana live in Madrid?");
    later(&t, 10);
    let berlin = said(&e, "s3", "Ana moved to Berlin last week");
    let day_berlin = e.get(&berlin.id).unwrap().unwrap().created_at;
    // One run sees both statements: two versions, in order.
    e.learn().unwrap();
    let v = learned(&e, "fact");
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].0.content, "Ana lives in Berlin");
    assert_eq!(v[0].1.evidence, std::slice::from_ref(&berlin.id));
    let ask = |at: Timestamp| {
        let mut r = strata::Recall::new("where does Ana live", View::subtree(acme()));
        r.as_of = Some(at);
        r.min_relevance = Some(0.0);
        r.filter =
            strata::Filter::parse(&serde_json::json!({"payload.fact.subject": "ana"})).unwrap();
        e.recall(&r).unwrap()
    };
    let before = ask(day_berlin - SignedDuration::from_hours(24));
    assert_eq!(before[0].memory.content, "Ana lives in Paris");
    assert_eq!(before[0].valid_to, Some(day_berlin));
    let after = ask(day_berlin + SignedDuration::from_hours(1));
    assert_eq!(after[0].memory.content, "Ana lives in Berlin");
    assert!(
        ask(day_paris - SignedDuration::from_hours(1)).is_empty(),
        "not yet known"
    );
    // Said again: more evidence, the same value.
    later(&t, 1);
    let again = said(&e, "s4", "Ana is based in Berlin now.");
    e.learn().unwrap();
    let v = learned(&e, "fact");
    assert_eq!(v[0].1.evidence, [berlin.id.clone(), again.id.clone()]);
    assert_eq!(v[0].0.content, "Ana lives in Berlin");
    let history: Vec<String> = e
        .history(&v[0].0.id)
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(history, ["Ana lives in Paris", "Ana lives in Berlin"]);
}

/// A fact said as a change, in no phrase the fact detector knows: what
/// ended was said in an earlier turn, the new value beside it. The old value
/// becomes the key's first version (true until the change), the new one the
/// current; an aside about someone's plans changes nothing.
fn a_value_said_to_have_ended_is_replaced_by_the_one_beside_it(make: Make) {
    let mut e = make(&|_| {});
    let t = clock(&mut e);
    let first = said(
        &e,
        "s1",
        "my current account is with Barclays, is the saver covered separately?",
    );
    later(&t, 20);
    said(
        &e,
        "s2",
        "My sister might ditch Barclays for Monzo someday.",
    );
    e.learn().unwrap();
    let v = learned(&e, "fact");
    assert!(v.is_empty(), "a plan is no change: {v:?}");
    later(&t, 20);
    let change = said(
        &e,
        "s3",
        "Finally ditched Barclays, I moved my current account to Starling. Any interest?",
    );
    let day = e.get(&change.id).unwrap().unwrap().created_at;
    e.learn().unwrap();
    let v = learned(&e, "fact");
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].0.content, "The user banks with Starling");
    assert_eq!(v[0].1.evidence, std::slice::from_ref(&change.id));
    let history: Vec<String> = e
        .history(&v[0].0.id)
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(
        history,
        ["The user banks with Barclays"],
        "earlier versions"
    );
    let mut r = strata::Recall::new("which bank", View::subtree(acme()));
    r.as_of = Some(day - SignedDuration::from_hours(24));
    r.min_relevance = Some(0.0);
    r.filter = strata::Filter::parse(&serde_json::json!({"source": "learned"})).unwrap();
    let before = e.recall(&r).unwrap();
    assert_eq!(before[0].memory.content, "The user banks with Barclays");
    assert_eq!(
        before[0].memory.created_at,
        e.get(&first.id).unwrap().unwrap().created_at
    );
}

fn a_rejected_pattern_stays_rejected_once_it_is_cold(make: Make) {
    let dir = tempfile::tempdir().unwrap();
    let cold = dir.path().to_path_buf();
    let mut e = make(&move |c| {
        c.cold = strata::ColdConfig {
            enabled: true,
            dir: Some(cold.clone()),
            demote_after_days: 30,
            ..Default::default()
        };
    });
    let t = clock(&mut e);
    failed(&e, "s1", "timeout waiting for the payments sandbox");
    failed(&e, "s2", "Timeout waiting for the payments sandbox");
    e.upkeep().unwrap();
    let id = learned(&e, "failure")[0].0.id.clone();
    e.reject_learned(&id).unwrap();
    // The next upkeep moves the rejected memory out of the store.
    later(&t, 1);
    let r = e.upkeep().unwrap();
    assert!(r.moved_to_cold >= 1, "{r:?}");
    assert_eq!(e.get_archived(&id).unwrap().unwrap().reason, "rejected");
    later(&t, 1);
    failed(&e, "s3", "out of memory in the image resizer");
    let r = e.upkeep().unwrap().learned.unwrap();
    assert_eq!(r.rejected_skipped, 1, "{r:?}");
    assert!(learned(&e, "failure").is_empty());
}

fn evidence_demoted_to_the_cold_tier_still_counts(make: Make) {
    let dir = tempfile::tempdir().unwrap();
    let cold = dir.path().to_path_buf();
    let mut e = make(&move |c| {
        c.cold = strata::ColdConfig {
            enabled: true,
            dir: Some(cold.clone()),
            demote_after_days: 30,
            ..Default::default()
        };
        c.learning.half_life_days = 10_000.0;
    });
    let t = clock(&mut e);
    let a = said(&e, "s1", "Always run cargo fmt before committing.");
    e.upkeep().unwrap();
    let (m, l) = learned(&e, "preference").remove(0);
    assert_eq!(l.evidence, std::slice::from_ref(&a.id));
    // A month and more without a touch: the turn goes cold, the learned
    // memory (written later, read since) stays.
    later(&t, 31);
    let mut read = strata::Recall::new("cargo fmt", View::subtree(acme()));
    read.filter = strata::Filter::parse(&serde_json::json!({"source": "learned"})).unwrap();
    let hits = e.recall(&read).unwrap();
    assert_eq!(hits[0].memory.id, m.id, "the recall touches it");
    let r = e.upkeep().unwrap();
    assert!(r.demoted >= 1 && r.moved_to_cold >= 1, "{r:?}");
    assert!(e.get(&a.id).unwrap().is_none(), "the turn is cold");
    later(&t, 1);
    let r = e.upkeep().unwrap();
    assert_eq!(r.learned.unwrap().removed, 0, "demotion is no forgetting");
    let v = learned(&e, "preference");
    assert_eq!(v.len(), 1, "the learned memory, read, stays warm");
    assert_eq!(v[0].1.evidence, std::slice::from_ref(&a.id));
}

/// A chat endpoint on 127.0.0.1 that answers each request with the next
/// reply (status, body) sent to it, until the sender is dropped; returns
/// its URL and, at the end, the request bodies it read.
#[cfg(feature = "llm")]
fn chat_endpoint(
    replies: std::sync::mpsc::Receiver<(u16, String)>,
) -> (String, std::thread::JoinHandle<Vec<String>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        let mut seen = Vec::new();
        while let Ok((status, body)) = replies.recv() {
            let (mut s, _) = listener.accept().unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
                if line == "\r\n" || line.is_empty() {
                    break;
                }
            }
            let mut buf = vec![0; len];
            r.read_exact(&mut buf).unwrap();
            seen.push(String::from_utf8(buf).unwrap());
            write!(
                s,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
        }
        seen
    });
    (url, h)
}

#[cfg(feature = "llm")]
fn reply(content: &str, prompt: u64, completion: u64) -> (u16, String) {
    let v = serde_json::json!({"choices": [{"message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion}});
    (200, v.to_string())
}

#[cfg(feature = "llm")]
fn llm_engine(url: &str) -> TestEngine {
    TestEngine::sqlite(|c| {
        c.summarizer = Some(strata::SummarizerConfig {
            url: url.to_string(),
            model: "tiny".into(),
            api_key_env: None,
            timeout_ms: 5_000,
            max_input_tokens: 6_000,
        });
        c.learning.llm = true;
        c.learning.llm_batch = 2;
        c.learning.llm_cost_per_1k_input = 0.5;
        c.learning.llm_cost_per_1k_output = 1.5;
    })
}

#[cfg(feature = "llm")]
#[test]
fn the_llm_detector_adds_what_it_cites_and_ignores_what_it_makes_up() {
    let (tx, rx) = std::sync::mpsc::channel();
    let (url, server) = chat_endpoint(rx);
    let e = llm_engine(&url);
    let a = said(&e, "s1", "Tabs please, in every Go file we touch.");
    said(&e, "s1", "The build is green now.");
    let c = said(&e, "s2", "Always run cargo fmt before committing.");
    // First batch (a and the green build): one finding citing a and an
    // id never sent, one citing only a made-up id, one of a kind not asked.
    let first = serde_json::json!({"findings": [
        {"kind": "preference", "subject": "tabs in Go files", "content": "The user wants tabs in Go files.",
         "evidence": [a.id, "0193f2a1-0000-7000-8000-000000000000"]},
        {"kind": "preference", "subject": "spaces", "content": "Made up.", "evidence": ["nope"]},
        {"kind": "mood", "subject": "happy", "content": "The user is happy.", "evidence": [a.id]}
    ]});
    tx.send(reply(&format!("```json\n{first}\n```"), 100, 40))
        .unwrap();
    // Second batch: not the JSON asked for.
    tx.send(reply("Sure! The user likes formatting.", 50, 10))
        .unwrap();
    drop(tx);
    let r = e.learn().unwrap();
    let run = r.llm.clone().expect("the LLM part ran");
    assert_eq!(
        (run.requests, run.failed, run.sent, run.unsent),
        (2, 0, 3, 0),
        "{run:?}"
    );
    assert_eq!((run.findings, run.ignored), (1, 3), "{run:?}");
    assert_eq!((run.prompt_tokens, run.completion_tokens), (150, 50));
    assert!(
        (run.cost - (0.150 * 0.5 + 0.050 * 1.5)).abs() < 1e-9,
        "{run:?}"
    );
    assert!(
        run.notes.iter().any(|n| n.contains("not the JSON")),
        "{run:?}"
    );
    let by_llm = learned(&e, "llm");
    assert_eq!(by_llm.len(), 1);
    assert_eq!(by_llm[0].1.evidence, std::slice::from_ref(&a.id));
    assert_eq!(by_llm[0].0.kind, Kind::Preference);
    assert_eq!(by_llm[0].0.content, "The user wants tabs in Go files.");
    // The offline detectors ran as ever.
    let offline = learned(&e, "preference");
    assert_eq!(offline.len(), 1);
    assert_eq!(offline[0].1.evidence, std::slice::from_ref(&c.id));
    let seen = server.join().unwrap();
    assert!(
        seen[0].contains(&a.id) && seen[0].contains("\"model\":\"tiny\""),
        "{}",
        seen[0]
    );
    assert!(seen[1].contains(&c.id), "{}", seen[1]);
}

#[cfg(feature = "llm")]
#[test]
fn a_failed_or_unset_endpoint_leaves_the_offline_detectors_standing() {
    // Nothing listens on the endpoint.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let e = llm_engine(&format!("http://127.0.0.1:{port}/v1"));
    let c = said(&e, "s1", "Always run cargo fmt before committing.");
    said(&e, "s1", "The build is green now.");
    said(&e, "s1", "And the docs too.");
    let r = e.learn().unwrap();
    let run = r.llm.clone().unwrap();
    assert_eq!(
        (run.requests, run.failed, run.sent, run.unsent),
        (1, 1, 2, 1),
        "{run:?}"
    );
    assert!(run.notes[0].contains("request 1 failed"), "{run:?}");
    assert_eq!(
        learned(&e, "preference")[0].1.evidence,
        std::slice::from_ref(&c.id)
    );
    // No endpoint configured: nothing is sent, and the run says why.
    let e = TestEngine::sqlite(|c| {
        c.learning.llm = true;
    });
    said(&e, "s1", "Always run cargo fmt before committing.");
    let run = e.learn().unwrap().llm.unwrap();
    assert_eq!((run.requests, run.unsent), (0, 1));
    assert!(run.notes[0].contains("no [summarizer]"), "{run:?}");
    let mut cfg = Config::default();
    let err = cfg
        .apply_toml("[learning]\nllm_batch = 0\n", None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("learning.llm_batch"), "{err}");
}

fn a_recurring_topic_is_learned_once_and_a_rejected_one_stays_rejected(make: Make) {
    let mut e = make(&|_| {});
    let t = clock(&mut e);
    let mut mentions = Vec::new();
    for (s, other, text) in [
        (
            "s1",
            "Let's look at the billing module next.",
            "Can we revisit the gRPC streaming deadlines?",
        ),
        (
            "s2",
            "Thanks, that fixed the export page.",
            "The deadline on gRPC streams bit us again in staging.",
        ),
        (
            "s3",
            "The search tests pass on my machine now.",
            "I read a post about gRPC stream deadlines.",
        ),
    ] {
        said(&e, s, other);
        mentions.push(said(&e, s, text).id);
        later(&t, 7);
    }
    // Said twice only: not yet a topic.
    said(&e, "s1", "The Postgres vacuum schedule needs a look.");
    said(&e, "s3", "Postgres vacuum ran at noon.");
    e.learn().unwrap();
    let v = learned(&e, "topic");
    assert_eq!(v.len(), 1, "{v:?}");
    let (m, l) = &v[0];
    assert_eq!(l.evidence, mentions);
    assert_eq!(l.independent, 3);
    assert_eq!(m.kind, Kind::Pattern);
    assert!(
        m.content.starts_with("Recurring topic: ") && m.content.contains("grpc"),
        "{}",
        m.content
    );
    // Learned again, it updates the same memory.
    later(&t, 1);
    said(&e, "s4", "I pushed a draft of the upload refactor.");
    let r = e.learn().unwrap();
    assert_eq!(r.learned, 0, "{r:?}");
    // Rejected: the same evidence teaches it no more.
    e.reject_learned(&m.id).unwrap();
    later(&t, 1);
    said(&e, "s5", "What does the auth service return on a timeout?");
    let r = e.learn().unwrap();
    assert_eq!(r.rejected_skipped, 1, "{r:?}");
    assert!(learned(&e, "topic").is_empty());
    // A new mention is new evidence, under the same key.
    later(&t, 7);
    let again = said(&e, "s6", "Any news on the gRPC stream deadlines?");
    e.learn().unwrap();
    let v = learned(&e, "topic");
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].0.key, m.key);
    assert!(v[0].1.evidence.contains(&again.id));
    // Off, it learns nothing.
    let off = make(&|c| c.learning.topics = false);
    for (s, text) in [
        ("s1", "Can we revisit the gRPC streaming deadlines?"),
        ("s2", "The deadline on gRPC streams bit us again."),
        ("s3", "I read a post about gRPC stream deadlines."),
    ] {
        off.remember(
            NewMemory::new(acme(), text)
                .kind(Kind::Conversation)
                .role(Role::User)
                .session(s)
                .created_at(
                    Timestamp::now()
                        - SignedDuration::from_hours(24 * 30 * s[1..].parse::<i64>().unwrap()),
                ),
        )
        .unwrap();
    }
    off.learn().unwrap();
    assert!(learned(&off, "topic").is_empty());
    let mut c = Config::default();
    let err = c
        .apply_toml("[learning]\ntopic_min_sessions = 1\n", None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("learning.topic_min_sessions"), "{err}");
    let err = c
        .apply_toml("[learning]\ntopic_min_shares = 0.5\n", None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("topic_min_shares"), "{err}");
}

fn a_habit_not_seen_for_a_year_fades_to_the_archive_and_returns_when_said_again(make: Make) {
    let (e, t, british, gone) = two_preferences_one_confirmed(make);
    // 0.6 × 0.5^(500 / 90) < 0.02: the unconfirmed one fades, the confirmed
    // one stays.
    later(&t, 500);
    let r = e.learn().unwrap();
    assert_eq!(r.faded, 1, "{r:?}");
    let left: Vec<String> = learned(&e, "preference")
        .into_iter()
        .map(|(m, _)| m.id)
        .collect();
    assert_eq!(left, vec![british.clone()]);
    // Moved, not deleted: in the archive with its reason.
    let a = e.get_archived(&gone).unwrap().expect("in the archive");
    assert_eq!(a.reason, strata::FADED);
    // Another run writes nothing back from the same old evidence.
    let r = e.learn().unwrap();
    assert_eq!(r.learned, 0, "{r:?}");
    assert_eq!(learned(&e, "preference").len(), 1);
    // Said again: learned again, at the confidence of fresh evidence.
    said(&e, "s2", "Always tag releases with a v prefix.");
    let r = e.learn().unwrap();
    assert_eq!(r.learned, 1, "{r:?}");
    let v = learned(&e, "preference");
    assert_eq!(v.len(), 2);
    assert!(v.iter().all(|(_, l)| l.confidence >= 0.5), "{v:?}");
    // 0 keeps every habit however old.
    let mut e = make(&|c| c.learning.min_confidence = 0.0);
    let t = clock(&mut e);
    said(&e, "s1", "Always tag releases with a v prefix.");
    later(&t, 4000);
    e.learn().unwrap();
    assert_eq!(learned(&e, "preference").len(), 1);
}

/// Facts the LLM reads go under the fact detector's key for that person
/// and attribute: the newer value supersedes the older, each at its
/// statement's time; an attribute not asked for is ignored, with a note.
#[cfg(feature = "llm")]
#[test]
fn the_llm_detector_learns_facts_in_any_wording() {
    let (tx, rx) = std::sync::mpsc::channel();
    let (url, server) = chat_endpoint(rx);
    let mut e = llm_engine(&url);
    let t = clock(&mut e);
    let old = said(&e, "s1", "Our drummer Sami says I rush the chorus.");
    later(&t, 40);
    let new = said(
        &e,
        "s2",
        "Band news: Sami moved from drums over to bass, we've got a new drummer.",
    );
    let found = serde_json::json!({"findings": [
        {"kind": "fact", "person": "Sami", "attribute": "role", "value": "drummer", "evidence": [old.id]},
        {"kind": "fact", "person": "Sami", "attribute": "role", "value": "bassist", "evidence": [new.id]},
        {"kind": "fact", "person": "Sami", "attribute": "shoe size", "value": "44", "evidence": [new.id]}
    ]});
    tx.send(reply(&found.to_string(), 80, 30)).unwrap();
    drop(tx);
    let r = e.learn().unwrap();
    let run = r.llm.clone().unwrap();
    assert_eq!((run.findings, run.ignored), (2, 1), "{run:?}");
    assert!(
        run.notes
            .iter()
            .any(|n| n.contains("unknown attribute `shoe size`")),
        "{run:?}"
    );
    let facts = learned(&e, "fact");
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert_eq!(facts[0].0.content, "Sami works as bassist");
    assert_eq!(facts[0].0.key.as_deref(), Some("learned/fact/sami-role"));
    // As of before the change, the old value.
    let mut q = strata::Recall::new("Sami", View::scope(acme()));
    q.as_of = Some(new.created_at - SignedDuration::from_hours(24));
    q.min_relevance = Some(0.0);
    q.filter =
        strata::Filter::parse(&serde_json::json!({"key": "learned/fact/sami-role"})).unwrap();
    let then = e.recall(&q).unwrap();
    assert_eq!(then[0].memory.content, "Sami works as drummer");
    server.join().unwrap();
}
