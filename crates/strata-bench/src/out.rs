//! What the benchmark commands print, and the scratch directory they run in.

use std::io::Write;

use anyhow::{Context, Result};
use serde::Serialize;

/// A usage error found after the flags were parsed: the `strata` command
/// exits with code 2 on it, as for a flag clap rejected.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::error::Error for UsageError {}

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Returns a usage error.
pub(crate) fn usage<T>(msg: impl Into<String>) -> Result<T> {
    Err(UsageError(msg.into()).into())
}

/// Prints `value` as pretty JSON.
pub(crate) fn json<T: Serialize + ?Sized>(value: &T) -> Result<()> {
    let mut out = std::io::stdout().lock();
    // Keep an I/O error an I/O error, so a closed pipe is recognised.
    serde_json::to_writer_pretty(&mut out, value).map_err(std::io::Error::from)?;
    writeln!(out)?;
    Ok(())
}

/// Prints a line of text.
pub(crate) fn line(text: impl std::fmt::Display) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    Ok(())
}

/// A temporary directory, removed with everything in it when dropped, on
/// success and error alike.
pub(crate) fn scratch(prefix: &str) -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(&format!("{prefix}-"))
        .tempdir()
        .context("creating a temporary directory")
}
