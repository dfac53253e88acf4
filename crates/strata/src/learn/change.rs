//! Facts that change in words no phrase foresaw: "sold the émonda. got a
//! canyon grizl", "Finally ditched Barclays, moved my current account to
//! Starling", "Dr. Hensley retired, so they put me with a Dr. Okafor".
//!
//! The phrase detector (`fact.rs`) reads statements of a value ("lives in",
//! "works at"). People more often say a value *ended*, and name the new one
//! beside it. This reader keys on that shape, not on the wording:
//!
//! - a departure word (left, sold, quit, ditched, cancelled, replaced,
//!   retired, "from … to", "instead of", "the old …"), not negated nor
//!   hypothetical;
//! - beside it, the old value: words the user said in an earlier turn of the
//!   same scope (what ended must have been there before, which keeps asides
//!   and plans out);
//! - in the same turn, the new value: a name or noun phrase after "to",
//!   "at", "got a", "called", "on", or before "now", that the user never
//!   said before.
//!
//! The attribute comes from the words around both statements (a bank, a
//! doctor, a gym…); when none says, the fact is keyed by what it replaced,
//! and a value that continues a fact already learned takes that fact's key,
//! so the new value supersedes the old and `as_of` answers either.

use std::collections::BTreeSet;

use super::fact::{self, Statement};
use super::{Evidence, Finding};
use crate::model::Memory;

/// Words that say something ended or was replaced, with where the old value
/// stands: after the word (`left Nakuru`) or before it (`Dr. Hensley
/// retired`).
const ENDED_BEFORE: &[&str] = &[
    "left",
    "leaving",
    "quit",
    "sold",
    "ditched",
    "dropped",
    "dumped",
    "cancelled",
    "canceled",
    "replaced",
    "traded",
    "swapped",
    "rid",
    "off",
    "from",
    "of",
    "former",
    "ex",
    "outgrew",
    "stopped",
    "abandoned",
];
const ENDED_AFTER: &[&str] = &[
    "retired", "gone", "ended", "finished", "closed", "split", "broke", "away", "go",
];

/// Words a departure word must come with to count ("of" only in "instead
/// of", "rid of", "out of"; "off" only after a verb of moving).
fn departure_at(t: &[Tok], i: usize) -> bool {
    let low: Vec<&str> = t.iter().map(|x| x.low.as_str()).collect();
    let w = low[i];
    let prev = |k: usize| i.checked_sub(k).map(|j| low[j]);
    match w {
        // "instead of", "rid of"; "out of" only after taking someone out
        // ("pulled her out of Little Honu"), not "made out of".
        "of" => {
            matches!(prev(1), Some("instead" | "rid"))
                || prev(1) == Some("out")
                    && low[..i - 1]
                        .iter()
                        .rev()
                        .take(3)
                        .any(|p| matches!(*p, "pulled" | "took" | "taken" | "moved" | "switched"))
        }
        "off" => matches!(prev(1), Some("moved" | "switched" | "came" | "got")),
        "from" => low[..i].iter().rev().take(4).any(|p| {
            matches!(
                *p,
                "moved" | "switched" | "changed" | "transferred" | "went" | "upgraded"
            )
        }),
        "rid" => matches!(prev(1), Some("got" | "get" | "getting")),
        "away" => low[..i]
            .iter()
            .rev()
            .take(5)
            .any(|p| matches!(*p, "put" | "gave" | "given" | "moved")),
        "go" => low[..i].iter().rev().take(5).any(|p| *p == "let"),
        // "left knee", "money left after": "left" is a departure before
        // what it left, a name or a thing with its determiner ("left the
        // firm", "left Acme").
        "left" => t.get(i + 1).is_some_and(|n| {
            matches!(
                n.low.as_str(),
                "the" | "my" | "our" | "her" | "his" | "their" | "a" | "an"
            ) || named(n)
        }),
        // "split up", "broke up"; a car that broke down changed nothing.
        "split" | "broke" => matches!(low.get(i + 1), Some(&"up")),
        "gone" => matches!(prev(1), Some("has" | "'s" | "is" | "was" | "have")),
        "ended" | "finished" => low.get(i + 1) != Some(&"up"),
        _ => ENDED_BEFORE.contains(&w) || ENDED_AFTER.contains(&w),
    }
}

