//! Prometheus metrics: requests and latency per route, and the store's size
//! and memories per tier at scrape time.
//!
//! Text exposition format 0.0.4
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/>). Routes
//! are the router's templates (`/v1/memories/{id}`), never raw paths, and
//! methods other than the standard ones are `other`, so the label set
//! stays bounded.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Debug, Default)]
struct Route {
    by_status: BTreeMap<u16, u64>,
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// Counters and histograms, per route and method.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Route, then method: a request after the first of its kind finds its
    /// counters by `&str`, allocating nothing.
    routes: Mutex<BTreeMap<String, BTreeMap<String, Route>>>,
    /// Remembers and updates answered on the event loop's thread, and on
    /// the blocking pool (another write was in the way); of the first,
    /// those that waited out another writer first.
    writes: [AtomicU64; 2],
    waited: AtomicU64,
    /// Recalls run on the event loop's thread, on a recall thread, on the
    /// blocking pool.
    recalls: [AtomicU64; 3],
    /// Recalls timed by [`Metrics::time_recall`], and the CPU time their
    /// threads spent in them, in nanoseconds.
    recalls_timed: AtomicU64,
    recall_cpu_ns: AtomicU64,
}

/// Where a recall ran ([`Metrics::record_recall`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RanOn {
    /// The event loop's thread that read the request.
    EventLoop,
    /// A recall thread (`[server] recall_threads`).
    RecallThread,
    /// The blocking pool (a recall that may wait).
    Pool,
}

