//! MCP over streamable HTTP at `/mcp`: the real protocol (initialize, list
//! tools, call each tool) with the same tokens as the REST API.

use serde_json::{Value, json};
use strata_server::{Access, McpDefaults, ServerConfig};

use crate::harness::{Server, token};

struct Mcp<'a> {
    s: &'a Server,
    token: String,
    next: u64,
}

impl Mcp<'_> {
    fn post(&mut self, msg: Value) -> (u16, String) {
        self.s.raw(
            "POST",
            "/mcp",
            Some(&self.token),
            Some(msg.to_string().into_bytes()),
            &[("accept", "application/json, text/event-stream")],
        )
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let (status, body) = self
            .post(json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}));
        assert_eq!(status, 200, "{method}: {body}");
        let v: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{method}: {e}: {body}"));
        assert_eq!(v["id"], self.next, "{v}");
        v
    }

    /// Calls a tool; returns (is_error, the JSON in its text content).
    fn tool(&mut self, name: &str, args: Value) -> (bool, Value) {
        let v = self.request("tools/call", json!({"name": name, "arguments": args}));
        let r = &v["result"];
        assert!(r.is_object(), "{name}: {v}");
        let text = r["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{v}"));
        (
            r["isError"] == json!(true),
            serde_json::from_str(text).unwrap(),
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

fn handshake(m: &mut Mcp<'_>) {
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
            "context",
            "forget",
            "get",
            "list_scopes",
            "promote",
            "recall",
            "remember"
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
        json!({"content": "We chose PostgreSQL for billing", "kind": "decision"}),
    );
    assert!(!err, "{mem}");
    assert_eq!(mem["scope"], "project/acme");
    let id = mem["id"].as_str().unwrap().to_string();
    // recall: the view defaults to the project's subtree and global.
    let (err, r) = m.tool("recall", json!({"query": "which database for billing?"}));
    assert!(!err, "{r}");
    assert_eq!(r["results"][0]["id"], id.as_str());
    let (err, c) = m.tool("context", json!({"query": "billing database"}));
    assert!(!err, "{c}");
    assert!(c["text"].as_str().unwrap().contains("PostgreSQL"), "{c}");
    let (err, g) = m.tool("get", json!({"id": id}));
    assert!(
        !err && g["content"] == "We chose PostgreSQL for billing",
        "{g}"
    );
    let (err, sc) = m.tool("list_scopes", json!({}));
    assert!(!err && sc["scopes"][0]["scope"] == "project/acme", "{sc}");
    let (err, p) = m.tool(
        "promote",
        json!({"id": id, "to": "global", "confirm": true}),
    );
    assert!(!err, "{p}");
    assert_eq!(p["scope"], "global");
    let (err, f) = m.tool("forget", json!({"ids": [id, p["id"]], "confirm": true}));
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
    m.tool("remember", json!({"content": "seed"}));
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
