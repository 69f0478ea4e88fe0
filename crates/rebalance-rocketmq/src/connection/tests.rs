use std::sync::Mutex;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncWriteExt, DuplexStream};
use tokio_util::codec::Framed;

use super::*;
use crate::command::request_code;

/// The server's end of an in-memory connection.
type Server = Framed<DuplexStream, RemotingCodec>;

#[derive(Default)]
struct Recorder(Mutex<Vec<RemotingCommand>>);

impl ServerRequestHandler for Recorder {
    fn handle(&self, _peer: &str, request: &RemotingCommand) -> Option<RemotingCommand> {
        self.0.lock().unwrap().push(request.clone());
        match request.code {
            999 => Some(RemotingCommand::response(0, 0, Some("handled".into()))),
            // A careless handler: its answer is built as a one-way request.
            998 => {
                let mut answer = RemotingCommand::request(0);
                answer.flag = FLAG_ONEWAY;
                Some(answer)
            }
            // An answer too large to send.
            997 => Some(RemotingCommand::response(0, 0, None).with_body(vec![0u8; 1000])),
            _ => None,
        }
    }
}

fn pair_with(
    config: ConnectionConfig,
    handler: Arc<dyn ServerRequestHandler>,
) -> (Connection, Server) {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let conn = Connection::from_stream(client, "test:1", config, handler);
    (conn, Framed::new(server, RemotingCodec::default()))
}

fn pair() -> (Connection, Server) {
    pair_with(ConnectionConfig::default(), Arc::new(IgnoreServerRequests))
}

async fn next(server: &mut Server) -> RemotingCommand {
    server.next().await.unwrap().unwrap()
}

const T: Duration = Duration::from_secs(3);

/// Sends request `code` on a task of its own.
fn ask(
    conn: &Connection,
    code: i32,
    timeout: Duration,
) -> tokio::task::JoinHandle<Result<RemotingCommand, TransportError>> {
    let conn = conn.clone();
    tokio::spawn(async move { conn.request(RemotingCommand::request(code), timeout).await })
}

