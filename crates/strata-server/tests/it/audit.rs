//! The audit trail over real HTTP and MCP: each operation recorded with its
//! token's name, scopes and ids, no content or query text in the trail or
//! the file after a forget, refusals recorded, the admin-only routes and
//! tool, bad filters refused with nothing changed, and tampering found.

use serde_json::{Value, json};
use strata_server::{Access, AuthMode, McpDefaults, ServerConfig};

use crate::harness::{Server, assert_error, token};
use crate::mcp_http::{Mcp, handshake};

const SECRET: &str = "the staging password is zebra-quokka-7731";
const QUERY: &str = "which marmoset-vault holds it";

/// A server recording calls; tokens `writer` (read/write on acme, tasks,
/// sessions), `reader` (read on acme) and `ops` (admin).
fn server() -> (Server, String, String, String) {
    let (w, a) = token(
        "writer",
        &["project/acme", "task/t-1", "session/s1"],
        Access::ReadWrite,
    );
    let (r, b) = token("reader", &["project/acme"], Access::Read);
    let (o, c) = token("ops", &["global"], Access::Admin);
    let cfg = ServerConfig {
        tokens: vec![a, b, c],
        mcp: McpDefaults {
            project: Some("acme".into()),
            session: None,
        },
        ..Default::default()
    };
    let s = Server::start_configured(cfg, AuthMode::Tokens, |c| c.audit.enabled = true, |_| {});
    (s, w, r, o)
}

fn entries(s: &Server, admin: &str, query: &str) -> Vec<Value> {
    let v = s.expect(
        200,
        "GET",
        &format!("/v1/audit{query}"),
        Some(admin),
        Value::Null,
    );
    assert_eq!(v["enabled"], true);
    v["entries"].as_array().unwrap().clone()
}

