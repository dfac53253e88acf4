//! The `[server]` table of `strata.toml`: where to listen, the bearer
//! tokens, request limits, MCP defaults.
//!
//! The engine's own configuration (`[store]`, `[memory]`, …) is read by
//! `strata::Config`; this module reads only `[server]` and turns it into a
//! validated [`ServerConfig`]. Unknown keys are errors that name them.

use serde::{Deserialize, Serialize};

use crate::auth::Access;
use crate::error::ConfigError;

/// Where `strata serve` listens when neither `--listen` nor `[server] listen`
/// says otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7077";

/// The `[server]` table.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on (`host:port`).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Bearer tokens (`[[server.tokens]]`).
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
    /// Request limits (`[server.limits]`).
    #[serde(default)]
    pub limits: Limits,
    /// `Host` header values `/v1`, `/metrics` and `/mcp` accept, and the
    /// hosts an `Origin` header may name (DNS-rebinding and cross-site
    /// guard); loopback names by default. An entry with a port
    /// (`example.com:8080`) matches that port only. An empty list accepts
    /// any host (refused with `--no-auth`).
    #[serde(default = "default_allowed_hosts")]
    pub allowed_hosts: Vec<String>,
    /// Scope defaults of the MCP tools (`[server.mcp]`).
    #[serde(default)]
    pub mcp: McpDefaults,
    /// One line per request on stderr (method, route template, status,
    /// duration, bytes; never a body, a token or the request's path).
    /// Off by default; `strata serve --access-log` turns it on too.
    #[serde(default)]
    pub access_log: bool,
    /// Seconds between the server's upkeep runs (expiry, eviction,
    /// learning, …; under a lease, so several servers on one database run
    /// it once); 0 never runs it. Default 3600.
    #[serde(default = "default_upkeep_every_secs")]
    pub upkeep_every_secs: u64,
    /// Threads that run recalls that never wait (SQLite with no embedder
    /// or the local one), below the event loop's priority, so the event
    /// loop's threads stay free to read requests and run remembers; 0 runs
    /// those recalls on the event loop's threads. Default: the CPUs on a
    /// machine of at most [`RECALL_THREADS_UP_TO`] CPUs, else 0
    /// ([`recall_threads_for`]).
    #[serde(default = "default_recall_threads")]
    pub recall_threads: usize,
    /// How much lower the recall threads' priority is: their niceness
    /// above the process's (Linux; 0–19, default 10). 0 keeps the process's.
    #[serde(default = "default_recall_nice")]
    pub recall_nice: u8,
}

fn default_upkeep_every_secs() -> u64 {
    3600
}

fn default_recall_threads() -> usize {
    recall_threads_for(std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The most CPUs on which recall threads are on by default.
pub const RECALL_THREADS_UP_TO: usize = 4;

/// `[server] recall_threads`' default on a machine of `cpus` CPUs: one a
/// CPU up to [`RECALL_THREADS_UP_TO`], none above.
///
/// What the recall threads spare a remember is its wait behind the
/// recalls queued on its event-loop thread, and that queue is the clients
/// over the threads: 16 recalls a thread for 32 clients on 2 CPUs, 2 on
/// 16. Measured with `strata bench --only http` (32 clients, the 90/10
/// mix, one machine limited to 4, 8 and all 16 of its CPUs): remember p95
/// 16–18 → 5 ms on 2 vCPUs and 15 → 7 ms on 4; on 8 the p50 halves but
/// the p95 stays (10 → 11–12 ms); on 16 the p95 rises (12 → 14 ms).
/// Throughput is the same either way.
pub fn recall_threads_for(cpus: usize) -> usize {
    if cpus <= RECALL_THREADS_UP_TO {
        cpus
    } else {
        0
    }
}

fn default_recall_nice() -> u8 {
    10
}

/// The most `recall_threads` accepted.
const MAX_RECALL_THREADS: usize = 1024;

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            listen: default_listen(),
            tokens: Vec::new(),
            limits: Limits::default(),
            allowed_hosts: default_allowed_hosts(),
            mcp: McpDefaults::default(),
            access_log: false,
            upkeep_every_secs: default_upkeep_every_secs(),
            recall_threads: default_recall_threads(),
            recall_nice: default_recall_nice(),
        }
    }
}

