//! TLS against the real servers. The name server runs in its TLS test mode (it makes itself a
//! self-signed certificate and serves TLS beside plaintext on its port). The installed broker is
//! built without TLS, so it runs behind a loopback TLS terminator written here: the broker
//! registers 127.0.0.2 with the name server, and the terminator, on 127.0.0.2 and the broker's
//! port, takes TLS with a certificate made here and forwards the bytes to the broker on
//! 127.0.0.1.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rebalance_rocketmq::testkit::{ClusterOptions, TestCluster};
use rebalance_rocketmq::tls::TlsConfig;
use rebalance_rocketmq::{
    Admin, BrokerClient, ClientConfig, NameServerClient, RemotingClient, TransportError,
};
use rebalance_runtime::{
    Consumer, GroupDirectory, ListenerError, QueueLease, QueueListener, RemovedQueue,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// Where the brokers say they are: the terminator's address.
const ADVERTISED: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const WITHIN: Duration = Duration::from_secs(20);

fn options() -> ClusterOptions {
    ClusterOptions {
        namesrv_tls_test_mode: true,
        broker_advertised_ip: Some(ADVERTISED),
        ..ClusterOptions::default()
    }
}

/// A client whose every connection runs TLS, trusting any certificate (Java's test mode): the
/// name server's test certificate is self-signed.
fn test_mode_client() -> RemotingClient {
    let tls = TlsConfig::builder()
        .insecure_trust_any_certificate()
        .build()
        .unwrap();
    RemotingClient::with_tls(short_timeouts(), tls)
}

fn short_timeouts() -> ClientConfig {
    ClientConfig {
        connect_timeout: Duration::from_secs(3),
        request_timeout: Duration::from_secs(3),
        ..ClientConfig::default()
    }
}

/// A certificate authority of the test's own.
fn test_ca() -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "tls_real_servers test CA");
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// A certificate for `ip` issued by `ca`, and its key.
fn identity(
    ca: &CertifiedIssuer<'static, KeyPair>,
    ip: Ipv4Addr,
) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec![ip.to_string()])
        .unwrap()
        .signed_by(&key, ca)
        .unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    (cert.der().clone(), key)
}

