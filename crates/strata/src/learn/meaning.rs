//! Preferences and topics learned from what the user's sentences mean.
//!
//! For each scope where a turn of the user changed, every turn of the user
//! there is read again, cut into sentences, and each sentence embedded with
//! the local model and classified ([`super::utterance`]). Then, within that
//! scope only (nothing learned for one user depends on another's words):
//!
//! - **preferences**: sentences the classifier calls a standing preference
//!   (probability at least `preference_min_probability`) are grouped by
//!   meaning (cosine with a group's centroid at least
//!   `preference_similarity`); a group stated in two sessions or more is one
//!   preference memory, keyed by the words of its first statement, whose
//!   content is its clearest statement and whose evidence is every one;
//! - **topics**: turns are read by their sentences that ask or tell
//!   something (small talk and stated preferences left out; a turn with
//!   an aside in it, "just this once" or "if I ever …", left out whole)
//!   and grouped the same way at `topic_similarity`;
//!   a group that comes up in `topic_min_sessions` sessions on two days or
//!   more, but not in nearly every session (that is how this user talks,
//!   not a topic), is a recurring topic named by its most frequent words.
//!
//! Groups are formed in the order things were said, so a group keeps its
//! first statement, and so its key, as later statements join.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;
use serde_json::json;

use super::utterance::{self, Classifier};
use super::{Evidence, Finding, LearnConfig, preference, topic, users_word};
use crate::Result;
use crate::embed::{Embedder, Purpose};
use crate::engine::Engine;
use crate::filter::Filter;
use crate::model::{Kind, Memory};
use crate::scope::{Scope, View};
use crate::store::Query;
use crate::text;

/// Sentences embedded per call.
const BATCH: usize = 64;
/// Longest sentence read, in bytes: a pasted log is not a preference.
const MAX_SENTENCE: usize = 400;
/// Fewest words a turn needs to be part of a topic ("ok, thanks" is not).
const TOPIC_MIN_WORDS: usize = 4;
/// Share of a scope's sessions above which a group is background, once
/// the scope has twice `topic_min_sessions` sessions.
const BACKGROUND: f64 = 0.75;

/// A stem's turns, and how often each of its forms was written.
type Count = (usize, BTreeMap<String, usize>);

/// What meaning found: preference and topic findings.
#[derive(Debug, Default)]
pub(super) struct Meant {
    pub preferences: Vec<Finding>,
    pub topics: Vec<Finding>,
}

/// One sentence of a user's turn, with its vector and class probabilities.
struct Read<'a> {
    memory: usize,
    text: &'a str,
    vector: Vec<f32>,
    p: [f32; 7],
}

impl Engine {
    /// The embedder meaning is read with: the configured one when it is
    /// the model the classifier was trained on; otherwise why not.
    pub(super) fn meaning_embedder(&self) -> std::result::Result<Arc<dyn Embedder>, String> {
        let c = Classifier::shipped();
        match self.embedder() {
            Ok(Some(e)) if e.model() == c.model => Ok(e),
            // The model under another folder name: the same weights.
            Ok(Some(e)) if e.is_local() && e.dim() == c.dim && self.default_model_weights() => {
                Ok(e)
            }
            Ok(Some(e)) => Err(format!(
                "learning by meaning needs the local model {} (the embedder is {}): \
                 preferences and topics are learned from phrases",
                c.model,
                e.model()
            )),
            Ok(None) => Err(format!(
                "no local model ({}; `strata model fetch`): preferences and topics are \
                 learned from phrases, not meaning",
                c.model
            )),
            Err(e) => Err(format!(
                "the local model did not open ({e}): preferences and topics are learned \
                 from phrases"
            )),
        }
    }

    /// Whether the local model's weights are the default model's (checked
    /// by their SHA-256), whatever its folder is called.
    fn default_model_weights(&self) -> bool {
        let weights = self.cfg.embedder.model_dir().join("model.safetensors");
        crate::embed::file_sha256(&weights).is_ok_and(|h| h == crate::embed::MINILM_SHA256)
    }

