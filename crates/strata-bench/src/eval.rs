//! Retrieval benchmarks that anyone can rerun: LoCoMo.
//!
//! [`locomo`] implements the protocol of `../shared/data/locomo/README.md`:
//! one scope per conversation (`project/<sample_id>`), one memory per turn
//! (content `<speaker> said, "<text>"` plus ` and shared <caption>`, key =
//! the turn's `dia_id`, created at its session's date, in a strata session
//! per LoCoMo session, as an agent writes its turns), the raw question as
//! the query. It reports, per category and overall (categories 1–5, and
//! 1–4), LoCoMo recall@k (fractional), recall_any@k, recall_all@k,
//! session-level recall_any@k and MRR; and, for context assembly, the
//! evidence found inside a package assembled within each token budget
//! against plain top-k cut at the same token cost.
//!
//! Categories use LoCoMo's own numbering: 1 multi-hop, 2 temporal,
//! 3 open-domain, 4 single-hop, 5 adversarial.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use strata::{
    Confirm, ContextRequest, Engine, Error, Kind, NewMemory, Profile, ProfileSource, Recall,
    Render, Result, Scope, Strategy, SummarizerKind, View,
};

pub(crate) mod cmd;

/// An invalid field of the evaluation's input, named by its JSON path.
fn invalid(path: impl Into<String>, reason: impl std::fmt::Display) -> Error {
    Error::InvalidField {
        field: path.into(),
        reason: reason.to_string(),
    }
}

/// LoCoMo's category names, by number.
pub const CATEGORIES: [(u8, &str); 5] = [
    (1, "multi-hop"),
    (2, "temporal"),
    (3, "open-domain"),
    (4, "single-hop"),
    (5, "adversarial"),
];

/// What to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LocomoOptions {
    /// Cut-offs for recall@k.
    pub ks: Vec<usize>,
    /// Token budgets of the context variant (empty: skip it).
    pub budgets: Vec<u32>,
    /// Ranking.
    pub strategy: Strategy,
    /// Only the first N questions of each conversation (for quick runs).
    pub max_questions: Option<usize>,
    /// The engine already holds the data set (a database kept from an
    /// earlier run): skip storing and embedding it.
    #[serde(default)]
    pub reuse: bool,
    /// Summary share of the context variant's "with summary" column.
    pub summary_share: f64,
    /// Run learning (upkeep's detectors and consolidation) over the
    /// stored conversations before the questions, so contexts hold what
    /// was learned.
    #[serde(default)]
    pub learn: bool,
    /// Write one JSON line per question here ([`QuestionLine`]): where its
    /// evidence ranked, and every candidate's signals before the floor, so
    /// a ranking idea can be tried on them without running the engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_question: Option<std::path::PathBuf>,
    /// Notes written today into each conversation's scope before the
    /// questions: the turns of the next conversation (other people, other
    /// topics), as kind `note` with no session, created now. They answer
    /// none of its questions; they test whether recency and importance bury
    /// old history that matches under fresh notes that do not.
    #[serde(default)]
    pub fresh_notes: usize,
    /// Ask each question as an agent sends its recent dialogue: the N turns
    /// said just before the question's first evidence turn (`speaker:
    /// text` lines), then the question; a long query whose intent is at
    /// its end. Those turns are what the agent holds already: they are
    /// left out of the ranks. 0 asks the question alone.
    #[serde(default)]
    pub context_turns: usize,
}

/// One question of `--per-question`: its evidence's ranks and the
/// candidates' signals.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuestionLine {
    /// Index of its conversation in the file.
    pub conversation: usize,
    /// The question as asked.
    pub question: String,
    /// LoCoMo's category.
    pub category: u8,
    /// Its evidence turns (`dia_id`s).
    pub evidence: Vec<String>,
    /// Each evidence turn's 1-based rank in the recall that was scored,
    /// `None` when it was not among the results.
    pub ranks: Vec<Option<usize>>,
    /// The first ten results' `dia_id`s.
    pub top: Vec<String>,
    /// Every memory of the conversation that matched the question's words
    /// or has a vector, before the relevance floor, best first.
    pub candidates: Vec<Candidate>,
}

/// A candidate's signals in a [`QuestionLine`] (as `--explain` names them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Its `dia_id`.
    pub key: String,
    /// Its id (turns of a session said at one time are in id order).
    pub id: String,
    /// Its session (the store's session id).
    pub session: Option<String>,
    /// When it was said.
    pub created_at: Timestamp,
    /// BM25 (higher is better), when its text matched.
    pub bm25: Option<f64>,
    /// Cosine similarity to the question, when it has a vector.
    pub similarity: Option<f32>,
    /// Written in the time the question names.
    pub in_named_time: bool,
    /// The relevance it was ranked by without the floor (0–1).
    pub relevance: f64,
}

impl Default for LocomoOptions {
    fn default() -> LocomoOptions {
        LocomoOptions {
            ks: vec![1, 5, 10, 25, 50],
            budgets: vec![1000, 2000, 4000],
            strategy: Strategy::Relevance,
            max_questions: None,
            reuse: false,
            summary_share: 0.3,
            learn: false,
            per_question: None,
            fresh_notes: 0,
            context_turns: 0,
        }
    }
}

