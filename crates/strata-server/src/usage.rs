//! What tokens do with the server: each one's rate-limit bucket and the
//! last time it was used.
//!
//! Both are kept by token name, so they survive a reload of the tokens
//! (a reload that keeps a token keeps its bucket). The last-used times are
//! written to a small JSON file beside the configuration ([`state_path`])
//! by [`crate::reload`], where `strata token list` reads them; nothing
//! here touches the disk.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use jiff::Timestamp;

/// Rate-limit buckets and last-used times, by token name.
#[derive(Debug, Default)]
pub struct Usage {
    buckets: Mutex<HashMap<String, Bucket>>,
    last_used: Mutex<LastUsed>,
}

#[derive(Debug, Default)]
struct LastUsed {
    at: BTreeMap<String, Timestamp>,
    /// Changed since [`Usage::take_changed`] last ran.
    changed: bool,
}

/// A token bucket: `per_minute` requests at once, refilled evenly.
#[derive(Debug)]
struct Bucket {
    left: f64,
    at: Instant,
}

impl Usage {
    /// Counts a request of `name` against `per_minute`: `Err` holds how long
    /// until the next request would be allowed.
    pub fn admit(&self, name: &str, per_minute: u32, now: Instant) -> Result<(), Duration> {
        let cap = f64::from(per_minute);
        let per_sec = cap / 60.0;
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let b = buckets
            .entry(name.to_string())
            .or_insert(Bucket { left: cap, at: now });
        let since = now.saturating_duration_since(b.at).as_secs_f64();
        b.left = (b.left + since * per_sec).min(cap);
        b.at = now;
        if b.left >= 1.0 {
            b.left -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.left) / per_sec))
        }
    }

    /// Notes that `name` was used at `at`.
    pub fn used(&self, name: &str, at: Timestamp) {
        let mut l = self.last_used.lock().unwrap_or_else(|e| e.into_inner());
        match l.at.get_mut(name) {
            Some(t) => *t = at,
            None => {
                l.at.insert(name.to_string(), at);
            }
        }
        l.changed = true;
    }

    /// When `name` was last used by this server.
    pub fn last_used(&self, name: &str) -> Option<Timestamp> {
        let l = self.last_used.lock().unwrap_or_else(|e| e.into_inner());
        l.at.get(name).copied()
    }

    /// Every last-used time, if any changed since the last call.
    pub fn take_changed(&self) -> Option<BTreeMap<String, Timestamp>> {
        let mut l = self.last_used.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut l.changed).then(|| l.at.clone())
    }
}

/// The file beside `config` that holds the tokens' last-used times:
/// `strata.toml` → `strata.toml.last-used.json`.
pub fn state_path(config: &Path) -> PathBuf {
    let mut name = config.file_name().unwrap_or_default().to_os_string();
    name.push(".last-used.json");
    config.with_file_name(name)
}

/// The last-used times in `path` (empty when there is no file yet, or it
/// cannot be read: they are a convenience, not a record).
pub fn read_state(path: &Path) -> BTreeMap<String, Timestamp> {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Merges `times` into the file at `path` (the later time of each name
/// wins, so two servers on one configuration keep each other's), replacing
/// it in one rename.
pub fn write_state(path: &Path, times: &BTreeMap<String, Timestamp>) -> std::io::Result<()> {
    let mut all = read_state(path);
    for (name, at) in times {
        let t = all.entry(name.clone()).or_insert(*at);
        *t = (*t).max(*at);
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&all)?)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_rate_then_says_when_to_retry() {
        let u = Usage::default();
        let t0 = Instant::now();
        for _ in 0..3 {
            u.admit("a", 3, t0).unwrap();
        }
        let wait = u.admit("a", 3, t0).unwrap_err();
        assert!(
            wait > Duration::from_secs(19) && wait <= Duration::from_secs(20),
            "{wait:?}"
        );
        // Another token has its own bucket.
        u.admit("b", 3, t0).unwrap();
        // A third of a minute later, one more request fits.
        u.admit("a", 3, t0 + Duration::from_secs(20)).unwrap();
        assert!(u.admit("a", 3, t0 + Duration::from_secs(20)).is_err());
    }

    #[test]
    fn last_used_times_merge_into_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = state_path(&dir.path().join("strata.toml"));
        assert!(path.ends_with("strata.toml.last-used.json"));
        let u = Usage::default();
        assert!(u.take_changed().is_none());
        let t1: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t2: Timestamp = "2026-02-01T00:00:00Z".parse().unwrap();
        u.used("a", t2);
        write_state(&path, &u.take_changed().unwrap()).unwrap();
        assert!(u.take_changed().is_none());
        // An older time from elsewhere does not move `a` back.
        write_state(&path, &BTreeMap::from([("a".into(), t1), ("b".into(), t1)])).unwrap();
        let read = read_state(&path);
        assert_eq!(read["a"], t2);
        assert_eq!(read["b"], t1);
    }
}