    /// Preferences and topics of the scopes where a turn of the user
    /// changed, read from meaning.
    pub(super) fn by_meaning(
        &self,
        embedder: &dyn Embedder,
        changed: &[Memory],
        cfg: &LearnConfig,
        now: Timestamp,
        notes: &mut Vec<String>,
    ) -> Result<Meant> {
        let dirty: BTreeSet<Scope> = changed
            .iter()
            .filter(|m| users_word(m) && reads(&m.kind))
            .map(|m| m.scope.clone())
            .collect();
        let turns = Filter::parse(&json!({"kind": {"$in": ["conversation", "note"]},
            "source": {"$nin": ["learned", "system"]}}))?;
        let classifier = Classifier::shipped();
        let mut out = Meant::default();
        for scope in dirty {
            let mut here: Vec<Memory> = self
                .store()
                .query(&Query::view(View::scope(scope.clone()), now).filter(turns.clone()))?
                .into_iter()
                .filter(users_word)
                .collect();
            here.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
            let mut sentences: Vec<(usize, &str)> = Vec::new();
            let mut foreign = 0;
            for (i, m) in here.iter().enumerate() {
                for s in utterance::sentences(&m.content) {
                    if s.len() > MAX_SENTENCE {
                        continue;
                    }
                    if english(s) {
                        sentences.push((i, s));
                    } else {
                        foreign += 1;
                    }
                }
            }
            if foreign > 0 {
                notes.push(format!(
                    "{scope}: {foreign} sentence(s) not in English were skipped (the classifier reads English)"
                ));
            }
            let mut read: Vec<Read> = Vec::with_capacity(sentences.len());
            let mut failed = 0;
            for chunk in sentences.chunks(BATCH) {
                let texts: Vec<&str> = chunk.iter().map(|(_, s)| *s).collect();
                match embedder.embed(&texts, Purpose::Document) {
                    Ok(vs) => {
                        for ((memory, text), vector) in chunk.iter().zip(vs) {
                            let p = classifier.probabilities(&vector, text);
                            read.push(Read {
                                memory: *memory,
                                text,
                                vector,
                                p,
                            });
                        }
                    }
                    Err(_) => failed += chunk.len(),
                }
            }
            if failed > 0 {
                notes.push(format!(
                    "{scope}: {failed} sentence(s) could not be embedded and were skipped"
                ));
            }
            out.preferences
                .extend(preferences(&scope, &here, &read, cfg));
            out.topics.extend(topics(&scope, &here, &read, cfg));
        }
        Ok(out)
    }
}

/// Words nearly every English sentence of four words or more has.
const ENGLISH: &[&str] = &[
    "the", "a", "an", "to", "of", "and", "i", "you", "is", "it", "in", "for", "on", "my", "me",
    "please", "can", "what", "how", "this", "that", "be", "are", "was", "with", "we", "do", "not",
    "so", "just", "at", "but", "if", "or", "no", "your", "i'm", "it's", "don't", "pls", "thanks",
];

/// Whether a sentence reads as English: a short one always does, a
/// longer one when it has a word from [`ENGLISH`] ("Bitte antworte auf
/// Deutsch, auch wenn ich Englisch schreibe" does not).
fn english(sentence: &str) -> bool {
    let words: Vec<String> = sentence
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'')
                .replace('’', "'")
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect();
    words.len() < 4 || words.iter().any(|w| ENGLISH.contains(&w.as_str()))
}

/// The kinds whose user turns meaning reads.
fn reads(kind: &Kind) -> bool {
    matches!(kind, Kind::Conversation | Kind::Note)
}

/// The content words of a sentence, stemmed, in order, courtesy left out.
fn stems(sentence: &str) -> Vec<(String, String)> {
    text::query_terms(sentence)
        .into_iter()
        .filter(|w| w.len() > 2 && w.chars().all(char::is_alphabetic))
        .filter(|w| {
            !matches!(
                w.as_str(),
                "please" | "thanks" | "thank" | "kindly" | "really"
            )
        })
        .map(|w| (text::stem(&w), w))
        .collect()
}

/// A key's last part that no other finding of the scope has yet.
fn unique(subject: String, taken: &mut BTreeSet<String>) -> String {
    let mut s = subject;
    let base = s.clone();
    let mut n = 2;
    while !taken.insert(s.clone()) {
        s = format!("{base}-{n}");
        n += 1;
    }
    s
}

