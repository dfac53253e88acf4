//! Reads of cold memories: what promotion back to the store counts.
//!
//! A recall that returns cold memories and records access appends their
//! ids to `reads.log` in the tier's directory, a line each, opened for
//! appending, so the lines of several processes do not interleave. Upkeep,
//! under the `cold` lease, takes the log (renames it to
//! `reads.log.taken-<uuid>`, so later reads start a new one), counts each
//! id's reads, and writes back the counts it keeps as `id<TAB>count` lines.
//!
//! The log holds ids, never content: on an encrypted tier it is plain.
//! It counts reads for a heuristic; a crash between taking a log and
//! writing its counts back loses those counts, never a memory.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{ColdDir, io};
use crate::Result;
use crate::error::Error;

/// The log's file name in the tier's directory.
const LOG: &str = "reads.log";
/// What a taken log is renamed to (then a uuid).
const TAKEN: &str = "reads.log.taken-";

/// Reads counted per id, and the files they came from (removed once the
/// counts are handled: [`ColdDir::reads_handled`]).
#[derive(Debug, Default)]
pub struct Reads {
    /// Reads per id.
    pub counts: BTreeMap<String, u64>,
    taken: Vec<PathBuf>,
}

impl ColdDir {
    /// Notes one read of each of `ids` (cold memories a recall returned).
    pub fn note_reads(&self, ids: &[String]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut lines = String::new();
        for id in ids {
            lines.push_str(id);
            lines.push('\n');
        }
        append(&self.path().join(LOG), &lines)
    }

    /// Takes the reads noted so far (and any a crashed upkeep had taken),
    /// counted per id. The caller holds the `cold` lease, handles them and
    /// then calls [`ColdDir::reads_handled`] with the counts to keep.
    pub fn take_reads(&self) -> Result<Reads> {
        let log = self.path().join(LOG);
        let aside = self
            .path()
            .join(format!("{TAKEN}{}", uuid::Uuid::now_v7().simple()));
        match fs::rename(&log, &aside) {
            Ok(()) => {}
            // No reads noted since the last upkeep.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(format!("renaming {}", log.display()))(e)),
        }
        let mut reads = Reads::default();
        let dir = self.path();
        for e in fs::read_dir(dir).map_err(io(format!("reading {}", dir.display())))? {
            let path = e.map_err(io(format!("reading {}", dir.display())))?.path();
            let taken = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(TAKEN));
            if taken {
                count(&path, &mut reads.counts)?;
                reads.taken.push(path);
            }
        }
        reads.taken.sort();
        Ok(reads)
    }

    /// Ends a [`ColdDir::take_reads`]: removes the taken logs and writes
    /// back `keep`'s counts for the next upkeep.
    pub fn reads_handled(&self, reads: Reads, keep: &BTreeMap<String, u64>) -> Result<()> {
        for path in &reads.taken {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(format!("removing {}", path.display()))(e)),
            }
        }
        let mut lines = String::new();
        for (id, n) in keep.iter().filter(|(_, n)| **n > 0) {
            lines.push_str(&format!("{id}\t{n}\n"));
        }
        if lines.is_empty() {
            return Ok(());
        }
        append(&self.path().join(LOG), &lines)
    }
}

/// Appends `lines` in one write.
fn append(path: &Path, lines: &str) -> Result<()> {
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io(format!("opening {}", path.display())))?;
    f.write_all(lines.as_bytes())
        .map_err(io(format!("writing {}", path.display())))
}

/// Adds the reads a log file holds to `counts`: `id` lines count one,
/// `id<TAB>n` lines `n`. A last line without its newline (an append cut
/// short by a crash) is left out; any other line that is neither is an
/// error naming the file.
fn count(path: &Path, counts: &mut BTreeMap<String, u64>) -> Result<()> {
    let text = fs::read_to_string(path).map_err(io(format!("reading {}", path.display())))?;
    let whole = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    for (i, line) in whole.lines().enumerate() {
        let (id, n) = match line.split_once('\t') {
            Some((id, n)) => (id, n.parse::<u64>().ok()),
            None => (line, Some(1)),
        };
        let bad = |why: &str| Error::Corrupt {
            what: format!("cold tier reads log {}", path.display()),
            source: format!("line {}: {why}", i + 1).into(),
        };
        let n = n.ok_or_else(|| bad("the count is not a number"))?;
        if id.is_empty() || id.chars().any(char::is_whitespace) {
            return Err(bad("not a memory id"));
        }
        *counts.entry(id.to_string()).or_default() += n;
    }
    Ok(())
}
