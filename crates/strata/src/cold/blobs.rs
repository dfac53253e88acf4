//! Where a cold tier's files live: a directory (the default), or a bucket
//! of an S3-compatible object store (the `s3` feature, [`s3`]).
//!
//! The tier names its files (`seg-<id>.cold`, `merge-<id>.merge`,
//! `key.check`, ...) and this module stores them. Both places give the
//! steps a move needs: a write that is durable when it returns and
//! replaces a file whole (a directory: temp file, fsync, rename, fsync of
//! the directory; S3: one `PUT`, atomic and durable on its `200`), a
//! create that fails when the name exists, a rename, and reads of a
//! prefix of a file (a segment's header and index) without the rest.
//!
//! One difference the tier allows for: a rename in S3 is a copy, then a
//! delete of the source, so a crash between the two leaves both names.
//! The tier only renames a segment between `.pending` and `.cold` and
//! treats the two names of one segment as one (see `ColdDir::segments`).

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::{Error, Result};

#[cfg(feature = "s3")]
pub(crate) mod s3;

/// A cold tier's location, from `[cold] dir` or `[cold.s3]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ColdLocation {
    /// A directory on a local (or mounted) file system.
    Dir(PathBuf),
    /// A bucket (and key prefix) of an S3-compatible object store.
    S3(crate::config::S3Config),
}

impl ColdLocation {
    /// How errors and `stats` name it: the directory, or
    /// `s3://bucket/prefix`.
    pub fn root(&self) -> PathBuf {
        match self {
            ColdLocation::Dir(d) => d.clone(),
            ColdLocation::S3(c) => c.url().into(),
        }
    }
}

impl std::fmt::Display for ColdLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.root().display())
    }
}

impl From<&Path> for ColdLocation {
    fn from(d: &Path) -> ColdLocation {
        ColdLocation::Dir(d.to_path_buf())
    }
}

impl From<PathBuf> for ColdLocation {
    fn from(d: PathBuf) -> ColdLocation {
        ColdLocation::Dir(d)
    }
}

/// The files of one tier.
#[derive(Debug)]
pub(crate) enum Blobs {
    Dir(PathBuf),
    #[cfg(feature = "s3")]
    S3(Box<s3::Bucket>),
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

/// Writes a new file and fsyncs it.
fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = File::create(path).map_err(io(format!("creating {}", path.display())))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(io(format!("writing {}", path.display())))
}

impl Blobs {
    /// The files of `at`; touches nothing (a directory is made by
    /// [`Blobs::create`], a bucket must exist).
    pub(crate) fn at(at: &ColdLocation) -> Result<Blobs> {
        match at {
            ColdLocation::Dir(d) => Ok(Blobs::Dir(d.clone())),
            #[cfg(feature = "s3")]
            ColdLocation::S3(c) => Ok(Blobs::S3(Box::new(s3::Bucket::new(c)?))),
            #[cfg(not(feature = "s3"))]
            ColdLocation::S3(_) => Err(Error::InvalidConfig(
                "cold.s3: strata was built without the `s3` feature".into(),
            )),
        }
    }

    /// Whether files are local (then a rename is atomic and a segment can
    /// be read at its length without a listing).
    pub(crate) fn is_local(&self) -> bool {
        matches!(self, Blobs::Dir(_))
    }

    /// Makes the directory (a bucket: nothing).
    pub(crate) fn create(&self) -> Result<()> {
        match self {
            Blobs::Dir(d) => fs::create_dir_all(d).map_err(io(format!("creating {}", d.display()))),
            #[cfg(feature = "s3")]
            Blobs::S3(_) => Ok(()),
        }
    }

    /// Whether the tier can hold files yet: a directory that exists; a
    /// bucket always.
    pub(crate) fn exists_at_all(&self) -> bool {
        match self {
            Blobs::Dir(d) => d.is_dir(),
            #[cfg(feature = "s3")]
            Blobs::S3(_) => true,
        }
    }

    /// The files' names (in S3, their lengths are kept for
    /// [`Blobs::listed_len`]).
    pub(crate) fn list(&self) -> Result<Vec<String>> {
        match self {
            Blobs::Dir(d) => {
                let mut out = Vec::new();
                for e in fs::read_dir(d).map_err(io(format!("reading {}", d.display())))? {
                    let e = e.map_err(io(format!("reading {}", d.display())))?;
                    if e.file_type().is_ok_and(|t| t.is_file())
                        && let Some(name) = e.file_name().to_str()
                    {
                        out.push(name.to_string());
                    }
                }
                Ok(out)
            }
            #[cfg(feature = "s3")]
            Blobs::S3(b) => b.list(),
        }
    }

