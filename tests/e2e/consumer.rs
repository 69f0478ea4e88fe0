//! A consumer process: the `rocketmq_consumer` example with `--consume --json`, its standard
//! output read line by line into the [`Log`], its standard error (logs) into a file in the
//! cluster's directory (kept when a test fails). Killed when dropped.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rebalance_rocketmq::testkit::TestCluster;

use super::{HEARTBEAT_INTERVAL, Log, REBALANCE_INTERVAL};

/// Where the example binary is: `$REBALANCE_E2E_CONSUMER`, else beside this test's binary
/// (`target/<profile>/examples/`), where `cargo test` builds it (`cargo test --test NAME` alone
/// does not: build it with `cargo build --example rocketmq_consumer`).
fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("REBALANCE_E2E_CONSUMER") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test> -> target/<profile>/examples/rocketmq_consumer
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary is in target/<profile>/deps");
    let binary = profile_dir
        .join("examples")
        .join(format!("rocketmq_consumer{}", std::env::consts::EXE_SUFFIX));
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/rocketmq_consumer");
    let built = std::fs::metadata(&binary).and_then(|m| m.modified());
    // The example's newest source file.
    let written = std::fs::read_dir(&source).and_then(|files| {
        files
            .map(|f| f.and_then(|f| f.metadata()).and_then(|m| m.modified()))
            .try_fold(std::time::SystemTime::UNIX_EPOCH, |newest, t| {
                t.map(|t| newest.max(t))
            })
    });
    match (built, written) {
        (Err(_), _) => panic!(
            "{} is missing: build it with `cargo build --example rocketmq_consumer` \
             (`cargo test --workspace` and `cargo test -p rebalance` build it), or name another \
             binary in REBALANCE_E2E_CONSUMER",
            binary.display()
        ),
        (Ok(built), Ok(written)) if written > built => panic!(
            "{} is older than {}: rebuild it with `cargo build --example rocketmq_consumer`",
            binary.display(),
            source.display()
        ),
        _ => binary,
    }
}

/// A running consumer process.
pub struct ConsumerProcess {
    /// Its label, the end of its client id (`127.0.0.1@{label}`), as the log names it.
    pub label: String,
    child: Child,
    reader: Option<JoinHandle<()>>,
    stderr: PathBuf,
}

impl ConsumerProcess {
    /// Starts a consumer of `topic` in `group` with the suite's intervals, from the first offset
    /// of a queue nobody consumed, and `extra` arguments.
    pub fn spawn(
        cluster: &TestCluster,
        log: &Log,
        label: &str,
        group: &str,
        topic: &str,
        extra: &[&str],
    ) -> Self {
        let secs = |d: Duration| format!("{}ms", d.as_millis());
        let intervals = [
            "--rebalance-interval".to_string(),
            secs(REBALANCE_INTERVAL),
            "--heartbeat-interval".to_string(),
            secs(HEARTBEAT_INTERVAL),
        ];
        let intervals: Vec<&str> = intervals.iter().map(String::as_str).collect();
        Self::spawn_with(
            cluster,
            log,
            label,
            group,
            topic,
            &[&intervals, extra].concat(),
        )
    }

    /// Starts a consumer as [`spawn`](Self::spawn) does, but with the example's default
    /// intervals (a 20 s rebalance interval, a 30 s heartbeat: run it against brokers whose
    /// channel expiry is longer than the heartbeat, as production's 120 s is).
    pub fn spawn_defaults(
        cluster: &TestCluster,
        log: &Log,
        label: &str,
        group: &str,
        topic: &str,
        extra: &[&str],
    ) -> Self {
        Self::spawn_with(cluster, log, label, group, topic, extra)
    }

