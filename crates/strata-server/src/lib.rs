//! strata-server: the HTTP and MCP front ends of the strata memory engine.
//!
//! Thin adapters: transport, authentication and limits, nothing else. Both
//! front ends call the same operations ([`ops`]), which check a request's
//! bearer-token [`Grant`] before they call the synchronous [`strata::Engine`]
//! on the blocking pool.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = strata::Engine::open(strata::Config::sqlite("memory.db"))?;
//! let cfg = strata_server::ServerConfig::default();
//! let shared = strata_server::Shared::new(engine, &cfg, strata_server::AuthMode::Tokens)?;
//! let listener = tokio::net::TcpListener::bind(&cfg.listen).await?;
//! strata_server::serve(listener, shared, strata_server::shutdown_signal()).await?;
//! # Ok(()) }
//! ```

mod api;
mod audit;
mod auth;
mod compact;
mod config;
mod conn;
mod error;
mod foreign;
mod http;
mod learned;
mod mcp;
mod metrics;
pub mod ops;
mod readers;
mod reload;
mod ui;
mod upkeep;
mod usage;

use std::future::Future;
use std::sync::Arc;

pub use api::{
    BatchAnswer, BatchBody, CompleteTaskBody, ContextBody, ForgetBody, GetArgs, ListBody,
    PatchBody, PromoteBody, RecallAnswer, RecallBody, RememberAnswer, RememberBody, RestoreBody,
    SessionBody,
};
pub use auth::{Access, Entry, Grant, TokenTable, Tokens, new_token, sha256_hex};
pub use config::{
    DEFAULT_LISTEN, Limits, McpDefaults, RECALL_THREADS_UP_TO, ServerConfig, TokenConfig,
    recall_threads_for,
};
pub use error::{ApiError, ConfigError, ErrorBody};
pub use http::{openapi_doc, router};
pub use mcp::{StrataMcp, serve_stdio};
pub use metrics::{Metrics, RanOn};
pub use reload::watch_config;
pub use ui::Inspector;
pub use usage::{Usage, read_state as read_last_used, state_path as last_used_path};

/// Whether requests must carry a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthMode {
    /// Bearer tokens from `[[server.tokens]]`.
    Tokens,
    /// Every request sees everything (`--no-auth`, loopback only).
    Off,
}

/// What every request shares: the engine, the tokens, limits, metrics.
#[derive(Debug)]
pub struct Shared {
    /// The engine (Send + Sync; its store pools connections).
    pub engine: Arc<strata::Engine>,
    /// `None` when authentication is off.
    pub tokens: Option<TokenTable>,
    /// Each token's rate-limit bucket and last-used time.
    pub usage: Usage,
    /// Request limits.
    pub limits: Limits,
    /// Scope defaults of the MCP tools.
    pub mcp: McpDefaults,
    /// `Host` values (and `Origin` hosts) the protected routes accept; empty
    /// accepts any.
    pub allowed_hosts: Vec<String>,
    /// Request counts and latencies.
    pub metrics: Metrics,
    /// Whether each request is logged to stderr (`[server] access_log`).
    pub access_log: bool,
    /// Cancelled on shutdown (ends MCP streams).
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Bounds engine calls in flight (`limits.max_concurrent`).
    pub permits: Arc<tokio::sync::Semaphore>,
    /// Recalls that never wait ([`strata::Engine::recall_never_waits`])
    /// run on a recall thread while writes arrive, else on the thread that
    /// read the request, not on the blocking pool; never while `[audit]`
    /// records calls (each recall then writes).
    pub inline_recall: bool,
    /// The recall threads (`[server] recall_threads`), where the recalls
    /// that never wait run; without them, on the event loop.
    readers: Option<readers::Readers>,
    /// When the last write arrived (`run_write`), in ms since `born`.
    last_write_ms: std::sync::atomic::AtomicU64,
    born: std::time::Instant,
    /// Remembers and updates first try the thread that read the request,
    /// refusing to wait for another write ([`strata::without_waiting`]);
    /// the blocking pool takes them when one is in the way.
    pub inline_writes: bool,
    /// Gives new memories their vectors in the background (idle without
    /// an embedder); stops when the server does.
    pub embed_worker: strata::EmbedWorker,
    /// Runs upkeep every `upkeep_every_secs` (none when 0).
    pub upkeep_worker: upkeep::UpkeepWorker,
    /// The web inspector's sessions and one-time login codes.
    pub inspector: Inspector,
}

