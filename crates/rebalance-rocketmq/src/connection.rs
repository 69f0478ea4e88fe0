//! [`Connection`]: one socket to a server, multiplexing requests by `opaque`.
//!
//! Two tasks own the socket: a reader (the only owner of the read half) routes responses to the
//! waiting requests and hands server-initiated requests to a [`ServerRequestHandler`]; a writer
//! (the only owner of the write half) sends what the handles queue. Requests wait on a oneshot
//! channel kept in a map by opaque; no lock is held across an `.await`. When the socket closes,
//! every waiting request fails with [`TransportError::Closed`].
//!
//! A well-framed frame in a header serialization other than JSON does not close the connection:
//! a response fails only the request it answers
//! ([`TransportError::UnsupportedSerialization`]), a server request is skipped with a warning
//! (answered "request code not supported" unless it is one-way).
//!
//! A request that times out after the server has been silent for a while closes the
//! connection (see [`ConnectionConfig::close_after_silence`]): a dead host or a half-open socket
//! would otherwise time out every request until TCP gives up, many minutes later.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dashmap::DashMap;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;

use crate::codec::{
    CodecError, DEFAULT_MAX_FRAME_LEN, Frame, FrameDecoder, RemotingCodec, UnsupportedFrame,
};
use crate::command::{FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand, request_code, response_code};
use crate::error::TransportError;

/// Answers the requests a server sends to the client over the same connection (for example
/// `NOTIFY_CONSUMER_IDS_CHANGED`).
pub trait ServerRequestHandler: Send + Sync + 'static {
    /// Handles `request` from the server at `peer`. Returns the response to send back, or `None`
    /// to answer "request code not supported". Nothing is sent back for one-way requests.
    ///
    /// Called on the connection's reader task: it must not block. A panic in it is logged and
    /// answered `SYSTEM_ERROR`; the connection goes on.
    fn handle(&self, peer: &str, request: &RemotingCommand) -> Option<RemotingCommand>;
}

/// A handler that supports nothing: requests get "request code not supported".
#[derive(Debug, Default, Clone, Copy)]
pub struct IgnoreServerRequests;

impl ServerRequestHandler for IgnoreServerRequests {
    fn handle(&self, peer: &str, request: &RemotingCommand) -> Option<RemotingCommand> {
        tracing::debug!(peer, code = request.code, "server request ignored");
        None
    }
}

/// The most outgoing frames a connection queues for its writer, whatever
/// [`ConnectionConfig::outbound_queue`] asks (2^20).
pub const MAX_OUTBOUND_QUEUE: usize = 1 << 20;

/// How a connection frames and queues its traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionConfig {
    /// The largest frame sent or accepted.
    pub max_frame_len: usize,
    /// How many outgoing frames may wait for the writer before senders wait. Taken within
    /// `1..=`[`MAX_OUTBOUND_QUEUE`]: 0 is 1, and a larger value is [`MAX_OUTBOUND_QUEUE`] (the
    /// queue's semaphore could not hold more permits, and no writer needs that many frames
    /// queued).
    pub outbound_queue: usize,
    /// Close the connection when a request times out and not a byte (of an answer to any
    /// request, or of a server request) has come from the server for at least this long while
    /// answers were awaited: the server is gone or the socket is half-open, and the next use
    /// reconnects instead of timing out again (3 s; `None`: never). A server that is only slow
    /// to answer one request, and answers others meanwhile, keeps its connection, and so does
    /// one that merely misses a request's shorter timeout. The silence runs from the first
    /// request sent and still unanswered, even one the caller gave up on (but not one given up
    /// on while it still waited for room in the outgoing queue): a server that has not answered
    /// a request sent a minute ago, and sent nothing since, has been silent for a minute. A
    /// request the server holds on purpose (a long-polling pull or pop) is not awaited as
    /// silence counts: it may be held for its whole poll time; past its own timeout, its
    /// silence counts from the later of its sending and the last frame heard. The Java client
    /// goes further and closes on every timeout (`clientCloseSocketIfTimeout`).
    pub close_after_silence: Option<Duration>,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            max_frame_len: DEFAULT_MAX_FRAME_LEN,
            outbound_queue: 1024,
            close_after_silence: Some(Duration::from_secs(3)),
        }
    }
}

