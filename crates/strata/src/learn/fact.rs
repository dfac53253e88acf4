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
/// says it (`{}` is the value).
struct Attribute {
    name: &'static str,
    phrases: &'static [&'static str],
    say: &'static str,
    /// Whether the value must be a name (capitalised): a city or an
    /// employer is, a role or a car model need not be.
    proper: bool,
}

/// The attributes, in the order they are tried: a phrase of an earlier
/// one wins ("moved to the payments team" is a team, not a city).
const ATTRIBUTES: &[Attribute] = &[
    Attribute {
        name: "team",
        phrases: &[
            "joined the",
            "moved to the",
            "moved over to the",
            "transferred to the",
            "switched to the",
            "am on the",
            "'m on the",
            "is on the",
            "are on the",
            "now on the",
            "part of the",
            "to the",
            "am in the",
            "'m in the",
            "is in the",
            "on the",
        ],
        say: "is on the {} team",
        proper: false,
    },
    Attribute {
        name: "role",
        phrases: &[
            "got promoted to",
            "was promoted to",
            "been promoted to",
            "promoted to",
            "new role is",
            "new title is",
            "new position is",
            "works as a",
            "works as an",
            "work as a",
            "work as an",
            "working as a",
            "working as an",
            "became a",
            "became an",
            "am now a",
            "am now an",
            "'m now a",
            "'m now an",
            "is now a",
            "is now an",
        ],
        say: "works as {}",
        proper: false,
    },
    Attribute {
        name: "location",
        phrases: &[
            "lives in",
            "live in",
            "is living in",
            "am living in",
            "are living in",
            "'re living in",
            "'m living in",
            "moved to",
            "has moved to",
            "have moved to",
            "moved back to",
            "moved over to",
            "relocated to",
            "has relocated to",
            "is based in",
            "am based in",
            "are based in",
            "'m based in",
            "'re based in",
            "settled in",
            "now live in",
            "home is in",
            "moved from",
            "'s moved from",
            "relocated from",
        ],
        say: "lives in {}",
        proper: true,
    },
    Attribute {
        name: "school",
        phrases: &[
            "studies at",
            "study at",
            "studying at",
            "enrolled at",
            "enrolled in",
            "is a student at",
            "am a student at",
            "'m a student at",
            "goes to",
            "attends",
            "attending",
            "transferred to",
            "got into",
            "started at",
        ],
        say: "studies at {}",
        proper: true,
    },
    Attribute {
        name: "gym",
        phrases: &[
            "train at",
            "training at",
            "trains at",
            "work out at",
            "working out at",
            "lift at",
            "lifting at",
            "a member of",
            "a member at",
        ],
        say: "goes to {}",
        proper: true,
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
            "'m working at",
            "is working for",
            "am working for",
            "'m working for",
            "joined",
            "has joined",
            "have joined",
            "started at",
            "started working at",
            "started working for",
            "started my new job at",
            "started a new job at",
            "my new job at",
            "new job at",
            "new job with",
            "a job at",
            "a job with",
            "hired at",
            "hired by",
            "employed at",
            "employed by",
            "an offer from",
            "'m at",
            "am at",
            "'s at",
            "is at",
            "'re at",
        ],
        say: "works at {}",
        proper: true,
    },
    Attribute {
        name: "partner",
        phrases: &[
            "married to",
            "engaged to",
            "got married to",
            "is dating",
            "am dating",
            "'m dating",
            "started dating",
            "seeing someone named",
        ],
        say: "has a partner: {}",
        proper: true,
    },
    Attribute {
        name: "car",
        phrases: &[
            "drive a",
            "drive an",
            "drives a",
            "drives an",
            "driving a",
            "driving an",
            "new car is a",
            "new car is an",
            "new car is the",
            "car is now a",
            "car is now an",
            "bought a new",
            "got a new",
            "for a",
            "for an",
            "with a",
            "with an",
        ],
        say: "drives {}",
        proper: false,
    },
    Attribute {
        name: "pet",
        phrases: &[
            "adopted a",
            "adopted an",
            "rescued a",
            "got a puppy named",
            "got a kitten named",
            "dog named",
            "cat named",
            "puppy named",
            "kitten named",
            "dog called",
            "cat called",
            "puppy called",
            "kitten called",
        ],
        say: "has a pet: {}",
        proper: false,
    },
    Attribute {
        name: "tool",
        phrases: &[
            "switched to",
            "switched over to",
            "migrated to",
            "now use",
            "now using",
            "am using",
            "'m using",
            "changed to",
            "'m on",
            "am on",
        ],
        say: "uses {}",
        proper: true,
    },
];

