//! `strata eval`: the flags of the two evaluations and their printed
//! reports.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use crate::out::{self as output, usage};

#[derive(Debug, Subcommand)]
pub enum EvalCmd {
    /// LoCoMo (../shared/data/locomo/locomo10.json): recall@k, MRR, and
    /// evidence inside assembled contexts, per category.
    #[command(
        after_help = "Examples:\n  strata eval locomo locomo10.json --questions 20 --embedder none"
    )]
    Locomo(LocomoArgs),
    /// Any labelled set in the generic format (see docs/retrieval.md): recall@k,
    /// any@k, all@k and MRR, per category.
    #[command(
        after_help = "Examples:\n  strata eval retrieval crates/strata-bench/tests/fixtures/retrieval.json --embedder local"
    )]
    Retrieval(RetrievalArgs),
    /// Upkeep's detectors on synthetic histories with planted patterns:
    /// precision and recall per detector, `as_of` answers, and the time of
    /// a full and an incremental learning run over --memories.
    #[command(
        after_help = "Examples:\n  strata eval learning\n  strata eval learning --projects 10 --memories 0"
    )]
    Learning(LearningArgs),
    /// Learning on hand-written histories nobody tuned on
    /// (crates/strata-bench/data/learning-heldout/): standing preferences,
    /// facts that change and recurring topics found, asides learned by
    /// mistake. Needs the local model for learning by meaning.
    #[command(
        name = "learning-heldout",
        after_help = "Examples:\n  strata eval learning-heldout crates/strata-bench/data/learning-heldout/report.json"
    )]
    LearningHeldout(HeldoutArgs),
    /// The relevance floor on hand-written projects nobody tuned on
    /// (crates/strata-bench/data/relevance-floor/): the note that answers a
    /// question asked in other words found, and "nothing relevant" where no
    /// note answers, per question type.
    #[command(
        name = "relevance-floor",
        after_help = "Examples:\n  strata eval relevance-floor crates/strata-bench/data/relevance-floor/report.json"
    )]
    RelevanceFloor(FloorArgs),
    /// Trains the utterance classifier learning reads meaning with, on a
    /// labelled set of sentences, and writes its weights (cross-validated
    /// scores on standard output).
    #[command(
        name = "train-utterances",
        after_help = "Examples:\n  strata eval train-utterances crates/strata-bench/data/utterances/train.jsonl --out crates/strata/src/learn/utterance.json"
    )]
    TrainUtterances(TrainArgs),
    /// The write-path detectors of secrets and personal data: planted
    /// secrets of every kind caught, and what they flag in text without
    /// any (generated technical sentences, and LoCoMo's turns when given).
    #[command(
        after_help = "Examples:\n  strata eval secrets\n  strata eval secrets --locomo ../shared/data/locomo/locomo10.json"
    )]
    Secrets(SecretsArgs),
}