type Reply = oneshot::Sender<Result<RemotingCommand, TransportError>>;

struct Shared {
    addr: String,
    pending: DashMap<i32, Reply>,
    /// The requests the server holds on purpose (long polls: `held_by_server`), apart from
    /// `pending`: their answers are not awaited as silence counts (a server holding a pull
    /// for 15 s on an idle queue is not silent).
    held: DashMap<i32, Reply>,
    next_opaque: AtomicI32,
    /// Set once, when the connection closes, with the reason, the time, and whether the client
    /// closed it (its own [`Connection::close`], or its last handle dropped).
    closed: OnceLock<(String, Instant, bool)>,
    outbound: mpsc::Sender<RemotingCommand>,
    /// Since when (nanoseconds after `epoch`) answers have been awaited with nothing heard from
    /// the server, or [`NOT_AWAITING`]: set by a request when unset, moved to now by every byte
    /// heard, cleared once no answer is awaited.
    awaiting_since: AtomicU64,
    /// Whether the server has sent anything at all on this connection.
    heard_any: AtomicBool,
    /// When (nanoseconds after `epoch`, plus one: 0 is never) the server last sent a whole
    /// frame.
    last_heard: AtomicU64,
    epoch: Instant,
    close_after_silence: Option<Duration>,
}

/// `awaiting_since` when no answer is awaited.
const NOT_AWAITING: u64 = u64::MAX;

/// Whether a request of `code` is one the server holds on purpose until something arrives or
/// its poll time is up (a long-polling pull or pop, a POP notification): its answer is not
/// awaited as silence counts, or a request timing out beside it would close a healthy
/// connection that only held a poll on an idle queue (found by review).
fn held_by_server(code: i32) -> bool {
    matches!(
        code,
        request_code::PULL_MESSAGE | request_code::POP_MESSAGE | request_code::NOTIFICATION
    )
}

impl Shared {
    fn closed_error(&self) -> Option<TransportError> {
        self.closed
            .get()
            .map(|(reason, _, _)| TransportError::Closed {
                addr: self.addr.clone(),
                reason: reason.clone(),
            })
    }

    /// Marks the connection closed (`by_client`: by this client) and fails every waiting
    /// request. Requests registered after this see the mark (they check it after registering),
    /// so none waits forever.
    fn close(&self, reason: String, by_client: bool) {
        if self
            .closed
            .set((reason.clone(), Instant::now(), by_client))
            .is_err()
        {
            return;
        }
        let mut failed = 0;
        for map in [&self.pending, &self.held] {
            let opaques: Vec<i32> = map.iter().map(|e| *e.key()).collect();
            failed += opaques.len();
            for opaque in opaques {
                if let Some((_, reply)) = map.remove(&opaque) {
                    let _ = reply.send(Err(TransportError::Closed {
                        addr: self.addr.clone(),
                        reason: reason.clone(),
                    }));
                }
            }
        }
        tracing::info!(addr = %self.addr, %reason, failed_requests = failed, "connection closed");
    }

    fn nanos_since_epoch(&self, at: Instant) -> u64 {
        let nanos = at.saturating_duration_since(self.epoch).as_nanos();
        u64::try_from(nanos)
            .unwrap_or(NOT_AWAITING - 1)
            .min(NOT_AWAITING - 1)
    }

