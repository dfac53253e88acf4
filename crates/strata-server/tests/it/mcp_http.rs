//! MCP over streamable HTTP at `/mcp`: the real protocol (initialize, list
//! tools, call each tool) with the same tokens as the REST API.

use serde_json::{Value, json};
use strata_server::{Access, McpDefaults, ServerConfig};

use crate::harness::{Server, token};

pub(crate) struct Mcp<'a> {
    pub(crate) s: &'a Server,
    pub(crate) token: String,
    pub(crate) next: u64,
}

impl Mcp<'_> {
    pub(crate) fn post(&mut self, msg: Value) -> (u16, String) {
        self.s.raw(
            "POST",
            "/mcp",
            Some(&self.token),
            Some(msg.to_string().into_bytes()),
            &[("accept", "application/json, text/event-stream")],
        )
    }

    pub(crate) fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let (status, body) = self
            .post(json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}));
        assert_eq!(status, 200, "{method}: {body}");
        let v: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{method}: {e}: {body}"));
        assert_eq!(v["id"], self.next, "{v}");
        v
    }

    /// Calls a tool; returns (is_error, its text content).
    pub(crate) fn text(&mut self, name: &str, args: Value) -> (bool, String) {
        let v = self.request("tools/call", json!({"name": name, "arguments": args}));
        let r = &v["result"];
        assert!(r.is_object(), "{name}: {v}");
        let text = r["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{v}"));
        (r["isError"] == json!(true), text.to_string())
    }

    /// Calls a tool whose answer is JSON (errors, and `verbose` answers);
    /// returns (is_error, the JSON in its text content).
    pub(crate) fn tool(&mut self, name: &str, args: Value) -> (bool, Value) {
        let (err, text) = self.text(name, args);
        (
            err,
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}: {text}")),
        )
    }
}

fn server() -> (Server, String, String) {
    let (rw, a) = token("agent", &["project/acme", "global"], Access::ReadWrite);
    let (ro, b) = token("viewer", &["project/beta"], Access::Read);
    let s = Server::start(ServerConfig {
        tokens: vec![a, b],
        mcp: McpDefaults {
            project: Some("acme".into()),
            session: None,
        },
        ..Default::default()
    });
    (s, rw, ro)
}

