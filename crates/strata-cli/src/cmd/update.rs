//! `strata update ID [--expected-version N] …`
//!
//! Compare-and-swap on the version. Without `--expected-version` the
//! command reads the current version and writes against it: a
//! read-modify-write that still refuses a change made in between.

use anyhow::Result;
use clap::Args;

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// The memory id, or its first 8 or more characters when they name one memory.
    pub id: String,
    /// The version you read; the update fails if it changed since
    /// (default: the current version, read just before writing).
    #[arg(long)]
    pub expected_version: Option<u64>,
    /// New content.
    #[arg(long)]
    pub content: Option<String>,
    /// New importance.
    #[arg(long)]
    pub importance: Option<f64>,
    /// Replace the tags (repeatable).
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// New payload JSON object.
    #[arg(long)]
    pub payload: Option<String>,
    /// Pin (true) or unpin (false).
    #[arg(long)]
    pub pinned: Option<bool>,
    /// Mark (true) or unmark (false) sensitive.
    #[arg(long)]
    pub sensitive: Option<bool>,
}

pub fn run(g: &Global, mut a: UpdateArgs) -> Result<()> {
    let patch = strata::Patch {
        content: a.content.clone(),
        importance: a.importance,
        tags: if a.tags.is_empty() {
            None
        } else {
            Some(a.tags.clone())
        },
        payload: match &a.payload {
            Some(p) => Some(Some(serde_json::from_str(p).map_err(|e| {
                strata::Error::InvalidField {
                    field: "payload".into(),
                    reason: format!("not valid JSON: {e}"),
                }
            })?)),
            None => None,
        },
        pinned: a.pinned,
        sensitive: a.sensitive,
        ..Default::default()
    };
    let e = app::open(g)?;
    a.id = app::resolve_id(&e, &a.id)?;
    let expected = match a.expected_version {
        Some(v) => v,
        None => {
            e.get(&a.id)?
                .ok_or_else(|| strata::Error::NotFound(a.id.clone()))?
                .version
        }
    };
    let m = e.update(&a.id, patch, expected)?;
    app::audit(&e, "update", app::scopes([&m.scope]), 1, vec![m.id.clone()])?;
    if g.json {
        output::json(&m)
    } else {
        output::line(format!(
            "updated {} from v{expected} to v{}",
            m.id, m.version
        ))
    }
}
