//! The tenant-isolation probes of issue 22, each as it was tried against
//! `strata serve` 0.3.0 with three scoped tokens: alpha (`project/alpha` and
//! `global`), beta (`project/beta`), a read-only token, and one granted only
//! `session/s`. Every probe that got through then is refused now, changes
//! nothing, and answers with a named 4xx (never a 500).

use serde_json::{Value, json};
use strata_server::{Access, ServerConfig};

use crate::harness::{Server, assert_error, token};

struct Tenants {
    s: Server,
    alpha: String,
    beta: String,
    reader: String,
    sess: String,
    /// beta's memory.
    theirs: String,
    /// alpha's memory.
    mine: String,
}

fn tenants() -> Tenants {
    let (alpha, a) = token("alpha", &["project/alpha", "global"], Access::ReadWrite);
    let (beta, b) = token("beta", &["project/beta"], Access::ReadWrite);
    let (reader, r) = token("reader", &["project/alpha", "global"], Access::Read);
    let (sess, s) = token("sess", &["session/s"], Access::ReadWrite);
    let srv = Server::start(ServerConfig {
        tokens: vec![a, b, r, s],
        ..Default::default()
    });
    let theirs = srv.expect(
        201,
        "POST",
        "/v1/memories",
        Some(&beta),
        json!({"content": "beta launches on the 9th", "scope": "project/beta"}),
    );
    let mine = srv.expect(
        201,
        "POST",
        "/v1/memories",
        Some(&alpha),
        json!({"content": "alpha uses tabs", "scope": "project/alpha"}),
    );
    Tenants {
        s: srv,
        alpha,
        beta,
        reader,
        sess,
        theirs: theirs["id"].as_str().unwrap().into(),
        mine: mine["id"].as_str().unwrap().into(),
    }
}

/// `id`'s export line as `token` exports it.
fn exported(t: &Tenants, token: &str, view: &str, id: &str) -> Value {
    let (status, text) = t.s.raw(
        "GET",
        &format!("/v1/export?view={view}"),
        Some(token),
        None,
        &[],
    );
    assert_eq!(status, 200, "{text}");
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["id"] == id)
        .unwrap()
}

fn set_content(line: &mut Value, text: &str) {
    line["content"] = json!(text);
    line["checksum"] = json!(strata::checksum(text, None));
}

