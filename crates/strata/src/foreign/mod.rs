//! Imports from other memory tools: the MCP reference memory server's
//! `memory.json`, ChatGPT's and Claude's `conversations.json`, a
//! basic-memory or Obsidian Markdown folder, and mem0's export.
//!
//! Each format's reader (one module each) turns its input into drafts: a
//! [`NewMemory`] with the id of the entry it came from. Everything after
//! that is one path, here: every draft is built and checked as a write
//! would be, given an id derived from the format, the scope it lands in and
//! the entry's own id (so importing the same input twice finds every
//! memory already there and adds nothing), sorted into added, unchanged
//! and skipped, and the added ones are stored in one transaction by the
//! store's import. A bad entry is an error naming the file, the entry and
//! the field, and nothing is written; `dry_run` reports without writing.
//!
//! Owns the formats and the plan. Does not know how memories are stored.

mod chat;
mod markdown;
mod mcp;
mod mem0;

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::Result;
use crate::engine::Engine;
use crate::error::Error;
use crate::model::{Memory, NewMemory};
use crate::scope::{Fence, Scope};
use crate::store::{ImportItem, ImportRules, OnConflict};

/// A format [`Engine::import_foreign`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForeignFormat {
    /// The MCP reference memory server's `memory.json` (JSON Lines of
    /// entities and relations).
    McpMemory,
    /// ChatGPT's data export, `conversations.json`.
    Chatgpt,
    /// Claude's data export, `conversations.json`.
    Claude,
    /// A folder of Markdown notes (basic-memory, Obsidian).
    Markdown,
    /// mem0's export (`get_all` results).
    Mem0,
}

impl ForeignFormat {
    /// Every format.
    pub const ALL: [ForeignFormat; 5] = [
        ForeignFormat::McpMemory,
        ForeignFormat::Chatgpt,
        ForeignFormat::Claude,
        ForeignFormat::Markdown,
        ForeignFormat::Mem0,
    ];

    /// The format's name (`--from`).
    pub fn as_str(self) -> &'static str {
        match self {
            ForeignFormat::McpMemory => "mcp-memory",
            ForeignFormat::Chatgpt => "chatgpt",
            ForeignFormat::Claude => "claude",
            ForeignFormat::Markdown => "markdown",
            ForeignFormat::Mem0 => "mem0",
        }
    }
}

impl FromStr for ForeignFormat {
    type Err = Error;
    fn from_str(s: &str) -> Result<ForeignFormat> {
        ForeignFormat::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = ForeignFormat::ALL.iter().map(|f| f.as_str()).collect();
                Error::field(
                    "format",
                    format!("`{s}` is not one of {}", names.join(", ")),
                )
            })
    }
}

impl fmt::Display for ForeignFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An import from another tool's files.
#[derive(Clone, Debug)]
pub struct ForeignImport {
    /// What the input is.
    pub format: ForeignFormat,
    /// Where it is, or the input itself.
    pub input: ForeignInput,
    /// Where the memories go; each format has a default (docs/formats.md).
    pub scope: Option<Scope>,
    /// Report what would happen, write nothing.
    pub dry_run: bool,
}

/// The input of a [`ForeignImport`]: a path on this machine, or what a
/// client sent (over HTTP and MCP, where the server's files are not the
/// caller's to name).
#[derive(Clone, Debug)]
pub enum ForeignInput {
    /// A file (a folder for [`ForeignFormat::Markdown`]).
    Path(PathBuf),
    /// One file's text, and the name messages give it.
    Text {
        /// The file's name (`conversations.json`).
        name: String,
        /// Its text.
        text: String,
    },
    /// A folder's files, for [`ForeignFormat::Markdown`].
    Files {
        /// The folder's name: the default scope is `project/<name>`.
        name: String,
        /// Its files.
        files: Vec<NoteFile>,
    },
}

