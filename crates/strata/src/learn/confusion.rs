//! The confusion detector: topics the user said they did not understand,
//! and came back to.
//!
//! It is anchored on what the user says about their own understanding
//! ("I still don't understand …", "I'm confused", "that doesn't make
//! sense", "what do you mean", "can you explain it again"), never on a
//! question alone: people ask again for many reasons (a recurring need, a
//! new day, small talk), and an area of confusion is one they said was
//! unclear. The topic of such a turn is its own content words, or, for one
//! with too few ("I still don't get it"), those of the user's question just
//! before it in the session. Questions on the same topic (sharing half of
//! all their content words) asked before or after are evidence too: the
//! same question asked again. An area needs two pieces of evidence.

use std::collections::BTreeSet;

use super::{Evidence, Finding, users_word};
use crate::model::{Kind, Memory};
use crate::scope::Scope;
use crate::text;

/// The detector's name.
pub(super) const NAME: &str = "confusion";
/// Confidence of one piece of evidence (0.4: saying something is unclear
/// once is weak; twice in other sessions makes 0.64).
pub(super) const PER_EVIDENCE: f64 = 0.4;
/// Pieces of evidence an area needs.
pub(super) const MIN_EVIDENCE: usize = 2;
/// Share of their content words (Jaccard) a question or statement shares
/// with an area: half, so the same question in other words ("how does the
/// retry policy work" / "walk me through the retry policy") joins, and
/// another question about the same service does not.
const SAME_TOPIC: f64 = 0.5;
/// Content words a topic needs.
const MIN_TOPIC: usize = 2;

/// Phrases in which the user says they do not understand (matched on the
/// folded text, apostrophes kept).
const MARKERS: &[&str] = &[
    "don't understand",
    "do not understand",
    "didn't understand",
    "did not understand",
    "don't get it",
    "still don't get",
    "i don't follow",
    "i'm confused",
    "i am confused",
    "still confused",
    "confuses me",
    "confusing to me",
    "doesn't make sense",
    "does not make sense",
    "makes no sense",
    "not clear to me",
    "unclear to me",
    "you lost me",
    "i'm lost",
    "i am lost",
    "what do you mean",
    "explain it again",
    "explain that again",
    "explain again",
    "still not sure how",
    "still not sure why",
    "still not sure what",
];

/// Words that say how the user understands, not what: left out of topics.
const NOT_TOPIC: &[&str] = &[
    "understand",
    "confused",
    "confuses",
    "confusing",
    "explain",
    "mean",
    "sense",
    "clear",
    "unclear",
    "get",
    "follow",
    "lost",
    "still",
    "again",
    "sure",
    "make",
    "makes",
    "sorry",
    "please",
    "really",
    "actually",
    "can",
    "could",
    "would",
    "does",
    "work",
    "works",
    "thing",
    "part",
];

/// The kinds it reads: what the user said.
pub(super) fn reads(kind: &Kind) -> bool {
    matches!(kind, Kind::Conversation | Kind::Note)
}

/// Whether the user says, in `m`, that they do not understand.
pub(super) fn signals(m: &Memory) -> bool {
    users_word(m) && reads(&m.kind) && marker(&m.content)
}

fn marker(content: &str) -> bool {
    let folded = content.to_lowercase().replace('’', "'");
    MARKERS.iter().any(|p| folded.contains(p))
}

fn is_question(content: &str) -> bool {
    content.trim_end().ends_with('?')
}

/// The content words of a text, stemmed.
fn topic(content: &str) -> BTreeSet<String> {
    let skip: BTreeSet<String> = NOT_TOPIC.iter().map(|w| text::stem(w)).collect();
    text::query_terms(content)
        .iter()
        .filter(|w| w.len() > 2 && !w.chars().any(|c| c.is_ascii_digit()))
        .map(|w| text::stem(w))
        .filter(|s| !skip.contains(s))
        .collect()
}

/// Shared content words over all of them (Jaccard).
fn overlap(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let inter = a.intersection(b).count();
    let union = a.len() + b.len() - inter;
    if union == 0 {
        0.0
    } else {
        inter as f64 / union as f64
    }
}

struct Area {
    topic: BTreeSet<String>,
    /// The question (or statement) that names it best: the first question.
    shown: String,
    evidence: Vec<Evidence>,
}