    /// A request is about to wait for an answer: silence counts from now unless it already
    /// counts from an earlier unanswered request.
    fn awaiting(&self) {
        let now = self.nanos_since_epoch(Instant::now());
        let _ = self.awaiting_since.compare_exchange(
            NOT_AWAITING,
            now,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Something came from the server: the answers still awaited count their silence from now.
    fn heard(&self) {
        let now = self.nanos_since_epoch(Instant::now());
        self.last_heard
            .store(now.saturating_add(1), Ordering::Release);
        self.awaiting_since.store(now, Ordering::Release);
        self.settle();
    }

    /// When no answer is awaited any more (the last one came, or the last request failed
    /// without being sent), there is no silence. A request registered meanwhile starts it again.
    fn settle(&self) {
        if !self.pending.is_empty() {
            return;
        }
        let seen = self.awaiting_since.load(Ordering::Acquire);
        if seen != NOT_AWAITING
            && self
                .awaiting_since
                .compare_exchange(seen, NOT_AWAITING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            && !self.pending.is_empty()
        {
            self.awaiting();
        }
    }

    /// How long answers have been awaited with nothing heard, if they have.
    fn silence(&self) -> Option<Duration> {
        let since = self.awaiting_since.load(Ordering::Acquire);
        (since != NOT_AWAITING).then(|| {
            let now = self.nanos_since_epoch(Instant::now());
            Duration::from_nanos(now.saturating_sub(since))
        })
    }

    /// The entry of `opaque`, an awaited answer or a held one, taken out.
    fn take(&self, opaque: i32) -> Option<Reply> {
        self.pending
            .remove(&opaque)
            .or_else(|| self.held.remove(&opaque))
            .map(|(_, reply)| reply)
    }

    fn fail(&self, opaque: i32, error: TransportError) {
        if let Some(reply) = self.take(opaque) {
            let _ = reply.send(Err(error));
        }
        self.settle();
    }
}

/// Removes a request's entry when the request ends, however it ends (answer, timeout, or the
/// caller dropping the future). A request that ends before it was handed to the writer never
/// reached the server, so it leaves no silence behind.
struct PendingGuard<'a> {
    shared: &'a Shared,
    opaque: i32,
    sent: bool,
    held: bool,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if self.held {
            self.shared.held.remove(&self.opaque);
            return;
        }
        self.shared.pending.remove(&self.opaque);
        if !self.sent {
            self.shared.settle();
        }
    }
}

struct Handle {
    shared: Arc<Shared>,
    token: CancellationToken,
}

impl Drop for Handle {
    fn drop(&mut self) {
        // The last handle is gone: stop both tasks, which closes the socket.
        self.token.cancel();
    }
}

/// A watch on a connection's end that does not keep it open (it holds no handle: the socket
/// still closes when the last [`Connection`] is dropped).
pub(crate) struct CloseWatch {
    shared: Arc<Shared>,
    token: CancellationToken,
}

impl CloseWatch {
    /// Waits until the connection closes; `true` when it was lost (closed by the server, a
    /// read or write failure, or a server silent past its limit), `false` when this client
    /// closed it ([`Connection::close`], or its last handle dropped).
    pub(crate) async fn lost(self) -> bool {
        self.token.cancelled().await;
        // The token is cancelled before a close is marked only when the last handle is dropped.
        self.shared
            .closed
            .get()
            .is_some_and(|(_, _, by_client)| !by_client)
    }
}

/// The end of a `connect_timeout` starting now; `None` (no deadline) when the timeout is too
/// long to add to the clock (`Duration::MAX`, or a `--timeout` of billions of seconds), which
/// is what such a timeout means, rather than an overflow panic.
pub(crate) fn connect_deadline(connect_timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(connect_timeout)
}

/// `future`'s output, or `None` if `deadline` (`None`: none) passes first.
pub(crate) async fn by_deadline<F: Future>(
    deadline: Option<Instant>,
    future: F,
) -> Option<F::Output> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, future).await.ok(),
        None => Some(future.await),
    }
}

/// A TCP connection to `dial` (for the server advertised as `addr`) by `deadline` (the end of
/// `connect_timeout`, see [`connect_deadline`]), with `TCP_NODELAY`. A failure names `addr`,
/// and `dial` when it differs.
pub(crate) async fn tcp_connect(
    addr: &str,
    dial: &str,
    deadline: Option<Instant>,
    connect_timeout: Duration,
) -> Result<TcpStream, TransportError> {
    let via = if dial == addr {
        String::new()
    } else {
        format!(" (dialing {dial}, its address override)")
    };
    let stream = match by_deadline(deadline, TcpStream::connect(dial)).await {
        Some(Ok(stream)) => stream,
        Some(Err(e)) => {
            return Err(TransportError::Connect {
                addr: addr.to_string(),
                reason: format!("{e}{via}"),
            });
        }
        None => {
            return Err(TransportError::Connect {
                addr: addr.to_string(),
                reason: format!("no connection within {connect_timeout:?}{via}"),
            });
        }
    };
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(addr, error = %e, "cannot set TCP_NODELAY");
    }
    Ok(stream)
}

