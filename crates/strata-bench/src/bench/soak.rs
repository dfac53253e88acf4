//! `strata bench --only soak`: a server under mixed traffic for a while,
//! one request in a hundred hostile, and what well-behaved clients saw.
//!
//! Well-behaved clients (`--clients`, each a keep-alive connection) recall
//! nine times in ten and remember once, in their tenant's projects. One
//! request in a hundred (`--soak-hostile`) is sent instead, on a fresh
//! connection, by an attacker with a token of another tenant: an oversized
//! body, a malformed one, another tenant's id, or a slow client that sends
//! half a header and waits past the header deadline. The run counts
//! errors the well-behaved clients got (there must be none), what each
//! hostile request was answered, the process's resident memory over the
//! run (it must stay flat once warm), and at the end reads back every
//! acknowledged write.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::BenchArgs;
use super::http::{Conn, Server, server_config};

/// What the soak measured.
#[derive(Debug, Default, Serialize)]
pub struct SoakBench {
    /// Minutes it ran.
    pub minutes: f64,
    /// Well-behaved clients.
    pub clients: usize,
    /// Their requests, and those that failed (any answer but the one
    /// wanted, or a connection error).
    pub requests: usize,
    pub errors: usize,
    /// Writes acknowledged, and those not found at the end.
    pub acked_writes: usize,
    pub lost_writes: usize,
    /// Hostile requests by kind: (answered, answered as expected).
    pub oversized: (usize, usize),
    pub malformed: (usize, usize),
    pub foreign_id: (usize, usize),
    pub slow: (usize, usize),
    /// Resident memory (MiB) at the end of each tenth of the run.
    pub rss_mib: Vec<f64>,
    /// The last tenth's against the second tenth's (after warm-up), %.
    pub rss_growth_pct: f64,
    /// Of it, anonymous memory (heap, stacks: what a leak grows), by
    /// tenth; the rest is file pages, the store's mapped file among them,
    /// which grow with the store.
    pub rss_anon_mib: Vec<f64>,
    /// The last tenth's anonymous memory against the second tenth's, %.
    pub rss_anon_growth_pct: f64,
}

/// A line of `/proc/self/status` in MiB (0 where there is none).
fn status_mib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// Sends `raw` on a fresh connection and reads the status of the answer
/// (0 when the server closed without one).
async fn raw_status(addr: SocketAddr, raw: &[u8], pause: Option<Duration>) -> Result<u16> {
    let mut s = TcpStream::connect(addr).await?;
    // A server that refuses a body may answer and close before it is all
    // sent: what it answered is still there to read.
    let _ = s.write_all(raw).await;
    if let Some(p) = pause {
        tokio::time::sleep(p).await;
    }
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut buf)).await;
    let head = String::from_utf8_lossy(&buf);
    Ok(head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0))
}

