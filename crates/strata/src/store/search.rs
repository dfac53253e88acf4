//! One search pipeline above the stores: BM25 ranking over a backend's
//! postings and statistics ([`Postings`], what tantivy's
//! `Bm25StatisticsProvider` is to its scorer), the exact top-k of a vector
//! scan ([`TopK`]), and the checks every store makes of incoming vectors
//! ([`check_vectors`]). A backend answers narrow questions (which memories
//! of the view hold this term, how many memories the view has, what are
//! these candidates' signals); how they become a ranking is decided here,
//! once, so every backend ranks alike.
//!
//! Not here: a backend's dialect (FTS5 expressions, SQL) and the view and
//! filter checks on each candidate, which the backend makes on the row
//! itself.

use std::collections::{BinaryHeap, HashSet};

use crate::Result;
use crate::error::Error;
use crate::rank::Signals;
use crate::text::{self, Bm25};

/// Fewest matching memories a text search reads and scores before it keeps
/// only those matching the rarest terms (see [`text_search`]).
pub const SEARCH_CAP_MIN: usize = 500;

/// What a backend gives BM25, for one query's view and filter.
pub trait Postings {
    /// The backend's key for a memory (SQLite's rowid).
    type Doc: Copy + Eq + std::hash::Hash + Ord;
    /// The memories of the view whose content holds `term` (one query
    /// term, stemmed and matched as FTS5's `porter unicode61` tokenizer does).
    fn docs_with(&mut self, term: &str) -> Result<Vec<Self::Doc>>;
    /// [`Postings::docs_with`] of each of `terms`, in order; a backend
    /// across a network answers them in one round trip.
    fn docs_with_each(&mut self, terms: &[String]) -> Result<Vec<Vec<Self::Doc>>> {
        terms.iter().map(|t| self.docs_with(t)).collect()
    }
    /// Active memories in the view, whatever the filter: BM25's N.
    fn doc_count(&mut self) -> Result<usize>;
    /// The view's learned memories (`source = learned`), whatever the
    /// filter. They are matched and scored like any other, but left out of
    /// the statistics: a learned memory restates its evidence, so counting
    /// it would count the evidence's words twice and move every other
    /// memory's score each time upkeep learns.
    fn learned(&mut self) -> Result<HashSet<Self::Doc>>;
    /// The signals of those of `docs` that pass the query (view, expiry,
    /// filter), checked on the memory itself; any order.
    fn signals(&mut self, docs: &[Self::Doc]) -> Result<Vec<(Self::Doc, Signals)>>;
}

/// The memories matching any of `terms`, best BM25 first, at most `limit`.
///
/// Statistics are the view's: N is its size (or the largest document
/// frequency, should a count lag), document frequencies are counted within
/// it, the average length is over the candidates scored. Two populations
/// keep learning from moving what agents said: a memory an agent wrote is
/// scored against the view less its learned memories
/// ([`Postings::learned`]), so upkeep learning never changes its score; a
/// learned memory against the whole view, so the labels all learned
/// memories share ("Recurring topic: …") weigh as little as they say.
/// When very many memories match, only the `max(4 × limit, 500)` that
/// match the rarest terms (the newest first among equals) are read and
/// scored: the rest could only rank below them on length alone.
pub fn text_search<P: Postings>(
    idx: &mut P,
    terms: &[String],
    limit: usize,
) -> Result<Vec<(Signals, f64)>> {
    if terms.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let (mut df_all, mut df_told) = (Vec::new(), Vec::new());
    let each = idx.docs_with_each(terms)?;
    let learned = idx.learned()?;
    // Every (memory, term) match, sorted: each memory's terms in a run,
    // in the query's order. A map from memory to its terms cost a hash and
    // a small vector a memory, thousands a recall in a large view. Each
    // term's memories come in the index's order (SQLite's: by rowid), and
    // a stable sort merges such runs rather than sorting anew.
    let mut pairs: Vec<(P::Doc, usize)> = Vec::with_capacity(each.iter().map(Vec::len).sum());
    for (i, docs) in each.into_iter().enumerate() {
        df_all.push(docs.len());
        df_told.push(docs.iter().filter(|d| !learned.contains(d)).count());
        pairs.extend(docs.into_iter().map(|d| (d, i)));
    }
    if pairs.is_empty() {
        return Ok(Vec::new());
    }
    pairs.sort();
    // The indices of the terms memory `d` holds: its run of pairs.
    let terms_of = |d: P::Doc| {
        let from = pairs.partition_point(|p| p.0 < d);
        let to = from + pairs[from..].partition_point(|p| p.0 == d);
        pairs[from..to].iter().map(|p| p.1)
    };
    let n_all = idx.doc_count()?;
    let stats =
        |n: usize, df: &[usize]| Bm25::new(n.max(df.iter().copied().max().unwrap_or(0)), df);
    let all = stats(n_all, &df_all);
    let told = stats(n_all.saturating_sub(learned.len()), &df_told);
    let bm = |d: &P::Doc| if learned.contains(d) { &all } else { &told };
    let cap = limit.saturating_mul(4).max(SEARCH_CAP_MIN);
    let mut cands: Vec<(f64, P::Doc)> = pairs
        .chunk_by(|a, b| a.0 == b.0)
        .map(|run| (bm(&run[0].0).weight(run.iter().map(|p| p.1)), run[0].0))
        .collect();
    if cands.len() > cap {
        cands.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
        cands.truncate(cap);
    }
    let docs: Vec<P::Doc> = cands.into_iter().map(|(_, d)| d).collect();
    let rows = idx.signals(&docs)?;
    let avg_all = mean_len(rows.iter().map(|(_, s)| s));
    let avg_told = mean_len(
        rows.iter()
            .filter(|(d, _)| !learned.contains(d))
            .map(|(_, s)| s),
    );
    let mut hits: Vec<(Signals, f64)> = rows
        .into_iter()
        .map(|(d, s)| {
            let avglen = if learned.contains(&d) {
                avg_all
            } else {
                avg_told
            };
            let score = bm(&d).score(terms_of(d), f64::from(s.tokens), avglen);
            (s, score)
        })
        .collect();
    text::sort_hits(&mut hits, |s| s.id.as_str());
    hits.truncate(limit);
    Ok(hits)
}

