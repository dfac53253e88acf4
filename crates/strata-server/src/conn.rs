//! Connections: accepting them under `max_connections` and
//! `max_connections_per_peer` ([`Peers`]), and the deadlines hyper does not
//! keep by itself.
//!
//! hyper's own header timeout starts when it begins waiting for a request,
//! so it cannot tell a keep-alive connection between requests (allowed
//! `idle_timeout_secs`) from a client trickling a request's head (allowed
//! `header_timeout_secs`). Each connection's [`Clock`] knows which phase it
//! is in: the service marks a request begun, the answer's body marks it
//! done (when hyper drops it, having written it), and [`Guarded`], the
//! socket hyper reads, fails its read once the phase's deadline passes,
//! which makes hyper close the connection. A new connection has the header
//! deadline from its accept until its first request (a client that
//! connects and says nothing holds a slot for `header_timeout_secs`, not
//! `idle_timeout_secs`). The body's own deadline
//! (`body_timeout_secs`, a 408) is kept where the body is read, in
//! `http::guard`.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use axum::body::Body;
use http_body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use crate::config::Limits;

/// Where a connection is between requests.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Waiting for a request: since the connection opened or the last
    /// answer was written; `first_byte` once the next request has begun.
    Waiting {
        since: Instant,
        first_byte: Option<Instant>,
    },
    /// A request's head is in and it is being answered.
    Busy,
}

/// One connection's phase, shared by its socket and its service.
#[derive(Debug)]
pub(crate) struct Clock {
    state: Mutex<State>,
    header: Duration,
    idle: Duration,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    /// A read that found nothing while busy: it armed no timer, so it is
    /// woken to arm one when the answer is done.
    parked: Option<Waker>,
    /// Whether a request's head has come in on this connection: until
    /// then waiting is under the header deadline, from the accept.
    served: bool,
}

impl Clock {
    pub(crate) fn new(limits: &Limits) -> Arc<Clock> {
        Arc::new(Clock {
            state: Mutex::new(State {
                phase: Phase::Waiting {
                    since: Instant::now(),
                    first_byte: None,
                },
                parked: None,
                served: false,
            }),
            header: limits.header_timeout(),
            idle: limits.idle_timeout(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// hyper has parsed a request's head and calls the service.
    pub(crate) fn busy(&self) {
        let mut s = self.lock();
        s.phase = Phase::Busy;
        s.served = true;
    }

    /// The answer is written: the connection waits for the next request.
    fn done(&self) {
        let parked = {
            let mut s = self.lock();
            s.phase = Phase::Waiting {
                since: Instant::now(),
                first_byte: None,
            };
            s.parked.take()
        };
        if let Some(w) = parked {
            w.wake();
        }
    }

    fn bytes_in(&self) {
        if let Phase::Waiting {
            first_byte: f @ None,
            ..
        } = &mut self.lock().phase
        {
            *f = Some(Instant::now());
        }
    }

    /// When a read that finds nothing must give up, and why.
    fn read_deadline(&self, cx: &Context<'_>) -> Option<(Instant, &'static str)> {
        let mut s = self.lock();
        match s.phase {
            Phase::Waiting {
                first_byte: Some(t),
                ..
            } => Some((
                t + self.header,
                "request head not received within server.limits.header_timeout_secs",
            )),
            Phase::Waiting { since, .. } if !s.served => Some((
                since + self.header,
                "no request within server.limits.header_timeout_secs of connecting",
            )),
            Phase::Waiting { since, .. } => Some((
                since + self.idle,
                "connection idle past server.limits.idle_timeout_secs",
            )),
            Phase::Busy => {
                if !s.parked.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    s.parked = Some(cx.waker().clone());
                }
                None
            }
        }
    }
}

/// The socket hyper reads and writes, with the [`Clock`]'s deadlines.
pub(crate) struct Guarded {
    tcp: TcpStream,
    clock: Arc<Clock>,
    read_timer: Pin<Box<Sleep>>,
    write_timer: Pin<Box<Sleep>>,
    write_stalled: bool,
}

impl Guarded {
    pub(crate) fn new(tcp: TcpStream, clock: Arc<Clock>) -> Guarded {
        let far = Instant::now() + Duration::from_secs(3600);
        Guarded {
            tcp,
            clock,
            read_timer: Box::pin(tokio::time::sleep_until(far)),
            write_timer: Box::pin(tokio::time::sleep_until(far)),
            write_stalled: false,
        }
    }

    /// A write found the socket full: the client has read nothing for
    /// `idle` since the first such write, the connection is given up.
    fn stalled(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        if !self.write_stalled {
            self.write_stalled = true;
            let deadline = Instant::now() + self.clock.idle;
            self.write_timer.as_mut().reset(deadline);
        }
        ready!(self.write_timer.as_mut().poll(cx));
        Poll::Ready(io::Error::new(
            io::ErrorKind::TimedOut,
            "client read nothing within server.limits.idle_timeout_secs",
        ))
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.tcp).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.clock.bytes_in();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let Some((deadline, why)) = this.clock.read_deadline(cx) else {
                    return Poll::Pending;
                };
                if this.read_timer.deadline() != deadline {
                    this.read_timer.as_mut().reset(deadline);
                }
                ready!(this.read_timer.as_mut().poll(cx));
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, why)))
            }
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.tcp).poll_write(cx, data) {
            Poll::Ready(r) => {
                this.write_stalled = false;
                Poll::Ready(r)
            }
            Poll::Pending => this.stalled(cx).map(Err),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => {
                this.write_stalled = false;
                Poll::Ready(r)
            }
            Poll::Pending => this.stalled(cx).map(Err),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// An answer's body that tells the [`Clock`] when hyper is done with it.
pub(crate) struct Tracked {
    pub(crate) body: Body,
    pub(crate) clock: Arc<Clock>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.clock.done();
    }
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Who holds how many connections, for `max_connections_per_peer` and the
/// reserve of `max_connections` ([`crate::config::Limits::connection_reserve`]).
#[derive(Debug, Default)]
pub(crate) struct Peers {
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection's place in [`Peers`], given back on drop.
#[derive(Debug)]
pub(crate) struct Admitted {
    peers: Arc<Peers>,
    peer: IpAddr,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut g = self.peers.lock();
        if let Some(n) = g.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                g.remove(&self.peer);
            }
        }
    }
}

