//! docs/formats.md's examples, copied out of the page and fed to the real
//! binary and server: the `.memory/` tree, the pipeline file, every HTTP
//! body, import lines with and without a checksum, the seeds' memory.yaml.

use serde_json::Value;

use crate::util::{Env, write};

/// The fenced block after `<!-- example: NAME -->` in docs/formats.md.
pub fn example(name: &str) -> String {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/formats.md"
    ))
    .unwrap();
    let marker = format!("<!-- example: {name} -->\n```");
    let at = page
        .find(&marker)
        .unwrap_or_else(|| panic!("no example {name}"));
    let rest = &page[at + marker.len()..];
    let body = &rest[rest.find('\n').unwrap() + 1..];
    body[..body.find("\n```").unwrap() + 1].to_string()
}

#[test]
fn the_memory_tree_syncs_where_the_page_says() {
    let e = Env::new();
    let rows: Vec<Vec<String>> = example("memory-tree")
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect();
    assert_eq!(rows.len(), 9);
    for r in &rows {
        let p = e.path("repo").join(&r[0]);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        write(&p, &format!("# {}\n\nSomething worth knowing.\n", r[0]));
    }
    let out = e.json(&["sync", "repo", "--project", "acme"]);
    assert_eq!(out["added"].as_array().map(Vec::len), Some(9), "{out}");
    let listed = e.json(&["list", "--view", "project/acme/**", "--limit", "100"]);
    let listed = listed.as_array().unwrap();
    for r in &rows {
        let m = listed
            .iter()
            .find(|m| m["key"] == r[0].as_str())
            .unwrap_or_else(|| panic!("{} not synced", r[0]));
        assert_eq!(
            (m["scope"].as_str(), m["kind"].as_str()),
            (Some(r[1].as_str()), Some(r[2].as_str())),
            "{}",
            r[0]
        );
    }
}

#[test]
fn the_pipeline_example_runs() {
    let e = Env::new();
    write(&e.path("nodes.toml"), &example("pipeline"));
    e.ok(&[
        "pipeline",
        "check",
        "nodes.toml",
        "--task",
        "t-42",
        "--project",
        "acme",
    ]);
    e.ok(&[
        "pipeline",
        "run",
        "nodes.toml",
        "--task",
        "t-42",
        "--project",
        "acme",
    ]);
    let task = e.json(&["list", "--view", "task/t-42"]);
    assert_eq!(
        task[0]["content"], "Plan: ship the sync command first",
        "{task}"
    );
    assert_eq!(task[0]["kind"], "decision");
    assert!(task[0]["tags"].as_array().unwrap().contains(&"plan".into()));
    let project = e.json(&["list", "--view", "project/acme"]);
    assert_eq!(project[0]["content"], "Review: the plan holds", "{project}");
}

#[test]
fn the_seeds_memory_yaml_example_is_read() {
    let e = Env::new();
    write(&e.path("memory.yaml"), &example("seeds-yaml"));
    assert!(
        e.ok(&["profile", "check", "memory.yaml"])
            .contains("planner")
    );
    e.remember("Plan: ship the sync command first", "project/acme", &[]);
    let out = e.ok(&[
        "--config",
        "memory.yaml",
        "context",
        "--profile",
        "planner",
        "--project",
        "acme",
        "--query",
        "sync",
    ]);
    assert!(out.contains("ship the sync command first"), "{out}");
    let p = e.json(&["--config", "memory.yaml", "profile", "show", "planner"]);
    assert_eq!(p["strategy"], "relevance");
    assert_eq!(p["head_tail"], 1);
}

