//! The web inspector over HTTP, without a browser: sign-in, escaping, the
//! security headers, CSRF and read-only refusals, compare-and-swap edits,
//! bad input; every refusal changes nothing. `browser.rs` drives the same
//! pages in Chromium.

use serde_json::json;
use strata_server::{Access, ServerConfig};

use crate::harness::{Server, token};

pub const XSS: &str = "<img src=x onerror=alert(1)> and <script>alert(2)</script>";

/// An answer of the inspector.
pub struct Page {
    pub status: u16,
    pub headers: ureq::http::HeaderMap,
    pub body: String,
}

impl Page {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
}

/// One request to the inspector, redirects not followed; `form` is sent
/// as `application/x-www-form-urlencoded`.
pub fn fetch(
    s: &Server,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    form: Option<&[(&str, &str)]>,
    headers: &[(&str, &str)],
) -> Page {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let mut b = ureq::http::Request::builder()
        .method(method)
        .uri(format!("{}{path}", s.base));
    if let Some(c) = cookie {
        b = b.header("cookie", c);
    }
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let mut resp = match form {
        Some(fields) => {
            let body: String = form_urlencoded::Serializer::new(String::new())
                .extend_pairs(fields)
                .finish();
            let b = if headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            {
                b
            } else {
                b.header("content-type", "application/x-www-form-urlencoded")
            };
            agent.run(b.body(body.into_bytes()).unwrap())
        }
        None => agent.run(b.body(()).unwrap()),
    }
    .unwrap();
    Page {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
        body: resp.body_mut().read_to_string().unwrap(),
    }
}

/// The value of the first `name="csrf"` field of a page.
pub fn csrf_of(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").expect("a CSRF field") + 19;
    html[at..].split('"').next().unwrap().to_string()
}

/// A signed-in browser, as far as HTTP goes: its cookie and CSRF token.
pub struct Ui<'a> {
    pub s: &'a Server,
    pub cookie: String,
    pub csrf: String,
}

pub fn sign_in<'a>(s: &'a Server, secret: &str) -> Ui<'a> {
    let p = fetch(
        s,
        "POST",
        "/ui/login",
        None,
        Some(&[("token", secret)]),
        &[],
    );
    assert_eq!(p.status, 303, "{}", p.body);
    assert_eq!(p.header("location"), "/ui");
    let set = p.header("set-cookie").to_string();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(set.contains(attr), "{set}");
    }
    let cookie = set.split(';').next().unwrap().to_string();
    let home = fetch(s, "GET", "/ui", Some(&cookie), None, &[]);
    assert_eq!(home.status, 200, "{}", home.body);
    Ui {
        s,
        csrf: csrf_of(&home.body),
        cookie,
    }
}

impl Ui<'_> {
    pub fn get(&self, path: &str) -> Page {
        fetch(self.s, "GET", path, Some(&self.cookie), None, &[])
    }

    /// A form with the session's CSRF token added.
    pub fn post(&self, path: &str, fields: &[(&str, &str)]) -> Page {
        let mut all = vec![("csrf", self.csrf.as_str())];
        all.extend_from_slice(fields);
        fetch(self.s, "POST", path, Some(&self.cookie), Some(&all), &[])
    }
}

struct Fixture {
    s: Server,
    rw: String,
    ro: String,
    xss_id: String,
    other_id: String,
}

fn fixture() -> Fixture {
    let (rw, a) = token("editor", &["project/acme", "global"], Access::ReadWrite);
    let (ro, b) = token("viewer", &["project/acme"], Access::Read);
    let (admin, c) = token("admin", &["project", "global"], Access::ReadWrite);
    let s = Server::start(ServerConfig {
        tokens: vec![a, b, c],
        ..Default::default()
    });
    let remember = |content: &str, scope: &str| {
        let m = s.expect(
            201,
            "POST",
            "/v1/memories",
            Some(&admin),
            json!({"content": content, "scope": scope, "kind": "decision"}),
        );
        m["id"].as_str().unwrap().to_string()
    };
    remember("We chose PostgreSQL for billing", "project/acme");
    let xss_id = remember(XSS, "project/acme/sprint/s1");
    let other_id = remember("beta's launch date is secret", "project/beta");
    Fixture {
        s,
        rw,
        ro,
        xss_id,
        other_id,
    }
}