/// Averages over a group of questions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Questions in the group.
    pub questions: usize,
    /// LoCoMo recall@k (fractional), by k.
    pub recall: BTreeMap<usize, f64>,
    /// Any evidence turn in the top k.
    pub recall_any: BTreeMap<usize, f64>,
    /// Every evidence turn in the top k.
    pub recall_all: BTreeMap<usize, f64>,
    /// A top-k turn from an evidence session.
    pub session_any: BTreeMap<usize, f64>,
    /// Mean reciprocal rank of the first evidence turn.
    pub mrr: f64,
}

/// The context variant at one budget (averages over categories 1–5).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContextMetrics {
    /// Token budget.
    pub budget: u32,
    /// Evidence recall (fractional) among the package's items.
    pub context_recall: f64,
    /// Any evidence turn among the items.
    pub context_any: f64,
    /// Also counting turns the summary cites (package with a summary).
    pub with_summary_recall: f64,
    /// Plain top-k, cut where its rendered lines reach the budget.
    pub topk_recall: f64,
    /// Any evidence turn in that top-k.
    pub topk_any: f64,
    /// Mean items in the package.
    pub items: f64,
    /// Mean k of the top-k at the same token cost.
    pub topk_k: f64,
    /// Mean tokens of the package.
    pub tokens: f64,
    /// Assembly latency.
    pub p50_ms: f64,
    /// Assembly latency.
    pub p95_ms: f64,
}

/// A full LoCoMo run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LocomoReport {
    /// Ranking used.
    pub strategy: String,
    /// Conversations.
    pub conversations: usize,
    /// Turns stored.
    pub turns: usize,
    /// Questions asked (with evidence).
    pub questions: usize,
    /// Questions skipped for having no evidence.
    pub no_evidence: usize,
    /// Evidence ids that name no turn (counted as misses).
    pub unknown_evidence: Vec<String>,
    /// Indexing, embedding and query times.
    #[serde(flatten)]
    pub timing: Timing,
    /// By category number.
    pub by_category: BTreeMap<u8, Metrics>,
    /// Categories 1–5 (the paper's "Overall").
    pub overall: Metrics,
    /// Categories 1–4.
    pub overall_1_4: Metrics,
    /// Categories 1–5 over the first half of the conversations (1–5 of
    /// LoCoMo's ten) and the second: tune on one, report on the other.
    #[serde(default)]
    pub halves: Vec<Metrics>,
    /// Fresh notes written into each conversation's scope
    /// ([`LocomoOptions::fresh_notes`]).
    #[serde(default)]
    pub fresh_notes: usize,
    /// Turns of context before each question
    /// ([`LocomoOptions::context_turns`]).
    #[serde(default)]
    pub context_turns: usize,
    /// The context variant, by budget.
    pub context: Vec<ContextMetrics>,
    /// What learning did before the questions (with `learn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned: Option<strata::LearnReport>,
    /// Each idea of the ranking turned off in turn, the rest as in this
    /// run (`--ablation`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ablation: Vec<Ablation>,
}

/// The same questions with one idea of the ranking turned off.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ablation {
    /// What was turned off.
    pub variant: String,
    /// The setting that turns it off.
    pub setting: String,
    /// Categories 1–5.
    pub overall: Metrics,
    /// By category number.
    pub by_category: BTreeMap<u8, Metrics>,
    /// Categories 1–5 over each half of the conversations.
    #[serde(default)]
    pub halves: Vec<Metrics>,
}

/// What a benchmark run cost.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// The embedder's model (`None`: BM25 alone).
    pub embedder: Option<String>,
    /// Seconds to store every memory.
    pub index_seconds: f64,
    /// Seconds to embed them.
    pub embed_seconds: f64,
    /// Query latency, the query's embedding excluded (its vector is
    /// computed, and cached, before the timed recall).
    pub query_p50_ms: f64,
    /// Query latency, the query's embedding excluded.
    pub query_p95_ms: f64,
    /// Query embedding latency.
    pub embed_p50_ms: f64,
    /// Query embedding latency.
    pub embed_p95_ms: f64,
    /// The whole recall, the query's embedding included (what a caller
    /// waits for).
    #[serde(default)]
    pub whole_p50_ms: f64,
    /// The whole recall, the query's embedding included.
    #[serde(default)]
    pub whole_p95_ms: f64,
    /// An agent's recall (a limit of 10 instead of the 200 the recall@50
    /// needs), the query's embedding excluded; 0 where not measured.
    #[serde(default)]
    pub top10_p50_ms: f64,
    /// An agent's recall of 10, the query's embedding excluded.
    #[serde(default)]
    pub top10_p95_ms: f64,
    /// An agent's recall of 10, the query's embedding included.
    #[serde(default)]
    pub whole10_p50_ms: f64,
    /// An agent's recall of 10, the query's embedding included.
    #[serde(default)]
    pub whole10_p95_ms: f64,
}

impl Timing {
    /// Fills the latency figures: `query` without the embedding, `embed`
    /// the embedding alone (`None` where nothing was embedded), in step.
    fn latencies(&mut self, query: &mut [Duration], embed: &[Option<Duration>]) {
        let mut whole: Vec<Duration> = query
            .iter()
            .zip(embed)
            .map(|(q, e)| *q + e.unwrap_or_default())
            .collect();
        let mut embed: Vec<Duration> = embed.iter().flatten().copied().collect();
        self.query_p50_ms = percentile(query, 0.5);
        self.query_p95_ms = percentile(query, 0.95);
        self.embed_p50_ms = percentile(&mut embed, 0.5);
        self.embed_p95_ms = percentile(&mut embed, 0.95);
        self.whole_p50_ms = percentile(&mut whole, 0.5);
        self.whole_p95_ms = percentile(&mut whole, 0.95);
    }

