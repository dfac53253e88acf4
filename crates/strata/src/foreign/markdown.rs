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
//!
//! A note in basic-memory's format is taken apart as the MCP memory
//! server's entities are: each observation line (`- [category] content
//! #tag (context)`) and each relation line (`- relation_type [[Target]]`)
//! is a memory that reads alone (`Ana (person): Leads billing`, `Ana
//! works_at Acme`), identified by the note's path and the line's text, so
//! an edited note adds only its new lines; the note's memory keeps what is
//! left, when prose is. A note without an observation line or an
//! `Observations`/`Relations` heading (an Obsidian note) stays whole.

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

/// A basic-memory observation line, `- [category] content #tag (context)`.
#[derive(Debug, PartialEq)]
struct Observation {
    /// The line's number in the file.
    line: usize,
    category: String,
    /// Everything after the category: the content with its tags and context.
    text: String,
    /// The `#tags`, each once, without `#` and trailing punctuation.
    tags: Vec<String>,
    /// The text of a closing `(…)`.
    context: Option<String>,
}

/// A basic-memory relation line, `- relation_type [[Target]] (context)`.
#[derive(Debug, PartialEq)]
struct Relation {
    line: usize,
    rtype: String,
    target: String,
    context: Option<String>,
}

/// A note in basic-memory's format, taken apart: the text left when its
/// observation and relation lines are out, those lines, and the lines
/// shaped like them that are not (number, why), left in the text.
#[derive(Debug, Default)]
struct Semantic {
    rest: String,
    observations: Vec<Observation>,
    relations: Vec<Relation>,
    bad: Vec<(usize, String)>,
}

/// What a list item read as an observation or a relation is: `None` when
/// it is not shaped like one, `Err` with why when it is but is not one.
type Shaped<T> = Option<std::result::Result<T, String>>;

/// A Markdown list item's text (`- `, `* ` or `+ ` after any indent).
fn list_item(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let rest = t.strip_prefix(['-', '*', '+'])?;
    rest.starts_with([' ', '\t']).then(|| rest.trim())
}

/// Whether a bracketed word is a clock time (`[00:01:02]`, `[1:02 - 1:05]`),
/// as transcripts start their lines, not a category.
fn is_clock(s: &str) -> bool {
    let one = |p: &str| {
        let (hms, frac) = match p.split_once(['.', ',']) {
            Some((a, b)) => (a, Some(b)),
            None => (p, None),
        };
        let parts: Vec<&str> = hms.split(':').collect();
        let digits = |d: &str, lo: usize, hi: usize| {
            (lo..=hi).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_digit())
        };
        (2..=3).contains(&parts.len())
            && digits(parts[0], 1, 3)
            && parts[1..].iter().all(|d| digits(d, 2, 2))
            && frac.is_none_or(|f| digits(f, 1, 3))
    };
    match s.split_once(" - ") {
        Some((a, b)) => one(a.trim()) && one(b.trim()),
        None => one(s),
    }
}

/// The text before a closing `(…)` and the text inside it, as basic-memory
/// reads an observation's context.
fn split_context(text: &str) -> (&str, Option<&str>) {
    if text.ends_with(')')
        && let Some(i) = text.rfind('(')
    {
        let ctx = text[i + 1..text.len() - 1].trim();
        return (text[..i].trim(), Some(ctx).filter(|c| !c.is_empty()));
    }
    (text, None)
}

/// An observation read from a list item's text: `None` when the item is
/// not shaped like one (a task `[ ]`/`[x]`, a link, a clock time), `Err`
/// with why when it is but has no category or no content.
fn observation(item: &str) -> Shaped<(String, String)> {
    let inner = item.strip_prefix('[')?;
    if inner.starts_with('[') {
        return None;
    }
    let close = inner.find(']')?;
    let (cat, after) = (&inner[..close], &inner[close + 1..]);
    if cat.contains(['[', '(', ')']) || !(after.is_empty() || after.starts_with([' ', '\t'])) {
        return None;
    }
    let mut chars = cat.chars();
    if let (Some(c), None) = (chars.next(), chars.next())
        && (c == 'x' || c == 'X' || !c.is_alphanumeric())
    {
        return None;
    }
    let cat = cat.trim();
    if is_clock(cat) {
        return None;
    }
    let text = after.trim();
    if cat.is_empty() {
        return Some(Err("an observation with an empty category `[]`".into()));
    }
    if split_context(text).0.is_empty() {
        return Some(Err(format!("an observation `[{cat}]` with no content")));
    }
    Some(Ok((cat.to_string(), text.to_string())))
}