/// Words before the phrase that make the statement something other than
/// a fact: a negation, a plan, a wish, a condition, a past habit.
const NOT_A_FACT: &[&str] = &[
    "not",
    "n't",
    "never",
    "no",
    "longer",
    "will",
    "would",
    "might",
    "may",
    "could",
    "should",
    "want",
    "wants",
    "wanted",
    "plan",
    "plans",
    "planning",
    "going",
    "hope",
    "hopes",
    "if",
    "maybe",
    "perhaps",
    "wish",
    "once",
    "used",
    "thinking",
    "considering",
    "someday",
    "when",
    "whether",
    "said",
    "says",
    "told",
    "think",
    "want",
    "'ll",
    "'d",
    "to",
    "try",
    "trying",
];

/// Subjects that name nobody in the sentence ("she", "they", "this").
const PRONOUNS: &[&str] = &[
    "you", "he", "she", "they", "it", "this", "that", "who", "which", "someone", "everyone",
    "people", "one",
];

/// Subjects that are the user (or the user's household).
const THE_USER: &[&str] = &["i", "we", "i've", "we've", "i'm", "we're", "i'd"];

/// People a user names by relation ("my sister", "my brother Tom").
const RELATIONS: &[&str] = &[
    "sister",
    "brother",
    "mom",
    "mum",
    "mother",
    "dad",
    "father",
    "son",
    "daughter",
    "wife",
    "husband",
    "partner",
    "girlfriend",
    "boyfriend",
    "friend",
    "cousin",
    "aunt",
    "uncle",
    "colleague",
    "roommate",
    "flatmate",
    "boss",
    "manager",
    "niece",
    "nephew",
    "grandma",
    "grandpa",
    "kid",
    "best",
    "older",
    "younger",
    "little",
    "big",
];

/// Words between a subject and the phrase that leave the statement as
/// it is.
const ADVERBS: &[&str] = &[
    "now",
    "just",
    "recently",
    "finally",
    "also",
    "still",
    "currently",
    "officially",
    "actually",
    "basically",
    "already",
    "have",
    "has",
    "had",
    "'ve",
    "'s",
    "am",
    "are",
    "is",
    "'m",
    "'re",
    "got",
];

/// Words that end a value ("Porto last month", "Contoso as a designer").
const VALUE_ENDS: &[&str] = &[
    "in",
    "on",
    "at",
    "as",
    "since",
    "last",
    "this",
    "next",
    "and",
    "but",
    "because",
    "so",
    "after",
    "before",
    "from",
    "with",
    "for",
    "which",
    "who",
    "that",
    "now",
    "yesterday",
    "today",
    "recently",
    "a",
    "an",
    "the",
    "to",
    "of",
    "by",
    "lol",
    "haha",
    "too",
    "again",
    "instead",
    "anymore",
    "already",
    "finally",
    "back",
    "when",
    "while",
    "where",
    "its",
    "it's",
    "btw",
    "last",
];

/// Openings that carry no meaning of their own.
const FILLERS: &[&str] = &[
    "so", "oh", "well", "btw", "fyi", "also", "and", "ok", "okay", "anyway", "update", "news",
    "big", "quick", "heads", "up", "guess", "what", "yeah", "yes", "hey", "hi", "ps", "side",
    "note", "by", "the", "way",
];

