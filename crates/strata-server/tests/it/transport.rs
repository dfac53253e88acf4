//! The transport under hostile clients (issue 22): strangers cost no body
//! reads, slow and idle connections are closed on time, the connection cap
//! holds, metrics stay bounded, and web pages cannot reach the API through
//! a browser (Host, Origin, Content-Type).

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::json;
use strata_server::{Access, AuthMode, Limits, ServerConfig};

use crate::harness::{
    Rng, Server, assert_error, closed_within, connect_from, read_response, token,
};

fn with_token(limits: Limits) -> (Server, String) {
    let (t, cfg) = token("rw", &["project/acme"], Access::ReadWrite);
    let s = Server::start(ServerConfig {
        tokens: vec![cfg],
        limits,
        ..Default::default()
    });
    (s, t)
}

fn short(header: u64, body: u64, idle: u64) -> Limits {
    Limits {
        header_timeout_secs: header,
        body_timeout_secs: body,
        idle_timeout_secs: idle,
        ..Default::default()
    }
}

/// A bad or missing token is answered from the head alone: the server
/// neither waits for nor buffers the 8 MiB the request announces.
#[test]
fn strangers_are_refused_before_their_body_is_read() {
    let (s, _) = with_token(Limits::default());
    let before = s.snapshot();
    let announced = 8 << 20;
    for (method, path) in [
        ("POST", "/v1/memories"),
        ("POST", "/v1/import"),
        ("GET", "/metrics"),
        ("POST", "/mcp"),
    ] {
        for auth in ["Authorization: Bearer strata_not_a_token\r\n", ""] {
            let started = Instant::now();
            let r = s.send_raw(
                &format!(
                    "{method} {path} HTTP/1.1\r\n{auth}Content-Type: application/json\r\nContent-Length: {announced}"
                ),
                b"",
            );
            assert_eq!(r.status, 401, "{method} {path}: {r:?}");
            assert_error(
                &r.json(),
                "unauthorized",
                if auth.is_empty() {
                    "missing"
                } else {
                    "unknown"
                },
            );
            // The body timeout is 30 s: an answer in under 2 s read no body.
            assert!(started.elapsed() < Duration::from_secs(2), "{path}");
        }
    }
    assert_eq!(s.snapshot(), before);
}

/// With a good token, a body announced over the limit is a 413 at once,
/// and one that turns out over the limit (chunked) is the same 413.
#[test]
fn oversized_bodies_are_413_with_a_token() {
    let (s, t) = with_token(Limits {
        max_body_bytes: 64 << 10,
        ..Default::default()
    });
    let before = s.snapshot();
    let started = Instant::now();
    let r = s.send_raw(
        &format!(
            "POST /v1/memories HTTP/1.1\r\nAuthorization: Bearer {t}\r\nContent-Type: application/json\r\nContent-Length: {}",
            9 << 20
        ),
        b"",
    );
    assert_eq!(r.status, 413, "{r:?}");
    assert_error(&r.json(), "too_large", "max_body_bytes");
    assert!(r.head.contains("connection: close"), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let big = json!({"content": "x".repeat(100 << 10), "scope": "project/acme"}).to_string();
    let chunked = format!("{:x}\r\n{big}\r\n0\r\n\r\n", big.len());
    let r = s.send_raw(
        &format!(
            "POST /v1/memories HTTP/1.1\r\nAuthorization: Bearer {t}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked"
        ),
        chunked.as_bytes(),
    );
    assert_eq!(r.status, 413, "{r:?}");
    assert_error(&r.json(), "too_large", "max_body_bytes");
    assert_eq!(s.snapshot(), before);
}

#[test]
fn the_bearer_scheme_is_case_insensitive() {
    let (s, t) = with_token(Limits::default());
    for scheme in ["bearer", "BEARER", "Bearer", "bEaReR"] {
        let auth = format!("{scheme} {t}");
        let (status, body) = s.raw("GET", "/v1/stats", None, None, &[("authorization", &auth)]);
        assert_eq!(status, 200, "{scheme}: {body}");
    }
    let auth = format!("Basic {t}");
    let (status, body) = s.raw("GET", "/v1/stats", None, None, &[("authorization", &auth)]);
    assert_eq!(status, 401, "{body}");
}

/// A client that never finishes its request's head is cut off after
/// `header_timeout_secs`, long before the idle timeout.
#[test]
fn a_half_sent_head_is_closed_after_the_header_timeout() {
    let (s, _) = with_token(short(1, 30, 30));
    let mut c = s.tcp();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .unwrap();
    let started = Instant::now();
    assert!(closed_within(&mut c, Duration::from_secs(5)));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(4),
        "{took:?}"
    );
    // The server still answers.
    let (status, _) = s.call("GET", "/healthz", None, None);
    assert_eq!(status, 200);
}