    /// Fills the figures of an agent's recall of 10, in step with `embed`
    /// as [`Timing::latencies`].
    fn top10_latencies(&mut self, query: &mut [Duration], embed: &[Option<Duration>]) {
        let mut whole: Vec<Duration> = query
            .iter()
            .zip(embed)
            .map(|(q, e)| *q + e.unwrap_or_default())
            .collect();
        self.top10_p50_ms = percentile(query, 0.5);
        self.top10_p95_ms = percentile(query, 0.95);
        self.whole10_p50_ms = percentile(&mut whole, 0.5);
        self.whole10_p95_ms = percentile(&mut whole, 0.95);
    }
}

impl std::fmt::Display for Timing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "index {:.2} s · embedder {} (embedding {:.1} s) · query p50 {:.2} ms, p95 {:.2} ms without query embedding; query embedding p50 {:.2} ms, p95 {:.2} ms; whole recall p50 {:.2} ms, p95 {:.2} ms",
            self.index_seconds,
            self.embedder.as_deref().unwrap_or("none: BM25 only"),
            self.embed_seconds,
            self.query_p50_ms,
            self.query_p95_ms,
            self.embed_p50_ms,
            self.embed_p95_ms,
            self.whole_p50_ms,
            self.whole_p95_ms
        )?;
        if self.top10_p50_ms > 0.0 {
            write!(
                f,
                "; a recall of 10 p50 {:.2} ms, p95 {:.2} ms without query embedding, whole p50 {:.2} ms, p95 {:.2} ms",
                self.top10_p50_ms, self.top10_p95_ms, self.whole10_p50_ms, self.whole10_p95_ms
            )?;
        }
        Ok(())
    }
}

/// One question's hits, for averaging.
#[derive(Clone, Debug)]
struct Scored {
    conversation: usize,
    category: u8,
    recall: Vec<f64>,
    any: Vec<f64>,
    all: Vec<f64>,
    session: Vec<f64>,
    rr: f64,
}

/// Evidence ids of a question: split on `;` and white space.
pub fn evidence_ids(v: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(list) = v.as_array() {
        for e in list.iter().filter_map(|e| e.as_str()) {
            for part in e.split(|c: char| c == ';' || c.is_whitespace()) {
                if !part.is_empty() && !out.iter().any(|x| x == part) {
                    out.push(part.to_string());
                }
            }
        }
    }
    out
}

/// The session of a turn id (`D3:12` → `D3`).
fn session_of(id: &str) -> &str {
    id.split(':').next().unwrap_or(id)
}

/// Parses LoCoMo's `1:56 pm on 8 May, 2023`.
pub fn parse_date(text: &str) -> Option<Timestamp> {
    let t = text.trim();
    let (time, date) = t.split_once(" on ")?;
    let (hm, ampm) = time.trim().split_once(' ')?;
    let (h, m) = hm.split_once(':')?;
    let mut h: i8 = h.parse().ok()?;
    let m: i8 = m.parse().ok()?;
    match ampm.to_ascii_lowercase().as_str() {
        "am" if h == 12 => h = 0,
        "pm" if h != 12 => h += 12,
        "am" | "pm" => {}
        _ => return None,
    }
    let parts: Vec<&str> = date.split([' ', ',']).filter(|p| !p.is_empty()).collect();
    let [day, month, year] = parts.as_slice() else {
        return None;
    };
    let mo = strata::month_number(month)?;
    let d = jiff::civil::date(year.parse().ok()?, mo, day.parse().ok()?);
    let dt = d.at(h, m, 0, 0);
    dt.to_zoned(jiff::tz::TimeZone::UTC)
        .ok()
        .map(|z| z.timestamp())
}

fn field<'a>(v: &'a serde_json::Value, path: &str, name: &str) -> Result<&'a serde_json::Value> {
    v.get(name)
        .ok_or_else(|| invalid(format!("{path}.{name}"), "missing"))
}

