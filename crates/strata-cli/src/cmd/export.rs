//! `strata export [--view S]… [--user-data] > out.jsonl`

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::app::{self, Global};

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Scopes to export (repeatable; default: every scope).
    #[arg(long = "view", value_name = "SCOPE")]
    pub views: Vec<String>,
    /// Only this session.
    #[arg(long)]
    pub session: Option<String>,
    /// Everything about the view or session: sensitive, archived and history included.
    #[arg(long)]
    pub user_data: bool,
    /// Include sensitive memories.
    #[arg(long)]
    pub include_sensitive: bool,
    /// Include archived memories.
    #[arg(long)]
    pub include_archived: bool,
    /// Include earlier versions.
    #[arg(long)]
    pub include_history: bool,
    /// Write here instead of standard output.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

pub fn run(g: &Global, a: ExportArgs) -> Result<()> {
    let view = if a.views.is_empty() {
        None
    } else {
        Some(app::view(&a.views)?)
    };
    if a.user_data && view.is_none() && a.session.is_none() {
        return app::usage(
            "--user-data: name the scope subtree (--view project/acme/**) or --session to export",
        );
    }
    let req = if a.user_data {
        strata::Export::user_data(view, a.session.clone())
    } else {
        strata::Export {
            view,
            session: a.session.clone(),
            include_sensitive: a.include_sensitive,
            include_archived: a.include_archived,
            include_history: a.include_history,
        }
    };
    let e = app::open(g)?;
    let mut out: Box<dyn Write> = match &a.output {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let bar = if a.output.is_some() {
        crate::output::count_bar()
    } else {
        indicatif::ProgressBar::hidden()
    };
    let r = e.export(&req, &mut out, &mut |n| bar.set_position(n as u64));
    bar.finish_and_clear();
    let r = match r {
        Err(strata::Error::Io { source, .. })
            if source.kind() == std::io::ErrorKind::BrokenPipe =>
        {
            return Ok(());
        }
        other => other?,
    };
    drop(out);
    let summary = format!(
        "exported {} memories ({} archived){}",
        r.memories,
        r.archived,
        if r.sensitive_skipped > 0 {
            format!(
                ", left out {} sensitive (use --include-sensitive)",
                r.sensitive_skipped
            )
        } else {
            String::new()
        }
    );
    eprintln!("{summary}");
    Ok(())
}
