//! `strata remember "TEXT" --scope S …`

use std::io::Read;

use anyhow::Result;
use clap::Args;

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Args)]
pub struct RememberArgs {
    /// The text to remember (`-` reads it from standard input).
    pub text: String,
    /// Scope to store it in, e.g. project/acme or task/t-42.
    #[arg(long)]
    pub scope: String,
    /// Kind: decision, finding, preference, convention, failure, … or a custom word.
    #[arg(long)]
    pub kind: Option<String>,
    /// Importance 0.0–1.0 (default from the kind).
    #[arg(long)]
    pub importance: Option<f64>,
    /// A tag (repeatable).
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// Key: writing the same (scope, key) again supersedes the old value.
    #[arg(long)]
    pub key: Option<String>,
    /// Structured payload, a JSON object.
    #[arg(long)]
    pub payload: Option<String>,
    /// Role: user, assistant, system, tool.
    #[arg(long)]
    pub role: Option<String>,
    /// Source: conversation, learned, external, system.
    #[arg(long)]
    pub source: Option<String>,
    /// Session to attach to (created on first use).
    #[arg(long)]
    pub session: Option<String>,
    /// Never evicted nor bulk-deleted.
    #[arg(long)]
    pub pinned: bool,
    /// Kept out of contexts and exports unless asked.
    #[arg(long)]
    pub sensitive: bool,
    /// Time to live: 90s, 15m, 12h, 7d, 2w.
    #[arg(long)]
    pub ttl: Option<String>,
    /// Confirm high-risk writes (a global preference).
    #[arg(long)]
    pub yes: bool,
}

pub fn run(g: &Global, a: RememberArgs) -> Result<()> {
    let text = if a.text == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s
    } else {
        a.text.clone()
    };
    let mut new = strata::NewMemory::new(strata::Scope::parse(&a.scope)?, text);
    new.kind = a.kind.as_deref().map(str::parse).transpose()?;
    new.importance = a.importance;
    new.tags = a.tags.clone();
    new.key = a.key.clone();
    new.payload = match &a.payload {
        Some(p) => Some(
            serde_json::from_str(p).map_err(|e| strata::Error::InvalidField {
                field: "payload".into(),
                reason: format!("not valid JSON: {e}"),
            })?,
        ),
        None => None,
    };
    new.role = a.role.as_deref().map(str::parse).transpose()?;
    new.source = a.source.as_deref().map(str::parse).transpose()?;
    new.session = a.session.clone();
    new.pinned = a.pinned;
    new.sensitive = a.sensitive;
    new.ttl = a.ttl.as_deref().map(strata::parse_ttl).transpose()?;
    let e = app::open(g)?;
    app::say_if_model_missing(g, &e);
    let m = app::with_confirm(a.yes, |c| e.remember_with(new.clone(), c))?;
    app::audit(
        &e,
        "remember",
        app::scopes([&m.scope]),
        1,
        vec![m.id.clone()],
    )?;
    // One write from the command line gets its vector now; the write is
    // committed either way, and `strata embed` catches up on failures.
    if let Err(err) = e.embed_pending(Some(std::slice::from_ref(&m.id)), 1) {
        eprintln!("strata: warning: stored without a vector ({err}); run `strata embed` later");
    }
    if g.json {
        output::json(&m)
    } else {
        output::line(format!(
            "remembered {} in {} (v{}, {} tokens)",
            m.id, m.scope, m.version, m.tokens
        ))
    }
}
