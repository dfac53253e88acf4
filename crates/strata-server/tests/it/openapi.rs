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
    ("post", "/v1/import/foreign"),
    ("get", "/v1/stats"),
    ("get", "/v1/scopes"),
    ("get", "/v1/sessions"),
    ("post", "/v1/sessions"),
    ("get", "/v1/sessions/{id}"),
    ("post", "/v1/sessions/{id}/archive"),
    ("get", "/v1/sessions/{id}/turns"),
    ("post", "/v1/sessions/{id}/compact"),
    ("post", "/v1/learned/list"),
    ("get", "/v1/learned/{id}"),
    ("post", "/v1/learned/{id}/confirm"),
    ("post", "/v1/learned/{id}/reject"),
    ("post", "/v1/learned/run"),
    ("get", "/v1/audit"),
    ("get", "/v1/audit/verify"),
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
        "#/components/schemas/RememberAnswer"
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
    // A remember's answer is the memory, and `dropped` when an ephemeral
    // session let turns go.
    let remembered = properties(schemas, &schemas["RememberAnswer"]);
    assert!(remembered.contains("dropped"), "{remembered:?}");
    assert!(
        props.iter().all(|p| remembered.contains(p)),
        "{remembered:?}"
    );
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
    // What sessions shared, documented though this hit had none.
    assert!(explain.contains("neighbour") && explain.contains("session_best"));
}

/// The schema `schema` resolves to (following a `$ref`, and taking the
/// non-null part of a nullable `oneOf`).
fn resolve(schemas: &serde_json::Value, schema: &serde_json::Value) -> serde_json::Value {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.trim_start_matches("#/components/schemas/");
        assert!(schemas.get(name).is_some(), "{r} is not in the document");
        return resolve(schemas, &schemas[name]);
    }
    if let Some(p) = schema["oneOf"]
        .as_array()
        .and_then(|parts| parts.iter().find(|p| p["type"] != "null"))
    {
        return resolve(schemas, p);
    }
    schema.clone()
}

/// The schema of property `k` of an object schema: its own, or an `allOf`
/// part's.
fn property(
    schemas: &serde_json::Value,
    schema: &serde_json::Value,
    k: &str,
) -> Option<serde_json::Value> {
    let schema = resolve(schemas, schema);
    if let Some(p) = schema["properties"].get(k) {
        return Some(p.clone());
    }
    schema["allOf"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|part| property(schemas, part, k))
}

/// Names a schema requires: its own and its `allOf` parts'.
fn required(schemas: &serde_json::Value, schema: &serde_json::Value) -> BTreeSet<String> {
    let schema = resolve(schemas, schema);
    let mut out: BTreeSet<String> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str().map(String::from))
        .collect();
    for part in schema["allOf"].as_array().into_iter().flatten() {
        out.extend(required(schemas, part));
    }
    out
}

/// Whether `schema` admits `null`: a type list naming it, a nullable
/// `oneOf`, or no type at all.
fn nullable(schemas: &serde_json::Value, schema: &serde_json::Value) -> bool {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.trim_start_matches("#/components/schemas/");
        return nullable(schemas, &schemas[name]);
    }
    if let Some(parts) = schema["oneOf"].as_array() {
        return parts.iter().any(|p| nullable(schemas, p));
    }
    match &schema["type"] {
        serde_json::Value::String(t) => t == "null",
        serde_json::Value::Array(ts) => ts.iter().any(|t| t == "null"),
        _ => schema["allOf"].is_null() && schema["enum"].is_null(),
    }
}

/// Whether `value` is of the JSON Schema type `t`.
fn of_type(t: &str, value: &serde_json::Value) -> bool {
    match t {
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        _ => false,
    }
}

/// Asserts `value` is described by `schema`: its type and enum values, every
/// key of every object a property of its schema, every required property
/// there, and so on down through nested objects and arrays. `at` names the
/// place.
fn described(
    schemas: &serde_json::Value,
    schema: &serde_json::Value,
    value: &serde_json::Value,
    at: &str,
) {
    if let Err(e) = describes(schemas, schema, value, at) {
        panic!("{e}");
    }
}

