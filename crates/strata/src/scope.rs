//! Scopes (where a memory lives) and views (which scopes a read may see).
//!
//! A scope is a `/`-separated path such as `project/acme/sprint/s12`. Each
//! segment is 1–64 characters of `[A-Za-z0-9._-]` (and not `.` or `..`); a
//! path has at most 16 segments. A malformed scope is always an error, never a
//! silent fallback.
//!
//! A view is a list of entries, each either an exact scope (`project/acme`) or
//! a subtree (`project/acme/**`, the scope and everything below it). Every read
//! names a view and nothing outside it is returned; the stores compile a view
//! to index range predicates (see [`ViewEntry::range`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Longest scope segment, in bytes.
pub const MAX_SEGMENT_LEN: usize = 64;
/// Most segments in a scope path.
pub const MAX_DEPTH: usize = 16;

/// A validated scope path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Scope(String);

impl Scope {
    /// Parses and validates a scope path.
    pub fn parse(text: &str) -> Result<Scope, Error> {
        let bad = |reason: &str| Error::InvalidScope {
            scope: text.to_string(),
            reason: reason.to_string(),
        };
        if text.is_empty() {
            return Err(bad("empty scope"));
        }
        let segments: Vec<&str> = text.split('/').collect();
        if segments.len() > MAX_DEPTH {
            return Err(bad(&format!("more than {MAX_DEPTH} segments")));
        }
        for seg in &segments {
            validate_segment(seg).map_err(|reason| bad(&reason))?;
        }
        Ok(Scope(text.to_string()))
    }

    /// The built-in global scope.
    pub fn global() -> Scope {
        Scope("global".to_string())
    }

    /// `project/<name>`. A name that is already a project scope
    /// (`project/acme`) is an error rather than `project/project/acme`.
    pub fn project(name: &str) -> Result<Scope, Error> {
        Scope::named("project", name)
    }

    /// `task/<name>`; a name that is already a task scope is an error.
    pub fn task(name: &str) -> Result<Scope, Error> {
        Scope::named("task", name)
    }

    fn named(layer: &str, name: &str) -> Result<Scope, Error> {
        if let Some(rest) = name.strip_prefix(layer).and_then(|r| r.strip_prefix('/')) {
            return Err(Error::InvalidScope {
                scope: name.to_string(),
                reason: format!("give the {layer}'s name (`{rest}`), not its scope"),
            });
        }
        Scope::parse(&format!("{layer}/{name}"))
    }

    /// The path text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path's segments.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// The lifetime tier this scope belongs to, decided by its first segment.
    pub fn tier(&self) -> Tier {
        match self.segments().next() {
            Some("global") => Tier::Global,
            Some("task") | Some("session") => Tier::Task,
            _ => Tier::Project,
        }
    }

    /// The scope's root for per-project bounds: `project/<p>` for anything
    /// under a project, `None` otherwise.
    pub fn project_root(&self) -> Option<Scope> {
        let mut segs = self.segments();
        match (segs.next(), segs.next()) {
            (Some("project"), Some(p)) => Some(Scope(format!("project/{p}"))),
            _ => None,
        }
    }

    /// Whether `self` equals `other` or lies below it.
    pub fn is_within(&self, other: &Scope) -> bool {
        self.0 == other.0
            || (self.0.len() > other.0.len()
                && self.0.starts_with(&other.0)
                && self.0.as_bytes()[other.0.len()] == b'/')
    }

    /// Every prefix of this path, shortest first, ending with the path itself.
    pub fn prefixes(&self) -> impl Iterator<Item = &str> {
        let s = self.0.as_str();
        s.match_indices('/')
            .map(move |(i, _)| &s[..i])
            .chain(std::iter::once(s))
    }
}

/// Checks one segment; the error is the reason.
pub fn validate_segment(seg: &str) -> Result<(), String> {
    if seg.is_empty() {
        return Err("empty segment (doubled, leading or trailing `/`)".into());
    }
    if seg.len() > MAX_SEGMENT_LEN {
        return Err(format!(
            "segment `{seg}` is longer than {MAX_SEGMENT_LEN} bytes"
        ));
    }
    if seg == "." || seg == ".." {
        return Err(format!("segment `{seg}` is not allowed"));
    }
    if let Some(c) = seg
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "segment `{seg}` contains `{}`; allowed are A-Z a-z 0-9 . _ -",
            c.escape_default()
        ));
    }
    Ok(())
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Scope {
    type Err = Error;
    fn from_str(s: &str) -> Result<Scope, Error> {
        Scope::parse(s)
    }
}

impl TryFrom<String> for Scope {
    type Error = Error;
    fn try_from(s: String) -> Result<Scope, Error> {
        Scope::parse(&s)
    }
}

impl From<Scope> for String {
    fn from(s: Scope) -> String {
        s.0
    }
}

