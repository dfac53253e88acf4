//! Encryption at rest (feature `encryption`): the database file is a
//! SQLCipher file (AES-256 pages with an HMAC each), keyed from an
//! environment variable or a key file, never from a command-line flag.
//!
//! A key of exactly 64 hexadecimal digits is a raw 256-bit key (no key
//! derivation when a connection opens); anything else is a passphrase that
//! SQLCipher stretches with PBKDF2 (its default: 256,000 rounds of
//! HMAC-SHA512, paid by every connection a process opens).
//!
//! A file is plain when it starts with SQLite's magic string; an encrypted
//! file starts with its salt. So a store can say before reading anything
//! whether a key is missing, and a wrong key is told apart from a damaged
//! file: SQLCipher checks each page's HMAC, and the first page fails.

use std::fmt;
use std::path::{Path, PathBuf};

use rusqlite::Connection;

use crate::Result;
use crate::error::Error;

/// The key of an encrypted store. Its `Debug` shows nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreKey {
    secret: String,
    /// Where it came from, for messages (`STRATA_KEY`, a file's path).
    from: String,
}

impl fmt::Debug for StoreKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreKey(from {})", self.from)
    }
}

impl StoreKey {
    /// A key read from `from` (an environment variable's name, a file):
    /// surrounding whitespace is dropped; an empty key is refused.
    pub fn new(secret: &str, from: impl Into<String>) -> Result<StoreKey> {
        let from = from.into();
        let secret = secret.trim();
        if secret.is_empty() {
            return Err(Error::InvalidConfig(format!("store key: {from} is empty")));
        }
        Ok(StoreKey {
            secret: secret.to_string(),
            from,
        })
    }

    /// The key in the environment variable `var`, if it is set.
    pub fn from_env(var: &str) -> Result<Option<StoreKey>> {
        match std::env::var(var) {
            Ok(v) => StoreKey::new(&v, format!("the environment variable `{var}`")).map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(Error::InvalidConfig(format!(
                "store key: the environment variable `{var}` is not UTF-8"
            ))),
        }
    }

    /// The key in `path` (its whole text).
    pub fn from_file(path: &Path) -> Result<StoreKey> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("reading the key file {}", path.display()), e))?;
        StoreKey::new(&text, format!("the key file {}", path.display()))
    }

    /// Where the key came from.
    pub fn source(&self) -> &str {
        &self.from
    }

    /// Whether the key is a raw 256-bit key (64 hex digits) rather than a
    /// passphrase.
    pub(crate) fn is_raw(&self) -> bool {
        self.secret.len() == 64 && self.secret.bytes().all(|b| b.is_ascii_hexdigit())
    }

    /// The key's bytes, for deriving other keys from it.
    #[cfg_attr(not(feature = "encryption"), allow(dead_code))]
    pub(crate) fn secret_bytes(&self) -> &[u8] {
        self.secret.as_bytes()
    }

    /// What `PRAGMA key` takes: `x'…'` for a raw key, else the passphrase.
    fn pragma_value(&self) -> String {
        if self.is_raw() {
            format!("x'{}'", self.secret)
        } else {
            self.secret.clone()
        }
    }
}

const MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Whether the file at `path` holds data that is not plain SQLite (an
/// encrypted store, or no database at all). A missing or empty file is
/// plain: it becomes whatever the first connection makes it.
pub(super) fn looks_encrypted(path: &Path) -> bool {
    use std::io::Read;
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let mut head = [0u8; 16];
    match f.read_exact(&mut head) {
        Ok(()) => &head != MAGIC,
        Err(_) => false,
    }
}

/// Checks, before a connection opens `path`, that the key (or its absence)
/// fits the file.
pub(super) fn check_file(path: &Path, key: Option<&StoreKey>) -> Result<()> {
    let encrypted = looks_encrypted(path);
    match key {
        None if encrypted => Err(Error::InvalidConfig(format!(
            "{} is encrypted (or is not a SQLite database): give its key in the environment \
             variable STRATA_KEY or a file named by `[store] key_file`",
            path.display()
        ))),
        Some(_) if !cfg!(feature = "encryption") => Err(Error::InvalidConfig(
            "store key: this strata was built without encryption at rest (cargo feature \
             `encryption`)"
                .into(),
        )),
        Some(k) if !encrypted && std::fs::metadata(path).is_ok_and(|m| m.len() > 0) => {
            Err(Error::InvalidConfig(format!(
                "{} is not encrypted, but a key is given ({}): encrypt it first with \
                 `strata encrypt`, or give no key",
                path.display(),
                k.source()
            )))
        }
        _ => Ok(()),
    }
}

/// Keys a new connection; its first statement. A wrong key shows at the
/// first read, which this does, so it is an error here naming the key's
/// source, not a corrupt-looking file later.
pub(super) fn apply(c: &Connection, path: &Path, key: Option<&StoreKey>) -> Result<()> {
    let Some(k) = key else {
        return Ok(());
    };
    // SQLCipher logs a failed page check to stderr itself; the error this
    // returns says it once, for whoever asked.
    let _ = c.execute_batch("PRAGMA cipher_log_level = NONE");
    c.pragma_update(None, "key", k.pragma_value())?;
    match c.query_row("SELECT count(*) FROM sqlite_schema", [], |r| {
        r.get::<_, i64>(0)
    }) {
        Ok(_) => Ok(()),
        Err(rusqlite::Error::SqliteFailure(e, _))
            if e.code == rusqlite::ErrorCode::NotADatabase =>
        {
            Err(wrong_key(path, k))
        }
        Err(e) => Err(e.into()),
    }
}

/// Whether the encrypted file at `path` opens with `key`.
pub(crate) fn opens_with(path: &Path, key: &StoreKey) -> bool {
    looks_encrypted(path)
        && Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .is_ok_and(|c| apply(&c, path, Some(key)).is_ok())
}

fn wrong_key(path: &Path, k: &StoreKey) -> Error {
    Error::InvalidConfig(format!(
        "{} cannot be read with the key from {}: the key is wrong (or the file is damaged)",
        path.display(),
        k.source()
    ))
}

/// What [`crate::convert_store`] does to a store file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conversion {
    /// Plain → encrypted.
    Encrypt,
    /// Encrypted → plain.
    Decrypt,
    /// Encrypted → encrypted under a new key.
    Rekey,
}