fn ops_of(es: &[Value]) -> Vec<String> {
    es.iter()
        .map(|e| e["op"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn every_operation_is_recorded_with_its_token_scopes_and_ids() {
    let (s, w, r, o) = server();
    let t = Some(w.as_str());
    let m = s.expect(
        201,
        "POST",
        "/v1/memories",
        t,
        json!({"content": SECRET, "scope": "project/acme"}),
    );
    let id = m["id"].as_str().unwrap().to_string();
    let b = s.expect(
        201,
        "POST",
        "/v1/memories/batch",
        t,
        json!({"items": [{"content": "Retries need idempotency keys", "scope": "task/t-1", "kind": "finding"},
                         {"content": "batch two", "scope": "project/acme"}]}),
    );
    let batch_ids: Vec<String> = b["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    s.expect(200, "GET", &format!("/v1/memories/{id}"), t, Value::Null);
    let up = s.expect(
        200,
        "PATCH",
        &format!("/v1/memories/{id}"),
        t,
        json!({"content": format!("{SECRET} (rotated)"), "expected_version": 1}),
    );
    assert_eq!(up["version"], 2);
    let hits = s.expect(
        200,
        "POST",
        "/v1/recall",
        t,
        json!({"query": QUERY, "view": ["project/acme/**"]}),
    );
    let recalled = hits["results"].as_array().unwrap().len();
    s.expect(
        200,
        "POST",
        "/v1/list",
        Some(&r),
        json!({"view": ["project/acme"]}),
    );
    s.expect(
        200,
        "POST",
        "/v1/context",
        t,
        json!({"profile": "none", "query": QUERY}),
    );
    let p = s.expect(
        201,
        "POST",
        "/v1/promote",
        t,
        json!({"id": batch_ids[1], "to": "project/acme/notes"}),
    );
    s.expect(
        200,
        "POST",
        "/v1/tasks/t-1/complete",
        t,
        json!({"project": "acme", "promote": []}),
    );
    s.expect(
        200,
        "POST",
        "/v1/restore",
        t,
        json!({"ids": [batch_ids[0]]}),
    );
    s.expect(201, "POST", "/v1/sessions", t, json!({"id": "s1"}));
    s.expect(200, "POST", "/v1/sessions/s1/archive", t, Value::Null);
    let (status, jsonl) = s.raw("GET", "/v1/export?view=project/acme", t, None, &[]);
    assert_eq!(status, 200);
    let exported = jsonl.lines().count();
    let (status, body) = s.raw(
        "POST",
        "/v1/import?on_conflict=skip",
        t,
        Some(jsonl.into_bytes()),
        &[],
    );
    assert_eq!(status, 200, "{body}");
    let f = s.expect(200, "POST", "/v1/forget", t, json!({"ids": [id]}));
    assert_eq!(f["deleted"], 1);
    s.expect(
        200,
        "DELETE",
        &format!("/v1/memories/{}", p["id"].as_str().unwrap()),
        t,
        Value::Null,
    );
    // A refusal: the reader may not write.
    s.expect(
        403,
        "POST",
        "/v1/memories",
        Some(&r),
        json!({"content": "nope", "scope": "project/acme"}),
    );

    let es = entries(&s, &o, "?limit=1000");
    let mut ops = ops_of(&es);
    ops.reverse();
    assert_eq!(
        ops,
        [
            "remember",
            "remember",
            "get",
            "update",
            "recall",
            "list",
            "context",
            "promote",
            "complete_task",
            "restore",
            "session_create",
            "session_archive",
            "export",
            "import",
            "forget",
            "forget",
            "remember",
        ]
    );
    let by_op = |op: &str| -> Vec<&Value> { es.iter().filter(|e| e["op"] == op).collect() };
    let first = by_op("remember").pop().unwrap();
    assert_eq!(first["actor"], "writer");
    assert_eq!(first["scopes"], json!(["project/acme"]));
    assert_eq!(first["ids"], json!([id]));
    assert_eq!(first["outcome"], "ok");
    let batch = &by_op("remember")[1];
    assert_eq!(batch["ids"], json!(batch_ids));
    assert_eq!(batch["scopes"], json!(["task/t-1", "project/acme"]));
    assert_eq!(by_op("update")[0]["ids"], json!([id]));
    let recall = by_op("recall")[0];
    assert_eq!(recall["scopes"], json!(["project/acme/**"]));
    assert_eq!(recall["count"], recalled as u64);
    assert_eq!(recall["ids"], json!([]), "reads record counts, not ids");
    assert_eq!(by_op("list")[0]["actor"], "reader");
    assert_eq!(by_op("export")[0]["count"], exported as u64);
    let forgets = by_op("forget");
    assert_eq!(forgets[1]["ids"], json!([id]));
    assert_eq!(forgets[0]["ids"], json!([p["id"]]));
    let refused = by_op("remember")[0];
    assert_eq!(
        (refused["actor"].as_str(), refused["outcome"].as_str()),
        (Some("reader"), Some("forbidden"))
    );
    // Sequence numbers run without gaps, and the chain checks out.
    let seqs: Vec<u64> = es.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).rev().collect::<Vec<_>>());
    let v = s.expect(200, "GET", "/v1/audit/verify", Some(&o), Value::Null);
    assert_eq!(v["ok"], true, "{v}");

    // No content and no query text: not in the trail's answers, and not
    // anywhere in the store's files once the memory is forgotten.
    let all = s
        .expect(200, "GET", "/v1/audit?limit=10000", Some(&o), Value::Null)
        .to_string();
    for needle in ["zebra-quokka", "marmoset-vault", "idempotency"] {
        assert!(!all.contains(needle), "`{needle}` in the audit trail");
    }
    // Written back from the WAL, as the next checkpoint would.
    strata::SqliteStore::open(s.db_path(), Default::default())
        .unwrap()
        .checkpoint()
        .unwrap();
    let dir = s.db_path().parent().unwrap().to_path_buf();
    let mut bytes = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            bytes.extend(std::fs::read(&p).unwrap());
        }
    }
    for needle in [&b"zebra-quokka"[..], b"marmoset-vault"] {
        assert!(
            !bytes.windows(needle.len()).any(|w| w == needle),
            "{} in the store's files",
            String::from_utf8_lossy(needle)
        );
    }
}

