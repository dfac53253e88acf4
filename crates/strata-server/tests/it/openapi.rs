//! The OpenAPI document lists every route the server answers, and only those.

use std::collections::BTreeSet;

use strata_server::{AuthMode, ServerConfig};

use crate::harness::Server;

/// Every (method, path) the router serves, besides `/openapi.json` itself
/// and the MCP endpoint (described by MCP, not OpenAPI).
const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/memories"),
    ("post", "/v1/memories/batch"),
    ("get", "/v1/memories/{id}"),
    ("patch", "/v1/memories/{id}"),
    ("delete", "/v1/memories/{id}"),
    ("post", "/v1/recall"),
    ("post", "/v1/list"),
    ("post", "/v1/forget"),
    ("post", "/v1/promote"),
    ("post", "/v1/restore"),
    ("post", "/v1/tasks/{task}/complete"),
    ("post", "/v1/context"),
    ("get", "/v1/export"),
    ("post", "/v1/import"),
    ("get", "/v1/stats"),
    ("get", "/v1/scopes"),
    ("get", "/v1/sessions"),
    ("post", "/v1/sessions"),
    ("get", "/v1/sessions/{id}"),
    ("post", "/v1/sessions/{id}/archive"),
    ("get", "/healthz"),
    ("get", "/metrics"),
];

#[test]
fn every_route_is_documented_and_served() {
    let s = Server::start_with(ServerConfig::default(), AuthMode::Off);
    let (status, doc) = s.call("GET", "/openapi.json", None, None);
    assert_eq!(status, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "patch", "delete", "put"].contains(&method.as_str()) {
                documented.insert((method.clone(), path.clone()));
            }
        }
    }
    let expected: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(documented, expected);
    // Each documented route is routed (the fallback's 404 and 405 say "route"
    // and "does not take"; handlers' own errors do not).
    for (m, p) in ROUTES {
        let path = p.replace("{id}", "x").replace("{task}", "t");
        let body = (*m != "get" && *m != "delete").then_some("{}");
        let (status, v) = s.call(&m.to_uppercase(), &path, None, body);
        let text = v.to_string();
        assert!(
            !text.contains("no route for") && !text.contains("does not take") && status != 405,
            "{m} {p}: {status} {v}"
        );
    }
    // Request bodies are described by their schemas.
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for s in [
        "RememberBody",
        "RecallBody",
        "ForgetBody",
        "ContextBody",
        "ErrorBody",
    ] {
        assert!(schemas.contains_key(s), "{s}");
    }
    assert!(schemas["RecallBody"]["properties"]["view"].is_object());
}

/// Property names of a schema: its own, those of an `allOf` part, those
/// of a `$ref`erenced schema.
fn properties(schemas: &serde_json::Value, schema: &serde_json::Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.trim_start_matches("#/components/schemas/");
        return properties(schemas, &schemas[name]);
    }
    if let Some(p) = schema["properties"].as_object() {
        out.extend(p.keys().cloned());
    }
    for part in schema["allOf"].as_array().into_iter().flatten() {
        out.extend(properties(schemas, part));
    }
    out
}

#[test]
fn answers_are_described_by_their_schemas() {
    let s = Server::start_with(ServerConfig::default(), AuthMode::Off);
    let (_, doc) = s.call("GET", "/openapi.json", None, None);
    let schemas = &doc["components"]["schemas"];
    let answer = |path: &str, method: &str, status: &str| {
        doc["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]
            ["$ref"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(
        answer("/v1/memories", "post", "201"),
        "#/components/schemas/Memory"
    );
    assert_eq!(
        answer("/v1/recall", "post", "200"),
        "#/components/schemas/RecallAnswer"
    );
    assert_eq!(
        answer("/v1/memories/batch", "post", "201"),
        "#/components/schemas/BatchAnswer"
    );
    let memory = &schemas["Memory"];
    let props = properties(schemas, memory);
    assert_eq!(
        memory["properties"]["created_at"]["format"], "date-time",
        "{memory}"
    );
    // A memory as the server writes it: every field it carries is in the
    // schema, and every field the schema requires is there.
    let (status, m) = s.call(
        "POST",
        "/v1/memories",
        None,
        Some(
            r#"{"content": "the billing queue retries three times", "scope": "project/acme",
                "kind": "decision", "tags": ["ops"], "key": "retries", "payload": {"n": 3}}"#,
        ),
    );
    assert_eq!(status, 201, "{m}");
    for k in m.as_object().unwrap().keys() {
        assert!(props.contains(k), "`{k}` is not in the Memory schema");
    }
    for r in memory["required"].as_array().unwrap() {
        let r = r.as_str().unwrap();
        assert!(m.get(r).is_some(), "`{r}` is required but missing: {m}");
    }
    // A recall result: the memory's fields, its score and its explanation.
    let (status, r) = s.call(
        "POST",
        "/v1/recall",
        None,
        Some(r#"{"query": "billing", "view": ["project/acme"], "explain": true}"#),
    );
    assert_eq!(status, 200, "{r}");
    let hit = &r["results"][0];
    let recalled = properties(schemas, &schemas["Recalled"]);
    for k in hit.as_object().unwrap().keys() {
        assert!(recalled.contains(k), "`{k}` is not in the Recalled schema");
    }
    assert!(recalled.contains("content") && recalled.contains("score"));
    let explain = properties(schemas, &schemas["ScoreParts"]);
    for k in hit["explain"].as_object().unwrap().keys() {
        assert!(explain.contains(k), "`{k}` is not in the ScoreParts schema");
    }
}
