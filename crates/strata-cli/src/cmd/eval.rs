//! `strata eval locomo FILE`: the LoCoMo retrieval benchmark.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Subcommand)]
pub enum EvalCmd {
    /// LoCoMo (../shared/data/locomo/locomo10.json): recall@k, MRR, and
    /// evidence inside assembled contexts, per category.
    Locomo(LocomoArgs),
}

#[derive(Debug, Args)]
pub struct LocomoArgs {
    /// The LoCoMo JSON file.
    pub file: PathBuf,
    /// Cut-offs for recall@k (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,5,10,25,50")]
    pub k: Vec<usize>,
    /// Context budgets in tokens (comma-separated; empty to skip).
    #[arg(long, value_delimiter = ',', default_value = "1000,2000,4000")]
    pub budgets: Vec<u32>,
    /// recency, importance, relevance (default) or hybrid.
    #[arg(long, default_value = "relevance")]
    pub strategy: String,
    /// Only the first N questions of each conversation.
    #[arg(long)]
    pub questions: Option<usize>,
    /// Summary share of the "with summary" context column.
    #[arg(long, default_value_t = 0.3)]
    pub summary_share: f64,
    /// Keep the evaluation database here (default: a temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

pub fn run(g: &Global, c: EvalCmd) -> Result<()> {
    let EvalCmd::Locomo(a) = c;
    if !(0.0..1.0).contains(&a.summary_share) {
        return app::usage(format!(
            "--summary-share: {} must be in [0, 1)",
            a.summary_share
        ));
    }
    let text = std::fs::read_to_string(&a.file)
        .with_context(|| format!("reading {}", a.file.display()))?;
    let data: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", a.file.display()))?;
    let opts = strata::eval::LocomoOptions {
        ks: a.k.clone(),
        budgets: a.budgets.clone(),
        strategy: a.strategy.parse()?,
        max_questions: a.questions,
        summary_share: a.summary_share,
    };
    let tmp = std::env::temp_dir().join(format!("strata-eval-{}", std::process::id()));
    let dir = a.dir.clone().unwrap_or_else(|| tmp.clone());
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("locomo.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let mut cfg = strata::Config::sqlite(&db);
    cfg.max_items = 0;
    let engine = strata::Engine::open(cfg)?;
    if !g.json {
        eprintln!(
            "evaluating {} ({})…",
            a.file.display(),
            opts.strategy.as_str()
        );
    }
    let rep = strata::eval::locomo(&engine, &data, &opts);
    drop(engine);
    if a.dir.is_none() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    let rep = rep?;
    if g.json {
        return output::json(&rep);
    }
    print_report(&rep, &opts)
}

fn print_report(
    rep: &strata::eval::LocomoReport,
    opts: &strata::eval::LocomoOptions,
) -> Result<()> {
    output::line(format!(
        "LoCoMo retrieval — strategy {} — {} conversations, {} turns, {} questions with evidence ({} without; {} evidence ids name no turn, counted as misses)",
        rep.strategy,
        rep.conversations,
        rep.turns,
        rep.questions,
        rep.no_evidence,
        rep.unknown_evidence.len()
    ))?;
    output::line(format!(
        "index {:.2} s · query p50 {:.2} ms, p95 {:.2} ms · categories as in LoCoMo: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial",
        rep.index_seconds, rep.query_p50_ms, rep.query_p95_ms
    ))?;
    let mut head = format!("{:<22}{:>6}", "", "n");
    for k in &opts.ks {
        head.push_str(&format!("{:>7}", format!("R@{k}")));
    }
    for k in &opts.ks {
        head.push_str(&format!("{:>8}", format!("any@{k}")));
    }
    head.push_str(&format!("{:>8}", "MRR"));
    output::line(&head)?;
    let row = |name: &str, m: &strata::eval::Metrics| {
        let mut s = format!("{name:<22}{:>6}", m.questions);
        for k in &opts.ks {
            s.push_str(&format!(
                "{:>7.1}",
                100.0 * m.recall.get(k).copied().unwrap_or(0.0)
            ));
        }
        for k in &opts.ks {
            s.push_str(&format!(
                "{:>8.1}",
                100.0 * m.recall_any.get(k).copied().unwrap_or(0.0)
            ));
        }
        s.push_str(&format!("{:>8.3}", m.mrr));
        s
    };
    for (c, name) in strata::eval::CATEGORIES {
        if let Some(m) = rep.by_category.get(&c) {
            output::line(row(&format!("{c} {name}"), m))?;
        }
    }
    output::line(row("overall (1–5)", &rep.overall))?;
    output::line(row("overall (1–4)", &rep.overall_1_4))?;
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
    Ok(())
}