fn preferences(scope: &Scope, here: &[Memory], read: &[Read], cfg: &LearnConfig) -> Vec<Finding> {
    // A group needs one sentence the classifier is sure of; others join
    // it at a third of that probability (a preference restated in
    // passing, "kilos obviously", reads less like one on its own).
    let sure = cfg.preference_min_probability;
    // A one-off request ("make this one shorter") joins nothing unless the
    // classifier is sure it is a standing preference after all.
    // An exception for the task at hand ("for this one I need a long
    // write-up") or someone else's taste ("my friend says …") is no
    // standing preference of the user's, however close in meaning.
    // A sentence the phrase detector reads as an instruction ("Always run
    // the linter before committing") is its: it keys each instruction by
    // its words, which tells apart instructions that meaning would merge
    // (one project's "always …" and "never …" are close in meaning).
    let stated: Vec<&Read> = read
        .iter()
        .filter(|r| preference::statements(r.text).is_empty())
        .filter(|r| {
            let p = f64::from(r.p[utterance::PREFERENCE]);
            (p >= sure || (p >= sure / 3.0 && best(&r.p) != utterance::REQUEST))
                && (p >= 0.9 || !(one_off(r.text) || reported(r.text)))
        })
        .collect();
    let vectors: Vec<&[f32]> = stated.iter().map(|r| r.vector.as_slice()).collect();
    let groups = utterance::group(&vectors, cfg.preference_similarity as f32);
    let mut by_group: BTreeMap<usize, Vec<&Read>> = BTreeMap::new();
    for (g, r) in groups.into_iter().zip(stated) {
        by_group.entry(g).or_default().push(r);
    }
    let mut taken = BTreeSet::new();
    let mut out = Vec::new();
    for members in by_group.values() {
        if members
            .iter()
            .all(|r| f64::from(r.p[utterance::PREFERENCE]) < sure)
        {
            continue;
        }
        let evidence = evidence_of(here, members.iter().map(|r| r.memory));
        let units: BTreeSet<&str> = evidence.iter().map(|e| e.unit.as_str()).collect();
        if units.len() < 2 {
            continue;
        }
        let mut words: Vec<String> = stems(members[0].text).into_iter().map(|(s, _)| s).collect();
        words.sort();
        words.dedup();
        words.truncate(6);
        if words.is_empty() {
            words.push("preference".into());
        }
        let subject = unique(words.join("-"), &mut taken);
        let clearest = members
            .iter()
            .max_by(|a, b| {
                a.p[utterance::PREFERENCE]
                    .total_cmp(&b.p[utterance::PREFERENCE])
                    .then(b.memory.cmp(&a.memory))
            })
            .map_or("", |r| r.text);
        out.push(Finding {
            scope: scope.clone(),
            detector: preference::NAME,
            subject: subject.clone(),
            kind: Kind::Preference,
            content: preference::capitalised(clearest),
            importance: 0.8,
            detail: json!({preference::NAME: {
                "stance": "prefer", "polarity": "do", "subject": subject,
                "by": "meaning", "statements": members.len(),
            }}),
            evidence,
            whole: true,
            at: None,
        });
    }
    out
}

/// Whether a sentence is about this once: "for this one", "this time".
fn one_off(text: &str) -> bool {
    let t = text.to_lowercase();
    [
        "this one",
        "this time",
        "for this",
        "for now",
        "just this",
        "right now",
        "today",
    ]
    .iter()
    .any(|p| t.contains(p))
}

/// Whether a sentence is an aside, not part of a thread the user keeps
/// coming back to: someone else's view ("my friend Ana says …"), a
/// request for this once ("just this once", "for this one"), or a
/// daydream ("if I ever …", "someday …").
fn aside(text: &str) -> bool {
    let t = text.to_lowercase().replace('’', "'");
    reported(text)
        || [
            "just this once",
            "this one time",
            "for this one",
            "only for this",
            "if i ever",
            "if we ever",
            "someday",
            "some day",
            "one day",
        ]
        .iter()
        .any(|p| t.contains(p))
}

/// Whether a sentence reports someone else's view ("my friend Ana says
/// …", "Oskar would hate this").
fn reported(text: &str) -> bool {
    let c = utterance::cues(text);
    let third = c[7] == 1.0;
    let t = text.to_lowercase();
    third
        && [
            " says", " said", " insists", " swears", " thinks", " would ", " wants",
        ]
        .iter()
        .any(|p| t.contains(p))
}

