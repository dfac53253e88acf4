//! Learning: detectors that read what agents remembered and write
//! `source = learned` memories. Upkeep runs them ([`Engine::learn`]); the
//! write path never does.
//!
//! Owns the learned-memory record ([`Learned`], under the payload's
//! `learned` field), its confidence, the watermark of what was already
//! examined, and a person's say over what was learned (confirm, reject).
//! The detectors live one per file: `preference` (stated preferences and
//! standing instructions), `failure` (repeated failures, with the fix
//! when a later finding names one) and `confusion` (topics the user said
//! were unclear and came back to), `fact` (where people live and work)
//! and `topic` (what the user keeps coming back to across sessions);
//! `consolidate` merges near-duplicates.
//!
//! A detector never deletes or edits a memory it reads: only its own
//! learned memories change. A learned memory is an ordinary memory (kind,
//! scope, key, history, `forget`): it lives in the scope of its evidence,
//! so a view that separates scopes separates what was learned from them,
//! and it is keyed `learned/<detector>/<subject>`, so learning the same
//! subject again supersedes it and keeps the old version in its history.
//!
//! The record is kept in the payload rather than in a table of its own:
//! it then needs no schema change in any store, travels whole through JSONL
//! export and import, and is filterable (`payload.learned.detector`).

mod change;
mod confusion;
mod consolidate;
mod fact;
mod failure;
mod llm;
mod meaning;
mod preference;
mod topic;
pub mod utterance;

pub use consolidate::CONSOLIDATED;
pub use llm::LlmRun;

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::Result;
use crate::engine::{Confirm, Engine, Forget, ForgetOptions, Patch};
use crate::error::Error;
use crate::filter::Filter;
use crate::model::{Kind, Memory, NewMemory, Role, Source};
use crate::scope::{Scope, View};
use crate::store::Query;

/// The scope of the watermark memory: outside every project, task and
/// global view, so no read sees it unless it names this scope.
const STATE_SCOPE: &str = "strata/learn";
/// Key of the watermark memory.
const WATERMARK_KEY: &str = "watermark";
/// Archive reason of a rejected learned memory.
pub const REJECTED: &str = "rejected";
/// Archive reason of a learned habit whose confidence fell below
/// `min_confidence`.
pub const FADED: &str = "faded";
/// Detectors whose findings are habits that fade when not seen again:
/// below `min_confidence` they are not surfaced. Facts (true until a newer
/// one says otherwise) and failures (a known fix stays a fix) do not fade.
const FADES: [&str; 3] = [preference::NAME, topic::NAME, confusion::NAME];
/// Most imported ids kept for the next run; a larger import moves the
/// watermark back instead.
const MAX_PENDING: usize = 10_000;
/// Most evidence ids one learned memory lists (the newest are kept): the
/// record stays a few KB however often a pattern recurs.
const MAX_EVIDENCE: usize = 100;

/// Learning settings (`[learning]` in `strata.toml`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LearnConfig {
    /// Whether upkeep runs the detectors (default true: upkeep is itself
    /// something a person or a scheduler starts).
    pub enabled: bool,
    /// Days after which a pattern not seen again has lost half its
    /// confidence (default 90: a standing instruction nobody has restated
    /// for a season is worth asking about again).
    pub half_life_days: f64,
    /// Occurrences of one failure before it is a pattern (default 2: the
    /// smallest number that is a repeat).
    pub min_failures: usize,
    /// Share of its words (Jaccard) a failure must have in common with a
    /// pattern's first failure to join it (default 1.0, the same
    /// signature: the same error with other values, line numbers or ids
    /// keeps every word, while one that names another service, file or
    /// table is another failure, however long the message; lower it to
    /// group messages that also carry varying words).
    pub failure_similarity: f64,
    /// Whether upkeep merges near-duplicate memories of one scope and kind
    /// (default true; the merged ones move to the archive, reason
    /// `consolidated`, and `restore` brings them back).
    pub consolidate: bool,
    /// Share of their word shingles (three words in a row) two memories
    /// must have in common to be merged (default 0.8: restatements that
    /// differ in case, punctuation or a word at either end; one changed
    /// word inside a ten-word memory already keeps them apart).
    pub consolidate_similarity: f64,
    /// Whether upkeep learns recurring topics (default true).
    pub topics: bool,
    /// Sessions a topic must come up in (default 3: twice can be chance,
    /// a third time is a habit).
    pub topic_min_sessions: usize,
    /// Share of the turns naming the rarer of two words that must name
    /// both for the pair to be a topic's core (default 0.7: words that
    /// belong together meet in most of their turns, words that meet by
    /// chance in few; the sweep in docs/learning.md).
    pub topic_min_share: f64,
    /// Confidence below which a proposed preference, topic or area of
    /// confusion is not written, and one already written moves to the
    /// archive (reason `faded`; a new mention learns it again) (default
    /// 0.02: a preference stated once gets there after about five
    /// half-lives without being said again, some 15 months at the default
    /// 90 days). 0 keeps every one. Confirmed ones never fade.
    pub min_confidence: f64,
    /// Whether upkeep also sends what changed to the `[summarizer]` chat
    /// endpoint for preferences and areas of confusion (default false: it
    /// costs money and sends memories off the machine).
    pub llm: bool,
    /// Most tokens of memories one run sends (default 20,000).
    pub llm_max_input_tokens: u32,
    /// Memories a request (default 40).
    pub llm_batch: usize,
    /// Price of 1,000 prompt tokens, for the run's cost (default 0).
    pub llm_cost_per_1k_input: f64,
    /// Price of 1,000 completion tokens (default 0).
    pub llm_cost_per_1k_output: f64,
    /// Whether preferences and topics are learned from what the user's
    /// sentences mean (the local model's vectors and the utterance
    /// classifier) when the local model is there (default true). Without
    /// it, or with this off, they are learned from phrases, and each run
    /// says so in its notes.
    pub meaning: bool,
    /// Probability the classifier must give a sentence of being a standing
    /// preference for it to start a preference (default 0.5); restatements
    /// join it from a third of that.
    pub preference_min_probability: f64,
    /// Similarity (cosine) a preference statement must have with a group's
    /// centroid to be the same preference (default 0.3, tuned on the tune
    /// half of the held-out histories).
    pub preference_similarity: f64,
    /// Similarity (cosine) a turn must have with a topic's centroid to
    /// be about it (default 0.42, tuned on both tuning files of the held-out histories).
    pub topic_similarity: f64,
    /// Added to that similarity when a turn shares a word with the topic's
    /// turns that few of the scope's turns say (default 0.1, tuned
    /// likewise; 0 reads vectors alone).
    pub topic_word_bonus: f64,
}