#[test]
fn ui_pages_need_a_session_and_unknown_tokens_are_refused() {
    let f = fixture();
    let p = fetch(&f.s, "GET", "/ui/search", None, None, &[]);
    assert_eq!(p.status, 303);
    assert_eq!(p.header("location"), "/ui/login");
    let p = fetch(
        &f.s,
        "GET",
        "/ui/search",
        Some("strata_ui=forged"),
        None,
        &[],
    );
    assert_eq!(p.status, 303);
    // A path that is no page: a page saying so, with the policy headers.
    let p = fetch(&f.s, "GET", "/ui/no/such/page", None, None, &[]);
    assert_eq!(p.status, 404);
    assert!(
        p.header("content-type").starts_with("text/html"),
        "{}",
        p.header("content-type")
    );
    assert!(p.body.contains("no page at /ui/no/such/page"), "{}", p.body);
    assert!(!p.header("content-security-policy").is_empty());
    let p = fetch(
        &f.s,
        "POST",
        "/ui/login",
        None,
        Some(&[("token", "strata_nope")]),
        &[],
    );
    assert_eq!(p.status, 401);
    assert!(p.body.contains("unknown token"), "{}", p.body);
    assert!(p.header("set-cookie").is_empty());
    let p = fetch(
        &f.s,
        "POST",
        "/ui/memory/x/edit",
        None,
        Some(&[("csrf", "x")]),
        &[],
    );
    assert_eq!(p.status, 401, "{}", p.body);
    // The token is never in a URL: the sign-in answers with a cookie and
    // a redirect to a plain path.
    let ui = sign_in(&f.s, &f.rw);
    assert!(!ui.cookie.contains(&f.rw));
    // Signed out, the cookie is worth nothing.
    let p = ui.post("/ui/logout", &[]);
    assert_eq!(p.status, 303);
    assert_eq!(ui.get("/ui").status, 303);
}

#[test]
fn ui_escapes_memory_text_and_sends_a_strict_policy() {
    let f = fixture();
    let ui = sign_in(&f.s, &f.rw);
    for path in [
        format!("/ui/memory/{}", f.xss_id),
        "/ui/search?q=alert&view=project%2Facme%2F**".to_string(),
        format!("/ui/memory/{}/forget", f.xss_id),
    ] {
        let p = ui.get(&path);
        assert_eq!(p.status, 200, "{path}: {}", p.body);
        assert!(
            p.body.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "{path}: {}",
            p.body
        );
        assert!(!p.body.contains("<img"), "{path}");
        assert!(!p.body.contains("<script>alert"), "{path}");
        assert_eq!(
            p.header("content-security-policy"),
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
        );
        assert_eq!(p.header("x-frame-options"), "DENY");
        assert_eq!(p.header("x-content-type-options"), "nosniff");
        assert_eq!(p.header("cache-control"), "no-store");
        // No inline script or style: the policy would block them.
        assert!(
            !p.body.contains("<script>") && !p.body.contains("style="),
            "{path}"
        );
    }
    // A query echoed back is escaped too.
    let p = ui.get("/ui/search?q=%22%3E%3Cb%3Ex");
    assert!(
        p.body.contains("value=\"&quot;&gt;&lt;b&gt;x\""),
        "{}",
        p.body
    );
    for asset in ["/ui/assets/ui.js", "/ui/assets/ui.css"] {
        let p = fetch(&f.s, "GET", asset, None, None, &[]);
        assert_eq!(p.status, 200);
        assert!(p.body.len() > 100);
    }
}

