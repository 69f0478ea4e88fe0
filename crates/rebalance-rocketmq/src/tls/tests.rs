//! TLS against in-process servers speaking the remoting protocol, with certificates made here.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rebalance_runtime::{RemoteError, RouteError};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::codec::Framed;

use super::connect::server_name_for;
use super::*;
use crate::client::{ClientConfig, RemotingClient};
use crate::codec::RemotingCodec;
use crate::command::{RemotingCommand, request_code};
use crate::connection::{Connection, ConnectionConfig, IgnoreServerRequests};
use crate::error::TransportError;
use crate::name_server::NameServerClient;

/// A certificate authority made for one test.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key.
struct Leaf {
    cert: CertificateDer<'static>,
    key: PrivatePkcs8KeyDer<'static>,
    cert_pem: String,
    key_pem: String,
}

impl Ca {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Self { issuer }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate for `names` (DNS names or IP addresses).
    fn leaf(&self, names: &[&str]) -> Leaf {
        self.leaf_with(names, |_| {})
    }

    fn leaf_with(&self, names: &[&str], edit: impl FnOnce(&mut CertificateParams)) -> Leaf {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, "leaf");
        edit(&mut params);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert: cert.der().clone(),
            key: PrivatePkcs8KeyDer::from(key.serialize_der()),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A loopback TLS server answering every request with code 0 and a remark naming the SNI it
/// got and whether the client showed a certificate.
struct Server {
    addr: String,
    /// TCP connections accepted (handshakes attempted).
    accepted: Arc<AtomicUsize>,
}

async fn tls_server(leaf: &Leaf, client_ca: Option<&Ca>) -> Server {
    let versions = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let verified = match client_ca {
        None => versions.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca.issuer.der().clone()).unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider(),
            )
            .build()
            .unwrap();
            versions.with_client_cert_verifier(verifier)
        }
    };
    let config = verified
        .with_single_cert(
            vec![leaf.cert.clone()],
            PrivateKeyDer::Pkcs8(leaf.key.clone_key()),
        )
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(socket).await else {
                    return;
                };
                let (_, session) = stream.get_ref();
                let remark = format!(
                    "sni={:?} client_cert={}",
                    session.server_name(),
                    session.peer_certificates().is_some()
                );
                let mut framed = Framed::new(stream, RemotingCodec::default());
                while let Some(Ok(request)) = framed.next().await {
                    let answer = RemotingCommand::response(0, request.opaque, Some(remark.clone()));
                    if framed.send(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Server { addr, accepted }
}

/// A client with short timeouts and a long backoff (a second attempt within a test would be a
/// reconnection storm).
fn client(tls: TlsConfig) -> RemotingClient {
    RemotingClient::with_tls(
        ClientConfig {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            reconnect_backoff_min: Duration::from_secs(60),
            reconnect_backoff_max: Duration::from_secs(60),
            ..ClientConfig::default()
        },
        tls,
    )
}

async fn ask(client: &RemotingClient, addr: &str) -> Result<String, TransportError> {
    let answer = client
        .invoke(addr, RemotingCommand::request(request_code::HEART_BEAT))
        .await?;
    Ok(answer.remark.unwrap_or_default())
}

#[tokio::test]
async fn a_server_whose_ca_is_trusted_answers_over_tls() {
    let ca = Ca::new("cluster CA");
    let server = tls_server(&ca.leaf(&["127.0.0.1"]), None).await;
    let tls = TlsConfig::builder().ca_pem(ca.pem()).build().unwrap();
    let client = client(tls);
    assert!(client.tls().is_some());
    // An IP address is checked against the certificate's IP names and sent as no SNI.
    assert_eq!(
        ask(&client, &server.addr).await.unwrap(),
        "sni=None client_cert=false"
    );
    // The connection is kept for the next request.
    ask(&client, &server.addr).await.unwrap();
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_ca_file_is_read_at_build() {
    let ca = Ca::new("cluster CA");
    let server = tls_server(&ca.leaf(&["127.0.0.1"]), None).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ca.pem");
    std::fs::write(&path, ca.pem()).unwrap();
    let tls = TlsConfig::builder().ca_pem_file(&path).build().unwrap();
    std::fs::remove_file(&path).unwrap();
    ask(&client(tls), &server.addr).await.unwrap();
}

/// An untrusted certificate fails the attempt with a typed error naming the address, at the
/// first call (here a name server's route); the calls during the backoff fail at once with the
/// same text, without connecting again.
#[tokio::test]
async fn an_untrusted_certificate_is_a_typed_error_and_backs_off() {
    let ours = Ca::new("our CA");
    let theirs = Ca::new("someone else's CA");
    let server = tls_server(&theirs.leaf(&["127.0.0.1"]), None).await;
    let client = client(TlsConfig::builder().ca_pem(ours.pem()).build().unwrap());

    let first = ask(&client, &server.addr).await.unwrap_err();
    let TransportError::CertificateNotTrusted { addr, reason } = &first else {
        panic!("not a certificate error: {first:?}");
    };
    assert_eq!(addr, &server.addr);
    assert!(reason.contains("unknown certificate authority"), "{reason}");
    let text = first.to_string();
    assert!(
        text.starts_with(&format!("certificate not trusted: {}", server.addr)),
        "{text}"
    );

    let name_server = NameServerClient::new(client.clone(), &server.addr).unwrap();
    let started = tokio::time::Instant::now();
    let route = name_server.route("TopicTest").await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1), "{route:?}");
    let RouteError::NameServer(RemoteError::Unreachable(why)) = &route else {
        panic!("{route:?}");
    };
    assert!(why.contains("certificate not trusted"), "{why}");
    assert!(why.contains(&server.addr), "{why}");
    match ask(&client, &server.addr).await.unwrap_err() {
        TransportError::BackingOff { last_error, .. } => {
            assert!(
                last_error.contains("certificate not trusted"),
                "{last_error}"
            )
        }
        other => panic!("not backing off: {other:?}"),
    }
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_server_name_override_checks_the_name_the_certificate_holds() {
    let ca = Ca::new("cluster CA");
    let server = tls_server(&ca.leaf(&["rocketmq.internal"]), None).await;

    let by_address = client(TlsConfig::builder().ca_pem(ca.pem()).build().unwrap());
    match ask(&by_address, &server.addr).await.unwrap_err() {
        TransportError::CertificateNotTrusted { reason, .. } => {
            assert!(
                reason.contains("not valid for the name `127.0.0.1`"),
                "{reason}"
            )
        }
        other => panic!("not a certificate error: {other:?}"),
    }

    let tls = TlsConfig::builder()
        .ca_pem(ca.pem())
        .server_name("rocketmq.internal")
        .build()
        .unwrap();
    assert_eq!(tls.server_name().as_deref(), Some("rocketmq.internal"));
    let by_name = client(tls);
    assert_eq!(
        ask(&by_name, &server.addr).await.unwrap(),
        "sni=Some(\"rocketmq.internal\") client_cert=false"
    );
}

/// A broker behind a port forward: the client dials the forward, but checks the certificate
/// against the name the broker advertises, never against the address it dialed (a tunnel must
/// not make the client trust what it would refuse on a direct connection).
#[tokio::test]
async fn an_address_override_checks_the_advertised_name_not_the_dialed_one() {
    let ca = Ca::new("cluster CA");
    let server = tls_server(&ca.leaf(&["broker-a.internal"]), None).await;
    let port = server.addr.rsplit_once(':').unwrap().1;
    let advertised = format!("broker-a.internal:{port}");
    let elsewhere = format!("broker-b.internal:{port}");
    let map = crate::AddressMap::new()
        .with(advertised.as_str(), server.addr.as_str())
        .unwrap()
        .with(elsewhere.as_str(), server.addr.as_str())
        .unwrap();
    let client =
        client(TlsConfig::builder().ca_pem(ca.pem()).build().unwrap()).with_address_map(map);
    assert_eq!(
        ask(&client, &advertised).await.unwrap(),
        "sni=Some(\"broker-a.internal\") client_cert=false"
    );
    // The same server under another advertised name: its certificate does not hold that name.
    match ask(&client, &elsewhere).await.unwrap_err() {
        TransportError::CertificateNotTrusted { addr, reason } => {
            assert_eq!(addr, elsewhere);
            assert!(reason.contains("`broker-b.internal`"), "{reason}");
        }
        other => panic!("not a certificate error: {other:?}"),
    }
    assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_expired_certificate_is_not_trusted() {
    let ca = Ca::new("cluster CA");
    let expired = ca.leaf_with(&["127.0.0.1"], |params| {
        params.not_before = rcgen::date_time_ymd(2019, 1, 1);
        params.not_after = rcgen::date_time_ymd(2020, 1, 1);
    });
    let server = tls_server(&expired, None).await;
    let client = client(TlsConfig::builder().ca_pem(ca.pem()).build().unwrap());
    match ask(&client, &server.addr).await.unwrap_err() {
        TransportError::CertificateNotTrusted { reason, .. } => {
            assert!(reason.starts_with("expired"), "{reason}")
        }
        other => panic!("not a certificate error: {other:?}"),
    }
}

/// Java's test mode: a server's self-made certificate, trusted by no one, is accepted.
#[tokio::test]
async fn the_insecure_mode_trusts_any_certificate() {
    let self_made = Ca::new("a server's own CA");
    let server = tls_server(&self_made.leaf(&["localhost"]), None).await;
    let verifying = client(
        TlsConfig::builder()
            .ca_pem(Ca::new("x").pem())
            .build()
            .unwrap(),
    );
    assert!(matches!(
        ask(&verifying, &server.addr).await,
        Err(TransportError::CertificateNotTrusted { .. })
    ));
    let tls = TlsConfig::builder()
        .insecure_trust_any_certificate()
        .build()
        .unwrap();
    assert!(tls.trusts_any_certificate());
    assert!(format!("{tls:?}").contains("INSECURE"));
    ask(&client(tls), &server.addr).await.unwrap();
}

#[tokio::test]
async fn a_client_certificate_is_shown_to_a_server_that_requires_one() {
    let ca = Ca::new("cluster CA");
    let server = tls_server(&ca.leaf(&["127.0.0.1"]), Some(&ca)).await;
    let identity = ca.leaf(&["consumer-1"]);
    let tls = TlsConfig::builder()
        .ca_pem(ca.pem())
        .client_certificate_pem(identity.cert_pem.clone(), identity.key_pem.clone())
        .build()
        .unwrap();
    assert_eq!(
        ask(&client(tls), &server.addr).await.unwrap(),
        "sni=None client_cert=true"
    );

    // Without one, the server refuses: the request fails with the server's alert (TLS 1.3
    // tells the client after its side of the handshake, so the connection closes with it).
    let anonymous = client(TlsConfig::builder().ca_pem(ca.pem()).build().unwrap());
    let error = ask(&anonymous, &server.addr).await.unwrap_err();
    assert!(
        error.to_string().contains("CertificateRequired"),
        "{error:?}"
    );
}

/// A server that does not speak TLS on the port: a handshake error, not a hang.
#[tokio::test]
async fn a_plaintext_server_is_a_handshake_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut framed = Framed::new(socket, RemotingCodec::default());
                while let Some(Ok(request)) = framed.next().await {
                    let answer = RemotingCommand::response(0, request.opaque, None);
                    if framed.send(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let tls = TlsConfig::builder()
        .insecure_trust_any_certificate()
        .build()
        .unwrap();
    let error = Connection::connect_tls(
        &addr,
        Duration::from_secs(5),
        ConnectionConfig::default(),
        &tls,
        Arc::new(IgnoreServerRequests),
    )
    .await
    .unwrap_err();
    let TransportError::Tls { addr: at, reason } = &error else {
        panic!("not a handshake error: {error:?}");
    };
    assert_eq!(at, &addr);
    assert!(reason.contains("does it serve TLS"), "{reason}");
}

/// A server that speaks first, in plaintext (a RocketMQ answer): its address.
async fn plaintext_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let mut framed = Framed::new(socket, RemotingCodec::default());
            let hello = RemotingCommand::response(0, 1, Some("plaintext".into()));
            let _ = framed.send(hello).await;
            tokio::spawn(async move { while framed.next().await.is_some() {} });
        }
    });
    addr
}

