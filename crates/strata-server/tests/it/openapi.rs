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