/// The server answers `request` with success.
async fn answer_ok(server: &mut Server, request: &RemotingCommand) {
    server
        .send(RemotingCommand::response(0, request.opaque, None))
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn answers_go_to_their_own_request_whatever_the_order() {
    let (conn, mut server) = pair();
    let a = ask(&conn, 1, T);
    let first = next(&mut server).await;
    let b = ask(&conn, 2, T);
    let second = next(&mut server).await;
    assert_ne!(first.opaque, second.opaque);
    assert!(!first.is_response() && !first.is_oneway());
    // Answer in reverse order, with the request code echoed in the remark.
    for req in [&second, &first] {
        server
            .send(RemotingCommand::response(
                0,
                req.opaque,
                Some(req.code.to_string()),
            ))
            .await
            .unwrap();
    }
    assert_eq!(a.await.unwrap().unwrap().remark.as_deref(), Some("1"));
    assert_eq!(b.await.unwrap().unwrap().remark.as_deref(), Some("2"));
    assert_eq!(conn.pending_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_request_without_answer_times_out_and_a_late_answer_is_dropped() {
    // Kept open after a silent timeout, to see the late answer arrive.
    let config = ConnectionConfig {
        close_after_silence: None,
        ..Default::default()
    };
    let (conn, mut server) = pair_with(config, Arc::new(IgnoreServerRequests));
    let started = tokio::time::Instant::now();
    let err = conn
        .request(RemotingCommand::request(1), Duration::from_millis(500))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        TransportError::Timeout {
            addr: "test:1".into(),
            after: Duration::from_millis(500)
        }
    );
    assert_eq!(started.elapsed(), Duration::from_millis(500));
    assert_eq!(
        conn.pending_len(),
        0,
        "the timed-out request left nothing behind"
    );
    let late = next(&mut server).await;
    answer_ok(&mut server, &late).await;
    // The connection still works.
    let conn2 = conn.clone();
    let answer = tokio::spawn(async move { conn2.request(RemotingCommand::request(2), T).await });
    let req = next(&mut server).await;
    server
        .send(RemotingCommand::response(7, req.opaque, None))
        .await
        .unwrap();
    assert_eq!(answer.await.unwrap().unwrap().code, 7);
    assert!(conn.is_open());
}

#[tokio::test(start_paused = true)]
async fn a_timeout_with_a_silent_server_closes_the_connection() {
    let (conn, mut server) = pair();
    // A second request waits longer than the first: it fails when the connection closes.
    let longer = ask(&conn, 2, 2 * T);
    let started = tokio::time::Instant::now();
    // T is also the default silence after which a timeout closes the connection.
    let err = conn
        .request(RemotingCommand::request(1), T)
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
    assert!(!conn.is_open(), "a server silent for 3 s is dropped");
    let err = longer.await.unwrap().unwrap_err();
    assert!(
        matches!(&err, TransportError::Closed { reason, .. } if reason.contains("silent")),
        "{err}"
    );
    assert_eq!(started.elapsed(), T, "no one waits for 2T");
    // The server read both requests: it was the answers that never came.
    let mut read = [next(&mut server).await.code, next(&mut server).await.code];
    read.sort();
    assert_eq!(read, [1, 2]);
}

#[tokio::test(start_paused = true)]
async fn short_timeouts_close_a_silent_connection_once_the_silence_is_long_enough() {
    let (conn, _server) = pair();
    let started = tokio::time::Instant::now();
    // One 500 ms request after another, none answered: the silence adds up across them.
    for i in 1..=6 {
        let err = conn
            .request(RemotingCommand::request(i), Duration::from_millis(500))
            .await
            .unwrap_err();
        assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
        assert_eq!(conn.is_open(), i < 6, "after {:?}", started.elapsed());
    }
}

#[tokio::test(start_paused = true)]
async fn a_timeout_while_the_server_answers_other_requests_keeps_the_connection() {
    let (conn, mut server) = pair();
    let slow = ask(&conn, 1, T);
    assert_eq!(next(&mut server).await.code, 1);
    let quick = ask(&conn, 2, T);
    let req = next(&mut server).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    answer_ok(&mut server, &req).await;
    assert_eq!(quick.await.unwrap().unwrap().code, 0);
    let err = slow.await.unwrap().unwrap_err();
    assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
    assert!(
        conn.is_open(),
        "the server answered meanwhile: only slow, not gone"
    );
}

/// A pull the broker holds on an idle queue is not silence: a short request timing out beside
/// it (a caller's 500 ms) keeps the connection, and the held pull its answer (found by review:
/// the silence counted from the pull's sending, 10 s, so the connection was closed, every poll
/// on it failed, and a lock loss reported).
#[tokio::test(start_paused = true)]
async fn a_poll_held_by_the_server_is_not_silence() {
    let (conn, mut server) = pair();
    for held in [
        request_code::PULL_MESSAGE,
        request_code::POP_MESSAGE,
        request_code::NOTIFICATION,
    ] {
        let poll = ask(&conn, held, Duration::from_secs(30));
        let polled = next(&mut server).await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let err = conn
            .request(RemotingCommand::request(34), Duration::from_millis(500))
            .await
            .unwrap_err();
        assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
        assert!(conn.is_open(), "closed beside a held {held}");
        assert_eq!(next(&mut server).await.code, 34);
        answer_ok(&mut server, &polled).await;
        assert_eq!(poll.await.unwrap().unwrap().code, 0, "{held}");
    }
    // And silence still counts for the requests that are not held.
    let err = conn
        .request(RemotingCommand::request(34), T)
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
    assert!(!conn.is_open());
}

/// A held poll past its timeout (its poll time and more): the server broke its hold, and
/// unless it is heard from within the silence limit the connection closes (a pull from a
/// slave, which no heartbeat reaches, would otherwise wait on a dead socket for ever).
#[tokio::test(start_paused = true)]
async fn a_held_poll_timing_out_in_silence_closes_the_connection() {
    let (conn, mut server) = pair();
    let poll = ask(&conn, request_code::PULL_MESSAGE, Duration::from_secs(30));
    next(&mut server).await;
    // The server answers another request 1 s before the poll's timeout: alive.
    tokio::time::sleep(Duration::from_secs(28)).await;
    let other = ask(&conn, 2, T);
    let req = next(&mut server).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    answer_ok(&mut server, &req).await;
    assert!(other.await.unwrap().is_ok());
    let err = poll.await.unwrap().unwrap_err();
    assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
    assert!(
        conn.is_open(),
        "the server answered another request 1 s ago"
    );

    // Heard from 20 s before the timeout, then nothing.
    let poll = ask(&conn, request_code::PULL_MESSAGE, Duration::from_secs(30));
    next(&mut server).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let other = ask(&conn, 2, T);
    let req = next(&mut server).await;
    answer_ok(&mut server, &req).await;
    assert!(other.await.unwrap().is_ok());
    let err = poll.await.unwrap().unwrap_err();
    assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
    assert!(!conn.is_open(), "20 s without a byte from the server");
}

#[tokio::test(start_paused = true)]
async fn a_closed_connection_fails_waiting_and_later_requests() {
    let (conn, mut server) = pair();
    let waiting = ask(&conn, 1, T);
    next(&mut server).await;
    drop(server);
    let err = waiting.await.unwrap().unwrap_err();
    assert!(
        matches!(&err, TransportError::Closed { reason, .. } if reason.contains("closed by the server")),
        "{err}"
    );
    conn.closed().await;
    assert!(!conn.is_open());
    let err = conn
        .request(RemotingCommand::request(2), T)
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::Closed { .. }), "{err}");
    let err = conn
        .send_oneway(RemotingCommand::request(2), T)
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::Closed { .. }), "{err}");
}