/// Words before a departure word that make it something other than a
/// change that happened: a plan, a wish, a condition, a negation.
const NOT_YET: &[&str] = &[
    "if",
    "will",
    "would",
    "might",
    "may",
    "could",
    "should",
    "want",
    "wants",
    "thinking",
    "considering",
    "plan",
    "planning",
    "hope",
    "maybe",
    "never",
    "not",
    "n't",
    "don't",
    "didn't",
    "won't",
    "'ll",
    "someday",
    "whether",
    "wish",
];

/// Words that carry no value on their own.
const STOP: &[&str] = &[
    "a",
    "an",
    "the",
    "my",
    "our",
    "his",
    "her",
    "their",
    "your",
    "its",
    "i",
    "we",
    "you",
    "he",
    "she",
    "they",
    "it",
    "this",
    "that",
    "these",
    "those",
    "me",
    "us",
    "him",
    "them",
    "and",
    "or",
    "but",
    "so",
    "to",
    "at",
    "in",
    "on",
    "of",
    "for",
    "with",
    "from",
    "by",
    "as",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "am",
    "'m",
    "'s",
    "'re",
    "'ve",
    "'d",
    "has",
    "have",
    "had",
    "do",
    "did",
    "now",
    "just",
    "new",
    "old",
    "one",
    "all",
    "some",
    "any",
    "out",
    "up",
    "off",
    "over",
    "then",
    "than",
    "too",
    "very",
    "really",
    "still",
    "also",
    "here",
    "there",
    "what",
    "when",
    "where",
    "which",
    "who",
    "how",
    "why",
    "not",
    "no",
    "yes",
    "got",
    "get",
    "like",
    "lol",
    "ok",
    "okay",
    "since",
    "last",
    "next",
    "week",
    "month",
    "year",
    "day",
    "today",
    "time",
    "thing",
    "things",
    "way",
    "lot",
    "bit",
    "back",
    "again",
    "more",
    "most",
    "much",
    "many",
    "every",
    "about",
    "into",
    "after",
    "before",
    "instead",
    "finally",
    "anyway",
    "because",
    "them",
    "left",
    "quit",
    "sold",
    "work",
    "job",
    "home",
    "place",
    "people",
    "guy",
    "friend",
    "news",
    "big",
    "good",
    "great",
    "nice",
    "full",
    "same",
    "other",
    "another",
    "own",
    "well",
    "oh",
    "hi",
    "hey",
    "hello",
    "thanks",
    "please",
    "can",
    "could",
    "would",
    "should",
    "will",
    "x",
    "vs",
    "live",
    "stay",
    "move",
    "start",
    "go",
    "come",
    "help",
    "try",
    "keep",
    "let",
    "put",
    "take",
    "make",
    "see",
    "say",
    "tell",
    "spring",
    "summer",
    "autumn",
    "winter",
    "weekend",
    "morning",
    "evening",
    "night",
    "those",
    "these",
    "mum",
    "mom",
    "dad",
    "mother",
    "father",
    "brother",
    "sister",
    "son",
    "daughter",
    "wife",
    "husband",
    "kid",
    "kids",
    "baby",
    "grandson",
    "granddaughter",
    "cousin",
    "aunt",
    "uncle",
    "friends",
    "family",
    "parents",
    "boss",
];

/// Days and months: never a value, capitalised or not.
const WHEN: &[&str] = &[
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
    "january",
    "february",
    "march",
    "april",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// Whether a word carries no value on its own.
fn stop(w: &str) -> bool {
    STOP.contains(&w) || WHEN.contains(&w)
}

/// Titles, which a new name may share with the old ("Dr. Okafor" after
/// "Dr. Hensley").
const TITLES: &[&str] = &["dr", "mr", "mrs", "ms", "prof", "st"];

/// Words before a new value that introduce it.
const NEW_AFTER: &[&str] = &[
    "to", "at", "with", "called", "named", "on", "into", "for", "playing", "drives", "drive",
    "driving", "bought", "got", "get", "in", "joined", "use", "using", "adopted", "learning",
];

/// An attribute, the words around a statement that say it, the nouns that
/// name it ("changed schools"), and how the learned memory says it.
struct Attr {
    name: &'static str,
    cues: &'static [&'static str],
    nouns: &'static [&'static str],
    say: &'static str,
}