#[test]
fn only_an_admin_reads_the_trail_and_bad_filters_change_nothing() {
    let (s, w, _r, o) = server();
    let t = Some(w.as_str());
    s.expect(
        201,
        "POST",
        "/v1/memories",
        t,
        json!({"content": "a", "scope": "project/acme"}),
    );
    let v = s.expect(403, "GET", "/v1/audit", t, Value::Null);
    assert_error(&v, "forbidden", "admin token");
    let v = s.expect(403, "GET", "/v1/audit/verify", t, Value::Null);
    assert_error(&v, "forbidden", "admin token");
    // Both refusals are on the record.
    let es = entries(&s, &o, "?op=audit_query");
    // (the admin's own read is recorded after it answers)
    assert_eq!(es.len(), 1, "{es:?}");
    assert_eq!(
        (es[0]["actor"].as_str(), es[0]["outcome"].as_str()),
        (Some("writer"), Some("forbidden"))
    );
    let before = entries(&s, &o, "?limit=10000").len();
    for (q, field) in [
        ("?limit=0", "limit"),
        ("?limit=10001", "limit"),
        ("?limit=ten", "limit"),
        ("?since=yesterday", "since"),
        ("?until=2026-13-45", "until"),
        ("?since=2026-02-01&until=2026-01-01", "until"),
        ("?scope=project//acme", "scope"),
        ("?before_seq=-1", "before_seq"),
        ("?colour=red", "colour"),
    ] {
        let v = s.expect(400, "GET", &format!("/v1/audit{q}"), Some(&o), Value::Null);
        assert_eq!(v["error"]["field"], field, "{q}: {v}");
    }
    let v = s.expect(400, "GET", "/v1/audit/verify?x=1", Some(&o), Value::Null);
    assert_eq!(v["error"]["field"], "x", "{v}");
    // Nothing was recorded by the refused filters: one more entry, the
    // read just before this one.
    assert_eq!(entries(&s, &o, "?limit=10000").len(), before + 1);

    // The filters.
    let es = entries(&s, &o, "?actor=writer&op=remember");
    assert_eq!(es.len(), 1);
    let es = entries(&s, &o, "?scope=project/acme&op=remember");
    assert_eq!(es.len(), 1);
    assert!(entries(&s, &o, "?scope=project/beta&op=remember").is_empty());
    let at = es[0]["at"].as_str().unwrap().to_string();
    assert_eq!(
        entries(&s, &o, &format!("?op=remember&since={at}")).len(),
        1
    );
    assert!(entries(&s, &o, &format!("?op=remember&until={at}")).is_empty());
    let es = entries(&s, &o, "?limit=2");
    assert_eq!(es.len(), 2);
    let older = entries(
        &s,
        &o,
        &format!("?limit=2&before_seq={}", es[1]["seq"].as_u64().unwrap()),
    );
    assert_eq!(
        older[0]["seq"].as_u64().unwrap(),
        es[1]["seq"].as_u64().unwrap() - 1
    );
}

#[test]
fn a_changed_or_deleted_row_is_named_by_verify() {
    let (s, w, _r, o) = server();
    for i in 0..5 {
        s.expect(
            201,
            "POST",
            "/v1/memories",
            Some(&w),
            json!({"content": format!("note {i}"), "scope": "project/acme"}),
        );
    }
    let v = s.expect(200, "GET", "/v1/audit/verify", Some(&o), Value::Null);
    assert_eq!(v["ok"], true, "{v}");
    let c = rusqlite::Connection::open(s.db_path()).unwrap();
    c.execute("UPDATE audit SET count = 7 WHERE seq = 3", [])
        .unwrap();
    let v = s.expect(200, "GET", "/v1/audit/verify", Some(&o), Value::Null);
    assert_eq!(
        (v["ok"].as_bool(), v["first_bad"].as_u64()),
        (Some(false), Some(3)),
        "{v}"
    );
    c.execute("UPDATE audit SET count = 1 WHERE seq = 3", [])
        .unwrap();
    c.execute("DELETE FROM audit WHERE seq = 2", []).unwrap();
    let v = s.expect(200, "GET", "/v1/audit/verify", Some(&o), Value::Null);
    assert_eq!(v["first_bad"], 2, "{v}");
    assert!(v["problem"].as_str().unwrap().contains("missing"), "{v}");
}

