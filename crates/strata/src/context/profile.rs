//! Context profiles: what a context is made of, and how big it may be.
//!
//! A profile is read from `strata.toml` (`[profiles.<id>]`, DESIGN §4) or
//! from the seeds' `memory.yaml` (`context_profiles:` as a list of profiles
//! with an `id`, or a map), and validated as a whole when the configuration
//! loads: every error names the profile and the field.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::filter::Filter;
use crate::model::Kind;
use crate::rank::Strategy;
use crate::scope::ViewEntry;

/// Placeholders a source's scope pattern may use; the request fills them.
pub const PLACEHOLDERS: [&str; 7] = [
    "task", "project", "sprint", "stage", "agent", "session", "user",
];

/// Named layers a source may use instead of a scope pattern, with the
/// pattern each stands for.
pub const LAYERS: [(&str, &str); 7] = [
    ("task", "task/{task}"),
    ("project", "project/{project}"),
    ("sprint", "project/{project}/sprint/{sprint}"),
    ("stage", "project/{project}/stage/{stage}"),
    ("agent", "project/{project}/agent/{agent}"),
    ("session", "session/{session}"),
    ("global", "global"),
];

/// The seed default share of the budget kept for the overflow summary.
pub const DEFAULT_SUMMARY_SHARE: f64 = 0.3;

/// How a package is rendered for a model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Render {
    /// One markdown document, one section per source.
    #[default]
    Markdown,
    /// A chat-message list: a system message with the sections, then the
    /// conversation turns as user/assistant messages.
    Messages,
    /// The package as JSON (its `text` is the markdown rendering).
    Json,
}

impl Render {
    /// The render's word.
    pub fn as_str(self) -> &'static str {
        match self {
            Render::Markdown => "markdown",
            Render::Messages => "messages",
            Render::Json => "json",
        }
    }
}

impl std::str::FromStr for Render {
    type Err = Error;
    fn from_str(s: &str) -> Result<Render, Error> {
        match s {
            "markdown" => Ok(Render::Markdown),
            "messages" => Ok(Render::Messages),
            "json" => Ok(Render::Json),
            _ => Err(Error::field(
                "render",
                format!("`{s}` is not one of markdown, messages, json"),
            )),
        }
    }
}

/// What writes the summary of what did not fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SummarizerKind {
    /// The built-in extractive summarizer (no LLM).
    #[default]
    Extractive,
    /// The OpenAI-compatible chat endpoint of `[summarizer]`.
    Llm,
}

/// One source of a profile: a scope pattern and what to take from it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileSource {
    /// Scope pattern (`project/{project}`, `global`, `project/{project}/**`).
    pub scope: String,
    /// Section heading; derived from the pattern's layer when unset.
    pub title: String,
    /// Only these kinds (any of).
    pub kinds: Vec<Kind>,
    /// Only memories with any of these tags.
    pub tags: Vec<String>,
    /// Only memories at or above this stored importance.
    pub min_importance: Option<f64>,
    /// Extra conditions (the JSON filter language).
    pub filter: Option<serde_json::Value>,
    /// Share of the budget; sources without one split what is left equally.
    pub share: Option<f64>,
    /// Keys loaded first, in this order, when they fit (`*` at the end
    /// matches any suffix).
    pub always: Vec<String>,
    /// Skip the source (instead of failing) when the request lacks one of
    /// its placeholders.
    pub optional: bool,
}

impl ProfileSource {
    /// A source over `scope` (a pattern) with its heading derived from the
    /// pattern and no conditions.
    pub fn new(scope: impl Into<String>) -> ProfileSource {
        let scope = scope.into();
        ProfileSource {
            title: title_for(&scope),
            scope,
            kinds: Vec::new(),
            tags: Vec::new(),
            min_importance: None,
            filter: None,
            share: None,
            always: Vec::new(),
            optional: false,
        }
    }

    /// The view entry this source reads for a request's `vars`
    /// (`project/{project}` with `project = acme` is `project/acme`);
    /// `Ok(None)` when a placeholder has no value, an error when the filled
    /// pattern is not a scope.
    pub fn view_entry(&self, vars: &BTreeMap<String, String>) -> Result<Option<ViewEntry>, Error> {
        fill(&self.scope, vars)
    }
}