const ATTRS: &[Attr] = &[
    Attr {
        name: "location",
        cues: &[
            "moved",
            "move",
            "live",
            "lives",
            "living",
            "staying",
            "relocated",
            "lease",
            "neighbourhood",
            "neighborhood",
            "rent",
        ],
        nouns: &["city", "flat", "apartment", "house", "town", "country"],
        say: "lives in {}",
    },
    Attr {
        name: "employer",
        cues: &[
            "works",
            "working",
            "hired",
            "offer",
            "startup",
            "professorship",
            "boss",
            "colleague",
            "payslip",
            "salary",
            "left",
        ],
        nouns: &["job", "company", "employer", "firm"],
        say: "works at {}",
    },
    Attr {
        name: "school",
        cues: &[
            "teacher", "classes", "semester", "enrolled", "pupil", "drop-off",
        ],
        nouns: &[
            "school",
            "daycare",
            "preschool",
            "nursery",
            "kindergarten",
            "university",
            "college",
        ],
        say: "goes to {}",
    },
    Attr {
        name: "gym",
        cues: &[
            "train",
            "training",
            "workout",
            "membership",
            "rack",
            "lifting",
            "squat",
        ],
        nouns: &["gym", "club"],
        say: "trains at {}",
    },
    Attr {
        name: "car",
        cues: &[
            "drive", "drives", "driving", "boot", "trunk", "mileage", "ev",
        ],
        nouns: &["car", "ute", "suv", "van", "truck"],
        say: "drives {}",
    },
    Attr {
        name: "bike",
        cues: &["frame", "gravel", "saddle", "cycling", "ride", "stem"],
        nouns: &["bike", "bicycle"],
        say: "rides {}",
    },
    Attr {
        name: "phone",
        cues: &["iphone", "pixel", "android", "samsung", "contacts"],
        nouns: &["phone"],
        say: "uses {}",
    },
    Attr {
        name: "pet",
        cues: &["vet", "walk", "litter", "leash"],
        nouns: &["dog", "cat", "puppy", "kitten", "pet"],
        say: "has a pet: {}",
    },
    Attr {
        name: "bank",
        cues: &[
            "savings",
            "saver",
            "debit",
            "debits",
            "banking",
            "interest",
            "switching",
        ],
        nouns: &["bank", "account"],
        say: "banks with {}",
    },
    Attr {
        name: "doctor",
        cues: &["dr", "gp", "physician", "practice", "clinic", "appointment"],
        nouns: &["doctor"],
        say: "sees {}",
    },
    Attr {
        name: "instrument",
        cues: &["play", "playing", "band", "tune", "chords", "practice"],
        nouns: &["instrument"],
        say: "plays {}",
    },
    Attr {
        name: "language",
        cues: &[
            "learning",
            "duolingo",
            "lessons",
            "streak",
            "vocabulary",
            "fluent",
        ],
        nouns: &["language"],
        say: "is learning {}",
    },
    Attr {
        name: "team",
        cues: &["squad"],
        nouns: &["team"],
        say: "is on the {} team",
    },
    Attr {
        name: "tool",
        cues: &["plugin", "extension", "lsp", "install", "config"],
        nouns: &["editor", "ide", "app", "tool"],
        say: "uses {}",
    },
    Attr {
        name: "partner",
        cues: &["dating", "engaged", "married", "split", "broke"],
        nouns: &[
            "girlfriend",
            "boyfriend",
            "wife",
            "husband",
            "partner",
            "fiance",
            "fiancee",
        ],
        say: "has a partner: {}",
    },
    Attr {
        name: "role",
        cues: &["promoted", "senior", "lead", "associate"],
        nouns: &["role", "position", "title"],
        say: "works as {}",
    },
];

#[derive(Clone, Debug)]
struct Tok {
    raw: String,
    low: String,
    /// A clause ends after this word (punctuation).
    brk: bool,
    /// The word starts a sentence (its capital says nothing).
    start: bool,
    /// The word's sentence is a question.
    question: bool,
}

