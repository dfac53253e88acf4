//! Ranking: strategies, importance decay and the hybrid score.
//!
//! `effective = clamp(importance × kind_weight × 0.5^(age_days / half_life)
//!  × (1 + access_boost × ln(1 + access_count)), min_importance, 1)` (DESIGN
//! §3). Hybrid, with a query, is normalised relevance (the fusion of bm25
//! and vector similarity over the best among the candidates) times a factor
//! that effective importance and recency (`0.5^(age_days /
//! recency_half_life)`) raise within bounds the weights set; without one, a
//! weighted sum of importance and recency. Every ranking ends with the id
//! as tie-breaker, so the same store state and request give the same order.
//!
//! Owns no storage: the engine feeds it candidates.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::model::Memory;

/// How results are ordered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Newest first.
    Recency,
    /// Highest effective (decayed) importance first.
    Importance,
    /// Best full-text match first.
    Relevance,
    /// Relevance, moved by importance and recency within the bounds their
    /// weights set (with a query); importance and recency, weighted
    /// (without one).
    #[default]
    Hybrid,
}

impl Strategy {
    /// The strategy's word.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Recency => "recency",
            Strategy::Importance => "importance",
            Strategy::Relevance => "relevance",
            Strategy::Hybrid => "hybrid",
        }
    }
}

impl FromStr for Strategy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Strategy, Error> {
        match s {
            "recency" => Ok(Strategy::Recency),
            "importance" => Ok(Strategy::Importance),
            "relevance" => Ok(Strategy::Relevance),
            "hybrid" => Ok(Strategy::Hybrid),
            _ => Err(Error::field(
                "strategy",
                format!("`{s}` is not one of recency, importance, relevance, hybrid"),
            )),
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Hybrid weights.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Weights {
    /// Weight of normalised relevance.
    pub relevance: f64,
    /// Weight of effective importance.
    pub importance: f64,
    /// Weight of recency.
    pub recency: f64,
}

impl Default for Weights {
    fn default() -> Weights {
        Weights {
            relevance: 0.5,
            importance: 0.3,
            recency: 0.2,
        }
    }
}

/// How full-text and vector relevance combine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fusion {
    /// Reciprocal-rank fusion: `Σ 1 / (rrf_k + rank)` over the two lists.
    Rrf,
    /// Weighted scores (the default): `(1 − vector_weight) × bm25 / best bm25 +
    /// vector_weight × similarity`, the similarity spread min–max over the
    /// candidates.
    #[default]
    Weighted,
}

/// Ranking settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RankConfig {
    /// Default strategy.
    pub strategy: Strategy,
    /// Hybrid weights.
    pub weights: Weights,
    /// Half-life of importance, in days.
    pub half_life_days: f64,
    /// Floor of effective importance.
    pub min_importance: f64,
    /// Boost per `ln(1 + access_count)`.
    pub access_boost: f64,
    /// Half-life of the recency score, in days.
    pub recency_half_life_days: f64,
    /// Per-kind weights; kinds not listed use `default_kind_weight`.
    pub kind_weights: BTreeMap<String, f64>,
    /// Weight of kinds not in `kind_weights`.
    pub default_kind_weight: f64,
    /// How many full-text candidates are scored per requested result (at least 100 in all).
    pub candidates_per_result: usize,
    /// How text and vector relevance combine.
    pub fusion: Fusion,
    /// `k` of reciprocal-rank fusion.
    pub rrf_k: f64,
    /// Weight of vector similarity under weighted fusion (0–1).
    pub vector_weight: f64,
    /// The relevance floor a recall with a query applies (0–1; 0 = off):
    /// a memory is returned only when its text match (bm25 over the best
    /// bm25) or its vector similarity to the query reaches it.
    pub min_relevance: f64,
    /// A memory whose similarity is within this of the best among a
    /// recall's candidates passes the relevance floor too, when that best
    /// reaches three quarters of `min_relevance` (0 = off): a paraphrase
    /// the view holds is found below the floor's fixed similarity.
    pub similarity_band: f64,
    /// Share of its conversation neighbours' relevance a memory gets (0–1;
    /// 0 = off): see docs/retrieval.md.
    pub neighbour_weight: f64,
    /// Share of the best relevance among the other candidates of its
    /// session a memory gets (0–1; 0 = off): see docs/retrieval.md.
    pub session_weight: f64,
    /// How much more a memory written in the time the question names
    /// counts ("on 25 October 2022", "last month"): its relevance × (1 +
    /// this); 0 = off. See docs/retrieval.md.
    pub time_weight: f64,
}