    /// A file's bytes; an `Io` error of kind `NotFound` when there is none.
    pub(crate) fn read(&self, name: &str) -> Result<Vec<u8>> {
        match self {
            Blobs::Dir(d) => {
                let p = d.join(name);
                fs::read(&p).map_err(io(format!("reading {}", p.display())))
            }
            #[cfg(feature = "s3")]
            Blobs::S3(b) => b.get(name, None).map(|(bytes, _)| bytes),
        }
    }

    /// A file's bytes, `None` when there is none.
    pub(crate) fn read_opt(&self, name: &str) -> Result<Option<Vec<u8>>> {
        match self.read(name) {
            Ok(b) => Ok(Some(b)),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Up to `len` bytes of a file from `offset`, and the file's length.
    pub(crate) fn read_range(&self, name: &str, offset: u64, len: u64) -> Result<(Vec<u8>, u64)> {
        match self {
            Blobs::Dir(d) => {
                let p = d.join(name);
                let mut f = File::open(&p).map_err(io(format!("opening {}", p.display())))?;
                let flen = f
                    .metadata()
                    .map_err(io(format!("reading {}", p.display())))?
                    .len();
                let mut out = Vec::new();
                f.seek(SeekFrom::Start(offset))
                    .and_then(|_| f.take(len).read_to_end(&mut out))
                    .map_err(io(format!("reading {}", p.display())))?;
                Ok((out, flen))
            }
            #[cfg(feature = "s3")]
            Blobs::S3(b) => b.get(name, Some((offset, len))),
        }
    }

    /// A file's length; an `Io` error of kind `NotFound` when there is
    /// none.
    pub(crate) fn len(&self, name: &str) -> Result<u64> {
        match self {
            Blobs::Dir(d) => {
                let p = d.join(name);
                Ok(fs::metadata(&p)
                    .map_err(io(format!("reading {}", p.display())))?
                    .len())
            }
            #[cfg(feature = "s3")]
            Blobs::S3(b) => b.len(name),
        }
    }

    /// A file's length as the last listing saw it, where that is cheaper
    /// than asking (S3); else as [`Blobs::len`].
    pub(crate) fn listed_len(&self, name: &str) -> Result<u64> {
        match self {
            #[cfg(feature = "s3")]
            Blobs::S3(b) => b.listed_len(name),
            _ => self.len(name),
        }
    }

    /// Whether the file is there.
    pub(crate) fn exists(&self, name: &str) -> Result<bool> {
        match self.len(name) {
            Ok(_) => Ok(true),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Writes a file whole, durably, replacing any of that name.
    pub(crate) fn write(&self, name: &str, bytes: &[u8]) -> Result<()> {
        match self {
            Blobs::Dir(d) => {
                let dest = d.join(name);
                let tmp = dest.with_extension("tmp");
                write_synced(&tmp, bytes)?;
                fs::rename(&tmp, &dest).map_err(io(format!("renaming {}", tmp.display())))?;
                sync_dir(d)
            }
            #[cfg(feature = "s3")]
            Blobs::S3(b) => b.put(name, bytes, false).map(|_| ()),
        }
    }

    /// Writes a file whole, durably, unless one of that name exists
    /// (`false`; two writers at once: one wins, the other sees `false`).
    pub(crate) fn write_new(&self, name: &str, bytes: &[u8]) -> Result<bool> {
        match self {
            Blobs::Dir(d) => {
                // A hard link fails where the name exists.
                let dest = d.join(name);
                let tmp = d.join(format!("{name}.{}.tmp", std::process::id()));
                write_synced(&tmp, bytes)?;
                let linked = fs::hard_link(&tmp, &dest);
                let _ = fs::remove_file(&tmp);
                match linked {
                    Ok(()) => sync_dir(d).map(|_| true),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
                    Err(e) => Err(Error::io(format!("creating {}", dest.display()), e)),
                }
            }
            #[cfg(feature = "s3")]
            Blobs::S3(b) => b.put(name, bytes, true),
        }
    }

    /// Renames a file (in S3: copies it, then deletes the source).
    pub(crate) fn rename(&self, from: &str, to: &str) -> Result<()> {
        match self {
            Blobs::Dir(d) => {
                let p = d.join(from);
                fs::rename(&p, d.join(to)).map_err(io(format!("renaming {}", p.display())))?;
                sync_dir(d)
            }
            #[cfg(feature = "s3")]
            Blobs::S3(b) => {
                b.copy(from, to)?;
                b.delete(from)
            }
        }
    }

    /// Removes a file; none of that name is not an error.
    pub(crate) fn remove(&self, name: &str) -> Result<()> {
        match self {
            Blobs::Dir(d) => {
                let p = d.join(name);
                match fs::remove_file(&p) {
                    Ok(()) => sync_dir(d),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(Error::io(format!("removing {}", p.display()), e)),
                }
            }
            #[cfg(feature = "s3")]
            Blobs::S3(b) => b.delete(name),
        }
    }
}