/// A connection to one server. Cheap to clone; the socket closes when the last clone is
/// dropped or [`close`](Self::close) is called.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<Handle>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.inner.shared.addr)
            .field("open", &self.is_open())
            .finish()
    }
}

impl Connection {
    /// Connects to `addr` (`host:port`) within `connect_timeout` (one too long to add to the
    /// clock, such as `Duration::MAX`, sets no limit).
    pub async fn connect(
        addr: &str,
        connect_timeout: Duration,
        config: ConnectionConfig,
        handler: Arc<dyn ServerRequestHandler>,
    ) -> Result<Connection, TransportError> {
        Self::connect_via(addr, addr, connect_timeout, config, handler).await
    }

    /// Connects to the server advertised as `addr` by dialing `dial` (the same address, or its
    /// override in an [`AddressMap`](crate::AddressMap)), within `connect_timeout`. The
    /// connection is `addr`'s: its [`addr`](Self::addr), its logs and its errors name `addr`
    /// (and the errors `dial` too, when it differs).
    pub(crate) async fn connect_via(
        addr: &str,
        dial: &str,
        connect_timeout: Duration,
        config: ConnectionConfig,
        handler: Arc<dyn ServerRequestHandler>,
    ) -> Result<Connection, TransportError> {
        let deadline = connect_deadline(connect_timeout);
        let stream = tcp_connect(addr, dial, deadline, connect_timeout).await?;
        tracing::debug!(addr, dial, "connected");
        Ok(Self::from_stream(stream, addr, config, handler))
    }