/// A file of a folder of notes, as a client sends it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoteFile {
    /// Its path inside the folder, `/`-separated (`people/ana.md`).
    pub path: String,
    /// Its text.
    pub text: String,
    /// When it last changed, for notes whose front matter has no times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified: Option<Timestamp>,
}

impl ForeignImport {
    /// An import of the file (or folder) at `path`.
    pub fn path(format: ForeignFormat, path: impl Into<PathBuf>) -> ForeignImport {
        ForeignImport {
            format,
            input: ForeignInput::Path(path.into()),
            scope: None,
            dry_run: false,
        }
    }
}

/// An entry of the input that was not imported, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Skipped {
    /// Where it is in the input (`line 4`, `conversation 2 message 7`,
    /// `notes/a.md`).
    pub entry: String,
    /// Why it was left out.
    pub reason: String,
}

/// What [`Engine::import_foreign`] did (or would do, under `dry_run`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ForeignReport {
    /// The format read.
    pub format: String,
    /// Memories stored.
    pub added: usize,
    /// Entries whose memory an earlier import stored, unchanged.
    pub unchanged: usize,
    /// Entries left out, with why.
    pub skipped: Vec<Skipped>,
    /// Sessions created (a conversation each).
    pub sessions: usize,
    /// The scopes the added memories went to.
    pub scopes: Vec<String>,
    /// Whether nothing was written.
    pub dry_run: bool,
}

/// One entry of the input, read: the memory it becomes.
#[derive(Debug)]
struct Draft {
    /// The entry's identity within its format and scope (a message id, a
    /// note's path, an observation's text): the memory's id derives from it.
    source_id: String,
    /// Where it is in the input, for messages.
    entry: String,
    /// The memory, `created_at` set where the input has a time.
    new: NewMemory,
    /// When the input says the entry last changed.
    updated_at: Option<Timestamp>,
}

/// What a reader found: the drafts, and the entries it left out.
#[derive(Debug, Default)]
struct Read {
    drafts: Vec<Draft>,
    skipped: Vec<Skipped>,
}

impl Read {
    fn skip(&mut self, entry: impl Into<String>, reason: impl Into<String>) {
        self.skipped.push(Skipped {
            entry: entry.into(),
            reason: reason.into(),
        });
    }
}

/// The error for a bad entry: the file, the entry, the field and why.
fn bad(file: &str, entry: &str, reason: impl fmt::Display) -> Error {
    Error::field(format!("{file}: {entry}"), reason)
}

/// The file's name as messages give it.
fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Reads a whole input file.
fn read_text(path: &Path) -> Result<String> {
    let bytes =
        std::fs::read(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    String::from_utf8(bytes).map_err(|e| {
        Error::field(
            file_name(path),
            format!("is not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
        )
    })
}

/// Parses a JSON document, naming the file and the position of an error.
fn parse_json(file: &str, text: &str) -> Result<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| Error::field(file, format!("is not valid JSON: {e}")))
}

/// A time given as RFC 3339 (with any offset), a civil date-time taken as
/// UTC (`2024-05-01 10:00:00`), or a date.
fn parse_time(field: &str, text: &str) -> std::result::Result<Timestamp, String> {
    if let Ok(t) = text.parse::<Timestamp>() {
        return Ok(t);
    }
    if let Ok(dt) = text.parse::<jiff::civil::DateTime>()
        && let Ok(z) = dt.to_zoned(jiff::tz::TimeZone::UTC)
    {
        return Ok(z.timestamp());
    }
    crate::model::parse_time(field, text).map_err(|_| {
        format!("`{field}`: `{text}` is not a time (RFC 3339, `YYYY-MM-DD HH:MM:SS` or a date)")
    })
}

/// `text` as a scope segment: characters outside `[A-Za-z0-9._-]` become
/// `-`, cut to 64 bytes; `None` when nothing usable is left.
fn segment(text: &str) -> Option<String> {
    let s: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(crate::scope::MAX_SEGMENT_LEN)
        .collect();
    let s = s.trim_matches('-').to_string();
    (crate::scope::validate_segment(&s).is_ok()).then_some(s)
}

