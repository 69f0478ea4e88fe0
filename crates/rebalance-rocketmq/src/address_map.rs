//! [`AddressMap`]: the addresses servers advertise, mapped to the addresses this client dials.
//!
//! A deployment feature. The brokers' addresses come from the name servers' routes, as each
//! broker registered them (`brokerIP1:listenPort`). A client that cannot reach a broker at the
//! address it advertises (a broker behind NAT or port forwarding, in another network namespace,
//! behind a sidecar or a local tunnel, in a container publishing its port under another
//! number) maps the advertised address to the one it can dial, without changing the broker's
//! configuration for every other client.
//!
//! The map is exact: the advertised `host:port` as the route (or the name server list) spells
//! it, to one `host:port` to dial, one hop (a dialed address is never looked up again). It
//! applies to every connection of a [`RemotingClient`](crate::RemotingClient), so to the
//! [`NameServerClient`](crate::NameServerClient), every
//! [`BrokerClient`](crate::BrokerClient), [`MessageSender`](crate::MessageSender) and
//! [`Admin`](crate::Admin) built on it: name server addresses go through it too (they are the
//! user's own, so an entry is seldom needed for them, but the rule is the same for every
//! address). Everything else keeps the advertised address: the connection's identity (one
//! connection per advertised address), the logs and errors (which name the dialed address as
//! well), the registrations, and the TLS server name (feature `tls`): the certificate is still
//! checked against the advertised host, or the configured
//! `server_name` (`TlsConfigBuilder::server_name`), never against the address dialed,
//! so a tunnel cannot make the client trust a certificate it would refuse on a direct
//! connection.
//!
//! ```
//! use rebalance_rocketmq::{AddressMap, BrokerClient, NameServerClient};
//!
//! # fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // broker-a registers 10.0.0.5:10911, which this host reaches through a port forward.
//! let name_server = NameServerClient::builder("nameserver.example:9876")
//!     .connect_via("10.0.0.5:10911", "127.0.0.1:20911")
//!     .build()?;
//! let brokers = BrokerClient::new(name_server.clone()); // dials 127.0.0.1:20911 for broker-a
//! assert_eq!(
//!     name_server.remoting().address_map().dial_address("10.0.0.5:10911"),
//!     "127.0.0.1:20911"
//! );
//!
//! // The same map, built on its own (from a `--connect-via ADVERTISED=ACTUAL` flag, say).
//! let (advertised, actual) = AddressMap::parse_entry("10.0.0.5:10911=127.0.0.1:20911")?;
//! let map = AddressMap::new().with(advertised, actual)?;
//! assert_eq!(map.dial_address("10.0.0.6:10911"), "10.0.0.6:10911"); // not mapped
//! # Ok(()) }
//! # demo().unwrap();
//! ```

use std::collections::BTreeMap;

use crate::error::AddressError;

/// Advertised server addresses mapped to the addresses to dial (see the
/// [module documentation](self)). Exact match of `host:port` strings; an address not in the
/// map is dialed as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressMap {
    entries: BTreeMap<String, String>,
}

impl AddressMap {
    /// An empty map: every address is dialed as advertised.
    pub fn new() -> Self {
        Self::default()
    }

    /// This map with `advertised` dialed at `actual`. Both must be `host:port`; mapping one
    /// advertised address to two different addresses is an error
    /// ([`AddressError::ConflictingOverride`]), mapping it twice to the same one is not.
    pub fn with(
        mut self,
        advertised: impl Into<String>,
        actual: impl Into<String>,
    ) -> Result<Self, AddressError> {
        self.insert(advertised, actual)?;
        Ok(self)
    }

    /// Dials `advertised` at `actual` from now on (see [`with`](Self::with)).
    pub fn insert(
        &mut self,
        advertised: impl Into<String>,
        actual: impl Into<String>,
    ) -> Result<(), AddressError> {
        let advertised = checked(advertised.into())?;
        let actual = checked(actual.into())?;
        match self.entries.get(&advertised) {
            Some(first) if *first != actual => Err(AddressError::ConflictingOverride {
                advertised,
                first: first.clone(),
                second: actual,
            }),
            _ => {
                self.entries.insert(advertised, actual);
                Ok(())
            }
        }
    }

