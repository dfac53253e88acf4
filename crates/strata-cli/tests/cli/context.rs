//! `strata context`, `strata profile`, `strata sync` end to end.

use crate::util::{Env, write};

const CONFIG: &str = r#"
[profiles.coder]
max_tokens = 300
strategy = "hybrid"
head_tail = 1
summary_share = 0.3
[[profiles.coder.sources]]
scope = "task/{task}"
share = 0.4
[[profiles.coder.sources]]
scope = "project/{project}"
kinds = ["decision", "convention"]
always = ["CLAUDE.md"]
[[profiles.coder.sources]]
scope = "project/{project}/sprint/{sprint}"
optional = true
"#;

fn repo(e: &Env) {
    let r = e.path("acme");
    for d in [
        ".memory/project/conventions",
        ".memory/project/decisions",
        ".memory/sprint/s12",
        ".memory/stage/design",
    ] {
        std::fs::create_dir_all(r.join(d)).unwrap();
    }
    for (path, text) in [
        ("CLAUDE.md", "Use rustfmt. Never unwrap in library code.\n"),
        (
            ".memory/project/conventions/errors.md",
            "Errors use thiserror.\n",
        ),
        (
            ".memory/project/decisions/store.md",
            "SQLite is the default store.\n",
        ),
        (".memory/sprint/s12/goals.md", "Ship context assembly.\n"),
        (
            ".memory/sprint/s12/progress.json",
            "{\"done\": 3, \"total\": 5}\n",
        ),
    ] {
        write(&r.join(path), text);
    }
}

#[test]
fn sync_then_context_then_replay() {
    let e = Env::new();
    write(&e.path("strata.toml"), CONFIG);
    repo(&e);
    let r = e.json(&["sync", "acme"]);
    assert_eq!(r["project"], "project/acme");
    assert_eq!(r["added"].as_array().unwrap().len(), 5);
    let r = e.json(&["sync", "acme"]);
    assert_eq!(r["unchanged"], 5);
    for i in 0..30 {
        e.remember(
            &format!("Decision {i}: the queue retries with backoff. It gives up after five tries."),
            "project/acme",
            &["--kind", "decision"],
        );
    }
    e.remember(
        "Find why the queue stalls",
        "task/t1",
        &["--kind", "finding"],
    );

    let args = [
        "context",
        "--profile",
        "coder",
        "--task",
        "t1",
        "--project",
        "acme",
        "--sprint",
        "s12",
        "--query",
        "queue retries",
    ];
    let md = e.ok(&args);
    assert!(md.starts_with("## Task context\n"), "{md}");
    // CLAUDE.md is loaded first in the project section.
    let project = md.split("## Project context\n").nth(1).unwrap();
    assert!(project.starts_with("- [convention · "), "{md}");
    assert!(
        project.lines().next().unwrap().contains("Use rustfmt"),
        "{md}"
    );
    assert!(md.contains("## Current sprint\n"), "{md}");
    assert!(md.contains("## Summary of what did not fit\n"), "{md}");
    // Byte-identical on a second run.
    assert_eq!(e.ok(&args), md);

    let mut jargs = args.to_vec();
    jargs.extend(["--render", "json"]);
    let p: serde_json::Value = serde_json::from_str(&e.ok(&jargs)).unwrap();
    for k in [
        "id",
        "profile",
        "items",
        "summary",
        "total_tokens",
        "max_tokens",
        "per_source",
        "compression_ratio",
        "dropped",
        "text",
    ] {
        assert!(p.get(k).is_some(), "missing {k}: {p}");
    }
    assert!(p["total_tokens"].as_u64().unwrap() <= 300);
    assert_eq!(p["text"].as_str().unwrap(), md);

    let mut margs = args.to_vec();
    margs.extend(["--render", "messages"]);
    let m: serde_json::Value = serde_json::from_str(&e.ok(&margs)).unwrap();
    assert_eq!(m[0]["role"], "system");

    // The logged package replays identically.
    let id = p["id"].as_str().unwrap();
    let o = e.run(&["context", "--replay", id]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("identical"));
    let r = e.json(&["context", "--replay", id]);
    assert_eq!(r["exact"], true);
    assert_eq!(r["package"]["id"], id);

    // --explain goes to stderr, stdout stays the context.
    let mut xargs = args.to_vec();
    xargs.push("--explain");
    let o = e.run(&xargs);
    assert_eq!(String::from_utf8(o.stdout).unwrap(), md);
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(err.contains("source 0 \"Task context\" (task/t1)"), "{err}");
    assert!(err.contains("always"), "{err}");

    // A changed file updates in place; a deleted file is forgotten.
    write(&e.path("acme/CLAUDE.md"), "Use rustfmt and clippy.\n");
    std::fs::remove_file(e.path("acme/.memory/sprint/s12/goals.md")).unwrap();
    let r = e.json(&["sync", "acme"]);
    assert_eq!(r["updated"][0], "CLAUDE.md");
    assert_eq!(r["removed"][0], ".memory/sprint/s12/goals.md");
    let r = e.json(&["context", "--replay", id]);
    assert_eq!(r["exact"], false, "{r}");
    let changes = r["changes"].as_array().unwrap();
    assert!(
        changes.iter().any(|c| c["now"] == "updated to version 2"),
        "{r}"
    );

    let list = e.ok(&["profile", "list"]);
    assert!(
        list.contains("coder") && list.contains("global") && list.contains("none"),
        "{list}"
    );
    assert!(
        e.ok(&["profile", "check"])
            .contains("ok: 1 profile (coder)")
    );
}