#[derive(Debug, Args)]
pub struct SecretsArgs {
    /// Secrets planted per kind.
    #[arg(long, default_value_t = 1000)]
    pub per_kind: usize,
    /// A LoCoMo file whose turns are the ordinary-conversation negatives.
    #[arg(long)]
    pub locomo: Option<PathBuf>,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

#[derive(Debug, Args)]
pub struct HeldoutArgs {
    /// Held-out files (the schema is in data/learning-heldout/README.md).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// auto (the local model when installed), local or none.
    #[arg(long, default_value = "auto")]
    pub embedder: String,
    /// Print what was missed or learned wrongly.
    #[arg(long)]
    pub misses: bool,
}

#[derive(Debug, Args)]
pub struct FloorArgs {
    /// Project files (the format is in data/relevance-floor/README.md).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// auto (the local model when installed), local or none.
    #[arg(long, default_value = "auto")]
    pub embedder: String,
    /// Print each question that went wrong.
    #[arg(long)]
    pub misses: bool,
    /// Write one JSON line per question to this file: every candidate's
    /// similarity, text match and vector rank before the floor.
    #[arg(long, value_name = "FILE")]
    pub per_question: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// The labelled sentences (JSON lines of `text` and `label`).
    pub file: PathBuf,
    /// Where to write the classifier (JSON); nothing is written without it.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// L2 penalty.
    #[arg(long, default_value_t = 1e-3)]
    pub lambda: f32,
    /// Gradient steps.
    #[arg(long, default_value_t = 600)]
    pub steps: usize,
}

#[derive(Debug, Args)]
pub struct LearningArgs {
    /// Projects of the labelled histories.
    #[arg(long, default_value_t = 40)]
    pub projects: usize,
    /// Sessions per project (spread over six simulated months).
    #[arg(long, default_value_t = 12)]
    pub sessions: usize,
    /// Filler turns per session.
    #[arg(long, default_value_t = 6)]
    pub turns: usize,
    /// Memories of the timing store (0 skips timing).
    #[arg(long, default_value_t = 100_000)]
    pub memories: usize,
    /// none (default: the detectors the generator's phrasings were
    /// written against), auto or local (learning by meaning, for both
    /// stores).
    #[arg(long, default_value = "none")]
    pub embedder: String,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

/// Flags both benchmarks take.
#[derive(Debug, Args)]
pub struct Common {
    /// recency, importance, relevance (default) or hybrid.
    #[arg(long, default_value = "relevance")]
    pub strategy: String,
    /// auto (the local model when installed), local, openai (from the
    /// config's [embedder]) or none (BM25 alone).
    #[arg(long, default_value = "auto")]
    pub embedder: String,
    /// rrf or weighted (how BM25 and vector ranks combine).
    #[arg(long)]
    pub fusion: Option<String>,
    /// Keep the evaluation database here (default: a temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Reuse the database an earlier run left in --dir (same file, same
    /// embedder): skips storing and embedding, to compare rankings quickly.
    #[arg(long, requires = "dir")]
    pub reuse: bool,
}

#[derive(Debug, Args)]
pub struct RetrievalArgs {
    /// The JSON file: {"corpora": [...], "queries": [...]}.
    pub file: PathBuf,
    /// Cut-offs for recall@k (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,5,10,25,50")]
    pub k: Vec<usize>,
    #[command(flatten)]
    pub common: Common,
}

/// `--budgets`: token budgets, none when the value is empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budgets(pub Vec<u32>);

fn budget_list(s: &str) -> Result<Budgets, String> {
    s.split(',')
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .map(|b| {
            b.parse::<u32>()
                .map_err(|_| format!("{b:?} is not a token budget (a whole number, as 1000)"))
        })
        .collect::<Result<Vec<u32>, String>>()
        .map(Budgets)
}

#[derive(Debug, Args)]
pub struct LocomoArgs {
    /// The LoCoMo JSON file.
    pub file: PathBuf,
    /// Cut-offs for recall@k (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,5,10,25,50")]
    pub k: Vec<usize>,
    /// Context budgets in tokens (comma-separated; empty to skip).
    #[arg(long, value_parser = budget_list, default_value = "1000,2000,4000")]
    pub budgets: Budgets,
    #[command(flatten)]
    pub common: Common,
    /// Only the first N questions of each conversation.
    #[arg(long)]
    pub questions: Option<usize>,
    /// Summary share of the "with summary" context column.
    #[arg(long, default_value_t = 0.3)]
    pub summary_share: f64,
    /// Run learning (detectors and consolidation) over the conversations
    /// before the questions, as upkeep would
    #[arg(long)]
    pub learn: bool,
    /// Run as of a day after the file's last session (the engine's clock
    /// fixed there), instead of now: decay, recency and learned
    /// confidence as when the conversations were fresh.
    #[arg(long)]
    pub at_last_session: bool,
    /// Write one JSON line per question to this file: where each evidence
    /// turn ranked, the first ten results, and every candidate's signals
    /// (bm25, similarity, named time, relevance) before the relevance floor,
    /// to study misses or try a ranking idea offline.
    #[arg(long, value_name = "FILE")]
    pub per_question: Option<PathBuf>,
    /// Then ask the questions again with each idea of the ranking turned
    /// off in turn (session neighbours, the session's share, vectors,
    /// weighted fusion, the relevance floor, reply context), the rest as
    /// configured: a table
    /// of what each buys. Reply context needs the turns embedded again.
    #[arg(long)]
    pub ablation: bool,
    /// Write N notes dated now into each conversation's scope first (the
    /// next conversation's turns: they answer none of its questions), to
    /// see whether fresh notes bury old history that matches.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub fresh_notes: usize,
    /// Ask each question after the N turns said just before its first
    /// evidence turn (`speaker: text` lines), as an agent sends its recent
    /// dialogue: long queries whose intent is at their end. Those turns
    /// are left out of the ranks.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub context_turns: usize,
}

/// One idea of the ranking turned off.
struct Variant {
    /// What is turned off.
    name: &'static str,
    /// The setting that turns it off.
    setting: &'static str,
    /// That setting, applied to a configuration.
    change: fn(&mut strata::Config),
    /// Whether it is an idea about vectors (left out of a run without).
    vectors: bool,
    /// Whether the turns must be stored and embedded again (a change to
    /// what is embedded).
    reembed: bool,
}

/// The ideas `--ablation` turns off, each alone.
const VARIANTS: [Variant; 8] = [
    Variant {
        name: "without session neighbours",
        setting: "[ranking] neighbour_weight = 0",
        change: |c| c.ranking.neighbour_weight = 0.0,
        vectors: false,
        reembed: false,
    },
    Variant {
        name: "without the session's share",
        setting: "[ranking] session_weight = 0",
        change: |c| c.ranking.session_weight = 0.0,
        vectors: false,
        reembed: false,
    },
    Variant {
        name: "without the named time",
        setting: "[ranking] time_weight = 0",
        change: |c| c.ranking.time_weight = 0.0,
        vectors: false,
        reembed: false,
    },
    Variant {
        name: "without vectors (BM25 alone)",
        setting: "--embedder none",
        change: |c| c.embedder.kind = strata::EmbedderKind::None,
        vectors: true,
        reembed: false,
    },
    Variant {
        name: "reciprocal-rank fusion",
        setting: "--fusion rrf",
        change: |c| c.ranking.fusion = strata::Fusion::Rrf,
        vectors: true,
        reembed: false,
    },
    Variant {
        name: "without the relevance floor",
        setting: "[ranking] min_relevance = 0",
        change: |c| c.ranking.min_relevance = 0.0,
        vectors: false,
        reembed: false,
    },
    Variant {
        name: "without the similarity band",
        setting: "[ranking] similarity_band = 0",
        change: |c| c.ranking.similarity_band = 0.0,
        vectors: true,
        reembed: false,
    },
    Variant {
        name: "without reply context",
        setting: "[embedder] reply_context = false",
        change: |c| c.embedder.reply_context = Some(false),
        vectors: true,
        reembed: true,
    },
];

/// Runs the questions once per [`VARIANTS`] entry that changes `base`
/// (vector ideas only when the run had vectors): on the run's database
/// when the variant only ranks differently, on a scratch one beside it
/// when it changes what is embedded.
fn ablation(
    base: &strata::Config,
    dir: &std::path::Path,
    data: &serde_json::Value,
    opts: &crate::eval::LocomoOptions,
    vectors: bool,
    clock: Option<jiff::Timestamp>,
) -> Result<Vec<crate::eval::Ablation>> {
    let mut out = Vec::new();
    for v in &VARIANTS {
        let mut cfg = base.clone();
        (v.change)(&mut cfg);
        if cfg == *base || (v.vectors && !vectors) {
            continue;
        }
        let scratch = dir.join("ablation.db");
        let mut o = crate::eval::LocomoOptions {
            budgets: Vec::new(),
            reuse: true,
            learn: false,
            per_question: None,
            ..opts.clone()
        };
        if v.reembed {
            remove_db(&scratch);
            cfg.store = strata::Config::sqlite(&scratch).store;
            o.reuse = false;
            o.learn = opts.learn;
        }
        let mut engine = strata::Engine::open(cfg)?;
        if let Some(at) = clock {
            engine.set_clock(move || at);
        }
        let rep = crate::eval::locomo(&engine, data, &o);
        drop(engine);
        if v.reembed {
            remove_db(&scratch);
        }
        let rep = rep?;
        out.push(crate::eval::Ablation {
            variant: v.name.into(),
            setting: v.setting.into(),
            overall: rep.overall,
            by_category: rep.by_category,
            halves: rep.halves,
        });
    }
    Ok(out)
}

/// Removes a SQLite database and its side files, if there.
fn remove_db(db: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
}

/// An engine over a fresh database in `--dir` (or a temporary directory),
/// with the embedder and fusion the flags name; and the temporary
/// directory, removed when dropped (after the engine).
fn open(
    g: &Env,
    c: &Common,
) -> Result<(
    strata::Engine,
    strata::Config,
    std::path::PathBuf,
    Option<tempfile::TempDir>,
)> {
    let (dir, scratch) = match &c.dir {
        Some(d) => (d.clone(), None),
        None => {
            let s = crate::out::scratch("strata-eval")?;
            (s.path().to_path_buf(), Some(s))
        }
    };
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("eval.db");
    if c.reuse && !db.is_file() {
        return usage(format!("--reuse: no database at {}", db.display()));
    }
    if !c.reuse {
        remove_db(&db);
    }
    // The configuration's [embedder] and [ranking] apply; the store is ours.
    let mut cfg = (g.config)()?;
    cfg.store = strata::Config::sqlite(&db).store;
    cfg.max_items = 0;
    cfg.embedder.kind = embedder_kind(&c.embedder)?;
    if let Some(f) = &c.fusion {
        cfg.ranking.fusion = match f.as_str() {
            "rrf" => strata::Fusion::Rrf,
            "weighted" => strata::Fusion::Weighted,
            other => return usage(format!("--fusion: `{other}` is not one of rrf, weighted")),
        };
    }
    let engine = strata::Engine::open(cfg.clone())?;
    if c.embedder == "local" {
        // Fail before indexing when the model is missing.
        engine.embedder()?;
    }
    Ok((engine, cfg, dir, scratch))
}

/// Runs `f` on the evaluation engine, then closes it and removes its
/// temporary directory (if any), whatever `f` returned.
fn finish<T>(
    engine: strata::Engine,
    scratch: Option<tempfile::TempDir>,
    f: impl FnOnce(&strata::Engine) -> strata::Result<T>,
) -> Result<T> {
    let out = f(&engine);
    drop(engine);
    drop(scratch);
    Ok(out?)
}

/// The latest `session_N_date_time` of a LoCoMo file's conversations.
fn last_session(data: &serde_json::Value) -> Option<jiff::Timestamp> {
    data.as_array()?
        .iter()
        .filter_map(|s| s.get("conversation")?.as_object())
        .flat_map(|c| {
            c.iter()
                .filter(|(k, _)| k.starts_with("session_") && k.ends_with("_date_time"))
                .filter_map(|(_, v)| crate::eval::parse_date(v.as_str()?))
        })
        .max()
}

fn read_json(file: &std::path::Path) -> Result<serde_json::Value> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))
}