/// One statement of a fact.
#[derive(Debug, PartialEq)]
pub(super) struct Statement {
    /// Who it is about, lowercased: `i` for the user, or a name.
    pub subject: String,
    /// How the learned memory names them ("The user", "Ana Ruiz").
    pub shown: String,
    pub attribute: &'static str,
    pub say: &'static str,
    pub value: String,
}

fn capitalised(w: &str) -> bool {
    w.chars().next().is_some_and(char::is_uppercase)
}

/// The statements of fact in a text, read clause by clause.
pub(super) fn statements(text: &str) -> Vec<Statement> {
    let mut out = Vec::new();
    // The person a "he" or "she" of a later clause names: the last clause
    // that opened with a name ("Arjun got the job in Canada! He's moved
    // from Pune to Toronto").
    let mut last_name: Option<String> = None;
    for sentence in text.split(['.', '!', ';', '\n']) {
        for clause in sentence.split([',', ':', '—', '–', '(', ')']) {
            let clause = clause.trim();
            if !sentence.contains('?')
                && let Some(s) = statement(clause, last_name.as_deref())
            {
                if s.subject != "i" && !s.shown.starts_with("The user") {
                    last_name = Some(s.shown.clone());
                }
                out.push(s);
            } else if let Some(name) = opening_name(clause) {
                last_name = Some(name);
            }
        }
    }
    out
}

/// The name a clause opens with ("Arjun got the job", "Sam has left"), if
/// it does: one or two capitalised words, then a lowercase one.
fn opening_name(clause: &str) -> Option<String> {
    let words: Vec<&str> = clause.split_whitespace().collect();
    let n = words
        .iter()
        .take(3)
        .take_while(|w| capitalised(w) && w.chars().all(char::is_alphabetic))
        .count();
    let next = words.get(n)?;
    if !(1..=2).contains(&n) || capitalised(next) {
        return None;
    }
    let first = words[0].to_lowercase();
    if FILLERS.contains(&first.as_str())
        || THE_USER.contains(&first.as_str())
        || PRONOUNS.contains(&first.as_str())
        || first == "my"
        || first == "our"
    {
        return None;
    }
    Some(words[..n].join(" "))
}

/// Who the words before a phrase name: the user ("I", "we"), a name
/// (one to three capitalised words), a relation ("my sister", "my
/// brother Tom"), or the person a "he" or "she" refers back to.
fn subject_of(
    subject: &[String],
    shown: &[String],
    last_name: Option<&str>,
) -> Option<(String, String)> {
    let user = || Some(("i".to_string(), "The user".to_string()));
    let named = |n: &str| Some((n.to_lowercase(), n.to_string()));
    match subject {
        // "Started my new job at Contoso", "Moved to Porto last week": a
        // clause that opens with the verb is the user's.
        [] => user(),
        [.., w] if THE_USER.contains(&w.as_str()) => {
            // "since the 1st of the month I'm at Tanso": the last words
            // say who, whatever came before.
            user()
        }
        [.., w] if w == "he" || w == "she" => named(last_name?),
        [.., w] if PRONOUNS.contains(&w.as_str()) => None,
        [my, rest @ ..] if (my == "my" || my == "our") && !rest.is_empty() => {
            let names: Vec<&String> = shown[1..].iter().filter(|w| capitalised(w)).collect();
            let relation: Vec<&String> = rest
                .iter()
                .filter(|w| RELATIONS.contains(&w.as_str()))
                .collect();
            if names.len() == rest.len() - relation.len() && !names.is_empty() && names.len() <= 3 {
                let name = names
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(" ");
                named(&name)
            } else if names.is_empty() && relation.len() == rest.len() {
                let rel = rest.join(" ");
                Some((rel.clone(), format!("The user's {rel}")))
            } else {
                None
            }
        }
        name if (1..=3).contains(&name.len()) && shown.iter().all(|w| capitalised(w)) => {
            named(&shown.join(" "))
        }
        _ => None,
    }
}