fn import(t: &Tenants, token: &str, mode: &str, lines: &[Value]) -> (u16, Value) {
    let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let (status, text) = t.s.raw(
        "POST",
        &format!("/v1/import?on_conflict={mode}"),
        Some(token),
        Some(body.into_bytes()),
        &[("content-type", "application/x-ndjson")],
    );
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// H1: import with another tenant's id neither replaces nor reveals it.
#[test]
fn import_with_another_tenants_id_neither_replaces_nor_reveals_it() {
    let t = tenants();
    let theirs_before = exported(&t, &t.beta, "project/beta", &t.theirs);
    let template = exported(&t, &t.alpha, "project/alpha", &t.mine);
    for mode in ["error", "skip", "replace"] {
        let mut onto = template.clone();
        onto["id"] = json!(t.theirs);
        set_content(&mut onto, &format!("takeover by {mode}"));
        let mut fresh = template.clone();
        fresh["id"] = json!(format!("01900000-0000-7000-8000-{:012}", mode.len()));
        set_content(&mut fresh, &format!("fresh by {mode}"));
        let (s1, a) = import(&t, &t.alpha, mode, &[onto]);
        let (s2, b) = import(&t, &t.alpha, mode, &[fresh]);
        assert_eq!(
            (s1, &a),
            (s2, &b),
            "{mode}: the answer tells that the id exists"
        );
        assert_eq!(s1, 200, "{a}");
        assert_eq!(a["imported"], 1);
        assert_eq!(
            exported(&t, &t.beta, "project/beta", &t.theirs),
            theirs_before,
            "{mode}: beta's memory changed"
        );
        t.s.expect(
            200,
            "GET",
            &format!("/v1/memories/{}", t.theirs),
            Some(&t.beta),
            Value::Null,
        );
    }
}

/// M1: import attaches lines to sessions only as `POST /v1/memories` would.
#[test]
fn import_attaches_to_sessions_only_as_a_write_would() {
    let t = tenants();
    // Named sessions, made by the local user (a token names a session only
    // when it holds `session/<name>`).
    let e = &t.s.shared.engine;
    e.create_session(
        Some("bs"),
        Some(strata::Scope::parse("project/beta").unwrap()),
        Some(1000),
    )
    .unwrap();
    e.create_session(
        Some("as"),
        Some(strata::Scope::parse("project/alpha").unwrap()),
        Some(100),
    )
    .unwrap();
    let line = |session: &str, n: usize, text: &str| {
        let mut l = exported(&t, &t.alpha, "project/alpha", &t.mine);
        l["id"] = json!(format!("01900000-0000-7000-8000-00000000{n:04}"));
        l["session"] = json!(session);
        set_content(&mut l, text);
        l
    };
    let before = t.s.snapshot();
    let (status, v) = import(&t, &t.alpha, "error", &[line("bs", 1, "into beta's")]);
    let (status2, v2) = import(&t, &t.alpha, "error", &[line("nosuch", 1, "into none")]);
    assert_eq!((status, status2), (403, 403), "{v} {v2}");
    assert_error(&v, "forbidden", "`bs` is outside");
    assert_eq!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .replace("bs", "nosuch"),
        v2["error"]["message"],
        "the answer tells a session outside from a missing one"
    );
    let (status, v) = import(&t, &t.alpha, "error", &[line("as", 2, &"x".repeat(200))]);
    assert_eq!(status, 413, "{v}");
    assert_eq!(t.s.snapshot(), before);
    // Beta's session is untouched and still takes beta's writes.
    let m =
        t.s.expect(200, "GET", "/v1/sessions/bs", Some(&t.beta), Value::Null);
    assert_eq!(m["memories"], 0);
    assert_eq!(m["bytes"], 0);
    t.s.expect(
        200,
        "POST",
        "/v1/sessions/as/archive",
        Some(&t.alpha),
        Value::Null,
    );
    let before = t.s.snapshot();
    let (status, v) = import(&t, &t.alpha, "error", &[line("as", 3, "late")]);
    assert_eq!(status, 409, "{v}");
    assert_eq!(t.s.snapshot(), before);
}

/// M2: a session does not take memories of scopes it does not cover, and a
/// token for the session's scope sees and archives only what it may see.
#[test]
fn sessions_do_not_span_scopes() {
    let t = tenants();
    // `strata remember --scope project/beta --session s` creates `s` in
    // beta's scope, so the session-only token does not see it at all.
    let e = &t.s.shared.engine;
    e.remember(
        strata::NewMemory::new(strata::Scope::parse("project/beta").unwrap(), "beta's plan")
            .session("s"),
    )
    .unwrap();
    let before = t.s.snapshot();
    t.s.expect(404, "GET", "/v1/sessions/s", Some(&t.sess), Value::Null);
    t.s.expect(
        404,
        "POST",
        "/v1/sessions/s/archive",
        Some(&t.sess),
        Value::Null,
    );
    let (status, v) = t.s.call(
        "POST",
        "/v1/forget",
        Some(&t.sess),
        Some(&json!({"session": "s"}).to_string()),
    );
    let (status2, v2) = t.s.call(
        "POST",
        "/v1/forget",
        Some(&t.sess),
        Some(&json!({"session": "nosuch"}).to_string()),
    );
    assert_eq!(status, 404, "{v}");
    assert_eq!(status2, 404, "{v2}");
    assert_eq!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .replace("`s`", "`nosuch`"),
        v2["error"]["message"],
        "L4: forget tells a session outside from a missing one"
    );
    assert_eq!(t.s.snapshot(), before);
    // A memory of another scope cannot join a session, even one the same
    // token may write to.
    e.create_session(
        Some("as"),
        Some(strata::Scope::parse("project/alpha").unwrap()),
        None,
    )
    .unwrap();
    t.s.expect(
        201,
        "POST",
        "/v1/memories",
        Some(&t.alpha),
        json!({"content": "alpha's turn", "scope": "project/alpha", "session": "as"}),
    );
    let before = t.s.snapshot();
    let v = t.s.expect(
        400,
        "POST",
        "/v1/memories",
        Some(&t.alpha),
        json!({"content": "a global note", "scope": "global", "session": "as"}),
    );
    assert_error(
        &v,
        "invalid",
        "session `as` holds memories of `project/alpha`",
    );
    assert_eq!(t.s.snapshot(), before);
}