fn tokens(text: &str) -> Vec<Tok> {
    const ABBREVIATIONS: &[&str] = &["dr.", "mr.", "mrs.", "ms.", "st.", "prof.", "mt."];
    let mut out: Vec<Tok> = Vec::new();
    let mut start = true;
    for w in text.split_whitespace() {
        let asks = w
            .trim_end_matches(|c: char| !c.is_alphanumeric() && c != '?')
            .ends_with('?');
        let abbreviation = ABBREVIATIONS.contains(&w.to_lowercase().as_str());
        let ends = !abbreviation && w.ends_with(['.', '!', '?', ':']) || w.ends_with("...");
        let brk = ends || w.ends_with([',', ';', ')']);
        let w = w.trim_matches(|c: char| !c.is_alphanumeric() && c != '&' && c != '\'');
        let w = w.trim_matches('\'');
        if w.is_empty() {
            if let Some(last) = out.last_mut() {
                last.brk = true;
            }
            start = true;
            continue;
        }
        let w = w.replace(['’', '‘'], "'");
        let (head, tail) = match ["'m", "'re", "'ve", "'s", "'d", "'ll"]
            .iter()
            .find(|s| w.len() > s.len() && w.ends_with(*s))
        {
            Some(s) => (w[..w.len() - s.len()].to_string(), Some(s.to_string())),
            None => (w, None),
        };
        out.push(Tok {
            low: head.to_lowercase(),
            raw: head,
            brk: brk && tail.is_none(),
            start,
            question: false,
        });
        if let Some(t) = tail {
            out.push(Tok {
                low: t.clone(),
                raw: t,
                brk,
                start: false,
                question: false,
            });
        }
        if ends && asks {
            let from = out.iter().rposition(|t| t.start).unwrap_or(0);
            out[from..].iter_mut().for_each(|t| t.question = true);
        }
        start = ends;
    }
    out
}

fn capitalised(t: &Tok) -> bool {
    t.raw.chars().next().is_some_and(char::is_uppercase)
}

/// A name: capitalised where a sentence does not start ("I" is not one).
fn named(t: &Tok) -> bool {
    capitalised(t)
        && !t.start
        && t.raw != "I"
        && t.low.chars().any(char::is_alphabetic)
        && !WHEN.contains(&t.low.as_str())
}

/// Whether a value may start with this word: a name, or a word that is not
/// a verb's form ("getting", "recycled") nor an adverb ("almost").
fn thing(t: &Tok) -> bool {
    const NOT: &[&str] = &[
        "almost",
        "sometimes",
        "often",
        "always",
        "never",
        "even",
        "early",
        "later",
    ];
    let verb_form = ["ing", "ed", "ly"].iter().any(|e| t.low.ends_with(e));
    named(t) || !verb_form && !NOT.contains(&t.low.as_str())
}

fn content_word(t: &Tok) -> bool {
    named(t)
        || !stop(&t.low)
            && t.low.chars().any(char::is_alphabetic)
            && (t.low.chars().count() >= 3 || capitalised(t))
}

/// Whether `needle` (lowercase words) occurs in `hay` as whole words.
fn says(hay: &[Tok], needle: &[&str]) -> bool {
    !needle.is_empty()
        && hay.windows(needle.len()).any(|w| {
            w.iter()
                .zip(needle)
                .all(|(t, n)| t.low == *n || t.low.strip_suffix('s') == Some(n))
        })
}

/// A span `[a, b)` of one clause whose ends are content words.
fn spans(toks: &[Tok], around: std::ops::Range<usize>) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for a in around.clone() {
        if !content_word(&toks[a]) {
            continue;
        }
        for b in a + 1..=(a + 4).min(toks.len()) {
            if !content_word(&toks[b - 1]) {
                if stop(&toks[b - 1].low) && toks[b - 1].low != "&" {
                    break;
                }
                continue;
            }
            out.push((a, b));
            if toks[b - 1].brk {
                break;
            }
        }
    }
    out
}

/// One change: who, what ended, what replaced it, and the attribute.
#[derive(Debug)]
struct Change {
    subject: String,
    shown: String,
    old: Option<String>,
    new: String,
    attribute: &'static str,
    say: &'static str,
    /// The earlier turn that stated the old value.
    old_turn: Option<usize>,
}

/// What was learned before in the scope: (key subject, attribute, value).
pub(super) struct Known {
    pub subject: String,
    pub attribute: String,
    pub value: String,
}