/// Stores one conversation's turns; returns the turn ids it stored.
fn load_conversation(
    engine: &Engine,
    i: usize,
    sample: &serde_json::Value,
    store: bool,
) -> Result<(Scope, HashSet<String>)> {
    let path = format!("[{i}]");
    let id = field(sample, &path, "sample_id")?
        .as_str()
        .ok_or_else(|| invalid(format!("{path}.sample_id"), "not a string"))?;
    let scope = Scope::parse(&format!("project/{id}"))?;
    let conv = field(sample, &path, "conversation")?
        .as_object()
        .ok_or_else(|| invalid(format!("{path}.conversation"), "not an object"))?;
    let mut sessions: Vec<(usize, &serde_json::Value)> = conv
        .iter()
        .filter_map(|(k, v)| {
            let n = k.strip_prefix("session_")?.parse::<usize>().ok()?;
            Some((n, v))
        })
        .collect();
    sessions.sort_by_key(|s| s.0);
    let mut batch = Vec::new();
    let mut ids = HashSet::new();
    for (n, turns) in sessions {
        let date_key = format!("session_{n}_date_time");
        let at = conv
            .get(&date_key)
            .and_then(|d| d.as_str())
            .and_then(parse_date)
            .ok_or_else(|| {
                invalid(
                    format!("{path}.conversation.{date_key}"),
                    "missing or not a date like `1:56 pm on 8 May, 2023`",
                )
            })?;
        let turns = turns
            .as_array()
            .ok_or_else(|| invalid(format!("{path}.conversation.session_{n}"), "not a list"))?;
        for (j, t) in turns.iter().enumerate() {
            let tp = format!("{path}.conversation.session_{n}[{j}]");
            let speaker = field(t, &tp, "speaker")?.as_str().unwrap_or("someone");
            let dia = field(t, &tp, "dia_id")?
                .as_str()
                .ok_or_else(|| invalid(format!("{tp}.dia_id"), "not a string"))?;
            let text = field(t, &tp, "text")?.as_str().unwrap_or("");
            let mut content = format!("{speaker} said, \"{text}\"");
            if let Some(c) = t.get("blip_caption").and_then(|c| c.as_str()) {
                content.push_str(&format!(" and shared {c}"));
            }
            ids.insert(dia.to_string());
            batch.push(
                NewMemory::new(scope.clone(), content)
                    .kind(Kind::Conversation)
                    .key(dia)
                    .session(format!("{id}-session-{n}"))
                    .created_at(at),
            );
        }
    }
    if store {
        engine.remember_batch(batch, Confirm::No)?;
    }
    Ok((scope, ids))
}

/// A conversation's turns in order (sessions by number): each one's
/// `dia_id`, speaker and text.
fn turns(sample: &serde_json::Value) -> Vec<(&str, &str, &str)> {
    let Some(conv) = sample.get("conversation").and_then(|c| c.as_object()) else {
        return Vec::new();
    };
    let mut sessions: Vec<(usize, &serde_json::Value)> = conv
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("session_")?.parse::<usize>().ok()?, v)))
        .collect();
    sessions.sort_by_key(|s| s.0);
    fn get<'a>(v: &'a serde_json::Value, k: &str) -> Option<&'a str> {
        v.get(k).and_then(|x| x.as_str())
    }
    sessions
        .into_iter()
        .flat_map(|(_, t)| t.as_array().into_iter().flatten())
        .map(|t| {
            (
                get(t, "dia_id").unwrap_or(""),
                get(t, "speaker").unwrap_or("someone"),
                get(t, "text").unwrap_or(""),
            )
        })
        .collect()
}

/// Writes `n` notes into each conversation's scope, created now: the turns
/// of the next conversation in the file, as notes with no session (their
/// keys start `fresh:`, so they are never evidence). Returns how many were
/// written to each.
fn write_fresh_notes(
    engine: &Engine,
    samples: &[serde_json::Value],
    convs: &[(Scope, HashSet<String>)],
    n: usize,
) -> Result<usize> {
    let mut written = 0;
    for (i, (scope, _)) in convs.iter().enumerate() {
        let other = (i + 1) % samples.len();
        if other == i {
            break;
        }
        let batch: Vec<NewMemory> = turns(&samples[other])
            .into_iter()
            .map(|(_, _, text)| text)
            .filter(|text| text.split_whitespace().count() >= 4)
            .take(n)
            .enumerate()
            .map(|(k, text)| {
                NewMemory::new(scope.clone(), text)
                    .kind(Kind::Note)
                    .key(format!("fresh:{k}"))
            })
            .collect();
        written = batch.len();
        engine.remember_batch(batch, Confirm::No)?;
    }
    Ok(written)
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 { 0.0 } else { s / n as f64 }
}

fn aggregate(ks: &[usize], qs: &[&Scored]) -> Metrics {
    let mut m = Metrics {
        questions: qs.len(),
        mrr: mean(qs.iter().map(|q| q.rr)),
        ..Metrics::default()
    };
    for (i, k) in ks.iter().enumerate() {
        m.recall.insert(*k, mean(qs.iter().map(|q| q.recall[i])));
        m.recall_any.insert(*k, mean(qs.iter().map(|q| q.any[i])));
        m.recall_all.insert(*k, mean(qs.iter().map(|q| q.all[i])));
        m.session_any
            .insert(*k, mean(qs.iter().map(|q| q.session[i])));
    }
    m
}

