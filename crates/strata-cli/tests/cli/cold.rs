//! The cold tier through the binary: upkeep moves archived memories into
//! segments, `recall --archived` and `restore` reach them, `stats` shows
//! both tiers, and kill -9 during a move leaves every memory in exactly
//! one tier.

use std::collections::HashSet;
use std::process::{Command, Stdio};

use crate::util::{Env, archived_line};

/// A config with the cold tier on (beside the database) and no detectors.
fn cold_env() -> (Env, std::path::PathBuf) {
    let e = Env::new();
    let cfg = e.path("strata.toml");
    std::fs::write(
        &cfg,
        "[cold]\nenabled = true\n\n[learning]\nenabled = false\n",
    )
    .unwrap();
    (e, cfg)
}

fn strata(e: &Env, cfg: &std::path::Path) -> Command {
    let mut c = e.cmd();
    c.env("STRATA_CONFIG", cfg);
    c
}

fn ok(e: &Env, cfg: &std::path::Path, args: &[&str]) -> String {
    let o = strata(e, cfg).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "strata {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn json(e: &Env, cfg: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    serde_json::from_str(&ok(e, cfg, &a)).unwrap()
}

/// Imports `n` archived memories numbered from `from`; returns their ids.
fn import_archived(e: &Env, cfg: &std::path::Path, from: usize, n: usize) -> Vec<String> {
    let mut lines = String::new();
    let mut ids = Vec::new();
    for i in from..from + n {
        let id = format!("0190{i:04x}-0000-7000-8000-{i:012x}");
        lines.push_str(&archived_line(
            &id,
            "project/crash",
            &format!("cold crash memory number {i} about deploys"),
        ));
        lines.push('\n');
        ids.push(id);
    }
    let f = e.path("in.jsonl");
    std::fs::write(&f, lines).unwrap();
    ok(e, cfg, &["import", f.to_str().unwrap()]);
    ids
}

fn tiers(e: &Env, cfg: &std::path::Path) -> (u64, u64) {
    let s = json(e, cfg, &["stats"]);
    let t = &s["storage_tiers"];
    (
        t["warm"]["memories"].as_u64().unwrap(),
        t["cold"]["memories"].as_u64().unwrap_or(0),
    )
}

/// A full export of `project/crash` holds each of `all` once.
fn each_once(e: &Env, cfg: &std::path::Path, all: &HashSet<String>) {
    let export = ok(e, cfg, &["export", "--view", "project/crash"]);
    let ids: Vec<String> = export
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ids.len(), all.len(), "no duplicates");
    assert_eq!(&ids.into_iter().collect::<HashSet<_>>(), all, "none lost");
}

/// Reads of a cold memory counted across processes (each recall its own
/// `strata` run) bring a demoted memory back; an evicted one stays.
#[test]
fn a_demoted_memory_recalled_from_several_processes_comes_back() {
    let (e, cfg) = cold_env();
    std::fs::write(
        &cfg,
        "[cold]\nenabled = true\npromote_after_reads = 2\n\n[learning]\nenabled = false\n",
    )
    .unwrap();
    let demoted = "0190aaaa-0000-7000-8000-00000000000a";
    let evicted = "0190aaaa-0000-7000-8000-00000000000b";
    let lines = [
        archived_line(
            demoted,
            "project/p",
            "the staging database password rotates monthly",
        )
        .replace("\"evicted\"", "\"demoted\""),
        archived_line(evicted, "project/p", "the staging cluster restarts weekly"),
    ]
    .join("\n");
    let f = e.path("in.jsonl");
    std::fs::write(&f, lines).unwrap();
    ok(&e, &cfg, &["import", f.to_str().unwrap()]);
    assert_eq!(json(&e, &cfg, &["upkeep"])["moved_to_cold"], 2);
    for _ in 0..2 {
        let hits = json(
            &e,
            &cfg,
            &["recall", "staging", "--view", "project/p", "--include-cold"],
        );
        assert_eq!(hits.as_array().unwrap().len(), 2, "{hits}");
    }
    let r = json(&e, &cfg, &["upkeep"]);
    assert_eq!(r["promoted_from_cold"], 1, "{r}");
    assert_eq!(tiers(&e, &cfg), (1, 1));
    let hits = json(&e, &cfg, &["recall", "staging", "--view", "project/p"]);
    let ids: Vec<&str> = hits
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [demoted], "active again, found without --include-cold");
    let text = ok(&e, &cfg, &["upkeep"]);
    assert!(text.contains("back from cold 0"), "{text}");
}