/// Whether `text` has a word that may say something ended: the scopes
/// worth reading whole.
pub(super) fn may_say_a_change(text: &str) -> bool {
    let t = tokens(text);
    (0..t.len()).any(|i| {
        departure_at(&t, i)
            || matches!(
                t[i].low.as_str(),
                "changed" | "switched" | "new" | "swapped" | "changing"
            )
    })
}

/// The changes `turns` (one scope's user turns, oldest first) state, for
/// the turns whose ids are in `fresh`; `known` are the facts this run's
/// phrases found and those learned before, whose keys a change continues.
pub(super) fn detect(
    turns: &[&Memory],
    fresh: &BTreeSet<&str>,
    taken: &BTreeSet<&str>,
    known: &[Known],
) -> Vec<Finding> {
    let toks: Vec<Vec<Tok>> = turns.iter().map(|m| tokens(&m.content)).collect();
    let mut out = Vec::new();
    for (i, m) in turns.iter().enumerate() {
        if !fresh.contains(m.id.as_str()) || taken.contains(m.id.as_str()) {
            continue;
        }
        let Some(c) = change(&toks, i) else { continue };
        // A value that continues a fact learned before takes its key: the
        // old value it replaces, or (said of the attribute) its attribute.
        let continues = known.iter().find(|k| {
            let v = k.value.to_lowercase();
            match &c.old {
                Some(old) => {
                    let old = old.to_lowercase();
                    v == old || v.contains(&old)
                }
                None => k.attribute == c.attribute && k.subject == c.subject,
            }
        });
        let (subject, attribute, say) = match continues {
            Some(k) => (
                k.subject.clone(),
                fact_attribute(&k.attribute),
                fact::say_of(&k.attribute).unwrap_or(c.say),
            ),
            None => (c.subject.clone(), c.attribute, c.say),
        };
        let statement = |value: &str| Statement {
            subject: subject.clone(),
            shown: c.shown.clone(),
            attribute,
            say,
            value: value.to_string(),
        };
        if let (None, Some(old), Some(k)) = (continues, &c.old, c.old_turn) {
            let earlier = turns[k];
            out.push(fact::finding(
                &m.scope,
                &statement(old),
                vec![Evidence::of(earlier)],
                earlier.created_at,
                "change",
            ));
        }
        out.push(fact::finding(
            &m.scope,
            &statement(&c.new),
            vec![Evidence::of(m)],
            m.created_at,
            "change",
        ));
    }
    out
}

/// The attribute names the phrase detector uses, as `'static`.
fn fact_attribute(name: &str) -> &'static str {
    fact::attributes()
        .into_iter()
        .chain(ATTRS.iter().map(|a| a.name))
        .find(|a| *a == name)
        .unwrap_or("thing")
}

