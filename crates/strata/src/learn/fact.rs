//! Facts that change without a shared key: "Ana lives in Paris", then, in
//! a later memory, "Ana moved to Berlin". No writer keyed them, so nothing
//! superseded anything; this detector reads such statements about where
//! someone lives and where they work, and keeps one learned memory per
//! (person, attribute), keyed `learned/fact/<person>-<attribute>`. A new
//! value supersedes the old one, which stays in the key's history with the
//! time it stopped being true, so `recall` with `as_of` answers with what
//! was true then. Each version carries the time of the statement it comes
//! from (when it was true) and the learned record says when strata learned
//! it.
//!
//! A statement counts when its subject is "I" (the user) or a name (one
//! to three capitalised words) and its value is a name too; questions,
//! negations ("doesn't live in", "no longer works at") and what may yet
//! happen ("will move to", "wants to join", "if she moves to") are not
//! facts.

use super::{Evidence, Finding, users_word};
use crate::model::{Kind, Memory};

/// The detector's name.
pub(super) const NAME: &str = "fact";
/// Confidence of one statement (0.6: said outright, but once).
pub(super) const PER_EVIDENCE: f64 = 0.6;

/// An attribute, the phrases that state it, and how the learned memory
/// says it.
struct Attribute {
    name: &'static str,
    phrases: &'static [&'static str],
    say: &'static str,
}

const ATTRIBUTES: &[Attribute] = &[
    Attribute {
        name: "location",
        phrases: &[
            "lives in",
            "live in",
            "is living in",
            "am living in",
            "are living in",
            "moved to",
            "has moved to",
            "have moved to",
            "relocated to",
            "has relocated to",
            "is based in",
            "am based in",
            "are based in",
        ],
        say: "lives in",
    },
    Attribute {
        name: "employer",
        phrases: &[
            "works at",
            "work at",
            "works for",
            "work for",
            "is working at",
            "am working at",
            "is working for",
            "am working for",
            "joined",
            "has joined",
            "have joined",
            "started at",
            "started working at",
        ],
        say: "works at",
    },
];

/// Words before the phrase that make it something other than a present
/// fact: negation, what may happen, conditions, reported doubt.
const NOT_A_FACT: &[&str] = &[
    "not", "n't", "never", "no", "longer", "will", "would", "might", "may", "could", "should",
    "want", "wants", "wanted", "plan", "plans", "planning", "going", "hope", "hopes", "if",
    "maybe", "perhaps", "wish", "once", "used",
];

/// Pronouns other than "I": whom they name is not in the sentence.
const PRONOUNS: &[&str] = &[
    "we", "you", "he", "she", "they", "it", "this", "that", "who",
];

/// Adverbs allowed between the subject and the phrase.
const ADVERBS: &[&str] = &[
    "now",
    "just",
    "recently",
    "finally",
    "also",
    "still",
    "currently",
];

/// One statement of an attribute's value.
#[derive(Debug, PartialEq)]
pub(super) struct Statement {
    /// The person, lowercased (`i` for the user).
    pub subject: String,
    /// How the learned memory names them.
    pub shown: String,
    pub attribute: &'static str,
    pub say: &'static str,
    pub value: String,
}

fn capitalised(w: &str) -> bool {
    w.chars().next().is_some_and(char::is_uppercase)
}

/// The statements of a text, read clause by clause (split at sentence
/// ends and commas: "By the way, Ana lives in Paris"); a sentence that
/// asks is skipped whole.
pub(super) fn statements(text: &str) -> Vec<Statement> {
    let mut out = Vec::new();
    for sentence in text.split(['.', '!', ';', '\n']) {
        if sentence.contains('?') {
            continue;
        }
        for clause in sentence.split([',', ':', '—', '–']) {
            if let Some(s) = statement(clause.trim()) {
                out.push(s);
            }
        }
    }
    out
}

