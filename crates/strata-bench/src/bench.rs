//! `strata bench`: the benchmarks behind every number in docs/performance.md.
//!
//! On synthetic memories (sentences of 8–28 words drawn from a Zipf
//! distribution over an English vocabulary, spread over 50 project scopes):
//! - `insert`: one `remember_batch` of N memories (validation, token
//!   counting, checksums, row + FTS5 in one transaction) against a raw
//!   rusqlite insert of the same rows into the same tables, in the same run;
//! - `remember`: single durable (`synchronous=FULL`) `remember` latency on the
//!   N-memory store;
//! - `writers`: the same durable remembers from 1, 2, 4, 8 and 16 threads at
//!   once (concurrent writers share commits: group commit), throughput and
//!   latency per thread count;
//! - `recall`: hybrid recall of question-like queries (a template around 1–3
//!   content words drawn like the memories' words) over one project view;
//! - `cold`: whole-process `strata recall` wall time;
//! - `context`: context assembly (8,000-token budget, hybrid ranking,
//!   HEAD/TAIL, extractive summary) over the same number of memories split
//!   across the three sources of one profile (task 10 %, project 60 %,
//!   global 30 %), with the same question-like queries;
//! - `http` (not in the default set; `bench/http.rs`): recall over HTTP
//!   against the same recalls in process, a paced phase, and a 90/10
//!   recall/remember mix that checks every acknowledged write.
//!
//! `--encrypted` runs them all on stores encrypted at rest (SQLCipher under
//! a throwaway raw 256-bit key, the cold tier sealed with it); the raw
//! rusqlite ceiling of `insert` stays plain. Two runs, with and without,
//! give the cost of encryption.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;

use crate::out::{self as output, usage};

#[cfg(feature = "http")]
mod http;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "http")]
mod soak;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Memories in the store.
    #[arg(long, default_value_t = 100_000)]
    pub memories: usize,
    /// Project scopes they are spread over.
    #[arg(long, default_value_t = 50)]
    pub scopes: usize,
    /// Recall queries to time.
    #[arg(long, default_value_t = 2_000)]
    pub queries: usize,
    /// Single remembers to time.
    #[arg(long, default_value_t = 2_000)]
    pub writes: usize,
    /// Cold-start process runs.
    #[arg(long, default_value_t = 30)]
    pub cold_runs: usize,
    /// Insert rounds (strata and raw alternate; the medians are reported).
    #[arg(long, default_value_t = 3)]
    pub insert_rounds: usize,
    /// Benchmarks to run (comma-separated): insert, remember, writers,
    /// recall, cold, context, vectors, http (recall over HTTP against in process, and a
    /// mixed 90 % recall / 10 % remember workload; not in the default set),
    /// tiers (the cold tier: demotion rate, bytes, cold search; not in the
    /// default set), hot (a session's last turns from the hot tier against
    /// the store; not in the default set), lifecycle (a simulated year of a
    /// fleet's turns with daily upkeep, against a store that keeps all
    /// warm; `--year-turns`; not in the default set).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "insert,remember,writers,recall,cold,context,vectors"
    )]
    pub only: Vec<String>,
    /// Archived memories of the `tiers` benchmark (demotion to the cold
    /// tier, cold bytes against SQLite bytes, cold search).
    #[arg(long, default_value_t = 100_000)]
    pub tier_memories: usize,
    /// Run the `tiers` benchmark's cold tier in this bucket of an
    /// S3-compatible store (which must exist; credentials from
    /// `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`), under a fresh
    /// prefix, instead of a directory.
    #[arg(long)]
    pub cold_s3_bucket: Option<String>,
    /// The endpoint of `--cold-s3-bucket` (default AWS's).
    #[arg(long, requires = "cold_s3_bucket")]
    pub cold_s3_endpoint: Option<String>,
    /// Turns the `lifecycle` benchmark's fleet writes over its simulated
    /// year (the figure is 2,000,000).
    #[arg(long, default_value_t = 200_000)]
    pub year_turns: usize,
    /// Directory for the benchmark databases (default: a temporary one).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Time recalls without recording access (no write per recall).
    #[arg(long)]
    pub no_touch: bool,
    /// Token budget of the context benchmark.
    #[arg(long, default_value_t = 8000)]
    pub context_budget: u32,
    /// Texts the local model embeds in the vectors benchmark (when it is
    /// installed).
    #[arg(long, default_value_t = 500)]
    pub embed_texts: usize,
    /// Concurrent clients of the http benchmark.
    #[arg(long, default_value_t = 32)]
    pub clients: usize,
    /// Recalls of each phase (in process, over HTTP) of the http benchmark.
    #[arg(long, default_value_t = 40_000)]
    pub http_requests: usize,
    /// Rounds the http benchmark splits those recalls into, each timing
    /// every in-process phase and then HTTP, so a machine that slows down
    /// or speeds up mid-run (a shared VM, the access log's write) weighs
    /// on both sides alike; the side that goes first turns with the round.
    /// Short rounds (2,000 recalls, a fraction of a second a side) spread
    /// such drift evenly over the sides.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub http_rounds: u32,
    /// The http benchmark server's `limits.max_concurrent` (0: its default,
    /// 4 × CPUs).
    #[arg(long, default_value_t = 0)]
    pub pool: usize,
    /// The http benchmark server's `[server] recall_threads` (default: the
    /// CPUs on a machine of at most 4, else 0; 0 runs recalls on the event
    /// loop).
    #[arg(long)]
    pub recall_threads: Option<usize>,
    /// The http benchmark server's `[server] recall_nice` (default 10).
    #[arg(long)]
    pub recall_nice: Option<u8>,
    /// Total request rate of the http benchmark's paced phase (0: half the
    /// measured HTTP throughput).
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Requests of each of the http benchmark's mixed workloads (90 %
    /// recall / 10 % remember, and 50 / 50).
    #[arg(long, default_value_t = 10_000)]
    pub mixed_requests: usize,
    /// Requests of each cell of the http benchmark's in-process scaling
    /// table (recall only and the two mixes on 1, 2, 4 … threads).
    #[arg(long, default_value_t = 6_000)]
    pub scale_requests: usize,
    /// Minutes the soak benchmark runs (`--only soak`: a server under
    /// `--clients` well-behaved clients, 90 % recall / 10 % remember, and
    /// hostile requests; not in the default set).
    #[arg(long, default_value_t = 30.0)]
    pub soak_minutes: f64,
    /// Share of the soak's requests that are hostile (oversized, malformed,
    /// another tenant's id, slow), in (0, 0.5].
    #[arg(long, default_value_t = 0.01)]
    pub soak_hostile: f64,
    /// Random seed of the data generator.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// The PostgreSQL server of `--only postgres` (a fresh schema of it is
    /// used and dropped; password from STRATA_DB_PASSWORD or PGPASSWORD).
    #[arg(long, env = "STRATA_BENCH_PG_URL", value_name = "URL")]
    pub pg_url: Option<String>,
    /// HTTP recalls of each side of `--only postgres`'s nodes phase (one
    /// node, then two nodes on the same database; 0 skips it).
    #[arg(long, default_value_t = 4_000)]
    pub node_requests: usize,
    /// Run on stores encrypted at rest (a throwaway raw key the benchmark
    /// makes; needs the `encryption` feature).
    #[arg(long)]
    pub encrypted: bool,
}

/// The key of `--encrypted` (64 hex digits), once set.
static BENCH_KEY: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The store options of every benchmark store: keyed under `--encrypted`.
fn bench_options() -> strata::SqliteOptions {
    strata::SqliteOptions {
        key: BENCH_KEY
            .get()
            .map(|k| strata::StoreKey::new(k, "the benchmark's key").expect("a 64-digit key")),
        ..strata::SqliteOptions::default()
    }
}

#[derive(Debug, Default, Serialize)]
struct Report {
    machine: String,
    /// Stores encrypted at rest (`--encrypted`).
    encrypted: bool,
    memories: usize,
    scopes: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    insert: Option<Insert>,
    #[serde(skip_serializing_if = "Option::is_none")]
    remember: Option<Latency>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    writers: Vec<Writers>,
    #[serde(skip_serializing_if = "Option::is_none")]
    recall: Option<Latency>,
    /// The same over every project (`project/**`): a view of more scopes
    /// than text search names one by one.
    #[serde(skip_serializing_if = "Option::is_none")]
    recall_all: Option<Latency>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cold_start: Option<Latency>,
    /// The same with the local model loaded and run on the query.
    #[serde(skip_serializing_if = "Option::is_none")]
    cold_start_model: Option<Latency>,
    #[serde(skip_serializing_if = "Option::is_none")]
    context: Option<ContextBench>,
    #[serde(skip_serializing_if = "Option::is_none")]
    vectors: Option<VectorBench>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tiers: Option<TiersBench>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hot: Option<HotBench>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lifecycle: Option<LifecycleBench>,
    #[cfg(feature = "http")]
    #[serde(skip_serializing_if = "Option::is_none")]
    http: Option<http::HttpBench>,
    #[cfg(feature = "postgres")]
    #[serde(skip_serializing_if = "Option::is_none")]
    postgres: Option<postgres::PgBench>,
    #[cfg(feature = "http")]
    #[serde(skip_serializing_if = "Option::is_none")]
    soak: Option<soak::SoakBench>,
}

