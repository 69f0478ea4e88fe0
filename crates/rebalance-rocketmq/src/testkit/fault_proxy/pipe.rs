//! One proxied connection: a task that owns the client's socket and the server's, and moves the
//! bytes each way through the faults.
//!
//! Each direction is a reader and a writer joined by a channel of chunks, bounded in bytes: the reader
//! stamps each chunk with the instant it is due (read time, latency, jitter; never before the
//! previous chunk, so bytes keep their order) and decides, frame by frame
//! ([`FrameCursor`]), what is dropped and where the connection is
//! cut; the writer waits until the chunk is due, paces it to the bandwidth, and writes it. While
//! the proxy is black-holed neither reads nor writes: nothing moves, and the sockets' own
//! buffers fill as behind a real partition.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::faults::{Counters, Direction, Faults, Jitter, ResetPoint};
use super::framing::{CutAt, Fate, FrameCursor, Piece};

/// The most read from a socket at once.
pub(super) const CHUNK: usize = 16 * 1024;
/// Bytes read but not yet written, per direction (a budget the reader takes from and the writer
/// gives back): latency does not bound the throughput below this much per latency period.
pub(super) const IN_FLIGHT_BYTES: usize = 512 * 1024;
/// Chunks read but not yet written, per direction (each at least a byte).
const IN_FLIGHT_CHUNKS: usize = 4096;
/// How long the proxy tries to reach the server for one connection.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What the connections of one proxy share.
pub(super) struct Shared {
    pub upstream: String,
    pub faults: watch::Sender<Faults>,
    pub counters: Counters,
    /// Cancelled when the last handle of the proxy is dropped.
    pub stop: CancellationToken,
}

/// Why a direction stopped early.
enum Stop {
    /// A socket failed (the peer reset it, or went away).
    Io,
    /// A fault cuts the connection here.
    Cut,
}

/// Serves one accepted connection until it ends, the proxy resets it, or the proxy stops.
pub(super) async fn serve(mut client: TcpStream, shared: Arc<Shared>, seed: u64) {
    let born = shared.faults.borrow().reset_generation;
    let ending = match interrupted(&shared, born, connect(&shared)).await {
        Ok(Some(mut server)) => {
            let piping = pipe(&mut client, &mut server, &shared, seed);
            let ending = match interrupted(&shared, born, piping).await {
                Ok(ending) => ending,
                Err(ending) => ending,
            };
            if matches!(ending, Ending::Reset | Ending::Failed) {
                reset(&server);
            }
            ending
        }
        Ok(None) => Ending::Closed,
        Err(ending) => ending,
    };
    match ending {
        Ending::Reset => {
            Counters::add(&shared.counters.resets, 1);
            tracing::debug!(upstream = %shared.upstream, "fault proxy: connection reset");
            reset(&client);
        }
        Ending::Failed => reset(&client),
        Ending::Closed | Ending::Stopped => {}
    }
    drop(client);
    Counters::add(&shared.counters.ended, 1);
}

/// How a connection ended.
enum Ending {
    /// Both directions ended (or the server could not be reached): closed as usual.
    Closed,
    /// A socket failed: the other side is reset, as the failed side's peer would be.
    Failed,
    /// A fault reset the connection.
    Reset,
    /// The proxy stopped.
    Stopped,
}

/// `work`'s output, unless the proxy stops or resets the connections born at `born` first.
async fn interrupted<T>(
    shared: &Shared,
    born: u64,
    work: impl std::future::Future<Output = T>,
) -> Result<T, Ending> {
    tokio::select! {
        biased;
        () = shared.stop.cancelled() => Err(Ending::Stopped),
        () = reset_requested(shared.faults.subscribe(), born) => Err(Ending::Reset),
        output = work => Ok(output),
    }
}

/// Waits until the reset generation moves past `born` (never, if the proxy goes away first).
async fn reset_requested(mut faults: watch::Receiver<Faults>, born: u64) {
    if faults
        .wait_for(|f| f.reset_generation != born)
        .await
        .is_err()
    {
        std::future::pending::<()>().await;
    }
}

/// Waits while the proxy is black-holed.
async fn while_black_holed(faults: &mut watch::Receiver<Faults>) {
    // An error means the proxy is going away: its stop token ends the connection.
    let _ = faults.wait_for(|f| !f.black_hole).await;
}