#[test]
fn ui_posts_without_the_csrf_token_or_from_another_site_are_refused() {
    let f = fixture();
    let ui = sign_in(&f.s, &f.rw);
    let before = f.s.snapshot();
    let path = format!("/ui/memory/{}/edit", f.xss_id);
    let edit = [("expected_version", "1"), ("content", "changed")];
    let zeros = "0".repeat(64);
    for csrf in [None, Some(""), Some(zeros.as_str())] {
        let mut fields = edit.to_vec();
        if let Some(c) = csrf {
            fields.push(("csrf", c));
        }
        let p = fetch(&f.s, "POST", &path, Some(&ui.cookie), Some(&fields), &[]);
        assert_eq!(p.status, 403, "{csrf:?}: {}", p.body);
        assert!(p.body.contains("csrf"), "{}", p.body);
    }
    // The right token from another site's page.
    let mut fields = edit.to_vec();
    fields.push(("csrf", &ui.csrf));
    let p = fetch(
        &f.s,
        "POST",
        &path,
        Some(&ui.cookie),
        Some(&fields),
        &[("origin", "https://evil.example")],
    );
    assert_eq!(p.status, 403, "{}", p.body);
    assert!(p.body.contains("origin"), "{}", p.body);
    // Not a form.
    let p = fetch(
        &f.s,
        "POST",
        &path,
        Some(&ui.cookie),
        Some(&fields),
        &[("content-type", "text/plain")],
    );
    assert_eq!(p.status, 415, "{}", p.body);
    // Another session's CSRF token is no good either.
    let other = sign_in(&f.s, &f.rw);
    let p = fetch(
        &f.s,
        "POST",
        &path,
        Some(&ui.cookie),
        Some(&[edit[0], edit[1], ("csrf", &other.csrf)]),
        &[],
    );
    assert_eq!(p.status, 403);
    assert_eq!(f.s.snapshot(), before);
}

#[test]
fn ui_read_only_tokens_get_no_edit_controls_and_their_edits_are_refused() {
    let f = fixture();
    let ui = sign_in(&f.s, &f.ro);
    let page = ui.get(&format!("/ui/memory/{}", f.xss_id));
    assert_eq!(page.status, 200);
    assert!(page.body.contains("viewer (read-only)"), "{}", page.body);
    for control in ["/edit\"", "/pin\"", "/promote\"", "/forget\""] {
        assert!(!page.body.contains(control), "{control}: {}", page.body);
    }
    let before = f.s.snapshot();
    let id = &f.xss_id;
    for (path, fields) in [
        (
            format!("/ui/memory/{id}/edit"),
            vec![("expected_version", "1"), ("content", "forged")],
        ),
        (
            format!("/ui/memory/{id}/pin"),
            vec![("expected_version", "1"), ("pinned", "true")],
        ),
        (
            format!("/ui/memory/{id}/promote"),
            vec![("to", "project/acme")],
        ),
        (format!("/ui/memory/{id}/forget"), vec![]),
        (
            "/ui/import".to_string(),
            vec![("step", "import"), ("jsonl", "{}")],
        ),
    ] {
        let p = ui.post(&path, &fields);
        assert_eq!(p.status, 403, "{path}: {}", p.body);
        assert!(p.body.contains("read"), "{path}: {}", p.body);
    }
    assert_eq!(ui.get(&format!("/ui/memory/{id}/forget")).status, 403);
    assert_eq!(f.s.snapshot(), before);
}

