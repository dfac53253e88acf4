//! Every verb, through the binary, with human and JSON output.

use crate::util::{Env, write};

#[test]
fn init_creates_the_database_where_asked() {
    let e = Env::new();
    let out = e.ok(&["init"]);
    assert!(out.contains("strata database ready"), "{out}");
    assert!(e.db().exists());
    let j = e.json(&["init"]);
    assert_eq!(j["schema_version"], strata::SCHEMA_VERSION);
}

#[test]
fn default_database_lives_in_the_data_dir() {
    let e = Env::new();
    let o = e
        .cmd()
        .env_remove("STRATA_DB")
        .args(["init", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let db = j["db"].as_str().unwrap();
    assert!(db.ends_with("data/strata/strata.db"), "{db}");
}

#[test]
fn remember_recall_get_list() {
    let e = Env::new();
    let id = e.remember(
        "We chose PostgreSQL for billing: strong transactions",
        "project/acme",
        &["--kind", "decision", "--tag", "db", "--importance", "0.95"],
    );
    e.remember("Lunch is at noon", "project/acme", &[]);
    e.remember("Other project uses MySQL for billing", "project/other", &[]);
    let hits = e.json(&[
        "recall",
        "which database for billing?",
        "--view",
        "project/acme",
        "--explain",
    ]);
    let hits = hits.as_array().unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0]["id"], id.as_str());
    assert!(hits[0]["explain"]["bm25"].is_number());
    assert!(hits[0]["score"].is_number());
    let human = e.ok(&[
        "recall",
        "billing",
        "--view",
        "project/acme",
        "--view",
        "project/other",
    ]);
    assert_eq!(human.lines().count(), 2, "{human}");
    let got = e.json(&["get", &id]);
    assert_eq!(got["kind"], "decision");
    assert_eq!(got["tags"][0], "db");
    assert_eq!(got["access_count"], 2, "both recalls were recorded");
    let listed = e.json(&[
        "list",
        "--view",
        "project/acme",
        "--filter",
        r#"{"kind": "decision"}"#,
    ]);
    assert_eq!(listed.as_array().unwrap().len(), 1);
    let listed = e.json(&[
        "list",
        "--view",
        "project/**",
        "--order",
        "oldest",
        "--limit",
        "2",
    ]);
    assert_eq!(listed.as_array().unwrap().len(), 2);
    assert!(e.ok(&["get", &id]).contains("PostgreSQL"));
    let none = e.ok(&["recall", "zebra", "--view", "project/acme"]);
    assert!(none.contains("nothing relevant"), "{none}");
    // A misspelt view holds nothing: said so, not "nothing relevant".
    let typo = e.ok(&["recall", "PostgreSQL", "--view", "project/acne"]);
    assert!(typo.starts_with("no memories in project/acne"), "{typo}");
}

#[test]
fn keys_supersede_with_history_and_updates_check_versions() {
    let e = Env::new();
    let a = e.remember(
        "indent: tabs",
        "project/acme",
        &["--key", "indent", "--kind", "convention"],
    );
    let b = e.remember(
        "indent: 4 spaces",
        "project/acme",
        &["--key", "indent", "--kind", "convention"],
    );
    assert_eq!(a, b);
    let g = e.json(&["get", &a, "--history"]);
    assert_eq!(g["version"], 2);
    assert_eq!(g["history"][0]["content"], "indent: tabs");
    e.ok(&[
        "update",
        &a,
        "--expected-version",
        "2",
        "--content",
        "indent: 2 spaces",
    ]);
    let err = e.fails(
        &["update", &a, "--expected-version", "2", "--content", "nope"],
        1,
    );
    assert!(err.contains("version conflict"), "{err}");
}

#[test]
fn global_preference_needs_yes() {
    let e = Env::new();
    let err = e.fails(
        &[
            "remember",
            "dark mode",
            "--scope",
            "global",
            "--kind",
            "preference",
        ],
        1,
    );
    assert!(
        err.contains("needs confirmation") && err.contains("--yes"),
        "{err}"
    );
    e.remember("dark mode", "global", &["--kind", "preference", "--yes"]);
}

