//! Bad input: oversized, malformed, wrong types, unknown routes. Each is a
//! clear JSON error and the store is unchanged.

use serde_json::json;
use strata_server::{Access, Limits, ServerConfig};

use crate::harness::{Server, assert_error, token};

fn server() -> (Server, String) {
    let (t, cfg) = token("rw", &["project/acme"], Access::ReadWrite);
    let s = Server::start(ServerConfig {
        tokens: vec![cfg],
        limits: Limits {
            max_body_bytes: 64 << 10,
            max_batch: 5,
            max_results: 100,
            ..Default::default()
        },
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

#[test]
fn sizes_over_the_limits() {
    let (s, t) = server();
    let t = Some(t.as_str());
    let before = s.snapshot();
    let big = json!({"content": "x".repeat(100 << 10), "scope": "project/acme"}).to_string();
    let (status, v) = s.call("POST", "/v1/memories", t, Some(&big));
    assert_eq!(status, 413, "{v}");
    assert_error(&v, "too_large", "max_body_bytes");
    let items: Vec<_> = (0..6)
        .map(|i| json!({"content": format!("m{i}"), "scope": "project/acme"}))
        .collect();
    let v = s.expect(
        413,
        "POST",
        "/v1/memories/batch",
        t,
        json!({"items": items}),
    );
    assert_error(&v, "too_large", "max_batch");
    let v = s.expect(
        400,
        "POST",
        "/v1/recall",
        t,
        json!({"view": ["project/acme"], "limit": 101}),
    );
    assert_error(&v, "invalid", "limit");
    assert_eq!(s.snapshot(), before);
}

#[test]
fn item_over_max_item_bytes_is_413() {
    let (t, cfg) = token("rw", &["project/acme"], Access::ReadWrite);
    let s = Server::start(ServerConfig {
        tokens: vec![cfg],
        ..Default::default()
    });
    let before = s.snapshot();
    // Under the body limit (8 MiB), over the engine's item limit (1 MiB).
    let v = s.expect(
        413,
        "POST",
        "/v1/memories",
        Some(&t),
        json!({"content": "y".repeat(2 << 20), "scope": "project/acme"}),
    );
    assert_error(&v, "too_large", "max_item_bytes");
    assert_eq!(s.snapshot(), before);
}

#[test]
fn malformed_and_mistyped_bodies_name_the_field() {
    let (s, t) = server();
    let t = Some(t.as_str());
    let before = s.snapshot();
    let cases: &[(&str, &str, &str)] = &[
        ("/v1/memories", "{\"content\": \"x\", ", "body"),
        ("/v1/memories", "not json", "body"),
        ("/v1/memories", "{\"content\": \"x\"} trailing", "body"),
        ("/v1/memories", "{\"scope\": \"project/acme\"}", "content"),
        (
            "/v1/memories",
            "{\"content\": 5, \"scope\": \"project/acme\"}",
            "content",
        ),
        (
            "/v1/memories",
            "{\"content\": \"x\", \"scope\": \"project/acme\", \"importance\": \"high\"}",
            "importance",
        ),
        (
            "/v1/memories",
            "{\"content\": \"x\", \"scope\": \"project/acme\", \"importance\": 7}",
            "importance",
        ),
        (
            "/v1/memories",
            "{\"content\": \"x\", \"scope\": \"project/acme\", \"colour\": 1}",
            "colour",
        ),
        (
            "/v1/memories",
            "{\"content\": \"x\", \"scope\": \"Project Acme\"}",
            "scope",
        ),
        ("/v1/memories", "{\"content\": \"x\"}", "scope"),
        (
            "/v1/memories",
            "{\"content\": \"x\", \"scope\": \"project/acme\", \"ttl\": \"soon\"}",
            "ttl",
        ),
        (
            "/v1/memories",
            "{\"content\": \"x\", \"scope\": \"project/acme\", \"role\": \"boss\"}",
            "role",
        ),
        (
            "/v1/memories/batch",
            "{\"items\": [{\"content\": \"x\", \"scope\": \"project/acme\"}, {\"content\": 1}]}",
            "items[1].content",
        ),
        (
            "/v1/recall",
            "{\"view\": [\"project/acme\"], \"limit\": -1}",
            "limit",
        ),
        ("/v1/recall", "{\"view\": \"project/acme\"}", "view"),
        (
            "/v1/recall",
            "{\"view\": [\"project/acme\"], \"filter\": {\"importance\": {\"$gte2\": 1}}}",
            "filter",
        ),
        (
            "/v1/recall",
            "{\"view\": [\"project/acme\"], \"strategy\": \"vibes\"}",
            "strategy",
        ),
        ("/v1/recall", "{}", "view"),
        (
            "/v1/list",
            "{\"view\": [\"project/acme\"], \"order\": \"random\"}",
            "order",
        ),
        ("/v1/forget", "{}", "ids"),
        (
            "/v1/forget",
            "{\"before\": \"yesterday\", \"view\": [\"project/acme\"]}",
            "before",
        ),
        ("/v1/context", "{\"profile\": \"nope\"}", "profile"),
        (
            "/v1/context",
            "{\"render\": \"html\", \"profile\": \"none\"}",
            "render",
        ),
    ];
    for (path, body, field) in cases {
        let (status, v) = s.call("POST", path, t, Some(body));
        assert_eq!(status, 400, "{path} {body}: {v}");
        assert_error(&v, "invalid", field);
    }
    let (status, v) = s.call("GET", "/v1/memories/x?histroy=1", t, None);
    assert_eq!(status, 400, "{v}");
    assert_error(&v, "invalid", "histroy");
    let (status, v) = s.call("POST", "/v1/import?on_conflict=merge", t, Some(""));
    assert_eq!(status, 400, "{v}");
    let (status, v) = s.raw(
        "POST",
        "/v1/import",
        t,
        Some(b"{\"id\": 1}\n".to_vec()),
        &[],
    );
    assert_eq!(status, 400, "{v}");
    assert!(v.contains("line 1"), "{v}");
    assert_eq!(s.snapshot(), before);
}

#[test]
fn unknown_routes_and_methods() {
    let (s, t) = server();
    let (status, v) = s.call("GET", "/v1/nothing", Some(&t), None);
    assert_eq!(status, 404);
    assert_error(&v, "not_found", "/v1/nothing");
    let (status, v) = s.call("PUT", "/v1/recall", Some(&t), Some("{}"));
    assert_eq!(status, 405);
    assert_error(&v, "method_not_allowed", "PUT");
}
