//! The test kit's servers die with the test process that started them, even when that process
//! is SIGKILLed and so never drops its `TestCluster`.
//!
//! The test runs this test binary again as a child that starts a real cluster (name server and
//! broker), reports the servers' pids and waits; then it SIGKILLs the child and watches the
//! servers go.
#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rebalance_rocketmq::testkit::TestCluster;

/// Set in the child's environment: only then does the child test start a cluster.
const CHILD_ENV: &str = "REBALANCE_TESTKIT_ORPHAN_CHILD";
/// The line the child prints once its servers run: the marker, the cluster directory, the pids.
const MARKER: &str = "testkit-orphan-child:";
/// How long the servers may take to go once the child is killed (the watchdog acts at once).
const GONE_WITHIN: Duration = Duration::from_secs(10);

/// Whether `pid` is a live process. A zombie is dead (no ports, no memory left): once its
/// parent is killed, a server is reaped by whoever adopts it, maybe late.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) state ...`; comm may hold spaces and parentheses, the state follows the last `)`.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

#[test]
fn servers_die_with_a_test_process_that_is_sigkilled() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_starts_a_cluster_and_waits",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let report = stdout
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix(MARKER).map(str::to_string));
    let Some(report) = report else {
        let status = child.wait().unwrap();
        panic!("the child ended ({status}) without starting its cluster");
    };
    let mut words = report.split_whitespace();
    let dir = PathBuf::from(words.next().unwrap());
    let pids: Vec<u32> = words.map(|p| p.parse().unwrap()).collect();
    assert_eq!(pids.len(), 2, "a name server and a broker: {report}");
    assert!(
        pids.iter().all(|&pid| alive(pid)),
        "the servers run: {pids:?}"
    );

    child.kill().unwrap(); // SIGKILL: the child's TestCluster is never dropped.
    child.wait().unwrap();
    let killed = Instant::now();
    let mut left: Vec<u32> = pids.clone();
    while !left.is_empty() && killed.elapsed() < GONE_WITHIN {
        std::thread::sleep(Duration::from_millis(20));
        left.retain(|&pid| alive(pid));
    }
    for pid in &left {
        // Not left behind by this test either.
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    // The killed child could not delete its cluster directory.
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        left.is_empty(),
        "servers still alive {GONE_WITHIN:?} after their test process was killed: {left:?} of {pids:?}"
    );
}

/// The child: starts a cluster, reports it, and waits to be killed. Ignored, and a no-op unless
/// run by the test above.
#[test]
#[ignore = "run by servers_die_with_a_test_process_that_is_sigkilled"]
fn child_starts_a_cluster_and_waits() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let cluster = TestCluster::start().unwrap();
    let pids: Vec<String> = cluster.server_pids().iter().map(u32::to_string).collect();
    println!("{MARKER}{} {}", cluster.dir().display(), pids.join(" "));
    // Until the parent kills this process. Should the parent go first, its end of standard
    // input closes and this returns, stopping the cluster the ordinary way.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}
