//! Recall threads: recalls run here, below the event loop's priority.
//!
//! A recall is a fraction of a millisecond of CPU; a remember is less, but
//! an agent waits on it. Run on the event loop, a remember's request waited
//! in the run queue behind every recall that arrived before it (on 2 vCPUs
//! with 32 clients, about fifteen per thread). Here recalls queue for
//! threads of their own, niced below the event loop's, so the event loop's
//! threads (which read requests, run remembers and write answers) get a
//! CPU as soon as they have work.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

type Job = Box<dyn FnOnce() + Send>;

/// Jobs in arrival order, and whether the pool was dropped.
#[derive(Default)]
struct Queue {
    jobs: Mutex<(VecDeque<Job>, bool)>,
    ready: Condvar,
}

/// A fixed set of recall threads; they finish the jobs queued and exit
/// once the pool is dropped.
pub struct Readers {
    queue: Arc<Queue>,
    threads: usize,
    nice: u8,
}

impl std::fmt::Debug for Readers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readers")
            .field("threads", &self.threads)
            .field("nice", &self.nice)
            .finish_non_exhaustive()
    }
}

impl Readers {
    /// `threads` threads named `strata-recall-N`, each `nice` below the
    /// process's priority (Linux; elsewhere they keep it).
    pub fn spawn(threads: usize, nice: u8) -> std::io::Result<Readers> {
        let queue = Arc::new(Queue::default());
        let pool = Readers {
            queue: queue.clone(),
            threads,
            nice,
        };
        for i in 0..threads {
            let q = queue.clone();
            // On an error `pool` drops, and the threads already started exit.
            std::thread::Builder::new()
                .name(format!("strata-recall-{i}"))
                .spawn(move || {
                    lower_priority(nice);
                    work(&q);
                })?;
        }
        Ok(pool)
    }

    /// How many threads, and how far below the process's priority.
    pub fn shape(&self) -> (usize, u8) {
        (self.threads, self.nice)
    }

    /// Runs `f` on a recall thread, after the jobs queued before it; its
    /// answer comes through the receiver, which closes without one if `f`
    /// panicked.
    pub fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> tokio::sync::oneshot::Receiver<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        self.queue
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .push_back(job);
        self.queue.ready.notify_one();
        rx
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        self.queue.jobs.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        self.queue.ready.notify_all();
    }
}

fn work(q: &Queue) {
    loop {
        let job = {
            let mut jobs = q.jobs.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(job) = jobs.0.pop_front() {
                    break job;
                }
                if jobs.1 {
                    return;
                }
                jobs = q.ready.wait(jobs).unwrap_or_else(|e| e.into_inner());
            }
        };
        // A panic drops the answer's sender, which the caller sees.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}

#[cfg(target_os = "linux")]
fn lower_priority(nice: u8) {
    if nice == 0 {
        return;
    }
    let me = rustix::thread::gettid();
    let now = rustix::process::getpriority_process(Some(me)).unwrap_or(0);
    // Raising one's own niceness needs no privilege; if it fails anyway,
    // recalls run at the process's priority, as on the event loop.
    let _ = rustix::process::setpriority_process(Some(me), (now + i32::from(nice)).min(19));
}

#[cfg(not(target_os = "linux"))]
fn lower_priority(_nice: u8) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_jobs_survives_a_panic_and_stops_when_dropped() {
        let pool = Readers::spawn(2, 0).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let answers: Vec<_> = (0..50u64).map(|i| pool.run(move || i * i)).collect();
        let got: Vec<u64> = rt.block_on(async {
            let mut v = Vec::new();
            for a in answers {
                v.push(a.await.unwrap());
            }
            v
        });
        assert_eq!(got, (0..50u64).map(|i| i * i).collect::<Vec<_>>());
        let panicked = pool.run(|| -> u64 { panic!("a recall that panics") });
        assert!(rt.block_on(panicked).is_err());
        // The threads survive it.
        assert_eq!(rt.block_on(pool.run(|| 7)).unwrap(), 7);
        let queue = Arc::downgrade(&pool.queue);
        drop(pool);
        // Each thread holds the queue until it exits.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while queue.strong_count() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "threads still running"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