/// How an evaluation reports, and where its engine's configuration comes
/// from (the `strata` command resolves `strata.toml` and the environment).
struct Env<'a> {
    json: bool,
    config: &'a dyn Fn() -> Result<strata::Config>,
}

/// Runs the evaluation `c` names and prints its report (JSON when `json`).
/// `config` gives the base configuration: its `[embedder]` and `[ranking]`
/// apply, the store is the evaluation's own.
pub fn eval(c: EvalCmd, json: bool, config: impl Fn() -> Result<strata::Config>) -> Result<()> {
    let g = &Env {
        json,
        config: &config,
    };
    let a = match c {
        EvalCmd::Locomo(a) => a,
        EvalCmd::Retrieval(a) => return run_retrieval(g, a),
        EvalCmd::Learning(a) => return run_learning(g, a),
        EvalCmd::LearningHeldout(a) => return run_heldout(g, a),
        EvalCmd::RelevanceFloor(a) => return run_floor(g, a),
        EvalCmd::TrainUtterances(a) => return run_train(g, a),
        EvalCmd::Secrets(a) => return run_secrets(g, a),
    };
    if !(0.0..1.0).contains(&a.summary_share) {
        return usage(format!(
            "--summary-share: {} must be in [0, 1)",
            a.summary_share
        ));
    }
    let data = read_json(&a.file)?;
    let opts = crate::eval::LocomoOptions {
        ks: a.k.clone(),
        budgets: a.budgets.0.clone(),
        strategy: a.common.strategy.parse()?,
        max_questions: a.questions,
        reuse: a.common.reuse,
        summary_share: a.summary_share,
        learn: a.learn,
        per_question: a.per_question.clone(),
        fresh_notes: a.fresh_notes,
        context_turns: a.context_turns,
    };
    let (mut engine, cfg, dir, tmp) = open(g, &a.common)?;
    let mut clock = None;
    if a.at_last_session {
        let last = last_session(&data).ok_or_else(|| {
            anyhow::anyhow!(
                "--at-last-session: {} has no session dates",
                a.file.display()
            )
        })?;
        let at = last + jiff::SignedDuration::from_hours(24);
        engine.set_clock(move || at);
        clock = Some(at);
    }
    if !g.json {
        eprintln!(
            "evaluating {} ({})…",
            a.file.display(),
            opts.strategy.as_str()
        );
    }
    let mut rep = finish(engine, None, |e| crate::eval::locomo(e, &data, &opts))?;
    if a.ablation {
        if !g.json {
            eprintln!("ablation: the questions again with each idea turned off…");
        }
        let vectors = rep.timing.embedder.is_some();
        let out = ablation(&cfg, &dir, &data, &opts, vectors, clock);
        drop(tmp);
        rep.ablation = out?;
    }
    if g.json {
        return output::json(&rep);
    }
    print_report(&rep, &opts)
}