fn percentile(v: &mut [Duration], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort();
    v[((v.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1000.0
}

/// Runs the LoCoMo retrieval protocol on `data` (the parsed
/// `locomo10.json`) with `engine`, which should be empty.
pub fn locomo(
    engine: &Engine,
    data: &serde_json::Value,
    opts: &LocomoOptions,
) -> Result<LocomoReport> {
    let samples = data
        .as_array()
        .ok_or_else(|| invalid("locomo", "the file must be a JSON list of conversations"))?;
    if opts.ks.is_empty() || opts.ks.contains(&0) {
        return Err(invalid("k", "give positive cut-offs"));
    }
    if opts.budgets.contains(&0) {
        return Err(invalid("budgets", "budgets must be positive"));
    }
    let kmax = *opts.ks.iter().max().unwrap_or(&10);
    let mut per_question = match &opts.per_question {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|e| invalid("per_question", format!("{}: {e}", path.display())))?,
        )),
        None => None,
    };
    let mut rep = LocomoReport {
        strategy: opts.strategy.as_str().into(),
        conversations: samples.len(),
        ..LocomoReport::default()
    };
    let t = Instant::now();
    let mut convs = Vec::with_capacity(samples.len());
    for (i, s) in samples.iter().enumerate() {
        let (scope, ids) = load_conversation(engine, i, s, !opts.reuse)?;
        rep.turns += ids.len();
        convs.push((scope, ids));
    }
    if opts.fresh_notes > 0 && !opts.reuse {
        rep.fresh_notes = write_fresh_notes(engine, samples, &convs, opts.fresh_notes)?;
    }
    rep.timing.index_seconds = t.elapsed().as_secs_f64();
    let t = Instant::now();
    engine.embed_all(&mut |_, _| {})?;
    rep.timing.embed_seconds = t.elapsed().as_secs_f64();
    rep.timing.embedder = engine.embed_status()?.model;
    if opts.learn {
        rep.learned = Some(engine.learn()?);
    }
    rep.context_turns = opts.context_turns;
    let mut embed_latencies = Vec::new();

    let counter = engine.token_counter();
    let mut scored: Vec<Scored> = Vec::new();
    let mut latencies = Vec::new();
    let mut top10_latencies = Vec::new();
    // Per budget: (recall, any, with-summary recall, topk recall, topk any, items, k, tokens, latencies).
    let mut ctx: Vec<(Vec<[f64; 8]>, Vec<Duration>)> = opts
        .budgets
        .iter()
        .map(|_| (Vec::new(), Vec::new()))
        .collect();
    for (i, s) in samples.iter().enumerate() {
        let (scope, turn_ids) = &convs[i];
        let lines: Vec<(&str, String)> = if opts.context_turns > 0 {
            turns(s)
                .into_iter()
                .map(|(dia, who, text)| (dia, format!("{who}: {text}\n")))
                .collect()
        } else {
            Vec::new()
        };
        let qa = field(s, &format!("[{i}]"), "qa")?
            .as_array()
            .ok_or_else(|| invalid(format!("[{i}].qa"), "not a list"))?;
        for (j, q) in qa
            .iter()
            .enumerate()
            .take(opts.max_questions.unwrap_or(usize::MAX))
        {
            let qp = format!("[{i}].qa[{j}]");
            let asked = field(q, &qp, "question")?.as_str().unwrap_or("");
            let category = field(q, &qp, "category")?.as_u64().unwrap_or(0) as u8;
            let evidence = evidence_ids(q.get("evidence").unwrap_or(&serde_json::Value::Null));
            // With context: the turns said just before the first evidence
            // turn, then the question; those turns are what the agent
            // already holds, so they are left out of the ranks.
            let first = lines
                .iter()
                .position(|(d, _)| evidence.iter().any(|e| e == d));
            let said: &[(&str, String)] = match first {
                Some(k) => &lines[k.saturating_sub(opts.context_turns)..k],
                None => &[],
            };
            let mut with_context: String = said.iter().map(|(_, l)| l.as_str()).collect();
            with_context.push_str(asked);
            let question = with_context.as_str();
            let held: HashSet<&str> = said.iter().map(|(d, _)| *d).collect();
            if evidence.is_empty() {
                rep.no_evidence += 1;
                continue;
            }
            for e in &evidence {
                if !turn_ids.contains(e) {
                    rep.unknown_evidence.push(format!(
                        "{}:{e}",
                        scope.as_str().trim_start_matches("project/")
                    ));
                }
            }
            let ev: HashSet<&str> = evidence.iter().map(String::as_str).collect();

            let mut r = Recall::new(question, View::scope(scope.clone()));
            r.strategy = Some(opts.strategy);
            r.limit = kmax.max(200);
            r.touch = false;
            let t = Instant::now();
            let embedded = engine.query_vector(question)?.is_some();
            embed_latencies.push(embedded.then(|| t.elapsed()));
            // An agent's recall of 10 is timed too; the one that goes
            // second finds the pages the first read, so they take turns.
            let mut ten = r.clone();
            ten.limit = 10;
            let mut time_ten = || -> Result<()> {
                let t = Instant::now();
                std::hint::black_box(engine.recall(&ten)?);
                top10_latencies.push(t.elapsed());
                Ok(())
            };
            if j % 2 == 0 {
                time_ten()?;
            }
            let t = Instant::now();
            let hits = engine.recall(&r)?;
            latencies.push(t.elapsed());
            if j % 2 == 1 {
                time_ten()?;
            }
            let keys: Vec<&str> = hits
                .iter()
                .map(|h| h.memory.key.as_deref().unwrap_or(""))
                .filter(|k| !held.contains(k))
                .collect();
            if let Some(out) = per_question.as_mut() {
                let line = question_line(engine, &r, i, category, &evidence, &keys)?;
                serde_json::to_writer(&mut *out, &line)
                    .map_err(std::io::Error::from)
                    .and_then(|()| std::io::Write::write_all(out, b"\n"))
                    .map_err(|e| invalid("per_question", e))?;
            }
            let mut sq = measure(&keys, &ev, &opts.ks, category);
            sq.conversation = i;
            scored.push(sq);

            // The context variant.
            for (b, budget) in opts.budgets.iter().enumerate() {
                let (pkg, took) = assemble(engine, scope, question, *budget, opts.strategy, 0.0)?;
                let with_summary = if opts.summary_share > 0.0 {
                    Some(
                        assemble(
                            engine,
                            scope,
                            question,
                            *budget,
                            opts.strategy,
                            opts.summary_share,
                        )?
                        .0,
                    )
                } else {
                    None
                };
                let in_items: HashSet<&str> = pkg
                    .items
                    .iter()
                    .filter_map(|it| it.key.as_deref())
                    .collect();
                let found = ev.iter().filter(|e| in_items.contains(*e)).count();
                let summ_found = with_summary.as_ref().map_or(found, |p| {
                    let mut seen: HashSet<&str> =
                        p.items.iter().filter_map(|it| it.key.as_deref()).collect();
                    let cited: Vec<String> = p
                        .summary
                        .as_ref()
                        .map(|s| s.ids.clone())
                        .unwrap_or_default();
                    let cited_keys: Vec<String> = engine
                        .store()
                        .get_many(&cited)
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|m| m.key)
                        .collect();
                    seen.extend(cited_keys.iter().map(String::as_str));
                    ev.iter().filter(|e| seen.contains(*e)).count()
                });
                // Plain top-k at the same token cost: ranked lines under
                // one heading until the budget is reached.
                let mut used = counter.count(&strata::markdown_heading("Project context")) + 1;
                let mut k = 0;
                for h in &hits {
                    let line = strata::markdown_line(&h.memory);
                    let c = counter.count(&line);
                    if used + c > *budget {
                        break;
                    }
                    used += c;
                    k += 1;
                }
                let topk_found = ev.iter().filter(|e| keys[..k].contains(e)).count();
                let n = ev.len() as f64;
                ctx[b].0.push([
                    found as f64 / n,
                    f64::from(u8::from(found > 0)),
                    summ_found as f64 / n,
                    topk_found as f64 / n,
                    f64::from(u8::from(topk_found > 0)),
                    pkg.items.len() as f64,
                    k as f64,
                    f64::from(pkg.total_tokens),
                ]);
                ctx[b].1.push(took);
            }
        }
    }
    rep.questions = scored.len();
    rep.timing.latencies(&mut latencies, &embed_latencies);
    rep.timing
        .top10_latencies(&mut top10_latencies, &embed_latencies);
    for (c, _) in CATEGORIES {
        let qs: Vec<&Scored> = scored.iter().filter(|q| q.category == c).collect();
        if !qs.is_empty() {
            rep.by_category.insert(c, aggregate(&opts.ks, &qs));
        }
    }
    let all: Vec<&Scored> = scored
        .iter()
        .filter(|q| (1..=5).contains(&q.category))
        .collect();
    rep.overall = aggregate(&opts.ks, &all);
    let some: Vec<&Scored> = scored
        .iter()
        .filter(|q| (1..=4).contains(&q.category))
        .collect();
    rep.overall_1_4 = aggregate(&opts.ks, &some);
    let half = samples.len().div_ceil(2);
    for first in [true, false] {
        let qs: Vec<&Scored> = all
            .iter()
            .copied()
            .filter(|q| (q.conversation < half) == first)
            .collect();
        rep.halves.push(aggregate(&opts.ks, &qs));
    }
    for (b, budget) in opts.budgets.iter().enumerate() {
        let (rows, lat) = &mut ctx[b];
        let col = |i: usize| mean(rows.iter().map(|r| r[i]));
        rep.context.push(ContextMetrics {
            budget: *budget,
            context_recall: col(0),
            context_any: col(1),
            with_summary_recall: col(2),
            topk_recall: col(3),
            topk_any: col(4),
            items: col(5),
            topk_k: col(6),
            tokens: col(7),
            p50_ms: percentile(lat, 0.5),
            p95_ms: percentile(lat, 0.95),
        });
    }
    if let Some(mut out) = per_question {
        std::io::Write::flush(&mut out).map_err(|e| invalid("per_question", e))?;
    }
    Ok(rep)
}

