//! `rebalance local-cluster` without real servers: missing servers are explained with the exact
//! install commands, and `down` / `status` work through the state file of the process running
//! the cluster (here a stand-in process). The servers themselves: `local_cluster_real_servers.rs`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "rebalance-local-cluster-test-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `rebalance ARGS` with `ROCKETMQ_SERVERS_DIR` set to `servers`.
fn rebalance(servers: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rebalance"))
        .args(args)
        .env("ROCKETMQ_SERVERS_DIR", servers)
        .stdin(Stdio::null())
        .output()
        .expect("run rebalance")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Fake server binaries: enough for `up` to believe they are installed. Each test names its own
/// directory: tests run in parallel, and `temp` empties the directory it is given.
fn fake_servers(name: &str) -> PathBuf {
    let dir = temp(&format!("servers-{name}"));
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    for bin in ["rocketmq-namesrv-rust", "rocketmq-broker-rust"] {
        std::fs::write(dir.join("bin").join(bin), "").unwrap();
    }
    dir
}

/// A state file naming `pid` as the `up` of a cluster in `dir`.
fn write_state(dir: &Path, pid: u32) {
    let state = serde_json::json!({
        "namesrv": "127.0.0.1:19876",
        "brokers": [{"name": "broker-a", "addr": "127.0.0.1:10911"}],
        "topics": [],
        "dir": dir,
        "pid": pid,
        "server_pids": [],
    });
    std::fs::write(dir.join("local-cluster.json"), state.to_string()).unwrap();
}

/// A process whose command line says `local-cluster`, as a running `up`'s does; it stops on
/// SIGTERM, and is killed when dropped (a failed test leaves nothing behind).
struct StandIn(Child);

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn stand_in_up() -> StandIn {
    StandIn(
        Command::new("sh")
            .args([
                "-c",
                "trap 'exit 143' TERM; while :; do sleep 0.1; done",
                "local-cluster",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

#[test]
fn up_without_the_servers_says_how_to_install_them() {
    let servers = temp("none");
    let dir = temp("up").join("cluster");
    let run = rebalance(
        &servers,
        &["local-cluster", "up", "--dir", dir.to_str().unwrap()],
    );
    assert_eq!(run.status.code(), Some(1));
    let stderr = text(&run.stderr);
    assert!(
        stderr.contains("the RocketMQ servers are not installed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("\n    bash scripts/install-rocketmq-servers\n"),
        "{stderr}"
    );
    let root = servers.display();
    assert!(
        stderr.contains(&format!(
            "cargo install --locked --root {root} rocketmq-namesrv@1.0.0 rocketmq-broker@1.0.0"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("15-25 minutes"), "{stderr}");
    assert!(run.stdout.is_empty());
    assert!(
        !dir.exists(),
        "nothing is created before the servers are found"
    );
}

#[test]
fn down_and_status_without_a_cluster_say_so() {
    let servers = temp("none2");
    let dir = temp("empty");
    for command in ["down", "status"] {
        let run = rebalance(
            &servers,
            &["local-cluster", command, "--dir", dir.to_str().unwrap()],
        );
        assert_eq!(run.status.code(), Some(1), "{command}");
        assert!(
            text(&run.stderr).contains("no local cluster runs from"),
            "{command}: {}",
            text(&run.stderr)
        );
    }
}

#[test]
fn bad_broker_counts_are_refused() {
    for n in ["0", "11"] {
        let run = common::rebalance_text(&["local-cluster", "up", "--brokers", n]);
        assert_eq!(run.code, Some(2), "{n}: {}", run.stderr);
    }
}

#[test]
fn status_and_down_go_through_the_process_named_in_the_directory() {
    let servers = fake_servers("running");
    let dir = temp("running");
    let mut up = stand_in_up();
    let pid = up.0.id();
    write_state(&dir, pid);
    let d = dir.to_str().unwrap();

    let run = rebalance(&servers, &["local-cluster", "status", "--dir", d, "--json"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let line: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(line["namesrv"], "127.0.0.1:19876");

    // A second `up` on the directory is refused, naming the running one.
    let run = rebalance(&servers, &["local-cluster", "up", "--dir", d]);
    assert_eq!(run.status.code(), Some(2), "{}", text(&run.stderr));
    assert!(
        text(&run.stderr).contains(&format!("already runs from {d} (pid {pid}, ")),
        "{}",
        text(&run.stderr)
    );

    let started = Instant::now();
    let run = rebalance(&servers, &["local-cluster", "down", "--dir", d]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(text(&run.stdout).contains("stopped the local cluster"));
    let status = up.0.wait().unwrap();
    assert!(!status.success(), "ended by SIGTERM: {status}");
    assert!(!common::process_alive(pid));
    assert!(!dir.join("local-cluster.json").exists());
    let run = rebalance(&servers, &["local-cluster", "status", "--dir", d]);
    assert_eq!(run.status.code(), Some(1));
}

#[test]
fn the_state_of_a_cluster_whose_process_died_is_cleaned_up() {
    let servers = fake_servers("stale");
    let dir = temp("stale");
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    write_state(&dir, pid);
    let d = dir.to_str().unwrap();
    let run = rebalance(&servers, &["local-cluster", "status", "--dir", d]);
    assert_eq!(run.status.code(), Some(1), "a dead process runs nothing");
    let run = rebalance(&servers, &["local-cluster", "down", "--dir", d]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert!(
        text(&run.stdout).contains("is gone"),
        "{}",
        text(&run.stdout)
    );
    assert!(!dir.join("local-cluster.json").exists());
}

#[test]
fn a_name_server_port_in_use_is_refused_before_anything_starts() {
    let servers = fake_servers("port");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let dir = temp("port");
    let run = rebalance(
        &servers,
        &[
            "local-cluster",
            "up",
            "--namesrv-port",
            &port,
            "--dir",
            dir.to_str().unwrap(),
        ],
    );
    assert_eq!(run.status.code(), Some(2), "{}", text(&run.stderr));
    assert!(
        text(&run.stderr).contains(&format!(
            "port {port} on 127.0.0.1 is in use (a name server already runs there?)"
        )),
        "{}",
        text(&run.stderr)
    );
    assert!(!dir.join("namesrv.log").exists(), "no server was started");
}
