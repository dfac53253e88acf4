//! `strata bench --only http`: recall over HTTP against the same recalls in
//! process, on the same store in the same run, and a mixed workload.
//!
//! The server runs in this process (a `strata serve` on 127.0.0.1, port 0,
//! with a bearer token). The load comes from `--clients` keep-alive
//! connections, all driven from one client thread (a current-thread
//! runtime, as wrk drives its connections from one event loop), sending
//! `POST /v1/recall` bodies built beforehand. The client is as lean as
//! wrk: it writes each request's bytes and parses only the answer's head
//! (`httparse`, hyper's parser) and reads `Content-Length` bytes of body,
//! because on two cores every microsecond it spends is taken from the
//! server; a client of one thread per connection spent as much CPU
//! switching threads as the server did. In process, threads call
//! `Engine::recall` with the same requests. Throughput is requests over
//! wall time; latency is per request, as the client sees it.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use anyhow::{Context, Result};
use serde::Serialize;

use super::{BenchArgs, Gen, Latency, bench_config, latency};

#[derive(Debug, Serialize)]
pub struct HttpBench {
    pub clients: usize,
    /// The server's pool (`limits.max_concurrent`).
    pub pool: usize,
    /// The server's recall threads and their niceness (`[server]
    /// recall_threads`, `recall_nice`); `None`: recalls on the event loop.
    pub recall_threads: Option<(usize, u8)>,
    /// The same recalls in process, on as many threads as there are CPUs,
    /// as the server's pool, and as `--clients`.
    pub in_process: Vec<InProcess>,
    /// `--clients` HTTP clients, each sending its next request when the
    /// last is answered.
    pub http: Phase,
    /// HTTP requests/s over the best in-process figure.
    pub ratio: f64,
    /// HTTP requests/s over the in-process figure on as many threads as
    /// there are HTTP clients.
    pub ratio_same_concurrency: f64,
    /// What the server adds to a recall: the server's CPU time per HTTP
    /// request (the process's, less the client thread's) over the least
    /// CPU time per recall in process, minus one (Linux only).
    pub server_cost: Option<f64>,
    /// Of the server's CPU time per HTTP recall, µs, what its threads
    /// spent in the recall itself (the query read from the request, the
    /// engine's recall, the grant's check: `strata_recall_cpu_seconds`);
    /// the rest surrounds it: the request read and its body checked, the
    /// answer written, the transport (Linux only).
    pub server_recall_cpu_us: Option<f64>,
    /// `GET /healthz` from `--clients` clients: what the transport alone
    /// costs (TCP on loopback, hyper, routing, the middleware), the floor
    /// under every request's cost.
    pub floor: Phase,
    /// `--clients` HTTP clients at a fixed total rate.
    pub paced: Paced,
    /// Mixed workloads over HTTP: 90 % recall / 10 % remember, then
    /// 50 / 50.
    pub mixed: Vec<Mixed>,
    /// The same engine in process on 1, 2, 4 … threads (up to the CPUs):
    /// recall only, and the two mixes.
    pub scaling: Vec<Scale>,
}