impl Default for LearnConfig {
    fn default() -> LearnConfig {
        LearnConfig {
            enabled: true,
            half_life_days: 90.0,
            min_failures: 2,
            failure_similarity: 1.0,
            consolidate: true,
            consolidate_similarity: 0.8,
            topics: true,
            topic_min_sessions: 3,
            topic_min_share: 0.7,
            min_confidence: 0.02,
            llm: false,
            llm_max_input_tokens: 20_000,
            llm_batch: 40,
            llm_cost_per_1k_input: 0.0,
            llm_cost_per_1k_output: 0.0,
            meaning: true,
            preference_min_probability: 0.5,
            preference_similarity: 0.3,
            topic_similarity: 0.42,
            topic_word_bonus: 0.1,
        }
    }
}

impl LearnConfig {
    /// Checks every value; errors name the key.
    pub fn validate(&self) -> Result<(), Error> {
        if !(self.half_life_days.is_finite() && self.half_life_days > 0.0) {
            return Err(Error::InvalidConfig(format!(
                "learning.half_life_days: {} must be a positive number",
                self.half_life_days
            )));
        }
        if self.min_failures < 2 {
            return Err(Error::InvalidConfig(format!(
                "learning.min_failures: {} must be at least 2",
                self.min_failures
            )));
        }
        if !(self.failure_similarity > 0.0 && self.failure_similarity <= 1.0) {
            return Err(Error::InvalidConfig(format!(
                "learning.failure_similarity: {} must be in (0, 1]",
                self.failure_similarity
            )));
        }
        if self.topic_min_sessions < 2 {
            return Err(Error::InvalidConfig(format!(
                "learning.topic_min_sessions: {} must be at least 2 (one session is not a recurrence)",
                self.topic_min_sessions
            )));
        }
        if !(self.topic_min_share > 0.0 && self.topic_min_share <= 1.0) {
            return Err(Error::InvalidConfig(format!(
                "learning.topic_min_share: {} must be in (0, 1]",
                self.topic_min_share
            )));
        }
        if !(self.min_confidence >= 0.0 && self.min_confidence < 1.0) {
            return Err(Error::InvalidConfig(format!(
                "learning.min_confidence: {} must be in [0, 1)",
                self.min_confidence
            )));
        }
        if self.llm_batch == 0 || self.llm_batch > 500 {
            return Err(Error::InvalidConfig(format!(
                "learning.llm_batch: {} must be between 1 and 500",
                self.llm_batch
            )));
        }
        for (k, v) in [
            ("llm_cost_per_1k_input", self.llm_cost_per_1k_input),
            ("llm_cost_per_1k_output", self.llm_cost_per_1k_output),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::InvalidConfig(format!(
                    "learning.{k}: {v} must be a price, 0 or more"
                )));
            }
        }
        for (k, v) in [
            (
                "preference_min_probability",
                self.preference_min_probability,
            ),
            ("preference_similarity", self.preference_similarity),
            ("topic_similarity", self.topic_similarity),
        ] {
            if !(v > 0.0 && v < 1.0) {
                return Err(Error::InvalidConfig(format!(
                    "learning.{k}: {v} must be in (0, 1)"
                )));
            }
        }
        if !(self.topic_word_bonus >= 0.0 && self.topic_word_bonus < 1.0) {
            return Err(Error::InvalidConfig(format!(
                "learning.topic_word_bonus: {} must be in [0, 1)",
                self.topic_word_bonus
            )));
        }
        if !(self.consolidate_similarity >= 0.5 && self.consolidate_similarity <= 1.0) {
            return Err(Error::InvalidConfig(format!(
                "learning.consolidate_similarity: {} must be in [0.5, 1] (below half, \
                 memories that say different things would merge)",
                self.consolidate_similarity
            )));
        }
        Ok(())
    }
}

/// Whether a person has looked at a learned memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LearnedStatus {
    /// Written by a detector; nobody has confirmed it.
    Proposed,
    /// Confirmed by a person: confidence 1, no decay.
    Confirmed,
}

/// The record a detector keeps with a learned memory, as the payload's
/// `learned` field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Learned {
    /// The detector that wrote it (`preference`, `failure`).
    pub detector: String,
    /// Ids of the memories it was learned from, oldest first.
    pub evidence: Vec<String>,
    /// Independent pieces of evidence: distinct sessions (or, for memories
    /// without one, distinct days).
    pub independent: usize,
    /// 0–1: grows with independent evidence, halves every
    /// `half_life_days` without new evidence.
    pub confidence: f64,
    /// When the earliest evidence was written.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub first_seen: Timestamp,
    /// When the latest evidence was written.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub last_seen: Timestamp,
    /// Proposed or confirmed.
    pub status: LearnedStatus,
}

impl Learned {
    /// The record of a learned memory; `None` for any other memory.
    pub fn of(m: &Memory) -> Option<Learned> {
        if m.source != Source::Learned {
            return None;
        }
        let v = m.payload.as_ref()?.get("learned")?;
        serde_json::from_value(v.clone()).ok()
    }
}

