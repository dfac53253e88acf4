//! Bad input at every CLI boundary: a clear error naming the problem, the
//! documented exit code, and an unchanged store.

use crate::util::{Env, write};

fn check(e: &Env, args: &[&str], code: i32, wants: &[&str]) {
    let before = e.snapshot();
    let err = e.fails(args, code);
    for w in wants {
        assert!(err.contains(w), "strata {args:?}: expected `{w}` in: {err}");
    }
    assert_eq!(e.snapshot(), before, "strata {args:?} changed the store");
}

#[test]
fn every_boundary_names_the_problem() {
    let e = Env::new();
    e.remember("existing memory", "project/a", &[]);
    check(
        &e,
        &["remember", "x", "--scope", "project//a"],
        1,
        &["scope `project//a`", "empty segment"],
    );
    check(
        &e,
        &["remember", "x", "--scope", "project/a b"],
        1,
        &["contains ` `"],
    );
    check(
        &e,
        &[
            "remember",
            "x",
            "--scope",
            "project/a",
            "--kind",
            "Not-A-Kind",
        ],
        1,
        &["kind", "Not-A-Kind"],
    );
    check(
        &e,
        &[
            "remember",
            "x",
            "--scope",
            "project/a",
            "--importance",
            "2.0",
        ],
        1,
        &["importance", "outside 0.0–1.0"],
    );
    check(
        &e,
        &[
            "remember",
            "x",
            "--scope",
            "project/a",
            "--importance",
            "high",
        ],
        2,
        &["--importance"],
    );
    check(
        &e,
        &[
            "remember",
            "x",
            "--scope",
            "project/a",
            "--payload",
            "{not json",
        ],
        1,
        &["payload", "not valid JSON"],
    );
    check(
        &e,
        &["remember", "x", "--scope", "project/a", "--payload", "[1]"],
        1,
        &["payload", "object"],
    );
    check(
        &e,
        &["remember", "x", "--scope", "project/a", "--ttl", "7y"],
        1,
        &["ttl", "7y"],
    );
    check(
        &e,
        &["remember", "x", "--scope", "project/a", "--role", "robot"],
        1,
        &["role", "robot"],
    );
    check(
        &e,
        &["remember", " ", "--scope", "project/a"],
        1,
        &["content", "empty"],
    );
    check(&e, &["remember", "x"], 2, &["--scope"]);
    check(
        &e,
        &[
            "recall",
            "q",
            "--view",
            "project/a",
            "--filter",
            r#"{"importance": {"$gte2": 0.5}}"#,
        ],
        1,
        &["unknown operator `$gte2` on `importance`"],
    );
    check(
        &e,
        &[
            "recall",
            "q",
            "--view",
            "project/a",
            "--filter",
            r#"{"colour": 1}"#,
        ],
        1,
        &["unknown field `colour`"],
    );
    check(
        &e,
        &[
            "recall",
            "q",
            "--view",
            "project/a",
            "--strategy",
            "fastest",
        ],
        1,
        &["strategy", "fastest"],
    );
    check(&e, &["recall", "q"], 2, &["--view"]);
    check(
        &e,
        &["list", "--view", "project/a", "--order", "random"],
        1,
        &["order", "random"],
    );
    check(
        &e,
        &["forget", "--scope", "project/a", "--session", "s"],
        2,
        &["exactly one"],
    );
    check(&e, &["forget"], 2, &["exactly one"]);
    check(
        &e,
        &["forget", "--before", "yesterday", "--yes"],
        1,
        &["before", "yesterday"],
    );
    check(&e, &["get", "missing-id"], 1, &["not found"]);
    check(
        &e,
        &["promote", "missing-id", "--to", "project/b"],
        1,
        &["not found"],
    );
    check(
        &e,
        &["promote", "missing-id", "--to", "project/../b"],
        1,
        &["not allowed"],
    );
    check(
        &e,
        &["task", "complete", "t 1", "--project", "acme"],
        1,
        &["scope"],
    );
    e.remember("task note", "task/t1", &[]);
    check(
        &e,
        &["task", "complete", "t1", "--project", "project/a"],
        1,
        &["project's name (`a`)"],
    );
    check(
        &e,
        &["session", "show", "nope"],
        1,
        &["session `nope` not found"],
    );
    check(
        &e,
        &["import", "--on-conflict", "merge", "x.jsonl"],
        2,
        &["--on-conflict"],
    );
    check(&e, &["import", "missing.jsonl"], 1, &["missing.jsonl"]);
    check(&e, &["export", "--user-data"], 2, &["--user-data"]);
    check(&e, &["bogus-verb"], 2, &["unrecognized subcommand"]);
    check(
        &e,
        &["bench", "--only", "http", "--http-rounds", "0"],
        2,
        &["--http-rounds", "0"],
    );
    check(
        &e,
        &["bench", "--only", "soak", "--soak-hostile", "0"],
        2,
        &["--soak-hostile", "0"],
    );
    check(
        &e,
        &[
            "bench",
            "--encrypted",
            "--only",
            "postgres",
            "--pg-url",
            "postgres://u@127.0.0.1:1/db",
        ],
        2,
        &["--encrypted", "PostgreSQL"],
    );
}