#[test]
fn ui_edit_is_a_compare_and_swap_and_a_conflict_is_shown() {
    let f = fixture();
    let ui = sign_in(&f.s, &f.rw);
    let path = format!("/ui/memory/{}/edit", f.xss_id);
    let p = ui.post(
        &path,
        &[
            ("expected_version", "1"),
            ("content", "first edit"),
            ("tags", "a, b"),
            ("importance", "0.9"),
        ],
    );
    assert_eq!(p.status, 303, "{}", p.body);
    assert_eq!(
        p.header("location"),
        format!("/ui/memory/{}?saved=1", f.xss_id)
    );
    let m = f.s.shared.engine.get(&f.xss_id).unwrap().unwrap();
    assert_eq!((m.content.as_str(), m.version), ("first edit", 2));
    assert_eq!(m.tags, ["a", "b"]);
    let before = f.s.snapshot();
    // Based on version 1, which is gone: a conflict, the text kept, nothing saved.
    let p = ui.post(
        &path,
        &[("expected_version", "1"), ("content", "stale <edit>")],
    );
    assert_eq!(p.status, 409, "{}", p.body);
    assert!(
        p.body
            .contains("Conflict: your edit was based on version 1"),
        "{}",
        p.body
    );
    assert!(p.body.contains("stale &lt;edit&gt;"), "{}", p.body);
    assert!(p.body.contains("name=\"expected_version\" value=\"2\""));
    assert_eq!(f.s.snapshot(), before);
    // Pin, with the current version.
    let p = ui.post(
        &format!("/ui/memory/{}/pin", f.xss_id),
        &[("expected_version", "2"), ("pinned", "true")],
    );
    assert_eq!(p.status, 303, "{}", p.body);
    assert!(f.s.shared.engine.get(&f.xss_id).unwrap().unwrap().pinned);
    // Promote: a copy in another scope of the token.
    let p = ui.post(
        &format!("/ui/memory/{}/promote", f.xss_id),
        &[("to", "project/acme")],
    );
    assert_eq!(p.status, 303, "{}", p.body);
    let copy = p.header("location").trim_start_matches("/ui/memory/");
    let copy = copy.split('?').next().unwrap();
    assert_ne!(copy, f.xss_id);
    let c = f.s.shared.engine.get(copy).unwrap().unwrap();
    assert_eq!(c.scope.as_str(), "project/acme");
    let p = ui.get(&format!("/ui/memory/{copy}"));
    assert!(
        p.body
            .contains(&format!("{} in project/acme/sprint/s1", f.xss_id)),
        "{}",
        p.body
    );
}

#[test]
fn ui_bad_input_is_a_clear_error_and_changes_nothing() {
    let f = fixture();
    let ui = sign_in(&f.s, &f.rw);
    let before = f.s.snapshot();
    let p = ui.get("/ui/memory/0190-no-such-memory");
    assert_eq!(p.status, 404);
    assert!(p.body.contains("0190-no-such-memory"), "{}", p.body);
    // Outside the token reads as not found, like the API.
    let p = ui.get(&format!("/ui/memory/{}", f.other_id));
    assert_eq!(p.status, 404);
    assert!(!p.body.contains("launch date"));
    for (query, expect) in [
        ("filter=%7B%22kind%22", "filter: not JSON"),
        (
            "filter=%7B%22importance%22%3A%7B%22%24gte2%22%3A1%7D%7D",
            "$gte2",
        ),
        ("strategy=loudest", "loudest"),
        ("limit=many", "limit"),
        ("view=project%2Fbeta%2F**", "project/beta"),
        ("view=Not+a+scope%21", "Not"),
    ] {
        let p = ui.get(&format!("/ui/search?{query}"));
        assert!(p.status == 400 || p.status == 403, "{query}: {}", p.status);
        assert!(p.body.contains("notice error"), "{query}: {}", p.body);
        assert!(p.body.contains(expect), "{query}: {}", p.body);
    }
    let id = &f.xss_id;
    for (path, fields, expect) in [
        (
            format!("/ui/memory/{id}/edit"),
            vec![("expected_version", "one"), ("content", "x")],
            "expected_version",
        ),
        (
            format!("/ui/memory/{id}/edit"),
            vec![("expected_version", "1"), ("importance", "lots")],
            "importance",
        ),
        (
            format!("/ui/memory/{id}/edit"),
            vec![("expected_version", "1"), ("importance", "7")],
            "importance",
        ),
        (
            format!("/ui/memory/{id}/pin"),
            vec![("expected_version", "1"), ("pinned", "maybe")],
            "pinned",
        ),
        (
            format!("/ui/memory/{id}/promote"),
            vec![("to", "project/beta")],
            "project/beta",
        ),
        (format!("/ui/memory/{id}/promote"), vec![("to", "")], "to"),
        ("/ui/memory/nope/forget".into(), vec![], "nope"),
        (
            "/ui/import".into(),
            vec![("step", "check"), ("jsonl", "not json")],
            "line 1",
        ),
        (
            "/ui/import".into(),
            vec![("step", "check"), ("jsonl", "")],
            "no lines",
        ),
        (
            "/ui/import".into(),
            vec![("step", "import"), ("jsonl", "{\"x\": 1}")],
            "line 1",
        ),
        (
            "/ui/import".into(),
            vec![("on_conflict", "merge"), ("jsonl", "x")],
            "on_conflict",
        ),
    ] {
        let p = ui.post(&path, &fields);
        assert!(
            (400..500).contains(&p.status),
            "{path} {fields:?}: {}",
            p.status
        );
        assert!(p.body.contains(expect), "{path} {fields:?}: {}", p.body);
    }
    let p = ui.get("/ui/context?profile=nosuch");
    assert_eq!(p.status, 400);
    assert!(p.body.contains("unknown profile `nosuch`"), "{}", p.body);
    let p = ui.get("/ui/context?profile=global&max_tokens=big");
    assert_eq!(p.status, 400);
    assert!(p.body.contains("max_tokens"));
    assert_eq!(f.s.snapshot(), before);
}

