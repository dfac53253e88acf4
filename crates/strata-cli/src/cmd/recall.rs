//! `strata recall "QUERY" --view S …`

use anyhow::Result;
use clap::Args;

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Args)]
pub struct RecallArgs {
    /// What to look for (natural language or keywords; may be empty).
    pub query: String,
    /// A scope the read may see (repeatable; `scope/**` for a subtree).
    #[arg(long = "view", value_name = "SCOPE", required = true)]
    pub views: Vec<String>,
    /// recency, importance, relevance or hybrid (default).
    #[arg(long)]
    pub strategy: Option<String>,
    /// Filter JSON, e.g. '{"kind": "decision", "importance": {"$gte": 0.7}}'.
    #[arg(long)]
    pub filter: Option<String>,
    /// Most results.
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
    /// Show each result's score parts.
    #[arg(long)]
    pub explain: bool,
    /// Do not record the access on returned memories.
    #[arg(long)]
    pub no_touch: bool,
    /// Search the archive too (with the cold tier on, cold segments too).
    #[arg(long, alias = "include-cold")]
    pub archived: bool,
    /// Relevance floor, 0–1 (default `ranking.min_relevance`, 0.3): with a
    /// query, only memories whose text match or vector similarity reaches
    /// it; 0 returns every match.
    #[arg(long, value_name = "X")]
    pub min_relevance: Option<f64>,
    /// What was true then (RFC 3339 or a date): later memories left out, a
    /// keyed memory superseded since as the version in effect then.
    #[arg(long, value_name = "TIME")]
    pub as_of: Option<String>,
}

pub fn run(g: &Global, a: RecallArgs) -> Result<()> {
    let view = app::view(&a.views)?;
    let mut req = strata::Recall::new(a.query.clone(), view);
    req.filter = app::filter(a.filter.as_deref())?;
    req.strategy = a.strategy.as_deref().map(str::parse).transpose()?;
    req.limit = a.limit;
    req.explain = a.explain;
    req.touch = !a.no_touch;
    req.include_archived = a.archived;
    req.min_relevance = a.min_relevance;
    req.as_of = a
        .as_of
        .as_deref()
        .map(|t| strata::parse_time("as_of", t))
        .transpose()?;
    let e = app::open(g)?;
    app::say_if_model_missing(g, &e);
    let hits = e.recall(&req)?;
    app::audit(
        &e,
        "recall",
        app::scopes(a.views.iter()),
        hits.len(),
        Vec::new(),
    )?;
    if a.explain && !g.json {
        // Say how relevance was found: with vectors, or BM25 alone.
        let st = e.embed_status()?;
        match (&st.model, &st.note) {
            (Some(m), _) => eprintln!(
                "relevance: BM25 + vectors ({m}, {} fusion); {} of {} memories wait for a vector",
                match e.config().ranking.fusion {
                    strata::Fusion::Rrf => "reciprocal-rank",
                    strata::Fusion::Weighted => "weighted",
                },
                st.pending,
                st.pending + st.vectors
            ),
            (None, Some(n)) => eprintln!("relevance: {n}"),
            (None, None) => {}
        }
    }
    if g.json {
        return output::json(&hits);
    }
    if hits.is_empty() {
        let mut probe = strata::List::new(req.view.clone());
        probe.limit = 1;
        if a.query.trim().is_empty() || e.list(&probe)?.is_empty() {
            return output::line(format!(
                "no memories in {} (`strata scopes` lists those that hold some)",
                a.views.join(", ")
            ));
        }
        let floor = a.min_relevance.unwrap_or(e.config().ranking.min_relevance);
        return output::line(format!(
            "nothing relevant: no memory reached min_relevance {floor} (--min-relevance 0 shows every match)"
        ));
    }
    for h in &hits {
        let mut arch = h
            .archived
            .as_ref()
            .map(|a| format!(" [archived: {}]", a.reason))
            .unwrap_or_default();
        if let Some(t) = h.valid_to {
            arch.push_str(&format!(" [true until {t}]"));
        }
        output::line(format!(
            "{:>8.4}  {}{}",
            h.score,
            output::memory_line(&h.memory),
            arch
        ))?;
        if let Some(p) = &h.explain {
            let kind = if p.kind_weight < 1.0 {
                format!(
                    "kind {} {:.2} (lowers it; ranking.kind_weights)",
                    p.kind, p.kind_weight
                )
            } else {
                format!("kind {} {:.2}", p.kind, p.kind_weight)
            };
            output::line(format!(
                "          bm25 {} (rank {})  vector {} (rank {})  relevance {:.3}  importance {:.2} × {} × decay {:.3} × access {:.3} = {:.3}  recency {:.3}",
                p.bm25.map_or("-".into(), |b| format!("{b:.3}")),
                p.bm25_rank.map_or("-".into(), |r| r.to_string()),
                p.similarity.map_or("-".into(), |s| format!("{s:.3}")),
                p.vector_rank.map_or("-".into(), |r| r.to_string()),
                p.relevance,
                p.importance,
                kind,
                p.decay,
                p.access_factor,
                p.effective_importance,
                p.recency
            ))?;
            if let Some(why) = &p.passed {
                output::line(format!("          passed: {why}"))?;
            }
            if let Some(n) = p.neighbour {
                output::line(format!(
                    "          beside a memory of relevance {n:.3} in its session (ranking.neighbour_weight)"
                ))?;
            }
            if let Some(b) = p.session_best {
                output::line(format!(
                    "          in a session whose best other match has relevance {b:.3} (ranking.session_weight)"
                ))?;
            }
            if p.in_named_time {
                output::line(
                    "          written in the time the question names (ranking.time_weight)"
                        .to_string(),
                )?;
            }
            if let Some(l) = strata::Learned::of(&h.memory) {
                output::line(format!(
                    "          learned by {} (confidence {:.2}, {}) from {}",
                    l.detector,
                    l.confidence,
                    output::plural(l.evidence.len(), "memory", "memories"),
                    l.evidence.join(", ")
                ))?;
            }
        }
    }
    Ok(())
}