/// The cold tier: archived memories demoted out of SQLite into segments.
#[derive(Debug, Serialize)]
struct TiersBench {
    /// Where the cold tier was: its directory or `s3://bucket/prefix`.
    at: String,
    /// Archived memories demoted.
    memories: usize,
    /// Memories moved to cold segments per second (upkeep's demotion).
    demote_per_sec: f64,
    /// The SQLite file (checkpointed) holding them, before demotion.
    sqlite_bytes: u64,
    /// The segment files holding them after.
    cold_bytes: u64,
    /// `cold_bytes / sqlite_bytes`.
    cold_ratio: f64,
    /// Archived recall (one word, every project) over the cold memories.
    cold_search: Latency,
    /// Demotion by decayed importance: active memories on a fresh file,
    /// upkeep run 60 days later (`demote_below_importance` at its default).
    faded: FadedBench,
}

/// The hot tier: a session's last 20 memories, read right after the
/// session's agent wrote a turn (the ring stays current through its own
/// engine's writes), against the same read from the store.
#[derive(Debug, Serialize)]
struct HotBench {
    /// Sessions, and memories each held before the reads.
    sessions: usize,
    turns: usize,
    /// From the hot tier (write-through ring; one read of the session's
    /// record to check it is current).
    ring: Latency,
    /// The same engine settings with `hot.turns = 0`: from the store.
    store: Latency,
    /// An ephemeral session's last 20 (memory alone).
    ephemeral: Latency,
}

/// A simulated year: a fleet of agents, one session each (bounded at
/// about two weeks of turns), upkeep
/// runs every day (compaction, demotion by age and importance, the cold
/// tier), a few memories are forgotten every week.
#[derive(Debug, Serialize)]
struct LifecycleBench {
    agents: usize,
    days: usize,
    /// Turns written, memories forgotten, summaries compaction wrote.
    written: usize,
    forgotten: usize,
    summaries: usize,
    /// Where they are at the end.
    warm_active: u64,
    warm_archived: u64,
    cold: u64,
    /// written − forgotten + summaries − (warm + cold): must be 0.
    lost: i64,
    /// The SQLite file (checkpointed) and the cold segments at the end.
    warm_bytes: u64,
    cold_bytes: u64,
    /// The same turns kept warm (no cold tier): its file.
    all_warm_bytes: u64,
    /// Upkeep, all 365 runs together.
    upkeep_seconds: f64,
    /// Recall over one project (the tiered store, warm only).
    recall: Latency,
    /// The same recalls on the store that kept everything warm.
    recall_all_warm: Latency,
    /// Archived recall over one project (warm archive and cold segments).
    cold_search: Latency,
}

#[derive(Debug, Serialize)]
struct FadedBench {
    /// Active memories upkeep looked at.
    memories: usize,
    /// Of those, demoted for their decayed importance and moved to cold.
    demoted: usize,
    /// Upkeep's whole pass.
    seconds: f64,
}

#[derive(Debug, Serialize)]
struct VectorBench {
    dim: usize,
    /// Hybrid recall, BM25 + exact vector search + fusion, one project view
    /// (query vectors precomputed: embedding excluded).
    recall_project: Latency,
    /// Relevance recall over every memory (`project/**`), through the HNSW
    /// index.
    recall_all: Latency,
    /// The same, scanning every vector.
    exact_all: Latency,
    /// Building the HNSW index over every vector (background thread).
    index_build_seconds: f64,
    /// Setting every memory's vector (one transaction per 1,000).
    set_per_sec: f64,
    /// The local model, when installed: one query's embedding.
    #[serde(skip_serializing_if = "Option::is_none")]
    embed_query: Option<Latency>,
    /// Embedding a dialogue context of about 500 model tokens as a query.
    #[serde(default)]
    embed_context: Option<Latency>,
    /// Its length in model tokens (the mean).
    #[serde(default)]
    embed_context_tokens: Option<usize>,
    /// The local model: documents per second (batched).
    #[serde(skip_serializing_if = "Option::is_none")]
    embed_docs_per_sec: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<String>,
}

/// Unit vectors drawn from a text's hash: what exact vector search costs
/// does not depend on what the vectors mean, so the search benchmark runs at
/// 100,000 memories without embedding them all.
#[derive(Debug)]
struct Synthetic(usize);

fn synthetic_vector(seed: u64, dim: usize) -> Vec<f32> {
    let mut rng = Rng(seed | 1);
    let mut v: Vec<f32> = (0..dim).map(|_| rng.unit() as f32 - 0.5).collect();
    strata::normalize(&mut v);
    v
}

impl strata::Embedder for Synthetic {
    fn model(&self) -> &str {
        "bench-synthetic"
    }
    fn dim(&self) -> usize {
        self.0
    }
    fn is_local(&self) -> bool {
        true
    }
    fn embed(&self, texts: &[&str], _: strata::Purpose) -> Result<Vec<Vec<f32>>, strata::Error> {
        Ok(texts
            .iter()
            .map(|t| {
                let h = t.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
                });
                synthetic_vector(h, self.0)
            })
            .collect())
    }
}

#[derive(Debug, Serialize)]
struct ContextBench {
    budget: u32,
    /// The store of the other benchmarks (memories in 50 projects) plus a
    /// task of 500 and global memory of 2,000: sources of 500, ~2,000 and
    /// 2,000; hybrid ranking with a query, HEAD/TAIL 2, 30 % summary.
    typical_hybrid: Latency,
    /// The same without HEAD/TAIL and summary.
    typical_plain: Latency,
    /// Every memory in the three sources (10 % task, 60 % project, 30 %
    /// global): hybrid ranking with a query, HEAD/TAIL 2, 30 % summary.
    hybrid: Latency,
    /// Recency ranking, no query.
    recency: Latency,
    mean_items: f64,
    mean_tokens: f64,
}

#[derive(Debug, Serialize)]
struct Insert {
    strata_per_sec: f64,
    raw_per_sec: f64,
    ratio: f64,
    rounds: usize,
}

/// Durable remembers from several threads at once.
#[derive(Debug, Serialize)]
struct Writers {
    threads: usize,
    per_sec: f64,
    latency: Latency,
}

#[derive(Debug, Serialize)]
struct Latency {
    n: usize,
    p50_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

fn latency(mut v: Vec<Duration>) -> Latency {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1000.0;
    Latency {
        n: v.len(),
        p50_ms: at(0.5),
        p95_ms: at(0.95),
        p99_ms: at(0.99),
        max_ms: at(1.0),
    }
}

/// `items` remembered by `threads` threads at once, each a durable
/// `remember` of its own; every one is checked to be stored afterwards.
fn concurrent_remembers(
    engine: &strata::Engine,
    items: Vec<strata::NewMemory>,
    threads: usize,
) -> Result<Writers> {
    let n = items.len();
    let queue = std::sync::Mutex::new(items.into_iter());
    let start = Instant::now();
    let per_thread: Vec<(Vec<Duration>, Vec<String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| -> Result<(Vec<Duration>, Vec<String>)> {
                    let (mut lat, mut ids) = (Vec::new(), Vec::new());
                    loop {
                        let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
                        let Some(m) = next else { break };
                        let t = Instant::now();
                        let stored = engine.remember(m)?;
                        lat.push(t.elapsed());
                        ids.push(stored.id);
                    }
                    Ok((lat, ids))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a writer thread panicked"))
            .collect::<Result<_>>()
    })?;
    let wall = start.elapsed();
    let mut found = 0;
    for id in per_thread.iter().flat_map(|(_, ids)| ids) {
        found += usize::from(engine.get(id)?.is_some());
    }
    anyhow::ensure!(
        found == n,
        "bench writers: {} of {n} acknowledged remembers missing",
        n - found
    );
    Ok(Writers {
        threads,
        per_sec: n as f64 / wall.as_secs_f64(),
        latency: latency(per_thread.into_iter().flat_map(|(l, _)| l).collect()),
    })
}

/// Deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

const WORDS: &str = "the of and to in is that it was for on are with as be at by this have from or had not \
but what all were when we there can an your which their said if do will each about how up out them then she \
many some so these would other into has more her two like him see time could no make than first been its who now \
people my made over did down only way find use may water long little very after words called just where most \
know get through back much before go good new write our used me man too any day same right look think also around \
another came come work three word must because does part even place well such here take why things help put years \
different away again off went old number great tell men say small every found still between name should home big \
give air line set own under read last never us left end along while might next sound below saw something thought \
both few those always looked show large often together asked house world going want school important until form \
food keep children feet land side without boy once animals life enough took sometimes four head above kind began \
almost live page got earth need far hand high year mother light parts country father let night following picture \
being study second eyes soon times story boys since white days ever paper hard near sentence better best across \
during today others however sure means knew its try told young miles sun ways thing whole hear example heard \
several change answer room sea against top turned learn point city play toward five using himself usually money \
seen car morning body upon family later turn move face door cut done group true leave color red friends pulled \
database migration deploy release service schema index query latency cache queue worker token budget context \
memory agent project sprint stage decision finding preference convention failure pattern reasoning review test \
build pipeline config server client request response error retry timeout backoff storage archive session \
postgres sqlite vector embedding search ranking relevance importance recency summary profile scope view filter \
billing invoice payment customer account login password email report dashboard metric alert incident outage \
berlin paris london tokyo guitar painting hiking camping dog cat adoption concert festival birthday wedding \
promotion interview conference workshop library museum garden kitchen recipe marathon yoga swimming";

fn vocabulary(rng: &mut Rng) -> Vec<String> {
    let mut v: Vec<String> = WORDS.split_whitespace().map(str::to_string).collect();
    // Rare words (names, identifiers) make up the long tail.
    let syll = [
        "ka", "lo", "mi", "ra", "ten", "vor", "shi", "zu", "bel", "dan", "ek", "fi", "gor", "hal",
        "is", "jun",
    ];
    for _ in 0..3000 {
        let n = 2 + rng.below(2);
        let w: String = (0..n).map(|_| syll[rng.below(syll.len())]).collect();
        v.push(w);
    }
    v
}

struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize) -> Zipf {
        let mut acc = 0.0;
        let cdf = (1..=n)
            .map(|r| {
                acc += 1.0 / r as f64;
                acc
            })
            .collect::<Vec<_>>();
        let total = acc;
        Zipf {
            cdf: cdf.into_iter().map(|c| c / total).collect(),
        }
    }
    fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.cdf.partition_point(|c| *c < u).min(self.cdf.len() - 1)
    }
}

