//! A folder of Markdown notes, as basic-memory and Obsidian keep them:
//! `*.md` and `*.markdown` files, each with optional YAML front matter
//! between `---` lines (`title`, `tags`, `type`, `permalink`, `created`,
//! `modified`), linking to each other with `[[wikilinks]]`.
//!
//! One memory per note, keyed by its `permalink` (else its path relative to
//! the folder), in `project/<folder name>` unless told otherwise. Its
//! content is the note's body, under a `# title` heading when the front
//! matter has a title the body does not start with. The front matter's
//! tags (and the tag `markdown`) are its tags; its `type` is its kind when
//! that is a kind word (`decision`, `person`), else the kind is `note` and
//! the type stays in the payload. Times come from `created` and `modified`
//! (`date` and `updated` too), else from the file's modification time. The
//! payload holds the path, title, permalink and the wikilinks' targets.
//! Hidden files and folders (`.obsidian/`, `.git/`) are not read, symbolic
//! links are not followed, and other files are skipped by name.

use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::{Draft, NoteFile, Read, bad, parse_time, segment};
use crate::Result;
use crate::error::Error;
use crate::model::{Kind, NewMemory};
use crate::scope::Scope;

/// The tag every note carries.
const TAG: &str = "markdown";

/// Every file under `dir` (sorted, hidden entries left out), and the
/// symbolic links found.
fn walk(dir: &Path, files: &mut Vec<PathBuf>, links: &mut Vec<PathBuf>) -> Result<()> {
    let rd =
        std::fs::read_dir(dir).map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
    let mut entries: Vec<_> = rd
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let t = e
            .file_type()
            .map_err(|err| Error::io(format!("reading {}", e.path().display()), err))?;
        if t.is_symlink() {
            links.push(e.path());
        } else if t.is_dir() {
            walk(&e.path(), files, links)?;
        } else if t.is_file() {
            files.push(e.path());
        }
    }
    Ok(())
}

/// Splits a note into its front matter (YAML text, if any) and its body.
fn split_front_matter(text: &str) -> (Option<&str>, &str) {
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return (None, text);
    };
    let mut at = 0;
    for line in rest.split_inclusive('\n') {
        if matches!(line.trim_end(), "---" | "...") {
            return (Some(&rest[..at]), &rest[at + line.len()..]);
        }
        at += line.len();
    }
    (None, text)
}

/// The targets of the note's `[[wikilinks]]` (`[[target|label]]`,
/// `[[target#heading]]`), each once, in order.
fn wikilinks(body: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut rest = body;
    while let Some(i) = rest.find("[[") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find("]]") else { break };
        let inner = &rest[..end];
        rest = &rest[end + 2..];
        let target = inner.split(['|', '#']).next().unwrap_or("").trim();
        if !target.is_empty() && !inner.contains('\n') && !out.iter().any(|t| t == target) {
            out.push(target.to_string());
        }
    }
    out
}

/// A front matter string field, if present.
fn fm_str<'a>(rel: &str, fm: &'a Map<String, Value>, field: &str) -> Result<Option<&'a str>> {
    match fm.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str()).filter(|s| !s.trim().is_empty())),
        Some(_) => Err(bad(rel, "front matter", format!("`{field}` must be text"))),
    }
}

/// The front matter's tags: a list, or one string of tags separated by
/// commas or spaces; a leading `#` is dropped.
fn fm_tags(rel: &str, fm: &Map<String, Value>) -> Result<Vec<String>> {
    let raw: Vec<String> = match fm.get("tags") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => s.split([',', ' ']).map(str::to_string).collect(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|t| match t {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                _ => Err(bad(
                    rel,
                    "front matter",
                    "`tags` must be text or a list of text",
                )),
            })
            .collect::<Result<_>>()?,
        Some(_) => {
            return Err(bad(
                rel,
                "front matter",
                "`tags` must be text or a list of text",
            ));
        }
    };
    Ok(raw
        .iter()
        .map(|t| t.trim().trim_start_matches('#').to_string())
        .filter(|t| !t.is_empty())
        .collect())
}

