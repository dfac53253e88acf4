//! The cold tier: archived memories moved out of the store into
//! append-only, compressed segment files in a directory or a bucket of an
//! S3-compatible object store (`blobs.rs`: the same names either way).
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
//! - `merge-<uuid>.merge`: a merge under way: the merged segment's name,
//!   then the names of the segments it replaces. While the merged segment
//!   is live, readers leave its sources out; recovery deletes them (or,
//!   when the merged segment never became live, drops the journal).
//! - `reads.log`: ids of cold memories recalls returned, which promotion
//!   back to the store counts (`reads.rs`).
//!
//! # Segment layout (version 1)
//!
//! ```text
//! magic "STRCOLD1" | index_len u32 | index_crc u32 | data_len u64 | data_crc u32
//! | index: zstd(JSON index columns) | data: zstd(JSON lines of ColdRecord)
//! ```
//!
//! A record's `checksum` (and each history version's) is empty when it is
//! the SHA-256 of the content and payload, as strata always writes it: a
//! read computes it again (see [`leave_out_checksum`]).
//!
//! All integers little-endian; each crc is CRC-32 (IEEE) of the compressed
//! bytes it follows. The index alone (read without the data) tells a search
//! whether the segment can match: its scopes, time range and a term →
//! entries map built with the same stemming as full-text search.
//!
//! Beside an encrypted store the magic is `STRCOLDX`, the header ends with
//! the directory's 16-byte salt, and the index and each compressed block
//! are sealed (see [`seal`]: `key.check` and `key.next` are its files; the
//! crcs are of the sealed bytes).

mod blobs;
mod reads;

pub use blobs::ColdLocation;
pub use reads::Reads;

use blobs::Blobs;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::filter::Filter;
use crate::model::Memory;
use crate::scope::{Scope, View};
use crate::store::StoreKey;
use crate::{Error, Result, text};

mod seal;

use seal::{KEY_CHECK, KEY_NEXT, KeyFile, PART_INDEX, SegKey};

const MAGIC: &[u8; 8] = b"STRCOLD1";
const MAGIC_SEALED: &[u8; 8] = b"STRCOLDX";
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

/// A memory's checksum is SHA-256 of its content and payload: a segment
/// leaves it out (writes it empty) when it is that, and a read computes it
/// again ([`restore_checksum`]). A hash does not compress: it was 40 % of a
/// record's compressed bytes. A checksum that is not the content's (never
/// written by strata) is kept as it is, so nothing is lost either way.
fn leave_out_checksum(m: &mut Memory) {
    if m.checksum == crate::model::checksum(&m.content, m.payload.as_ref()) {
        m.checksum.clear();
    }
}

/// The checksum [`leave_out_checksum`] left out, computed again.
fn restore_checksum(m: &mut Memory) {
    if m.checksum.is_empty() {
        m.checksum = crate::model::checksum(&m.content, m.payload.as_ref());
    }
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

/// `raw` compressed, then sealed as part `part` when there is a key.
fn compress_block(raw: &[u8], seal: Option<&SegKey>, part: u64) -> Result<Vec<u8>> {
    let z = zstd::bulk::compress(raw, ZSTD_LEVEL).map_err(io("compressing"))?;
    Ok(match seal {
        Some(k) => k.seal(part, &z),
        None => z,
    })
}

/// The inverse of [`compress_block`]; the error says what failed.
fn decompress_block(
    z: &[u8],
    seal: Option<&SegKey>,
    part: u64,
) -> std::result::Result<Vec<u8>, String> {
    let opened;
    let z = match seal {
        Some(k) => {
            opened = k
                .open(part, z)
                .ok_or("does not open with the key (changed bytes)")?;
            &opened[..]
        }
        None => z,
    };
    zstd::stream::decode_all(z).map_err(|e| format!("does not decompress ({e})"))
}

/// A segment file's header.
struct Header {
    index_len: u32,
    index_crc: u32,
    data_len: u64,
    data_crc: u32,
    /// The salt of a sealed segment.
    salt: Option<[u8; 16]>,
}

impl Header {
    /// Its length in the file.
    fn len(&self) -> usize {
        HEADER + if self.salt.is_some() { 16 } else { 0 }
    }

    /// The file length it implies.
    fn file_len(&self) -> u64 {
        self.len() as u64 + u64::from(self.index_len) + self.data_len
    }
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
    /// Where the files are.
    blobs: Blobs,
    /// How errors name them: the directory, or `s3://bucket/prefix`.
    dir: PathBuf,
    /// The store's key, which opens the tier's key file.
    key: Option<StoreKey>,
    /// The segment key, beside an encrypted store (`None` inside: a plain
    /// tier), read on first use.
    seal: OnceLock<Option<SegKey>>,
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

/// A merge under way: the merged segment and the segments it replaces.
#[derive(Debug)]
struct Merge {
    target: PathBuf,
    sources: Vec<PathBuf>,
}

/// Whether `name` is a segment file's name (`seg-<hex>.cold|pending`), so a
/// journal never names anything else in (or outside) the directory.
fn is_segment_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("seg-") else {
        return false;
    };
    let Some((id, ext)) = rest.split_once('.') else {
        return false;
    };
    !id.is_empty()
        && id.bytes().all(|b| b.is_ascii_hexdigit())
        && (ext == "cold" || ext == "pending")
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

/// The stems (`seg-<id>`) of the live segments among `names`.
fn live_stems(names: &[String]) -> BTreeSet<&str> {
    names
        .iter()
        .filter_map(|n| n.strip_suffix(".cold"))
        .collect()
}

/// A file's name in its tier.
fn name_of(path: &Path) -> Result<&str> {
    path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        Error::io(
            format!("{} is not a cold tier file", path.display()),
            std::io::Error::from(std::io::ErrorKind::InvalidInput),
        )
    })
}