struct Gen {
    rng: Rng,
    vocab: Vec<String>,
    zipf: Zipf,
}

impl Gen {
    fn new(seed: u64) -> Gen {
        let mut rng = Rng(seed);
        let vocab = vocabulary(&mut rng);
        let zipf = Zipf::new(vocab.len());
        Gen { rng, vocab, zipf }
    }
    fn sentence(&mut self) -> String {
        let n = 8 + self.rng.below(21);
        let mut s: String = (0..n)
            .map(|_| self.vocab[self.zipf.sample(&mut self.rng)].as_str())
            .collect::<Vec<_>>()
            .join(" ");
        if let Some(c) = s.get_mut(0..1) {
            c.make_ascii_uppercase();
        }
        s.push('.');
        s
    }
    /// A content word: Zipf-distributed like the memories, stop-words skipped.
    fn content_word(&mut self) -> String {
        loop {
            let w = &self.vocab[self.zipf.sample(&mut self.rng)];
            if !strata::query_terms(w).is_empty() {
                return w.clone();
            }
        }
    }

    /// A question an agent would ask: a template around 1–3 content words
    /// drawn like the memories' words (frequent words are asked about most).
    fn query(&mut self) -> String {
        let (a, b, c) = (
            self.content_word(),
            self.content_word(),
            self.content_word(),
        );
        match self.rng.below(6) {
            0 => format!("what did we decide about {a}?"),
            1 => format!("how does the {a} {b} work"),
            2 => format!("{a} {b} {c}"),
            3 => format!("why did the {a} fail"),
            4 => format!("who mentioned {a} and {b}?"),
            _ => format!("when was the {a} {b} {c}"),
        }
    }
}

const KINDS: [&str; 6] = [
    "conversation",
    "decision",
    "finding",
    "convention",
    "failure",
    "context",
];

fn dataset(g: &mut Gen, n: usize, scopes: usize) -> Vec<strata::NewMemory> {
    (0..n)
        .map(|i| {
            let scope =
                strata::Scope::parse(&format!("project/p{:02}", i % scopes)).expect("valid scope");
            let kind: strata::Kind = KINDS[g.rng.below(KINDS.len())].parse().expect("valid kind");
            let mut m = strata::NewMemory::new(scope, g.sentence()).kind(kind);
            if g.rng.below(4) == 0 {
                m.tags.push(format!("t{}", g.rng.below(20)));
            }
            m
        })
        .collect()
}

/// A benchmark store `<name>.db` in `dir` with its cold tier `<name>.cold`
/// on, both removed first; no bound, no detectors, never demoted by age
/// (the cold tier's other settings at their defaults).
fn fresh_cold_config(dir: &Path, name: &str) -> strata::Config {
    let path = dir.join(format!("{name}.db"));
    let cold = dir.join(format!("{name}.cold"));
    let _ = std::fs::remove_dir_all(&cold);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let mut cfg = bench_config(&path);
    cfg.max_items = 0;
    cfg.learning.enabled = false;
    cfg.cold = strata::ColdConfig {
        enabled: true,
        dir: Some(cold),
        demote_after_days: 0,
        ..Default::default()
    };
    cfg
}

/// Demotes `tier_memories` archived memories to the cold tier and searches
/// them there.
fn tiers_bench(a: &BenchArgs, dir: &Path, g: &mut Gen, say: &dyn Fn(String)) -> Result<TiersBench> {
    let path = dir.join("tiers.db");
    let mut cfg = fresh_cold_config(dir, "tiers");
    // Moves of archived memories alone: nothing demoted by importance.
    cfg.cold.demote_below_importance = 0.0;
    if let Some(bucket) = &a.cold_s3_bucket {
        cfg.cold.dir = None;
        cfg.cold.s3 = Some(strata::S3Config {
            bucket: bucket.clone(),
            prefix: format!("strata-bench-{}", std::process::id()),
            endpoint: a.cold_s3_endpoint.clone(),
            ..Default::default()
        });
    }
    let at = cfg.cold.location_for(&cfg.store)?.to_string();
    let engine = strata::Engine::open(cfg)?;
    let n = a.tier_memories;
    say(format!("tiers: writing and archiving {n} memories…"));
    let data = dataset(g, n, a.scopes);
    for chunk in data.chunks(10_000) {
        let stored = engine.remember_batch(chunk.to_vec(), strata::Confirm::No)?;
        let ids: Vec<String> = stored.into_iter().map(|m| m.id).collect();
        engine
            .store()
            .archive(&ids, "evicted", jiff::Timestamp::now())?;
    }
    strata::SqliteStore::open(&path, bench_options())?.checkpoint()?;
    let sqlite_bytes = std::fs::metadata(&path)?.len();
    say(format!("tiers: demoting {n} archived memories to cold…"));
    let t = Instant::now();
    let r = engine.upkeep()?;
    let secs = t.elapsed().as_secs_f64();
    anyhow::ensure!(
        r.moved_to_cold == n,
        "tiers: upkeep moved {} of {n} memories",
        r.moved_to_cold
    );
    let cold_bytes = engine.stats()?.storage_tiers["cold"].bytes;
    say(format!("tiers: timing {} cold searches…", a.queries));
    let view = strata::View::subtree(strata::Scope::parse("project")?);
    let mut lat = Vec::with_capacity(a.queries);
    for _ in 0..a.queries {
        let mut req = strata::Recall::new(g.query(), view.clone());
        req.include_archived = true;
        req.touch = false;
        let t = Instant::now();
        let hits = engine.recall(&req)?;
        lat.push(t.elapsed());
        std::hint::black_box(hits);
    }
    drop(engine);
    let faded = faded_bench(a, dir, g, say)?;
    Ok(TiersBench {
        at,
        memories: n,
        demote_per_sec: n as f64 / secs,
        sqlite_bytes,
        cold_bytes,
        cold_ratio: cold_bytes as f64 / sqlite_bytes as f64,
        cold_search: latency(lat),
        faded,
    })
}

/// `sessions × 100` turns in a SQLite file, then `queries` rounds of an
/// agent loop on random sessions: write a turn (untimed), read the
/// session's last 20 (timed); once with the hot tier, once without.
fn hot_bench(a: &BenchArgs, dir: &Path, g: &mut Gen, say: &dyn Fn(String)) -> Result<HotBench> {
    const SESSIONS: usize = 200;
    const TURNS: usize = 100;
    const READ: usize = 20;
    let mut cfg = fresh_cold_config(dir, "hot");
    cfg.cold.enabled = false;
    cfg.cold.dir = None;
    say(format!(
        "hot: writing {SESSIONS} sessions of {TURNS} turns…"
    ));
    {
        let engine = strata::Engine::open(cfg.clone())?;
        let mut batch = Vec::with_capacity(SESSIONS * TURNS);
        for t in 0..TURNS {
            for s in 0..SESSIONS {
                let role = if t % 2 == 0 {
                    strata::Role::User
                } else {
                    strata::Role::Assistant
                };
                batch.push(
                    strata::NewMemory::new(
                        strata::Scope::parse(&format!("session/s{s}"))?,
                        g.sentence(),
                    )
                    .kind(strata::Kind::Conversation)
                    .role(role)
                    .session(format!("s{s}")),
                );
            }
        }
        for chunk in batch.chunks(10_000) {
            engine.remember_batch(chunk.to_vec(), strata::Confirm::No)?;
        }
    }
    let mut run = |turns: usize, what: &str| -> Result<Latency> {
        say(format!(
            "hot: {} agent turns, reading from the {what}…",
            a.queries
        ));
        let mut c = cfg.clone();
        c.hot.turns = turns;
        let engine = strata::Engine::open(c)?;
        // Each session read once first, untimed: a ring is filled by its
        // first read (that read costs what a read from the store does).
        for s in 0..SESSIONS {
            engine.last_turns(&format!("s{s}"), READ)?;
        }
        let mut lat = Vec::with_capacity(a.queries);
        for _ in 0..a.queries {
            let s = format!("s{}", g.rng.below(SESSIONS));
            engine.remember(
                strata::NewMemory::new(
                    strata::Scope::parse(&format!("session/{s}"))?,
                    g.sentence(),
                )
                .kind(strata::Kind::Conversation)
                .session(s.clone()),
            )?;
            let t = Instant::now();
            let got = engine.last_turns(&s, READ)?;
            lat.push(t.elapsed());
            anyhow::ensure!(got.len() == READ, "hot: {} turns of session {s}", got.len());
        }
        Ok(latency(lat))
    };
    let ring = run(TURNS, "hot tier")?;
    let store = run(0, "store")?;
    let engine = strata::Engine::open(cfg)?;
    let e = engine.open_ephemeral_session(None, None)?;
    for _ in 0..TURNS {
        engine.remember(
            strata::NewMemory::new(e.scope.clone(), g.sentence())
                .kind(strata::Kind::Conversation)
                .session(e.id.clone()),
        )?;
    }
    let mut lat = Vec::with_capacity(a.queries);
    for _ in 0..a.queries {
        let t = Instant::now();
        let got = engine.last_turns(&e.id, READ)?;
        lat.push(t.elapsed());
        std::hint::black_box(got);
    }
    Ok(HotBench {
        sessions: SESSIONS,
        turns: TURNS,
        ring,
        store,
        ephemeral: latency(lat),
    })
}

