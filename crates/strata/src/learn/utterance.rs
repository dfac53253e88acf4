//! What a user's sentence is, read from its meaning: a standing
//! preference about how to answer, a personal fact, small talk, a
//! question, a one-off request, a complaint or another statement.
//!
//! A multinomial logistic regression over the local model's sentence
//! vector (384 numbers for all-MiniLM-L6-v2) and a handful of cues read
//! from the words ([`cues`]: first person, "always" and "next time",
//! a question mark, …). The cues are features the regression weighs, never
//! a gate: "I really prefer when you answer in bullet points" needs no
//! phrase at the start of its sentence. The weights (`utterance.json`,
//! beside this file) are trained by `strata eval train-utterances` on the
//! labelled sentences of `crates/strata-bench/data/utterances/` (their
//! provenance is in that folder's README); they belong to the model they
//! were trained on and are used only with it.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// The classes, in the order of the weights' rows.
pub const LABELS: [&str; 7] = [
    "preference",
    "fact",
    "smalltalk",
    "question",
    "request",
    "statement",
    "complaint",
];

/// Index of each class in [`LABELS`].
pub const PREFERENCE: usize = 0;
/// A personal fact that may change (city, employer, car, …).
pub const FACT: usize = 1;
/// Greetings, thanks, the weekend.
pub const SMALLTALK: usize = 2;
/// A question.
pub const QUESTION: usize = 3;
/// A one-off instruction about the task at hand.
pub const REQUEST: usize = 4;
/// Anything else said about the work, plans, other people.
pub const STATEMENT: usize = 5;
/// Something went wrong, or the user is lost.
pub const COMPLAINT: usize = 6;

/// The names of the word cues, in the order [`cues`] returns them.
pub const CUE_NAMES: [&str; 14] = [
    "first_person",
    "second_person",
    "standing",
    "liking",
    "please",
    "question",
    "change",
    "third_party",
    "negation",
    "hedge",
    "greeting",
    "deictic",
    "past_event",
    "length",
];

const FIRST_PERSON: &[&str] = &[
    "i", "i'm", "im", "i'd", "i've", "i'll", "me", "my", "mine", "we", "we're", "we've", "our",
    "us",
];
const SECOND_PERSON: &[&str] = &["you", "your", "you're", "youre", "yours"];
const STANDING: &[&str] = &[
    "always",
    "never",
    "from now on",
    "next time",
    "in future",
    "in the future",
    "going forward",
    "every time",
    "each time",
    "by default",
    "whenever",
    "anymore",
    "any more",
    "for future reference",
    "in general",
    "generally",
    "again",
    "remember",
    "as before",
    "as always",
    "like i said",
    "same as",
    "same deal",
    "for good",
    "every",
    "max",
];
const LIKING: &[&str] = &[
    "prefer",
    "prefers",
    "preferred",
    "rather",
    "like",
    "likes",
    "love",
    "hate",
    "can't stand",
    "cant stand",
    "dislike",
    "favourite",
    "favorite",
    "fan of",
    "better for me",
    "works best",
    "suit me",
    "suits me",
    "for me",
    "how i like",
    "i want",
    "i need",
    "is fine",
    "is plenty",
    "is good",
];
const PLEASE: &[&str] = &["please", "pls", "plz", "kindly"];
const QUESTION_OPENERS: &[&str] = &[
    "how", "what", "why", "when", "where", "who", "which", "can", "could", "would", "is", "are",
    "do", "does", "did", "should", "any", "whats", "what's", "is there",
];
const CHANGE: &[&str] = &[
    "moved",
    "now",
    "new",
    "just",
    "started",
    "switched",
    "joined",
    "since",
    "got",
    "bought",
    "adopted",
    "promoted",
    "relocated",
    "transferred",
    "finally",
    "traded",
    "changed",
];
const THIRD_PARTY: &[&str] = &[
    "he",
    "she",
    "they",
    "his",
    "her",
    "their",
    "wife",
    "husband",
    "partner",
    "friend",
    "mom",
    "mum",
    "dad",
    "brother",
    "sister",
    "colleague",
    "boss",
    "manager",
    "son",
    "daughter",
    "girlfriend",
    "boyfriend",
];
const NEGATION: &[&str] = &["not", "no", "never", "nope", "nothing"];
const HEDGE: &[&str] = &[
    "might",
    "maybe",
    "perhaps",
    "someday",
    "someday,",
    "considering",
    "thinking about",
    "plan",
    "planning",
    "going to",
    "will",
    "would like to",
    "if",
    "hope",
    "wish",
];
const GREETING: &[&str] = &[
    "thanks", "thank", "hi", "hello", "hey", "morning", "cheers", "bye", "weekend", "haha", "lol",
    "great", "cool", "awesome", "nice",
];
const DEICTIC: &[&str] = &[
    "this",
    "this one",
    "that",
    "the last",
    "above",
    "here",
    "it",
    "these",
    "the previous",
];
const PAST_EVENT: &[&str] = &[
    "yesterday",
    "last night",
    "last week",
    "today",
    "this morning",
    "earlier",
    "tonight",
];