impl Default for RankConfig {
    fn default() -> RankConfig {
        let kind_weights = [
            ("note", 1.0),
            ("decision", 1.0),
            ("preference", 1.0),
            ("convention", 1.0),
            ("failure", 0.9),
            ("finding", 0.8),
            ("pattern", 0.8),
            ("summary", 0.6),
            ("conversation", 0.5),
            ("reasoning", 0.5),
            ("tool_output", 0.4),
            ("context", 0.3),
            ("error", 0.2),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        RankConfig {
            strategy: Strategy::Hybrid,
            weights: Weights::default(),
            half_life_days: 30.0,
            min_importance: 0.1,
            access_boost: 0.2,
            recency_half_life_days: 7.0,
            kind_weights,
            default_kind_weight: 0.5,
            candidates_per_result: 10,
            fusion: Fusion::Weighted,
            rrf_k: 60.0,
            vector_weight: 0.5,
            min_relevance: DEFAULT_MIN_RELEVANCE,
            similarity_band: DEFAULT_SIMILARITY_BAND,
            neighbour_weight: DEFAULT_NEIGHBOUR_WEIGHT,
            session_weight: DEFAULT_SESSION_WEIGHT,
            time_weight: DEFAULT_TIME_WEIGHT,
        }
    }
}

/// The default weight of the time a question names.
pub const DEFAULT_TIME_WEIGHT: f64 = 0.3;

/// The default share of a neighbour's relevance, the relevance floor's
/// number for a reason of its own: a memory with no match of its own that
/// sits beside the best match reaches at most 0.3 of it, what the floor
/// calls the least a match may be; a memory that matches as well as its
/// neighbour keeps its lead over one that only sits beside it.
pub const DEFAULT_NEIGHBOUR_WEIGHT: f64 = 0.3;

/// The default share of the best relevance among the other candidates of
/// a memory's session: the neighbour's number for the same reason, one
/// level up. A turn of the conversation that matched best reaches at most
/// 0.3 of that match over an equal turn of a conversation that matched
/// nothing else, the least the floor calls a match; it never passes a
/// memory that matches better by more than that.
pub const DEFAULT_SESSION_WEIGHT: f64 = 0.3;

/// The default relevance floor. One number on two absolute scales:
///
/// - *text*: bm25 over the best bm25 of the recall. A memory that shares a
///   word with the query and matches at least 30 % as well as the best
///   match is evidence; the tail of one-common-word matches is not.
/// - *vectors*: cosine similarity, a fixed scale. Sentence-embedding models
///   trained contrastively on paraphrase pairs (all-MiniLM-L6-v2, the
///   default) put sentences on unrelated topics near 0 and paraphrases
///   well above 0.5; 0.3 lies between the two. `tests/it/vectors.rs`
///   checks both sides with the real model on sentence pairs written for
///   the test, not drawn from a benchmark. Models whose similarities sit in
///   a high band (e5: unrelated text ≈ 0.7) need their own floor.
pub const DEFAULT_MIN_RELEVANCE: f64 = 0.3;

/// The default similarity band of the relevance floor. Chosen on
/// `data/relevance-floor/tune.json` (hand-written projects whose questions
/// ask for a note in other words, or for nothing the notes hold) with the
/// default model: a paraphrase's note is often second or third by
/// similarity, within 0.1 of the first and under 0.3, while a question
/// about nothing the view holds has its best similarity under 0.22 (three
/// quarters of the floor) in 27 of 32 cases.
pub const DEFAULT_SIMILARITY_BAND: f64 = 0.1;

impl RankConfig {
    /// Checks ranges; errors name the field.
    pub fn validate(&self) -> Result<(), Error> {
        let pos = |name: &str, x: f64| {
            if x.is_finite() && x > 0.0 {
                Ok(())
            } else {
                Err(Error::InvalidConfig(format!(
                    "ranking.{name}: {x} must be a positive number"
                )))
            }
        };
        let unit = |name: &str, x: f64| {
            if (0.0..=1.0).contains(&x) {
                Ok(())
            } else {
                Err(Error::InvalidConfig(format!(
                    "ranking.{name}: {x} is outside 0.0–1.0"
                )))
            }
        };
        pos("half_life_days", self.half_life_days)?;
        pos("recency_half_life_days", self.recency_half_life_days)?;
        unit("min_importance", self.min_importance)?;
        unit("weights.relevance", self.weights.relevance)?;
        unit("weights.importance", self.weights.importance)?;
        unit("weights.recency", self.weights.recency)?;
        unit("vector_weight", self.vector_weight)?;
        unit("min_relevance", self.min_relevance)?;
        unit("similarity_band", self.similarity_band)?;
        unit("neighbour_weight", self.neighbour_weight)?;
        unit("session_weight", self.session_weight)?;
        unit("time_weight", self.time_weight)?;
        pos("rrf_k", self.rrf_k)?;
        if !(self.access_boost.is_finite() && self.access_boost >= 0.0) {
            return Err(Error::InvalidConfig(format!(
                "ranking.access_boost: {} must be ≥ 0",
                self.access_boost
            )));
        }
        for (k, w) in &self.kind_weights {
            if !(w.is_finite() && *w >= 0.0) {
                return Err(Error::InvalidConfig(format!(
                    "ranking.kind_weights.{k}: {w} must be ≥ 0"
                )));
            }
        }
        if self.candidates_per_result == 0 {
            return Err(Error::InvalidConfig(
                "ranking.candidates_per_result: must be at least 1".into(),
            ));
        }
        Ok(())
    }

    /// The weight of a kind.
    pub fn kind_weight(&self, kind: &str) -> f64 {
        self.kind_weights
            .get(kind)
            .copied()
            .unwrap_or(self.default_kind_weight)
    }
}

/// The parts of a score, returned under `explain`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScoreParts {
    /// Final score the ranking sorted by.
    pub total: f64,
    /// Raw bm25 (higher is better), when the query matched text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bm25: Option<f64>,
    /// Position in the full-text list (1 = best).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bm25_rank: Option<usize>,
    /// Cosine similarity to the query, when the memory has a vector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub similarity: Option<f32>,
    /// Position in the vector list (1 = most similar).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vector_rank: Option<usize>,
    /// bm25 over the best bm25 of the recall (0–1), when the query matched
    /// text: the text side of the relevance floor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text_match: Option<f64>,
    /// Why the memory passed the relevance floor (`min_relevance`), when a
    /// recall with a query applied one: the evidence and the floor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passed: Option<String>,
    /// Relevance, 0–1: bm25 over the best bm25 without vectors, else the
    /// fusion of both lists over the best fusion among the candidates; with
    /// shares of its best conversation neighbour's and of its session's
    /// best (below), over the best.
    pub relevance: f64,
    /// The relevance (before sharing) of its best conversation neighbour
    /// among the candidates, when it got a share of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbour: Option<f64>,
    /// The best relevance (before sharing) among the other candidates of
    /// its session, when it got a share of it (`ranking.session_weight`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_best: Option<f64>,
    /// Written in the time the question names ("on 25 October 2022",
    /// "last week"), which weighs its relevance × (1 +
    /// `ranking.time_weight`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_named_time: bool,
    /// The stored importance.
    pub importance: f64,
    /// The memory's kind (the weight below is this kind's).
    #[serde(default)]
    pub kind: String,
    /// The kind's weight (`ranking.kind_weights`; kinds not listed weigh
    /// `default_kind_weight`).
    pub kind_weight: f64,
    /// `0.5^(age_days / half_life_days)`.
    pub decay: f64,
    /// `1 + access_boost × ln(1 + access_count)`.
    pub access_factor: f64,
    /// Clamped product: decayed importance.
    pub effective_importance: f64,
    /// `0.5^(age_days / recency_half_life_days)`.
    pub recency: f64,
}