/// Between requests a connection may wait `idle_timeout_secs` (longer than
/// the header timeout), then it is closed.
#[test]
fn keep_alive_connections_are_closed_after_the_idle_timeout() {
    let (s, _) = with_token(short(1, 30, 3));
    let mut c = s.tcp();
    let req = format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", s.addr());
    c.write_all(req.as_bytes()).unwrap();
    assert_eq!(read_response(&mut c).status, 200);
    // Idle for longer than the header timeout: still open.
    std::thread::sleep(Duration::from_millis(1800));
    c.write_all(req.as_bytes()).unwrap();
    assert_eq!(read_response(&mut c).status, 200);
    let started = Instant::now();
    assert!(closed_within(&mut c, Duration::from_secs(8)));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(2500) && took < Duration::from_secs(6),
        "{took:?}"
    );
    // A connection that never sends anything has only the header timeout
    // (issue 51: silent connections held every slot for the idle one).
    let mut quiet = s.tcp();
    let started = Instant::now();
    assert!(closed_within(&mut quiet, Duration::from_secs(8)));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_millis(2500),
        "{took:?}"
    );
}

/// A body that stops arriving is a 408 after `body_timeout_secs`; nothing
/// is stored.
#[test]
fn a_body_that_does_not_arrive_is_408() {
    let (s, t) = with_token(short(10, 1, 30));
    let before = s.snapshot();
    let mut c = s.tcp();
    write!(
        c,
        "POST /v1/memories HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {t}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"content\": ",
        s.addr()
    )
    .unwrap();
    let started = Instant::now();
    let r = read_response(&mut c);
    let took = started.elapsed();
    assert_eq!(r.status, 408, "{r:?}");
    assert_error(&r.json(), "timeout", "body_timeout_secs");
    assert_eq!(r.json()["error"]["field"], "body");
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(4),
        "{took:?}"
    );
    assert!(closed_within(&mut c, Duration::from_secs(3)));
    assert_eq!(s.snapshot(), before);
}