/// L4: a token can neither take a session name before its owner nor tell
/// from a refusal whether the name is taken.
#[test]
fn session_names_cannot_be_squatted_or_probed() {
    let t = tenants();
    t.s.shared
        .engine
        .create_session(
            Some("bs"),
            Some(strata::Scope::parse("project/beta").unwrap()),
            None,
        )
        .unwrap();
    let before = t.s.snapshot();
    let a = Some(t.alpha.as_str());
    let mut answers = Vec::new();
    for name in ["bs", "free"] {
        let v = t.s.expect(
            403,
            "POST",
            "/v1/sessions",
            a,
            json!({"id": name, "scope": "project/alpha"}),
        );
        answers.push(v.to_string().replace(name, "NAME"));
        let v = t.s.expect(
            403,
            "POST",
            "/v1/memories",
            a,
            json!({"content": "x", "scope": "project/alpha", "session": name}),
        );
        answers.push(v.to_string().replace(name, "NAME"));
        let v =
            t.s.expect(404, "GET", &format!("/v1/sessions/{name}"), a, Value::Null);
        answers.push(v.to_string().replace(name, "NAME"));
    }
    assert_eq!(
        answers[..3],
        answers[3..],
        "a taken name answers differently"
    );
    assert_eq!(t.s.snapshot(), before);
    // The owner of `session/free` may name it; anyone may take a
    // generated id.
    let v = t.s.expect(
        201,
        "POST",
        "/v1/sessions",
        Some(&t.sess),
        json!({"id": "s"}),
    );
    assert_eq!(v["scope"], "session/s");
    let v = t.s.expect(
        201,
        "POST",
        "/v1/sessions",
        a,
        json!({"scope": "project/alpha"}),
    );
    assert_eq!(v["scope"], "project/alpha");
}

/// M3: huge views, filters and offsets are named 400s, and fast.
#[test]
fn oversized_views_filters_and_offsets_are_named_400s() {
    let t = tenants();
    let before = t.s.snapshot();
    let r = Some(t.reader.as_str());
    let many: Vec<String> = (0..100_000)
        .map(|i| format!("project/alpha/t{i}"))
        .collect();
    let started = std::time::Instant::now();
    let v = t.s.expect(
        400,
        "POST",
        "/v1/recall",
        r,
        json!({"query": "tabs", "view": many}),
    );
    assert_error(&v, "invalid", "view");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("256"),
        "{v}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "a 100,000-entry view took {:?} to refuse",
        started.elapsed()
    );
    let view1000: Vec<String> = many[..1000].to_vec();
    let v =
        t.s.expect(400, "POST", "/v1/list", r, json!({"view": view1000}));
    assert_error(&v, "invalid", "view");
    let ors: Vec<Value> = (0..1000).map(|i| json!({"key": format!("k{i}")})).collect();
    let v = t.s.expect(
        400,
        "POST",
        "/v1/list",
        r,
        json!({"view": ["project/alpha"], "filter": {"$or": ors}}),
    );
    assert_error(&v, "invalid", "conditions");
    let ins: Vec<String> = (0..40_000).map(|i| format!("k{i}")).collect();
    let v = t.s.expect(
        400,
        "POST",
        "/v1/recall",
        r,
        json!({"view": ["project/alpha"], "filter": {"key": {"$in": ins}}}),
    );
    assert_error(&v, "invalid", "values");
    assert!(!v.to_string().contains("SELECT"), "{v}");
    let mut deep = json!({"kind": "decision"});
    for _ in 0..40 {
        deep = json!({"$and": [deep]});
    }
    let v = t.s.expect(
        400,
        "POST",
        "/v1/list",
        r,
        json!({"view": ["project/alpha"], "filter": deep}),
    );
    assert_error(&v, "invalid", "nested");
    let v = t.s.expect(
        400,
        "POST",
        "/v1/list",
        r,
        json!({"view": ["project/alpha"], "offset": 1u64 << 63}),
    );
    assert_error(&v, "invalid", "offset");
    let words: Vec<String> = (0..600).map(|i| format!("w{i}x")).collect();
    let v = t.s.expect(
        400,
        "POST",
        "/v1/recall",
        r,
        json!({"query": words.join(" "), "view": ["project/alpha"]}),
    );
    assert_error(&v, "invalid", "query");
    let v = t.s.expect(
        400,
        "POST",
        "/v1/context",
        r,
        json!({"project": "alpha", "profile": "global", "query": words.join(" ")}),
    );
    assert_eq!(v["error"]["code"], "invalid", "{v}");
    assert_eq!(t.s.snapshot(), before);
}