    /// `ADVERTISED=ACTUAL` (both `host:port`, spaces around either trimmed) as the pair
    /// [`with`](Self::with) takes: the form of a command-line flag.
    ///
    /// ```
    /// use rebalance_rocketmq::AddressMap;
    ///
    /// assert_eq!(
    ///     AddressMap::parse_entry("10.0.0.5:10911=127.0.0.1:20911").unwrap(),
    ///     ("10.0.0.5:10911".to_string(), "127.0.0.1:20911".to_string())
    /// );
    /// assert!(AddressMap::parse_entry("10.0.0.5:10911").is_err());
    /// assert!(AddressMap::parse_entry("10.0.0.5=127.0.0.1:20911").is_err());
    /// ```
    pub fn parse_entry(text: &str) -> Result<(String, String), AddressError> {
        let Some((advertised, actual)) = text.split_once('=') else {
            return Err(AddressError::MalformedOverride(text.to_string()));
        };
        let advertised = checked(advertised.trim().to_string())?;
        let actual = checked(actual.trim().to_string())?;
        Ok((advertised, actual))
    }

    /// The address to dial for `advertised`: its entry, or `advertised` itself.
    pub fn dial_address<'a>(&'a self, advertised: &'a str) -> &'a str {
        self.entries
            .get(advertised)
            .map_or(advertised, String::as_str)
    }

    /// Whether `advertised` has an entry.
    pub fn maps(&self, advertised: &str) -> bool {
        self.entries.contains_key(advertised)
    }

    /// Whether the map has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many entries the map has.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entries, `(advertised, actual)`, sorted by advertised address.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(a, b)| (a.as_str(), b.as_str()))
    }
}

/// `addr` if it is `host:port` (a non-empty host, a port that fits 16 bits).
fn checked(addr: String) -> Result<String, AddressError> {
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(addr),
        _ => Err(AddressError::Malformed(addr)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_exactly_one_hop_and_leaves_the_rest_alone() {
        let map = AddressMap::new()
            .with("10.0.0.5:10911", "127.0.0.1:20911")
            .unwrap()
            .with("127.0.0.1:20911", "127.0.0.1:30911")
            .unwrap();
        assert_eq!(map.dial_address("10.0.0.5:10911"), "127.0.0.1:20911");
        // One hop: the dialed address is not looked up again.
        assert_eq!(map.dial_address("127.0.0.1:20911"), "127.0.0.1:30911");
        // Exact: another port, or the host alone, is not mapped.
        assert_eq!(map.dial_address("10.0.0.5:10912"), "10.0.0.5:10912");
        assert_eq!(map.dial_address("10.0.0.5"), "10.0.0.5");
        assert!(map.maps("10.0.0.5:10911") && !map.maps("10.0.0.5:10912"));
        assert_eq!(map.len(), 2);
    }

    #[test]
    fn refuses_what_cannot_be_dialed_and_conflicting_entries() {
        let map = AddressMap::new();
        assert_eq!(
            map.clone().with("10.0.0.5", "127.0.0.1:1"),
            Err(AddressError::Malformed("10.0.0.5".into()))
        );
        assert_eq!(
            map.clone().with("10.0.0.5:1", "127.0.0.1:99999"),
            Err(AddressError::Malformed("127.0.0.1:99999".into()))
        );
        let map = map.with("a:1", "b:2").unwrap().with("a:1", "b:2").unwrap();
        assert_eq!(map.len(), 1, "the same entry twice is one entry");
        assert_eq!(
            map.with("a:1", "c:3"),
            Err(AddressError::ConflictingOverride {
                advertised: "a:1".into(),
                first: "b:2".into(),
                second: "c:3".into(),
            })
        );
    }

    #[test]
    fn parses_the_flag_form() {
        assert_eq!(
            AddressMap::parse_entry(" a:1 = [::1]:2 ").unwrap(),
            ("a:1".to_string(), "[::1]:2".to_string())
        );
        assert_eq!(
            AddressMap::parse_entry("a:1"),
            Err(AddressError::MalformedOverride("a:1".into()))
        );
        assert_eq!(
            AddressMap::parse_entry("a:1=b"),
            Err(AddressError::Malformed("b".into()))
        );
        let message = AddressMap::parse_entry("x").unwrap_err().to_string();
        assert!(message.contains("ADVERTISED=ACTUAL"), "{message}");
    }
}
