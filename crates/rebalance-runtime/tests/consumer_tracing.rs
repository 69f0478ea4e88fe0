//! The consumer's log events that say something went wrong: the WARN when every handle was
//! dropped, and the ERROR of each failed `queues_added` with its attempt number.
//!
//! In a test binary of its own, each test run alone (`traced` holds a lock), on a runtime of
//! its own with its own subscriber: a scoped subscriber set on one test thread would miss
//! events whose call sites other test threads registered first.

mod common;

mod capture;

use capture::Capture;

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use common::*;
use rebalance_runtime::memory::InMemoryCluster;

/// One test at a time in this binary.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `test` on a paused current-thread runtime with a subscriber of its own (INFO and
/// above), and returns what was logged.
fn traced(test: impl Future<Output = ()>) -> String {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let capture = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(capture.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(test);
    capture.take()
}

fn lines_with<'a>(log: &'a str, text: &str) -> Vec<&'a str> {
    log.lines().filter(|l| l.contains(text)).collect()
}

/// Dropping every handle shuts the consumer down, and says so at WARN with how to stop on
/// purpose: it is most often a mistake (`start().await?;` written as a statement).
#[test]
fn dropping_every_handle_is_a_warning_that_says_how_to_stop_on_purpose() {
    let log = traced(async {
        let cluster = InMemoryCluster::new();
        cluster.create_topic("T", 1, 2);
        let a = start(&cluster, 0, &["T"]).await;
        settle(Duration::from_secs(1)).await;
        let token = a.handle.token().clone();
        drop(a.handle);
        settle(Duration::from_secs(1)).await;
        assert!(token.is_cancelled());
        assert!(cluster.members(GROUP).is_empty());
    });
    let lines = lines_with(&log, "every consumer handle was dropped");
    assert_eq!(lines.len(), 1, "{log}");
    let line = lines[0];
    assert!(line.contains(" WARN "), "{line}");
    assert!(line.contains("call `shutdown().await`"), "{line}");
}

/// A consumer stopped on purpose says nothing about dropped handles when they go afterwards.
#[test]
fn a_shutdown_on_purpose_does_not_warn_about_dropped_handles() {
    let log = traced(async {
        let cluster = InMemoryCluster::new();
        cluster.create_topic("T", 1, 2);
        let a = start(&cluster, 0, &["T"]).await;
        settle(Duration::from_secs(1)).await;
        a.handle.shutdown().await;
        drop(a.handle);
        settle(Duration::from_secs(1)).await;
    });
    assert!(
        lines_with(&log, "every consumer handle was dropped").is_empty(),
        "{log}"
    );
    assert!(lines_with(&log, " WARN ").is_empty(), "{log}");
}

/// Each failed `queues_added` is logged at ERROR with its attempt number, which grows with
/// every retry, whether the callback panics or runs past `callback_timeout`.
#[test]
fn each_failed_queues_added_is_logged_with_a_growing_attempt_number() {
    for panics in [true, false] {
        let log = traced(async move {
            let cluster = InMemoryCluster::new();
            cluster.create_topic("T", 1, 2);
            let recorder = Recorder::new();
            let counter = if panics {
                &recorder.panic_added
            } else {
                &recorder.hang_added
            };
            *counter.lock().unwrap() = 3;
            let a = start_recording(&cluster, 0, &["T"], recorder.clone(), |b| b).await;
            settle(Duration::from_secs(120)).await;
            assert_eq!(*counter.lock().unwrap(), 0);
            a.handle.shutdown().await;
        });
        let failed = lines_with(&log, "queues_added failed; calling it again");
        assert_eq!(failed.len(), 3, "panics: {panics}\n{log}");
        for (line, attempt) in failed.iter().zip(1..) {
            assert!(line.contains(" ERROR "), "{line}");
            assert!(
                line.contains(&format!("attempt={attempt} ")),
                "attempt {attempt}: {line}"
            );
            let how = if panics {
                "panicked: injected listener panic in queues_added"
            } else {
                "did not return within 10s (callback_timeout)"
            };
            assert!(line.contains(how), "{line}");
        }
        let retried = lines_with(&log, "calling queues_added again");
        assert_eq!(retried.len(), 3, "panics: {panics}\n{log}");
        let succeeded = lines_with(&log, "queues_added succeeded");
        assert_eq!(succeeded.len(), 1, "panics: {panics}\n{log}");
        assert!(succeeded[0].contains("attempt=4"), "{}", succeeded[0]);
    }
}
