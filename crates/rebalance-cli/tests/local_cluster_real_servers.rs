//! `rebalance local-cluster` on the real servers, run as a user runs it, in a child process:
//! `up` prints the addresses of servers that answer (a topic routed on every broker, messages
//! stored), stops them on Ctrl-C (SIGINT) or with `down` (after `--detach`), and never leaves
//! them behind when it is killed; the data stays in its directory for the next `up`.
//!
//! Needs the servers (`scripts/install-rocketmq-servers`); without them each test fails saying
//! so. Every wait is bounded.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::process_alive;
use rebalance_rocketmq::NameServerClient;
use rebalance_rocketmq::testkit::ServerBinaries;
use serde_json::Value;

/// How long the servers may take to start (as long as the test kit gives them, and more).
const START: Duration = Duration::from_secs(120);
/// How long stopping may take (the servers' SIGTERM grace is 15 s).
const STOP: Duration = Duration::from_secs(60);

fn rebalance() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rebalance"))
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "rebalance-local-cluster-real-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A `rebalance local-cluster up --json` in the foreground, killed (SIGKILL) when dropped.
struct Up {
    child: Child,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Up {
    fn start(dir: &Path, extra: &[&str]) -> Up {
        // Fails here, with the instructions, when the servers are missing.
        ServerBinaries::locate().unwrap();
        let mut child = rebalance()
            .args([
                "local-cluster",
                "up",
                "--json",
                "--namesrv-port",
                "0",
                "--dir",
            ])
            .arg(dir)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run rebalance local-cluster up");
        let (tx, lines) = channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut text = sink.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        });
        Up {
            child,
            lines,
            stderr,
        }
    }

    /// The next line it prints, as JSON.
    fn line(&self, within: Duration) -> Value {
        let line = self.lines.recv_timeout(within).unwrap_or_else(|e| {
            panic!(
                "no line from `local-cluster up` within {within:?} ({e}); its standard error:\n{}",
                self.stderr.lock().unwrap()
            )
        });
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until it exits: whether it succeeded.
    fn exited(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.success();
            }
            assert!(
                Instant::now() < deadline,
                "`local-cluster up` still runs after {within:?}; its standard error:\n{}",
                self.stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signal(pid: u32, which: &str) {
    let sent = Command::new("kill")
        .args([which, &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill {which} {pid}");
}

fn pids(ready: &Value) -> Vec<u32> {
    ready["server_pids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap() as u32)
        .collect()
}

/// Waits until none of `pids` runs.
fn all_gone(pids: &[u32], within: Duration) {
    let deadline = Instant::now() + within;
    while pids.iter().any(|p| process_alive(*p)) {
        assert!(
            Instant::now() < deadline,
            "servers still running after {within:?}: {:?}",
            pids.iter()
                .filter(|p| process_alive(**p))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The name server's route of `topic`: read queues per broker name.
fn route(namesrv: &str, topic: &str) -> Vec<(String, i32)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let route = runtime
        .block_on(async {
            let name_server = NameServerClient::from_addresses(namesrv).unwrap();
            tokio::time::timeout(Duration::from_secs(20), name_server.route(topic)).await
        })
        .expect("the name server answers within 20 s")
        .unwrap_or_else(|e| panic!("route of {topic}: {e}"));
    let mut queues: Vec<(String, i32)> = route
        .queue_datas
        .iter()
        .map(|q| (q.broker_name.clone(), q.read_queue_nums))
        .collect();
    queues.sort();
    queues
}

/// `rebalance send` of `count` messages: the brokers they were stored on.
fn send(namesrv: &str, topic: &str, count: u32) -> Vec<String> {
    let output = rebalance()
        .args([
            "send",
            "--namesrv",
            namesrv,
            "--topic",
            topic,
            "--json",
            "--count",
        ])
        .arg(count.to_string())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let line: Value = serde_json::from_str(l).unwrap();
            line["broker"].as_str().unwrap().to_string()
        })
        .collect()
}

#[test]
fn up_serves_a_real_cluster_and_stops_it_on_ctrl_c() {
    let dir = temp_dir("sigint");
    let mut up = Up::start(&dir, &["--brokers", "2", "--topic", "T", "--queues", "4"]);
    let ready = up.line(START);
    let namesrv = ready["namesrv"].as_str().unwrap();
    assert_eq!(ready["pid"], up.pid());
    assert_eq!(ready["dir"], dir.to_str().unwrap());
    let brokers: Vec<&str> = ready["brokers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(brokers, ["broker-a", "broker-b"]);
    let servers = pids(&ready);
    assert_eq!(servers.len(), 3, "a name server and two brokers");
    assert!(servers.iter().all(|p| process_alive(*p)));

    // The name server routes the topic on both brokers, and they store messages.
    assert_eq!(
        route(namesrv, "T"),
        [("broker-a".to_string(), 4), ("broker-b".to_string(), 4)]
    );
    let stored = send(namesrv, "T", 8);
    assert_eq!(stored.len(), 8);
    assert!(stored.iter().any(|b| b == "broker-a") && stored.iter().any(|b| b == "broker-b"));

    // Ctrl-C: the servers are stopped and the process ends cleanly.
    signal(up.pid(), "-INT");
    assert_eq!(up.line(STOP), serde_json::json!({"stopped": "SIGINT"}));
    assert!(up.exited(STOP), "{}", up.stderr.lock().unwrap());
    all_gone(&servers, Duration::from_secs(5));
    assert!(!dir.join("local-cluster.json").exists());
    assert!(
        dir.join("broker-a").join("store").is_dir(),
        "the data stays"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_detached_cluster_is_stopped_by_down() {
    ServerBinaries::locate().unwrap();
    let dir = temp_dir("detached");
    let d = dir.to_str().unwrap();
    let started = Instant::now();
    let output = rebalance()
        .args([
            "local-cluster",
            "up",
            "--detach",
            "--json",
            "--namesrv-port",
            "0",
        ])
        .args(["--topic", "D", "--dir", d])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(200));
    let ready: Value = serde_json::from_slice(&output.stdout).unwrap();
    let up = ready["pid"].as_u64().unwrap() as u32;
    let servers = pids(&ready);
    assert!(process_alive(up), "it runs after `up --detach` returned");
    let namesrv = ready["namesrv"].as_str().unwrap();
    assert_eq!(route(namesrv, "D"), [("broker-a".to_string(), 8)]);

    let status = rebalance()
        .args(["local-cluster", "status", "--json", "--dir", d])
        .output()
        .unwrap();
    assert!(status.status.success());
    let listed: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(listed, ready);

    let down = rebalance()
        .args(["local-cluster", "down", "--dir", d])
        .output()
        .unwrap();
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert!(!process_alive(up));
    all_gone(&servers, Duration::from_secs(5));
    let status = rebalance()
        .args(["local-cluster", "status", "--dir", d])
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(1));
    let log = std::fs::read_to_string(dir.join("local-cluster.log")).unwrap();
    assert!(log.contains("SIGTERM, stopping the servers"), "{log}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_killed_up_takes_its_servers_along_and_the_next_up_finds_the_data() {
    let dir = temp_dir("killed");
    let mut up = Up::start(&dir, &["--topic", "K"]);
    let ready = up.line(START);
    let namesrv = ready["namesrv"].as_str().unwrap().to_string();
    assert_eq!(send(&namesrv, "K", 3).len(), 3);
    let servers = pids(&ready);

    // SIGKILL: no chance to stop anything; the test kit's watchdogs kill the servers.
    signal(up.pid(), "-KILL");
    assert!(!up.exited(STOP));
    all_gone(&servers, Duration::from_secs(15));

    // The next `up` on the directory replaces the dead one's state and finds the topic.
    let mut again = Up::start(&dir, &[]);
    let ready = again.line(START);
    let namesrv = ready["namesrv"].as_str().unwrap();
    assert_eq!(route(namesrv, "K"), [("broker-a".to_string(), 8)]);
    signal(again.pid(), "-TERM");
    assert_eq!(again.line(STOP), serde_json::json!({"stopped": "SIGTERM"}));
    assert!(again.exited(STOP));
    all_gone(&pids(&ready), Duration::from_secs(5));
    std::fs::remove_dir_all(&dir).unwrap();
}
