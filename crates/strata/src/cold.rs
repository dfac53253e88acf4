//! The cold tier: archived memories moved out of the store into
//! append-only, compressed segment files in a directory.
//!
//! This module owns the segment format, the per-segment index, and the
//! file-level steps of a move (write durably, rewrite without some
//! memories, recover after a crash). It does not decide *what* moves or
//! when (the engine's upkeep does), and it never touches the store: the
//! engine pairs each file step with the store step (see `docs/tiers.md`).
//!
//! # Files
//!
//! - `seg-<uuid>.cold`: a live segment. Invariant: none of its memories is
//!   in the store (warm, active or archived).
//! - `seg-<uuid>.pending`: a segment whose memories may also still be in the
//!   store (a demotion or a restore was under way). Warm wins: readers skip
//!   its memories that the store holds, and recovery rewrites it without
//!   them and renames it `.cold`.
//! - `*.tmp`: a file being written; never read, deleted by recovery.
//!
//! # Segment layout (version 1)
//!
//! ```text
//! magic "STRCOLD1" | index_len u32 | index_crc u32 | data_len u64 | data_crc u32
//! | index: zstd(JSON index columns) | data: zstd(JSON lines of ColdRecord)
//! ```
//!
//! All integers little-endian; each crc is CRC-32 (IEEE) of the compressed
//! bytes it follows. The index alone (read without the data) tells a search
//! whether the segment can match: its scopes, time range and a term →
//! entries map built with the same stemming as full-text search.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::filter::Filter;
use crate::model::Memory;
use crate::scope::{Scope, View};
use crate::{Error, Result, text};

const MAGIC: &[u8; 8] = b"STRCOLD1";
const HEADER: usize = 8 + 4 + 4 + 8 + 4;
const ZSTD_LEVEL: i32 = 7;
/// Records per compressed block of a segment's data: a search decompresses
/// only the blocks holding the records it returns.
const BLOCK_RECORDS: usize = 512;

/// One cold memory: the memory as archived, when and why, and its history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ColdRecord {
    /// The memory as it was archived (its vector dropped: a restored memory
    /// is embedded again).
    pub memory: Memory,
    /// When it was archived.
    pub archived_at: Timestamp,
    /// Why it was archived (`evicted`, `expired`, `demoted`, …).
    pub reason: String,
    /// Earlier versions, oldest first.
    pub history: Vec<Memory>,
}

/// Where one record lies in a segment's decompressed data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Memory id.
    pub id: String,
    /// Its scope.
    pub scope: String,
    /// Byte offset of its JSON line in its decompressed block.
    pub offset: u64,
    /// Length of the line (without the newline).
    pub len: u32,
    /// The memory's token count (BM25's document length).
    pub tokens: u32,
}

/// What a search reads without opening a segment's data.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SegmentIndex {
    /// Records, in data order.
    pub entries: Vec<Entry>,
    /// Distinct scopes of the records.
    pub scopes: BTreeSet<String>,
    /// Earliest and latest `created_at` (milliseconds).
    pub time_range: (i64, i64),
    /// Byte offsets of the data's compressed blocks (each
    /// `BLOCK_RECORDS` records, one zstd frame), then the data's length.
    pub blocks: Vec<u64>,
    /// Stem → indices into `entries` of the records whose content has it,
    /// ascending (stored as gaps, which compress to a few bits).
    pub terms: BTreeMap<String, Vec<u32>>,
}

/// A [`SegmentIndex`] as stored: entries as parallel columns (ids, the
/// position of each one's scope in `scopes`, line lengths; offsets are the
/// running sum), postings as gaps. Columns compress far better than
/// records.
#[derive(Serialize, Deserialize)]
struct StoredIndex {
    ids: Vec<String>,
    scopes: Vec<String>,
    scope_of: Vec<u32>,
    lens: Vec<u32>,
    tokens: Vec<u32>,
    time_range: (i64, i64),
    blocks: Vec<u64>,
    terms: BTreeMap<String, Vec<u32>>,
}

impl StoredIndex {
    fn of(idx: &SegmentIndex) -> StoredIndex {
        let scopes: Vec<String> = idx.scopes.iter().cloned().collect();
        let pos: HashMap<&str, u32> = scopes
            .iter()
            .enumerate()
            .map(|(i, s)| (s.as_str(), i as u32))
            .collect();
        let mut terms = idx.terms.clone();
        for list in terms.values_mut() {
            for i in (1..list.len()).rev() {
                list[i] -= list[i - 1];
            }
        }
        StoredIndex {
            ids: idx.entries.iter().map(|e| e.id.clone()).collect(),
            scope_of: idx.entries.iter().map(|e| pos[e.scope.as_str()]).collect(),
            lens: idx.entries.iter().map(|e| e.len).collect(),
            tokens: idx.entries.iter().map(|e| e.tokens).collect(),
            scopes,
            time_range: idx.time_range,
            blocks: idx.blocks.clone(),
            terms,
        }
    }