#[test]
fn upkeep_moves_archived_to_cold_and_recall_restore_reach_it() {
    let (e, cfg) = cold_env();
    let ids = import_archived(&e, &cfg, 0, 50);
    let r = json(&e, &cfg, &["upkeep"]);
    assert_eq!(r["moved_to_cold"], 50, "{r}");
    assert_eq!(tiers(&e, &cfg), (0, 50));
    assert!(e.db().with_extension("db.cold").is_dir());
    let hits = json(
        &e,
        &cfg,
        &[
            "recall",
            "number 7 deploys",
            "--view",
            "project/crash",
            "--include-cold",
        ],
    );
    let found = hits.to_string();
    assert!(found.contains(&ids[7]), "{hits}");
    let none = json(
        &e,
        &cfg,
        &[
            "recall",
            "number 7 deploys",
            "--view",
            "project/other",
            "--archived",
        ],
    );
    assert!(!none.to_string().contains(&ids[7]), "{none}");
    ok(&e, &cfg, &["restore", &ids[7]]);
    assert_eq!(tiers(&e, &cfg), (1, 49));
    assert!(ok(&e, &cfg, &["stats"]).contains("cold: 49 memories"));
}

/// Twenty rounds: imports `per_round` archived memories, starts `strata
/// upkeep`, waits until `moving` says a move of round `r` is at the step
/// `wait(r)` names (its argument), then `wait(r).1` ms more, and kills it
/// with SIGKILL; after each round every memory is in exactly one tier (the
/// next open recovers). `cut` says whether the kill left a move half done;
/// at least one round must have. Ends with an upkeep that moves the rest
/// and a check that each memory is there once.
fn kill_nine_rounds(
    e: &Env,
    cfg: &std::path::Path,
    per_round: usize,
    wait: &dyn Fn(usize) -> (&'static str, u64),
    moving: &dyn Fn(&str) -> bool,
    cut: &dyn Fn() -> bool,
) {
    let mut all: HashSet<String> = HashSet::new();
    let mut interrupted = 0;
    for round in 0..20usize {
        all.extend(import_archived(e, cfg, round * per_round, per_round));
        let mut child = strata(e, cfg)
            .args(["upkeep"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (step, after) = wait(round);
        let start = std::time::Instant::now();
        while !moving(step)
            && child.try_wait().unwrap().is_none()
            && start.elapsed() < std::time::Duration::from_secs(20)
        {
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis(after));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // The killed process's `upkeep` and `cold` leases would run out in
        // minutes; the test skips the wait.
        rusqlite::Connection::open(e.db())
            .unwrap()
            .execute("DELETE FROM leases", [])
            .unwrap();
        interrupted += usize::from(cut());
        // Opening recovers; every memory is in exactly one tier.
        let (warm, cold) = tiers(e, cfg);
        assert_eq!(
            warm + cold,
            all.len() as u64,
            "round {round}: warm {warm} + cold {cold}"
        );
    }
    assert!(
        interrupted > 0,
        "no round was killed in the middle of a move"
    );
    let r = json(e, cfg, &["upkeep"]);
    assert_eq!(r["skipped"], false, "{r}");
    assert_eq!(tiers(e, cfg), (0, all.len() as u64));
    each_once(e, cfg, &all);
}

#[test]
fn kill_nine_during_demotion_leaves_each_memory_in_one_tier() {
    let (e, cfg) = cold_env();
    let dir = e.db().with_extension("db.cold");
    let seen = |ext: &str| {
        std::fs::read_dir(&dir).is_ok_and(|d| {
            d.flatten()
                .any(|f| f.file_name().to_string_lossy().ends_with(ext))
        })
    };
    // Kill at a step of the move, watched on the directory: while the
    // segment is being written (`.tmp`), once it is durable (`.pending`,
    // before or during the delete), or a little later.
    kill_nine_rounds(
        &e,
        &cfg,
        3000,
        &|round| match round % 4 {
            0 => (".tmp", 0),
            1 => (".pending", 0),
            2 => (".pending", 1),
            _ => (".pending", 3),
        },
        &seen,
        &|| seen(".pending") || seen(".tmp"),
    );
}

#[test]
fn kill_nine_during_a_merge_of_segments_leaves_each_memory_in_one_segment() {
    let (e, cfg) = cold_env();
    let dir = e.db().with_extension("db.cold");
    let has = |ext: &str| {
        std::fs::read_dir(&dir).is_ok_and(|d| {
            d.flatten()
                .any(|f| f.file_name().to_string_lossy().ends_with(ext))
        })
    };
    let mut all: HashSet<String> = HashSet::new();
    let mut next = 0;
    let mut cut = 0;
    for round in 1..=12usize {
        // Seven small segments, then an upkeep that writes the eighth and
        // merges the eight (a journal, the merged segment, the deletes).
        for _ in 0..7 {
            all.extend(import_archived(&e, &cfg, next, 300));
            next += 300;
            ok(&e, &cfg, &["upkeep"]);
        }
        all.extend(import_archived(&e, &cfg, next, 300));
        next += 300;
        let mut child = strata(&e, &cfg)
            .args(["upkeep"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        while !has(".merge")
            && child.try_wait().unwrap().is_none()
            && start.elapsed() < std::time::Duration::from_secs(20)
        {
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis((round % 4) as u64 * 3));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        rusqlite::Connection::open(e.db())
            .unwrap()
            .execute("DELETE FROM leases", [])
            .unwrap();
        cut += usize::from(has(".merge"));
        let (warm, cold) = tiers(&e, &cfg);
        assert_eq!(
            warm + cold,
            all.len() as u64,
            "round {round}: warm {warm} + cold {cold}"
        );
    }
    assert!(cut > 0, "no round was killed in the middle of a merge");
    ok(&e, &cfg, &["upkeep"]);
    assert!(!has(".merge"), "recovery finished or dropped every merge");
    assert_eq!(tiers(&e, &cfg), (0, all.len() as u64));
    each_once(&e, &cfg, &all);
}

/// Over HTTP: `include_cold` recall and restore reach cold memories, inside
/// the token's scopes only.
#[cfg(feature = "server")]
#[test]
fn http_recall_and_restore_reach_cold_within_the_token_scopes() {
    use crate::server::{Serve, agent, post};
    use serde_json::json;

    let e = Env::new();
    let out = e.json(&[
        "token",
        "new",
        "--name",
        "agent",
        "--scope",
        "project/crash",
        "--access",
        "read_write",
    ]);
    let cfg = e.path("strata.toml");
    std::fs::write(
        &cfg,
        format!(
            "{}\n[cold]\nenabled = true\n\n[learning]\nenabled = false\n",
            out["config"].as_str().unwrap()
        ),
    )
    .unwrap();
    let token = out["token"].as_str().unwrap().to_string();
    let ids = import_archived(&e, &cfg, 0, 20);
    // One memory outside the token's scope, also cold.
    let f = e.path("other.jsonl");
    let other = "0190ffff-0000-7000-8000-0000000000ff";
    std::fs::write(
        &f,
        json!({"id": other, "scope": "project/secret", "kind": "note",
               "content": "cold crash memory number 3 secret", "tags": [], "importance": 0.5,
               "source": "external", "created_at": "2026-01-01T00:00:00Z",
               "updated_at": "2026-01-01T00:00:00Z", "access_count": 0, "pinned": false,
               "sensitive": false, "tokens": 7, "version": 1,
               "archived": {"at": "2026-01-02T00:00:00Z", "reason": "evicted"}})
        .to_string(),
    )
    .unwrap();
    ok(&e, &cfg, &["import", f.to_str().unwrap()]);
    assert_eq!(json(&e, &cfg, &["upkeep"])["moved_to_cold"], 21);
    let s = Serve::start(&e, &[]);
    let a = agent();
    let (st, v) = post(
        &a,
        &format!("{}/v1/recall", s.base),
        &token,
        &json!({"query": "number 3", "view": ["project/crash"], "include_cold": true}),
    )
    .unwrap();
    assert_eq!(st, 200, "{v}");
    let got = v.to_string();
    assert!(got.contains(&ids[3]), "{v}");
    assert!(!got.contains(other), "outside the token's scopes: {v}");
    let (st, _) = post(
        &a,
        &format!("{}/v1/recall", s.base),
        &token,
        &json!({"query": "number 3", "view": ["project/secret"], "include_cold": true}),
    )
    .unwrap();
    assert_ne!(st, 200, "a view outside the token is refused");
    let (st, v) = post(
        &a,
        &format!("{}/v1/restore", s.base),
        &token,
        &json!({"ids": [other]}),
    )
    .unwrap();
    assert_ne!(
        st, 200,
        "a cold memory outside the token is not restored: {v}"
    );
    let (st, v) = post(
        &a,
        &format!("{}/v1/restore", s.base),
        &token,
        &json!({"ids": [ids[3]]}),
    )
    .unwrap();
    assert_eq!(st, 200, "{v}");
    drop(s);
    assert_eq!(tiers(&e, &cfg), (1, 20));
}

/// The S3 server of the tests (`STRATA_TEST_S3_URL`; `.ci/run` starts
/// moto's): `None` outside CI without it.
#[cfg(feature = "s3")]
fn s3_endpoint() -> Option<String> {
    match std::env::var("STRATA_TEST_S3_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI is set but STRATA_TEST_S3_URL is not: the S3 tests must run in CI")
        }
        _ => None,
    }
}

/// Names of the objects under `prefix/` in the test bucket, through a side
/// door (moto does not check the signature of the tests' own requests).
#[cfg(feature = "s3")]
fn s3_names(endpoint: &str, prefix: &str) -> Vec<String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut resp = agent
        .get(format!(
            "{endpoint}/strata-test?list-type=2&prefix={prefix}/"
        ))
        .header(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, \
             SignedHeaders=host, Signature=0",
        )
        .call()
        .unwrap();
    let xml = resp.body_mut().read_to_string().unwrap();
    xml.split("<Key>")
        .skip(1)
        .map(|p| p[..p.find("</Key>").unwrap()].to_string())
        .collect()
}

/// kill -9 of `strata upkeep` while it moves memories into a bucket: a
/// rename there is a copy then a delete, so a crash can leave a segment
/// under both names; every memory is in exactly one tier after recovery.
#[cfg(feature = "s3")]
#[strata_testenv::s3]
#[test]
fn kill_nine_during_demotion_to_s3_leaves_each_memory_in_one_tier() {
    let Some(url) = s3_endpoint() else { return };
    let e = Env::new();
    let cfg = e.path("strata.toml");
    let prefix = format!("crash-{}", std::process::id());
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    agent
        .put(format!("{url}/strata-test"))
        .header(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, \
             SignedHeaders=host, Signature=0",
        )
        .send_empty()
        .unwrap();
    std::fs::write(
        &cfg,
        format!(
            "[cold]\nenabled = true\n\n[cold.s3]\nbucket = \"strata-test\"\nprefix = \
             \"{prefix}\"\nendpoint = \"{url}\"\naccess_key_env = \
             \"STRATA_TEST_S3_ACCESS_KEY\"\nsecret_key_env = \"STRATA_TEST_S3_SECRET_KEY\"\n\n\
             [learning]\nenabled = false\n"
        ),
    )
    .unwrap();
    let pending = || {
        s3_names(&url, &prefix)
            .iter()
            .any(|n| n.ends_with(".pending"))
    };
    // Kill once the segment is in the bucket as `.pending` (before or
    // during the delete from the store, or during the rename), or a
    // little later.
    kill_nine_rounds(
        &e,
        &cfg,
        500,
        &|round| (".pending", [0, 2, 5, 10][round % 4]),
        &|_| pending(),
        &pending,
    );
    assert!(!pending(), "recovered");
}
