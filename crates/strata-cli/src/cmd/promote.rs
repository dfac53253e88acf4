//! `strata promote ID --to SCOPE`

use anyhow::Result;
use clap::Args;

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Args)]
pub struct PromoteArgs {
    /// The memory to copy.
    pub id: String,
    /// The scope to copy it to.
    #[arg(long)]
    pub to: String,
    /// Confirm a promotion of a preference into global memory.
    #[arg(long)]
    pub yes: bool,
}

pub fn run(g: &Global, a: PromoteArgs) -> Result<()> {
    let to = strata::Scope::parse(&a.to)?;
    let e = app::open(g)?;
    let id = app::resolve_id(&e, &a.id)?;
    let m = app::with_confirm(a.yes, |c| e.promote(&id, &to, c))?;
    app::audit(
        &e,
        "promote",
        app::scopes([&m.scope]),
        1,
        vec![m.id.clone()],
    )?;
    if g.json {
        output::json(&m)
    } else {
        output::line(format!("promoted {} to {} as {}", a.id, m.scope, m.id))
    }
}