/// The first of `fields` the front matter has, as a time.
fn fm_time(rel: &str, fm: &Map<String, Value>, fields: &[&str]) -> Result<Option<Timestamp>> {
    for f in fields {
        if let Some(s) = fm_str(rel, fm, f)? {
            return parse_time(f, s)
                .map(Some)
                .map_err(|r| bad(rel, "front matter", r));
        }
    }
    Ok(None)
}

/// The default scope: `project/<folder name>`.
fn default_scope(name: &str) -> Result<Scope> {
    match segment(name) {
        Some(s) => Scope::project(&s),
        None => Err(Error::field(
            "scope",
            format!("no project name in the folder name `{name}`; give a scope"),
        )),
    }
}

/// Reads the notes of a folder on disk: every file under it, its path
/// relative to the folder, its text and its modification time.
pub(super) fn read_dir(dir: &Path, target: Option<&Scope>, now: Timestamp) -> Result<Read> {
    if !dir.is_dir() {
        return Err(Error::field(
            "markdown",
            format!("{} is not a folder", dir.display()),
        ));
    }
    let abs = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let name = abs
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (mut paths, mut links) = (Vec::new(), Vec::new());
    walk(dir, &mut paths, &mut links)?;
    let rel_of = |p: &Path| {
        let parts: Vec<String> = p
            .strip_prefix(dir)
            .unwrap_or(p)
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        parts.join("/")
    };
    let mut skipped = Read::default();
    for l in links {
        skipped.skip(rel_of(&l), "a symbolic link (not followed)");
    }
    let mut files = Vec::new();
    for path in paths {
        let rel = rel_of(&path);
        if !is_markdown(&rel) {
            files.push(NoteFile {
                path: rel,
                text: String::new(),
                modified: None,
            });
            continue;
        }
        let bytes = std::fs::read(&path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        let text = String::from_utf8(bytes).map_err(|_| Error::field(&rel, "is not UTF-8 text"))?;
        let modified = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| Timestamp::try_from(t).ok());
        files.push(NoteFile {
            path: rel,
            text,
            modified,
        });
    }
    let mut out = read(&name, &files, target, now)?;
    skipped.skipped.append(&mut out.skipped);
    out.skipped = skipped.skipped;
    Ok(out)
}

/// Whether a path names a Markdown file (`.md`, `.markdown`).
fn is_markdown(path: &str) -> bool {
    let ext = path
        .rsplit_once('.')
        .map(|(_, e)| e.to_lowercase())
        .unwrap_or_default();
    !path.ends_with('/') && (ext == "md" || ext == "markdown")
}

