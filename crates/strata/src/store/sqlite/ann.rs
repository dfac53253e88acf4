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
//! - `forget` deletes the side file at once and bumps the model's `epoch`
//!   (usearch's removal keeps a vector's bytes, even after `compact`); a
//!   process holding a copy drops it on the new epoch, and a save is refused
//!   when the epoch moved since the build began, so a forgotten vector is
//!   never written back.
//! - Building is slow (minutes for 100,000 vectors on two cores), so a
//!   missing or badly stale index is built on a background thread while
//!   searches scan exactly.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use rusqlite::{Connection, TransactionBehavior, params};

use crate::Result;
use crate::error::Error;
use crate::store::hnsw::Hnsw;

/// More new vectors than this are not added in the foreground: the index
/// is rebuilt in the background instead.
const FOREGROUND_ADDS: usize = 5_000;

/// Keyed vectors to add.
type Fresh = Vec<(u64, Vec<f32>)>;

/// One model's index, as loaded in this process.
pub(super) struct Ann {
    pub(super) index: Hnsw,
    /// The model's `version` this copy reflects.
    pub(super) version: i64,
    /// The model's `epoch` this copy belongs to.
    pub(super) epoch: i64,
    /// Vectors added since the side file was last written.
    unsaved: usize,
    dim: usize,
    path: PathBuf,
}

/// The indexes of one store: loaded copies and builds under way. Searches
/// of a copy that is current share `loaded`; loading, catching up and
/// saving take it alone.
#[derive(Default)]
pub(super) struct Indexes {
    pub(super) loaded: RwLock<HashMap<String, Ann>>,
    building: Mutex<HashSet<String>>,
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

use super::vectors::counters;

impl Ann {
    /// The index in the side file, marked with what the database says the
    /// file reflects; `None` when there is no usable file.
    pub(super) fn load(c: &Connection, db: &Path, model: &str) -> Result<Option<Ann>> {
        let path = side_file(db, model);
        let Some((_, epoch, index_version, dim)) = counters(c, model)? else {
            return Ok(None);
        };
        if !path.is_file() {
            return Ok(None);
        }
        let Some(index) = Hnsw::load(&path, dim) else {
            return Ok(None);
        };
        Ok(Some(Ann {
            index,
            version: index_version,
            epoch,
            unsaved: 0,
            dim,
            path,
        }))
    }

    /// An empty index for `model`.
    fn empty(db: &Path, model: &str, dim: usize, epoch: i64) -> Result<Ann> {
        Ok(Ann {
            index: Hnsw::new(dim)?,
            version: 0,
            epoch,
            unsaved: 0,
            dim,
            path: side_file(db, model),
        })
    }

    /// The vectors stamped after `self.version`, at most `max` of them
    /// (`None`: more than `max`).
    fn fresh(&self, c: &Connection, model: &str, max: usize) -> Result<Option<Fresh>> {
        let n: i64 = c
            .prepare_cached(
                "SELECT COUNT(*) FROM memories WHERE embedding_model = ? AND vector_seq > ?",
            )?
            .query_row(params![model, self.version], |r| r.get(0))?;
        if n as usize > max {
            return Ok(None);
        }
        let mut st = c.prepare_cached(
            "SELECT rowid, embedding FROM memories WHERE embedding_model = ? AND vector_seq > ?",
        )?;
        let mut rows = st.query(params![model, self.version])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let rowid: i64 = r.get(0)?;
            if let rusqlite::types::ValueRef::Blob(b) = r.get_ref(1)?
                && let Some(v) = crate::embed::from_bytes(b)
                && v.len() == self.dim
            {
                out.push((rowid as u64, v));
            }
        }
        Ok(Some(out))
    }

    /// Adds vectors (replacing what their keys held).
    fn add(&mut self, fresh: &[(u64, Vec<f32>)]) -> Result<()> {
        self.index.add(fresh)?;
        self.unsaved += fresh.len();
        Ok(())
    }

    /// Brings this copy up to `version` in the foreground when few vectors
    /// are new; `Ok(false)` when a rebuild is due instead (too many new
    /// vectors, or stale entries outnumbering live ones by half).
    pub(super) fn sync(&mut self, c: &Connection, model: &str, version: i64) -> Result<bool> {
        if version <= self.version {
            return Ok(true);
        }
        let live: i64 = c
            .prepare_cached("SELECT COUNT(*) FROM memories WHERE embedding_model = ?")?
            .query_row([model], |r| r.get(0))?;
        if self.index.size() as f64 > live as f64 * 1.5 + 1000.0 {
            return Ok(false);
        }
        let Some(fresh) = self.fresh(c, model, FOREGROUND_ADDS)? else {
            return Ok(false);
        };
        self.add(&fresh)?;
        self.version = version;
        Ok(true)
    }

    /// Whether enough was added since the last save to write the file again.
    pub(super) fn worth_saving(&self) -> bool {
        self.unsaved > 0 && self.unsaved >= (self.index.size() / 20).max(1000)
    }

    /// The `k` nearest keys with their (approximate) similarity.
    pub(super) fn search(&self, query: &[f32], k: usize) -> Result<Vec<(i64, f32)>> {
        self.index.search(query, k)
    }

    /// Writes the side file (a temporary file renamed over it) and records
    /// the version it reflects; refused, and `Ok(false)`, when the model's
    /// epoch moved since this copy's epoch (a forget happened).
    pub(super) fn save(&mut self, c: &mut Connection, model: &str) -> Result<bool> {
        let tmp = self
            .path
            .with_extension(format!("hnsw.tmp{}", std::process::id()));
        self.index.save(&tmp)?;
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
        self.unsaved = 0;
        Ok(true)
    }
}

/// Builds `model`'s index from every live vector on a background thread,
/// writes the side file and hands the copy to `indexes`; at most one build
/// per model at a time. `open` gives the thread its own connection.
pub(super) fn build_in_background(
    indexes: &Arc<Indexes>,
    db: &Path,
    model: &str,
    open: impl FnOnce() -> Result<Connection> + Send + 'static,
) {
    {
        let mut b = indexes.building.lock().unwrap_or_else(|p| p.into_inner());
        if !b.insert(model.to_string()) {
            return;
        }
    }
    let (shared, db, name) = (indexes.clone(), db.to_path_buf(), model.to_string());
    let spawned = std::thread::Builder::new()
        .name("strata-hnsw".into())
        .spawn(move || {
            let built = (|| -> Result<Option<Ann>> {
                let mut c = open()?;
                let Some((version, epoch, _, dim)) = counters(&c, &name)? else {
                    return Ok(None);
                };
                let mut a = Ann::empty(&db, &name, dim, epoch)?;
                let fresh = a.fresh(&c, &name, usize::MAX)?.unwrap_or_default();
                a.add(&fresh)?;
                a.version = version;
                Ok(a.save(&mut c, &name)?.then_some(a))
            })();
            if let Ok(Some(a)) = built {
                let mut g = shared.loaded.write().unwrap_or_else(|p| p.into_inner());
                g.insert(name.clone(), a);
            }
            shared
                .building
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&name);
        });
    if spawned.is_err() {
        indexes
            .building
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(model);
    }
}

/// Whether a build of `model` is under way.
pub(super) fn building(indexes: &Indexes, model: &str) -> bool {
    indexes
        .building
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(model)
}