/// A relation read from a list item's text, `relation_type [[Target]]`
/// with an optional `(context)` after: `None` when the item is not one (no
/// type, a type of several unquoted words, text after the link), `Err`
/// when the link names nothing.
fn relation(item: &str) -> Shaped<(String, String, Option<String>)> {
    let open = item.find("[[")?;
    let before = item[..open].trim();
    let quoted = before.len() >= 2
        && (before.starts_with('"') && before.ends_with('"')
            || before.starts_with('\'') && before.ends_with('\''));
    let rtype = if quoted {
        before[1..before.len() - 1].trim()
    } else {
        before
    };
    if rtype.is_empty()
        || (!quoted && rtype.contains(char::is_whitespace))
        || rtype.contains(['[', ']', '(', ')'])
    {
        return None;
    }
    let rest = &item[open + 2..];
    let end = rest.find("]]")?;
    let after = rest[end + 2..].trim();
    let context = if after.is_empty() {
        None
    } else {
        let inner = after.strip_prefix('(')?.strip_suffix(')')?;
        let mut depth = 0i32;
        for c in inner.chars() {
            depth += match c {
                '(' => 1,
                ')' => -1,
                _ => 0,
            };
            if depth < 0 {
                return None;
            }
        }
        if depth != 0 {
            return None;
        }
        Some(inner.trim().to_string()).filter(|c| !c.is_empty())
    };
    let target = rest[..end].split(['|', '#']).next().unwrap_or("").trim();
    if target.is_empty() {
        return Some(Err(format!(
            "a relation `{rtype}` whose link names nothing"
        )));
    }
    Some(Ok((rtype.to_string(), target.to_string(), context)))
}

/// The `#tags` of an observation's content.
fn hashtags(content: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in content.split_whitespace().filter(|w| w.starts_with('#')) {
        for t in word.split('#') {
            let t = t.trim_end_matches(['.', ',', ';', ':', '!', '?']);
            if !t.is_empty() && !out.iter().any(|o| o == t) {
                out.push(t.to_string());
            }
        }
    }
    out
}

/// Whether a line opens or closes a fenced code block.
fn is_fence(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("```") || t.starts_with("~~~")
}

/// A heading's level and title.
fn heading(line: &str) -> Option<(usize, &str)> {
    let t = line.trim_start();
    let level = t.bytes().take_while(|&b| b == b'#').count();
    let rest = &t[level..];
    ((1..=6).contains(&level) && (rest.is_empty() || rest.starts_with([' ', '\t'])))
        .then(|| (level, rest.trim()))
}

/// Whether a heading's title is basic-memory's `Observations` or
/// `Relations`.
fn is_semantic_heading(title: &str) -> bool {
    title.eq_ignore_ascii_case("observations") || title.eq_ignore_ascii_case("relations")
}

/// Reads a note's body in basic-memory's format; `first` is the number of
/// the body's first line in the file. `None` when the note is not in that
/// format: it has no observation line and no `Observations` or `Relations`
/// heading (outside code blocks), so an Obsidian note stays whole.
fn semantic(body: &str, first: usize) -> Option<Semantic> {
    let mut fenced = false;
    let mut is_bm = false;
    for line in body.lines() {
        if is_fence(line) {
            fenced = !fenced;
        } else if !fenced
            && (heading(line).is_some_and(|(_, t)| is_semantic_heading(t))
                || list_item(line)
                    .and_then(observation)
                    .is_some_and(|o| o.is_ok()))
        {
            is_bm = true;
            break;
        }
    }
    if !is_bm {
        return None;
    }
    let mut out = Semantic::default();
    let mut kept: Vec<&str> = Vec::new();
    let mut fenced = false;
    for (i, line) in body.lines().enumerate() {
        let n = first + i;
        if is_fence(line) {
            fenced = !fenced;
        }
        let item = if fenced || is_fence(line) {
            None
        } else {
            list_item(line)
        };
        let Some(item) = item else {
            kept.push(line);
            continue;
        };
        match observation(item) {
            Some(Ok((category, text))) => {
                let (content, context) = split_context(&text);
                out.observations.push(Observation {
                    line: n,
                    category,
                    tags: hashtags(content),
                    context: context.map(str::to_string),
                    text,
                });
                continue;
            }
            Some(Err(why)) => out.bad.push((n, why)),
            None => match relation(item) {
                Some(Ok((rtype, target, context))) => {
                    out.relations.push(Relation {
                        line: n,
                        rtype,
                        target,
                        context,
                    });
                    continue;
                }
                Some(Err(why)) => out.bad.push((n, why)),
                None => {}
            },
        }
        kept.push(line);
    }
    // An `Observations` or `Relations` heading whose lines all went is
    // dropped, and so are the blank lines the removal left in a row (code
    // blocks are left as they are).
    let mut rest: Vec<&str> = Vec::new();
    let mut fenced = false;
    for (i, line) in kept.iter().enumerate() {
        if is_fence(line) {
            fenced = !fenced;
        }
        if fenced || is_fence(line) {
            rest.push(line);
            continue;
        }
        if let Some((level, title)) = heading(line)
            && is_semantic_heading(title)
        {
            let empty = kept[i + 1..]
                .iter()
                .take_while(|l| heading(l).is_none_or(|(lv, _)| lv > level))
                .all(|l| l.trim().is_empty());
            if empty {
                continue;
            }
        }
        if line.trim().is_empty() && rest.last().is_none_or(|l| l.trim().is_empty()) {
            continue;
        }
        rest.push(line);
    }
    out.rest = rest.join("\n").trim().to_string();
    Some(out)
}