/// Reads notes given as `(path, text)` pairs of a folder called `name`
/// (the folder's files as a client sends them). A path is relative,
/// `/`-separated, without `.` or `..` segments; hidden ones are left out
/// as a folder walk leaves them out.
pub(super) fn read(
    name: &str,
    files: &[NoteFile],
    target: Option<&Scope>,
    now: Timestamp,
) -> Result<Read> {
    let scope = match target {
        Some(s) => s.clone(),
        None => default_scope(name)?,
    };
    let mut out = Read::default();
    let mut seen = std::collections::HashSet::new();
    for (i, f) in files.iter().enumerate() {
        let rel = f.path.as_str();
        check_path(i, rel)?;
        if !seen.insert(rel) {
            return Err(Error::field(
                format!("files[{i}].path"),
                format!("`{rel}` is given twice"),
            ));
        }
        if rel.split('/').any(|p| p.starts_with('.')) {
            continue;
        }
        if !is_markdown(rel) {
            out.skip(rel, "not a Markdown file (.md, .markdown)");
            continue;
        }
        let (yaml, body) = split_front_matter(&f.text);
        let fm: Map<String, Value> = match yaml.map(str::trim).filter(|y| !y.is_empty()) {
            None => Map::new(),
            Some(y) => match serde_norway::from_str::<Value>(y) {
                Ok(Value::Object(m)) => m,
                Ok(Value::Null) => Map::new(),
                Ok(_) => return Err(bad(rel, "front matter", "must be a YAML mapping")),
                Err(e) => return Err(bad(rel, "front matter", format!("invalid YAML: {e}"))),
            },
        };
        let title = fm_str(rel, &fm, "title")?;
        let body = body.trim();
        if body.is_empty() {
            out.skip(rel, "no text (front matter only, or empty)");
            continue;
        }
        let content = match title {
            Some(t) if body.lines().next().map(str::trim) != Some(format!("# {t}").as_str()) => {
                format!("# {t}\n\n{body}")
            }
            _ => body.to_string(),
        };
        let ftype = fm_str(rel, &fm, "type")?;
        let kind = ftype.and_then(|t| t.trim().to_lowercase().parse::<Kind>().ok());
        let permalink = fm_str(rel, &fm, "permalink")?;
        let mut payload = json!({ "path": rel });
        for (k, v) in [("title", title), ("permalink", permalink)] {
            if let Some(v) = v {
                payload[k] = v.into();
            }
        }
        if kind.is_none()
            && let Some(t) = ftype
        {
            payload["type"] = t.into();
        }
        let linked = wikilinks(body);
        if !linked.is_empty() {
            payload["links"] = linked.into();
        }
        let mtime = f.modified.map(|t| t.min(now));
        let created = fm_time(rel, &fm, &["created", "date"])?.or(mtime);
        let modified = fm_time(rel, &fm, &["modified", "updated"])?.or(mtime);
        let mut tags = vec![TAG.to_string()];
        for t in fm_tags(rel, &fm)? {
            if !tags.contains(&t) {
                tags.push(t);
            }
        }
        out.drafts.push(Draft {
            source_id: rel.to_string(),
            entry: rel.to_string(),
            new: NewMemory {
                scope: Some(scope.clone()),
                content,
                kind: Some(kind.unwrap_or(Kind::Note)),
                payload: Some(payload),
                key: Some(permalink.unwrap_or(rel).to_string()),
                tags,
                created_at: Some(created.unwrap_or(now)),
                ..NewMemory::default()
            },
            updated_at: modified,
        });
    }
    Ok(out)
}

/// A note's path must be relative and plain: no leading `/`, no empty,
/// `.` or `..` segments, no `\\`.
fn check_path(i: usize, rel: &str) -> Result<()> {
    let field = || format!("files[{i}].path");
    let bad_seg = rel
        .split('/')
        .find(|p| p.is_empty() || *p == "." || *p == "..");
    if rel.is_empty() {
        return Err(Error::field(field(), "is empty"));
    }
    if rel.contains('\\') || rel.contains('\0') {
        return Err(Error::field(
            field(),
            format!("`{rel}` holds a backslash or NUL; separate folders with `/`"),
        ));
    }
    if let Some(seg) = bad_seg {
        return Err(Error::field(
            field(),
            format!("`{rel}` is not a plain relative path (segment `{seg}`)"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_is_split_off_only_when_closed() {
        let (fm, body) = split_front_matter("---\ntitle: A\n---\nBody\n");
        assert_eq!(fm, Some("title: A\n"));
        assert_eq!(body, "Body\n");
        let (fm, body) = split_front_matter("---\ntitle: A\nno end\n");
        assert_eq!(fm, None);
        assert_eq!(body, "---\ntitle: A\nno end\n");
        assert_eq!(split_front_matter("# Just a note").0, None);
    }

    #[test]
    fn wikilinks_name_their_targets_once() {
        let links = wikilinks(
            "See [[Billing DB|the DB]] and [[Ana#Role]], [[Billing DB]] again; [[]] and [[broken",
        );
        assert_eq!(links, ["Billing DB", "Ana"]);
    }
}
