//! `strata bench --only http`: recall over HTTP against the same recalls in
//! process, on the same store in the same run, and a mixed workload.
//!
//! The server runs in this process (a `strata serve` on 127.0.0.1, port 0,
//! with a bearer token); the clients are `--clients` threads, each with its
//! own keep-alive connection, sending `POST /v1/recall` bodies built
//! beforehand. In process, the same number of threads call
//! `Engine::recall` with the same requests. Throughput is requests over
//! wall time; latency is per request, as the client sees it.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

use super::{BenchArgs, Gen, Latency, bench_config, latency};

#[derive(Debug, Serialize)]
pub struct HttpBench {
    pub clients: usize,
    /// The server's pool (`limits.max_concurrent`).
    pub pool: usize,
    /// The same recalls in process, on as many threads as there are CPUs,
    /// as the server's pool, and as `--clients`.
    pub in_process: Vec<InProcess>,
    /// `--clients` HTTP clients, each sending its next request when the
    /// last is answered.
    pub http: Phase,
    /// HTTP requests/s over the best in-process figure.
    pub ratio: f64,
    /// `--clients` HTTP clients at a fixed total rate.
    pub paced: Paced,
    pub mixed: Mixed,
}

#[derive(Debug, Serialize)]
pub struct Phase {
    pub per_sec: f64,
    pub latency: Latency,
    pub errors: usize,
}

#[derive(Debug, Serialize)]
pub struct InProcess {
    pub threads: usize,
    pub phase: Phase,
}

#[derive(Debug, Serialize)]
pub struct Paced {
    pub rate: f64,
    pub phase: Phase,
}

#[derive(Debug, Serialize)]
pub struct Mixed {
    pub per_sec: f64,
    pub recall: Latency,
    pub remember: Latency,
    pub errors: usize,
    pub acknowledged_writes: usize,
    pub lost_writes: usize,
}

/// One recall, as the library takes it and as the HTTP body says it.
struct Query {
    req: strata::Recall,
    body: String,
}

fn queries(a: &BenchArgs, g: &mut Gen, n: usize) -> Result<Vec<Query>> {
    (0..n)
        .map(|i| {
            let scope = format!("project/p{:02}", (i * 7) % a.scopes);
            let q = g.query();
            let mut req = strata::Recall::new(
                q.clone(),
                strata::View::parse(std::slice::from_ref(&scope))?,
            );
            req.touch = !a.no_touch;
            let body = serde_json::json!({"query": q, "view": [scope], "touch": !a.no_touch});
            Ok(Query {
                req,
                body: body.to_string(),
            })
        })
        .collect()
}

/// Runs `work(i)` for i in 0..n on `clients` threads; returns the wall time,
/// each call's latency (recalls, then writes: request i is a write when
/// `is_write(i)`), and the errors. With a `rate` (requests/s), request i
/// is due at i / rate from the start and its latency counts from then, so a
/// slow answer also charges the requests queued behind it.
fn drive(
    clients: usize,
    n: usize,
    rate: Option<f64>,
    is_write: impl Fn(usize) -> bool + Sync,
    work: impl Fn(usize, &mut Option<ureq::Agent>) -> Result<()> + Sync,
) -> (Duration, Vec<Duration>, Vec<Duration>, usize) {
    let next = AtomicUsize::new(0);
    let lat = Mutex::new(Vec::with_capacity(n));
    let wlat = Mutex::new(Vec::new());
    let errors = AtomicUsize::new(0);
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..clients {
            s.spawn(|| {
                let mut mine = Vec::with_capacity(n / clients + 1);
                let mut mine_w = Vec::new();
                let mut agent = None;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let t = match rate {
                        Some(r) => {
                            let due = started + Duration::from_secs_f64(i as f64 / r);
                            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                                std::thread::sleep(wait);
                            }
                            due
                        }
                        None => Instant::now(),
                    };
                    if let Err(e) = work(i, &mut agent)
                        && errors.fetch_add(1, Ordering::Relaxed) < 5
                    {
                        eprintln!("bench http: request {i} failed: {e:#}");
                    }
                    if is_write(i) {
                        mine_w.push(t.elapsed());
                    } else {
                        mine.push(t.elapsed());
                    }
                }
                lat.lock().unwrap().extend(mine);
                wlat.lock().unwrap().extend(mine_w);
            });
        }
    });
    let wall = started.elapsed();
    (
        wall,
        lat.into_inner().unwrap(),
        wlat.into_inner().unwrap(),
        errors.into_inner(),
    )
}

fn agent(slot: &mut Option<ureq::Agent>) -> &ureq::Agent {
    slot.get_or_insert_with(|| {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into()
    })
}

fn post(agent: &ureq::Agent, url: &str, token: &str, body: &str, want: u16) -> Result<String> {
    let mut r = agent
        .post(url)
        .header("authorization", &format!("Bearer {token}"))
        .header("content-type", "application/json")
        .send(body)?;
    let status = r.status().as_u16();
    let text = r
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_string()?;
    if status != want {
        anyhow::bail!("{status}: {text}");
    }
    Ok(text)
}