/// Like [`utterance::group`], but an item that shares a rare word with a
/// group's members gets `bonus` added to its similarity with that group.
fn group_with_words(
    vectors: &[&[f32]],
    rare: &[BTreeSet<&str>],
    threshold: f32,
    bonus: f32,
) -> Vec<usize> {
    let mut sums: Vec<Vec<f32>> = Vec::new();
    let mut said: Vec<BTreeSet<&str>> = Vec::new();
    let mut out = Vec::with_capacity(vectors.len());
    for (v, r) in vectors.iter().zip(rare) {
        let best = sums
            .iter()
            .zip(&said)
            .enumerate()
            .map(|(g, (s, w))| {
                let norm = s.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-9);
                let cos = s.iter().zip(*v).map(|(a, b)| a * b).sum::<f32>() / norm;
                let shared = if r.iter().any(|x| w.contains(x)) {
                    bonus
                } else {
                    0.0
                };
                (g, cos + shared)
            })
            .filter(|(_, sim)| *sim >= threshold)
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
        match best {
            Some((g, _)) => {
                for (s, x) in sums[g].iter_mut().zip(*v) {
                    *s += x;
                }
                said[g].extend(r.iter().copied());
                out.push(g);
            }
            None => {
                out.push(sums.len());
                sums.push(v.to_vec());
                said.push(r.clone());
            }
        }
    }
    out
}

/// The most probable class.
fn best(p: &[f32; 7]) -> usize {
    (0..p.len())
        .max_by(|a, b| p[*a].total_cmp(&p[*b]))
        .unwrap_or(utterance::STATEMENT)
}

/// Evidence of the memories at `indexes` of `here`, each once, in order.
fn evidence_of(here: &[Memory], indexes: impl Iterator<Item = usize>) -> Vec<Evidence> {
    let mut seen = BTreeSet::new();
    let mut out: Vec<Evidence> = indexes
        .filter(|i| seen.insert(*i))
        .map(|i| Evidence::of(&here[i]))
        .collect();
    out.sort();
    out
}