fn run_secrets(g: &Env, a: SecretsArgs) -> Result<()> {
    if a.per_kind == 0 {
        return usage("eval secrets: --per-kind must be positive");
    }
    let turns = match &a.locomo {
        Some(f) => Some(crate::secrets::locomo_turns(&read_json(f)?)),
        None => None,
    };
    if turns.as_ref().is_some_and(Vec::is_empty) {
        return usage(
            "--locomo: the file holds no turns (a JSON list of conversations with session_N lists of {text})",
        );
    }
    let rep = crate::secrets::secrets(a.per_kind, a.seed, turns.as_deref());
    if g.json {
        return output::json(&rep);
    }
    output::line(format!(
        "strata eval secrets — {} planted ({} per kind), seed {}",
        rep.planted, a.per_kind, a.seed
    ))?;
    output::line(format!(
        "{:<22} {:>8} {:>8} {:>8}",
        "kind", "caught", "recall", "named"
    ))?;
    for k in &rep.kinds {
        output::line(format!(
            "{:<22} {:>8} {:>8.3} {:>8.3}",
            k.kind,
            k.caught,
            k.caught as f64 / k.planted as f64,
            k.named as f64 / k.planted as f64
        ))?;
        for m in &k.missed {
            output::line(format!("    missed: {m:?}"))?;
        }
    }
    output::line(format!(
        "{:<22} {:>8} {:>8.4}",
        "all", rep.caught, rep.recall
    ))?;
    for n in &rep.negatives {
        let by: Vec<String> = n
            .by_detector
            .iter()
            .map(|(d, c)| format!("{d} {c}"))
            .collect();
        output::line(format!(
            "negatives: {} — {} of {} texts flagged ({:.2} %){}",
            n.set,
            n.flagged,
            n.texts,
            100.0 * n.rate,
            if by.is_empty() {
                String::new()
            } else {
                format!(": {}", by.join(", "))
            }
        ))?;
        for e in &n.examples {
            output::line(format!("    {e}"))?;
        }
    }
    output::line(format!("scan speed: {:.1} MB/s", rep.scan_mb_per_s))
}