pub fn run(a: &BenchArgs, db: &Path, g: &mut Gen, say: &dyn Fn(String)) -> Result<HttpBench> {
    let clients = a.clients.max(1);
    let n = a.http_requests.max(clients);
    let token = strata_server::new_token();
    let cfg = strata_server::ServerConfig {
        tokens: vec![strata_server::TokenConfig {
            name: "bench".into(),
            secret_sha256: strata_server::sha256_hex(&token),
            scopes: vec!["project".into()],
            access: strata_server::Access::ReadWrite,
        }],
        ..Default::default()
    };
    let mut cfg = cfg;
    if a.pool > 0 {
        cfg.limits.max_concurrent = a.pool;
    }
    let engine = strata::Engine::open(bench_config(db))?;
    let shared = strata_server::Shared::new(engine, &cfg, strata_server::AuthMode::Tokens)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = rt.spawn(strata_server::serve(listener, shared.clone(), async {
        let _ = stopped.await;
    }));
    let engine = shared.engine.clone();
    let qs = queries(a, g, n)?;
    let recall_url = format!("{base}/v1/recall");

    // Warm the page cache and both paths before timing.
    let warm = n.min(500);
    let never = |_| false;
    drive(clients, warm, None, never, |i, _| {
        engine.recall(&qs[i].req).map(drop).map_err(Into::into)
    });
    drive(clients, warm, None, never, |i, slot| {
        post(agent(slot), &recall_url, &token, &qs[i].body, 200).map(drop)
    });

    let pool = shared.limits.max_concurrent;
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    let mut counts = vec![cpus, pool, clients];
    counts.sort_unstable();
    counts.dedup();
    let mut in_process = Vec::new();
    for threads in counts {
        say(format!(
            "timing {n} recalls in process on {threads} threads…"
        ));
        let (wall, lat, _, errors) = drive(threads, n, None, never, |i, _| {
            engine.recall(&qs[i].req).map(drop).map_err(Into::into)
        });
        in_process.push(InProcess {
            threads,
            phase: Phase {
                per_sec: n as f64 / wall.as_secs_f64(),
                latency: latency(lat),
                errors,
            },
        });
    }
    say(format!(
        "timing {n} recalls over HTTP from {clients} clients…"
    ));
    let (wall, lat, _, errors) = drive(clients, n, None, never, |i, slot| {
        post(agent(slot), &recall_url, &token, &qs[i].body, 200).map(drop)
    });
    let http = Phase {
        per_sec: n as f64 / wall.as_secs_f64(),
        latency: latency(lat),
        errors,
    };
    let rate = if a.rate > 0.0 {
        a.rate
    } else {
        (http.per_sec / 2.0).round()
    };
    let paced_n = n.min((rate * 20.0) as usize).max(clients);
    say(format!(
        "timing {paced_n} recalls over HTTP from {clients} clients at {rate:.0}/s…"
    ));
    let (wall, lat, _, errors) = drive(clients, paced_n, Some(rate), never, |i, slot| {
        post(agent(slot), &recall_url, &token, &qs[i].body, 200).map(drop)
    });
    let paced = Paced {
        rate,
        phase: Phase {
            per_sec: paced_n as f64 / wall.as_secs_f64(),
            latency: latency(lat),
            errors,
        },
    };

    let m = a.mixed_requests.max(clients);
    say(format!(
        "timing {m} mixed requests (90 % recall, 10 % remember) from {clients} clients…"
    ));
    let mqs = queries(a, g, m)?;
    let writes: Vec<String> = (0..m)
        .map(|i| {
            serde_json::json!({
                "content": g.sentence(),
                "scope": format!("project/p{:02}", i % a.scopes),
                "kind": "finding",
            })
            .to_string()
        })
        .collect();
    let remember_url = format!("{base}/v1/memories");
    let acked = Mutex::new(Vec::new());
    let is_write = |i: usize| i % 10 == 9;
    let (wall, recall_lat, write_lat, errors) = drive(clients, m, None, is_write, |i, slot| {
        if is_write(i) {
            let text = post(agent(slot), &remember_url, &token, &writes[i], 201)?;
            let v: serde_json::Value = serde_json::from_str(&text)?;
            let id = v["id"].as_str().context("no id in the answer")?.to_string();
            acked.lock().unwrap().push(id);
            Ok(())
        } else {
            post(agent(slot), &recall_url, &token, &mqs[i].body, 200).map(drop)
        }
    });
    let acked = acked.into_inner().unwrap();
    let _ = stop.send(());
    rt.block_on(server)??;
    // Every acknowledged write must be there, read back through a fresh
    // engine on the file.
    drop(shared);
    let check = strata::Engine::open(bench_config(db))?;
    let mut lost = 0;
    for id in &acked {
        if check.get(id)?.is_none() {
            lost += 1;
        }
    }
    Ok(HttpBench {
        clients,
        ratio: http.per_sec
            / in_process
                .iter()
                .map(|p| p.phase.per_sec)
                .fold(f64::MIN_POSITIVE, f64::max),
        in_process,
        pool,
        http,
        paced,
        mixed: Mixed {
            per_sec: m as f64 / wall.as_secs_f64(),
            recall: latency(recall_lat),
            remember: latency(write_lat),
            errors,
            acknowledged_writes: acked.len(),
            lost_writes: lost,
        },
    })
}
