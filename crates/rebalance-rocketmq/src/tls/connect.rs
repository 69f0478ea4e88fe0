//! [`Connection::connect_tls`]: a TCP connection and a TLS handshake, within one deadline.

use std::sync::Arc;
use std::time::Duration;

use rustls::{AlertDescription, CertificateError};
use rustls_pki_types::ServerName;
use tokio_rustls::TlsConnector;

use super::TlsConfig;
use crate::connection::{
    Connection, ConnectionConfig, ServerRequestHandler, by_deadline, connect_deadline, tcp_connect,
};
use crate::error::TransportError;

impl Connection {
    /// Connects to `addr` (`host:port`) and runs TLS over the socket, both within
    /// `connect_timeout` (one too long to add to the clock sets no limit). The server's
    /// certificate is checked against `tls`'s trust and its server name (the override, or
    /// `addr`'s host). An untrusted certificate is [`TransportError::CertificateNotTrusted`]; any
    /// other handshake failure [`TransportError::Tls`].
    pub async fn connect_tls(
        addr: &str,
        connect_timeout: Duration,
        config: ConnectionConfig,
        tls: &TlsConfig,
        handler: Arc<dyn ServerRequestHandler>,
    ) -> Result<Connection, TransportError> {
        Self::connect_tls_via(addr, addr, connect_timeout, config, tls, handler).await
    }

    /// [`connect_tls`](Self::connect_tls) to the server advertised as `addr`, dialing `dial`
    /// (its override in an [`AddressMap`](crate::AddressMap)): the certificate is checked
    /// against the name `addr` gives (or `tls`'s override), never against `dial`'s host.
    pub(crate) async fn connect_tls_via(
        addr: &str,
        dial: &str,
        connect_timeout: Duration,
        config: ConnectionConfig,
        tls: &TlsConfig,
        handler: Arc<dyn ServerRequestHandler>,
    ) -> Result<Connection, TransportError> {
        let server_name = server_name_for(tls, addr)?;
        let deadline = connect_deadline(connect_timeout);
        let stream = tcp_connect(addr, dial, deadline, connect_timeout).await?;
        let name = server_name.to_str().into_owned();
        let connector = TlsConnector::from(tls.client.clone());
        let stream = match by_deadline(deadline, connector.connect(server_name, stream)).await {
            Some(Ok(stream)) => stream,
            Some(Err(e)) => {
                let error = handshake_error(addr, &name, &e);
                tracing::warn!(addr, server_name = %name, %error, "TLS handshake failed");
                return Err(error);
            }
            None => {
                return Err(TransportError::Tls {
                    addr: addr.to_string(),
                    reason: format!(
                        "no TLS handshake within {connect_timeout:?}; does the server serve TLS on this port?"
                    ),
                });
            }
        };
        let (_, session) = stream.get_ref();
        tracing::debug!(
            addr,
            server_name = %name,
            version = ?session.protocol_version(),
            cipher_suite = ?session.negotiated_cipher_suite().map(|s| s.suite()),
            "TLS connected"
        );
        Ok(Self::from_stream(stream, addr, config, handler))
    }
}

/// The name checked in `addr`'s certificate: the override, or `addr`'s host.
pub(super) fn server_name_for(
    tls: &TlsConfig,
    addr: &str,
) -> Result<ServerName<'static>, TransportError> {
    if let Some(name) = &tls.server_name {
        return Ok(name.clone());
    }
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).map_err(|_| TransportError::Tls {
        addr: addr.to_string(),
        reason: format!(
            "`{host}` is neither a DNS name nor an IP address to check the certificate against; set a server name"
        ),
    })
}

/// What a failed handshake with `addr`, checking `name`, means.
fn handshake_error(addr: &str, name: &str, error: &std::io::Error) -> TransportError {
    let rustls_error = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    let addr = addr.to_string();
    match rustls_error {
        Some(rustls::Error::InvalidCertificate(cert)) => TransportError::CertificateNotTrusted {
            addr,
            reason: certificate_reason(cert, name),
        },
        Some(rustls::Error::AlertReceived(alert)) => TransportError::Tls {
            addr,
            reason: alert_reason(*alert),
        },
        Some(rustls::Error::InvalidMessage(message)) => TransportError::Tls {
            addr,
            reason: format!(
                "the server's answer is no TLS ({message:?}); does it serve TLS on this port?"
            ),
        },
        Some(other) => TransportError::Tls {
            addr,
            reason: other.to_string(),
        },
        None => TransportError::Tls {
            addr,
            reason: match error.kind() {
                std::io::ErrorKind::UnexpectedEof
                | std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::BrokenPipe => format!(
                    "the server closed the connection during the handshake ({error}); does it serve TLS? (a RocketMQ Rust broker needs its `tls` feature and a certificate)"
                ),
                _ => error.to_string(),
            },
        },
    }
}

/// Why a certificate is not trusted, with what to do about it.
fn certificate_reason(error: &CertificateError, name: &str) -> String {
    match error {
        CertificateError::UnknownIssuer => format!(
            "issued by an unknown certificate authority ({error}); trust the cluster's CA with ca_pem_file"
        ),
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            format!(
                "not valid for the name `{name}` ({error}); set server_name to a name the certificate holds, or give the server a certificate with this name (an IP address needs an IP subject alternative name)"
            )
        }
        CertificateError::BadSignature => format!(
            "its signature does not verify with the key of the trusted CA of its issuer's name ({error}); is the CA the one that issued it?"
        ),
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            format!("expired ({error})")
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            format!("not valid yet ({error}); is this machine's clock right?")
        }
        other => other.to_string(),
    }
}

/// Why the server refused the handshake.
fn alert_reason(alert: AlertDescription) -> String {
    match alert {
        AlertDescription::CertificateRequired
        | AlertDescription::BadCertificate
        | AlertDescription::UnknownCA
        | AlertDescription::CertificateUnknown
        | AlertDescription::AccessDenied => format!(
            "the server refused this client's certificate or its absence (alert {alert:?}); give a certificate it trusts with client_certificate_pem"
        ),
        other => format!("the server refused the handshake (alert {other:?})"),
    }
}
