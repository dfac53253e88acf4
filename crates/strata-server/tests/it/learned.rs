//! Learned memories over HTTP and MCP: list, show with evidence, confirm,
//! reject, and the grant's rules for each.

use serde_json::{Value, json};
use strata::{Kind, NewMemory, Role, Scope};
use strata_server::{Access, AuthMode, McpDefaults, ServerConfig};

use crate::harness::{Server, assert_error, token};

/// A server whose store has learned one preference in `project/acme` and
/// one in `project/beta`; tokens: read/write on acme, read-only on acme.
fn server() -> (Server, String, String) {
    let (rw, a) = token("rw", &["project/acme"], Access::ReadWrite);
    let (ro, b) = token("ro", &["project/acme"], Access::Read);
    let cfg = ServerConfig {
        tokens: vec![a, b],
        mcp: McpDefaults {
            project: Some("acme".into()),
            session: None,
        },
        ..Default::default()
    };
    let s = Server::start_prepared(cfg, AuthMode::Tokens, |e| {
        for (p, text) in [
            ("project/acme", "Always run the linter before committing."),
            ("project/beta", "Never deploy on Fridays."),
        ] {
            e.remember(
                NewMemory::new(Scope::parse(p).unwrap(), text)
                    .kind(Kind::Conversation)
                    .role(Role::User)
                    .session(format!("s-{}", &p[8..])),
            )
            .unwrap();
        }
        e.learn().unwrap();
    });
    (s, rw, ro)
}

fn learned_id(s: &Server, t: &str) -> String {
    let l = s.expect(
        200,
        "POST",
        "/v1/learned/list",
        Some(t),
        json!({"view": ["project/acme/**"]}),
    );
    let l = l["learned"].as_array().unwrap();
    assert_eq!(l.len(), 1, "{l:?}");
    l[0]["memory"]["id"].as_str().unwrap().to_string()
}

#[test]
fn learned_routes_list_show_confirm_reject() {
    let (s, rw, ro) = server();
    let t = Some(rw.as_str());
    let id = learned_id(&s, &rw);
    let one = s.expect(200, "GET", &format!("/v1/learned/{id}"), t, Value::Null);
    assert_eq!(one["learned"]["detector"], "preference");
    assert_eq!(one["learned"]["confidence"], 0.6);
    assert_eq!(
        one["evidence"][0]["content"],
        "Always run the linter before committing."
    );
    // Read-only tokens read but do not confirm.
    s.expect(
        200,
        "GET",
        &format!("/v1/learned/{id}"),
        Some(&ro),
        Value::Null,
    );
    let e = s.expect(
        403,
        "POST",
        &format!("/v1/learned/{id}/confirm"),
        Some(&ro),
        Value::Null,
    );
    assert_error(&e, "forbidden", "read");
    let c = s.expect(
        200,
        "POST",
        &format!("/v1/learned/{id}/confirm"),
        t,
        Value::Null,
    );
    assert_eq!(c["payload"]["learned"]["status"], "confirmed");
    let r = s.expect(
        200,
        "POST",
        &format!("/v1/learned/{id}/reject"),
        t,
        Value::Null,
    );
    assert_eq!(r["id"], id.as_str());
    let l = s.expect(
        200,
        "POST",
        "/v1/learned/list",
        t,
        json!({"view": ["project/acme/**"]}),
    );
    assert!(l["learned"].as_array().unwrap().is_empty(), "{l}");
}