/// A connect timeout too long to add to the clock means no deadline for the TCP connection and
/// the handshake, not an overflow panic.
#[tokio::test]
async fn a_connect_timeout_too_long_for_the_clock_is_no_deadline() {
    let addr = plaintext_server().await;
    let tls = TlsConfig::builder()
        .insecure_trust_any_certificate()
        .build()
        .unwrap();
    for timeout in [
        Duration::MAX,
        Duration::from_secs(9_999_999_999_999_999_999),
    ] {
        let error = Connection::connect_tls(
            &addr,
            timeout,
            ConnectionConfig::default(),
            &tls,
            Arc::new(IgnoreServerRequests),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&error, TransportError::Tls { reason, .. } if reason.contains("no TLS")),
            "{timeout:?}: {error:?}"
        );
    }
}

/// A server that speaks first, in plaintext: the answer is no TLS record.
#[tokio::test]
async fn a_plaintext_answer_is_a_handshake_error() {
    let addr = plaintext_server().await;
    let tls = TlsConfig::builder()
        .insecure_trust_any_certificate()
        .build()
        .unwrap();
    let error = Connection::connect_tls(
        &addr,
        Duration::from_secs(5),
        ConnectionConfig::default(),
        &tls,
        Arc::new(IgnoreServerRequests),
    )
    .await
    .unwrap_err();
    match error {
        TransportError::Tls { reason, .. } => {
            assert!(reason.contains("the server's answer is no TLS"), "{reason}")
        }
        other => panic!("not a handshake error: {other:?}"),
    }
}

