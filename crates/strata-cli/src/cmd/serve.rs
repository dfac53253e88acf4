//! `strata serve`, `strata mcp` and `strata token` (new, list, revoke): the HTTP and MCP
//! front ends (crate `strata-server`) started from the CLI's configuration.

use std::io::Write as _;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (default: `[server] listen`, else 127.0.0.1:7077).
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<String>,
    /// Serve without tokens: every request sees and may change everything.
    /// Only on a loopback address.
    #[arg(long)]
    pub no_auth: bool,
    /// Log one line per request to stderr: method, route template, status,
    /// duration, bytes (never bodies or tokens). Also `[server] access_log = true`.
    #[arg(long)]
    pub access_log: bool,
}

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Project the tools default to: `remember` writes to `project/<P>`,
    /// reads see `project/<P>/**` and `global` (default: `[server.mcp] project`).
    #[arg(long)]
    pub project: Option<String>,
    /// Session the tools default to (default: `[server.mcp] session`).
    #[arg(long)]
    pub session: Option<String>,
    /// Make the tools' session ephemeral: what they remember into it lives
    /// only in this process's hot tier (its last `hot.turns` memories),
    /// never in the store or any file, and is gone when the process ends
    /// (the session is `--session`, else a fresh id; its scope the
    /// project's, else `session/<id>`).
    #[arg(long)]
    pub ephemeral: bool,
}

#[derive(Debug, Subcommand)]
pub enum TokenCmd {
    /// Print a fresh token once, with the `[[server.tokens]]` lines to
    /// paste (or, with `--write`, add them to the configuration file).
    #[command(
        after_help = "Examples:\n  strata token new --name agent --scope project/acme --access read_write --write\n  strata token new --name ci --scope project/acme --expires-in 30d --rate-limit 120 --write"
    )]
    New(TokenNewArgs),
    /// The configured tokens: name, access, scopes, expiry, rate limit and
    /// when a server last saw each (never a secret).
    #[command(after_help = "Examples:\n  strata token list")]
    List,
    /// Remove a token from the configuration file (by name).
    #[command(
        after_help = "Examples:\n  strata token revoke agent\n\nA running `strata serve` refuses the token within a second (it watches its configuration file; SIGHUP reloads it too)."
    )]
    Revoke(TokenRevokeArgs),
}

#[derive(Debug, Args)]
pub struct TokenNewArgs {
    /// A name for logs and metrics; `token list` and `token revoke` know
    /// the token by it.
    #[arg(long)]
    pub name: String,
    /// A scope prefix the token may use (repeatable): `project/acme` allows
    /// `project/acme` and everything below it.
    #[arg(long = "scope", value_name = "SCOPE", required = true)]
    pub scopes: Vec<String>,
    /// `read`, `read_write`, or `admin` (read_write, and the store's
    /// figures in `/metrics`).
    #[arg(long, default_value = "read")]
    pub access: String,
    /// The token stops working after this long: 90s, 15m, 12h, 7d, 2w
    /// (default: never).
    #[arg(long, value_name = "DURATION")]
    pub expires_in: Option<String>,
    /// Most requests a minute; more are answered 429 with Retry-After
    /// (default: no limit).
    #[arg(long, value_name = "N")]
    pub rate_limit: Option<u32>,
    /// Add the `[[server.tokens]]` entry (the secret's SHA-256, never the
    /// secret) to the configuration file: the one `--config` names (created
    /// if missing), else the one found, else `./strata.toml` (created).
    #[arg(long)]
    pub write: bool,
}

#[derive(Debug, Args)]
pub struct TokenRevokeArgs {
    /// The token's name (see `strata token list`).
    pub name: String,
}

