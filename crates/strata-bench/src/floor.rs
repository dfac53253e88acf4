//! The relevance floor on held-out projects (`strata eval relevance-floor`):
//! does a recall with the configured floor find the note that answers a
//! question asked in other words, and answer "nothing relevant" when no
//! note does?
//!
//! The files (`data/relevance-floor/*.json`, written by someone who never
//! saw the ranking code) hold projects of notes and questions; each
//! question names the note that answers it, or none. Each project is
//! stored in its own scope, created now, and every question is a recall of
//! five with the engine's configuration.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use strata::{Confirm, Engine, Kind, NewMemory, Recall, Scope, View};

/// One project of a file.
#[derive(Debug, Deserialize)]
struct Project {
    name: String,
    notes: Vec<String>,
    questions: Vec<Question>,
}

/// One question: the index of the note that answers it, or none.
#[derive(Debug, Deserialize)]
struct Question {
    q: String,
    answer: Option<usize>,
    #[serde(rename = "type", default)]
    kind: String,
}

#[derive(Debug, Deserialize)]
struct File {
    projects: Vec<Project>,
}

/// How one type of question fared.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FloorScore {
    /// Questions of this type.
    pub questions: usize,
    /// With an answer: it came first.
    pub first: usize,
    /// With an answer: it was among the five returned.
    pub found: usize,
    /// The recall returned nothing.
    pub nothing: usize,
}

/// A run over some files.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FloorReport {
    /// Projects stored.
    pub projects: usize,
    /// Notes stored.
    pub notes: usize,
    /// The floor the engine applied (`ranking.min_relevance`).
    pub min_relevance: f64,
    /// By question type (`paraphrase`, `plain`, `near_miss`, `off_topic`).
    pub by_type: BTreeMap<String, FloorScore>,
    /// Questions with an answer: share found among the five.
    pub answered_found: f64,
    /// Questions without one: share answered "nothing relevant".
    pub unanswerable_nothing: f64,
    /// One line per question that went wrong: what was asked, what came
    /// back first and its evidence.
    pub misses: Vec<String>,
}

/// A candidate's evidence in a [`FloorLine`]: note index, similarity, text
/// match (bm25 over the best), vector rank.
pub type FloorCandidate = (usize, Option<f32>, Option<f64>, Option<usize>);

/// One question of `--per-question`: every candidate's evidence before the
/// floor, to try a floor on without running the engine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FloorLine {
    /// The question's type.
    pub kind: String,
    /// The note that answers it.
    pub answer: Option<usize>,
    /// Every candidate, best first.
    pub candidates: Vec<FloorCandidate>,
}

/// Runs every question of `files` against `engine` (an empty store); with
/// `per_question`, writes a [`FloorLine`] per question there.
pub fn relevance_floor(
    engine: &Engine,
    files: &[&Path],
    per_question: Option<&Path>,
) -> Result<FloorReport> {
    let mut lines = Vec::new();
    let mut rep = FloorReport {
        min_relevance: engine.config().ranking.min_relevance,
        ..FloorReport::default()
    };
    // Every file is read and checked before anything is stored.
    let mut projects: Vec<(Scope, Project)> = Vec::new();
    for (f, path) in files.iter().enumerate() {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let file: File = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a relevance-floor file", path.display()))?;
        for p in file.projects {
            for q in &p.questions {
                if let Some(a) = q.answer.filter(|&a| a >= p.notes.len()) {
                    bail!(
                        "{}: project {}, question {:?}: answer {a} is past its last note ({})",
                        path.display(),
                        p.name,
                        q.q,
                        p.notes.len().saturating_sub(1)
                    );
                }
            }
            projects.push((Scope::parse(&format!("project/f{f}-{}", p.name))?, p));
        }
    }
    for (scope, p) in &projects {
        let batch = p
            .notes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                NewMemory::new(scope.clone(), n.clone())
                    .kind(Kind::Note)
                    .key(format!("n{i}"))
            })
            .collect();
        engine.remember_batch(batch, Confirm::No)?;
        rep.projects += 1;
        rep.notes += p.notes.len();
    }
    engine.embed_all(&mut |_, _| {})?;
    let (mut found, mut answerable, mut nothing, mut unanswerable) = (0, 0, 0, 0);
    let asked = projects
        .iter()
        .flat_map(|(scope, p)| p.questions.iter().map(move |q| (scope, &p.notes, q)));
    for (scope, notes, q) in asked {
        let mut r = Recall::new(q.q.clone(), View::scope(scope.clone()));
        r.limit = 5;
        r.touch = false;
        r.explain = true;
        let hits = engine.recall(&r)?;
        if per_question.is_some() {
            let mut all = r.clone();
            all.limit = usize::MAX;
            all.min_relevance = Some(0.0);
            let candidates = engine
                .recall(&all)?
                .into_iter()
                .filter_map(|h| {
                    let n = h.memory.key.as_deref()?.strip_prefix('n')?.parse().ok()?;
                    let p = h.explain?;
                    Some((n, p.similarity, p.text_match, p.vector_rank))
                })
                .collect();
            lines.push(FloorLine {
                kind: q.kind.clone(),
                answer: q.answer,
                candidates,
            });
        }
        let keys: Vec<usize> = hits
            .iter()
            .filter_map(|h| h.memory.key.as_deref()?.strip_prefix('n')?.parse().ok())
            .collect();
        let s = rep.by_type.entry(q.kind.clone()).or_default();
        s.questions += 1;
        let first = hits.first().map(|h| {
            let why = h
                .explain
                .as_ref()
                .and_then(|p| p.passed.clone())
                .unwrap_or_default();
            format!("{:?} ({why})", h.memory.content)
        });
        if keys.is_empty() {
            s.nothing += 1;
        }
        match q.answer {
            Some(a) => {
                answerable += 1;
                if keys.first() == Some(&a) {
                    s.first += 1;
                }
                if keys.contains(&a) {
                    s.found += 1;
                    found += 1;
                } else {
                    rep.misses.push(format!(
                        "{} {}: {:?} missed {:?}; first {}",
                        q.kind,
                        scope,
                        q.q,
                        notes[a],
                        first.unwrap_or_else(|| "nothing".into())
                    ));
                }
            }
            None => {
                unanswerable += 1;
                if keys.is_empty() {
                    nothing += 1;
                } else {
                    rep.misses.push(format!(
                        "{} {}: {:?} answered {}",
                        q.kind,
                        scope,
                        q.q,
                        first.unwrap_or_default()
                    ));
                }
            }
        }
    }
    if let Some(path) = per_question {
        let mut out = String::new();
        for l in &lines {
            out.push_str(&serde_json::to_string(l)?);
            out.push('\n');
        }
        std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))?;
    }
    rep.answered_found = found as f64 / answerable.max(1) as f64;
    rep.unanswerable_nothing = nothing as f64 / unanswerable.max(1) as f64;
    Ok(rep)
}