#[test]
fn learned_routes_refuse_bad_input() {
    let (s, rw, _) = server();
    let t = Some(rw.as_str());
    // A view outside the grant, and a memory outside it, are refused.
    let e = s.expect(
        403,
        "POST",
        "/v1/learned/list",
        t,
        json!({"view": ["project/beta"]}),
    );
    assert_error(&e, "forbidden", "project/beta");
    let e = s.expect(400, "POST", "/v1/learned/list", t, json!({"view": []}));
    assert_error(&e, "invalid", "view");
    let e = s.expect(
        400,
        "POST",
        "/v1/learned/list",
        t,
        json!({"view": ["project/acme"], "x": 1}),
    );
    assert_error(&e, "invalid", "x");
    // A memory that is not learned cannot be confirmed, and nothing changes.
    let m = s.expect(
        201,
        "POST",
        "/v1/memories",
        t,
        json!({"content": "We chose PostgreSQL", "scope": "project/acme", "kind": "decision"}),
    );
    let mid = m["id"].as_str().unwrap();
    let before = s.snapshot();
    let e = s.expect(
        400,
        "POST",
        &format!("/v1/learned/{mid}/reject"),
        t,
        Value::Null,
    );
    assert_error(&e, "invalid", "not a learned memory");
    assert_eq!(s.snapshot(), before);
    let e = s.expect(404, "GET", "/v1/learned/no-such-memory", t, Value::Null);
    assert_error(&e, "not_found", "no-such-memory");
}

#[test]
fn recall_as_of_over_http() {
    let (s, rw, _) = server();
    let t = Some(rw.as_str());
    let v1 = s.expect(
        201,
        "POST",
        "/v1/memories",
        t,
        json!({"content": "The release branch is rel-1", "scope": "project/acme", "key": "release-branch"}),
    );
    std::thread::sleep(std::time::Duration::from_millis(5));
    s.expect(
        201,
        "POST",
        "/v1/memories",
        t,
        json!({"content": "The release branch is rel-2", "scope": "project/acme", "key": "release-branch"}),
    );
    let at = v1["updated_at"].as_str().unwrap();
    let body =
        |as_of: Value| json!({"query": "release branch", "view": ["project/acme"], "as_of": as_of});
    let then = s.expect(200, "POST", "/v1/recall", t, body(json!(at)));
    assert_eq!(
        then["results"][0]["content"], "The release branch is rel-1",
        "{then}"
    );
    assert!(then["results"][0]["valid_to"].is_string());
    let now = s.expect(200, "POST", "/v1/recall", t, body(Value::Null));
    assert_eq!(now["results"][0]["content"], "The release branch is rel-2");
    let e = s.expect(400, "POST", "/v1/recall", t, body(json!("last week")));
    assert_error(&e, "invalid", "as_of");
}

#[test]
fn only_an_admin_runs_learning_over_http_and_mcp() {
    let (rw, a) = token("rw", &["project/acme"], Access::ReadWrite);
    let (admin, b) = token("ops", &["project/acme"], Access::Admin);
    let s = Server::start(ServerConfig {
        tokens: vec![a, b],
        ..Default::default()
    });
    s.expect(
        201,
        "POST",
        "/v1/memories",
        Some(&rw),
        json!({"content": "Always squash commits before merging.", "scope": "project/acme",
               "kind": "conversation", "role": "user"}),
    );
    let before = s.snapshot();
    let (status, v) = s.call("POST", "/v1/learned/run", Some(&rw), None);
    assert_eq!(status, 403, "{v}");
    assert_error(&v, "forbidden", "admin");
    assert_eq!(s.snapshot(), before, "a refused run learns nothing");
    let r = s.expect(200, "POST", "/v1/learned/run", Some(&admin), Value::Null);
    assert_eq!(
        (&r["examined"], &r["learned"]),
        (&json!(1), &json!(1)),
        "{r}"
    );
    let again = s.expect(200, "POST", "/v1/learned/run", Some(&admin), Value::Null);
    assert_eq!(again["examined"], 0, "incremental: {again}");
    // The same over MCP: the `learned` tool's `run` action.
    let call = |token: &str| {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "learned", "arguments": {"action": "run"}}});
        let (status, text) = s.raw(
            "POST",
            "/mcp",
            Some(token),
            Some(body.to_string().into_bytes()),
            &[("accept", "application/json, text/event-stream")],
        );
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        (
            v["result"]["isError"] == json!(true),
            v["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_string(),
        )
    };
    let (err, text) = call(&rw);
    assert!(err && text.contains("admin"), "{text}");
    let (err, text) = call(&admin);
    assert!(!err, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["examined"], 0, "{v}");
}