/// A question's [`QuestionLine`]: the ranks of its evidence among `keys`
/// (the scored recall's results) and the candidates of `asked` recalled
/// again without a floor or a limit, with their signals.
fn question_line(
    engine: &Engine,
    asked: &Recall,
    conversation: usize,
    category: u8,
    evidence: &[String],
    keys: &[&str],
) -> Result<QuestionLine> {
    let mut all = asked.clone();
    all.limit = usize::MAX;
    all.explain = true;
    all.min_relevance = Some(0.0);
    let candidates = engine
        .recall(&all)?
        .into_iter()
        .filter_map(|h| {
            let p = h.explain?;
            Some(Candidate {
                key: h.memory.key?,
                id: h.memory.id,
                session: h.memory.session,
                created_at: h.memory.created_at,
                bm25: p.bm25,
                similarity: p.similarity,
                in_named_time: p.in_named_time,
                relevance: p.relevance,
            })
        })
        .collect();
    Ok(QuestionLine {
        conversation,
        question: asked.query.clone(),
        category,
        evidence: evidence.to_vec(),
        ranks: evidence
            .iter()
            .map(|e| keys.iter().position(|k| k == e).map(|r| r + 1))
            .collect(),
        top: keys.iter().take(10).map(|k| k.to_string()).collect(),
        candidates,
    })
}

