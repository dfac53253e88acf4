//! Running a server: `strata token new --write`, `token list`,
//! `token revoke` against the configuration a real `strata serve` reads,
//! and the access log.

use serde_json::json;

use crate::server::{Serve, agent, post};
use crate::util::{Env, write};

/// A fresh token written into the config; returns the token.
fn new_token(e: &Env, name: &str, scope: &str) -> String {
    let out = e.json(&[
        "token",
        "new",
        "--name",
        name,
        "--scope",
        scope,
        "--access",
        "read_write",
        "--write",
    ]);
    assert!(
        out["written_to"].as_str().unwrap().ends_with("strata.toml"),
        "{out}"
    );
    out["token"].as_str().unwrap().to_string()
}

/// The status of a remember in `scope` with `token`.
fn remember(s: &Serve, token: &str, scope: &str) -> u16 {
    let url = format!("{}/v1/memories", s.base);
    post(
        &agent(),
        &url,
        token,
        &json!({"content": "hello", "scope": scope}),
    )
    .unwrap()
    .0
}

#[test]
fn token_write_list_revoke_edit_the_config_the_server_reads() {
    let e = Env::new();
    let cfg = e.path("strata.toml");
    let mine = "# my settings\n[server]\nlisten = \"127.0.0.1:7077\" # a comment";
    write(&cfg, mine);
    let a = new_token(&e, "alpha", "project/a");
    let b = new_token(&e, "beta", "project/b");
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(
        text.starts_with(mine),
        "the file keeps what it had:\n{text}"
    );
    assert!(
        !text.contains(&a) && !text.contains(&b),
        "no secret in the file"
    );
    assert_eq!(text.matches("[[server.tokens]]").count(), 2, "{text}");

    // Listed by name, access and scopes; no secret and no hash.
    let list = e.ok(&["token", "list"]);
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 3, "{list}");
    assert!(
        lines[1].starts_with("alpha  read_write  project/a"),
        "{list}"
    );
    assert!(
        lines[2].starts_with("beta   read_write  project/b"),
        "{list}"
    );
    let json = e.json(&["token", "list"]);
    assert_eq!(json[0]["name"], "alpha");
    assert_eq!(json[1]["scopes"][0], "project/b");
    let hash_a = text
        .lines()
        .find_map(|l| l.strip_prefix("secret_sha256 = \""))
        .unwrap()
        .trim_end_matches('"');
    for out in [list.clone(), json.to_string()] {
        assert!(!out.contains(&a) && !out.contains(hash_a), "{out}");
    }

    // A name taken, a YAML config: refused, nothing written.
    let err = e.fails(
        &[
            "token", "new", "--name", "alpha", "--scope", "global", "--write",
        ],
        2,
    );
    assert!(err.contains("already has a token named `alpha`"), "{err}");
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), text);
    write(&e.path("memory.yaml"), "memory: {}\n");
    let err = e.fails(
        &[
            "--config",
            "memory.yaml",
            "token",
            "new",
            "--name",
            "y",
            "--scope",
            "global",
            "--write",
        ],
        2,
    );
    assert!(err.contains("YAML"), "{err}");

    // The server takes both written tokens.
    {
        let s = Serve::start(&e, &[]);
        assert_eq!(remember(&s, &a, "project/a"), 201);
        assert_eq!(remember(&s, &b, "project/b"), 201);
        assert_eq!(remember(&s, &a, "project/b"), 403);
    }

    // An unknown name: a clear error, the file unchanged.
    let err = e.fails(&["token", "revoke", "gamma"], 1);
    assert!(
        err.contains("`gamma`") && err.contains("alpha, beta") && err.contains("nothing changed"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), text);

    let out = e.ok(&["token", "revoke", "alpha"]);
    assert!(out.contains("revoked token `alpha`"), "{out}");
    let after = std::fs::read_to_string(&cfg).unwrap();
    assert!(
        after.starts_with(mine) && !after.contains("alpha"),
        "{after}"
    );
    assert_eq!(e.json(&["token", "list"]).as_array().unwrap().len(), 1);
    let s = Serve::start(&e, &[]);
    assert_eq!(remember(&s, &a, "project/a"), 401, "revoked");
    assert_eq!(remember(&s, &b, "project/b"), 201);
}

#[test]
fn token_write_creates_the_config_when_there_is_none() {
    let e = Env::new();
    let a = new_token(&e, "only", "global");
    let text = std::fs::read_to_string(e.path("strata.toml")).unwrap();
    assert!(
        text.starts_with("[[server.tokens]]\nname = \"only\""),
        "{text}"
    );
    assert!(!text.contains(&a));
    let s = Serve::start(&e, &[]);
    assert_eq!(remember(&s, &a, "global"), 201);
    let err = e.fails(&["--config", "none.toml", "token", "revoke", "only"], 1);
    assert!(err.contains("none.toml"), "{err}");
}