fn age_days(t: Timestamp, now: Timestamp) -> f64 {
    ((now.as_millisecond() - t.as_millisecond()).max(0) as f64) / 86_400_000.0
}

/// What ranking reads of a memory: a few columns, so a store can rank many
/// candidates without loading their content.
#[derive(Clone, Debug, PartialEq)]
pub struct Signals {
    /// The memory's id (the tie-breaker).
    pub id: String,
    /// Its kind's word.
    pub kind: String,
    /// Stored importance.
    pub importance: f64,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last content change.
    pub updated_at: Timestamp,
    /// Reads so far.
    pub access_count: u64,
    /// Tokens of its content.
    pub tokens: u32,
    /// Whether it is learned (`source = learned`): what text search leaves
    /// out of its statistics and a context puts after what was said.
    pub learned: bool,
    /// Its session (a conversation's turns have one): whose neighbours
    /// share relevance (`ranking.neighbour_weight`).
    pub session: Option<String>,
}

impl Signals {
    /// The signals of a loaded memory.
    pub fn of(m: &Memory) -> Signals {
        Signals {
            id: m.id.clone(),
            kind: m.kind.to_string(),
            importance: m.importance,
            created_at: m.created_at,
            updated_at: m.updated_at,
            access_count: m.access_count,
            tokens: m.tokens,
            learned: m.source == crate::model::Source::Learned,
            session: m.session.clone(),
        }
    }
}

/// What the retrievers said about one candidate.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Relevance {
    /// Raw bm25, when the query matched its text.
    pub bm25: Option<f64>,
    /// Position in the full-text list (1 = best).
    pub bm25_rank: Option<usize>,
    /// Similarity to the query vector.
    pub similarity: Option<f32>,
    /// Position in the vector list (1 = most similar).
    pub vector_rank: Option<usize>,
    /// bm25 over the best bm25 among the candidates (`fuse` fills it).
    pub text_match: Option<f64>,
    /// Fused relevance, 0–1 (`fuse` fills it).
    pub fused: f64,
    /// The relevance of its best conversation neighbour among the
    /// candidates, when it got a share of it (`ranking.neighbour_weight`).
    pub neighbour: Option<f64>,
    /// The best relevance among the other candidates of its session, when
    /// it got a share of it (`ranking.session_weight`).
    pub session_best: Option<f64>,
    /// Written in the time the question names (`ranking.time_weight`).
    pub in_named_time: bool,
}

impl Relevance {
    /// The strongest absolute evidence of relevance: the text match or the
    /// vector similarity, whichever is higher, with its name.
    pub fn evidence(&self) -> Option<(&'static str, f64)> {
        let text = self.text_match.map(|t| ("text match", t));
        let vector = self.similarity.map(|s| ("similarity", f64::from(s)));
        match (text, vector) {
            (Some(t), Some(v)) => Some(if v.1 > t.1 { v } else { t }),
            (t, v) => t.or(v),
        }
    }

    /// Whether the evidence reaches `floor`.
    pub fn passes(&self, floor: &Floor) -> bool {
        self.passed_by(floor).is_some()
    }

    /// Which evidence reaches `floor`, if any (no allocation: a recall
    /// asks this of every candidate):
    ///
    /// - its similarity reaches `min`;
    /// - its text match reaches `min`, and (when it has a vector) its
    ///   similarity half of `min`: a lone shared word with a memory about
    ///   something else is not a match;
    /// - its similarity is within `similarity_band` of the best similarity
    ///   among the candidates, and that best reaches three quarters of
    ///   `min`: the question is about what the view holds, and this is
    ///   among its nearest memories even in other words.
    fn passed_by(&self, floor: &Floor) -> Option<Passed> {
        let min = floor.min;
        let sim = self.similarity.map(f64::from);
        if sim.is_some_and(|s| s >= min) {
            return Some(Passed::Similarity);
        }
        if self.text_match.is_some_and(|t| t >= min) && sim.is_none_or(|s| s >= min / 2.0) {
            return Some(Passed::Text);
        }
        match (sim, floor.best_similarity) {
            (Some(s), Some(best))
                if floor.band > 0.0 && best >= 0.75 * min && s >= best - floor.band =>
            {
                Some(Passed::Band)
            }
            _ => None,
        }
    }

