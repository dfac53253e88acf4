//! `strata audit [filters]`, `strata audit verify`, `strata audit prune`:
//! reading the audit trail, checking its hash chain, and applying its
//! retention now. Reading and checking are themselves recorded (as
//! `local:$USER`) when `[audit]` is on.

use anyhow::{Result, bail};
use clap::{Args, Subcommand};

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub cmd: Option<AuditCmd>,
    #[command(flatten)]
    pub filters: Filters,
}

#[derive(Debug, Subcommand)]
pub enum AuditCmd {
    /// Check the hash chain; exits 1 naming the first entry changed or
    /// missing.
    #[command(after_help = "Examples:\n  strata audit verify\n  strata --json audit verify")]
    Verify,
    /// Remove entries beyond `[audit] retention_days` and `max_entries` now
    /// (upkeep does this too); the removal is recorded.
    #[command(after_help = "Examples:\n  strata audit prune")]
    Prune,
}

/// Which entries to show; every condition must hold.
#[derive(Debug, Args)]
pub struct Filters {
    /// Recorded at or after (RFC 3339 or a date).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Recorded before (RFC 3339 or a date).
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// A token's name, `anonymous` or `local:<user>`.
    #[arg(long)]
    pub actor: Option<String>,
    /// An operation (`recall`, `forget`, …).
    #[arg(long)]
    pub op: Option<String>,
    /// Entries touching this scope (at or below it, or a subtree view
    /// holding it).
    #[arg(long)]
    pub scope: Option<String>,
    /// Entries numbered below this (paging back).
    #[arg(long, value_name = "SEQ")]
    pub before_seq: Option<u64>,
    /// At most this many, newest first (1 to 10000).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
}

impl Filters {
    fn query(&self) -> Result<strata::AuditQuery> {
        Ok(strata::AuditFilters {
            since: self.since.as_deref(),
            until: self.until.as_deref(),
            actor: self.actor.as_deref(),
            op: self.op.as_deref(),
            scope: self.scope.as_deref(),
            before_seq: self.before_seq,
            limit: Some(self.limit),
        }
        .query()?)
    }
}

pub fn run(g: &Global, a: AuditArgs) -> Result<()> {
    match a.cmd {
        None => query(g, &a.filters),
        Some(AuditCmd::Verify) => verify(g),
        Some(AuditCmd::Prune) => {
            let e = app::open(g)?;
            let p = e.audit_prune(&strata::local_actor())?;
            if g.json {
                return output::json(&p);
            }
            output::line(format!(
                "removed {} (the chain now starts at entry {})",
                output::plural(p.removed as usize, "entry", "entries"),
                p.anchor_seq
            ))
        }
    }
}

fn query(g: &Global, f: &Filters) -> Result<()> {
    // Bad filters are refused before anything is opened or recorded.
    let q = f.query()?;
    let e = app::open(g)?;
    let entries = e.audit_query(&q)?;
    app::audit(
        &e,
        "audit_query",
        app::scopes(f.scope.iter()),
        entries.len(),
        Vec::new(),
    )?;
    let enabled = e.audit_config().enabled;
    if g.json {
        return output::json(&serde_json::json!({"enabled": enabled, "entries": entries}));
    }
    if !enabled {
        eprintln!("strata: recording is off ([audit] enabled = false in strata.toml)");
    }
    if entries.is_empty() {
        return output::line("no audit entries match");
    }
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            let at = e.at.round(jiff::Unit::Second).unwrap_or(e.at);
            let ids = match (e.ids.len(), e.ids_omitted) {
                (0, _) => String::new(),
                (_, 0) => e.ids.join(","),
                (_, more) => format!("{} (+{more})", e.ids.join(",")),
            };
            vec![
                e.seq.to_string(),
                at.to_string(),
                e.actor.clone(),
                e.op.clone(),
                e.scopes.join(" "),
                e.count.to_string(),
                e.outcome.clone(),
                ids,
            ]
        })
        .collect();
    output::table(
        &["SEQ", "AT", "ACTOR", "OP", "SCOPES", ">N", "OUTCOME", "IDS"],
        &rows,
    )
}

fn verify(g: &Global) -> Result<()> {
    let e = app::open(g)?;
    let v = e.audit_verify()?;
    app::audit(
        &e,
        "audit_verify",
        Vec::new(),
        v.entries as usize,
        Vec::new(),
    )?;
    if g.json {
        output::json(&v)?;
    } else if v.ok {
        output::line(format!(
            "audit trail intact: {} (entries {} to {}), head {}",
            output::plural(v.entries as usize, "entry", "entries"),
            v.first_seq,
            v.last_seq,
            v.head_hash
        ))?;
    }
    if let (false, Some(seq)) = (v.ok, v.first_bad) {
        bail!(
            "audit trail broken at entry {seq}: {}",
            v.problem.as_deref().unwrap_or("changed or missing")
        );
    }
    Ok(())
}