#[derive(Debug, Serialize)]
pub struct Phase {
    pub per_sec: f64,
    pub latency: Latency,
    pub errors: usize,
    /// CPU time per request, µs: the process's in process, the server's
    /// (the process's less the client thread's) over HTTP (Linux only).
    pub cpu_us: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct InProcess {
    pub threads: usize,
    pub phase: Phase,
    /// CPU time per recall, µs, of the thread that ran it, while it ran
    /// (as [`HttpBench::server_recall_cpu_us`] measures the server's;
    /// Linux only).
    pub recall_cpu_us: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Paced {
    pub rate: f64,
    pub phase: Phase,
}

#[derive(Debug, Serialize)]
pub struct Mixed {
    /// Remembers in every 100 requests (the rest recall).
    pub write_percent: usize,
    pub per_sec: f64,
    pub recall: Latency,
    pub remember: Latency,
    pub errors: usize,
    pub acknowledged_writes: usize,
    pub lost_writes: usize,
    /// Remembers the server wrote on the event loop's thread, and on the
    /// blocking pool (another write was in the way).
    pub written_inline: u64,
    pub written_pooled: u64,
    /// Of the ones on the event loop, those that first waited out another
    /// writer of the process (without holding the thread).
    pub written_after_waiting: u64,
    /// Refusals on the event loop (a write may be refused more than once),
    /// by why: another writer of the process at it, SQLite's lock held
    /// elsewhere, an eviction ahead.
    pub refused: [u64; 3],
    /// The mix's recalls by where the server ran them: the event loop's
    /// thread, a recall thread, the blocking pool.
    pub recalls_on: [u64; 3],
}

/// One row of the in-process scaling table.
#[derive(Debug, Serialize)]
pub struct Scale {
    pub threads: usize,
    /// Recall only: requests/s.
    pub recall_per_sec: f64,
    /// The mixes, in the order of [`MIXES`].
    pub mixed: Vec<ScaleMixed>,
}

#[derive(Debug, Serialize)]
pub struct ScaleMixed {
    pub write_percent: usize,
    pub per_sec: f64,
    pub recall: Latency,
    pub remember: Latency,
}

/// The mixed workloads: remembers in every 10 requests.
pub const MIXES: [usize; 2] = [1, 5];

/// Whether request `i` of a mix with `w` remembers in every 10 is one.
fn is_write_of(w: usize, i: usize) -> bool {
    i % 10 >= 10 - w
}

/// A phase's rounds added up.
struct Sum {
    wall: Duration,
    lat: Vec<Duration>,
    errors: usize,
    /// None once a round could not read it.
    cpu: Option<Duration>,
}

impl Default for Sum {
    fn default() -> Sum {
        Sum {
            wall: Duration::ZERO,
            lat: Vec::new(),
            errors: 0,
            cpu: Some(Duration::ZERO),
        }
    }
}

impl Sum {
    fn add(&mut self, wall: Duration, lat: Vec<Duration>, errors: usize, cpu: Option<Duration>) {
        self.cpu = self.cpu.zip(cpu).map(|(a, b)| a + b);
        self.wall += wall;
        self.lat.extend(lat);
        self.errors += errors;
    }

    fn phase(self) -> Phase {
        let n = self.lat.len() as f64;
        Phase {
            per_sec: n / self.wall.as_secs_f64(),
            cpu_us: self.cpu.map(|c| c.as_secs_f64() * 1e6 / n),
            latency: latency(self.lat),
            errors: self.errors,
        }
    }
}

/// CPU time used so far by this process (`thread` false) or the calling
/// thread, from `/proc` (Linux; None elsewhere). Counted in the kernel's
/// 10 ms ticks, which is why phases last seconds.
fn cpu_time(thread: bool) -> Option<Duration> {
    let path = if thread {
        "/proc/thread-self/stat"
    } else {
        "/proc/self/stat"
    };
    let stat = std::fs::read_to_string(path).ok()?;
    // The fields after the command, which is in parentheses and may
    // hold spaces: state is field 3 of proc_pid_stat(5), utime 14, stime 15.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let mut fields = rest.split(' ').skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // /proc counts in USER_HZ, 100 a second on Linux.
    Some(Duration::from_millis((utime + stime) * 10))
}

/// The CPU time `f` takes: the process's, less the calling thread's when
/// `less_this_thread`.
fn cpu_of<T>(less_this_thread: bool, f: impl FnOnce() -> T) -> (T, Option<Duration>) {
    let before = (cpu_time(false), cpu_time(true));
    let out = f();
    let after = (cpu_time(false), cpu_time(true));
    let process = after.0.zip(before.0).map(|(a, b)| a.saturating_sub(b));
    let cpu = if less_this_thread {
        let thread = after.1.zip(before.1).map(|(a, b)| a.saturating_sub(b));
        process.zip(thread).map(|(p, t)| p.saturating_sub(t))
    } else {
        process
    };
    (out, cpu)
}

/// CPU time per recall, µs, between two readings of
/// [`strata_server::Metrics::recall_cpu`]; `None` when none was timed.
fn per_recall_us(before: (u64, Duration), after: (u64, Duration)) -> Option<f64> {
    match after.0 - before.0 {
        0 => None,
        n => Some((after.1 - before.1).as_secs_f64() * 1e6 / n as f64),
    }
}

/// Thread counts as `1, 2, 4`.
fn list(counts: &[usize]) -> String {
    counts
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One recall, as the library takes it and as the HTTP body says it.
pub(super) struct Query {
    req: strata::Recall,
    pub(super) body: String,
}

pub(super) fn queries(a: &BenchArgs, g: &mut Gen, n: usize) -> Result<Vec<Query>> {
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

/// Runs `work(i)` for i in 0..n on `threads` threads; returns the wall
/// time, each call's latency, and the errors.
fn drive(
    threads: usize,
    n: usize,
    work: impl Fn(usize) -> Result<()> + Sync,
) -> (Duration, Vec<Duration>, usize) {
    let next = AtomicUsize::new(0);
    let lat = Mutex::new(Vec::with_capacity(n));
    let errors = AtomicUsize::new(0);
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut mine = Vec::with_capacity(n / threads + 1);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let t = Instant::now();
                    if let Err(e) = work(i)
                        && errors.fetch_add(1, Ordering::Relaxed) < 5
                    {
                        eprintln!("bench http: call {i} failed: {e:#}");
                    }
                    mine.push(t.elapsed());
                }
                lat.lock().unwrap().extend(mine);
            });
        }
    });
    (
        started.elapsed(),
        lat.into_inner().unwrap(),
        errors.into_inner(),
    )
}

