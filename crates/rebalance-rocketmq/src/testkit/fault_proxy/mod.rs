//! [`FaultProxy`]: a TCP proxy on loopback that a test places between one client and a server
//! (a broker, or a name server) to give that client a bad network, while other clients reach the
//! server directly.
//!
//! Route a client through it with an address override
//! ([`AddressMap`](crate::AddressMap): the broker's advertised address dialed at the proxy's), or
//! give the client the proxy's address as a name server's. The faults change at run time through
//! the proxy's methods (it is a cheap cloneable handle) and apply to every connection, open or
//! new:
//!
//! - [`set_latency`](FaultProxy::set_latency): a delay and a random jitter on each chunk of
//!   bytes, per direction (bytes keep their order: jitter never reorders a stream);
//! - [`limit_bandwidth`](FaultProxy::limit_bandwidth): bytes per second, per direction;
//! - [`reset_now`](FaultProxy::reset_now) resets every open connection;
//!   [`reset_every_nth_request`](FaultProxy::reset_every_nth_request) resets the connection of
//!   every n-th request, before it, in its middle, or in the middle of the reply that follows
//!   ([`ResetPoint`]); [`reset_after_bytes`](FaultProxy::reset_after_bytes) resets each
//!   connection once it carried that many bytes, wherever that falls in a frame. A reset is a
//!   TCP reset on both sides; a cut mid-frame leaves the peer a truncated frame;
//! - [`black_hole`](FaultProxy::black_hole): nothing moves any more, either way, on any
//!   connection, and new connections are accepted but never answered (nor forwarded): half-open
//!   connections, as behind a partition, a frozen server or a dead load balancer;
//! - [`drop_replies`](FaultProxy::drop_replies): the client's frames reach the server (which acts
//!   on them), the server's frames are discarded, whole;
//! - [`heal`](FaultProxy::heal): a transparent pipe again.
//!
//! **Healing a black hole resumes its connections.** While black-holed the proxy moves nothing
//! and loses nothing: it reads no more from either side, so the bytes sent meanwhile wait in the
//! sockets' buffers (and the senders block once those are full), and at the heal they are
//! delivered, late, in order, followed by any close that came after them. That is what TCP does
//! across a real partition shorter than its retransmission timeout (about 15 minutes on Linux):
//! the segments are retransmitted until they get through, so the connection survives and the
//! stale requests arrive after the heal (a late lock request, a late offset commit), which is the
//! part of a partition a client must survive. Discarding them instead would cut frames in two,
//! which no network does to a live connection. Whether a connection dies during the partition is
//! left to the endpoints, as on a real network: the client closes a connection that stays silent
//! while it awaits answers ([`ConnectionConfig::close_after_silence`](crate::ConnectionConfig),
//! 3 s), the broker closes idle ones. To model a partition that outlived TCP (or a NAT that
//! forgot the flows), call [`reset_now`](FaultProxy::reset_now) before `heal`.
//!
//! **Frames.** Counting requests, dropping whole replies and cutting a frame in its middle read
//! the remoting frames' 4-byte length prefixes (see [`crate::codec`]): with any other traffic
//! (TLS, say) the bytes still pass, and latency, bandwidth, byte limits and black holes still
//! apply, but "frames" are what the prefixes happen to say.
//!
//! **Bounds.** At most [`MAX_CONNECTIONS`] open connections (more are closed as they are
//! accepted, and counted as refused); per connection and direction at most 512 KiB read and not
//! yet written. No I/O error panics: a failed socket resets the other side of its connection.
//! Every task ends when the last clone of the proxy is dropped (the connections close). Time is
//! `tokio::time`, so a test on paused time sees exact delays.
//!
//! ```no_run
//! use std::time::Duration;
//! use rebalance_rocketmq::testkit::{Direction, FaultProxy, TestCluster};
//! use rebalance_rocketmq::{BrokerClient, NameServerClient};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let cluster = TestCluster::start()?;
//! let broker = cluster.first_broker_addr();
//! let proxy = FaultProxy::start(&broker).await?;
//! // This member reaches the broker through the proxy; the others reach it directly.
//! let name_server = NameServerClient::builder(&cluster.namesrv_addr())
//!     .connect_via(broker.as_str(), proxy.addr())
//!     .build()?;
//! let brokers = BrokerClient::new(name_server);
//! proxy.set_latency(Direction::Both, Duration::from_millis(200), Duration::from_millis(20));
//! proxy.black_hole();
//! // ... the member is partitioned from the broker ...
//! proxy.heal();
//! assert!(proxy.counters().accepted >= 1);
//! # Ok(()) }
//! ```

mod faults;
mod framing;
mod pipe;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

use faults::{Counters, Faults};
pub use faults::{Direction, ProxyCounters, ResetPoint};
use pipe::Shared;

/// The most connections a proxy keeps open at once.
pub const MAX_CONNECTIONS: usize = 256;

/// A fault-injection TCP proxy on loopback (see the [module documentation](self)). Cheap to
/// clone; it stops, and closes its connections, when the last clone is dropped.
#[derive(Clone)]
pub struct FaultProxy {
    shared: Arc<Shared>,
    addr: String,
    /// Cancels the tasks when the last clone goes.
    _stop: Arc<DropGuard>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .field("faults", &*self.shared.faults.borrow())
            .finish()
    }
}

impl FaultProxy {
    /// A transparent proxy to `upstream` (`host:port`) on a free loopback port. Must be called
    /// within a tokio runtime (it spawns its tasks). The server is dialed for each connection
    /// accepted, so it need not be up yet.
    pub async fn start(upstream: &str) -> std::io::Result<FaultProxy> {
        Self::start_seeded(upstream, 0x5eed).await
    }