/// A year of a fleet's turns over two stores: one with the tiers on
/// (cold, demotion, compaction, daily upkeep) and one that keeps every
/// turn warm; then the same recalls over both.
fn lifecycle_bench(
    a: &BenchArgs,
    dir: &Path,
    g: &mut Gen,
    say: &dyn Fn(String),
) -> Result<LifecycleBench> {
    const AGENTS: usize = 20;
    const DAYS: usize = 365;
    const PROJECTS: usize = 5;
    let per_day = (a.year_turns / (AGENTS * DAYS)).max(1);
    let start = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(24 * DAYS as i64);
    let day = |d: usize| start + jiff::SignedDuration::from_hours(24 * d as i64);
    let mut tiered_cfg = fresh_cold_config(dir, "year");
    // One session per agent for the year, bounded at about two weeks of
    // its turns (at least 64 KiB): compaction summarises its oldest turns
    // when it fills (demotion by age alone would keep a month in it).
    tiered_cfg.session_max_bytes = (per_day as u64 * 150 * 16).max(64 * 1024);
    tiered_cfg.cold.demote_after_days = 30;
    tiered_cfg.cold.demote_below_importance = strata::ColdConfig::default().demote_below_importance;
    let mut tiered = strata::Engine::open(tiered_cfg.clone())?;
    let mut warm_cfg = fresh_cold_config(dir, "year-warm");
    warm_cfg.session_max_bytes = 1 << 40;
    warm_cfg.cold.enabled = false;
    warm_cfg.cold.dir = None;
    let mut warm = strata::Engine::open(warm_cfg.clone())?;
    let (mut written, mut forgotten) = (0usize, 0usize);
    let mut upkeep = Duration::ZERO;
    let mut kinds = [
        "conversation",
        "conversation",
        "conversation",
        "finding",
        "decision",
        "note",
    ]
    .iter()
    .cycle();
    say(format!(
        "lifecycle: {AGENTS} agents × {DAYS} days × {per_day} turns, upkeep daily…"
    ));
    for d in 0..DAYS {
        let now = day(d);
        tiered.set_clock(move || now);
        warm.set_clock(move || now);
        let mut batch = Vec::with_capacity(AGENTS * per_day);
        for agent in 0..AGENTS {
            let scope = strata::Scope::parse(&format!("project/p{}", agent % PROJECTS))?;
            let session = format!("a{agent}");
            for _ in 0..per_day {
                let kind: strata::Kind = kinds.next().expect("cycle").parse()?;
                batch.push(
                    strata::NewMemory::new(scope.clone(), g.sentence())
                        .kind(kind)
                        .session(session.clone()),
                );
            }
        }
        written += batch.len();
        tiered.remember_batch(batch.clone(), strata::Confirm::No)?;
        warm.remember_batch(batch, strata::Confirm::No)?;
        // Every week, a few of the week's memories are forgotten (the
        // newest of one project, both stores).
        if d % 7 == 6 {
            let v = strata::View::parse(&[format!("project/p{}", d % PROJECTS)])?;
            for (e, counted) in [(&tiered, true), (&warm, false)] {
                let mut l = strata::List::new(v.clone());
                l.limit = 5;
                let ids: Vec<String> = e.list(&l)?.into_iter().map(|m| m.id).collect();
                let r = e.forget(&strata::Forget::Ids(ids), strata::ForgetOptions::default())?;
                if counted {
                    forgotten += r.deleted;
                }
            }
        }
        let t = Instant::now();
        let r = tiered.upkeep()?;
        upkeep += t.elapsed();
        anyhow::ensure!(!r.skipped, "lifecycle: upkeep skipped on day {d}");
        if d % 73 == 72 {
            say(format!(
                "lifecycle: day {} — {written} written, upkeep so far {:.1} s",
                d + 1,
                upkeep.as_secs_f64()
            ));
        }
    }
    let st = tiered.stats()?;
    let summaries = {
        let f = strata::Filter::parse(&serde_json::json!({"kind": "summary"}))?;
        let v = strata::View::subtree(strata::Scope::parse("project")?);
        tiered.count(&v, &f)? as usize + tiered.list_archived(&v, &f, usize::MAX)?.len()
    };
    let cold = st.storage_tiers.get("cold").map_or(0, |t| t.memories);
    let cold_bytes = st.storage_tiers.get("cold").map_or(0, |t| t.bytes);
    let lost = (written - forgotten + summaries) as i64 - (st.memories + st.archived + cold) as i64;
    // The same queries over both.
    let queries: Vec<(String, strata::View)> = (0..a.queries)
        .map(|i| {
            let v =
                strata::View::parse(&[format!("project/p{}", i % PROJECTS)]).expect("valid view");
            (g.query(), v)
        })
        .collect();
    let time = |e: &strata::Engine, archived: bool| -> Result<Latency> {
        let mut lat = Vec::with_capacity(queries.len());
        for (q, v) in &queries {
            let mut r = strata::Recall::new(q.clone(), v.clone());
            r.touch = false;
            r.include_archived = archived;
            let t = Instant::now();
            std::hint::black_box(e.recall(&r)?);
            lat.push(t.elapsed());
        }
        Ok(latency(lat))
    };
    say("lifecycle: timing recalls…".into());
    let recall = time(&tiered, false)?;
    let recall_all_warm = time(&warm, false)?;
    let cold_search = time(&tiered, true)?;
    drop(tiered);
    drop(warm);
    let size = |cfg: &strata::Config| -> Result<u64> {
        let strata::StoreConfig::Sqlite { path, .. } = &cfg.store else {
            anyhow::bail!("lifecycle: a SQLite store");
        };
        strata::SqliteStore::open(path, bench_options())?.checkpoint()?;
        Ok(std::fs::metadata(path)?.len())
    };
    Ok(LifecycleBench {
        agents: AGENTS,
        days: DAYS,
        written,
        forgotten,
        summaries,
        warm_active: st.memories,
        warm_archived: st.archived,
        cold,
        lost,
        warm_bytes: size(&tiered_cfg)?,
        cold_bytes,
        all_warm_bytes: size(&warm_cfg)?,
        upkeep_seconds: upkeep.as_secs_f64(),
        recall,
        recall_all_warm,
        cold_search,
    })
}

/// `tier_memories` active memories of mixed kinds (importance 0.5, kind
/// weights 0.2–1.0), then upkeep 60 days later: those whose decayed
/// importance fell under the default floor go to cold, the others are
/// only read (their ranking columns).
fn faded_bench(a: &BenchArgs, dir: &Path, g: &mut Gen, say: &dyn Fn(String)) -> Result<FadedBench> {
    let mut engine = strata::Engine::open(fresh_cold_config(dir, "faded"))?;
    let n = a.tier_memories;
    say(format!(
        "tiers: writing {n} active memories for demotion by importance…"
    ));
    for chunk in dataset(g, n, a.scopes).chunks(10_000) {
        engine.remember_batch(chunk.to_vec(), strata::Confirm::No)?;
    }
    let later = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24 * 60);
    engine.set_clock(move || later);
    say("tiers: upkeep 60 days later…".into());
    let t = Instant::now();
    let r = engine.upkeep()?;
    let seconds = t.elapsed().as_secs_f64();
    anyhow::ensure!(
        r.demoted_by_importance > 0 && r.moved_to_cold == r.demoted_by_importance,
        "tiers: upkeep 60 days on demoted {} by importance and moved {}",
        r.demoted_by_importance,
        r.moved_to_cold
    );
    Ok(FadedBench {
        memories: n,
        demoted: r.demoted_by_importance,
        seconds,
    })
}

fn bench_config(path: &Path) -> strata::Config {
    let mut cfg = strata::Config::sqlite(path);
    if let strata::StoreConfig::Sqlite { options, .. } = &mut cfg.store {
        *options = bench_options();
    }
    cfg.max_items = 1_000_000;
    // BM25 alone unless a benchmark sets its embedder.
    cfg.embedder = strata::EmbedderConfig::none();
    cfg
}