#[test]
fn ui_forget_shows_what_it_deletes_then_deletes_it_everywhere() {
    let f = fixture();
    let ui = sign_in(&f.s, &f.rw);
    let id = &f.xss_id;
    let p = ui.post(
        &format!("/ui/memory/{id}/edit"),
        &[("expected_version", "1"), ("content", "v2")],
    );
    assert_eq!(p.status, 303);
    let before = f.s.snapshot();
    let p = ui.get(&format!("/ui/memory/{id}/forget"));
    assert_eq!(p.status, 200);
    assert!(p.body.contains("its 1 earlier version(s)"), "{}", p.body);
    assert!(p.body.contains(id.as_str()));
    assert_eq!(
        f.s.snapshot(),
        before,
        "the confirmation page deletes nothing"
    );
    let p = ui.post(&format!("/ui/memory/{id}/forget"), &[]);
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.body.contains("Forgot 1 memory"), "{}", p.body);
    assert!(f.s.shared.engine.get(id).unwrap().is_none());
    assert!(f.s.shared.engine.history(id).unwrap().is_empty());
    assert_eq!(ui.get(&format!("/ui/memory/{id}")).status, 404);
}

#[test]
fn ui_scopes_search_context_and_sessions_show_only_what_the_token_sees() {
    let f = fixture();
    let ui = sign_in(&f.s, &f.rw);
    let p = ui.get("/ui");
    assert!(
        p.body.contains(">acme<") && p.body.contains(">s1<"),
        "{}",
        p.body
    );
    assert!(!p.body.contains("beta"), "{}", p.body);
    // Counts per kind are of what the token sees: beta's decision is not
    // one of them.
    let kinds = &p.body[p.body.find("id=\"kinds\"").unwrap()..];
    assert!(kinds.contains("<td>decision</td><td>2</td>"), "{kinds}");
    let p = ui.get("/ui/search?q=PostgreSQL+billing");
    assert_eq!(p.status, 200);
    assert!(p.body.contains("1 result(s)"), "{}", p.body);
    assert!(
        p.body.contains("score parts") && p.body.contains("relevance"),
        "{}",
        p.body
    );
    assert!(!p.body.contains("launch date"));
    // Looking is not an access.
    let hits =
        f.s.shared
            .engine
            .list(&strata::List::new(
                strata::View::parse(&["project/acme"]).unwrap(),
            ))
            .unwrap();
    assert!(hits.iter().all(|m| m.access_count == 0));
    f.s.shared
        .engine
        .remember(strata::NewMemory::new(
            strata::Scope::global(),
            "Prefer tabs over spaces",
        ))
        .unwrap();
    let p = ui.get("/ui/context?profile=global&query=tabs");
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.body.contains("tokens used"), "{}", p.body);
    assert!(p.body.contains("Prefer tabs over spaces"), "{}", p.body);
    assert!(p.body.contains("id=\"sources\""));
    let p = ui.get("/ui/sessions");
    assert_eq!(p.status, 200);
    assert!(p.body.contains("session(s)"));
}

