//! Options of the PostgreSQL store, and URL helpers: plain data, compiled
//! with or without the `postgres` feature, so a configuration can name a
//! PostgreSQL store in every build (one without the feature refuses to open
//! it, saying so).

use std::fmt;
use std::time::Duration;

/// Whether and how connections use TLS (rustls).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TlsMode {
    /// Never.
    Disable,
    /// When the server offers it (the certificate is still verified); plain
    /// otherwise. The URL's `sslmode` wins when it is given.
    #[default]
    Prefer,
    /// Always; a server without TLS is an error.
    Require,
}

/// Options of a PostgreSQL store.
#[derive(Clone, PartialEq)]
pub struct PostgresOptions {
    /// Most connections this process opens at once.
    pub pool_size: usize,
    /// How long opening a connection (or waiting for a free one) may take.
    pub connect_timeout: Duration,
    /// TLS, unless the URL's `sslmode` says otherwise.
    pub tls: TlsMode,
    /// PEM file of extra certificate authorities to trust (besides the
    /// web's roots), for a server with its own CA.
    pub ca_file: Option<std::path::PathBuf>,
    /// The password, when the URL has none (read from an environment
    /// variable by the front ends, never from the command line).
    pub password: Option<String>,
    /// The schema strata's tables live in (created if missing). Several
    /// stores can share one database under different schemas.
    pub schema: String,
    /// `VACUUM` the touched tables after a delete, so forgotten text leaves
    /// the table files (see the README for what it does not reach).
    pub vacuum_on_delete: bool,
    /// Views holding at least this many vectors are searched through an
    /// HNSW index built in memory from the process's copy (feature `ann`),
    /// not scanned.
    pub ann_min_view: usize,
}

impl fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("tls", &self.tls)
            .field("ca_file", &self.ca_file)
            .field("password", &self.password.as_ref().map(|_| "…"))
            .field("schema", &self.schema)
            .field("vacuum_on_delete", &self.vacuum_on_delete)
            .field("ann_min_view", &self.ann_min_view)
            .finish()
    }
}

impl Default for PostgresOptions {
    fn default() -> PostgresOptions {
        PostgresOptions {
            pool_size: 16,
            connect_timeout: Duration::from_secs(10),
            tls: TlsMode::Prefer,
            ca_file: None,
            password: None,
            schema: "public".into(),
            vacuum_on_delete: true,
            ann_min_view: 20_000,
        }
    }
}

/// A `postgres://` URL with its password replaced by `***`, for messages.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match auth.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// Whether `s` names a PostgreSQL database (`postgres://` or
/// `postgresql://`) rather than a file.
pub fn is_postgres_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}