    fn spawn_with(
        cluster: &TestCluster,
        log: &Log,
        label: &str,
        group: &str,
        topic: &str,
        extra: &[&str],
    ) -> Self {
        let stderr = cluster.dir().join(format!("consumer-{label}.log"));
        let stderr_file = std::fs::File::create(&stderr).expect("create the consumer's log file");
        let mut child = Command::new(binary())
            .args(["--namesrv", &cluster.namesrv_addrs()])
            .args(["--group", group, "--topic", topic])
            .args(["--client-id", &format!("127.0.0.1@{label}")])
            // The brokers' expiry: a member not heard of for that long is gone for the others.
            .args([
                "--member-expiry",
                &format!(
                    "{}ms",
                    cluster.options().channel_expired_timeout.as_millis()
                ),
            ])
            .args(["--json", "--consume", "--consume-from", "first"])
            .args(extra)
            .env(
                "RUST_LOG",
                std::env::var("E2E_CONSUMER_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr_file)
            .spawn()
            .expect("start the rocketmq_consumer example");
        let stdout = child.stdout.take().expect("the consumer's standard output");
        let reader = {
            let log = log.clone();
            let label = label.to_string();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { return };
                    log.record(&label, Instant::now(), &line);
                }
            })
        };
        Self {
            label: label.to_string(),
            child,
            reader: Some(reader),
            stderr,
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it with SIGKILL (no goodbye to anyone); returns the instant of the kill.
    pub fn sigkill(&mut self) -> Instant {
        let at = Instant::now();
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.join_reader();
        at
    }

    /// Asks it to leave with SIGTERM and fails unless it exits successfully within `within`
    /// (a clean shutdown: batches finished, offsets persisted, unregistered).
    pub async fn sigterm(&mut self, within: Duration) {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill -TERM");
        assert!(sent.success(), "kill -TERM {} failed", self.child.id());
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    assert!(
                        status.success(),
                        "{} left with {status}; its log: {}",
                        self.label,
                        self.stderr.display()
                    );
                    self.join_reader();
                    return;
                }
                Ok(None) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                other => panic!(
                    "{} did not leave within {within:?} of SIGTERM ({other:?}); its log: {}",
                    self.label,
                    self.stderr.display()
                ),
            }
        }
    }

    /// Sends `signal` (`STOP`, `CONT`, ...) with `kill`; fails if it cannot be sent.
    fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{signal} {} failed", self.child.id());
    }

    /// Freezes it with SIGSTOP (a GC pause, a frozen VM: nothing runs, its sockets stay open);
    /// returns the instant of the freeze.
    pub fn sigstop(&self) -> Instant {
        let at = Instant::now();
        self.signal("STOP");
        at
    }

    /// Wakes it with SIGCONT; returns the instant it was woken.
    pub fn sigcont(&self) -> Instant {
        let at = Instant::now();
        self.signal("CONT");
        at
    }

    /// Its resident memory (`VmRSS` of `/proc/PID/status`), in KiB; `None` once it exited, or
    /// where there is no `/proc`.
    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib(self.child.id())
    }

    /// The file its standard error (its logs) goes to.
    pub fn log_path(&self) -> &std::path::Path {
        &self.stderr
    }

    /// Fails if the process has exited (it should be consuming).
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "{} exited ({status}); its log: {}",
                self.label,
                self.stderr.display()
            );
        }
    }

    fn join_reader(&mut self) {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl Drop for ConsumerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        self.join_reader();
        // A failed test's cluster directory goes with it: keep this consumer's log.
        if std::thread::panicking() {
            let kept = std::env::temp_dir().join("e2e-failed-logs");
            let to = kept.join(format!("consumer-{}-{}.log", self.label, self.child.id()));
            if std::fs::create_dir_all(&kept).is_ok() && std::fs::copy(&self.stderr, &to).is_ok() {
                eprintln!(
                    "the consumer {}'s log is kept in {}",
                    self.label,
                    to.display()
                );
            }
        }
    }
}

/// The resident memory of process `pid` (`VmRSS` of `/proc/PID/status`), in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}
