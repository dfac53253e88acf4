//! Learning on histories nobody tuned on (`strata eval learning-heldout`):
//! hand-written agent histories (`data/learning-heldout/`, written by a
//! helper that never saw the detectors, their tests or the classifier's
//! training set), each user with planted standing preferences, a fact that
//! changes, a recurring topic and asides that must not be learned. Each
//! user's turns go to a scope of its own, upkeep learns once, and each
//! planted item is looked for among the learned memories of its scope.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result};
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use strata::{Engine, Kind, NewMemory, Role, Scope, View};

// The files' other fields (a user's name, a fact's old turns) are for
// people reading them; the scoring does not need them.
#[derive(Debug, Deserialize)]
struct File {
    users: Vec<User>,
}

#[derive(Debug, Deserialize)]
struct User {
    user: String,
    sessions: Vec<Session>,
    #[serde(default)]
    preferences: Vec<Preference>,
    #[serde(default)]
    facts: Vec<Fact>,
    #[serde(default)]
    topics: Vec<Topic>,
    #[serde(default)]
    asides: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Session {
    id: String,
    day: i64,
    turns: Vec<Turn>,
}

#[derive(Debug, Deserialize)]
struct Turn {
    id: String,
    role: String,
    text: String,
}

#[derive(Debug, Deserialize)]
struct Preference {
    id: String,
    gist: String,
    turns: Vec<String>,
    #[serde(default)]
    reversed_in: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Fact {
    id: String,
    person: String,
    attribute: String,
    old: String,
    new: String,
    new_turns: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Topic {
    id: String,
    gist: String,
    turns: Vec<String>,
}

/// Found against planted, for one category.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Found {
    /// Planted items.
    pub planted: usize,
    /// Planted items learned.
    pub found: usize,
    /// Learned memories of the category.
    pub learned: usize,
    /// Of those, the ones whose evidence is mostly one planted item.
    pub correct: usize,
    /// `found / planted`.
    pub recall: f64,
    /// `correct / learned`.
    pub precision: f64,
}

impl Found {
    fn finish(&mut self) {
        self.recall = ratio(self.found, self.planted);
        self.precision = ratio(self.correct, self.learned);
    }
}

/// What `learning_heldout` measured over one or more files.
#[derive(Debug, Default, Serialize)]
pub struct HeldoutReport {
    /// Users (one scope each).
    pub users: usize,
    /// Turns written.
    pub turns: usize,
    /// Standing preferences stated in two sessions or more.
    pub preference: Found,
    /// Facts that changed, learned with their new value.
    pub fact: Found,
    /// Facts whose learned memory states the old value as current.
    pub fact_old_as_current: usize,
    /// Recurring topics.
    pub topic: Found,
    /// Learned memories with an aside among their evidence.
    pub asides_learned: usize,
    /// Asides planted.
    pub asides: usize,
    /// The run's notes (what learning said about itself).
    pub notes: Vec<String>,
    /// What was missed or wrongly learned, one line each (for tuning).
    pub misses: Vec<String>,
}

/// Writes every user of `files` into `engine` (scope `project/<user>`),
/// runs learning once, and scores what was learned.
pub fn learning_heldout(engine: &Engine, files: &[&Path]) -> Result<HeldoutReport> {
    let mut users = Vec::new();
    for f in files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let file: File = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a held-out learning file", f.display()))?;
        users.extend(file.users);
    }
    let start = Timestamp::now() - SignedDuration::from_hours(24 * 150);
    let mut rep = HeldoutReport {
        users: users.len(),
        ..HeldoutReport::default()
    };
    // Turn id → memory id, per user.
    let mut ids: Vec<BTreeMap<String, String>> = Vec::new();
    for u in &users {
        let scope = Scope::parse(&format!("project/{}", u.user))?;
        let mut items = Vec::new();
        let mut turn_ids = Vec::new();
        for s in &u.sessions {
            let mut at = start + SignedDuration::from_hours(24 * s.day + 9);
            for t in &s.turns {
                at += SignedDuration::from_mins(2);
                let role = match t.role.as_str() {
                    "assistant" => Role::Assistant,
                    _ => Role::User,
                };
                items.push(
                    NewMemory::new(scope.clone(), t.text.clone())
                        .kind(Kind::Conversation)
                        .role(role)
                        .session(format!("{}-{}", u.user, s.id))
                        .created_at(at),
                );
                turn_ids.push(t.id.clone());
            }
        }
        rep.turns += items.len();
        let written = engine.remember_batch(items, strata::Confirm::No)?;
        ids.push(
            turn_ids
                .into_iter()
                .zip(written.into_iter().map(|m| m.id))
                .collect(),
        );
    }
    let run = engine.learn()?;
    rep.notes = run.notes.clone();
    for (u, ids) in users.iter().zip(&ids) {
        let scope = Scope::parse(&format!("project/{}", u.user))?;
        let learned = engine.learned(&View::scope(scope))?;
        let turn_of: BTreeMap<&str, &str> =
            ids.iter().map(|(t, m)| (m.as_str(), t.as_str())).collect();
        let evidence = |l: &strata::Learned| -> Vec<&str> {
            l.evidence
                .iter()
                .filter_map(|id| turn_of.get(id.as_str()).copied())
                .collect()
        };
        let asides: BTreeSet<&str> = u.asides.iter().map(String::as_str).collect();
        rep.asides += asides.len();
        for (m, l) in &learned {
            let ev = evidence(l);
            if ev.iter().any(|t| asides.contains(t)) {
                rep.asides_learned += 1;
                rep.misses.push(format!(
                    "{}: aside learned ({}): {}",
                    u.user, l.detector, m.content
                ));
            }
        }
        // Preferences: a learned preference is the planted one whose turns
        // make at least half its evidence.
        let stated: Vec<&Preference> = u.preferences.iter().collect();
        let mut found = BTreeSet::new();
        for (m, l) in learned.iter().filter(|(_, l)| l.detector == "preference") {
            rep.preference.learned += 1;
            let ev = evidence(l);
            let owner = stated.iter().find(|p| {
                let n = ev
                    .iter()
                    .filter(|t| p.turns.iter().any(|x| x == *t))
                    .count();
                2 * n >= ev.len().max(1)
            });
            match owner {
                Some(p) => {
                    rep.preference.correct += 1;
                    found.insert(p.id.as_str());
                }
                None => rep.misses.push(format!(
                    "{}: preference learned from no planted one: {}",
                    u.user, m.content
                )),
            }
        }
        for p in &stated {
            rep.preference.planted += 1;
            if found.contains(p.id.as_str()) {
                rep.preference.found += 1;
            } else {
                let reversed = if p.reversed_in.is_some() {
                    " (reversed later)"
                } else {
                    ""
                };
                rep.misses.push(format!(
                    "{}: preference missed{reversed}: {}",
                    u.user, p.gist
                ));
            }
        }
        // Facts: the learned fact of that person and attribute states the
        // new value.
        let facts: Vec<&strata::Memory> = learned
            .iter()
            .filter(|(_, l)| l.detector == "fact")
            .map(|(m, _)| m)
            .collect();
        rep.fact.learned += facts.len();
        for f in &u.facts {
            rep.fact.planted += 1;
            // A value is stated when at least half its words (of three
            // letters or more) are in the content: "a dachshund, Kanel" is
            // stated by "has a pet: Kanel".
            let says = |m: &strata::Memory, v: &str| {
                let content = m.content.to_lowercase();
                // What a value says in brackets is a gloss, not the value.
                let v = v.split('(').next().unwrap_or(v);
                let words: Vec<String> = v
                    .to_lowercase()
                    .split(|c: char| !c.is_alphanumeric())
                    .filter(|w| w.len() >= 3 || w.chars().all(|c| c.is_ascii_digit()))
                    .filter(|w| !matches!(*w, "the" | "and" | "team"))
                    .map(String::from)
                    .collect();
                let said: Vec<&str> = content.split(|c: char| !c.is_alphanumeric()).collect();
                let n = words.iter().filter(|w| said.contains(&w.as_str())).count();
                !words.is_empty() && 2 * n >= words.len()
            };
            let new_ids: BTreeSet<&str> = f
                .new_turns
                .iter()
                .filter_map(|t| ids.get(t).map(String::as_str))
                .collect();
            let with_new = facts.iter().find(|m| says(m, &f.new));
            let from_new = learned.iter().any(|(m, l)| {
                l.detector == "fact"
                    && l.evidence.iter().any(|e| new_ids.contains(e.as_str()))
                    && says(m, &f.new)
            });
            if with_new.is_some() || from_new {
                rep.fact.found += 1;
                rep.fact.correct += 1;
            } else {
                let have: Vec<&str> = facts.iter().map(|m| m.content.as_str()).collect();
                rep.misses.push(format!(
                    "{}: fact missed: {} {} {} -> {} (learned: {have:?})",
                    u.user, f.person, f.attribute, f.old, f.new
                ));
            }
            if facts.iter().any(|m| says(m, &f.old) && !says(m, &f.new)) {
                rep.fact_old_as_current += 1;
                rep.misses.push(format!(
                    "{}: fact {} served with the old value {}",
                    u.user, f.id, f.old
                ));
            }
        }
        // Topics: a learned topic whose evidence is at least half the
        // planted topic's turns.
        let mut found = BTreeSet::new();
        for (m, l) in learned.iter().filter(|(_, l)| l.detector == "topic") {
            rep.topic.learned += 1;
            let ev = evidence(l);
            let owner = u.topics.iter().find(|k| {
                let n = ev
                    .iter()
                    .filter(|t| k.turns.iter().any(|x| x == *t))
                    .count();
                2 * n >= ev.len().max(1) && n >= 2
            });
            match owner {
                Some(k) => {
                    rep.topic.correct += 1;
                    found.insert(k.id.as_str());
                }
                None => rep.misses.push(format!(
                    "{}: topic learned from no planted one: {}",
                    u.user, m.content
                )),
            }
        }
        for k in &u.topics {
            rep.topic.planted += 1;
            if found.contains(k.id.as_str()) {
                rep.topic.found += 1;
            } else {
                rep.misses
                    .push(format!("{}: topic missed: {}", u.user, k.gist));
            }
        }
    }
    rep.preference.finish();
    rep.fact.finish();
    rep.topic.finish();
    Ok(rep)
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}
