//! Accepting connections and serving HTTP/1.1 on them, with bounds a
//! public deployment needs (axum's own `serve` has none).
//!
//! - **Connection cap**: at most `max_connections` connections are served
//!   at once; one more is answered `503` with code `UNAVAILABLE` and
//!   `Retry-After`, and closed.
//! - **Header timeout**: a request's headers must arrive within
//!   `header_timeout`, counted from its first byte (for a new connection,
//!   from its accept).
//! - **Idle timeout**: a kept-alive connection with no request under way
//!   closes after `idle_timeout` without a byte.
//!   While a request runs (its body, its handler, its answer) neither
//!   applies: the body has its own deadline (`brainstem_api::edge`), and a
//!   WebSocket, once upgraded, lives by its own protocol.
//! - **Lingering close**: when the server ends a plain HTTP connection
//!   first (an answer with `Connection: close`, such as a refused oversize
//!   body), it shuts its sending side and reads and drops what the client
//!   still sends, until the client closes, [`LINGER_QUIET`] passes without
//!   a byte, or [`LINGER_MOST`] passes in all. Closing a socket with unread
//!   bytes resets the connection, and a client still sending its body then
//!   gets a broken pipe instead of the answer (nginx's `lingering_close`).
//!   A connection that timed out (`408` included), or a WebSocket, closes
//!   at once.
//! - **Shutdown**: when `shutdown` resolves no connection is accepted any
//!   more, kept-alive connections close once their request is answered, and
//!   open WebSockets are told to go (`Departure`); [`serve`] returns when all
//!   of them are done. The caller bounds that wait by its grace period.

use std::{
    future::Future,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    Router,
    body::Body,
    extract::{ConnectInfo, Request},
    http::StatusCode,
};
use brainstem_api::{edge::Departure, error};
use futures_util::task::AtomicWaker;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{Semaphore, mpsc, watch},
    time::{Instant, Sleep},
};
use tower::ServiceExt;

/// A lingering close ends when the client sends nothing for this long.
pub const LINGER_QUIET: Duration = Duration::from_secs(2);
/// A lingering close ends after this long in all.
pub const LINGER_MOST: Duration = Duration::from_secs(30);
/// Reads one lingering poll makes before letting other tasks run.
const LINGER_READS_PER_POLL: usize = 16;

/// Bounds on connections.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
}