/// One request of an HTTP phase: path, JSON body (a GET when empty), the
/// status that means success.
pub(super) type Call<'a> = (&'a str, &'a str, u16);

/// What an HTTP phase measured: wall time, latencies of reads and of
/// writes (request i is a write when `is_write(i)`), errors.
pub(super) struct Measured {
    pub(super) wall: Duration,
    pub(super) reads: Vec<Duration>,
    writes: Vec<Duration>,
    pub(super) errors: usize,
}

/// Sends requests 0..n over `clients` keep-alive connections, connection
/// k to `addrs[k % addrs.len()]` (several servers: nodes of one
/// database), all from one client thread; `answer(i, body)` checks each success.
/// With a `rate` (requests/s), request i is due at i / rate from the start
/// and its latency counts from then, so a slow answer also charges the
/// requests queued behind it.
#[allow(clippy::too_many_arguments)]
pub(super) fn drive_http<'a>(
    addrs: &[SocketAddr],
    token: &str,
    clients: usize,
    n: usize,
    rate: Option<f64>,
    is_write: &(dyn Fn(usize) -> bool + Sync),
    call: &(dyn Fn(usize) -> Call<'a> + Sync),
    answer: &(dyn Fn(usize, &[u8]) -> Result<()> + Sync),
) -> Result<Measured> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let auth = format!("Bearer {token}");
    let next = AtomicUsize::new(0);
    let errors = AtomicUsize::new(0);
    rt.block_on(async {
        let mut conns = Vec::with_capacity(clients);
        for k in 0..clients {
            conns.push(Conn::open(addrs[k % addrs.len()]).await?);
        }
        let started = Instant::now();
        let loops = conns.into_iter().map(|mut conn| {
            let (next, errors, auth) = (&next, &errors, &auth);
            async move {
                let (mut reads, mut writes) = (Vec::new(), Vec::new());
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let t = match rate {
                        Some(r) => {
                            let due = started + Duration::from_secs_f64(i as f64 / r);
                            tokio::time::sleep_until(due.into()).await;
                            due
                        }
                        None => Instant::now(),
                    };
                    let r = conn.send(auth, call(i)).await;
                    if let Err(e) = r.and_then(|body| answer(i, body)) {
                        if errors.fetch_add(1, Ordering::Relaxed) < 5 {
                            eprintln!("bench http: request {i} failed: {e:#}");
                        }
                        // The connection may be gone: start a new one.
                        if let Ok(c) = Conn::open(conn.addr).await {
                            conn = c;
                        }
                    }
                    if is_write(i) {
                        writes.push(t.elapsed());
                    } else {
                        reads.push(t.elapsed());
                    }
                }
                (reads, writes)
            }
        });
        let done = futures_util::future::join_all(loops).await;
        let wall = started.elapsed();
        let (mut reads, mut writes) = (Vec::with_capacity(n), Vec::new());
        for (r, w) in done {
            reads.extend(r);
            writes.extend(w);
        }
        Ok(Measured {
            wall,
            reads,
            writes,
            errors: errors.load(Ordering::Relaxed),
        })
    })
}

