//! Every route does what the library does, over HTTP.

use serde_json::{Value, json};
use strata_server::{Access, ServerConfig};

use crate::harness::{Server, assert_error, token};

fn server() -> (Server, String) {
    let (t, cfg) = token(
        "rw",
        &["project/acme", "task", "session"],
        Access::ReadWrite,
    );
    let s = Server::start(ServerConfig {
        tokens: vec![cfg],
        ..Default::default()
    });
    (s, t)
}

#[test]
fn memories_remember_get_patch_delete() {
    let (s, t) = server();
    let t = Some(t.as_str());
    let m = s.expect(
        201,
        "POST",
        "/v1/memories",
        t,
        json!({
            "content": "We chose PostgreSQL for billing", "scope": "project/acme",
            "kind": "decision", "tags": ["db"], "key": "billing-db"
        }),
    );
    let id = m["id"].as_str().unwrap();
    assert_eq!(m["version"], 1);
    let got = s.expect(200, "GET", &format!("/v1/memories/{id}"), t, Value::Null);
    assert_eq!(got["content"], "We chose PostgreSQL for billing");

    let patched = s.expect(
        200,
        "PATCH",
        &format!("/v1/memories/{id}"),
        t,
        json!({"expected_version": 1, "importance": 0.95, "key": null}),
    );
    assert_eq!(patched["version"], 2);
    assert!(patched.get("key").is_none(), "{patched}");
    // A stale version is a conflict and changes nothing.
    let before = s.snapshot();
    let v = s.expect(
        409,
        "PATCH",
        &format!("/v1/memories/{id}"),
        t,
        json!({"expected_version": 1, "content": "MySQL"}),
    );
    assert_error(&v, "conflict", "expected_version");
    assert_eq!(s.snapshot(), before);

    let h = s.expect(
        200,
        "GET",
        &format!("/v1/memories/{id}?history=true"),
        t,
        Value::Null,
    );
    assert_eq!(h["history"].as_array().unwrap().len(), 1);

    let r = s.expect(200, "DELETE", &format!("/v1/memories/{id}"), t, Value::Null);
    assert_eq!(r["deleted"], 1);
    let v = s.expect(404, "GET", &format!("/v1/memories/{id}"), t, Value::Null);
    assert_error(&v, "not_found", id);
}

#[test]
fn batch_recall_list_promote_forget() {
    let (s, t) = server();
    let t = Some(t.as_str());
    let items: Vec<Value> = (0..20)
        .map(|i| json!({"content": format!("note {i} about the billing queue"), "scope": "project/acme/sprint/s1", "importance": 0.5}))
        .collect();
    let b = s.expect(
        201,
        "POST",
        "/v1/memories/batch",
        t,
        json!({"items": items}),
    );
    assert_eq!(b["memories"].as_array().unwrap().len(), 20);

    let r = s.expect(
        200,
        "POST",
        "/v1/recall",
        t,
        json!({
            "query": "billing queue", "view": ["project/acme/**"], "limit": 5, "explain": true,
            "strategy": "relevance", "filter": {"importance": {"$gte": 0.5}}
        }),
    );
    let hits = r["results"].as_array().unwrap();
    assert_eq!(hits.len(), 5);
    assert!(hits[0]["explain"].is_object());

    let l = s.expect(
        200,
        "POST",
        "/v1/list",
        t,
        json!({"view": ["project/acme/sprint/s1"], "order": "oldest", "limit": 3, "offset": 1}),
    );
    let l = l["memories"].as_array().unwrap();
    assert_eq!(l[0]["content"], "note 1 about the billing queue");

    let id = l[0]["id"].as_str().unwrap();
    let p = s.expect(
        201,
        "POST",
        "/v1/promote",
        t,
        json!({"id": id, "to": "project/acme"}),
    );
    assert_eq!(p["scope"], "project/acme");
    assert_eq!(p["provenance"]["from_id"], id);

    let dry = s.expect(
        200,
        "POST",
        "/v1/forget",
        t,
        json!({"view": ["project/acme/sprint/s1"], "filter": {}, "dry_run": true}),
    );
    assert_eq!(dry["ids"].as_array().unwrap().len(), 20);
    assert_eq!(s.shared.engine.stats().unwrap().memories, 21);
    let f = s.expect(
        200,
        "POST",
        "/v1/forget",
        t,
        json!({"scope": "project/acme/sprint/s1"}),
    );
    assert_eq!(f["deleted"], 20);
    let f = s.expect(200, "POST", "/v1/forget", t, json!({"ids": [p["id"]]}));
    assert_eq!(f["deleted"], 1);
    assert_eq!(s.shared.engine.stats().unwrap().memories, 0);
}

