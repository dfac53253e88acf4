//! `[[secrets]]` rules over HTTP and MCP: a redacted secret comes back as
//! its placeholder, a refused write is a 422 (an MCP tool error) with code
//! `refused` naming the field, the detector and the span, and changes
//! nothing.

use serde_json::{Value, json};
use strata::{SecretAction, SecretRule};
use strata_server::{Access, AuthMode, McpDefaults, ServerConfig};

use crate::harness::{Server, assert_error, token};

const AWS: &str = "AKIAQX7RZ2M4K9WB3TFE";

fn server() -> (Server, String) {
    let (rw, t) = token("agent", &["project"], Access::ReadWrite);
    let s = Server::start_configured(
        ServerConfig {
            tokens: vec![t],
            mcp: McpDefaults {
                project: Some("pay".into()),
                session: None,
            },
            ..Default::default()
        },
        AuthMode::Tokens,
        |c| {
            c.secrets = vec![
                SecretRule::new("*", SecretAction::Redact),
                SecretRule::new("project/pay", SecretAction::Refuse),
            ]
        },
        |_| {},
    );
    (s, rw)
}

#[test]
fn http_redacts_and_refuses() {
    let (s, rw) = server();
    let body = json!({"scope": "project/acme", "content": format!("key {AWS}")}).to_string();
    let (status, m) = s.call("POST", "/v1/memories", Some(&rw), Some(&body));
    assert_eq!(status, 201, "{m}");
    assert_eq!(m["content"], "key [REDACTED:aws_key]");

    let before = s.snapshot();
    let body =
        json!({"scope": "project/pay", "content": "x", "payload": {"card": "4111-1111-1111-1111"}})
            .to_string();
    let (status, e) = s.call("POST", "/v1/memories", Some(&rw), Some(&body));
    assert_eq!(status, 422, "{e}");
    assert_error(&e, "refused", "payload.card");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("card_number") && msg.contains("bytes 0..19"),
        "{msg}"
    );
    assert!(!msg.contains("4111"), "{msg}");

    assert_eq!(s.snapshot(), before);

    // A PATCH's new text is held to the rule of the memory's scope.
    let id = m["id"].as_str().unwrap();
    let body = json!({"content": format!("rotated: {AWS}"), "expected_version": 1}).to_string();
    let (status, p) = s.call(
        "PATCH",
        &format!("/v1/memories/{id}"),
        Some(&rw),
        Some(&body),
    );
    assert_eq!(status, 200, "{p}");
    assert_eq!(p["content"], "rotated: [REDACTED:aws_key]");
}

#[test]
fn mcp_tool_errors_say_refused() {
    let (s, rw) = server();
    let before = s.snapshot();
    let post = |msg: Value| {
        s.raw(
            "POST",
            "/mcp",
            Some(&rw),
            Some(msg.to_string().into_bytes()),
            &[("accept", "application/json, text/event-stream")],
        )
    };
    let (status, _) = post(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}}}),
    );
    assert_eq!(status, 200);
    post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let (status, body) = post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "remember", "arguments": {"content": format!("the vault key is {AWS}")}}}));
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["result"]["isError"], true, "{v}");
    let err: Value =
        serde_json::from_str(v["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(err["error"]["code"], "refused", "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("aws_key"),
        "{err}"
    );
    assert_eq!(s.snapshot(), before);
}