/// A keep-alive HTTP/1.1 connection and its buffers.
pub(super) struct Conn {
    addr: SocketAddr,
    stream: TcpStream,
    out: Vec<u8>,
    inb: Vec<u8>,
}

impl Conn {
    pub(super) async fn open(addr: SocketAddr) -> Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            addr,
            stream,
            out: Vec::with_capacity(1024),
            inb: Vec::with_capacity(16 * 1024),
        })
    }

    /// One request (a GET when the body is empty); the answer's body when
    /// its status is the one wanted.
    pub(super) async fn send(&mut self, auth: &str, (path, body, want): Call<'_>) -> Result<&[u8]> {
        use std::io::Write as _;
        self.out.clear();
        if body.is_empty() {
            write!(self.out, "GET {path} HTTP/1.1\r\n")?;
        } else {
            write!(
                self.out,
                "POST {path} HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
                body.len()
            )?;
        }
        write!(
            self.out,
            "host: {}\r\nauthorization: {auth}\r\n\r\n",
            self.addr
        )?;
        self.out.extend_from_slice(body.as_bytes());
        self.stream.write_all(&self.out).await?;
        // Read until the head parses, then until the body is all there.
        self.inb.clear();
        let (status, head, len) = loop {
            if self.stream.read_buf(&mut self.inb).await? == 0 {
                anyhow::bail!("the server closed the connection");
            }
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut res = httparse::Response::new(&mut headers);
            if let httparse::Status::Complete(head) = res.parse(&self.inb)? {
                let len = res
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| {
                        std::str::from_utf8(h.value)
                            .ok()?
                            .trim()
                            .parse::<usize>()
                            .ok()
                    })
                    .context("an answer without Content-Length")?;
                break (res.code.unwrap_or(0), head, len);
            }
        };
        while self.inb.len() < head + len {
            if self.stream.read_buf(&mut self.inb).await? == 0 {
                anyhow::bail!("the server closed the connection mid-answer");
            }
        }
        let text = &self.inb[head..head + len];
        if status != want {
            anyhow::bail!("{status}: {}", String::from_utf8_lossy(text));
        }
        Ok(text)
    }
}

