//! TLS on every connection of a [`RemotingClient`](crate::RemotingClient) (feature `tls`).
//!
//! As in the Java client (`ClientConfig.useTLS`), TLS applies to every connection of the client:
//! the name servers and the brokers found through them. Build a [`TlsConfig`] once and give it
//! to [`RemotingClient::with_tls`](crate::RemotingClient::with_tls); the
//! [`NameServerClient`](crate::NameServerClient) and every
//! [`BrokerClient`](crate::BrokerClient) built on that client share it.
//!
//! - **Whom to trust**: the platform's root certificates (the default), one or more private CAs
//!   ([`ca_pem`](TlsConfigBuilder::ca_pem), [`ca_pem_file`](TlsConfigBuilder::ca_pem_file)),
//!   or, for tests only, any certificate
//!   ([`insecure_trust_any_certificate`](TlsConfigBuilder::insecure_trust_any_certificate), what
//!   Java's `tls.test.mode.enable=true` does).
//! - **Which name to check**: the host of the address connected to, unless
//!   [`server_name`](TlsConfigBuilder::server_name) overrides it. Brokers are reached at the IP
//!   address they register, so their certificates need that IP address as a subject alternative
//!   name, or the cluster's certificates share a DNS name that the override gives.
//! - **Mutual TLS**: a client certificate and key
//!   ([`client_certificate_pem`](TlsConfigBuilder::client_certificate_pem)) for servers that
//!   require one (`tls.server.need.client.auth=require`).
//!
//! A server whose certificate is not trusted fails the connection attempt with
//! [`TransportError::CertificateNotTrusted`](crate::TransportError::CertificateNotTrusted)
//! (`certificate not trusted: ADDR: why`); any other handshake failure (a server that does not
//! speak TLS, a refused client certificate) with
//! [`TransportError::Tls`](crate::TransportError::Tls). Either is a failed connection attempt:
//! the client backs off before the next one, and calls meanwhile fail at once with
//! [`TransportError::BackingOff`](crate::TransportError::BackingOff), whose `last_error` keeps
//! the text.
//!
//! The crypto provider is rustls' `ring`.
//!
//! ```no_run
//! # fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use rebalance_rocketmq::tls::TlsConfig;
//! use rebalance_rocketmq::{BrokerClient, ClientConfig, NameServerClient, RemotingClient};
//!
//! let tls = TlsConfig::builder()
//!     .ca_pem_file("/etc/rocketmq/ca.pem")
//!     .server_name("rocketmq.internal")
//!     .build()?;
//! let remoting = RemotingClient::with_tls(ClientConfig::default(), tls);
//! let name_server = NameServerClient::new(remoting, "10.0.0.1:9876;10.0.0.2:9876")?;
//! let brokers = BrokerClient::new(name_server.clone()); // TLS to the brokers too
//! # Ok(()) }
//! ```

mod config;
mod connect;
mod verify;

#[cfg(test)]
mod tests;

pub use config::{TlsConfig, TlsConfigBuilder, TlsConfigError};