pub fn run(a: &BenchArgs, dir: &std::path::Path, say: &dyn Fn(String)) -> Result<SoakBench> {
    let minutes = a.soak_minutes;
    let run_for = Duration::from_secs_f64(minutes * 60.0);
    let clients = a.clients.clamp(1, 64);
    let good = strata_server::new_token();
    let evil = strata_server::new_token();
    let mut cfg = server_config(&good);
    cfg.tokens[0].scopes = vec!["project/good".into()];
    cfg.tokens.push(strata_server::TokenConfig {
        name: "other-tenant".into(),
        secret_sha256: strata_server::sha256_hex(&evil),
        scopes: vec!["project/evil".into()],
        access: strata_server::Access::ReadWrite,
        ..Default::default()
    });
    let db = dir.join("soak.db");
    let _ = std::fs::remove_file(&db);
    let engine = strata::Engine::open(super::bench_config(&db))?;
    // Another tenant's memory, whose id the attacker asks for.
    let theirs = engine.remember(strata::NewMemory::new(
        strata::Scope::parse("project/good")?,
        "the deploy key rotates on the first Monday",
    ))?;
    let max_body = cfg.limits.max_body_bytes;
    let server = Server::start(engine, &cfg)?;
    let addr = server.addr;
    say(format!(
        "soak: {minutes} min, {clients} clients, {} % hostile, on {addr}",
        a.soak_hostile * 100.0
    ));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let done = Arc::new(AtomicBool::new(false));
    let requests = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let acked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let hostile = Arc::new([
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    ]);
    let started = Instant::now();
    let mut rss = Vec::new();
    let mut anon = Vec::new();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for c in 0..clients {
            let (done, requests, errors, acked) =
                (done.clone(), requests.clone(), errors.clone(), acked.clone());
            let auth = format!("Bearer {good}");
            tasks.push(tokio::spawn(async move {
                let mut conn = None;
                let mut i = 0usize;
                while !done.load(Ordering::Relaxed) {
                    i += 1;
                    if conn.is_none() {
                        conn = Conn::open(addr).await.ok();
                    }
                    let Some(cn) = conn.as_mut() else {
                        errors.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let project = format!("project/good/p{}", (c + i) % 8);
                    let out = if i.is_multiple_of(10) {
                        let body = serde_json::json!({
                            "content": format!("client {c} note {i}: the build of {project} passed"),
                            "scope": project,
                        })
                        .to_string();
                        cn.send(&auth, ("/v1/memories", &body, 201))
                            .await
                            .and_then(|b| {
                                let v: serde_json::Value = serde_json::from_slice(b)?;
                                let id = v["id"].as_str().unwrap_or_default().to_string();
                                acked.lock().unwrap().push(id);
                                Ok(())
                            })
                    } else {
                        let body = serde_json::json!({
                            "query": format!("build of p{} passed", i % 8),
                            "view": ["project/good/**"],
                            "touch": false,
                        })
                        .to_string();
                        cn.send(&auth, ("/v1/recall", &body, 200)).await.map(|_| ())
                    };
                    requests.fetch_add(1, Ordering::Relaxed);
                    if let Err(e) = out {
                        if errors.fetch_add(1, Ordering::Relaxed) < 5 {
                            eprintln!("bench soak: client {c} request {i}: {e:#}");
                        }
                        conn = None;
                    }
                }
            }));
        }
        // The attacker: one hostile request per `1 / share` of the
        // well-behaved ones sent meanwhile.
        let (done2, requests2, hostile2) = (done.clone(), requests.clone(), hostile.clone());
        let share = a.soak_hostile;
        let foreign = theirs.id.clone();
        tasks.push(tokio::spawn(async move {
            let auth = format!("Bearer {evil}");
            let mut sent = 0usize;
            while !done2.load(Ordering::Relaxed) {
                let due = (requests2.load(Ordering::Relaxed) as f64 * share) as usize;
                if sent >= due {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                let kind = sent % 4;
                sent += 1;
                let (raw, pause, want): (Vec<u8>, Option<Duration>, &[u16]) = match kind {
                    0 => {
                        let body = vec![b'x'; max_body + 1];
                        let mut r = format!(
                            "POST /v1/memories HTTP/1.1\r\nhost: {addr}\r\nauthorization: {auth}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                            body.len()
                        )
                        .into_bytes();
                        r.extend(body);
                        (r, None, &[413])
                    }
                    1 => {
                        let body = "{\"content\": \"unterminated";
                        (
                            format!(
                                "POST /v1/memories HTTP/1.1\r\nhost: {addr}\r\nauthorization: {auth}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                                body.len()
                            )
                            .into_bytes(),
                            None,
                            &[400, 422],
                        )
                    }
                    2 => (
                        format!(
                            "GET /v1/memories/{foreign} HTTP/1.1\r\nhost: {addr}\r\nauthorization: {auth}\r\nconnection: close\r\n\r\n"
                        )
                        .into_bytes(),
                        None,
                        &[404],
                    ),
                    _ => (
                        format!("POST /v1/recall HTTP/1.1\r\nhost: {addr}\r\n").into_bytes(),
                        Some(Duration::from_millis(200)),
                        // Closed at the header deadline, with or without a 408.
                        &[0, 408],
                    ),
                };
                let h = hostile2.clone();
                tokio::spawn(async move {
                    let status = raw_status(addr, &raw, pause).await;
                    // Counted when answered: a slow one still waiting for its
                    // deadline when the run ends is neither.
                    h[2 * kind].fetch_add(1, Ordering::Relaxed);
                    if status.is_ok_and(|s| want.contains(&s)) {
                        h[2 * kind + 1].fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        }));
        let tenth = run_for / 10;
        for _ in 0..10 {
            tokio::time::sleep(tenth).await;
            rss.push(status_mib("VmRSS:"));
            anon.push(status_mib("RssAnon:"));
            say(format!(
                "soak: {:.1} min, {} requests, {} errors, RSS {:.0} MiB",
                started.elapsed().as_secs_f64() / 60.0,
                requests.load(Ordering::Relaxed),
                errors.load(Ordering::Relaxed),
                rss.last().unwrap()
            ));
        }
        done.store(true, Ordering::Relaxed);
        for t in tasks {
            let _ = t.await;
        }
    });
    // Slow clients still waiting for their deadline end with the runtime.
    rt.shutdown_timeout(Duration::from_secs(30));
    let engine = server.shared.engine.clone();
    server.stop()?;
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    let lost = acked
        .iter()
        .filter(|id| !matches!(engine.get(id), Ok(Some(_))))
        .count();
    let pair = |k: usize| {
        (
            hostile[2 * k].load(Ordering::Relaxed),
            hostile[2 * k + 1].load(Ordering::Relaxed),
        )
    };
    let growth = |v: &[f64]| {
        let (warm, last) = (
            v.get(1).copied().unwrap_or(0.0),
            v.last().copied().unwrap_or(0.0),
        );
        if warm > 0.0 {
            (last - warm) / warm * 100.0
        } else {
            0.0
        }
    };
    Ok(SoakBench {
        minutes,
        clients,
        requests: requests.load(Ordering::Relaxed),
        errors: errors.load(Ordering::Relaxed),
        acked_writes: acked.len(),
        lost_writes: lost,
        oversized: pair(0),
        malformed: pair(1),
        foreign_id: pair(2),
        slow: pair(3),
        rss_growth_pct: growth(&rss),
        rss_anon_growth_pct: growth(&anon),
        rss_mib: rss,
        rss_anon_mib: anon,
    })
}
