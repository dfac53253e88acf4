//! Tokens: 401 without one, 403 outside its scopes (learning nothing), 404
//! for ids outside, read-only tokens cannot write; nothing changes.

use serde_json::{Value, json};
use strata_server::{Access, ServerConfig};

use crate::harness::{Server, assert_error, token};

struct Fixture {
    s: Server,
    admin: String,
    acme_ro: String,
    beta_rw: String,
    secret_id: String,
}

fn fixture() -> Fixture {
    let (admin, a) = token("admin", &["project", "global"], Access::ReadWrite);
    let (acme_ro, b) = token("acme-ro", &["project/acme"], Access::Read);
    let (beta_rw, c) = token("beta-rw", &["project/beta"], Access::ReadWrite);
    let s = Server::start(ServerConfig {
        tokens: vec![a, b, c],
        ..Default::default()
    });
    let m = s.expect(
        201,
        "POST",
        "/v1/memories",
        Some(&admin),
        json!({"content": "beta's launch date is secret", "scope": "project/beta"}),
    );
    s.expect(
        201,
        "POST",
        "/v1/memories",
        Some(&admin),
        json!({"content": "acme uses tabs", "scope": "project/acme"}),
    );
    Fixture {
        secret_id: m["id"].as_str().unwrap().into(),
        s,
        admin,
        acme_ro,
        beta_rw,
    }
}

