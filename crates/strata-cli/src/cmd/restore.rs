//! `strata restore ID…`

use anyhow::Result;
use clap::Args;

use crate::app::{self, Global, usage};
use crate::output;

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// Archived memory ids.
    pub ids: Vec<String>,
}

pub fn run(g: &Global, a: RestoreArgs) -> Result<()> {
    if a.ids.is_empty() {
        return usage("restore: name at least one archived memory id");
    }
    let e = app::open(g)?;
    let ids = a
        .ids
        .iter()
        .map(|id| app::resolve_id(&e, id))
        .collect::<Result<Vec<_>>>()?;
    let n = e.restore(&ids)?;
    app::audit(&e, "restore", Vec::new(), n, ids.clone())?;
    if g.json {
        output::json(&serde_json::json!({"restored": n}))
    } else {
        output::line(format!(
            "restored {}",
            output::plural(n, "memory", "memories")
        ))
    }
}
