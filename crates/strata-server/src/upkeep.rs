//! Upkeep on a timer in `strata serve`: every `upkeep_every_secs` the
//! server runs `Engine::upkeep` (expiry, eviction, learning, and what else
//! upkeep does), under the store's `upkeep` lease, so several servers on
//! one database run it once between them. Each run's figures (or its
//! error) go to standard error; a failed run is tried again at the next
//! tick.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The background thread; stops (and is joined) when dropped.
#[derive(Debug)]
pub struct UpkeepWorker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl UpkeepWorker {
    /// Runs upkeep every `every` (none: never).
    pub fn spawn(engine: Arc<strata::Engine>, every: Option<Duration>) -> UpkeepWorker {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = every.and_then(|every| {
            let st = stop.clone();
            std::thread::Builder::new()
                .name("strata-upkeep".into())
                .spawn(move || {
                    let mut next = Instant::now() + every;
                    while !st.load(Ordering::Relaxed) {
                        // Short naps, so a stopping server is not kept waiting.
                        let now = Instant::now();
                        if now < next {
                            std::thread::sleep((next - now).min(Duration::from_millis(200)));
                            continue;
                        }
                        match engine.upkeep() {
                            Ok(r) if r.skipped => {}
                            Ok(r) => {
                                eprintln!("strata: upkeep: {}", serde_json::json!(r));
                                let moved = r.expired
                                    + r.evicted
                                    + r.demoted
                                    + r.moved_to_cold
                                    + r.promoted_from_cold;
                                let ev =
                                    strata::AuditEvent::new("upkeep", "upkeep").count(moved as u64);
                                if let Err(e) = engine.audit_record(&ev) {
                                    eprintln!(
                                        "strata: recording upkeep in the audit trail failed: {e}"
                                    );
                                }
                            }
                            Err(e) => {
                                eprintln!("strata: upkeep failed (tried again in {every:?}): {e}")
                            }
                        }
                        next = Instant::now() + every;
                    }
                })
                .ok()
        });
        UpkeepWorker { stop, thread }
    }
}

impl Drop for UpkeepWorker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