/// Splits "i'm", "we've", "she's" into the word and its contraction, so
/// phrases can name the contraction ("'m on the").
fn split_word(w: &str) -> Vec<String> {
    let w = w.replace(['’', '‘'], "'");
    for suffix in ["'m", "'re", "'ve", "'s", "'d", "'ll"] {
        if let Some(head) = w.strip_suffix(suffix)
            && !head.is_empty()
            && !head.contains('\'')
        {
            return vec![head.to_string(), suffix.to_string()];
        }
    }
    vec![w]
}

fn statement(sentence: &str, last_name: Option<&str>) -> Option<Statement> {
    // Words as written (for names and values), and lowercased.
    let mut words: Vec<String> = Vec::new();
    for w in sentence.split_whitespace() {
        let w = w.trim_matches(|c: char| matches!(c, ',' | '"' | '(' | ')' | ':' | '!' | '*'));
        let w = w.trim_start_matches('\'').trim_end_matches('\'');
        if !w.is_empty() {
            words.extend(split_word(w));
        }
    }
    let lower: Vec<String> = words.iter().map(|w| w.to_lowercase()).collect();
    for a in ATTRIBUTES {
        let mut phrases: Vec<&str> = a.phrases.to_vec();
        phrases.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in phrases {
            let pw: Vec<&str> = p.split(' ').collect();
            let Some(at) = (0..lower.len().saturating_sub(pw.len() - 1))
                .find(|&i| pw.iter().enumerate().all(|(k, w)| lower[i + k] == *w))
            else {
                continue;
            };
            if let Some(s) = read(a, &words, &lower, at, pw.len(), last_name) {
                return Some(s);
            }
        }
    }
    None
}