/// `[server]` of the configuration file (defaults without one).
pub(crate) fn server_config(g: &Global) -> Result<strata_server::ServerConfig> {
    let Some(path) = app::config_path(g)? else {
        return Ok(strata_server::ServerConfig::default());
    };
    if is_yaml(&path) {
        return Ok(strata_server::ServerConfig::default());
    }
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    strata_server::ServerConfig::from_toml(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

pub fn serve(g: &Global, a: ServeArgs) -> Result<()> {
    let mut cfg = server_config(g)?;
    if let Some(l) = a.listen {
        cfg.listen = l;
    }
    cfg.access_log |= a.access_log;
    let addr: SocketAddr = match cfg.listen.to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(a)) => a,
        Ok(None) => return app::usage(format!("listen: `{}` resolves to no address", cfg.listen)),
        Err(e) => return app::usage(format!("listen: `{}`: {e} (use HOST:PORT)", cfg.listen)),
    };
    let mode = if a.no_auth {
        if !addr.ip().is_loopback() {
            return app::usage(format!(
                "--no-auth: refused on {addr}; without tokens the server may only listen on a loopback address (127.0.0.1 or ::1)"
            ));
        }
        eprintln!(
            "strata serve: WARNING: --no-auth: every request on {addr} can read, change and delete every memory"
        );
        strata_server::AuthMode::Off
    } else {
        if cfg.tokens.is_empty() {
            return app::usage(
                "no tokens configured: add [[server.tokens]] to strata.toml (`strata token new --name N --scope S --access read_write` prints them), or run with --no-auth on loopback",
            );
        }
        strata_server::AuthMode::Tokens
    };
    let engine = app::open(g)?;
    app::say_if_model_missing(g, &engine);
    let shared = strata_server::Shared::new(engine, &cfg, mode)?;
    // Tokens are reloaded when the file changes (or on SIGHUP).
    let watched = match app::config_path(g)? {
        Some(p) if mode == strata_server::AuthMode::Tokens && !is_yaml(&p) => Some(p),
        _ => None,
    };
    runtime()?.block_on(async move {
        let watcher = watched.map(|p| tokio::spawn(strata_server::watch_config(shared.clone(), p)));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        let local = listener.local_addr()?;
        eprintln!("strata serve: listening on http://{local} (MCP at http://{local}/mcp)");
        strata_server::serve(listener, shared, strata_server::shutdown_signal()).await?;
        // It writes the last-used times one last time, then ends.
        if let Some(w) = watcher {
            let _ = w.await;
        }
        eprintln!("strata serve: stopped");
        Ok(())
    })
}

pub fn mcp(g: &Global, a: McpArgs) -> Result<()> {
    let mut cfg = server_config(g)?;
    if a.project.is_some() {
        cfg.mcp.project = a.project;
    }
    if a.session.is_some() {
        cfg.mcp.session = a.session;
    }
    let engine = app::open(g)?;
    app::say_if_model_missing(g, &engine);
    if a.ephemeral {
        let scope = match &cfg.mcp.project {
            Some(p) => Some(strata::Scope::project(p)?),
            None => None,
        };
        let s = engine.open_ephemeral_session(cfg.mcp.session.as_deref(), scope)?;
        eprintln!(
            "strata mcp: session {} is ephemeral: what the tools remember into it stays in this process",
            s.id
        );
        cfg.mcp.session = Some(s.id);
    }
    let shared = strata_server::Shared::new(engine, &cfg, strata_server::AuthMode::Off)?;
    runtime()?.block_on(strata_server::serve_stdio(shared))?;
    Ok(())
}

pub fn token(g: &Global, c: TokenCmd) -> Result<()> {
    match c {
        TokenCmd::New(a) => token_new(g, a),
        TokenCmd::List => token_list(g),
        TokenCmd::Revoke(a) => token_revoke(g, a),
    }
}