/// Raw rusqlite: the same rows (built beforehand, untimed) into the same
/// tables, one transaction, prepared statements. The ceiling strata's
/// batched insert is measured against. The tables are the store's own:
/// a `SqliteStore` creates them (every migration), then steps aside.
fn raw_insert(path: &Path, rows: &[strata::Memory]) -> Result<Duration> {
    drop(strata::SqliteStore::open(path, Default::default())?);
    let c = rusqlite::Connection::open(path)?;
    c.execute_batch("PRAGMA synchronous=FULL; PRAGMA secure_delete=ON; PRAGMA cache_size=-32768;")?;
    // Scopes numbered as the store numbers them (`scope_ids`), before the
    // clock starts: the store looks a row's number up as it writes.
    let mut ids = std::collections::HashMap::new();
    for m in rows {
        if !ids.contains_key(m.scope.as_str()) {
            c.execute(
                "INSERT INTO scope_ids (scope) VALUES (?)",
                [m.scope.as_str()],
            )?;
            ids.insert(m.scope.to_string(), c.last_insert_rowid());
        }
    }
    let prepared: Vec<(String, String, String, String, String, String)> = rows
        .iter()
        .map(|m| {
            (
                m.id.clone(),
                m.scope.to_string(),
                serde_json::to_string(&m.tags).unwrap_or_default(),
                m.checksum.clone(),
                strata::SqliteStore::scope_terms(&m.scope),
                strata::SqliteStore::scoped_terms(&m.content, ids[m.scope.as_str()]),
            )
        })
        .collect();
    let t = Instant::now();
    let tx = c.unchecked_transaction()?;
    {
        let mut ins = tx.prepare(
            "INSERT INTO memories (id, scope, kind, content, tags, importance, source, created_at, updated_at,
               access_count, pinned, sensitive, tokens, checksum, version) VALUES (?,?,?,?,?,?,?,?,?,0,0,0,?,?,1)",
        )?;
        let mut fts =
            tx.prepare("INSERT INTO memories_fts(rowid, scopes, scoped) VALUES (?, ?, ?)")?;
        for (m, (id, scope, tags, sum, terms, scoped)) in rows.iter().zip(&prepared) {
            let ms = m.created_at.as_millisecond();
            ins.execute(rusqlite::params![
                id,
                scope,
                m.kind.as_str(),
                m.content,
                tags,
                m.importance,
                m.source.as_str(),
                ms,
                ms,
                m.tokens,
                sum
            ])?;
            fts.execute(rusqlite::params![tx.last_insert_rowid(), terms, scoped])?;
        }
    }
    tx.commit()?;
    Ok(t.elapsed())
}

/// Runs the benchmarks `a` selects and prints their report (JSON when
/// `json`; progress goes to standard error otherwise).
pub fn bench(a: BenchArgs, json: bool) -> Result<()> {
    if a.memories == 0 || a.scopes == 0 {
        return usage("bench: --memories and --scopes must be positive");
    }
    for o in &a.only {
        if ![
            "insert",
            "remember",
            "writers",
            "recall",
            "cold",
            "context",
            "vectors",
            "http",
            "postgres",
            "tiers",
            "hot",
            "lifecycle",
            "soak",
        ]
        .contains(&o.as_str())
        {
            return usage(format!(
                "bench --only: `{o}` is not one of insert, remember, writers, recall, cold, context, vectors, http, postgres, tiers, hot, lifecycle, soak"
            ));
        }
        if (o == "http" || o == "soak") && !cfg!(feature = "http") {
            return usage(format!(
                "bench --only {o}: built without the `http` feature"
            ));
        }
        let soak_ok = (0.0..=24.0 * 60.0).contains(&a.soak_minutes)
            && a.soak_minutes > 0.0
            && (0.0..=0.5).contains(&a.soak_hostile)
            && a.soak_hostile > 0.0;
        if o == "soak" && !soak_ok {
            return usage(format!(
                "bench --only soak: --soak-minutes {} must be in (0, 1440] and --soak-hostile {} in (0, 0.5]",
                a.soak_minutes, a.soak_hostile
            ));
        }
        if o == "postgres" && !cfg!(feature = "postgres") {
            return usage("bench --only postgres: built without the `postgres` feature");
        }
        if o == "postgres" && a.pg_url.is_none() {
            return usage(
                "bench --only postgres: name the server with --pg-url postgres://user@host:port/db (or STRATA_BENCH_PG_URL)",
            );
        }
    }
    if a.encrypted {
        if !cfg!(feature = "encryption") {
            return usage("bench --encrypted: built without the `encryption` feature");
        }
        if a.only.iter().any(|o| o == "postgres") {
            return usage(
                "bench --encrypted: PostgreSQL is not encrypted by strata (leave out postgres)",
            );
        }
        let mut rng = Rng(a.seed ^ 0x5eed_c0de);
        let key: String = (0..4).map(|_| format!("{:016x}", rng.next())).collect();
        let _ = BENCH_KEY.set(key);
    }
    let tmp;
    let dir = match &a.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            tmp = crate::out::scratch("strata-bench")?;
            tmp.path().to_path_buf()
        }
    };
    let db = dir.join("bench.db");
    let raw_db = dir.join("raw.db");
    let mut datagen = Gen::new(a.seed);
    let data = dataset(&mut datagen, a.memories, a.scopes);
    let mut rep = Report {
        machine: machine(),
        encrypted: a.encrypted,
        memories: a.memories,
        scopes: a.scopes,
        ..Report::default()
    };
    let say = |s: String| {
        if !json {
            eprintln!("{s}")
        }
    };

    // Load the tokenizer outside the timed region, as a server would have.
    strata::TokenCounter::new("cl100k_base")?.count("warm up");
    let remove = |p: &Path| {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", p.display()));
        }
    };
    let rounds = if a.only.iter().any(|o| o == "insert") {
        a.insert_rounds.max(1)
    } else {
        1
    };
    let (mut strata_rates, mut raw_rates) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        say(format!(
            "insert round {}/{rounds}: {} memories over {} scopes…",
            round + 1,
            a.memories,
            a.scopes
        ));
        remove(&db);
        let engine = strata::Engine::open(bench_config(&db))?;
        let t = Instant::now();
        let stored = engine.remember_batch(data.clone(), strata::Confirm::No)?;
        strata_rates.push(a.memories as f64 / t.elapsed().as_secs_f64());
        if a.only.iter().any(|o| o == "insert") {
            remove(&raw_db);
            raw_rates.push(a.memories as f64 / raw_insert(&raw_db, &stored)?.as_secs_f64());
        }
    }
    remove(&raw_db);
    // The phases below start from a file at rest: the text index merged
    // as far as FTS5 would (the store merges off the write path, so a bulk
    // load leaves that to the gaps between later writes) and the log
    // written back.
    strata::SqliteStore::open(&db, bench_options())?.checkpoint()?;
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        v[v.len() / 2]
    };
    if !raw_rates.is_empty() {
        let (s, r) = (median(&mut strata_rates), median(&mut raw_rates));
        rep.insert = Some(Insert {
            strata_per_sec: s,
            raw_per_sec: r,
            ratio: s / r,
            rounds,
        });
    }
    let engine = strata::Engine::open(bench_config(&db))?;

    if a.only.iter().any(|o| o == "remember") {
        say(format!("timing {} single durable remembers…", a.writes));
        let mut lat = Vec::with_capacity(a.writes);
        for i in 0..a.writes {
            let m = strata::NewMemory::new(
                strata::Scope::parse(&format!("project/p{:02}", i % a.scopes))?,
                datagen.sentence(),
            )
            .kind(strata::Kind::Finding);
            let t = Instant::now();
            engine.remember(m)?;
            lat.push(t.elapsed());
        }
        rep.remember = Some(latency(lat));
    }

    if a.only.iter().any(|o| o == "writers") {
        say(format!(
            "timing {} durable remembers from 1 to 16 threads at once…",
            a.writes
        ));
        for threads in [1, 2, 4, 8, 16] {
            let items: Vec<strata::NewMemory> = (0..a.writes)
                .map(|i| {
                    let scope = strata::Scope::parse(&format!("project/p{:02}", i % a.scopes));
                    scope.map(|s| {
                        strata::NewMemory::new(s, datagen.sentence()).kind(strata::Kind::Finding)
                    })
                })
                .collect::<strata::Result<_>>()?;
            rep.writers
                .push(concurrent_remembers(&engine, items, threads)?);
        }
    }

    if a.only.iter().any(|o| o == "recall") {
        say(format!(
            "timing {} hybrid recalls over one project view…",
            a.queries
        ));
        // `n` recalls, the i-th over `view(i)`.
        let mut time_recalls = |n: usize, view: &dyn Fn(usize) -> Result<strata::View>| {
            let mut lat = Vec::with_capacity(n);
            for i in 0..n {
                let mut req = strata::Recall::new(datagen.query(), view(i)?);
                req.touch = !a.no_touch;
                let t = Instant::now();
                let hits = engine.recall(&req)?;
                lat.push(t.elapsed());
                std::hint::black_box(hits);
            }
            Ok::<_, anyhow::Error>(latency(lat))
        };
        rep.recall = Some(time_recalls(a.queries, &|i| {
            Ok(strata::View::scope(strata::Scope::parse(&format!(
                "project/p{:02}",
                (i * 7) % a.scopes
            ))?))
        })?);
        let n_all = (a.queries / 4).max(5);
        say(format!("timing {n_all} hybrid recalls over every project…"));
        rep.recall_all = Some(time_recalls(n_all, &|_| {
            Ok(strata::View::parse(&["project/**"])?)
        })?);
    }
    drop(engine);

    if a.only.iter().any(|o| o == "cold") {
        say(format!(
            "timing {} cold `strata recall` processes…",
            a.cold_runs
        ));
        let exe = std::env::current_exe().context("finding the strata binary")?;
        // BM25 alone, then (when it is installed) with the local model,
        // which the process loads and runs on the query.
        let model = strata::EmbedderConfig::default().model_dir();
        let with_model = model.join("model.safetensors").is_file();
        for embedder in ["none", "local"] {
            if embedder == "local" && !with_model {
                continue;
            }
            let mut lat = Vec::with_capacity(a.cold_runs);
            for i in 0..a.cold_runs {
                let q = datagen.query();
                let view = format!("project/p{:02}", i % a.scopes);
                let t = Instant::now();
                let st = std::process::Command::new(&exe)
                    .args(["recall", &q, "--view", &view, "--json", "--db"])
                    .arg(&db)
                    .env_remove("STRATA_CONFIG")
                    .env_remove("STRATA_KEY")
                    .envs(BENCH_KEY.get().map(|k| ("STRATA_KEY", k)))
                    .env("STRATA_EMBEDDER", embedder)
                    .env("STRATA_MODEL_DIR", &model)
                    .stdout(std::process::Stdio::null())
                    .status()?;
                lat.push(t.elapsed());
                if !st.success() {
                    anyhow::bail!("cold-start run {i} ({embedder}) failed: {st}");
                }
            }
            if embedder == "none" {
                rep.cold_start = Some(latency(lat));
            } else {
                rep.cold_start_model = Some(latency(lat));
            }
        }
    }

    if a.only.iter().any(|o| o == "context") {
        rep.context = Some(context_bench(&a, &dir, &db, &mut datagen, &say)?);
    }

    if a.only.iter().any(|o| o == "vectors") {
        rep.vectors = Some(vector_bench(&a, &db, &mut datagen, &say)?);
    }

    if a.only.iter().any(|o| o == "tiers") {
        rep.tiers = Some(tiers_bench(&a, &dir, &mut datagen, &say)?);
    }

    if a.only.iter().any(|o| o == "hot") {
        rep.hot = Some(hot_bench(&a, &dir, &mut datagen, &say)?);
    }

    if a.only.iter().any(|o| o == "lifecycle") {
        rep.lifecycle = Some(lifecycle_bench(&a, &dir, &mut datagen, &say)?);
    }

    #[cfg(feature = "http")]
    if a.only.iter().any(|o| o == "http") {
        rep.http = Some(http::run(&a, &db, &mut datagen, &say)?);
    }

    #[cfg(feature = "http")]
    if a.only.iter().any(|o| o == "soak") {
        rep.soak = Some(soak::run(&a, &dir, &say)?);
    }

    #[cfg(feature = "postgres")]
    if let (true, Some(url)) = (a.only.iter().any(|o| o == "postgres"), &a.pg_url) {
        rep.postgres = Some(postgres::run(&a, url, &db, &data, &mut datagen, &say)?);
    }

    // The http benchmark is also a check: a failed request or a lost
    // acknowledged write fails the run (after the report).
    #[cfg(feature = "http")]
    let http_failures = rep.http.as_ref().map_or(0, |h| {
        h.in_process.iter().map(|p| p.phase.errors).sum::<usize>()
            + h.http.errors
            + h.paced.phase.errors
            + h.mixed
                .iter()
                .map(|m| m.errors + m.lost_writes)
                .sum::<usize>()
    });
    #[cfg(not(feature = "http"))]
    let http_failures = 0;
    print_report(json, &rep)?;
    if let Some(y) = rep.lifecycle.as_ref().filter(|y| y.lost != 0) {
        anyhow::bail!("bench lifecycle: {} memories lost", y.lost);
    }
    if http_failures > 0 {
        anyhow::bail!("bench http: {http_failures} failed requests or lost writes");
    }
    #[cfg(feature = "http")]
    if let Some(k) = &rep.soak
        && (k.errors > 0 || k.lost_writes > 0)
    {
        anyhow::bail!(
            "bench soak: {} failed requests of well-behaved clients, {} acknowledged writes lost",
            k.errors,
            k.lost_writes
        );
    }
    Ok(())
}