/// A validated context profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Its id (the key under `[profiles]`).
    pub id: String,
    /// Hard budget of the rendered package, in tokens.
    pub max_tokens: u32,
    /// How each source's items are ranked.
    pub strategy: Strategy,
    /// Keep the first (oldest) and last (newest) N items of each source.
    pub head_tail: usize,
    /// Share of the budget for a summary of what did not fit (0 = none).
    pub summary_share: f64,
    /// Which summarizer writes it.
    pub summarizer: SummarizerKind,
    /// Default render.
    pub render: Render,
    /// Let sensitive memories in.
    pub include_sensitive: bool,
    /// Sources, in priority order.
    pub sources: Vec<ProfileSource>,
}

impl Profile {
    /// The built-in profile behind `"global"`: recency over the task, the
    /// project and global memory (the first two when the request names
    /// them). `Engine::context` ranks it hybrid when the request has a
    /// query.
    pub fn builtin_global() -> Profile {
        let src = |layer: &str, optional: bool| ProfileSource {
            optional,
            ..ProfileSource::new(layer_pattern(layer).unwrap_or("global"))
        };
        Profile {
            id: "global".into(),
            max_tokens: 8000,
            strategy: Strategy::Recency,
            head_tail: 0,
            summary_share: 0.0,
            summarizer: SummarizerKind::Extractive,
            render: Render::Markdown,
            include_sensitive: false,
            sources: vec![
                src("task", true),
                src("project", true),
                src("global", false),
            ],
        }
    }

    /// Each source's share of the budget: its own, or an equal split of what
    /// the explicit shares leave.
    pub fn shares(&self) -> Vec<f64> {
        let explicit: f64 = self.sources.iter().filter_map(|s| s.share).sum();
        let open = self.sources.iter().filter(|s| s.share.is_none()).count();
        let rest = if open > 0 {
            (1.0 - explicit).max(0.0) / open as f64
        } else {
            0.0
        };
        self.sources
            .iter()
            .map(|s| s.share.unwrap_or(rest))
            .collect()
    }
}

/// The pattern a named layer stands for.
pub fn layer_pattern(layer: &str) -> Option<&'static str> {
    LAYERS.iter().find(|(l, _)| *l == layer).map(|(_, p)| *p)
}

/// A section heading for a scope pattern, from its deepest layer word.
pub fn title_for(pattern: &str) -> String {
    let segs: Vec<&str> = pattern.split('/').collect();
    let layer = segs
        .iter()
        .rev()
        .find(|s| LAYERS.iter().any(|(l, _)| l == *s))
        .copied();
    match layer {
        Some("task") => "Task context".into(),
        Some("project") => "Project context".into(),
        Some("sprint") => "Current sprint".into(),
        Some("stage") => "Current stage".into(),
        Some("agent") => "Agent memory".into(),
        Some("session") => "Conversation so far".into(),
        Some("global") => "Global context".into(),
        _ => format!("Context from {pattern}"),
    }
}

/// The placeholders used in a pattern, in order; an error names an unclosed
/// brace or an unknown name.
pub fn placeholders(pattern: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let close = after
            .find('}')
            .ok_or_else(|| format!("unclosed `{{` in `{pattern}`"))?;
        let name = &after[..close];
        if !PLACEHOLDERS.contains(&name) {
            return Err(format!(
                "unknown placeholder `{{{name}}}` in `{pattern}` (known: {})",
                PLACEHOLDERS.join(", ")
            ));
        }
        out.push(name.to_string());
        rest = &after[close + 1..];
    }
    if rest.contains('}') {
        return Err(format!("unmatched `}}` in `{pattern}`"));
    }
    Ok(out)
}

/// Fills a pattern's placeholders; `Ok(None)` when one is missing from
/// `vars` (the caller decides whether that is an error).
pub fn fill(pattern: &str, vars: &BTreeMap<String, String>) -> Result<Option<ViewEntry>, Error> {
    let mut text = pattern.to_string();
    for name in placeholders(pattern).map_err(|e| Error::field("scope", e))? {
        let Some(v) = vars.get(&name) else {
            return Ok(None);
        };
        crate::scope::validate_segment(v).map_err(|r| Error::InvalidScope {
            scope: v.clone(),
            reason: format!("value of {{{name}}}: {r}"),
        })?;
        text = text.replace(&format!("{{{name}}}"), v);
    }
    ViewEntry::parse(&text).map(Some)
}

