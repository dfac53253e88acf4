//! The topic detector: what the user keeps coming back to, session after
//! session.
//!
//! A recurring topic is a set of salient words that the user's turns and
//! notes of one scope share in at least `topic_min_sessions` sessions, on
//! more than one day. It is found from word statistics alone, with no list
//! of phrasings: every turn is reduced to its content words (stemmed as
//! the full-text index stems them), and two words make a topic's core when
//!
//! - they occur together in turns of `topic_min_sessions` sessions or
//!   more, on at least two days (one long session, or a burst of mentions
//!   in one, is not a topic that recurs);
//! - they belong together: of the turns naming the rarer of the two, at
//!   least `topic_min_share` name both (words that meet by chance, such
//!   as one of many services and one of many verbs, meet in few of them);
//! - neither is background vocabulary: a word in more than three quarters
//!   of the scope's sessions (the project's name, the word for what the
//!   project is about) says nothing about one topic (the rule applies
//!   from twice `topic_min_sessions` sessions on), and a word said in
//!   more than half of the store's scopes (from four scopes on) is how
//!   people talk there ("the tests pass on my machine", "thanks, that
//!   fixed it"), not something one scope keeps coming back to.
//!
//! A single shared word is never a topic: different things share words
//! ("the Postgres backup", "the Postgres upgrade"). Pairs whose turns are
//! mostly the same merge into one topic, so a topic named in other words
//! each time ("deadlines on gRPC streams", "the gRPC stream deadline")
//! gathers the turns of all its pairs. Vectors are not read: the store
//! gives a memory's vector to searches only, and words that meet in three
//! sessions of one scope are already rare evidence.
//!
//! Turns that are evidence of another detector's learned memory (a
//! repeated instruction, an area of confusion) are left out: a pattern is
//! learned once, by the detector that says what it is.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::{Evidence, Finding, users_word};
use crate::model::{Kind, Memory};
use crate::scope::Scope;
use crate::text;

/// The detector's name.
pub(super) const NAME: &str = "topic";
/// Confidence of one session's mentions (0.3: a topic in three sessions
/// makes 0.66; talking about something says less than stating a
/// preference).
pub(super) const PER_EVIDENCE: f64 = 0.3;
/// Share of a scope's sessions above which a word is its background: in
/// nearly every session, it is what the scope is about (the project's
/// name), not a topic it comes back to.
const BACKGROUND: f64 = 0.75;
/// Share of the store's scopes above which a word is common: said in most
/// projects, it says how people talk there, not what one project keeps
/// coming back to ("the tests pass on my machine", "thanks, that fixed
/// it").
pub(super) const COMMON: f64 = 0.5;
/// Scopes the store needs before a word can be common there.
pub(super) const MIN_SCOPES: usize = 4;
/// Share of a pair's turns that must be a topic's for the pair to join it.
const SAME_TOPIC: f64 = 0.5;
/// Words of a topic named in its learned memory.
const SHOWN: usize = 3;
/// Most words of one turn that make pairs (the rarest in the scope first):
/// bounds the pairs of a long turn at 120.
const MAX_TERMS: usize = 16;

/// What the detector is tuned with (from `[learning]`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Params {
    pub min_sessions: usize,
    pub min_share: f64,
}

/// The kinds and writers it reads: what the user said or noted.
pub(super) fn reads(m: &Memory) -> bool {
    users_word(m) && matches!(m.kind, Kind::Conversation | Kind::Note)
}

/// A topic learned before (active or rejected), for keeping its subject.
pub(super) struct Known {
    pub subject: String,
    pub evidence: BTreeSet<String>,
}

/// The words of `m` a topic can be made of: its content words of three
/// letters or more, without digits, stemmed.
fn words(m: &Memory) -> impl Iterator<Item = (String, String)> + '_ {
    text::query_terms(&m.content)
        .into_iter()
        .filter(|w| w.chars().count() >= 3 && !w.chars().any(|c| c.is_numeric()))
        .map(|w| (text::stem(&w), w))
}

