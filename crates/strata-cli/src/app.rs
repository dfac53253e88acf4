//! Command-line flags and how they resolve into a `strata::Config`.
//!
//! Configuration is found at `--config PATH`, then `STRATA_CONFIG`, then
//! `./strata.toml`, then `<user config dir>/strata/strata.toml`; `--db` (or
//! `STRATA_DB`) overrides the database (a file path, or a `postgres://` URL)
//! of whichever was found. A PostgreSQL password comes from
//! `STRATA_DB_PASSWORD` (then libpq's `PGPASSWORD`) or `[store]
//! password_env`; a `--db` URL with a password in it is refused, since the
//! command line is visible to every user of the machine.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

/// A usage error found after parsing (exit code 2).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::error::Error for UsageError {}

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Returns a usage error.
pub fn usage<T>(msg: impl Into<String>) -> Result<T> {
    Err(UsageError(msg.into()).into())
}

/// strata — layered persistent memory for AI agents.
#[derive(Debug, Parser)]
#[command(name = "strata", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Whether errors are printed as JSON: under `--json`, except for the
    /// servers, which refuse the flag.
    pub fn json_errors(&self) -> bool {
        #[cfg(feature = "server")]
        if matches!(
            self.command,
            Command::Serve(_) | Command::Mcp(_) | Command::Ui(_)
        ) {
            return false;
        }
        self.global.json
    }
}