/// Serve `router` on `listener` until `shutdown` resolves, then until the
/// connections and sockets still open are done (see the module's header).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    departure: Departure,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (stop_tx, stop) = watch::channel(false);
    // Each connection holds a clone; `recv` ends once all are dropped.
    let (open_tx, mut all_closed) = mpsc::channel::<()>(1);
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and the like: wait, do not spin.
                    tracing::warn!(%err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Live events are small writes that must leave at once: no Nagle.
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(%err, "could not set TCP_NODELAY");
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "connection refused: at http_max_connections");
            tokio::spawn(refuse_busy(tcp));
            continue;
        };
        tracing::trace!(%peer, "connection accepted");
        let (router, mut stop, open) = (router.clone(), stop.clone(), open_tx.clone());
        tokio::spawn(async move {
            serve_connection(tcp, peer, router, limits, &mut stop).await;
            drop((slot, open));
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    departure.leave();
    drop(open_tx);
    let _ = all_closed.recv().await;
    departure.all_gone().await;
}

async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    router: Router,
    limits: ConnectionLimits,
    stop: &mut watch::Receiver<bool>,
) {
    let shared = Arc::new(Shared::default());
    let io = TokioIo::new(Watched::new(tcp, shared.clone(), limits));
    let service = hyper::service::service_fn(move |mut request: Request<hyper::body::Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        let under_way = UnderWay::start(shared.clone());
        let router = router.clone();
        async move {
            let response = router.oneshot(request.map(Body::new)).await?;
            match response.status() {
                StatusCode::SWITCHING_PROTOCOLS => under_way.upgraded(),
                StatusCode::REQUEST_TIMEOUT => under_way.cut_off(),
                _ => {}
            }
            // The request is under way until its answer has been sent
            // whole (hyper drops the body then).
            Ok::<_, std::convert::Infallible>(response.map(|body| {
                Body::new(Tracked {
                    body,
                    _under_way: under_way,
                })
            }))
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        // The header timeout is enforced by `Watched`, which knows when a
        // request starts; hyper's own would also cut idle connections.
        .header_read_timeout(None)
        .serve_connection(io, service)
        .with_upgrades();
    tokio::pin!(connection);
    let mut stopping = false;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(err) = result {
                    tracing::debug!(%err, %peer, "connection ended");
                }
                break;
            }
            changed = stop.wait_for(|stop| *stop), if !stopping => {
                stopping = true;
                if changed.is_ok() {
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// Answer a connection over the cap with `503` and close it.
async fn refuse_busy(mut tcp: TcpStream) {
    let body = error::refusal_body(
        error::UNAVAILABLE,
        "the server has too many connections; retry shortly",
    );
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: {}\r\nconnection: close\r\n\r\n{body}",
        body.len(),
        error::UNAVAILABLE_RETRY_AFTER_SECS
    );
    let write = async {
        tcp.write_all(response.as_bytes()).await?;
        tcp.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), write).await;
}

/// What a connection's requests tell its socket.
#[derive(Default)]
struct Shared {
    /// Requests received and not yet answered whole.
    under_way: AtomicUsize,
    /// The connection became a WebSocket: no HTTP timeout applies.
    upgraded: AtomicBool,
    /// The client sent too slowly (`408`): the connection closes without a
    /// lingering close.
    cut_off: AtomicBool,
    /// The task reading the socket. The last answer finishing is a change
    /// of phase that no read sees, so it wakes the reader to start the idle
    /// timeout; without this a connection whose answer ends after hyper's
    /// last read would stay open for ever.
    reader: AtomicWaker,
}

/// A request under way on its connection, from its headers until its
/// answer is sent.
struct UnderWay(Arc<Shared>);

impl UnderWay {
    fn start(shared: Arc<Shared>) -> Self {
        shared.under_way.fetch_add(1, Ordering::AcqRel);
        Self(shared)
    }

    fn upgraded(&self) {
        self.0.upgraded.store(true, Ordering::Release);
    }

    fn cut_off(&self) {
        self.0.cut_off.store(true, Ordering::Release);
    }
}

impl Drop for UnderWay {
    fn drop(&mut self) {
        if self.0.under_way.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.reader.wake();
        }
    }
}

/// A response body that keeps its request under way until dropped.
struct Tracked {
    body: Body,
    _under_way: UnderWay,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Which timeout a connection's socket is under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for the rest of a request's headers.
    Headers,
    /// A request is under way (or the socket is a WebSocket): no timeout.
    Busy,
    /// Kept alive between requests, no byte of the next one yet.
    Idle,
    /// The server has shut its side and drops what the client still sends
    /// (a lingering close); the deadline is [`LINGER_QUIET`] or the end of
    /// [`LINGER_MOST`], whichever is sooner.
    Lingering { until: Instant },
}

/// A connection's socket, closed (reads fail with `TimedOut`) when its
/// phase's timeout passes.
struct Watched {
    tcp: TcpStream,
    shared: Arc<Shared>,
    limits: ConnectionLimits,
    phase: Phase,
    deadline: Pin<Box<Sleep>>,
    /// The client has shut its side (a read found the end).
    client_done: bool,
}

impl Watched {
    fn new(tcp: TcpStream, shared: Arc<Shared>, limits: ConnectionLimits) -> Self {
        Self {
            tcp,
            shared,
            limits,
            phase: Phase::Headers,
            deadline: Box::pin(tokio::time::sleep(limits.header_timeout)),
            client_done: false,
        }
    }

    /// Read and drop what the client sends until the lingering close ends
    /// (see the module's header).
    fn poll_linger(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Phase::Lingering { until } = self.phase else {
            return Poll::Ready(());
        };
        let mut sink = [0u8; 16 * 1024];
        for _ in 0..LINGER_READS_PER_POLL {
            let mut buf = ReadBuf::new(&mut sink);
            match Pin::new(&mut self.tcp).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                    let quiet = Instant::now() + LINGER_QUIET;
                    self.deadline.as_mut().reset(quiet.min(until));
                }
                // The client's end, or the connection is gone.
                Poll::Ready(_) => return Poll::Ready(()),
                Poll::Pending => {
                    return match self.deadline.as_mut().poll(cx) {
                        Poll::Ready(()) => Poll::Ready(()),
                        Poll::Pending => Poll::Pending,
                    };
                }
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Move to the phase the connection is in now, having just read `read`
    /// bytes; a new phase starts its own timeout.
    fn advance(&mut self, read: bool) {
        let under_way = self.shared.upgraded.load(Ordering::Acquire)
            || self.shared.under_way.load(Ordering::Acquire) > 0;
        let next = match (self.phase, under_way) {
            (Phase::Lingering { .. }, _) => return,
            (_, true) => Phase::Busy,
            (Phase::Busy, false) => Phase::Idle,
            (Phase::Idle, false) if read => Phase::Headers,
            (phase, false) => phase,
        };
        if next != self.phase {
            self.phase = next;
            let timeout = match next {
                Phase::Headers => self.limits.header_timeout,
                Phase::Idle => self.limits.idle_timeout,
                Phase::Busy | Phase::Lingering { .. } => return,
            };
            self.deadline.as_mut().reset(Instant::now() + timeout);
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.shared.upgraded.load(Ordering::Acquire) {
            self.shared.reader.register(cx.waker());
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.tcp).poll_read(cx, buf);
        let read = buf.filled().len() > before;
        if matches!(polled, Poll::Ready(Ok(()))) && !read && buf.remaining() > 0 {
            self.client_done = true;
        }
        self.advance(read);
        if polled.is_pending()
            && self.phase != Phase::Busy
            && self.deadline.as_mut().poll(cx).is_ready()
        {
            let what = match self.phase {
                Phase::Idle => "idle timeout",
                _ => "header timeout",
            };
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, what)));
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !matches!(self.phase, Phase::Lingering { .. }) {
            std::task::ready!(Pin::new(&mut self.tcp).poll_shutdown(cx))?;
            if self.client_done
                || self.shared.upgraded.load(Ordering::Acquire)
                || self.shared.cut_off.load(Ordering::Acquire)
            {
                return Poll::Ready(Ok(()));
            }
            let now = Instant::now();
            let until = now + LINGER_MOST;
            self.phase = Phase::Lingering { until };
            self.deadline
                .as_mut()
                .reset((now + LINGER_QUIET).min(until));
        }
        self.poll_linger(cx).map(Ok)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}