/// What one learning run did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LearnReport {
    /// Memories examined (written or changed since the last run).
    pub examined: usize,
    /// Learned memories written for the first time.
    pub learned: usize,
    /// Learned memories given new evidence or a new confidence.
    pub updated: usize,
    /// Learned memories deleted because all their evidence was forgotten.
    pub removed: usize,
    /// Patterns not learned again: their evidence was rejected before.
    pub rejected_skipped: usize,
    /// Near-duplicate memories merged into another (moved to the archive).
    #[serde(default)]
    pub consolidated: usize,
    /// Preferences, topics and areas of confusion not written or moved to
    /// the archive: their confidence is below `min_confidence`.
    #[serde(default)]
    pub faded: usize,
    /// What the LLM detector did, when it is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm: Option<LlmRun>,
    /// Whether preferences and topics were learned from meaning (the
    /// local model) rather than phrases.
    #[serde(default)]
    pub by_meaning: bool,
    /// What the run has to say about itself: why it learned from phrases
    /// only, sentences it could not read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One piece of evidence: a memory's id, time and session.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Evidence {
    at: Timestamp,
    id: String,
    /// The session, or the day for a memory without one.
    unit: String,
}

impl Evidence {
    fn of(m: &Memory) -> Evidence {
        let unit = match &m.session {
            Some(s) => format!("s:{s}"),
            None => format!("d:{}", m.created_at.as_second().div_euclid(86_400)),
        };
        Evidence {
            at: m.created_at,
            id: m.id.clone(),
            unit,
        }
    }
}

/// What a detector found: a learned memory to write or bring up to date.
#[derive(Debug)]
struct Finding {
    scope: Scope,
    detector: &'static str,
    /// The subject, the last part of the key.
    subject: String,
    kind: Kind,
    content: String,
    importance: f64,
    /// Detector-specific fields, kept beside `learned` in the payload.
    detail: serde_json::Value,
    evidence: Vec<Evidence>,
    /// Whether `evidence` is the whole pattern (replaces what the learned
    /// memory lists) or new evidence (added to it).
    whole: bool,
    /// When what it states became true (the statement's time), for the
    /// learned memory's version; `None`: now.
    at: Option<Timestamp>,
}

/// Confidence from `independent` pieces of evidence, each giving
/// `per_evidence`, last seen `days` ago: `1 − (1 − p)^n`, halved every
/// `half_life_days`.
fn confidence(per_evidence: f64, independent: usize, days: f64, half_life_days: f64) -> f64 {
    let base = 1.0 - (1.0 - per_evidence).powi(independent.min(64) as i32);
    let decay = 0.5f64.powf(days.max(0.0) / half_life_days);
    (base * decay * 1000.0).round() / 1000.0
}

fn days_between(a: Timestamp, b: Timestamp) -> f64 {
    (b.as_millisecond() - a.as_millisecond()) as f64 / 86_400_000.0
}

/// The confidence each detector's evidence gives, by detector name.
fn per_evidence(detector: &str) -> f64 {
    match detector {
        preference::NAME => preference::PER_EVIDENCE,
        confusion::NAME => confusion::PER_EVIDENCE,
        llm::NAME => llm::PER_EVIDENCE,
        fact::NAME => fact::PER_EVIDENCE,
        topic::NAME => topic::PER_EVIDENCE,
        _ => failure::PER_EVIDENCE,
    }
}

impl Engine {
    /// How learning reads preferences and topics in this engine: from
    /// meaning with the named model (`Ok`), or from phrases, and why
    /// (`Err`: no local model, another embedder, `learning.meaning` off).
    pub fn learning_by_meaning(&self) -> std::result::Result<String, String> {
        self.meaning_reader().map(|e| e.model().to_string())
    }

    /// The embedder learning reads meaning with, or why there is none.
    fn meaning_reader(
        &self,
    ) -> std::result::Result<std::sync::Arc<dyn crate::embed::Embedder>, String> {
        if !self.cfg.learning.meaning {
            return Err(
                "learning.meaning is off: preferences and topics are learned from phrases".into(),
            );
        }
        self.meaning_embedder()
    }