/// The lifetime tier of a scope: what the memory is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Tier {
    /// Ephemeral: cleared when the task completes (`task/…`, `session/…`).
    Task,
    /// Persistent per project, bounded by `max_items` (everything else).
    Project,
    /// Cross-project (`global/…`); risky writes need confirmation.
    Global,
}

impl Tier {
    /// The tier's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Task => "task",
            Tier::Project => "project",
            Tier::Global => "global",
        }
    }
}

/// One entry of a view.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ViewEntry {
    /// The scope named.
    pub scope: Scope,
    /// Whether everything below `scope` is visible too (`scope/**`).
    pub subtree: bool,
}

impl ViewEntry {
    /// Parses `scope` or `scope/**`.
    pub fn parse(text: &str) -> Result<ViewEntry, Error> {
        match text.strip_suffix("/**") {
            Some(base) => Ok(ViewEntry {
                scope: Scope::parse(base)?,
                subtree: true,
            }),
            None if text == "**" => Err(Error::InvalidScope {
                scope: text.into(),
                reason: "`**` alone would see every scope; name a root such as `project/**`".into(),
            }),
            None => Ok(ViewEntry {
                scope: Scope::parse(text)?,
                subtree: false,
            }),
        }
    }

    /// Whether a memory in `scope` is visible through this entry.
    pub fn contains(&self, scope: &Scope) -> bool {
        if self.subtree {
            scope.is_within(&self.scope)
        } else {
            *scope == self.scope
        }
    }

    /// The half-open range of scope strings strictly below this entry's scope:
    /// `(scope + "/", scope + "0")`, since `'0'` is the byte after `'/'`.
    /// Lets a store answer a subtree with an index range instead of `LIKE`,
    /// whose `_` wildcard would collide with scope characters.
    pub fn range(&self) -> (String, String) {
        (format!("{}/", self.scope), format!("{}0", self.scope))
    }
}

impl fmt::Display for ViewEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.subtree {
            write!(f, "{}/**", self.scope)
        } else {
            write!(f, "{}", self.scope)
        }
    }
}

/// The scopes a caller may touch: scope prefixes, each covering itself and
/// everything below it (`project/acme` covers `project/acme/sprint/s1`).
///
/// Reads name a [`View`]; operations that resolve something by id or name
/// (import, sessions) take a fence instead, so that a memory or session
/// outside it is never changed and answers exactly like one that does not
/// exist. [`Fence::everything`] is the local user's: no limit.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Fence {
    /// `None` covers every scope.
    prefixes: Option<std::sync::Arc<[Scope]>>,
}

impl Fence {
    /// Every scope.
    pub fn everything() -> Fence {
        Fence { prefixes: None }
    }

    /// `prefixes` and everything below them; an empty list covers nothing.
    pub fn within(prefixes: impl Into<std::sync::Arc<[Scope]>>) -> Fence {
        Fence {
            prefixes: Some(prefixes.into()),
        }
    }

    /// Whether the fence covers every scope.
    pub fn is_everything(&self) -> bool {
        self.prefixes.is_none()
    }

    /// Whether `scope` lies inside the fence.
    pub fn contains(&self, scope: &Scope) -> bool {
        match &self.prefixes {
            None => true,
            Some(ps) => ps.iter().any(|p| scope.is_within(p)),
        }
    }

    /// The prefixes; `None` for [`Fence::everything`].
    pub fn prefixes(&self) -> Option<&[Scope]> {
        self.prefixes.as_deref()
    }
}

/// The scopes a read may see.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct View {
    entries: Vec<ViewEntry>,
}

impl View {
    /// Most entries a read may name ([`View::check`]). Each entry is a
    /// term of the store's query, and SQLite refuses expressions deeper
    /// than 1,000; a subtree entry (`project/**`) covers any number of
    /// scopes.
    pub const MAX_ENTRIES: usize = 256;

    /// A view from parsed entries; duplicates are removed, order is kept.
    pub fn new(entries: impl IntoIterator<Item = ViewEntry>) -> View {
        let mut seen = std::collections::HashSet::new();
        let out = entries
            .into_iter()
            .filter(|e| seen.insert(e.clone()))
            .collect();
        View { entries: out }
    }

    /// Checks that a read may use the view: it names at least one scope and
    /// at most [`View::MAX_ENTRIES`].
    pub fn check(&self) -> Result<(), Error> {
        if self.entries.is_empty() {
            return Err(Error::field("view", "no scope named"));
        }
        View::check_len(self.entries.len())
    }

    /// Checks a view's size before its entries are parsed (a front end
    /// refuses a huge list without reading it).
    pub fn check_len(n: usize) -> Result<(), Error> {
        if n > View::MAX_ENTRIES {
            return Err(Error::field(
                "view",
                format!(
                    "{n} scopes, over the limit of {}; name a subtree (`project/**`) instead of its scopes",
                    View::MAX_ENTRIES
                ),
            ));
        }
        Ok(())
    }