/// The peer a connection counts against: an IPv4 address (also when it
/// comes mapped into IPv6), or an IPv6 address's /64, since one host is
/// usually given a whole /64 and could otherwise take a new address for
/// every connection.
pub(crate) fn peer_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(bits))
        }
        v4 => v4,
    }
}

impl Peers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a connection of `peer` when it holds fewer than
    /// `max_connections_per_peer`, and, when only the reserve is left
    /// (`free` slots after this one), only if it holds none; else why not.
    pub(crate) fn admit(
        self: &Arc<Self>,
        peer: IpAddr,
        limits: &Limits,
        free: usize,
    ) -> Result<Admitted, String> {
        let mut g = self.lock();
        let held = g.get(&peer).copied().unwrap_or(0);
        if held >= limits.max_connections_per_peer {
            return Err(format!(
                "this address holds {held} connections, the most one peer may hold \
                 (server.limits.max_connections_per_peer); reuse them or close some"
            ));
        }
        let reserve = limits.connection_reserve();
        if held > 0 && free < reserve {
            return Err(format!(
                "the server is near server.limits.max_connections ({}); its last {reserve} \
                 are kept for clients that hold none, and this address holds {held}",
                limits.max_connections
            ));
        }
        *g.entry(peer).or_default() += 1;
        Ok(Admitted {
            peers: self.clone(),
            peer,
        })
    }
}

/// Answers a connection that was not admitted: a 503 saying why, written
/// if the socket takes it at once (a new socket's buffer is empty), then
/// closed. It never waits for the client.
pub(crate) fn refuse(tcp: TcpStream, why: &str) {
    let body = serde_json::json!({
        "error": {"code": "too_many_connections", "message": why}
    })
    .to_string();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tcp.try_write(answer.as_bytes());
    // What the client sent already is read off, so that the close is a
    // FIN after the answer, not a reset that may discard it.
    let mut sink = [0u8; 4096];
    while matches!(tcp.try_read(&mut sink), Ok(n) if n > 0) {}
}