    /// Runs the detectors over what changed since the last run, then brings
    /// every learned memory's evidence and confidence up to date (forgotten
    /// evidence is dropped; a learned memory left without any is deleted).
    pub fn learn(&self) -> Result<LearnReport> {
        let cfg = self.cfg.learning.clone();
        let started = self.now();
        let since = self.watermark()?;
        let mut cond = json!({"source": {"$nin": ["learned", "system"]}});
        if let Some((t, _)) = &since {
            cond["updated_at"] = json!({"$gte": t.as_millisecond()});
        }
        let mut changed = self
            .store()
            .query(&Query::everything(started).filter(Filter::parse(&cond)?))?;
        if let Some((t, seen)) = &since {
            // A memory written in the watermark's millisecond after the last
            // run read the store is examined now; those it examined are not.
            changed.retain(|m| m.updated_at != *t || !seen.contains(&m.id));
        }
        // What imports brought with times before the watermark.
        let consumed = match self.keyed(&state_scope(), WATERMARK_KEY)? {
            Some(w) => pending_of(&w),
            None => BTreeSet::new(),
        };
        if !consumed.is_empty() {
            let have: BTreeSet<String> = changed.iter().map(|m| m.id.clone()).collect();
            let wanted: Vec<String> = consumed.difference(&have).cloned().collect();
            changed.extend(
                self.store()
                    .get_many(&wanted)?
                    .into_iter()
                    .filter(|m| !matches!(m.source, Source::Learned | Source::System)),
            );
        }
        let mut report = LearnReport {
            examined: changed.len(),
            ..LearnReport::default()
        };
        let reader = match self.meaning_reader() {
            Ok(e) => Some(e),
            Err(note) => {
                report.notes.push(note);
                None
            }
        };
        report.by_meaning = reader.is_some();
        let mut meant = meaning::Meant::default();
        if let Some(e) = &reader {
            meant = self.by_meaning(e.as_ref(), &changed, &cfg, started, &mut report.notes)?;
        }
        // Instructions said in the phrase detector's words are its, with
        // or without the model; meaning reads the rest.
        let mut findings = preference::detect(&changed);
        findings.append(&mut meant.preferences);
        let phrased = fact::detect(&changed);
        let mut changes = Vec::new();
        self.changes(&changed, &phrased, started, &mut changes)?;
        findings.extend(phrased);
        findings.append(&mut changes);
        // The failure detector looks at whole scopes (a repeat needs the
        // earlier failures), but only at scopes where something it reads
        // changed.
        let dirty: BTreeSet<Scope> = changed
            .iter()
            .filter(|m| failure::READS.contains(&m.kind.as_str()))
            .map(|m| m.scope.clone())
            .collect();
        let reads = Filter::parse(&json!({"kind": {"$in": failure::READS},
            "source": {"$nin": ["learned", "system"]}}))?;
        for scope in dirty {
            let here = self
                .store()
                .query(&Query::view(View::scope(scope), started).filter(reads.clone()))?;
            findings.extend(failure::detect(&here, &cfg));
        }
        // The confusion detector, likewise, reads the user's turns of the
        // scopes where the user said something was unclear or asked.
        let dirty: BTreeSet<Scope> = changed
            .iter()
            .filter(|m| {
                users_word(m)
                    && confusion::reads(&m.kind)
                    && (confusion::signals(m) || m.content.trim_end().ends_with('?'))
            })
            .map(|m| m.scope.clone())
            .collect();
        let turns = Filter::parse(&json!({"kind": {"$in": ["conversation", "note"]},
            "source": {"$nin": ["learned", "system"]}}))?;
        for scope in dirty {
            let here = self
                .store()
                .query(&Query::view(View::scope(scope.clone()), started).filter(turns.clone()))?;
            findings.extend(confusion::detect(&scope, &here));
        }
        if cfg.llm {
            report.llm = Some(llm::detect(
                self.cfg.summarizer.as_ref(),
                self.token_counter(),
                &cfg,
                &changed,
                &mut findings,
            ));
        }
        for f in findings {
            self.apply(f, &cfg, &mut report)?;
        }
        if cfg.topics {
            // After the others: turns they learned from are theirs.
            let topics = if reader.is_some() {
                meant.topics
            } else {
                self.topics(&changed, &cfg, started)?
            };
            for f in topics {
                self.apply(f, &cfg, &mut report)?;
            }
        }
        if cfg.consolidate {
            report.consolidated = self.consolidate(&changed, &cfg, started)?;
        }
        self.refresh(&cfg, &mut report)?;
        let seen: Vec<&str> = changed
            .iter()
            .filter(|m| m.updated_at == started)
            .map(|m| m.id.as_str())
            .collect();
        self.set_watermark(started, &seen, &consumed)?;
        Ok(report)
    }

    /// Recurring topics of the scopes where the user's turns or notes
    /// changed (see `topic.rs`): each such scope is clustered again whole,
    /// the others not at all.
    fn topics(
        &self,
        changed: &[Memory],
        cfg: &LearnConfig,
        now: Timestamp,
    ) -> Result<Vec<Finding>> {
        let dirty: BTreeSet<Scope> = changed
            .iter()
            .filter(|m| topic::reads(m))
            .map(|m| m.scope.clone())
            .collect();
        if dirty.is_empty() {
            return Ok(Vec::new());
        }
        // Every scope's turns: which words are common across the store is
        // read from all of them (one query, words only); only the scopes
        // that changed are clustered.
        let turns = Filter::parse(&json!({"kind": {"$in": ["conversation", "note"]},
            "source": {"$nin": ["learned", "system"]}}))?;
        let mut by_scope: BTreeMap<Scope, Vec<Memory>> = BTreeMap::new();
        for m in self.store().query(&Query::everything(now).filter(turns))? {
            by_scope.entry(m.scope.clone()).or_default().push(m);
        }
        let common = topic::common_words(by_scope.values().map(Vec::as_slice));
        // What was learned, and the topics a person rejected (which keep
        // their subjects, so the same evidence finds the rejection under
        // its key): one query each, for every scope.
        let learned = Filter::parse(&json!({"source": "learned"}))?;
        let mut explained: BTreeMap<Scope, BTreeSet<String>> = BTreeMap::new();
        let mut known: BTreeMap<Scope, Vec<topic::Known>> = BTreeMap::new();
        let mut mine = |m: &Memory, l: Learned| {
            let subject = m
                .key
                .as_deref()
                .and_then(|k| k.strip_prefix("learned/topic/"))
                .map(String::from);
            if let Some(subject) = subject {
                known
                    .entry(m.scope.clone())
                    .or_default()
                    .push(topic::Known {
                        subject,
                        evidence: l.evidence.into_iter().collect(),
                    });
            }
        };
        for m in self
            .store()
            .query(&Query::everything(now).filter(learned.clone()))?
        {
            let Some(l) = Learned::of(&m) else { continue };
            if l.detector == topic::NAME {
                mine(&m, l);
            } else if dirty.contains(&m.scope) {
                explained
                    .entry(m.scope.clone())
                    .or_default()
                    .extend(l.evidence);
            }
        }
        for a in self.archived_everywhere(&Query::everything(now).filter(learned))? {
            if a.reason != REJECTED {
                continue;
            }
            if let Some(l) = Learned::of(&a.memory).filter(|l| l.detector == topic::NAME) {
                mine(&a.memory, l);
            }
        }
        let p = topic::Params {
            min_sessions: cfg.topic_min_sessions,
            min_share: cfg.topic_min_share,
        };
        let none = BTreeSet::new();
        let mut out = Vec::new();
        for scope in dirty {
            out.extend(topic::detect(
                &scope,
                by_scope.get(&scope).map_or(&[][..], Vec::as_slice),
                explained.get(&scope).unwrap_or(&none),
                known.get(&scope).map_or(&[][..], Vec::as_slice),
                &common,
                p,
            ));
        }
        Ok(out)
    }

