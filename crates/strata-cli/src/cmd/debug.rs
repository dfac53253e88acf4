//! Hidden tools the reliability tests drive (not a stable interface).

use std::io::Write;

use anyhow::Result;
use clap::Subcommand;

use crate::app::{self, Global};

#[derive(Debug, Subcommand)]
pub enum DebugCmd {
    /// Write COUNT memories one per transaction, printing each id once its
    /// commit returned (the acknowledgement the crash tests check).
    WriteStream {
        /// Scope to write into.
        #[arg(long)]
        scope: String,
        /// How many writes (0 = until killed).
        #[arg(long, default_value_t = 0)]
        count: u64,
        /// Text prefix.
        #[arg(long, default_value = "stream")]
        prefix: String,
    },
    /// Print `PRAGMA integrity_check`.
    Integrity,
}

pub fn run(g: &Global, c: DebugCmd) -> Result<()> {
    match c {
        DebugCmd::WriteStream {
            scope,
            count,
            prefix,
        } => {
            let mut cfg = app::resolve_config(g)?;
            cfg.max_items = 0;
            let e = strata::Engine::open(cfg)?;
            let scope = strata::Scope::parse(&scope)?;
            let mut out = std::io::stdout().lock();
            let mut i = 0u64;
            while count == 0 || i < count {
                let m = e.remember(strata::NewMemory::new(
                    scope.clone(),
                    format!("{prefix} write number {i}"),
                ))?;
                writeln!(out, "{}", m.id)?;
                out.flush()?;
                i += 1;
            }
            Ok(())
        }
        DebugCmd::Integrity => {
            let cfg = app::resolve_config(g)?;
            let strata::StoreConfig::Sqlite { path, options } = cfg.store else {
                anyhow::bail!("integrity: not a SQLite store");
            };
            let s = strata::SqliteStore::open(path, options)?;
            let r = s.integrity_check()?;
            println!("{r}");
            if r != "ok" {
                anyhow::bail!("integrity check failed");
            }
            Ok(())
        }
    }
}