#[test]
fn tasks_context_sessions_restore() {
    let (s, t) = server();
    let t = Some(t.as_str());
    let keep = s.expect(
        201,
        "POST",
        "/v1/memories",
        t,
        json!({"content": "Retries need idempotency keys", "scope": "task/t-1", "kind": "finding"}),
    );
    s.expect(
        201,
        "POST",
        "/v1/memories",
        t,
        json!({"content": "scratch", "scope": "task/t-1"}),
    );
    // The project's scope where its name belongs: a 400 naming the field,
    // and the task untouched.
    let v = s.expect(
        400,
        "POST",
        "/v1/tasks/t-1/complete",
        t,
        json!({"project": "project/acme", "promote": [keep["id"]]}),
    );
    assert_error(&v, "invalid", "acme");
    assert_eq!(v["error"]["field"], "project", "{v}");
    let listed = s.expect(200, "POST", "/v1/list", t, json!({"view": ["task/t-1"]}));
    assert_eq!(listed["memories"].as_array().unwrap().len(), 2, "{listed}");
    let r = s.expect(
        200,
        "POST",
        "/v1/tasks/t-1/complete",
        t,
        json!({"project": "acme", "promote": [keep["id"]]}),
    );
    assert_eq!(r["archived"], 2);
    assert_eq!(r["promoted"].as_array().unwrap().len(), 1);

    let c = s.expect(200, "POST", "/v1/context", t, json!({"profile": "none"}));
    assert_eq!(c["items"].as_array().unwrap().len(), 0);
    // The built-in profile reads `global`, which this token may not see.
    let v = s.expect(
        403,
        "POST",
        "/v1/context",
        t,
        json!({"project": "acme", "query": "retries"}),
    );
    assert_error(&v, "forbidden", "global");

    let archived = s.expect(
        200,
        "POST",
        "/v1/list",
        t,
        json!({"view": ["task/t-1"], "archived": true}),
    );
    let ids: Vec<Value> = archived["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].clone())
        .collect();
    assert_eq!(ids.len(), 2);
    let r = s.expect(200, "POST", "/v1/restore", t, json!({"ids": ids}));
    assert_eq!(r["restored"], 2);

    let sess = s.expect(201, "POST", "/v1/sessions", t, json!({"id": "s1"}));
    assert_eq!(sess["scope"], "session/s1");
    s.expect(
        201,
        "POST",
        "/v1/memories",
        t,
        json!({"content": "hello", "scope": "session/s1", "session": "s1", "role": "user"}),
    );
    let m = s.expect(200, "GET", "/v1/sessions/s1", t, Value::Null);
    assert_eq!(m["memories"], 1);
    let l = s.expect(200, "GET", "/v1/sessions", t, Value::Null);
    assert_eq!(l["sessions"].as_array().unwrap().len(), 1);
    let a = s.expect(200, "POST", "/v1/sessions/s1/archive", t, Value::Null);
    assert!(a["archived_at"].is_string());

    let sc = s.expect(200, "GET", "/v1/scopes", t, Value::Null);
    assert!(!sc["scopes"].as_array().unwrap().is_empty());
    let st = s.expect(200, "GET", "/v1/stats", t, Value::Null);
    assert!(st["memories"].as_u64().unwrap() >= 3, "{st}");
    assert!(
        st.get("store").is_none(),
        "store-wide figures are for unrestricted callers: {st}"
    );
}

#[test]
fn context_inside_the_token() {
    let (t, cfg) = token("rw", &["project/acme", "global"], Access::ReadWrite);
    let s = Server::start(ServerConfig {
        tokens: vec![cfg],
        ..Default::default()
    });
    let t = Some(t.as_str());
    s.expect(201, "POST", "/v1/memories", t, json!({"content": "Deploys go out on Tuesdays", "scope": "project/acme", "kind": "convention"}));
    let c = s.expect(
        200,
        "POST",
        "/v1/context",
        t,
        json!({"project": "acme", "query": "deploys"}),
    );
    assert!(c["text"].as_str().unwrap().contains("Tuesdays"), "{c}");
    assert_eq!(c["items"].as_array().unwrap().len(), 1);
}

#[test]
fn export_streams_and_import_round_trips() {
    let (s, t) = server();
    let tk = Some(t.as_str());
    let items: Vec<Value> = (0..300)
        .map(|i| json!({"content": format!("memory {i} {}", "x".repeat(300)), "scope": "project/acme"}))
        .collect();
    s.expect(
        201,
        "POST",
        "/v1/memories/batch",
        tk,
        json!({"items": items}),
    );
    let (status, jsonl) = s.raw("GET", "/v1/export?view=project/acme", tk, None, &[]);
    assert_eq!(status, 200);
    assert_eq!(jsonl.lines().count(), 300);
    // Without a view a token limited to scopes may not export.
    let (status, body) = s.call("GET", "/v1/export", tk, None);
    assert_eq!(status, 400, "{body}");

    let (t2, cfg) = token("rw", &["project/acme"], Access::ReadWrite);
    let other = Server::start(ServerConfig {
        tokens: vec![cfg],
        ..Default::default()
    });
    let (status, body) = other.raw(
        "POST",
        "/v1/import",
        Some(&t2),
        Some(jsonl.clone().into_bytes()),
        &[],
    );
    assert_eq!(status, 200, "{body}");
    let counts: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(counts["imported"], 300);
    let (_, again) = other.raw("GET", "/v1/export?view=project/acme", Some(&t2), None, &[]);
    assert_eq!(again, jsonl);
    // A second import conflicts and changes nothing; `skip` skips.
    let before = other.snapshot();
    let (status, body) = other.raw(
        "POST",
        "/v1/import",
        Some(&t2),
        Some(jsonl.clone().into_bytes()),
        &[],
    );
    assert_eq!(status, 409, "{body}");
    assert_eq!(other.snapshot(), before);
    let (status, body) = other.raw(
        "POST",
        "/v1/import?on_conflict=skip",
        Some(&t2),
        Some(jsonl.into_bytes()),
        &[],
    );
    assert_eq!(status, 200, "{body}");
}

#[test]
fn health_and_metrics() {
    let (s, t) = server();
    let (status, v) = s.call("GET", "/healthz", None, None);
    assert_eq!((status, v["status"].as_str()), (200, Some("ok")));
    s.expect(
        201,
        "POST",
        "/v1/memories",
        Some(&t),
        json!({"content": "x", "scope": "project/acme"}),
    );
    s.expect(400, "POST", "/v1/recall", Some(&t), json!({"view": []}));
    s.expect(
        200,
        "POST",
        "/v1/recall",
        Some(&t),
        json!({"query": "x", "view": ["project/acme"]}),
    );
    let (status, _) = s.raw("GET", "/metrics", None, None, &[]);
    assert_eq!(status, 401);
    let (status, text) = s.raw("GET", "/metrics", Some(&t), None, &[]);
    assert_eq!(status, 200);
    // Both recalls ran (the first was refused there, for its empty view),
    // each timed by its thread's CPU clock.
    let value = |name: &str| -> f64 {
        let line = text.lines().find(|l| l.starts_with(name)).unwrap();
        line[name.len()..].trim().parse().unwrap()
    };
    if cfg!(target_os = "linux") {
        assert_eq!(value("strata_recall_cpu_seconds_count "), 2.0, "{text}");
        assert!(value("strata_recall_cpu_seconds_sum ") > 0.0, "{text}");
    }
    for want in [
        "strata_http_requests_total{method=\"POST\",route=\"/v1/memories\",status=\"201\"} 1",
        "strata_http_requests_total{method=\"POST\",route=\"/v1/recall\",status=\"200\"} 1",
        "strata_http_requests_total{method=\"POST\",route=\"/v1/recall\",status=\"400\"} 1",
        "strata_http_request_duration_seconds_bucket{method=\"POST\",route=\"/v1/memories\",le=\"+Inf\"} 1",
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }
    // Store-wide figures are for an unrestricted grant only (see
    // transport::store_figures_in_metrics_only_for_an_unrestricted_grant).
    assert!(!text.contains("strata_store_"), "{text}");
}

/// A remember answers on the event loop's thread unless another write is
/// in the way; behind another process's write lock it waits on the
/// blocking pool, and the server goes on answering reads meanwhile.
#[test]
fn a_remember_behind_another_process_waits_on_the_pool_while_reads_go_on() {
    // Recall threads whatever the machine's CPUs (their default).
    let (t, cfg) = token("rw", &["project/acme"], Access::ReadWrite);
    let s = Server::start(ServerConfig {
        tokens: vec![cfg],
        recall_threads: 2,
        ..Default::default()
    });
    let tk = Some(t.as_str());
    s.expect(
        201,
        "POST",
        "/v1/memories",
        tk,
        json!({"content": "nothing in the way", "scope": "project/acme"}),
    );
    let lock = rusqlite::Connection::open(s.db_path()).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    std::thread::scope(|sc| {
        let waiting = sc.spawn(|| {
            s.expect(
                201,
                "POST",
                "/v1/memories",
                tk,
                json!({"content": "behind the lock", "scope": "project/acme"}),
            )
        });
        std::thread::sleep(std::time::Duration::from_millis(150));
        assert!(!waiting.is_finished(), "written through another's lock");
        // Both event-loop threads are free: reads are answered.
        for _ in 0..4 {
            s.expect(
                200,
                "POST",
                "/v1/recall",
                tk,
                json!({"query": "nothing", "view": ["project/acme"]}),
            );
        }
        lock.execute_batch("COMMIT").unwrap();
        let m = waiting.join().unwrap();
        let id = m["id"].as_str().unwrap();
        s.expect(200, "GET", &format!("/v1/memories/{id}"), tk, Value::Null);
    });
    let (_, text) = s.raw("GET", "/metrics", tk, None, &[]);
    for want in [
        "strata_writes_total{thread=\"event_loop\"} 1",
        "strata_writes_total{thread=\"pool\"} 1",
        // Another process's lock is not waited out on the event loop.
        "strata_writes_waited_total 0",
        // Recalls while writes arrive run on the recall threads.
        "strata_recalls_total{thread=\"recall\"} 4",
        "strata_recalls_total{thread=\"event_loop\"} 0",
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }
}

/// The stored vector stays out of answers (it would be most of each one)
/// and in exports.
#[test]
fn answers_leave_the_vector_out_and_exports_keep_it() {
    let (s, t) = server();
    let tk = Some(t.as_str());
    let m = s.expect(
        201,
        "POST",
        "/v1/memories",
        tk,
        json!({"content": "a memory with a vector", "scope": "project/acme"}),
    );
    assert!(m.get("embedding").is_none(), "{m}");
    let (_, line) = s.raw("GET", "/v1/export?view=project/acme", tk, None, &[]);
    let mut v: Value = serde_json::from_str(line.trim()).unwrap();
    v["embedding"] = json!({"model": "tiny-2", "vector": [0.6, 0.8]});
    v["id"] = json!("01900000-0000-7000-8000-000000000001");
    let (status, body) = s.raw(
        "POST",
        "/v1/import?on_conflict=skip",
        tk,
        Some(format!("{v}\n").into_bytes()),
        &[],
    );
    assert_eq!(status, 200, "{body}");
    let with = "01900000-0000-7000-8000-000000000001";
    let got = s.expect(
        200,
        "GET",
        &format!("/v1/memories/{with}?history=true"),
        tk,
        Value::Null,
    );
    assert_eq!(got["content"], "a memory with a vector");
    assert!(got.get("embedding").is_none(), "{got}");
    let listed = s.expect(
        200,
        "POST",
        "/v1/list",
        tk,
        json!({"view": ["project/acme"]}),
    );
    let rows = listed["memories"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{listed}");
    assert!(
        rows.iter().all(|r| r.get("embedding").is_none()),
        "{listed}"
    );
    let patched = s.expect(
        200,
        "PATCH",
        &format!("/v1/memories/{with}"),
        tk,
        json!({"tags": ["kept"], "expected_version": 1}),
    );
    assert!(patched.get("embedding").is_none(), "{patched}");
    let (_, jsonl) = s.raw("GET", "/v1/export?view=project/acme", tk, None, &[]);
    assert!(
        jsonl.contains("\"tiny-2\""),
        "the export still carries the vector: {jsonl}"
    );
}

/// An embedder that does not say it runs here, as a remote one would not:
/// the server then runs recalls on its blocking pool.
#[derive(Debug)]
struct Remote;

impl strata::Embedder for Remote {
    fn model(&self) -> &str {
        "remote-test"
    }
    fn dim(&self) -> usize {
        3
    }
    fn embed(&self, texts: &[&str], _: strata::Purpose) -> Result<Vec<Vec<f32>>, strata::Error> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![
                    t.matches("billing").count() as f32,
                    t.matches("lunch").count() as f32,
                    0.1,
                ];
                strata::normalize(&mut v);
                v
            })
            .collect())
    }
}