    /// Merges near-duplicates of what changed (see `consolidate.rs`);
    /// returns how many memories moved into another.
    fn consolidate(&self, changed: &[Memory], cfg: &LearnConfig, now: Timestamp) -> Result<usize> {
        let buckets: BTreeSet<(Scope, String)> = changed
            .iter()
            .filter(|m| consolidate::eligible(m))
            .map(|m| (m.scope.clone(), m.kind.as_str().to_string()))
            .collect();
        let ids: BTreeSet<&str> = changed.iter().map(|m| m.id.as_str()).collect();
        let mut moved = 0;
        for (scope, kind) in buckets {
            let f = Filter::parse(&json!({"kind": kind}))?;
            let mut peers: Vec<Memory> = self
                .store()
                .query(&Query::view(View::scope(scope), now).filter(f))?
                .into_iter()
                .filter(consolidate::eligible)
                .collect();
            // A memory that another lists as merged but that is active was
            // restored by a person: it stays apart.
            let restored: BTreeSet<String> = peers.iter().flat_map(consolidated_from).collect();
            peers.retain(|m| !restored.contains(&m.id));
            for g in consolidate::groups(peers, &ids, cfg.consolidate_similarity) {
                moved += self.merge(g, now)?;
            }
        }
        Ok(moved)
    }

    /// Merges a group into its earliest memory, then archives the rest.
    /// The kept memory changes first, listing what it took in: a crash
    /// before the archive leaves the others active beside it (nothing is
    /// lost; they count as restored and stay apart).
    fn merge(&self, g: consolidate::Group, now: Timestamp) -> Result<usize> {
        let consolidate::Group { keep, merged } = g;
        let mut payload = keep.payload.clone().unwrap_or_else(|| json!({}));
        let Some(obj) = payload.as_object_mut() else {
            // A payload that is not an object has no room for provenance.
            return Ok(0);
        };
        let mut from = consolidated_from(&keep);
        for m in &merged {
            for id in std::iter::once(m.id.clone()).chain(consolidated_from(m)) {
                if !from.contains(&id) {
                    from.push(id);
                }
            }
        }
        obj.insert(
            "consolidated".into(),
            json!({"from": from, "at": now.to_string()}),
        );
        let all = || std::iter::once(&keep).chain(merged.iter());
        let longest = all()
            .max_by(|a, b| {
                a.content
                    .len()
                    .cmp(&b.content.len())
                    .then(b.created_at.cmp(&a.created_at))
            })
            .map_or_else(|| keep.content.clone(), |m| m.content.clone());
        let mut tags = keep.tags.clone();
        for t in merged.iter().flat_map(|m| &m.tags) {
            if !tags.contains(t) {
                tags.push(t.clone());
            }
        }
        let importance = all().map(|m| m.importance).fold(keep.importance, f64::max);
        let patch = Patch {
            content: (longest != keep.content).then_some(longest),
            payload: Some(Some(payload)),
            tags: Some(tags),
            importance: Some(importance),
            sensitive: Some(all().any(|m| m.sensitive)),
            ..Patch::default()
        };
        match self.update(&keep.id, patch, keep.version) {
            Ok(_) => {}
            // Changed since it was read: the next run looks again.
            Err(Error::VersionConflict { .. }) => return Ok(0),
            Err(e) => return Err(e),
        }
        let ids: Vec<String> = merged.iter().map(|m| m.id.clone()).collect();
        self.store().archive(&ids, CONSOLIDATED, now)
    }

    /// Facts said as a change ("ditched Barclays, moved to Starling"),
    /// read over the whole scope of each changed user turn that may say
    /// one: what ended must have been said in an earlier turn there.
    fn changes(
        &self,
        changed: &[Memory],
        phrased: &[Finding],
        now: Timestamp,
        findings: &mut Vec<Finding>,
    ) -> Result<()> {
        let dirty: BTreeSet<Scope> = changed
            .iter()
            .filter(|m| users_word(m) && change::may_say_a_change(&m.content))
            .map(|m| m.scope.clone())
            .collect();
        if dirty.is_empty() {
            return Ok(());
        }
        let fresh: BTreeSet<&str> = changed.iter().map(|m| m.id.as_str()).collect();
        let taken: BTreeSet<&str> = phrased
            .iter()
            .flat_map(|f| f.evidence.iter().map(|e| e.id.as_str()))
            .collect();
        let theirs = Filter::parse(&json!({"source": {"$nin": ["learned", "system"]}}))?;
        let learned = Filter::parse(&json!({"source": "learned"}))?;
        for scope in dirty {
            let mut here: Vec<Memory> = self
                .store()
                .query(&Query::view(View::scope(scope.clone()), now).filter(theirs.clone()))?
                .into_iter()
                .filter(users_word)
                .collect();
            here.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
            let turns: Vec<&Memory> = here.iter().collect();
            let detail = |d: &serde_json::Value| {
                Some(change::Known {
                    subject: d.pointer("/fact/subject")?.as_str()?.to_string(),
                    attribute: d.pointer("/fact/attribute")?.as_str()?.to_string(),
                    value: d.pointer("/fact/value")?.as_str()?.to_string(),
                })
            };
            let mut known: Vec<change::Known> = phrased
                .iter()
                .filter(|f| f.scope == scope)
                .filter_map(|f| detail(&f.detail))
                .collect();
            known.extend(
                self.store()
                    .query(&Query::view(View::scope(scope.clone()), now).filter(learned.clone()))?
                    .iter()
                    .filter_map(|m| m.payload.as_ref().and_then(detail)),
            );
            findings.extend(change::detect(&turns, &fresh, &taken, &known));
        }
        Ok(())
    }

