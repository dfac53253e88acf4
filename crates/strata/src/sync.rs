//! Files as memory (DESIGN §5): a project's memory files, synced into the
//! matching scopes.
//!
//! | file (relative to the synced folder)       | scope                             | kind         |
//! |--------------------------------------------|-----------------------------------|--------------|
//! | `CLAUDE.md`                                 | `project/<p>`                     | `convention` |
//! | `.memory/project/conventions/*`             | `project/<p>`                     | `convention` |
//! | `.memory/project/decisions/*`               | `project/<p>`                     | `decision`   |
//! | `.memory/project/…` (anything else)         | `project/<p>`                     | `context`    |
//! | `.memory/sprint/<id>/…` (`goals.md`, `progress.json`, …) | `project/<p>/sprint/<id>` | `context` |
//! | `.memory/stage/<name>/…`                    | `project/<p>/stage/<name>`        | `context`    |
//! | `.memory/agent/<name>/…`                    | `project/<p>/agent/<name>`        | `context`    |
//! | `.memory/conventions/*`, `.memory/decisions/*` | `project/<p>`                  | `convention`, `decision` |
//! | `.memory/…` (any other file)                | `project/<p>`                     | `context`    |
//!
//! Every file under `.memory/` with a known extension is synced: one the
//! table names no place for belongs to the project itself, as the README's
//! "`CLAUDE.md` and `.memory/`" promises (issue 56).
//!
//! One memory per file, keyed by the file's path (`CLAUDE.md`,
//! `.memory/project/decisions/db.md`), tagged `memory-file`, pinned (a file
//! is the source of truth, so eviction must not drop it), with the file's
//! SHA-256 in its payload (and, for `.json` files, the parsed document under
//! `data`). A file whose hash is unchanged is skipped; a changed file updates
//! its memory in place (same id, next version, the old text in history); a
//! memory whose file is gone is forgotten. Every file is read and checked
//! before anything is written, so a bad file changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::Result;
use crate::engine::{Confirm, Engine, Forget, ForgetOptions, List, Patch};
use crate::error::Error;
use crate::filter::Filter;
use crate::model::{Kind, NewMemory, Source};
use crate::scope::{Scope, View};

/// The tag every synced memory carries.
pub const FILE_TAG: &str = "memory-file";
/// File extensions read as memory files.
pub const EXTENSIONS: [&str; 7] = ["md", "markdown", "txt", "json", "yaml", "yml", "toml"];

/// What [`Engine::sync_dir`] did (or would do, under `dry_run`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncReport {
    /// The project synced into.
    pub project: String,
    /// Files stored as new memories.
    pub added: Vec<String>,
    /// Files whose memory was updated in place.
    pub updated: Vec<String>,
    /// Files unchanged since the last sync.
    pub unchanged: usize,
    /// Memories forgotten because their file is gone.
    pub removed: Vec<String>,
    /// Files left out, with why (hidden, a link, other extension, empty).
    pub skipped: Vec<(String, String)>,
    /// Whether nothing was written.
    pub dry_run: bool,
}

/// One memory file, read and checked.
#[derive(Debug)]
struct FileMemory {
    key: String,
    scope: Scope,
    kind: Kind,
    content: String,
    payload: serde_json::Value,
    sha: String,
}

