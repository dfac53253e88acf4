//! This process's copy of the vectors, one slab per model and view entry
//! (`global`, `project/a`, `project/**`), so an exact search scans floats
//! in memory instead of reading every embedding of the view back through
//! SQL (SQLite copies each blob into a register: most of a small view's
//! vector search).
//!
//! The copy is never the source of truth. A slab is brought up to the
//! model's `version` (rows stamped since, through the `vector_seq` index)
//! before each search and loaded again when the model's `epoch` moved (a
//! forget); every hit is checked against its row (view, filter, expiry,
//! model, and the stamp the slab holds) before it is returned, so a row
//! that left the view, lost its vector or was archived is never a hit,
//! and it is dropped from the slab when the check finds it. A view's slabs
//! are loaded when they fit [`SqliteOptions::vector_cache_bytes`], after
//! dropping slabs no search used for [`IDLE_MS`] (least recently used
//! first); otherwise the view is scanned through SQL as before. So views
//! searched in turn that do not all fit keep what is loaded instead of
//! pushing each other out on every search.

use super::*;
use crate::scope::ViewEntry;
use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// How long (ms) a slab must go unused before another view's may take its
/// room.
pub(super) const IDLE_MS: u64 = 30_000;

/// What one row costs a slab besides its floats: its (rowid, stamp) and
/// its place in the slab's map.
const ROW_BYTES: usize = 40;

/// The bytes a view of `rows` vectors of `dim` floats takes in a slab.
fn slab_bytes(rows: usize, dim: usize) -> usize {
    rows.saturating_mul(dim * 4 + ROW_BYTES)
}

/// One model's vectors of one view entry (`None`: every scope).
type Key = (String, Option<ViewEntry>);

/// This process's slabs.
#[derive(Debug)]
pub(super) struct Copies {
    slabs: RwLock<HashMap<Key, Slab>>,
    /// When a slab was used is counted in ms from here.
    born: Instant,
}

impl Default for Copies {
    fn default() -> Copies {
        Copies {
            slabs: Default::default(),
            born: Instant::now(),
        }
    }
}

/// The vectors of one entry, contiguous: row `i` is `data[i * dim..][..dim]`.
#[derive(Debug)]
struct Slab {
    epoch: i64,
    /// The model's version this slab holds every row stamped up to.
    version: i64,
    dim: usize,
    /// (rowid, stamp) of each vector.
    rows: Vec<(i64, i64)>,
    data: Vec<f32>,
    at: HashMap<i64, usize>,
    /// When a search last used it (ms, [`Copies::born`]).
    used: AtomicU64,
}

impl Slab {
    fn new(epoch: i64, version: i64, dim: usize, now: u64) -> Slab {
        Slab {
            epoch,
            version,
            dim,
            rows: Vec::new(),
            data: Vec::new(),
            at: HashMap::new(),
            used: AtomicU64::new(now),
        }
    }

    fn bytes(&self) -> usize {
        slab_bytes(self.rows.len(), self.dim)
    }

    /// Puts a row's vector, unless the slab holds a newer stamp of it.
    fn put(&mut self, rowid: i64, seq: i64, v: &[f32]) {
        match self.at.get(&rowid) {
            Some(&i) if self.rows[i].1 > seq => {}
            Some(&i) => {
                self.rows[i].1 = seq;
                self.data[i * self.dim..][..self.dim].copy_from_slice(v);
            }
            None => {
                self.at.insert(rowid, self.rows.len());
                self.rows.push((rowid, seq));
                self.data.extend_from_slice(v);
            }
        }
    }

    /// Drops a row if the slab still holds it at stamp `seq`.
    fn remove(&mut self, rowid: i64, seq: i64) {
        let Some(&i) = self.at.get(&rowid) else {
            return;
        };
        if self.rows[i].1 != seq {
            return;
        }
        self.at.remove(&rowid);
        let last = self.rows.len() - 1;
        if i != last {
            self.rows.swap(i, last);
            let (head, tail) = self.data.split_at_mut(last * self.dim);
            head[i * self.dim..][..self.dim].copy_from_slice(&tail[..self.dim]);
            self.at.insert(self.rows[i].0, i);
        }
        self.rows.pop();
        self.data.truncate(last * self.dim);
    }
}