/// Areas of confusion among the user's turns of one scope (`memories` is
/// every turn of the scope it reads).
pub(super) fn detect(scope: &Scope, memories: &[Memory]) -> Vec<Finding> {
    let mut turns: Vec<&Memory> = memories
        .iter()
        .filter(|m| users_word(m) && reads(&m.kind))
        .collect();
    turns.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    let topics: Vec<BTreeSet<String>> = turns.iter().map(|m| topic(&m.content)).collect();
    let mut areas: Vec<Area> = Vec::new();
    for (i, m) in turns.iter().enumerate() {
        if !marker(&m.content) {
            continue;
        }
        // Its own words, or those of the user's question just before it
        // in the session.
        let (t, shown) = if topics[i].len() >= MIN_TOPIC {
            (topics[i].clone(), m.content.clone())
        } else {
            let before = (0..i).rev().find(|&j| {
                turns[j].session.is_some()
                    && turns[j].session == m.session
                    && is_question(&turns[j].content)
                    && topics[j].len() >= MIN_TOPIC
            });
            match before {
                Some(j) => (topics[j].clone(), turns[j].content.clone()),
                None => continue,
            }
        };
        let ev = Evidence::of(m);
        match areas
            .iter_mut()
            .find(|a| overlap(&a.topic, &t) >= SAME_TOPIC)
        {
            Some(a) => a.evidence.push(ev),
            None => areas.push(Area {
                topic: t,
                shown,
                evidence: vec![ev],
            }),
        }
    }
    // The same question asked, before or after: evidence of its area.
    for (i, m) in turns.iter().enumerate() {
        if !is_question(&m.content) || topics[i].len() < MIN_TOPIC {
            continue;
        }
        if let Some(a) = areas
            .iter_mut()
            .find(|a| overlap(&a.topic, &topics[i]) >= SAME_TOPIC)
        {
            if !a.evidence.iter().any(|e| e.id == m.id) {
                a.evidence.push(Evidence::of(m));
            }
            if !is_question(&a.shown) {
                a.shown = m.content.clone();
            }
        }
    }
    areas
        .into_iter()
        .filter(|a| a.evidence.len() >= MIN_EVIDENCE)
        .map(|mut a| {
            a.evidence.sort();
            let words: Vec<&str> = a.topic.iter().map(String::as_str).take(6).collect();
            let n = a.evidence.len();
            Finding {
                scope: scope.clone(),
                detector: NAME,
                subject: words.join("-"),
                kind: Kind::Pattern,
                content: format!(
                    "Area of confusion ({n} times): {}",
                    a.shown.trim().lines().next().unwrap_or_default()
                ),
                importance: 0.6,
                detail: serde_json::json!({NAME: {"topic": words}}),
                evidence: a.evidence,
                whole: true,
                at: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(text: &str, session: &str, minute: i64) -> Memory {
        let at = jiff::Timestamp::from_second(1_700_000_000 + 60 * minute).unwrap();
        let mut m = crate::testutil::memory("project/acme", text, at);
        m.kind = Kind::Conversation;
        m.session = Some(session.into());
        m
    }

    #[test]
    fn a_topic_said_to_be_unclear_and_asked_again_is_an_area() {
        let scope = Scope::parse("project/acme").unwrap();
        let ms = vec![
            turn(
                "How does the billing retry policy decide the backoff?",
                "s1",
                0,
            ),
            turn("Sorry, I still don't get it.", "s1", 1),
            turn("Let's look at the search module next.", "s1", 2),
            turn(
                "How does the retry policy in billing pick its backoff?",
                "s2",
                90,
            ),
            turn(
                "What does the search service return on a timeout?",
                "s2",
                91,
            ),
        ];
        let found = detect(&scope, &ms);
        assert_eq!(
            found.len(),
            1,
            "{:?}",
            found.iter().map(|f| &f.content).collect::<Vec<_>>()
        );
        let f = &found[0];
        let ids: Vec<&str> = f.evidence.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(
            ids,
            [ms[0].id.as_str(), ms[1].id.as_str(), ms[3].id.as_str()]
        );
        assert!(f.content.contains("billing retry policy"), "{}", f.content);
    }

    #[test]
    fn questions_alone_and_talk_teach_nothing() {
        let scope = Scope::parse("project/acme").unwrap();
        let ms = vec![
            turn("What does the search service return on a timeout?", "s1", 0),
            turn(
                "What does the search service return on a timeout?",
                "s2",
                60,
            ),
            turn("I don't understand.", "s3", 120),
            turn("My colleague said the docs are confusing.", "s3", 121),
        ];
        assert!(detect(&scope, &ms).is_empty());
        let mut assistant = turn(
            "I don't understand the billing retry policy either",
            "s4",
            200,
        );
        assistant.role = Some(crate::model::Role::Assistant);
        let mut ms = ms;
        ms.push(assistant.clone());
        ms.push(assistant);
        assert!(detect(&scope, &ms).is_empty());
    }
}
