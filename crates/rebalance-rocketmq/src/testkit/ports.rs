//! Free loopback ports for the servers.

use std::net::TcpListener;

use super::TestkitError;

/// Ports reserved by holding listeners on them until the servers are about to start, so two
/// picks in one run never collide.
#[derive(Debug, Default)]
pub(crate) struct PortReservation {
    held: Vec<TcpListener>,
}

impl PortReservation {
    fn hold(&mut self, port: u16) -> Option<u16> {
        let listener = TcpListener::bind(("127.0.0.1", port)).ok()?;
        let port = listener.local_addr().ok()?.port();
        self.held.push(listener);
        Some(port)
    }

    /// Any free port.
    pub(crate) fn any(&mut self) -> Result<u16, TestkitError> {
        self.hold(0).ok_or(TestkitError::NoFreePort)
    }

    /// A free port `p` such that `p - 2` is free too (a broker also listens on its listen port
    /// minus two).
    pub(crate) fn with_minus_two(&mut self) -> Result<u16, TestkitError> {
        for _ in 0..100 {
            let mut probe = PortReservation::default();
            let Some(port) = probe.hold(0) else { continue };
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
        // Held while reserved, free once released.
        assert!(TcpListener::bind(("127.0.0.1", a - 2)).is_err());
        ports.release();
        assert!(TcpListener::bind(("127.0.0.1", a - 2)).is_ok());
    }
}