#[test]
fn the_seeds_yaml_form_is_read() {
    let e = Env::new();
    write(
        &e.path("memory.yaml"),
        r#"
memory:
  memory_config_id: demo
  stores:
    project: { max_items: 500 }
  context_policy: { head_tail_preserve: 1 }
context_profiles:
  - id: planner
    max_tokens: 200
    retrieval_policy: semantic
    sources:
      - store: project
        tags: []
      - store: global
"#,
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
    assert!(out.contains("## Project context\n- [note · "), "{out}");
    let p: serde_json::Value =
        serde_json::from_str(&e.ok(&["--config", "memory.yaml", "profile", "show", "planner"]))
            .unwrap();
    assert_eq!(p["strategy"], "relevance");
    assert_eq!(p["head_tail"], 1);
    assert_eq!(p["sources"][0]["scope"], "project/{project}");
}

fn check(e: &Env, args: &[&str], wants: &[&str]) {
    let before = e.snapshot();
    let err = e.fails(args, 1);
    for w in wants {
        assert!(err.contains(w), "strata {args:?}: expected `{w}` in: {err}");
    }
    assert_eq!(e.snapshot(), before, "strata {args:?} changed the store");
}

#[test]
fn bad_context_inputs_name_the_problem() {
    let e = Env::new();
    write(&e.path("strata.toml"), CONFIG);
    repo(&e);
    e.remember("a note", "project/acme", &[]);
    check(
        &e,
        &["context", "--profile", "nope"],
        &["unknown profile `nope`", "coder"],
    );
    check(
        &e,
        &["context", "--profile", "coder", "--project", "acme"],
        &["needs {task}"],
    );
    check(
        &e,
        &[
            "context",
            "--profile",
            "coder",
            "--task",
            "t1",
            "--project",
            "a/b",
        ],
        &["value of {project}"],
    );
    check(
        &e,
        &[
            "context",
            "--profile",
            "coder",
            "--task",
            "t1",
            "--project",
            "acme",
            "--render",
            "html",
        ],
        &["render", "`html`"],
    );
    check(
        &e,
        &[
            "context",
            "--profile",
            "coder",
            "--task",
            "t",
            "--project",
            "acme",
            "--max-tokens",
            "0",
        ],
        &["max_tokens"],
    );
    check(
        &e,
        &["context", "--replay", "ctx-0"],
        &["ctx-0", "never logged"],
    );
    check(
        &e,
        &["sync", "missing-dir", "--project", "acme"],
        &["missing-dir"],
    );
    write(
        &e.path("acme/.memory/sprint/s12/progress.json"),
        "{bad json",
    );
    check(&e, &["sync", "acme"], &["progress.json", "not valid JSON"]);

    // Profile errors name the profile and the field, at load time.
    for (text, want) in [
        (
            "[profiles.p]\nmax_tokens = 0\n[[profiles.p.sources]]\nscope = \"global\"\n",
            "profiles.p.max_tokens",
        ),
        (
            "[profiles.p]\nstrategy = \"magic\"\n[[profiles.p.sources]]\nscope = \"global\"\n",
            "profiles.p.strategy",
        ),
        (
            "[profiles.p]\n[[profiles.p.sources]]\nscope = \"task/{tsk}\"\n",
            "unknown placeholder `{tsk}`",
        ),
        (
            "[profiles.p]\n[[profiles.p.sources]]\nlayer = \"team\"\n",
            "profiles.p.sources[0].layer",
        ),
        (
            "[profiles.p]\n[[profiles.p.sources]]\nscope = \"global\"\nshare = 0.8\n[[profiles.p.sources]]\nscope = \"task/{task}\"\nshare = 0.5\n",
            "more than 1",
        ),
        ("[profiles.p]\nmax_tokenz = 5\n", "max_tokenz"),
    ] {
        write(&e.path("bad.toml"), text);
        let err = e.fails(&["profile", "check", "bad.toml"], 1);
        assert!(err.contains(want), "{text}: {err}");
        let err = e.fails(&["--config", "bad.toml", "context", "--profile", "p"], 1);
        assert!(err.contains(want), "{text}: {err}");
    }
}

/// A stand-in for an OpenAI-compatible chat endpoint (no model can run
/// here): answers each request with `reply(body)` and hands the requests it
/// saw back to the test.
fn chat_server(replies: Vec<(u16, String)>) -> (String, std::thread::JoinHandle<Vec<String>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for (status, body) in replies {
            let (mut s, _) = listener.accept().unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut head = String::new();
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
                head.push_str(&line);
                if line == "\r\n" || line.is_empty() {
                    break;
                }
            }
            let mut buf = vec![0; len];
            r.read_exact(&mut buf).unwrap();
            seen.push(format!("{head}{}", String::from_utf8(buf).unwrap()));
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

#[test]
fn the_llm_summarizer_is_used_bounded_and_replaced_when_it_fails() {
    let e = Env::new();
    let long_answer = "- the queue retries. ".repeat(400);
    let reply = serde_json::json!({"choices": [{"message": {"role": "assistant", "content": long_answer}}]});
    let (url, server) = chat_server(vec![
        (200, reply.to_string()),
        (500, "{\"error\": \"overloaded\"}".into()),
    ]);
    write(
        &e.path("strata.toml"),
        &format!(
            r#"
[summarizer]
url = "{url}"
model = "tiny"
api_key_env = "TEST_LLM_KEY"
[profiles.p]
max_tokens = 200
summary_share = 0.4
summarizer = "llm"
[[profiles.p.sources]]
scope = "project/{{project}}"
"#
        ),
    );
    for i in 0..30 {
        e.remember(
            &format!("Record {i}: the queue retries with backoff."),
            "project/acme",
            &[],
        );
    }
    let args = [
        "context",
        "--profile",
        "p",
        "--project",
        "acme",
        "--render",
        "json",
    ];
    let run = |args: &[&str]| -> serde_json::Value {
        let o = e
            .cmd()
            .env("TEST_LLM_KEY", "sk-test")
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let p = run(&args);
    assert_eq!(p["summary"]["method"], "llm", "{p}");
    assert!(p["total_tokens"].as_u64().unwrap() <= 200, "{p}");
    // The endpoint failed: the extractive summary stands in and says why.
    let p = run(&args);
    assert_eq!(p["summary"]["method"], "extractive", "{p}");
    assert!(
        p["summary"]["note"].as_str().unwrap().contains("500"),
        "{p}"
    );
    let seen = server.join().unwrap();
    assert!(
        seen[0].starts_with("POST /v1/chat/completions"),
        "{}",
        seen[0]
    );
    assert!(
        seen[0]
            .to_ascii_lowercase()
            .contains("authorization: bearer sk-test")
    );
    assert!(seen[0].contains("\"model\":\"tiny\""));
    assert!(
        seen[0].contains("Record 1"),
        "the dropped memories are sent"
    );
}

#[test]
fn a_pipeline_runs_nodes_in_order_through_the_store() {
    let e = Env::new();
    write(&e.path("strata.toml"), CONFIG);
    write(
        &e.path("nodes.toml"),
        r#"
[[nodes]]
name = "planner"
context = "none"
command = "echo 'Plan: keep state in Redis'"
write_to_memory = { store = "task", tags = ["plan"], kind = "decision" }

[[nodes]]
name = "coder"
context = "coder"
query = "plan"
command = "sed -n 's/.*Plan: /Patch for: /p'"
write_to_memory = { store = "task", kind = "tool_output" }

[[nodes]]
name = "reviewer"
context = "coder"
command = "grep -q 'Patch for: keep state in Redis' && echo approved"
write_to_memory = { store = "project", tags = ["review"] }
"#,
    );
    let base = [
        "pipeline",
        "run",
        "nodes.toml",
        "--task",
        "t1",
        "--project",
        "acme",
    ];
    let runs = e.json(&base);
    assert_eq!(runs[1]["output"], "Patch for: keep state in Redis\n");
    assert_eq!(runs[2]["output"], "approved\n");
    assert_eq!(runs[2]["memory"]["scope"], "project/acme");
    let tags = runs[2]["memory"]["tags"].as_array().unwrap();
    assert!(tags.iter().any(|t| t == "node:reviewer"));

    let before = e.snapshot();
    write(
        &e.path("bad.toml"),
        "[[nodes]]\nname = \"x\"\ncontext = \"nope\"\ncommand = \"true\"\n",
    );
    let err = e.fails(&["pipeline", "run", "bad.toml", "--task", "t1"], 1);
    assert!(
        err.contains("nodes.x.context") && err.contains("nope"),
        "{err}"
    );
    write(&e.path("bad.toml"), "[[nodes]]\nname = \"x\"\n");
    let err = e.fails(&["pipeline", "run", "bad.toml"], 1);
    assert!(err.contains("nodes.x.command"), "{err}");
    write(
        &e.path("bad.toml"),
        "[[nodes]]\nname = \"x\"\nwrite_to_memory = { store = \"task\" }\ncommand = \"true\"\n",
    );
    let err = e.fails(&["pipeline", "check", "bad.toml"], 1);
    assert!(err.contains("needs a task"), "{err}");
    write(&e.path("bad.toml"), "[[nodes]]\nname = \"x\"\ncolor = 1\n");
    let err = e.fails(&["pipeline", "check", "bad.toml"], 1);
    assert!(err.contains("color"), "{err}");
    assert_eq!(e.snapshot(), before);
    write(
        &e.path("bad.toml"),
        "[[nodes]]\nname = \"x\"\ncommand = \"exit 3\"\n",
    );
    let err = e.fails(&["pipeline", "run", "bad.toml"], 1);
    assert!(err.contains("nodes.x") && err.contains("failed"), "{err}");
}

#[test]
fn eval_locomo_reads_the_protocol_and_refuses_bad_input() {
    let e = Env::new();
    write(
        &e.path("mini.json"),
        r#"[{"sample_id": "c1", "conversation": {"session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a greyhound."},
                          {"speaker": "Bob", "dia_id": "D1:2", "text": "I bought a kiln."}]},
            "qa": [{"question": "What did Ann adopt?", "answer": "a greyhound", "evidence": ["D1:1"], "category": 4}]}]"#,
    );
    let r = e.json(&[
        "eval",
        "locomo",
        "mini.json",
        "--k",
        "1,5",
        "--budgets",
        "100",
    ]);
    assert_eq!(r["turns"], 2);
    assert_eq!(r["overall"]["recall"]["1"], 1.0);
    assert_eq!(r["context"][0]["budget"], 100);
    let out = e.ok(&["eval", "locomo", "mini.json"]);
    assert!(
        out.contains("overall (1–5)") && out.contains("R@50"),
        "{out}"
    );

    let err = e.fails(&["eval", "locomo", "missing.json"], 1);
    assert!(err.contains("missing.json"), "{err}");
    write(&e.path("bad.json"), "{not json");
    assert!(
        e.fails(&["eval", "locomo", "bad.json"], 1)
            .contains("not JSON")
    );
    let err = e.fails(&["eval", "locomo", "mini.json", "--strategy", "magic"], 1);
    assert!(err.contains("magic"), "{err}");
    let err = e.fails(&["eval", "locomo", "mini.json", "--summary-share", "2"], 2);
    assert!(err.contains("--summary-share"), "{err}");
    let err = e.fails(&["eval", "locomo", "mini.json", "--k", "0"], 1);
    assert!(err.contains("positive"), "{err}");

    // One line per question: where its evidence ranked, the candidates.
    e.ok(&["eval", "locomo", "mini.json", "--per-question", "q.jsonl"]);
    let q: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(e.path("q.jsonl")).unwrap().trim()).unwrap();
    assert_eq!(q["question"], "What did Ann adopt?");
    assert_eq!(q["ranks"], serde_json::json!([1]));
    assert_eq!(q["candidates"][0]["key"], "D1:1");
    let err = e.fails(
        &[
            "eval",
            "locomo",
            "mini.json",
            "--per-question",
            "no/dir/q.jsonl",
        ],
        1,
    );
    assert!(err.contains("no/dir/q.jsonl"), "{err}");

    // The ablation: each idea of the ranking off alone. Without a model
    // only the text ideas can be turned off; the floor here cuts the
    // evidence (a reply that shares one word with the question, beside
    // the turn that matches it best), so without it R@2 differs.
    write(
        &e.path("floor.json"),
        r#"[{"sample_id": "c1", "conversation": {
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "Where should I move for the new job?"},
                          {"speaker": "Bob", "dia_id": "D1:2", "text": "Lisbon, for the job."},
                          {"speaker": "Ann", "dia_id": "D1:3", "text": "I bought a kiln."}],
            "session_2_date_time": "2:00 pm on 9 May, 2023",
            "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "My old job was boring, the job was far, a job I left."}]},
            "qa": [{"question": "Where should Ann move for the new job?", "evidence": ["D1:2"], "category": 4}]}]"#,
    );
    let args = [
        "eval",
        "locomo",
        "floor.json",
        "--embedder",
        "none",
        "--budgets",
        "",
        "--k",
        "1,2",
        "--ablation",
    ];
    let r = e.json(&args);
    assert_eq!(r["overall"]["recall"]["2"], 0.0);
    let variants: Vec<&str> = r["ablation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["variant"].as_str().unwrap())
        .collect();
    assert_eq!(
        variants,
        [
            "without session neighbours",
            "without the session's share",
            "without the named time",
            "without the relevance floor"
        ],
        "the vector ideas are left out of a run without vectors"
    );
    assert_eq!(r["ablation"][0]["overall"]["recall"]["2"], 0.0);
    assert_eq!(r["ablation"][1]["overall"]["recall"]["2"], 0.0);
    assert_eq!(r["ablation"][1]["setting"], "[ranking] session_weight = 0");
    assert_eq!(r["ablation"][2]["setting"], "[ranking] time_weight = 0");
    assert_eq!(r["ablation"][3]["overall"]["recall"]["2"], 1.0);
    assert_eq!(r["ablation"][3]["setting"], "[ranking] min_relevance = 0");
    let out = e.ok(&args);
    assert!(
        out.contains("ablation: each idea turned off alone")
            && out.contains("without the relevance floor")
            && out.contains("min_relevance = 0"),
        "{out}"
    );

    // As of a day after the last session, learning included.
    let r = e.json(&[
        "eval",
        "locomo",
        "mini.json",
        "--at-last-session",
        "--learn",
    ]);
    assert_eq!(r["turns"], 2);
    assert_eq!(r["overall"]["recall"]["1"], 1.0);
    write(
        &e.path("undated.json"),
        r#"[{"conversation": {"session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "hi"}]}, "qa": []}]"#,
    );
    let err = e.fails(&["eval", "locomo", "undated.json", "--at-last-session"], 1);
    assert!(
        err.contains("--at-last-session") && err.contains("no session dates"),
        "{err}"
    );
}