    fn resolve(self, path: &Path) -> Result<SegmentIndex> {
        let n = self.ids.len();
        if self.scope_of.len() != n || self.lens.len() != n || self.tokens.len() != n {
            return Err(corrupt(path, "index: columns of different lengths"));
        }
        if self.blocks.len() != n.div_ceil(BLOCK_RECORDS) + 1 {
            return Err(corrupt(path, "index: wrong number of blocks"));
        }
        let mut entries = Vec::with_capacity(n);
        let mut offset = 0u64;
        for (k, (((id, s), len), tokens)) in self
            .ids
            .into_iter()
            .zip(self.scope_of)
            .zip(self.lens)
            .zip(self.tokens)
            .enumerate()
        {
            if k % BLOCK_RECORDS == 0 {
                offset = 0;
            }
            let scope = self
                .scopes
                .get(s as usize)
                .ok_or_else(|| corrupt(path, format!("index: entry `{id}` names scope {s}")))?
                .clone();
            entries.push(Entry {
                id,
                scope,
                offset,
                len,
                tokens,
            });
            offset += u64::from(len) + 1;
        }
        let mut terms = self.terms;
        for (term, list) in terms.iter_mut() {
            let mut at = 0u64;
            for (k, gap) in list.iter_mut().enumerate() {
                at += u64::from(*gap);
                if at >= n as u64 || (k > 0 && *gap == 0) {
                    return Err(corrupt(
                        path,
                        format!("index: the postings of `{term}` point past its {n} entries"),
                    ));
                }
                *gap = at as u32;
            }
        }
        Ok(SegmentIndex {
            entries,
            scopes: self.scopes.into_iter().collect(),
            time_range: self.time_range,
            blocks: self.blocks,
            terms,
        })
    }
}

fn compress_block(raw: &[u8]) -> Result<Vec<u8>> {
    zstd::bulk::compress(raw, ZSTD_LEVEL).map_err(io("compressing"))
}

fn decompress_block(z: &[u8]) -> std::io::Result<Vec<u8>> {
    zstd::stream::decode_all(z)
}

/// A segment's compressed data (checked), and the blocks decompressed so
/// far.
struct Blocks {
    zd: Vec<u8>,
    raw: HashMap<usize, Vec<u8>>,
}

/// Counts and bytes of the cold tier.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColdStats {
    /// Memories in segments.
    pub memories: u64,
    /// Segment files.
    pub segments: u64,
    /// Bytes of the segment files.
    pub bytes: u64,
}

/// A directory of cold segments.
#[derive(Debug)]
pub struct ColdDir {
    dir: PathBuf,
    /// Indexes already read, by file path, with the file length they were
    /// read at (a rewritten segment has a new length or is re-read).
    cache: Mutex<HashMap<PathBuf, (u64, Arc<SegmentIndex>)>>,
}

/// Whether a segment may share memories with the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegState {
    /// `.cold`: no memory of it is in the store.
    Live,
    /// `.pending`: the store may hold some of its memories; warm wins.
    Pending,
}

/// A segment file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Its path.
    pub path: PathBuf,
    /// Live or pending.
    pub state: SegState,
}

fn corrupt(path: &Path, why: impl Into<String>) -> Error {
    Error::Corrupt {
        what: format!("cold segment {}", path.display()),
        source: why.into().into(),
    }
}

fn io(ctx: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let ctx = ctx.into();
    move |e| Error::io(ctx, e)
}

/// Makes a directory entry (a rename, a new or deleted file) durable.
fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(format!("syncing {}", dir.display())))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

