//! The faults a [`FaultProxy`](super::FaultProxy) applies, as the connections read them, and its
//! counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Which way the bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the client to the server: requests (and the client's answers to server requests).
    ToServer,
    /// From the server to the client: replies (and the server's own requests).
    ToClient,
    /// Both ways.
    Both,
}

impl Direction {
    pub(super) fn includes(self, one_way: Direction) -> bool {
        self == Direction::Both || self == one_way
    }
}

/// Where a request picked by [`reset_every_nth_request`](super::FaultProxy::reset_every_nth_request)
/// resets its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResetPoint {
    /// As the request arrives: the server never sees a byte of it.
    BeforeRequest,
    /// In the middle of the request: the server gets a truncated frame, then the reset.
    MidRequest,
    /// The request reaches the server whole; the next frame the server sends on that connection
    /// (its reply, or another one) is cut in its middle: the client reads a truncated frame,
    /// then the reset. The server acted on the request; the client never learns how.
    MidReply,
}

/// Latency, jitter and bandwidth of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Shaping {
    pub latency: Duration,
    pub jitter: Duration,
    /// Bytes per second, at least 1; `None`: unlimited.
    pub bytes_per_second: Option<u64>,
}

/// Everything the proxy does to the traffic, published to every connection through a watch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Faults {
    pub to_server: Shaping,
    pub to_client: Shaping,
    /// Nothing moves, and new connections are accepted but not forwarded.
    pub black_hole: bool,
    /// Frames from the server are discarded.
    pub drop_replies: bool,
    /// Every n-th request (counted from when the rule was set) resets its connection there.
    pub reset_every: Option<(u64, ResetPoint)>,
    /// Each connection is reset once it carried this many bytes this way.
    pub reset_after_bytes: Option<(Direction, u64)>,
    /// Bumped by `reset_now`: connections accepted before are reset.
    pub reset_generation: u64,
}

impl Faults {
    pub(super) fn shaping(&self, one_way: Direction) -> Shaping {
        match one_way {
            Direction::ToClient => self.to_client,
            _ => self.to_server,
        }
    }

    /// The byte count at which a connection is reset in `one_way`, if any.
    pub(super) fn byte_limit(&self, one_way: Direction) -> Option<u64> {
        self.reset_after_bytes
            .and_then(|(direction, bytes)| direction.includes(one_way).then_some(bytes))
    }
}

/// What the proxy did, for assertions (a snapshot of [`FaultProxy::counters`](super::FaultProxy::counters)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProxyCounters {
    /// Connections accepted from clients.
    pub accepted: u64,
    /// Connections turned away because the proxy had its maximum open.
    pub refused: u64,
    /// Connections that could not reach the server (each closed at once).
    pub upstream_failures: u64,
    /// Connections open now (accepted and not yet ended).
    pub open: u64,
    /// Bytes delivered to the server.
    pub bytes_to_server: u64,
    /// Bytes delivered to the client.
    pub bytes_to_client: u64,
    /// Frames the clients began to send (requests, and answers to the server's requests).
    pub requests: u64,
    /// Frames from the server discarded by [`drop_replies`](super::FaultProxy::drop_replies).
    pub replies_dropped: u64,
    /// Connections reset by a fault: [`reset_now`](super::FaultProxy::reset_now), the n-th
    /// request, or a byte limit.
    pub resets: u64,
}

/// The live counters.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub accepted: AtomicU64,
    pub refused: AtomicU64,
    pub upstream_failures: AtomicU64,
    pub ended: AtomicU64,
    pub bytes_to_server: AtomicU64,
    pub bytes_to_client: AtomicU64,
    pub requests: AtomicU64,
    pub replies_dropped: AtomicU64,
    pub resets: AtomicU64,
    /// Requests since the `reset_every` rule was set.
    pub requests_under_rule: AtomicU64,
}

impl Counters {
    pub(super) fn snapshot(&self) -> ProxyCounters {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let accepted = get(&self.accepted);
        ProxyCounters {
            accepted,
            refused: get(&self.refused),
            upstream_failures: get(&self.upstream_failures),
            open: accepted.saturating_sub(get(&self.ended)),
            bytes_to_server: get(&self.bytes_to_server),
            bytes_to_client: get(&self.bytes_to_client),
            requests: get(&self.requests),
            replies_dropped: get(&self.replies_dropped),
            resets: get(&self.resets),
        }
    }

    pub(super) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts bytes delivered `one_way`.
    pub(super) fn delivered(&self, one_way: Direction, n: u64) {
        match one_way {
            Direction::ToClient => Self::add(&self.bytes_to_client, n),
            _ => Self::add(&self.bytes_to_server, n),
        }
    }
}

/// A small deterministic random source for the jitter (splitmix64): the same seed, the same
/// delays.
#[derive(Debug, Clone)]
pub(super) struct Jitter(u64);

impl Jitter {
    pub(super) fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A delay between zero and `max`, both included (to the nanosecond).
    pub(super) fn up_to(&mut self, max: Duration) -> Duration {
        let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        if nanos == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.next() % nanos.saturating_add(1).max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_its_bound_and_repeats_with_its_seed() {
        let max = Duration::from_millis(50);
        let mut a = Jitter::new(7);
        let delays: Vec<Duration> = (0..1000).map(|_| a.up_to(max)).collect();
        assert!(delays.iter().all(|d| *d <= max));
        assert!(delays.iter().any(|d| *d < max / 4) && delays.iter().any(|d| *d > max * 3 / 4));
        let mut b = Jitter::new(7);
        assert!(delays.iter().all(|d| *d == b.up_to(max)));
        assert_eq!(Jitter::new(1).up_to(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn byte_limits_apply_to_their_direction() {
        let faults = Faults {
            reset_after_bytes: Some((Direction::ToClient, 10)),
            ..Faults::default()
        };
        assert_eq!(faults.byte_limit(Direction::ToClient), Some(10));
        assert_eq!(faults.byte_limit(Direction::ToServer), None);
        let both = Faults {
            reset_after_bytes: Some((Direction::Both, 10)),
            ..Faults::default()
        };
        assert_eq!(both.byte_limit(Direction::ToServer), Some(10));
    }
}
