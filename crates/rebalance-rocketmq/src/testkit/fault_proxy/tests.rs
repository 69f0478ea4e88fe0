//! The proxy between a loopback client and a loopback server speaking remoting frames.
//!
//! Latency, jitter and bandwidth run on paused time, where the delays are exact: nothing else
//! keeps a timer while those tests wait for the sockets, so the clock only moves when the
//! proxy's own timers are all that is left. The others run on real time, every wait bounded
//! (at most a few hundred milliseconds each).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::codec::{Encoder, Framed};

use super::*;
use crate::address_map::AddressMap;
use crate::client::{ClientConfig, RemotingClient};
use crate::codec::RemotingCodec;
use crate::command::RemotingCommand;
use crate::error::TransportError;

/// A server answering each request with its code as remark and its body echoed; counts the
/// requests it received whole.
struct EchoServer {
    addr: String,
    requests: Arc<AtomicUsize>,
}

async fn echo_server() -> EchoServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut framed = Framed::new(socket, RemotingCodec::default());
                while let Some(Ok(request)) = framed.next().await {
                    counter.fetch_add(1, Ordering::SeqCst);
                    let answer = RemotingCommand::response(
                        0,
                        request.opaque,
                        Some(request.code.to_string()),
                    )
                    .with_body(request.body.clone());
                    if framed.send(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    EchoServer { addr, requests }
}

/// A framed connection to `addr`.
async fn framed(addr: &str) -> Framed<TcpStream, RemotingCodec> {
    Framed::new(
        TcpStream::connect(addr).await.unwrap(),
        RemotingCodec::default(),
    )
}

/// Sends request `code` with `body` and waits for its answer; returns the answer's body length.
async fn round_trip(conn: &mut Framed<TcpStream, RemotingCodec>, code: i32, body: usize) -> usize {
    let mut request = RemotingCommand::request(code).with_body(vec![7u8; body]);
    request.opaque = code;
    conn.send(request).await.unwrap();
    let answer = conn.next().await.unwrap().unwrap();
    assert_eq!(answer.opaque, code);
    assert_eq!(answer.remark.as_deref(), Some(code.to_string().as_str()));
    answer.body.len()
}

/// The bytes of request `code` on the wire.
fn frame_bytes(code: i32) -> Vec<u8> {
    let mut request = RemotingCommand::request(code).with_body(vec![1u8; 100]);
    request.opaque = code;
    let mut bytes = BytesMut::new();
    RemotingCodec::default()
        .encode(request, &mut bytes)
        .unwrap();
    bytes.to_vec()
}

/// The bytes of the answer the echo server gives to `frame_bytes(code)`.
fn answer_bytes(code: i32) -> Vec<u8> {
    let answer =
        RemotingCommand::response(0, code, Some(code.to_string())).with_body(vec![1u8; 100]);
    let mut bytes = BytesMut::new();
    RemotingCodec::default().encode(answer, &mut bytes).unwrap();
    bytes.to_vec()
}

/// Reads from `socket` until it ends or fails (within `within`): what came, and whether it
/// ended in an error (a reset) rather than an orderly close.
async fn read_to_end(socket: &mut TcpStream, within: Duration) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    let mut buffer = [0u8; 4096];
    let deadline = Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, socket.read(&mut buffer)).await {
            Ok(Ok(0)) => return (got, false),
            Ok(Ok(n)) => got.extend_from_slice(&buffer[..n]),
            Ok(Err(_)) => return (got, true),
            Err(_) => panic!("the connection neither closed nor failed within {within:?}"),
        }
    }
}

/// Waits (real time, at most a second) until `check` holds.
async fn soon(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(1);
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within a second");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn latency_is_added_each_way_and_jitter_stays_within_its_bound() {
    let server = echo_server().await;
    let proxy = FaultProxy::start(&server.addr).await.unwrap();
    let mut conn = framed(proxy.addr()).await;
    let started = Instant::now();
    round_trip(&mut conn, 1, 10).await;
    assert!(started.elapsed() < MS, "transparent at first");

    proxy.set_latency(Direction::ToServer, 100 * MS, Duration::ZERO);
    proxy.set_latency(Direction::ToClient, 50 * MS, Duration::ZERO);
    let started = Instant::now();
    round_trip(&mut conn, 2, 10).await;
    let took = started.elapsed();
    assert!(took >= 150 * MS && took < 151 * MS, "{took:?}");

    proxy.set_latency(Direction::Both, 100 * MS, 40 * MS);
    let mut took = Vec::new();
    for code in 3..23 {
        let started = Instant::now();
        round_trip(&mut conn, code, 10).await;
        took.push(started.elapsed());
    }
    assert!(
        took.iter().all(|t| *t >= 200 * MS && *t <= 281 * MS),
        "{took:?}"
    );
    assert!(took.iter().any(|t| *t != took[0]), "no jitter: {took:?}");

    proxy.heal();
    let started = Instant::now();
    round_trip(&mut conn, 30, 10).await;
    assert!(started.elapsed() < MS, "healed");
}