#[test]
fn mcp_calls_are_recorded_and_the_audit_tool_is_for_admins() {
    let (s, w, _r, o) = server();
    let mut m = Mcp {
        s: &s,
        token: w,
        next: 0,
    };
    handshake(&mut m);
    let (err, _) = m.text("remember", json!({"content": SECRET}));
    assert!(!err);
    let (err, _) = m.text(
        "recall",
        json!({"query": QUERY, "view": ["project/acme/**"]}),
    );
    assert!(!err);
    let (err, v) = m.tool("audit", json!({}));
    assert!(err);
    assert_eq!(v["error"]["code"], "forbidden", "{v}");

    let mut admin = Mcp {
        s: &s,
        token: o,
        next: 0,
    };
    handshake(&mut admin);
    let (err, text) = admin.text("audit", json!({"actor": "writer"}));
    assert!(!err, "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].contains(" writer audit_query ") && lines[0].contains("forbidden"),
        "{text}"
    );
    assert!(
        lines[1].contains(" writer recall [project/acme/**"),
        "{text}"
    );
    assert!(
        lines[2].contains(" writer remember [project/acme] n=1 ok ids "),
        "{text}"
    );
    assert!(
        !text.contains("zebra") && !text.contains("marmoset"),
        "{text}"
    );
    let (err, v) = admin.tool("audit", json!({"action": "verify"}));
    assert!(!err, "{v}");
    assert_eq!(v["ok"], true, "{v}");
    let (err, v) = admin.tool("audit", json!({"limit": 0}));
    assert!(err);
    assert_eq!(v["error"]["field"], "limit", "{v}");
}

#[test]
fn without_authentication_the_actor_is_anonymous_and_off_records_nothing() {
    let s = Server::start_configured(
        // Recall threads asked for, whatever the machine's CPUs: auditing
        // still keeps recalls off them.
        ServerConfig {
            recall_threads: 2,
            ..Default::default()
        },
        AuthMode::Off,
        |c| c.audit.enabled = true,
        |_| {},
    );
    s.expect(
        201,
        "POST",
        "/v1/memories",
        None,
        json!({"content": "x", "scope": "project/acme"}),
    );
    let v = s.expect(200, "GET", "/v1/audit?op=remember", None, Value::Null);
    assert_eq!(v["entries"][0]["actor"], "anonymous", "{v}");
    // A recorded recall writes: it never runs on the event loop.
    assert!(!s.shared.inline_recall);
    assert_eq!(s.shared.recall_threads(), None);

    let (o, c) = token("ops", &["global"], Access::Admin);
    let off = Server::start(ServerConfig {
        tokens: vec![c],
        ..Default::default()
    });
    off.expect(
        201,
        "POST",
        "/v1/memories",
        Some(&o),
        json!({"content": "x", "scope": "global"}),
    );
    let v = off.expect(200, "GET", "/v1/audit", Some(&o), Value::Null);
    assert_eq!(v["enabled"], false);
    assert_eq!(v["entries"], json!([]));
}

#[test]
fn imports_from_other_tools_and_learned_reads_are_recorded() {
    let (s, w, _r, o) = server();
    let t = Some(w.as_str());
    let r = s.expect(
        200,
        "POST",
        "/v1/import/foreign",
        t,
        json!({"from": "markdown", "name": "notes", "scope": "project/acme",
               "files": [{"path": "deploys.md", "text": "# Deploys\n\nOn Tuesdays, after the freeze."}]}),
    );
    let added = r["added"].as_u64().unwrap();
    assert!(added >= 1, "{r}");
    s.expect(
        200,
        "POST",
        "/v1/learned/list",
        t,
        json!({"view": ["project/acme/**"]}),
    );
    let es = entries(&s, &o, "?actor=writer");
    assert_eq!(ops_of(&es), ["learned_list", "import_foreign"]);
    assert_eq!(es[1]["count"], added);
    assert_eq!(es[1]["scopes"], json!(["project/acme"]));
    assert_eq!(es[0]["scopes"], json!(["project/acme/**"]));
    let all = json!(es).to_string();
    assert!(!all.contains("Tuesdays"), "{all}");
}