    /// Runs the protocol over an established stream (a socket, or an in-memory pipe in tests).
    /// Must be called within a tokio runtime: it spawns the reader and writer tasks.
    pub fn from_stream<S>(
        stream: S,
        addr: &str,
        config: ConnectionConfig,
        handler: Arc<dyn ServerRequestHandler>,
    ) -> Connection
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (read_half, write_half) = tokio::io::split(stream);
        let (outbound, outbound_rx) =
            mpsc::channel(config.outbound_queue.clamp(1, MAX_OUTBOUND_QUEUE));
        let shared = Arc::new(Shared {
            addr: addr.to_string(),
            pending: DashMap::new(),
            held: DashMap::new(),
            next_opaque: AtomicI32::new(1),
            closed: OnceLock::new(),
            outbound,
            awaiting_since: AtomicU64::new(NOT_AWAITING),
            heard_any: AtomicBool::new(false),
            last_heard: AtomicU64::new(0),
            epoch: Instant::now(),
            close_after_silence: config.close_after_silence,
        });
        let token = CancellationToken::new();
        let codec = RemotingCodec::new(config.max_frame_len);
        tokio::spawn(read_loop(
            shared.clone(),
            FramedRead::new(
                Hearing {
                    inner: read_half,
                    shared: shared.clone(),
                },
                FrameDecoder::new(codec),
            ),
            handler,
            token.clone(),
        ));
        tokio::spawn(write_loop(
            shared.clone(),
            FramedWrite::new(write_half, codec),
            outbound_rx,
            token.clone(),
        ));
        Connection {
            inner: Arc::new(Handle { shared, token }),
        }
    }

    /// The server's address.
    pub fn addr(&self) -> &str {
        &self.inner.shared.addr
    }

    /// Whether the server has sent a whole frame on this connection (an answer, a push), not
    /// only bytes that were no frame (a TLS alert, an HTTP answer).
    pub fn heard_from_server(&self) -> bool {
        self.inner.shared.heard_any.load(Ordering::Relaxed)
    }

    /// Whether the connection is still usable.
    pub fn is_open(&self) -> bool {
        self.inner.shared.closed.get().is_none()
    }

    /// When the connection closed, if it has.
    pub fn closed_at(&self) -> Option<Instant> {
        self.inner.shared.closed.get().map(|(_, at, _)| *at)
    }

    /// Closes the connection; waiting requests fail with [`TransportError::Closed`].
    pub fn close(&self) {
        self.close_because("closed by the client".to_string(), true);
    }

    /// Fails every waiting request with `reason` and stops both tasks, which closes the socket.
    /// `by_client`: closed on the client's own decision, not because the server went away (a
    /// server silent past its limit counts as gone).
    fn close_because(&self, reason: String, by_client: bool) {
        self.inner.shared.close(reason, by_client);
        self.inner.token.cancel();
    }

    /// A watch on the connection's end that does not keep it open (see [`CloseWatch`]).
    pub(crate) fn close_watch(&self) -> CloseWatch {
        CloseWatch {
            shared: self.inner.shared.clone(),
            token: self.inner.token.clone(),
        }
    }

    /// Resolves when the connection has closed.
    pub async fn closed(&self) {
        self.inner.token.cancelled().await
    }

    fn next_opaque(&self) -> i32 {
        self.inner
            .shared
            .next_opaque
            .fetch_add(1, Ordering::Relaxed)
    }

    /// Sends `request` and waits up to `timeout` for its response (of any response code).
    /// With no time at all (a zero `timeout`: a deadline already passed), the request is not
    /// sent: [`TransportError::Timeout`] at once, as the Java client refuses a call whose
    /// connect took its whole timeout, rather than have the server act on a request its
    /// caller was told failed.
    pub async fn request(
        &self,
        mut request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, TransportError> {
        let shared = &*self.inner.shared;
        if timeout.is_zero() {
            return Err(TransportError::Timeout {
                addr: shared.addr.clone(),
                after: timeout,
            });
        }
        let opaque = self.next_opaque();
        request.opaque = opaque;
        request.flag &= !(FLAG_RESPONSE | FLAG_ONEWAY);
        let (reply, answer) = oneshot::channel();
        let held = held_by_server(request.code);
        if held {
            shared.held.insert(opaque, reply);
        } else {
            shared.pending.insert(opaque, reply);
        }
        let guard = PendingGuard {
            shared,
            opaque,
            sent: false,
            held,
        };
        if let Some(e) = shared.closed_error() {
            return Err(e);
        }
        let code = request.code;
        let sent_at = Instant::now();
        if !held {
            shared.awaiting();
        }
        // The guard lives in the exchange, so it ends when the exchange does: on the answer, at
        // the timeout, or when the caller drops this future.
        let exchange = async move {
            // Moves the whole guard in (the block alone would capture only `guard.sent`).
            let mut guard = guard;
            if shared.outbound.send(request).await.is_err() {
                return Err(shared
                    .closed_error()
                    .unwrap_or_else(|| TransportError::Closed {
                        addr: shared.addr.clone(),
                        reason: "writer stopped".into(),
                    }));
            }
            guard.sent = true;
            match answer.await {
                Ok(result) => result,
                Err(_) => Err(shared
                    .closed_error()
                    .unwrap_or_else(|| TransportError::Closed {
                        addr: shared.addr.clone(),
                        reason: "request dropped".into(),
                    })),
            }
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_) => {
                // A held request's timeout is its poll time and more: past it, the server broke
                // its hold, and its silence counts from the later of the request's sending and
                // the last frame heard.
                let silence = if held {
                    let heard = shared.last_heard.load(Ordering::Acquire);
                    let since = heard.max(shared.nanos_since_epoch(sent_at).saturating_add(1));
                    let now = shared.nanos_since_epoch(Instant::now()).saturating_add(1);
                    Some(Duration::from_nanos(now.saturating_sub(since)))
                } else {
                    shared.silence()
                };
                match (silence, shared.close_after_silence) {
                    (Some(silence), Some(limit)) if silence >= limit => {
                        tracing::warn!(addr = %shared.addr, code, opaque, ?timeout, ?silence, "request timed out and nothing came from the server meanwhile; closing the connection (the next use reconnects)");
                        self.close_because(format!("server silent for {silence:?}"), false);
                    }
                    _ => {
                        tracing::debug!(addr = %shared.addr, code, opaque, ?timeout, ?silence, "request timed out");
                    }
                }
                Err(TransportError::Timeout {
                    addr: shared.addr.clone(),
                    after: timeout,
                })
            }
        }
    }

    /// Sends a one-way `request` (no response expected), waiting at most `timeout` for room in
    /// the outgoing queue.
    pub async fn send_oneway(
        &self,
        mut request: RemotingCommand,
        timeout: Duration,
    ) -> Result<(), TransportError> {
        let shared = &*self.inner.shared;
        if let Some(e) = shared.closed_error() {
            return Err(e);
        }
        request.opaque = self.next_opaque();
        request.flag = (request.flag & !FLAG_RESPONSE) | FLAG_ONEWAY;
        match tokio::time::timeout(timeout, shared.outbound.send(request)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(shared
                .closed_error()
                .unwrap_or_else(|| TransportError::Closed {
                    addr: shared.addr.clone(),
                    reason: "writer stopped".into(),
                })),
            Err(_) => Err(TransportError::Timeout {
                addr: shared.addr.clone(),
                after: timeout,
            }),
        }
    }

    #[cfg(test)]
    pub(crate) fn pending_len(&self) -> usize {
        self.inner.shared.pending.len() + self.inner.shared.held.len()
    }
}

