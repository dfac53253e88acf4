//! `strata migrate --from PATH|URL --to PATH|URL`

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The store to copy: a SQLite file or a postgres:// URL (unchanged).
    #[arg(long, value_name = "PATH|URL")]
    pub from: PathBuf,
    /// The store to fill: a SQLite file or a postgres:// URL; it must be
    /// empty (a new file, a new database or schema).
    #[arg(long, value_name = "PATH|URL")]
    pub to: PathBuf,
}

pub fn run(g: &Global, a: MigrateArgs) -> Result<()> {
    if a.from == a.to {
        return app::usage("--from and --to name the same store");
    }
    let cfg = app::resolve_config(g)?;
    let mut from_cfg = app::store_at(&cfg.store, &a.from, "--from")?;
    let mut to_cfg = app::store_at(&cfg.store, &a.to, "--to")?;
    if let strata::StoreConfig::Sqlite { path, .. } = &from_cfg
        && !path.exists()
    {
        return app::usage(format!("--from: {} does not exist", path.display()));
    }
    app::with_password(&mut from_cfg);
    app::with_password(&mut to_cfg);
    app::with_key(&mut from_cfg)?;
    app::with_key(&mut to_cfg)?;
    let from = strata::open_store(&from_cfg)
        .with_context(|| format!("opening {}", from_cfg.describe()))?;
    let to =
        strata::open_store(&to_cfg).with_context(|| format!("opening {}", to_cfg.describe()))?;
    let bar = if g.json {
        indicatif::ProgressBar::hidden()
    } else {
        output::total_bar(0)
    };
    let started = std::time::Instant::now();
    let d = strata::copy_store(&*from, &*to, &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })
    .with_context(|| format!("migrating {} to {}", from_cfg.describe(), to_cfg.describe()))?;
    bar.finish_and_clear();
    if g.json {
        return output::json(&serde_json::json!({
            "from": from_cfg.describe(),
            "to": to_cfg.describe(),
            "verified": d,
            "seconds": started.elapsed().as_secs_f64(),
        }));
    }
    output::line(format!(
        "copied {} memories, {} archived, {} history versions, {} sessions, {} context logs, \
         {} audit entries from {} to {} in {:.1} s; verified: counts and sha256 {} match",
        d.memories,
        d.archived,
        d.history,
        d.sessions,
        d.context_logs,
        d.audit_entries,
        from_cfg.describe(),
        to_cfg.describe(),
        started.elapsed().as_secs_f64(),
        &d.sha256[..16]
    ))
}