/// Slow clients under the cap leave room for others; at the cap, the next
/// client waits until one of them is cut off, then is answered.
#[test]
fn the_connection_cap_holds_and_frees_as_slow_clients_time_out() {
    let slow = |s: &Server, n: usize| -> Vec<std::net::TcpStream> {
        let conns: Vec<_> = (0..n)
            .map(|_| {
                let mut c = s.tcp();
                c.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                    .unwrap();
                c
            })
            .collect();
        // Let the server accept them all.
        std::thread::sleep(Duration::from_millis(300));
        conns
    };
    let limits = Limits {
        max_connections: 8,
        ..short(2, 30, 30)
    };
    let (s, _) = with_token(limits);
    let _held = slow(&s, 6);
    let started = Instant::now();
    let (status, _) = s.call("GET", "/healthz", None, None);
    assert_eq!(status, 200);
    assert!(started.elapsed() < Duration::from_millis(1500));
    drop(_held);

    // Four slow clients of two peers fill the server (one peer alone may
    // not take the last slot, the reserve).
    let limits = Limits {
        max_connections: 4,
        ..short(2, 30, 30)
    };
    let (s, _) = with_token(limits);
    let mut held = connect_from("127.0.0.2", s.addr(), 3);
    held.extend(connect_from("127.0.0.3", s.addr(), 1));
    for c in &mut held {
        c.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let (status, _) = s.call("GET", "/healthz", None, None);
    assert_eq!(status, 200);
    let took = started.elapsed();
    // It waited for the slow ones' header timeout (2 s from their first
    // byte, 0.3 s before `started`).
    assert!(took >= Duration::from_millis(1200), "{took:?}");
    for c in &mut held {
        assert!(closed_within(c, Duration::from_secs(1)));
    }
}

/// Made-up methods all count as `other`: 500 of them add one series, not
/// 500.
#[test]
fn odd_methods_do_not_grow_the_metrics() {
    let (s, t) = with_token(Limits::default());
    let metrics = || s.raw("GET", "/metrics", Some(&t), None, &[]).1;
    s.call("GET", "/healthz", None, None);
    let before = metrics().lines().count();
    let mut rng = Rng::new(22);
    for _ in 0..500 {
        let method: String = (0..1 + rng.below(12))
            .map(|_| (b'A' + rng.below(26) as u8) as char)
            .collect();
        let path = rng.pick(&["/healthz", "/v1/recall", "/v1/nothing", "/metrics"]);
        let r = s.send_raw(
            &format!("{method} {path} HTTP/1.1\r\nAuthorization: Bearer {t}\r\nConnection: close"),
            b"",
        );
        assert!(r.status >= 200, "{r:?}");
    }
    let text = metrics();
    let grown = text.lines().count() - before;
    // `other` on each of the four routes, one series (a count per status
    // and an 18-line histogram) each: 500 methods would be thousands.
    assert!(grown <= 4 * 25, "grew by {grown} lines:\n{text}");
    for line in text.lines().filter(|l| l.contains("method=\"")) {
        let m = line.split("method=\"").nth(1).unwrap();
        let m = &m[..m.find('"').unwrap()];
        assert!(
            [
                "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE",
                "other"
            ]
            .contains(&m),
            "{line}"
        );
    }
}

/// The store's figures count every scope: only an unrestricted grant
/// (`--no-auth`) sees them; a token sees the request counters.
#[test]
fn store_figures_in_metrics_only_for_an_unrestricted_grant() {
    let (s, t) = with_token(Limits::default());
    s.expect(
        201,
        "POST",
        "/v1/memories",
        Some(&t),
        json!({"content": "x", "scope": "project/acme"}),
    );
    let (status, text) = s.raw("GET", "/metrics", Some(&t), None, &[]);
    assert_eq!(status, 200);
    assert!(text.contains("strata_http_requests_total"), "{text}");
    assert!(!text.contains("strata_store_"), "{text}");

    let open = Server::start_with(ServerConfig::default(), AuthMode::Off);
    open.expect(
        201,
        "POST",
        "/v1/memories",
        None,
        json!({"content": "x", "scope": "project/acme"}),
    );
    let (status, text) = open.raw("GET", "/metrics", None, None, &[]);
    assert_eq!(status, 200);
    for want in [
        "strata_store_memories 1",
        "strata_store_memories_by_tier{tier=\"project\"} 1",
        "strata_store_file_bytes ",
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }
}

/// A body must say it is JSON (JSONL on import): a page's form or
/// `text/plain` fetch is refused, `--no-auth` or not.
#[test]
fn bodies_must_be_typed_json() {
    let (s, t) = with_token(Limits::default());
    let open = Server::start_with(ServerConfig::default(), AuthMode::Off);
    let body = json!({"content": "x", "scope": "project/acme"}).to_string();
    for (srv, tk) in [(&s, Some(t.as_str())), (&open, None)] {
        let before = srv.snapshot();
        for ct in [
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            Some("multipart/form-data; boundary=x"),
            None,
        ] {
            let auth = tk.map_or(String::new(), |t| format!("\r\nAuthorization: Bearer {t}"));
            let typed = ct.map_or(String::new(), |c| format!("\r\nContent-Type: {c}"));
            for path in ["/v1/memories", "/v1/recall", "/v1/import"] {
                let r = srv.send_raw(
                    &format!(
                        "POST {path} HTTP/1.1{auth}{typed}\r\nContent-Length: {}",
                        body.len()
                    ),
                    body.as_bytes(),
                );
                assert_eq!(r.status, 415, "{path} {ct:?}: {r:?}");
                assert_error(&r.json(), "unsupported_media_type", "content-type");
            }
        }
        // A chunked body is checked once read.
        let auth = tk.map_or(String::new(), |t| format!("\r\nAuthorization: Bearer {t}"));
        let r = srv.send_raw(
            &format!(
                "POST /v1/memories HTTP/1.1{auth}\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked"
            ),
            format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len()).as_bytes(),
        );
        assert_eq!(r.status, 415, "{r:?}");
        assert_error(&r.json(), "unsupported_media_type", "content-type");
        assert_eq!(srv.snapshot(), before);
        let (status, v) = srv.raw(
            "POST",
            "/v1/memories",
            tk,
            Some(body.clone().into_bytes()),
            &[("content-type", "application/json; charset=utf-8")],
        );
        assert_eq!(status, 201, "{v}");
        let (_, jsonl) = srv.raw("GET", "/v1/export?view=project/acme", tk, None, &[]);
        for ct in [
            "application/x-ndjson",
            "application/jsonl",
            "application/json",
        ] {
            let (status, v) = srv.raw(
                "POST",
                "/v1/import?on_conflict=skip",
                tk,
                Some(jsonl.clone().into_bytes()),
                &[("content-type", ct)],
            );
            assert_eq!(status, 200, "{ct}: {v}");
        }
        // No body, no type needed.
        let (status, v) = srv.raw(
            "POST",
            "/v1/sessions",
            tk,
            Some(Vec::new()),
            &[("content-type", "text/plain")],
        );
        assert_ne!(status, 415, "{v}");
    }
}