/// The read half, telling the connection whenever bytes arrive: a large answer still streaming
/// in over a slow link is not silence.
struct Hearing<R> {
    inner: R,
    shared: Arc<Shared>,
}

impl<R: AsyncRead + Unpin> AsyncRead for Hearing<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.shared.heard();
        }
        polled
    }
}

async fn read_loop<R>(
    shared: Arc<Shared>,
    mut frames: FramedRead<R, FrameDecoder>,
    handler: Arc<dyn ServerRequestHandler>,
    token: CancellationToken,
) where
    R: AsyncRead + Unpin,
{
    let reason = loop {
        let next = tokio::select! {
            // Cancelled before any close was marked: the last handle was dropped.
            _ = token.cancelled() => break ("closed by the client".to_string(), true),
            next = frames.next() => next,
        };
        if let Some(Ok(_)) = &next {
            // A whole frame read: the server speaks the protocol (bytes alone may be a TLS
            // alert or an HTTP answer, found by review: counted as heard, they reset the
            // reconnect backoff at every close).
            shared.heard_any.store(true, Ordering::Relaxed);
        }
        match next {
            Some(Ok(Frame::Command(command))) if command.is_response() => deliver(&shared, command),
            Some(Ok(Frame::Command(command))) => serve(&shared, &*handler, command),
            Some(Ok(Frame::Unsupported(frame))) => skip(&shared, frame),
            Some(Err(CodecError::ForeignProtocol(like))) => {
                let reason = format!(
                    "the server at {} does not speak RocketMQ remoting (it answered like {like}); \
                     check the address and port",
                    shared.addr
                );
                tracing::warn!(addr = %shared.addr, %reason, "closing");
                break (reason, false);
            }
            Some(Err(e)) => {
                tracing::warn!(addr = %shared.addr, error = %e, "unreadable data from server, closing");
                break (format!("unreadable data: {e}"), false);
            }
            None => break ("closed by the server".to_string(), false),
        }
    };
    shared.close(reason.0, reason.1);
    token.cancel();
}

fn deliver(shared: &Shared, response: RemotingCommand) {
    match shared.take(response.opaque) {
        Some(reply) => {
            let _ = reply.send(Ok(response));
            shared.settle();
        }
        None => tracing::warn!(
            addr = %shared.addr,
            opaque = response.opaque,
            code = response.code,
            "response for an unknown request (timed out or never sent), dropped"
        ),
    }
}

/// A frame whose header this client cannot read: fails the request it answers, answers a
/// server request "not supported", or (when it cannot tell what the frame is) just skips it.
fn skip(shared: &Shared, frame: UnsupportedFrame) {
    let serialize_type = frame.serialize_type;
    let Some(routing) = frame.routing else {
        tracing::warn!(addr = %shared.addr, serialize_type, "frame in an unreadable header serialization skipped");
        return;
    };
    let (code, opaque) = (routing.code, routing.opaque);
    if routing.is_response() {
        if shared.pending.contains_key(&opaque) || shared.held.contains_key(&opaque) {
            tracing::warn!(addr = %shared.addr, serialize_type, code, opaque, "answer in an unsupported header serialization; failing that request only");
            shared.fail(
                opaque,
                TransportError::UnsupportedSerialization {
                    addr: shared.addr.clone(),
                    serialize_type,
                },
            );
        } else {
            tracing::warn!(addr = %shared.addr, serialize_type, code, opaque, "answer in an unsupported header serialization for an unknown request, dropped");
        }
        return;
    }
    tracing::warn!(addr = %shared.addr, serialize_type, code, opaque, oneway = routing.is_oneway(), "server request in an unsupported header serialization skipped");
    if routing.is_oneway() {
        return;
    }
    let remark = format!("header serialization type {serialize_type} not supported; send JSON (0)");
    answer(shared, code, not_supported(opaque, remark));
}

