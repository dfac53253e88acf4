//! `strata session new|list|show|turns|compact|archive`

use anyhow::Result;
use clap::{Args, Subcommand};

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Subcommand)]
pub enum SessionCmd {
    /// Start a session.
    #[command(
        after_help = "Examples:\n  strata session new\n  strata session new --id standup-1124 --scope project/acme"
    )]
    New(NewArgs),
    /// Every session.
    #[command(after_help = "Examples:\n  strata session list")]
    List,
    /// A session's manifest: counts, size, first and last activity.
    #[command(after_help = "Examples:\n  strata session show standup-1124")]
    Show {
        /// Session id.
        id: String,
    },
    /// A session's last memories, oldest first (a long-running process
    /// serves them from its hot tier; this command reads the store).
    #[command(
        after_help = "Examples:\n  strata session turns standup-1124\n  strata session turns standup-1124 --limit 5 --json"
    )]
    Turns {
        /// Session id.
        id: String,
        /// How many (the newest).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=10_000))]
        limit: u64,
    },
    /// Compact a session now: its oldest unpinned memories are summarised
    /// into `summary` memories that name them and move to the archive
    /// (then the cold tier), until it holds at most `compaction.to` of its
    /// bound. Upkeep does this by itself to sessions at `compaction.at`.
    #[command(
        after_help = "Examples:\n  strata session compact standup-1124\n  strata session compact standup-1124 --json"
    )]
    Compact {
        /// Session id.
        id: String,
    },
    /// Archive a session: no more writes, its memories move to the archive.
    #[command(after_help = "Examples:\n  strata session archive standup-1124")]
    Archive {
        /// Session id.
        id: String,
    },
}

#[derive(Debug, Args)]
pub struct NewArgs {
    /// Session id (default: a fresh id).
    #[arg(long)]
    pub id: Option<String>,
    /// Scope its memories go to (default: session/<id>).
    #[arg(long)]
    pub scope: Option<String>,
    /// Size bound in bytes (default: 10 MB, or `memory.session_max_bytes`).
    #[arg(long)]
    pub max_bytes: Option<u64>,
}

fn session_line(s: &strata::Session) -> String {
    let state = match s.archived_at {
        Some(t) => format!("archived {t}"),
        None if s.ephemeral => "open, ephemeral".into(),
        None => "open".into(),
    };
    format!(
        "{}  {}  {}/{} bytes  {}  created {}",
        s.id, s.scope, s.bytes, s.max_bytes, state, s.created_at
    )
}

pub fn run(g: &Global, c: SessionCmd) -> Result<()> {
    match c {
        SessionCmd::New(a) => {
            let scope = a.scope.as_deref().map(strata::Scope::parse).transpose()?;
            let e = app::open(g)?;
            let s = e.create_session(a.id.as_deref(), scope, a.max_bytes)?;
            app::audit(
                &e,
                "session_create",
                app::scopes([&s.scope]),
                0,
                vec![s.id.clone()],
            )?;
            if g.json {
                output::json(&s)
            } else {
                output::line(session_line(&s))
            }
        }
        SessionCmd::List => {
            let e = app::open(g)?;
            let v = e.list_sessions()?;
            if g.json {
                return output::json(&v);
            }
            for s in &v {
                output::line(session_line(s))?;
            }
            Ok(())
        }
        SessionCmd::Show { id } => {
            let e = app::open(g)?;
            let m = e.session_manifest(&id)?;
            if g.json {
                return output::json(&m);
            }
            output::line(session_line(&m.session))?;
            output::line(format!(
                "memories {} ({} archived), {} tokens",
                m.memories, m.archived, m.tokens
            ))?;
            output::line(output::counts("by kind", &m.by_kind))?;
            if !m.by_role.is_empty() {
                output::line(output::counts("by role", &m.by_role))?;
            }
            output::line(format!(
                "first activity {}  last activity {}",
                m.first_activity_at.map_or("-".into(), |t| t.to_string()),
                m.session.last_activity_at
            ))
        }
        SessionCmd::Turns { id, limit } => {
            let e = app::open(g)?;
            let v = e.last_turns(&id, limit as usize)?;
            if g.json {
                return output::json(&v);
            }
            for m in &v {
                output::line(output::memory_line(m))?;
            }
            Ok(())
        }
        SessionCmd::Compact { id } => {
            let e = app::open(g)?;
            let c = e.compact_session(&id)?;
            app::audit(
                &e,
                "session_compact",
                Vec::new(),
                c.compacted,
                vec![c.session.clone()],
            )?;
            if g.json {
                return output::json(&c);
            }
            output::line(format!(
                "{}: compacted {} into {} ({} → {} bytes)",
                c.session,
                output::plural(c.compacted, "memory", "memories"),
                output::plural(c.summaries.len(), "summary", "summaries"),
                c.bytes_before,
                c.bytes_after
            ))
        }
        SessionCmd::Archive { id } => {
            let e = app::open(g)?;
            let s = e.archive_session(&id)?;
            app::audit(
                &e,
                "session_archive",
                app::scopes([&s.scope]),
                0,
                vec![s.id.clone()],
            )?;
            if g.json {
                output::json(&s)
            } else {
                output::line(session_line(&s))
            }
        }
    }
}