#[test]
fn forget_selectors_and_confirmation() {
    let e = Env::new();
    let one = e.remember("forget me", "project/a", &[]);
    e.remember("pinned", "project/a", &["--pinned"]);
    e.remember("sprint note", "project/a/sprint/s1", &[]);
    e.ok(&["forget", &one]);
    e.fails(&["get", &one], 1);
    let err = e.fails(&["forget", "--scope", "project/a"], 1);
    assert!(
        err.contains("--yes"),
        "bulk forget needs confirmation off a terminal: {err}"
    );
    let dry = e.json(&["forget", "--scope", "project/a", "--dry-run"]);
    assert_eq!(dry["deleted"], 1);
    let r = e.json(&["forget", "--scope", "project/a", "--yes"]);
    assert_eq!(r["deleted"], 1);
    assert_eq!(r["pinned_kept"], 1);
    let r = e.json(&["forget", "--scope", "project/a", "--yes", "--force"]);
    assert_eq!(r["deleted"], 1);
    e.remember("old", "project/b", &[]);
    let r = e.json(&[
        "forget",
        "--before",
        "2999-01-01",
        "--view",
        "project/b",
        "--yes",
    ]);
    assert_eq!(r["deleted"], 1);
    e.remember("filtered", "project/c", &["--kind", "finding"]);
    let r = e.json(&[
        "forget",
        "--view",
        "project/c",
        "--filter",
        r#"{"kind": "finding"}"#,
        "--yes",
    ]);
    assert_eq!(r["deleted"], 1);
}

