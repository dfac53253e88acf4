//! `strata forget ID | --view S --filter JSON | --session S | --scope S | --before DATE`

use anyhow::Result;
use clap::Args;

use crate::app::{self, Global, usage};
use crate::output;

#[derive(Debug, Args)]
pub struct ForgetArgs {
    /// One memory id, or its first 8 or more characters when they name one memory.
    pub id: Option<String>,
    /// With --filter (or --before): the scopes to forget in (repeatable).
    #[arg(long = "view", value_name = "SCOPE")]
    pub views: Vec<String>,
    /// Forget what matches this filter JSON within --view.
    #[arg(long)]
    pub filter: Option<String>,
    /// Forget a session's memories and the session.
    #[arg(long)]
    pub session: Option<String>,
    /// Forget a scope and everything below it.
    #[arg(long)]
    pub scope: Option<String>,
    /// Forget what was created before this date or time (within --view, or everywhere).
    #[arg(long)]
    pub before: Option<String>,
    /// Confirm bulk deletion without a prompt.
    #[arg(long)]
    pub yes: bool,
    /// Delete pinned memories too.
    #[arg(long)]
    pub force: bool,
    /// Show what would be deleted, delete nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(g: &Global, a: ForgetArgs) -> Result<()> {
    let chosen = [
        a.id.is_some(),
        a.filter.is_some(),
        a.session.is_some(),
        a.scope.is_some(),
        a.before.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if chosen != 1 {
        return usage(
            "forget: name exactly one of ID, --filter (with --view), --session, --scope, --before",
        );
    }
    let what = if let Some(id) = &a.id {
        strata::Forget::Id(id.clone())
    } else if let Some(f) = &a.filter {
        strata::Forget::Filter {
            view: app::view(&a.views)?,
            filter: app::filter(Some(f))?,
        }
    } else if let Some(s) = &a.session {
        strata::Forget::Session(s.clone())
    } else if let Some(s) = &a.scope {
        strata::Forget::Scope(strata::Scope::parse(s)?)
    } else {
        let before = strata::parse_time("before", a.before.as_deref().unwrap_or_default())?;
        let view = if a.views.is_empty() {
            None
        } else {
            Some(app::view(&a.views)?)
        };
        strata::Forget::Before { before, view }
    };
    let e = app::open(g)?;
    let what = match what {
        strata::Forget::Id(id) => strata::Forget::Id(app::resolve_id(&e, &id)?),
        other => other,
    };
    let bulk = a.id.is_none();
    let mut opts = strata::ForgetOptions {
        force: a.force,
        dry_run: a.dry_run,
        ..Default::default()
    };
    let mut what = what;
    if a.yes {
        opts.confirm = strata::Confirm::Yes;
    } else if bulk && !a.dry_run {
        // Bulk deletion is confirmed once, for exactly what a dry run
        // selected: memories written while the prompt waits are not touched.
        let preview = e.forget(
            &what,
            strata::ForgetOptions {
                dry_run: true,
                ..opts
            },
        )?;
        if preview.deleted > 0 {
            opts.confirm = app::with_confirm(false, |c| {
                if c == strata::Confirm::Yes {
                    Ok(c)
                } else {
                    Err(strata::Error::NeedsConfirmation(format!(
                        "forgetting {}",
                        output::plural(preview.deleted, "memory", "memories")
                    )))
                }
            })?;
            what = strata::Forget::Ids(preview.ids);
        }
    }
    let r = e.forget(&what, opts)?;
    if r.dry_run {
        app::audit(
            &e,
            "forget_dry_run",
            app::scopes(a.views.iter()),
            r.ids.len(),
            Vec::new(),
        )?;
    } else {
        app::audit(
            &e,
            "forget",
            app::scopes(a.views.iter()),
            r.deleted,
            r.ids.clone(),
        )?;
    }
    if g.json {
        return output::json(&r);
    }
    let verb = if r.dry_run { "would forget" } else { "forgot" };
    output::line(format!(
        "{verb} {}",
        output::plural(r.deleted, "memory", "memories")
    ))?;
    if r.dry_run {
        // List what would go, not only how many.
        for id in &r.ids {
            let line = match e.get(id)? {
                Some(m) => output::memory_line(&m),
                None => match e.get_archived(id)? {
                    Some(a) => format!("{} [archived]", output::memory_line(&a.memory)),
                    None => id.clone(),
                },
            };
            output::line(format!("  {line}"))?;
        }
    }
    if r.pinned_kept > 0 {
        output::line(format!(
            "kept {} pinned memories (use --force to delete them too)",
            r.pinned_kept
        ))?;
    }
    Ok(())
}