/// One package over a conversation's scope.
fn assemble(
    engine: &Engine,
    scope: &Scope,
    question: &str,
    budget: u32,
    strategy: Strategy,
    summary_share: f64,
) -> Result<(strata::ContextPackage, Duration)> {
    let prof = Profile {
        id: "locomo".into(),
        max_tokens: budget,
        strategy,
        head_tail: 0,
        summary_share,
        summarizer: SummarizerKind::Extractive,
        render: Render::Markdown,
        include_sensitive: false,
        sources: vec![ProfileSource::new(scope.as_str())],
    };
    let req = ContextRequest::new("locomo").query(question);
    let t = Instant::now();
    let p = engine.context_with_profile(&prof, &req)?;
    Ok((p, t.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_evidence_parse_like_the_readme_says() {
        let t = parse_date("1:56 pm on 8 May, 2023").unwrap();
        assert_eq!(t.to_string(), "2023-05-08T13:56:00Z");
        assert_eq!(
            parse_date("12:09 am on 13 September, 2023")
                .unwrap()
                .to_string(),
            "2023-09-13T00:09:00Z"
        );
        assert!(parse_date("yesterday").is_none());
        let ev = evidence_ids(&serde_json::json!(["D8:6; D9:17", "D1:3", "D1:3"]));
        assert_eq!(ev, vec!["D8:6", "D9:17", "D1:3"]);
        assert_eq!(session_of("D3:12"), "D3");
    }
}

/// Options of [`retrieval`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetrievalOptions {
    /// Cut-offs for recall@k.
    pub ks: Vec<usize>,
    /// Ranking.
    pub strategy: Strategy,
    /// The engine already holds the data set: skip storing and embedding.
    #[serde(default)]
    pub reuse: bool,
}

impl Default for RetrievalOptions {
    fn default() -> RetrievalOptions {
        RetrievalOptions {
            ks: vec![1, 5, 10, 25, 50],
            strategy: Strategy::Relevance,
            reuse: false,
        }
    }
}

/// A run of [`retrieval`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RetrievalReport {
    /// Ranking used.
    pub strategy: String,
    /// Corpora.
    pub corpora: usize,
    /// Memories stored.
    pub memories: usize,
    /// Queries asked.
    pub queries: usize,
    /// Indexing, embedding and query times.
    #[serde(flatten)]
    pub timing: Timing,
    /// By the queries' `category` (queries without one are `-`).
    pub by_category: BTreeMap<String, Metrics>,
    /// Every query.
    pub overall: Metrics,
}

fn str_field<'a>(v: &'a serde_json::Value, path: &str, name: &str) -> Result<&'a str> {
    field(v, path, name)?
        .as_str()
        .ok_or_else(|| invalid(format!("{path}.{name}"), "not a string"))
}