/// Makes dropping `stream` reset it: the peer gets a connection reset, not an orderly close.
fn reset(stream: &TcpStream) {
    if let Err(error) = stream.set_zero_linger() {
        tracing::debug!(%error, "fault proxy: cannot set SO_LINGER 0 for a reset");
    }
}

/// The connection to the server, once the proxy is not black-holed (accepted, then never
/// answered while it is: not even connected to the server); `None` if it cannot be reached.
async fn connect(shared: &Shared) -> Option<TcpStream> {
    while_black_holed(&mut shared.faults.subscribe()).await;
    let connecting = TcpStream::connect(&shared.upstream);
    let error = match tokio::time::timeout(UPSTREAM_CONNECT_TIMEOUT, connecting).await {
        Ok(Ok(server)) => {
            let _ = server.set_nodelay(true);
            return Some(server);
        }
        Ok(Err(error)) => error.to_string(),
        Err(_) => format!("no connection within {UPSTREAM_CONNECT_TIMEOUT:?}"),
    };
    tracing::debug!(upstream = %shared.upstream, %error, "fault proxy: server unreachable");
    Counters::add(&shared.counters.upstream_failures, 1);
    None
}

/// Moves the bytes both ways until both directions have ended, one fails, or one is cut.
async fn pipe(
    client: &mut TcpStream,
    server: &mut TcpStream,
    shared: &Shared,
    seed: u64,
) -> Ending {
    let _ = client.set_nodelay(true);
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    // Set when a request picked for a `MidReply` reset has gone through.
    let cut_next_reply = AtomicBool::new(false);
    let (to_server_tx, to_server_rx) = mpsc::channel(IN_FLIGHT_CHUNKS);
    let (to_client_tx, to_client_rx) = mpsc::channel(IN_FLIGHT_CHUNKS);
    let to_server_budget = Semaphore::new(IN_FLIGHT_BYTES);
    let to_client_budget = Semaphore::new(IN_FLIGHT_BYTES);
    let side = |direction| Side {
        direction,
        shared,
        faults: shared.faults.subscribe(),
        cut_next_reply: &cut_next_reply,
        budget: match direction {
            Direction::ToClient => &to_client_budget,
            _ => &to_server_budget,
        },
    };
    let outcome = tokio::try_join!(
        side(Direction::ToServer).read(&mut client_read, to_server_tx, Jitter::new(seed)),
        side(Direction::ToServer).write(to_server_rx, &mut server_write),
        side(Direction::ToClient).read(&mut server_read, to_client_tx, Jitter::new(!seed)),
        side(Direction::ToClient).write(to_client_rx, &mut client_write),
    );
    match outcome {
        Ok(_) => Ending::Closed,
        Err(Stop::Io) => Ending::Failed,
        Err(Stop::Cut) => Ending::Reset,
    }
}

/// What travels from a direction's reader to its writer.
enum Item {
    Data {
        due: Instant,
        bytes: Bytes,
    },
    /// The reader saw the end of the stream: close the write side.
    End {
        due: Instant,
    },
    /// Reset the connection once everything before has been written.
    Cut {
        due: Instant,
    },
}

/// One direction of a connection.
struct Side<'a> {
    direction: Direction,
    shared: &'a Shared,
    faults: watch::Receiver<Faults>,
    cut_next_reply: &'a AtomicBool,
    /// Bytes this direction may still read before its writer has written them.
    budget: &'a Semaphore,
}