fn topics(scope: &Scope, here: &[Memory], read: &[Read], cfg: &LearnConfig) -> Vec<Finding> {
    // A turn's meaning: the mean of its sentences that ask or tell
    // something, facts included ("the down payment fund is at 62k now");
    // a stated preference is that detector's and small talk is nobody's,
    // and a turn with an aside in it ("just this once", "if I ever …",
    // "my friend says …") is left out whole: what follows an aside
    // continues it.
    let mut per_turn: BTreeMap<usize, (Vec<f32>, Vec<&str>, bool)> = BTreeMap::new();
    for r in read {
        let e = per_turn
            .entry(r.memory)
            .or_insert_with(|| (vec![0.0; r.vector.len()], Vec::new(), false));
        if aside(r.text) {
            e.2 = true;
            continue;
        }
        match best(&r.p) {
            utterance::PREFERENCE
                if f64::from(r.p[utterance::PREFERENCE]) >= cfg.preference_min_probability => {}
            utterance::SMALLTALK => {}
            _ if r.text.split_whitespace().count() >= TOPIC_MIN_WORDS => {
                for (s, x) in e.0.iter_mut().zip(&r.vector) {
                    *s += x;
                }
                e.1.push(r.text);
            }
            _ => {}
        }
    }
    let turns: Vec<(usize, Vec<f32>, Vec<&str>)> = per_turn
        .into_iter()
        .filter(|(_, (_, texts, other))| !texts.is_empty() && !other)
        .map(|(i, (mut v, texts, _))| {
            crate::embed::normalize(&mut v);
            (i, v, texts)
        })
        .collect();
    let vectors: Vec<&[f32]> = turns.iter().map(|(_, v, _)| v.as_slice()).collect();
    // The words that name a thread of this user's talk: said in more than
    // one turn, but not in many ("starter", "Airflow", "shoulder").
    let words: Vec<BTreeSet<String>> = turns
        .iter()
        .map(|(_, _, texts)| {
            texts
                .iter()
                .flat_map(|t| stems(t))
                .map(|(s, _)| s)
                .collect()
        })
        .collect();
    let mut df: BTreeMap<&str, usize> = BTreeMap::new();
    for w in &words {
        for s in w {
            *df.entry(s.as_str()).or_default() += 1;
        }
    }
    let most = (turns.len() / 10).max(3);
    let rare: Vec<BTreeSet<&str>> = words
        .iter()
        .map(|w| {
            w.iter()
                .map(String::as_str)
                .filter(|s| (2..=most).contains(&df[s]))
                .collect()
        })
        .collect();
    let groups = group_with_words(
        &vectors,
        &rare,
        cfg.topic_similarity as f32,
        cfg.topic_word_bonus as f32,
    );
    let mut by_group: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (k, g) in groups.into_iter().enumerate() {
        by_group.entry(g).or_default().push(k);
    }
    let sessions: BTreeSet<String> = here.iter().map(|m| Evidence::of(m).unit).collect();
    let mut taken = BTreeSet::new();
    let mut out = Vec::new();
    for members in by_group.values() {
        let evidence = evidence_of(here, members.iter().map(|k| turns[*k].0));
        let units: BTreeSet<&str> = evidence.iter().map(|e| e.unit.as_str()).collect();
        let days: BTreeSet<i64> = evidence
            .iter()
            .map(|e| e.at.as_second().div_euclid(86_400))
            .collect();
        if units.len() < cfg.topic_min_sessions || days.len() < 2 {
            continue;
        }
        if sessions.len() >= 2 * cfg.topic_min_sessions
            && units.len() as f64 > BACKGROUND * sessions.len() as f64
        {
            continue;
        }
        // Its words: the stems most of its turns name, as most often
        // written; the key from its first two turns, so it stays as the
        // topic grows.
        // Each stem: the turns naming it, and how often each form was written.
        let mut count: BTreeMap<String, Count> = BTreeMap::new();
        for k in members {
            let mut once = BTreeSet::new();
            for t in &turns[*k].2 {
                for (s, w) in stems(t) {
                    if once.insert(s.clone()) {
                        let e = count.entry(s).or_default();
                        e.0 += 1;
                        *e.1.entry(w).or_default() += 1;
                    }
                }
            }
        }
        let mut ranked: Vec<(&String, &Count)> = count.iter().collect();
        ranked.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(b.0)));
        let shown: Vec<String> = ranked
            .iter()
            .take(3)
            .filter_map(|(_, (_, forms))| {
                forms
                    .iter()
                    .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
                    .map(|(w, _)| w.clone())
            })
            .collect();
        let mut head: BTreeMap<String, usize> = BTreeMap::new();
        for k in members.iter().take(2) {
            for t in &turns[*k].2 {
                for (s, _) in stems(t) {
                    *head.entry(s).or_default() += 1;
                }
            }
        }
        let mut key: Vec<(&String, &usize)> = head.iter().collect();
        key.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let mut key: Vec<String> = key.into_iter().take(3).map(|(s, _)| s.clone()).collect();
        key.sort();
        if key.is_empty() || shown.is_empty() {
            continue;
        }
        let subject = unique(key.join("-"), &mut taken);
        let stems_shown: Vec<&String> = ranked.iter().take(3).map(|(s, _)| *s).collect();
        out.push(Finding {
            scope: scope.clone(),
            detector: topic::NAME,
            subject: subject.clone(),
            kind: Kind::Pattern,
            content: format!("Recurring topic: {}", shown.join(", ")),
            importance: 0.5,
            detail: json!({topic::NAME: {
                "subject": subject, "terms": shown, "stems": stems_shown,
                "sessions": units.len(), "by": "meaning",
            }}),
            evidence,
            whole: true,
            at: None,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_in_other_languages_are_told_apart() {
        assert!(english("I really prefer answers in bullet points."));
        assert!(english("kilos obviously"));
        assert!(english("tl;dr next time"));
        assert!(!english(
            "Bitte antworte auf Deutsch, auch wenn ich Englisch schreibe."
        ));
        assert!(!english("¿Puedes explicarme el subjuntivo otra vez?"));
    }

    #[test]
    fn one_offs_and_reported_taste_are_recognised() {
        assert!(one_off("For this one I need a long, detailed write-up."));
        assert!(!one_off("Keep answers short, please."));
        assert!(reported("my friend Ana says you should just give answers"));
        assert!(!reported("I say keep it short"));
    }

    #[test]
    fn asides_are_told_from_the_threads_a_user_returns_to() {
        assert!(aside("Just this once, give me the whole biology first."));
        assert!(aside("If I ever get a big bonus I'd blow it on a car."));
        assert!(aside("Someday I wanna take the slow train across Siberia."));
        assert!(aside("my brother says he'll never go back to inner tubes"));
        assert!(!aside(
            "The levain doubles in about 5 hours now. When should I use it?"
        ));
        assert!(!aside(
            "Back to the apartment plan: where do I end up after 4 years?"
        ));
    }
}
