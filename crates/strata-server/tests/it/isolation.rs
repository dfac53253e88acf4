//! A randomized test: several tokens with different scope prefixes run random
//! operations over HTTP and MCP (reads, writes, imports naming other
//! tenants' ids, session calls, logged contexts); no response ever carries
//! a memory or session outside the caller's scopes, no write lands outside
//! them, and what lies outside every token's scopes ends as it began.

use serde_json::{Value, json};
use strata::Scope;
use strata_server::{Access, ServerConfig};

use crate::harness::{Rng, Server, token};

const SCOPES: &[&str] = &[
    "global",
    "project/acme",
    "project/acme/sprint/s1",
    "project/acmex",
    "project/beta",
    "task/t1",
    "session/s1",
];

const WORDS: &[&str] = &[
    "billing", "queue", "retry", "tabs", "deploy", "login", "flaky",
];

/// Every memory-shaped object (`id` + `scope`) anywhere in a response.
fn scopes_in(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            if let (Some(Value::String(_)), Some(Value::String(s))) = (o.get("id"), o.get("scope"))
            {
                out.push(s.clone());
            }
            for x in o.values() {
                scopes_in(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| scopes_in(x, out)),
        _ => {}
    }
}

/// A tool call over MCP (streamable HTTP); the tool's JSON as the body.
fn mcp(s: &Server, token: &str, tool: &str, args: Value) -> (u16, Value) {
    let msg = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}});
    let (status, body) = s.raw(
        "POST",
        "/mcp",
        Some(token),
        Some(msg.to_string().into_bytes()),
        &[("accept", "application/json, text/event-stream")],
    );
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let text = v["result"]["content"][0]["text"].as_str().unwrap_or("null");
    (status, serde_json::from_str(text).unwrap_or(Value::Null))
}