/// Where a memory file belongs: its scope and kind, or why it is skipped.
/// `rel` is `CLAUDE.md` or a path under `.memory/` (the only files read).
fn place(project: &Scope, rel: &[&str]) -> std::result::Result<(Scope, Kind), String> {
    let sub = |parts: &[&str]| -> std::result::Result<Scope, String> {
        Scope::parse(&format!("{}/{}", project, parts.join("/"))).map_err(|e| e.to_string())
    };
    match rel {
        ["CLAUDE.md"] => Ok((project.clone(), Kind::Convention)),
        [".memory", "project", "conventions", _] | [".memory", "conventions", _] => {
            Ok((project.clone(), Kind::Convention))
        }
        [".memory", "project", "decisions", _] | [".memory", "decisions", _] => {
            Ok((project.clone(), Kind::Decision))
        }
        [
            ".memory",
            layer @ ("sprint" | "stage" | "agent"),
            name,
            _,
            ..,
        ] => Ok((sub(&[layer, name])?, Kind::Context)),
        [".memory", _, ..] => Ok((project.clone(), Kind::Context)),
        _ => Err("not CLAUDE.md or a file under .memory/".into()),
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>, links: &mut Vec<PathBuf>) -> Result<()> {
    let rd =
        std::fs::read_dir(dir).map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
    let mut entries: Vec<PathBuf> = Vec::new();
    for e in rd {
        let e = e.map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
        entries.push(e.path());
    }
    entries.sort();
    for p in entries {
        let meta = std::fs::symlink_metadata(&p)
            .map_err(|e| Error::io(format!("reading {}", p.display()), e))?;
        if meta.is_dir() {
            walk(&p, out, links)?;
        } else if meta.is_file() {
            out.push(p);
        } else if meta.file_type().is_symlink() {
            links.push(p);
        }
    }
    Ok(())
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Engine {
    /// Syncs `CLAUDE.md` and the `.memory/` tree under `dir` into
    /// `project/<project>` and its sprint, stage and agent scopes.
    pub fn sync_dir(&self, dir: &Path, project: &str, dry_run: bool) -> Result<SyncReport> {
        crate::scope::validate_segment(project).map_err(|r| Error::InvalidScope {
            scope: project.to_string(),
            reason: format!("project name: {r}"),
        })?;
        let root = Scope::project(project)?;
        if !dir.is_dir() {
            return Err(Error::field(
                "dir",
                format!("{} is not a directory", dir.display()),
            ));
        }
        let mut report = SyncReport {
            project: root.to_string(),
            dry_run,
            ..SyncReport::default()
        };
        let mut paths = Vec::new();
        let claude = dir.join("CLAUDE.md");
        if claude.is_file() {
            paths.push(claude);
        }
        let mem_dir = dir.join(".memory");
        let mut links = Vec::new();
        if mem_dir.is_dir() {
            walk(&mem_dir, &mut paths, &mut links)?;
        }
        for l in links {
            let rel = l
                .strip_prefix(dir)
                .unwrap_or(&l)
                .to_string_lossy()
                .into_owned();
            report
                .skipped
                .push((rel, "a symbolic link (not followed)".into()));
        }

        // Read and check everything first.
        let mut files: Vec<FileMemory> = Vec::new();
        for path in paths {
            let rel_path = path.strip_prefix(dir).unwrap_or(&path);
            let rel: Vec<String> = rel_path
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let key = rel.join("/");
            let parts: Vec<&str> = rel.iter().map(String::as_str).collect();
            let ext = path
                .extension()
                .map(|e| e.to_string_lossy().to_lowercase())
                .unwrap_or_default();
            if parts.iter().any(|p| p.starts_with('.') && *p != ".memory") {
                report.skipped.push((key, "hidden file".into()));
                continue;
            }
            if !EXTENSIONS.contains(&ext.as_str()) {
                report.skipped.push((
                    key,
                    format!("extension is not one of {}", EXTENSIONS.join(", ")),
                ));
                continue;
            }
            let (scope, kind) = match place(&root, &parts) {
                Ok(x) => x,
                Err(why) => {
                    report.skipped.push((key, why));
                    continue;
                }
            };
            let bytes = std::fs::read(&path)
                .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
            let sha = sha256_hex(&bytes);
            let content =
                String::from_utf8(bytes).map_err(|_| Error::field(&key, "is not UTF-8 text"))?;
            if content.trim().is_empty() {
                report.skipped.push((key, "empty".into()));
                continue;
            }
            let mut payload = serde_json::json!({ "path": key, "sha256": sha });
            if ext == "json" {
                let data: serde_json::Value = serde_json::from_str(&content)
                    .map_err(|e| Error::field(&key, format!("is not valid JSON: {e}")))?;
                payload["data"] = data;
            }
            let size = content.len() + payload.to_string().len();
            if size > self.config().max_item_bytes {
                return Err(Error::field(
                    &key,
                    format!(
                        "is {size} bytes, over memory.max_item_bytes ({})",
                        self.config().max_item_bytes
                    ),
                ));
            }
            files.push(FileMemory {
                key,
                scope,
                kind,
                content,
                payload,
                sha,
            });
        }

        // What is stored now: every synced memory under the project.
        let view = View::subtree(root.clone());
        let mut list = List::new(view.clone());
        list.filter = Filter::parse(&serde_json::json!({ "tags": [FILE_TAG] }))?;
        list.limit = usize::MAX;
        let stored = self.list(&list)?;
        let mut by_place: BTreeMap<(Scope, String), crate::model::Memory> = BTreeMap::new();
        for m in stored {
            if let Some(k) = m.key.clone() {
                by_place.insert((m.scope.clone(), k), m);
            }
        }

        let mut keep: BTreeSet<(Scope, String)> = BTreeSet::new();
        for f in files {
            let place_key = (f.scope.clone(), f.key.clone());
            keep.insert(place_key.clone());
            match by_place.get(&place_key) {
                Some(m)
                    if m.payload
                        .as_ref()
                        .and_then(|p| p.get("sha256"))
                        .and_then(|s| s.as_str())
                        == Some(f.sha.as_str())
                        && m.kind == f.kind =>
                {
                    report.unchanged += 1;
                }
                Some(m) => {
                    if !dry_run {
                        let patch = Patch {
                            content: Some(f.content),
                            payload: Some(Some(f.payload)),
                            kind: Some(f.kind),
                            ..Patch::default()
                        };
                        self.update(&m.id, patch, m.version)?;
                    }
                    report.updated.push(f.key);
                }
                None => {
                    if !dry_run {
                        let mut n = NewMemory::new(f.scope, f.content)
                            .kind(f.kind)
                            .key(f.key.clone())
                            .payload(f.payload)
                            .tag(FILE_TAG)
                            .source(Source::External)
                            .pinned(true);
                        n.importance = Some(0.8);
                        self.remember_with(n, Confirm::No)?;
                    }
                    report.added.push(f.key);
                }
            }
        }
        let gone: Vec<(String, String)> = by_place
            .iter()
            .filter(|(k, _)| !keep.contains(k))
            .map(|((_, key), m)| (m.id.clone(), key.clone()))
            .collect();
        if !gone.is_empty() {
            if !dry_run {
                let ids = gone.iter().map(|(id, _)| id.clone()).collect();
                self.forget(
                    &Forget::Ids(ids),
                    ForgetOptions {
                        force: true,
                        ..ForgetOptions::default()
                    },
                )?;
            }
            report.removed = gone.into_iter().map(|(_, k)| k).collect();
        }
        Ok(report)
    }
}
