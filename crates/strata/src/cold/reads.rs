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
use std::path::Path;

use super::{ColdDir, io};
use crate::Result;
use crate::error::Error;

/// The log's file name in the tier's directory.
const LOG: &str = "reads.log";
/// What a taken log is renamed to (then a uuid). In S3, which cannot
/// append, each note is an object of such a name.
const TAKEN: &str = "reads.log.taken-";

/// Reads counted per id, and the files they came from (removed once the
/// counts are handled: [`ColdDir::reads_handled`]).
#[derive(Debug, Default)]
pub struct Reads {
    /// Reads per id.
    pub counts: BTreeMap<String, u64>,
    taken: Vec<String>,
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
        self.append_reads(&lines)
    }

    /// Takes the reads noted so far (and any a crashed upkeep had taken),
    /// counted per id. The caller holds the `cold` lease, handles them and
    /// then calls [`ColdDir::reads_handled`] with the counts to keep.
    pub fn take_reads(&self) -> Result<Reads> {
        if self.blobs.is_local() {
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
        }
        let mut reads = Reads::default();
        for name in self.blobs.list()? {
            if name.starts_with(TAKEN) {
                let text = self.blobs.read(&name)?;
                count(
                    &self.path().join(&name),
                    &String::from_utf8_lossy(&text),
                    &mut reads.counts,
                )?;
                reads.taken.push(name);
            }
        }
        reads.taken.sort();
        Ok(reads)
    }

    /// Ends a [`ColdDir::take_reads`]: removes the taken logs and writes
    /// back `keep`'s counts for the next upkeep.
    pub fn reads_handled(&self, reads: Reads, keep: &BTreeMap<String, u64>) -> Result<()> {
        for name in &reads.taken {
            self.blobs.remove(name)?;
        }
        let mut lines = String::new();
        for (id, n) in keep.iter().filter(|(_, n)| **n > 0) {
            lines.push_str(&format!("{id}\t{n}\n"));
        }
        if lines.is_empty() {
            return Ok(());
        }
        self.append_reads(&lines)
    }

    /// Adds `lines` to the log: appended in one write to `reads.log` in a
    /// directory, a new object in S3.
    fn append_reads(&self, lines: &str) -> Result<()> {
        if !self.blobs.is_local() {
            let name = format!("{TAKEN}{}", uuid::Uuid::now_v7().simple());
            return self.blobs.write(&name, lines.as_bytes());
        }
        let path = self.path().join(LOG);
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io(format!("opening {}", path.display())))?;
        f.write_all(lines.as_bytes())
            .map_err(io(format!("writing {}", path.display())))
    }
}

/// Adds the reads a log holds (`text`, read from `path`) to `counts`: `id`
/// lines count one, `id<TAB>n` lines `n`. A last line without its newline
/// (an append cut short by a crash) is left out; any other line that is
/// neither is an error naming the file.
fn count(path: &Path, text: &str, counts: &mut BTreeMap<String, u64>) -> Result<()> {
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