/// A TLS terminator on `listen` in front of the plaintext server at `upstream`.
struct Terminator {
    /// Handshakes completed.
    handshakes: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for Terminator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn terminator(
    listen: SocketAddr,
    upstream: String,
    (cert, key): (CertificateDer<'static>, PrivateKeyDer<'static>),
) -> Terminator {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(listen).await.unwrap();
    let handshakes = Arc::new(AtomicUsize::new(0));
    let counter = handshakes.clone();
    let task = tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let (acceptor, upstream, counter) =
                (acceptor.clone(), upstream.clone(), counter.clone());
            tokio::spawn(async move {
                let accepted = tokio::time::timeout(WITHIN, acceptor.accept(socket)).await;
                let Ok(Ok(mut tls)) = accepted else {
                    return;
                };
                counter.fetch_add(1, Ordering::SeqCst);
                let Ok(mut plain) = TcpStream::connect(&upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    Terminator { handshakes, task }
}

/// Keeps nothing: the test reads the consumer's assignment.
struct NoConsumption;

#[async_trait]
impl QueueListener for NoConsumption {
    async fn queues_added(&self, _: &str, _: &[QueueLease]) -> Result<(), ListenerError> {
        Ok(())
    }

    async fn queues_removed(&self, _: &str, _: &[RemovedQueue]) -> Result<(), ListenerError> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_name_server_in_test_mode_serves_routes_over_tls() {
    common::init_tracing();
    let cluster = TestCluster::start_with(options()).unwrap();
    let topic = "tls-route";
    cluster.create_topic(topic, 4).await.unwrap();

    let name_server = NameServerClient::new(test_mode_client(), &cluster.namesrv_addr()).unwrap();
    let route = tokio::time::timeout(WITHIN, name_server.route(topic))
        .await
        .expect("no route within the bound")
        .unwrap();
    assert_eq!(route.subscribable_queues(topic).len(), 4);
    // The broker is routed at the advertised address.
    let broker = &route.broker_datas[0].broker_addrs[&0];
    assert!(broker.starts_with("127.0.0.2:"), "{broker}");

    // Verifying the certificate: the name server's own is trusted by no CA of ours, which is a
    // typed error naming the address, at once, not a hang.
    let tls = TlsConfig::builder()
        .ca_pem(test_ca().pem())
        .build()
        .unwrap();
    let remoting = RemotingClient::with_tls(short_timeouts(), tls);
    let error = tokio::time::timeout(
        WITHIN,
        remoting.invoke(
            &cluster.namesrv_addr(),
            rebalance_rocketmq::RemotingCommand::request(
                rebalance_rocketmq::request_code::GET_ROUTEINFO_BY_TOPIC,
            )
            .with_ext("topic", topic),
        ),
    )
    .await
    .expect("no answer within the bound")
    .unwrap_err();
    match &error {
        TransportError::CertificateNotTrusted { addr, reason } => {
            assert_eq!(addr, &cluster.namesrv_addr());
            assert!(reason.contains("unknown certificate authority"), "{reason}");
        }
        other => panic!("not a certificate error: {other:?}"),
    }
    assert!(
        error.to_string().starts_with("certificate not trusted: "),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_with_tls_gets_its_route_and_queues_through_tls() {
    common::init_tracing();
    let cluster = TestCluster::start_with(options()).unwrap();
    let topic = "tls-consume";
    let group = "tls-it";
    cluster.create_topic(topic, 4).await.unwrap();
    let broker_port: u16 = cluster
        .first_broker_addr()
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .unwrap();
    let ca = test_ca();
    let front = terminator(
        SocketAddr::from((ADVERTISED, broker_port)),
        cluster.first_broker_addr(),
        identity(&ca, ADVERTISED),
    )
    .await;

    // The broker through the terminator, verifying its certificate (an IP address name) with
    // our CA: a private cluster's setup.
    let verified = TlsConfig::builder().ca_pem(ca.pem()).build().unwrap();
    let admin = Admin::new(RemotingClient::with_tls(short_timeouts(), verified));
    let advertised = format!("{ADVERTISED}:{broker_port}");
    let max = tokio::time::timeout(WITHIN, admin.max_offset(&advertised, topic, 0))
        .await
        .expect("no answer within the bound")
        .unwrap();
    assert_eq!(max, 0);
    let after_admin = front.handshakes.load(Ordering::SeqCst);
    assert_eq!(after_admin, 1);

    // A consumer whose every connection runs TLS: its route from the name server, its
    // heartbeat, member list and offsets at the broker.
    let name_server = NameServerClient::new(test_mode_client(), &cluster.namesrv_addr()).unwrap();
    let brokers = BrokerClient::new(name_server.clone());
    let id = common::client_id("tls");
    let handle = Consumer::builder(group)
        .client_id(id.clone())
        .subscribe(topic)
        .consume_retry_topic(false)
        .name_server(Arc::new(name_server))
        .directory(Arc::new(brokers.clone()))
        .offset_store(Arc::new(brokers.clone()))
        .listener(Arc::new(NoConsumption))
        .start()
        .await
        .unwrap();
    let held = common::eventually("the consumer holds the topic's 4 queues", WITHIN, || {
        let assignment = handle.assignment();
        async move {
            let held = assignment.iter().filter(|q| &*q.topic == topic).count();
            (held == 4).then_some(held)
        }
    })
    .await;
    assert_eq!(held, 4);
    let members = tokio::time::timeout(WITHIN, brokers.consumer_ids(group, topic))
        .await
        .expect("no member list within the bound")
        .unwrap();
    assert_eq!(members, vec![id]);
    assert!(
        front.handshakes.load(Ordering::SeqCst) > after_admin,
        "the consumer did not reach the broker through the terminator"
    );
    handle.shutdown().await;
}

/// A consumer whose TLS settings cannot work (the name server's certificate is trusted by no CA
/// it was given) does not hang and is not silent: `ready` fails within its bound, naming the
/// topic and the certificate error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_error_is_what_ready_reports() {
    common::init_tracing();
    let cluster = TestCluster::start_with(options()).unwrap();
    let topic = "tls-untrusted";
    cluster.create_topic(topic, 2).await.unwrap();
    let tls = TlsConfig::builder()
        .ca_pem(test_ca().pem())
        .build()
        .unwrap();
    let name_server = NameServerClient::new(
        RemotingClient::with_tls(short_timeouts(), tls),
        &cluster.namesrv_addr(),
    )
    .unwrap();
    let brokers = BrokerClient::new(name_server.clone());
    let handle = Consumer::builder("tls-untrusted-group")
        .client_id(common::client_id("untrusted"))
        .subscribe(topic)
        .consume_retry_topic(false)
        .name_server(Arc::new(name_server))
        .directory(Arc::new(brokers.clone()))
        .offset_store(Arc::new(brokers))
        .listener(Arc::new(NoConsumption))
        .start()
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let error = handle
        .ready(Duration::from_secs(5))
        .await
        .expect_err("a consumer that cannot trust the name server is not ready");
    assert!(started.elapsed() < WITHIN, "{:?}", started.elapsed());
    let text = error.to_string();
    assert!(
        text.contains(&format!(
            "{topic}: no route for the topic: the name server fails: "
        )) && text.contains("certificate not trusted"),
        "{text}"
    );
    handle.shutdown().await;
}