/// The statement a phrase found at `at` (of `len` words) makes, if its
/// subject names someone and its value is one.
fn read(
    a: &Attribute,
    words: &[String],
    lower: &[String],
    at: usize,
    len: usize,
    last_name: Option<&str>,
) -> Option<Statement> {
    // "traded the Civic for a Model 3": the subject is before the verb.
    let at_subject = if a.name == "car" && (lower[at] == "for" || lower[at] == "with") {
        lower[..at]
            .iter()
            .position(|w| matches!(w.as_str(), "traded" | "swapped" | "exchanged" | "replaced"))?
    } else if a.name == "team" && lower[at] == "to" {
        // "I moved off platform to the security team".
        lower[..at].iter().rposition(|w| {
            matches!(
                w.as_str(),
                "moved" | "switched" | "transferred" | "went" | "got" | "changed"
            )
        })?
    } else if a.name == "pet" && (lower[at + len - 1] == "named" || lower[at + len - 1] == "called")
    {
        // "we've got a dachshund puppy called Kanel": the subject is before
        // the verb.
        lower[..at]
            .iter()
            .rposition(|w| {
                matches!(
                    w.as_str(),
                    "got" | "adopted" | "rescued" | "have" | "'ve" | "has"
                )
            })
            .map_or(at, |i| i)
    } else {
        at
    };
    let before = &lower[..at];
    if before
        .iter()
        .any(|w| NOT_A_FACT.contains(&w.as_str()) || w.ends_with("n't"))
    {
        return None;
    }
    // The subject: what is left before the phrase once adverbs and
    // openings are taken off.
    let mut end = at_subject;
    while end > 0 && ADVERBS.contains(&lower[end - 1].as_str()) {
        end -= 1;
    }
    let mut start = 0;
    while start < end
        && (FILLERS.contains(&lower[start].as_str())
            || words[start].len() <= 4 && words[start].chars().all(|c| c.is_ascii_uppercase()))
    {
        start += 1;
    }
    let subject = &lower[start..end];
    let shown_words = &words[start..end];
    let (subject, shown) = subject_of(subject, shown_words, last_name)?;
    // The value: the words after the phrase, up to one that ends it
    // ("moved from Pune to Toronto": after the "to").
    let mut v = at + len;
    if lower[at + len - 1] == "from" {
        v += lower[v.min(lower.len())..].iter().position(|w| w == "to")? + 1;
    }
    // Articles and "new" (not "New York") before the value.
    while words.get(v).is_some_and(|w| {
        matches!(
            w.to_lowercase().as_str(),
            "the" | "a" | "an" | "my" | "our" | "their" | "his" | "her"
        ) || matches!(w.as_str(), "new" | "brand")
    }) {
        v += 1;
    }
    let mut value: Vec<&str> = Vec::new();
    for (w, l) in words[v.min(words.len())..]
        .iter()
        .zip(&lower[v.min(lower.len())..])
    {
        // "Harrow & Finch", "Bank of America": a name goes on.
        let joins = a.proper
            && !value.is_empty()
            && (w == "&" || l == "of" || l == "de")
            && words
                .get(v + value.len() + 1)
                .is_some_and(|n| capitalised(n));
        if value.len() == 4 || (!value.is_empty() && VALUE_ENDS.contains(&l.as_str()) && !joins) {
            break;
        }
        if a.proper && !capitalised(w) && !value.is_empty() && !joins {
            break;
        }
        value.push(w.trim_end_matches(['.', ',']));
    }
    let first = *value.first()?;
    if a.proper && !capitalised(first) {
        return None;
    }
    if !first.chars().any(char::is_alphabetic)
        || PRONOUNS.contains(&first.to_lowercase().as_str())
        || THE_USER.contains(&first.to_lowercase().as_str())
        || VALUE_ENDS.contains(&first.to_lowercase().as_str())
    {
        return None;
    }
    let mut attribute = a.name;
    let mut say = a.say;
    let lowered = value.join(" ").to_lowercase();
    if a.name == "team" {
        // "on the payments team": the value is what names the team.
        let t = lower[v..]
            .iter()
            .position(|w| w == "team" || w == "squad")?;
        if t == 0 || t > 4 {
            return None;
        }
        value = words[v..v + t].iter().map(String::as_str).collect();
    } else if lowered.contains("gym") || lowered.contains("fitness") || lowered.contains("club") {
        attribute = "gym";
        say = "goes to {}";
    } else if a.name == "employer"
        && ["university", "college", "school", "academy", "institute"]
            .iter()
            .any(|s| lowered.contains(s))
    {
        attribute = "school";
        say = "studies at {}";
    }
    const PHONES: &[&str] = &[
        "iphone",
        "pixel",
        "galaxy",
        "samsung",
        "android",
        "oneplus",
        "huawei",
        "xiaomi",
        "nokia",
        "motorola",
        "fairphone",
    ];
    let phone = lower
        .iter()
        .skip(v)
        .take(value.len())
        .any(|w| PHONES.contains(&w.as_str()))
        || (a.name == "car" && lower.iter().any(|w| w == "phone"));
    if phone && matches!(a.name, "car" | "tool" | "employer") {
        return Some(Statement {
            subject,
            shown,
            attribute: "phone",
            say: "uses a {}",
            value: value.join(" "),
        });
    }
    if a.name == "car" {
        // "for a …" and "got a new …" state a car only beside the word.
        let said_car = lower.iter().any(|w| {
            matches!(
                w.as_str(),
                "car"
                    | "drive"
                    | "drives"
                    | "driving"
                    | "traded"
                    | "swapped"
                    | "sold"
                    | "ev"
                    | "suv"
            )
        });
        if !said_car || (!capitalised(first) && !lower.iter().any(|w| w == "car")) {
            return None;
        }
    }
    Some(Statement {
        subject,
        shown,
        attribute,
        say,
        value: value.join(" "),
    })
}