/// The filter a source applies (sensitivity aside).
pub fn source_filter(src: &ProfileSource, include_sensitive: bool) -> Result<Filter, Error> {
    let mut all = Vec::new();
    if !src.kinds.is_empty() {
        let kinds: Vec<&str> = src.kinds.iter().map(|k| k.as_str()).collect();
        all.push(serde_json::json!({ "kind": { "$in": kinds } }));
    }
    if !src.tags.is_empty() {
        all.push(serde_json::json!({ "tags": src.tags }));
    }
    if let Some(x) = src.min_importance {
        all.push(serde_json::json!({ "importance": { "$gte": x } }));
    }
    if !include_sensitive {
        all.push(serde_json::json!({ "sensitive": false }));
    }
    if let Some(f) = &src.filter {
        all.push(f.clone());
    }
    if all.is_empty() {
        return Ok(Filter::all());
    }
    Filter::parse(&serde_json::json!({ "$and": all }))
}

/// A profile as written in a file (TOML or YAML), before validation.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FileProfile {
    /// Id (the list form of `context_profiles` needs it).
    pub id: Option<String>,
    /// Free text.
    pub description: Option<String>,
    /// Budget in tokens (default 8000).
    pub max_tokens: Option<i64>,
    /// `recency | importance | relevance | hybrid` (the seeds'
    /// `retrieval_policy`, where `semantic` means relevance, is accepted).
    #[serde(alias = "retrieval_policy")]
    pub strategy: Option<String>,
    /// HEAD/TAIL count.
    pub head_tail: Option<i64>,
    /// Summary share; `true` means the seed default 0.3.
    pub summary_share: Option<ShareOrBool>,
    /// `extractive` or `llm`.
    pub summarizer: Option<String>,
    /// `markdown | messages | json`.
    pub render: Option<String>,
    /// Let sensitive memories in.
    pub include_sensitive: Option<bool>,
    /// Sources.
    #[serde(default)]
    pub sources: Vec<FileSource>,
    /// Seed metadata, kept for compatibility and otherwise unused.
    pub metadata: Option<serde_json::Value>,
}

/// `summary_share = 0.2` or `summary_share = true`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum ShareOrBool {
    /// A share.
    Share(f64),
    /// On (0.3) or off.
    On(bool),
}

/// A source as written in a file.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FileSource {
    /// Scope pattern.
    pub scope: Option<String>,
    /// A named layer instead of a pattern (the seeds call it `store`).
    #[serde(alias = "store")]
    pub layer: Option<String>,
    /// Heading.
    pub title: Option<String>,
    /// Kinds.
    #[serde(default)]
    pub kinds: Vec<String>,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Floor on stored importance.
    pub min_importance: Option<f64>,
    /// Extra JSON filter.
    pub filter: Option<serde_json::Value>,
    /// Budget share.
    pub share: Option<f64>,
    /// Keys loaded first.
    #[serde(default)]
    pub always: Vec<String>,
    /// Skip when a placeholder is missing.
    pub optional: Option<bool>,
}

