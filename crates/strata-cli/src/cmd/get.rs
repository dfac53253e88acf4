//! `strata get ID`

use anyhow::Result;
use clap::Args;

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Args)]
pub struct GetArgs {
    /// The memory id, or its first 8 or more characters when they name one memory.
    pub id: String,
    /// Also show earlier versions.
    #[arg(long)]
    pub history: bool,
}

pub fn run(g: &Global, mut a: GetArgs) -> Result<()> {
    let e = app::open(g)?;
    a.id = app::resolve_id(&e, &a.id)?;
    let (m, archived) = match e.get(&a.id)? {
        Some(m) => (m, None),
        None => match e.get_archived(&a.id)? {
            Some(ar) => (
                ar.memory,
                Some(strata::ArchiveMark {
                    at: ar.archived_at,
                    reason: ar.reason,
                }),
            ),
            None => return Err(strata::Error::NotFound(a.id.clone()).into()),
        },
    };
    app::audit(&e, "get", app::scopes([&m.scope]), 1, vec![m.id.clone()])?;
    let history = if a.history {
        e.history(&a.id)?
    } else {
        Vec::new()
    };
    if g.json {
        let mut v = serde_json::to_value(&m)?;
        if let Some(ar) = &archived {
            v["archived"] = serde_json::to_value(ar)?;
        }
        if a.history {
            v["history"] = serde_json::to_value(&history)?;
        }
        return output::json(&v);
    }
    if let Some(ar) = &archived {
        output::line(format!("(archived {} · {})", ar.at, ar.reason))?;
    }
    output::line(output::memory_full(&m))?;
    for h in &history {
        output::line(format!(
            "\n-- version {} ({}) --\n{}",
            h.version, h.updated_at, h.content
        ))?;
    }
    Ok(())
}
