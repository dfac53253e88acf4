//! The engine's vector side: the configured embedder (opened on first
//! use), embedding what waits for a vector, the background worker, and the
//! relevance candidates that full text and vectors contribute to a ranking.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Engine;
use crate::Result;
use crate::embed::{self, Embedder, Purpose};
use crate::error::Error;
use crate::rank::{Relevance, Signals};
use crate::store::Query;

/// Texts per embedding batch written in one transaction.
const BATCH: usize = 64;

/// Query vectors remembered (per engine, so per embedder).
const QUERY_CACHE: usize = 32;

/// A query's vector with the embedder that made it.
pub type QueryVector = (Arc<dyn Embedder>, Vec<f32>);

/// The last query vectors, oldest first.
pub(crate) type QueryCache = Mutex<std::collections::VecDeque<(String, Vec<f32>)>>;

/// How retrieval stands: which embedder, how many vectors, how many wait.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EmbedStatus {
    /// The embedder's model id; `None` when relevance is BM25 alone.
    pub model: Option<String>,
    /// Its vector length.
    pub dim: Option<usize>,
    /// Active memories with a vector of that model.
    pub vectors: u64,
    /// Active memories waiting for one.
    pub pending: u64,
    /// Why there is no embedder, when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Wakes the background worker when memories are written.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    dirty: Mutex<bool>,
    cond: Condvar,
}

impl Signal {
    pub(crate) fn notify(&self) {
        *self.dirty.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.cond.notify_all();
    }

    /// Waits until notified or `timeout` passes; clears the flag.
    fn wait(&self, timeout: Duration) {
        let mut d = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        if !*d {
            d = self
                .cond
                .wait_timeout(d, timeout)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        *d = false;
    }
}

impl Engine {
    /// The configured embedder, opened on first use; `None` when relevance
    /// is BM25 alone (`kind = "none"`, or `auto` without the local model).
    pub fn embedder(&self) -> Result<Option<Arc<dyn Embedder>>> {
        let opened = self
            .embedder
            .get_or_init(|| self.cfg.embedder.open().map_err(|e| e.to_string()));
        match opened {
            Ok(e) => Ok(e.clone()),
            Err(msg) => Err(Error::Embedding(msg.clone())),
        }
    }

    /// Uses `embedder` instead of the configured one (custom embedders,
    /// tests). Fails if an embedder was already opened.
    pub fn set_embedder(&self, embedder: Option<Arc<dyn Embedder>>) -> Result<()> {
        self.embedder
            .set(Ok(embedder))
            .map_err(|_| Error::Embedding("an embedder is already in use".into()))
    }

    /// Whether [`Engine::recall`] only computes: no network round trip, no
    /// wait on another process or on a lock held for long (see
    /// [`crate::store::Store::reads_never_wait`], [`Embedder::is_local`]). True
    /// for SQLite or the memory store with no embedder or the local model,
    /// unless vector searches may go through the HNSW index. Opens the
    /// embedder; false if it cannot be opened.
    pub fn recall_never_waits(&self) -> bool {
        match self.embedder() {
            Ok(None) => self.store.reads_never_wait(false),
            Ok(Some(e)) => e.is_local() && self.store.reads_never_wait(true),
            Err(_) => false,
        }
    }

    /// Whether the store's writes honour [`crate::without_waiting`]: a
    /// write that would wait for another writer is refused at once instead
    /// (SQLite). A remember then needs no other thread when no other write
    /// is in the way.
    pub fn writes_can_hurry(&self) -> bool {
        self.store.writes_can_hurry()
    }

    /// Which embedder serves retrieval, and how many memories have vectors.
    pub fn embed_status(&self) -> Result<EmbedStatus> {
        let Some(e) = self.embedder()? else {
            return Ok(EmbedStatus {
                note: Some(match self.cfg.embedder.kind {
                    embed::EmbedderKind::None => "embedder = none: relevance is BM25 only".into(),
                    embed::EmbedderKind::Auto if !cfg!(feature = "local-embed") => {
                        embed::NO_LOCAL_EMBED.into()
                    }
                    _ => format!(
                        "no local model at {} (`strata model fetch` installs it): relevance is BM25 only",
                        self.cfg.embedder.model_dir().display()
                    ),
                }),
                ..EmbedStatus::default()
            });
        };
        let n = self.store.vector_counts(e.model())?;
        Ok(EmbedStatus {
            model: Some(e.model().to_string()),
            dim: Some(e.dim()),
            vectors: n.vectors,
            pending: n.pending,
            note: None,
        })
    }