pub(crate) fn handshake(m: &mut Mcp<'_>) {
    let init = m.request("initialize", json!({"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}}));
    assert_eq!(init["result"]["serverInfo"]["name"], "strata", "{init}");
    assert!(init["result"]["capabilities"]["tools"].is_object());
    let (status, _) = m.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    assert!(status == 202 || status == 200, "{status}");
}

#[test]
fn initialize_list_and_call_every_tool() {
    let (s, rw, _) = server();
    let mut m = Mcp {
        s: &s,
        token: rw,
        next: 0,
    };
    handshake(&mut m);
    let tools = m.request("tools/list", json!({}));
    let mut names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "audit",
            "context",
            "forget",
            "get",
            "import_from",
            "learned",
            "list",
            "list_scopes",
            "promote",
            "recall",
            "remember",
            "session",
            "update"
        ]
    );
    for t in tools["result"]["tools"].as_array().unwrap() {
        assert!(t["description"].as_str().unwrap().len() > 40, "{t}");
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
    }
    let remember = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "remember")
        .unwrap();
    for arg in ["content", "scope", "kind", "tags", "importance", "key"] {
        assert!(
            remember["inputSchema"]["properties"][arg].is_object(),
            "remember.{arg}"
        );
    }

    // remember: the scope defaults to the configured project.
    let (err, mem) = m.tool(
        "remember",
        json!({"content": "We chose PostgreSQL for billing", "kind": "decision", "verbose": true}),
    );
    assert!(!err, "{mem}");
    assert_eq!(mem["scope"], "project/acme");
    let id = mem["id"].as_str().unwrap().to_string();
    // recall: the view defaults to the project's subtree and global.
    let (err, r) = m.tool(
        "recall",
        json!({"query": "which database for billing?", "verbose": true}),
    );
    assert!(!err, "{r}");
    assert_eq!(r["results"][0]["id"], id.as_str());
    // Timed by its thread's CPU clock, as the API's recalls are
    // (`strata_recall_cpu_seconds`).
    if cfg!(target_os = "linux") {
        let (timed, cpu) = s.shared.metrics.recall_cpu();
        assert!(
            timed == 1 && cpu > std::time::Duration::ZERO,
            "{timed} {cpu:?}"
        );
    }
    let (err, c) = m.tool(
        "context",
        json!({"query": "billing database", "verbose": true}),
    );
    assert!(!err, "{c}");
    assert!(c["text"].as_str().unwrap().contains("PostgreSQL"), "{c}");
    let (err, g) = m.tool("get", json!({"id": id, "verbose": true}));
    assert!(
        !err && g["content"] == "We chose PostgreSQL for billing",
        "{g}"
    );
    let (err, sc) = m.tool("list_scopes", json!({"verbose": true}));
    assert!(!err && sc["scopes"][0]["scope"] == "project/acme", "{sc}");
    let (err, l) = m.tool("list", json!({"verbose": true}));
    assert!(!err && l["memories"][0]["id"] == id.as_str(), "{l}");
    let (err, u) = m.tool(
        "update",
        json!({"id": id, "expected_version": 1, "importance": 0.95, "verbose": true}),
    );
    assert!(!err && u["version"] == 2 && u["importance"] == 0.95, "{u}");
    let (err, p) = m.tool(
        "promote",
        json!({"id": id, "to": "global", "confirm": true, "verbose": true}),
    );
    assert!(!err, "{p}");
    assert_eq!(p["scope"], "global");
    let (err, f) = m.tool(
        "forget",
        json!({"ids": [id, p["id"]], "confirm": true, "verbose": true}),
    );
    assert!(!err, "{f}");
    assert_eq!(f["deleted"], 2);
    assert_eq!(s.shared.engine.stats().unwrap().memories, 0);
}

#[test]
fn bad_calls_are_clear_errors_and_change_nothing() {
    let (s, rw, ro) = server();
    let mut m = Mcp {
        s: &s,
        token: rw,
        next: 0,
    };
    handshake(&mut m);
    m.text("remember", json!({"content": "seed"}));
    let before = s.snapshot();
    // Unknown tool and wrong argument types are protocol errors.
    let v = m.request(
        "tools/call",
        json!({"name": "drop_tables", "arguments": {}}),
    );
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tool not found"),
        "{v}"
    );
    let v = m.request(
        "tools/call",
        json!({"name": "remember", "arguments": {"content": 5}}),
    );
    let text = v.to_string();
    assert!(
        v["error"].is_object() || v["result"]["isError"] == json!(true),
        "{v}"
    );
    assert!(
        text.contains("content") || text.contains("invalid type"),
        "{v}"
    );
    // Engine and grant errors are tool errors the model can read.
    let (err, e) = m.tool("remember", json!({"content": "x", "scope": "project/beta"}));
    assert!(err);
    assert_eq!(e["error"]["code"], "forbidden", "{e}");
    let (err, e) = m.tool("recall", json!({"query": "x", "view": ["project/beta"]}));
    assert!(err && e["error"]["field"] == "view", "{e}");
    let (err, e) = m.tool("remember", json!({"content": "x", "importance": 3}));
    assert!(err && e["error"]["field"] == "importance", "{e}");
    let (err, e) = m.tool("get", json!({"id": "nope"}));
    assert!(err && e["error"]["code"] == "not_found", "{e}");
    // Unknown arguments are named, `verbose` or not.
    let v = m.request(
        "tools/call",
        json!({"name": "recall", "arguments": {"query": "x", "verbose": true, "limt": 3}}),
    );
    assert!(v.to_string().contains("limt"), "{v}");
    let (err, e) = m.tool("recall", json!({"query": "x", "min_relevance": 2}));
    assert!(err && e["error"]["field"] == "min_relevance", "{e}");
    // update: a stale version changes nothing and says which is current.
    let (_, seed) = m.tool("list", json!({"verbose": true}));
    let seed_id = seed["memories"][0]["id"].as_str().unwrap().to_string();
    let (err, e) = m.tool(
        "update",
        json!({"id": seed_id, "expected_version": 7, "content": "changed"}),
    );
    assert!(err && e["error"]["code"] == "conflict", "{e}");
    let v = m.request(
        "tools/call",
        json!({"name": "update", "arguments": {"id": seed_id, "content": "no version"}}),
    );
    assert!(v.to_string().contains("expected_version"), "{v}");
    // A read-only token may not write through MCP either.
    let mut viewer = Mcp {
        s: &s,
        token: ro,
        next: 100,
    };
    let (err, e) = viewer.tool("remember", json!({"content": "x", "scope": "project/beta"}));
    assert!(err && e["error"]["code"] == "forbidden", "{e}");
    assert_eq!(s.snapshot(), before);
    // Hosts outside `allowed_hosts` are refused (DNS-rebinding guard).
    let (status, _) = s.raw(
        "POST",
        "/mcp",
        Some(&m.token),
        Some(b"{}".to_vec()),
        &[
            ("host", "evil.example"),
            ("accept", "application/json, text/event-stream"),
        ],
    );
    assert!(status == 403 || status == 400, "{status}");
}

