//! Error hygiene: a request over a limit is a 400 that names the field and
//! the limit; a failure of the storage answers a generic message and a
//! request id over HTTP and MCP, never SQL, a table or a file path.

use serde_json::{Value, json};
use strata_server::{Access, ServerConfig};

use crate::harness::{Server, assert_error, token};

fn server() -> (Server, String) {
    let (t, cfg) = token("rw", &["project/acme"], Access::ReadWrite);
    let s = Server::start(ServerConfig {
        tokens: vec![cfg],
        ..Default::default()
    });
    s.expect(
        201,
        "POST",
        "/v1/memories",
        Some(&t),
        json!({"content": "seed", "scope": "project/acme"}),
    );
    (s, t)
}

/// Asserts that an error body says nothing of the server's insides.
fn assert_no_internals(v: &Value, s: &Server) {
    let text = v.to_string();
    let dir = s.db_path().parent().unwrap().display().to_string();
    for leak in ["SELECT", "FROM", "no such table", "archive", "sqlite", &dir] {
        assert!(!text.contains(leak), "`{leak}` in {text}");
    }
}

/// Calls an MCP tool after the handshake; returns its text.
fn mcp_tool(s: &Server, token: &str, name: &str, args: Value) -> String {
    let post = |msg: Value| {
        s.raw(
            "POST",
            "/mcp",
            Some(token),
            Some(msg.to_string().into_bytes()),
            &[("accept", "application/json, text/event-stream")],
        )
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}}});
    assert_eq!(post(init).0, 200);
    post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let (status, body) = post(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": args}}),
    );
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["result"]["isError"], true, "{v}");
    v["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn an_in_list_of_100000_values_is_400_naming_the_field_and_the_limit() {
    let (s, t) = server();
    let before = s.snapshot();
    let many: Vec<String> = (0..100_000).map(|i| format!("k{i}")).collect();
    for route in ["/v1/recall", "/v1/list"] {
        let body = json!({"view": ["project/acme"], "filter": {"kind": {"$in": many}}});
        let v = s.expect(400, "POST", route, Some(&t), body);
        assert_error(&v, "invalid", "`$in` on `kind`: 100000 values");
        assert_error(&v, "invalid", "limit of 4096");
        assert_eq!(v["error"]["field"], "filter", "{v}");
        assert_no_internals(&v, &s);
    }
    // Numbers, as the report sent them: refused for their count first.
    let numbers: Vec<u32> = (0..100_000).collect();
    let v = s.expect(
        400,
        "POST",
        "/v1/forget",
        Some(&t),
        json!({"view": ["project/acme"], "filter": {"kind": {"$in": numbers}}, "confirm": true}),
    );
    assert_error(&v, "invalid", "limit of 4096");
    let text = mcp_tool(
        &s,
        &t,
        "recall",
        json!({"view": ["project/acme"], "filter": {"kind": {"$in": many}}}),
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_error(&v, "invalid", "limit of 4096");
    assert_eq!(s.snapshot(), before);
}

#[test]
fn a_storage_failure_answers_a_request_id_and_no_sql_or_path() {
    let (s, t) = server();
    // Break the store under the running server: the next statement that
    // reads the archive fails inside SQLite, with SQL in its message.
    let db = rusqlite::Connection::open(s.db_path()).unwrap();
    db.execute_batch("DROP TABLE archive").unwrap();
    let v = s.expect(500, "GET", "/v1/scopes", Some(&t), Value::Null);
    assert_eq!(v["error"]["code"], "storage", "{v}");
    let id = v["error"]["request_id"].as_str().unwrap();
    assert_eq!(id.len(), 32, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains(id), "{v}");
    assert_no_internals(&v, &s);
    let text = mcp_tool(&s, &t, "list_scopes", json!({}));
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["code"], "storage", "{v}");
    assert!(v["error"]["request_id"].is_string(), "{v}");
    assert_no_internals(&v, &s);
    // Every answer gets its own id.
    let again = s.expect(500, "GET", "/v1/scopes", Some(&t), Value::Null);
    assert_ne!(again["error"]["request_id"], id, "{again}");
}
