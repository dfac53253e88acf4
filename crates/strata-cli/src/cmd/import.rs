//! `strata import FILE|-`

use std::io::BufReader;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// JSONL file from `strata export` (`-` for standard input).
    pub file: PathBuf,
    /// What to do with ids that exist: error (default), skip, replace.
    #[arg(long, default_value = "error")]
    pub on_conflict: String,
}

pub fn run(g: &Global, a: ImportArgs) -> Result<()> {
    let on_conflict = match a.on_conflict.as_str() {
        "error" => strata::OnConflict::Error,
        "skip" => strata::OnConflict::Skip,
        "replace" => strata::OnConflict::Replace,
        other => {
            return crate::app::usage(format!(
                "--on-conflict: `{other}` is not one of error, skip, replace"
            ));
        }
    };
    let e = app::open(g)?;
    let (mut input, len): (Box<dyn std::io::BufRead>, Option<u64>) = if a.file.as_os_str() == "-" {
        (Box::new(BufReader::new(std::io::stdin())), None)
    } else {
        let f = std::fs::File::open(&a.file)
            .with_context(|| format!("opening {}", a.file.display()))?;
        let len = f.metadata().ok().map(|m| m.len());
        (Box::new(BufReader::new(f)), len)
    };
    let bar = match len {
        Some(l) if !g.json => crate::output::bytes_bar(l),
        _ => indicatif::ProgressBar::hidden(),
    };
    let r = e.import(&mut input, on_conflict, &mut |n| bar.set_position(n))?;
    bar.finish_and_clear();
    if g.json {
        return output::json(&r);
    }
    output::line(format!(
        "imported {} ({} archived, {} earlier versions), skipped {}, replaced {}",
        output::plural(r.imported, "memory", "memories"),
        r.archived,
        r.history,
        r.skipped,
        r.replaced
    ))
}
