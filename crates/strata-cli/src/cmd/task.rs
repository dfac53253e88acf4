//! `strata task complete T --project P [--promote ID]… [--min-importance X]`

use anyhow::Result;
use clap::{Args, Subcommand};

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Subcommand)]
pub enum TaskCmd {
    /// Promote what should survive into the project, then clear the task
    /// (its memories move to the archive).
    #[command(
        after_help = "Examples:\n  strata task complete t-42 --project acme\n  strata task complete t-42 --project acme --promote 0193f2a1 --min-importance 0.8"
    )]
    Complete(CompleteArgs),
}

#[derive(Debug, Args)]
pub struct CompleteArgs {
    /// The task name (its scope is task/<name>).
    pub task: String,
    /// The project to promote into: its name (memories go to project/<name>).
    #[arg(long)]
    pub project: String,
    /// A memory to promote (repeatable; a unique id prefix works).
    #[arg(long = "promote", value_name = "ID")]
    pub promote: Vec<String>,
    /// Also promote every memory at or above this importance.
    #[arg(long)]
    pub min_importance: Option<f64>,
}

pub fn run(g: &Global, c: TaskCmd) -> Result<()> {
    match c {
        TaskCmd::Complete(a) => {
            let e = app::open(g)?;
            let ids = a
                .promote
                .iter()
                .map(|id| app::resolve_id(&e, id))
                .collect::<Result<Vec<_>>>()?;
            let p = strata::Promotion {
                ids,
                min_importance: a.min_importance,
            };
            let r = e.complete_task(&a.task, &a.project, &p)?;
            app::audit(
                &e,
                "complete_task",
                vec![r.task.clone(), r.project.clone()],
                r.promoted.len() + r.archived,
                r.promoted.iter().map(|(_, new)| new.clone()).collect(),
            )?;
            if g.json {
                return output::json(&r);
            }
            output::line(format!(
                "completed {}: promoted {} into {}, archived {}",
                r.task,
                r.promoted.len(),
                r.project,
                r.archived
            ))?;
            for (from, to) in &r.promoted {
                output::line(format!("  {from} → {to}"))?;
            }
            // Say which rule chose (or chose nothing), and how to promote.
            let rule = match (a.promote.is_empty(), a.min_importance) {
                (true, None) => {
                    "no --promote ID and no --min-importance: nothing is promoted unless named"
                        .to_string()
                }
                (false, None) => format!("promoted the {} named with --promote", a.promote.len()),
                (true, Some(x)) => format!("promoted task memories with importance ≥ {x}"),
                (false, Some(x)) => format!(
                    "promoted the {} named with --promote and those with importance ≥ {x}",
                    a.promote.len()
                ),
            };
            output::line(format!("rule: {rule}"))?;
            if r.promoted.is_empty() && r.archived > 0 {
                output::line(format!(
                    "to keep some: `strata restore ID` brings one back from the archive, then `strata promote ID --to project/{}`; next time pass --promote ID or --min-importance 0.8",
                    a.project
                ))?;
            }
            Ok(())
        }
    }
}