/// Whether text holds more than headings: a line of prose, a list, code.
fn has_prose(text: &str) -> bool {
    text.lines()
        .any(|l| !l.trim().is_empty() && heading(l).is_none())
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
        let (yaml, raw_body) = split_front_matter(&f.text);
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
        let body = raw_body.trim();
        if body.is_empty() {
            out.skip(rel, "no text (front matter only, or empty)");
            continue;
        }
        let first_line = 1 + f.text[..f.text.len() - raw_body.trim_start().len()]
            .matches('\n')
            .count();
        let sem = semantic(body, first_line);
        let body = sem.as_ref().map_or(body, |s| s.rest.as_str());
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
        let created_at = Some(created.unwrap_or(now));
        if sem.is_none() || has_prose(body) {
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
                    created_at,
                    ..NewMemory::default()
                },
                updated_at: modified,
            });
        }
        if let Some(sem) = sem {
            let note = Note {
                rel,
                name: title.unwrap_or_else(|| stem(rel)),
                ftype: ftype.filter(|t| !t.trim().eq_ignore_ascii_case("note")),
                permalink,
                scope: &scope,
                created_at,
                modified,
            };
            note.drafts(sem, &mut out);
        }
    }
    Ok(out)
}

/// A file's name without its folders and extension (`people/Ana.md`:
/// `Ana`), basic-memory's title for a note without one.
fn stem(rel: &str) -> &str {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    name.rsplit_once('.').map_or(name, |(s, _)| s)
}

/// What the memories of a basic-memory note's observations and relations
/// take from the note.
struct Note<'a> {
    rel: &'a str,
    /// The title, else the file's name.
    name: &'a str,
    /// The front matter's `type`, unless `note`.
    ftype: Option<&'a str>,
    permalink: Option<&'a str>,
    scope: &'a Scope,
    created_at: Option<Timestamp>,
    modified: Option<Timestamp>,
}