impl FileProfile {
    /// Validates into a [`Profile`]; errors read `profiles.<id>.<field>: …`.
    pub fn validate(self, id: &str) -> Result<Profile, Error> {
        let bad = |field: &str, why: String| {
            Error::InvalidConfig(format!("profiles.{id}.{field}: {why}"))
        };
        if id.is_empty()
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return Err(Error::InvalidConfig(format!(
                "profiles: id `{id}` must be 1 or more of [A-Za-z0-9._-]"
            )));
        }
        if matches!(id, "none" | "global") {
            return Err(Error::InvalidConfig(format!(
                "profiles.{id}: `{id}` is built in and cannot be redefined"
            )));
        }
        let max_tokens = match self.max_tokens {
            None => 8000,
            Some(n) if n <= 0 => return Err(bad("max_tokens", format!("{n} must be positive"))),
            Some(n) if n > 10_000_000 => {
                return Err(bad("max_tokens", format!("{n} is over 10,000,000")));
            }
            Some(n) => n as u32,
        };
        let strategy = match self.strategy.as_deref() {
            None => Strategy::Hybrid,
            Some("semantic") => Strategy::Relevance,
            Some(s) => s.parse().map_err(|_| {
                bad(
                    "strategy",
                    format!("`{s}` is not one of recency, importance, relevance, hybrid"),
                )
            })?,
        };
        let head_tail = match self.head_tail {
            None => 0,
            Some(n) if !(0..=1000).contains(&n) => {
                return Err(bad("head_tail", format!("{n} must be between 0 and 1000")));
            }
            Some(n) => n as usize,
        };
        let summary_share = match self.summary_share {
            None | Some(ShareOrBool::On(false)) => 0.0,
            Some(ShareOrBool::On(true)) => DEFAULT_SUMMARY_SHARE,
            Some(ShareOrBool::Share(x)) if !(0.0..1.0).contains(&x) => {
                return Err(bad("summary_share", format!("{x} must be in [0, 1)")));
            }
            Some(ShareOrBool::Share(x)) => x,
        };
        let summarizer = match self.summarizer.as_deref() {
            None | Some("extractive") => SummarizerKind::Extractive,
            Some("llm") => SummarizerKind::Llm,
            Some(s) => {
                return Err(bad(
                    "summarizer",
                    format!("`{s}` is not one of extractive, llm"),
                ));
            }
        };
        let render = match self.render.as_deref() {
            None => Render::Markdown,
            Some(r) => r.parse().map_err(|_| {
                bad(
                    "render",
                    format!("`{r}` is not one of markdown, messages, json"),
                )
            })?,
        };
        if self.sources.is_empty() {
            return Err(bad("sources", "a profile needs at least one source".into()));
        }
        let mut sources = Vec::with_capacity(self.sources.len());
        for (i, s) in self.sources.into_iter().enumerate() {
            let field = |f: &str| format!("sources[{i}].{f}");
            let scope = match (s.scope, s.layer) {
                (Some(_), Some(_)) => {
                    return Err(bad(&field("scope"), "set scope or layer, not both".into()));
                }
                (None, None) => {
                    return Err(bad(&field("scope"), "missing (or name a `layer`)".into()));
                }
                (Some(p), None) => p,
                (None, Some(l)) => layer_pattern(&l)
                    .ok_or_else(|| {
                        bad(
                            &field("layer"),
                            format!(
                                "unknown layer `{l}` (known: {})",
                                LAYERS
                                    .iter()
                                    .map(|(l, _)| *l)
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        )
                    })?
                    .to_string(),
            };
            let names = placeholders(&scope).map_err(|e| bad(&field("scope"), e))?;
            // The pattern must be a valid view entry once filled.
            let mut probe = scope.clone();
            for n in &names {
                probe = probe.replace(&format!("{{{n}}}"), "x");
            }
            let entry =
                ViewEntry::parse(&probe).map_err(|e| bad(&field("scope"), e.to_string()))?;
            let root = entry.scope.segments().next().unwrap_or("");
            if !LAYERS.iter().any(|(l, _)| *l == root) {
                return Err(bad(
                    &field("scope"),
                    format!(
                        "`{scope}` starts with unknown layer `{root}` (known: {})",
                        LAYERS
                            .iter()
                            .map(|(l, _)| *l)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
            let mut kinds = Vec::with_capacity(s.kinds.len());
            for k in &s.kinds {
                kinds.push(
                    k.parse::<Kind>()
                        .map_err(|e| bad(&field("kinds"), e.to_string()))?,
                );
            }
            for t in &s.tags {
                crate::model::validate_tags(std::slice::from_ref(t))
                    .map_err(|e| bad(&field("tags"), e.to_string()))?;
            }
            if let Some(x) = s.min_importance
                && !(0.0..=1.0).contains(&x)
            {
                return Err(bad(
                    &field("min_importance"),
                    format!("{x} must be in [0, 1]"),
                ));
            }
            if let Some(x) = s.share
                && !(x > 0.0 && x <= 1.0)
            {
                return Err(bad(&field("share"), format!("{x} must be in (0, 1]")));
            }
            for a in &s.always {
                if a.is_empty() || a.len() > 512 {
                    return Err(bad(&field("always"), format!("`{a}` must be 1–512 bytes")));
                }
            }
            let src = ProfileSource {
                title: s.title.unwrap_or_else(|| title_for(&scope)),
                scope,
                kinds,
                tags: s.tags,
                min_importance: s.min_importance,
                filter: s.filter,
                share: s.share,
                always: s.always,
                optional: s.optional.unwrap_or(false),
            };
            source_filter(&src, true).map_err(|e| bad(&field("filter"), e.to_string()))?;
            sources.push(src);
        }
        let sum: f64 = sources.iter().filter_map(|s| s.share).sum();
        if sum > 1.0 + 1e-9 {
            return Err(bad(
                "sources",
                format!("shares add up to {sum:.3}, more than 1"),
            ));
        }
        Ok(Profile {
            id: id.to_string(),
            max_tokens,
            strategy,
            head_tail,
            summary_share,
            summarizer,
            render,
            include_sensitive: self.include_sensitive.unwrap_or(false),
            sources,
        })
    }
}

/// The seeds' `context_profiles`: a list of profiles with ids, or a map.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum FileProfiles {
    /// `- id: coder …`
    List(Vec<FileProfile>),
    /// `coder: …`
    Map(BTreeMap<String, FileProfile>),
}

impl FileProfiles {
    /// Profiles by id; ids must be unique.
    pub fn into_map(self) -> Result<BTreeMap<String, FileProfile>, Error> {
        match self {
            FileProfiles::Map(m) => Ok(m),
            FileProfiles::List(list) => {
                let mut out = BTreeMap::new();
                for (i, p) in list.into_iter().enumerate() {
                    let id = p.id.clone().ok_or_else(|| {
                        Error::InvalidConfig(format!("context_profiles[{i}].id: missing"))
                    })?;
                    if out.insert(id.clone(), p).is_some() {
                        return Err(Error::InvalidConfig(format!(
                            "context_profiles[{i}].id: `{id}` is defined twice"
                        )));
                    }
                }
                Ok(out)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> Result<Profile, Error> {
        let p: FileProfile =
            toml::from_str(toml_text).map_err(|e| Error::InvalidConfig(e.to_string()))?;
        p.validate("p")
    }

    #[test]
    fn reads_the_design_example() {
        let p = parse(
            r#"
max_tokens = 8000
strategy = "hybrid"
head_tail = 2
summary_share = 0.3
render = "markdown"
[[sources]]
scope = "task/{task}"
share = 0.5
[[sources]]
scope = "project/{project}"
kinds = ["decision", "convention", "failure"]
share = 0.3
always = ["CLAUDE.md"]
[[sources]]
scope = "global"
tags = ["preference"]
share = 0.2
"#,
        )
        .unwrap();
        assert_eq!(p.sources.len(), 3);
        assert_eq!(p.sources[0].title, "Task context");
        assert_eq!(p.sources[1].title, "Project context");
        assert_eq!(p.shares(), vec![0.5, 0.3, 0.2]);
    }

    #[test]
    fn errors_name_profile_and_field() {
        let cases = [
            (
                "max_tokens = 0\n[[sources]]\nscope = \"global\"",
                "profiles.p.max_tokens",
            ),
            (
                "strategy = \"magic\"\n[[sources]]\nscope = \"global\"",
                "profiles.p.strategy",
            ),
            (
                "[[sources]]\nscope = \"task/{tsk}\"",
                "unknown placeholder `{tsk}`",
            ),
            ("[[sources]]\nscope = \"task/{task\"", "unclosed"),
            ("[[sources]]\nlayer = \"team\"", "unknown layer `team`"),
            ("[[sources]]\nscope = \"team/x\"", "unknown layer `team`"),
            (
                "[[sources]]\nscope = \"global\"\nshare = 0.7\n[[sources]]\nscope = \"task/{task}\"\nshare = 0.5",
                "more than 1",
            ),
            (
                "[[sources]]\nscope = \"global\"\nkinds = [\"Bad Kind\"]",
                "sources[0].kinds",
            ),
            (
                "[[sources]]\nscope = \"global\"\nshare = 0",
                "sources[0].share",
            ),
            (
                "[[sources]]\nscope = \"global\"\nfilter = {nope = 1}",
                "sources[0].filter",
            ),
            (
                "render = \"html\"\n[[sources]]\nscope = \"global\"",
                "profiles.p.render",
            ),
            (
                "summary_share = 1.5\n[[sources]]\nscope = \"global\"",
                "summary_share",
            ),
            ("max_tokens = 10", "at least one source"),
        ];
        for (text, want) in cases {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn placeholders_fill_and_refuse_bad_values() {
        let mut vars = BTreeMap::new();
        assert_eq!(fill("task/{task}", &vars).unwrap(), None);
        vars.insert("task".to_string(), "t-1".to_string());
        assert_eq!(
            fill("task/{task}/**", &vars).unwrap().unwrap().to_string(),
            "task/t-1/**"
        );
        vars.insert("task".to_string(), "../etc".to_string());
        assert!(fill("task/{task}", &vars).is_err());
    }

    #[test]
    fn titles_follow_the_deepest_layer() {
        assert_eq!(
            title_for("project/{project}/sprint/{sprint}"),
            "Current sprint"
        );
        assert_eq!(
            title_for("project/{project}/stage/{stage}"),
            "Current stage"
        );
        assert_eq!(title_for("global"), "Global context");
    }
}
