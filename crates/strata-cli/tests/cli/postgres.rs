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
    let export = e.ok(&[
        "--db",
        db,
        "export",
        "--include-archived",
        "--include-sensitive",
        "--include-history",
    ]);
    let sessions = e.ok(&["--db", db, "session", "list", "--json"]);
    let mut lines: Vec<&str> = export.lines().collect();
    lines.sort_unstable();
    format!("{}\n{sessions}", lines.join("\n"))
}

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
