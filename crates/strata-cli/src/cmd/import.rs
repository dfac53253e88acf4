//! `strata import FILE|-` (JSONL), `strata import --from FORMAT FILE`
//! (another tool's memories; see `import_from.rs`).

use std::io::BufReader;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// JSONL file from `strata export` (`-` for standard input); with
    /// `--from`, the other tool's file (a folder for `markdown`).
    pub file: PathBuf,
    /// What to do with ids that exist: error (default), skip, replace.
    #[arg(long, default_value = "error", conflicts_with = "from")]
    pub on_conflict: String,
    /// Read another tool's export instead of JSONL (docs/formats.md).
    #[arg(long, value_name = "FORMAT", value_parser = crate::cmd::import_from::FORMATS)]
    pub from: Option<String>,
    /// With --from: the scope to import into (default: the format's).
    #[arg(long, requires = "from")]
    pub scope: Option<String>,
    /// With --from: report what would be added, write nothing.
    #[arg(long, requires = "from")]
    pub dry_run: bool,
}

pub fn run(g: &Global, a: ImportArgs) -> Result<()> {
    if let Some(from) = &a.from {
        return crate::cmd::import_from::run(g, from, &a.file, a.scope.as_deref(), a.dry_run);
    }
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
    let (mut input, len): (Box<dyn std::io::BufRead>, Option<u64>) = if a.file.as_os_str() == "-" {
        (Box::new(BufReader::new(std::io::stdin())), None)
    } else {
        let f = std::fs::File::open(&a.file)
            .with_context(|| format!("opening {}", a.file.display()))?;
        let len = f.metadata().ok().map(|m| m.len());
        (Box::new(BufReader::new(f)), len)
    };
    // An export sealed with a store's key (see `strata export`) opens
    // with this store's key, whole, before anything is imported (or the
    // store is even opened).
    if strata::is_sealed(input.fill_buf().context("reading the import")?) {
        let Some(key) = app::config_key(&app::resolve_config(g)?) else {
            anyhow::bail!(
                "{} is an export sealed with an encrypted store's key: give that key in \
                 STRATA_KEY (or [store] key_file) to import it",
                a.file.display()
            );
        };
        let plain = strata::open_sealed(&mut input, &key)?;
        input = Box::new(std::io::Cursor::new(plain));
    }
    let e = app::open(g)?;
    let bar = match len {
        Some(l) if !g.json => crate::output::bytes_bar(l),
        _ => indicatif::ProgressBar::hidden(),
    };
    let r = match e.import(&mut input, on_conflict, &mut |n| bar.set_position(n)) {
        Ok(r) => r,
        // A backup imported into the store it came from (or one that
        // already took it): say what to do about it.
        Err(err @ strata::Error::DuplicateId(_)) => {
            bar.finish_and_clear();
            return Err(anyhow::Error::new(err).context(format!(
                "nothing imported from {}: the store already holds some of its memories \
                 (`--on-conflict skip` keeps those and imports the rest, \
                 `--on-conflict replace` overwrites them)",
                a.file.display()
            )));
        }
        Err(err) => return Err(err.into()),
    };
    app::audit(&e, "import", Vec::new(), r.imported, Vec::new())?;
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
