//! `strata learned …` and learning in `strata upkeep`, through the binary.

use crate::util::Env;

fn said(e: &Env, text: &str, session: &str) -> String {
    e.remember(
        text,
        "project/acme",
        &[
            "--kind",
            "conversation",
            "--role",
            "user",
            "--session",
            session,
        ],
    )
}

#[test]
fn upkeep_learns_and_a_person_confirms_or_rejects() {
    let e = Env::new();
    let a = said(&e, "Always run the linter before committing.", "s1");
    said(&e, "always run the linter before you commit", "s2");
    let f = ["--kind", "failure"];
    e.remember(
        "timeout after 30s waiting for the payments sandbox",
        "project/acme",
        &f,
    );
    e.remember(
        "Timeout after 45s waiting for the payments sandbox",
        "project/acme",
        &f,
    );
    let out = e.ok(&["upkeep"]);
    assert!(out.contains("learned: examined 4 · new 2"), "{out}");
    let list = e.json(&["learned", "list", "--view", "project/acme/**"]);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2, "{list:?}");
    let pref = list
        .iter()
        .find(|x| x["learned"]["detector"] == "preference")
        .unwrap();
    assert_eq!(pref["learned"]["confidence"], 0.84);
    assert_eq!(pref["memory"]["source"], "learned");
    let pref_id = pref["memory"]["id"].as_str().unwrap().to_string();
    let human = e.ok(&["learned", "list", "--view", "project/acme/**"]);
    assert_eq!(human.lines().count(), 2, "{human}");
    assert!(
        human.contains("preference") && human.contains("proposed"),
        "{human}"
    );
    let shown = e.json(&["learned", "show", &pref_id]);
    assert_eq!(shown["evidence"][0]["id"], a.as_str());
    let shown = e.ok(&["learned", "show", &pref_id]);
    assert!(shown.contains("evidence (2 of 2 still kept)"), "{shown}");
    let explained = e.ok(&["recall", "linter", "--view", "project/acme", "--explain"]);
    assert!(
        explained.contains(&format!(
            "learned by preference (confidence 0.84, 2 memories) from {a}"
        )),
        "{explained}"
    );
    e.ok(&["learned", "confirm", &pref_id]);
    let c = e.json(&["learned", "show", &pref_id]);
    assert_eq!(c["learned"]["status"], "confirmed");
    let fail = list
        .iter()
        .find(|x| x["learned"]["detector"] == "failure")
        .unwrap();
    let fail_id = fail["memory"]["id"].as_str().unwrap();
    let out = e.ok(&["learned", "reject", fail_id]);
    assert!(out.contains("rejected"), "{out}");
    let r = e.json(&["learned", "run"]);
    assert_eq!(r["learned"], 0, "{r}");
    let list = e.json(&["learned", "list", "--view", "project/acme/**"]);
    assert_eq!(list.as_array().unwrap().len(), 1);
}

#[test]
fn learned_commands_refuse_bad_input() {
    let e = Env::new();
    let id = e.remember(
        "We chose PostgreSQL.",
        "project/acme",
        &["--kind", "decision"],
    );
    let err = e.fails(&["learned", "confirm", &id], 1);
    assert!(err.contains("not a learned memory"), "{err}");
    let before = e.snapshot();
    let err = e.fails(&["learned", "reject", &id], 1);
    assert!(err.contains("not a learned memory"), "{err}");
    assert_eq!(e.snapshot(), before, "a refused reject changes nothing");
    let err = e.fails(&["learned", "list"], 2);
    assert!(err.contains("--view"), "{err}");
    let err = e.fails(&["learned", "show", "nope-nope-nope"], 1);
    assert!(err.contains("nope-nope-nope"), "{err}");
}

