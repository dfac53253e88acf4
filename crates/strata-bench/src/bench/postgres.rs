//! `bench --only postgres --pg-url URL`: the same memories in a fresh
//! schema of a PostgreSQL server, beside the SQLite store of the same run:
//! batched insert, storing synthetic vectors, and hybrid recall (a text
//! query and every vector of the view, query embedding excluded) over one
//! project view, the two stores timed query by query in turn; then HTTP
//! recall throughput through one node and through two nodes on the same
//! schema. The schema (`strata_bench_<pid>`) is dropped afterwards.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;

use super::http::{Call, Server, drive_http, queries, server_config};
use super::{BenchArgs, DIM, Gen, Latency, Synthetic, bench_config, latency, store_vectors};

#[derive(Debug, Serialize)]
pub(super) struct PgBench {
    /// The server, password hidden.
    pub(super) url: String,
    /// `remember_batch` of every memory into PostgreSQL.
    pub(super) insert_per_sec: f64,
    /// Synthetic vectors stored per second (1,000 a transaction).
    pub(super) set_vectors_per_sec: f64,
    /// Hybrid recall over one project view on PostgreSQL (the vectors are
    /// in the process's copy after the first query).
    pub(super) recall: Latency,
    /// The same queries on the SQLite store of the same run.
    pub(super) sqlite_recall: Latency,
    /// PostgreSQL's p95 over SQLite's.
    pub(super) p95_ratio: f64,
    /// HTTP recall through one node and through two (absent with
    /// `--node-requests 0`).
    pub(super) nodes: Option<Nodes>,
}

/// HTTP recall throughput through one node and through two nodes of one
/// database. A node is a server with its own engine, connection pool,
/// copy of the vectors and runtime (in this process: what a second
/// `strata serve` would hold, without a second client machine).
#[derive(Debug, Serialize)]
pub(super) struct Nodes {
    /// Keep-alive client connections (split evenly over two nodes).
    pub(super) clients: usize,
    /// Recalls timed on each side.
    pub(super) requests: usize,
    pub(super) one_node_per_sec: f64,
    pub(super) two_nodes_per_sec: f64,
    /// Two nodes over one.
    pub(super) ratio: f64,
    /// Failed requests on both sides.
    pub(super) errors: usize,
    /// The machine's CPUs: the nodes, the client and PostgreSQL share them.
    pub(super) cpus: usize,
}

pub(super) fn run(
    a: &BenchArgs,
    url: &str,
    sqlite_db: &Path,
    data: &[strata::NewMemory],
    datagen: &mut Gen,
    say: &dyn Fn(String),
) -> Result<PgBench> {
    let opts = strata::PostgresOptions {
        schema: format!("strata_bench_{}", std::process::id()),
        password: std::env::var("STRATA_DB_PASSWORD")
            .or_else(|_| std::env::var("PGPASSWORD"))
            .ok(),
        ..strata::PostgresOptions::default()
    };
    strata::PostgresStore::open(url, opts.clone())?.drop_schema()?;
    let store = strata::PostgresStore::open(url, opts.clone())?;
    let shown = store.url().to_string();
    let out = (|| -> Result<PgBench> {
        let pg = strata::Engine::with_store(bench_config(sqlite_db), Box::new(store))?;
        say(format!(
            "postgres: inserting {} memories into {shown} (schema {})…",
            data.len(),
            opts.schema
        ));
        let t = Instant::now();
        pg.remember_batch(data.to_vec(), strata::Confirm::No)?;
        let insert_per_sec = data.len() as f64 / t.elapsed().as_secs_f64();
        say("postgres: storing a synthetic vector for every memory…".into());
        let t = Instant::now();
        let stored = store_vectors(&pg)?;
        let set_vectors_per_sec = stored as f64 / t.elapsed().as_secs_f64();
        // Storing the vectors rewrote every row: time recall on a settled
        // table, not beside autovacuum's cleanup of 100,000 dead versions.
        strata::PostgresStore::open(url, opts.clone())?.vacuum_analyze()?;
        let sqlite = strata::Engine::open(bench_config(sqlite_db))?;
        store_vectors(&sqlite)?;
        for e in [&pg, &sqlite] {
            e.set_embedder(Some(std::sync::Arc::new(Synthetic(DIM))))?;
        }
        say(format!(
            "postgres: timing {} hybrid recalls over one project view on each store…",
            a.queries
        ));
        let (mut lp, mut ls) = (Vec::new(), Vec::new());
        for i in 0..a.queries {
            let view = strata::View::scope(strata::Scope::parse(&format!(
                "project/p{:02}",
                (i * 7) % a.scopes
            ))?);
            let mut req = strata::Recall::new(datagen.query(), view);
            req.strategy = Some(strata::Strategy::Hybrid);
            req.touch = !a.no_touch;
            for (e, lat) in [(&pg, &mut lp), (&sqlite, &mut ls)] {
                e.query_vector(&req.query)?;
                let t = Instant::now();
                std::hint::black_box(e.recall(&req)?);
                lat.push(t.elapsed());
            }
        }
        let (recall, sqlite_recall) = (latency(lp), latency(ls));
        let nodes = match a.node_requests {
            0 => None,
            _ => Some(nodes(a, url, &opts, sqlite_db, datagen, say)?),
        };
        Ok(PgBench {
            nodes,
            url: shown.clone(),
            insert_per_sec,
            set_vectors_per_sec,
            p95_ratio: recall.p95_ms / sqlite_recall.p95_ms,
            recall,
            sqlite_recall,
        })
    })();
    strata::PostgresStore::open(url, opts)?.drop_schema()?;
    out
}