/// Makes room for `need` more bytes within `cap` by dropping slabs no
/// search used for [`IDLE_MS`], least recently used first, never one of
/// `keep`; whether the room is there.
fn make_room(
    slabs: &mut HashMap<Key, Slab>,
    keep: &[Key],
    need: usize,
    cap: usize,
    now: u64,
) -> bool {
    let mut total: usize = slabs.values().map(Slab::bytes).sum();
    while total.saturating_add(need) > cap {
        let Some(oldest) = slabs
            .iter()
            .filter(|(k, s)| {
                now.saturating_sub(s.used.load(Ordering::Relaxed)) >= IDLE_MS && !keep.contains(k)
            })
            .min_by_key(|(_, s)| s.used.load(Ordering::Relaxed))
            .map(|(k, _)| k.clone())
        else {
            return false;
        };
        total -= slabs.remove(&oldest).map_or(0, |s| s.bytes());
    }
    true
}

/// A candidate of the scan: similarity, rowid, stamp, and the entry it
/// came from (an index into the view's keys).
pub(super) type Candidate = (f32, i64, i64, usize);

/// Reads `entry`'s vectors of `model` stamped after `since` (all of them
/// for `None`) as (rowid, stamp, vector).
fn read_rows(
    c: &Connection,
    model: &str,
    entry: Option<&ViewEntry>,
    dim: usize,
    since: Option<i64>,
) -> Result<Vec<(i64, i64, Vec<f32>)>> {
    let view = entry.map(|e| View::new([e.clone()]));
    let mut p = Vec::new();
    let sql = match since {
        // Few rows are new: the stamp index finds them.
        Some(since) => {
            p.push(SqlValue::Text(model.to_string()));
            p.push(SqlValue::Integer(since));
            let v = view_sql(view.as_ref(), "m.", &mut p);
            format!(
                "SELECT m.rowid, m.vector_seq, m.embedding FROM memories m INDEXED BY memories_embedding_model
                 WHERE m.embedding_model = ? AND m.vector_seq > ? AND {v}"
            )
        }
        None => {
            let v = view_sql(view.as_ref(), "m.", &mut p);
            p.push(SqlValue::Text(model.to_string()));
            format!(
                "SELECT m.rowid, m.vector_seq, m.embedding FROM memories m
                 WHERE {v} AND +m.embedding_model = ?"
            )
        }
    };
    let mut st = c.prepare_cached(&sql)?;
    let mut rows = st.query(params_from_iter(p))?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        if let rusqlite::types::ValueRef::Blob(b) = r.get_ref(2)?
            && b.len() == dim * 4
            && let Some(v) = crate::embed::from_bytes(b)
        {
            out.push((r.get(0)?, r.get::<_, Option<i64>>(1)?.unwrap_or(0), v));
        }
    }
    Ok(out)
}

impl Copies {
    /// Every vector of `view`'s entries with its similarity to `query`,
    /// the slabs first brought to the model's (`version`, `epoch`); `None`
    /// when the view's `view_size` vectors would not fit `cap` bytes (the
    /// caller scans through SQL).
    pub(super) fn scan(
        &self,
        c: &Connection,
        model: &str,
        (version, epoch, dim): (i64, i64, usize),
        (view, view_size): (Option<&View>, usize),
        cap: usize,
        query: &[f32],
    ) -> Result<Option<Vec<Candidate>>> {
        let need = slab_bytes(view_size, dim);
        if need > cap {
            return Ok(None);
        }
        if view.is_some_and(|v| v.is_empty()) {
            return Ok(Some(Vec::new()));
        }
        let keys: Vec<Key> = match view {
            None => vec![(model.to_string(), None)],
            Some(v) => v
                .entries()
                .iter()
                .map(|e| (model.to_string(), Some(e.clone())))
                .collect(),
        };
        let now = self.born.elapsed().as_millis() as u64;
        if !self.sync(c, &keys, (version, epoch, dim), (need, cap), now)? {
            return Ok(None);
        }
        let g = self.slabs.read().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (k, key) in keys.iter().enumerate() {
            // Synced just above; a slab evicted since by another search
            // leaves this one to SQL.
            let Some(s) = g.get(key).filter(|s| s.epoch == epoch && s.dim == dim) else {
                return Ok(None);
            };
            s.used.store(now, Ordering::Relaxed);
            out.reserve(s.rows.len());
            for (i, &(rowid, seq)) in s.rows.iter().enumerate() {
                // Overlapping entries (`project/**` and `project/a`) hold
                // some rows twice.
                if keys.len() > 1 && !seen.insert(rowid) {
                    continue;
                }
                let sim = crate::embed::dot(query, &s.data[i * dim..][..dim]);
                out.push((sim, rowid, seq, k));
            }
        }
        Ok(Some(out))
    }

