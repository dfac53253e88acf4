//! Where recalls run (`[server] recall_threads`, `recall_nice`): on recall
//! threads below the event loop's priority (by default on machines of up to
//! 4 CPUs), on the event loop with 0, with the same answers either way,
//! while writes interleave.

use serde_json::json;
use strata_server::{Access, ServerConfig};

use crate::harness::{Server, token};

fn ranked(s: &Server, t: &str, query: &str) -> Vec<String> {
    let v = s.expect(
        200,
        "POST",
        "/v1/recall",
        Some(t),
        json!({"query": query, "view": ["project/acme"], "limit": 10}),
    );
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["content"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn recalls_answer_the_same_on_recall_threads_and_on_the_event_loop() {
    let (t, cfg) = token("rw", &["project/acme"], Access::ReadWrite);
    let start = |threads: usize| {
        Server::start(ServerConfig {
            tokens: vec![cfg.clone()],
            recall_threads: threads,
            recall_nice: 7,
            ..Default::default()
        })
    };
    let (pooled, inline) = (start(3), start(0));
    // Before any write, a recall runs where it was read; after one, on a
    // recall thread (with recall threads).
    ranked(&pooled, &t, "anything");
    assert_eq!(pooled.shared.metrics.recalls(), (1, 0, 0));
    assert_eq!(pooled.shared.recall_threads(), Some((3, 7)));
    assert_eq!(inline.shared.recall_threads(), None);
    // By default one a CPU, niced 10, on machines of up to 4 CPUs.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(
        Server::start(ServerConfig::default())
            .shared
            .recall_threads(),
        Some(strata_server::recall_threads_for(cpus))
            .filter(|&n| n > 0)
            .map(|n| (n, 10)),
    );
    let notes = [
        "the billing service uses postgres",
        "postgres backups run nightly at two",
        "the search team prefers tantivy over postgres full text",
        "lunch is at noon on fridays",
    ];
    for s in [&pooled, &inline] {
        for n in notes {
            s.expect(
                201,
                "POST",
                "/v1/memories",
                Some(&t),
                json!({"content": n, "scope": "project/acme"}),
            );
        }
    }
    let a = ranked(&pooled, &t, "which database does billing use?");
    assert_eq!(pooled.shared.metrics.recalls(), (1, 1, 0));
    assert_eq!(a, ranked(&inline, &t, "which database does billing use?"));
    assert_eq!(a[0], notes[0], "{a:?}");
    assert_eq!(inline.shared.metrics.recalls(), (1, 0, 0));
    assert!(!a.iter().any(|c| c.contains("lunch")), "{a:?}");
    // Recalls and remembers from several clients at once: every write is
    // answered, and each client's recall afterwards sees its own writes.
    std::thread::scope(|sc| {
        for k in 0..8 {
            let (s, t) = (&pooled, &t);
            sc.spawn(move || {
                for i in 0..20 {
                    let word = format!("zebra{k}x{i}");
                    s.expect(
                        201,
                        "POST",
                        "/v1/memories",
                        Some(t),
                        json!({"content": format!("note {word}"), "scope": "project/acme"}),
                    );
                    assert_eq!(ranked(s, t, &word), vec![format!("note {word}")]);
                }
            });
        }
    });
}

/// The recall threads' niceness, read back from the kernel.
#[cfg(target_os = "linux")]
#[test]
fn recall_threads_run_below_the_process_priority() {
    fn stat_nice(path: &std::path::Path) -> Option<i64> {
        let stat = std::fs::read_to_string(path).ok()?;
        // Fields after the name's closing parenthesis; niceness is the 19th
        // field of the line, the 17th after it.
        let rest = &stat[stat.rfind(')')? + 2..];
        rest.split(' ').nth(16)?.parse().ok()
    }
    let (t, cfg) = token("rw", &["project/acme"], Access::ReadWrite);
    let s = Server::start(ServerConfig {
        tokens: vec![cfg],
        recall_threads: 3,
        recall_nice: 6,
        ..Default::default()
    });
    // The first recall that records access and the first write start the
    // engine's writer threads; they must not take a recall thread's
    // priority (they hold the write path while they write).
    s.expect(
        201,
        "POST",
        "/v1/memories",
        Some(&t),
        json!({"content": "zebras graze", "scope": "project/acme"}),
    );
    assert_eq!(ranked(&s, &t, "zebras").len(), 1);
    let mine = stat_nice(std::path::Path::new("/proc/thread-self/stat")).unwrap();
    // The threads set their niceness as they start.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut niced = 0;
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if name.starts_with("strata-recall-")
                && stat_nice(&task.path().join("stat")) == Some((mine + 6).min(19))
            {
                niced += 1;
            }
        }
        // Other tests' servers run recall threads too, at other niceness.
        if niced >= 3 {
            break;
        }
        // (Read each round: the threads may still be starting.)
        let _ = writers_at(mine);
        assert!(
            std::time::Instant::now() < deadline,
            "found {niced} recall threads at niceness {}",
            mine + 6
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(writers_at(mine) >= 1, "no access-log writer found");
    drop(s);

    /// How many of the engines' writer threads run at `nice`; panics on
    /// one that does not.
    fn writers_at(nice: i64) -> usize {
        let mut n = 0;
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            let name = name.trim();
            if (name == "strata-access" || name == "strata-checkpoi")
                && let Some(got) = stat_nice(&task.path().join("stat"))
            {
                assert_eq!(got, nice, "{name} runs at niceness {got}");
                n += 1;
            }
        }
        n
    }
}
