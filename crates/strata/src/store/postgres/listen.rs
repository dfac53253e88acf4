//! Wake-ups for this process's copies of the vectors (`vectors.rs`):
//! `LISTEN strata_vectors` on a connection of its own. A trigger on
//! `vector_models` (schema version 2) notifies with the schema's name on
//! every commit that changes vectors (new ones stamped, a model cleared, a
//! forget's new epoch), so a search whose copy is current skips the round
//! trip that reads the model's counters.
//!
//! A notification arrives just after its commit: for that moment another
//! node's newest vectors may be left out of a search (a search never
//! returns what it should not: every hit is checked against its row).
//! This process's own writes count at once ([`Listener::bump`]). While the
//! connection is down the generation is `None` and every search reads the
//! counters, as without a listener.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;

/// The channel every strata schema notifies on; the payload names the
/// schema.
pub(super) const CHANNEL: &str = "strata_vectors";

/// How often the listening thread looks up from waiting (to stop, or to
/// notice a dead connection).
const TICK: Duration = Duration::from_millis(500);

/// What the listening thread shares with searches.
#[derive(Debug, Default)]
pub(super) struct Listener {
    /// Bumped by every notification for this schema, every (re)connection
    /// and every local write.
    generation: AtomicU64,
    /// Listening now.
    live: AtomicBool,
    /// The thread was started.
    started: AtomicBool,
    /// The store is gone: the thread ends.
    stop: AtomicBool,
}

impl Listener {
    /// The generation, while listening: a copy synced at this generation is
    /// current as long as it stays the same.
    pub(super) fn generation(&self) -> Option<u64> {
        self.live
            .load(Ordering::Acquire)
            .then(|| self.generation.load(Ordering::Acquire))
    }

    /// Something changed here (a write of this process committed).
    pub(super) fn bump(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Starts the listening thread once. `connect` opens a connection
    /// (called again after the connection is lost, a second apart).
    pub(super) fn start(
        self: &Arc<Listener>,
        schema: String,
        connect: impl Fn() -> crate::Result<postgres::Client> + Send + 'static,
    ) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("strata-pg-listen".into())
            .spawn(move || listen(me, &schema, connect));
        if spawned.is_err() {
            // No thread: every search reads the counters.
            self.started.store(false, Ordering::Release);
        }
    }

    /// Ends the thread (it notices within a tick).
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn listen(
    me: std::sync::Weak<Listener>,
    schema: &str,
    connect: impl Fn() -> crate::Result<postgres::Client>,
) {
    loop {
        let Some(l) = me.upgrade() else { return };
        if l.stop.load(Ordering::Acquire) {
            return;
        }
        let client = connect().and_then(|mut c| {
            c.batch_execute(&format!("LISTEN {CHANNEL}"))?;
            Ok(c)
        });
        let Ok(mut client) = client else {
            drop(l);
            std::thread::sleep(Duration::from_secs(1));
            continue;
        };
        // Whatever happened while not listening: every copy syncs again.
        l.bump();
        l.live.store(true, Ordering::Release);
        drop(l);
        let lost = loop {
            let Some(l) = me.upgrade() else { return };
            if l.stop.load(Ordering::Acquire) {
                return;
            }
            if client.is_closed() {
                break l;
            }
            let mut n = client.notifications();
            let mut it = n.timeout_iter(TICK);
            let mut failed = false;
            loop {
                match it.next() {
                    Ok(Some(note)) => {
                        if note.payload() == schema {
                            l.bump();
                        }
                        if l.stop.load(Ordering::Acquire) {
                            return;
                        }
                    }
                    Err(_) => {
                        failed = true;
                        break;
                    }
                    Ok(None) => break,
                }
            }
            if failed {
                break l;
            }
        };
        lost.live.store(false, Ordering::Release);
        drop(lost);
        std::thread::sleep(Duration::from_secs(1));
    }
}