    /// Every learned memory in `view`, highest confidence first.
    pub fn learned(&self, view: &View) -> Result<Vec<(Memory, Learned)>> {
        let f = Filter::parse(&json!({"source": "learned"}))?;
        let mut out: Vec<(Memory, Learned)> = self
            .store()
            .query(&Query::view(view.clone(), self.now()).filter(f))?
            .into_iter()
            .filter_map(|m| Learned::of(&m).map(|l| (m, l)))
            .collect();
        out.sort_by(|a, b| {
            b.1.confidence
                .partial_cmp(&a.1.confidence)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| b.0.id.cmp(&a.0.id))
        });
        Ok(out)
    }

    /// A learned memory by id, with its record; an error when `id` is not
    /// a learned memory.
    pub fn learned_one(&self, id: &str) -> Result<(Memory, Learned)> {
        let m = self.get(id)?.ok_or_else(|| Error::NotFound(id.into()))?;
        let l = Learned::of(&m).ok_or_else(|| {
            Error::field(
                "id",
                format!("memory `{id}` is not a learned memory (no `learned` record)"),
            )
        })?;
        Ok((m, l))
    }

    /// A person confirms a learned memory: confidence 1, no decay, kept
    /// through later runs.
    pub fn confirm_learned(&self, id: &str) -> Result<Memory> {
        let (m, mut l) = self.learned_one(id)?;
        l.status = LearnedStatus::Confirmed;
        l.confidence = 1.0;
        self.update(&m.id, record_patch(&m, &l)?, m.version)
    }

    /// A person rejects a learned memory: it moves to the archive (reason
    /// `rejected`, kept with its evidence), and the same evidence never
    /// teaches it again.
    pub fn reject_learned(&self, id: &str) -> Result<Memory> {
        let (m, _) = self.learned_one(id)?;
        self.store()
            .archive(std::slice::from_ref(&m.id), REJECTED, self.now())?;
        Ok(m)
    }

    /// The evidence of a learned memory that still exists, oldest first.
    pub fn learned_evidence(&self, id: &str) -> Result<Vec<Memory>> {
        let (_, l) = self.learned_one(id)?;
        let mut ms = self.store().get_many(&l.evidence)?;
        ms.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        Ok(ms)
    }

    /// When the last run read the store, and the ids it examined that were
    /// written in that very millisecond.
    fn watermark(&self) -> Result<Option<(Timestamp, BTreeSet<String>)>> {
        let Some(p) = self
            .keyed(&state_scope(), WATERMARK_KEY)?
            .and_then(|m| m.payload)
        else {
            return Ok(None);
        };
        let Some(at) = p
            .get("examined_until_ms")
            .and_then(|v| v.as_i64())
            .and_then(|x| Timestamp::from_millisecond(x).ok())
        else {
            return Ok(None);
        };
        let seen = p
            .get("seen_at_watermark")
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        Ok(Some((at, seen)))
    }

    /// Replaces the watermark memory. The old one is forgotten first, so
    /// the watermark keeps no history; a crash in between loses only the
    /// watermark, and the next run examines everything again (findings
    /// merge idempotently).
    fn set_watermark(
        &self,
        at: Timestamp,
        seen: &[&str],
        consumed: &BTreeSet<String>,
    ) -> Result<()> {
        // Imports that came while this run read keep their place in line.
        let mut pending = BTreeSet::new();
        if let Some(old) = self.keyed(&state_scope(), WATERMARK_KEY)? {
            pending = pending_of(&old);
            self.forget(&Forget::Id(old.id), ForgetOptions::default())?;
        }
        let pending: Vec<String> = pending.difference(consumed).cloned().collect();
        self.write_watermark(
            format!("Learning has examined every memory written or changed before {at}."),
            json!({"examined_until_ms": at.as_millisecond(), "seen_at_watermark": seen,
                "pending": pending}),
        )
    }

    /// Writes the watermark memory (the old one is forgotten first).
    fn write_watermark(&self, content: String, payload: serde_json::Value) -> Result<()> {
        let n = NewMemory::new(state_scope(), content)
            .kind(Kind::Context)
            .key(WATERMARK_KEY)
            .source(Source::System)
            .pinned(true)
            .payload(payload);
        self.remember(n)?;
        Ok(())
    }

    /// Marks imported memories for the next run when their time is before
    /// the watermark (an import keeps the times it brings, which the run
    /// would otherwise never look at again).
    pub(crate) fn learn_later<'a>(&self, imported: impl Iterator<Item = &'a Memory>) -> Result<()> {
        let Some((at, _)) = self.watermark()? else {
            // Learning has not run yet: its first run reads everything.
            return Ok(());
        };
        let late: Vec<&Memory> = imported.filter(|m| m.updated_at <= at).collect();
        let Some(earliest) = late.iter().map(|m| m.updated_at).min() else {
            return Ok(());
        };
        let Some(old) = self.keyed(&state_scope(), WATERMARK_KEY)? else {
            return Ok(());
        };
        let mut payload = match old.payload.clone() {
            Some(p) if p.is_object() => p,
            _ => json!({}),
        };
        let mut pending = pending_of(&old);
        if pending.len() + late.len() <= MAX_PENDING {
            pending.extend(late.iter().map(|m| m.id.clone()));
        } else {
            // A large import: the watermark goes back to its earliest time
            // instead (the next run reads everything written since; an
            // older statement never supersedes a newer fact).
            let back = earliest - jiff::SignedDuration::from_millis(1);
            payload["examined_until_ms"] = json!(back.as_millisecond().min(at.as_millisecond()));
            payload["seen_at_watermark"] = json!([]);
        }
        payload["pending"] = json!(pending);
        self.forget(&Forget::Id(old.id.clone()), ForgetOptions::default())?;
        self.write_watermark(old.content.clone(), payload)
    }

    /// The active memory under (scope, key).
    fn keyed(&self, scope: &Scope, key: &str) -> Result<Option<Memory>> {
        let f = Filter::parse(&json!({"key": key}))?;
        Ok(self
            .store()
            .query(
                &Query::view(View::scope(scope.clone()), self.now())
                    .filter(f)
                    .include_expired(true)
                    .limit(1),
            )?
            .into_iter()
            .next())
    }

    /// Writes a finding as a learned memory, or merges it into the one
    /// already under its key.
    fn apply(&self, f: Finding, cfg: &LearnConfig, report: &mut LearnReport) -> Result<()> {
        let key = format!("learned/{}/{}", f.detector, f.subject);
        let existing = self.keyed(&f.scope, &key)?;
        if existing.as_ref().is_some_and(|m| Learned::of(m).is_none()) {
            // Someone else's memory holds the key: theirs stands.
            return Ok(());
        }
        let rejected = self.rejected_evidence(&f.scope, &key)?;
        if f.evidence.iter().all(|e| rejected.contains(&e.id)) {
            report.rejected_skipped += 1;
            return Ok(());
        }
        let old = existing.as_ref().and_then(Learned::of);
        let mut status = old.as_ref().map_or(LearnedStatus::Proposed, |o| o.status);
        let mut fresh = f.evidence.clone();
        // A stance that turns ("always …" after "never …") starts over: the
        // old statement stays in the key's history, valid until now.
        let stance = format!("/{}/polarity", f.detector);
        let turned = existing
            .as_ref()
            .and_then(|m| m.payload.as_ref())
            .and_then(|p| p.pointer(&stance))
            .is_some_and(|s| Some(s) != f.detail.pointer(&stance));
        if turned
            && f.at
                .is_some_and(|at| existing.as_ref().is_some_and(|m| m.updated_at > at))
        {
            // An older statement (an import, a run that reads a scope
            // again) never supersedes what was said since.
            return Ok(());
        }
        if turned {
            // What a person confirmed was the old stance.
            status = LearnedStatus::Proposed;
        }
        if !f.whole && !turned {
            // New evidence joins what is still listed; rejected evidence
            // teaches nothing.
            fresh.retain(|e| !rejected.contains(&e.id));
            if let Some(o) = &old {
                let known: BTreeSet<String> = fresh.iter().map(|e| e.id.clone()).collect();
                let kept = self.evidence_kept(&o.evidence)?;
                fresh.extend(
                    kept.iter()
                        .filter(|m| !known.contains(&m.id))
                        .map(Evidence::of),
                );
            }
        }
        fresh.sort();
        fresh.dedup_by(|a, b| a.id == b.id);
        if fresh.len() > MAX_EVIDENCE {
            fresh.drain(..fresh.len() - MAX_EVIDENCE);
        }
        let record = self.record(f.detector, &fresh, status, cfg);
        if fades(&record, cfg) {
            if let Some(m) = &existing {
                self.store()
                    .archive(std::slice::from_ref(&m.id), FADED, self.now())?;
            }
            report.faded += 1;
            return Ok(());
        }
        let same = old.as_ref().is_some_and(|o| {
            o.evidence == record.evidence
                && existing.as_ref().is_some_and(|m| m.content == f.content)
        });
        if same {
            return Ok(());
        }
        let mut payload = json!({"learned": record});
        if let (Some(obj), Some(detail)) = (payload.as_object_mut(), f.detail.as_object()) {
            for (k, v) in detail {
                obj.insert(k.clone(), v.clone());
            }
        }
        let mut n = NewMemory::new(f.scope.clone(), f.content)
            .kind(f.kind)
            .key(key)
            .importance(f.importance)
            .source(Source::Learned)
            .tag("learned")
            .tag(format!("detector:{}", f.detector))
            .payload(payload);
        if let Some(t) = f.at {
            // The version's time is when it became true.
            n = n.created_at(t);
        }
        self.remember_with(n, Confirm::Yes)?;
        if existing.is_some() {
            report.updated += 1;
        } else {
            report.learned += 1;
        }
        Ok(())
    }

    /// The record for `evidence` at the current time.
    fn record(
        &self,
        detector: &str,
        evidence: &[Evidence],
        status: LearnedStatus,
        cfg: &LearnConfig,
    ) -> Learned {
        let units: BTreeSet<&String> = evidence.iter().map(|e| &e.unit).collect();
        let first = evidence
            .iter()
            .map(|e| e.at)
            .min()
            .unwrap_or_else(|| self.now());
        let last = evidence
            .iter()
            .map(|e| e.at)
            .max()
            .unwrap_or_else(|| self.now());
        let c = match status {
            LearnedStatus::Confirmed => 1.0,
            LearnedStatus::Proposed => confidence(
                per_evidence(detector),
                units.len(),
                days_between(last, self.now()),
                cfg.half_life_days,
            ),
        };
        Learned {
            detector: detector.to_string(),
            evidence: evidence.iter().map(|e| e.id.clone()).collect(),
            independent: units.len(),
            confidence: c,
            first_seen: first,
            last_seen: last,
            status,
        }
    }

    /// The memories of `ids` that still exist: active, archived or in the
    /// cold tier. Only `forget` takes evidence away; archiving and
    /// demotion move it.
    fn evidence_kept(&self, ids: &[String]) -> Result<Vec<Memory>> {
        let mut kept = self.store().get_many(ids)?;
        if kept.len() < ids.len() {
            let active: BTreeSet<String> = kept.iter().map(|m| m.id.clone()).collect();
            for id in ids.iter().filter(|id| !active.contains(*id)) {
                if let Some(a) = self.get_archived(id)? {
                    kept.push(a.memory);
                }
            }
        }
        Ok(kept)
    }

    /// Ids of the evidence of rejected learned memories under (scope, key).
    fn rejected_evidence(&self, scope: &Scope, key: &str) -> Result<BTreeSet<String>> {
        let f = Filter::parse(&json!({"key": key}))?;
        // Rejected memories may have moved on to the cold tier.
        let archived = self
            .archived_everywhere(&Query::view(View::scope(scope.clone()), self.now()).filter(f))?;
        Ok(archived
            .into_iter()
            .filter(|a| a.reason == REJECTED)
            .filter_map(|a| Learned::of(&a.memory))
            .flat_map(|l| l.evidence)
            .collect())
    }

    /// Drops forgotten evidence from every learned memory, deletes those
    /// left without any, and lets confidence decay.
    fn refresh(&self, cfg: &LearnConfig, report: &mut LearnReport) -> Result<()> {
        let f = Filter::parse(&json!({"source": "learned"}))?;
        let all = self
            .store()
            .query(&Query::everything(self.now()).filter(f))?;
        for m in all {
            let Some(l) = Learned::of(&m) else { continue };
            let alive = self.evidence_kept(&l.evidence)?;
            let minimum = match l.detector.as_str() {
                failure::NAME => cfg.min_failures,
                confusion::NAME => confusion::MIN_EVIDENCE,
                topic::NAME => cfg.topic_min_sessions,
                _ => 1,
            };
            let failures = if l.detector == topic::NAME {
                // A topic counts the sessions it came up in.
                alive
                    .iter()
                    .map(|e| Evidence::of(e).unit)
                    .collect::<BTreeSet<_>>()
                    .len()
            } else {
                alive
                    .iter()
                    .filter(|e| l.detector != failure::NAME || failure::is_failure(e))
                    .count()
            };
            if alive.is_empty() || failures < minimum {
                self.forget(&Forget::Id(m.id.clone()), ForgetOptions::default())?;
                report.removed += 1;
                continue;
            }
            let mut ev: Vec<Evidence> = alive.iter().map(Evidence::of).collect();
            ev.sort();
            let next = self.record(&l.detector, &ev, l.status, cfg);
            if fades(&next, cfg) {
                self.store()
                    .archive(std::slice::from_ref(&m.id), FADED, self.now())?;
                report.faded += 1;
                continue;
            }
            // A confidence that moved less than this says nothing new, and
            // each rewrite keeps a version in the memory's history.
            if next.evidence == l.evidence && (next.confidence - l.confidence).abs() < 0.05 {
                continue;
            }
            self.update(&m.id, record_patch(&m, &next)?, m.version)?;
            report.updated += 1;
        }
        Ok(())
    }
}