/// `Host` must be an allowed name (DNS rebinding) and `Origin`, when a
/// browser sends one, too (cross-site requests); on every protected route,
/// with or without auth.
#[test]
fn host_and_origin_must_be_allowed() {
    let (s, t) = with_token(Limits::default());
    let open = Server::start_with(ServerConfig::default(), AuthMode::Off);
    for (srv, tk) in [(&s, Some(t.as_str())), (&open, None)] {
        let before = srv.snapshot();
        let auth = tk.map_or(String::new(), |t| format!("\r\nAuthorization: Bearer {t}"));
        let port = srv.addr().rsplit(':').next().unwrap().to_string();
        let body = json!({"content": "x", "scope": "project/acme"}).to_string();
        let send = |path: &str, extra: &str| {
            let method = if path == "/metrics" { "GET" } else { "POST" };
            srv.send_raw(
                &format!(
                    "{method} {path} HTTP/1.1{auth}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}{extra}",
                    body.len()
                ),
                body.as_bytes(),
            )
        };
        for path in ["/v1/memories", "/metrics", "/mcp"] {
            for host in [
                "\r\nHost: evil.example".to_string(),
                format!("\r\nHost: evil.example:{port}"),
                "\r\nHost: ".to_string(),
            ] {
                let r = send(path, &host);
                assert_eq!(r.status, 403, "{path} {host:?}: {r:?}");
                assert_error(&r.json(), "forbidden", "host");
            }
            for origin in [
                "http://evil.example",
                "null",
                "https://localhost.evil.example",
            ] {
                let r = send(path, &format!("\r\nOrigin: {origin}"));
                assert_eq!(r.status, 403, "{path} {origin}: {r:?}");
                assert_error(&r.json(), "forbidden", "origin");
            }
        }
        // No Host at all (HTTP/1.0 allows that).
        let mut c = srv.tcp();
        write!(c, "GET /v1/stats HTTP/1.0{auth}\r\n\r\n").unwrap();
        let r = read_response(&mut c);
        assert_eq!(r.status, 403, "{r:?}");
        assert_error(&r.json(), "forbidden", "host");
        assert_eq!(srv.snapshot(), before);
        // Allowed names, with or without a port, and a page on one of them.
        for extra in [
            format!("\r\nHost: localhost:{port}"),
            "\r\nHost: LOCALHOST".to_string(),
            format!("\r\nHost: [::1]:{port}"),
            format!("\r\nOrigin: http://localhost:{port}"),
            "\r\nOrigin: http://127.0.0.1:3000".to_string(),
        ] {
            let r = send("/v1/memories", &extra);
            assert_eq!(r.status, 201, "{extra:?}: {r:?}");
        }
        // Public routes answer whatever the Host.
        let r = srv.send_raw("GET /healthz HTTP/1.1\r\nHost: evil.example", b"");
        assert_eq!(r.status, 200, "{r:?}");
    }
}

