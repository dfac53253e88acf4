//! `strata encrypt`, `strata decrypt`, `strata rekey`: a SQLite store's
//! encryption at rest (feature `encryption` of the strata crate). Keys come
//! from the environment or key files, never from flags.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Args)]
pub struct RekeyArgs {
    /// A file holding the new key (default: the environment variable
    /// STRATA_NEW_KEY).
    #[arg(long, value_name = "FILE")]
    pub new_key_file: Option<PathBuf>,
}

/// Which conversion to run.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    Encrypt,
    Decrypt,
    Rekey,
}

pub fn run(g: &Global, op: Op, rekey: Option<RekeyArgs>) -> Result<()> {
    let cfg = app::resolve_config(g)?;
    let strata::StoreConfig::Sqlite { path, options } = &cfg.store else {
        return app::usage(format!(
            "{}: encryption at rest is for SQLite stores; `{}` is not one (a PostgreSQL server encrypts its own disk)",
            op.word(),
            cfg.store.describe()
        ));
    };
    let Some(key) = options.key.clone() else {
        return app::usage(format!(
            "{}: no key: set STRATA_KEY, or name a file in `[store] key_file` (never a flag)",
            op.word()
        ));
    };
    let (from, to) = match op {
        Op::Encrypt => (None, Some(key)),
        Op::Decrypt => (Some(key), None),
        Op::Rekey => {
            let new = match rekey.and_then(|a| a.new_key_file) {
                Some(f) => strata::StoreKey::from_file(&f)?,
                None => strata::StoreKey::from_env("STRATA_NEW_KEY")?.ok_or_else(|| {
                    app::UsageError(
                        "rekey: no new key: set STRATA_NEW_KEY or pass --new-key-file FILE".into(),
                    )
                })?,
            };
            (Some(key), Some(new))
        }
    };
    let started = std::time::Instant::now();
    // The cold tier's segments go with the file, whether or not the tier
    // is on now (segments left from when it was are memories too).
    let cold = cfg.cold.location_for(&cfg.store)?;
    let done = strata::convert_store(path, Some(&cold), from.as_ref(), to.as_ref())?;
    if g.json {
        return output::json(&serde_json::json!({
            "store": path.display().to_string(),
            "done": op.word(),
            "cold_segments": done.segments,
            "seconds": started.elapsed().as_secs_f64(),
        }));
    }
    let segments = match done.segments {
        0 => String::new(),
        1 => " and 1 cold segment".to_string(),
        n => format!(" and {n} cold segments"),
    };
    output::line(format!(
        "{} {}{segments} in {:.2} s{}",
        op.done(),
        path.display(),
        started.elapsed().as_secs_f64(),
        match op {
            Op::Encrypt => "; keep the key: without it nothing in the file can be read",
            Op::Decrypt => "; the file is plain again: anyone who can read it reads every memory",
            Op::Rekey => "; the old key no longer opens it",
        }
    ))
}

impl Op {
    fn word(self) -> &'static str {
        match self {
            Op::Encrypt => "encrypt",
            Op::Decrypt => "decrypt",
            Op::Rekey => "rekey",
        }
    }

    fn done(self) -> &'static str {
        match self {
            Op::Encrypt => "encrypted",
            Op::Decrypt => "decrypted",
            Op::Rekey => "rekeyed",
        }
    }
}