#[test]
fn promote_task_complete_and_restore() {
    let e = Env::new();
    let keep = e.remember(
        "root cause: stale cache",
        "task/t-42",
        &["--kind", "finding"],
    );
    e.remember("scratch", "task/t-42", &["--importance", "0.1"]);
    let p = e.json(&["promote", &keep, "--to", "project/other"]);
    assert_eq!(p["provenance"]["from_id"], keep.as_str());
    let r = e.json(&[
        "task",
        "complete",
        "t-42",
        "--project",
        "acme",
        "--promote",
        &keep,
    ]);
    assert_eq!(r["promoted"].as_array().unwrap().len(), 1);
    assert_eq!(r["archived"], 2);
    assert_eq!(
        e.json(&["list", "--view", "task/t-42"])
            .as_array()
            .unwrap()
            .len(),
        0
    );
    let arch = e.json(&["list", "--view", "task/t-42", "--archived"]);
    assert_eq!(arch.as_array().unwrap().len(), 2);
    let g = e.json(&["get", &keep]);
    assert_eq!(g["archived"]["reason"], "task_completed");
    e.ok(&["restore", &keep]);
    assert_eq!(
        e.json(&["list", "--view", "task/t-42"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let human = e.ok(&[
        "task",
        "complete",
        "t-42",
        "--project",
        "acme",
        "--min-importance",
        "0.5",
    ]);
    assert!(
        human.contains("promoted 0 into project/acme, archived 1"),
        "already copied by the first completion: {human}"
    );
}

#[test]
fn sessions_end_to_end() {
    let e = Env::new();
    let s = e.json(&["session", "new", "--id", "s-1", "--max-bytes", "40"]);
    assert_eq!(s["scope"], "session/s-1");
    e.remember(
        "hello there",
        "session/s-1",
        &[
            "--session",
            "s-1",
            "--role",
            "user",
            "--kind",
            "conversation",
        ],
    );
    let err = e.fails(
        &[
            "remember",
            &"x".repeat(40),
            "--scope",
            "session/s-1",
            "--session",
            "s-1",
        ],
        1,
    );
    assert!(err.contains("bound of 40 bytes"), "{err}");
    let m = e.json(&["session", "show", "s-1"]);
    assert_eq!(m["memories"], 1);
    assert_eq!(m["by_role"]["user"], 1);
    assert_eq!(e.json(&["session", "list"]).as_array().unwrap().len(), 1);
    e.ok(&["session", "archive", "s-1"]);
    let err = e.fails(
        &[
            "remember",
            "late",
            "--scope",
            "session/s-1",
            "--session",
            "s-1",
        ],
        1,
    );
    assert!(err.contains("archived"), "{err}");
    assert!(e.ok(&["session", "show", "s-1"]).contains("1 archived"));
}

/// `recall --explain` names what a memory got from its session: the
/// share of the turn beside it and of its session's best other match.
#[test]
fn recall_explain_says_what_the_session_shared() {
    let e = Env::new();
    for (session, text) in [
        ("s-1", "Where did you move this spring?"),
        ("s-1", "The lease was signed and we moved"),
        ("s-1", "It is sunny there"),
        ("s-2", "We moved"),
    ] {
        e.remember(
            text,
            "project/a",
            &["--session", session, "--kind", "conversation"],
        );
    }
    let args = [
        "recall",
        "where did you move this spring",
        "--view",
        "project/a",
        "--strategy",
        "relevance",
        "--min-relevance",
        "0",
        "--explain",
    ];
    let out = e.ok(&args);
    assert!(
        out.contains(
            "in a session whose best other match has relevance 1.000 (ranking.session_weight)"
        ),
        "{out}"
    );
    assert!(out.contains("(ranking.neighbour_weight)"), "{out}");
    let hits = e.json(&args);
    let lease = hits
        .as_array()
        .unwrap()
        .iter()
        .position(|h| h["content"].as_str().unwrap().starts_with("The lease"))
        .unwrap();
    let alone = hits
        .as_array()
        .unwrap()
        .iter()
        .position(|h| h["content"] == "We moved")
        .unwrap();
    assert!(lease < alone, "{hits}");
    assert_eq!(hits[lease]["explain"]["session_best"], 1.0);
    assert!(
        hits[alone]["explain"].get("session_best").is_none(),
        "{hits}"
    );
}

#[test]
fn export_import_round_trip_through_files_and_pipes() {
    let e = Env::new();
    e.remember(
        "alpha",
        "project/a",
        &["--tag", "x", "--payload", r#"{"k": [1, 2.5, "z"]}"#],
    );
    e.remember("secret", "project/a", &["--sensitive"]);
    e.remember("beta", "project/b", &["--ttl", "7d"]);
    let out = e.path("out.jsonl");
    let o = e
        .cmd()
        .args(["export", "--user-data", "--view", "project/**", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("exported 3 memories"));
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.lines().count(), 3);
    let plain = e.ok(&["export"]);
    assert_eq!(plain.lines().count(), 3, "a full backup by default");
    let o = e.cmd().args(["export", "--no-sensitive"]).output().unwrap();
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 2);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        said.contains("left out 1 sensitive (drop --no-sensitive to include them)"),
        "{said}"
    );
    let f = Env::new();
    let r = f.json(&["import", out.to_str().unwrap()]);
    assert_eq!(r["imported"], 3);
    let again = f.ok(&["export", "--user-data", "--view", "project/**"]);
    assert_eq!(again, text, "lossless");
    // From standard input, skipping what exists.
    let mut child = f
        .cmd()
        .args(["import", "-", "--on-conflict", "skip", "--json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["skipped"], 3);
}

#[test]
fn stats_scopes_upkeep_and_broken_pipe() {
    let e = Env::new();
    for i in 0..30 {
        e.remember(&format!("note {i}"), "project/a", &[]);
    }
    let s = e.json(&["stats"]);
    assert_eq!(s["memories"], 30);
    assert_eq!(s["by_tier"]["project"], 30);
    let sc = e.json(&["scopes"]);
    assert_eq!(sc[0]["scope"], "project/a");
    assert!(e.ok(&["upkeep"]).contains("expired 0"));
    // `strata list | head -1` is success.
    let mut child = e
        .cmd()
        .args(["list", "--view", "project/a"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    assert!(child.wait().unwrap().success());
}

#[test]
fn config_file_is_found_and_applied() {
    let e = Env::new();
    write(
        &e.path("strata.toml"),
        "[memory]\nmax_items = 3\nevict_fraction = 0.5\n",
    );
    for i in 0..5 {
        e.remember(&format!("fact {i}"), "project/p", &[]);
    }
    let n = e
        .json(&["list", "--view", "project/p/**"])
        .as_array()
        .unwrap()
        .len();
    assert!(n <= 3, "max_items from ./strata.toml applies: {n}");
    let archived = e
        .json(&["list", "--view", "project/p/**", "--archived"])
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        n + archived,
        5,
        "eviction moves to the archive, nothing is lost"
    );
    let other = e.path("other.toml");
    write(&other, "[store]\npath = \"elsewhere.db\"\n");
    let o = e
        .cmd()
        .env_remove("STRATA_DB")
        .args(["--config", other.to_str().unwrap(), "init"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(e.path("elsewhere.db").exists());
}

#[test]
fn json_into_a_closed_pipe_is_success() {
    let e = Env::new();
    for i in 0..200 {
        e.remember(
            &format!("note {i} with some words to make the output long enough"),
            "project/a",
            &[],
        );
    }
    let mut child = e
        .cmd()
        .args(["list", "--view", "project/a", "--limit", "200", "--json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    assert!(child.wait().unwrap().success());
}

#[test]
fn forget_dry_run_and_yes_reach_global() {
    let e = Env::new();
    e.remember("g1", "global", &[]);
    let dry = e.json(&["forget", "--scope", "global", "--dry-run"]);
    assert_eq!(dry["deleted"], 1);
    e.remember("g2", "global", &["--pinned"]);
    let r = e.json(&["forget", "--scope", "global", "--yes"]);
    assert_eq!(r["deleted"], 1);
    assert_eq!(r["pinned_kept"], 1);
}

/// `bench --only soak` for a few seconds: well-behaved clients get no
/// error and lose no write while a tenth of the requests are hostile, and
/// each hostile request gets the answer it should (413, 400, 404).
#[test]
fn bench_soak_keeps_well_behaved_clients_whole_under_hostile_requests() {
    let e = Env::new();
    let dir = e.path("bench");
    let j = e.json(&[
        "bench",
        "--only",
        "soak",
        "--memories",
        "100",
        "--scopes",
        "2",
        "--clients",
        "2",
        "--soak-minutes",
        "0.05",
        "--soak-hostile",
        "0.1",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    let k = &j["soak"];
    assert_eq!(
        (&k["errors"], &k["lost_writes"]),
        (&0.into(), &0.into()),
        "{k}"
    );
    assert!(k["requests"].as_u64().unwrap() > 20, "{k}");
    assert!(k["acked_writes"].as_u64().unwrap() > 0, "{k}");
    for kind in ["oversized", "malformed", "foreign_id"] {
        let (answered, right) = (k[kind][0].as_u64().unwrap(), k[kind][1].as_u64().unwrap());
        assert!(answered > 0 && right == answered, "{kind}: {k}");
    }
    assert_eq!(k["rss_mib"].as_array().unwrap().len(), 10, "{k}");
}

/// `bench --only http` on a small store: no errors nor lost writes, and
/// a recall's CPU time is read on both sides, the server's and the
/// library's in process (Linux), so what the server adds splits into the
/// recall and what surrounds it.
#[test]
fn bench_http_times_the_recall_in_the_server_and_in_process() {
    let e = Env::new();
    let dir = e.path("bench");
    let j = e.json(&[
        "bench",
        "--only",
        "http",
        "--memories",
        "1000",
        "--scopes",
        "4",
        "--clients",
        "4",
        "--http-requests",
        "64",
        "--http-rounds",
        "1",
        "--mixed-requests",
        "20",
        "--scale-requests",
        "4",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    let h = &j["http"];
    assert_eq!(h["http"]["errors"], 0, "{h}");
    for m in h["mixed"].as_array().unwrap() {
        assert_eq!(
            (&m["errors"], &m["lost_writes"]),
            (&0.into(), &0.into()),
            "{m}"
        );
    }
    let in_process = h["in_process"].as_array().unwrap();
    assert!(!in_process.is_empty(), "{h}");
    if cfg!(target_os = "linux") {
        let server = h["server_recall_cpu_us"].as_f64().unwrap();
        assert!(server > 0.0 && server < 1e6, "{h}");
        for p in in_process {
            let us = p["recall_cpu_us"].as_f64().unwrap();
            assert!(us > 0.0 && us < 1e6, "{p}");
        }
    }
}