fn serve(shared: &Shared, handler: &dyn ServerRequestHandler, request: RemotingCommand) {
    tracing::debug!(addr = %shared.addr, code = request.code, oneway = request.is_oneway(), "request from server");
    // The handler is the application's code: a panic in it fails this request only, instead of
    // ending the reader task (which would leave every waiting request to its timeout).
    let handled =
        std::panic::catch_unwind(AssertUnwindSafe(|| handler.handle(&shared.addr, &request)))
            .map_err(|panic| panic_message(&*panic));
    if let Err(message) = &handled {
        tracing::error!(addr = %shared.addr, code = request.code, panic = %message, "server request handler panicked");
    }
    if request.is_oneway() {
        return;
    }
    let mut response = match handled {
        Ok(Some(response)) => response,
        Ok(None) => {
            let remark = format!("request code {} not supported", request.code);
            not_supported(request.opaque, remark)
        }
        Err(message) => RemotingCommand::response(
            response_code::SYSTEM_ERROR,
            request.opaque,
            Some(format!("the client's request handler panicked: {message}")),
        ),
    };
    response.opaque = request.opaque;
    response.flag = (response.flag | FLAG_RESPONSE) & !FLAG_ONEWAY;
    answer(shared, request.code, response);
}

/// The message of a caught panic.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_string())
}

/// The answer "request code not supported" to the server request `opaque`.
fn not_supported(opaque: i32, remark: String) -> RemotingCommand {
    RemotingCommand::response(
        response_code::REQUEST_CODE_NOT_SUPPORTED,
        opaque,
        Some(remark),
    )
}

/// Queues the answer to a server request (of `code`) without waiting: the reader must not block.
fn answer(shared: &Shared, code: i32, response: RemotingCommand) {
    if let Err(e) = shared.outbound.try_send(response) {
        tracing::warn!(addr = %shared.addr, code, error = %e, "cannot answer server request");
    }
}

async fn write_loop<W>(
    shared: Arc<Shared>,
    mut frames: FramedWrite<W, RemotingCodec>,
    mut outbound: mpsc::Receiver<RemotingCommand>,
    token: CancellationToken,
) where
    W: AsyncWrite + Unpin,
{
    let reason = 'run: loop {
        let first = tokio::select! {
            _ = token.cancelled() => break 'run None,
            first = outbound.recv() => first,
        };
        let Some(mut command) = first else {
            break 'run None;
        };
        // Queue everything that is ready, then flush once.
        loop {
            let (opaque, is_request) = (
                command.opaque,
                !command.is_response() && !command.is_oneway(),
            );
            // Feeding flushes when the buffer is full: it waits on a peer that stopped reading.
            let fed = tokio::select! {
                _ = token.cancelled() => break 'run None,
                fed = frames.feed(command) => fed,
            };
            match fed {
                Ok(()) => {}
                Err(CodecError::Io(e)) => break 'run Some(format!("write failed: {e}")),
                Err(e) => {
                    tracing::warn!(addr = %shared.addr, opaque, error = %e, "command not sent");
                    if is_request {
                        shared.fail(
                            opaque,
                            TransportError::Encode {
                                addr: shared.addr.clone(),
                                reason: e.to_string(),
                            },
                        );
                    }
                }
            }
            match outbound.try_recv() {
                Ok(next) => command = next,
                Err(_) => break,
            }
        }
        let flushed = tokio::select! {
            _ = token.cancelled() => break 'run None,
            flushed = frames.flush() => flushed,
        };
        if let Err(e) = flushed {
            break 'run Some(format!("write failed: {e}"));
        }
    };
    if let Some(reason) = reason {
        shared.close(reason, false);
    }
    token.cancel();
    // Whoever still waits for room in the queue fails now, not after the half-close below
    // (found by review: up to 1 s later, and as a timeout when its deadline fell within it).
    outbound.close();
    // Half-close the socket so the server sees the end (without waiting on a stuck peer).
    let _ = tokio::time::timeout(Duration::from_secs(1), frames.close()).await;
}

#[cfg(test)]
mod tests;
