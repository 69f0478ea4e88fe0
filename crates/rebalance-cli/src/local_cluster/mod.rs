//! `rebalance local-cluster up | down | status`: the installed RocketMQ name server and brokers
//! on loopback, to try the consumer and the commands on a real cluster in one command.
//!
//! `up` starts them through the transport's test kit ([`rebalance_rocketmq::testkit`]), with
//! their configs, stores and logs in a directory it names, prints their addresses, and runs in
//! the foreground until Ctrl-C (SIGINT), SIGTERM or SIGHUP, then stops them. The servers never
//! outlive it: the kit's watchdogs kill them when its process dies, however it dies. `up
//! --detach` runs it in the background instead (its output in the directory's
//! `local-cluster.log`), and `down --dir DIR` stops it, through the state file the running `up`
//! keeps in the directory (`local-cluster.json`, see [`state`]).

mod down;
pub mod state;
mod up;

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rebalance_rocketmq::testkit::{ServerBinaries, TestkitError};

pub use self::state::State;
use self::state::StateError;
use crate::limits;

/// The most brokers `up` starts.
pub const MAX_BROKERS: usize = 10;
/// The name server's port by default: the one every RocketMQ client tries first.
pub const DEFAULT_NAMESRV_PORT: u16 = 9876;

/// The command's subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum LocalClusterCommand {
    /// Start a name server and broker(s) on 127.0.0.1 and print their addresses; stop them on
    /// Ctrl-C (or with `down`).
    Up(UpArgs),
    /// Stop the cluster an `up` (foreground or --detach) runs from --dir.
    Down(DownArgs),
    /// Say whether a cluster runs from --dir, and its addresses.
    Status(StatusArgs),
}

/// `local-cluster up`.
#[derive(Debug, Clone, clap::Args)]
pub struct UpArgs {
    /// Brokers to start (`broker-a`, `broker-b`, …), from 1 to 10.
    #[arg(long, default_value_t = 1, value_parser = limits::count(1, MAX_BROKERS))]
    pub brokers: usize,
    /// The cluster's directory: configs, stores (kept between runs), the servers' logs, and the
    /// state file `down` reads. Default: `rebalance-local-cluster` in the temporary directory.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// The name server's port on 127.0.0.1 (0: any free port).
    #[arg(long, value_name = "PORT", default_value_t = DEFAULT_NAMESRV_PORT)]
    pub namesrv_port: u16,
    /// A topic to create on every broker once they run (repeatable).
    #[arg(long = "topic", value_name = "TOPIC")]
    pub topics: Vec<String>,
    /// Read and write queues of each --topic on each broker, from 1 to 1024.
    #[arg(long, default_value_t = 8, value_parser = limits::count(1, 1024))]
    pub queues: usize,
    /// How long a broker keeps a client that stopped heartbeating with its connection open
    /// (its `channelExpiredTimeout`; 120 s in production): how long the queues of a consumer
    /// gone silent (frozen, cut off, its host dead) wait for its group to see it gone. A killed
    /// consumer's connection closes and the broker drops it at once. At most 1h.
    #[arg(long, value_name = "D", default_value = "120s", value_parser = limits::duration_up_to(Duration::from_secs(3600)))]
    pub client_expiry: Duration,
    /// Run in the background and return once the servers are ready (output in the directory's
    /// `local-cluster.log`); stop it with `rebalance local-cluster down --dir DIR`.
    #[arg(long)]
    pub detach: bool,
    /// One JSON line when the servers are ready, `{"namesrv", "brokers": [{"name", "addr"}],
    /// "topics": [{"topic", "queues"}], "dir", "pid", "server_pids"}`, and
    /// `{"stopped": REASON}` when they are stopped.
    #[arg(long)]
    pub json: bool,
    /// Set by `--detach` on the process it starts.
    #[arg(long, hide = true)]
    pub detached_child: bool,
}

/// `local-cluster down`.
#[derive(Debug, Clone, clap::Args)]
pub struct DownArgs {
    /// The directory the cluster runs from (as given to `up`).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// How long to wait for the servers to stop, at most 10m.
    #[arg(long, value_name = "D", default_value = "60s", value_parser = limits::duration_up_to(Duration::from_secs(600)))]
    pub timeout: Duration,
}

/// `local-cluster status`.
#[derive(Debug, Clone, clap::Args)]
pub struct StatusArgs {
    /// The directory the cluster runs from (as given to `up`).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// The running cluster as `up --json` prints it.
    #[arg(long)]
    pub json: bool,
}

/// `--dir`, or the default directory.
pub fn cluster_dir(dir: Option<&Path>) -> PathBuf {
    match dir {
        Some(dir) => dir.to_path_buf(),
        None => std::env::temp_dir().join("rebalance-local-cluster"),
    }
}

