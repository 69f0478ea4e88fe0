//! Free loopback ports for the servers.

use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;

use super::TestkitError;

/// Ports reserved by holding listeners on them until the servers are about to start, so two
/// picks in one run never collide.
///
/// They are picked below the kernel's range for outgoing connections' local ports when it can
/// be read (Linux), else anywhere: a server restarted on its ports (a broker stopped and
/// started again) would otherwise find one taken meanwhile by some connection of a test running
/// alongside.
#[derive(Debug, Default)]
pub(crate) struct PortReservation {
    held: Vec<TcpListener>,
}

/// The lowest port picked.
const LOWEST: u16 = 10_000;

/// The first port of the kernel's range for outgoing connections (32768 unless it says
/// otherwise), or `None` when it cannot be read.
fn ephemeral_start() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

/// A random port in `from..to`.
fn random_port(from: u16, to: u16) -> u16 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u16(from);
    from + (hasher.finish() % u64::from(to - from)) as u16
}

impl PortReservation {
    fn hold(&mut self, port: u16) -> Option<u16> {
        let listener = TcpListener::bind(("127.0.0.1", port)).ok()?;
        let port = listener.local_addr().ok()?.port();
        self.held.push(listener);
        Some(port)
    }

    /// A candidate port: below the outgoing range when it is known and leaves room, else 0
    /// (any port the kernel picks).
    fn candidate() -> u16 {
        match ephemeral_start() {
            Some(start) if start > LOWEST + 1_000 => random_port(LOWEST, start),
            _ => 0,
        }
    }

    /// Exactly `port`, if it is free.
    pub(crate) fn exactly(&mut self, port: u16) -> Result<u16, TestkitError> {
        self.hold(port).ok_or(TestkitError::PortInUse(port))
    }

    /// Any free port.
    pub(crate) fn any(&mut self) -> Result<u16, TestkitError> {
        (0..100)
            .find_map(|_| self.hold(Self::candidate()))
            .or_else(|| self.hold(0))
            .ok_or(TestkitError::NoFreePort)
    }

    /// A free port `p` such that `p - 2` is free too (a broker also listens on its listen port
    /// minus two).
    pub(crate) fn with_minus_two(&mut self) -> Result<u16, TestkitError> {
        for _ in 0..100 {
            let mut probe = PortReservation::default();
            let Some(port) = probe.hold(Self::candidate()) else {
                continue;
            };
            if port < 1026 {
                continue;
            }
            if probe.hold(port - 2).is_some() {
                self.held.append(&mut probe.held);
                return Ok(port);
            }
        }
        Err(TestkitError::NoFreePort)
    }

    /// Lets the ports go, right before the servers bind them.
    pub(crate) fn release(self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_distinct_ports_with_room_below() {
        let mut ports = PortReservation::default();
        let a = ports.with_minus_two().unwrap();
        let b = ports.with_minus_two().unwrap();
        let c = ports.any().unwrap();
        let all = [a, a - 2, b, b - 2, c];
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len(), "{all:?}");
        // Below the range of outgoing connections' ports, where the kernel says.
        if let Some(start) = ephemeral_start().filter(|&s| s > LOWEST + 1_000) {
            assert!(
                all.iter().all(|&p| (LOWEST - 2..start).contains(&p)),
                "{all:?}"
            );
        }
        // Held while reserved, free once released.
        assert!(TcpListener::bind(("127.0.0.1", a - 2)).is_err());
        assert!(matches!(
            PortReservation::default().exactly(c),
            Err(TestkitError::PortInUse(p)) if p == c
        ));
        ports.release();
        assert!(TcpListener::bind(("127.0.0.1", a - 2)).is_ok());
    }
}
