//! `strata learned list|show|confirm|reject|run`: what upkeep's detectors
//! learned, and a person's say over it.

use anyhow::Result;
use clap::{Args, Subcommand};

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Subcommand)]
pub enum LearnedCmd {
    /// Learned memories in a view, most confident first.
    #[command(after_help = "Examples:\n  strata learned list --view project/acme/**")]
    List(ListArgs),
    /// A learned memory with its record and evidence.
    #[command(after_help = "Examples:\n  strata learned show 0193f2a1")]
    Show {
        /// Learned memory id (or its first 8+ characters).
        id: String,
    },
    /// Confirm a learned memory: confidence 1, no decay.
    #[command(after_help = "Examples:\n  strata learned confirm 0193f2a1")]
    Confirm {
        /// Learned memory id.
        id: String,
    },
    /// Reject a learned memory: it moves to the archive and the same
    /// evidence never teaches it again.
    #[command(after_help = "Examples:\n  strata learned reject 0193f2a1")]
    Reject {
        /// Learned memory id.
        id: String,
    },
    /// Run the detectors now over what changed since their last run.
    #[command(after_help = "Examples:\n  strata learned run")]
    Run,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Scopes to read (`project/acme`, `project/acme/**`, `global`).
    #[arg(long, required = true)]
    pub view: Vec<String>,
}

fn learned_line(short: &str, m: &strata::Memory, l: &strata::Learned) -> String {
    format!(
        "{}  {:.2}  {:<10} {:<9} {}  {}",
        short,
        l.confidence,
        l.detector,
        status(l.status),
        output::plural(l.evidence.len(), "piece", "pieces"),
        m.content.lines().next().unwrap_or("")
    )
}

fn status(s: strata::LearnedStatus) -> &'static str {
    match s {
        strata::LearnedStatus::Proposed => "proposed",
        strata::LearnedStatus::Confirmed => "confirmed",
    }
}

/// The line `upkeep` and `learned run` print for a learning run.
pub fn report_line(r: &strata::LearnReport) -> Result<()> {
    output::line(format!(
        "learned: examined {} · new {} · updated {} · removed {} · rejected evidence skipped {} · consolidated {} · faded {}",
        r.examined, r.learned, r.updated, r.removed, r.rejected_skipped, r.consolidated, r.faded
    ))?;
    for n in &r.notes {
        output::line(format!("note: {n}"))?;
    }
    if let Some(l) = &r.llm {
        output::line(format!(
            "learned by the LLM: {} requests ({} failed) · {} memories sent, {} left out · {} findings, {} ignored · {} + {} tokens · cost {:.4}",
            l.requests,
            l.failed,
            l.sent,
            l.unsent,
            l.findings,
            l.ignored,
            l.prompt_tokens,
            l.completion_tokens,
            l.cost
        ))?;
        for n in &l.notes {
            output::line(format!("  {n}"))?;
        }
    }
    Ok(())
}

pub fn run(g: &Global, c: LearnedCmd) -> Result<()> {
    let e = app::open(g)?;
    match c {
        LearnedCmd::List(a) => {
            let v = e.learned(&app::view(&a.view)?)?;
            app::audit(
                &e,
                "learned_list",
                app::scopes(a.view.iter()),
                v.len(),
                Vec::new(),
            )?;
            if g.json {
                let rows: Vec<_> = v
                    .iter()
                    .map(|(m, l)| serde_json::json!({"memory": m, "learned": l}))
                    .collect();
                return output::json(&rows);
            }
            if v.is_empty() {
                return output::line("nothing learned in this view");
            }
            for (m, l) in &v {
                output::line(learned_line(&m.id, m, l))?;
            }
            Ok(())
        }
        LearnedCmd::Show { id } => {
            let id = app::resolve_id(&e, &id)?;
            let (m, l) = e.learned_one(&id)?;
            let evidence = e.learned_evidence(&id)?;
            if g.json {
                return output::json(
                    &serde_json::json!({"memory": m, "learned": l, "evidence": evidence}),
                );
            }
            output::line(output::memory_full(&m))?;
            output::line(format!(
                "learned by {} · confidence {:.2} · {} · first seen {} · last seen {}",
                l.detector,
                l.confidence,
                status(l.status),
                l.first_seen,
                l.last_seen
            ))?;
            output::line(format!(
                "evidence ({} of {} still kept):",
                evidence.len(),
                l.evidence.len()
            ))?;
            for m in &evidence {
                output::line(format!("  {}", output::memory_line(m)))?;
            }
            Ok(())
        }
        LearnedCmd::Confirm { id } => {
            let id = app::resolve_id(&e, &id)?;
            let m = e.confirm_learned(&id)?;
            app::audit(
                &e,
                "learned_confirm",
                app::scopes([&m.scope]),
                1,
                vec![m.id.clone()],
            )?;
            if g.json {
                return output::json(&m);
            }
            output::line(format!("confirmed {}", m.id))
        }
        LearnedCmd::Reject { id } => {
            let id = app::resolve_id(&e, &id)?;
            let m = e.reject_learned(&id)?;
            app::audit(
                &e,
                "learned_reject",
                app::scopes([&m.scope]),
                1,
                vec![m.id.clone()],
            )?;
            if g.json {
                return output::json(&serde_json::json!({"rejected": m.id}));
            }
            output::line(format!(
                "rejected {} (moved to the archive; its evidence will not teach it again)",
                m.id
            ))
        }
        LearnedCmd::Run => {
            let r = e.learn()?;
            app::audit(
                &e,
                "learn",
                Vec::new(),
                r.learned + r.updated + r.removed + r.consolidated + r.faded,
                Vec::new(),
            )?;
            if g.json {
                return output::json(&r);
            }
            report_line(&r)
        }
    }
}