impl ColdDir {
    /// Opens (creating) the directory.
    pub fn open(dir: impl Into<PathBuf>) -> Result<ColdDir> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        Ok(ColdDir {
            dir,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Segment files (live and pending), by name.
    pub fn segments(&self) -> Result<Vec<Segment>> {
        let mut out = Vec::new();
        for e in fs::read_dir(&self.dir).map_err(io(format!("reading {}", self.dir.display())))? {
            let path = e
                .map_err(io(format!("reading {}", self.dir.display())))?
                .path();
            let state = match path.extension().and_then(|x| x.to_str()) {
                Some("cold") => SegState::Live,
                Some("pending") => SegState::Pending,
                _ => continue,
            };
            out.push(Segment { path, state });
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// Encodes records as one segment file's bytes.
    pub fn encode(records: &[ColdRecord]) -> Result<Vec<u8>> {
        let mut data = Vec::new();
        let mut zd = Vec::new();
        let mut idx = SegmentIndex {
            time_range: (i64::MAX, i64::MIN),
            ..SegmentIndex::default()
        };
        for (i, r) in records.iter().enumerate() {
            if i % BLOCK_RECORDS == 0 && i > 0 {
                idx.blocks.push(zd.len() as u64);
                zd.extend(compress_block(&data)?);
                data.clear();
            }
            let mut r = r.clone();
            r.memory.embedding = None;
            for h in &mut r.history {
                h.embedding = None;
            }
            let line = serde_json::to_vec(&r).map_err(|e| Error::Corrupt {
                what: format!("cold record {}", r.memory.id),
                source: e.into(),
            })?;
            let t = r.memory.created_at.as_millisecond();
            idx.time_range = (idx.time_range.0.min(t), idx.time_range.1.max(t));
            idx.scopes.insert(r.memory.scope.to_string());
            for s in text::stems(&r.memory.content) {
                idx.terms.entry(s).or_default().push(i as u32);
            }
            idx.entries.push(Entry {
                id: r.memory.id.clone(),
                scope: r.memory.scope.to_string(),
                offset: data.len() as u64,
                len: line.len() as u32,
                tokens: r.memory.tokens,
            });
            data.extend_from_slice(&line);
            data.push(b'\n');
        }
        if !records.is_empty() {
            idx.blocks.push(zd.len() as u64);
            zd.extend(compress_block(&data)?);
        }
        idx.blocks.push(zd.len() as u64);
        let ijson = serde_json::to_vec(&StoredIndex::of(&idx)).map_err(|e| Error::Corrupt {
            what: "cold segment index".into(),
            source: e.into(),
        })?;
        let zi = zstd::bulk::compress(&ijson, ZSTD_LEVEL).map_err(io("compressing"))?;
        let mut out = Vec::with_capacity(HEADER + zi.len() + zd.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(zi.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&zi).to_le_bytes());
        out.extend_from_slice(&(zd.len() as u64).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&zd).to_le_bytes());
        out.extend_from_slice(&zi);
        out.extend_from_slice(&zd);
        Ok(out)
    }

    /// Writes `bytes` to `dest` durably: a temp file, fsynced, renamed over
    /// `dest`, the directory fsynced.
    fn write_durably(&self, dest: &Path, bytes: &[u8]) -> Result<()> {
        let tmp = dest.with_extension("tmp");
        let mut f = File::create(&tmp).map_err(io(format!("creating {}", tmp.display())))?;
        f.write_all(bytes)
            .and_then(|_| f.sync_all())
            .map_err(io(format!("writing {}", tmp.display())))?;
        drop(f);
        fs::rename(&tmp, dest).map_err(io(format!("renaming {}", tmp.display())))?;
        sync_dir(&self.dir)
    }

    /// Writes a new segment holding `records`, durably, as `.pending` (its
    /// memories are still in the store); returns its path. The caller
    /// deletes them from the store, then calls [`ColdDir::commit`].
    pub fn write_pending(&self, records: &[ColdRecord]) -> Result<PathBuf> {
        let name = format!("seg-{}.pending", uuid::Uuid::now_v7().simple());
        let path = self.dir.join(name);
        self.write_durably(&path, &Self::encode(records)?)?;
        Ok(path)
    }

    /// Marks a pending segment live (its memories left the store).
    pub fn commit(&self, pending: &Path) -> Result<PathBuf> {
        let live = pending.with_extension("cold");
        fs::rename(pending, &live).map_err(io(format!("renaming {}", pending.display())))?;
        sync_dir(&self.dir)?;
        Ok(live)
    }

    /// Marks a live segment pending (some of its memories are about to go
    /// back to the store).
    pub fn uncommit(&self, live: &Path) -> Result<PathBuf> {
        let pending = live.with_extension("pending");
        fs::rename(live, &pending).map_err(io(format!("renaming {}", live.display())))?;
        sync_dir(&self.dir)?;
        Ok(pending)
    }

    /// Rewrites a segment in place without the records `drop` selects (the
    /// new file replaces the old by rename, so the dropped records' bytes
    /// are in no file afterwards); deletes it when nothing is left. Returns
    /// how many were dropped.
    pub fn rewrite_without(&self, path: &Path, drop: &dyn Fn(&str) -> bool) -> Result<usize> {
        let all = self.read_all(path)?;
        let keep: Vec<ColdRecord> = all
            .iter()
            .filter(|r| !drop(&r.memory.id))
            .cloned()
            .collect();
        let dropped = all.len() - keep.len();
        if dropped == 0 {
            return Ok(0);
        }
        if keep.is_empty() {
            fs::remove_file(path).map_err(io(format!("removing {}", path.display())))?;
            sync_dir(&self.dir)?;
        } else {
            self.write_durably(path, &Self::encode(&keep)?)?;
        }
        self.cache.lock().unwrap().remove(path);
        Ok(dropped)
    }

    fn read_header(path: &Path, f: &mut File) -> Result<(u32, u32, u64, u32)> {
        Self::read_header_from(path, f)
    }

    fn read_header_from(path: &Path, f: &mut impl Read) -> Result<(u32, u32, u64, u32)> {
        let mut h = [0u8; HEADER];
        f.read_exact(&mut h)
            .map_err(|e| corrupt(path, format!("header unreadable ({e})")))?;
        if &h[..8] != MAGIC {
            return Err(corrupt(path, "not a strata cold segment (bad magic)"));
        }
        let u32at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().unwrap());
        let data_len = u64::from_le_bytes(h[16..24].try_into().unwrap());
        Ok((u32at(8), u32at(12), data_len, u32at(24)))
    }

    /// A segment's index (cached by file length).
    pub fn index(&self, path: &Path) -> Result<Arc<SegmentIndex>> {
        let mut f = File::open(path).map_err(io(format!("opening {}", path.display())))?;
        let flen = f
            .metadata()
            .map_err(io(format!("reading {}", path.display())))?
            .len();
        if let Some((len, idx)) = self.cache.lock().unwrap().get(path)
            && *len == flen
        {
            return Ok(idx.clone());
        }
        let (ilen, icrc, dlen, _) = Self::read_header(path, &mut f)?;
        if HEADER as u64 + ilen as u64 + dlen != flen {
            return Err(corrupt(
                path,
                format!(
                    "truncated or extended: {flen} bytes, the header says {}",
                    HEADER as u64 + ilen as u64 + dlen
                ),
            ));
        }
        let mut zi = vec![0u8; ilen as usize];
        f.read_exact(&mut zi)
            .map_err(|e| corrupt(path, format!("index unreadable ({e})")))?;
        let idx = Arc::new(Self::decode_index(path, &zi, icrc)?);
        self.cache
            .lock()
            .unwrap()
            .insert(path.to_path_buf(), (flen, idx.clone()));
        Ok(idx)
    }

    /// A segment's index and decompressed data, from one read of the file
    /// (a segment replaced meanwhile by another process's rewrite is read
    /// whole, old or new, never half of each), both checked.
    fn load(&self, path: &Path) -> Result<(Arc<SegmentIndex>, Blocks)> {
        let bytes = fs::read(path).map_err(io(format!("reading {}", path.display())))?;
        let flen = bytes.len() as u64;
        let mut head = &bytes[..];
        let (ilen, icrc, dlen, dcrc) = Self::read_header_from(path, &mut head)?;
        if HEADER as u64 + ilen as u64 + dlen != flen {
            return Err(corrupt(
                path,
                format!(
                    "truncated or extended: {flen} bytes, the header says {}",
                    HEADER as u64 + ilen as u64 + dlen
                ),
            ));
        }
        let zi = &bytes[HEADER..HEADER + ilen as usize];
        let zd = &bytes[HEADER + ilen as usize..];
        let cached = match self.cache.lock().unwrap().get(path) {
            Some((len, idx)) if *len == flen => Some(idx.clone()),
            _ => None,
        };
        let idx = match cached {
            Some(idx) => idx,
            None => {
                let idx = Arc::new(Self::decode_index(path, zi, icrc)?);
                self.cache
                    .lock()
                    .unwrap()
                    .insert(path.to_path_buf(), (flen, idx.clone()));
                idx
            }
        };
        if crc32fast::hash(zd) != dcrc {
            return Err(corrupt(path, "data checksum mismatch"));
        }
        Ok((
            idx,
            Blocks {
                zd: zd.to_vec(),
                raw: HashMap::new(),
            },
        ))
    }

    fn decode_index(path: &Path, zi: &[u8], icrc: u32) -> Result<SegmentIndex> {
        if crc32fast::hash(zi) != icrc {
            return Err(corrupt(path, "index checksum mismatch"));
        }
        let raw = zstd::stream::decode_all(zi)
            .map_err(|e| corrupt(path, format!("index does not decompress ({e})")))?;
        let stored: StoredIndex = serde_json::from_slice(&raw)
            .map_err(|e| corrupt(path, format!("index unreadable ({e})")))?;
        stored.resolve(path)
    }

    /// A segment's bytes decompressed: its index and every block, for
    /// checks that a text is in no file (a compressed file does not show
    /// it to a plain scan).
    pub fn plain_bytes(&self, path: &Path) -> Result<Vec<u8>> {
        let bytes = fs::read(path).map_err(io(format!("reading {}", path.display())))?;
        let (ilen, icrc, _, _) = Self::read_header_from(path, &mut &bytes[..])?;
        let zi = bytes
            .get(HEADER..HEADER + ilen as usize)
            .ok_or_else(|| corrupt(path, "truncated"))?;
        let idx = Self::decode_index(path, zi, icrc)?;
        let mut out = zstd::stream::decode_all(zi).map_err(io("decompressing"))?;
        let zd = &bytes[HEADER + ilen as usize..];
        for w in idx.blocks.windows(2) {
            let block = zd
                .get(w[0] as usize..w[1] as usize)
                .ok_or_else(|| corrupt(path, "truncated"))?;
            out.extend(decompress_block(block).map_err(io("decompressing"))?);
        }
        Ok(out)
    }

    /// Every record of a segment, in order.
    pub fn read_all(&self, path: &Path) -> Result<Vec<ColdRecord>> {
        let (idx, mut data) = self.load(path)?;
        (0..idx.entries.len())
            .map(|i| Self::record(path, &idx, &mut data, i))
            .collect()
    }

    fn record(path: &Path, idx: &SegmentIndex, data: &mut Blocks, i: usize) -> Result<ColdRecord> {
        let e = &idx.entries[i];
        let b = i / BLOCK_RECORDS;
        if !data.raw.contains_key(&b) {
            let (from, to) = match (idx.blocks.get(b), idx.blocks.get(b + 1)) {
                (Some(&f), Some(&t)) if f <= t && t as usize <= data.zd.len() => {
                    (f as usize, t as usize)
                }
                _ => return Err(corrupt(path, format!("block {b} lies outside the data"))),
            };
            let raw = decompress_block(&data.zd[from..to])
                .map_err(|e| corrupt(path, format!("block {b} does not decompress ({e})")))?;
            data.raw.insert(b, raw);
        }
        let data = &data.raw[&b];
        let (a, b) = (e.offset as usize, e.offset as usize + e.len as usize);
        let line = data
            .get(a..b)
            .ok_or_else(|| corrupt(path, format!("entry `{}` lies outside the data", e.id)))?;
        let r: ColdRecord = serde_json::from_slice(line)
            .map_err(|err| corrupt(path, format!("entry `{}` unreadable ({err})", e.id)))?;
        if r.memory.id != e.id {
            return Err(corrupt(
                path,
                format!("entry `{}` holds another memory", e.id),
            ));
        }
        Ok(r)
    }

    /// Records selected by `view` (every scope when `None`) and `filter`
    /// that contain any of `terms` (every record when `terms` is empty),
    /// with the segment each is in. Only segments whose index can match
    /// are decompressed. A damaged segment is an error naming it.
    pub fn search(
        &self,
        view: Option<&View>,
        filter: &Filter,
        terms: &[String],
    ) -> Result<Vec<(ColdRecord, Segment)>> {
        // A segment renamed or emptied by another process between the
        // listing and the read is not an error: list again.
        let mut tries = 0;
        loop {
            match self.search_once(view, filter, terms) {
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound && tries < 3 =>
                {
                    tries += 1;
                }
                out => return out,
            }
        }
    }

    fn search_once(
        &self,
        view: Option<&View>,
        filter: &Filter,
        terms: &[String],
    ) -> Result<Vec<(ColdRecord, Segment)>> {
        let stems: Vec<String> = terms.iter().map(|t| text::stem(t)).collect();
        let mut out = Vec::new();
        for seg in self.segments()? {
            let idx = self.index(&seg.path)?;
            let in_view =
                |s: &str| view.is_none_or(|v| Scope::parse(s).is_ok_and(|s| v.contains(&s)));
            if !idx.scopes.iter().any(|s| in_view(s)) {
                continue;
            }
            let cands: Vec<usize> = if stems.is_empty() {
                (0..idx.entries.len()).collect()
            } else {
                let set: BTreeSet<usize> = stems
                    .iter()
                    .filter_map(|s| idx.terms.get(s))
                    .flatten()
                    .map(|&i| i as usize)
                    .collect();
                set.into_iter().collect()
            };
            let cands: Vec<usize> = cands
                .into_iter()
                .filter(|&i| in_view(&idx.entries[i].scope))
                .collect();
            if cands.is_empty() {
                continue;
            }
            let (fresh, mut data) = self.load(&seg.path)?;
            if !Arc::ptr_eq(&fresh, &idx) {
                // Rewritten since its index was read: search it afresh.
                return Err(Error::io(
                    "cold segment changed",
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                ));
            }
            for i in cands {
                let r = Self::record(&seg.path, &idx, &mut data, i)?;
                if filter.matches(&r.memory) {
                    out.push((r, seg.clone()));
                }
            }
        }
        Ok(out)
    }

    /// The `limit` records in `view` that best match `terms` by BM25, with
    /// the statistics of the cold memories in the view, scored from the
    /// indexes alone; only the segments holding the best are decompressed.
    /// Best first (ties by id, descending).
    pub fn search_top(
        &self,
        view: &View,
        terms: &[String],
        limit: usize,
    ) -> Result<Vec<(ColdRecord, Segment, f64)>> {
        let mut tries = 0;
        loop {
            match self.search_top_once(view, terms, limit) {
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound && tries < 3 =>
                {
                    tries += 1;
                }
                out => return out,
            }
        }
    }

    fn search_top_once(
        &self,
        view: &View,
        terms: &[String],
        limit: usize,
    ) -> Result<Vec<(ColdRecord, Segment, f64)>> {
        let stems: Vec<String> = terms.iter().map(|t| text::stem(t)).collect();
        // Pass 1, indexes only: each in-view candidate's matched terms.
        struct Cand {
            seg: usize,
            entry: u32,
            matched: Vec<usize>,
        }
        let segs = self.segments()?;
        let mut idxs = Vec::with_capacity(segs.len());
        let mut cands: Vec<Cand> = Vec::new();
        let mut df = vec![0usize; stems.len()];
        let (mut n_docs, mut len_sum, mut n_matched) = (0usize, 0f64, 0usize);
        for (si, seg) in segs.iter().enumerate() {
            let idx = self.index(&seg.path)?;
            let scope_in: HashMap<&str, bool> = idx
                .scopes
                .iter()
                .map(|s| {
                    let yes = Scope::parse(s).is_ok_and(|s| view.contains(&s));
                    (s.as_str(), yes)
                })
                .collect();
            if !scope_in.values().any(|&y| y) {
                idxs.push(idx);
                continue;
            }
            let all_in = scope_in.values().all(|&y| y);
            let in_view = |e: &Entry| all_in || scope_in.get(e.scope.as_str()) == Some(&true);
            n_docs += if all_in {
                idx.entries.len()
            } else {
                idx.entries.iter().filter(|e| in_view(e)).count()
            };
            let mut here: HashMap<u32, Vec<usize>> = HashMap::new();
            for (t, stem) in stems.iter().enumerate() {
                for &i in idx.terms.get(stem).map(Vec::as_slice).unwrap_or(&[]) {
                    if in_view(&idx.entries[i as usize]) {
                        df[t] += 1;
                        here.entry(i).or_default().push(t);
                    }
                }
            }
            for (entry, matched) in here {
                len_sum += f64::from(idx.entries[entry as usize].tokens);
                n_matched += 1;
                cands.push(Cand {
                    seg: si,
                    entry,
                    matched,
                });
            }
            idxs.push(idx);
        }
        let bm = text::Bm25::new(n_docs, &df);
        let avglen = len_sum / (n_matched.max(1) as f64);
        let mut scored: Vec<(Cand, f64)> = cands
            .into_iter()
            .map(|c| {
                let len = f64::from(idxs[c.seg].entries[c.entry as usize].tokens);
                let score = bm.score(c.matched.iter().copied(), len, avglen);
                (c, score)
            })
            .collect();
        scored.sort_by(|a, b| {
            b.1.total_cmp(&a.1).then_with(|| {
                let id = |c: &Cand| &idxs[c.seg].entries[c.entry as usize].id;
                id(&b.0).cmp(id(&a.0))
            })
        });
        scored.truncate(limit);
        // Pass 2: read the segments holding the best.
        let mut by_seg: BTreeMap<usize, Vec<(u32, f64)>> = BTreeMap::new();
        for (c, score) in &scored {
            by_seg.entry(c.seg).or_default().push((c.entry, *score));
        }
        let mut out = Vec::with_capacity(scored.len());
        for (si, wanted) in by_seg {
            let seg = &segs[si];
            let (fresh, mut data) = self.load(&seg.path)?;
            if !Arc::ptr_eq(&fresh, &idxs[si]) {
                return Err(Error::io(
                    "cold segment changed",
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                ));
            }
            for (entry, score) in wanted {
                let r = Self::record(&seg.path, &fresh, &mut data, entry as usize)?;
                out.push((r, seg.clone(), score));
            }
        }
        out.sort_by(|a, b| {
            b.2.total_cmp(&a.2)
                .then_with(|| b.0.memory.id.cmp(&a.0.memory.id))
        });
        Ok(out)
    }

    /// The segment holding `id`, if any (reads indexes only).
    pub fn find(&self, id: &str) -> Result<Option<(ColdRecord, Segment)>> {
        for seg in self.segments()? {
            let idx = self.index(&seg.path)?;
            if idx.entries.iter().any(|e| e.id == id) {
                let (idx, mut data) = self.load(&seg.path)?;
                if let Some(i) = idx.entries.iter().position(|e| e.id == id) {
                    return Ok(Some((Self::record(&seg.path, &idx, &mut data, i)?, seg)));
                }
            }
        }
        Ok(None)
    }

    /// Which of `ids` some segment holds (one pass over the indexes).
    pub fn holding(&self, ids: &BTreeSet<&str>) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for seg in self.segments()? {
            for e in &self.index(&seg.path)?.entries {
                if ids.contains(e.id.as_str()) {
                    out.push(e.id.clone());
                }
            }
        }
        Ok(out)
    }

    /// Ids (with scope) starting with `prefix`, at most `limit`.
    pub fn ids_with_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for seg in self.segments()? {
            for e in &self.index(&seg.path)?.entries {
                if e.id.starts_with(prefix) && out.len() < limit {
                    out.push((e.id.clone(), e.scope.clone()));
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Deletes leftover temp files; returns the pending segments, which
    /// the caller reconciles with the store.
    pub fn leftovers(&self) -> Result<Vec<PathBuf>> {
        for e in fs::read_dir(&self.dir).map_err(io(format!("reading {}", self.dir.display())))? {
            let path = e
                .map_err(io(format!("reading {}", self.dir.display())))?
                .path();
            if path.extension().is_some_and(|x| x == "tmp") {
                fs::remove_file(&path).map_err(io(format!("removing {}", path.display())))?;
            }
        }
        Ok(self
            .segments()?
            .into_iter()
            .filter(|s| s.state == SegState::Pending)
            .map(|s| s.path)
            .collect())
    }

    /// Counts and bytes.
    pub fn stats(&self) -> Result<ColdStats> {
        let mut st = ColdStats::default();
        for seg in self.segments()? {
            st.segments += 1;
            st.bytes += fs::metadata(&seg.path)
                .map_err(io(format!("reading {}", seg.path.display())))?
                .len();
            st.memories += self.index(&seg.path)?.entries.len() as u64;
        }
        Ok(st)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: &str, scope: &str, content: &str) -> ColdRecord {
        let mut m = crate::testutil::memory(scope, content, Timestamp::UNIX_EPOCH);
        m.id = id.into();
        ColdRecord {
            memory: m,
            archived_at: Timestamp::UNIX_EPOCH,
            reason: "demoted".into(),
            history: vec![],
        }
    }

    fn view(s: &str) -> View {
        View::subtree(Scope::parse(s).unwrap())
    }

    #[test]
    fn a_segment_reads_back_what_was_written() {
        let d = tempfile::tempdir().unwrap();
        let c = ColdDir::open(d.path().join("c")).unwrap();
        let rs = vec![
            rec("a1", "project/x", "deploys run on fridays"),
            rec("a2", "project/y", "the cache is redis"),
        ];
        let p = c.write_pending(&rs).unwrap();
        let p = c.commit(&p).unwrap();
        assert_eq!(c.read_all(&p).unwrap(), rs);
        assert_eq!(c.stats().unwrap().memories, 2);
        assert_eq!(c.segments().unwrap()[0].state, SegState::Live);
    }

    #[test]
    fn search_uses_terms_and_scopes() {
        let d = tempfile::tempdir().unwrap();
        let c = ColdDir::open(d.path()).unwrap();
        c.write_pending(&[
            rec("a1", "project/x", "deploying on fridays"),
            rec("a2", "project/y", "deploys need review"),
        ])
        .unwrap();
        let all = Filter::all();
        let ids = |v: Option<&View>, t: &[&str]| -> Vec<String> {
            let t: Vec<String> = t.iter().map(|s| s.to_string()).collect();
            c.search(v, &all, &t)
                .unwrap()
                .into_iter()
                .map(|(r, _)| r.memory.id)
                .collect()
        };
        // Stemmed: "deploy" matches "deploying" and "deploys".
        assert_eq!(ids(None, &["deploy"]), ["a1", "a2"]);
        assert_eq!(ids(Some(&view("project/x")), &["deploy"]), ["a1"]);
        assert!(ids(Some(&view("project/z")), &[]).is_empty());
        assert!(ids(None, &["kubernetes"]).is_empty());
    }

    #[test]
    fn records_span_several_blocks() {
        let d = tempfile::tempdir().unwrap();
        let c = ColdDir::open(d.path()).unwrap();
        let rs: Vec<ColdRecord> = (0..1200)
            .map(|i| {
                rec(
                    &format!("m{i:04}"),
                    "project/x",
                    &format!("note number w{i}"),
                )
            })
            .collect();
        let p = c.write_pending(&rs).unwrap();
        assert_eq!(c.index(&p).unwrap().blocks.len(), 4, "3 blocks and the end");
        assert_eq!(c.read_all(&p).unwrap(), rs);
        let top = c
            .search_top(&view("project/x"), &["w1077".to_string()], 5)
            .unwrap();
        assert_eq!(top.len(), 1);
        assert_eq!(top[0].0.memory.id, "m1077");
        assert_eq!(c.find("m0700").unwrap().unwrap().0, rs[700]);
    }

    #[test]
    fn search_top_ranks_by_bm25_from_the_index() {
        let d = tempfile::tempdir().unwrap();
        let c = ColdDir::open(d.path()).unwrap();
        c.write_pending(&[
            rec("a1", "project/x", "deploy"),
            rec("a2", "project/x", "deploy deploy rollback"),
            rec("a3", "project/x", "unrelated words"),
            rec("a4", "project/y", "deploy rollback"),
        ])
        .unwrap();
        let terms = vec!["rollback".to_string(), "deploy".to_string()];
        let top = c.search_top(&view("project/x"), &terms, 10).unwrap();
        let ids: Vec<&str> = top.iter().map(|(r, _, _)| r.memory.id.as_str()).collect();
        // Both terms beat one; the other project is out of the view.
        assert_eq!(ids, ["a2", "a1"]);
        assert!(top[0].2 > top[1].2 && top[1].2 > 0.0);
        assert_eq!(
            c.search_top(&view("project/x"), &terms, 1).unwrap().len(),
            1
        );
    }

    #[test]
    fn rewrite_leaves_no_bytes_of_the_dropped_record() {
        let d = tempfile::tempdir().unwrap();
        let c = ColdDir::open(d.path()).unwrap();
        let p = c
            .write_pending(&[
                rec("a1", "project/x", "zebra-unique-planted-string"),
                rec("a2", "project/x", "kept"),
            ])
            .unwrap();
        assert_eq!(c.rewrite_without(&p, &|id| id == "a1").unwrap(), 1);
        let ids: Vec<String> = c
            .read_all(&p)
            .unwrap()
            .into_iter()
            .map(|r| r.memory.id)
            .collect();
        assert_eq!(ids, ["a2"]);
        for e in fs::read_dir(d.path()).unwrap() {
            let bytes = c.plain_bytes(&e.unwrap().path()).unwrap();
            assert!(!String::from_utf8_lossy(&bytes).contains("zebra"));
        }
        assert_eq!(c.rewrite_without(&p, &|id| id == "a2").unwrap(), 1);
        assert!(
            c.segments().unwrap().is_empty(),
            "an emptied segment is deleted"
        );
    }

    #[test]
    fn damaged_segments_are_named_never_skipped() {
        let d = tempfile::tempdir().unwrap();
        let c = ColdDir::open(d.path()).unwrap();
        let p = c
            .write_pending(&[rec("a1", "project/x", "hello world")])
            .unwrap();
        let good = fs::read(&p).unwrap();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let check = |bytes: &[u8], want: &str| {
            fs::write(&p, bytes).unwrap();
            let c = ColdDir::open(d.path()).unwrap();
            let e = c.search(None, &Filter::all(), &[]).unwrap_err().to_string();
            assert!(e.contains(&name) && e.contains(want), "{e}");
        };
        check(&good[..good.len() - 3], "truncated");
        let mut flipped = good.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xff;
        check(&flipped, "data checksum");
        let mut flipped = good.clone();
        flipped[HEADER] ^= 0xff;
        check(&flipped, "index checksum");
        check(b"garbage that is long enough to hold a header", "bad magic");
        check(b"short", "header");
    }

    #[test]
    fn leftovers_removes_temp_files_and_lists_pending() {
        let d = tempfile::tempdir().unwrap();
        let c = ColdDir::open(d.path()).unwrap();
        fs::write(d.path().join("seg-x.tmp"), b"half").unwrap();
        let p = c.write_pending(&[rec("a1", "project/x", "hi")]).unwrap();
        assert_eq!(c.leftovers().unwrap(), [p]);
        assert!(!d.path().join("seg-x.tmp").exists());
    }
}