/// The `--embedder` flag of every evaluation.
fn embedder_kind(name: &str) -> Result<strata::EmbedderKind> {
    Ok(match name {
        "auto" => strata::EmbedderKind::Auto,
        "local" => strata::EmbedderKind::Local,
        "openai" => strata::EmbedderKind::Openai,
        "none" => strata::EmbedderKind::None,
        other => {
            return usage(format!(
                "--embedder: `{other}` is not one of auto, local, openai, none"
            ));
        }
    })
}

/// An engine over a scratch SQLite store with the base configuration and
/// `embedder`, unbounded; the folder goes when the guard does.
fn scratch_engine(
    g: &Env,
    name: &str,
    embedder: &str,
) -> Result<(strata::Engine, tempfile::TempDir)> {
    let kind = embedder_kind(embedder)?;
    let scratch = crate::out::scratch(&format!("strata-eval-{name}"))?;
    let mut cfg = (g.config)()?;
    cfg.store = strata::Config::sqlite(scratch.path().join(format!("{name}.db"))).store;
    cfg.max_items = 0;
    cfg.embedder.kind = kind;
    Ok((strata::Engine::open(cfg)?, scratch))
}

fn run_floor(g: &Env, a: FloorArgs) -> Result<()> {
    let (engine, _scratch) = scratch_engine(g, "floor", &a.embedder)?;
    let files: Vec<&std::path::Path> = a.files.iter().map(PathBuf::as_path).collect();
    let rep = crate::floor::relevance_floor(&engine, &files, a.per_question.as_deref())?;
    if g.json {
        return output::json(&rep);
    }
    output::line(format!(
        "strata eval relevance-floor — {} projects, {} notes, min_relevance {}",
        rep.projects, rep.notes, rep.min_relevance
    ))?;
    output::line(format!(
        "{:<11} {:>9} {:>7} {:>7} {:>9}",
        "type", "questions", "first", "in top 5", "nothing"
    ))?;
    for (t, s) in &rep.by_type {
        output::line(format!(
            "{t:<11} {:>9} {:>7} {:>7} {:>9}",
            s.questions, s.first, s.found, s.nothing
        ))?;
    }
    output::line(format!(
        "answer found in the top 5: {:.1} %; nothing relevant where no note answers: {:.1} %",
        100.0 * rep.answered_found,
        100.0 * rep.unanswerable_nothing
    ))?;
    if a.misses {
        for m in &rep.misses {
            output::line(format!("  {m}"))?;
        }
    }
    Ok(())
}