/// The lowercase words of `text`, apostrophes folded, punctuation
/// trimmed.
fn words(text: &str) -> Vec<String> {
    text.replace(['’', '‘'], "'")
        .to_lowercase()
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | ':' | '(' | ')' | '"'))
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'')
                .to_string()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// Whether any of `list` (single words, or phrases of several) is in
/// `words`.
fn any(words: &[String], list: &[&str]) -> bool {
    list.iter().any(|p| {
        if p.contains(' ') {
            let pw: Vec<&str> = p.split(' ').collect();
            words
                .windows(pw.len())
                .any(|w| w.iter().zip(&pw).all(|(a, b)| a == b))
        } else {
            words.iter().any(|w| w == p)
        }
    })
}

/// The word cues of a sentence, in the order of [`CUE_NAMES`]: each 0 or
/// 1, but the length, `ln(1 + words) / 4`.
pub fn cues(sentence: &str) -> Vec<f32> {
    let w = words(sentence);
    let b = |x: bool| if x { 1.0 } else { 0.0 };
    let question = sentence.trim_end().ends_with('?')
        || w.first()
            .is_some_and(|f| QUESTION_OPENERS.contains(&f.as_str()));
    vec![
        b(any(&w, FIRST_PERSON)),
        b(any(&w, SECOND_PERSON)),
        b(any(&w, STANDING)),
        b(any(&w, LIKING)),
        b(any(&w, PLEASE)),
        b(question),
        b(any(&w, CHANGE)),
        b(any(&w, THIRD_PARTY)),
        b(any(&w, NEGATION) || w.iter().any(|x| x.ends_with("n't"))),
        b(any(&w, HEDGE)),
        b(any(&w, GREETING)),
        b(any(&w, DEICTIC)),
        b(any(&w, PAST_EVENT)),
        ((1 + w.len()) as f32).ln() / 4.0,
    ]
}

/// Most sentences one memory is read as: a long note is not a chat turn.
pub const MAX_SENTENCES: usize = 8;

/// The sentences of a turn: split at `.`, `!`, `?`, `;` and line breaks
/// (a full stop inside a number or a file name does not split), each
/// trimmed, with at least one letter; at most [`MAX_SENTENCES`].
pub fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    for (i, c) in text.char_indices() {
        let end = match c {
            '!' | '?' | ';' | '\n' => true,
            // "3.5", "main.rs", "e.g." do not end a sentence.
            '.' => bytes.get(i + 1).is_none_or(|n| n.is_ascii_whitespace()),
            _ => false,
        };
        if end {
            let s = text[start..i + c.len_utf8()].trim();
            if s.chars().any(char::is_alphabetic) {
                out.push(s);
            }
            start = i + c.len_utf8();
        }
    }
    let s = text[start..].trim();
    if s.chars().any(char::is_alphabetic) {
        out.push(s);
    }
    out.truncate(MAX_SENTENCES);
    out
}

/// The trained weights: one row per class over the vector and the cues.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Classifier {
    /// The embedding model whose vectors it was trained on.
    pub model: String,
    /// That model's vector length.
    pub dim: usize,
    /// The classes, as [`LABELS`].
    pub labels: Vec<String>,
    /// The cues, as [`CUE_NAMES`].
    pub cues: Vec<String>,
    /// `labels × (dim + cues)` weights.
    pub weights: Vec<Vec<f32>>,
    /// One bias a class.
    pub bias: Vec<f32>,
    /// What it was trained on and how it scored, for people.
    #[serde(default)]
    pub trained: serde_json::Value,
}

/// The weights shipped in the binary.
const SHIPPED: &str = include_str!("utterance.json");

