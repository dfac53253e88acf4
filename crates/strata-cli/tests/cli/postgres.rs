//! The `strata` binary on PostgreSQL (`STRATA_TEST_PG_URL`; required when
//! `CI` is set): `--db postgres://…`, `strata migrate` SQLite → PostgreSQL →
//! SQLite without loss, and the errors a user meets (a password on the
//! command line, a server that is not there, a destination that is not
//! empty).

use crate::util::Env;

/// The test server, or `None` outside CI without one.
fn pg_url() -> Option<String> {
    match std::env::var("STRATA_TEST_PG_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI is set but STRATA_TEST_PG_URL is not: the PostgreSQL tests must run in CI")
        }
        _ => None,
    }
}

/// A fresh schema on the test server, dropped at the end of the test.
struct Schema {
    url: String,
    name: String,
}

impl Schema {
    fn new(base: &str) -> Schema {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("cli{}_{n}", std::process::id());
        let sep = if base.contains('?') { '&' } else { '?' };
        Schema {
            url: format!("{base}{sep}schema={name}"),
            name,
        }
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let base = self.url.split('?').next().unwrap_or_default().to_string();
        if let Ok(mut c) = postgres::Client::connect(&base, postgres::NoTls) {
            let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name));
        }
    }
}

fn everything(e: &Env, db: &str) -> String {
    // A full backup: archived, sensitive and history by default.
    let export = e.ok(&["--db", db, "export"]);
    let sessions = e.ok(&["--db", db, "session", "list", "--json"]);
    let mut lines: Vec<&str> = export.lines().collect();
    lines.sort_unstable();
    format!("{}\n{sessions}", lines.join("\n"))
}

#[strata_testenv::pg]
#[test]
fn migrate_sqlite_to_postgres_and_back_loses_nothing() {
    let Some(base) = pg_url() else { return };
    let pg = Schema::new(&base);
    let e = Env::new();
    for i in 0..40 {
        e.remember(
            &format!("decision {i}: the queue retries with backoff"),
            ["project/acme", "global", "task/t1"][i % 3],
            &["--kind", "decision", "--tag", "queue", "--tag", "retry"],
        );
    }
    e.remember("tabs", "project/acme", &["--key", "indent"]);
    e.remember("spaces", "project/acme", &["--key", "indent"]);
    e.remember("secret token", "project/acme", &["--sensitive"]);
    e.ok(&["session", "new", "--id", "s-1"]);
    e.remember(
        "hello",
        "session/s-1",
        &[
            "--session",
            "s-1",
            "--role",
            "user",
            "--kind",
            "conversation",
        ],
    );
    e.ok(&["session", "archive", "s-1"]);
    let ctx: serde_json::Value = serde_json::from_str(&e.ok(&[
        "context",
        "--profile",
        "global",
        "--query",
        "queue",
        "--render",
        "json",
    ]))
    .unwrap();
    let ctx_id = ctx["id"].as_str().unwrap().to_string();

    let a = e.db().display().to_string();
    let want = everything(&e, &a);
    let r = e.json(&["migrate", "--from", &a, "--to", &pg.url]);
    assert_eq!(r["verified"]["memories"], 42, "{r}");
    assert_eq!(r["verified"]["archived"], 1, "{r}");
    assert_eq!(r["verified"]["history"], 1, "{r}");
    assert_eq!(r["verified"]["context_logs"], 1, "{r}");
    assert_eq!(everything(&e, &pg.url), want);
    // The same recall on both.
    let recall = |db: &str| {
        e.ok(&[
            "--db",
            db,
            "recall",
            "queue backoff",
            "--view",
            "project/acme",
            "--view",
            "global",
            "--no-touch",
        ])
    };
    assert_eq!(recall(&pg.url), recall(&a));

    let b = e.path("b.db").display().to_string();
    let out = e.ok(&["migrate", "--from", &pg.url, "--to", &b]);
    assert!(out.contains("verified"), "{out}");
    assert_eq!(everything(&e, &b), want);
    // The context log came along: the package replays identically.
    let o = e.run(&["--db", &b, "context", "--replay", &ctx_id]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stderr).contains("identical"));

    // Into a store that is not empty: refused, nothing changed.
    let err = e.fails(&["migrate", "--from", &a, "--to", &pg.url], 1);
    assert!(err.contains("not empty"), "{err}");
    assert_eq!(everything(&e, &pg.url), want);
}

