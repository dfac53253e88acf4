//! `bench --only postgres --pg-url URL`: the same memories in a fresh
//! schema of a PostgreSQL server, beside the SQLite store of the same run:
//! batched insert, storing synthetic vectors, and hybrid recall (a text
//! query and every vector of the view, query embedding excluded) over one
//! project view, the two stores timed query by query in turn. The schema
//! (`strata_bench_<pid>`) is dropped afterwards.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

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
        Ok(PgBench {
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