/// The stems said in more than [`COMMON`] of the scopes of `by_scope`
/// (each scope's turns and notes); none below [`MIN_SCOPES`] scopes.
pub(super) fn common_words<'a>(by_scope: impl Iterator<Item = &'a [Memory]>) -> HashSet<String> {
    let mut scopes = 0usize;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for ms in by_scope {
        let here: HashSet<String> = ms
            .iter()
            .filter(|m| reads(m))
            .flat_map(|m| words(m).map(|(s, _)| s))
            .collect();
        if here.is_empty() {
            continue;
        }
        scopes += 1;
        for s in here {
            *seen.entry(s).or_default() += 1;
        }
    }
    if scopes < MIN_SCOPES {
        return HashSet::new();
    }
    seen.into_iter()
        .filter(|(_, n)| *n as f64 > COMMON * scopes as f64)
        .map(|(s, _)| s)
        .collect()
}

fn day(m: &Memory) -> i64 {
    m.created_at.as_second().div_euclid(86_400)
}

/// Recurring topics among `memories` (every turn and note of `scope`),
/// less the turns in `explained`. `known` keeps subjects stable: a topic
/// that shares most of its evidence with one learned before keeps its key.
pub(super) fn detect(
    scope: &Scope,
    memories: &[Memory],
    explained: &BTreeSet<String>,
    known: &[Known],
    common: &HashSet<String>,
    p: Params,
) -> Vec<Finding> {
    let mut docs: Vec<&Memory> = memories
        .iter()
        .filter(|m| reads(m) && !explained.contains(&m.id))
        .collect();
    docs.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    // Stems of each turn, interned, with the surface words seen for each.
    let mut ids: HashMap<String, u32> = HashMap::new();
    let mut names: Vec<String> = Vec::new();
    let mut surface: Vec<BTreeMap<String, usize>> = Vec::new();
    let mut units: Vec<String> = Vec::with_capacity(docs.len());
    let mut terms: Vec<Vec<u32>> = Vec::with_capacity(docs.len());
    for m in &docs {
        units.push(Evidence::of(m).unit);
        let mut ts: Vec<u32> = Vec::new();
        for (s, w) in words(m) {
            let id = *ids.entry(s.clone()).or_insert_with(|| {
                names.push(s);
                surface.push(BTreeMap::new());
                (names.len() - 1) as u32
            });
            *surface[id as usize].entry(w).or_default() += 1;
            ts.push(id);
        }
        ts.sort_unstable();
        ts.dedup();
        terms.push(ts);
    }
    // Sessions of each word, and the turns naming it.
    let n_units = units.iter().collect::<BTreeSet<_>>().len();
    let mut word_units: Vec<BTreeSet<&str>> = vec![BTreeSet::new(); names.len()];
    let mut df: Vec<usize> = vec![0; names.len()];
    for (d, ts) in terms.iter().enumerate() {
        for &t in ts {
            word_units[t as usize].insert(units[d].as_str());
            df[t as usize] += 1;
        }
    }
    let background = |t: u32| {
        common.contains(&names[t as usize])
            || (n_units >= 2 * p.min_sessions
                && word_units[t as usize].len() as f64 > BACKGROUND * n_units as f64)
    };
    // Pairs of salient words, with the turns naming both.
    let mut pairs: HashMap<(u32, u32), Vec<usize>> = HashMap::new();
    for (d, ts) in terms.iter().enumerate() {
        let mut keep: Vec<u32> = ts
            .iter()
            .copied()
            .filter(|&t| word_units[t as usize].len() >= p.min_sessions && !background(t))
            .collect();
        keep.sort_by_key(|&t| (df[t as usize], t));
        keep.truncate(MAX_TERMS);
        keep.sort_unstable();
        for (i, &a) in keep.iter().enumerate() {
            for &b in &keep[i + 1..] {
                pairs.entry((a, b)).or_default().push(d);
            }
        }
    }
    let spread = |ds: &[usize]| {
        let u: BTreeSet<&str> = ds.iter().map(|&d| units[d].as_str()).collect();
        let days: BTreeSet<i64> = ds.iter().map(|&d| day(docs[d])).collect();
        (u.len(), days.len())
    };
    let mut cores: Vec<((u32, u32), Vec<usize>, usize)> = pairs
        .into_iter()
        .filter_map(|((a, b), ds)| {
            let rarer = df[a as usize].min(df[b as usize]);
            if (ds.len() as f64) < p.min_share * rarer as f64 {
                return None;
            }
            let (u, days) = spread(&ds);
            (u >= p.min_sessions && days >= 2).then_some(((a, b), ds, u))
        })
        .collect();
    // Strongest first, so a topic grows from its most revisited pair.
    cores.sort_by(|x, y| {
        y.2.cmp(&x.2)
            .then(y.1.len().cmp(&x.1.len()))
            .then(x.0.cmp(&y.0))
    });
    struct Topic {
        words: BTreeSet<u32>,
        docs: BTreeSet<usize>,
    }
    let mut topics: Vec<Topic> = Vec::new();
    for ((a, b), ds, _) in cores {
        let ds: BTreeSet<usize> = ds.into_iter().collect();
        let home = topics.iter_mut().find(|t| {
            let shared = t.docs.intersection(&ds).count();
            shared as f64 >= SAME_TOPIC * ds.len() as f64
        });
        match home {
            Some(t) => {
                // A turn the pair brings joins when it also names a word
                // the topic had: "Sarah asked me about …" said of this
                // topic twice and of another once brings only the two.
                let had = t.words.clone();
                let joins = |d: &usize| {
                    t.docs.contains(d)
                        || terms[*d]
                            .iter()
                            .any(|w| *w != a && *w != b && had.contains(w))
                };
                let new: Vec<usize> = ds.iter().copied().filter(joins).collect();
                t.words.extend([a, b]);
                t.docs.extend(new);
            }
            None => topics.push(Topic {
                words: BTreeSet::from([a, b]),
                docs: ds,
            }),
        }
    }
    // Name each topic, keep the subject it had, and merge topics that end
    // up under one subject.
    let mut found: BTreeMap<String, (Vec<u32>, BTreeSet<usize>)> = BTreeMap::new();
    for t in topics {
        let mut ranked: Vec<u32> = t.words.iter().copied().collect();
        let named_in = |w: u32| t.docs.iter().filter(|&&d| terms[d].contains(&w)).count();
        ranked.sort_by_key(|&w| (std::cmp::Reverse(named_in(w)), df[w as usize], w));
        let ev: BTreeSet<&str> = t.docs.iter().map(|&d| docs[d].id.as_str()).collect();
        let before = known
            .iter()
            .map(|k| {
                let shared = k
                    .evidence
                    .iter()
                    .filter(|id| ev.contains(id.as_str()))
                    .count();
                (shared, k)
            })
            .filter(|(shared, k)| *shared * 2 >= k.evidence.len().min(ev.len()) && *shared > 0)
            .max_by(|x, y| x.0.cmp(&y.0).then(y.1.subject.cmp(&x.1.subject)));
        let subject = match before {
            Some((_, k)) => k.subject.clone(),
            None => {
                let mut s: Vec<&str> = ranked
                    .iter()
                    .take(3)
                    .map(|&w| names[w as usize].as_str())
                    .collect();
                s.sort_unstable();
                s.join("-")
            }
        };
        let e = found.entry(subject).or_default();
        for w in ranked {
            if !e.0.contains(&w) {
                e.0.push(w);
            }
        }
        e.1.extend(t.docs);
    }
    found
        .into_iter()
        .filter_map(|(subject, (words, ds))| {
            let ds: Vec<usize> = ds.into_iter().collect();
            let (sessions, days) = spread(&ds);
            if sessions < p.min_sessions || days < 2 {
                return None;
            }
            let shown: Vec<String> = words
                .iter()
                .take(SHOWN)
                .map(|&w| {
                    // The word as it was most often written.
                    surface[w as usize]
                        .iter()
                        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
                        .map_or_else(|| names[w as usize].clone(), |(s, _)| s.clone())
                })
                .collect();
            let stems: Vec<&str> = words.iter().map(|&w| names[w as usize].as_str()).collect();
            let mut evidence: Vec<Evidence> = ds.iter().map(|&d| Evidence::of(docs[d])).collect();
            evidence.sort();
            Some(Finding {
                scope: scope.clone(),
                detector: NAME,
                subject: subject.clone(),
                kind: Kind::Pattern,
                // Short: it is read in contexts beside the turns it points
                // at, and its sessions and dates are in the record.
                content: format!("Recurring topic: {}", shown.join(", ")),
                importance: 0.5,
                detail: serde_json::json!({NAME: {
                    "subject": subject,
                    "terms": shown,
                    "stems": stems,
                    "sessions": sessions,
                }}),
                evidence,
                whole: true,
                at: None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Params = Params {
        min_sessions: 3,
        min_share: 0.7,
    };

    /// A user's turn in session `s`, on day `day`.
    fn turn(text: &str, s: usize, day: i64) -> Memory {
        let at = jiff::Timestamp::from_second(1_700_000_000 + 86_400 * day + s as i64).unwrap();
        let mut m = crate::testutil::memory("project/acme", text, at);
        m.kind = Kind::Conversation;
        m.session = Some(format!("s{s}"));
        m
    }

    /// Filler in every session: other services, generic verbs, the
    /// project's name.
    fn background(sessions: usize) -> Vec<Memory> {
        let things = ["billing", "search", "auth", "export", "reports", "upload"];
        let mut out = Vec::new();
        for s in 0..sessions {
            for (k, frame) in [
                "Let's look at the {} module for Falcon next.",
                "The {} tests pass on my machine now.",
                "Can you summarise what changed in {} for Falcon?",
            ]
            .iter()
            .enumerate()
            {
                let thing = things[(s * 3 + k) % things.len()];
                out.push(turn(&frame.replace("{}", thing), s, s as i64 * 7));
            }
        }
        out
    }

    fn run(ms: &[Memory]) -> Vec<Finding> {
        let scope = Scope::parse("project/acme").unwrap();
        detect(&scope, ms, &BTreeSet::new(), &[], &HashSet::new(), P)
    }

    fn ids(f: &Finding) -> BTreeSet<&str> {
        f.evidence.iter().map(|e| e.id.as_str()).collect()
    }

    #[test]
    fn a_topic_named_in_other_words_in_three_sessions_is_learned() {
        let mut ms = background(10);
        let said = [
            turn("Can we revisit the gRPC streaming deadlines?", 1, 7),
            turn(
                "The deadline on gRPC streams bit us again in staging.",
                4,
                28,
            ),
            turn(
                "I read a post about gRPC stream deadlines over the weekend.",
                8,
                56,
            ),
        ];
        ms.extend(said.iter().cloned());
        let found = run(&ms);
        assert_eq!(
            found.len(),
            1,
            "{:?}",
            found.iter().map(|f| &f.content).collect::<Vec<_>>()
        );
        let f = &found[0];
        assert_eq!(ids(f), said.iter().map(|m| m.id.as_str()).collect());
        assert!(f.content.starts_with("Recurring topic: "), "{}", f.content);
        assert!(f.content.contains("grpc"), "{}", f.content);
        assert!(f.subject.contains("grpc"), "{}", f.subject);
        // The subject stays when the topic comes back in other words.
        let known = [Known {
            subject: "the-old-name".into(),
            evidence: ids(f).into_iter().map(String::from).collect(),
        }];
        ms.push(turn("Any news on the streaming deadline for gRPC?", 9, 63));
        let scope = Scope::parse("project/acme").unwrap();
        let again = detect(&scope, &ms, &BTreeSet::new(), &known, &HashSet::new(), P);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].subject, "the-old-name");
        assert_eq!(again[0].evidence.len(), 4);
    }

    #[test]
    fn two_sessions_one_burst_or_one_day_are_not_a_topic() {
        let mut ms = background(10);
        // Two sessions only.
        ms.push(turn("The Postgres vacuum schedule needs a look.", 2, 14));
        ms.push(turn("Postgres vacuum ran during peak hours again.", 6, 42));
        // Many mentions in one session.
        for k in 0..5 {
            ms.push(turn(
                &format!("Onboarding screens of the mobile app, take {k}: trim the copy."),
                3,
                21,
            ));
        }
        // Three sessions, all on one day.
        for s in 20..23 {
            ms.push(turn(
                "Kafka consumer lag is high on the ingest topic.",
                s,
                70,
            ));
        }
        let found = run(&ms);
        assert!(
            found.is_empty(),
            "{:?}",
            found.iter().map(|f| &f.content).collect::<Vec<_>>()
        );
    }

    #[test]
    fn one_shared_word_and_background_words_are_not_a_topic() {
        let mut ms = background(12);
        // "Postgres" in five sessions, each time about something else.
        ms.push(turn("The Postgres backup finished late.", 1, 7));
        ms.push(turn("Plan the Postgres upgrade for spring.", 3, 21));
        ms.push(turn("Postgres replica lag alerts were noisy.", 5, 35));
        ms.push(turn("Who owns the Postgres connection pool?", 7, 49));
        ms.push(turn("Postgres extensions need an inventory.", 9, 63));
        // Filler that meets by chance: "module" and a service, "Falcon"
        // in every session.
        let found = run(&ms);
        assert!(
            found.is_empty(),
            "{:?}",
            found.iter().map(|f| &f.content).collect::<Vec<_>>()
        );
    }

    #[test]
    fn turns_another_detector_learned_from_are_left_out() {
        let mut ms = background(10);
        let said = [
            turn("Always run the formatter before committing.", 1, 7),
            turn("Please always run the formatter before committing!", 4, 28),
            turn("Always run the formatter before committing, please.", 8, 56),
        ];
        ms.extend(said.iter().cloned());
        assert_eq!(run(&ms).len(), 1);
        let explained: BTreeSet<String> = said.iter().map(|m| m.id.clone()).collect();
        let scope = Scope::parse("project/acme").unwrap();
        assert!(detect(&scope, &ms, &explained, &[], &HashSet::new(), P).is_empty());
    }

    #[test]
    fn two_topics_sharing_a_word_stay_apart() {
        let mut ms = background(12);
        let redis = [
            turn("Redis cluster failover took too long.", 1, 7),
            turn("Let's test the Redis failover in the cluster drill.", 4, 28),
            turn("Redis cluster failover worked this time.", 9, 63),
        ];
        let kafka = [
            turn("The Kafka cluster rebalancing is slow.", 2, 14),
            turn("Kafka rebalancing stalled the cluster again.", 6, 42),
            turn("Tune Kafka rebalancing on the new cluster.", 10, 70),
        ];
        ms.extend(redis.iter().cloned());
        ms.extend(kafka.iter().cloned());
        let found = run(&ms);
        assert_eq!(
            found.len(),
            2,
            "{:?}",
            found.iter().map(|f| &f.content).collect::<Vec<_>>()
        );
        let want: Vec<BTreeSet<&str>> = [&redis[..], &kafka[..]]
            .iter()
            .map(|g| g.iter().map(|m| m.id.as_str()).collect())
            .collect();
        for f in &found {
            assert!(want.contains(&ids(f)), "{}", f.content);
        }
    }
}
