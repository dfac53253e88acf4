//! `strata sync DIR [--project P]`

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The folder holding CLAUDE.md and .memory/.
    pub dir: PathBuf,
    /// Project to sync into (default: the folder's name).
    #[arg(long)]
    pub project: Option<String>,
    /// Report what would change without writing.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(g: &Global, a: SyncArgs) -> Result<()> {
    let project = match &a.project {
        Some(p) => p.clone(),
        None => {
            let abs = a
                .dir
                .canonicalize()
                .with_context(|| format!("{} is not a readable directory", a.dir.display()))?;
            let name = abs
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if strata::Scope::project(&name).is_err() {
                return app::usage(format!(
                    "--project: the folder name `{name}` is not a valid scope segment; name the project"
                ));
            }
            name
        }
    };
    let e = app::open(g)?;
    let r = e.sync_dir(&a.dir, &project, a.dry_run)?;
    // What was written gets its vectors now, as one `remember` does: the
    // files are then found by meaning at once, not after `strata embed`.
    let wrote = !r.added.is_empty() || !r.updated.is_empty();
    let embedded = if !r.dry_run && wrote {
        match e.embed_pending(None, usize::MAX) {
            Ok(n) => n,
            Err(err) => {
                eprintln!(
                    "strata: warning: synced without vectors ({err}); run `strata embed` later"
                );
                0
            }
        }
    } else {
        0
    };
    if g.json {
        return output::json(&r);
    }
    let verb = if r.dry_run { "would sync" } else { "synced" };
    output::line(format!(
        "{verb} {} into {}: {} added, {} updated, {} unchanged, {} removed, {} skipped",
        a.dir.display(),
        r.project,
        r.added.len(),
        r.updated.len(),
        r.unchanged,
        r.removed.len(),
        r.skipped.len()
    ))?;
    for (label, list) in [
        ("added", &r.added),
        ("updated", &r.updated),
        ("removed", &r.removed),
    ] {
        for k in list.iter() {
            output::line(format!("  {label:<8} {k}"))?;
        }
    }
    for (k, why) in &r.skipped {
        output::line(format!("  skipped  {k}: {why}"))?;
    }
    if embedded > 0 {
        output::line(format!(
            "embedded {}",
            output::plural(embedded, "memory", "memories")
        ))?;
    }
    Ok(())
}