/// Runs `search` again (up to three more times) when a segment it listed
/// was renamed or emptied by another process before it was read: that is
/// not an error, the listing is stale.
fn relisting<T>(search: impl Fn() -> Result<T>) -> Result<T> {
    let mut tries = 0;
    loop {
        match search() {
            Err(Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound && tries < 3 =>
            {
                tries += 1;
            }
            out => return out,
        }
    }
}

/// A segment file's header, unchecked against any tier.
fn read_header(path: &Path, f: &mut impl Read) -> Result<Header> {
    let mut h = [0u8; HEADER];
    f.read_exact(&mut h)
        .map_err(|e| corrupt(path, format!("header unreadable ({e})")))?;
    let sealed = match &h[..8] {
        m if m == MAGIC => false,
        m if m == MAGIC_SEALED => true,
        _ => return Err(corrupt(path, "not a strata cold segment (bad magic)")),
    };
    let u32at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().unwrap());
    let salt = if sealed {
        let mut salt = [0u8; 16];
        f.read_exact(&mut salt)
            .map_err(|e| corrupt(path, format!("header unreadable ({e})")))?;
        Some(salt)
    } else {
        None
    };
    Ok(Header {
        index_len: u32at(8),
        index_crc: u32at(12),
        data_len: u64::from_le_bytes(h[16..24].try_into().unwrap()),
        data_crc: u32at(24),
        salt,
    })
}

/// Rewrites every segment at `at` (if there is a tier there) as `to`
/// keys it (`None`: plain), reading those not yet converted with `from`;
/// returns how many it rewrote. Resumable: `key.next` names the target
/// first, each segment is replaced whole, and a run after a crash skips
/// the segments already converted. Nothing else may use the tier
/// meanwhile (`strata encrypt`, `decrypt` and `rekey` run this while
/// holding the store's exclusive lock).
pub fn convert(at: &ColdLocation, from: Option<&StoreKey>, to: Option<&StoreKey>) -> Result<usize> {
    convert_until(at, from, to, usize::MAX)
}
/// What [`convert_store`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Converted {
    /// What it did to the database file.
    pub what: crate::Conversion,
    /// Cold segments it rewrote.
    pub segments: usize,
}

/// Encrypts, decrypts or rekeys a SQLite store and its cold tier in `cold`
/// (if that directory exists), the tier first, while the database is
/// locked for this process alone. The file is rewritten into a new one
/// beside it (every page through `sqlcipher_export`), synced, and renamed
/// over the old: a crash leaves one or the other whole. The store must not
/// be open elsewhere (a locked file is refused, "database is locked"). A
/// crash between the two leaves the tier converted and the file not;
/// running the same conversion again finishes it.
pub fn convert_store(
    db: &Path,
    cold: Option<&ColdLocation>,
    from: Option<&StoreKey>,
    to: Option<&StoreKey>,
) -> Result<Converted> {
    // The file encrypted already (by a strata that left the tier out): the
    // tier alone is encrypted now.
    if let (None, Some(k), Some(at)) = (from, to, cold)
        && crate::store::sqlite::cipher::opens_with(db, k)
    {
        let raw = ColdDir::open_raw(at, None)?;
        if raw.blobs.exists_at_all()
            && raw.key_file(KEY_CHECK)?.is_none()
            && !raw.segments()?.is_empty()
        {
            let segments = convert(at, None, to)?;
            return Ok(Converted {
                what: crate::Conversion::Encrypt,
                segments,
            });
        }
    }
    let mut segments = 0;
    let what = crate::store::convert_with(db, from, to, &mut || {
        if let Some(at) = cold {
            segments = convert(at, from, to)?;
        }
        Ok(())
    })?;
    Ok(Converted { what, segments })
}

/// [`convert`], stopping (as a crash would) after `stop` rewrites.
fn convert_until(
    at: &ColdLocation,
    from: Option<&StoreKey>,
    to: Option<&StoreKey>,
    stop: usize,
) -> Result<usize> {
    let raw = ColdDir::open_raw(at, None)?;
    if !raw.blobs.exists_at_all() {
        return Ok(0);
    }
    let dir = raw.dir.as_path();
    let current = raw.key_file(KEY_CHECK)?;
    let next = raw.key_file(KEY_NEXT)?;
    if next.is_some() && next == current {
        // Cut between the copy and the delete of a rename in S3: done.
        raw.blobs.remove(KEY_NEXT)?;
        return Ok(0);
    }
    let unlock_target = |f: &KeyFile| -> Result<Option<SegKey>> {
        let opened = match (f, to) {
            (KeyFile::Plain, None) => return Ok(None),
            (KeyFile::Keyed { .. }, Some(k)) => f.unlock(k, dir).ok(),
            _ => None,
        };
        opened.map(Some).ok_or_else(|| {
            Error::InvalidConfig(format!(
                "the cold tier at {}: a conversion to {} was interrupted; run that one again \
                 to finish it first",
                dir.display(),
                if *f == KeyFile::Plain {
                    "plain"
                } else {
                    "another key"
                }
            ))
        })
    };
    let (target, target_file) = match next {
        Some(f) => (unlock_target(&f)?, f),
        None => {
            // Already what `to` asks for: nothing to do (a run after a
            // crash between this step and the store's).
            match (&current, to) {
                (None, None) => return Ok(0),
                (Some(f), Some(k)) if f.unlock(k, dir).is_ok() => return Ok(0),
                _ => {}
            }
            let (target, f) = match to {
                Some(k) => {
                    let (k, f) = SegKey::fresh(k)?;
                    (Some(k), f)
                }
                None => (None, KeyFile::Plain),
            };
            raw.blobs.write(KEY_NEXT, &f.bytes())?;
            (target, f)
        }
    };
    let source = match (&current, from) {
        (None, _) => None,
        (Some(f), Some(k)) => Some(f.unlock(k, dir)?),
        (Some(_), None) => {
            return Err(Error::InvalidConfig(format!(
                "the cold tier at {} is encrypted: give its key in STRATA_KEY or `[store] \
                 key_file`",
                dir.display()
            )));
        }
    };
    let reader = ColdDir::open_raw(at, source)?;
    let writer = ColdDir::open_raw(at, target)?;
    let mut rewritten = 0;
    for seg in reader.segments()? {
        let name = name_of(&seg.path)?;
        let (head, _) = reader.blobs.read_range(name, 0, (HEADER + 16) as u64)?;
        let salt = read_header(&seg.path, &mut &head[..])?.salt;
        if salt.as_ref() == writer.seal()?.map(SegKey::salt) {
            continue;
        }
        if rewritten == stop {
            return Ok(rewritten);
        }
        let records = reader.read_all(&seg.path)?;
        writer.blobs.write(name, &writer.encode(&records)?)?;
        rewritten += 1;
    }
    match target_file {
        KeyFile::Keyed { .. } => raw.blobs.rename(KEY_NEXT, KEY_CHECK)?,
        KeyFile::Plain => {
            if current.is_some() {
                raw.blobs.remove(KEY_CHECK)?;
            }
            raw.blobs.remove(KEY_NEXT)?;
        }
    }
    Ok(rewritten)
}

