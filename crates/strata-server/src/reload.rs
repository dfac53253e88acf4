//! Tokens change without a restart: the configuration file is read again
//! when it changes (checked every [`POLL`]) and on `SIGHUP`, and its
//! `[[server.tokens]]` replace the server's. A file that does not read as a
//! valid configuration changes nothing (the error goes to the log).
//!
//! The same task writes the tokens' last-used times beside the file
//! ([`crate::usage::state_path`]) when they changed, at most once a
//! [`POLL`], and once more when the server stops.
//!
//! Only the tokens are reloaded: the listen address, limits and hosts
//! still need a restart.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::{ServerConfig, Shared};

/// How often the file is checked: a revoked token is refused within this.
pub const POLL: Duration = Duration::from_millis(250);

/// Watches `config` for the life of the server (until `shared.shutdown`).
pub async fn watch_config(shared: Arc<Shared>, config: PathBuf) {
    let state = crate::usage::state_path(&config);
    let mut seen = std::fs::read(&config).ok();
    let mut hangup = Hangups::new();
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let forced = tokio::select! {
            () = shared.shutdown.cancelled() => break,
            _ = tick.tick() => false,
            _ = hangup.recv() => true,
        };
        let now = std::fs::read(&config).ok();
        if forced || now != seen {
            reload(&shared, &config, now.as_deref());
            seen = now;
        }
        flush(&shared, &state);
    }
    flush(&shared, &state);
}

fn reload(shared: &Shared, config: &std::path::Path, text: Option<&[u8]>) {
    let path = config.display();
    let Some(text) = text else {
        eprintln!("strata serve: cannot read {path}; keeping the tokens as they were");
        return;
    };
    let parsed = std::str::from_utf8(text)
        .map_err(|e| crate::ConfigError(e.to_string()))
        .and_then(ServerConfig::from_toml)
        .and_then(|cfg| shared.reload_tokens(&cfg.tokens));
    match parsed {
        Ok(n) => eprintln!("strata serve: tokens reloaded from {path} ({n} configured)"),
        Err(e) => eprintln!("strata serve: {path}: {e}; keeping the tokens as they were"),
    }
}

fn flush(shared: &Shared, state: &std::path::Path) {
    if let Some(times) = shared.usage.take_changed()
        && let Err(e) = crate::usage::write_state(state, &times)
    {
        eprintln!(
            "strata serve: writing the tokens' last-used times to {}: {e}",
            state.display()
        );
    }
}

/// Resolves at each `SIGHUP` (never where there are no signals).
#[cfg(unix)]
struct Hangups(Option<tokio::signal::unix::Signal>);

#[cfg(unix)]
impl Hangups {
    fn new() -> Hangups {
        use tokio::signal::unix::{SignalKind, signal};
        Hangups(signal(SignalKind::hangup()).ok())
    }

    async fn recv(&mut self) {
        if let Some(s) = &mut self.0
            && s.recv().await.is_some()
        {
            return;
        }
        // No handler, or it ended: wait forever rather than spin.
        self.0 = None;
        std::future::pending::<()>().await;
    }
}

#[cfg(not(unix))]
struct Hangups;

#[cfg(not(unix))]
impl Hangups {
    fn new() -> Hangups {
        Hangups
    }

    async fn recv(&mut self) {
        std::future::pending::<()>().await;
    }
}