/// A node: a server with an engine of its own on the bench schema.
fn node(
    url: &str,
    opts: &strata::PostgresOptions,
    sqlite_db: &Path,
    cfg: &strata_server::ServerConfig,
) -> Result<Server> {
    let store = strata::PostgresStore::open(url, opts.clone())?;
    let engine = strata::Engine::with_store(bench_config(sqlite_db), Box::new(store))?;
    engine.set_embedder(Some(Arc::new(Synthetic(DIM))))?;
    Server::start(engine, cfg)
}

/// Times `--node-requests` HTTP recalls through one node and as many
/// through two, `--clients` connections each time, in rounds whose first
/// side alternates (a machine that drifts weighs on both alike).
fn nodes(
    a: &BenchArgs,
    url: &str,
    opts: &strata::PostgresOptions,
    sqlite_db: &Path,
    datagen: &mut Gen,
    say: &dyn Fn(String),
) -> Result<Nodes> {
    let clients = a.clients.max(2);
    let n = a.node_requests.max(clients);
    let token = strata_server::new_token();
    let cfg = server_config(&token);
    let started = [
        node(url, opts, sqlite_db, &cfg)?,
        node(url, opts, sqlite_db, &cfg)?,
    ];
    let addrs = [started[0].addr, started[1].addr];
    let qs = queries(a, datagen, n)?;
    let never = |_: usize| false;
    let fine = |_: usize, _: &[u8]| Ok(());
    say(format!(
        "postgres: timing {n} HTTP recalls through one node and {n} through two, {clients} clients…"
    ));
    // Warm both nodes: each loads its copy of the vectors on its first
    // hybrid query.
    let warm = n.min(200);
    for addr in addrs {
        let call = |i: usize| -> Call<'_> { ("/v1/recall", qs[i].body.as_str(), 200) };
        drive_http(&[addr], &token, clients, warm, None, &never, &call, &fine)?;
    }
    let rounds = 4.min(n / clients).max(1);
    let mut sides = [(Duration::ZERO, 0usize); 2];
    let mut errors = 0;
    for round in 0..rounds {
        let (from, to) = (round * n / rounds, (round + 1) * n / rounds);
        let call = |i: usize| -> Call<'_> { ("/v1/recall", qs[from + i].body.as_str(), 200) };
        for turn in 0..2 {
            let side = (round + turn) % 2;
            let m = drive_http(
                &addrs[..=side],
                &token,
                clients,
                to - from,
                None,
                &never,
                &call,
                &fine,
            )?;
            sides[side].0 += m.wall;
            sides[side].1 += m.reads.len();
            errors += m.errors;
        }
    }
    for node in started {
        node.stop()?;
    }
    let per_sec = |(wall, done): (Duration, usize)| done as f64 / wall.as_secs_f64();
    let (one, two) = (per_sec(sides[0]), per_sec(sides[1]));
    Ok(Nodes {
        clients,
        requests: n,
        one_node_per_sec: one,
        two_nodes_per_sec: two,
        ratio: two / one,
        errors,
        cpus: std::thread::available_parallelism().map_or(1, |c| c.get()),
    })
}