    /// A sentence saying whether and why the evidence reaches `floor`: the
    /// explanation of [`Relevance::passes`], written only when asked for
    /// (a recall weighs hundreds of candidates and explains ten at most).
    pub fn verdict(&self, floor: &Floor) -> String {
        let min = floor.min;
        let sim = self.similarity.map(f64::from).unwrap_or(0.0);
        let text = self.text_match.unwrap_or(0.0);
        match self.passed_by(floor) {
            Some(Passed::Similarity) => {
                return format!("similarity {sim:.3} ≥ min_relevance {min:.2}");
            }
            Some(Passed::Text) if self.similarity.is_some() => {
                return format!(
                    "text match {text:.3} ≥ min_relevance {min:.2}, similarity {sim:.3} ≥ {:.2}",
                    min / 2.0
                );
            }
            Some(Passed::Text) => return format!("text match {text:.3} ≥ min_relevance {min:.2}"),
            Some(Passed::Band) => {
                return format!(
                    "similarity {sim:.3} within similarity_band {:.2} of the best, {:.3} ≥ {:.3}",
                    floor.band,
                    floor.best_similarity.unwrap_or(0.0),
                    0.75 * min
                );
            }
            None => {}
        }
        match self.evidence() {
            Some((what, x)) => format!("{what} {x:.3} < min_relevance {:.2}", floor.min),
            None => "no text match and no vector".into(),
        }
    }
}

/// Which rule of the floor a candidate passed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Passed {
    Similarity,
    Text,
    Band,
}

/// The relevance floor of one recall (`ranking.min_relevance` and
/// `ranking.similarity_band`), with what it needs of the candidates: see
/// [`Relevance::passes`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Floor {
    /// `min_relevance`.
    pub min: f64,
    /// `similarity_band` (0 = off).
    pub band: f64,
    /// The best similarity among the candidates.
    pub best_similarity: Option<f64>,
}

impl Floor {
    /// The floor `min` over `cands`.
    pub fn over(cfg: &RankConfig, min: f64, cands: &[(Signals, Relevance)]) -> Floor {
        Floor {
            min,
            band: cfg.similarity_band,
            best_similarity: cands
                .iter()
                .filter_map(|(_, r)| r.similarity.map(f64::from))
                .reduce(f64::max),
        }
    }
}

impl Relevance {
    /// A full-text score alone (rank unknown).
    pub fn text(bm25: Option<f64>) -> Relevance {
        Relevance {
            bm25,
            ..Relevance::default()
        }
    }
}

/// Fills every candidate's `fused` relevance (0–1). Without vectors it is
/// bm25 over the best bm25; with them, the configured fusion of both lists,
/// over the best fusion among the candidates.
///
/// Two populations, as in text search (`store::search`): a memory that was
/// said is fused among the candidates that were said (its ranks, the best
/// bm25, the similarity band are theirs), so learned memories among the
/// candidates never move it; a learned memory among all of them.
pub fn fuse(cfg: &RankConfig, cands: &mut [(Signals, Relevance)]) {
    let said: Vec<usize> = (0..cands.len()).filter(|&i| !cands[i].0.learned).collect();
    let mut updates = fuse_among(cfg, cands, &said, |_| true);
    if said.len() < cands.len() {
        let all: Vec<usize> = (0..cands.len()).collect();
        updates.extend(fuse_among(cfg, cands, &all, |s| s.learned));
    }
    for (i, r) in updates {
        cands[i].1 = r;
    }
}

/// [`fuse`] against the statistics of the candidates `among`: the new
/// relevance of those of them that `into` takes.
fn fuse_among(
    cfg: &RankConfig,
    cands: &[(Signals, Relevance)],
    among: &[usize],
    into: impl Fn(&Signals) -> bool,
) -> Vec<(usize, Relevance)> {
    let best_bm25 = among
        .iter()
        .filter_map(|&i| cands[i].1.bm25)
        .fold(0.0f64, f64::max);
    let norm_bm25 = |r: &Relevance| match r.bm25 {
        Some(b) if best_bm25 > 0.0 => (b / best_bm25).clamp(0.0, 1.0),
        _ => 0.0,
    };
    // Full-text ranks from the scores, so candidates that came from
    // elsewhere (the archive) rank in the same list; vector ranks keep the
    // vector list's order, counted among `among`.
    // Positions below are into `among` (and `out`, in its order).
    let mut by_bm25: Vec<(f64, usize)> = among
        .iter()
        .enumerate()
        .filter_map(|(k, &i)| cands[i].1.bm25.map(|b| (b, k)))
        .collect();
    by_bm25.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut by_vector: Vec<(usize, usize)> = among
        .iter()
        .enumerate()
        .filter_map(|(k, &i)| cands[i].1.vector_rank.map(|r| (r, k)))
        .collect();
    by_vector.sort_unstable();
    let mut out: Vec<Relevance> = among.iter().map(|&i| cands[i].1).collect();
    for (rank, (_, k)) in by_bm25.into_iter().enumerate() {
        out[k].bm25_rank = Some(rank + 1);
    }
    for (rank, (_, k)) in by_vector.into_iter().enumerate() {
        out[k].vector_rank = Some(rank + 1);
    }
    for r in &mut out {
        // A candidate scored against other statistics (the archive's) comes
        // with its own text match.
        if r.text_match.is_none() {
            r.text_match = r.bm25.map(|_| norm_bm25(r));
        }
    }
    let vectors = out.iter().any(|r| r.similarity.is_some());
    // Similarities of one model sit in a narrow band: spread the
    // candidates' band over 0–1 before weighing it against bm25.
    let (lo, hi) = out
        .iter()
        .filter_map(|r| r.similarity)
        .fold((f32::MAX, f32::MIN), |(lo, hi), s| (lo.min(s), hi.max(s)));
    let rrf = |rank: Option<usize>| rank.map_or(0.0, |k| 1.0 / (cfg.rrf_k + k as f64));
    for r in &mut out {
        r.fused = if !vectors {
            norm_bm25(r)
        } else {
            match cfg.fusion {
                Fusion::Rrf => rrf(r.bm25_rank) + rrf(r.vector_rank),
                Fusion::Weighted => {
                    let sim = match r.similarity {
                        Some(s) if hi > lo => f64::from((s - lo) / (hi - lo)),
                        Some(_) => 1.0,
                        None => 0.0,
                    };
                    (1.0 - cfg.vector_weight) * norm_bm25(r) + cfg.vector_weight * sim
                }
            }
        };
    }
    let best = out.iter().map(|r| r.fused).fold(0.0f64, f64::max);
    among
        .iter()
        .zip(out)
        .filter(|(i, _)| into(&cands[**i].0))
        .map(|(&i, mut r)| {
            if best > 0.0 {
                r.fused /= best;
            }
            (i, r)
        })
        .collect()
}