impl Side<'_> {
    async fn read<R: AsyncRead + Unpin>(
        mut self,
        source: &mut R,
        to_writer: mpsc::Sender<Item>,
        mut jitter: Jitter,
    ) -> Result<(), Stop> {
        let mut cursor = FrameCursor::default();
        let mut last_due = Instant::now();
        let mut scratch = vec![0u8; CHUNK];
        loop {
            while_black_holed(&mut self.faults).await;
            let read = source.read(&mut scratch).await;
            let faults = self.faults.borrow().clone();
            let shaping = faults.shaping(self.direction);
            let due =
                (Instant::now() + shaping.latency + jitter.up_to(shaping.jitter)).max(last_due);
            last_due = due;
            let n = match read {
                Ok(0) => {
                    // The writer may be gone (its side failed): the join ends anyway.
                    let _ = to_writer.send(Item::End { due }).await;
                    return Ok(());
                }
                Ok(n) => n,
                Err(error) => {
                    tracing::debug!(direction = ?self.direction, %error, "fault proxy: read failed");
                    return Err(Stop::Io);
                }
            };
            let chunk = &scratch[..n];
            let pieces = cursor.feed(chunk, faults.byte_limit(self.direction), || {
                self.fate(&faults)
            });
            for piece in pieces {
                let item = match piece {
                    Piece::Forward(range) => {
                        // At most CHUNK: always within the budget, and a u32.
                        let len = u32::try_from(range.len()).unwrap_or(u32::MAX);
                        match self.budget.acquire_many(len).await {
                            Ok(permit) => permit.forget(),
                            Err(_) => return Ok(()), // never closed
                        }
                        Item::Data {
                            due,
                            bytes: Bytes::copy_from_slice(&chunk[range]),
                        }
                    }
                    Piece::Drop { frames, .. } => {
                        Counters::add(&self.shared.counters.replies_dropped, frames);
                        continue;
                    }
                    Piece::Cut => Item::Cut { due },
                };
                let cut = matches!(item, Item::Cut { .. });
                if to_writer.send(item).await.is_err() {
                    return Ok(()); // the writer failed: the join ends with its error
                }
                if cut {
                    return Ok(());
                }
            }
        }
    }

    /// What happens to a frame that starts now in this direction.
    fn fate(&self, faults: &Faults) -> Fate {
        let counters = &self.shared.counters;
        match self.direction {
            Direction::ToClient => {
                if self.cut_next_reply.swap(false, Ordering::Relaxed) {
                    return Fate {
                        drop: false,
                        cut: Some(CutAt::Middle),
                    };
                }
                Fate {
                    drop: faults.drop_replies,
                    cut: None,
                }
            }
            _ => {
                Counters::add(&counters.requests, 1);
                let Some((every, point)) = faults.reset_every else {
                    return Fate::default();
                };
                let n = counters.requests_under_rule.fetch_add(1, Ordering::Relaxed) + 1;
                if !n.is_multiple_of(every.max(1)) {
                    return Fate::default();
                }
                tracing::debug!(request = n, ?point, "fault proxy: resetting at a request");
                let cut = match point {
                    ResetPoint::BeforeRequest => Some(CutAt::Start),
                    ResetPoint::MidRequest => Some(CutAt::Middle),
                    ResetPoint::MidReply => {
                        self.cut_next_reply.store(true, Ordering::Relaxed);
                        None
                    }
                };
                Fate { drop: false, cut }
            }
        }
    }

    async fn write<W: AsyncWrite + Unpin>(
        mut self,
        mut from_reader: mpsc::Receiver<Item>,
        sink: &mut W,
    ) -> Result<(), Stop> {
        // When the next byte may go out under the bandwidth limit.
        let mut next_slot = Instant::now();
        while let Some(item) = from_reader.recv().await {
            let due = match &item {
                Item::Data { due, .. } | Item::End { due } | Item::Cut { due } => *due,
            };
            tokio::time::sleep_until(due).await;
            while_black_holed(&mut self.faults).await;
            match item {
                Item::Data { mut bytes, .. } => {
                    while !bytes.is_empty() {
                        while_black_holed(&mut self.faults).await;
                        let rate = self
                            .faults
                            .borrow()
                            .shaping(self.direction)
                            .bytes_per_second;
                        let piece = match rate {
                            // A tenth of a second's worth at a time, so the limit holds over short
                            // windows too.
                            Some(rate) => {
                                let most = usize::try_from(rate / 10).unwrap_or(CHUNK).max(1);
                                bytes.split_to(bytes.len().min(most))
                            }
                            None => std::mem::take(&mut bytes),
                        };
                        if let Some(rate) = rate {
                            tokio::time::sleep_until(next_slot).await;
                            let now = Instant::now();
                            let cost =
                                Duration::from_secs_f64(piece.len() as f64 / rate.max(1) as f64);
                            next_slot = next_slot.max(now) + cost;
                        }
                        if let Err(error) = sink.write_all(&piece).await {
                            tracing::debug!(direction = ?self.direction, %error, "fault proxy: write failed");
                            return Err(Stop::Io);
                        }
                        self.shared
                            .counters
                            .delivered(self.direction, piece.len() as u64);
                        self.budget.add_permits(piece.len());
                    }
                }
                Item::End { .. } => {
                    // Half-close: the other direction goes on until its own end.
                    let _ = sink.shutdown().await;
                    return Ok(());
                }
                Item::Cut { .. } => return Err(Stop::Cut),
            }
        }
        Ok(())
    }
}