#[tokio::test(start_paused = true)]
async fn garbage_from_the_server_closes_the_connection_with_the_reason() {
    let (conn, server) = pair();
    let waiting = ask(&conn, 1, T);
    let mut raw = server.into_inner();
    // A frame of 12 bytes whose JSON header is not JSON.
    raw.write_all(&[0, 0, 0, 12, 0, 0, 0, 8]).await.unwrap();
    raw.write_all(b"not json").await.unwrap();
    let err = waiting.await.unwrap().unwrap_err();
    assert!(
        matches!(&err, TransportError::Closed { reason, .. } if reason.contains("not a JSON remoting header")),
        "{err}"
    );
    assert!(!conn.is_open());
}

/// A frame with RocketMQ's binary header (serialization type 1): code, language, version,
/// opaque, flag, then an empty remark and empty extFields.
fn binary_frame(code: i16, opaque: i32, flag: i32) -> Vec<u8> {
    let mut header = Vec::new();
    header.extend_from_slice(&code.to_be_bytes());
    header.push(0); // JAVA
    header.extend_from_slice(&475i16.to_be_bytes());
    header.extend_from_slice(&opaque.to_be_bytes());
    header.extend_from_slice(&flag.to_be_bytes());
    header.extend_from_slice(&0i32.to_be_bytes());
    header.extend_from_slice(&0i32.to_be_bytes());
    let mut frame = ((4 + header.len()) as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&((1u32 << 24) | header.len() as u32).to_be_bytes());
    frame.extend_from_slice(&header);
    frame
}