impl ColdDir {
    /// Opens (creating) the directory of a plain store.
    pub fn open(dir: impl Into<PathBuf>) -> Result<ColdDir> {
        ColdDir::open_keyed(dir, None)
    }

    /// Opens (creating) the directory of a store opened with `key` (`None`:
    /// a plain store). See [`ColdDir::open_at`].
    pub fn open_keyed(dir: impl Into<PathBuf>, key: Option<&StoreKey>) -> Result<ColdDir> {
        ColdDir::open_at(&ColdLocation::Dir(dir.into()), key)
    }

    /// Opens the tier at `at` for a store opened with `key` (`None`: a
    /// plain store). An encrypted tier needs the key that made it; a new
    /// or empty tier beside an encrypted store becomes encrypted; plain
    /// segments beside an encrypted store, or a conversion left half done,
    /// are errors that say what to run. A directory is made and checked
    /// now; a bucket is not reached until the tier is first used (so a
    /// store whose object store is down still opens, and its warm
    /// memories are served), and these checks run then.
    pub fn open_at(at: &ColdLocation, key: Option<&StoreKey>) -> Result<ColdDir> {
        let mut cold = ColdDir::open_raw(at, None)?;
        cold.seal = OnceLock::new();
        cold.key = key.cloned();
        cold.blobs.create()?;
        if cold.blobs.is_local() {
            cold.seal()?;
        }
        Ok(cold)
    }

    /// The segment key: read (or made, for a new tier beside an encrypted
    /// store) on first use.
    fn seal(&self) -> Result<Option<&SegKey>> {
        if let Some(s) = self.seal.get() {
            return Ok(s.as_ref());
        }
        let s = self.unlock()?;
        let _ = self.seal.set(s);
        Ok(self.seal.get().and_then(Option::as_ref))
    }

    fn unlock(&self) -> Result<Option<SegKey>> {
        if self.blobs.exists(KEY_NEXT)? {
            return Err(Error::InvalidConfig(format!(
                "the cold tier at {}: an encrypt, decrypt or rekey was interrupted; run it again \
                 to finish it",
                self.dir.display()
            )));
        }
        Ok(match (self.key_file(KEY_CHECK)?, &self.key) {
            (None, None) => None,
            (Some(_), None) => {
                return Err(Error::InvalidConfig(format!(
                    "the cold tier at {} is encrypted: give the store's key in the \
                         environment variable STRATA_KEY or a file named by `[store] key_file`",
                    self.dir.display()
                )));
            }
            (Some(f), Some(k)) => Some(f.unlock(k, &self.dir)?),
            (None, Some(k)) => {
                if !self.segments()?.is_empty() {
                    return Err(Error::InvalidConfig(format!(
                        "the cold tier at {} holds plain segments, and the store is \
                             encrypted: run `strata encrypt` again to encrypt them",
                        self.dir.display()
                    )));
                }
                let (seg_key, file) = SegKey::fresh(k)?;
                // Two processes opening a new tier at once: the first
                // key file wins, and the other unlocks it.
                if self.blobs.write_new(KEY_CHECK, &file.bytes())? {
                    Some(seg_key)
                } else {
                    let f = self.key_file(KEY_CHECK)?.ok_or_else(|| {
                        Error::io(
                            format!("reading {}", self.dir.join(KEY_CHECK).display()),
                            std::io::Error::from(std::io::ErrorKind::NotFound),
                        )
                    })?;
                    Some(f.unlock(k, &self.dir)?)
                }
            }
        })
    }

    /// The key file `name` (`key.check`, `key.next`), if there is one.
    fn key_file(&self, name: &str) -> Result<Option<KeyFile>> {
        KeyFile::parse(self.blobs.read_opt(name)?, &self.dir.join(name))
    }

