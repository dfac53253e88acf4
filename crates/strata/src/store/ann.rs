//! The HNSW index over one model's vectors (usearch), for views too large
//! to scan: a side file beside the database (`<db>.<model>.hnsw`), keyed by
//! `memories.rowid`, never the source of truth.
//!
//! What keeps it honest:
//! - `set_vectors` stamps each row with the model's next `version`
//!   (`memories.vector_seq`), so a sync adds exactly the rows stamped after
//!   the version the index reflects (replacing what a reused rowid or an
//!   updated memory held before).
//! - A search over-fetches from the index and then checks every hit
//!   against the row itself (view, filter, expiry, model) and re-scores it
//!   with the stored vector: a stale entry can only cost recall, never leak
//!   a memory or a wrong score.
//! - `forget` rebuilds the file from the store's live vectors at once and
//!   bumps the model's `epoch`; a process holding an older copy reloads the
//!   file, and a save is refused when the epoch moved since the copy was
//!   loaded, so a forgotten vector is never written back.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

use crate::Result;
use crate::error::Error;

/// One model's index, as loaded in this process.
pub(super) struct Ann {
    pub(super) index: Index,
    /// The model's `version` this copy reflects.
    pub(super) version: i64,
    /// The model's `epoch` when this copy was loaded.
    pub(super) epoch: i64,
    dim: usize,
    path: PathBuf,
}

fn err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Embedding(format!("vector index: {what}: {e}"))
}

/// The side file of `model`'s index beside `db`.
pub(super) fn side_file(db: &Path, model: &str) -> PathBuf {
    let safe: String = model
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = db
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "strata.db".into());
    db.with_file_name(format!("{name}.{safe}.hnsw"))
}

fn new_index(dim: usize) -> Result<Index> {
    let opts = IndexOptions {
        dimensions: dim,
        metric: MetricKind::IP,
        quantization: ScalarKind::F32,
        connectivity: 16,
        expansion_add: 128,
        expansion_search: 96,
        multi: false,
    };
    Index::new(&opts).map_err(|e| err("creating", e))
}

/// The model's (version, epoch, index_version), if it has vectors.
pub(super) fn counters(c: &Connection, model: &str) -> Result<Option<(i64, i64, i64)>> {
    Ok(
        c.prepare_cached(
            "SELECT version, epoch, index_version FROM vector_models WHERE model = ?",
        )?
        .query_row([model], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?,
    )
}

impl Ann {
    /// The index in the side file (empty when there is none, or it does not
    /// fit `dim`), marked with what the database says the file reflects.
    pub(super) fn load(c: &Connection, db: &Path, model: &str, dim: usize) -> Result<Ann> {
        let path = side_file(db, model);
        let (_, epoch, index_version) = counters(c, model)?.unwrap_or((0, 0, 0));
        let index = new_index(dim)?;
        let mut version = 0;
        if path.is_file() {
            let loaded = index
                .load(&path.to_string_lossy())
                .is_ok_and(|()| index.dimensions() == dim);
            if loaded {
                version = index_version;
            } else {
                // Unreadable or of another shape: start again.
                index.reset().map_err(|e| err("resetting", e))?;
            }
        }
        Ok(Ann {
            index,
            version,
            epoch,
            dim,
            path,
        })
    }

    /// Adds every vector stamped after `self.version` (replacing what its
    /// key held); rebuilds when stale entries outnumber live ones by half.
    /// Returns whether anything changed.
    pub(super) fn sync(&mut self, c: &Connection, model: &str, version: i64) -> Result<bool> {
        let live: i64 = c
            .prepare_cached("SELECT COUNT(*) FROM memories WHERE embedding_model = ?")?
            .query_row([model], |r| r.get(0))?;
        if self.index.size() as f64 > live as f64 * 1.5 + 1000.0 {
            self.index.reset().map_err(|e| err("resetting", e))?;
            self.version = 0;
        }
        if version <= self.version {
            return Ok(false);
        }
        let mut st = c.prepare_cached(
            "SELECT rowid, embedding FROM memories WHERE embedding_model = ? AND vector_seq > ?",
        )?;
        let mut rows = st.query(params![model, self.version])?;
        let mut fresh: Vec<(u64, Vec<f32>)> = Vec::new();
        while let Some(r) = rows.next()? {
            let rowid: i64 = r.get(0)?;
            if let rusqlite::types::ValueRef::Blob(b) = r.get_ref(1)?
                && let Some(v) = crate::embed::from_bytes(b)
                && v.len() == self.dim
            {
                fresh.push((rowid as u64, v));
            }
        }
        let need = self.index.size() + fresh.len();
        if need > self.index.capacity() {
            self.index
                .reserve(need.max(1024).next_power_of_two())
                .map_err(|e| err("reserving", e))?;
        }
        for (key, v) in &fresh {
            if self.index.contains(*key) {
                self.index.remove(*key).map_err(|e| err("removing", e))?;
            }
            self.index.add(*key, v).map_err(|e| err("adding", e))?;
        }
        self.version = version;
        Ok(true)
    }

    /// The `k` nearest keys with their (approximate) similarity.
    pub(super) fn search(&self, query: &[f32], k: usize) -> Result<Vec<(i64, f32)>> {
        if self.index.size() == 0 || k == 0 {
            return Ok(Vec::new());
        }
        let m = self
            .index
            .search(query, k.min(self.index.size()))
            .map_err(|e| err("searching", e))?;
        Ok(m.keys
            .into_iter()
            .zip(m.distances)
            .map(|(k, d)| (k as i64, 1.0 - d))
            .collect())
    }

    /// Builds the index again from the store's live vectors: how a forget
    /// reaches it (usearch's removal only marks a slot free and keeps the
    /// vector's bytes, even after `compact`).
    pub(super) fn rebuild(&mut self, c: &Connection, model: &str, version: i64) -> Result<()> {
        self.index.reset().map_err(|e| err("resetting", e))?;
        self.version = 0;
        self.sync(c, model, version)?;
        Ok(())
    }

    /// Writes the side file (a temporary file renamed over it) and records
    /// the version it reflects; refused, and `Ok(false)`, when the model's
    /// epoch moved since this copy was loaded (a forget happened).
    pub(super) fn save(&self, c: &mut Connection, model: &str) -> Result<bool> {
        let tmp = self
            .path
            .with_extension(format!("hnsw.tmp{}", std::process::id()));
        self.index
            .save(&tmp.to_string_lossy())
            .map_err(|e| err("saving", e))?;
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let epoch = counters(&tx, model)?.map(|c| c.1);
        if epoch != Some(self.epoch) {
            drop(tx);
            let _ = std::fs::remove_file(&tmp);
            return Ok(false);
        }
        std::fs::rename(&tmp, &self.path)
            .map_err(|e| Error::io(format!("moving {} into place", self.path.display()), e))?;
        tx.execute(
            "UPDATE vector_models SET index_version = ? WHERE model = ?",
            params![self.version, model],
        )?;
        tx.commit()?;
        Ok(true)
    }
}
