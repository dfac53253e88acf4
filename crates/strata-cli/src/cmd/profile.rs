//! `strata profile list|show|check`

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Subcommand)]
pub enum ProfileCmd {
    /// Profiles available (built in and configured).
    #[command(
        after_help = "Examples:\n  strata profile list\n  strata --config memory.yaml profile list"
    )]
    List,
    /// One profile in full, as validated.
    #[command(after_help = "Examples:\n  strata profile show global\n  strata profile show coder")]
    Show {
        /// Profile id.
        id: String,
    },
    /// Validate a configuration file's profiles (default: the one in use).
    #[command(after_help = "Examples:\n  strata profile check\n  strata profile check memory.yaml")]
    Check {
        /// A strata.toml or memory.yaml.
        file: Option<PathBuf>,
    },
}

pub fn run(g: &Global, c: ProfileCmd) -> Result<()> {
    match c {
        ProfileCmd::List => {
            let cfg = app::resolve_config(g)?;
            let mut all = vec![strata::Profile::builtin_global()];
            all.extend(cfg.profiles.values().cloned());
            if g.json {
                return output::json(&all);
            }
            let mut rows = vec![vec![
                "none".to_string(),
                "0".to_string(),
                "-".into(),
                "-".into(),
                "(built in) an empty context".into(),
            ]];
            for p in &all {
                let sources: Vec<String> = p.sources.iter().map(|s| s.scope.clone()).collect();
                rows.push(vec![
                    p.id.clone(),
                    p.max_tokens.to_string(),
                    p.strategy.as_str().to_string(),
                    p.render.as_str().to_string(),
                    sources.join(", "),
                ]);
            }
            output::table(
                &["PROFILE", ">TOKENS", "STRATEGY", "RENDER", "SOURCES"],
                &rows,
            )?;
            Ok(())
        }
        ProfileCmd::Show { id } => {
            let e = app::open(g)?;
            match e.resolve_profile(&id)? {
                Some(p) => output::json(&p),
                None => output::line("none: the empty context (no sources)"),
            }
        }
        ProfileCmd::Check { file } => {
            let cfg = match &file {
                Some(f) => strata::Config::from_file(f)?,
                None => app::resolve_config(g)?,
            };
            let ids: Vec<&String> = cfg.profiles.keys().collect();
            if g.json {
                return output::json(&serde_json::json!({"ok": true, "profiles": ids}));
            }
            output::line(format!(
                "ok: {} profile{} ({})",
                ids.len(),
                if ids.len() == 1 { "" } else { "s" },
                ids.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
    }
}
