//! Pooled connections and their settings.

use super::*;

/// A pooled connection, returned to the pool on drop.
pub(super) struct Conn<'a> {
    pub(super) store: &'a SqliteStore,
    pub(super) conn: Option<Connection>,
}

impl std::ops::Deref for Conn<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn.as_ref().unwrap()
    }
}

impl std::ops::DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.conn.as_mut().unwrap()
    }
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            self.store.give_back(c);
        }
    }
}

/// Idle connections a store keeps for reuse. Connections are opened when
/// that many are busy at once, so the pool grows to the peak concurrency
/// (a server's `max_concurrent`, a caller's threads) up to this bound;
/// one closed and opened again loses its prepared statements and cache.
pub(super) const POOL_MAX_IDLE: usize = 64;

pub(super) fn sync_pragma(d: Durability) -> &'static str {
    match d {
        Durability::Full => "PRAGMA synchronous=FULL",
        Durability::Normal => "PRAGMA synchronous=NORMAL",
    }
}