/// How a learned fact says an attribute (`{}` is the value); `None` for
/// an attribute this detector does not know.
pub(super) fn say_of(attribute: &str) -> Option<&'static str> {
    match attribute {
        "gym" => Some("goes to {}"),
        "phone" => Some("uses a {}"),
        _ => ATTRIBUTES
            .iter()
            .find(|a| a.name == attribute)
            .map(|a| a.say),
    }
}

/// The attributes a fact may have.
pub(super) fn attributes() -> Vec<&'static str> {
    let mut v: Vec<&str> = ATTRIBUTES.iter().map(|a| a.name).collect();
    v.extend(["gym", "phone"]);
    v
}

/// The finding of one statement: `subject` is who (lowercase, `i` for
/// the user), `shown` how the memory names them.
pub(super) fn finding(
    scope: &crate::scope::Scope,
    s: &Statement,
    evidence: Vec<Evidence>,
    at: jiff::Timestamp,
    by: &str,
) -> Finding {
    let slug: String = s
        .subject
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    Finding {
        scope: scope.clone(),
        detector: NAME,
        subject: format!("{slug}-{}", s.attribute),
        kind: Kind::Custom("fact".into()),
        content: format!("{} {}", s.shown, s.say.replace("{}", &s.value)),
        importance: 0.7,
        detail: serde_json::json!({NAME: {
            "subject": s.subject, "attribute": s.attribute, "value": s.value,
            "polarity": s.value.to_lowercase(), "by": by,
        }}),
        evidence,
        whole: false,
        at: Some(at),
    }
}

pub(super) fn detect(memories: &[Memory]) -> Vec<Finding> {
    let mut ordered: Vec<&Memory> = memories.iter().filter(|m| users_word(m)).collect();
    ordered.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    let mut found: Vec<Finding> = Vec::new();
    for m in ordered {
        for s in statements(&m.content) {
            let f = finding(&m.scope, &s, vec![Evidence::of(m)], m.created_at, "phrases");
            // The latest finding for this subject: the same value adds
            // evidence, another value is a new version (a new value turns
            // the learned memory, as a turned stance does).
            let last = found
                .iter_mut()
                .rev()
                .find(|x| x.scope == f.scope && x.subject == f.subject);
            match last {
                Some(x)
                    if x.detail.pointer("/fact/polarity") == f.detail.pointer("/fact/polarity") =>
                {
                    x.evidence.push(Evidence::of(m));
                }
                _ => found.push(f),
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
    fn any_attribute_in_everyday_wording() {
        for (text, subject, attribute, value) in [
            ("we just moved to Porto", "i", "location", "Porto"),
            (
                "Started my new job at Contoso on Monday!",
                "i",
                "employer",
                "Contoso",
            ),
            (
                "ok so my sister Ana lives in Lyon now",
                "ana",
                "location",
                "Lyon",
            ),
            (
                "I'm on the payments team since the reorg",
                "i",
                "team",
                "payments",
            ),
            (
                "Finally traded the Civic for a Model 3",
                "i",
                "car",
                "Model 3",
            ),
            (
                "I got promoted to staff engineer last week",
                "i",
                "role",
                "staff engineer",
            ),
            (
                "We adopted a beagle named Max",
                "i",
                "pet",
                "beagle named Max",
            ),
            ("I switched to Neovim", "i", "tool", "Neovim"),
            (
                "My brother moved to Denver",
                "brother",
                "location",
                "Denver",
            ),
            ("I'm studying at McGill now", "i", "school", "McGill"),
            ("Tom got a job at Stripe", "tom", "employer", "Stripe"),
        ] {
            assert_eq!(
                one(text),
                Some((subject.to_string(), attribute, value.to_string())),
                "{text}"
            );
        }
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
            "The team lives in Slack.",
            "Ana lives in a small flat.",
            "I might move to Berlin someday.",
            "My wife wants to work at Google.",
            "She moved to Rome.",
            "I'm on the fence about it.",
            "Thinking about switching to Vim.",
        ] {
            assert_eq!(one(t), None, "{t}");
        }
    }
}