    /// [`start`](Self::start), with the seed of the jitter: the same seed, the same delays for
    /// the same connections in the same order.
    pub async fn start_seeded(upstream: &str, seed: u64) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let stop = CancellationToken::new();
        let (faults, _) = watch::channel(Faults::default());
        let shared = Arc::new(Shared {
            upstream: upstream.to_string(),
            faults,
            counters: Counters::default(),
            stop: stop.clone(),
        });
        tokio::spawn(accept_loop(listener, shared.clone(), seed));
        tracing::debug!(%addr, upstream, "fault proxy started");
        Ok(FaultProxy {
            shared,
            addr,
            _stop: Arc::new(stop.drop_guard()),
        })
    }

    /// The proxy's address (`127.0.0.1:port`): what the routed client dials.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The server behind the proxy.
    pub fn upstream(&self) -> &str {
        &self.shared.upstream
    }

    /// What the proxy did so far.
    pub fn counters(&self) -> ProxyCounters {
        self.shared.counters.snapshot()
    }

    fn change(&self, what: &str, edit: impl FnOnce(&mut Faults)) {
        self.shared.faults.send_modify(edit);
        tracing::info!(proxy = %self.addr, upstream = %self.shared.upstream, what, "fault proxy");
    }

    /// Delays every chunk of bytes going `direction` by `latency` plus a random part of
    /// `jitter` (uniform, from zero to `jitter`), counted from when the proxy read it. Bytes
    /// never overtake each other. Applies to what is read from now on.
    pub fn set_latency(&self, direction: Direction, latency: Duration, jitter: Duration) {
        self.change("latency", |f| {
            for one_way in [Direction::ToServer, Direction::ToClient] {
                if direction.includes(one_way) {
                    let shaping = match one_way {
                        Direction::ToClient => &mut f.to_client,
                        _ => &mut f.to_server,
                    };
                    shaping.latency = latency;
                    shaping.jitter = jitter;
                }
            }
        });
    }

    /// Limits each connection to `bytes_per_second` going `direction` (at least 1), paced a
    /// tenth of a second's worth at a time.
    pub fn limit_bandwidth(&self, direction: Direction, bytes_per_second: u64) {
        self.change("bandwidth", |f| {
            for one_way in [Direction::ToServer, Direction::ToClient] {
                if direction.includes(one_way) {
                    let shaping = match one_way {
                        Direction::ToClient => &mut f.to_client,
                        _ => &mut f.to_server,
                    };
                    shaping.bytes_per_second = Some(bytes_per_second.max(1));
                }
            }
        });
    }

    /// Resets every connection open now (a TCP reset to the client and to the server);
    /// connections accepted afterwards are not affected.
    pub fn reset_now(&self) {
        self.change("reset now", |f| {
            f.reset_generation = f.reset_generation.wrapping_add(1);
        });
    }

    /// From now on, the connection of every `n`-th request (counted over all connections from
    /// this call; `n` at least 1) is reset at `at`. Until [`heal`](Self::heal).
    pub fn reset_every_nth_request(&self, n: u64, at: ResetPoint) {
        self.shared
            .counters
            .requests_under_rule
            .store(0, Ordering::Relaxed);
        self.change("reset every n-th request", |f| {
            f.reset_every = Some((n.max(1), at));
        });
    }

    /// Each connection, open or new, is reset once it has carried `bytes` going `direction`
    /// (counted from its start), wherever that falls: mid-frame, the peer gets a truncated
    /// frame. Until [`heal`](Self::heal).
    pub fn reset_after_bytes(&self, direction: Direction, bytes: u64) {
        self.change("reset after bytes", |f| {
            f.reset_after_bytes = Some((direction, bytes));
        });
    }

    /// Nothing moves any more on any connection, either way; new connections are accepted and
    /// never answered. Until [`heal`](Self::heal), which resumes them (see the
    /// [module documentation](self)).
    pub fn black_hole(&self) {
        self.change("black hole", |f| f.black_hole = true);
    }

    /// The frames from the server are discarded, whole (one already under way goes through);
    /// the client's reach the server. Until [`heal`](Self::heal).
    pub fn drop_replies(&self) {
        self.change("drop replies", |f| f.drop_replies = true);
    }

    /// Back to a transparent pipe: no latency, no bandwidth limit, no reset rule, no black hole
    /// (its connections resume), no dropped replies. Bytes already read keep the delay they were
    /// given.
    pub fn heal(&self) {
        self.change("heal", |f| {
            *f = Faults {
                reset_generation: f.reset_generation,
                ..Faults::default()
            };
        });
    }
}

/// Accepts connections until the proxy stops; each is served by a task of its own.
async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, seed: u64) {
    let mut connection: u64 = 0;
    loop {
        let accepted = tokio::select! {
            () = shared.stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let client = match accepted {
            Ok((client, _)) => client,
            Err(error) => {
                // Out of descriptors, say: try again shortly rather than spin.
                tracing::warn!(%error, "fault proxy: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let open = shared.counters.snapshot().open;
        if open >= MAX_CONNECTIONS as u64 {
            Counters::add(&shared.counters.refused, 1);
            tracing::warn!(open, "fault proxy: too many connections; closing a new one");
            continue;
        }
        Counters::add(&shared.counters.accepted, 1);
        connection += 1;
        let seed = seed ^ connection.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        tokio::spawn(pipe::serve(client, shared.clone(), seed));
    }
}