fn token_new(g: &Global, a: TokenNewArgs) -> Result<()> {
    let access: strata_server::Access = match a.access.parse() {
        Ok(x) => x,
        Err(e) => return app::usage(format!("--access: {e}")),
    };
    for s in &a.scopes {
        if let Err(e) = strata::Scope::parse(s) {
            return app::usage(format!("--scope: {e}"));
        }
    }
    let token = strata_server::new_token();
    let expires_at = match a.expires_in.as_deref().map(strata::parse_ttl) {
        None => None,
        Some(Ok(d)) if d.is_positive() => Some(jiff::Timestamp::now() + d),
        Some(Ok(_)) => return app::usage("--expires-in: must be longer than zero"),
        Some(Err(e)) => {
            return app::usage(format!(
                "--expires-in: {}",
                e.to_string().trim_start_matches("ttl: ")
            ));
        }
    };
    if a.rate_limit == Some(0) {
        return app::usage("--rate-limit: must be at least 1 request a minute");
    }
    let entry = strata_server::TokenConfig {
        name: a.name.clone(),
        secret_sha256: strata_server::sha256_hex(&token),
        scopes: a.scopes.clone(),
        access,
        expires_at,
        rate_limit_per_minute: a.rate_limit,
    };
    strata_server::Tokens::from_config(std::slice::from_ref(&entry))?;
    let access = access.as_str();
    // The lines as TOML writes them (quoting and escapes included).
    let mut lines = toml_edit::DocumentMut::new();
    {
        let mut t = toml_edit::Table::new();
        t["name"] = toml_edit::value(entry.name.as_str());
        t["secret_sha256"] = toml_edit::value(entry.secret_sha256.as_str());
        t["scopes"] = toml_edit::value(toml_edit::Array::from_iter(entry.scopes.iter()));
        t["access"] = toml_edit::value(access);
        if let Some(at) = expires_at {
            t["expires_at"] = toml_edit::value(at.to_string());
        }
        if let Some(n) = a.rate_limit {
            t["rate_limit_per_minute"] = toml_edit::value(i64::from(n));
        }
        let mut tokens = toml_edit::ArrayOfTables::new();
        tokens.push(t);
        let mut server = toml_edit::Table::new();
        server.set_implicit(true);
        server.insert("tokens", toml_edit::Item::ArrayOfTables(tokens));
        lines.insert("server", toml_edit::Item::Table(server));
    }
    let snippet = lines.to_string();
    let written = if a.write {
        let path = writable_config(g)?;
        append_token(&path, &a.name, &snippet)?;
        Some(path)
    } else {
        None
    };
    if g.json {
        return output::json(&serde_json::json!({
            "token": token,
            "name": a.name,
            "secret_sha256": entry.secret_sha256,
            "scopes": a.scopes,
            "access": access,
            "expires_at": expires_at,
            "rate_limit_per_minute": a.rate_limit,
            "config": snippet,
            "written_to": written.as_ref().map(|p| p.display().to_string()),
        }));
    }
    match written {
        Some(path) => output::line(format!(
            "token (shown once; store it where the client reads it):\n\n  {token}\n\nadded token `{}` ({access} on {}) to {} (its SHA-256, not the token); a running `strata serve` accepts it within a second",
            a.name,
            a.scopes.join(", "),
            path.display()
        )),
        None => output::line(format!(
            "token (shown once; store it where the client reads it):\n\n  {token}\n\nadd to strata.toml (or run again with --write):\n\n{snippet}"
        )),
    }
}

fn token_list(g: &Global) -> Result<()> {
    let cfg = server_config(g)?;
    let used = match app::config_path(g)? {
        Some(path) => strata_server::read_last_used(&strata_server::last_used_path(&path)),
        None => Default::default(),
    };
    if g.json {
        let list: Vec<serde_json::Value> = cfg
            .tokens
            .iter()
            .map(|t| {
                serde_json::json!({
                    "name": t.name,
                    "access": t.access.as_str(),
                    "scopes": t.scopes,
                    "expires_at": t.expires_at,
                    "rate_limit_per_minute": t.rate_limit_per_minute,
                    "last_used_at": used.get(&t.name),
                })
            })
            .collect();
        return output::json(&list);
    }
    if cfg.tokens.is_empty() {
        return output::line(
            "no tokens configured (`strata token new --name N --scope S --write` adds one)",
        );
    }
    let now = jiff::Timestamp::now();
    // To the minute, in UTC: `2026-11-23 17:50Z`.
    let minute = |at: jiff::Timestamp| at.strftime("%Y-%m-%d %H:%MZ").to_string();
    let rows: Vec<Vec<String>> = cfg
        .tokens
        .iter()
        .map(|t| {
            let expires = match t.expires_at {
                Some(at) if at <= now => format!("{} (expired)", minute(at)),
                Some(at) => minute(at),
                None => "never".into(),
            };
            vec![
                t.name.clone(),
                t.access.as_str().to_string(),
                t.scopes.join(", "),
                expires,
                t.rate_limit_per_minute
                    .map_or("-".into(), |n| format!("{n}/min")),
                used.get(&t.name).map_or("never".into(), |at| minute(*at)),
            ]
        })
        .collect();
    output::table(
        &["NAME", "ACCESS", "SCOPES", "EXPIRES", "RATE", "LAST USED"],
        &rows,
    )
}