fn default_listen() -> String {
    DEFAULT_LISTEN.into()
}

fn default_allowed_hosts() -> Vec<String> {
    ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec()
}

/// One `[[server.tokens]]` entry. The token itself is never stored: only its
/// SHA-256.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// A name for logs and metrics.
    pub name: String,
    /// Hex SHA-256 of the token.
    pub secret_sha256: String,
    /// Scope prefixes the token may read (and, with `read_write`, write):
    /// `project/acme` allows `project/acme` and everything below it.
    pub scopes: Vec<String>,
    /// `read`, `read_write` or `admin`.
    pub access: Access,
    /// When the token stops working (RFC 3339, `2027-01-31T00:00:00Z`);
    /// never, without one. Checked on every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<jiff::Timestamp>,
    /// Most requests a minute; further ones are answered 429 with
    /// `Retry-After` (a bucket that refills evenly). No limit without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit_per_minute: Option<u32>,
}

/// Request and connection limits; each breach of a request limit is a 413,
/// 408 or 400 that says which.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Most items in one `POST /v1/memories/batch`.
    pub max_batch: usize,
    /// Largest `limit` of a recall or list.
    pub max_results: usize,
    /// Most engine calls running at once; further requests wait their turn
    /// (first come, first served). Default: 4 × the CPUs. More threads than
    /// that only contend for the CPU and SQLite's write lock.
    pub max_concurrent: usize,
    /// Seconds a client has to send a request's whole head (request line
    /// and headers): from the first byte of a request, and on a new
    /// connection from its accept (a connection that sends nothing is not
    /// kept for the idle timeout); then the connection is closed. Bounds
    /// slow-header (slowloris) and silent clients.
    pub header_timeout_secs: u64,
    /// Seconds a client has to send a request's whole body once its head
    /// is in; then the answer is a 408.
    pub body_timeout_secs: u64,
    /// Seconds a connection may sit with nothing moving: no request begun
    /// after the last answer (keep-alive), or an answer the client does not
    /// read; then it is closed.
    pub idle_timeout_secs: u64,
    /// Most connections open at once; further clients wait to be accepted
    /// (in the kernel's queue) until one closes. The last eighth of them
    /// (at least one) is a reserve for peers that hold none yet, so one
    /// peer (or a few) holding many cannot keep a new one out.
    pub max_connections: usize,
    /// Most connections one peer holds at once: one IPv4 address, or one
    /// IPv6 /64 (what one host is usually given). The next is answered
    /// 503 `too_many_connections` and closed. Default 64; behind a reverse
    /// proxy every client is the proxy's address, so raise it there.
    pub max_connections_per_peer: usize,
}

impl Limits {
    /// [`Limits::header_timeout_secs`] as a duration.
    pub fn header_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.header_timeout_secs)
    }

    /// How many of `max_connections` only a peer that holds no connection
    /// may take: an eighth, at least one (none when there is only one).
    pub fn connection_reserve(&self) -> usize {
        if self.max_connections < 2 {
            0
        } else {
            (self.max_connections / 8).max(1)
        }
    }

    /// [`Limits::body_timeout_secs`] as a duration.
    pub fn body_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.body_timeout_secs)
    }

    /// [`Limits::idle_timeout_secs`] as a duration.
    pub fn idle_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.idle_timeout_secs)
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_body_bytes: 8 << 20,
            max_batch: 1000,
            max_results: 1000,
            max_concurrent: 4 * std::thread::available_parallelism().map_or(1, |n| n.get()),
            header_timeout_secs: 10,
            body_timeout_secs: 30,
            idle_timeout_secs: 60,
            max_connections: 1024,
            max_connections_per_peer: 64,
        }
    }
}