fn print_report(json: bool, rep: &Report) -> Result<()> {
    if json {
        return output::json(rep);
    }
    output::line(format!(
        "strata bench — {} memories, {} scopes{} — {}",
        rep.memories,
        rep.scopes,
        if rep.encrypted {
            ", encrypted at rest (raw key)"
        } else {
            ""
        },
        rep.machine
    ))?;
    if let Some(i) = &rep.insert {
        output::line(format!(
            "batched insert     strata {:>9.0}/s   raw rusqlite+FTS5 {:>9.0}/s   ratio {:.2}  (medians of {} rounds)",
            i.strata_per_sec, i.raw_per_sec, i.ratio, i.rounds
        ))?;
    }
    let lat_line = |name: &str, l: &Latency| {
        format!(
            "{name:<18} n={:<6} p50 {:>7.3} ms  p95 {:>7.3} ms  p99 {:>7.3} ms  max {:>7.3} ms",
            l.n, l.p50_ms, l.p95_ms, l.p99_ms, l.max_ms
        )
    };
    if let Some(l) = &rep.remember {
        output::line(lat_line("remember (FULL)", l))?;
    }
    for w in &rep.writers {
        output::line(format!(
            "{}  {:>7.0}/s",
            lat_line(&format!("remember ×{:<2} threads", w.threads), &w.latency),
            w.per_sec
        ))?;
    }
    if let Some(l) = &rep.recall {
        output::line(lat_line("recall (hybrid)", l))?;
    }
    if let Some(l) = &rep.recall_all {
        output::line(lat_line("recall, all projects", l))?;
    }
    if let Some(l) = &rep.cold_start {
        output::line(lat_line("cold `strata recall`", l))?;
    }
    if let Some(t) = &rep.tiers {
        output::line(format!(
            "cold tier          {} memories in {}: demotion {:>9.0}/s   cold {} bytes / SQLite {} bytes = {:.1} %",
            t.memories,
            t.at,
            t.demote_per_sec,
            t.cold_bytes,
            t.sqlite_bytes,
            t.cold_ratio * 100.0
        ))?;
        output::line(lat_line("cold search", &t.cold_search))?;
        output::line(format!(
            "                   by importance: upkeep 60 days on looked at {} memories and demoted {} ({:.1} %) to cold in {:.2} s ({:.0}/s)",
            t.faded.memories,
            t.faded.demoted,
            t.faded.demoted as f64 * 100.0 / t.faded.memories.max(1) as f64,
            t.faded.seconds,
            t.faded.demoted as f64 / t.faded.seconds.max(1e-9)
        ))?;
    }
    if let Some(y) = &rep.lifecycle {
        output::line(format!(
            "lifecycle          {} agents × {} days: {} written, {} forgotten, {} summaries → warm {} active + {} archived, cold {}; lost {}",
            y.agents,
            y.days,
            y.written,
            y.forgotten,
            y.summaries,
            y.warm_active,
            y.warm_archived,
            y.cold,
            y.lost
        ))?;
        output::line(format!(
            "                   SQLite {} bytes + cold {} bytes (all kept warm: SQLite {} bytes); upkeep {:.1} s over the year",
            y.warm_bytes, y.cold_bytes, y.all_warm_bytes, y.upkeep_seconds
        ))?;
        output::line(lat_line("  recall, tiered", &y.recall))?;
        output::line(lat_line("  recall, all warm", &y.recall_all_warm))?;
        output::line(lat_line("  archived + cold", &y.cold_search))?;
    }
    if let Some(h) = &rep.hot {
        output::line(lat_line("hot: last 20 turns", &h.ring))?;
        output::line(lat_line("  same, from store", &h.store))?;
        output::line(lat_line("  ephemeral", &h.ephemeral))?;
        output::line(format!(
            "                   {} sessions of {} turns, each read once before; each timed read follows a turn written by the same engine",
            h.sessions, h.turns
        ))?;
    }
    if let Some(l) = &rep.cold_start_model {
        output::line(lat_line("cold recall+model", l))?;
    }
    if let Some(v) = &rep.vectors {
        output::line(lat_line("recall (hybrid+vec)", &v.recall_project))?;
        output::line(lat_line("recall vec, all, HNSW", &v.recall_all))?;
        output::line(lat_line("recall vec, all, exact", &v.exact_all))?;
        output::line(format!(
            "                   {} dims, synthetic unit vectors (query embedding excluded); vectors stored {:.0}/s; HNSW built in {:.1} s",
            v.dim, v.set_per_sec, v.index_build_seconds
        ))?;
        match (&v.embed_query, v.embed_docs_per_sec, &v.model) {
            (Some(q), Some(d), Some(m)) => {
                output::line(lat_line("embed query", q))?;
                if let (Some(c), Some(n)) = (&v.embed_context, v.embed_context_tokens) {
                    output::line(lat_line("embed context", c))?;
                    output::line(format!(
                        "                   a dialogue of ~{n} tokens (cl100k) as the query; the model reads its last `query_max_tokens`"
                    ))?;
                }
                output::line(format!(
                    "                   {m}: {d:.0} documents/s (batched: texts end to end, one thread per core)"
                ))?;
            }
            _ => output::line(
                "                   local model not installed: no embedding figures (`strata model fetch`)",
            )?,
        }
    }
    #[cfg(feature = "postgres")]
    if let Some(p) = &rep.postgres {
        output::line(format!(
            "postgres insert    {:>9.0}/s batched; vectors stored {:.0}/s ({})",
            p.insert_per_sec, p.set_vectors_per_sec, p.url
        ))?;
        output::line(lat_line("recall pg (hyb+vec)", &p.recall))?;
        output::line(lat_line("recall sqlite (same)", &p.sqlite_recall))?;
        output::line(format!(
            "                   p95 PostgreSQL / SQLite: {:.2}",
            p.p95_ratio
        ))?;
        if let Some(n) = &p.nodes {
            output::line(format!(
                "pg http recall     1 node {:.0}/s, 2 nodes {:.0}/s: {:.2}× ({} clients, {} CPUs, {} errors)",
                n.one_node_per_sec, n.two_nodes_per_sec, n.ratio, n.clients, n.cpus, n.errors
            ))?;
        }
    }
    if let Some(c) = &rep.context {
        let k = c.budget / 1000;
        output::line(lat_line(
            &format!("context {k}k hybrid+sum"),
            &c.typical_hybrid,
        ))?;
        output::line(lat_line(&format!("context {k}k hybrid"), &c.typical_plain))?;
        output::line(lat_line(&format!("context {k}k all-in-3"), &c.hybrid))?;
        output::line(lat_line(&format!("context {k}k recency"), &c.recency))?;
        output::line(format!(
            "                   mean {:.0} items, {:.0} tokens per hybrid package",
            c.mean_items, c.mean_tokens
        ))?;
    }
    #[cfg(feature = "http")]
    if let Some(k) = &rep.soak {
        let shown = |(sent, ok): (usize, usize)| format!("{ok}/{sent}");
        output::line(format!(
            "soak               {:.1} min, {} clients: {} requests, {} errors, {} writes acknowledged, {} lost",
            k.minutes, k.clients, k.requests, k.errors, k.acked_writes, k.lost_writes
        ))?;
        output::line(format!(
            "  hostile answered as expected: oversized {} (413), malformed {} (400), another tenant's id {} (404), slow {} (closed at the header deadline)",
            shown(k.oversized),
            shown(k.malformed),
            shown(k.foreign_id),
            shown(k.slow)
        ))?;
        let rss: Vec<String> = k.rss_mib.iter().map(|m| format!("{m:.0}")).collect();
        let anon: Vec<String> = k.rss_anon_mib.iter().map(|m| format!("{m:.0}")).collect();
        output::line(format!(
            "  resident memory by tenth (MiB): {}; last against second tenth {:+.1} %",
            rss.join(" "),
            k.rss_growth_pct
        ))?;
        output::line(format!(
            "  of it anonymous (heap, stacks): {}; {:+.1} % (the rest is file pages, the store's among them)",
            anon.join(" "),
            k.rss_anon_growth_pct
        ))?;
    }
    #[cfg(feature = "http")]
    if let Some(h) = &rep.http {
        for p in &h.in_process {
            output::line(format!(
                "recall in process {:>8.0}/s  {}",
                p.phase.per_sec,
                lat_line(&format!("{} threads", p.threads), &p.phase.latency)
            ))?;
        }
        output::line(format!(
            "recall over HTTP  {:>8.0}/s  {}",
            h.http.per_sec,
            lat_line(&format!("{} clients", h.clients), &h.http.latency)
        ))?;
        output::line(match h.recall_threads {
            Some((n, nice)) => format!(
                "                   the server's recalls on {n} recall threads, niceness +{nice}"
            ),
            None => "                   the server's recalls on the event loop".into(),
        })?;
        output::line(format!(
            "                   HTTP / best in process = {:.2}, / in process on {} threads = {:.2}; errors {} in process, {} over HTTP",
            h.ratio,
            h.clients,
            h.ratio_same_concurrency,
            h.in_process.iter().map(|p| p.phase.errors).sum::<usize>(),
            h.http.errors
        ))?;
        let cpu = |p: &http::Phase| p.cpu_us.map_or("n/a".into(), |c| format!("{c:.0} µs"));
        if let Some(cost) = h.server_cost {
            output::line(format!(
                "                   CPU per recall: in process {} ({} threads), over HTTP {} (server, client excluded): the server adds {:.0} %",
                h.in_process
                    .iter()
                    .map(|p| cpu(&p.phase))
                    .collect::<Vec<_>>()
                    .join(" / "),
                h.in_process
                    .iter()
                    .map(|p| p.threads.to_string())
                    .collect::<Vec<_>>()
                    .join("/"),
                cpu(&h.http),
                cost * 100.0
            ))?;
        }
        if let Some(server) = h.server_recall_cpu_us {
            let us = |c: Option<f64>| c.map_or("n/a".into(), |c| format!("{c:.0} µs"));
            output::line(format!(
                "                   of it in the recall itself (its thread's CPU): in process {}, in the server {}",
                h.in_process
                    .iter()
                    .map(|p| us(p.recall_cpu_us))
                    .collect::<Vec<_>>()
                    .join(" / "),
                us(Some(server))
            ))?;
        }
        output::line(format!(
            "GET /healthz      {:>8.0}/s  {}  (the transport's floor: server CPU {} a request, errors {})",
            h.floor.per_sec,
            lat_line(&format!("{} clients", h.clients), &h.floor.latency),
            cpu(&h.floor),
            h.floor.errors
        ))?;
        output::line(format!(
            "recall over HTTP  {:>8.0}/s  {}  (paced at {:.0}/s, errors {})",
            h.paced.phase.per_sec,
            lat_line(&format!("{} clients", h.clients), &h.paced.phase.latency),
            h.paced.rate,
            h.paced.phase.errors
        ))?;
        for m in &h.mixed {
            output::line(format!(
                "mixed {}/{} HTTP  {:>8.0}/s  {}",
                100 - m.write_percent,
                m.write_percent,
                m.per_sec,
                lat_line("recall", &m.recall)
            ))?;
            output::line(format!(
                "                             {}",
                lat_line("remember", &m.remember)
            ))?;
            output::line(format!(
                "                   errors {}, writes acknowledged {}, lost {}; written on the event loop {} ({} after waiting out another writer), on the blocking pool {}; refusals: another writer {}, locked {}, bound {}",
                m.errors,
                m.acknowledged_writes,
                m.lost_writes,
                m.written_inline,
                m.written_after_waiting,
                m.written_pooled,
                m.refused[0],
                m.refused[1],
                m.refused[2]
            ))?;
            output::line(format!(
                "                   recalls run on the event loop {}, on the recall threads {}, on the blocking pool {}",
                m.recalls_on[0], m.recalls_on[1], m.recalls_on[2]
            ))?;
        }
        if !h.scaling.is_empty() {
            output::line("scaling in process (requests/s; remember p50 / p95 in ms):".to_string())?;
            let mut head = "  threads   recall only".to_string();
            for w in http::MIXES {
                head.push_str(&format!(
                    "   mixed {}/{}  remember p50 / p95",
                    100 - 10 * w,
                    10 * w
                ));
            }
            output::line(head)?;
            for r in &h.scaling {
                let mut line = format!("  {:>7}  {:>12.0}", r.threads, r.recall_per_sec);
                for m in &r.mixed {
                    line.push_str(&format!(
                        "  {:>12.0}  {:>8.2} / {:>7.2}",
                        m.per_sec, m.remember.p50_ms, m.remember.p95_ms
                    ));
                }
                output::line(line)?;
            }
        }
    }
    Ok(())
}