/// Flags every verb takes.
#[derive(Debug, Args)]
pub struct Global {
    /// Database: a file (default: $XDG_DATA_HOME/strata/strata.db) or a
    /// PostgreSQL URL, postgres://user@host:port/db (password from
    /// STRATA_DB_PASSWORD or PGPASSWORD, never in the flag).
    #[arg(long, global = true, env = "STRATA_DB", value_name = "PATH|URL")]
    pub db: Option<PathBuf>,
    /// Configuration file (default: ./strata.toml, then the user config dir).
    #[arg(long, global = true, env = "STRATA_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Print JSON instead of human-readable text.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create (or upgrade) the database and print where it is.
    #[command(after_help = "Examples:\n  strata init\n  strata --db ./memory.db init")]
    Init,
    /// Store a memory.
    #[command(
        after_help = "Examples:\n  strata remember \"We chose PostgreSQL for billing\" --scope project/acme --kind decision\n  strata remember \"Prefers short answers\" --scope global --kind preference --importance 0.9 --yes"
    )]
    Remember(crate::cmd::remember::RememberArgs),
    /// Ranked memories for a query within a view.
    #[command(
        after_help = "Examples:\n  strata recall \"which database for billing?\" --view project/acme --view global\n  strata recall \"deploy steps\" --view \"project/acme/**\" --explain --min-relevance 0"
    )]
    Recall(crate::cmd::recall::RecallArgs),
    /// The context for a task, within a token budget (see `strata profile list`).
    #[command(
        after_help = "Examples:\n  strata context --profile global --project acme --query \"billing database\"\n  strata context --replay ctx-e7ea001a39cea69118759e3c"
    )]
    Context(crate::cmd::context::ContextArgs),
    /// Context profiles: list, show, check.
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  strata profile list\n  strata profile show global\n  strata profile check strata.toml"
    )]
    Profile(crate::cmd::profile::ProfileCmd),
    /// Sync a project's memory files (CLAUDE.md, .memory/) into its scopes.
    #[command(
        after_help = "Examples:\n  strata sync . --project acme --dry-run\n  strata sync ~/code/acme --project acme"
    )]
    Sync(crate::cmd::sync::SyncArgs),
    /// Pipelines: run nodes in order, each reading its context and writing its output.
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  strata pipeline check pipeline.yaml\n  strata pipeline run pipeline.yaml --task t-42 --project acme"
    )]
    Pipeline(crate::cmd::pipeline::PipelineCmd),
    /// Memories in a view, filtered and ordered.
    #[command(
        after_help = "Examples:\n  strata list --view project/acme --order importance --limit 20\n  strata list --view global --filter '{\"kind\": \"preference\"}'"
    )]
    List(crate::cmd::list::ListArgs),
    /// One memory by id.
    #[command(after_help = "Examples:\n  strata get 0193f2a1\n  strata get 0193f2a1 --history")]
    Get(crate::cmd::get::GetArgs),
    /// Change a memory (compare-and-swap on its version).
    #[command(
        after_help = "Examples:\n  strata update 0193f2a1 --content \"We chose PostgreSQL 17 for billing\"\n  strata update 0193f2a1 --expected-version 2 --importance 0.9"
    )]
    Update(crate::cmd::update::UpdateArgs),
    /// Delete memories everywhere (row, index, archive, history).
    #[command(
        after_help = "Examples:\n  strata forget 0193f2a1\n  strata forget --view project/acme --filter '{\"kind\": \"scratch\"}' --dry-run"
    )]
    Forget(crate::cmd::forget::ForgetArgs),
    /// Copy a memory into another scope (new id, provenance kept).
    #[command(after_help = "Examples:\n  strata promote 0193f2a1 --to global")]
    Promote(crate::cmd::promote::PromoteArgs),
    /// Move archived memories back into active memory.
    #[command(after_help = "Examples:\n  strata restore 0193f2a1")]
    Restore(crate::cmd::restore::RestoreArgs),
    /// Task lifetime: complete a task, promoting what should survive.
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  strata task complete t-42 --project acme\n  strata task complete t-42 --project acme --promote 0193f2a1"
    )]
    Task(crate::cmd::task::TaskCmd),
    /// Sessions: new, list, show, archive.
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  strata session new --scope project/acme\n  strata session list\n  strata session show SESSION_ID"
    )]
    Session(crate::cmd::session::SessionCmd),
    /// Copy a whole store into an empty one (SQLite file ⇄ PostgreSQL), verified.
    #[command(
        after_help = "Examples:\n  strata migrate --from ~/.local/share/strata/strata.db --to postgres://strata@db.internal/memory\n  strata migrate --from postgres://strata@db.internal/memory --to ./backup.db\n(the PostgreSQL password comes from STRATA_DB_PASSWORD or PGPASSWORD, never a flag)"
    )]
    Migrate(crate::cmd::migrate::MigrateArgs),
    /// Encrypt a plain SQLite store in place with the key in STRATA_KEY (or
    /// `[store] key_file`); needs the `encryption` feature.
    #[command(
        after_help = "Examples:\n  strata encrypt   (the key in STRATA_KEY, e.g. STRATA_KEY=$(cat ~/.strata.key))\n  openssl rand -hex 32 > ~/.strata.key   (a raw 256-bit key: no key stretching on open)\nStop servers using the store first. Keep the key: without it nothing can be read."
    )]
    Encrypt,
    /// Decrypt an encrypted SQLite store in place (its key in STRATA_KEY or
    /// `[store] key_file`).
    #[command(
        after_help = "Examples:\n  strata decrypt   (the current key in STRATA_KEY or [store] key_file)"
    )]
    Decrypt,
    /// Re-encrypt a SQLite store under a new key (STRATA_NEW_KEY or
    /// --new-key-file), reading it with the current one.
    #[command(
        after_help = "Examples:\n  strata rekey --new-key-file new.key   (the current key in STRATA_KEY)\n  strata rekey   (the new key in STRATA_NEW_KEY)"
    )]
    Rekey(crate::cmd::crypt::RekeyArgs),
    /// Read JSONL (from `strata export`), or another tool's memories, into the store.
    #[command(
        after_help = "Examples:\n  strata import backup.jsonl\n  strata export | strata --db copy.db import -\n  strata import --from chatgpt conversations.json --dry-run\n  strata import --from markdown ~/notes --scope project/acme\n(formats: mcp-memory, chatgpt, claude, markdown, mem0 — see docs/formats.md)"
    )]
    Import(crate::cmd::import::ImportArgs),
    /// Write memories as JSONL.
    #[command(
        after_help = "Examples:\n  strata export -o backup.jsonl\n  strata export --view project/acme --no-history"
    )]
    Export(crate::cmd::export::ExportArgs),
    /// Scopes in use, with counts.
    #[command(after_help = "Examples:\n  strata scopes")]
    Scopes,
    /// Store-wide figures.
    #[command(after_help = "Examples:\n  strata stats")]
    Stats,
    /// Expire TTLs, enforce project bounds, and run the learning detectors.
    #[command(after_help = "Examples:\n  strata upkeep")]
    Upkeep,
    /// What upkeep learned: list, show, confirm, reject, run.
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  strata learned list --view project/acme/**\n  strata learned show 0193f2a1\n  strata learned reject 0193f2a1"
    )]
    Learned(crate::cmd::learned::LearnedCmd),
    /// The audit trail: who did what, when, to which memories (never their
    /// content); `verify` checks its hash chain.
    #[command(
        after_help = "Examples:\n  strata audit --actor ci-agent --since 2026-01-01\n  strata audit --op forget --scope project/acme --json\n  strata audit verify\n(recording is on with `[audit] enabled = true` in strata.toml)"
    )]
    Audit(crate::cmd::audit::AuditArgs),
    /// Give vectors to the memories that wait for one (after imports, or
    /// when writes came faster than the embedder).
    #[command(after_help = "Examples:\n  strata embed --limit 1000")]
    Embed(crate::cmd::embed::EmbedArgs),
    /// Re-embed after a model change: drop other models' vectors, embed everything.
    #[command(after_help = "Examples:\n  strata reindex")]
    Reindex(crate::cmd::embed::ReindexArgs),
    /// The local embedding model: fetch, show.
    #[command(subcommand)]
    #[command(after_help = "Examples:\n  strata model fetch\n  strata model show")]
    Model(crate::cmd::embed::ModelCmd),
    /// Serve the HTTP API (and MCP at /mcp) to many agents.
    #[cfg(feature = "server")]
    #[command(
        after_help = "Examples:\n  strata serve --listen 127.0.0.1:7077 --access-log\n  strata serve --no-auth   (loopback only)"
    )]
    Serve(crate::cmd::serve::ServeArgs),
    /// Serve MCP on stdin/stdout (for MCP clients that start a command).
    #[cfg(feature = "server")]
    #[command(after_help = "Examples:\n  strata mcp --project acme")]
    Mcp(crate::cmd::serve::McpArgs),
    /// Bearer tokens for `strata serve`.
    #[cfg(feature = "server")]
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  strata token new --name coder --scope project/acme --access read_write --write\n  strata token list\n  strata token revoke coder"
    )]
    Token(crate::cmd::serve::TokenCmd),
    /// The web inspector on loopback: prints a one-time login link.
    #[cfg(feature = "server")]
    #[command(after_help = "Examples:\n  strata ui\n  strata ui --listen 127.0.0.1:7078")]
    Ui(crate::cmd::ui::UiArgs),
    /// Run the benchmarks (insert, remember, recall, cold start).
    #[cfg(feature = "bench")]
    #[command(after_help = "Examples:\n  strata bench --memories 10000 --only insert,recall")]
    Bench(strata_bench::BenchArgs),
    /// Retrieval benchmarks: LoCoMo recall@k and evidence inside contexts.
    #[cfg(feature = "bench")]
    #[command(subcommand)]
    #[command(after_help = "Examples:\n  strata eval locomo locomo10.json --strategy hybrid")]
    Eval(strata_bench::EvalCmd),
    /// Shell completions: bash, zsh or fish.
    #[command(
        after_help = "Examples:\n  strata completions bash > ~/.local/share/bash-completion/completions/strata\n  strata completions zsh > ~/.zfunc/_strata\n  strata completions fish > ~/.config/fish/completions/strata.fish"
    )]
    Completions {
        /// The shell.
        shell: crate::cmd::shell::Shell,
    },
    /// The manual page, strata(1), in roff.
    #[command(
        after_help = "Examples:\n  strata man > ~/.local/share/man/man1/strata.1 && man strata\n  strata man | man -l -"
    )]
    Man,
    /// Tools for tests (not a stable interface).
    #[command(subcommand, hide = true)]
    Debug(crate::cmd::debug::DebugCmd),
}

/// The configuration file the flags and environment point at, if any.
pub fn config_path(g: &Global) -> Result<Option<PathBuf>> {
    Ok(match &g.config {
        Some(p) => {
            if !p.exists() {
                anyhow::bail!("config file {} does not exist", p.display());
            }
            Some(p.clone())
        }
        None => {
            let local = PathBuf::from("strata.toml");
            if local.exists() {
                Some(local)
            } else {
                dirs_config().filter(|p| p.exists())
            }
        }
    })
}

/// Resolves flags, environment and files into a config.
pub fn resolve_config(g: &Global) -> Result<strata::Config> {
    let file = config_path(g)?;
    let mut cfg = match &file {
        Some(p) => strata::Config::from_file(p)?,
        None => strata::Config::default(),
    };
    if let Ok(kind) = std::env::var("STRATA_EMBEDDER") {
        cfg.embedder.kind = match kind.as_str() {
            "auto" => strata::EmbedderKind::Auto,
            "local" => strata::EmbedderKind::Local,
            "openai" => strata::EmbedderKind::Openai,
            "none" => strata::EmbedderKind::None,
            other => {
                return usage(format!(
                    "STRATA_EMBEDDER: `{other}` is not one of auto, local, openai, none"
                ));
            }
        };
        cfg.embedder.validate()?;
    }
    if let Some(db) = &g.db {
        if db.as_os_str().is_empty() {
            return usage("--db: empty path");
        }
        cfg.store = store_at(&cfg.store, db, "--db")?;
        refuse_missing_folder(&cfg.store)?;
    }
    with_password(&mut cfg.store);
    with_key(&mut cfg.store)?;
    Ok(cfg)
}

/// The store `db` names (a path, or a `postgres://` URL), keeping the
/// options `base` has for the same backend. `flag` names where it came
/// from, for errors. A URL carrying a password is refused when it came
/// from the command line rather than the environment.
pub fn store_at(
    base: &strata::StoreConfig,
    db: &std::path::Path,
    flag: &str,
) -> Result<strata::StoreConfig> {
    let Some(text) = db.to_str() else {
        return Ok(base.with_location(&db.to_string_lossy()));
    };
    if strata::is_postgres_url(text) {
        let from_env = flag == "--db" && std::env::var("STRATA_DB").ok().as_deref() == Some(text);
        if !from_env && url_has_password(text) {
            return usage(format!(
                "{flag}: `{}` carries a password, which every user of this machine can read on the command line; \
                 give the URL without it and the password in STRATA_DB_PASSWORD (or PGPASSWORD)",
                strata::redact_url(text)
            ));
        }
    }
    Ok(base.with_location(text))
}

/// A database file named by `--db` or `STRATA_DB` must lie in a folder
/// that exists: a mistyped path would otherwise become a new, empty store
/// in new folders, and the user's memories would seem gone (issue 56).
/// The default database's folder (under `XDG_DATA_HOME`) is still made on
/// first use, by the store.
fn refuse_missing_folder(store: &strata::StoreConfig) -> Result<()> {
    let strata::StoreConfig::Sqlite { path, .. } = store else {
        return Ok(());
    };
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    if dir.is_dir() {
        return Ok(());
    }
    let flag =
        if std::env::args_os().any(|a| a == "--db" || a.to_string_lossy().starts_with("--db=")) {
            "--db"
        } else {
            "STRATA_DB"
        };
    let what = if dir.exists() {
        "is not a folder"
    } else {
        "does not exist"
    };
    usage(format!(
        "{flag}: {} {what}; strata makes no folders for a database you name: create it, or name a file in a folder that exists",
        dir.display()
    ))
}

/// Whether a `postgres://` URL carries a password (`user:password@`).
fn url_has_password(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let auth = rest.split(['/', '?']).next().unwrap_or("");
    auth.rsplit_once('@')
        .is_some_and(|(userinfo, _)| userinfo.contains(':'))
        || url.contains("password=")
}

/// A PostgreSQL store without a password gets `STRATA_DB_PASSWORD` (then
/// `PGPASSWORD`), when set.
pub fn with_password(store: &mut strata::StoreConfig) {
    if let strata::StoreConfig::Postgres { options, .. } = store
        && options.password.is_none()
    {
        options.password = std::env::var("STRATA_DB_PASSWORD")
            .or_else(|_| std::env::var("PGPASSWORD"))
            .ok()
            .filter(|p| !p.is_empty());
    }
}

/// The key of `e`'s store, when it is an encrypted SQLite file.
pub fn store_key(e: &strata::Engine) -> Option<strata::StoreKey> {
    config_key(e.config())
}

/// The store key `cfg` gives, when its store is an encrypted SQLite file.
pub fn config_key(cfg: &strata::Config) -> Option<strata::StoreKey> {
    match &cfg.store {
        strata::StoreConfig::Sqlite { options, .. } => options.key.clone(),
        _ => None,
    }
}

/// A SQLite store without a configured key takes `STRATA_KEY` when it is
/// set (an encrypted store, feature `encryption`).
pub fn with_key(store: &mut strata::StoreConfig) -> Result<()> {
    if let strata::StoreConfig::Sqlite { options, .. } = store
        && options.key.is_none()
    {
        options.key = strata::StoreKey::from_env("STRATA_KEY")?;
    }
    Ok(())
}

fn dirs_config() -> Option<PathBuf> {
    std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .map(|d| d.join("strata").join("strata.toml"))
}

/// Opens the engine the flags describe.
pub fn open(g: &Global) -> Result<strata::Engine> {
    let cfg = resolve_config(g)?;
    let where_ = cfg.store.describe();
    strata::Engine::open(cfg).with_context(|| format!("opening {where_}"))
}

/// Says once, on stderr, that relevance is keyword-only because the local
/// model is missing (`embedder.kind = "auto"` and no model on this
/// machine): a user who writes or recalls without it learns why
/// paraphrases are not found, where they are. `kind = "none"` is meant and
/// says nothing, and so does `--json`, whose stderr a program reads.
pub fn say_if_model_missing(g: &Global, e: &strata::Engine) {
    if g.json || e.config().embedder.kind != strata::EmbedderKind::Auto {
        return;
    }
    if let Ok(None) = e.embedder()
        && let Ok(strata::EmbedStatus { note: Some(n), .. }) = e.embed_status()
    {
        eprintln!("note: {n}");
    }
}

/// Records a call in the audit trail as the local user (`local:$USER`),
/// when `[audit]` is on: the scopes it touched, how many memories, and the
/// ids it wrote or deleted; never content or query text. Only calls that
/// succeeded are recorded: the CLI refuses nothing on a grant's behalf.
pub fn audit(
    e: &strata::Engine,
    op: &str,
    scopes: Vec<String>,
    count: usize,
    ids: Vec<String>,
) -> Result<()> {
    if !e.audit_config().enabled {
        return Ok(());
    }
    let ev = strata::AuditEvent::new(strata::local_actor(), op)
        .scopes(scopes)
        .ids(ids)
        .count(count as u64);
    e.audit_record(&ev)
        .context("recording the call in the audit trail")?;
    Ok(())
}

/// Scopes or view entries as the audit trail records them: each once.
pub fn scopes<S: std::fmt::Display>(items: impl IntoIterator<Item = S>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in items {
        let s = s.to_string();
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// The full id a CLI argument names: a whole id, or a short one (at least
/// 8 characters that start exactly one memory's id, active or archived).
pub fn resolve_id(e: &strata::Engine, id: &str) -> Result<String> {
    Ok(e.resolve_id(id, &strata::Fence::everything())?)
}

/// Parses `--view` values.
pub fn view(v: &[String]) -> Result<strata::View> {
    if v.is_empty() {
        return usage(
            "--view: name at least one scope the read may see (e.g. --view project/acme --view global)",
        );
    }
    Ok(strata::View::parse(v)?)
}

/// Parses an optional `--filter` JSON.
pub fn filter(f: Option<&str>) -> Result<strata::Filter> {
    match f {
        Some(t) => Ok(strata::Filter::parse_str(t)?),
        None => Ok(strata::Filter::all()),
    }
}

/// Runs `op` unconfirmed (or confirmed under `--yes`); when the engine says
/// the operation needs confirmation, asks on a terminal and runs it again.
pub fn with_confirm<T>(
    yes: bool,
    mut op: impl FnMut(strata::Confirm) -> strata::Result<T>,
) -> Result<T> {
    use std::io::{BufRead, IsTerminal, Write};
    let first = if yes {
        strata::Confirm::Yes
    } else {
        strata::Confirm::No
    };
    match op(first) {
        Err(strata::Error::NeedsConfirmation(what)) if !yes && std::io::stdin().is_terminal() => {
            eprint!("{what}: are you sure? [y/N] ");
            std::io::stderr().flush().ok();
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line)?;
            if matches!(line.trim(), "y" | "Y" | "yes") {
                Ok(op(strata::Confirm::Yes)?)
            } else {
                anyhow::bail!("{what}: not confirmed")
            }
        }
        r => Ok(r?),
    }
}
