//! `strata list --view S …`

use anyhow::Result;
use clap::Args;

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Args)]
pub struct ListArgs {
    /// A scope the read may see (repeatable; `scope/**` for a subtree).
    #[arg(long = "view", value_name = "SCOPE", required = true)]
    pub views: Vec<String>,
    /// Filter JSON.
    #[arg(long)]
    pub filter: Option<String>,
    /// recency (default), oldest or importance.
    #[arg(long, default_value = "recency")]
    pub order: String,
    /// Most results.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Skip this many.
    #[arg(long, default_value_t = 0)]
    pub offset: usize,
    /// List the archive instead.
    #[arg(long)]
    pub archived: bool,
}

pub fn run(g: &Global, a: ListArgs) -> Result<()> {
    let view = app::view(&a.views)?;
    let filter = app::filter(a.filter.as_deref())?;
    let order: strata::ListOrder = a.order.parse()?;
    let e = app::open(g)?;
    if a.archived {
        let mut items = e.list_archived(&view, &filter, a.limit)?;
        app::audit(
            &e,
            "list",
            app::scopes(a.views.iter()),
            items.len(),
            Vec::new(),
        )?;
        if g.json {
            // As recall does: the vector is for ranking (export keeps it).
            for it in &mut items {
                it.memory.embedding = None;
            }
            return output::json(&items);
        }
        for it in &items {
            output::line(format!(
                "{}  [archived {} · {}]",
                output::memory_line(&it.memory),
                it.archived_at,
                it.reason
            ))?;
        }
        return Ok(());
    }
    let mut req = strata::List::new(view);
    req.filter = filter;
    req.order = order;
    req.limit = a.limit;
    req.offset = a.offset;
    let mut items = e.list(&req)?;
    app::audit(
        &e,
        "list",
        app::scopes(a.views.iter()),
        items.len(),
        Vec::new(),
    )?;
    if g.json {
        // As recall does: the vector is for ranking (export keeps it).
        for m in &mut items {
            m.embedding = None;
        }
        return output::json(&items);
    }
    for m in &items {
        output::line(output::memory_line(m))?;
    }
    Ok(())
}