/// The first `n` hex digits of the SHA-256 of `text`.
fn digest_hex(text: &str, n: usize) -> String {
    let hex = crate::model::checksum(text, None);
    hex[..n.min(hex.len())].to_string()
}

/// The memory id of an entry: a UUID (version 8) from the SHA-256 of the
/// format, the scope the entry lands in and the entry's identity. The same
/// entry imported into the same place always has the same id.
fn derived_id(format: ForeignFormat, scope: &Scope, source_id: &str) -> String {
    let mut h = Sha256::new();
    for part in ["strata-import", format.as_str(), scope.as_str(), source_id] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    let digest = h.finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    uuid::Uuid::from_bytes(b).to_string()
}

/// Reads `req`'s input with its format's reader; the name messages give
/// the input.
fn read_input(req: &ForeignImport, now: Timestamp) -> Result<(String, Read)> {
    let target = req.scope.as_ref();
    let json = |name: &str, text: &str| match req.format {
        ForeignFormat::McpMemory => mcp::read(name, text, target, now),
        ForeignFormat::Chatgpt => chat::read_chatgpt(name, text, target, now),
        ForeignFormat::Claude => chat::read_claude(name, text, target, now),
        ForeignFormat::Mem0 => mem0::read(name, text, target, now),
        ForeignFormat::Markdown => Err(Error::field(
            "files",
            "the markdown format reads a folder: give its files, not one text",
        )),
    };
    match (&req.input, req.format) {
        (ForeignInput::Path(p), ForeignFormat::Markdown) => {
            Ok((file_name(p), markdown::read_dir(p, target, now)?))
        }
        (ForeignInput::Path(p), _) => {
            let name = file_name(p);
            let text = read_text(p)?;
            Ok((name.clone(), json(&name, &text)?))
        }
        (ForeignInput::Text { name, text }, _) => Ok((name.clone(), json(name, text)?)),
        (ForeignInput::Files { name, files }, ForeignFormat::Markdown) => {
            Ok((name.clone(), markdown::read(name, files, target, now)?))
        }
        (ForeignInput::Files { .. }, f) => Err(Error::field(
            "text",
            format!("the {f} format reads one file: give its text, not files"),
        )),
    }
}

impl Engine {
    /// Imports another tool's memories (see [`ForeignFormat`] and
    /// docs/formats.md): every entry is read and checked first, then the
    /// new ones are stored in one transaction. An entry whose memory is
    /// already stored (by an earlier import of the same input into the
    /// same scope) adds nothing; one changed since is skipped, keeping the
    /// stored memory.
    pub fn import_foreign(&self, req: &ForeignImport) -> Result<ForeignReport> {
        self.import_foreign_within(req, &mut |_, _| Ok(()))
    }