#[test]
fn recalls_answer_alike_on_the_event_loop_and_on_the_blocking_pool() {
    for remote in [false, true] {
        let (t, cfg) = token("rw", &["project/acme"], Access::ReadWrite);
        let s = Server::start_prepared(
            ServerConfig {
                tokens: vec![cfg],
                ..Default::default()
            },
            strata_server::AuthMode::Tokens,
            |e| {
                // Explicitly: the default would open the local model when
                // it is installed.
                let embedder: Option<std::sync::Arc<dyn strata::Embedder>> = if remote {
                    Some(std::sync::Arc::new(Remote))
                } else {
                    None
                };
                e.set_embedder(embedder).unwrap();
            },
        );
        assert_eq!(s.shared.inline_recall, !remote, "remote embedder: {remote}");
        let tk = Some(t.as_str());
        for text in ["the billing queue retries three times", "lunch is at noon"] {
            s.expect(
                201,
                "POST",
                "/v1/memories",
                tk,
                json!({"content": text, "scope": "project/acme"}),
            );
        }
        // Many at once, from several connections: each answer is whole.
        std::thread::scope(|sc| {
            for _ in 0..4 {
                sc.spawn(|| {
                    for _ in 0..25 {
                        let r = s.expect(
                            200,
                            "POST",
                            "/v1/recall",
                            tk,
                            json!({"query": "billing queue", "view": ["project/acme"], "limit": 1}),
                        );
                        assert_eq!(
                            r["results"][0]["content"], "the billing queue retries three times",
                            "{r}"
                        );
                    }
                });
            }
        });
        // Errors come back the same way on both paths.
        let e = s.expect(
            403,
            "POST",
            "/v1/recall",
            tk,
            json!({"query": "billing", "view": ["project/other"]}),
        );
        assert_error(&e, "forbidden", "project/other");
    }
}