impl Shared {
    /// Validates `cfg` and wraps the engine.
    pub fn new(
        engine: strata::Engine,
        cfg: &ServerConfig,
        auth: AuthMode,
    ) -> Result<Arc<Shared>, ConfigError> {
        cfg.validate()?;
        if auth == AuthMode::Off && cfg.allowed_hosts.is_empty() {
            return Err(ConfigError(
                "server.allowed_hosts: an empty list accepts any Host, which without tokens lets any web page reach the server (DNS rebinding); name the hosts".into(),
            ));
        }
        let mut allowed_hosts = cfg.allowed_hosts.clone();
        // A request addressed to the very IP the server listens on is not a
        // rebinding (that needs a name): accept it without configuration.
        if let Ok(addr) = cfg.listen.parse::<std::net::SocketAddr>()
            && !addr.ip().is_unspecified()
            && !allowed_hosts.is_empty()
        {
            allowed_hosts.push(addr.ip().to_string());
        }
        let engine = Arc::new(engine);
        // A recorded recall writes its audit entry, which may wait for the
        // store's write lock: not on the event loop, nor on a recall thread.
        let inline_recall = engine.recall_never_waits() && !engine.audit_config().enabled;
        let readers = if inline_recall && cfg.recall_threads > 0 {
            // Not from a recall thread: the access log's writer would run
            // at its priority while it holds the write path.
            engine.start_threads();
            Some(
                readers::Readers::spawn(cfg.recall_threads, cfg.recall_nice).map_err(|e| {
                    ConfigError(format!(
                        "server.recall_threads: starting a thread failed: {e}"
                    ))
                })?,
            )
        } else {
            None
        };
        Ok(Arc::new(Shared {
            inline_recall,
            readers,
            inline_writes: engine.writes_can_hurry(),
            embed_worker: strata::EmbedWorker::spawn(engine.clone()),
            upkeep_worker: upkeep::UpkeepWorker::spawn(
                engine.clone(),
                (cfg.upkeep_every_secs > 0)
                    .then(|| std::time::Duration::from_secs(cfg.upkeep_every_secs)),
            ),
            engine,
            tokens: match auth {
                AuthMode::Tokens => Some(TokenTable::new(Tokens::from_config(&cfg.tokens)?)),
                AuthMode::Off => None,
            },
            usage: Usage::default(),
            limits: cfg.limits.clone(),
            mcp: cfg.mcp.clone(),
            allowed_hosts,
            metrics: Metrics::default(),
            access_log: cfg.access_log,
            shutdown: tokio_util::sync::CancellationToken::new(),
            permits: Arc::new(tokio::sync::Semaphore::new(cfg.limits.max_concurrent)),
            inspector: Inspector::default(),
            last_write_ms: std::sync::atomic::AtomicU64::new(0),
            born: std::time::Instant::now(),
        }))
    }
}

impl Shared {
    /// Replaces the accepted tokens with `tokens` (validated first: on an
    /// error the previous ones stay). Requests from now on see the new
    /// table; returns how many tokens it holds.
    pub fn reload_tokens(&self, tokens: &[TokenConfig]) -> Result<usize, ConfigError> {
        let Some(table) = &self.tokens else {
            return Err(ConfigError(
                "server.tokens: the server runs without authentication (--no-auth); tokens are not reloaded".into(),
            ));
        };
        let new = Tokens::from_config(tokens)?;
        let n = new.len();
        table.replace(new);
        Ok(n)
    }