fn describes(
    schemas: &serde_json::Value,
    schema: &serde_json::Value,
    value: &serde_json::Value,
    at: &str,
) -> Result<(), String> {
    if value.is_null() {
        return match nullable(schemas, schema) {
            true => Ok(()),
            false => Err(format!(
                "{at} is null; its schema does not allow that: {schema}"
            )),
        };
    }
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.trim_start_matches("#/components/schemas/");
        if schemas.get(name).is_none() {
            return Err(format!("{at}: {r} is not in the document"));
        }
        return describes(schemas, &schemas[name], value, at);
    }
    // A value of a `oneOf` matches one of its (non-null) parts.
    if let Some(parts) = schema["oneOf"].as_array() {
        let mut why = Vec::new();
        for p in parts.iter().filter(|p| p["type"] != "null") {
            match describes(schemas, p, value, at) {
                Ok(()) => return Ok(()),
                Err(e) => why.push(e),
            }
        }
        return Err(format!(
            "{at} matches no part of its oneOf: {}",
            why.join("; ")
        ));
    }
    let types: Vec<&str> = match &schema["type"] {
        serde_json::Value::String(t) => vec![t.as_str()],
        serde_json::Value::Array(ts) => ts.iter().filter_map(|t| t.as_str()).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() && !types.iter().any(|t| of_type(t, value)) {
        return Err(format!("{at} is {value}, not of type {types:?}"));
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        return Err(format!("{at} is {value}, not one of {allowed:?}"));
    }
    match value {
        serde_json::Value::Object(o) => {
            // A free-form object (a payload, a map of counts) has no
            // properties to hold keys to.
            let free = schema["properties"].is_null() && schema["allOf"].is_null();
            if free {
                return Ok(());
            }
            for (k, v) in o {
                let p = property(schemas, schema, k)
                    .ok_or_else(|| format!("{at}.{k} is not in the schema: {schema}"))?;
                describes(schemas, &p, v, &format!("{at}.{k}"))?;
            }
            for r in required(schemas, schema) {
                if !o.contains_key(&r) {
                    return Err(format!("{at}: `{r}` is required but missing: {value}"));
                }
            }
            Ok(())
        }
        serde_json::Value::Array(items) if schema["items"].is_object() => {
            for (i, v) in items.iter().enumerate() {
                describes(schemas, &schema["items"], v, &format!("{at}[{i}]"))?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[test]
fn every_typed_answer_matches_its_schema() {
    let s = Server::start_with(ServerConfig::default(), AuthMode::Off);
    let (_, doc) = s.call("GET", "/openapi.json", None, None);
    let schemas = &doc["components"]["schemas"];
    // The answer's schema as the document states it, after checking it is
    // not the untyped `Object`.
    let schema_of = |path: &str, method: &str, status: u16| {
        let sch = &doc["paths"][path][method]["responses"][status.to_string()]["content"]["application/json"]
            ["schema"];
        assert!(sch["$ref"].is_string(), "{method} {path} {status}: {sch}");
        sch.clone()
    };
    let check = |method: &str, path: &str, documented: &str, body: Option<&str>, status: u16| {
        let (got, v) = s.call(method, path, None, body);
        assert_eq!(got, status, "{method} {path}: {v}");
        let sch = schema_of(documented, &method.to_lowercase(), status);
        described(schemas, &sch, &v, &format!("{method} {path}"));
        v
    };
    let m = check(
        "POST",
        "/v1/memories",
        "/v1/memories",
        Some(
            r#"{"content": "deploys go out on tuesdays", "scope": "project/acme", "kind": "decision", "session": "s1"}"#,
        ),
        201,
    );
    let id = m["id"].as_str().unwrap().to_string();
    check(
        "PATCH",
        &format!("/v1/memories/{id}"),
        "/v1/memories/{id}",
        Some(r#"{"content": "deploys go out on wednesdays", "expected_version": 1}"#),
        200,
    );
    let got = check(
        "GET",
        &format!("/v1/memories/{id}?history=true"),
        "/v1/memories/{id}",
        None,
        200,
    );
    assert_eq!(got["history"].as_array().map(Vec::len), Some(1), "{got}");
    check(
        "POST",
        "/v1/recall",
        "/v1/recall",
        Some(r#"{"query": "deploys", "view": ["project/acme"], "explain": true}"#),
        200,
    );
    let listed = check(
        "POST",
        "/v1/list",
        "/v1/list",
        Some(r#"{"view": ["project/acme"]}"#),
        200,
    );
    assert_eq!(
        listed["memories"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    let ctx = check(
        "POST",
        "/v1/context",
        "/v1/context",
        Some(r#"{"project": "acme", "query": "deploys"}"#),
        200,
    );
    assert!(
        !ctx["items"].as_array().unwrap().is_empty() && ctx["text"].is_string(),
        "{ctx}"
    );
    check("GET", "/v1/scopes", "/v1/scopes", None, 200);
    check("GET", "/v1/stats", "/v1/stats", None, 200);
    check("GET", "/healthz", "/healthz", None, 200);
    // The check itself fails on a key its schema does not name, nested
    // too, on a missing required one, on a value of the wrong type, on a
    // word outside an enum and on a null where none is allowed.
    let health = schema_of("/healthz", "get", 200);
    let list = schema_of("/v1/list", "post", 200);
    let bad_memory = |k: &str, v: serde_json::Value| {
        let mut memory = listed["memories"][0].clone();
        memory[k] = v;
        serde_json::json!({"memories": [memory]})
    };
    let wrong = [
        (&health, serde_json::json!({"status": "ok", "extra": 1})),
        (&health, serde_json::json!({})),
        (
            &list,
            serde_json::json!({"memories": [{"id": "x", "nope": 1}]}),
        ),
        (&list, bad_memory("importance", "high".into())),
        (&list, bad_memory("source", "rumour".into())),
        (&list, bad_memory("tags", serde_json::json!([1]))),
        (&list, bad_memory("content", serde_json::Value::Null)),
    ];
    for (schema, bad) in wrong {
        assert!(
            describes(schemas, schema, &bad, "bad").is_err(),
            "{bad} passed as {schema}"
        );
    }
    let session = check(
        "POST",
        "/v1/sessions",
        "/v1/sessions",
        Some(r#"{"scope": "project/acme"}"#),
        201,
    );
    let sid = session["id"].as_str().unwrap().to_string();
    check("GET", "/v1/sessions", "/v1/sessions", None, 200);
    check(
        "GET",
        &format!("/v1/sessions/{sid}"),
        "/v1/sessions/{id}",
        None,
        200,
    );
    check(
        "POST",
        &format!("/v1/sessions/{sid}/archive"),
        "/v1/sessions/{id}/archive",
        None,
        200,
    );
    // A task completed: one memory promoted, none left.
    let t = check(
        "POST",
        "/v1/memories",
        "/v1/memories",
        Some(
            r#"{"content": "the flaky test is the clock", "scope": "task/t1", "kind": "finding", "importance": 0.9}"#,
        ),
        201,
    );
    let report = check(
        "POST",
        "/v1/tasks/t1/complete",
        "/v1/tasks/{task}/complete",
        Some(r#"{"project": "acme", "min_importance": 0.8}"#),
        200,
    );
    assert!(
        report.to_string().contains(t["id"].as_str().unwrap()),
        "{report}"
    );
    // The archive, listed; one memory restored from it.
    let archived = check(
        "POST",
        "/v1/list",
        "/v1/list",
        Some(r#"{"view": ["task/t1"], "archived": true}"#),
        200,
    );
    let a = &archived["memories"][0];
    assert!(a["archived"]["reason"].is_string(), "{archived}");
    let restore = format!(r#"{{"ids": [{}]}}"#, a["id"]);
    check("POST", "/v1/restore", "/v1/restore", Some(&restore), 200);
    check(
        "POST",
        "/v1/forget",
        "/v1/forget",
        Some(r#"{"scope": "task/t1", "dry_run": true}"#),
        200,
    );
    check(
        "DELETE",
        &format!("/v1/memories/{id}"),
        "/v1/memories/{id}",
        None,
        200,
    );
    // The first memory, as it was written, imported again under a new id.
    let mut copy = m.clone();
    copy["id"] = "01890000-0000-7000-8000-000000000001".into();
    let line = format!("{copy}\n");
    let (status, v) = s.call("POST", "/v1/import", None, Some(&line));
    assert_eq!(status, 200, "{v}");
    described(schemas, &schema_of("/v1/import", "post", 200), &v, "import");
}
