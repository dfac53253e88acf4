//! `strata serve`, `strata mcp` and `strata token new`: the HTTP and MCP
//! front ends (crate `strata-server`) started from the CLI's configuration.

use std::net::{SocketAddr, ToSocketAddrs};

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
}

#[derive(Debug, Subcommand)]
pub enum TokenCmd {
    /// Print a fresh token once, with the `[[server.tokens]]` lines to paste.
    New(TokenNewArgs),
}

#[derive(Debug, Args)]
pub struct TokenNewArgs {
    /// A name for logs and metrics.
    #[arg(long)]
    pub name: String,
    /// A scope prefix the token may use (repeatable): `project/acme` allows
    /// `project/acme` and everything below it.
    #[arg(long = "scope", value_name = "SCOPE", required = true)]
    pub scopes: Vec<String>,
    /// `read` or `read_write`.
    #[arg(long, default_value = "read")]
    pub access: String,
}

/// `[server]` of the configuration file (defaults without one).
fn server_config(g: &Global) -> Result<strata_server::ServerConfig> {
    let Some(path) = app::config_path(g)? else {
        return Ok(strata_server::ServerConfig::default());
    };
    let yaml = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"));
    if yaml {
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
    let shared = strata_server::Shared::new(engine, &cfg, mode)?;
    runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        let local = listener.local_addr()?;
        eprintln!("strata serve: listening on http://{local} (MCP at http://{local}/mcp)");
        strata_server::serve(listener, shared, strata_server::shutdown_signal()).await?;
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
    let shared = strata_server::Shared::new(engine, &cfg, strata_server::AuthMode::Off)?;
    runtime()?.block_on(strata_server::serve_stdio(shared))?;
    Ok(())
}

pub fn token(g: &Global, c: TokenCmd) -> Result<()> {
    let TokenCmd::New(a) = c;
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
    let entry = strata_server::TokenConfig {
        name: a.name.clone(),
        secret_sha256: strata_server::sha256_hex(&token),
        scopes: a.scopes.clone(),
        access,
    };
    strata_server::Tokens::from_config(std::slice::from_ref(&entry))?;
    let access = match access {
        strata_server::Access::Read => "read",
        strata_server::Access::ReadWrite => "read_write",
    };
    let scopes: Vec<String> = a.scopes.iter().map(|s| format!("{s:?}")).collect();
    let snippet = format!(
        "[[server.tokens]]\nname = {:?}\nsecret_sha256 = \"{}\"\nscopes = [{}]\naccess = \"{access}\"\n",
        a.name,
        entry.secret_sha256,
        scopes.join(", ")
    );
    if g.json {
        return output::json(&serde_json::json!({
            "token": token,
            "name": a.name,
            "secret_sha256": entry.secret_sha256,
            "scopes": a.scopes,
            "access": access,
            "config": snippet,
        }));
    }
    output::line(format!(
        "token (shown once; store it where the client reads it):\n\n  {token}\n\nadd to strata.toml:\n\n{snippet}"
    ))
}