    /// Runs a recall (or another operation that only reads, never the
    /// access log's write) with `grant`.
    ///
    /// A recall on SQLite with a local embedder (or none) is a fraction of
    /// a millisecond of CPU that never waits: while writes arrive it runs
    /// on a recall thread ([`Shared::recall_threads`]), else (or when there
    /// are none) here, on the event loop's thread, under a permit. Either
    /// saves the blocking pool's two thread hand-offs per request (as much
    /// as the HTTP transport costs). Anything that can wait (a remote
    /// embedder, the HNSW index's lock, a networked store) goes to the
    /// blocking pool. The recall threads are their own bound on recalls in
    /// flight; they take no permit.
    pub async fn run_recall<T, F>(self: &Arc<Self>, grant: Grant, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(ops::Ctx<'_>) -> Result<T, ApiError> + Send + 'static,
    {
        if !self.inline_recall {
            self.metrics.record_recall(RanOn::Pool);
            return self.run(grant, f).await;
        }
        if let Some(readers) = self.readers.as_ref().filter(|_| self.writing()) {
            self.metrics.record_recall(RanOn::RecallThread);
            // Queued for a thread below the event loop's priority, so a
            // remember read meanwhile runs first.
            let st = self.clone();
            return readers
                .run(move || {
                    f(ops::Ctx {
                        engine: &st.engine,
                        grant: &grant,
                        limits: &st.limits,
                    })
                })
                .await
                .map_err(|_| ApiError::internal("operation failed: it panicked"))?;
        }
        self.metrics.record_recall(RanOn::EventLoop);
        self.here(&grant, f).await?
    }

    /// Whether a write arrived in the last [`WRITES_RECENT`]: recalls
    /// then go to the recall threads, leaving the event loop to writes.
    /// Without writes there is nothing to leave it for, and a recall runs
    /// where it was read, sparing the two hand-offs (5–10 % of recall-only
    /// throughput on 2 vCPUs).
    fn writing(&self) -> bool {
        let last = self
            .last_write_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        last != 0 && self.since_born_ms().saturating_sub(last) <= WRITES_RECENT.as_millis() as u64
    }

    /// Milliseconds since this was made, at least 1 (0 means no write yet).
    fn since_born_ms(&self) -> u64 {
        (self.born.elapsed().as_millis() as u64).max(1)
    }

    /// The recall threads and how far below the process's priority they
    /// run (niceness); `None` when recalls run on the event loop or the
    /// blocking pool.
    pub fn recall_threads(&self) -> Option<(usize, u8)> {
        self.readers.as_ref().map(|r| r.shape())
    }

    /// Runs `f` with `grant` on this thread once a permit is free, and
    /// gives the permit back. A panic is a 500, as on the blocking pool,
    /// not a dropped connection.
    async fn here<T>(
        &self,
        grant: &Grant,
        f: impl FnOnce(ops::Ctx<'_>) -> T,
    ) -> Result<T, ApiError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| ApiError::shutting_down())?;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            f(ops::Ctx {
                engine: &self.engine,
                grant,
                limits: &self.limits,
            })
        }))
        .map_err(|_| ApiError::internal("operation failed: it panicked"))
    }

    /// Runs a write (a remember, an update) with `grant`, once a permit is
    /// free: on this thread when the store can refuse to wait and nothing
    /// is in the way (no other write of this process, no other process
    /// holding the write lock, no eviction ahead), else on the blocking
    /// pool. On 2 vCPUs under a 90 % recall / 10 % remember load the pool's
    /// two thread hand-offs were most of a remember's time: its thread
    /// waits for a turn on CPUs the event loop keeps busy, twice. Another
    /// write of this process in the way (a commit's fsync, most often) is
    /// waited out here, the thread serving other requests meanwhile, for
    /// at most [`TURN_WAIT`]; on 16 busy cores a trip through the pool
    /// cost ~100 ms at the 95th percentile.
    pub async fn run_write<T, F>(self: &Arc<Self>, grant: Grant, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: Fn(ops::Ctx<'_>) -> Result<T, ApiError> + Send + 'static,
    {
        self.last_write_ms
            .store(self.since_born_ms(), std::sync::atomic::Ordering::Relaxed);
        if self.inline_writes {
            let since = std::time::Instant::now();
            let mut waited = false;
            loop {
                let refused = match self
                    .here(&grant, |c| strata::without_waiting(|| f(c)))
                    .await?
                {
                    Ok(answer) => {
                        self.metrics.record_write(true, waited);
                        return answer;
                    }
                    // Refused, nothing written: wait, or let the pool.
                    Err(refused) => refused,
                };
                let left = TURN_WAIT.saturating_sub(since.elapsed());
                let Some(turn) = refused.turn().filter(|_| !left.is_zero()) else {
                    break;
                };
                waited = true;
                let _ = tokio::time::timeout(left, turn).await;
            }
        }
        self.metrics.record_write(false, false);
        self.run(grant, f).await
    }

    /// Runs an operation on the blocking pool with `grant`, once one of the
    /// `max_concurrent` permits is free.
    pub async fn run<T, F>(self: &Arc<Self>, grant: Grant, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(ops::Ctx<'_>) -> Result<T, ApiError> + Send + 'static,
    {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::shutting_down())?;
        let st = self.clone();
        tokio::task::spawn_blocking(move || {
            let out = f(ops::Ctx {
                engine: &st.engine,
                grant: &grant,
                limits: &st.limits,
            });
            // The next request may start now, not only once this task's
            // answer has travelled back to the async side.
            drop(permit);
            out
        })
        .await
        .map_err(|e| ApiError::internal(format!("operation failed: {e}")))?
    }
}

/// How long after a write recalls keep going to the recall threads.
pub const WRITES_RECENT: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a write refused on the event loop waits for another writer of
/// the process to let go before it goes to the blocking pool: a commit
/// takes milliseconds, a batch or an import may take seconds.
pub const TURN_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Serves HTTP on `listener` until `shutdown` resolves; requests in flight
/// then finish before this returns.
///
/// At most `limits.max_connections` connections are open at once: the
/// next is accepted only when one closes, so further clients wait in the
/// kernel's queue rather than being refused. One peer holds at most
/// `limits.max_connections_per_peer` of them, and the last
/// [`Limits::connection_reserve`] go only to peers that hold none, so a
/// peer that opens many connections and sends nothing keeps no one else
/// out; a connection over either is answered 503 and closed at once. Each
/// connection keeps the header and idle deadlines of `conn.rs` (a silent
/// one is closed after `header_timeout_secs`); bodies are read under
/// theirs in the router.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let stop = shared.shutdown.clone();
    let limits = shared.limits.clone();
    let app = router(shared);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let peers = Arc::new(conn::Peers::default());
    let conns = tokio_util::task::TaskTracker::new();
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            () = &mut shutdown => break,
            s = slots.clone().acquire_owned() => s.expect("the semaphore is never closed"),
        };
        let (tcp, addr) = tokio::select! {
            () = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
        };
        let admitted =
            match peers.admit(conn::peer_of(addr.ip()), &limits, slots.available_permits()) {
                Ok(a) => a,
                Err(why) => {
                    drop(slot);
                    conn::refuse(tcp, &why);
                    continue;
                }
            };
        // Answers are small and written whole: send them at once instead of
        // letting Nagle's algorithm wait for the client's delayed ACK.
        let _ = tcp.set_nodelay(true);
        conns.spawn(connection(
            tcp,
            app.clone(),
            &limits,
            stop.clone(),
            (slot, admitted),
        ));
    }
    stop.cancel();
    drop(listener);
    conns.close();
    conns.wait().await;
    Ok(())
}