/// Memories written in the time the question names count `time_weight`
/// more: each candidate whose `created_at` falls in `span` has its fused
/// relevance × (1 + `time_weight`), and relevance is spread over 0–1
/// again by the best. Nothing changes without a span or a weight.
pub fn prefer_named_time(
    cfg: &RankConfig,
    span: Option<crate::when::Span>,
    cands: &mut [(Signals, Relevance)],
) {
    let Some(span) = span.filter(|_| cfg.time_weight > 0.0) else {
        return;
    };
    let mut any = false;
    for (s, r) in cands.iter_mut() {
        if r.fused > 0.0 && span.contains(s.created_at) {
            r.fused *= 1.0 + cfg.time_weight;
            r.in_named_time = true;
            any = true;
        }
    }
    if any {
        let top = cands.iter().map(|(_, r)| r.fused).fold(0.0f64, f64::max);
        for (_, r) in cands.iter_mut() {
            r.fused /= top;
        }
    }
}

/// Conversation neighbours and sessions share relevance. Where a
/// question's evidence is spread over turns (a question and its answer, a
/// statement and what follows it), the turn beside a strong match is often
/// evidence too while matching little itself; and a conversation whose
/// turns match the question is likelier about it than one where a single
/// turn matches as well by chance. Each candidate with a session gets
/// `neighbour_weight` × the larger fused relevance of the candidates
/// before and after it in its session (by `created_at`, then id: the
/// nearest among the candidates), and `session_weight` × the best fused
/// relevance among the other candidates of its session, after which the
/// candidates with a session are scaled back so that the best of them
/// keeps its relevance (the session's share orders turns among turns: a
/// memory without a session that led every turn still leads); then
/// relevance is spread over 0–1 again by the best. Every share is read
/// from the relevance before sharing. Nothing changes without a query (no
/// relevance) or with both weights 0.
pub fn share_with_neighbours(cfg: &RankConfig, cands: &mut [(Signals, Relevance)]) {
    let (wn, ws) = (cfg.neighbour_weight, cfg.session_weight);
    if (wn <= 0.0 && ws <= 0.0) || !cands.iter().any(|(_, r)| r.fused > 0.0) {
        return;
    }
    let mut sessions: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, (s, _)) in cands.iter().enumerate() {
        if let Some(sess) = s.session.as_deref() {
            sessions.entry(sess).or_default().push(i);
        }
    }
    // (candidate, best neighbour, best other of its session)
    let mut shares: Vec<(usize, f64, f64)> = Vec::new();
    for turns in sessions.values_mut() {
        turns.sort_by(|&a, &b| {
            let (x, y) = (&cands[a].0, &cands[b].0);
            (x.created_at, &x.id).cmp(&(y.created_at, &y.id))
        });
        let fused = |k: usize| cands[turns[k]].1.fused;
        // A candidate's best other is the session's best, or for the best
        // itself the second best.
        let best = (0..turns.len()).max_by(|&a, &b| fused(a).total_cmp(&fused(b)));
        let second = (0..turns.len())
            .filter(|&k| Some(k) != best)
            .map(fused)
            .fold(0.0f64, f64::max);
        for k in 0..turns.len() {
            let before = k.checked_sub(1).map(fused);
            let after = (k + 1 < turns.len()).then(|| fused(k + 1));
            let beside = before.into_iter().chain(after).fold(0.0f64, f64::max);
            let other = match best {
                Some(b) if b != k => fused(b),
                _ => second,
            };
            shares.push((turns[k], beside, other));
        }
    }
    for &(i, beside, _) in &shares {
        if wn > 0.0 && beside > 0.0 {
            let r = &mut cands[i].1;
            r.neighbour = Some(beside);
            r.fused += wn * beside;
        }
    }
    // The session's share orders the turns of sessions among themselves:
    // they are scaled back so that the best of them keeps its relevance,
    // and a memory without a session that led every turn still leads.
    if ws > 0.0 && shares.iter().any(|s| s.2 > 0.0) {
        let best_turn = |c: &[(Signals, Relevance)]| {
            shares.iter().map(|s| c[s.0].1.fused).fold(0.0f64, f64::max)
        };
        let before = best_turn(cands);
        for &(i, _, other) in &shares {
            if other > 0.0 {
                let r = &mut cands[i].1;
                r.session_best = Some(other);
                r.fused += ws * other;
            }
        }
        let after = best_turn(cands);
        if after > 0.0 {
            for &(i, _, _) in &shares {
                cands[i].1.fused *= before / after;
            }
        }
    }
    let top = cands.iter().map(|(_, r)| r.fused).fold(0.0f64, f64::max);
    if top > 0.0 {
        for (_, r) in cands.iter_mut() {
            r.fused /= top;
        }
    }
}

/// `importance × kind_weight × decay × access_factor`: decayed importance
/// before the floor and the cap.
fn decayed(importance: f64, kind_weight: f64, decay: f64, access_factor: f64) -> f64 {
    importance * kind_weight * decay * access_factor
}