    /// Embeds up to `limit` memories that wait for a vector (those of `ids`
    /// only, when given); returns how many got one. Without an embedder it
    /// does nothing. Idempotent and resumable: each batch commits on its
    /// own, and a memory changed meanwhile keeps waiting.
    pub fn embed_pending(&self, ids: Option<&[String]>, limit: usize) -> Result<usize> {
        let Some(e) = self.embedder()? else {
            return Ok(0);
        };
        let mut done = 0;
        while done < limit {
            let want = BATCH.min(limit - done);
            let pending = self.store.pending_vectors(e.model(), ids, want)?;
            if pending.is_empty() {
                break;
            }
            let with_before = self.cfg.embedder.reply_context.unwrap_or(true);
            let texts: Vec<String> = pending
                .iter()
                .map(|p| {
                    let before = p.before.as_deref().filter(|_| with_before);
                    embed::document_text(&p.content, before)
                })
                .collect();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let vectors = e.embed(&refs, Purpose::Document)?;
            let items: Vec<(String, String, Vec<f32>)> = pending
                .into_iter()
                .zip(vectors)
                .map(|(p, v)| (p.id, p.checksum, v))
                .collect();
            let n = items.len();
            self.store.set_vectors(e.model(), e.dim(), &items)?;
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    /// Re-embeds after a model change: drops vectors of every other model
    /// (all vectors with `all`), then embeds everything that waits, calling
    /// `progress(done, total)` after each batch.
    pub fn reindex(&self, all: bool, mut progress: impl FnMut(u64, u64)) -> Result<u64> {
        let Some(e) = self.embedder()? else {
            return Err(Error::Embedding(
                "no embedder configured (set [embedder] or install the local model with `strata model fetch`)".into(),
            ));
        };
        self.store
            .clear_vectors(if all { None } else { Some(e.model()) })?;
        self.embed_all(&mut progress)
    }

    /// Embeds everything that waits, with progress.
    pub fn embed_all(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<u64> {
        let Some(e) = self.embedder()? else {
            return Ok(0);
        };
        let total = self.store.vector_counts(e.model())?.pending;
        let mut done = 0u64;
        progress(0, total);
        loop {
            let n = self.embed_pending(None, BATCH * 4)? as u64;
            if n == 0 {
                break;
            }
            done += n;
            progress(done.min(total), total);
        }
        Ok(done)
    }

    pub(crate) fn wake_embedder(&self) {
        self.embed_signal.notify();
    }

    /// The query's vector (with the embedder that made it), when an
    /// embedder is configured and the query has text. The last few are
    /// cached. Errors of the embedder are errors of the read.
    pub fn query_vector(&self, query: &str) -> Result<Option<QueryVector>> {
        if query.trim().is_empty() {
            return Ok(None);
        }
        let Some(e) = self.embedder()? else {
            return Ok(None);
        };
        // The same query often comes twice in a row (recall, then context
        // for the same task): keep the last few vectors.
        {
            let cache = self.query_cache.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((_, v)) = cache.iter().find(|(q, _)| q == query) {
                return Ok(Some((e, v.clone())));
            }
        }
        let Some(v) = e.embed(&[query], Purpose::Query)?.pop() else {
            return Ok(None);
        };
        let mut cache = self.query_cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= QUERY_CACHE {
            cache.pop_front();
        }
        cache.push_back((query.to_string(), v.clone()));
        Ok(Some((e, v)))
    }

    /// Relevance candidates of a query inside `base`: the best `limit`
    /// full-text matches and the `limit` (at most 1,000) nearest vectors
    /// that were said, with the learned ones ranked among them besides
    /// ([`said_first`]), merged; vector hits carry their rank in the vector
    /// list.
    pub(crate) fn relevant(
        &self,
        base: &Query,
        terms: &[String],
        qvec: Option<&QueryVector>,
        limit: usize,
    ) -> Result<Vec<(Signals, Relevance)>> {
        let mut out: Vec<(Signals, Relevance)> = Vec::new();
        let mut at: HashMap<String, usize> = HashMap::new();
        if !terms.is_empty() {
            let hits = said_first(
                limit,
                |(s, _)| s,
                |n| self.store.search_signals(base, terms, n),
            )?;
            for (s, b) in hits {
                at.insert(s.id.clone(), out.len());
                out.push((s, Relevance::text(Some(b))));
            }
        }
        if let Some((e, v)) = qvec {
            let hits = said_first(
                limit.min(1000),
                |(s, _)| s,
                |n| self.store.search_vectors(base, e.model(), v, n),
            )?;
            for (i, (s, sim)) in hits.into_iter().enumerate() {
                let r = match at.get(&s.id) {
                    Some(&j) => &mut out[j].1,
                    None => {
                        at.insert(s.id.clone(), out.len());
                        out.push((s, Relevance::default()));
                        &mut out.last_mut().expect("just pushed").1
                    }
                };
                r.similarity = Some(sim);
                r.vector_rank = Some(i + 1);
            }
        }
        Ok(out)
    }
}

/// The hits of `search` (best first, at most the number asked for) through
/// the `n`-th that was said: learned memories among them come in addition,
/// so learning never pushes what was said out of a list. When learned ones
/// took more places than it asked for beyond `n`, it asks again for more.
pub(crate) fn said_first<T>(
    n: usize,
    signals: impl Fn(&T) -> &Signals,
    mut search: impl FnMut(usize) -> Result<Vec<T>>,
) -> Result<Vec<T>> {
    // An eighth more to begin with: learned memories are few beside what
    // was said, so one search is almost always enough.
    let mut want = n.saturating_add(n / 8);
    loop {
        let mut hits = search(want)?;
        let complete = hits.len() < want;
        let mut said = 0;
        let mut cut = hits.len();
        for (i, h) in hits.iter().enumerate() {
            if !signals(h).learned {
                said += 1;
                if said == n {
                    cut = i + 1;
                    break;
                }
            }
        }
        if said >= n || complete {
            hits.truncate(cut);
            return Ok(hits);
        }
        want = want.saturating_add((n - said).max(want / 4));
    }
}

/// Embeds new memories in the background of a long-running process (a
/// server): it wakes when the engine stores memories, embeds what waits in
/// batches, and sleeps when nothing does. Dropping it stops the thread.
#[derive(Debug)]
pub struct EmbedWorker {
    stop: Arc<AtomicBool>,
    engine: Arc<Engine>,
    thread: Option<JoinHandle<()>>,
    errors: Arc<Mutex<Option<String>>>,
}

impl EmbedWorker {
    /// Starts the worker for `engine`; without an embedder it idles.
    pub fn spawn(engine: Arc<Engine>) -> EmbedWorker {
        let stop = Arc::new(AtomicBool::new(false));
        let errors = Arc::new(Mutex::new(None));
        let (st, en, er) = (stop.clone(), engine.clone(), errors.clone());
        let thread = std::thread::Builder::new()
            .name("strata-embed".into())
            .spawn(move || {
                while !st.load(Ordering::Relaxed) {
                    match en.embed_pending(None, BATCH) {
                        Ok(n) if n > 0 => continue,
                        Ok(_) => {}
                        Err(e) => {
                            *er.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                        }
                    }
                    // Other processes write too: look again now and then.
                    en.embed_signal.wait(Duration::from_secs(2));
                }
            })
            .ok();
        EmbedWorker {
            stop,
            engine,
            thread,
            errors,
        }
    }

    /// The last error the worker met, if any (it keeps trying).
    pub fn last_error(&self) -> Option<String> {
        self.errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for EmbedWorker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.engine.embed_signal.notify();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(i: usize, learned: bool) -> Signals {
        Signals {
            id: format!("m{i}"),
            kind: "note".into(),
            importance: 0.5,
            created_at: jiff::Timestamp::UNIX_EPOCH,
            updated_at: jiff::Timestamp::UNIX_EPOCH,
            access_count: 0,
            tokens: 3,
            learned,
            session: None,
        }
    }

    /// [`said_first`] of `n` over a ranked list of `len` whose `learned`
    /// positions are learned memories: the ids it kept, and how many hits
    /// each search asked for.
    fn first(n: usize, len: usize, learned: &[usize]) -> (Vec<String>, Vec<usize>) {
        let all: Vec<Signals> = (0..len).map(|i| sig(i, learned.contains(&i))).collect();
        let mut asked = Vec::new();
        let got = said_first(
            n,
            |s| s,
            |k| {
                asked.push(k);
                Ok(all.iter().take(k).cloned().collect())
            },
        )
        .unwrap();
        (got.into_iter().map(|s| s.id).collect(), asked)
    }

    #[test]
    fn learned_hits_come_besides_the_said_ones() {
        let ids = |r: std::ops::Range<usize>| r.map(|i| format!("m{i}")).collect::<Vec<_>>();
        // Nothing learned: the first n, in one search.
        assert_eq!(first(8, 30, &[]), (ids(0..8), vec![9]));
        // A learned one within the margin (an eighth): one search, through
        // the 8th said.
        assert_eq!(first(8, 30, &[3]), (ids(0..9), vec![9]));
        // Two: a second search, for more.
        assert_eq!(first(8, 30, &[0, 3]), (ids(0..10), vec![9, 11]));
        // More learned than the margin: it asks again, until 8 were said.
        let (got, asked) = first(8, 30, &[0, 1, 2, 3, 4, 5, 9, 10, 11]);
        assert_eq!(got, ids(0..17));
        assert!(
            asked.len() > 1 && asked.windows(2).all(|w| w[1] > w[0]),
            "{asked:?}"
        );
        // A list that runs out is all there is.
        assert_eq!(first(8, 5, &[1]).0, ids(0..5));
        assert!(
            said_first(0, |s: &Signals| s, |_| Ok(Vec::new()))
                .unwrap()
                .is_empty()
        );
    }
}