/// What agents write: decisions, findings, preferences of a sentence or
/// two (one unrelated memory among them).
const AGENT_MEMORIES: [(&str, &str); 6] = [
    (
        "decision",
        "We chose PostgreSQL for billing: invoices need multi-row transactions, and the finance team already runs it",
    ),
    (
        "decision",
        "Billing retries go through SQS with a dead-letter queue; after 5 failed attempts the message is parked for a human",
    ),
    (
        "convention",
        "The billing service's integration tests need a local Postgres 16: start it with `docker compose up db` before `cargo test`",
    ),
    (
        "preference",
        "Alice (billing PM) prefers short status updates: three bullets, no preamble, links to the PRs",
    ),
    (
        "finding",
        "Invoice PDFs are rendered by the invoice-render worker, which times out after 30 s on invoices with over 500 lines",
    ),
    (
        "note",
        "Lunch order for Friday: pizza from the place on 5th street",
    ),
];

/// Default answers are compact text, at most 1.5× the memory content they
/// carry (the full JSON records were 7–13×); their short ids work in every
/// tool that takes an id; `verbose` still gives the records.
#[test]
fn answers_are_compact_and_carry_what_a_model_needs() {
    let (s, rw, _) = server();
    let mut m = Mcp {
        s: &s,
        token: rw,
        next: 0,
    };
    handshake(&mut m);
    // Ids are whole: every id an answer hands out keeps naming its memory
    // however many are written after it in the same millisecond.
    let mut ids = Vec::new();
    for (kind, content) in AGENT_MEMORIES {
        let (err, t) = m.text("remember", json!({"content": content, "kind": kind}));
        assert!(
            !err && t.starts_with("remembered ") && t.contains(" in project/acme ("),
            "{t}"
        );
        assert!(t.len() < 90, "{t}");
        ids.push(
            t["remembered ".len()..]
                .split(' ')
                .next()
                .unwrap()
                .to_string(),
        );
    }
    for (id, (_, content)) in ids.iter().zip(AGENT_MEMORIES) {
        let (err, g) = m.text("get", json!({"id": id}));
        assert!(
            !err && g.starts_with(id.as_str()) && g.contains(content),
            "{g}"
        );
    }
    let content_of = |records: &Value| -> usize {
        records
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["content"].as_str().unwrap().len())
            .sum()
    };
    let query = "how are billing invoices stored and retried?";
    let (err, compact) = m.text("recall", json!({"query": query, "touch": false}));
    assert!(!err, "{compact}");
    let (_, full) = m.tool(
        "recall",
        json!({"query": query, "touch": false, "verbose": true}),
    );
    let carried = content_of(&full["results"]);
    let n = full["results"].as_array().unwrap().len();
    assert!((2..6).contains(&n), "the floor left {n}: {compact}");
    assert!(!compact.contains("Lunch"), "{compact}");
    let ratio = compact.len() as f64 / carried as f64;
    let verbose_ratio = full.to_string().len() as f64 / carried as f64;
    eprintln!(
        "recall: {} chars for {carried} of content ({ratio:.2}×); verbose {:.2}×",
        compact.len(),
        verbose_ratio
    );
    // Whole ids (36 characters a line) are the price of ids that last.
    assert!(ratio <= 1.8, "{ratio:.2}×:\n{compact}");
    // Every line: id, kind, date, score, content; under its scope.
    let mut lines = compact.lines();
    assert_eq!(lines.next(), Some("project/acme:"));
    let first = lines.next().unwrap();
    let best = &full["results"][0];
    let id = first[2..].split(' ').next().unwrap();
    assert_eq!(best["id"].as_str().unwrap(), id, "{first}");
    assert!(
        first.contains(best["kind"].as_str().unwrap())
            && first.ends_with(best["content"].as_str().unwrap()),
        "{first}"
    );
    // A unique prefix works wherever an id is taken.
    let (err, g) = m.text("get", json!({"id": &id[..30]}));
    assert!(!err && g.starts_with(best["id"].as_str().unwrap()), "{g}");
    let (err, u) = m.text(
        "update",
        json!({"id": &id[..30], "expected_version": 1, "importance": 1.0}),
    );
    assert!(
        !err && u.starts_with("updated ") && u.ends_with("v2)"),
        "{u}"
    );
    let (_, again) = m.text("recall", json!({"query": query, "touch": false}));
    assert!(again.contains(" v2: "), "{again}");
    // Nothing relevant is said, not padded with the nearest memories.
    let (err, none) = m.text("recall", json!({"query": "how tall is mount everest?"}));
    assert!(!err && none.starts_with("nothing relevant in "), "{none}");
    // list: recent activity, newest first.
    let (_, listed) = m.text("list", json!({"limit": 2}));
    assert!(listed.contains("Lunch order"), "{listed}");
    assert_eq!(listed.lines().count(), 3, "{listed}");
    // context: the package's text once, with one line of figures.
    let (err, ctx) = m.text("context", json!({"query": query}));
    assert!(!err, "{ctx}");
    let (_, pkg) = m.tool("context", json!({"query": query, "verbose": true}));
    let item_content: usize = pkg["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["content"].as_str().unwrap().len())
        .sum();
    let ctx_ratio = ctx.len() as f64 / item_content as f64;
    eprintln!(
        "context: {} chars for {item_content} of content ({ctx_ratio:.2}×); verbose {:.2}×",
        ctx.len(),
        pkg.to_string().len() as f64 / item_content as f64
    );
    assert!(ctx_ratio <= 1.5, "{ctx_ratio:.2}×:\n{ctx}");
    assert_eq!(ctx.matches("PostgreSQL for billing").count(), 1, "{ctx}");
    // The query ranks the package: the billing memories come before lunch.
    let pos = |t: &str| ctx.find(t).unwrap_or(usize::MAX);
    assert!(pos("PostgreSQL for billing") < pos("Lunch order"), "{ctx}");
    assert!(
        pkg["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| (0.0..=1.0).contains(&i["score"].as_f64().unwrap())),
        "scores read as scores: {pkg}"
    );
    // forget by short id.
    let (err, f) = m.text("forget", json!({"ids": [&id[..30]], "confirm": true}));
    assert!(!err && f.starts_with("deleted 1 memory: "), "{f}");
}

#[test]
fn learned_tool_lists_shows_and_refuses_bad_actions() {
    let (s, rw, _) = server();
    let mut m = Mcp {
        s: &s,
        token: rw,
        next: 0,
    };
    handshake(&mut m);
    let (err, text) = m.text("learned", json!({}));
    assert!(!err && text.contains("nothing learned"), "{text}");
    for text in [
        "I prefer small pull requests.",
        "i prefer small pull requests",
    ] {
        let (err, _) = m.text(
            "remember",
            json!({"content": text, "kind": "conversation", "role": "user"}),
        );
        assert!(!err);
    }
    s.shared.engine.learn().unwrap();
    let (err, text) = m.text("learned", json!({"action": "list"}));
    assert!(!err, "{text}");
    assert!(
        text.contains("preference 0.60 proposed (2 evidence): I prefer small pull requests"),
        "{text}"
    );
    let id = text.split_whitespace().nth(1).unwrap().to_string();
    let (err, shown) = m.text("learned", json!({"action": "show", "id": id}));
    assert!(!err, "{shown}");
    assert_eq!(shown.matches("  · ").count(), 2, "{shown}");
    let (err, e) = m.tool("learned", json!({"action": "forget"}));
    assert!(
        err && e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not one of"),
        "{e}"
    );
    let (err, e) = m.tool("learned", json!({"action": "confirm"}));
    assert!(err && e["error"]["field"] == "id", "{e}");
    let (err, text) = m.text("learned", json!({"action": "confirm", "id": id}));
    assert!(!err && text.starts_with("confirmed"), "{text}");
}

#[test]
fn import_from_reads_another_tools_export_inside_the_token() {
    let (s, rw, ro) = server();
    let mut m = Mcp {
        s: &s,
        token: rw,
        next: 0,
    };
    handshake(&mut m);
    let mem0 = json!([
        {"id": "m-1", "memory": "Ana prefers short answers", "user_id": "ana"},
        {"id": "m-2", "memory": "Ana works on billing", "user_id": "ana"}
    ])
    .to_string();
    let before = s.snapshot();
    // mem0's default scope, `user/ana`, is outside the token: refused,
    // nothing written.
    let (err, v) = m.tool("import_from", json!({"from": "mem0", "text": mem0}));
    assert!(err, "{v}");
    assert_eq!(v["error"]["code"], "forbidden", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("user/ana"),
        "{v}"
    );
    let (err, text) = m.text(
        "import_from",
        json!({"from": "mem0", "text": mem0, "scope": "project/acme", "dry_run": true}),
    );
    assert!(!err, "{text}");
    assert!(
        text.starts_with("would import 2 memories from mem0"),
        "{text}"
    );
    assert_eq!(s.snapshot(), before);
    let (err, text) = m.text(
        "import_from",
        json!({"from": "mem0", "text": mem0, "scope": "project/acme"}),
    );
    assert!(!err, "{text}");
    assert!(
        text.contains("imported 2 memories") && text.contains("project/acme"),
        "{text}"
    );
    let (err, v) = m.tool(
        "import_from",
        json!({"from": "mem0", "text": mem0, "scope": "project/acme", "verbose": true}),
    );
    assert!(!err, "{v}");
    assert_eq!((&v["added"], &v["unchanged"]), (&json!(0), &json!(2)));
    let (_, found) = m.text("recall", json!({"query": "short answers"}));
    assert!(found.contains("Ana prefers short answers"), "{found}");
    // Bad input names the field; a read-only token imports nothing.
    let (err, v) = m.tool("import_from", json!({"from": "evernote", "text": "x"}));
    assert!(err);
    assert_eq!(v["error"]["field"], "from", "{v}");
    let mut r = Mcp {
        s: &s,
        token: ro,
        next: 0,
    };
    handshake(&mut r);
    let (err, v) = r.tool(
        "import_from",
        json!({"from": "mem0", "text": mem0, "scope": "project/beta"}),
    );
    assert!(err);
    assert_eq!(v["error"]["code"], "forbidden", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("read access only"),
        "{v}"
    );
}

/// A token that names its scopes makes them the defaults when the server
/// configures none: its one project for writes and contexts, its scopes for
/// reads. A token with two projects still has to say which.
#[test]
fn a_tokens_scopes_are_the_defaults_when_none_are_configured() {
    let (rw, a) = token("agent", &["project/acme", "global"], Access::ReadWrite);
    let (two, b) = token("two", &["project/acme", "project/beta"], Access::ReadWrite);
    let s = Server::start(ServerConfig {
        tokens: vec![a, b],
        ..Default::default()
    });
    let mut m = Mcp {
        s: &s,
        token: rw,
        next: 0,
    };
    handshake(&mut m);
    let (err, t) = m.text(
        "remember",
        json!({"content": "Deploys happen every Tuesday after the stand-up"}),
    );
    assert!(!err && t.contains(" in project/acme ("), "{t}");
    let (err, r) = m.text("recall", json!({"query": "deploys tuesday"}));
    assert!(!err && r.contains("every Tuesday"), "{r}");
    let (err, l) = m.text("list", json!({}));
    assert!(!err && l.contains("every Tuesday"), "{l}");
    let (err, c) = m.tool(
        "context",
        json!({"query": "when do deploys happen", "verbose": true}),
    );
    assert!(!err, "{c}");
    assert!(c["text"].as_str().unwrap().contains("every Tuesday"), "{c}");

    let mut m2 = Mcp {
        s: &s,
        token: two,
        next: 0,
    };
    handshake(&mut m2);
    let before = s.shared.engine.stats().unwrap().memories;
    let (err, e) = m2.tool("remember", json!({"content": "which project?"}));
    assert!(err, "{e}");
    assert_eq!(e["error"]["field"], "scope", "{e}");
    assert_eq!(s.shared.engine.stats().unwrap().memories, before);
    // Reads see every scope the token names.
    let (err, r) = m2.text("recall", json!({"query": "deploys tuesday"}));
    assert!(!err && r.contains("every Tuesday"), "{r}");
    // A view that holds nothing (misspelt, or empty) says so, rather than
    // "nothing relevant".
    let (err, r) = m2.text(
        "recall",
        json!({"query": "deploys tuesday", "view": ["project/beta"]}),
    );
    assert!(!err && r == "no memories in project/beta", "{r}");
    let (err, r) = m2.text(
        "recall",
        json!({"query": "how tall is mount everest", "view": ["project/acme"]}),
    );
    assert!(
        !err && r.starts_with("nothing relevant in project/acme"),
        "{r}"
    );
}

/// The tool list is sent to the model in every agent session: all of it,
/// names, descriptions and schemas, stays under 8,000 characters (it was
/// 19,068), and every tool and argument still says what it is.
#[test]
fn the_tool_list_fits_in_few_tokens() {
    let (s, rw, _) = server();
    let mut m = Mcp {
        s: &s,
        token: rw,
        next: 0,
    };
    handshake(&mut m);
    let tools = m.request("tools/list", json!({}));
    let list = &tools["result"]["tools"];
    let size = list.to_string().len();
    for t in list.as_array().unwrap() {
        eprintln!(
            "{:>12} {:>5}",
            t["name"].as_str().unwrap(),
            t.to_string().len()
        );
        assert!(t["description"].as_str().unwrap().len() > 40, "{t}");
        assert!(t["inputSchema"]["type"] == "object", "{t}");
    }
    eprintln!("tools/list: {size} characters");
    assert!(size <= 8_000, "{size} characters");
    let recall = list
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "recall")
        .unwrap();
    let query = &recall["inputSchema"]["properties"]["query"];
    assert_eq!(query["type"], "string", "{query}");
    let min = &recall["inputSchema"]["properties"]["min_relevance"];
    assert!(
        min["description"].as_str().unwrap().contains("0.3"),
        "{min}"
    );
}