#[test]
fn recall_as_of_returns_what_was_true_then() {
    let e = Env::new();
    let v1 = e.json(&[
        "remember",
        "The staging database is on db-1",
        "--scope",
        "project/acme",
        "--key",
        "staging-db",
    ]);
    std::thread::sleep(std::time::Duration::from_millis(5));
    e.remember(
        "The staging database moved to db-2",
        "project/acme",
        &["--key", "staging-db"],
    );
    let at = v1["updated_at"].as_str().unwrap();
    let then = e.json(&[
        "recall",
        "staging database",
        "--view",
        "project/acme",
        "--as-of",
        at,
    ]);
    assert_eq!(
        then[0]["content"], "The staging database is on db-1",
        "{then}"
    );
    assert!(then[0]["valid_to"].is_string(), "{then}");
    let human = e.ok(&[
        "recall",
        "staging database",
        "--view",
        "project/acme",
        "--as-of",
        at,
    ]);
    assert!(human.contains("[true until "), "{human}");
    let now = e.json(&["recall", "staging database", "--view", "project/acme"]);
    assert_eq!(now[0]["content"], "The staging database moved to db-2");
    let err = e.fails(
        &[
            "recall",
            "x",
            "--view",
            "project/acme",
            "--as-of",
            "yesterday",
        ],
        1,
    );
    assert!(err.contains("as_of") && err.contains("yesterday"), "{err}");
}

#[test]
fn without_the_model_learning_says_it_reads_phrases() {
    let e = Env::new();
    said(&e, "I really prefer answers in bullet points.", "s1");
    let out = e.ok(&["learned", "run"]);
    assert!(
        out.contains("note: no local model") && out.contains("phrases"),
        "{out}"
    );
    let r = e.json(&["learned", "run"]);
    assert_eq!(r["by_meaning"], false, "{r}");
    let stats = e.ok(&["stats"]);
    assert!(stats.contains("learning: no local model"), "{stats}");
    let j = e.json(&["stats"]);
    assert_eq!(j["learning"]["by_meaning"], false, "{j}");
}

/// What the learning evaluations refuse, and that they change nothing of
/// the user's store.
#[test]
fn learning_evaluations_refuse_bad_input() {
    let e = Env::new();
    let fails = |args: &[&str]| {
        let o = e.run(args);
        assert!(!o.status.success(), "strata {args:?} succeeded");
        String::from_utf8(o.stderr).unwrap()
    };
    let err = fails(&["eval", "learning-heldout", "missing.json"]);
    assert!(err.contains("missing.json"), "{err}");
    std::fs::write(e.path("bad.json"), "{\"users\": 3}").unwrap();
    let err = fails(&["eval", "learning-heldout", "bad.json"]);
    assert!(err.contains("not a held-out learning file"), "{err}");
    std::fs::write(e.path("ok.json"), "{\"users\": []}").unwrap();
    let err = fails(&["eval", "learning-heldout", "ok.json", "--embedder", "magic"]);
    assert!(err.contains("magic"), "{err}");
    let out = e.ok(&["eval", "learning-heldout", "ok.json", "--embedder", "none"]);
    assert!(out.contains("0 users"), "{out}");
    std::fs::write(
        e.path("t.jsonl"),
        "{\"text\": \"hi\", \"label\": \"greeting\"}\n",
    )
    .unwrap();
    let err = fails(&["eval", "train-utterances", "t.jsonl"]);
    assert!(
        err.contains("t.jsonl:1") && err.contains("greeting"),
        "{err}"
    );
    std::fs::write(
        e.path("t.jsonl"),
        "{\"text\": \"hi\", \"label\": \"smalltalk\"}\n",
    )
    .unwrap();
    let err = fails(&["eval", "train-utterances", "t.jsonl"]);
    assert!(err.contains("model fetch"), "without the model: {err}");
    let err = fails(&["eval", "train-utterances", "t.jsonl", "--steps", "0"]);
    assert!(err.contains("--steps"), "{err}");
    assert!(
        !e.db().exists(),
        "an evaluation writes nothing to the store"
    );
}