#[test]
fn bad_import_lines_name_the_line_and_import_nothing() {
    let e = Env::new();
    e.remember("existing memory", "project/a", &[]);
    let src = Env::new();
    src.remember("good one", "project/b", &[]);
    src.remember("good two", "project/b", &[]);
    let good = src.ok(&["export"]);
    let lines: Vec<&str> = good.lines().collect();
    let bad = e.path("bad.jsonl");
    write(
        &bad,
        &format!("{}\n{{\"id\": 1}}\n{}\n", lines[0], lines[1]),
    );
    check(
        &e,
        &["import", bad.to_str().unwrap()],
        1,
        &["import line 2"],
    );
    write(&bad, &format!("{}\nnot json at all\n", lines[0]));
    check(
        &e,
        &["import", bad.to_str().unwrap()],
        1,
        &["import line 2", "invalid JSON"],
    );
    write(
        &bad,
        &lines[0].replace("\"importance\":0.5", "\"importance\":2.0"),
    );
    check(
        &e,
        &["import", bad.to_str().unwrap()],
        1,
        &["import line 1", "importance"],
    );
}

#[test]
fn oversized_items_and_bad_config_are_refused() {
    let e = Env::new();
    write(&e.path("strata.toml"), "[memory]\nmax_item_bytes = 100\n");
    e.remember("small", "project/a", &[]);
    check(
        &e,
        &["remember", &"y".repeat(101), "--scope", "project/a"],
        1,
        &["101 bytes", "limit of 100"],
    );
    write(&e.path("strata.toml"), "[memory]\nmax_itemz = 100\n");
    let err = e.fails(&["list", "--view", "project/a"], 1);
    assert!(
        err.contains("strata.toml") && err.contains("max_itemz"),
        "{err}"
    );
    write(
        &e.path("strata.toml"),
        "[ranking]\nweights = { relevance = 2.0, importance = 0.4, recency = 0.3 }\n",
    );
    let err = e.fails(&["list", "--view", "project/a"], 1);
    assert!(err.contains("weights.relevance"), "{err}");
    write(&e.path("strata.toml"), "not = [toml");
    let err = e.fails(&["list", "--view", "project/a"], 1);
    assert!(err.contains("strata.toml"), "{err}");
    let err = e.fails(&["--config", "/nonexistent/strata.toml", "stats"], 1);
    assert!(err.contains("does not exist"), "{err}");
}

#[test]
fn json_errors_are_machine_readable() {
    let e = Env::new();
    let err = e.fails(&["remember", "x", "--scope", "bad scope", "--json"], 1);
    let v: serde_json::Value = serde_json::from_str(err.trim()).unwrap();
    assert_eq!(v["error"]["code"], "invalid");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("bad scope")
    );
    // Codes are spelled as in HTTP error bodies (`ErrorClass::as_str`).
    let err = e.fails(
        &[
            "remember",
            "tabs",
            "--scope",
            "global",
            "--kind",
            "preference",
            "--json",
        ],
        1,
    );
    let v: serde_json::Value = serde_json::from_str(err.trim()).unwrap();
    assert_eq!(v["error"]["code"], "needs_confirmation", "{v}");
    let err = e.fails(
        &["get", "01900000-0000-7000-8000-000000000000", "--json"],
        1,
    );
    let v: serde_json::Value = serde_json::from_str(err.trim()).unwrap();
    assert_eq!(v["error"]["code"], "not_found", "{v}");
    assert_eq!(v["error"]["class"], v["error"]["code"], "{v}");
}

/// `[[secrets]]` in strata.toml: the CLI's writes are screened like every
/// other front end's; a refusal is exit 1 with code `refused`, nothing
/// stored, and a rule naming no detector is refused at start.
#[test]
fn secrets_rules_hold_on_the_command_line() {
    let e = Env::new();
    write(
        &e.path("strata.toml"),
        "[[secrets]]\nscope = \"*\"\n\n[[secrets]]\nscope = \"project/pay\"\naction = \"refuse\"\n",
    );
    let key = "AKIAQX7RZ2M4K9WB3TFE";
    let out = e.ok(&[
        "remember",
        &format!("deploy key {key}"),
        "--scope",
        "project/acme",
        "--json",
    ]);
    let m: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(m["content"], "deploy key [REDACTED:aws_key]", "{m}");
    let before = e.snapshot();
    let err = e.fails(
        &[
            "remember",
            &format!("vault {key}"),
            "--scope",
            "project/pay",
            "--json",
        ],
        1,
    );
    let v: serde_json::Value = serde_json::from_str(err.trim()).unwrap();
    assert_eq!(v["error"]["code"], "refused", "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("aws_key") && msg.contains("bytes 6..26") && !msg.contains(key),
        "{msg}"
    );
    assert_eq!(e.snapshot(), before);

    write(
        &e.path("strata.toml"),
        "[[secrets]]\nscope = \"*\"\ndetectors = { api_keys = \"off\" }\n",
    );
    let err = e.fails(&["list", "--view", "project/acme"], 1);
    assert!(
        err.contains("secrets[0].detectors.api_keys") && err.contains("aws_key"),
        "{err}"
    );
}