#[test]
fn no_response_carries_a_memory_outside_the_token() {
    let grants: Vec<(&str, Vec<&str>)> = vec![
        ("acme", vec!["project/acme"]),
        ("beta", vec!["project/beta", "task"]),
        ("globalonly", vec!["global"]),
        ("mixed", vec!["project/acme/sprint", "session"]),
    ];
    let mut tokens = Vec::new();
    let mut cfgs = Vec::new();
    for (name, prefixes) in &grants {
        let (t, c) = token(name, prefixes, Access::ReadWrite);
        tokens.push((
            t,
            prefixes
                .iter()
                .map(|p| Scope::parse(p).unwrap())
                .collect::<Vec<_>>(),
        ));
        cfgs.push(c);
    }
    let (admin, c) = token(
        "admin",
        &["global", "project", "task", "session"],
        Access::ReadWrite,
    );
    cfgs.push(c);
    let s = Server::start(ServerConfig {
        tokens: cfgs,
        ..Default::default()
    });
    let mut rng = Rng::new(0x5eed);
    let mut ids = Vec::new();
    for i in 0..120 {
        let scope = *rng.pick(SCOPES);
        let text = format!("{} {} note {i}", rng.pick(WORDS), rng.pick(WORDS));
        let m = s.expect(201, "POST", "/v1/memories", Some(&admin), json!({"content": text, "scope": scope, "key": if i % 7 == 0 { Some(format!("k{}", i % 3)) } else { None }}));
        ids.push(m["id"].as_str().unwrap().to_string());
    }
    // What no token but the admin may touch: memories and a session in
    // `project/acmex`. Random imports name their ids, random session calls
    // their session; at the end they are exactly as they were.
    s.expect(
        201,
        "POST",
        "/v1/memories",
        Some(&admin),
        json!({"content": "acmex's session note", "scope": "project/acmex", "session": "sx"}),
    );
    let untouchable = || {
        let mut out = Vec::new();
        s.shared
            .engine
            .export(
                &strata::Export::user_data(
                    Some(strata::View::parse(&["project/acmex"]).unwrap()),
                    None,
                ),
                &mut out,
                &mut |_| {},
            )
            .unwrap();
        let sx = s.shared.engine.store().get_session("sx").unwrap();
        format!("{}\n{sx:?}", String::from_utf8(out).unwrap())
    };
    let untouched = untouchable();
    let template = s.shared.engine.get(&ids[0]).unwrap().unwrap();
    let sessions = ["s1", "sx", "s2"];
    let mut checked = 0;
    let mut imports_ok = 0;
    for round in 0..600 {
        let (secret, prefixes) = rng.pick(&tokens);
        let t = Some(secret.as_str());
        let view: Vec<String> = (0..1 + rng.below(3))
            .map(|_| {
                // Mostly views a token may use, so reads return memories.
                let s = if rng.below(3) == 0 {
                    rng.pick(SCOPES).to_string()
                } else {
                    rng.pick(prefixes).to_string()
                };
                if rng.below(2) == 0 {
                    format!("{s}/**")
                } else {
                    s
                }
            })
            .collect();
        let (status, v) = match rng.below(15) {
            11 => {
                let mut line = serde_json::to_value(&template).unwrap();
                line["id"] = if rng.below(2) == 0 {
                    json!(rng.pick(&ids))
                } else {
                    json!(format!("01900000-0000-7000-8000-{round:012}"))
                };
                line["scope"] = json!(if rng.below(3) == 0 {
                    rng.pick(SCOPES).to_string()
                } else {
                    rng.pick(prefixes).to_string()
                });
                let text = format!("imported {round}");
                line["content"] = json!(text);
                line["checksum"] = json!(strata::checksum(&text, None));
                line["key"] = Value::Null;
                if rng.below(2) == 0 {
                    line["session"] = json!(rng.pick(&sessions));
                }
                let mode = rng.pick(&["error", "skip", "replace"]);
                let (st, text) = s.raw(
                    "POST",
                    &format!("/v1/import?on_conflict={mode}"),
                    t,
                    Some(format!("{line}\n").into_bytes()),
                    &[("content-type", "application/x-ndjson")],
                );
                imports_ok += usize::from(st == 200);
                (st, serde_json::from_str(&text).unwrap_or(Value::Null))
            }
            12 => {
                let id = rng.pick(&sessions);
                match rng.below(4) {
                    0 => s.call("GET", &format!("/v1/sessions/{id}"), t, None),
                    1 => s.call("POST", &format!("/v1/sessions/{id}/archive"), t, None),
                    2 => s.call("GET", "/v1/sessions", t, None),
                    _ => s.call(
                        "POST",
                        "/v1/forget",
                        t,
                        Some(&json!({"session": id, "dry_run": rng.below(2) == 0}).to_string()),
                    ),
                }
            }
            13 => s.call(
                "POST",
                "/v1/context",
                t,
                Some(
                    &json!({"project": "acme", "task": "t1", "query": rng.pick(WORDS), "log": true})
                        .to_string(),
                ),
            ),
            14 => s.call(
                "POST",
                "/v1/memories",
                t,
                Some(
                    &json!({"content": "in a session", "scope": rng.pick(prefixes).to_string(), "session": rng.pick(&sessions)})
                        .to_string(),
                ),
            ),
            9 => mcp(
                &s,
                secret,
                "recall",
                json!({"query": rng.pick(WORDS), "view": view, "limit": 50}),
            ),
            10 => mcp(
                &s,
                secret,
                "get",
                json!({"id": rng.pick(&ids), "history": true}),
            ),
            0 => s.call(
                "POST",
                "/v1/recall",
                t,
                Some(&json!({"query": rng.pick(WORDS), "view": view, "limit": 50}).to_string()),
            ),
            1 => s.call(
                "POST",
                "/v1/list",
                t,
                Some(
                    &json!({"view": view, "limit": 100, "archived": rng.below(2) == 0}).to_string(),
                ),
            ),
            2 => s.call(
                "GET",
                &format!("/v1/memories/{}?history=true", rng.pick(&ids)),
                t,
                None,
            ),
            3 => s.call(
                "POST",
                "/v1/context",
                t,
                Some(
                    &json!({"project": "acme", "task": "t1", "query": rng.pick(WORDS)}).to_string(),
                ),
            ),
            4 => s.call("GET", "/v1/scopes", t, None),
            5 => {
                let q: Vec<String> = view.iter().map(|v| format!("view={v}")).collect();
                let (st, text) = s.raw("GET", &format!("/v1/export?{}", q.join("&")), t, None, &[]);
                let lines: Vec<Value> = if st == 200 {
                    text.lines()
                        .map(|l| serde_json::from_str(l).unwrap())
                        .collect()
                } else {
                    vec![]
                };
                (st, Value::Array(lines))
            }
            6 => s.call(
                "POST",
                "/v1/promote",
                t,
                Some(&json!({"id": rng.pick(&ids), "to": rng.pick(SCOPES)}).to_string()),
            ),
            7 => s.call(
                "PATCH",
                &format!("/v1/memories/{}", rng.pick(&ids)),
                t,
                Some(&json!({"expected_version": 1, "importance": 0.5}).to_string()),
            ),
            _ => s.call(
                "POST",
                "/v1/memories",
                t,
                Some(&json!({"content": "new", "scope": rng.pick(SCOPES)}).to_string()),
            ),
        };
        assert!(status < 500, "{status} {v}");
        let mut seen = Vec::new();
        scopes_in(&v, &mut seen);
        for sc in seen {
            let sc = Scope::parse(&sc).unwrap();
            assert!(
                prefixes.iter().any(|p| sc.is_within(p)),
                "{sc} leaked to a token for {prefixes:?}: {v}"
            );
            checked += 1;
        }
        if let Some(sc) = v["scopes"].as_array() {
            for x in sc {
                let sc = Scope::parse(x["scope"].as_str().unwrap()).unwrap();
                assert!(
                    prefixes.iter().any(|p| sc.is_within(p)),
                    "{sc} listed for {prefixes:?}"
                );
            }
        }
    }
    assert_eq!(
        untouchable(),
        untouched,
        "a token changed what lies outside every token's scopes"
    );
    assert!(
        imports_ok > 10,
        "too few imports went through ({imports_ok})"
    );
    assert!(
        checked > 500,
        "the test saw too few memories ({checked}) to mean anything"
    );
}