/// The benchmarks' servers' configuration: one bearer token, `token`,
/// reading and writing every project scope.
pub(super) fn server_config(token: &str) -> strata_server::ServerConfig {
    strata_server::ServerConfig {
        tokens: vec![strata_server::TokenConfig {
            name: "bench".into(),
            secret_sha256: strata_server::sha256_hex(token),
            scopes: vec!["project".into()],
            access: strata_server::Access::ReadWrite,
            ..Default::default()
        }],
        // Every client is this process on loopback: one peer, which may
        // hold as many connections as `--clients` asks for.
        limits: strata_server::Limits {
            max_connections_per_peer: 1024,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A `strata serve` of one engine on 127.0.0.1 (a port of its own), on a
/// runtime of its own, until [`Server::stop`].
pub(super) struct Server {
    pub(super) addr: SocketAddr,
    pub(super) shared: std::sync::Arc<strata_server::Shared>,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    rt: tokio::runtime::Runtime,
}

impl Server {
    pub(super) fn start(
        engine: strata::Engine,
        cfg: &strata_server::ServerConfig,
    ) -> Result<Server> {
        let shared = strata_server::Shared::new(engine, cfg, strata_server::AuthMode::Tokens)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = rt.spawn(strata_server::serve(listener, shared.clone(), async {
            let _ = stopped.await;
        }));
        Ok(Server {
            addr,
            shared,
            stop,
            server,
            rt,
        })
    }

    /// Stops serving once the requests in flight are answered.
    pub(super) fn stop(self) -> Result<()> {
        let _ = self.stop.send(());
        self.rt.block_on(self.server)??;
        Ok(())
    }
}

pub fn run(a: &BenchArgs, db: &Path, g: &mut Gen, say: &dyn Fn(String)) -> Result<HttpBench> {
    let clients = a.clients.max(1);
    let n = a.http_requests.max(clients);
    let token = strata_server::new_token();
    let mut cfg = server_config(&token);
    if a.pool > 0 {
        cfg.limits.max_concurrent = a.pool;
    }
    if let Some(t) = a.recall_threads {
        cfg.recall_threads = t;
    }
    if let Some(n) = a.recall_nice {
        cfg.recall_nice = n;
    }
    // Start from an empty write-ahead log: pages still in it from loading
    // the data (read with pread, not through the memory map) would slow
    // whichever side ran first.
    strata::SqliteStore::open(db, super::bench_options())?
        .checkpoint()
        .context("checkpointing the benchmark database")?;
    let server = Server::start(strata::Engine::open(bench_config(db))?, &cfg)?;
    let (addr, shared) = (server.addr, server.shared.clone());
    let engine = shared.engine.clone();
    let qs = queries(a, g, n)?;
    let recall = |i: usize| -> Call<'_> { ("/v1/recall", qs[i].body.as_str(), 200) };
    let never = |_: usize| false;
    let fine = |_: usize, _: &[u8]| Ok(());

    // Warm the page cache and both paths before timing.
    let warm = n.min(500);
    drive(clients, warm, |i| {
        engine.recall(&qs[i].req).map(drop).map_err(Into::into)
    });
    drive_http(&[addr], &token, clients, warm, None, &never, &recall, &fine)?;

    let pool = shared.limits.max_concurrent;
    let recall_threads = shared.recall_threads();
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    let mut counts = vec![cpus, pool, clients];
    counts.sort_unstable();
    counts.dedup();
    // Each round times the same slice of the recalls on every in-process
    // thread count and over HTTP. The side that goes first turns with the
    // round: a side that ran the slice after another would find the
    // caches warm, so the sides take turns at going first (equally often
    // when the rounds are a multiple of the sides: 20 rounds, 4 sides on
    // 2 CPUs).
    let rounds = (a.http_rounds.max(1) as usize).min(n / clients).max(1);
    let sides_n = counts.len() + 1;
    let mut sides: Vec<Sum> = (0..sides_n).map(|_| Sum::default()).collect();
    // Each in-process side's recalls timed by their threads' CPU clocks,
    // as the server times its own.
    let timers: Vec<strata_server::Metrics> = counts
        .iter()
        .map(|_| strata_server::Metrics::default())
        .collect();
    say(format!(
        "timing {n} recalls in process on {} threads and over HTTP from {clients} clients, in {rounds} rounds…",
        list(&counts)
    ));
    let timed_before = shared.metrics.recall_cpu();
    for round in 0..rounds {
        let (from, to) = (round * n / rounds, (round + 1) * n / rounds);
        for turn in 0..sides_n {
            let side = (round + turn) % sides_n;
            if let Some(&threads) = counts.get(side) {
                let ((wall, lat, errors), cpu) = cpu_of(false, || {
                    drive(threads, to - from, |i| {
                        timers[side]
                            .time_recall(|| engine.recall(&qs[from + i].req))
                            .map(drop)
                            .map_err(Into::into)
                    })
                });
                sides[side].add(wall, lat, errors, cpu);
                continue;
            }
            // The client runs on this thread: its CPU is not the server's.
            let slice = |i: usize| recall(from + i);
            let (m, cpu) = cpu_of(true, || {
                drive_http(
                    &[addr],
                    &token,
                    clients,
                    to - from,
                    None,
                    &never,
                    &slice,
                    &fine,
                )
            });
            let m = m?;
            sides[side].add(m.wall, m.reads, m.errors, cpu);
        }
    }
    let http = sides.pop().unwrap_or_default().phase();
    let timed_after = shared.metrics.recall_cpu();
    let server_recall_cpu_us = per_recall_us(timed_before, timed_after);
    say(format!(
        "timing {n} GET /healthz over HTTP from {clients} clients (the transport's floor)…"
    ));
    let health = |_: usize| -> Call<'_> { ("/healthz", "", 200) };
    let (m, cpu) = cpu_of(true, || {
        drive_http(&[addr], &token, clients, n, None, &never, &health, &fine)
    });
    let m = m?;
    let mut floor = Sum::default();
    floor.add(m.wall, m.reads, m.errors, cpu);
    let floor = floor.phase();
    let in_process: Vec<InProcess> = counts
        .iter()
        .zip(sides)
        .zip(&timers)
        .map(|((&threads, s), timer)| InProcess {
            threads,
            phase: s.phase(),
            recall_cpu_us: per_recall_us((0, Duration::ZERO), timer.recall_cpu()),
        })
        .collect();
    let rate = if a.rate > 0.0 {
        a.rate
    } else {
        (http.per_sec / 2.0).round()
    };
    let paced_n = n.min((rate * 20.0) as usize).max(clients);
    say(format!(
        "timing {paced_n} recalls over HTTP from {clients} clients at {rate:.0}/s…"
    ));
    let m = drive_http(
        &[addr],
        &token,
        clients,
        paced_n,
        Some(rate),
        &never,
        &recall,
        &fine,
    )?;
    let paced = Paced {
        rate,
        phase: Phase {
            per_sec: paced_n as f64 / m.wall.as_secs_f64(),
            latency: latency(m.reads),
            errors: m.errors,
            cpu_us: None,
        },
    };

    let mixed_n = a.mixed_requests.max(clients);
    let mut mixed = Vec::new();
    let mut acked = Vec::new();
    for w in MIXES {
        say(format!(
            "timing {mixed_n} mixed requests ({} % recall, {} % remember) from {clients} clients…",
            100 - 10 * w,
            10 * w
        ));
        let mqs = queries(a, g, mixed_n)?;
        let writes = write_bodies(a, g, mixed_n);
        let is_write = |i: usize| is_write_of(w, i);
        let call = |i: usize| -> Call<'_> {
            if is_write(i) {
                ("/v1/memories", writes[i].as_str(), 201)
            } else {
                ("/v1/recall", mqs[i].body.as_str(), 200)
            }
        };
        let ids = Mutex::new(Vec::new());
        let record = |i: usize, body: &[u8]| -> Result<()> {
            if is_write(i) {
                let v: serde_json::Value = serde_json::from_slice(body)?;
                let id = v["id"].as_str().context("no id in the answer")?.to_string();
                ids.lock().unwrap().push(id);
            }
            Ok(())
        };
        let before = shared.metrics.writes();
        let recalls_before = shared.metrics.recalls();
        let waited_before = shared.metrics.writes_waited();
        let refused_before = strata::refusals();
        let m = drive_http(
            &[addr],
            &token,
            clients,
            mixed_n,
            None,
            &is_write,
            &call,
            &record,
        )?;
        let after = shared.metrics.writes();
        let recalls_after = shared.metrics.recalls();
        let ids = ids.into_inner().unwrap();
        mixed.push(Mixed {
            write_percent: 10 * w,
            per_sec: mixed_n as f64 / m.wall.as_secs_f64(),
            recall: latency(m.reads),
            remember: latency(m.writes),
            errors: m.errors,
            acknowledged_writes: ids.len(),
            lost_writes: 0,
            written_inline: after.0 - before.0,
            written_pooled: after.1 - before.1,
            written_after_waiting: shared.metrics.writes_waited() - waited_before,
            refused: std::array::from_fn(|k| strata::refusals()[k] - refused_before[k]),
            recalls_on: [
                recalls_after.0 - recalls_before.0,
                recalls_after.1 - recalls_before.1,
                recalls_after.2 - recalls_before.2,
            ],
        });
        acked.push(ids);
    }
    server.stop()?;

    let scaling = scale(a, g, &engine, say)?;
    drop(engine);
    // Every acknowledged write must be there, read back through a fresh
    // engine on the file.
    drop(shared);
    let check = strata::Engine::open(bench_config(db))?;
    for (m, ids) in mixed.iter_mut().zip(&acked) {
        for id in ids {
            if check.get(id)?.is_none() {
                m.lost_writes += 1;
            }
        }
    }
    let same = in_process
        .iter()
        .find(|p| p.threads == clients)
        .map_or(f64::MIN_POSITIVE, |p| p.phase.per_sec);
    let least_cpu = in_process
        .iter()
        .filter_map(|p| p.phase.cpu_us)
        .fold(f64::INFINITY, f64::min);
    Ok(HttpBench {
        server_cost: http
            .cpu_us
            .filter(|_| least_cpu.is_finite())
            .map(|c| c / least_cpu - 1.0),
        server_recall_cpu_us,
        clients,
        ratio_same_concurrency: http.per_sec / same,
        ratio: http.per_sec
            / in_process
                .iter()
                .map(|p| p.phase.per_sec)
                .fold(f64::MIN_POSITIVE, f64::max),
        in_process,
        pool,
        recall_threads,
        http,
        floor,
        paced,
        mixed,
        scaling,
    })
}

/// Remember bodies, one per request (only the writes' are sent).
fn write_bodies(a: &BenchArgs, g: &mut Gen, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            serde_json::json!({
                "content": g.sentence(),
                "scope": format!("project/p{:02}", i % a.scopes),
                "kind": "finding",
            })
            .to_string()
        })
        .collect()
}