#[strata_testenv::pg]
#[test]
fn postgres_mistakes_are_named() {
    let Some(base) = pg_url() else { return };
    let e = Env::new();
    // A password in the flag: refused before anything connects.
    let with_pw = base.replacen("://", "://u:hunter2@", 1);
    let err = e.fails(&["--db", &with_pw, "stats"], 2);
    assert!(
        err.contains("STRATA_DB_PASSWORD") && !err.contains("hunter2"),
        "{err}"
    );
    // Nothing listens on port 1.
    let err = e.fails(&["--db", "postgres://u@127.0.0.1:1/db", "stats"], 1);
    assert!(
        err.contains("127.0.0.1:1") && err.contains("server running"),
        "{err}"
    );
    // A bad URL.
    let err = e.fails(&["--db", "postgres://u@127.0.0.1:port/db", "stats"], 1);
    assert!(err.contains("not a valid URL"), "{err}");
    // migrate: a source that does not exist, the same store twice.
    let err = e.fails(&["migrate", "--from", "nope.db", "--to", &base], 2);
    assert!(err.contains("does not exist"), "{err}");
    let err = e.fails(&["migrate", "--from", "x.db", "--to", "x.db"], 2);
    assert!(err.contains("same store"), "{err}");
    assert!(!e.path("nope.db").exists() && !e.path("x.db").exists());
}

#[cfg(feature = "server")]
mod nodes {
    use serde_json::{Value, json};

    use super::{Schema, pg_url};
    use crate::server::Serve;
    use crate::util::{Env, write};

    fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into()
    }

    fn call(
        a: &ureq::Agent,
        method: &str,
        url: &str,
        token: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let auth = format!("Bearer {token}");
        let r = match body {
            Some(b) => a
                .post(url)
                .header("authorization", &auth)
                .header("content-type", "application/json")
                .send(b.to_string()),
            None if method == "GET" => a.get(url).header("authorization", &auth).call(),
            None => unreachable!(),
        };
        match r {
            Ok(mut r) => {
                let st = r.status().as_u16();
                let v = serde_json::from_str(&r.body_mut().read_to_string().unwrap_or_default())
                    .unwrap_or(Value::Null);
                (st, v)
            }
            // The connection was cut (a node killed): no answer, nothing acknowledged.
            Err(_) => (0, Value::Null),
        }
    }

    /// A node: `strata serve` on the test schema.
    fn node(e: &Env, url: &str) -> Serve {
        let mut cmd = e.cmd();
        cmd.env("STRATA_DB", url)
            .args(["serve", "--listen", "127.0.0.1:0"]);
        Serve::spawn(cmd)
    }

    /// Issue 51 (N7): without upkeep (`upkeep_every_secs = 0`) the last
    /// handle on the engine was dropped on the event loop, where the
    /// PostgreSQL client's drop panicked ("Cannot start a runtime from
    /// within a runtime") and the process aborted. SIGTERM stops it with
    /// status 0, after a write, on every setting.
    #[strata_testenv::pg]
    #[test]
    fn sigterm_stops_a_postgres_server_cleanly_with_and_without_upkeep() {
        let Some(base) = pg_url() else { return };
        let pg = Schema::new(&base);
        let e = Env::new();
        let out = e.json(&[
            "token",
            "new",
            "--name",
            "agent",
            "--scope",
            "project",
            "--access",
            "read_write",
        ]);
        let token = out["token"].as_str().unwrap().to_string();
        for every in [0, 3600] {
            write(
                &e.path("strata.toml"),
                &format!(
                    "[server]\nupkeep_every_secs = {every}\n{}",
                    out["config"].as_str().unwrap()
                ),
            );
            let mut n = node(&e, &pg.url);
            let (st, v) = call(
                &agent(),
                "POST",
                &format!("{}/v1/memories", n.base),
                &token,
                Some(&json!({"content": "stops cleanly", "scope": "project/stop"})),
            );
            assert_eq!(st, 201, "{v}");
            let status = n.terminate();
            // The log's reader thread takes the last lines.
            std::thread::sleep(std::time::Duration::from_millis(300));
            let log = n.log.lock().unwrap().clone();
            assert!(
                status.success(),
                "upkeep_every_secs = {every}: {status:?}\n{log}"
            );
            assert!(!log.contains("panicked"), "{log}");
        }
    }

    /// Three `strata serve` on one PostgreSQL schema, written through at
    /// once (single writes and batches): every acknowledged write is there
    /// exactly once, no answer is a 5xx, a write through one node is
    /// recalled through another within a second, and a node killed with
    /// SIGKILL mid-write (3 rounds) loses nothing it acknowledged while the
    /// others keep serving. `STRATA_SOAK=1` runs it at full scale (over
    /// 30,000 writes, 20 kill rounds; a few minutes).
    #[strata_testenv::pg]
    #[test]
    fn three_nodes_on_one_database() {
        let Some(base) = pg_url() else { return };
        let soak = std::env::var_os("STRATA_SOAK").is_some();
        let (per_thread, rounds) = if soak { (1_250, 20) } else { (80, 3) };
        let pg = Schema::new(&base);
        let e = Env::new();
        let out = e.json(&[
            "token",
            "new",
            "--name",
            "agent",
            "--scope",
            "project",
            "--access",
            "read_write",
        ]);
        // No project bound: eviction would archive part of what is counted.
        write(
            &e.path("strata.toml"),
            &format!(
                "{}\n[memory]\nmax_items = 0\n",
                out["config"].as_str().unwrap()
            ),
        );
        let token = out["token"].as_str().unwrap().to_string();
        let nodes: Vec<Serve> = (0..3).map(|_| node(&e, &pg.url)).collect();

        let acked: Vec<Vec<String>> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..6)
                .map(|t| {
                    let base = nodes[t % 3].base.clone();
                    let token = token.clone();
                    sc.spawn(move || {
                        let ag = agent();
                        let mut ids = Vec::new();
                        for n in 0..per_thread {
                            if n % 8 == 0 {
                                let items: Vec<Value> = (0..25)
                                    .map(|j| json!({"content": format!("thread {t} batch {n} item {j}"), "scope": "project/fleet"}))
                                    .collect();
                                let (st, v) = call(&ag, "POST", &format!("{base}/v1/memories/batch"), &token, Some(&json!({"items": items})));
                                assert_eq!(st, 201, "{v}");
                                for m in v["memories"].as_array().unwrap() {
                                    ids.push(m["id"].as_str().unwrap().to_string());
                                }
                            } else {
                                let (st, v) = call(&ag, "POST", &format!("{base}/v1/memories"), &token,
                                    Some(&json!({"content": format!("thread {t} write {n}"), "scope": "project/fleet"})));
                                assert_eq!(st, 201, "{v}");
                                ids.push(v["id"].as_str().unwrap().to_string());
                            }
                        }
                        ids
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut all: Vec<String> = acked.into_iter().flatten().collect();
        let n = all.len();
        eprintln!("{n} writes acknowledged through 3 nodes");
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n, "duplicate ids");
        let ag = agent();
        for nd in &nodes {
            let mut seen = Vec::new();
            loop {
                let (st, v) = call(
                    &ag,
                    "POST",
                    &format!("{}/v1/list", nd.base),
                    &token,
                    Some(&json!({"view": ["project/fleet"], "limit": 1000, "offset": seen.len()})),
                );
                assert_eq!(st, 200, "{v}");
                let page = v["memories"].as_array().unwrap();
                if page.is_empty() {
                    break;
                }
                seen.extend(page.iter().map(|m| m["id"].as_str().unwrap().to_string()));
            }
            seen.sort();
            assert_eq!(
                seen.len(),
                all.len(),
                "node {} sees every write once",
                nd.base
            );
            assert!(
                seen == all,
                "node {} sees other ids than were acknowledged",
                nd.base
            );
        }

        // Written through one node, recalled through another within 1 s.
        let (st, _) = call(
            &ag,
            "POST",
            &format!("{}/v1/memories", nodes[0].base),
            &token,
            Some(&json!({"content": "the zyxwvut marker moved", "scope": "project/fleet"})),
        );
        assert_eq!(st, 201);
        let t = std::time::Instant::now();
        loop {
            let (st, v) = call(
                &ag,
                "POST",
                &format!("{}/v1/recall", nodes[1].base),
                &token,
                Some(&json!({"query": "zyxwvut", "view": ["project/fleet"]})),
            );
            assert_eq!(st, 200, "{v}");
            if v.to_string().contains("zyxwvut marker") {
                break;
            }
            assert!(
                t.elapsed() < std::time::Duration::from_secs(1),
                "not visible within 1 s"
            );
        }

        // kill -9 mid-write: what was acknowledged stays; the others serve.
        let mut nodes = nodes;
        let mut after_kills = 0;
        for round in 0..rounds {
            let victim = nodes.pop().unwrap();
            let base = victim.base.clone();
            let token2 = token.clone();
            let acks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let acks2 = acks.clone();
            let writer = std::thread::spawn(move || {
                let ag = agent();
                let mut ids = Vec::new();
                for n in 0..10_000 {
                    let (st, v) = call(
                        &ag,
                        "POST",
                        &format!("{base}/v1/memories"),
                        &token2,
                        Some(
                            &json!({"content": format!("round {round} write {n}"), "scope": "project/fleet"}),
                        ),
                    );
                    match st {
                        201 => {
                            ids.push(v["id"].as_str().unwrap().to_string());
                            acks2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        0 => break,
                        other => panic!("{other}: {v}"),
                    }
                }
                ids
            });
            // Mid-write: once the node has acknowledged a few (a fresh node's
            // first answers can be slow on a loaded machine), a little later.
            let t = std::time::Instant::now();
            while acks.load(std::sync::atomic::Ordering::Relaxed) < 5 {
                assert!(
                    t.elapsed() < std::time::Duration::from_secs(30),
                    "round {round}: the node wrote nothing"
                );
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            std::thread::sleep(std::time::Duration::from_millis(50 + 17 * round as u64));
            drop(victim); // SIGKILL
            let ids = writer.join().unwrap();
            assert!(
                !ids.is_empty(),
                "round {round}: nothing was written before the kill"
            );
            after_kills += ids.len();
            for id in &ids {
                let (st, v) = call(
                    &ag,
                    "GET",
                    &format!("{}/v1/memories/{id}", nodes[0].base),
                    &token,
                    None,
                );
                assert_eq!(st, 200, "round {round}: acknowledged {id} lost: {v}");
            }
            let (st, _) = call(
                &ag,
                "POST",
                &format!("{}/v1/recall", nodes[1 % nodes.len()].base),
                &token,
                Some(&json!({"query": "write", "view": ["project/fleet"]})),
            );
            assert_eq!(st, 200);
            nodes.push(node(&e, &pg.url));
        }
        eprintln!(
            "{rounds} kill rounds: {after_kills} writes acknowledged by killed nodes, none lost"
        );
    }
}