#[test]
fn missing_or_unknown_token_is_401() {
    let f = fixture();
    let before = f.s.snapshot();
    for tok in [None, Some("strata_0000"), Some("")] {
        let (status, v) = f.s.call(
            "POST",
            "/v1/memories",
            tok,
            Some(r#"{"content":"x","scope":"project/acme"}"#),
        );
        assert_eq!(status, 401, "{v}");
        assert_eq!(v["error"]["code"], "unauthorized");
    }
    let (status, _) = f.s.raw(
        "GET",
        "/v1/scopes",
        None,
        None,
        &[("authorization", "Basic abc")],
    );
    assert_eq!(status, 401);
    let (status, _) = f.s.call("POST", "/mcp", None, Some("{}"));
    assert_eq!(status, 401);
    assert_eq!(f.s.snapshot(), before);
}

#[test]
fn reads_outside_the_token_are_403_and_reveal_nothing() {
    let f = fixture();
    let t = Some(f.acme_ro.as_str());
    // The same answer whether the scope holds memories (beta) or not (gamma).
    let a = f.s.expect(
        403,
        "POST",
        "/v1/recall",
        t,
        json!({"query": "launch", "view": ["project/beta"]}),
    );
    let b = f.s.expect(
        403,
        "POST",
        "/v1/recall",
        t,
        json!({"query": "launch", "view": ["project/gamma"]}),
    );
    assert_error(&a, "forbidden", "project/beta");
    assert_eq!(
        a["error"]["message"]
            .as_str()
            .unwrap()
            .replace("beta", "gamma"),
        b["error"]["message"]
    );
    // A view reaching above the token's prefix is outside too.
    let v = f.s.expect(
        403,
        "POST",
        "/v1/list",
        t,
        json!({"view": ["project/acme", "project/**"]}),
    );
    assert_error(&v, "forbidden", "project/**");
    let v =
        f.s.expect(403, "POST", "/v1/context", t, json!({"project": "beta"}));
    assert_error(&v, "forbidden", "profile");
    let (status, _) = f.s.raw("GET", "/v1/export?view=project/beta", t, None, &[]);
    assert_eq!(status, 403);
    // Listings only show what is inside.
    let sc = f.s.expect(200, "GET", "/v1/scopes", t, Value::Null);
    assert_eq!(sc["scopes"].as_array().unwrap().len(), 1, "{sc}");
    assert_eq!(sc["scopes"][0]["scope"], "project/acme");
}

#[test]
fn ids_outside_the_token_are_not_found() {
    let f = fixture();
    let before = f.s.snapshot();
    let t = Some(f.acme_ro.as_str());
    let id = &f.secret_id;
    let outside =
        f.s.expect(404, "GET", &format!("/v1/memories/{id}"), t, Value::Null);
    let missing = f.s.expect(
        404,
        "GET",
        "/v1/memories/01900000-0000-7000-8000-000000000000",
        t,
        Value::Null,
    );
    assert_eq!(outside["error"]["code"], missing["error"]["code"]);
    let w = Some(f.beta_rw.as_str());
    // beta-rw may write, but only in beta: acme's memories do not exist for it.
    let acme = f.s.expect(
        200,
        "POST",
        "/v1/list",
        Some(&f.admin),
        json!({"view": ["project/acme"]}),
    );
    let acme_id = acme["memories"][0]["id"].as_str().unwrap().to_string();
    f.s.expect(
        404,
        "PATCH",
        &format!("/v1/memories/{acme_id}"),
        w,
        json!({"expected_version": 1, "content": "spaces"}),
    );
    f.s.expect(
        404,
        "DELETE",
        &format!("/v1/memories/{acme_id}"),
        w,
        Value::Null,
    );
    f.s.expect(
        404,
        "POST",
        "/v1/promote",
        w,
        json!({"id": acme_id, "to": "project/beta"}),
    );
    let r =
        f.s.expect(200, "POST", "/v1/forget", w, json!({"ids": [acme_id]}));
    assert_eq!(r["deleted"], 0);
    f.s.expect(404, "GET", "/v1/sessions/nope", w, Value::Null);
    assert_eq!(f.s.snapshot(), before);
}

#[test]
fn writes_need_read_write_inside_the_token() {
    let f = fixture();
    let before = f.s.snapshot();
    let ro = Some(f.acme_ro.as_str());
    let v = f.s.expect(
        403,
        "POST",
        "/v1/memories",
        ro,
        json!({"content": "x", "scope": "project/acme"}),
    );
    assert_error(&v, "forbidden", "read access only");
    f.s.expect(
        403,
        "POST",
        "/v1/forget",
        ro,
        json!({"scope": "project/acme"}),
    );
    f.s.expect(403, "POST", "/v1/memories/batch", ro, json!({"items": []}));
    let (status, _) = f.s.raw("POST", "/v1/import", ro, Some(b"".to_vec()), &[]);
    assert_eq!(status, 403);
    let w = Some(f.beta_rw.as_str());
    let v = f.s.expect(
        403,
        "POST",
        "/v1/memories",
        w,
        json!({"content": "x", "scope": "project/acme"}),
    );
    assert_error(&v, "forbidden", "scope");
    let v = f.s.expect(
        403,
        "POST",
        "/v1/memories/batch",
        w,
        json!({"items": [
        {"content": "ok", "scope": "project/beta"}, {"content": "no", "scope": "global"}]}),
    );
    assert_error(&v, "forbidden", "items[1].scope");
    let v = f.s.expect(
        403,
        "POST",
        "/v1/promote",
        w,
        json!({"id": f.secret_id, "to": "project/acme"}),
    );
    assert_error(&v, "forbidden", "to");
    f.s.expect(
        403,
        "POST",
        "/v1/tasks/t1/complete",
        w,
        json!({"project": "beta"}),
    );
    f.s.expect(403, "POST", "/v1/forget", w, json!({"scope": "project"}));
    f.s.expect(
        403,
        "POST",
        "/v1/forget",
        w,
        json!({"view": ["project/acme"], "filter": {}}),
    );
    // Nor attach to (or create) a session outside it.
    let v = f.s.expect(
        403,
        "POST",
        "/v1/memories",
        w,
        json!({"content": "x", "scope": "project/beta", "session": "s9"}),
    );
    assert_error(&v, "forbidden", "session");
    let line = f.s.shared.engine.get(&f.secret_id).unwrap().unwrap();
    let mut moved = serde_json::to_value(&line).unwrap();
    moved["id"] = json!("01900000-0000-7000-8000-00000000abcd");
    moved["scope"] = json!("project/acme");
    let (status, body) = f.s.raw(
        "POST",
        "/v1/import",
        w,
        Some(format!("{moved}\n").into_bytes()),
        &[],
    );
    assert_eq!(status, 403, "{body}");
    assert_eq!(f.s.snapshot(), before);
}