    /// Parses each text as a view entry. An empty list is an error: a read
    /// must name what it may see.
    pub fn parse<S: AsRef<str>>(texts: &[S]) -> Result<View, Error> {
        if texts.is_empty() {
            return Err(Error::field(
                "view",
                "no scope named; a read must name the scopes it may see (e.g. --view project/acme)",
            ));
        }
        let entries = texts
            .iter()
            .map(|t| ViewEntry::parse(t.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        let view = View::new(entries);
        view.check()?;
        Ok(view)
    }

    /// A view of exactly one scope.
    pub fn scope(scope: Scope) -> View {
        View::new([ViewEntry {
            scope,
            subtree: false,
        }])
    }

    /// A view of one scope and everything below it.
    pub fn subtree(scope: Scope) -> View {
        View::new([ViewEntry {
            scope,
            subtree: true,
        }])
    }

    /// The view's entries.
    pub fn entries(&self) -> &[ViewEntry] {
        &self.entries
    }

    /// Whether the view names nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a memory in `scope` is visible.
    pub fn contains(&self, scope: &Scope) -> bool {
        self.entries.iter().any(|e| e.contains(scope))
    }

    /// Whether any visible scope is in the global tier.
    pub fn touches_global(&self) -> bool {
        self.entries.iter().any(|e| e.scope.tier() == Tier::Global)
    }
}

impl fmt::Display for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.entries.iter().map(|e| e.to_string()).collect();
        f.write_str(&parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_and_task_take_names_not_scopes() {
        assert_eq!(Scope::project("acme").unwrap().as_str(), "project/acme");
        assert_eq!(Scope::task("t-42").unwrap().as_str(), "task/t-42");
        // A deeper name is a deeper scope, as before.
        assert_eq!(
            Scope::project("acme/sprint/s1").unwrap().as_str(),
            "project/acme/sprint/s1"
        );
        let e = Scope::project("project/acme").unwrap_err().to_string();
        assert!(e.contains("project/acme") && e.contains("`acme`"), "{e}");
        let e = Scope::task("task/t-42").unwrap_err().to_string();
        assert!(e.contains("`t-42`"), "{e}");
        // A project whose name merely starts with the word is fine.
        assert_eq!(
            Scope::project("projection").unwrap().as_str(),
            "project/projection"
        );
    }

    #[test]
    fn valid_scopes() {
        for s in [
            "global",
            "project/acme",
            "project/acme/sprint/s12/stage/design",
            "task/t-42",
            "a.b_c-d",
        ] {
            assert_eq!(Scope::parse(s).unwrap().as_str(), s);
        }
    }

    #[test]
    fn invalid_scopes_name_the_problem() {
        for (s, want) in [
            ("", "empty scope"),
            ("project//acme", "empty segment"),
            ("/project", "empty segment"),
            ("project/", "empty segment"),
            ("project/ac me", "contains ` `"),
            ("project/ac%me", "contains `%`"),
            ("project/..", "not allowed"),
            (&"a/".repeat(17)[..33], "more than 16"),
        ] {
            let err = Scope::parse(s).unwrap_err().to_string();
            assert!(err.contains(want), "{s:?}: {err}");
        }
        let long = "x".repeat(65);
        assert!(
            Scope::parse(&long)
                .unwrap_err()
                .to_string()
                .contains("longer than 64")
        );
    }

    #[test]
    fn within_and_views() {
        let p = Scope::parse("project/acme").unwrap();
        let sub = Scope::parse("project/acme/sprint/s1").unwrap();
        let other = Scope::parse("project/acme2").unwrap();
        assert!(sub.is_within(&p));
        assert!(!other.is_within(&p));
        let v = View::parse(&["project/acme/**"]).unwrap();
        assert!(v.contains(&p) && v.contains(&sub) && !v.contains(&other));
        let exact = View::parse(&["project/acme"]).unwrap();
        assert!(exact.contains(&p) && !exact.contains(&sub));
        let (lo, hi) = v.entries()[0].range();
        assert!(sub.as_str() > lo.as_str() && sub.as_str() < hi.as_str());
        assert!(!(other.as_str() > lo.as_str() && other.as_str() < hi.as_str()));
        assert!(View::parse::<&str>(&[]).is_err());
        assert!(ViewEntry::parse("**").is_err());
    }

    #[test]
    fn tiers_and_prefixes() {
        assert_eq!(Scope::parse("global").unwrap().tier(), Tier::Global);
        assert_eq!(Scope::parse("task/t1").unwrap().tier(), Tier::Task);
        assert_eq!(Scope::parse("project/a/x").unwrap().tier(), Tier::Project);
        let s = Scope::parse("project/a/x").unwrap();
        assert_eq!(
            s.prefixes().collect::<Vec<_>>(),
            ["project", "project/a", "project/a/x"]
        );
        assert_eq!(s.project_root().unwrap().as_str(), "project/a");
    }
}