/// Runs recall@k, any@k, all@k and MRR over a labelled set in the generic
/// format `{"corpora": [{"id", "memories": [{"id", "text", "timestamp"?,
/// "speaker"?}]}], "queries": [{"corpus", "query", "relevant": [ids],
/// "category"?}]}`. Each corpus is one scope; a memory with a `speaker` is a
/// conversation turn (`<speaker> said, "<text>"`), in file order.
pub fn retrieval(
    engine: &Engine,
    data: &serde_json::Value,
    opts: &RetrievalOptions,
) -> Result<RetrievalReport> {
    if opts.ks.is_empty() || opts.ks.contains(&0) {
        return Err(invalid("k", "give positive cut-offs"));
    }
    let corpora = field(data, "", "corpora")?
        .as_array()
        .ok_or_else(|| invalid("corpora", "not a list"))?;
    let queries = field(data, "", "queries")?
        .as_array()
        .ok_or_else(|| invalid("queries", "not a list"))?;
    let mut rep = RetrievalReport {
        strategy: opts.strategy.as_str().into(),
        corpora: corpora.len(),
        ..RetrievalReport::default()
    };
    // Check everything before storing anything.
    let mut scopes: BTreeMap<String, (Scope, HashSet<String>)> = BTreeMap::new();
    let mut batch = Vec::new();
    let base: Timestamp = "2000-01-01T00:00:00Z".parse().expect("a valid time");
    for (i, c) in corpora.iter().enumerate() {
        let path = format!("corpora[{i}]");
        let id = str_field(c, &path, "id")?;
        let scope = Scope::parse(&format!("project/eval-{i}"))?;
        let mems = field(c, &path, "memories")?
            .as_array()
            .ok_or_else(|| invalid(format!("{path}.memories"), "not a list"))?;
        let mut ids = HashSet::new();
        for (j, m) in mems.iter().enumerate() {
            let mp = format!("{path}.memories[{j}]");
            let mid = str_field(m, &mp, "id")?;
            let text = str_field(m, &mp, "text")?;
            if !ids.insert(mid.to_string()) {
                return Err(invalid(format!("{mp}.id"), format!("`{mid}` repeats")));
            }
            let at = match m.get("timestamp") {
                None | Some(serde_json::Value::Null) => base
                    .checked_add(jiff::SignedDuration::from_secs(j as i64))
                    .unwrap_or(base),
                Some(t) => t
                    .as_str()
                    .and_then(|t| strata::parse_time("timestamp", t).ok())
                    .ok_or_else(|| {
                        invalid(format!("{mp}.timestamp"), "not an RFC 3339 time or date")
                    })?,
            };
            let (content, kind) = match m.get("speaker").and_then(|s| s.as_str()) {
                Some(s) => (format!("{s} said, \"{text}\""), Kind::Conversation),
                None => (text.to_string(), Kind::Context),
            };
            let mut new = NewMemory::new(scope.clone(), content)
                .kind(kind)
                .key(mid)
                .created_at(at);
            match m.get("session") {
                None | Some(serde_json::Value::Null) => {}
                Some(s) => {
                    // Session ids are global: the corpus's id keeps two
                    // corpora's "s1" apart.
                    let s = s.as_str().filter(|s| !s.is_empty()).ok_or_else(|| {
                        invalid(format!("{mp}.session"), "not a non-empty string")
                    })?;
                    new = new.session(format!("{id}-{s}"));
                }
            }
            batch.push(new);
        }
        rep.memories += mems.len();
        if scopes.insert(id.to_string(), (scope, ids)).is_some() {
            return Err(invalid(format!("{path}.id"), format!("`{id}` repeats")));
        }
    }
    let mut asks = Vec::with_capacity(queries.len());
    for (i, q) in queries.iter().enumerate() {
        let path = format!("queries[{i}]");
        let corpus = str_field(q, &path, "corpus")?;
        let (scope, ids) = scopes
            .get(corpus)
            .ok_or_else(|| invalid(format!("{path}.corpus"), format!("no corpus `{corpus}`")))?;
        let query = str_field(q, &path, "query")?;
        let relevant: Vec<String> = field(q, &path, "relevant")?
            .as_array()
            .and_then(|a| a.iter().map(|x| x.as_str().map(String::from)).collect())
            .ok_or_else(|| invalid(format!("{path}.relevant"), "not a list of ids"))?;
        if relevant.is_empty() {
            return Err(invalid(format!("{path}.relevant"), "empty"));
        }
        if let Some(r) = relevant.iter().find(|r| !ids.contains(*r)) {
            return Err(invalid(
                format!("{path}.relevant"),
                format!("`{r}` is no memory of corpus `{corpus}`"),
            ));
        }
        let category = match q.get("category") {
            None | Some(serde_json::Value::Null) => "-".to_string(),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
        };
        asks.push((scope.clone(), query, relevant, category));
    }
    let t = Instant::now();
    if !opts.reuse {
        engine.remember_batch(batch, Confirm::No)?;
    }
    rep.timing.index_seconds = t.elapsed().as_secs_f64();
    let t = Instant::now();
    engine.embed_all(&mut |_, _| {})?;
    rep.timing.embed_seconds = t.elapsed().as_secs_f64();
    rep.timing.embedder = engine.embed_status()?.model;
    let kmax = *opts.ks.iter().max().unwrap_or(&10);
    let (mut lat, mut emb) = (Vec::new(), Vec::new());
    let mut scored: Vec<(String, Scored)> = Vec::new();
    for (scope, query, relevant, category) in asks {
        let t = Instant::now();
        let embedded = engine.query_vector(query)?.is_some();
        emb.push(embedded.then(|| t.elapsed()));
        let mut r = Recall::new(query, View::scope(scope));
        r.strategy = Some(opts.strategy);
        r.limit = kmax;
        r.touch = false;
        let t = Instant::now();
        let hits = engine.recall(&r)?;
        lat.push(t.elapsed());
        let keys: Vec<&str> = hits
            .iter()
            .map(|h| h.memory.key.as_deref().unwrap_or(""))
            .collect();
        let ev: HashSet<&str> = relevant.iter().map(String::as_str).collect();
        scored.push((category, measure(&keys, &ev, &opts.ks, 0)));
    }
    rep.queries = scored.len();
    rep.timing.latencies(&mut lat, &emb);
    let cats: HashSet<&str> = scored.iter().map(|(c, _)| c.as_str()).collect();
    for c in cats {
        let qs: Vec<&Scored> = scored
            .iter()
            .filter(|(x, _)| x == c)
            .map(|(_, s)| s)
            .collect();
        rep.by_category
            .insert(c.to_string(), aggregate(&opts.ks, &qs));
    }
    let all: Vec<&Scored> = scored.iter().map(|(_, s)| s).collect();
    rep.overall = aggregate(&opts.ks, &all);
    Ok(rep)
}

/// One question's hits at each k: `keys` are the ranked memories' keys,
/// `ev` the relevant ones.
fn measure(keys: &[&str], ev: &HashSet<&str>, ks: &[usize], category: u8) -> Scored {
    let ev_sessions: HashSet<&str> = ev.iter().map(|e| session_of(e)).collect();
    let mut sq = Scored {
        conversation: 0,
        category,
        recall: Vec::new(),
        any: Vec::new(),
        all: Vec::new(),
        session: Vec::new(),
        rr: keys
            .iter()
            .position(|k| ev.contains(k))
            .map_or(0.0, |p| 1.0 / (p as f64 + 1.0)),
    };
    for &k in ks {
        let top = &keys[..k.min(keys.len())];
        let found = ev.iter().filter(|e| top.contains(e)).count();
        sq.recall.push(found as f64 / ev.len() as f64);
        sq.any.push(f64::from(u8::from(found > 0)));
        sq.all.push(f64::from(u8::from(found == ev.len())));
        let sess = top.iter().any(|t| ev_sessions.contains(session_of(t)));
        sq.session.push(f64::from(u8::from(sess)));
    }
    sq
}