fn token_revoke(g: &Global, a: TokenRevokeArgs) -> Result<()> {
    let Some(path) = app::config_path(g)? else {
        anyhow::bail!(
            "token `{}`: no configuration file found (looked for --config, STRATA_CONFIG, ./strata.toml, the user config dir), so no token to revoke",
            a.name
        );
    };
    let mut scopes = String::new();
    edit_config(&path, |doc| {
        let tokens = server_tokens(doc, &path)?;
        let names: Vec<String> = tokens
            .iter()
            .map(|t| {
                t.get("name")
                    .and_then(|n| n.as_str())
                    .unwrap_or("")
                    .to_string()
            })
            .collect();
        let Some(i) = names.iter().position(|n| *n == a.name) else {
            let known = if names.is_empty() {
                "it has none".to_string()
            } else {
                format!("it has {}", names.join(", "))
            };
            anyhow::bail!(
                "token `{}`: no such token in {} ({known}); nothing changed",
                a.name,
                path.display()
            );
        };
        let gone = tokens.remove(i);
        scopes = gone
            .get("scopes")
            .and_then(|s| s.as_array())
            .map(|s| {
                s.iter()
                    .filter_map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        Ok(())
    })?;
    if g.json {
        return output::json(&serde_json::json!({
            "revoked": a.name,
            "config_file": path.display().to_string(),
        }));
    }
    output::line(format!(
        "revoked token `{}` ({scopes}) in {}; a running `strata serve` refuses it within a second",
        a.name,
        path.display()
    ))
}

/// Appends a token's `[[server.tokens]]` lines to `path` (created when
/// missing): the file keeps every byte it had. Refused, with the file
/// unchanged, when the name is taken or the result would not be a valid
/// configuration.
fn append_token(path: &Path, name: &str, snippet: &str) -> Result<()> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let before = strata_server::ServerConfig::from_toml(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}; nothing changed", path.display()))?;
    if before.tokens.iter().any(|t| t.name == name) {
        return app::usage(format!(
            "--name: {} already has a token named `{name}` (`strata token revoke {name}` removes it); nothing changed",
            path.display()
        ));
    }
    let mut new = text;
    if !new.is_empty() && !new.ends_with('\n') {
        new.push('\n');
    }
    if !new.is_empty() {
        new.push('\n');
    }
    new.push_str(snippet);
    replace_config(path, &new)
}

/// The file `token new --write` adds to: `--config` (created when it does
/// not exist yet), else the configuration found, else `./strata.toml`.
fn writable_config(g: &Global) -> Result<PathBuf> {
    let path = match &g.config {
        Some(p) => p.clone(),
        None => app::config_path(g)?.unwrap_or_else(|| PathBuf::from("strata.toml")),
    };
    if is_yaml(&path) {
        return app::usage(format!(
            "--write: {} is YAML; tokens live in a strata.toml's [server] table (name one with --config)",
            path.display()
        ));
    }
    Ok(path)
}

fn is_yaml(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"))
}

/// `server.tokens` of `doc` as an array of tables (an empty one when the
/// file has none).
fn server_tokens<'d>(
    doc: &'d mut toml_edit::DocumentMut,
    path: &Path,
) -> Result<&'d mut toml_edit::ArrayOfTables> {
    let server = doc.entry("server").or_insert_with(|| {
        let mut t = toml_edit::Table::new();
        t.set_implicit(true);
        toml_edit::Item::Table(t)
    });
    let Some(server) = server.as_table_like_mut() else {
        anyhow::bail!("{}: `server` is not a table", path.display());
    };
    let tokens = server
        .entry("tokens")
        .or_insert(toml_edit::Item::ArrayOfTables(Default::default()));
    match tokens.as_array_of_tables_mut() {
        Some(t) => Ok(t),
        None => anyhow::bail!(
            "{}: server.tokens is not written as [[server.tokens]] tables; edit it by hand",
            path.display()
        ),
    }
}

/// Reads `path` (empty when it does not exist), applies `change`, checks
/// that the result is still a valid configuration and replaces the file in
/// one rename. On any error the file is left as it was.
fn edit_config(
    path: &Path,
    change: impl FnOnce(&mut toml_edit::DocumentMut) -> Result<()>,
) -> Result<()> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    change(&mut doc)?;
    replace_config(path, &doc.to_string())
}

/// Replaces `path` with `new` in one rename, once `new` reads as a valid
/// `[server]` configuration.
fn replace_config(path: &Path, new: &str) -> Result<()> {
    strata_server::ServerConfig::from_toml(new)
        .map_err(|e| anyhow::anyhow!("{}: {e}; nothing changed", path.display()))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("writing beside {}", path.display()))?;
    if let Ok(meta) = std::fs::metadata(path) {
        tmp.as_file().set_permissions(meta.permissions())?;
    }
    tmp.write_all(new.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path)
        .with_context(|| format!("replacing {}", path.display()))?;
    Ok(())
}