#[test]
fn import_lines_without_a_checksum_get_one_and_a_wrong_one_is_refused() {
    let e = Env::new();
    let lines = example("http-import");
    let mut wrong: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(wrong[0].get("checksum").is_some() && wrong[1].get("checksum").is_none());
    wrong[0]["checksum"] = "0".repeat(64).into();
    let wrong: String = wrong.iter().map(|v| format!("{v}\n")).collect();
    write(&e.path("wrong.jsonl"), &wrong);
    e.ok(&["init"]);
    let before = e.snapshot();
    let err = e.fails(&["import", "wrong.jsonl"], 1);
    assert!(err.contains("line 1") && err.contains("checksum"), "{err}");
    assert_eq!(e.snapshot(), before, "nothing imported");

    write(&e.path("lines.jsonl"), &lines);
    e.ok(&["import", "lines.jsonl"]);
    let got = e.json(&["get", "0193f2b7"]);
    // The same content remembered afresh has the same checksum.
    let fresh = e.remember("Billing runs nightly at 02:00", "global", &[]);
    assert_eq!(got["checksum"], e.json(&["get", &fresh])["checksum"]);
    assert_eq!(got["checksum"].as_str().map(str::len), Some(64));
}

#[cfg(feature = "server")]
#[test]
fn every_http_body_example_is_accepted_by_a_real_server() {
    use crate::server::Serve;

    let e = Env::new();
    let s = Serve::start(&e, &["--no-auth"]);
    let a: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let send = |method: &str, path: &str, ctype: &str, body: String| -> (u16, Value) {
        let url = format!("{}{path}", s.base);
        let req = match method {
            "POST" => a.post(&url),
            "PATCH" => a.patch(&url),
            _ => unreachable!(),
        };
        let mut r = req.header("content-type", ctype).send(body).unwrap();
        let status = r.status().as_u16();
        let text = r.body_mut().read_to_string().unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    };
    let get = |path: &str| -> (u16, Value) {
        let mut r = a.get(format!("{}{path}", s.base)).call().unwrap();
        let status = r.status().as_u16();
        (
            status,
            serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap_or(Value::Null),
        )
    };
    let json = "application/json";

    let (st, v) = send("POST", "/v1/memories", json, example("http-remember"));
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["payload"]["adr"], 7);
    let (st, v) = send("POST", "/v1/memories/batch", json, example("http-batch"));
    assert!((200..300).contains(&st), "{st} {v}");
    let (st, v) = send(
        "POST",
        "/v1/import",
        "application/x-ndjson",
        example("http-import"),
    );
    assert_eq!(st, 200, "{v}");
    let (st, m) = get("/v1/memories/0193f2b7");
    assert_eq!(st, 200, "{m}");
    assert_eq!(m["checksum"].as_str().map(str::len), Some(64), "computed");

    let (st, v) = send(
        "PATCH",
        "/v1/memories/0193f2a1-6e1c-7a3b-9f00-5c1d2e3f4a01",
        json,
        example("http-patch"),
    );
    assert_eq!((st, v["version"].as_u64()), (200, Some(2)), "{v}");
    let (st, v) = send("POST", "/v1/recall", json, example("http-recall"));
    assert_eq!(st, 200, "{v}");
    assert!(v.to_string().contains("PostgreSQL 17"), "{v}");
    let (st, v) = send("POST", "/v1/forget", json, example("http-forget"));
    assert_eq!(st, 200, "{v}");
    assert_eq!(get("/v1/memories/0193f2a1").0, 404);
    assert_eq!(get("/v1/memories/0193f2b7").0, 404);

    let (st, v) = send(
        "POST",
        "/v1/import/foreign",
        json,
        example("http-import-foreign"),
    );
    assert_eq!((st, &v["added"]), (200, &Value::from(1)), "{v}");
    let (st, v) = send(
        "POST",
        "/v1/import/foreign",
        json,
        example("http-import-notes"),
    );
    assert_eq!((st, &v["added"]), (200, &Value::from(1)), "{v}");
    assert_eq!(v["scopes"][0], "project/acme", "{v}");
    assert_eq!(v["skipped"][0]["entry"], "logo.png", "{v}");
}
