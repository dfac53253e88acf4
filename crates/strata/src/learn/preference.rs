//! The preference detector: stated preferences and standing instructions
//! ("I prefer …", "always …", "never …", "don't …") turned into keyed
//! preference memories.
//!
//! It reads sentences, not memories: a statement counts only where it
//! opens a sentence (after an optional "please", "also" or "and"), is not a
//! question, and is the user's (not the assistant's, a tool's or the
//! system's). The subject is the statement's content words, stemmed and
//! sorted, so "Always run the linter before committing" and "always run
//! the linter before you commit" are the same standing instruction, and
//! "never run the linter before committing" turns it.

use super::{Evidence, Finding, users_word};
use crate::model::{Kind, Memory};
use crate::text;

/// The detector's name.
pub(super) const NAME: &str = "preference";
/// Confidence of one statement (0.6: said outright, but said once; a
/// second statement in another session makes it 0.84).
pub(super) const PER_EVIDENCE: f64 = 0.6;

/// Words that may come before a statement without changing it.
const LEADS: &[&str] = &["please", "also", "and", "so", "just", "but", "ok", "okay"];

/// Openings of a statement and the stance each takes. "prefer" and
/// "always" ask for something, "never" against it.
const OPENINGS: &[(&str, &str)] = &[
    ("i would prefer", "prefer"),
    ("i'd prefer", "prefer"),
    ("i prefer", "prefer"),
    ("i would rather", "prefer"),
    ("i'd rather", "prefer"),
    ("my preference is", "prefer"),
    ("i always want", "always"),
    ("i want you to always", "always"),
    ("make sure to always", "always"),
    ("always", "always"),
    ("from now on", "always"),
    ("i never want", "never"),
    ("i want you to never", "never"),
    ("i don't want", "never"),
    ("i do not want", "never"),
    ("i don't like", "never"),
    ("i dislike", "never"),
    ("never", "never"),
    ("don't", "never"),
    ("do not", "never"),
];

/// First words after an opening that make the sentence talk, not
/// instruct: "never mind", "don't worry", "always been", "never had".
const NOT_INSTRUCTIONS: &[&str] = &[
    "mind",
    "worry",
    "know",
    "care",
    "bother",
    "panic",
    "think",
    "understand",
    "been",
    "was",
    "were",
    "is",
    "are",
    "had",
    "have",
    "has",
    "did",
    "do",
    "does",
    "thought",
    "knew",
    "seen",
    "heard",
    "got",
    "get",
    "gets",
    "will",
    "would",
    "could",
    "can",
    "happens",
    "happened",
    "seems",
    "seemed",
    "felt",
    "feel",
    "sure",
    "remember",
    "say",
    "said",
    "expected",
    "really",
    "ever",
    "again",
    "tried",
];

/// First words that make "always …", "never …" or "don't …" a remark
/// rather than an instruction: an instruction goes on with a verb ("always
/// run …"), a remark with a determiner or pronoun ("always the same
/// error", "never this slow"). "I prefer the dark theme" is still a
/// preference.
const NOT_IMPERATIVE: &[&str] = &[
    "the", "a", "an", "this", "that", "these", "those", "it", "its", "my", "our", "your", "his",
    "her", "their", "so", "too", "once", "like", "as", "such", "quite", "very", "in", "on", "at",
    // A preposition, place or feeling word opens a fragment, not an
    // instruction ("always by your side", "always there for you",
    // "always good to hear from you").
    "by", "for", "with", "about", "there", "here", "up", "good", "great", "fun", "happy", "glad",
    "nice", "awesome", "amazing", "lovely", "cool",
    // Irregular past forms: a remark about what happened ("never saw this
    // coming", "never done it before").
    "saw", "done", "went", "gone", "came", "made", "took", "taken", "gave", "given", "wrote",
    "written", "ate", "eaten", "told", "found", "left", "met",
];

/// Verbs in base form that end like a participle: the exceptions to "an
/// instruction does not open with an -ing or -ed form".
const BASE_ING_ED: &[&str] = &[
    "bring", "sing", "ring", "swing", "sting", "spring", "string", "cling", "fling", "sling",
    "wring", "embed", "shred", "wed", "bed",
];

/// Whether `word` is an -ing or -ed form (not a base-form verb): "always
/// running around", "never needed that" are remarks; an imperative opens
/// with a base form ("always run …").
fn participle(word: &str) -> bool {
    if BASE_ING_ED.contains(&word) {
        return false;
    }
    (word.len() > 4 && word.ends_with("ing"))
        || (word.len() > 3 && word.ends_with("ed") && !word.ends_with("eed"))
}

/// Courtesy words left out of a subject: "… before committing, please" is
/// the instruction without them.
const COURTESY: &[&str] = &["please", "thanks", "thank", "kindly"];

/// Most content words in a subject: enough to tell instructions apart,
/// few enough that rephrasing a long one still matches.
const MAX_SUBJECT_WORDS: usize = 8;

/// One statement: its stance, subject and sentence.
#[derive(Debug, PartialEq)]
pub(super) struct Statement {
    pub stance: &'static str,
    pub subject: String,
    pub sentence: String,
}

/// The statements of one text.
pub(super) fn statements(text: &str) -> Vec<Statement> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if matches!(c, '.' | '!' | '?' | '\n' | ';') {
            if c != '?'
                && let Some(s) = statement(&text[start..i])
            {
                out.push(s);
            }
            start = i + c.len_utf8();
        }
    }
    if let Some(s) = statement(&text[start..]) {
        out.push(s);
    }
    out
}