/// Whether a learned record is a habit that has faded below the floor.
fn fades(l: &Learned, cfg: &LearnConfig) -> bool {
    l.status == LearnedStatus::Proposed
        && FADES.contains(&l.detector.as_str())
        && l.confidence < cfg.min_confidence
}

/// The ids a memory took in by consolidation (its payload's
/// `consolidated.from`).
fn consolidated_from(m: &Memory) -> Vec<String> {
    ids_at(m, "/consolidated/from")
}

/// The strings of the array at `pointer` in a memory's payload.
fn ids_at(m: &Memory, pointer: &str) -> Vec<String> {
    m.payload
        .as_ref()
        .and_then(|p| p.pointer(pointer))
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// A patch replacing the `learned` record of `m`'s payload.
fn record_patch(m: &Memory, l: &Learned) -> Result<Patch> {
    let mut payload = m.payload.clone().unwrap_or_else(|| json!({}));
    let obj = payload
        .as_object_mut()
        .ok_or_else(|| Error::field("payload", "a learned memory's payload is not an object"))?;
    obj.insert(
        "learned".into(),
        serde_json::to_value(l).map_err(|e| Error::field("payload", e))?,
    );
    Ok(Patch {
        payload: Some(Some(payload)),
        ..Patch::default()
    })
}

/// The ids an import marked for the next run.
fn pending_of(watermark: &Memory) -> BTreeSet<String> {
    ids_at(watermark, "/pending").into_iter().collect()
}

fn state_scope() -> Scope {
    Scope::parse(STATE_SCOPE).unwrap_or_else(|_| Scope::global())
}

/// Whether a memory speaks for the user: written by them or by a person or
/// agent on their behalf, not by the assistant, a tool or the system.
fn users_word(m: &Memory) -> bool {
    !matches!(m.role, Some(Role::Assistant | Role::Tool | Role::System))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confidence_grows_with_evidence_and_decays_without() {
        let one = confidence(0.6, 1, 0.0, 90.0);
        let two = confidence(0.6, 2, 0.0, 90.0);
        assert_eq!(one, 0.6);
        assert!(two > one && two < 1.0, "{two}");
        assert_eq!(confidence(0.6, 1, 90.0, 90.0), 0.3);
        assert!(confidence(0.6, 1, 400.0, 90.0) < 0.05);
    }

    #[test]
    fn min_confidence_is_checked() {
        for bad in [-0.1, 1.0, f64::NAN] {
            let c = LearnConfig {
                min_confidence: bad,
                ..LearnConfig::default()
            };
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains("learning.min_confidence"), "{e}");
        }
    }

    #[test]
    fn config_errors_name_the_key() {
        let bad = LearnConfig {
            min_failures: 1,
            ..LearnConfig::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("learning.min_failures")
        );
        let bad = LearnConfig {
            failure_similarity: 0.0,
            ..LearnConfig::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("failure_similarity")
        );
        for (bad, key) in [
            (
                LearnConfig {
                    preference_similarity: 1.5,
                    ..LearnConfig::default()
                },
                "learning.preference_similarity",
            ),
            (
                LearnConfig {
                    preference_min_probability: 0.0,
                    ..LearnConfig::default()
                },
                "learning.preference_min_probability",
            ),
            (
                LearnConfig {
                    topic_similarity: f64::NAN,
                    ..LearnConfig::default()
                },
                "learning.topic_similarity",
            ),
            (
                LearnConfig {
                    topic_word_bonus: -0.1,
                    ..LearnConfig::default()
                },
                "learning.topic_word_bonus",
            ),
        ] {
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        }
        assert!(LearnConfig::default().validate().is_ok());
        let mut c = crate::Config::default();
        let e = c
            .apply_toml("[learning]\nmin_failures = 1\n", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("learning.min_failures"), "{e}");
        let e = c
            .apply_toml("[learning]\nhalf_lives = 3\n", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("half_lives"), "{e}");
        let e = c
            .apply_toml("[learning]\ntopic_min_share = 0.0\n", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("learning.topic_min_share"), "{e}");
        c.apply_toml("[learning]\nenabled = false\nhalf_life_days = 30.0\n", None)
            .unwrap();
        assert!(!c.learning.enabled);
        assert_eq!(c.learning.half_life_days, 30.0);
    }
}
