//! An HNSW index over one model's vectors (usearch, inner product on
//! normalised vectors), as the stores use it: keyed by the store's row
//! key, searched by many threads at once, never the source of truth (every
//! hit is checked against its row by the caller).

use std::path::Path;
use std::sync::{Condvar, Mutex};

use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

use crate::Result;
use crate::error::Error;

/// usearch serves a fixed number of threads at once (one search context
/// each) and fails a search beyond them ("Reserve capacity ahead of
/// searches!"): every index reserves this many, and `Slots` holds further
/// searches back until one is free.
const SEARCH_SLOTS: usize = 32;

fn err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Embedding(format!("vector index: {what}: {e}"))
}

/// One model's HNSW index.
pub(crate) struct Hnsw {
    index: Index,
    slots: Slots,
}

impl std::fmt::Debug for Hnsw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hnsw")
            .field("size", &self.index.size())
            .finish()
    }
}

impl Hnsw {
    /// An empty index of `dim` dimensions.
    pub(crate) fn new(dim: usize) -> Result<Hnsw> {
        let opts = IndexOptions {
            dimensions: dim,
            metric: MetricKind::IP,
            quantization: ScalarKind::F32,
            connectivity: 16,
            expansion_add: 64,
            expansion_search: 96,
            multi: false,
        };
        let index = Index::new(&opts).map_err(|e| err("creating", e))?;
        let h = Hnsw {
            index,
            slots: Slots::default(),
        };
        h.reserve(1024)?;
        Ok(h)
    }

    /// The index saved at `path`, if it is there, readable and of `dim`
    /// dimensions.
    pub(crate) fn load(path: &Path, dim: usize) -> Option<Hnsw> {
        let h = Hnsw::new(dim).ok()?;
        h.index.load(&path.to_string_lossy()).ok()?;
        if h.index.dimensions() != dim {
            return None;
        }
        // Loading sizes the thread slots from the file; take ours back.
        h.reserve(h.index.size()).ok()?;
        Some(h)
    }

    /// Writes the index to `path`.
    pub(crate) fn save(&self, path: &Path) -> Result<()> {
        self.index
            .save(&path.to_string_lossy())
            .map_err(|e| err("saving", e))
    }

    /// Vectors held (removed ones no longer count).
    pub(crate) fn size(&self) -> usize {
        self.index.size()
    }

    /// Room for `members` vectors (rounded up) and `SEARCH_SLOTS` threads.
    fn reserve(&self, members: usize) -> Result<()> {
        self.index
            .reserve_capacity_and_threads(members.max(1024).next_power_of_two(), SEARCH_SLOTS)
            .map_err(|e| err("reserving", e))
    }

    /// Adds vectors (replacing what their keys held), on up to four
    /// threads.
    pub(crate) fn add(&mut self, fresh: &[(u64, Vec<f32>)]) -> Result<()> {
        self.remove(fresh.iter().map(|(k, _)| *k))?;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
        let need = self.index.size() + fresh.len();
        if need > self.index.capacity() {
            self.reserve(need)?;
        }
        let index = &self.index;
        let chunk = fresh.len().div_ceil(threads).max(1);
        std::thread::scope(|s| {
            let jobs: Vec<_> = fresh
                .chunks(chunk)
                .map(|part| {
                    s.spawn(move || {
                        for (key, v) in part {
                            index.add(*key, v).map_err(|e| err("adding", e))?;
                        }
                        Ok::<(), Error>(())
                    })
                })
                .collect();
            for j in jobs {
                j.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
            }
            Ok::<(), Error>(())
        })
    }

    /// Removes keys (those not held are skipped).
    pub(crate) fn remove(&mut self, keys: impl IntoIterator<Item = u64>) -> Result<()> {
        for key in keys {
            if self.index.contains(key) {
                self.index.remove(key).map_err(|e| err("removing", e))?;
            }
        }
        Ok(())
    }

    /// The `k` nearest keys with their (approximate) similarity.
    pub(crate) fn search(&self, query: &[f32], k: usize) -> Result<Vec<(i64, f32)>> {
        if self.index.size() == 0 || k == 0 {
            return Ok(Vec::new());
        }
        let m = self
            .slots
            .with(|| self.index.search(query, k.min(self.index.size())))
            .map_err(|e| err("searching", e))?;
        Ok(m.keys
            .into_iter()
            .zip(m.distances)
            .map(|(k, d)| (k as i64, 1.0 - d))
            .collect())
    }
}

/// A counting gate over the index's search contexts.
#[derive(Default)]
struct Slots {
    busy: Mutex<usize>,
    freed: Condvar,
}

impl Slots {
    /// Runs `f` once fewer than `SEARCH_SLOTS` searches are under way.
    fn with<T>(&self, f: impl FnOnce() -> T) -> T {
        {
            let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
            while *busy >= SEARCH_SLOTS {
                busy = self.freed.wait(busy).unwrap_or_else(|p| p.into_inner());
            }
            *busy += 1;
        }
        struct Release<'a>(&'a Slots);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                *self.0.busy.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
                self.0.freed.notify_one();
            }
        }
        let _release = Release(self);
        f()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// More searches at once than usearch has contexts wait for one
    /// instead of failing ("Reserve capacity ahead of searches!").
    #[test]
    fn searches_beyond_the_reserved_contexts_wait_instead_of_failing() {
        let mut h = Hnsw::new(32).unwrap();
        let vectors: Vec<(u64, Vec<f32>)> = (0..5000u64)
            .map(|i| {
                let v: Vec<f32> = (0..32)
                    .map(|d| ((i * 31 + d * 7 + i / 13 * d) % 17) as f32 - 8.0)
                    .collect();
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
                (i, v.into_iter().map(|x| x / n).collect())
            })
            .collect();
        h.add(&vectors).unwrap();
        let start = std::sync::Barrier::new(SEARCH_SLOTS * 3);
        std::thread::scope(|s| {
            for (_, q) in vectors.iter().take(SEARCH_SLOTS * 3) {
                let (h, start) = (&h, &start);
                s.spawn(move || {
                    start.wait();
                    for _ in 0..20 {
                        assert_eq!(h.search(q, 50).unwrap().len(), 50);
                    }
                });
            }
        });
    }
}