#[test]
fn ui_export_is_the_views_jsonl_and_import_checks_first() {
    let f = fixture();
    let ui = sign_in(&f.s, &f.rw);
    let p = ui
        .get("/ui/export.jsonl?view=project%2Facme%2F**&archived=true&history=true&sensitive=true");
    assert_eq!(p.status, 200);
    assert_eq!(p.header("content-type"), "application/x-ndjson");
    assert!(p.header("content-disposition").starts_with("attachment"));
    let lines: Vec<&str> = p.body.lines().collect();
    assert_eq!(lines.len(), 2, "{}", p.body);
    assert!(!p.body.contains("launch date"));
    let p = ui.get("/ui/export.jsonl?view=project%2Fbeta%2F**");
    assert_eq!(p.status, 403);
    // Forget them, then bring them back: a dry run first, which changes nothing.
    f.s.shared
        .engine
        .forget(
            &strata::Forget::Scope(strata::Scope::parse("project/acme").unwrap()),
            strata::ForgetOptions {
                confirm: strata::Confirm::No,
                force: true,
                dry_run: false,
            },
        )
        .unwrap();
    let before = f.s.snapshot();
    let jsonl = lines.join("\n");
    let p = ui.post(
        "/ui/import",
        &[
            ("step", "check"),
            ("jsonl", &jsonl),
            ("on_conflict", "error"),
        ],
    );
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.body.contains("Dry run: 2 memory(ies)"), "{}", p.body);
    assert!(p.body.contains("0 id(s) exist already"), "{}", p.body);
    assert_eq!(f.s.snapshot(), before);
    let p = ui.post(
        "/ui/import",
        &[
            ("step", "import"),
            ("jsonl", &jsonl),
            ("on_conflict", "error"),
        ],
    );
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(f.s.shared.engine.get(&f.xss_id).unwrap().is_some());
    // Again: both exist now; the dry run says so.
    let p = ui.post(
        "/ui/import",
        &[
            ("step", "check"),
            ("jsonl", &jsonl),
            ("on_conflict", "skip"),
        ],
    );
    assert!(p.body.contains("2 id(s) exist already"), "{}", p.body);
}

#[test]
fn ui_one_time_login_codes_work_once() {
    let f = fixture();
    let code = f.s.shared.inspector.login_code(strata_server::Grant::all());
    let path = format!("/ui/login/{code}");
    let p = fetch(&f.s, "GET", &path, None, None, &[]);
    assert_eq!(p.status, 303);
    assert_eq!(p.header("location"), "/ui");
    let cookie = p
        .header("set-cookie")
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let home = fetch(&f.s, "GET", "/ui", Some(&cookie), None, &[]);
    assert!(home.body.contains("beta"), "every scope: {}", home.body);
    let again = fetch(&f.s, "GET", &path, None, None, &[]);
    assert_eq!(again.status, 401);
    assert!(again.header("set-cookie").is_empty());
}