fn run_heldout(g: &Env, a: HeldoutArgs) -> Result<()> {
    let (engine, _scratch) = scratch_engine(g, "heldout", &a.embedder)?;
    let files: Vec<&std::path::Path> = a.files.iter().map(PathBuf::as_path).collect();
    let rep = crate::heldout::learning_heldout(&engine, &files)?;
    if g.json {
        return output::json(&rep);
    }
    output::line(format!(
        "strata eval learning-heldout — {} users, {} turns",
        rep.users, rep.turns
    ))?;
    for (name, d) in [
        ("preference", &rep.preference),
        ("fact", &rep.fact),
        ("topic", &rep.topic),
    ] {
        output::line(format!(
            "{name:<11} planted {:>3}  found {:>3}  recall {:.2}  learned {:>3}  precision {:.2}",
            d.planted, d.found, d.recall, d.learned, d.precision
        ))?;
    }
    output::line(format!(
        "old value served as current: {} of {} facts; asides learned: {} ({} planted, {:.2} per ten users)",
        rep.fact_old_as_current,
        rep.fact.planted,
        rep.asides_learned,
        rep.asides,
        10.0 * rep.asides_learned as f64 / rep.users.max(1) as f64
    ))?;
    for n in &rep.notes {
        output::line(format!("note: {n}"))?;
    }
    if a.misses {
        for m in &rep.misses {
            output::line(format!("  {m}"))?;
        }
    }
    Ok(())
}

fn run_train(g: &Env, a: TrainArgs) -> Result<()> {
    if a.steps == 0 || !a.lambda.is_finite() || a.lambda < 0.0 {
        return usage("eval train-utterances: --steps must be positive and --lambda 0 or more");
    }
    // The set is checked before the model is loaded.
    crate::utterances::read(&a.file)?;
    let mut cfg = (g.config)()?;
    if cfg.embedder.kind == strata::EmbedderKind::Auto {
        cfg.embedder.kind = strata::EmbedderKind::Local;
    }
    let Some(embedder) = cfg.embedder.open()? else {
        return usage("eval train-utterances: needs the local model (`strata model fetch`)");
    };
    let o = crate::utterances::TrainOptions {
        lambda: a.lambda,
        steps: a.steps,
        ..Default::default()
    };
    // Weights read from the default model are kept under its id, whatever
    // the folder is called.
    let weights = cfg.embedder.model_dir().join("model.safetensors");
    let model = match strata::file_sha256(&weights) {
        Ok(h) if h == strata::MINILM_SHA256 => strata::DEFAULT_MODEL.to_string(),
        _ => embedder.model().to_string(),
    };
    let rep = crate::utterances::train(&a.file, embedder.as_ref(), &model, o)?;
    if let Some(out) = &a.out {
        let mut text = serde_json::to_string(&rep.classifier)?;
        text.push('\n');
        std::fs::write(out, text).with_context(|| format!("writing {}", out.display()))?;
    }
    if g.json {
        return output::json(&serde_json::json!({
            "sentences": rep.sentences, "cv_accuracy": rep.cv_accuracy, "per_class": rep.per_class,
        }));
    }
    output::line(format!(
        "{} sentences; five-fold accuracy {:.3}",
        rep.sentences, rep.cv_accuracy
    ))?;
    for (name, c) in &rep.per_class {
        output::line(format!(
            "{name:<11} {:>4}  precision {:.3}  recall {:.3}",
            c.support, c.precision, c.recall
        ))?;
    }
    Ok(())
}