fn statement(raw: &str) -> Option<Statement> {
    let sentence = raw.trim().trim_end_matches(',').trim();
    let folded = sentence.replace(['’', '‘'], "'").to_lowercase();
    let mut rest = folded.trim_start_matches(|c: char| !c.is_alphanumeric());
    loop {
        let next = LEADS.iter().find_map(|l| {
            rest.strip_prefix(l)
                .filter(|r| r.starts_with([' ', ',']))
                .map(|r| r.trim_start_matches([' ', ',']))
        });
        match next {
            Some(r) => rest = r,
            None => break,
        }
    }
    let (stance, object) = OPENINGS.iter().find_map(|(o, stance)| {
        rest.strip_prefix(o)
            .filter(|r| r.starts_with([' ', ',']))
            .map(|r| (*stance, r.trim_start_matches([' ', ','])))
    })?;
    let first = object.split_whitespace().next()?;
    let first = first.trim_matches(|c: char| !c.is_alphanumeric());
    if NOT_INSTRUCTIONS.contains(&first)
        || (stance != "prefer" && (NOT_IMPERATIVE.contains(&first) || participle(first)))
    {
        return None;
    }
    let mut stems: Vec<String> = text::query_terms(object)
        .iter()
        .filter(|w| w.chars().any(|c| c.is_alphabetic()) && w.len() > 1 && *w != "t")
        .filter(|w| !COURTESY.contains(&w.as_str()))
        .map(|w| text::stem(w))
        .collect();
    stems.sort();
    stems.dedup();
    if stems.is_empty() {
        return None;
    }
    stems.truncate(MAX_SUBJECT_WORDS);
    Some(Statement {
        stance,
        subject: stems.join("-"),
        sentence: sentence.to_string(),
    })
}

/// Findings for the statements in `memories` (the ones changed since the
/// last run): one per (scope, subject), its stance the latest statement's.
pub(super) fn detect(memories: &[Memory]) -> Vec<Finding> {
    let mut found: Vec<Finding> = Vec::new();
    let mut ordered: Vec<&Memory> = memories
        .iter()
        .filter(|m| users_word(m) && reads(&m.kind))
        .collect();
    ordered.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    for m in ordered {
        for s in statements(&m.content) {
            let polarity = if s.stance == "never" { "avoid" } else { "do" };
            let detail = serde_json::json!({NAME: {"stance": s.stance, "polarity": polarity, "subject": s.subject}});
            let content = capitalised(&s.sentence);
            match found
                .iter_mut()
                .find(|f| f.scope == m.scope && f.subject == s.subject)
            {
                Some(f)
                    if f.detail.pointer("/preference/polarity")
                        == detail.pointer("/preference/polarity") =>
                {
                    f.evidence.push(Evidence::of(m));
                    f.content = content;
                }
                Some(f) => {
                    // Turned within this run: the latest statement stands.
                    f.evidence = vec![Evidence::of(m)];
                    f.detail = detail;
                    f.content = content;
                }
                None => found.push(Finding {
                    scope: m.scope.clone(),
                    detector: NAME,
                    subject: s.subject,
                    kind: Kind::Preference,
                    content,
                    importance: 0.8,
                    detail,
                    evidence: vec![Evidence::of(m)],
                    whole: false,
                    at: None,
                }),
            }
        }
    }
    found
}

/// Kinds a statement may come from: what people and agents say, not what
/// tools print or upkeep derives.
fn reads(kind: &Kind) -> bool {
    !matches!(
        kind,
        Kind::Failure | Kind::Error | Kind::ToolOutput | Kind::Summary | Kind::Pattern
    )
}

pub(super) fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Option<(&'static str, String)> {
        let mut v = statements(text);
        assert!(v.len() <= 1, "{v:?}");
        v.pop().map(|s| (s.stance, s.subject))
    }

    #[test]
    fn statements_open_sentences() {
        assert_eq!(one("I prefer tabs over spaces.").unwrap().0, "prefer");
        assert_eq!(
            one("Please always run the linter before committing")
                .unwrap()
                .0,
            "always"
        );
        assert_eq!(
            one("OK. Don't push to main on Fridays!").unwrap().0,
            "never"
        );
        assert_eq!(
            one("Thanks, that works. Also, never use unwrap in libraries")
                .unwrap()
                .0,
            "never"
        );
        assert_eq!(
            one("Always run the linter before committing.").unwrap().1,
            one("never run the linter before committing, please")
                .unwrap()
                .1,
        );
        assert_eq!(one("I prefer the dark theme").unwrap().0, "prefer");
    }

    #[test]
    fn talk_is_not_an_instruction() {
        for t in [
            "Don't worry about it.",
            "Never mind.",
            "Should I always run the tests?",
            "She said she prefers tea.",
            "I have always been curious about Rust.",
            "Always the same error with this build.",
            "Never this slow before!",
            "It never happened before.",
            "We don't know yet.",
            "Don't.",
            "Always by your side.",
            "Always there for the team.",
            "Always good to hear from you!",
            "Always running late on Mondays.",
            "Never needed that flag before.",
            "Never saw this coming.",
            "Never done it before, but always hear it's good.",
        ] {
            assert_eq!(one(t), None, "{t}");
        }
        // Base forms that end like a participle are still instructions.
        assert_eq!(one("Always bring the runbook.").unwrap().0, "always");
        assert_eq!(one("Never embed secrets in images.").unwrap().0, "never");
        assert_eq!(
            one("Always seed the random generator.").unwrap().0,
            "always"
        );
    }
}