/// Serves one connection until it closes; on `stop`, its request in
/// flight finishes first.
fn connection(
    tcp: tokio::net::TcpStream,
    app: axum::Router,
    limits: &Limits,
    stop: tokio_util::sync::CancellationToken,
    slot: (tokio::sync::OwnedSemaphorePermit, conn::Admitted),
) -> impl Future<Output = ()> + Send + 'static {
    use tower_service::Service as _;
    let clock = conn::Clock::new(limits);
    let io = hyper_util::rt::TokioIo::new(conn::Guarded::new(tcp, clock.clone()));
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        clock.busy();
        let clock = clock.clone();
        // A router is always ready: no `poll_ready` first.
        let answer = app.clone().call(req);
        async move {
            let resp = answer.await?;
            Ok::<_, std::convert::Infallible>(resp.map(|body| conn::Tracked { body, clock }))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        // The deadlines are `conn::Guarded`'s; hyper's would end an idle
        // keep-alive connection at the header deadline.
        .header_read_timeout(None)
        .serve_connection(io, svc);
    async move {
        let _slot = slot;
        tokio::pin!(conn);
        tokio::select! {
            _ = conn.as_mut() => {}
            () = stop.cancelled() => {
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
            }
        }
    }
}

/// After a failed `accept`: errors of one connection are skipped; others
/// (out of file descriptors) would repeat at once, so wait a moment.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind as K;
    if matches!(
        e.kind(),
        K::ConnectionAborted | K::ConnectionRefused | K::ConnectionReset | K::Interrupted
    ) {
        return;
    }
    eprintln!("strata serve: accept failed: {e}");
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
