//! `strata export [--view S]… [--no-sensitive] [--no-archived] [--no-history] > out.jsonl`
//!
//! A full backup by default: sensitive and archived memories and every
//! earlier version are in it, so `strata import` into an empty store gives
//! the same store back.

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
    /// Everything about the view or session (a data-subject export; needs
    /// --view or --session): sensitive, archived and history included.
    #[arg(long)]
    pub user_data: bool,
    /// Leave sensitive memories (and sensitive earlier versions) out.
    #[arg(long, conflicts_with = "user_data")]
    pub no_sensitive: bool,
    /// Leave archived memories out.
    #[arg(long, conflicts_with = "user_data")]
    pub no_archived: bool,
    /// Leave earlier versions out.
    #[arg(long, conflicts_with = "user_data")]
    pub no_history: bool,
    /// Write here instead of standard output.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// From an encrypted store, write plain JSONL instead of a stream
    /// sealed with the store's key.
    #[arg(long)]
    pub plain: bool,
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
            include_sensitive: !a.no_sensitive,
            include_archived: !a.no_archived,
            include_history: !a.no_history,
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
    // An encrypted store's export is sealed with its key (XChaCha20-
    // Poly1305), unless asked for plain JSONL.
    let key = app::store_key(&e).filter(|_| !a.plain);
    let r = match key {
        #[cfg(feature = "encryption")]
        Some(k) => strata::Sealer::new(&mut out, &k).and_then(|mut s| {
            let r = e.export(&req, &mut s, &mut |n| bar.set_position(n as u64))?;
            s.finish()?;
            Ok(r)
        }),
        #[cfg(not(feature = "encryption"))]
        Some(_) => unreachable!("a store with a key opens only with the encryption feature"),
        None => e.export(&req, &mut out, &mut |n| bar.set_position(n as u64)),
    };
    bar.finish_and_clear();
    let r = match r {
        Err(strata::Error::Io { source, .. })
            if source.kind() == std::io::ErrorKind::BrokenPipe =>
        {
            return Ok(());
        }
        other => other?,
    };
    app::audit(
        &e,
        "export",
        app::scopes(a.views.iter().chain(a.session.iter())),
        r.memories,
        Vec::new(),
    )?;
    drop(out);
    let mut left_out = Vec::new();
    for (n, what, flag) in [
        (r.sensitive_skipped, "sensitive", "--no-sensitive"),
        (r.archived_skipped, "archived", "--no-archived"),
        (r.history_skipped, "earlier versions", "--no-history"),
    ] {
        if n > 0 {
            left_out.push(format!("{n} {what} (drop {flag} to include them)"));
        }
    }
    let summary = format!(
        "exported {} ({} archived, {} earlier {}){}",
        crate::output::plural(r.memories, "memory", "memories"),
        r.archived,
        r.history,
        if r.history == 1 {
            "version"
        } else {
            "versions"
        },
        if left_out.is_empty() {
            String::new()
        } else {
            format!("; left out {}", left_out.join(", "))
        }
    );
    eprintln!("{summary}");
    Ok(())
}