/// The longest timeout `[server.limits]` accepts: a day.
const MAX_TIMEOUT_SECS: u64 = 24 * 60 * 60;

fn to_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// Defaults the MCP tools fill in when a call leaves them out.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpDefaults {
    /// Project: `remember` writes to `project/<p>`, reads see
    /// `project/<p>/**` and `global`.
    pub project: Option<String>,
    /// Session: `remember` attaches to it, reads see its scope too.
    pub session: Option<String>,
}

/// The part of `strata.toml` this crate reads; everything else belongs to
/// the engine.
#[derive(Deserialize)]
struct File {
    #[serde(default)]
    server: Option<ServerConfig>,
}

impl ServerConfig {
    /// Reads `[server]` from `strata.toml` text (defaults when absent).
    pub fn from_toml(text: &str) -> Result<ServerConfig, ConfigError> {
        // toml's errors quote the offending line and key.
        let file: File = toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
        let cfg = file.server.unwrap_or_default();
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every value; errors name the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        crate::auth::Tokens::from_config(&self.tokens)?;
        if self.upkeep_every_secs > 366 * 86_400 {
            return Err(ConfigError(format!(
                "server.upkeep_every_secs: {} is more than a year; 0 turns the timer off",
                self.upkeep_every_secs
            )));
        }
        if self.recall_threads > MAX_RECALL_THREADS {
            return Err(ConfigError(format!(
                "server.recall_threads: {} is more than {MAX_RECALL_THREADS}; 0 runs recalls on the event loop",
                self.recall_threads
            )));
        }
        if self.recall_nice > 19 {
            return Err(ConfigError(format!(
                "server.recall_nice: {} is outside 0–19 (how far below the process's priority recall threads run)",
                self.recall_nice
            )));
        }
        let l = &self.limits;
        for (name, v) in [
            ("max_body_bytes", l.max_body_bytes),
            ("max_batch", l.max_batch),
            ("max_results", l.max_results),
            ("max_concurrent", l.max_concurrent),
            ("max_connections", l.max_connections),
            ("max_connections_per_peer", l.max_connections_per_peer),
            ("header_timeout_secs", to_usize(l.header_timeout_secs)),
            ("body_timeout_secs", to_usize(l.body_timeout_secs)),
            ("idle_timeout_secs", to_usize(l.idle_timeout_secs)),
        ] {
            if v == 0 {
                return Err(ConfigError(format!(
                    "server.limits.{name}: must be positive"
                )));
            }
        }
        // tokio's timers take at most about two years; a larger figure
        // would panic when a connection arms its timer.
        for (name, v) in [
            ("header_timeout_secs", l.header_timeout_secs),
            ("body_timeout_secs", l.body_timeout_secs),
            ("idle_timeout_secs", l.idle_timeout_secs),
        ] {
            if v > MAX_TIMEOUT_SECS {
                return Err(ConfigError(format!(
                    "server.limits.{name}: at most {MAX_TIMEOUT_SECS} seconds (a day)"
                )));
            }
        }
        if let Some(p) = &self.mcp.project {
            strata::Scope::project(p)
                .map_err(|e| ConfigError(format!("server.mcp.project: {e}")))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_server_table_and_ignores_the_rest() {
        let cfg = ServerConfig::from_toml(
            r#"
            [store]
            path = "x.db"
            [server]
            listen = "127.0.0.1:9000"
            [[server.tokens]]
            name = "ci"
            secret_sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
            scopes = ["project/acme"]
            access = "read"
            [server.limits]
            max_batch = 10
            "#,
        )
        .unwrap();
        assert_eq!(cfg.listen, "127.0.0.1:9000");
        assert_eq!(cfg.tokens.len(), 1);
        assert_eq!(cfg.limits.max_batch, 10);
        assert_eq!(cfg.limits.max_results, 1000);
        assert!(!cfg.access_log);
        let cfg = ServerConfig::from_toml("[server]\naccess_log = true").unwrap();
        assert!(cfg.access_log);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(cfg.recall_threads, recall_threads_for(cpus));
        assert_eq!(cfg.recall_nice, 10);
        let cfg =
            ServerConfig::from_toml("[server]\nrecall_threads = 0\nrecall_nice = 19").unwrap();
        assert_eq!((cfg.recall_threads, cfg.recall_nice), (0, 19));
    }

    #[test]
    fn recall_threads_default_to_the_cpus_only_on_small_machines() {
        let by_cpus: Vec<usize> = [1, 2, 4, 5, 8, 16, 64]
            .into_iter()
            .map(recall_threads_for)
            .collect();
        assert_eq!(by_cpus, [1, 2, 4, 0, 0, 0, 0]);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let e = ServerConfig::from_toml("[server]\nlisten_on = 'x'").unwrap_err();
        assert!(e.to_string().contains("listen_on"), "{e}");
        for (bad, named) in [
            ("recall_threads = 5000", "server.recall_threads"),
            ("recall_threads = -1", "recall_threads"),
            ("recall_nice = 20", "server.recall_nice"),
            ("recall_nice = -5", "recall_nice"),
            ("recall_nice = 'low'", "recall_nice"),
        ] {
            let e = ServerConfig::from_toml(&format!("[server]\n{bad}")).unwrap_err();
            assert!(e.to_string().contains(named), "{bad}: {e}");
        }
        let e = ServerConfig::from_toml("[server.limits]\nmax_batch = 0").unwrap_err();
        assert!(e.to_string().contains("server.limits.max_batch"), "{e}");
        for key in [
            "header_timeout_secs",
            "body_timeout_secs",
            "idle_timeout_secs",
            "max_connections",
            "max_connections_per_peer",
        ] {
            let e = ServerConfig::from_toml(&format!("[server.limits]\n{key} = 0")).unwrap_err();
            assert!(
                e.to_string().contains(&format!("server.limits.{key}")),
                "{e}"
            );
        }
        let e = ServerConfig::from_toml("[server.limits]\nidle_timeout_secs = 99999999999")
            .unwrap_err();
        assert!(e.to_string().contains("idle_timeout_secs"), "{e}");
        let cfg = ServerConfig::from_toml("[server.limits]\nheader_timeout_secs = 3").unwrap();
        assert_eq!(cfg.limits.header_timeout_secs, 3);
        assert_eq!(cfg.limits.max_connections, 1024);
        assert_eq!(cfg.limits.max_connections_per_peer, 64);
        assert_eq!(cfg.limits.connection_reserve(), 128);
        let e = ServerConfig::from_toml(
            "[[server.tokens]]\nname='a'\nsecret_sha256='abc'\nscopes=['global']\naccess='read'",
        )
        .unwrap_err();
        assert!(e.to_string().contains("secret_sha256"), "{e}");
    }

    #[test]
    fn token_expiry_rate_and_admin_access_are_read_and_checked() {
        let entry = |extra: &str| {
            ServerConfig::from_toml(&format!(
                "[[server.tokens]]\nname='a'\nsecret_sha256='{}'\nscopes=['global']\n{extra}",
                "ab".repeat(32)
            ))
        };
        let cfg =
            entry("access='admin'\nexpires_at='2027-01-31T00:00:00Z'\nrate_limit_per_minute=60")
                .unwrap();
        let t = &cfg.tokens[0];
        assert_eq!(t.access, Access::Admin);
        assert_eq!(t.expires_at.unwrap().to_string(), "2027-01-31T00:00:00Z");
        assert_eq!(t.rate_limit_per_minute, Some(60));
        for (bad, named) in [
            ("access='root'", "access"),
            ("access='read'\nexpires_at='next week'", "expires_at"),
            (
                "access='read'\nrate_limit_per_minute=0",
                "rate_limit_per_minute",
            ),
            (
                "access='read'\nrate_limit_per_minute=-1",
                "rate_limit_per_minute",
            ),
        ] {
            let e = entry(bad).unwrap_err().to_string();
            assert!(e.contains(named), "{bad}: {e}");
        }
    }
}