/// The context benchmark's profiles: one source layout (task 40 %, project
/// 40 %, global 20 %) under three rankings.
fn context_profiles() -> String {
    let mut out = String::new();
    for (id, head) in [
        (
            "hybrid",
            "strategy = \"hybrid\"\nhead_tail = 2\nsummary_share = 0.3",
        ),
        ("plain", "strategy = \"hybrid\""),
        ("recency", "strategy = \"recency\""),
    ] {
        out.push_str(&format!("[profiles.{id}]\n{head}\n"));
        for (scope, share) in [
            ("task/{task}", 0.4),
            ("project/{project}", 0.4),
            ("global", 0.2),
        ] {
            out.push_str(&format!(
                "[[profiles.{id}.sources]]\nscope = \"{scope}\"\nshare = {share}\n"
            ));
        }
    }
    out
}

/// Context assembly over `--memories` memories in the three sources of one
/// profile.
fn context_bench(
    a: &BenchArgs,
    dir: &Path,
    spread_db: &Path,
    datagen: &mut Gen,
    say: &dyn Fn(String),
) -> Result<ContextBench> {
    // Typical: the other benchmarks' store, plus a task and global memory.
    let mut cfg = bench_config(spread_db);
    cfg.apply_toml(&context_profiles(), None)?;
    let engine = strata::Engine::open(cfg)?;
    let extra: Vec<strata::NewMemory> = dataset(datagen, 2500, 1)
        .into_iter()
        .enumerate()
        .map(|(i, mut m)| {
            m.scope = Some(if i < 500 {
                strata::Scope::parse("task/t1").expect("valid scope")
            } else {
                strata::Scope::global()
            });
            if m.kind == Some(strata::Kind::Preference) {
                m.kind = Some(strata::Kind::Context);
            }
            m
        })
        .collect();
    engine.remember_batch(extra, strata::Confirm::No)?;
    say(format!(
        "context: timing {} assemblies over the {}-memory store ({} tokens)…",
        a.queries, a.memories, a.context_budget
    ));
    let (mut typical, mut plain) = (Vec::new(), Vec::new());
    for i in 0..a.queries {
        let project = format!("p{:02}", (i * 7) % a.scopes);
        let query = datagen.query();
        for (profile, lat) in [("hybrid", &mut typical), ("plain", &mut plain)] {
            let mut req = strata::ContextRequest::new(profile)
                .var("task", "t1")
                .var("project", project.clone())
                .query(query.clone());
            req.max_tokens = Some(a.context_budget);
            let t = Instant::now();
            let p = engine.context(&req)?;
            lat.push(t.elapsed());
            std::hint::black_box(p);
        }
    }
    drop(engine);

    let db = dir.join("context.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let mut cfg = bench_config(&db);
    cfg.apply_toml(&context_profiles(), None)?;
    let engine = strata::Engine::open(cfg)?;
    say(format!(
        "context: loading {} memories into task/t1, project/acme, global…",
        a.memories
    ));
    let scopes = [
        strata::Scope::parse("task/t1")?,
        strata::Scope::parse("project/acme")?,
        strata::Scope::global(),
    ];
    let data: Vec<strata::NewMemory> = dataset(datagen, a.memories, 1)
        .into_iter()
        .enumerate()
        .map(|(i, mut m)| {
            // 10 % task, 60 % project, 30 % global.
            let k = match i % 10 {
                0 => 0,
                1..=6 => 1,
                _ => 2,
            };
            m.scope = Some(scopes[k].clone());
            if k == 2 && m.kind == Some(strata::Kind::Preference) {
                m.kind = Some(strata::Kind::Context);
            }
            m
        })
        .collect();
    for chunk in data.chunks(50_000) {
        engine.remember_batch(chunk.to_vec(), strata::Confirm::No)?;
    }
    say(format!(
        "context: timing {} assemblies per profile ({} tokens)…",
        a.queries, a.context_budget
    ));
    let (mut hybrid, mut recency) = (Vec::new(), Vec::new());
    let (mut items, mut tokens) = (0usize, 0u64);
    for _ in 0..a.queries {
        let mut req = strata::ContextRequest::new("hybrid")
            .var("task", "t1")
            .var("project", "acme")
            .query(datagen.query());
        req.max_tokens = Some(a.context_budget);
        let t = Instant::now();
        let p = engine.context(&req)?;
        hybrid.push(t.elapsed());
        items += p.items.len();
        tokens += u64::from(p.total_tokens);
        if p.total_tokens > a.context_budget {
            anyhow::bail!(
                "context over budget: {} > {}",
                p.total_tokens,
                a.context_budget
            );
        }
        let mut req = strata::ContextRequest::new("recency")
            .var("task", "t1")
            .var("project", "acme");
        req.max_tokens = Some(a.context_budget);
        let t = Instant::now();
        let p = engine.context(&req)?;
        recency.push(t.elapsed());
        std::hint::black_box(p);
    }
    let n = a.queries.max(1) as f64;
    Ok(ContextBench {
        budget: a.context_budget,
        typical_hybrid: latency(typical),
        typical_plain: latency(plain),
        hybrid: latency(hybrid),
        recency: latency(recency),
        mean_items: items as f64 / n,
        mean_tokens: tokens as f64 / n,
    })
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown cpu".into());
    format!("{cpus} cores, {model}")
}

/// Vector search over the other benchmarks' store: every memory gets a
/// synthetic 384-dimension vector, then hybrid recall (BM25 + vectors +
/// fusion) runs over one project and relevance recall over all of them;
/// and, when the local model is installed, what embedding costs.
/// Length of the synthetic vectors (all-MiniLM-L6-v2's).
const DIM: usize = 384;

/// Gives every memory waiting for one a synthetic vector, 1,000 a
/// transaction; returns how many were stored.
fn store_vectors(engine: &strata::Engine) -> Result<usize> {
    let mut stored = 0usize;
    loop {
        let pending = engine
            .store()
            .pending_vectors("bench-synthetic", None, 1000)?;
        if pending.is_empty() {
            return Ok(stored);
        }
        let items: Vec<(String, String, Vec<f32>)> = pending
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let v = synthetic_vector((stored + i) as u64 * 7919, DIM);
                (p.id, p.checksum, v)
            })
            .collect();
        stored += engine.store().set_vectors("bench-synthetic", DIM, &items)?;
    }
}

