//! `strata ui`: the web inspector on a loopback port for the local user,
//! entered through a one-time login link printed on stdout.

use std::io::Write as _;
use std::net::SocketAddr;

use anyhow::{Context, Result};
use clap::Args;

use crate::app::{self, Global};

#[derive(Debug, Args)]
pub struct UiArgs {
    /// Loopback address to listen on (default: a free port on 127.0.0.1).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:0")]
    pub listen: String,
}

/// Serves `strata serve`'s routes (the configured tokens, `/v1` included)
/// on loopback and prints a link that signs one browser in with every
/// scope, as the CLI itself runs; the link works once and for ten
/// minutes. Opens no browser.
pub fn ui(g: &Global, a: UiArgs) -> Result<()> {
    let addr: SocketAddr = match a.listen.parse() {
        Ok(a) => a,
        Err(e) => return app::usage(format!("listen: `{}`: {e} (use HOST:PORT)", a.listen)),
    };
    if !addr.ip().is_loopback() {
        return app::usage(format!(
            "listen: `{addr}` is not a loopback address; `strata ui` signs in as the local user, so it listens on 127.0.0.1 or ::1 only (use `strata serve` with tokens to serve others)"
        ));
    }
    let mut cfg = crate::cmd::serve::server_config(g)?;
    cfg.listen = a.listen;
    let engine = app::open(g)?;
    let shared = strata_server::Shared::new(engine, &cfg, strata_server::AuthMode::Tokens)?;
    let code = shared.inspector.login_code(strata_server::Grant::local());
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async move {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("listening on {addr}"))?;
            let local = listener.local_addr()?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "http://{local}/ui/login/{code}")?;
            out.flush()?;
            drop(out);
            eprintln!(
                "strata ui: open the link above in a browser (it signs in once, within 10 minutes); Ctrl-C stops"
            );
            strata_server::serve(listener, shared, strata_server::shutdown_signal()).await?;
            Ok(())
        })
}