    /// [`Engine::import_foreign`], asking `allow` of every memory the input
    /// makes, with the entry it comes from (`conversations.json:
    /// conversation 2 message 3`), before anything is written or reported:
    /// the servers check a token's scopes and sessions with it. One refusal
    /// and nothing is imported, under `dry_run` too.
    pub fn import_foreign_within<E: From<Error>>(
        &self,
        req: &ForeignImport,
        allow: &mut dyn FnMut(&str, &Memory) -> std::result::Result<(), E>,
    ) -> std::result::Result<ForeignReport, E> {
        let now = self.now();
        let (file, read) = read_input(req, now)?;
        let mut report = ForeignReport {
            format: req.format.as_str().into(),
            skipped: read.skipped,
            dry_run: req.dry_run,
            ..ForeignReport::default()
        };
        let mut items: Vec<ImportItem> = Vec::new();
        let mut seen: HashMap<String, String> = HashMap::new();
        for (n, d) in read.drafts.into_iter().enumerate() {
            let mut m = self
                .build(d.new, now)
                .map_err(|e| bad(&file, &d.entry, e))?;
            m.id = derived_id(req.format, &m.scope, &d.source_id);
            m.updated_at = d
                .updated_at
                .map_or(m.created_at, |t| crate::model::ms(t).max(m.created_at));
            allow(&format!("{file}: {}", d.entry), &m)?;
            if let Some(first) = seen.get(&m.id) {
                report.skipped.push(Skipped {
                    entry: d.entry,
                    reason: format!("the same as {first}"),
                });
                continue;
            }
            seen.insert(m.id.clone(), d.entry.clone());
            let held = match self.store().get(&m.id)? {
                Some(h) => Some(h.checksum),
                None => self.get_archived(&m.id)?.map(|a| a.memory.checksum),
            };
            match held {
                Some(sum) if sum == m.checksum => report.unchanged += 1,
                Some(_) => report.skipped.push(Skipped {
                    entry: d.entry,
                    reason: "changed since it was imported (the stored memory is kept)".into(),
                }),
                None => items.push(ImportItem {
                    line: n + 1,
                    memory: m,
                    archived: None,
                    history: Vec::new(),
                }),
            }
        }
        let scopes: BTreeSet<Scope> = items.iter().map(|i| i.memory.scope.clone()).collect();
        let mut sessions = BTreeSet::new();
        for s in items.iter().filter_map(|i| i.memory.session.as_deref()) {
            if !sessions.contains(s) && self.store().get_session(s)?.is_none() {
                sessions.insert(s.to_string());
            }
        }
        report.added = items.len();
        report.sessions = sessions.len();
        report.scopes = scopes.iter().map(ToString::to_string).collect();
        if req.dry_run || items.is_empty() {
            return Ok(report);
        }
        // A fence of the target scopes makes a session the import creates
        // take its turns' scope, and holds it to its byte bound, as any
        // write into a session is.
        let rules = ImportRules {
            on_conflict: OnConflict::Error,
            fence: Fence::within(scopes.into_iter().collect::<Vec<_>>()),
            session_max_bytes: self.config().session_max_bytes,
        };
        self.thaw_for_import(&mut items, &rules.fence)?;
        self.store().import(&items, &rules)?;
        // Learning examines what an import brought at its next run; the
        // import stands whatever happens to that mark.
        if let Err(e) = self.learn_later(items.iter().map(|i| &i.memory)) {
            eprintln!("strata: learning: imported memories not marked for the next run: {e}");
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_are_stable_uuids_that_depend_on_every_part() {
        let (acme, global) = (Scope::parse("project/acme").unwrap(), Scope::global());
        let a = derived_id(ForeignFormat::Mem0, &global, "m-1");
        assert_eq!(a, derived_id(ForeignFormat::Mem0, &global, "m-1"));
        assert_eq!(uuid::Uuid::parse_str(&a).unwrap().get_version_num(), 8);
        assert_ne!(a, derived_id(ForeignFormat::Mem0, &acme, "m-1"));
        assert_ne!(a, derived_id(ForeignFormat::Mem0, &global, "m-2"));
        assert_ne!(a, derived_id(ForeignFormat::Claude, &global, "m-1"));
    }

    #[test]
    fn segments_replace_what_a_scope_cannot_hold() {
        assert_eq!(
            segment("ana@example.com").as_deref(),
            Some("ana-example.com")
        );
        assert_eq!(segment("My Vault").as_deref(), Some("My-Vault"));
        assert_eq!(segment("@@@"), None);
        assert_eq!(segment(&"x".repeat(100)).unwrap().len(), 64);
    }

    #[test]
    fn times_in_the_shapes_exports_use() {
        let t = parse_time("created", "2024-07-20T01:24:33.213962-07:00").unwrap();
        assert_eq!(t.to_string(), "2024-07-20T08:24:33.213962Z");
        assert!(parse_time("created", "2024-05-01 10:00:00").is_ok());
        assert!(parse_time("created", "2024-05-01").is_ok());
        let e = parse_time("created", "yesterday").unwrap_err();
        assert!(e.contains("`created`") && e.contains("yesterday"), "{e}");
    }
}