fn run_learning(g: &Env, a: LearningArgs) -> Result<()> {
    if a.projects == 0 || a.sessions < 2 {
        return usage("eval learning: --projects must be positive and --sessions at least 2");
    }
    let kind = embedder_kind(&a.embedder)?;
    let scratch = crate::out::scratch("strata-eval-learning")?;
    let open = |name: &str| -> Result<strata::Engine> {
        let mut cfg = (g.config)()?;
        cfg.store = strata::Config::sqlite(scratch.path().join(name)).store;
        cfg.max_items = 0;
        if kind == strata::EmbedderKind::None {
            cfg.embedder = strata::EmbedderConfig::none();
        } else {
            cfg.embedder.kind = kind;
        }
        Ok(strata::Engine::open(cfg)?)
    };
    let labelled = open("labelled.db")?;
    let timed = if a.memories > 0 {
        Some(open("timed.db")?)
    } else {
        None
    };
    let opts = crate::learn::LearningOptions {
        projects: a.projects,
        sessions: a.sessions,
        turns: a.turns,
        memories: a.memories,
        seed: a.seed,
    };
    if !g.json {
        eprintln!(
            "generating {} projects × {} sessions…",
            a.projects, a.sessions
        );
    }
    let rep = crate::learn::learning(&labelled, timed.as_ref(), &opts)?;
    if g.json {
        return output::json(&rep);
    }
    output::line(format!(
        "strata eval learning — {} labelled memories",
        rep.memories
    ))?;
    for (name, d) in [
        ("preference", &rep.preference),
        ("failure", &rep.failure),
        ("confusion", &rep.confusion),
        ("topic", &rep.topic),
        ("fact", &rep.fact),
        ("consolidate", &rep.consolidation),
    ] {
        output::line(format!(
            "{name:<11} planted {:>4}  learned {:>4}  precision {:.3}  recall {:.3}  split {}",
            d.planted, d.learned, d.precision, d.recall, d.split
        ))?;
    }
    output::line(format!(
        "fixes       named {} of {}",
        rep.fixes_named, rep.fixes_planted
    ))?;
    output::line(format!(
        "as_of       {} of {} correct ({:.3}); without a key {} of {}",
        rep.as_of_correct,
        rep.as_of_checks,
        rep.as_of_accuracy,
        rep.fact_as_of_correct,
        rep.fact_as_of_checks
    ))?;
    if let Some(t) = &rep.timing {
        output::line(format!(
            "upkeep      {} memories: full run {:.2} s ({} examined, {} merged), incremental {:.2} s ({} examined: {} new, the rest changed by the merges)",
            t.memories,
            t.full_secs,
            t.full_examined,
            t.full_consolidated,
            t.incremental_secs,
            t.incremental_examined,
            t.added
        ))?;
    }
    Ok(())
}

fn run_retrieval(g: &Env, a: RetrievalArgs) -> Result<()> {
    let data = read_json(&a.file)?;
    let opts = crate::eval::RetrievalOptions {
        ks: a.k.clone(),
        strategy: a.common.strategy.parse()?,
        reuse: a.common.reuse,
    };
    let (engine, _, _, tmp) = open(g, &a.common)?;
    let rep = finish(engine, tmp, |e| crate::eval::retrieval(e, &data, &opts))?;
    if g.json {
        return output::json(&rep);
    }
    output::line(format!(
        "retrieval — strategy {} — {} corpora, {} memories, {} queries",
        rep.strategy, rep.corpora, rep.memories, rep.queries
    ))?;
    output::line(&rep.timing)?;
    output::line(table_head(&opts.ks))?;
    for (c, m) in &rep.by_category {
        output::line(table_row(c, m, &opts.ks))?;
    }
    output::line(table_row("overall", &rep.overall, &opts.ks))
}

fn table_head(ks: &[usize]) -> String {
    let mut head = format!("{:<22}{:>6}", "", "n");
    for k in ks {
        head.push_str(&format!("{:>7}", format!("R@{k}")));
    }
    for k in ks {
        head.push_str(&format!("{:>8}", format!("any@{k}")));
    }
    head.push_str(&format!("{:>8}", "MRR"));
    head
}

fn table_row(name: &str, m: &crate::eval::Metrics, ks: &[usize]) -> String {
    let mut s = format!("{name:<22}{:>6}", m.questions);
    for k in ks {
        s.push_str(&format!(
            "{:>7.1}",
            100.0 * m.recall.get(k).copied().unwrap_or(0.0)
        ));
    }
    for k in ks {
        s.push_str(&format!(
            "{:>8.1}",
            100.0 * m.recall_any.get(k).copied().unwrap_or(0.0)
        ));
    }
    s.push_str(&format!("{:>8.3}", m.mrr));
    s
}