/// A server that names its hosts answers to them, to its own listening
/// IP, and not to loopback names it did not list.
#[test]
fn configured_allowed_hosts_replace_the_loopback_names() {
    let (t, cfg) = token("rw", &["project/acme"], Access::ReadWrite);
    let s = Server::start(ServerConfig {
        tokens: vec![cfg],
        allowed_hosts: vec!["memory.internal".into(), "10.1.2.3:7077".into()],
        listen: "127.0.0.1:7077".into(),
        ..Default::default()
    });
    let get = |host: &str| {
        s.send_raw(
            &format!("GET /v1/stats HTTP/1.1\r\nAuthorization: Bearer {t}\r\nHost: {host}"),
            b"",
        )
        .status
    };
    assert_eq!(get("memory.internal"), 200);
    assert_eq!(get("memory.internal:9999"), 200);
    assert_eq!(get("10.1.2.3:7077"), 200);
    assert_eq!(get("10.1.2.3:7078"), 403);
    assert_eq!(get("localhost"), 403);
    // The listening address's own IP.
    assert_eq!(get("127.0.0.1:7077"), 200);

    // Without tokens, an empty list (any host) is refused.
    let dir = tempfile::tempdir().unwrap();
    let engine = strata::Engine::open(strata::Config::sqlite(dir.path().join("t.db"))).unwrap();
    let e = strata_server::Shared::new(
        engine,
        &ServerConfig {
            allowed_hosts: vec![],
            ..Default::default()
        },
        AuthMode::Off,
    )
    .unwrap_err();
    assert!(e.to_string().contains("server.allowed_hosts"), "{e}");
}

/// Heads are bounded too: one over hyper's buffer (about 400 KiB) or with
/// more than 100 fields is a 431, and the server goes on answering.
#[test]
fn oversized_heads_are_431() {
    let (s, t) = with_token(Limits::default());
    let before = s.snapshot();
    let big = format!(
        "POST /v1/recall HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {t}\r\nX-Pad: {}\r\n\r\n",
        s.addr(),
        "a".repeat(600 << 10)
    );
    let many = format!(
        "GET /v1/scopes HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {t}\r\n{}\r\n",
        s.addr(),
        (0..150)
            .map(|i| format!("X-F{i}: v\r\n"))
            .collect::<String>()
    );
    for head in [big, many] {
        let mut c = s.tcp();
        // The server may answer and close before it has read all of it.
        let _ = c.write_all(head.as_bytes());
        let r = read_response(&mut c);
        assert_eq!(r.status, 431, "{r:?}");
    }
    let (status, _) = s.call("GET", "/v1/scopes", Some(&t), None);
    assert_eq!(status, 200);
    assert_eq!(s.snapshot(), before);
}

/// Regression (a CI run): the server answered 413 from the head and closed
/// the connection with the body unread, while the client pooled it and
/// sent its next request into the closed socket. An answer that leaves a
/// body unread now says `Connection: close`.
#[test]
fn a_refused_body_does_not_break_the_next_request() {
    let (s, t) = with_token(Limits {
        max_body_bytes: 64 << 10,
        ..Default::default()
    });
    let big = json!({"content": "x".repeat(100 << 10), "scope": "project/acme"}).to_string();
    let small = json!({"content": "fits", "scope": "project/acme"}).to_string();
    for _ in 0..20 {
        let (status, v) = s.call("POST", "/v1/memories", Some(&t), Some(&big));
        assert_eq!(status, 413, "{v}");
        let (status, v) = s.call("POST", "/v1/memories", Some(&t), Some(&small));
        assert_eq!(status, 201, "{v}");
        let (status, v) = s.call("POST", "/v1/memories", Some("strata_wrong"), Some(&small));
        assert_eq!(status, 401, "{v}");
        let (status, v) = s.call("GET", "/v1/scopes", Some(&t), None);
        assert_eq!(status, 200, "{v}");
    }
}
