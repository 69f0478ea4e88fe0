//! `local-cluster up`: start the servers, print their addresses, wait for a signal, stop them.

use std::fs::File;
use std::io::Write;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rebalance_rocketmq::testkit::{ClusterOptions, TestCluster, TestkitError};
use serde_json::json;
use tokio::signal::unix::{Signal, SignalKind, signal};

use super::state::{self, BrokerInfo, State, TopicInfo};
use super::{LocalClusterError, UpArgs, cluster_dir, installed, system, write_text};

/// How long a detached `up` may take to get its servers ready.
const DETACHED_START: Duration = Duration::from_secs(180);

/// The name of broker `k` (0: `broker-a`).
fn broker_name(k: usize) -> String {
    let letter = char::from(b'a' + (k % 26) as u8);
    format!("broker-{letter}")
}

/// Refuses a directory a running cluster uses; forgets the state an `up` that died left.
fn refuse_if_running(dir: &Path) -> Result<(), LocalClusterError> {
    match State::read(dir)? {
        Some(state) if state.up_runs() => Err(LocalClusterError::AlreadyRunning {
            dir: dir.to_path_buf(),
            pid: state.pid,
            namesrv: state.namesrv,
        }),
        Some(_) => Ok(State::remove(dir)?),
        None => Ok(()),
    }
}