/// The mean token count of `rows` (0 for none).
fn mean_len<'a>(rows: impl Iterator<Item = &'a Signals>) -> f64 {
    let (sum, n) = rows.fold((0.0, 0usize), |(s, n), r| (s + f64::from(r.tokens), n + 1));
    sum / (n.max(1) as f64)
}

/// The `limit` most similar of a scan, exactly: a min-heap of (similarity,
/// doc). A tie at the boundary keeps the larger doc key, so a scan's result
/// does not depend on its order.
#[derive(Debug)]
pub struct TopK<D: Ord> {
    heap: BinaryHeap<std::cmp::Reverse<(Sim, D)>>,
    limit: usize,
}

impl<D: Ord> TopK<D> {
    /// An empty selection of at most `limit`.
    pub fn new(limit: usize) -> TopK<D> {
        TopK {
            heap: BinaryHeap::with_capacity(limit.saturating_add(1).min(1 << 16)),
            limit,
        }
    }

    /// Offers one scanned document.
    pub fn push(&mut self, doc: D, sim: f32) {
        if self.limit == 0 {
            return;
        }
        let cand = (Sim(sim), doc);
        if self.heap.len() < self.limit {
            self.heap.push(std::cmp::Reverse(cand));
        } else if self.heap.peek().is_some_and(|m| cand > m.0) {
            self.heap.pop();
            self.heap.push(std::cmp::Reverse(cand));
        }
    }

    /// The selection, in no particular order (the caller loads and sorts
    /// it with [`super::sort_similar`]).
    pub fn into_vec(self) -> Vec<(D, f32)> {
        self.heap.into_iter().map(|r| (r.0.1, r.0.0.0)).collect()
    }
}

/// An f32 with a total order, for the similarity heap.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Sim(f32);

impl Eq for Sim {}

impl PartialOrd for Sim {
    fn partial_cmp(&self, other: &Sim) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Sim {
    fn cmp(&self, other: &Sim) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Checks vectors a store is asked to keep for `model`: each of length
/// `dim`, and `dim` the length the store already holds for the model
/// (`held`), if any.
pub fn check_vectors(
    model: &str,
    dim: usize,
    held: Option<usize>,
    items: &[(String, String, Vec<f32>)],
) -> Result<()> {
    if let Some((id, _, v)) = items.iter().find(|(_, _, v)| v.len() != dim) {
        return Err(Error::Embedding(format!(
            "memory `{id}`: vector of length {} from `{model}`, which makes vectors of length {dim}",
            v.len()
        )));
    }
    match held {
        Some(d) if d != dim => Err(Error::Embedding(format!(
            "the store holds `{model}` vectors of length {d}, not {dim}: \
             run `strata reindex` after changing the model"
        ))),
        _ => Ok(()),
    }
}

/// Checks a stored memory's vector (a write, an import, a restore) against
/// the length `dim` its model holds in the store.
pub fn check_vector(id: &str, e: &crate::model::Embedding, dim: usize) -> Result<()> {
    if e.vector.len() == dim {
        return Ok(());
    }
    Err(Error::Embedding(format!(
        "memory `{id}`: a vector of length {} from `{}`, whose vectors in this store have length {dim}",
        e.vector.len(),
        e.model
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_keeps_the_best_whatever_the_order() {
        let sims = [0.1, 0.9, 0.5, 0.9, 0.3, 0.7];
        let mut a = TopK::new(3);
        let mut b = TopK::new(3);
        for (i, s) in sims.iter().enumerate() {
            a.push(i, *s);
        }
        for (i, s) in sims.iter().enumerate().rev() {
            b.push(i, *s);
        }
        let mut a = a.into_vec();
        let mut b = b.into_vec();
        a.sort_by_key(|x| x.0);
        b.sort_by_key(|x| x.0);
        assert_eq!(a, b);
        assert_eq!(a.iter().map(|x| x.0).collect::<Vec<_>>(), [1, 3, 5]);
        // A tie at the boundary: the larger key stays, whatever the order.
        for order in [[0usize, 1, 2], [2, 1, 0]] {
            let mut t = TopK::new(2);
            for i in order {
                t.push(i, [0.9, 0.5, 0.5][i]);
            }
            let mut v: Vec<usize> = t.into_vec().into_iter().map(|x| x.0).collect();
            v.sort();
            assert_eq!(v, [0, 2]);
        }
        assert!(TopK::<usize>::new(0).into_vec().is_empty());
    }

    #[test]
    fn vectors_keep_their_models_length() {
        let items = vec![("m1".to_string(), "c".to_string(), vec![0.0; 3])];
        assert!(check_vectors("m", 3, None, &items).is_ok());
        assert!(check_vectors("m", 3, Some(3), &items).is_ok());
        let e = check_vectors("m", 4, None, &items).unwrap_err();
        assert!(e.to_string().contains("`m1`"), "{e}");
        let e = check_vectors("m", 3, Some(8), &items).unwrap_err();
        assert!(e.to_string().contains("length 8"), "{e}");
    }
}