fn vector_bench(
    a: &BenchArgs,
    db: &Path,
    datagen: &mut Gen,
    say: &dyn Fn(String),
) -> Result<VectorBench> {
    let engine = strata::Engine::open(bench_config(db))?;
    engine.set_embedder(Some(std::sync::Arc::new(Synthetic(DIM))))?;
    say("storing a synthetic vector for every memory…".into());
    let t = Instant::now();
    let stored = store_vectors(&engine)?;
    let set_per_sec = stored as f64 / t.elapsed().as_secs_f64();
    let time = |engine: &strata::Engine,
                view: &dyn Fn(usize) -> Result<strata::View>,
                strategy: strata::Strategy,
                n: usize,
                datagen: &mut Gen|
     -> Result<Latency> {
        let mut lat = Vec::with_capacity(n);
        for i in 0..n {
            let mut req = strata::Recall::new(datagen.query(), view(i)?);
            req.strategy = Some(strategy);
            req.touch = !a.no_touch;
            // The query's vector is computed (and cached) outside the timing.
            engine.query_vector(&req.query)?;
            let t = Instant::now();
            std::hint::black_box(engine.recall(&req)?);
            lat.push(t.elapsed());
        }
        Ok(latency(lat))
    };
    say(format!(
        "timing {} hybrid recalls with vectors over one project view…",
        a.queries
    ));
    let scopes = a.scopes;
    let recall_project = time(
        &engine,
        &|i| {
            Ok(strata::View::scope(strata::Scope::parse(&format!(
                "project/p{:02}",
                (i * 7) % scopes
            ))?))
        },
        strata::Strategy::Hybrid,
        a.queries,
        datagen,
    )?;
    drop(engine);
    // Every memory at once, scanned and through the HNSW index: engines
    // over the same file with the index threshold out of reach, and at 1.
    let with_threshold = |ann_min_view: usize| -> Result<strata::Engine> {
        let opts = strata::SqliteOptions {
            ann_min_view,
            ..bench_options()
        };
        let e = strata::Engine::with_store(
            bench_config(db),
            Box::new(strata::SqliteStore::open(db, opts)?),
        )?;
        e.set_embedder(Some(std::sync::Arc::new(Synthetic(DIM))))?;
        Ok(e)
    };
    let n_all = (a.queries / 10).max(10);
    let all = |_: usize| Ok(strata::View::parse(&["project/**"])?);
    say(format!(
        "timing {} exact relevance recalls with vectors over every memory…",
        (n_all / 4).max(5)
    ));
    let exact_all = time(
        &with_threshold(usize::MAX)?,
        &all,
        strata::Strategy::Relevance,
        (n_all / 4).max(5),
        datagen,
    )?;
    // The first search starts the HNSW build in the background (and scans
    // meanwhile); time the build, then the searches it serves.
    say("building the HNSW index…".into());
    let indexed = with_threshold(1)?;
    let side = db.with_file_name(format!(
        "{}.bench-synthetic.hnsw",
        db.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    ));
    let _ = std::fs::remove_file(&side);
    let t = Instant::now();
    let mut probe = strata::Recall::new("warm up", all(0)?);
    probe.strategy = Some(strata::Strategy::Relevance);
    probe.touch = false;
    indexed.recall(&probe)?;
    while !side.is_file() {
        std::thread::sleep(std::time::Duration::from_millis(20));
        if t.elapsed().as_secs() > 3600 {
            anyhow::bail!("the HNSW index was not built within an hour");
        }
    }
    let index_build_seconds = t.elapsed().as_secs_f64();
    indexed.recall(&probe)?;
    say(format!(
        "timing {n_all} relevance recalls with vectors over every memory…"
    ));
    let recall_all = time(&indexed, &all, strata::Strategy::Relevance, n_all, datagen)?;
    drop(indexed);
    // The real model, when installed.
    let (mut embed_query, mut embed_docs_per_sec, mut model) = (None, None, None);
    let (mut embed_context, mut embed_context_tokens) = (None, None);
    let local = strata::EmbedderConfig::default();
    if local.model_dir().join("model.safetensors").is_file()
        && a.embed_texts > 0
        && let Some(e) = local.open()?
    {
        say(format!("timing the local model ({})…", e.model()));
        let docs: Vec<String> = (0..a.embed_texts).map(|_| datagen.sentence()).collect();
        let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
        e.embed(&refs[..refs.len().min(8)], strata::Purpose::Document)?;
        let t = Instant::now();
        e.embed(&refs, strata::Purpose::Document)?;
        embed_docs_per_sec = Some(docs.len() as f64 / t.elapsed().as_secs_f64());
        let mut lat = Vec::new();
        for _ in 0..a.queries.min(200) {
            let q = datagen.query();
            let t = Instant::now();
            e.embed(&[&q], strata::Purpose::Query)?;
            lat.push(t.elapsed());
        }
        embed_query = Some(latency(lat));
        // An agent's query: its recent dialogue, then what it asks.
        let counter = strata::TokenCounter::new("cl100k_base")?;
        let mut lat = Vec::new();
        let mut tokens = 0;
        for i in 0..a.queries.min(200) {
            let mut q = String::new();
            for who in ["user", "assistant"].iter().cycle() {
                if counter.count(&q) >= 480 {
                    break;
                }
                q.push_str(&format!("{who}: {}\n", datagen.sentence()));
            }
            q.push_str(&datagen.query());
            tokens += counter.count(&q) as usize;
            let t = Instant::now();
            e.embed(&[&q], strata::Purpose::Query)?;
            lat.push(t.elapsed());
            embed_context_tokens = Some(tokens / (i + 1));
        }
        embed_context = Some(latency(lat));
        model = Some(e.model().to_string());
    }
    Ok(VectorBench {
        dim: DIM,
        recall_project,
        recall_all,
        exact_all,
        index_build_seconds,
        set_per_sec,
        embed_query,
        embed_context,
        embed_context_tokens,
        embed_docs_per_sec,
        model,
    })
}