#[test]
fn the_server_runs_upkeep_on_its_timer() {
    let (admin, a) = token("ops", &["project/acme"], Access::Admin);
    let s = Server::start(ServerConfig {
        tokens: vec![a],
        upkeep_every_secs: 1,
        ..Default::default()
    });
    s.expect(
        201,
        "POST",
        "/v1/memories",
        Some(&admin),
        json!({"content": "Always tag releases with the date.", "scope": "project/acme",
               "kind": "conversation", "role": "user"}),
    );
    let start = std::time::Instant::now();
    loop {
        let v = s.expect(
            200,
            "POST",
            "/v1/learned/list",
            Some(&admin),
            json!({"view": ["project/acme"]}),
        );
        if v["learned"].as_array().is_some_and(|l| l.len() == 1) {
            break;
        }
        assert!(start.elapsed().as_secs() < 20, "upkeep never ran: {v}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // A bound the timer cannot take is refused, naming the key.
    let cfg = ServerConfig {
        upkeep_every_secs: 400 * 86_400,
        ..Default::default()
    };
    let err = cfg.validate().unwrap_err().to_string();
    assert!(err.contains("server.upkeep_every_secs"), "{err}");
}

/// The inspector's page of learned memories: listed within the token's
/// scopes, shown with their evidence, confirmed and rejected by a
/// read-write token only; another tenant's is not found.
#[test]
fn the_inspector_lists_shows_confirms_and_rejects_learned_memories() {
    let (s, rw, ro) = server();
    let acme = || {
        s.expect(
            200,
            "POST",
            "/v1/learned/list",
            Some(&rw),
            json!({"view": ["project/acme"]}),
        )
    };
    let list = acme();
    let id = list["learned"][0]["memory"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let ui = crate::ui::sign_in(&s, &rw);
    let page = ui.get("/ui/learned");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body
            .contains("Always run the linter before committing<"),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("Never deploy on Fridays"),
        "another tenant's"
    );
    let one = ui.get(&format!("/ui/learned/{id}"));
    assert_eq!(one.status, 200, "{}", one.body);
    assert!(
        one.body.contains("id=\"evidence\"") && one.body.contains("s-acme"),
        "{}",
        one.body
    );
    assert!(one.body.contains("id=\"confirm\""));
    // Read-only: no controls, and a post is refused, changing nothing.
    let viewer = crate::ui::sign_in(&s, &ro);
    let seen = viewer.get(&format!("/ui/learned/{id}"));
    assert_eq!(seen.status, 200);
    assert!(!seen.body.contains("id=\"confirm\""), "{}", seen.body);
    let refused = viewer.post(&format!("/ui/learned/{id}/confirm"), &[]);
    assert_eq!(refused.status, 403, "{}", refused.body);
    let still = s.expect(
        200,
        "GET",
        &format!("/v1/learned/{id}"),
        Some(&rw),
        Value::Null,
    );
    assert_eq!(still["learned"]["status"], "proposed");
    // Confirm, then reject.
    let done = ui.post(&format!("/ui/learned/{id}/confirm"), &[]);
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(done.body.contains("Confirmed"), "{}", done.body);
    let now = s.expect(
        200,
        "GET",
        &format!("/v1/learned/{id}"),
        Some(&rw),
        Value::Null,
    );
    assert_eq!(now["learned"]["status"], "confirmed");
    let gone = ui.post(&format!("/ui/learned/{id}/reject"), &[]);
    assert_eq!(gone.status, 200, "{}", gone.body);
    assert!(gone.body.contains("Rejected"), "{}", gone.body);
    let list = acme();
    assert_eq!(list["learned"].as_array().unwrap().len(), 0);
    // Another tenant's learned memory, and no id at all: not found.
    let beta = s
        .shared
        .engine
        .learned(&strata::View::scope(Scope::parse("project/beta").unwrap()))
        .unwrap();
    let beta_id = &beta[0].0.id;
    assert_eq!(ui.get(&format!("/ui/learned/{beta_id}")).status, 404);
    assert_eq!(
        ui.post(&format!("/ui/learned/{beta_id}/reject"), &[])
            .status,
        404
    );
    assert_eq!(ui.get("/ui/learned/nope-nope").status, 404);
}