/// The scaling table: recall only and each mix, in process, on 1, 2, 4 …
/// threads up to the CPUs (and the CPUs themselves). Every remember is
/// read back afterwards; a missing one is an error.
fn scale(
    a: &BenchArgs,
    g: &mut Gen,
    engine: &strata::Engine,
    say: &dyn Fn(String),
) -> Result<Vec<Scale>> {
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    let mut counts: Vec<usize> = std::iter::successors(Some(1usize), |t| Some(t * 2))
        .take_while(|t| *t <= cpus)
        .collect();
    if counts.last() != Some(&cpus) {
        counts.push(cpus);
    }
    let n = a.scale_requests.max(16);
    say(format!(
        "scaling: {n} requests in process on {} threads, recall only and mixed…",
        list(&counts)
    ));
    let mut rows = Vec::new();
    for threads in counts {
        let qs = queries(a, g, n)?;
        let (wall, lat, errors) = drive(threads, n, |i| {
            engine.recall(&qs[i].req).map(drop).map_err(Into::into)
        });
        anyhow::ensure!(errors == 0, "scaling: {errors} recalls failed");
        let recall_per_sec = lat.len() as f64 / wall.as_secs_f64();
        let mut mixes = Vec::new();
        for w in MIXES {
            let qs = queries(a, g, n)?;
            let items: Vec<strata::NewMemory> = (0..n)
                .map(|i| {
                    strata::Scope::parse(&format!("project/p{:02}", i % a.scopes)).map(|s| {
                        strata::NewMemory::new(s, g.sentence()).kind(strata::Kind::Finding)
                    })
                })
                .collect::<strata::Result<_>>()?;
            let ids = Mutex::new(Vec::new());
            let (reads, writes) = (Mutex::new(Vec::new()), Mutex::new(Vec::new()));
            let (wall, _, errors) = drive(threads, n, |i| {
                let t = Instant::now();
                if is_write_of(w, i) {
                    let m = engine.remember(items[i].clone())?;
                    writes.lock().unwrap().push(t.elapsed());
                    ids.lock().unwrap().push(m.id);
                } else {
                    engine.recall(&qs[i].req)?;
                    reads.lock().unwrap().push(t.elapsed());
                }
                Ok(())
            });
            anyhow::ensure!(errors == 0, "scaling: {errors} requests failed");
            for id in ids.into_inner().unwrap() {
                anyhow::ensure!(
                    engine.get(&id)?.is_some(),
                    "scaling: acknowledged write {id} is missing"
                );
            }
            mixes.push(ScaleMixed {
                write_percent: 10 * w,
                per_sec: n as f64 / wall.as_secs_f64(),
                recall: latency(reads.into_inner().unwrap()),
                remember: latency(writes.into_inner().unwrap()),
            });
        }
        rows.push(Scale {
            threads,
            recall_per_sec,
            mixed: mixes,
        });
    }
    Ok(rows)
}