/// Runs `up`.
pub fn run(
    args: &UpArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), LocalClusterError> {
    installed()?;
    let dir = cluster_dir(args.dir.as_deref());
    refuse_if_running(&dir)?;
    if args.detach && !args.detached_child {
        return detach(args, &dir, out);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(system("cannot build the runtime"))?;
    let _entered = runtime.enter();
    // Before anything starts, so that a Ctrl-C while the servers start stops them once they
    // run instead of killing this process (whose watchdogs would then kill them).
    let mut signals = Signals::new(args.detached_child)?;
    writeln!(
        err,
        "rebalance local-cluster: starting a name server and {} broker(s) in {}",
        args.brokers,
        dir.display()
    )?;
    let options = ClusterOptions {
        channel_expired_timeout: args.client_expiry,
        start_timeout: Duration::from_secs(60),
        stop_grace: Duration::from_secs(15),
        broker_name: broker_name(0),
        namesrv_port: (args.namesrv_port != 0).then_some(args.namesrv_port),
        dir: Some(dir.clone()),
        ..ClusterOptions::default()
    };
    let mut cluster = TestCluster::start_with(options).map_err(|e| match e {
        TestkitError::PortInUse(port) => LocalClusterError::PortInUse(port),
        other => LocalClusterError::Start(other),
    })?;
    for k in 1..args.brokers {
        cluster
            .add_broker(&broker_name(k))
            .map_err(LocalClusterError::Start)?;
    }
    let queues = i32::try_from(args.queues).unwrap_or(i32::MAX);
    for topic in &args.topics {
        runtime
            .block_on(cluster.create_topic(topic, queues))
            .map_err(|source| LocalClusterError::Topic {
                topic: topic.clone(),
                source,
            })?;
    }
    let mut brokers = Vec::new();
    for name in cluster.broker_names() {
        let addr = cluster
            .broker_addr(&name)
            .map_err(LocalClusterError::Start)?;
        brokers.push(BrokerInfo { name, addr });
    }
    let state = State {
        namesrv: cluster.namesrv_addr(),
        brokers,
        topics: args
            .topics
            .iter()
            .map(|topic| TopicInfo {
                topic: topic.clone(),
                queues,
            })
            .collect(),
        dir: dir.clone(),
        pid: std::process::id(),
        server_pids: cluster.server_pids(),
    };
    state.write()?;
    write_ready(&state, args.json, out)?;
    if !args.json {
        hints(&state, err)?;
    }
    out.flush()?;

    let stop = runtime.block_on(signals.wait(&mut cluster));
    let died = match &stop {
        Stop::Died(servers) => Some(LocalClusterError::ServerDied {
            servers: servers.join(", "),
            log: servers
                .iter()
                .map(|s| cluster.log_tail(s))
                .collect::<Vec<_>>()
                .join("\n"),
        }),
        Stop::Signal(_) => None,
    };
    writeln!(
        err,
        "rebalance local-cluster: {}, stopping the servers",
        stop.reason()
    )?;
    // SIGTERM to every server, SIGKILL to those still running after the grace.
    drop(cluster);
    State::remove(&dir)?;
    if args.json {
        writeln!(out, "{}", json!({"stopped": stop.reason()}))?;
    } else {
        writeln!(
            out,
            "stopped ({}); the data stays in {}",
            stop.reason(),
            dir.display()
        )?;
    }
    out.flush()?;
    match died {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn write_ready(state: &State, json: bool, out: &mut dyn Write) -> std::io::Result<()> {
    if json {
        let line = serde_json::to_string(state).unwrap_or_default();
        writeln!(out, "{line}")
    } else {
        write_text(state, out)
    }
}

/// What to run next, on standard error.
fn hints(state: &State, err: &mut dyn Write) -> std::io::Result<()> {
    let topic = state.topics.first().map_or("T", |t| t.topic.as_str());
    let ns = &state.namesrv;
    writeln!(
        err,
        "rebalance local-cluster: ready. Try, in other terminals:"
    )?;
    if state.topics.is_empty() {
        writeln!(
            err,
            "  (no --topic given: topics of earlier runs in this directory are kept; \
             `up --topic {topic}` creates one)"
        )?;
    }
    writeln!(
        err,
        "  cargo run --example rocketmq_consumer -- --namesrv {ns} --group G --topic {topic} --consume"
    )?;
    writeln!(
        err,
        "  rebalance send --namesrv {ns} --topic {topic} --count 100 --rate 10"
    )?;
    writeln!(err, "  rebalance describe --namesrv {ns} --group G")?;
    writeln!(
        err,
        "Ctrl-C stops the servers (or: rebalance local-cluster down --dir {}).",
        state.dir.display()
    )
}

/// Why `up` stops.
enum Stop {
    /// A signal asked.
    Signal(&'static str),
    /// These servers stopped by themselves.
    Died(Vec<String>),
}

impl Stop {
    fn reason(&self) -> String {
        match self {
            Stop::Signal(name) => (*name).to_string(),
            Stop::Died(servers) => format!("{} stopped by itself", servers.join(", ")),
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP (caught, so that none of them kills the process with its
/// servers: each stops them cleanly; a detached `up` ignores SIGHUP).
struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
    ignore_hangup: bool,
}

impl Signals {
    fn new(ignore_hangup: bool) -> Result<Self, LocalClusterError> {
        let handler =
            |kind, name: &str| signal(kind).map_err(system(format!("cannot handle {name}")));
        Ok(Self {
            interrupt: handler(SignalKind::interrupt(), "SIGINT")?,
            terminate: handler(SignalKind::terminate(), "SIGTERM")?,
            hangup: handler(SignalKind::hangup(), "SIGHUP")?,
            ignore_hangup,
        })
    }

    /// Waits for a signal, checking every second that the servers still run.
    async fn wait(&mut self, cluster: &mut TestCluster) -> Stop {
        let mut check = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = self.interrupt.recv() => return Stop::Signal("SIGINT"),
                _ = self.terminate.recv() => return Stop::Signal("SIGTERM"),
                _ = self.hangup.recv() => {
                    if !self.ignore_hangup {
                        return Stop::Signal("SIGHUP");
                    }
                }
                _ = check.tick() => {
                    let down = cluster.servers_down();
                    if !down.is_empty() {
                        return Stop::Died(down);
                    }
                }
            }
        }
    }
}

/// `up --detach`: the same `up` in a process of its own (its own process group, so that the
/// terminal's Ctrl-C does not reach it; output in the directory's log), returning once its
/// servers are ready.
fn detach(args: &UpArgs, dir: &Path, out: &mut dyn Write) -> Result<(), LocalClusterError> {
    std::fs::create_dir_all(dir).map_err(system(format!("cannot create {}", dir.display())))?;
    let log_path = dir.join(state::DETACHED_LOG);
    let log =
        File::create(&log_path).map_err(system(format!("cannot create {}", log_path.display())))?;
    let log_err = log.try_clone().map_err(system("cannot share the log"))?;
    let exe = std::env::current_exe().map_err(system("cannot find this program"))?;
    let mut argv: Vec<String> = vec![
        "local-cluster".into(),
        "up".into(),
        "--detached-child".into(),
        "--dir".into(),
        dir.display().to_string(),
        "--brokers".into(),
        args.brokers.to_string(),
        "--namesrv-port".into(),
        args.namesrv_port.to_string(),
        "--queues".into(),
        args.queues.to_string(),
        "--client-expiry".into(),
        format!("{}ms", args.client_expiry.as_millis()),
    ];
    for topic in &args.topics {
        argv.extend(["--topic".to_string(), topic.clone()]);
    }
    let mut child = Command::new(exe)
        .args(&argv)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .process_group(0)
        .spawn()
        .map_err(system("cannot start the detached cluster"))?;
    let pid = child.id();
    let started = Instant::now();
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(system("cannot watch the detached cluster"))?
        {
            return Err(LocalClusterError::Detached {
                status: status.to_string(),
                log: log_tail(&log_path),
            });
        }
        if let Some(state) = State::read(dir)?.filter(|s| s.pid == pid) {
            write_ready(&state, args.json, out)?;
            if !args.json {
                writeln!(
                    out,
                    "running in the background; stop it with: rebalance local-cluster down --dir {}",
                    dir.display()
                )?;
            }
            return Ok(());
        }
        if started.elapsed() > DETACHED_START {
            state::signal(pid, "-TERM");
            return Err(LocalClusterError::Detached {
                status: format!("not ready after {DETACHED_START:?}, stopped"),
                log: log_tail(&log_path),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The last lines of a log, for an error message.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text[text.len().saturating_sub(4096)..]).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    format!(
        "{} ends with:\n{}",
        path.display(),
        lines[lines.len().saturating_sub(30)..].join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brokers_are_named_by_letter() {
        assert_eq!(broker_name(0), "broker-a");
        assert_eq!(broker_name(9), "broker-j");
    }
}