/// L3: a read-only token cannot store a context in the log.
#[test]
fn a_read_only_token_cannot_log_a_context() {
    let t = tenants();
    let before = t.s.snapshot();
    let v = t.s.expect(
        403,
        "POST",
        "/v1/context",
        Some(&t.reader),
        json!({"project": "alpha", "profile": "global", "query": "tabs", "log": true}),
    );
    assert_error(&v, "forbidden", "read access only");
    assert_eq!(t.s.snapshot(), before);
    // Without `log` the read is fine.
    t.s.expect(
        200,
        "POST",
        "/v1/context",
        Some(&t.reader),
        json!({"project": "alpha", "profile": "global", "query": "tabs"}),
    );
}

/// L1: an imported vector does not fix a model's length for everyone.
#[test]
fn an_imported_vector_of_another_length_is_refused() {
    let t = tenants();
    let mut line = exported(&t, &t.alpha, "project/alpha", &t.mine);
    line["id"] = json!("01900000-0000-7000-8000-0000000000e8");
    line["embedding"] = json!({"model": "m8", "vector": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]});
    let (status, v) = import(&t, &t.alpha, "error", &[line.clone()]);
    assert_eq!(status, 200, "{v}");
    let before = t.s.snapshot();
    line["id"] = json!("01900000-0000-7000-8000-0000000000e3");
    line["embedding"] = json!({"model": "m8", "vector": [0.1, 0.2, 0.3]});
    let (status, v) = import(&t, &t.alpha, "error", &[line]);
    assert_eq!(status, 400, "{v}");
    assert_error(&v, "invalid", "length 3");
    assert_eq!(t.s.snapshot(), before);
}

/// Everything the probes found holding still holds: ids outside answer as
/// missing ones, views outside are 403s.
#[test]
fn what_held_still_holds() {
    let t = tenants();
    let before = t.s.snapshot();
    let a = Some(t.alpha.as_str());
    let missing = "01900000-0000-7000-8000-000000000404";
    for id in [t.theirs.as_str(), missing] {
        let v =
            t.s.expect(404, "GET", &format!("/v1/memories/{id}"), a, Value::Null);
        assert_eq!(v["error"]["code"], "not_found");
        t.s.expect(404, "DELETE", &format!("/v1/memories/{id}"), a, Value::Null);
        t.s.expect(
            404,
            "PATCH",
            &format!("/v1/memories/{id}"),
            a,
            json!({"expected_version": 1, "content": "mine now"}),
        );
        t.s.expect(
            404,
            "POST",
            "/v1/promote",
            a,
            json!({"id": id, "to": "project/alpha"}),
        );
        t.s.expect(404, "POST", "/v1/restore", a, json!({"ids": [id]}));
    }
    let v = t.s.expect(
        403,
        "POST",
        "/v1/recall",
        a,
        json!({"query": "launch", "view": ["project/beta"]}),
    );
    assert_error(&v, "forbidden", "project/beta");
    let v = t.s.expect(
        403,
        "POST",
        "/v1/recall",
        a,
        json!({"query": "launch", "view": ["project/**"]}),
    );
    assert_error(&v, "forbidden", "project");
    let r =
        t.s.expect(200, "POST", "/v1/forget", a, json!({"ids": [t.theirs]}));
    assert_eq!(r["deleted"], 0);
    assert_eq!(t.s.snapshot(), before);
}
