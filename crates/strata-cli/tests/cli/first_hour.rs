//! A newcomer's first hour, from the README alone: remember with and
//! without a kind, recall with a relevance floor, a context from the
//! README's own profile, sync of a `.memory/` tree, export → import into an
//! empty store → the same store, and MCP remember/recall/context in two
//! processes with the answers' sizes checked (issue 23).

use crate::util::Env;

/// The README's `[profiles.coder]` TOML block, as a user would copy it.
fn readme_profile() -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    readme
        .split("```toml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .find(|b| b.contains("[profiles.coder]"))
        .expect("README has the coder profile")
        .to_string()
}

/// The installed model for the tests that want one (CI sets it).
fn model_dir() -> Option<std::path::PathBuf> {
    std::env::var_os("STRATA_TEST_MODEL_DIR")
        .map(std::path::PathBuf::from)
        .filter(|d| d.join("model.safetensors").is_file())
}

fn cmd(e: &Env, args: &[&str]) -> std::process::Output {
    let mut c = e.cmd();
    if let Some(d) = model_dir() {
        c.env("STRATA_MODEL_DIR", d);
    }
    c.args(args).output().unwrap()
}

fn ok(e: &Env, args: &[&str]) -> String {
    let o = cmd(e, args);
    assert!(
        o.status.success(),
        "strata {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn the_first_hour() {
    let e = Env::new();

    // An empty STRATA_DB is named as such, not as `--db`.
    let o = e
        .cmd()
        .env("STRATA_DB", "")
        .args(["stats"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("STRATA_DB is set but empty"), "{err}");

    // Remember, with and without a kind.
    let decision = ok(
        &e,
        &[
            "remember",
            "We chose PostgreSQL for billing: invoices need multi-row transactions",
            "--scope",
            "project/acme",
            "--kind",
            "decision",
            "--json",
        ],
    );
    let decision: serde_json::Value = serde_json::from_str(&decision).unwrap();
    let plain = ok(
        &e,
        &[
            "remember",
            "The billing service reads invoices from the ledger every night",
            "--scope",
            "project/acme",
            "--json",
        ],
    );
    let plain: serde_json::Value = serde_json::from_str(&plain).unwrap();
    assert_eq!(plain["kind"], "note");
    assert_eq!(plain["importance"], 0.5);
    ok(
        &e,
        &[
            "remember",
            "Lunch order: pizza on Fridays",
            "--scope",
            "project/acme",
        ],
    );

    // Recall with a floor: what is relevant, why it passed, what the kind
    // weight did; and "nothing relevant" for a question nothing answers.
    let r = ok(
        &e,
        &[
            "recall",
            "which database for billing invoices?",
            "--view",
            "project/acme",
            "--explain",
        ],
    );
    assert!(r.contains("PostgreSQL") && r.contains("ledger"), "{r}");
    assert!(
        !r.contains("Lunch"),
        "the floor keeps unrelated memories out: {r}"
    );
    assert!(r.contains("passed: "), "{r}");
    assert!(r.contains("× kind note 1.00 ×"), "{r}");
    let none = ok(
        &e,
        &[
            "recall",
            "how tall is mount everest",
            "--view",
            "project/acme",
        ],
    );
    assert!(
        none.starts_with("nothing relevant: no memory reached min_relevance 0.3"),
        "{none}"
    );
    let all = ok(
        &e,
        &[
            "recall",
            "billing",
            "--view",
            "project/acme",
            "--min-relevance",
            "0",
            "--json",
        ],
    );
    let all: serde_json::Value = serde_json::from_str(&all).unwrap();
    assert!(!all.as_array().unwrap().is_empty());

    // Sync a project folder: CLAUDE.md and a .memory/ tree.
    let proj = e.path("acme");
    std::fs::create_dir_all(proj.join(".memory/project/decisions")).unwrap();
    std::fs::write(
        proj.join("CLAUDE.md"),
        "# Acme rules\n\n- run `cargo fmt` before committing\n- never log invoice numbers\n",
    )
    .unwrap();
    std::fs::write(
        proj.join(".memory/project/decisions/queue.md"),
        "Billing retries go through SQS with a dead-letter queue\n",
    )
    .unwrap();
    let synced = ok(&e, &["sync", "acme"]);
    assert!(synced.contains("2 added"), "{synced}");
    if model_dir().is_some() {
        // Synced files have vectors at once, as one `remember` does.
        assert!(synced.contains("embedded 2 memories"), "{synced}");
        let st: serde_json::Value = serde_json::from_str(&ok(&e, &["stats", "--json"])).unwrap();
        assert_eq!(st["vectors"]["pending"], 0, "{st}");
    }

    // The README's profile, copied as is: the global preference saved the
    // way the README's CLI saves it reaches the context.
    std::fs::write(e.path("strata.toml"), readme_profile()).unwrap();
    ok(
        &e,
        &[
            "remember",
            "Answer in short bullet points",
            "--scope",
            "global",
            "--kind",
            "preference",
            "--yes",
        ],
    );
    ok(
        &e,
        &[
            "remember",
            "Fix the flaky login test",
            "--scope",
            "task/t-42",
        ],
    );
    let ctx = ok(
        &e,
        &[
            "context",
            "--profile",
            "coder",
            "--task",
            "t-42",
            "--project",
            "acme",
            "--query",
            "fix the flaky login test",
        ],
    );
    assert!(ctx.contains("Answer in short bullet points"), "{ctx}");
    assert!(ctx.contains("Fix the flaky login test"), "{ctx}");
    // The multi-line CLAUDE.md stays one list item: continuation indented.
    assert!(
        ctx.contains("] # Acme rules\n\n  - run `cargo fmt` before committing\n  - never log"),
        "{ctx}"
    );

    // Task completion says which rule applied and how to promote.
    let done = ok(&e, &["task", "complete", "t-42", "--project", "acme"]);
    assert!(
        done.contains("rule: no --promote ID and no --min-importance"),
        "{done}"
    );
    assert!(done.contains("strata restore ID"), "{done}");

    // Update at a prompt without --expected-version: read, then write
    // against the version read.
    let id = decision["id"].as_str().unwrap();
    let up = ok(&e, &["update", id, "--importance", "1.0"]);
    assert!(up.contains("from v1 to v2"), "{up}");
    ok(
        &e,
        &[
            "remember",
            "api key sk-live-123",
            "--scope",
            "project/acme",
            "--sensitive",
        ],
    );

    // Export → import into an empty store → the same store.
    let backup = e.path("backup.jsonl");
    let o = cmd(&e, &["export", "-o", backup.to_str().unwrap()]);
    assert!(o.status.success());
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        said.contains("1 archived") && said.contains("1 earlier version"),
        "{said}"
    );
    assert!(!said.contains("left out"), "{said}");
    let fresh = Env::new();
    ok(&fresh, &["import", backup.to_str().unwrap()]);
    assert_eq!(ok(&fresh, &["export"]), ok(&e, &["export"]));
    let stats = |env: &Env| {
        let mut v: serde_json::Value =
            serde_json::from_str(&ok(env, &["stats", "--json"])).unwrap();
        for k in ["db", "file_bytes", "path", "vectors"] {
            v.as_object_mut().unwrap().remove(k);
        }
        // Bytes on disk differ between two files holding the same memories.
        if let Some(t) = v.get_mut("storage_tiers").and_then(|t| t.as_object_mut()) {
            for tier in t.values_mut() {
                tier.as_object_mut().unwrap().remove("bytes");
            }
        }
        v
    };
    let (mut a, mut b) = (stats(&e), stats(&fresh));
    for v in [&mut a, &mut b] {
        if let Some(s) = v.get_mut("store").and_then(|s| s.as_object_mut()) {
            s.remove("file_bytes");
        }
    }
    assert_eq!(a, b);
}

/// MCP in two processes, as the README shows it: remember in one session,
/// recall and context in the next, each answer at most 1.5× the content
/// it carries.
#[cfg(feature = "server")]
#[test]
fn the_first_hour_over_mcp() {
    use crate::server::Stdio_;
    use serde_json::json;

    let e = Env::new();
    let init = |m: &mut Stdio_| {
        m.request(
            "initialize",
            json!({"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "first-hour", "version": "1"}}),
        );
        m.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    };
    let memories = [
        (
            "decision",
            "Use SQS with a dead-letter queue for billing retries; a message that fails five times is parked for a human to look at",
        ),
        (
            "convention",
            "Billing amounts are integers in cents everywhere, from the database to the API; never floats",
        ),
        (
            "preference",
            "The billing team wants changes announced in #billing-dev before they are deployed",
        ),
    ];
    let mut m = Stdio_::start(&e, &["--project", "acme"]);
    init(&mut m);
    for (kind, content) in memories {
        let (err, t) = m.text("remember", json!({"content": content, "kind": kind}));
        assert!(!err && t.starts_with("remembered "), "{t}");
    }
    drop(m.stdin);
    assert!(m.child.wait().unwrap().success());

    let mut m = Stdio_::start(&e, &["--project", "acme"]);
    init(&mut m);
    let q = "how do we handle billing retries and amounts?";
    let (err, r) = m.text("recall", json!({"query": q, "touch": false}));
    assert!(!err && r.contains("dead-letter"), "{r}");
    let (_, full) = m.tool(
        "recall",
        json!({"query": q, "touch": false, "verbose": true}),
    );
    let carried: usize = full["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["content"].as_str().unwrap().len())
        .sum();
    // A short id grows to the whole UUID (36 characters) when memories
    // were written in the same millisecond, as these may be.
    let hits = full["results"].as_array().unwrap().len() as f64;
    assert!(
        r.len() as f64 <= 1.5 * carried as f64 + 24.0 * hits,
        "recall: {} chars for {carried}:\n{r}",
        r.len()
    );
    let (err, c) = m.text("context", json!({"query": q}));
    assert!(!err && c.contains("dead-letter"), "{c}");
    let all: usize = memories.iter().map(|(_, t)| t.len()).sum();
    assert!(
        c.len() as f64 <= 1.5 * all as f64,
        "context: {} chars for {all}:\n{c}",
        c.len()
    );
    drop(m.stdin);
    assert!(m.child.wait().unwrap().success());
}