/// Why the command failed.
#[derive(Debug, thiserror::Error)]
pub enum LocalClusterError {
    /// The server binaries are not installed.
    #[error(
        "the RocketMQ servers are not installed: {missing} missing in {}.\n\
         Install them once (they are built from source: about 15-25 minutes on 2 cores, \
         2 GB of memory), from a checkout of this repository:\n    \
         bash scripts/install-rocketmq-servers\n\
         or anywhere:\n    \
         cargo install --locked --root {} rocketmq-namesrv@1.0.0 rocketmq-broker@1.0.0\n\
         (or point ROCKETMQ_SERVERS_DIR at a directory whose bin/ holds them)",
        dir.join("bin").display(),
        dir.display()
    )]
    NotInstalled {
        /// The directory whose `bin/` was searched.
        dir: PathBuf,
        /// The binaries missing.
        missing: String,
    },
    /// A cluster already runs from the directory.
    #[error(
        "a local cluster already runs from {} (pid {pid}, name server {namesrv}); stop it with \
         `rebalance local-cluster down --dir {}`, or give another --dir",
        dir.display(),
        dir.display()
    )]
    AlreadyRunning {
        /// The directory.
        dir: PathBuf,
        /// The `up` running it.
        pid: u32,
        /// Its name server.
        namesrv: String,
    },
    /// No cluster runs from the directory.
    #[error("no local cluster runs from {}", dir.display())]
    NotRunning {
        /// The directory.
        dir: PathBuf,
    },
    /// The name server's port is taken.
    #[error(
        "port {0} on 127.0.0.1 is in use (a name server already runs there?): stop what uses \
         it, or give another --namesrv-port (0 picks a free one)"
    )]
    PortInUse(u16),
    /// The servers could not be started.
    #[error("the servers did not start: {0}")]
    Start(TestkitError),
    /// A topic could not be created.
    #[error("topic `{topic}`: {source}")]
    Topic {
        /// The topic.
        topic: String,
        /// Why.
        source: TestkitError,
    },
    /// A server stopped by itself.
    #[error("{servers} stopped by itself; the others were stopped. {log}")]
    ServerDied {
        /// Which.
        servers: String,
        /// The end of its log.
        log: String,
    },
    /// The detached `up` failed before the servers were ready.
    #[error("the detached cluster did not start ({status}); {log}")]
    Detached {
        /// How it ended, or that it took too long.
        status: String,
        /// The end of its log.
        log: String,
    },
    /// `down` waited in vain.
    #[error(
        "the cluster's process {pid} did not stop within {waited:?}: it was killed (the servers \
         go with it)"
    )]
    StopTimeout {
        /// The `up` process.
        pid: u32,
        /// How long `down` waited.
        waited: Duration,
    },
    /// The state file could not be used.
    #[error(transparent)]
    State(#[from] StateError),
    /// Something else failed (the runtime, the signal handlers, a process).
    #[error("{what}: {source}")]
    System {
        /// What was being done.
        what: String,
        /// Why.
        source: io::Error,
    },
    /// Writing to standard output failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl LocalClusterError {
    /// Whether the arguments are at fault (exit status 2): a port in use or a directory taken
    /// by a running cluster; everything else is a failure of the run (exit status 1).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            LocalClusterError::AlreadyRunning { .. } | LocalClusterError::PortInUse(_)
        )
    }
}

fn system(what: impl Into<String>) -> impl FnOnce(io::Error) -> LocalClusterError {
    let what = what.into();
    move |source| LocalClusterError::System { what, source }
}

/// The installed servers, or how to install them.
pub fn installed() -> Result<ServerBinaries, LocalClusterError> {
    let dir = ServerBinaries::default_dir();
    ServerBinaries::locate_in(&dir).map_err(|e| match e {
        TestkitError::BinariesMissing { missing, .. } => {
            LocalClusterError::NotInstalled { dir, missing }
        }
        other => LocalClusterError::Start(other),
    })
}

/// Runs a subcommand; `out` gets the addresses and states, `err` the progress.
pub fn run(
    command: &LocalClusterCommand,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), LocalClusterError> {
    match command {
        LocalClusterCommand::Up(args) => up::run(args, out, err),
        LocalClusterCommand::Down(args) => down::down(args, out),
        LocalClusterCommand::Status(args) => down::status(args, out),
    }
}

/// The cluster as people read it.
pub fn write_text(state: &State, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "name server  {}", state.namesrv)?;
    for b in &state.brokers {
        writeln!(out, "{:<12} {}", b.name, b.addr)?;
    }
    for t in &state.topics {
        writeln!(
            out,
            "topic        {} ({} queues on each broker)",
            t.topic, t.queues
        )?;
    }
    writeln!(
        out,
        "directory    {} (logs: namesrv.log, broker-*.log)",
        state.dir.display()
    )?;
    writeln!(out, "pid          {}", state.pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_install_instructions_are_exact() {
        let e = LocalClusterError::NotInstalled {
            dir: PathBuf::from("/home/u/.cache/rocketmq-servers-1.0.0"),
            missing: "rocketmq-namesrv-rust, rocketmq-broker-rust".into(),
        };
        let text = e.to_string();
        assert!(
            text.contains("missing in /home/u/.cache/rocketmq-servers-1.0.0/bin"),
            "{text}"
        );
        assert!(
            text.contains("\n    bash scripts/install-rocketmq-servers\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "cargo install --locked --root /home/u/.cache/rocketmq-servers-1.0.0 \
                 rocketmq-namesrv@1.0.0 rocketmq-broker@1.0.0"
            ),
            "{text}"
        );
        assert!(text.contains("15-25 minutes"), "{text}");
    }
}