impl Note<'_> {
    /// The payload every memory of the note starts from.
    fn payload(&self) -> Value {
        let mut p = json!({ "path": self.rel, "title": self.name });
        if let Some(l) = self.permalink {
            p["permalink"] = l.into();
        }
        p
    }

    fn draft(&self, source_id: String, entry: String, new: NewMemory) -> Draft {
        Draft {
            source_id: format!("{}\0{source_id}", self.rel),
            entry,
            new: NewMemory {
                scope: Some(self.scope.clone()),
                created_at: self.created_at,
                ..new
            },
            updated_at: self.modified,
        }
    }

    /// One draft per observation and per relation; a line shaped like one
    /// that is not is reported, and stays in the note's text.
    fn drafts(&self, sem: Semantic, out: &mut Read) {
        let fact = Kind::Custom("fact".into());
        let name = match self.ftype {
            Some(t) => format!("{} ({t})", self.name),
            None => self.name.to_string(),
        };
        for (n, why) in sem.bad {
            out.skip(
                format!("{} line {n}", self.rel),
                format!("{why}; left in the note's text"),
            );
        }
        for o in sem.observations {
            let kind = o
                .category
                .to_lowercase()
                .parse::<Kind>()
                .ok()
                .filter(|k| *k != Kind::Conversation)
                .unwrap_or_else(|| fact.clone());
            let mut tags = vec![TAG.to_string(), o.category.clone()];
            for t in o.tags {
                if !tags.contains(&t) {
                    tags.push(t);
                }
            }
            let mut payload = self.payload();
            payload["category"] = o.category.as_str().into();
            if let Some(c) = &o.context {
                payload["context"] = c.as_str().into();
            }
            let linked = wikilinks(&o.text);
            if !linked.is_empty() {
                payload["links"] = linked.into();
            }
            out.drafts.push(self.draft(
                format!("observation\0{}\0{}", o.category, o.text),
                format!("{} line {}", self.rel, o.line),
                NewMemory {
                    content: format!("{name}: {}", o.text),
                    kind: Some(kind),
                    payload: Some(payload),
                    tags,
                    ..NewMemory::default()
                },
            ));
        }
        for r in sem.relations {
            let mut payload = self.payload();
            payload["from"] = self.name.into();
            payload["to"] = r.target.as_str().into();
            payload["relation_type"] = r.rtype.as_str().into();
            if let Some(c) = &r.context {
                payload["context"] = c.as_str().into();
            }
            out.drafts.push(self.draft(
                format!(
                    "relation\0{}\0{}\0{}",
                    r.rtype,
                    r.target,
                    r.context.as_deref().unwrap_or("")
                ),
                format!("{} line {}", self.rel, r.line),
                NewMemory {
                    content: format!("{} {} {}", self.name, r.rtype, r.target),
                    kind: Some(fact.clone()),
                    payload: Some(payload),
                    tags: vec![TAG.to_string()],
                    ..NewMemory::default()
                },
            ));
        }
    }
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
    fn observations_are_category_lines_not_tasks_links_or_times() {
        let ok = |item: &str| observation(item).map(|o| o.map(|(c, t)| format!("{c}|{t}")));
        assert_eq!(
            ok("[tech] Uses Rust #lang (since 2024)"),
            Some(Ok("tech|Uses Rust #lang (since 2024)".into()))
        );
        assert_eq!(
            ok("[Tech Stack]   Rust"),
            Some(Ok("Tech Stack|Rust".into()))
        );
        for not in [
            "[ ] a task",
            "[x] done",
            "[X] done",
            "[/] doing",
            "[link](https://example.com)",
            "[link](https://example.com) text",
            "[[Wiki]] link",
            "[00:01:02] said hello",
            "[1:02 - 1:05] said hello",
            "[a]b",
            "plain text",
        ] {
            assert_eq!(observation(not), None, "{not}");
        }
        assert!(
            observation("[] x")
                .unwrap()
                .unwrap_err()
                .contains("empty category")
        );
        assert!(
            observation("[fact]")
                .unwrap()
                .unwrap_err()
                .contains("no content")
        );
        assert!(
            observation("[fact] (ctx)")
                .unwrap()
                .unwrap_err()
                .contains("no content")
        );
        assert_eq!(
            split_context("Uses Rust (since 2024)"),
            ("Uses Rust", Some("since 2024"))
        );
        assert_eq!(
            hashtags("Uses #rust, #a#b and C# #rust"),
            ["rust", "a", "b"]
        );
    }

    #[test]
    fn relations_are_a_type_and_one_link() {
        assert_eq!(
            relation("implements [[Search Design|the design]]"),
            Some(Ok(("implements".into(), "Search Design".into(), None)))
        );
        assert_eq!(
            relation("\"works with\" [[Ana]] (since May)"),
            Some(Ok((
                "works with".into(),
                "Ana".into(),
                Some("since May".into())
            )))
        );
        for not in [
            "[[Ana]]",
            "talked to [[Ana]]",
            "knows [[Ana]] and [[Bo]]",
            "knows [[Ana]] (a) (b)",
            "knows [[Ana",
        ] {
            assert_eq!(relation(not), None, "{not}");
        }
        assert!(relation("knows [[ ]]").unwrap().is_err());
    }

    #[test]
    fn a_note_without_observations_is_not_taken_apart() {
        assert!(semantic("# A\n\n- [ ] task\n- see [[B]]\n", 1).is_none());
        assert!(semantic("```\n- [x1] in code\n```\n", 1).is_none());
        let s = semantic("Intro.\n\n## Relations\n- see [[B]]\n\n## Later\nMore.", 3).unwrap();
        assert_eq!(s.rest, "Intro.\n\n## Later\nMore.");
        assert_eq!(s.relations.len(), 1);
        assert_eq!(s.relations[0].line, 6);
        let s = semantic("- [a] b\n\n```\nx\n\n\ny\n```\n\n\nEnd.", 1).unwrap();
        assert_eq!(
            s.rest, "```\nx\n\n\ny\n```\n\nEnd.",
            "code keeps its blank lines"
        );
        assert_eq!(stem("people/Ana Lima.md"), "Ana Lima");
    }

    #[test]
    fn wikilinks_name_their_targets_once() {
        let links = wikilinks(
            "See [[Billing DB|the DB]] and [[Ana#Role]], [[Billing DB]] again; [[]] and [[broken",
        );
        assert_eq!(links, ["Billing DB", "Ana"]);
    }
}