/// Every page's time and weight at 100,000 memories (release build):
/// `cargo test --release -p strata-server --test it ui_pages_at_100k -- --ignored --nocapture`.
/// Prints the median and slowest of 20 requests per page, client-side
/// over loopback (so an upper bound of the server's time), and each
/// page's weight with the stylesheet and script.
#[test]
#[ignore = "seeds 100,000 memories; run in release to measure"]
fn ui_pages_at_100k_memories_answer_within_50ms() {
    use crate::harness::Rng;
    use std::time::Instant;
    let (rw, a) = token("editor", &["project", "global", "task"], Access::ReadWrite);
    let s = Server::start(ServerConfig {
        tokens: vec![a],
        ..Default::default()
    });
    let words = [
        "billing",
        "invoice",
        "postgres",
        "retry",
        "webhook",
        "cache",
        "deploy",
        "rollback",
        "latency",
        "schema",
        "migration",
        "token",
        "budget",
        "queue",
        "index",
        "shard",
        "timeout",
        "rounding",
        "currency",
        "ledger",
        "audit",
        "tenant",
        "export",
        "search",
    ];
    let kinds = [
        strata::Kind::Decision,
        strata::Kind::Finding,
        strata::Kind::Conversation,
        strata::Kind::Convention,
    ];
    let mut rng = Rng::new(7);
    let started = Instant::now();
    let mut last = String::new();
    for chunk in 0..100 {
        let batch: Vec<strata::NewMemory> = (0..1000)
            .map(|i| {
                let n = chunk * 1000 + i;
                let scope = match n % 10 {
                    0 => "global".to_string(),
                    1..=2 => format!("task/t-{}", n % 500),
                    _ => format!("project/p{}/sprint/s{}", n % 7, n % 13),
                };
                let text: Vec<&str> = (0..12).map(|_| *rng.pick(&words)).collect();
                strata::NewMemory::new(
                    strata::Scope::parse(&scope).unwrap(),
                    format!("memory {n}: {}", text.join(" ")),
                )
                .kind(kinds[n % kinds.len()].clone())
            })
            .collect();
        let stored = s
            .shared
            .engine
            .remember_batch(batch, strata::Confirm::Yes)
            .unwrap();
        last = stored.last().unwrap().id.clone();
    }
    eprintln!(
        "seeded 100,000 memories in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let ui = sign_in(&s, &rw);
    let assets = ["/ui/assets/ui.css", "/ui/assets/ui.js"]
        .iter()
        .map(|a| ui.get(a).body.len())
        .sum::<usize>();
    let pages = [
        "/ui".to_string(),
        "/ui/search?q=billing+webhook+retry".to_string(),
        "/ui/search?q=ledger+audit&view=project%2Fp3%2F**&strategy=relevance".to_string(),
        "/ui/search?q=&filter=%7B%22kind%22%3A%22decision%22%7D&strategy=recency&view=project%2F**"
            .to_string(),
        format!("/ui/memory/{last}"),
        format!("/ui/memory/{last}/forget"),
        "/ui/context?profile=global&task=t-42&project=p3&query=billing+retry".to_string(),
        "/ui/sessions".to_string(),
        "/ui/export".to_string(),
        "/ui/import".to_string(),
    ];
    let mut worst = 0.0f64;
    for path in &pages {
        let mut times = Vec::new();
        let mut bytes = 0;
        for _ in 0..20 {
            let t = Instant::now();
            let p = ui.get(path);
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(p.status, 200, "{path}: {}", p.body);
            bytes = p.body.len();
        }
        times.sort_by(f64::total_cmp);
        let weight = bytes + assets;
        eprintln!(
            "{path}: median {:.1} ms, slowest {:.1} ms, {:.1} KB with assets",
            times[10],
            times[19],
            weight as f64 / 1024.0
        );
        worst = worst.max(times[10]);
        assert!(weight <= 200 * 1024, "{path}: {weight} bytes");
    }
    assert!(worst <= 50.0, "a page's median took {worst:.1} ms");
}

/// A session follows its token as the server's table says now: a token
/// revoked (or reloaded expired) ends the sessions it signed in, at their
/// next request; an expired token cannot sign in.
#[test]
fn ui_sessions_end_when_their_token_is_revoked_or_expires() {
    let (rw, a) = token("editor", &["project/acme"], Access::ReadWrite);
    let (other, b) = token("other", &["project/acme"], Access::Read);
    let s = Server::start(ServerConfig {
        tokens: vec![a.clone(), b.clone()],
        ..Default::default()
    });
    let ui = sign_in(&s, &rw);
    let kept = sign_in(&s, &other);
    // Revoked: the next page is the sign-in, and a form is refused.
    s.shared.reload_tokens(std::slice::from_ref(&b)).unwrap();
    let p = ui.get("/ui/search");
    assert_eq!(p.status, 303, "{}", p.body);
    assert_eq!(p.header("location"), "/ui/login");
    let p = ui.post("/ui/logout", &[]);
    assert_eq!(p.status, 401, "{}", p.body);
    assert_eq!(
        kept.get("/ui/search").status,
        200,
        "another token's session stays"
    );
    // Given back, the old session is still gone: it ended.
    s.shared.reload_tokens(&[a.clone(), b.clone()]).unwrap();
    assert_eq!(ui.get("/ui/search").status, 303);
    // Expired since sign-in: ended too; and an expired token cannot sign in.
    let ui = sign_in(&s, &rw);
    let expired = strata_server::TokenConfig {
        expires_at: Some(jiff::Timestamp::now() - jiff::SignedDuration::from_secs(1)),
        ..a
    };
    s.shared.reload_tokens(&[expired, b]).unwrap();
    assert_eq!(ui.get("/ui/search").status, 303);
    let p = fetch(
        &s,
        "POST",
        "/ui/login",
        None,
        Some(&[("token", rw.as_str())]),
        &[],
    );
    assert_eq!(p.status, 401, "{}", p.body);
    assert!(p.body.contains("expired"), "{}", p.body);
    assert!(p.header("set-cookie").is_empty());
}

/// Regression (issue 56): `user/ana` was counted under the tier "project",
/// and the context preview's "85 tokens were available" said nothing of
/// what they were.
#[test]
fn ui_a_user_scope_counts_under_its_own_root_and_the_preview_says_what_it_counts() {
    let (rw, t) = token(
        "ana",
        &["project/acme", "user/ana", "global"],
        Access::ReadWrite,
    );
    let s = Server::start(ServerConfig {
        tokens: vec![t],
        ..Default::default()
    });
    for (content, scope) in [
        ("Ana prefers short answers", "user/ana"),
        ("Ana reads the changelog first", "user/ana"),
        ("We chose PostgreSQL for billing", "project/acme"),
        ("Prefer tabs over spaces", "global"),
    ] {
        s.expect(
            201,
            "POST",
            "/v1/memories",
            Some(&rw),
            json!({"content": content, "scope": scope}),
        );
    }
    let ui = sign_in(&s, &rw);
    let p = ui.get("/ui");
    let tiers = &p.body[p.body.find("id=\"tiers\"").unwrap()..];
    let tiers = &tiers[..tiers.find("</table>").unwrap()];
    assert!(tiers.contains("<td>user</td><td>2</td>"), "{tiers}");
    assert!(tiers.contains("<td>project</td><td>1</td>"), "{tiers}");
    assert!(tiers.contains("<td>global</td><td>1</td>"), "{tiers}");
    let p = ui.get("/ui/context?profile=global&query=tabs&max_tokens=500");
    assert_eq!(p.status, 200, "{}", p.body);
    let total = &p.body[p.body.find("id=\"ctx-total\"").unwrap()..];
    let total = &total[..total.find("</p>").unwrap()];
    assert!(!total.contains("were available"), "{total}");
    assert!(total.contains("of the budget's 500 tokens"), "{total}");
    assert!(total.contains("candidate"), "{total}");
}
