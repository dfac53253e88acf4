//! Session compaction through the binary: `strata session compact`, upkeep
//! compacting full sessions, and kill -9 during compaction leaving every
//! memory in exactly one place, none lost, none summarised twice.

use std::collections::{HashMap, HashSet};
use std::process::Stdio;

use crate::util::Env;

/// Sessions bounded at 60,000 bytes, the cold tier on, no detectors.
fn env() -> (Env, std::path::PathBuf) {
    let e = Env::new();
    let cfg = e.path("strata.toml");
    std::fs::write(
        &cfg,
        "[memory]\nsession_max_bytes = 60000\n\n[cold]\nenabled = true\ndemote_after_days = 0\ndemote_below_importance = 0\n\n[learning]\nenabled = false\n",
    )
    .unwrap();
    (e, cfg)
}

fn run(e: &Env, cfg: &std::path::Path, args: &[&str]) -> String {
    let o = e
        .cmd()
        .env("STRATA_CONFIG", cfg)
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "strata {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// Imports `n` turns (about 100 bytes each) of session `id`; their ids.
fn import_turns(e: &Env, cfg: &std::path::Path, id: &str, n: usize) -> Vec<String> {
    let mut lines = String::new();
    let mut ids = Vec::new();
    for i in 0..n {
        let mid = format!("{id}-turn-{i:05}");
        let line = serde_json::json!({
            "id": mid,
            "scope": format!("session/{id}"),
            "kind": "conversation",
            "content": format!("Turn {i:03} of {id}: the deploy of service {i:03} waited for the migration {i:03} to finish its long backfill."),
            "session": id,
            "tags": [],
            "importance": 0.5,
            "source": "conversation",
            "created_at": format!("2026-11-01T{:02}:{:02}:{:02}Z", i / 3600, i / 60 % 60, i % 60),
            "updated_at": format!("2026-11-01T{:02}:{:02}:{:02}Z", i / 3600, i / 60 % 60, i % 60),
            "access_count": 0,
            "pinned": false,
            "sensitive": false,
            "tokens": 20,
            "version": 1,
        });
        lines.push_str(&line.to_string());
        lines.push('\n');
        ids.push(mid);
    }
    let f = e.path("turns.jsonl");
    std::fs::write(&f, lines).unwrap();
    run(e, cfg, &["import", f.to_str().unwrap()]);
    ids
}

/// Every memory of a full export (active, archived, cold), by id.
fn everything(e: &Env, cfg: &std::path::Path) -> Vec<serde_json::Value> {
    run(e, cfg, &["export"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn named(summary: &serde_json::Value) -> Vec<String> {
    summary["payload"]["compacted"]["sources"]
        .as_array()
        .map(|a| a.iter().map(|x| x.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn session_compact_and_upkeep_compact_full_sessions() {
    let (e, cfg) = env();
    let ids = import_turns(&e, &cfg, "alpha", 560);
    let out = run(&e, &cfg, &["session", "compact", "alpha"]);
    assert!(out.starts_with("alpha: compacted "), "{out}");
    let all = everything(&e, &cfg);
    let summaries: Vec<&serde_json::Value> =
        all.iter().filter(|m| m["kind"] == "summary").collect();
    assert_eq!(summaries.len(), 1, "{out}");
    let n = named(summaries[0]);
    assert_eq!(n, ids[..n.len()]);
    let show: serde_json::Value =
        serde_json::from_str(&run(&e, &cfg, &["session", "show", "alpha", "--json"])).unwrap();
    assert!(show["bytes"].as_u64().unwrap() <= 30_000, "{show}");
    let err = e
        .cmd()
        .env("STRATA_CONFIG", &cfg)
        .args(["session", "compact", "nobody"])
        .output()
        .unwrap();
    assert_eq!(err.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&err.stderr).contains("nobody"));
    // Upkeep compacts a session at 90 % of its bound by itself.
    import_turns(&e, &cfg, "beta", 560);
    let up = run(&e, &cfg, &["upkeep"]);
    assert!(up.contains("of 1 sessions"), "{up}");
}

#[test]
fn kill_nine_during_compaction_leaves_each_memory_in_one_place() {
    let (e, cfg) = env();
    let mut written: HashSet<String> = HashSet::new();
    let mut cut_short = 0;
    let mut mid_merge = 0;
    for round in 0..20usize {
        let id = format!("r{round:02}");
        written.extend(import_turns(&e, &cfg, &id, 570));
        let mut child = e
            .cmd()
            .env("STRATA_CONFIG", &cfg)
            .arg("upkeep")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(10 + 15 * round as u64));
        child.kill().unwrap(); // SIGKILL
        let done = child.wait().unwrap().success();
        let cold_dir = e.db().with_extension("db.cold");
        mid_merge += usize::from(std::fs::read_dir(&cold_dir).is_ok_and(|d| {
            d.flatten()
                .any(|f| f.file_name().to_string_lossy().ends_with(".merge"))
        }));
        // The killed process's leases would run out in minutes; the test
        // skips the wait.
        rusqlite::Connection::open(e.db())
            .unwrap()
            .execute("DELETE FROM leases", [])
            .unwrap();
        let all = everything(&e, &cfg);
        let mut seen: HashMap<String, usize> = HashMap::new();
        for m in &all {
            *seen
                .entry(m["id"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        assert!(
            seen.values().all(|n| *n == 1),
            "round {round}: a memory twice"
        );
        for w in &written {
            assert!(seen.contains_key(w), "round {round}: {w} lost");
        }
        // No memory named by two summaries; a summary whose sources are
        // still active is a compaction cut short.
        let mut by: HashMap<String, usize> = HashMap::new();
        for s in all.iter().filter(|m| m["kind"] == "summary") {
            for n in named(s) {
                *by.entry(n).or_default() += 1;
            }
        }
        assert!(
            by.values().all(|n| *n == 1),
            "round {round}: summarised twice"
        );
        let active: HashSet<&str> = all
            .iter()
            .filter(|m| m.get("archived").is_none_or(|a| a.is_null()))
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        cut_short += usize::from(!done && by.keys().any(|n| active.contains(n.as_str())));
    }
    // Finish: every session under its bound, every named memory archived.
    let up: serde_json::Value =
        serde_json::from_str(&run(&e, &cfg, &["upkeep", "--json"])).unwrap();
    assert_eq!(up["skipped"], false, "{up}");
    let all = everything(&e, &cfg);
    let archived: HashSet<&str> = all
        .iter()
        .filter(|m| m.get("archived").is_some_and(|a| !a.is_null()))
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    let mut named_all = 0;
    for s in all.iter().filter(|m| m["kind"] == "summary") {
        for n in named(s) {
            named_all += 1;
            assert!(archived.contains(n.as_str()), "{n} named but not archived");
        }
    }
    assert!(named_all > 0);
    for s in
        serde_json::from_str::<serde_json::Value>(&run(&e, &cfg, &["session", "list", "--json"]))
            .unwrap()
            .as_array()
            .unwrap()
    {
        assert!(s["bytes"].as_u64().unwrap() < 54_000, "{s}");
    }
    eprintln!(
        "{cut_short} of 20 rounds were cut between a summary and its archiving, {mid_merge} in a merge of cold segments"
    );
    assert!(
        cut_short > 0,
        "no round was cut in the middle of a compaction"
    );
}