/// A memory's decayed importance at `now` before `min_importance`'s floor
/// and the cap of 1 (what demotion by importance compares): its stored
/// importance, its kind's weight, halved every `half_life_days` since its
/// last update, raised by its reads.
pub fn decayed_importance(cfg: &RankConfig, m: &Signals, now: Timestamp) -> f64 {
    let decay = 0.5f64.powf(age_days(m.updated_at, now) / cfg.half_life_days);
    let access_factor = 1.0 + cfg.access_boost * (1.0 + m.access_count as f64).ln();
    decayed(m.importance, cfg.kind_weight(&m.kind), decay, access_factor)
}

/// What a candidate that matches nothing counts as in a ranking with a
/// query: those among themselves still go by importance and recency, and
/// after every match.
const UNMATCHED: f64 = 1e-3;

/// The hybrid score. Without a query (a listing), the weighted sum of
/// importance and recency. With one, relevance gates: `relevance × (w_r +
/// w_i × importance + w_c × recency) / (w_r + w_i + w_c)`, so importance
/// and recency move a match by at most the factor their weights allow
/// (with the defaults 0.5 / 0.3 / 0.2, a fresh, important memory counts at
/// most about twice an old, faint one) and never lift what does not match
/// over what does: a year-old turn that matches the question almost
/// exactly is not buried under today's unrelated notes.
fn hybrid(w: Weights, queried: bool, relevance: f64, importance: f64, recency: f64) -> f64 {
    let prior = w.importance * importance + w.recency * recency;
    if !queried {
        return prior;
    }
    let sum = w.relevance + w.importance + w.recency;
    if sum <= 0.0 {
        return relevance;
    }
    relevance.max(UNMATCHED) * (w.relevance + prior) / sum
}

/// Scores one memory from its signals and its fused relevance; `queried`
/// says whether the ranking has a query (see [`Strategy::Hybrid`]).
pub fn score(
    cfg: &RankConfig,
    strategy: Strategy,
    m: &Signals,
    rel: &Relevance,
    queried: bool,
    now: Timestamp,
) -> ScoreParts {
    let age = age_days(m.updated_at, now);
    let decay = 0.5f64.powf(age / cfg.half_life_days);
    let kind_weight = cfg.kind_weight(&m.kind);
    let access_factor = 1.0 + cfg.access_boost * (1.0 + m.access_count as f64).ln();
    let effective =
        decayed(m.importance, kind_weight, decay, access_factor).clamp(cfg.min_importance, 1.0);
    let recency = 0.5f64.powf(age_days(m.created_at, now) / cfg.recency_half_life_days);
    let relevance = rel.fused;
    let total = match strategy {
        // The recency score itself, 0–1 and monotone in the creation time
        // (a timestamp would read as a score of 1.7e12). Exact in f64 for
        // memories up to ~19 years old (0.5^(age / 7 days) stays normal);
        // older ones tie at 0 and fall back to the id.
        Strategy::Recency => recency,
        Strategy::Importance => effective,
        Strategy::Relevance => relevance,
        Strategy::Hybrid => hybrid(cfg.weights, queried, relevance, effective, recency),
    };
    ScoreParts {
        total,
        bm25: rel.bm25,
        bm25_rank: rel.bm25_rank,
        similarity: rel.similarity,
        vector_rank: rel.vector_rank,
        text_match: rel.text_match,
        passed: None,
        relevance,
        neighbour: rel.neighbour,
        session_best: rel.session_best,
        in_named_time: rel.in_named_time,
        importance: m.importance,
        kind: m.kind.clone(),
        kind_weight,
        decay,
        access_factor,
        effective_importance: effective,
        recency,
    }
}

