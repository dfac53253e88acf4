//! One module per verb.

pub mod audit;
pub mod context;
pub mod crypt;
pub mod debug;
pub mod embed;
pub mod export;
pub mod forget;
pub mod get;
pub mod import;
pub mod import_from;
pub mod learned;
pub mod list;
pub mod migrate;
pub mod pipeline;
pub mod profile;
pub mod promote;
pub mod recall;
pub mod remember;
pub mod restore;
#[cfg(feature = "server")]
pub mod serve;
pub mod session;
pub mod shell;
pub mod sync;
pub mod task;
#[cfg(feature = "server")]
pub mod ui;
pub mod update;

use anyhow::Result;

use crate::app::{self, Cli, Command};
use crate::output;

/// Runs the parsed command.
pub fn run(cli: Cli) -> Result<()> {
    let g = &cli.global;
    #[cfg(feature = "server")]
    if g.json {
        match &cli.command {
            Command::Serve(_) => {
                return app::usage(
                    "--json: `strata serve` prints no JSON (it answers HTTP; its own lines go to stderr); leave --json out",
                );
            }
            Command::Mcp(_) => {
                return app::usage(
                    "--json: `strata mcp` speaks MCP's JSON-RPC on stdout whatever the flag; leave --json out",
                );
            }
            Command::Ui(_) => {
                return app::usage(
                    "--json: `strata ui` prints a login link, not JSON; leave --json out",
                );
            }
            _ => {}
        }
    }
    match cli.command {
        Command::Init => {
            let cfg = app::resolve_config(g)?;
            let path = cfg.store.describe();
            let e = strata::Engine::open(cfg)?;
            let stats = e.stats()?;
            if g.json {
                output::json(
                    &serde_json::json!({"db": path, "schema_version": stats.schema_version, "memories": stats.memories}),
                )
            } else {
                output::line(format!(
                    "strata database ready: {path} (schema v{}, {} memories)",
                    stats.schema_version, stats.memories
                ))
            }
        }
        Command::Remember(a) => remember::run(g, a),
        Command::Recall(a) => recall::run(g, a),
        Command::Context(a) => context::run(g, a),
        Command::Sync(a) => sync::run(g, a),
        Command::Pipeline(c) => pipeline::run(g, c),
        Command::Profile(c) => profile::run(g, c),
        Command::List(a) => list::run(g, a),
        Command::Get(a) => get::run(g, a),
        Command::Update(a) => update::run(g, a),
        Command::Forget(a) => forget::run(g, a),
        Command::Promote(a) => promote::run(g, a),
        Command::Restore(a) => restore::run(g, a),
        Command::Task(c) => task::run(g, c),
        Command::Session(c) => session::run(g, c),
        Command::Learned(c) => learned::run(g, c),
        Command::Audit(a) => audit::run(g, a),
        Command::Migrate(a) => migrate::run(g, a),
        Command::Encrypt => crypt::run(g, crypt::Op::Encrypt, None),
        Command::Decrypt => crypt::run(g, crypt::Op::Decrypt, None),
        Command::Rekey(a) => crypt::run(g, crypt::Op::Rekey, Some(a)),
        Command::Import(a) => import::run(g, a),
        Command::Export(a) => export::run(g, a),
        Command::Scopes => {
            let e = app::open(g)?;
            let scopes = e.list_scopes()?;
            if g.json {
                return output::json(&scopes);
            }
            if scopes.is_empty() {
                return output::line("no scopes yet (nothing remembered)");
            }
            let rows: Vec<Vec<String>> = scopes
                .iter()
                .map(|s| {
                    vec![
                        s.scope.to_string(),
                        s.memories.to_string(),
                        s.archived.to_string(),
                    ]
                })
                .collect();
            output::table(&["SCOPE", ">ACTIVE", ">ARCHIVED"], &rows)
        }
        Command::Stats => {
            let e = app::open(g)?;
            let s = e.stats()?;
            if g.json {
                let mut v = serde_json::to_value(&s)?;
                v["vectors"] = serde_json::to_value(e.embed_status()?)?;
                v["learning"] = match e.learning_by_meaning() {
                    Ok(model) => serde_json::json!({"by_meaning": true, "model": model}),
                    Err(why) => serde_json::json!({"by_meaning": false, "note": why}),
                };
                return output::json(&v);
            }
            output::line(format!(
                "backend {}  schema v{}\nmemories {}  archived {}  history {}  sessions {}  scopes {}\ntokens {}  file {} bytes",
                s.backend,
                s.schema_version,
                s.memories,
                s.archived,
                s.history,
                s.sessions,
                s.scopes,
                s.tokens,
                s.file_bytes
            ))?;
            output::line(output::counts("by tier", &s.by_tier))?;
            for (tier, f) in &s.storage_tiers {
                let at =
                    f.at.as_ref()
                        .map(|a| format!(" in {a}"))
                        .unwrap_or_default();
                output::line(format!(
                    "{tier}: {} memories, {} bytes{at}",
                    f.memories, f.bytes
                ))?;
            }
            output::line(output::counts("by kind", &s.by_kind))?;
            output::line(embed::status_line(&e.embed_status()?))?;
            output::line(match e.learning_by_meaning() {
                Ok(model) => format!("learning: preferences and topics by meaning ({model})"),
                Err(why) => format!("learning: {why}"),
            })
        }
        Command::Upkeep => {
            let e = app::open(g)?;
            let r = e.upkeep()?;
            if !r.skipped {
                app::audit(
                    &e,
                    "upkeep",
                    Vec::new(),
                    r.expired + r.evicted + r.demoted + r.moved_to_cold + r.promoted_from_cold,
                    Vec::new(),
                )?;
            }
            if g.json {
                return output::json(&r);
            }
            if r.skipped {
                return output::line("skipped: another process is running upkeep on this store");
            }
            output::line(format!(
                "expired {} · evicted {} (moved to the archive) · compacted {} of {} sessions · demoted {} ({} by importance) · moved to cold {} · back from cold {}",
                r.expired,
                r.evicted,
                r.compacted,
                r.sessions_compacted,
                r.demoted,
                r.demoted_by_importance,
                r.moved_to_cold,
                r.promoted_from_cold
            ))?;
            match &r.learned {
                Some(l) => learned::report_line(l),
                None => Ok(()),
            }
        }
        Command::Embed(a) => embed::run_embed(g, a),
        Command::Reindex(a) => embed::run_reindex(g, a),
        Command::Model(c) => embed::run_model(g, c),
        #[cfg(feature = "server")]
        Command::Serve(a) => serve::serve(g, a),
        #[cfg(feature = "server")]
        Command::Mcp(a) => serve::mcp(g, a),
        #[cfg(feature = "server")]
        Command::Token(c) => serve::token(g, c),
        #[cfg(feature = "server")]
        Command::Ui(a) => ui::ui(g, a),
        #[cfg(feature = "bench")]
        Command::Bench(a) => strata_bench::bench(a, g.json),
        #[cfg(feature = "bench")]
        Command::Eval(c) => strata_bench::eval(c, g.json, || crate::app::resolve_config(g)),
        Command::Completions { shell } => shell::completions(shell),
        Command::Man => shell::man(),
        Command::Debug(c) => debug::run(g, c),
    }
}