fn statement(sentence: &str) -> Option<Statement> {
    let words: Vec<&str> = sentence
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| matches!(c, ',' | '"' | '\'' | '(' | ')' | ':')))
        .filter(|w| !w.is_empty())
        .collect();
    let lower: Vec<String> = words.iter().map(|w| w.to_lowercase()).collect();
    for a in ATTRIBUTES {
        // Longer phrases first: "has moved to" before "moved to".
        let mut phrases: Vec<&str> = a.phrases.to_vec();
        phrases.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in phrases {
            let pw: Vec<&str> = p.split(' ').collect();
            let Some(at) = (0..lower.len().saturating_sub(pw.len() - 1))
                .find(|&i| pw.iter().enumerate().all(|(k, w)| lower[i + k] == *w))
            else {
                continue;
            };
            // The subject: "I" or a name, then adverbs, then the phrase.
            let mut end = at;
            while end > 0 && ADVERBS.contains(&lower[end - 1].as_str()) {
                end -= 1;
            }
            let before = &lower[..at];
            if before
                .iter()
                .any(|w| NOT_A_FACT.contains(&w.as_str()) || w.ends_with("n't"))
            {
                return None;
            }
            let (subject, shown) = if end == 1 && PRONOUNS.contains(&lower[0].as_str()) {
                return None;
            } else if end == 1 && lower[0] == "i" {
                ("i".to_string(), "The user".to_string())
            } else {
                // An acronym opening the clause ("FYI", "BTW") is no part
                // of a name.
                let start = words[..end]
                    .iter()
                    .take_while(|w| w.len() <= 4 && w.chars().all(|c| c.is_ascii_uppercase()))
                    .count();
                let name = &words[start..end];
                if !(1..=3).contains(&name.len()) || !name.iter().all(|w| capitalised(w)) {
                    return None;
                }
                let name = name.join(" ");
                (name.to_lowercase(), name)
            };
            // The value: a name, "the" before it allowed.
            let mut v = at + pw.len();
            if lower.get(v).is_some_and(|w| w == "the") {
                v += 1;
            }
            let value: Vec<&str> = words[v.min(words.len())..]
                .iter()
                .take_while(|w| capitalised(w))
                .take(4)
                .copied()
                .collect();
            if value.is_empty() {
                return None;
            }
            return Some(Statement {
                subject,
                shown,
                attribute: a.name,
                say: a.say,
                value: value.join(" "),
            });
        }
    }
    None
}

/// Findings for the statements in `memories` (the ones changed since the
/// last run), oldest first: one per run of the same value, so a change
/// within one run is written as two versions.
pub(super) fn detect(memories: &[Memory]) -> Vec<Finding> {
    let mut ordered: Vec<&Memory> = memories.iter().filter(|m| users_word(m)).collect();
    ordered.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    let mut found: Vec<Finding> = Vec::new();
    for m in ordered {
        for s in statements(&m.content) {
            let slug: String = s
                .subject
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .collect::<Vec<_>>()
                .join("-");
            let subject = format!("{slug}-{}", s.attribute);
            let detail = serde_json::json!({NAME: {
                "subject": s.subject, "attribute": s.attribute, "value": s.value,
                // A new value turns the learned memory, as a turned stance does.
                "polarity": s.value.to_lowercase(),
            }});
            // The latest finding for this subject: the same value adds
            // evidence, another value is a new version.
            let last = found
                .iter_mut()
                .rev()
                .find(|f| f.scope == m.scope && f.subject == subject);
            match last {
                Some(f)
                    if f.detail.pointer("/fact/polarity") == detail.pointer("/fact/polarity") =>
                {
                    f.evidence.push(Evidence::of(m));
                }
                _ => found.push(Finding {
                    scope: m.scope.clone(),
                    detector: NAME,
                    subject,
                    kind: Kind::Custom("fact".into()),
                    content: format!("{} {} {}", s.shown, s.say, s.value),
                    importance: 0.7,
                    detail,
                    evidence: vec![Evidence::of(m)],
                    whole: false,
                    at: Some(m.created_at),
                }),
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Option<(String, &'static str, String)> {
        let mut v = statements(text);
        assert!(v.len() <= 1, "{v:?}");
        v.pop().map(|s| (s.subject, s.attribute, s.value))
    }

    #[test]
    fn names_places_and_employers() {
        assert_eq!(
            one("By the way, Ana lives in Paris these days."),
            Some(("ana".into(), "location", "Paris".into()))
        );
        assert_eq!(
            one("Ana Ruiz just moved to New York City!"),
            Some(("ana ruiz".into(), "location", "New York City".into()))
        );
        assert_eq!(
            one("FYI Ana Ruiz lives in Oslo"),
            Some(("ana ruiz".into(), "location", "Oslo".into()))
        );
        assert_eq!(
            one("Ana has moved to Oslo"),
            Some(("ana".into(), "location", "Oslo".into()))
        );
        assert_eq!(
            one("Big news: Ana relocated to Oslo"),
            Some(("ana".into(), "location", "Oslo".into()))
        );
        assert_eq!(
            one("I now work at Acme Robotics"),
            Some(("i".into(), "employer", "Acme Robotics".into()))
        );
        assert_eq!(
            one("Tomasz joined the Berlin Philharmonic"),
            Some(("tomasz".into(), "employer", "Berlin Philharmonic".into()))
        );
    }

    #[test]
    fn questions_negations_and_plans_are_not_facts() {
        for t in [
            "Does Ana live in Paris?",
            "Ana doesn't live in Paris anymore.",
            "Ana no longer works at Acme.",
            "Ana will move to Berlin next year.",
            "Ana wants to move to Berlin.",
            "If Ana moves to Berlin we'll visit.",
            "We moved to Berlin.",
            "The team lives in Slack.",
            "Ana lives in a small flat.",
        ] {
            assert_eq!(one(t), None, "{t}");
        }
    }
}
