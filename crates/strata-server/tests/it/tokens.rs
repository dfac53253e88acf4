//! Tokens over time: expiry, revocation and new tokens without a restart
//! (the configuration file is watched), the per-token rate limit (429 with
//! `Retry-After`), admin access, last-used times.

use std::time::{Duration, Instant};

use serde_json::json;
use strata_server::{Access, ServerConfig, TokenConfig};

use crate::harness::{Server, assert_error, token};

fn remember(s: &Server, t: &str) -> u16 {
    let body = json!({"content": "x", "scope": "project/acme"}).to_string();
    s.call("POST", "/v1/memories", Some(t), Some(&body)).0
}

/// Polls `f` every 10 ms until it holds; returns how long that took (panics
/// after `within`).
fn within(within: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < within, "not within {within:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    start.elapsed()
}

/// `[[server.tokens]]` TOML for `tokens`.
fn config_text(tokens: &[TokenConfig]) -> String {
    let file = json!({"server": {"tokens": tokens}});
    toml::to_string(&file).unwrap()
}

/// Writes `text` to `path` in one rename, as `strata token` does.
fn replace(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn an_expired_token_is_refused_without_a_restart() {
    let (soon, mut a) = token("soon", &["project/acme"], Access::ReadWrite);
    let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(2);
    a.expires_at = Some(expires);
    let (gone, mut b) = token("gone", &["project/acme"], Access::ReadWrite);
    b.expires_at = Some("2020-01-01T00:00:00Z".parse().unwrap());
    let s = Server::start(ServerConfig {
        tokens: vec![a, b],
        ..Default::default()
    });
    let (status, v) = s.call(
        "POST",
        "/v1/memories",
        Some(&gone),
        Some(r#"{"content":"x","scope":"project/acme"}"#),
    );
    assert_eq!(status, 401, "{v}");
    assert_error(&v, "unauthorized", "token `gone` expired at 2020-01-01");
    assert_eq!(remember(&s, &soon), 201);
    // Refused from the first request after its time.
    within(Duration::from_secs(4), || {
        s.call("GET", "/v1/scopes", Some(&soon), None).0 == 401
    });
    let late = jiff::Timestamp::now().duration_since(expires);
    assert!(
        late >= jiff::SignedDuration::ZERO && late < jiff::SignedDuration::from_secs(1),
        "{late:?}"
    );
    let before = s.snapshot();
    assert_eq!(remember(&s, &soon), 401);
    assert_eq!(s.snapshot(), before);
}

#[test]
fn revoked_and_new_tokens_take_effect_within_a_second_of_the_file_changing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strata.toml");
    let (a, ca) = token("alpha", &["project/acme"], Access::ReadWrite);
    let (b, cb) = token("beta", &["project/acme"], Access::ReadWrite);
    let (c, cc) = token("gamma", &["project/acme"], Access::ReadWrite);
    replace(&path, &config_text(&[ca.clone(), cb.clone()]));
    let s = Server::start(ServerConfig {
        tokens: vec![ca, cb.clone()],
        ..Default::default()
    });
    s.spawn(strata_server::watch_config(s.shared.clone(), path.clone()));
    assert_eq!(remember(&s, &a), 201);
    assert_eq!(remember(&s, &c), 401);

    // Revoked: refused within a second, the other token untouched.
    replace(&path, &config_text(std::slice::from_ref(&cb)));
    let took = within(Duration::from_secs(1), || remember(&s, &a) == 401);
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(remember(&s, &b), 201);

    // A file that is not a valid configuration changes nothing.
    replace(&path, "[server]\ntokens = 'not a list'\n");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(remember(&s, &b), 201);
    assert_eq!(remember(&s, &a), 401);

    // A new token: accepted within a second.
    replace(&path, &config_text(&[cb, cc]));
    within(Duration::from_secs(1), || remember(&s, &c) == 201);

    // Last-used times are kept, and written beside the file.
    assert!(s.shared.usage.last_used("gamma").is_some());
    assert!(s.shared.usage.last_used("nobody").is_none());
    let state = strata_server::last_used_path(&path);
    within(Duration::from_secs(2), || {
        strata_server::read_last_used(&state).contains_key("gamma")
    });
    let times = strata_server::read_last_used(&state);
    assert!(times["alpha"] <= times["gamma"], "{times:?}");
}

#[test]
fn a_reload_with_a_bad_token_keeps_the_tokens_it_had() {
    let (a, ca) = token("alpha", &["project/acme"], Access::ReadWrite);
    let s = Server::start(ServerConfig {
        tokens: vec![ca.clone()],
        ..Default::default()
    });
    let mut bad = ca.clone();
    bad.rate_limit_per_minute = Some(0);
    let e = s.shared.reload_tokens(&[bad]).unwrap_err().to_string();
    assert!(e.contains("rate_limit_per_minute"), "{e}");
    assert_eq!(remember(&s, &a), 201);
    assert_eq!(s.shared.reload_tokens(&[]).unwrap(), 0);
    assert_eq!(remember(&s, &a), 401);
}

#[test]
fn a_token_over_its_rate_gets_429_with_retry_after() {
    let (slow, mut a) = token("slow", &["project/acme"], Access::ReadWrite);
    a.rate_limit_per_minute = Some(3);
    let (free, b) = token("free", &["project/acme"], Access::ReadWrite);
    let s = Server::start(ServerConfig {
        tokens: vec![a, b],
        ..Default::default()
    });
    for _ in 0..3 {
        assert_eq!(remember(&s, &slow), 201);
    }
    let before = s.snapshot();
    let r = s.send_raw(
        &format!(
            "POST /v1/memories HTTP/1.1\r\nAuthorization: Bearer {slow}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close"
        ),
        b"{}",
    );
    assert_eq!(r.status, 429, "{r:?}");
    assert_error(&r.json(), "rate_limited", "limit of 3 requests a minute");
    let retry: u64 = r
        .head
        .lines()
        .find_map(|l| l.strip_prefix("retry-after: "))
        .unwrap_or_else(|| panic!("{}", r.head))
        .trim()
        .parse()
        .unwrap();
    assert!((1..=20).contains(&retry), "{retry}");
    assert_eq!(s.snapshot(), before);
    // Other tokens have their own budget.
    assert_eq!(remember(&s, &free), 201);
}

#[test]
fn store_figures_in_metrics_for_an_admin_token_only() {
    let (admin, a) = token("ops", &["project/acme"], Access::Admin);
    let (rw, b) = token("rw", &["project/acme"], Access::ReadWrite);
    let s = Server::start(ServerConfig {
        tokens: vec![a, b],
        ..Default::default()
    });
    assert_eq!(remember(&s, &admin), 201, "admin tokens write");
    let (status, text) = s.raw("GET", "/metrics", Some(&rw), None, &[]);
    assert_eq!(status, 200);
    assert!(!text.contains("strata_store_memories "), "{text}");
    let (status, text) = s.raw("GET", "/metrics", Some(&admin), None, &[]);
    assert_eq!(status, 200);
    assert!(text.contains("strata_store_memories 1"), "{text}");
}