fn print_report(rep: &crate::eval::LocomoReport, opts: &crate::eval::LocomoOptions) -> Result<()> {
    output::line(format!(
        "LoCoMo retrieval — strategy {} — {} conversations, {} turns, {} questions with evidence ({} without; {} evidence ids name no turn, counted as misses)",
        rep.strategy,
        rep.conversations,
        rep.turns,
        rep.questions,
        rep.no_evidence,
        rep.unknown_evidence.len()
    ))?;
    output::line(&rep.timing)?;
    if let Some(l) = &rep.learned {
        output::line(format!(
            "learned before the questions: {} examined, {} learned, {} consolidated",
            l.examined, l.learned, l.consolidated
        ))?;
    }
    output::line(
        "categories as in LoCoMo: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial",
    )?;
    output::line(table_head(&opts.ks))?;
    let row = |name: &str, m: &crate::eval::Metrics| table_row(name, m, &opts.ks);
    for (c, name) in crate::eval::CATEGORIES {
        if let Some(m) = rep.by_category.get(&c) {
            output::line(row(&format!("{c} {name}"), m))?;
        }
    }
    output::line(row("overall (1–5)", &rep.overall))?;
    output::line(row("overall (1–4)", &rep.overall_1_4))?;
    if let [a, b] = rep.halves.as_slice() {
        let half = rep.conversations.div_ceil(2);
        output::line(row(&format!("convs 1–{half}"), a))?;
        output::line(row(&format!("convs {}–{}", half + 1, rep.conversations), b))?;
    }
    if rep.context_turns > 0 {
        output::line(format!(
            "each question asked after the {} turns before its evidence (left out of the ranks)",
            rep.context_turns
        ))?;
    }
    if rep.fresh_notes > 0 {
        output::line(format!(
            "{} fresh notes (another conversation's turns, dated now) in each conversation's scope",
            rep.fresh_notes
        ))?;
    }
    let mut all = String::from("all@k / session any@k (1–5):");
    for k in &opts.ks {
        all.push_str(&format!(
            "  @{k} {:.1}/{:.1}",
            100.0 * rep.overall.recall_all.get(k).copied().unwrap_or(0.0),
            100.0 * rep.overall.session_any.get(k).copied().unwrap_or(0.0)
        ));
    }
    output::line(all)?;
    if !rep.context.is_empty() {
        output::line("")?;
        output::line(
            "evidence inside an assembled context vs plain top-k at the same token cost (categories 1–5):",
        )?;
        output::line(format!(
            "{:>8} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>10} {:>12} {:>9}",
            "budget",
            "context",
            "ctx any",
            "+summary",
            "top-k",
            "topk any",
            "items",
            "top-k k",
            "tokens used",
            "p95 ms"
        ))?;
        for c in &rep.context {
            output::line(format!(
                "{:>8} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8.1} {:>8.1} {:>10.1} {:>12.0} {:>9.2}",
                c.budget,
                100.0 * c.context_recall,
                100.0 * c.context_any,
                100.0 * c.with_summary_recall,
                100.0 * c.topk_recall,
                100.0 * c.topk_any,
                c.items,
                c.topk_k,
                c.tokens,
                c.p95_ms
            ))?;
        }
    }
    if !rep.ablation.is_empty() {
        // By category at k = 5 when asked for, else the first cut-off.
        let kc = if opts.ks.contains(&5) { 5 } else { opts.ks[0] };
        output::line("")?;
        output::line(format!(
            "ablation: each idea turned off alone, the rest as above (categories 1–5; c1–c5: R@{kc} by category; h1, h2: R@{kc} over the first and second half of the conversations):"
        ))?;
        let mut head = format!("{:<30}", "");
        for k in &opts.ks {
            head.push_str(&format!("{:>7}", format!("R@{k}")));
        }
        head.push_str(&format!("{:>8}", "MRR"));
        for (c, _) in crate::eval::CATEGORIES {
            head.push_str(&format!("{:>7}", format!("c{c}")));
        }
        head.push_str(&format!("{:>7}{:>7}", "h1", "h2"));
        output::line(format!("{head}  setting"))?;
        let r =
            |m: &crate::eval::Metrics, k: usize| 100.0 * m.recall.get(&k).copied().unwrap_or(0.0);
        let row = |name: &str,
                   o: &crate::eval::Metrics,
                   by: &BTreeMap<u8, crate::eval::Metrics>,
                   halves: &[crate::eval::Metrics]| {
            let mut s = format!("{name:<30}");
            for k in &opts.ks {
                s.push_str(&format!("{:>7.1}", r(o, *k)));
            }
            s.push_str(&format!("{:>8.3}", o.mrr));
            for (c, _) in crate::eval::CATEGORIES {
                match by.get(&c) {
                    Some(m) => s.push_str(&format!("{:>7.1}", r(m, kc))),
                    None => s.push_str(&format!("{:>7}", "–")),
                }
            }
            for h in halves {
                s.push_str(&format!("{:>7.1}", r(h, kc)));
            }
            s
        };
        output::line(row(
            "as configured",
            &rep.overall,
            &rep.by_category,
            &rep.halves,
        ))?;
        for a in &rep.ablation {
            output::line(format!(
                "{}  {}",
                row(&a.variant, &a.overall, &a.by_category, &a.halves),
                a.setting
            ))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_parse_and_an_empty_list_skips_contexts() {
        assert_eq!(budget_list("").unwrap(), Budgets(vec![]));
        assert_eq!(
            budget_list("1000, 2000").unwrap(),
            Budgets(vec![1000, 2000])
        );
        let err = budget_list("1000,lots").unwrap_err();
        assert!(err.contains("\"lots\" is not a token budget"), "{err}");
        assert!(budget_list("-5").is_err());
    }
}