impl Classifier {
    /// The shipped classifier (parsed once).
    pub fn shipped() -> &'static Classifier {
        static C: OnceLock<Classifier> = OnceLock::new();
        C.get_or_init(|| {
            let c: Classifier =
                serde_json::from_str(SHIPPED).expect("utterance.json is a classifier");
            c.check().expect("utterance.json is well formed");
            c
        })
    }

    /// Whether its shapes agree with the labels, cues and dimension.
    pub fn check(&self) -> Result<(), String> {
        if self.labels != LABELS {
            return Err(format!("labels {:?}, expected {LABELS:?}", self.labels));
        }
        if self.cues != CUE_NAMES {
            return Err(format!("cues {:?}, expected {CUE_NAMES:?}", self.cues));
        }
        let width = self.dim + CUE_NAMES.len();
        if self.weights.len() != LABELS.len()
            || self.bias.len() != LABELS.len()
            || self.weights.iter().any(|r| r.len() != width)
        {
            return Err(format!(
                "weights must be {} rows of {width}, and one bias a row",
                LABELS.len()
            ));
        }
        Ok(())
    }

    /// Class probabilities of a sentence, from its vector and its text.
    pub fn probabilities(&self, vector: &[f32], sentence: &str) -> [f32; 7] {
        let c = cues(sentence);
        let mut logits = [0f32; 7];
        for (k, (row, b)) in self.weights.iter().zip(&self.bias).enumerate() {
            let (wv, wc) = row.split_at(self.dim.min(row.len()));
            let dot: f32 = wv.iter().zip(vector).map(|(a, x)| a * x).sum::<f32>()
                + wc.iter().zip(&c).map(|(a, x)| a * x).sum::<f32>();
            logits[k] = dot + b;
        }
        softmax(&mut logits);
        logits
    }
}

/// In place: logits to probabilities.
pub fn softmax(z: &mut [f32]) {
    let max = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for x in z.iter_mut() {
        *x = (*x - max).exp();
        sum += *x;
    }
    for x in z.iter_mut() {
        *x /= sum;
    }
}

/// Groups vectors by meaning, in the order given: each joins the group
/// whose centroid it is most similar to, when that similarity is at least
/// `threshold`, else starts one. Deterministic, and an item's group
/// depends only on the items before it, so groups are stable as later
/// items come. Returns each item's group.
pub fn group(vectors: &[&[f32]], threshold: f32) -> Vec<usize> {
    let mut sums: Vec<Vec<f32>> = Vec::new();
    let mut out = Vec::with_capacity(vectors.len());
    for v in vectors {
        let best = sums
            .iter()
            .enumerate()
            .map(|(g, s)| {
                let norm = s.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-9);
                (g, s.iter().zip(*v).map(|(a, b)| a * b).sum::<f32>() / norm)
            })
            .filter(|(_, sim)| *sim >= threshold)
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
        match best {
            Some((g, _)) => {
                for (s, x) in sums[g].iter_mut().zip(*v) {
                    *s += x;
                }
                out.push(g);
            }
            None => {
                out.push(sums.len());
                sums.push(v.to_vec());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_split_at_ends_not_inside_numbers() {
        assert_eq!(
            sentences("ok that works. btw I really prefer bullet points, easier to skim"),
            [
                "ok that works.",
                "btw I really prefer bullet points, easier to skim"
            ]
        );
        assert_eq!(
            sentences("Version 3.5 of main.rs broke! Why?"),
            ["Version 3.5 of main.rs broke!", "Why?"]
        );
        assert!(sentences("... !!").is_empty());
        assert_eq!(sentences(&"a. ".repeat(20)).len(), MAX_SENTENCES);
    }

    #[test]
    fn cues_read_words_not_openings() {
        let c = cues("I really prefer when you answer in bullet points.");
        let on = |name: &str| c[CUE_NAMES.iter().position(|n| *n == name).unwrap()] == 1.0;
        assert!(on("first_person") && on("second_person") && on("liking"));
        assert!(!on("question") && !on("third_party"));
        let c = cues("Could you keep it short next time?");
        assert_eq!(c[5], 1.0, "a question");
        assert_eq!(c[2], 1.0, "next time is standing");
        assert_eq!(cues("").len(), CUE_NAMES.len());
    }

    #[test]
    fn the_shipped_weights_are_well_formed() {
        let c = Classifier::shipped();
        assert_eq!(c.model, "all-MiniLM-L6-v2");
        let v = vec![0.0; c.dim];
        let p = c.probabilities(&v, "thanks!");
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-4);
    }

    #[test]
    fn a_bad_classifier_is_named() {
        let mut c = Classifier::shipped().clone();
        c.weights.pop();
        assert!(c.check().unwrap_err().contains("rows"));
        let mut c = Classifier::shipped().clone();
        c.labels.swap(0, 1);
        assert!(c.check().unwrap_err().contains("labels"));
    }

    #[test]
    fn groups_follow_similarity_and_order() {
        let a = [1.0, 0.0, 0.0];
        let a2 = [0.9, 0.1, 0.0];
        let b = [0.0, 1.0, 0.0];
        let c = [0.0, 0.0, 1.0];
        assert_eq!(group(&[&a, &b, &a2, &c, &b], 0.8), [0, 1, 0, 2, 1]);
        assert_eq!(group(&[&a, &b], 0.0), [0, 0], "any similarity joins");
        assert!(group(&[], 0.5).is_empty());
    }
}