impl Metrics {
    /// Records one finished request.
    pub fn record(&self, method: &str, route: &str, status: u16, took: Duration) {
        let secs = took.as_secs_f64();
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        let r = slot(slot(&mut routes, route), method);
        *r.by_status.entry(status).or_default() += 1;
        r.count += 1;
        r.sum += secs;
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            r.buckets[i] += 1;
        }
    }

    /// Records one remember or update: answered on the event loop's
    /// thread (`inline`), after waiting out another writer's turn
    /// (`waited`) or not, or on the blocking pool.
    pub fn record_write(&self, inline: bool, waited: bool) {
        self.writes[usize::from(!inline)].fetch_add(1, Ordering::Relaxed);
        if inline && waited {
            self.waited.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records where one recall ran.
    pub fn record_recall(&self, on: RanOn) {
        self.recalls[on as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Runs `recall` (a recall's work on the thread that runs it: the
    /// request's fields read into a query, the engine's recall, the
    /// grant's last check) and adds the CPU time that thread spent in it
    /// to [`Metrics::recall_cpu`]. What a recall over HTTP costs beyond
    /// this surrounds it: reading the request, writing the answer.
    pub fn time_recall<T>(&self, recall: impl FnOnce() -> T) -> T {
        let before = thread_cpu();
        let out = recall();
        if let Some((b, a)) = before.zip(thread_cpu()) {
            let ns = u64::try_from(a.saturating_sub(b).as_nanos()).unwrap_or(u64::MAX);
            self.recall_cpu_ns.fetch_add(ns, Ordering::Relaxed);
            self.recalls_timed.fetch_add(1, Ordering::Relaxed);
        }
        out
    }

    /// Recalls timed by [`Metrics::time_recall`] so far and the CPU time
    /// they took (none where the thread's CPU clock cannot be read).
    pub fn recall_cpu(&self) -> (u64, Duration) {
        (
            self.recalls_timed.load(Ordering::Relaxed),
            Duration::from_nanos(self.recall_cpu_ns.load(Ordering::Relaxed)),
        )
    }

    /// Recalls so far: on the event loop's thread, on the recall threads,
    /// on the blocking pool.
    pub fn recalls(&self) -> (u64, u64, u64) {
        let n = |i: usize| self.recalls[i].load(Ordering::Relaxed);
        (n(0), n(1), n(2))
    }

    /// Remembers and updates so far: on the event loop's thread, on the
    /// blocking pool.
    pub fn writes(&self) -> (u64, u64) {
        (
            self.writes[0].load(Ordering::Relaxed),
            self.writes[1].load(Ordering::Relaxed),
        )
    }

    /// Of the writes on the event loop's thread, those that first waited
    /// out another writer (without holding the thread).
    pub fn writes_waited(&self) -> u64 {
        self.waited.load(Ordering::Relaxed)
    }

    /// The exposition text; `stats` adds the store's figures.
    pub fn render(&self, stats: Option<&strata::StoreStats>) -> String {
        let mut out = String::new();
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        out.push_str("# HELP strata_http_requests_total HTTP requests by route and status.\n");
        out.push_str("# TYPE strata_http_requests_total counter\n");
        for (route, method, r) in flat(&routes) {
            for (status, n) in &r.by_status {
                let _ = writeln!(
                    out,
                    "strata_http_requests_total{{method=\"{method}\",route=\"{}\",status=\"{status}\"}} {n}",
                    escape(route)
                );
            }
        }
        out.push_str(
            "# HELP strata_http_request_duration_seconds Time from request to response, by route.\n",
        );
        out.push_str("# TYPE strata_http_request_duration_seconds histogram\n");
        for (route, method, r) in flat(&routes) {
            let labels = format!("method=\"{method}\",route=\"{}\"", escape(route));
            let mut cum = 0;
            for (b, n) in BUCKETS.iter().zip(r.buckets) {
                cum += n;
                let _ = writeln!(
                    out,
                    "strata_http_request_duration_seconds_bucket{{{labels},le=\"{b}\"}} {cum}"
                );
            }
            let _ = writeln!(
                out,
                "strata_http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                r.count
            );
            let _ = writeln!(
                out,
                "strata_http_request_duration_seconds_sum{{{labels}}} {}",
                r.sum
            );
            let _ = writeln!(
                out,
                "strata_http_request_duration_seconds_count{{{labels}}} {}",
                r.count
            );
        }
        drop(routes);
        out.push_str(
            "# HELP strata_writes_total Remembers and updates, by the thread that wrote them: the event loop's, or the blocking pool's when another write was in the way.\n",
        );
        out.push_str("# TYPE strata_writes_total counter\n");
        let (inline, pooled) = self.writes();
        let _ = writeln!(out, "strata_writes_total{{thread=\"event_loop\"}} {inline}");
        let _ = writeln!(out, "strata_writes_total{{thread=\"pool\"}} {pooled}");
        out.push_str(
            "# HELP strata_recalls_total Recalls, by the thread that ran them: the event loop's, a recall thread (while writes arrive), or the blocking pool's (a recall that may wait).\n",
        );
        out.push_str("# TYPE strata_recalls_total counter\n");
        let (inline, threads, pooled) = self.recalls();
        let _ = writeln!(
            out,
            "strata_recalls_total{{thread=\"event_loop\"}} {inline}"
        );
        let _ = writeln!(out, "strata_recalls_total{{thread=\"recall\"}} {threads}");
        let _ = writeln!(out, "strata_recalls_total{{thread=\"pool\"}} {pooled}");
        out.push_str(
            "# HELP strata_recall_cpu_seconds CPU time of the threads that ran the API's and MCP's recalls, in the recall (the query read from the request, the engine's recall, the grant's check): what a recall costs the server before its answer is written.\n",
        );
        out.push_str("# TYPE strata_recall_cpu_seconds summary\n");
        let (timed, cpu) = self.recall_cpu();
        let _ = writeln!(out, "strata_recall_cpu_seconds_sum {}", cpu.as_secs_f64());
        let _ = writeln!(out, "strata_recall_cpu_seconds_count {timed}");
        out.push_str(
            "# HELP strata_writes_waited_total Writes on the event loop that first waited out another writer of this process (its commit, say) without holding the thread.\n",
        );
        out.push_str("# TYPE strata_writes_waited_total counter\n");
        let _ = writeln!(out, "strata_writes_waited_total {}", self.writes_waited());
        out.push_str(
            "# HELP strata_writes_refused_total Writes refused on the event loop, by why: another writer of this process at it (waited out, or handed to the blocking pool after 100 ms), another connection or process holding the write lock, an eviction ahead (both handed to the pool).\n",
        );
        out.push_str("# TYPE strata_writes_refused_total counter\n");
        for (why, n) in ["writer", "locked", "bound"].iter().zip(strata::refusals()) {
            let _ = writeln!(out, "strata_writes_refused_total{{reason=\"{why}\"}} {n}");
        }
        if let Some(s) = stats {
            let gauge = |out: &mut String, name: &str, help: &str, v: u64| {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
            };
            gauge(
                &mut out,
                "strata_store_file_bytes",
                "Size of the database file.",
                s.file_bytes,
            );
            gauge(
                &mut out,
                "strata_store_memories",
                "Active memories.",
                s.memories,
            );
            gauge(
                &mut out,
                "strata_store_archived",
                "Archived memories.",
                s.archived,
            );
            gauge(
                &mut out,
                "strata_store_tokens",
                "Tokens of active memories.",
                s.tokens,
            );
            out.push_str(
                "# HELP strata_store_memories_by_tier Active memories per lifetime tier.\n",
            );
            out.push_str("# TYPE strata_store_memories_by_tier gauge\n");
            for (tier, n) in &s.by_tier {
                let _ = writeln!(
                    out,
                    "strata_store_memories_by_tier{{tier=\"{}\"}} {n}",
                    escape(tier)
                );
            }
        }
        out
    }
}

/// A method's label: a client may send any token as a method, and each
/// would otherwise add a series to every scrape for good.
pub(crate) fn method_label(m: &axum::http::Method) -> &'static str {
    use axum::http::Method as M;
    match *m {
        M::GET => "GET",
        M::HEAD => "HEAD",
        M::POST => "POST",
        M::PUT => "PUT",
        M::DELETE => "DELETE",
        M::PATCH => "PATCH",
        M::OPTIONS => "OPTIONS",
        M::CONNECT => "CONNECT",
        M::TRACE => "TRACE",
        _ => "other",
    }
}

/// CPU time the calling thread has used (Linux; `None` elsewhere).
#[cfg(target_os = "linux")]
fn thread_cpu() -> Option<Duration> {
    use rustix::time::{ClockId, clock_gettime};
    let t = clock_gettime(ClockId::ThreadCPUTime);
    let nanos = u32::try_from(t.tv_nsec).ok()?;
    Some(Duration::new(u64::try_from(t.tv_sec).ok()?, nanos))
}

#[cfg(not(target_os = "linux"))]
fn thread_cpu() -> Option<Duration> {
    None
}

/// The value under `key`, the default inserted the first time; later calls
/// find it by `&str`, allocating no key.
fn slot<'m, V: Default>(map: &'m mut BTreeMap<String, V>, key: &str) -> &'m mut V {
    if !map.contains_key(key) {
        map.insert(key.to_string(), V::default());
    }
    map.get_mut(key).expect("inserted above")
}

/// Each (route, method) and its counters, in order.
fn flat(
    routes: &BTreeMap<String, BTreeMap<String, Route>>,
) -> impl Iterator<Item = (&str, &str, &Route)> {
    routes.iter().flat_map(|(route, methods)| {
        methods
            .iter()
            .map(move |(m, r)| (route.as_str(), m.as_str(), r))
    })
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative() {
        let m = Metrics::default();
        m.record("POST", "/v1/recall", 200, Duration::from_micros(700));
        m.record("POST", "/v1/recall", 200, Duration::from_millis(30));
        m.record("POST", "/v1/recall", 403, Duration::from_micros(100));
        let t = m.render(None);
        assert!(
            t.contains(
                "strata_http_requests_total{method=\"POST\",route=\"/v1/recall\",status=\"200\"} 2"
            ),
            "{t}"
        );
        assert!(t.contains("le=\"0.0005\"} 1"), "{t}");
        assert!(t.contains("le=\"0.001\"} 2"), "{t}");
        assert!(t.contains("le=\"0.05\"} 3"), "{t}");
        assert!(t.contains("le=\"+Inf\"} 3"), "{t}");
    }

    /// A timed recall adds its thread's CPU time, not the time it waited.
    #[test]
    fn a_recall_is_timed_by_its_threads_cpu() {
        let m = Metrics::default();
        assert_eq!(m.recall_cpu(), (0, Duration::ZERO));
        let spun = m.time_recall(|| {
            let start = std::time::Instant::now();
            let mut x = 0u64;
            while start.elapsed() < Duration::from_millis(20) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            x
        });
        assert!(spun > 0);
        let (_, spinning) = m.recall_cpu();
        m.time_recall(|| std::thread::sleep(Duration::from_millis(200)));
        let (n, cpu) = m.recall_cpu();
        if cfg!(target_os = "linux") {
            assert_eq!(n, 2);
            // Spinning counts; 200 ms asleep does not.
            assert!(spinning > Duration::ZERO, "{spinning:?}");
            assert!(cpu - spinning < Duration::from_millis(100), "{cpu:?}");
            let t = m.render(None);
            assert!(t.contains("strata_recall_cpu_seconds_count 2"), "{t}");
        } else {
            assert_eq!((n, cpu), (0, Duration::ZERO));
        }
    }
}