#[test]
fn a_panicking_operation_is_a_500_on_either_path() {
    let s = Server::start_prepared(ServerConfig::default(), strata_server::AuthMode::Off, |e| {
        e.set_embedder(None).unwrap()
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let shared = s.shared.clone();
    assert!(shared.inline_recall);
    let inline = rt.block_on(
        shared.run_recall(strata_server::Grant::all(), |_| -> Result<(), _> {
            panic!("a bug")
        }),
    );
    assert_eq!(inline.unwrap_err().status.as_u16(), 500);
    let pooled = rt.block_on(
        shared.run(strata_server::Grant::all(), |_| -> Result<(), _> {
            panic!("a bug")
        }),
    );
    assert_eq!(pooled.unwrap_err().status.as_u16(), 500);
    // The server goes on answering.
    let (status, _) = s.call("GET", "/healthz", None, None);
    assert_eq!(status, 200);
}

#[test]
fn sessions_ephemeral_and_their_last_turns() {
    let (s, t) = server();
    let t = Some(t.as_str());
    for c in ["one", "two", "three"] {
        s.expect(
            201,
            "POST",
            "/v1/memories",
            t,
            json!({"content": format!("stored turn {c}"), "scope": "session/kept", "session": "kept"}),
        );
    }
    let v = s.expect(
        200,
        "GET",
        "/v1/sessions/kept/turns?limit=2",
        t,
        Value::Null,
    );
    let got: Vec<&str> = v["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(got, ["stored turn two", "stored turn three"]);

    let e = s.expect(
        201,
        "POST",
        "/v1/sessions",
        t,
        json!({"id": "quiet", "ephemeral": true}),
    );
    assert_eq!(
        (e["ephemeral"].as_bool(), e["scope"].as_str()),
        (Some(true), Some("session/quiet"))
    );
    let rows = |s: &crate::harness::Server| {
        let st = s.snapshot();
        // The store's rows and figures; the hot tier's figures move.
        let hot = st.find("\"hot\": TierFigures").map_or(0, |i| i);
        (
            st[..hot].to_string(),
            st.contains("memories: 3, archived: 0"),
        )
    };
    let before = rows(&s);
    assert!(before.1, "{before:?}");
    let m = s.expect(
        201,
        "POST",
        "/v1/memories",
        t,
        json!({"content": "the quiet turn about billing", "scope": "session/quiet", "session": "quiet"}),
    );
    assert_eq!(rows(&s), before, "an ephemeral write changes no stored row");
    assert!(!s.snapshot().contains("quiet turn"));
    let v = s.expect(200, "GET", "/v1/sessions/quiet/turns", t, Value::Null);
    assert_eq!(v["memories"][0]["id"], m["id"]);
    let r = s.expect(
        200,
        "POST",
        "/v1/recall",
        t,
        json!({"query": "billing", "view": ["session/**"]}),
    );
    assert_eq!(r["results"][0]["id"], m["id"], "{r}");
    let list = s.expect(200, "GET", "/v1/sessions", t, Value::Null);
    assert!(
        list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["id"] == "quiet" && x["ephemeral"] == true),
        "{list}"
    );

    // Bad input, each named, nothing changed.
    let v = s.expect(
        400,
        "GET",
        "/v1/sessions/kept/turns?limit=0",
        t,
        Value::Null,
    );
    assert_error(&v, "invalid", "limit");
    let v = s.expect(
        400,
        "GET",
        "/v1/sessions/kept/turns?limit=many",
        t,
        Value::Null,
    );
    assert_error(&v, "invalid", "limit");
    let v = s.expect(400, "GET", "/v1/sessions/kept/turns?lmit=2", t, Value::Null);
    assert_error(&v, "invalid", "lmit");
    let v = s.expect(404, "GET", "/v1/sessions/nobody/turns", t, Value::Null);
    assert_error(&v, "not_found", "nobody");
    // An ephemeral session takes a byte bound of its own (issue 51); a
    // bound of 0 is named.
    let v = s.expect(
        201,
        "POST",
        "/v1/sessions",
        t,
        json!({"id": "q2", "ephemeral": true, "max_bytes": 10}),
    );
    assert_eq!(v["max_bytes"], 10);
    let v = s.expect(
        400,
        "POST",
        "/v1/sessions",
        t,
        json!({"id": "q3", "ephemeral": true, "max_bytes": 0}),
    );
    assert_error(&v, "invalid", "max_bytes");
    let v = s.expect(
        409,
        "POST",
        "/v1/sessions",
        t,
        json!({"id": "kept", "ephemeral": true}),
    );
    assert_error(&v, "conflict", "kept");

    // Archiving ends it: its memories are gone.
    s.expect(200, "POST", "/v1/sessions/quiet/archive", t, Value::Null);
    s.expect(404, "GET", "/v1/sessions/quiet/turns", t, Value::Null);
    s.expect(
        404,
        "GET",
        &format!("/v1/memories/{}", m["id"].as_str().unwrap()),
        t,
        Value::Null,
    );
}

#[test]
fn a_session_is_compacted_on_request() {
    let (s, t) = server();
    let t = Some(t.as_str());
    s.expect(
        201,
        "POST",
        "/v1/sessions",
        t,
        json!({"id": "long", "max_bytes": 2000}),
    );
    for i in 0..18 {
        s.expect(
            201,
            "POST",
            "/v1/memories",
            t,
            json!({"content": format!("turn {i}: the nightly export ran late again because the disk was full."), "scope": "session/long", "session": "long"}),
        );
    }
    let c = s.expect(200, "POST", "/v1/sessions/long/compact", t, Value::Null);
    assert!(c["compacted"].as_u64().unwrap() > 0, "{c}");
    assert_eq!(c["summaries"].as_array().unwrap().len(), 1, "{c}");
    assert!(c["bytes_after"].as_u64().unwrap() <= 1000, "{c}");
    let sum = s.expect(
        200,
        "GET",
        &format!("/v1/memories/{}", c["summaries"][0].as_str().unwrap()),
        t,
        Value::Null,
    );
    assert_eq!(sum["kind"], "summary");
    let v = s.expect(404, "POST", "/v1/sessions/nobody/compact", t, Value::Null);
    assert_error(&v, "not_found", "nobody");
}