fn change(toks: &[Vec<Tok>], i: usize) -> Option<Change> {
    let t = &toks[i];
    // The departure word, and the old value beside it.
    let sentence: Vec<usize> = t
        .iter()
        .scan(0, |n, w| {
            *n += usize::from(w.start);
            Some(*n)
        })
        .collect();
    // Advice to the other ("instead of candy, you could try…") is not the
    // user's change.
    let advice = |k: usize| {
        t.iter().zip(&sentence).any(|(w, n)| {
            *n == sentence[k] && matches!(w.low.as_str(), "you" | "your" | "you'd" | "should")
        })
    };
    let mut best: Option<(usize, usize, usize, usize)> = None; // (cue, a, b, old turn)
    for cue in 0..t.len() {
        if !departure_at(t, cue) || t[cue].question || advice(cue) {
            continue;
        }
        let clause_start = (0..cue).rev().find(|&k| t[k].brk).map_or(0, |k| k + 1);
        if t[clause_start..cue]
            .iter()
            .any(|x| NOT_YET.contains(&x.low.as_str()) || x.low.ends_with("n't"))
        {
            continue;
        }
        let after = ENDED_BEFORE.contains(&t[cue].low.as_str());
        let window = if after {
            cue + 1..(cue + 5).min(t.len())
        } else {
            clause_start..cue
        };
        if window.is_empty() {
            continue;
        }
        for (a, b) in spans(t, window.clone()) {
            if after && t[cue..a].iter().any(|x| x.brk) {
                continue;
            }
            // "Dr. Hensley retired", "Mosse has gone", "Amaka and I split
            // up": what ended is the subject, an auxiliary at most between.
            if !after
                && (b > cue
                    || !t[b..cue].iter().all(|x| {
                        matches!(
                            x.low.as_str(),
                            "has"
                                | "have"
                                | "had"
                                | "is"
                                | "was"
                                | "'s"
                                | "just"
                                | "finally"
                                | "been"
                                | "and"
                                | "i"
                                | "we"
                        )
                    }))
            {
                continue;
            }
            let words: Vec<&str> = t[a..b].iter().map(|x| x.low.as_str()).collect();
            if !thing(&t[a]) {
                continue;
            }
            let Some(old_turn) = (0..i).find(|&k| says(&toks[k], &words)) else {
                continue;
            };
            let better = match best {
                None => true,
                Some((_, ba, bb, _)) => b - a > bb - ba,
            };
            if better {
                best = Some((cue, a, b, old_turn));
            }
        }
        if best.is_some() {
            break;
        }
    }
    // Without a value that ended, a change said of the attribute itself
    // ("changed schools", "new job") still names the new value.
    let (cue, a, b, old_turn, said_attr) = match best {
        Some((cue, a, b, k)) => (cue, a, b, Some(k), None),
        None => {
            let (cue, attr) = (0..t.len()).find_map(|k| {
                if t[k].question
                    || !matches!(
                        t[k].low.as_str(),
                        "changed" | "switched" | "new" | "swapped" | "changing"
                    )
                {
                    return None;
                }
                let new = t[k].low == "new";
                if new && !(k > 0 && matches!(t[k - 1].low.as_str(), "a" | "my" | "our" | "the")) {
                    return None;
                }
                t.iter().skip(k + 1).take(2).find_map(|x| {
                    // "a new job", but not "new cities".
                    let noun = if new {
                        x.low.as_str()
                    } else {
                        x.low.strip_suffix('s').unwrap_or(&x.low)
                    };
                    ATTRS
                        .iter()
                        .find(|at| at.nouns.contains(&noun))
                        .map(|at| (k, at))
                })
            })?;
            let clause = (0..cue).rev().find(|&k| t[k].brk).map_or(0, |k| k + 1);
            if t[..cue]
                .iter()
                .any(|x| NOT_YET.contains(&x.low.as_str()) || x.low.ends_with("n't"))
                || !t[clause..cue]
                    .iter()
                    .any(|x| matches!(x.low.as_str(), "i" | "we" | "im" | "ive" | "my" | "our"))
            {
                return None;
            }
            (cue, cue + 1, cue + 1, None, Some(attr))
        }
    };
    let old_words: Vec<&str> = t[a..b].iter().map(|x| x.low.as_str()).collect();
    // The new value: a span of this turn nobody said before, after a word
    // that introduces one, before "now", or a name; nearest the old value.
    let mut pick: Option<(usize, usize, f64)> = None;
    for (x, y) in spans(t, 0..t.len()) {
        if (x < b && y > a) || x == y {
            continue;
        }
        let words: Vec<&str> = t[x..y].iter().map(|w| w.low.as_str()).collect();
        if words
            .iter()
            .any(|w| old_words.contains(w) && !TITLES.contains(w))
            || (0..i).any(|k| says(&toks[k], &words))
            || words.len() == 1 && ATTRS.iter().any(|at| at.nouns.contains(&words[0]))
        {
            continue;
        }
        let introduced = x > 0 && {
            let mut k = x - 1;
            while k > 0
                && matches!(
                    t[k].low.as_str(),
                    "a" | "an" | "the" | "my" | "our" | "new" | "those" | "these" | "her" | "his"
                )
            {
                k -= 1;
            }
            // "to accept", "to buy": after a bare "to", only a name is a value.
            NEW_AFTER.contains(&t[k].low.as_str())
                && !t[k].brk
                && !(t[k].low == "to" && k + 1 == x && !named(&t[x]))
        };
        // "… X now", or "now we see X" in one clause.
        let name = t[x..y]
            .iter()
            .all(|w| named(w) || matches!(w.low.as_str(), "&" | "of" | "de" | "la"));
        let before_now = t.get(y).is_some_and(|w| w.low == "now") && !t[y - 1].brk
            || name
                && (x.saturating_sub(4)..x)
                    .any(|k| t[k].low == "now" && !t[k..x].iter().any(|w| w.brk));
        // Without an old value, only a name or what is so "now" will do.
        let said_so = name || before_now || introduced && old_turn.is_some();
        if !said_so || !thing(&t[x]) {
            continue;
        }
        // Whole: a name ends where its capitals end ("Harrow & Finch" is
        // one); a lowercase phrase at a break or before a word that ends it.
        let joins = |k: usize| {
            t.get(k)
                .is_some_and(|w| matches!(w.low.as_str(), "&" | "of" | "de" | "la"))
                && t.get(k + 1).is_some_and(named)
        };
        if !t[y - 1].brk
            && (joins(y)
                || t.get(y)
                    .is_some_and(|w| content_word(w) && (capitalised(w) == capitalised(&t[y - 1]))))
        {
            continue;
        }
        let distance = if x >= b { x - b } else { a - y } as f64;
        let score = distance / 2.0
            + if name { 0.0 } else { 8.0 }
            + if introduced || before_now { 0.0 } else { 3.0 }
            + if sentence[x] == sentence[cue] {
                0.0
            } else {
                3.0
            }
            - 0.5 * (y - x) as f64;
        if pick.is_none_or(|(_, _, s)| score < s) {
            pick = Some((x, y, score));
        }
    }
    let (x, y, _) = pick?;
    let show = |r: std::ops::Range<usize>| {
        t[r].iter()
            .map(|w| w.raw.trim_end_matches(['.', ',']))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let old = (a < b).then(|| show(a..b));
    let new = show(x..y);
    // Whose: a name before the departure word in its clause (or "he"/"she"
    // after a name that opened an earlier clause of the turn), unless that
    // name is what ended.
    let clause_start = (0..cue).rev().find(|&k| t[k].brk).map_or(0, |k| k + 1);
    let before: Vec<&Tok> = t[clause_start..cue.min(a)].iter().collect();
    let user = before.iter().any(|w| {
        matches!(
            w.low.as_str(),
            "i" | "we" | "me" | "my" | "our" | "im" | "ive" | "us"
        )
    });
    let person = |w: &Tok| {
        capitalised(w)
            && !stop(&w.low)
            && w.raw.chars().all(char::is_alphabetic)
            && !old_words.contains(&w.low.as_str())
    };
    let (subject, shown) = match before.iter().find(|w| person(w)) {
        Some(n) if !user => (n.low.clone(), n.raw.clone()),
        _ if !user && before.iter().any(|w| w.low == "he" || w.low == "she") => {
            let opens = |k: usize| k == 0 || t[k - 1].brk;
            let n = (0..clause_start)
                .rev()
                .filter(|&k| person(&t[k]))
                .max_by_key(|&k| (opens(k), k))?;
            (t[n].low.clone(), t[n].raw.clone())
        }
        _ => ("i".into(), "The user".into()),
    };
    // The attribute: what the words around both statements are about.
    let window = |ts: &[Tok], at: usize, r: usize| -> Vec<String> {
        ts[at.saturating_sub(r)..(at + r).min(ts.len())]
            .iter()
            .flat_map(|w| {
                let one = w.low.strip_suffix('s').unwrap_or(&w.low).to_string();
                [w.low.clone(), one]
            })
            .collect::<BTreeSet<String>>()
            .into_iter()
            .collect()
    };
    let mut words = window(t, cue, 8);
    words.extend(window(t, x, 4));
    if let Some(k) = old_turn {
        let ot = &toks[k];
        let at = (0..ot.len())
            .find(|&p| ot[p..].iter().zip(&old_words).all(|(w, o)| w.low == *o))
            .unwrap_or(0);
        words.extend(window(ot, at, 8));
    }
    let (attribute, say) = match said_attr {
        Some(at) => (at.name, at.say),
        None => {
            let (attr, hits) = ATTRS
                .iter()
                .map(|at| {
                    let n: usize = words
                        .iter()
                        .map(|w| {
                            usize::from(at.cues.contains(&w.as_str()))
                                + 2 * usize::from(at.nouns.contains(&w.as_str()))
                        })
                        .sum();
                    (at, n)
                })
                .rev()
                .max_by_key(|(_, n)| *n)?;
            if hits == 0 {
                ("thing", "now: {}")
            } else {
                (attr.name, attr.say)
            }
        }
    };
    Some(Change {
        subject,
        shown,
        old,
        new,
        attribute,
        say,
        old_turn,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(history: &[&str]) -> Option<(String, String, String, &'static str)> {
        let toks: Vec<Vec<Tok>> = history.iter().map(|h| tokens(h)).collect();
        change(&toks, history.len() - 1)
            .map(|c| (c.shown, c.old.unwrap_or_default(), c.new, c.attribute))
    }

    #[test]
    fn a_value_that_ended_and_the_one_beside_it() {
        assert_eq!(
            run(&[
                "my current account is with Barclays, would the saver be covered?",
                "Finally ditched Barclays, I moved my current account to Starling. Interest?",
            ]),
            Some((
                "The user".into(),
                "Barclays".into(),
                "Starling".into(),
                "bank"
            ))
        );
        assert_eq!(
            run(&[
                "My brother Kamau lives in Nakuru, he sells my milk there.",
                "Kamau has left Nakuru, he is staying in Nairobi now.",
            ]),
            Some((
                "Kamau".into(),
                "Nakuru".into(),
                "Nairobi".into(),
                "location"
            ))
        );
    }

    #[test]
    fn names_stay_whole_and_he_or_she_is_the_name_that_opened_a_clause() {
        assert_eq!(
            run(&[
                "My agent Lou (she's at Grey Owl Press) wants the draft.",
                "News: Lou has left Grey Owl. She's at Pike & Wren now, and Oslo loved it.",
            ]),
            Some((
                "Lou".into(),
                "Grey Owl".into(),
                "Pike & Wren".into(),
                "employer"
            ))
        );
        assert_eq!(
            run(&[
                "Our vet is Dr. Moreau, two streets away.",
                "Rex got a new job in Lyon! He left Dr. Moreau, so now we see a Dr. Petit.",
            ])
            .map(|(_, old, new, _)| (old, new)),
            Some(("Dr Moreau".into(), "Dr Petit".into()))
        );
        // A lowercase value ends where its phrase ends.
        assert_eq!(
            run(&[
                "my bike is an old steel tourer, fine on hills",
                "sold the tourer. got a carbon racer, size 54. saddle height?",
            ])
            .map(|(_, old, new, attribute)| (old, new, attribute)),
            Some(("tourer".into(), "carbon racer".into(), "bike"))
        );
    }

    #[test]
    fn a_change_said_of_the_attribute_needs_no_old_value() {
        assert_eq!(
            run(&[
                "hello",
                "so we changed banks, we're at Nordbank now because of the fees.",
            ]),
            Some(("The user".into(), String::new(), "Nordbank".into(), "bank"))
        );
        // A question about it is not a change.
        assert_eq!(run(&["hello", "which snacks for the new school?"]), None);
    }

    #[test]
    fn what_was_never_said_before_or_did_not_happen_is_no_change() {
        // The old value must have been said before.
        assert_eq!(run(&["hello", "I left Barclays for Starling."]), None);
        // A plan, a condition, a negation.
        for t in [
            "I might leave Barclays for Starling.",
            "If I ditch Barclays, would Starling be better?",
            "I never left Barclays, Starling was a joke.",
            "Should I leave Barclays? Starling looks better.",
        ] {
            assert_eq!(run(&["my account is with Barclays", t]), None, "{t}");
        }
        // Advice to the other, a car that broke down, a game that ended up
        // won, money left over: no change of the user's.
        for t in [
            "And instead of Barclays, you could try Starling.",
            "My Barclays card broke down at the till, Starling paid.",
            "Barclays ended up winning it, Starling lost.",
            "We still had Barclays money left after the trip to Starling.",
        ] {
            assert_eq!(run(&["my account is with Barclays", t]), None, "{t}");
        }
        // "left" as a side, not a departure.
        assert_eq!(
            run(&[
                "my knee hurts after the Barclays run",
                "left knee fine now. Barclays run again?"
            ]),
            None
        );
    }
}