    /// Brings the slabs of `keys` to (`version`, `epoch`): rows stamped
    /// since a slab's version are read through the stamp index, a missing
    /// slab or one of another epoch is read whole. Rows are read without
    /// the lock; what another search put meanwhile is kept if newer. A
    /// slab read whole must first find room for the view (`need` bytes)
    /// within `cap`: `false` when it cannot (nothing is read).
    fn sync(
        &self,
        c: &Connection,
        keys: &[Key],
        (version, epoch, dim): (i64, i64, usize),
        (need, cap): (usize, usize),
        now: u64,
    ) -> Result<bool> {
        let wanted: Vec<(usize, Option<i64>)> = {
            let g = self.slabs.read().unwrap_or_else(|p| p.into_inner());
            keys.iter()
                .enumerate()
                .filter_map(|(k, key)| match g.get(key) {
                    Some(s) if s.epoch == epoch && s.dim == dim && s.version >= version => None,
                    Some(s) if s.epoch == epoch && s.dim == dim => Some((k, Some(s.version))),
                    _ => Some((k, None)),
                })
                .collect()
        };
        if wanted.is_empty() {
            return Ok(true);
        }
        if wanted.iter().any(|w| w.1.is_none()) {
            let mut g = self.slabs.write().unwrap_or_else(|p| p.into_inner());
            // A new epoch means a forget: every slab of the model from
            // before it goes now, searched again or not, so no forgotten
            // vector waits here for its view's next search.
            let model = &keys[0].0;
            g.retain(|(m, _), s| m != model || (s.epoch == epoch && s.dim == dim));
            if !make_room(&mut g, keys, need, cap, now) {
                return Ok(false);
            }
        }
        let mut read = Vec::with_capacity(wanted.len());
        for (k, since) in wanted {
            let (model, entry) = &keys[k];
            read.push((k, since, read_rows(c, model, entry.as_ref(), dim, since)?));
        }
        let mut g = self.slabs.write().unwrap_or_else(|p| p.into_inner());
        for (k, since, rows) in read {
            let slab = match since {
                None => g
                    .entry(keys[k].clone())
                    .insert_entry(Slab::new(epoch, version, dim, now))
                    .into_mut(),
                // Rows since `since` complete only a slab that holds every
                // row up to it (one evicted or loaded again meanwhile
                // waits for the next search).
                Some(since) => match g.get_mut(&keys[k]) {
                    Some(s) if s.epoch == epoch && s.dim == dim && s.version >= since => s,
                    _ => continue,
                },
            };
            for (rowid, seq, v) in &rows {
                slab.put(*rowid, *seq, v);
            }
            slab.version = slab.version.max(version);
        }
        Ok(true)
    }

    /// Drops the rows the check found stale: `stale` holds (entry index,
    /// rowid, stamp) against `keys`.
    pub(super) fn drop_stale(&self, model: &str, view: Option<&View>, stale: &[(usize, i64, i64)]) {
        if stale.is_empty() {
            return;
        }
        let mut g = self.slabs.write().unwrap_or_else(|p| p.into_inner());
        for &(k, rowid, seq) in stale {
            let entry = match view {
                None => None,
                Some(v) => v.entries().get(k).cloned(),
            };
            if let Some(s) = g.get_mut(&(model.to_string(), entry)) {
                s.remove(rowid, seq);
            }
        }
    }