#[tokio::test(start_paused = true)]
async fn a_binary_answer_fails_only_its_request() {
    let (conn, mut server) = pair();
    let first = ask(&conn, 1, T);
    let first_req = next(&mut server).await;
    let second = ask(&conn, 2, T);
    let second_req = next(&mut server).await;
    // The first is answered in the binary serialization, the second in JSON.
    server
        .get_mut()
        .write_all(&binary_frame(0, first_req.opaque, FLAG_RESPONSE))
        .await
        .unwrap();
    // An answer to nothing, in the binary serialization: dropped.
    server
        .get_mut()
        .write_all(&binary_frame(0, 9999, FLAG_RESPONSE))
        .await
        .unwrap();
    answer_ok(&mut server, &second_req).await;
    let started = tokio::time::Instant::now();
    assert_eq!(
        first.await.unwrap(),
        Err(TransportError::UnsupportedSerialization {
            addr: "test:1".into(),
            serialize_type: 1
        })
    );
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "failed at once, no timeout"
    );
    assert_eq!(second.await.unwrap().unwrap().code, 0);
    assert!(conn.is_open());
    assert_eq!(conn.pending_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn binary_server_requests_are_skipped_and_the_connection_goes_on() {
    let recorder = Arc::new(Recorder::default());
    let (conn, mut server) = pair_with(ConnectionConfig::default(), recorder.clone());
    // A one-way NOTIFY in the binary serialization: skipped, not answered.
    server
        .get_mut()
        .write_all(&binary_frame(
            request_code::NOTIFY_CONSUMER_IDS_CHANGED as i16,
            100,
            FLAG_ONEWAY,
        ))
        .await
        .unwrap();
    // A type nobody knows the layout of: skipped whole.
    server
        .get_mut()
        .write_all(&[0, 0, 0, 7, 9, 0, 0, 3, 1, 2, 3])
        .await
        .unwrap();
    // A binary request expecting an answer: "not supported", with its opaque.
    server
        .get_mut()
        .write_all(&binary_frame(307, 101, 0))
        .await
        .unwrap();
    let answer = next(&mut server).await;
    assert_eq!(answer.flag, FLAG_RESPONSE);
    assert_eq!(
        (answer.code, answer.opaque),
        (response_code::REQUEST_CODE_NOT_SUPPORTED, 101)
    );
    // A JSON NOTIFY after all that still reaches the handler.
    let mut notify = RemotingCommand::request(request_code::NOTIFY_CONSUMER_IDS_CHANGED)
        .with_ext("consumerGroup", "G");
    notify.flag = FLAG_ONEWAY;
    server.send(notify).await.unwrap();
    // And requests still get their answers.
    let asking = ask(&conn, 5, T);
    let req = next(&mut server).await;
    answer_ok(&mut server, &req).await;
    assert_eq!(asking.await.unwrap().unwrap().code, 0);
    assert!(conn.is_open());
    let seen: Vec<i32> = recorder.0.lock().unwrap().iter().map(|c| c.code).collect();
    assert_eq!(
        seen,
        [request_code::NOTIFY_CONSUMER_IDS_CHANGED],
        "only the JSON push"
    );
}

#[tokio::test(start_paused = true)]
async fn server_requests_reach_the_handler_and_get_sensible_answers() {
    let recorder = Arc::new(Recorder::default());
    let (_conn, mut server) = pair_with(ConnectionConfig::default(), recorder.clone());
    // One-way notification: handled, not answered.
    let mut notify = RemotingCommand::request(request_code::NOTIFY_CONSUMER_IDS_CHANGED)
        .with_ext("consumerGroup", "G");
    notify.flag = FLAG_ONEWAY;
    notify.opaque = 100;
    server.send(notify).await.unwrap();
    // A request the handler does not support: answered "not supported", same opaque.
    let mut unknown = RemotingCommand::request(307);
    unknown.opaque = 101;
    server.send(unknown).await.unwrap();
    let answer = next(&mut server).await;
    assert_eq!(answer.flag, FLAG_RESPONSE);
    assert_eq!(
        (answer.code, answer.opaque),
        (response_code::REQUEST_CODE_NOT_SUPPORTED, 101)
    );
    // A request the handler answers.
    let mut handled = RemotingCommand::request(999);
    handled.opaque = 102;
    server.send(handled).await.unwrap();
    let answer = next(&mut server).await;
    assert_eq!(
        (answer.code, answer.opaque, answer.remark.as_deref()),
        (0, 102, Some("handled"))
    );
    assert_eq!(answer.flag, FLAG_RESPONSE);
    // The answer goes out as an answer to this request, however the handler built it.
    let mut careless = RemotingCommand::request(998);
    careless.opaque = 103;
    server.send(careless).await.unwrap();
    let answer = next(&mut server).await;
    assert_eq!((answer.opaque, answer.flag), (103, FLAG_RESPONSE));
    let seen: Vec<(i32, Option<String>)> = recorder
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|c| (c.code, c.ext("consumerGroup").map(str::to_string)))
        .collect();
    assert_eq!(
        seen,
        [
            (40, Some("G".into())),
            (307, None),
            (999, None),
            (998, None)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn oneway_requests_are_flagged_and_not_awaited() {
    let (conn, mut server) = pair();
    conn.send_oneway(RemotingCommand::request(15).with_ext("commitOffset", 5), T)
        .await
        .unwrap();
    let got = next(&mut server).await;
    assert_eq!(got.flag, FLAG_ONEWAY);
    assert_eq!(got.ext("commitOffset"), Some("5"));
    // Kind bits the caller left on a command do not change what goes out.
    let mut reused = RemotingCommand::request(16);
    reused.flag = FLAG_RESPONSE | FLAG_ONEWAY;
    conn.send_oneway(reused, T).await.unwrap();
    let got = next(&mut server).await;
    assert_eq!((got.code, got.flag), (16, FLAG_ONEWAY));
    assert_eq!(conn.pending_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_oversized_request_fails_alone() {
    let config = ConnectionConfig {
        max_frame_len: 512,
        ..Default::default()
    };
    let (conn, mut server) = pair_with(config, Arc::new(IgnoreServerRequests));
    let err = conn
        .request(RemotingCommand::request(1).with_body(vec![0u8; 1000]), T)
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::Encode { .. }), "{err}");
    assert!(conn.is_open());
    let answer = ask(&conn, 2, T);
    let req = next(&mut server).await;
    assert_eq!(
        req.code, 2,
        "the oversized request never reached the server"
    );
    answer_ok(&mut server, &req).await;
    assert_eq!(answer.await.unwrap().unwrap().code, 0);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_last_handle_closes_the_socket() {
    let (conn, mut server) = pair();
    drop(conn);
    assert!(
        server.next().await.is_none(),
        "the server sees the end of the stream"
    );
}

#[tokio::test(start_paused = true)]
async fn many_concurrent_requests_each_get_their_answer() {
    let (conn, mut server) = pair();
    let server_task = tokio::spawn(async move {
        for _ in 0..200 {
            let req = next(&mut server).await;
            server
                .send(RemotingCommand::response(
                    0,
                    req.opaque,
                    req.ext("n").map(str::to_string),
                ))
                .await
                .unwrap();
        }
        server
    });
    let mut tasks = Vec::new();
    for n in 0..200 {
        let conn = conn.clone();
        tasks.push(tokio::spawn(async move {
            let answer = conn
                .request(RemotingCommand::request(1).with_ext("n", n), T)
                .await
                .unwrap();
            assert_eq!(answer.remark, Some(n.to_string()));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    server_task.await.unwrap();
    assert_eq!(conn.pending_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_last_handle_closes_the_socket_even_when_the_server_stopped_reading() {
    // Not closed by the timeouts themselves: it is the dropped handle that must close it.
    let config = ConnectionConfig {
        close_after_silence: None,
        ..Default::default()
    };
    let (conn, mut server) = pair_with(config, Arc::new(IgnoreServerRequests));
    // More than the pipe holds, in two frames: the writer is stuck writing the second one.
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let conn = conn.clone();
            tokio::spawn(async move {
                conn.request(RemotingCommand::request(1).with_body(vec![0u8; 100_000]), T)
                    .await
            })
        })
        .collect();
    for call in calls {
        let err = call.await.unwrap().unwrap_err();
        assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
    }
    drop(conn);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let written = server.get_mut().write_all(b"x").await;
    assert!(
        written.is_err(),
        "the client's end of the socket is still open"
    );
}

/// A request given only a few milliseconds (a caller's short `invoke_with_timeout`, or what is
/// left of a deadline after a slow connect) hears nothing from a healthy server 20 ms away: that
/// is no reason to close the connection and fail the other requests in flight on it.
#[tokio::test(start_paused = true)]
async fn a_short_timeout_to_a_healthy_server_does_not_close_the_connection() {
    let (conn, server) = pair();
    // The server answers every request 20 ms after reading it.
    tokio::spawn(async move {
        let (mut sink, mut stream) = server.split();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(req)) = stream.next().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let _ = tx.send(RemotingCommand::response(0, req.opaque, None));
                });
            }
        });
        while let Some(answer) = rx.recv().await {
            if sink.send(answer).await.is_err() {
                return;
            }
        }
    });
    let long = ask(&conn, 1, T);
    tokio::task::yield_now().await;
    let probe = conn
        .request(RemotingCommand::request(2), Duration::from_millis(5))
        .await;
    assert!(
        matches!(probe, Err(TransportError::Timeout { .. })),
        "{probe:?}"
    );
    let long = long.await.unwrap();
    assert!(
        long.is_ok(),
        "the server answered within 20 ms, yet the other request got {long:?}"
    );
    assert!(conn.is_open(), "a healthy server's connection was closed");
}

#[tokio::test(start_paused = true)]
async fn an_answer_still_streaming_in_at_the_timeout_is_not_silence() {
    use tokio_util::codec::Encoder;
    let (conn, mut server) = pair();
    let asking = ask(&conn, 1, T);
    let req = next(&mut server).await;
    // A 100 kB answer arriving 1 kB every 50 ms: still incomplete when the request times out.
    let answer = RemotingCommand::response(0, req.opaque, None).with_body(vec![7u8; 100_000]);
    let mut bytes = bytes::BytesMut::new();
    RemotingCodec::default().encode(answer, &mut bytes).unwrap();
    let streaming = tokio::spawn(async move {
        for chunk in bytes.chunks(1000) {
            server.get_mut().write_all(chunk).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server
    });
    let err = asking.await.unwrap().unwrap_err();
    assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
    assert!(
        conn.is_open(),
        "bytes were arriving: the server is not silent"
    );
    let _server = streaming.await.unwrap();
}

/// Silence counts from the last byte heard while answers are still awaited: an answer to one
/// request does not hide the silence that follows from the requests left waiting.
#[tokio::test(start_paused = true)]
async fn silence_after_an_answer_counts_for_the_requests_still_waiting() {
    let (conn, mut server) = pair();
    let started = tokio::time::Instant::now();
    let long = ask(&conn, 1, Duration::from_secs(10));
    assert_eq!(next(&mut server).await.code, 1);
    let quick = ask(&conn, 2, T);
    let req = next(&mut server).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    answer_ok(&mut server, &req).await;
    assert_eq!(quick.await.unwrap().unwrap().code, 0);
    // Then nothing comes for 9.9 s while request 1 waits: more than the 3 s of silence.
    let err = long.await.unwrap().unwrap_err();
    assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
    assert_eq!(started.elapsed(), Duration::from_secs(10));
    assert!(
        !conn.is_open(),
        "the server was silent for 9.9 s while an answer was awaited"
    );
}

/// Once every awaited answer came, the silence is over: a later request that misses a short
/// timeout to a healthy server does not count the idle time before it.
#[tokio::test(start_paused = true)]
async fn idle_time_after_every_answer_came_is_not_silence() {
    let (conn, mut server) = pair();
    let asking = ask(&conn, 1, T);
    let req = next(&mut server).await;
    answer_ok(&mut server, &req).await;
    asking.await.unwrap().unwrap();
    // A server push while nothing is awaited, then a minute of idleness.
    let mut push = RemotingCommand::request(request_code::NOTIFY_CONSUMER_IDS_CHANGED);
    push.flag = FLAG_ONEWAY;
    server.send(push).await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let err = conn
        .request(RemotingCommand::request(2), Duration::from_millis(5))
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
    assert!(
        conn.is_open(),
        "5 ms without an answer is not 3 s of silence"
    );
}

/// A request that never left (it could not be encoded) is not waiting for an answer: the
/// server's quiet afterwards is not silence.
#[tokio::test(start_paused = true)]
async fn a_request_that_was_never_sent_does_not_start_the_silence() {
    let config = ConnectionConfig {
        max_frame_len: 512,
        ..Default::default()
    };
    let (conn, _server) = pair_with(config, Arc::new(IgnoreServerRequests));
    let err = conn
        .request(RemotingCommand::request(1).with_body(vec![0u8; 1000]), T)
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::Encode { .. }), "{err}");
    tokio::time::sleep(Duration::from_secs(60)).await;
    let err = conn
        .request(RemotingCommand::request(2), Duration::from_millis(5))
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
    assert!(conn.is_open(), "the server was asked nothing for a minute");
}

/// A handler with a bug: it panics on every request.
struct Panicking;

impl ServerRequestHandler for Panicking {
    fn handle(&self, _peer: &str, _request: &RemotingCommand) -> Option<RemotingCommand> {
        panic!("injected handler panic");
    }
}

/// A panicking handler must not take the reader task down with it: before, the reader died
/// without closing the connection, so every request on it waited for its whole timeout.
#[tokio::test(start_paused = true)]
async fn a_panicking_handler_fails_its_request_only_and_the_connection_goes_on() {
    let (conn, mut server) = pair_with(ConnectionConfig::default(), Arc::new(Panicking));
    let mut request = RemotingCommand::request(999);
    request.opaque = 7;
    server.send(request).await.unwrap();
    let answer = tokio::time::timeout(T, next(&mut server))
        .await
        .expect("the panicking handler's request is answered");
    assert!(answer.is_response());
    assert_eq!(answer.opaque, 7);
    assert_eq!(answer.code, response_code::SYSTEM_ERROR);
    assert!(
        answer
            .remark
            .as_deref()
            .is_some_and(|r| r.contains("injected handler panic")),
        "{answer:?}"
    );
    // A one-way request is not answered, and the client's own requests still get theirs.
    let mut oneway = RemotingCommand::request(request_code::NOTIFY_CONSUMER_IDS_CHANGED);
    oneway.flag = FLAG_ONEWAY;
    server.send(oneway).await.unwrap();
    let call = tokio::spawn(async move { conn.request(RemotingCommand::request(1), T).await });
    let sent = next(&mut server).await;
    assert_eq!(sent.code, 1, "the one-way request was not answered");
    answer_ok(&mut server, &sent).await;
    assert_eq!(call.await.unwrap().unwrap().code, 0);
}

/// A request that times out while still waiting for room in the outgoing queue never reached
/// the server: the server's quiet afterwards is not silence, and a later request that misses
/// only its own short timeout keeps the connection.
#[tokio::test(start_paused = true)]
async fn a_request_that_timed_out_before_leaving_does_not_start_the_silence() {
    let config = ConnectionConfig {
        outbound_queue: 1,
        ..Default::default()
    };
    let (client, server) = tokio::io::duplex(1024);
    let conn = Connection::from_stream(client, "test:1", config, Arc::new(IgnoreServerRequests));
    let mut server = Framed::new(server, RemotingCodec::default());
    // The server reads nothing yet: a large one-way message fills the pipe and holds the
    // writer, a second one fills the outgoing queue.
    for _ in 0..2 {
        let big = RemotingCommand::request(7).with_body(vec![0u8; 4096]);
        conn.send_oneway(big, T).await.unwrap();
    }
    let err = conn
        .request(RemotingCommand::request(1), Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
    assert_eq!(conn.pending_len(), 0);
    // The server catches up with the one-way messages and stays quiet, as it may: nothing
    // awaits its answer.
    for _ in 0..2 {
        assert_eq!(next(&mut server).await.code, 7);
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    let err = conn
        .request(RemotingCommand::request(2), Duration::from_millis(5))
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
    assert_eq!(next(&mut server).await.code, 2);
    assert!(
        conn.is_open(),
        "the one request that reached the server has waited 5 ms"
    );
}

/// Whatever kind bits the caller left on a command, a request goes out as a plain request: a
/// stray response or one-way bit would have the server drop it or never answer it.
#[tokio::test(start_paused = true)]
async fn a_request_goes_out_flagged_as_a_plain_request() {
    let (conn, mut server) = pair();
    let fresh = ask(&conn, 1, T);
    let req = next(&mut server).await;
    assert_eq!(req.flag, 0);
    answer_ok(&mut server, &req).await;
    assert_eq!(fresh.await.unwrap().unwrap().code, 0);
    let mut reused = RemotingCommand::request(2);
    reused.flag = FLAG_RESPONSE | FLAG_ONEWAY;
    let conn2 = conn.clone();
    let reused = tokio::spawn(async move { conn2.request(reused, T).await });
    let req = next(&mut server).await;
    assert_eq!((req.code, req.flag), (2, 0));
    answer_ok(&mut server, &req).await;
    assert_eq!(reused.await.unwrap().unwrap().code, 0);
}

#[tokio::test(start_paused = true)]
async fn closed_resolves_once_the_connection_has_closed_and_not_before() {
    let (conn, server) = pair();
    assert_eq!(conn.addr(), "test:1");
    let open = tokio::time::timeout(Duration::from_secs(60), conn.closed()).await;
    assert!(open.is_err(), "closed() resolved on an open connection");
    drop(server);
    tokio::time::timeout(Duration::from_secs(60), conn.closed())
        .await
        .expect("the server went away, yet closed() never resolved");
    assert!(!conn.is_open());
}

/// An answer to a server request that cannot be sent fails nothing else, not even the client's
/// own request that happens to carry the same opaque (the two sides number independently).
#[tokio::test(start_paused = true)]
async fn an_answer_that_cannot_be_sent_fails_no_request_of_ours() {
    let config = ConnectionConfig {
        max_frame_len: 512,
        ..Default::default()
    };
    let (conn, mut server) = pair_with(config, Arc::new(Recorder::default()));
    let ours = ask(&conn, 1, T);
    let req = next(&mut server).await;
    let mut theirs = RemotingCommand::request(997);
    theirs.opaque = req.opaque;
    server.send(theirs).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    answer_ok(&mut server, &req).await;
    assert_eq!(ours.await.unwrap().unwrap().code, 0);
    assert!(conn.is_open());
}

/// Connect timeouts too long to add to the clock (the CLI's `--timeout 9999999999999999999`)
/// mean no deadline, not an overflow panic; long ones that can be added work as deadlines.
#[tokio::test]
async fn a_connect_timeout_too_long_for_the_clock_is_no_deadline() {
    assert!(connect_deadline(Duration::MAX).is_none());
    assert!(connect_deadline(Duration::from_secs(u64::MAX / 2)).is_none());
    assert!(connect_deadline(Duration::from_secs(1)).is_some());
    let huge = [
        Duration::MAX,
        Duration::from_secs(u64::MAX / 2),
        Duration::from_secs(9_999_999_999_999_999_999),
        Duration::from_secs(100_000_000_000_000_000),
        Duration::from_secs(3_000_000_000),
    ];
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let open = listener.local_addr().unwrap().to_string();
    let closed = {
        let gone = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        gone.local_addr().unwrap().to_string()
    };
    for timeout in huge {
        let connection = Connection::connect(
            &open,
            timeout,
            ConnectionConfig::default(),
            Arc::new(IgnoreServerRequests),
        )
        .await;
        assert!(connection.is_ok(), "{timeout:?}: {connection:?}");
        let refused = Connection::connect(
            &closed,
            timeout,
            ConnectionConfig::default(),
            Arc::new(IgnoreServerRequests),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&refused, TransportError::Connect { addr, .. } if *addr == closed),
            "{timeout:?}: {refused:?}"
        );
    }
}

#[tokio::test]
async fn no_deadline_waits_for_the_future_and_a_passed_one_does_not() {
    assert_eq!(by_deadline(None, async { 7 }).await, Some(7));
    let past = Some(Instant::now());
    assert_eq!(by_deadline(past, std::future::pending::<()>()).await, None);
}

/// An outgoing queue of 0 or of more frames than a semaphore holds (`usize::MAX`) is taken
/// within `1..=MAX_OUTBOUND_QUEUE`, not a panic building the connection.
#[tokio::test]
async fn an_outbound_queue_outside_its_bounds_is_clamped() {
    for outbound_queue in [0, 1, MAX_OUTBOUND_QUEUE + 1, usize::MAX >> 3, usize::MAX] {
        let config = ConnectionConfig {
            outbound_queue,
            ..Default::default()
        };
        let (conn, mut server) = pair_with(config, Arc::new(IgnoreServerRequests));
        let asked = ask(&conn, request_code::GET_ROUTEINFO_BY_TOPIC, T);
        let request = next(&mut server).await;
        answer_ok(&mut server, &request).await;
        let answer = asked.await.unwrap();
        assert!(answer.is_ok(), "{outbound_queue}: {answer:?}");
    }
}

/// A request with no time left (what a deadline leaves after a connect that took all of it)
/// is not sent: the server never acts on a request whose caller was told it timed out (a send
/// stored twice, a send-back followed by its fallback). Found by review.
#[tokio::test(start_paused = true)]
async fn a_request_with_no_time_left_is_not_sent() {
    let (conn, mut server) = pair();
    let err = conn
        .request(RemotingCommand::request(10), Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::Timeout { .. }), "{err:?}");
    assert_eq!(conn.pending_len(), 0);
    // The next request is the first the server reads.
    let second = ask(&conn, 11, T);
    assert_eq!(next(&mut server).await.code, 11);
    drop(second);
}

/// A request still waiting for room in the outgoing queue when the connection closes fails at
/// once, as closed (found by review: it waited for the writer's half-close, up to 1 s, and
/// failed as a timeout when its deadline fell within it).
#[tokio::test(start_paused = true)]
async fn a_request_waiting_for_room_fails_at_once_when_the_connection_closes() {
    let config = ConnectionConfig {
        outbound_queue: 1,
        ..Default::default()
    };
    let (client, server) = tokio::io::duplex(1024);
    let conn = Connection::from_stream(client, "test:1", config, Arc::new(IgnoreServerRequests));
    // The server reads nothing: a large one-way message fills the pipe and holds the writer,
    // a second one fills the outgoing queue.
    let _server = server;
    for _ in 0..2 {
        let big = RemotingCommand::request(7).with_body(vec![0u8; 4096]);
        conn.send_oneway(big, T).await.unwrap();
    }
    let waiting = ask(&conn, 1, Duration::from_millis(500));
    tokio::task::yield_now().await;
    let started = tokio::time::Instant::now();
    conn.close();
    let err = waiting.await.unwrap().unwrap_err();
    assert!(matches!(err, TransportError::Closed { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_millis(10),
        "failed after {:?}",
        started.elapsed()
    );
}