/// Latency delays the bytes, it does not throttle them: requests sent every millisecond for
/// 300 ms with 100 ms each way are all answered 200 ms after the last one was sent (more chunks
/// are in flight than a per-chunk bound would let through).
#[tokio::test(start_paused = true)]
async fn latency_does_not_limit_the_throughput() {
    let server = echo_server().await;
    let proxy = FaultProxy::start(&server.addr).await.unwrap();
    proxy.set_latency(Direction::Both, 100 * MS, Duration::ZERO);
    let (mut sink, mut stream) = framed(proxy.addr()).await.split();
    let started = Instant::now();
    let answers = tokio::spawn(async move {
        let mut codes = Vec::new();
        while codes.len() < 300 {
            codes.push(stream.next().await.unwrap().unwrap().opaque);
        }
        codes
    });
    for code in 0..300 {
        let mut request = RemotingCommand::request(code);
        request.opaque = code;
        sink.send(request).await.unwrap();
        tokio::time::sleep(MS).await;
    }
    let codes = answers.await.unwrap();
    assert_eq!(codes, (0..300).collect::<Vec<_>>(), "in order");
    let took = started.elapsed();
    assert!(took >= 499 * MS && took < 520 * MS, "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn the_bandwidth_limit_holds_in_its_direction_only() {
    let server = echo_server().await;
    let proxy = FaultProxy::start(&server.addr).await.unwrap();
    let mut conn = framed(proxy.addr()).await;
    proxy.limit_bandwidth(Direction::ToClient, 50_000);
    // 100 kB each way: the request goes at once, the answer takes 2 s at 50 kB/s (the first
    // tenth of a second's worth goes at once).
    let before = proxy.counters();
    let started = Instant::now();
    assert_eq!(round_trip(&mut conn, 1, 100_000).await, 100_000);
    let took = started.elapsed();
    assert!(took >= 1900 * MS && took <= 2100 * MS, "{took:?}");
    let after = proxy.counters();
    assert!(after.bytes_to_server - before.bytes_to_server > 100_000);
    assert!(after.bytes_to_client - before.bytes_to_client > 100_000);

    proxy.heal();
    proxy.limit_bandwidth(Direction::ToServer, 1_000_000);
    let started = Instant::now();
    round_trip(&mut conn, 2, 100_000).await;
    let took = started.elapsed();
    assert!(took >= 90 * MS && took <= 110 * MS, "{took:?}");
}

#[tokio::test]
async fn a_reset_mid_reply_leaves_the_client_a_truncated_frame_after_the_server_acted() {
    let server = echo_server().await;
    let proxy = FaultProxy::start(&server.addr).await.unwrap();
    proxy.reset_every_nth_request(2, ResetPoint::MidReply);
    let mut socket = TcpStream::connect(proxy.addr()).await.unwrap();
    socket.write_all(&frame_bytes(1)).await.unwrap();
    let mut first = vec![0u8; answer_bytes(1).len()];
    socket.read_exact(&mut first).await.unwrap();
    assert_eq!(first, answer_bytes(1), "the first request is not picked");
    socket.write_all(&frame_bytes(2)).await.unwrap();
    let (got, reset) = read_to_end(&mut socket, Duration::from_millis(500)).await;
    let whole = answer_bytes(2);
    assert!(reset, "a reset, not an orderly close");
    assert!(
        got.len() > 4 && got.len() < whole.len(),
        "{} bytes",
        got.len()
    );
    assert_eq!(got, whole[..got.len()], "a truncated frame");
    soon("the server got the request", || {
        server.requests.load(Ordering::SeqCst) == 2
    })
    .await;
    let counters = proxy.counters();
    assert_eq!((counters.requests, counters.resets), (2, 1));
}

/// Through the real client: a reset answer fails the call with a connection error, and the
/// next call reconnects.
#[tokio::test]
async fn the_client_sees_a_connection_error_and_reconnects() {
    let server = echo_server().await;
    let proxy = FaultProxy::start(&server.addr).await.unwrap();
    let client = RemotingClient::new(ClientConfig {
        request_timeout: Duration::from_millis(500),
        ..ClientConfig::default()
    });
    let call = |code| client.invoke(proxy.addr(), RemotingCommand::request(code));
    call(1).await.unwrap();
    proxy.reset_every_nth_request(1, ResetPoint::MidReply);
    let err = call(2).await.unwrap_err();
    assert!(matches!(err, TransportError::Closed { .. }), "{err}");
    proxy.heal();
    call(3).await.unwrap();
    let counters = proxy.counters();
    assert_eq!((counters.accepted, counters.resets), (2, 1));
    assert_eq!(server.requests.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_reset_before_the_request_keeps_it_from_the_server_and_mid_request_cuts_it() {
    let server = echo_server().await;
    let proxy = FaultProxy::start(&server.addr).await.unwrap();
    proxy.reset_every_nth_request(3, ResetPoint::BeforeRequest);
    let mut conn = framed(proxy.addr()).await;
    round_trip(&mut conn, 1, 10).await;
    round_trip(&mut conn, 2, 10).await;
    let mut socket = conn.into_inner();
    socket.write_all(&frame_bytes(3)).await.unwrap();
    let (got, reset) = read_to_end(&mut socket, Duration::from_millis(500)).await;
    assert!(got.is_empty() && reset);
    assert_eq!(server.requests.load(Ordering::SeqCst), 2);
    let delivered = proxy.counters().bytes_to_server;

    proxy.reset_every_nth_request(1, ResetPoint::MidRequest);
    let mut socket = TcpStream::connect(proxy.addr()).await.unwrap();
    let request = frame_bytes(4);
    socket.write_all(&request).await.unwrap();
    let (got, reset) = read_to_end(&mut socket, Duration::from_millis(500)).await;
    assert!(got.is_empty() && reset);
    let half = proxy.counters().bytes_to_server - delivered;
    assert!(
        half > 4 && half < request.len() as u64,
        "{half} bytes delivered"
    );
    assert_eq!(
        server.requests.load(Ordering::SeqCst),
        2,
        "a truncated request"
    );
    assert_eq!(proxy.counters().resets, 2);
}

#[tokio::test]
async fn a_byte_limit_resets_each_connection_wherever_it_falls() {
    let server = echo_server().await;
    let proxy = FaultProxy::start(&server.addr).await.unwrap();
    proxy.reset_after_bytes(Direction::ToClient, 10);
    for _ in 0..2 {
        let mut socket = TcpStream::connect(proxy.addr()).await.unwrap();
        socket.write_all(&frame_bytes(1)).await.unwrap();
        let (got, reset) = read_to_end(&mut socket, Duration::from_millis(500)).await;
        assert_eq!(got, answer_bytes(1)[..10]);
        assert!(reset);
    }
    assert_eq!(proxy.counters().resets, 2);
}

#[tokio::test]
async fn reset_now_resets_the_open_connections_only() {
    let server = echo_server().await;
    let proxy = FaultProxy::start(&server.addr).await.unwrap();
    let mut old = framed(proxy.addr()).await;
    round_trip(&mut old, 1, 10).await;
    proxy.reset_now();
    let mut socket = old.into_inner();
    let (got, reset) = read_to_end(&mut socket, Duration::from_millis(500)).await;
    assert!(got.is_empty() && reset);
    let mut new = framed(proxy.addr()).await;
    round_trip(&mut new, 2, 10).await;
    assert_eq!(proxy.counters().resets, 1);
}

/// A black hole: calls time out on the open connection and on a new one (accepted, never
/// answered, never forwarded); the heal resumes both, delivering what was sent meanwhile.
#[tokio::test]
async fn a_black_hole_times_calls_out_and_its_heal_resumes_the_connections() {
    let server = echo_server().await;
    let proxy = FaultProxy::start(&server.addr).await.unwrap();
    // The client knows the server by its advertised address, and dials the proxy.
    let advertised = "broker-a.example:10911";
    let client = RemotingClient::new(ClientConfig {
        request_timeout: Duration::from_millis(200),
        ..ClientConfig::default()
    })
    .with_address_map(AddressMap::new().with(advertised, proxy.addr()).unwrap());
    let call = |code| client.invoke(advertised, RemotingCommand::request(code));
    call(1).await.unwrap();
    proxy.black_hole();
    let err = call(2).await.unwrap_err();
    assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
    let mut late = framed(proxy.addr()).await;
    late.send(RemotingCommand::request(3)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        server.requests.load(Ordering::SeqCst),
        1,
        "nothing went through"
    );
    assert_eq!(proxy.counters().open, 2);

    proxy.heal();
    call(4).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_millis(500), late.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(answer.remark.as_deref(), Some("3"));
    // Requests 2 (late: its caller gave up) and 3 were delivered after the heal, not lost.
    soon("every request reached the server", || {
        server.requests.load(Ordering::SeqCst) == 4
    })
    .await;
    assert_eq!(proxy.counters().accepted, 2);
}

#[tokio::test]
async fn dropped_replies_leave_the_requests_acted_on_and_the_connection_usable() {
    let server = echo_server().await;
    let proxy = FaultProxy::start(&server.addr).await.unwrap();
    let mut conn = framed(proxy.addr()).await;
    round_trip(&mut conn, 1, 10).await;
    proxy.drop_replies();
    for code in 2..5 {
        conn.send(RemotingCommand::request(code)).await.unwrap();
    }
    soon("the server got the requests", || {
        server.requests.load(Ordering::SeqCst) == 4
    })
    .await;
    let nothing = tokio::time::timeout(Duration::from_millis(100), conn.next()).await;
    assert!(nothing.is_err(), "a reply came: {nothing:?}");
    soon("the replies were dropped", || {
        proxy.counters().replies_dropped == 3
    })
    .await;
    proxy.heal();
    // Whole frames were dropped: the connection is still framed.
    round_trip(&mut conn, 5, 10).await;
}

#[tokio::test]
async fn the_counters_add_up() {
    let server = echo_server().await;
    let proxy = FaultProxy::start(&server.addr).await.unwrap();
    let mut socket = TcpStream::connect(proxy.addr()).await.unwrap();
    for code in 1..=3 {
        socket.write_all(&frame_bytes(code)).await.unwrap();
        let mut answer = vec![0u8; answer_bytes(code).len()];
        socket.read_exact(&mut answer).await.unwrap();
    }
    let counters = proxy.counters();
    let sent: usize = (1..=3).map(|c| frame_bytes(c).len()).sum();
    let answered: usize = (1..=3).map(|c| answer_bytes(c).len()).sum();
    assert_eq!(counters.bytes_to_server, sent as u64);
    assert_eq!(counters.bytes_to_client, answered as u64);
    assert_eq!(
        (counters.accepted, counters.open, counters.requests),
        (1, 1, 3)
    );
    drop(socket);
    soon("the connection ended", || proxy.counters().open == 0).await;
    assert_eq!(proxy.counters().resets, 0);
}

#[tokio::test]
async fn a_server_that_is_down_closes_the_clients_connection() {
    // Bound but not listening: refused, and the port cannot go to another listener meanwhile
    // (the proxy's own, say, which would then proxy to itself).
    let down = tokio::net::TcpSocket::new_v4().unwrap();
    down.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = down.local_addr().unwrap().to_string();
    let proxy = FaultProxy::start(&addr).await.unwrap();
    let mut socket = TcpStream::connect(proxy.addr()).await.unwrap();
    let (got, _) = read_to_end(&mut socket, Duration::from_millis(500)).await;
    assert!(got.is_empty());
    let counters = proxy.counters();
    assert_eq!((counters.accepted, counters.upstream_failures), (1, 1));
}

#[tokio::test]
async fn dropping_the_last_handle_stops_the_proxy_and_closes_its_connections() {
    let server = echo_server().await;
    let proxy = FaultProxy::start(&server.addr).await.unwrap();
    let addr = proxy.addr().to_string();
    let mut conn = framed(&addr).await;
    round_trip(&mut conn, 1, 10).await;
    let clone = proxy.clone();
    drop(proxy);
    round_trip(&mut conn, 2, 10).await;
    clone.black_hole();
    drop(clone);
    let mut socket = conn.into_inner();
    let (got, _) = read_to_end(&mut socket, Duration::from_millis(500)).await;
    assert!(got.is_empty());
    let deadline = Instant::now() + Duration::from_secs(1);
    while TcpStream::connect(&addr).await.is_ok() {
        assert!(Instant::now() < deadline, "the proxy still accepts");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