/// A server that accepts and then says nothing: the handshake gives up at the connect timeout.
#[tokio::test]
async fn a_silent_server_ends_the_handshake_at_the_connect_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            keep.lock().unwrap().push(socket);
        }
    });
    let tls = TlsConfig::builder()
        .insecure_trust_any_certificate()
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let error = Connection::connect_tls(
        &addr,
        Duration::from_millis(300),
        ConnectionConfig::default(),
        &tls,
        Arc::new(IgnoreServerRequests),
    )
    .await
    .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    match error {
        TransportError::Tls { reason, .. } => {
            assert!(reason.contains("no TLS handshake within"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_name_checked_is_the_host_unless_overridden() {
    let tls = TlsConfig::builder()
        .insecure_trust_any_certificate()
        .build()
        .unwrap();
    let name = |s: &str| ServerName::try_from(s.to_string()).unwrap();
    assert_eq!(
        server_name_for(&tls, "10.0.0.1:9876").unwrap(),
        name("10.0.0.1")
    );
    assert_eq!(server_name_for(&tls, "[::1]:9876").unwrap(), name("::1"));
    assert_eq!(
        server_name_for(&tls, "broker-a.example:10911").unwrap(),
        name("broker-a.example")
    );
    assert!(matches!(
        server_name_for(&tls, "bad_host!:1"),
        Err(TransportError::Tls { .. })
    ));
    let tls = TlsConfig::builder()
        .insecure_trust_any_certificate()
        .server_name("rocketmq.internal")
        .build()
        .unwrap();
    assert_eq!(
        server_name_for(&tls, "10.0.0.1:9876").unwrap(),
        name("rocketmq.internal")
    );
}

#[test]
fn unusable_configurations_are_typed_errors() {
    let ca = Ca::new("cluster CA");
    let err = |b: TlsConfigBuilder| b.build().unwrap_err();
    assert!(matches!(
        err(TlsConfig::builder().ca_pem("not a certificate")),
        TlsConfigError::Empty { .. }
    ));
    let truncated = ca.pem().replace("-----END CERTIFICATE-----", "");
    assert!(matches!(
        err(TlsConfig::builder().ca_pem(truncated)),
        TlsConfigError::Pem { .. }
    ));
    match err(TlsConfig::builder().ca_pem_file("/nonexistent/ca.pem")) {
        TlsConfigError::Read { what, .. } => {
            assert!(what.contains("/nonexistent/ca.pem"), "{what}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err(TlsConfig::builder()
            .ca_pem(ca.pem())
            .insecure_trust_any_certificate()),
        TlsConfigError::Conflict
    );
    assert_eq!(
        err(TlsConfig::builder()
            .ca_pem(ca.pem())
            .server_name("no spaces allowed")),
        TlsConfigError::ServerName("no spaces allowed".into())
    );
    let identity = ca.leaf(&["consumer-1"]);
    assert!(matches!(
        err(TlsConfig::builder()
            .ca_pem(ca.pem())
            .client_certificate_pem(identity.cert_pem.clone(), identity.cert_pem.clone())),
        TlsConfigError::Empty { expected, .. } if expected.starts_with("private key")
    ));
}