    /// A handle on the files at `at` with `seal`, checking nothing.
    fn open_raw(at: &ColdLocation, seal: Option<SegKey>) -> Result<ColdDir> {
        Ok(ColdDir {
            blobs: Blobs::at(at)?,
            dir: at.root(),
            key: None,
            seal: OnceLock::from(seal),
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// Whether the segments are encrypted.
    pub fn is_encrypted(&self) -> Result<bool> {
        Ok(self.seal()?.is_some())
    }

    /// How errors and stats name the tier: its directory, or
    /// `s3://bucket/prefix`. Segment paths are this joined with their
    /// names.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Segment files (live and pending), by name. The sources of a merge
    /// whose merged segment is live are left out: they hold the same
    /// records, and are being deleted. A segment under both names (a
    /// rename in S3 is a copy, then a delete: a crash between them leaves
    /// both) is its `.cold` one, which every rename there makes first or
    /// starts from (see [`ColdDir::commit`], [`ColdDir::uncommit`]).
    pub fn segments(&self) -> Result<Vec<Segment>> {
        let mut out = Vec::new();
        let mut journals = Vec::new();
        let names = self.blobs.list()?;
        let live = live_stems(&names);
        for name in &names {
            let state = match name.rsplit_once('.') {
                Some((_, "cold")) => SegState::Live,
                Some((stem, "pending")) if !live.contains(stem) => SegState::Pending,
                Some((_, "merge")) => {
                    journals.push(name.as_str());
                    continue;
                }
                _ => continue,
            };
            out.push(Segment {
                path: self.dir.join(name),
                state,
            });
        }
        for j in journals {
            let Some(m) = self.read_journal(j)? else {
                continue;
            };
            if out.iter().any(|s| s.path == m.target) {
                out.retain(|s| !m.sources.contains(&s.path));
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// A merge journal: the merged segment and its sources (`None` when the
    /// journal was removed meanwhile, its merge done).
    fn read_journal(&self, name: &str) -> Result<Option<Merge>> {
        let path = self.dir.join(name);
        let Some(bytes) = self.blobs.read_opt(name)? else {
            return Ok(None);
        };
        let bad = || {
            corrupt(
                &path,
                "a merge journal names its merged segment, then its sources",
            )
        };
        let text = String::from_utf8(bytes).map_err(|_| bad())?;
        let mut lines = text.lines();
        let target = lines
            .next()
            .filter(|l| is_segment_name(l))
            .ok_or_else(bad)?;
        let mut sources = Vec::new();
        for l in lines {
            if !is_segment_name(l) {
                return Err(bad());
            }
            sources.push(self.dir.join(l));
        }
        Ok(Some(Merge {
            target: self.dir.join(target),
            sources,
        }))
    }

    /// Merges live segments into one: their records (checked as every read
    /// is) in a new segment, then the sources deleted, so each record is in
    /// one live segment at every step a reader or a crash can see. A
    /// journal (`merge-<id>.merge`: the new segment's name, then the
    /// sources') is written durably first; readers leave out the sources of
    /// a journal whose merged segment is live, and [`ColdDir::leftovers`]
    /// finishes a merge a crash cut short (deletes the sources when the
    /// merged segment is live, else drops the journal). Returns the merged
    /// segment. The caller holds the `cold` lease.
    pub fn merge(&self, sources: &[PathBuf]) -> Result<PathBuf> {
        let mut records = Vec::new();
        for p in sources {
            records.extend(self.read_all(p)?);
        }
        let id = uuid::Uuid::now_v7().simple();
        let target_name = format!("seg-{id}.cold");
        let mut journal = format!("{target_name}\n");
        for p in sources {
            journal.push_str(name_of(p)?);
            journal.push('\n');
        }
        let jname = format!("merge-{id}.merge");
        self.blobs.write(&jname, journal.as_bytes())?;
        self.blobs.write(&target_name, &self.encode(&records)?)?;
        let target = self.dir.join(&target_name);
        self.finish_merge(&Merge {
            target: target.clone(),
            sources: sources.to_vec(),
        })?;
        self.blobs.remove(&jname)?;
        Ok(target)
    }

    /// Deletes a merge's sources (its merged segment is live).
    fn finish_merge(&self, m: &Merge) -> Result<()> {
        for p in &m.sources {
            self.blobs.remove(name_of(p)?)?;
            self.cache.lock().unwrap().remove(p);
        }
        Ok(())
    }

    /// Records in a live segment, by segment, for choosing what to merge.
    pub fn live_sizes(&self) -> Result<Vec<(PathBuf, usize)>> {
        let mut out = Vec::new();
        for s in self.segments()? {
            if s.state == SegState::Live {
                let n = self.index(&s.path)?.entries.len();
                out.push((s.path, n));
            }
        }
        Ok(out)
    }

    /// Encodes records as one segment file's bytes, sealed when the tier is
    /// encrypted.
    pub fn encode(&self, records: &[ColdRecord]) -> Result<Vec<u8>> {
        Self::encode_with(records, self.seal()?)
    }

    fn encode_with(records: &[ColdRecord], seal: Option<&SegKey>) -> Result<Vec<u8>> {
        let mut data = Vec::new();
        let mut zd = Vec::new();
        let mut idx = SegmentIndex {
            time_range: (i64::MAX, i64::MIN),
            ..SegmentIndex::default()
        };
        for (i, r) in records.iter().enumerate() {
            if i % BLOCK_RECORDS == 0 && i > 0 {
                let part = idx.blocks.len() as u64;
                idx.blocks.push(zd.len() as u64);
                zd.extend(compress_block(&data, seal, part)?);
                data.clear();
            }
            let mut r = r.clone();
            r.memory.embedding = None;
            leave_out_checksum(&mut r.memory);
            for h in &mut r.history {
                h.embedding = None;
                leave_out_checksum(h);
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
            let part = idx.blocks.len() as u64;
            idx.blocks.push(zd.len() as u64);
            zd.extend(compress_block(&data, seal, part)?);
        }
        idx.blocks.push(zd.len() as u64);
        let ijson = serde_json::to_vec(&StoredIndex::of(&idx)).map_err(|e| Error::Corrupt {
            what: "cold segment index".into(),
            source: e.into(),
        })?;
        let zi = compress_block(&ijson, seal, PART_INDEX)?;
        let mut out = Vec::with_capacity(HEADER + 16 + zi.len() + zd.len());
        out.extend_from_slice(if seal.is_some() { MAGIC_SEALED } else { MAGIC });
        out.extend_from_slice(&(zi.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&zi).to_le_bytes());
        out.extend_from_slice(&(zd.len() as u64).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&zd).to_le_bytes());
        if let Some(k) = seal {
            out.extend_from_slice(k.salt());
        }
        out.extend_from_slice(&zi);
        out.extend_from_slice(&zd);
        Ok(out)
    }

    /// Writes a new segment holding `records`, durably, as `.pending` (its
    /// memories are still in the store); returns its path. The caller
    /// deletes them from the store, then calls [`ColdDir::commit`].
    pub fn write_pending(&self, records: &[ColdRecord]) -> Result<PathBuf> {
        let name = format!("seg-{}.pending", uuid::Uuid::now_v7().simple());
        self.blobs.write(&name, &self.encode(records)?)?;
        Ok(self.dir.join(name))
    }

    /// Marks a pending segment live (its memories left the store). In S3
    /// the `.cold` copy is made first: a crash before the `.pending` one is
    /// deleted leaves both, which readers take as live.
    pub fn commit(&self, pending: &Path) -> Result<PathBuf> {
        let live = pending.with_extension("cold");
        self.blobs.rename(name_of(pending)?, name_of(&live)?)?;
        self.cache.lock().unwrap().remove(pending);
        Ok(live)
    }

    /// Marks a live segment pending (some of its memories are about to go
    /// back to the store). In S3 a crash between the copy and the delete
    /// leaves both names, which readers take as live, as it still is: the
    /// store was not yet given any of its memories.
    pub fn uncommit(&self, live: &Path) -> Result<PathBuf> {
        let pending = live.with_extension("pending");
        self.blobs.rename(name_of(live)?, name_of(&pending)?)?;
        self.cache.lock().unwrap().remove(live);
        Ok(pending)
    }

    /// Whether a segment file is there.
    pub fn exists(&self, path: &Path) -> Result<bool> {
        self.blobs.exists(name_of(path)?)
    }

    /// Rewrites a segment in place without the records `drop` selects (the
    /// new file replaces the old whole, so the dropped records' bytes are
    /// in no file afterwards); deletes it when nothing is left. Returns
    /// the records dropped.
    pub fn rewrite_without(
        &self,
        path: &Path,
        drop: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<ColdRecord>> {
        let (dropped, keep): (Vec<ColdRecord>, Vec<ColdRecord>) = self
            .read_all(path)?
            .into_iter()
            .partition(|r| drop(&r.memory.id));
        if dropped.is_empty() {
            return Ok(dropped);
        }
        let name = name_of(path)?;
        if keep.is_empty() {
            self.blobs.remove(name)?;
        } else {
            self.blobs.write(name, &self.encode(&keep)?)?;
        }
        self.cache.lock().unwrap().remove(path);
        Ok(dropped)
    }

    /// A segment's header, checked against the tier: a sealed segment
    /// needs the tier's key, a plain one a plain tier.
    fn read_header(&self, path: &Path, f: &mut impl Read) -> Result<Header> {
        let h = read_header(path, f)?;
        match (&h.salt, self.seal()?) {
            (None, None) => Ok(h),
            (Some(s), Some(k)) if s == k.salt() => Ok(h),
            (Some(_), Some(_)) => Err(Error::InvalidConfig(format!(
                "{} is encrypted under another key than its tier's (an interrupted rekey? run it \
                 again)",
                path.display()
            ))),
            (Some(_), None) => Err(Error::InvalidConfig(format!(
                "{} is encrypted: give the store's key in the environment variable STRATA_KEY or \
                 a file named by `[store] key_file`",
                path.display()
            ))),
            (None, Some(_)) => Err(corrupt(
                path,
                "a plain segment in an encrypted tier (run `strata encrypt` again)",
            )),
        }
    }

    /// A segment's index (cached by file length; in S3, by the length
    /// the last listing saw, and read with two ranged `GET`s).
    pub fn index(&self, path: &Path) -> Result<Arc<SegmentIndex>> {
        let name = name_of(path)?;
        let known = self.blobs.listed_len(name)?;
        if let Some((len, idx)) = self.cache.lock().unwrap().get(path)
            && *len == known
        {
            return Ok(idx.clone());
        }
        let (head, flen) = self.blobs.read_range(name, 0, (HEADER + 16) as u64)?;
        let h = self.read_header(path, &mut &head[..])?;
        if h.file_len() != flen {
            return Err(corrupt(
                path,
                format!(
                    "truncated or extended: {flen} bytes, the header says {}",
                    h.file_len()
                ),
            ));
        }
        let (zi, _) = self
            .blobs
            .read_range(name, h.len() as u64, u64::from(h.index_len))?;
        if zi.len() != h.index_len as usize {
            return Err(corrupt(path, "index unreadable (cut short)"));
        }
        let idx = Arc::new(self.decode_index(path, &zi, h.index_crc)?);
        self.cache
            .lock()
            .unwrap()
            .insert(path.to_path_buf(), (flen, idx.clone()));
        Ok(idx)
    }

    /// A segment's index and compressed data, from one read of the file
    /// (a segment replaced meanwhile by another process's rewrite is read
    /// whole, old or new, never half of each), both checked.
    fn load(&self, path: &Path) -> Result<(Arc<SegmentIndex>, Blocks)> {
        let bytes = self.blobs.read(name_of(path)?)?;
        let flen = bytes.len() as u64;
        let h = self.read_header(path, &mut &bytes[..])?;
        if h.file_len() != flen {
            return Err(corrupt(
                path,
                format!(
                    "truncated or extended: {flen} bytes, the header says {}",
                    h.file_len()
                ),
            ));
        }
        let at = h.len() + h.index_len as usize;
        let zi = &bytes[h.len()..at];
        let zd = &bytes[at..];
        let cached = match self.cache.lock().unwrap().get(path) {
            Some((len, idx)) if *len == flen => Some(idx.clone()),
            _ => None,
        };
        let idx = match cached {
            Some(idx) => idx,
            None => {
                let idx = Arc::new(self.decode_index(path, zi, h.index_crc)?);
                self.cache
                    .lock()
                    .unwrap()
                    .insert(path.to_path_buf(), (flen, idx.clone()));
                idx
            }
        };
        if crc32fast::hash(zd) != h.data_crc {
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

    fn decode_index(&self, path: &Path, zi: &[u8], icrc: u32) -> Result<SegmentIndex> {
        if crc32fast::hash(zi) != icrc {
            return Err(corrupt(path, "index checksum mismatch"));
        }
        let raw = decompress_block(zi, self.seal()?, PART_INDEX)
            .map_err(|e| corrupt(path, format!("index {e}")))?;
        let stored: StoredIndex = serde_json::from_slice(&raw)
            .map_err(|e| corrupt(path, format!("index unreadable ({e})")))?;
        stored.resolve(path)
    }

    /// A segment's bytes opened and decompressed: its index and every
    /// block, for checks that a text is in no file (a compressed file does
    /// not show it to a plain scan).
    pub fn plain_bytes(&self, path: &Path) -> Result<Vec<u8>> {
        let bytes = self.blobs.read(name_of(path)?)?;
        let h = self.read_header(path, &mut &bytes[..])?;
        let at = h.len() + h.index_len as usize;
        let zi = bytes
            .get(h.len()..at)
            .ok_or_else(|| corrupt(path, "truncated"))?;
        let idx = self.decode_index(path, zi, h.index_crc)?;
        let mut out = decompress_block(zi, self.seal()?, PART_INDEX)
            .map_err(|e| corrupt(path, format!("index {e}")))?;
        let zd = &bytes[at..];
        for (b, w) in idx.blocks.windows(2).enumerate() {
            let block = zd
                .get(w[0] as usize..w[1] as usize)
                .ok_or_else(|| corrupt(path, "truncated"))?;
            out.extend(
                decompress_block(block, self.seal()?, b as u64)
                    .map_err(|e| corrupt(path, format!("block {b} {e}")))?,
            );
        }
        Ok(out)
    }

    /// Every record of a segment, in order.
    pub fn read_all(&self, path: &Path) -> Result<Vec<ColdRecord>> {
        let (idx, mut data) = self.load(path)?;
        (0..idx.entries.len())
            .map(|i| self.record(path, &idx, &mut data, i))
            .collect()
    }

    fn record(
        &self,
        path: &Path,
        idx: &SegmentIndex,
        data: &mut Blocks,
        i: usize,
    ) -> Result<ColdRecord> {
        let e = &idx.entries[i];
        let b = i / BLOCK_RECORDS;
        if !data.raw.contains_key(&b) {
            let (from, to) = match (idx.blocks.get(b), idx.blocks.get(b + 1)) {
                (Some(&f), Some(&t)) if f <= t && t as usize <= data.zd.len() => {
                    (f as usize, t as usize)
                }
                _ => return Err(corrupt(path, format!("block {b} lies outside the data"))),
            };
            let raw = decompress_block(&data.zd[from..to], self.seal()?, b as u64)
                .map_err(|e| corrupt(path, format!("block {b} {e}")))?;
            data.raw.insert(b, raw);
        }
        let data = &data.raw[&b];
        let (a, b) = (e.offset as usize, e.offset as usize + e.len as usize);
        let line = data
            .get(a..b)
            .ok_or_else(|| corrupt(path, format!("entry `{}` lies outside the data", e.id)))?;
        let mut r: ColdRecord = serde_json::from_slice(line)
            .map_err(|err| corrupt(path, format!("entry `{}` unreadable ({err})", e.id)))?;
        restore_checksum(&mut r.memory);
        for h in &mut r.history {
            restore_checksum(h);
        }
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
        relisting(|| self.search_once(view, filter, terms))
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
                let r = self.record(&seg.path, &idx, &mut data, i)?;
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
        relisting(|| self.search_top_once(view, terms, limit))
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
                let r = self.record(&seg.path, &fresh, &mut data, entry as usize)?;
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
                    return Ok(Some((self.record(&seg.path, &idx, &mut data, i)?, seg)));
                }
            }
        }
        Ok(None)
    }

    /// Which of `ids` some segment holds (one pass over the indexes).
    pub fn holding(&self, ids: &BTreeSet<&str>) -> Result<Vec<String>> {
        Ok(self
            .holding_scoped(ids)?
            .into_iter()
            .map(|(id, _)| id)
            .collect())
    }

    /// [`ColdDir::holding`], each id with its scope.
    pub fn holding_scoped(&self, ids: &BTreeSet<&str>) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for seg in self.segments()? {
            for e in &self.index(&seg.path)?.entries {
                if ids.contains(e.id.as_str()) {
                    out.push((e.id.clone(), e.scope.clone()));
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

    /// Deletes leftover temp files and the `.pending` twins of live
    /// segments (an S3 rename cut short), finishes or drops merges a crash
    /// cut short; returns the pending segments, which the caller
    /// reconciles with the store.
    pub fn leftovers(&self) -> Result<Vec<PathBuf>> {
        let mut journals = Vec::new();
        let names = self.blobs.list()?;
        let live = live_stems(&names);
        for name in &names {
            match name.rsplit_once('.') {
                Some((_, "tmp")) => self.blobs.remove(name)?,
                Some((stem, "pending")) if live.contains(stem) => self.blobs.remove(name)?,
                Some((_, "merge")) => journals.push(name.as_str()),
                _ => {}
            }
        }
        for j in journals {
            if let Some(m) = self.read_journal(j)?
                && self.blobs.exists(name_of(&m.target)?)?
            {
                self.finish_merge(&m)?;
            }
            self.blobs.remove(j)?;
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
            st.bytes += self.blobs.listed_len(name_of(&seg.path)?)?;
            st.memories += self.index(&seg.path)?.entries.len() as u64;
        }
        Ok(st)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

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

    fn live(c: &ColdDir, rs: &[ColdRecord]) -> PathBuf {
        let p = c.write_pending(rs).unwrap();
        c.commit(&p).unwrap()
    }

    fn ids(c: &ColdDir) -> Vec<String> {
        let mut v: Vec<String> = c
            .segments()
            .unwrap()
            .iter()
            .flat_map(|s| c.read_all(&s.path).unwrap())
            .map(|r| r.memory.id)
            .collect();
        v.sort();
        v
    }

    #[test]
    fn merged_segments_hold_each_record_once() {
        let d = tempfile::tempdir().unwrap();
        let c = ColdDir::open(d.path().join("c")).unwrap();
        let a = live(&c, &[rec("a1", "project/x", "deploys on fridays")]);
        let b = live(
            &c,
            &[
                rec("b1", "project/y", "the cache is redis"),
                rec("b2", "project/y", "logs go to s3"),
            ],
        );
        let m = c.merge(&[a.clone(), b.clone()]).unwrap();
        assert!(!a.exists() && !b.exists());
        assert_eq!(c.segments().unwrap().len(), 1);
        assert_eq!(c.read_all(&m).unwrap().len(), 3);
        assert_eq!(ids(&c), ["a1", "b1", "b2"]);
        assert_eq!(c.stats().unwrap().memories, 3);
        let hits = c
            .search(Some(&view("project")), &Filter::all(), &["redis".into()])
            .unwrap();
        assert_eq!(hits.len(), 1);
    }

    /// A merge a crash cut short: after its merged segment is live, readers
    /// leave the sources out and recovery deletes them; before, recovery
    /// drops the journal and the sources stay.
    #[test]
    fn a_merge_cut_short_is_finished_or_dropped() {
        let d = tempfile::tempdir().unwrap();
        let c = ColdDir::open(d.path().join("c")).unwrap();
        let a = live(&c, &[rec("a1", "project/x", "one")]);
        let b = live(&c, &[rec("b1", "project/x", "two")]);
        // The merged segment live, the sources not yet deleted.
        let both = c
            .encode(&[rec("a1", "project/x", "one"), rec("b1", "project/x", "two")])
            .unwrap();
        let target = c.path().join("seg-00ff.cold");
        fs::write(&target, both).unwrap();
        let name = |p: &Path| p.file_name().unwrap().to_str().unwrap().to_string();
        let journal = c.path().join("merge-00ff.merge");
        fs::write(
            &journal,
            format!("seg-00ff.cold\n{}\n{}\n", name(&a), name(&b)),
        )
        .unwrap();
        assert_eq!(
            ids(&c),
            ["a1", "b1"],
            "no record twice while the sources remain"
        );
        assert!(c.leftovers().unwrap().is_empty());
        assert!(!a.exists() && !b.exists() && !journal.exists() && target.exists());
        assert_eq!(ids(&c), ["a1", "b1"]);
        // Cut before the merged segment was live: only its temp file.
        let e = live(&c, &[rec("e1", "project/x", "three")]);
        fs::write(c.path().join("seg-0aaa.tmp"), b"partial").unwrap();
        let j2 = c.path().join("merge-0aaa.merge");
        fs::write(&j2, format!("seg-0aaa.cold\n{}\n", name(&e))).unwrap();
        assert_eq!(ids(&c), ["a1", "b1", "e1"]);
        c.leftovers().unwrap();
        assert!(e.exists() && !j2.exists() && !c.path().join("seg-0aaa.tmp").exists());
        assert_eq!(ids(&c), ["a1", "b1", "e1"]);
        // A journal naming anything but a segment is reported by name.
        let bad = c.path().join("merge-0bad.merge");
        fs::write(&bad, "seg-0bad.cold\n../../etc/passwd\n").unwrap();
        let err = c.segments().unwrap_err().to_string();
        assert!(err.contains("merge-0bad.merge"), "{err}");
        assert!(c.leftovers().is_err());
        assert!(e.exists(), "nothing deleted on a bad journal");
    }

    /// A checksum that is the content's is left out of the segment and
    /// computed again on read; one that is not stays as written.
    #[test]
    fn checksums_are_derived_on_read_and_odd_ones_kept() {
        let d = tempfile::tempdir().unwrap();
        let c = ColdDir::open(d.path()).unwrap();
        let mut plain = rec("a1", "project/x", "deploys run on fridays");
        plain.memory.payload = Some(serde_json::json!({"ticket": 7}));
        plain.memory.checksum =
            crate::model::checksum(&plain.memory.content, plain.memory.payload.as_ref());
        let mut older = plain.memory.clone();
        older.content = "deploys ran on thursdays".into();
        older.checksum = crate::model::checksum(&older.content, older.payload.as_ref());
        plain.history = vec![older];
        let mut odd = rec("a2", "project/x", "the cache is redis");
        odd.memory.checksum = "0".repeat(64);
        let rs = vec![plain.clone(), odd.clone()];
        let p = c.commit(&c.write_pending(&rs).unwrap()).unwrap();
        assert_eq!(c.read_all(&p).unwrap(), rs);
        let bytes = fs::read(&p).unwrap();
        let text: Vec<u8> = {
            // Every zstd frame of the file, decompressed.
            let mut out = Vec::new();
            let mut rest = &bytes[HEADER..];
            while !rest.is_empty() {
                let n = zstd::zstd_safe::find_frame_compressed_size(rest).unwrap_or(rest.len());
                out.extend(zstd::stream::decode_all(&rest[..n]).unwrap_or_default());
                rest = &rest[n..];
            }
            out
        };
        let text = String::from_utf8_lossy(&text);
        assert!(text.contains("redis"), "the frames were read");
        for m in [&plain.memory, &plain.history[0]] {
            assert!(
                !text.contains(&m.checksum),
                "{} is in the segment",
                m.checksum
            );
        }
        assert!(text.contains(&odd.memory.checksum));
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
        assert_eq!(c.rewrite_without(&p, &|id| id == "a1").unwrap().len(), 1);
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
        assert_eq!(c.rewrite_without(&p, &|id| id == "a2").unwrap().len(), 1);
        assert!(
            c.segments().unwrap().is_empty(),
            "an emptied segment is deleted"
        );
    }

    #[cfg(feature = "encryption")]
    fn key(k: &str) -> StoreKey {
        StoreKey::new(k, "the test").unwrap()
    }

    #[cfg(feature = "encryption")]
    const K1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    #[cfg(feature = "encryption")]
    const K2: &str = "2222222222222222222222222222222222222222222222222222222222222222";

    /// Records in several blocks, so both the index and more than one
    /// block are sealed.
    #[cfg(feature = "encryption")]
    fn many(n: usize) -> Vec<ColdRecord> {
        (0..n)
            .map(|i| {
                rec(
                    &format!("m{i:05}"),
                    "project/x",
                    &format!("note number {i}"),
                )
            })
            .collect()
    }

    #[test]
    #[cfg(feature = "encryption")]
    fn a_sealed_segment_reads_back_and_refuses_changes() {
        let d = tempfile::tempdir().unwrap();
        let c = ColdDir::open_keyed(d.path(), Some(&key(K1))).unwrap();
        assert!(c.is_encrypted().unwrap());
        let rs = many(BLOCK_RECORDS + 5);
        let p = c.commit(&c.write_pending(&rs).unwrap()).unwrap();
        assert_eq!(c.read_all(&p).unwrap(), rs);
        let hits = c.search(None, &Filter::all(), &["number".into()]).unwrap();
        assert_eq!(hits.len(), rs.len());
        let bytes = fs::read(&p).unwrap();
        assert_eq!(&bytes[..8], MAGIC_SEALED);
        // Two sealed blocks and a sealed index, each with its overhead.
        let plain = ColdDir::encode_with(&rs, None).unwrap();
        assert_eq!(bytes.len(), plain.len() + 16 + 3 * seal::OVERHEAD);
        // A byte changed and its checksum fixed: the tag catches it.
        let (ilen, at) = (
            u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
            HEADER + 16,
        );
        let mut changed = bytes.clone();
        changed[at + ilen + 30] ^= 1;
        let crc = crc32fast::hash(&changed[at + ilen..]);
        changed[24..28].copy_from_slice(&crc.to_le_bytes());
        fs::write(&p, &changed).unwrap();
        let c = ColdDir::open_keyed(d.path(), Some(&key(K1))).unwrap();
        let e = c.read_all(&p).unwrap_err().to_string();
        assert!(e.contains("block 0 does not open with the key"), "{e}");
        // The blocks swapped (offsets, lengths and checksum made to fit):
        // each is bound to its place.
        let idx = c.index(&p).unwrap();
        let (b0, b1, end) = (
            idx.blocks[0] as usize,
            idx.blocks[1] as usize,
            idx.blocks[2] as usize,
        );
        let data = &bytes[at + ilen..];
        if b1 - b0 == end - b1 {
            let mut swapped = bytes[..at + ilen].to_vec();
            swapped.extend_from_slice(&data[b1..end]);
            swapped.extend_from_slice(&data[b0..b1]);
            let crc = crc32fast::hash(&swapped[at + ilen..]);
            swapped[24..28].copy_from_slice(&crc.to_le_bytes());
            fs::write(&p, &swapped).unwrap();
            let c = ColdDir::open_keyed(d.path(), Some(&key(K1))).unwrap();
            assert!(c.read_all(&p).is_err());
        }
    }

    #[test]
    #[cfg(feature = "encryption")]
    fn a_sealed_tier_needs_its_key() {
        let d = tempfile::tempdir().unwrap();
        let c = ColdDir::open_keyed(d.path(), Some(&key(K1))).unwrap();
        c.commit(&c.write_pending(&many(3)).unwrap()).unwrap();
        let e = ColdDir::open(d.path()).unwrap_err().to_string();
        assert!(
            e.contains("is encrypted") && e.contains("STRATA_KEY"),
            "{e}"
        );
        let e = ColdDir::open_keyed(d.path(), Some(&key(K2)))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot be read with the key from the test"),
            "{e}"
        );
        // A damaged key file is named.
        fs::write(d.path().join(KEY_CHECK), b"junk").unwrap();
        let e = ColdDir::open_keyed(d.path(), Some(&key(K1)))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("key.check") && e.contains("not a strata cold tier key file"),
            "{e}"
        );
    }

    #[test]
    #[cfg(feature = "encryption")]
    fn an_interrupted_conversion_is_refused_then_resumed() {
        let d = tempfile::tempdir().unwrap();
        let c = ColdDir::open(d.path()).unwrap();
        let mut all = Vec::new();
        for s in 0..3 {
            let rs = many(4 + s);
            all.extend(rs.clone());
            c.commit(&c.write_pending(&rs).unwrap()).unwrap();
        }
        let (k1, k2) = (key(K1), key(K2));
        // Stopped after one of three segments, as a crash would.
        assert_eq!(
            convert_until(&d.path().into(), None, Some(&k1), 1).unwrap(),
            1
        );
        for k in [None, Some(&k1)] {
            let e = ColdDir::open_keyed(d.path(), k).unwrap_err().to_string();
            assert!(
                e.contains("interrupted") && e.contains("run it again"),
                "{e}"
            );
        }
        // Resumed towards another key: refused, nothing changes.
        let e = convert(&d.path().into(), None, Some(&k2))
            .unwrap_err()
            .to_string();
        assert!(e.contains("was interrupted"), "{e}");
        // The same conversion again finishes the other two.
        assert_eq!(convert(&d.path().into(), None, Some(&k1)).unwrap(), 2);
        let c = ColdDir::open_keyed(d.path(), Some(&k1)).unwrap();
        let mut got: Vec<ColdRecord> = c
            .segments()
            .unwrap()
            .iter()
            .flat_map(|s| c.read_all(&s.path).unwrap())
            .collect();
        got.sort_by(|a, b| a.memory.id.cmp(&b.memory.id));
        all.sort_by(|a, b| a.memory.id.cmp(&b.memory.id));
        assert_eq!(got, all);
        // Already there: nothing to do. A rekey stopped half way resumes too.
        assert_eq!(convert(&d.path().into(), None, Some(&k1)).unwrap(), 0);
        assert_eq!(
            convert_until(&d.path().into(), Some(&k1), Some(&k2), 2).unwrap(),
            2
        );
        assert_eq!(convert(&d.path().into(), Some(&k1), Some(&k2)).unwrap(), 1);
        let c = ColdDir::open_keyed(d.path(), Some(&k2)).unwrap();
        assert_eq!(c.stats().unwrap().memories, all.len() as u64);
        // Decrypted, interrupted, resumed: plain, with no key file left.
        assert_eq!(
            convert_until(&d.path().into(), Some(&k2), None, 1).unwrap(),
            1
        );
        assert_eq!(convert(&d.path().into(), Some(&k2), None).unwrap(), 2);
        let c = ColdDir::open(d.path()).unwrap();
        assert_eq!(c.stats().unwrap().memories, all.len() as u64);
        assert!(!d.path().join(KEY_CHECK).exists() && !d.path().join(KEY_NEXT).exists());
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