    /// Drops every slab of the models of `vectors` (model, rowid), whose
    /// rows were just deleted: no copy of a forgotten vector stays here.
    pub(super) fn forget(&self, vectors: &[(String, i64)]) {
        if vectors.is_empty() {
            return;
        }
        let mut g = self.slabs.write().unwrap_or_else(|p| p.into_inner());
        g.retain(|(m, _), _| !vectors.iter().any(|(v, _)| v == m));
    }

    /// Drops every slab of the models other than `keep`.
    pub(super) fn keep_only(&self, keep: Option<&str>) {
        let mut g = self.slabs.write().unwrap_or_else(|p| p.into_inner());
        g.retain(|(m, _), _| Some(m.as_str()) == keep);
    }

    /// Vectors held for `model`, over all its slabs (`None`: no slab).
    pub(super) fn held(&self, model: &str) -> Option<usize> {
        let g = self.slabs.read().unwrap_or_else(|p| p.into_inner());
        g.iter()
            .filter(|((m, _), _)| m == model)
            .map(|(_, s)| s.rows.len())
            .reduce(|a, b| a + b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slab_put_replace_and_remove_keep_rows_and_data_in_step() {
        let mut s = Slab::new(0, 0, 2, 0);
        s.put(1, 1, &[1.0, 0.0]);
        s.put(2, 2, &[0.0, 1.0]);
        s.put(3, 3, &[0.5, 0.5]);
        // An older stamp does not replace a newer one.
        s.put(2, 1, &[9.0, 9.0]);
        assert_eq!(&s.data[2..4], &[0.0, 1.0]);
        s.put(2, 4, &[0.2, 0.8]);
        assert_eq!(&s.data[2..4], &[0.2, 0.8]);
        // A stale stamp removes nothing; the current one does.
        s.remove(1, 0);
        assert_eq!(s.rows.len(), 3);
        s.remove(1, 1);
        assert_eq!(s.rows.len(), 2);
        for (i, &(rowid, _)) in s.rows.iter().enumerate() {
            assert_eq!(s.at[&rowid], i);
            let want: &[f32] = if rowid == 2 { &[0.2, 0.8] } else { &[0.5, 0.5] };
            assert_eq!(&s.data[i * 2..][..2], want);
        }
        s.remove(3, 3);
        s.remove(2, 4);
        assert!(s.rows.is_empty() && s.data.is_empty() && s.at.is_empty());
    }

    #[test]
    fn room_is_made_only_from_idle_slabs_least_recently_used_first() {
        let key = |scope: &str| ("m".to_string(), Some(ViewEntry::parse(scope).unwrap()));
        let slab = |used: u64| {
            let mut s = Slab::new(0, 0, 2, used);
            s.put(1, 1, &[1.0, 0.0]);
            s
        };
        let one = slab(0).bytes();
        let mut slabs: HashMap<Key, Slab> = HashMap::new();
        slabs.insert(key("project/a"), slab(1_000));
        slabs.insert(key("project/b"), slab(5_000));
        slabs.insert(key("project/c"), slab(40_000));
        // Nothing is idle yet at 30.5 s: no room.
        assert!(!make_room(&mut slabs, &[], one, 3 * one, 30_500));
        assert_eq!(slabs.len(), 3);
        // At 40 s, `a` and `b` are idle: `a`, the older, goes first.
        assert!(make_room(&mut slabs, &[], one, 3 * one, 40_000));
        assert!(!slabs.contains_key(&key("project/a")) && slabs.len() == 2);
        // A slab of the view asking is never dropped for it.
        assert!(!make_room(
            &mut slabs,
            &[key("project/b")],
            2 * one,
            3 * one,
            40_000
        ));
        assert!(make_room(&mut slabs, &[], 2 * one, 3 * one, 40_000));
        assert_eq!(slabs.keys().collect::<Vec<_>>(), vec![&key("project/c")]);
    }
}