/// Sorts scored items best first; ties break on id (descending, so the newer
/// UUIDv7 wins), making every ranking deterministic.
pub fn sort_scored<T>(items: &mut [(T, ScoreParts)], id: impl Fn(&T) -> &str) {
    items.sort_by(|a, b| {
        b.1.total
            .partial_cmp(&a.1.total)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| id(&b.0).cmp(id(&a.0)))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A candidate: learned?, bm25, vector rank, similarity.
    type Cand = (bool, Option<f64>, Option<usize>, Option<f32>);

    /// Candidates, fused.
    fn fused(cfg: &RankConfig, cands: &[Cand]) -> Vec<Relevance> {
        let at: Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();
        let mut c: Vec<(Signals, Relevance)> = cands
            .iter()
            .enumerate()
            .map(|(i, &(learned, bm25, vector_rank, similarity))| {
                let mut s = Signals::of(&crate::testutil::memory("project/a", "x", at));
                s.id = format!("m{i}");
                s.learned = learned;
                let r = Relevance {
                    bm25,
                    vector_rank,
                    similarity,
                    ..Relevance::default()
                };
                (s, r)
            })
            .collect();
        fuse(cfg, &mut c);
        c.into_iter().map(|(_, r)| r).collect()
    }

    /// Learned candidates never move the fusion of those that were said;
    /// they are fused against everything.
    #[test]
    fn learned_candidates_leave_the_said_ones_as_they_were() {
        for fusion in [Fusion::Rrf, Fusion::Weighted] {
            let cfg = RankConfig {
                fusion,
                ..RankConfig::default()
            };
            let said = [
                (false, Some(4.0), Some(2), Some(0.6)),
                (false, Some(2.0), None, None),
                (false, None, Some(3), Some(0.5)),
            ];
            let alone = fused(&cfg, &said);
            // A learned memory best in both lists, ahead of all of them.
            let mut with = said.to_vec();
            with.insert(0, (true, Some(9.0), Some(1), Some(0.9)));
            let both = fused(&cfg, &with);
            assert_eq!(&both[1..], &alone[..], "{fusion:?}");
            assert_eq!(both[0].fused, 1.0);
            assert_eq!((both[0].bm25_rank, both[0].vector_rank), (Some(1), Some(1)));
            assert_eq!(alone[0].bm25_rank, Some(1));
            // Counted with everything, the learned one moves the others.
            let mut told = with.clone();
            told[0].0 = false;
            assert_ne!(&fused(&cfg, &told)[1..], &alone[..], "{fusion:?}");
        }
    }

    /// A candidate of fused relevance `fused`, written `t` seconds in, in
    /// `session`.
    fn turn(id: &str, session: Option<&str>, t: i64, fused: f64) -> (Signals, Relevance) {
        let at = Timestamp::from_second(1_750_000_000 + t).unwrap();
        let mut s = Signals::of(&crate::testutil::memory("project/a", "x", at));
        s.id = id.into();
        s.created_at = at;
        s.session = session.map(String::from);
        let r = Relevance {
            fused,
            ..Relevance::default()
        };
        (s, r)
    }

    /// A turn beside a strong match rises over a weak match elsewhere; the
    /// nearest candidates of the same session are the neighbours, whatever
    /// lies between them; nothing is shared across sessions, without a
    /// session, or at weight 0.
    #[test]
    fn session_neighbours_share_relevance() {
        let cands = || {
            vec![
                turn("question", Some("s1"), 0, 1.0),
                turn("answer", Some("s1"), 5, 0.1),
                turn("later", Some("s1"), 9, 0.0),
                turn("elsewhere", Some("s2"), 1, 0.2),
                turn("loose", None, 2, 0.05),
            ]
        };
        let shared = |w: f64| {
            let cfg = RankConfig {
                neighbour_weight: w,
                session_weight: 0.0,
                ..RankConfig::default()
            };
            let mut c = cands();
            share_with_neighbours(&cfg, &mut c);
            c.into_iter()
                .map(|(s, r)| (s.id, (r.fused, r.neighbour)))
                .collect::<HashMap<_, _>>()
        };
        let off = shared(0.0);
        assert!(off["elsewhere"].0 > off["answer"].0);
        assert!(off.values().all(|(_, n)| n.is_none()));
        let on = shared(0.3);
        // question: 1.0 + 0.3 × 0.1 = 1.03, the best; answer: 0.1 + 0.3.
        assert!((on["question"].0 - 1.0).abs() < 1e-12);
        assert!((on["answer"].0 - 0.4 / 1.03).abs() < 1e-12);
        assert_eq!(on["answer"].1, Some(1.0));
        assert!(on["answer"].0 > on["elsewhere"].0);
        // "later"'s nearest candidate before it is the answer, not the question.
        assert_eq!(on["later"].1, Some(0.1));
        assert_eq!(on["elsewhere"].1, None, "alone in its session");
        assert_eq!(on["loose"].1, None, "no session");
        // Without a query nothing moves.
        let mut c: Vec<_> = cands()
            .into_iter()
            .map(|(s, mut r)| {
                r.fused = 0.0;
                (s, r)
            })
            .collect();
        share_with_neighbours(&RankConfig::default(), &mut c);
        assert!(
            c.iter()
                .all(|(_, r)| r.fused == 0.0 && r.neighbour.is_none())
        );
    }

    /// A turn of the conversation that matched best rises over an equal
    /// match in a conversation that matched nothing else, by the best of
    /// the *other* turns of its session (the best turn itself gets the
    /// second best); nothing without a session, alone in a session, or at
    /// weight 0.
    #[test]
    fn a_session_shares_its_best_relevance() {
        let shared = |w: f64| {
            let cfg = RankConfig {
                neighbour_weight: 0.0,
                session_weight: w,
                ..RankConfig::default()
            };
            // Far apart in time: turns between them were not candidates.
            let mut c = vec![
                turn("best", Some("s1"), 0, 1.0),
                turn("later", Some("s1"), 600, 0.4),
                turn("third", Some("s1"), 900, 0.1),
                turn("lone", Some("s2"), 1, 0.45),
                turn("loose", None, 2, 0.45),
            ];
            share_with_neighbours(&cfg, &mut c);
            c.into_iter()
                .map(|(s, r)| (s.id, (r.fused, r.session_best)))
                .collect::<HashMap<_, _>>()
        };
        let off = shared(0.0);
        assert!(off["lone"].0 > off["later"].0);
        assert!(off.values().all(|(_, s)| s.is_none()));
        let on = shared(0.3);
        // best: 1.0 + 0.3 × 0.4 = 1.12, the top; later: 0.4 + 0.3 × 1.0.
        assert_eq!(on["best"], (1.0, Some(0.4)));
        assert!((on["later"].0 - 0.7 / 1.12).abs() < 1e-12);
        assert_eq!(on["later"].1, Some(1.0));
        assert_eq!(on["third"].1, Some(1.0));
        assert!(on["later"].0 > on["lone"].0 && on["later"].0 > on["loose"].0);
        assert!(
            (on["lone"].0 - 0.45 / 1.12).abs() < 1e-12,
            "alone: no share"
        );
        assert_eq!((on["lone"].1, on["loose"].1), (None, None));
        // Turns are scaled back so that the best of them keeps its
        // relevance: the memory without a session keeps its own.
        assert_eq!(on["loose"].0, 0.45);
    }

    /// A memory without a session that leads every turn keeps its lead
    /// however the turns' sessions match.
    #[test]
    fn the_session_share_never_moves_turns_past_a_memory_without_a_session() {
        let cand = |id: &str, session: Option<&str>, fused: f64| turn(id, session, 0, fused);
        let cfg = RankConfig {
            neighbour_weight: 0.0,
            session_weight: 1.0,
            ..RankConfig::default()
        };
        let mut c = vec![
            cand("note", None, 1.0),
            cand("a", Some("s1"), 0.9),
            cand("b", Some("s1"), 0.9),
            cand("c", Some("s1"), 0.9),
        ];
        share_with_neighbours(&cfg, &mut c);
        assert_eq!(c[0].1.fused, 1.0);
        assert!(c[1..].iter().all(|(_, r)| r.fused < 1.0), "{c:?}");
        assert!(c[1..].iter().all(|(_, r)| r.session_best == Some(0.9)));
    }

    #[test]
    fn decay_halves_per_half_life() {
        let cfg = RankConfig::default();
        let now: Timestamp = "2026-02-01T00:00:00Z".parse().unwrap();
        let then: Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();
        let m = crate::testutil::memory("project/a", "x", then);
        let p = score(
            &cfg,
            Strategy::Importance,
            &Signals::of(&m),
            &Relevance::default(),
            false,
            now,
        );
        assert!((p.decay - 0.5).abs() < 1e-9, "{}", p.decay);
        // context weight 0.3 × importance 0.5 × 0.5 = 0.075 → floored at 0.1
        assert!((p.effective_importance - 0.1).abs() < 1e-9);
    }

    /// A year-old conversation turn that matches the question almost
    /// exactly is not buried under today's notes that barely match; among
    /// equal matches the fresh one still leads; a listing (no query) goes
    /// by importance and recency alone.
    #[test]
    fn hybrid_lets_relevance_lead_and_recency_order_near_ties() {
        let cfg = RankConfig::default();
        let now: Timestamp = "2026-06-01T00:00:00Z".parse().unwrap();
        let old: Timestamp = "2025-03-01T00:00:00Z".parse().unwrap();
        let mut turn = Signals::of(&crate::testutil::memory("project/a", "x", old));
        turn.kind = "conversation".into();
        let mut note = Signals::of(&crate::testutil::memory("project/a", "y", now));
        note.kind = "note".into();
        let rel = |fused| Relevance {
            fused,
            ..Relevance::default()
        };
        let score = |m: &Signals, r: f64, queried| {
            score(&cfg, Strategy::Hybrid, m, &rel(r), queried, now).total
        };
        assert!(score(&turn, 0.99, true) > score(&note, 0.34, true));
        assert!(score(&turn, 0.99, true) > score(&note, 0.5, true));
        assert!(score(&note, 0.9, true) > score(&turn, 0.9, true));
        // Something that matches beats what does not, however fresh.
        assert!(score(&turn, 0.05, true) > score(&note, 0.0, true));
        assert!(score(&note, 0.0, false) > score(&turn, 0.0, false));
    }

    /// The floor's three kinds of evidence: similarity over the floor; a
    /// text match with some similarity; a similarity near the best when
    /// the best says the question is about what the view holds.
    #[test]
    fn the_floor_passes_paraphrases_near_the_best_and_not_lone_shared_words() {
        let cfg = RankConfig::default();
        let cand = |similarity: Option<f32>, text_match: Option<f64>| {
            let s = Signals::of(&crate::testutil::memory(
                "project/a",
                "x",
                Timestamp::UNIX_EPOCH,
            ));
            let r = Relevance {
                similarity,
                text_match,
                ..Relevance::default()
            };
            (s, r)
        };
        // "when do we ship?" against a project's notes: the deploy note is
        // the nearest, under 0.3.
        let project = [
            cand(Some(0.24), None),
            cand(Some(0.12), None),
            cand(Some(0.08), Some(1.0)),
        ];
        let floor = Floor::over(&cfg, cfg.min_relevance, &project);
        let passed: Vec<bool> = project.iter().map(|(_, r)| r.passes(&floor)).collect();
        assert_eq!(passed, [true, false, false]);
        assert!(project[0].1.verdict(&floor).contains("similarity_band"));
        assert!(project[2].1.verdict(&floor).contains("< min_relevance"));
        // A question about nothing the view holds: the best is far under.
        let unrelated = [cand(Some(0.12), None), cand(Some(0.1), Some(1.0))];
        let floor = Floor::over(&cfg, cfg.min_relevance, &unrelated);
        assert!(unrelated.iter().all(|(_, r)| !r.passes(&floor)));
        // Without vectors, the text match alone decides, as before.
        let text = [cand(None, Some(1.0)), cand(None, Some(0.2))];
        let floor = Floor::over(&cfg, cfg.min_relevance, &text);
        let passed: Vec<bool> = text.iter().map(|(_, r)| r.passes(&floor)).collect();
        assert_eq!(passed, [true, false]);
        // The band off: only the fixed similarity passes.
        let off = RankConfig {
            similarity_band: 0.0,
            ..RankConfig::default()
        };
        let floor = Floor::over(&off, off.min_relevance, &project);
        assert!(!project[0].1.passes(&floor));
    }

    #[test]
    fn bad_config_is_named() {
        let cfg = RankConfig {
            half_life_days: 0.0,
            ..RankConfig::default()
        };
        assert!(
            cfg.validate()
                .unwrap_err()
                .to_string()
                .contains("half_life_days")
        );
        for band in [-0.1, 1.5, f64::NAN] {
            let cfg = RankConfig {
                similarity_band: band,
                ..RankConfig::default()
            };
            let err = cfg.validate().unwrap_err().to_string();
            assert!(err.contains("ranking.similarity_band"), "{err}");
        }
        assert!(
            "fastest"
                .parse::<Strategy>()
                .unwrap_err()
                .to_string()
                .contains("fastest")
        );
    }
}