/// Rewrites the store at `path` as `to` keys it (`None`: plain), reading
/// it with `from`: every page goes through `sqlcipher_export` into a new
/// file beside it, which is synced and then renamed over the old one, so a
/// crash leaves either the old file or the new one whole. The store must
/// not be open elsewhere: the copy holds an exclusive lock, and a process
/// that has the file open fails this with "database is locked".
///
/// `also` runs once the file is locked for this process alone and before
/// its pages are copied (the cold tier's segments are converted there, so
/// no other process sees them change); an error from it leaves the file as
/// it was.
pub fn convert_with(
    path: &Path,
    from: Option<&StoreKey>,
    to: Option<&StoreKey>,
    also: &mut dyn FnMut() -> Result<()>,
) -> Result<Conversion> {
    if !cfg!(feature = "encryption") {
        return Err(Error::InvalidConfig(
            "encrypt, decrypt and rekey need a strata built with encryption at rest (cargo \
             feature `encryption`)"
                .into(),
        ));
    }
    let what = match (from, to) {
        (None, Some(_)) => Conversion::Encrypt,
        (Some(_), None) => Conversion::Decrypt,
        (Some(a), Some(b)) if a.secret != b.secret => Conversion::Rekey,
        (Some(_), Some(_)) => {
            return Err(Error::InvalidConfig(
                "rekey: the new key is the same as the current one".into(),
            ));
        }
        (None, None) => {
            return Err(Error::InvalidConfig("no key given: nothing to do".into()));
        }
    };
    if std::fs::metadata(path).map_or(true, |m| m.len() == 0) {
        return Err(Error::InvalidConfig(format!(
            "{} holds no store",
            path.display()
        )));
    }
    match (what, looks_encrypted(path)) {
        (Conversion::Encrypt, true) => {
            return Err(Error::InvalidConfig(format!(
                "{} is already encrypted (rekey changes its key)",
                path.display()
            )));
        }
        (Conversion::Decrypt | Conversion::Rekey, false) => {
            return Err(Error::InvalidConfig(format!(
                "{} is not encrypted",
                path.display()
            )));
        }
        _ => {}
    }
    let c = Connection::open(path)?;
    apply(&c, path, from)?;
    // Everything in the write-ahead log goes into the file first; then the
    // file is locked for this connection alone until it closes, after the
    // rename (another process that has the store open makes this fail with
    // "database is locked" instead of writing into a file about to go).
    c.busy_timeout(std::time::Duration::from_secs(5))?;
    c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    c.query_row("PRAGMA locking_mode=EXCLUSIVE", [], |_| Ok(()))?;
    c.execute_batch("BEGIN EXCLUSIVE; COMMIT;")?;
    also()?;
    let tmp = sibling(path, ".convert-tmp");
    let _ = std::fs::remove_file(&tmp);
    let target_key = to.map_or(String::new(), StoreKey::pragma_value);
    c.execute(
        "ATTACH DATABASE ?1 AS target KEY ?2",
        rusqlite::params![tmp.to_string_lossy(), target_key],
    )?;
    let copied = c
        .query_row("SELECT sqlcipher_export('target')", [], |_| Ok(()))
        .and_then(|()| c.execute_batch("DETACH DATABASE target"));
    if let Err(e) = copied {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    let sync = |p: &Path| -> Result<()> {
        std::fs::File::open(p)
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io(format!("syncing {}", p.display()), e))
    };
    sync(&tmp)?;
    std::fs::rename(&tmp, path)
        .map_err(|e| Error::io(format!("replacing {}", path.display()), e))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    // The old file's (empty, checkpointed) log and index belong to the old
    // pages: the next connection makes new ones.
    drop(c);
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(sibling(path, suffix));
    }
    Ok(what)
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}