#[test]
fn the_access_log_is_off_by_default_and_never_logs_bodies_tokens_or_ids() {
    let e = Env::new();
    let token = new_token(&e, "agent", "project");

    // Off by default.
    let s = Serve::start(&e, &[]);
    assert_eq!(remember(&s, &token, "project/x"), 201);
    let log = s.log.clone();
    drop(s);
    // The server is gone: its whole stderr arrives at once.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let log = log.lock().unwrap().clone();
    assert!(!log.contains("access "), "{log}");

    for on in [&["--access-log"][..], &[][..]] {
        if on.is_empty() {
            // On by configuration instead of the flag.
            let text = std::fs::read_to_string(e.path("strata.toml")).unwrap();
            write(
                &e.path("strata.toml"),
                &format!("[server]\naccess_log = true\n\n{text}"),
            );
        }
        let s = Serve::start(&e, on);
        let a = agent();
        let (st, v) = post(
            &a,
            &format!("{}/v1/memories", s.base),
            &token,
            &json!({"content": "body-marker-41b7", "scope": "project/x"}),
        )
        .unwrap();
        assert_eq!(st, 201);
        let id = v["id"].as_str().unwrap();
        let r = a
            .get(format!("{}/v1/memories/{id}", s.base))
            .header("authorization", &format!("Bearer {token}"))
            .call()
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let r = a
            .get(format!("{}/v1/memories/{id}", s.base))
            .call()
            .unwrap();
        assert_eq!(r.status().as_u16(), 401);
        let log = s.wait_log("access ", 3);
        let lines: Vec<&str> = log.lines().filter(|l| l.starts_with("access ")).collect();
        assert_eq!(lines.len(), 3, "{log}");
        // access TIME METHOD ROUTE STATUS DURATION BYTES
        let fields: Vec<Vec<&str>> = lines.iter().map(|l| l.split(' ').collect()).collect();
        for f in &fields {
            assert_eq!(f.len(), 7, "{log}");
            assert!(f[1].parse::<jiff::Timestamp>().is_ok(), "{log}");
            assert!(f[5].ends_with("ms"), "{log}");
            assert!(f[6].parse::<u64>().unwrap() > 0, "{log}");
        }
        assert_eq!(fields[0][2..5], ["POST", "/v1/memories", "201"], "{log}");
        assert_eq!(
            fields[1][2..5],
            ["GET", "/v1/memories/{id}", "200"],
            "{log}"
        );
        assert_eq!(
            fields[2][2..5],
            ["GET", "/v1/memories/{id}", "401"],
            "{log}"
        );
        for secret in ["body-marker-41b7", token.as_str(), id, "Bearer"] {
            assert!(!log.contains(secret), "`{secret}` in the log:\n{log}");
        }
    }
}

/// Polls `f` every 20 ms until it holds; panics after `limit`.
fn within(limit: std::time::Duration, mut f: impl FnMut() -> bool) -> std::time::Duration {
    let start = std::time::Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "not within {limit:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    start.elapsed()
}

#[test]
fn a_running_server_refuses_a_revoked_token_within_a_second_and_lists_last_use() {
    use std::time::Duration;
    let e = Env::new();
    let a = new_token(&e, "alpha", "project/a");
    let b = new_token(&e, "beta", "project/b");
    let s = Serve::start(&e, &[]);
    assert_eq!(remember(&s, &a, "project/a"), 201);

    // The server writes when each token was last used; `token list` shows it.
    within(Duration::from_secs(5), || {
        e.json(&["token", "list"])[0]["last_used_at"].is_string()
    });
    let list = e.json(&["token", "list"]);
    assert!(list[1]["last_used_at"].is_null(), "{list}");
    let text = e.ok(&["token", "list"]);
    let header = text.lines().next().unwrap();
    assert!(
        header.contains("EXPIRES") && header.ends_with("LAST USED"),
        "{text}"
    );
    assert!(text.lines().nth(2).unwrap().ends_with("never"), "{text}");

    // Revoked: refused within a second, without a restart.
    let out = e.ok(&["token", "revoke", "alpha"]);
    assert!(out.contains("refuses it within a second"), "{out}");
    let took = within(Duration::from_secs(1), || {
        remember(&s, &a, "project/a") == 401
    });
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(remember(&s, &b, "project/b"), 201);

    // A new token works at once; SIGHUP reloads as well.
    let c = new_token(&e, "gamma", "project/a");
    within(Duration::from_secs(1), || {
        remember(&s, &c, "project/a") == 201
    });
    s.signal("HUP");
    let log = s.wait_log("strata serve: tokens reloaded", 3);
    assert!(
        log.lines()
            .filter(|l| l.starts_with("strata serve: tokens reloaded"))
            .count()
            >= 3,
        "{log}"
    );
    assert_eq!(remember(&s, &b, "project/b"), 201);
}

#[test]
fn token_new_takes_an_expiry_and_a_rate_limit() {
    let e = Env::new();
    for (flags, named) in [
        (&["--expires-in", "soon"][..], "--expires-in"),
        (&["--expires-in", "0s"][..], "--expires-in"),
        (&["--rate-limit", "0"][..], "--rate-limit"),
        (&["--access", "root"][..], "--access"),
    ] {
        let mut args = vec![
            "token", "new", "--name", "x", "--scope", "global", "--write",
        ];
        args.extend_from_slice(flags);
        let err = e.fails(&args, 2);
        assert!(err.contains(named), "{flags:?}: {err}");
        assert!(!e.path("strata.toml").exists(), "nothing written");
    }
    let out = e.json(&[
        "token",
        "new",
        "--name",
        "ci",
        "--scope",
        "global",
        "--access",
        "admin",
        "--expires-in",
        "2d",
        "--rate-limit",
        "120",
        "--write",
    ]);
    assert_eq!(out["access"], "admin");
    assert_eq!(out["rate_limit_per_minute"], 120);
    let at: jiff::Timestamp = out["expires_at"].as_str().unwrap().parse().unwrap();
    let left = at.duration_since(jiff::Timestamp::now());
    assert!(left > jiff::SignedDuration::from_hours(47), "{left:?}");
    let list = e.json(&["token", "list"]);
    assert_eq!(list[0]["access"], "admin");
    assert_eq!(list[0]["expires_at"], out["expires_at"]);
    assert_eq!(list[0]["rate_limit_per_minute"], 120);
    let text = e.ok(&["token", "list"]);
    assert!(text.contains("120/min"), "{text}");
}
