//! Real RocketMQ servers for tests: a name server and brokers on free loopback ports, with their
//! configuration, stores and logs in a temporary directory (or one given), stopped when the
//! cluster is dropped (also when the test panics), and killed when the test process dies without
//! dropping it. `rebalance local-cluster up` runs one for people too.
//!
//! The binaries `rocketmq-namesrv-rust` and `rocketmq-broker-rust` are looked up in
//! `$ROCKETMQ_SERVERS_DIR/bin`, by default `~/.cache/rocketmq-servers-1.0.0/bin`;
//! `scripts/install-rocketmq-servers` puts them there.
//!
//! ```no_run
//! use rebalance_rocketmq::testkit::TestCluster;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let cluster = TestCluster::start()?;                    // name server + broker-a
//! let route = cluster.create_topic("T", 8).await?;        // on every broker, then routed
//! assert_eq!(route.subscribable_queues("T").len(), 8);
//! let name_server = rebalance_rocketmq::NameServerClient::from_addresses(&cluster.namesrv_addr())?;
//! # Ok(()) }
//! ```
//!
//! [`FaultProxy`] gives one client a bad network to a server (latency, bandwidth, resets, a
//! black hole, dropped replies) while the others reach it directly: see [`fault_proxy`].

mod disk;
pub mod fault_proxy;
mod ports;
mod process;

pub use fault_proxy::{Direction, FaultProxy, MAX_CONNECTIONS, ProxyCounters, ResetPoint};

use std::ffi::OsString;
use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rebalance_core::TopicRoute;

use crate::acl::Credentials;
use crate::admin::{Admin, TopicConfig};
use crate::client::{ClientConfig, RemotingClient};
use crate::name_server::NameServerClient;
use ports::PortReservation;
use process::ServerProcess;

/// The environment variable naming the directory whose `bin/` holds the server binaries.
pub const SERVERS_DIR_ENV: &str = "ROCKETMQ_SERVERS_DIR";
/// The name server binary.
pub const NAMESRV_BINARY: &str = "rocketmq-namesrv-rust";
/// The broker binary.
pub const BROKER_BINARY: &str = "rocketmq-broker-rust";

/// Why a test cluster could not be set up. Its `Debug` form is its message, so that a test's
/// `unwrap()` shows the instructions and the server's log as they are.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum TestkitError {
    /// The server binaries are not installed.
    #[error(
        "RocketMQ server binaries missing in {dir}: {missing}. Run scripts/install-rocketmq-servers \
         (builds them once, 15-25 minutes), or point {SERVERS_DIR_ENV} at a directory whose bin/ \
         holds {NAMESRV_BINARY} and {BROKER_BINARY}"
    )]
    BinariesMissing {
        /// Where they were looked for.
        dir: String,
        /// Which are missing.
        missing: String,
    },
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// No free loopback port was found.
    #[error("no free loopback port found")]
    NoFreePort,
    /// The port asked for ([`ClusterOptions::namesrv_port`]) is taken.
    #[error("port {0} on 127.0.0.1 is in use (another name server?)")]
    PortInUse(u16),
    /// A server exited while starting.
    #[error("{server} exited while starting ({status}); its log ends with\n{log_tail}")]
    Exited {
        /// The server.
        server: String,
        /// Its exit status.
        status: String,
        /// The end of its log.
        log_tail: String,
    },
    /// A server did not become ready in time.
    #[error("{server} not ready after {waited:?}; its log ends with\n{log_tail}")]
    NotReady {
        /// The server.
        server: String,
        /// How long the kit waited.
        waited: Duration,
        /// The end of its log.
        log_tail: String,
    },
    /// The cluster did not reach the expected state in time (for example a topic's route).
    #[error("{0}")]
    Timeout(String),
    /// No such broker in the cluster.
    #[error("no broker `{0}` in the test cluster")]
    UnknownBroker(String),
    /// No name server of that index in the cluster.
    #[error(
        "no name server {index} in the test cluster: it runs {count} (ClusterOptions::name_servers)"
    )]
    UnknownNameServer {
        /// The index asked for (0: the first).
        index: usize,
        /// How many run.
        count: usize,
    },
    /// The disk holding a broker's store is too full for broker 1.0 to start: it refuses above
    /// 90 % used (its `diskSpaceWarningLevelRatio`, which it caps at 90), and exits with status
    /// 70 and no word of the reason.
    #[error(
        "the disk holding {path} is {used_percent:.1} % used (total minus available, as the broker \
         computes it); broker 1.0 refuses to start above 90 %: free at least {to_free_mib} MiB"
    )]
    DiskTooFull {
        /// The store directory.
        path: String,
        /// How full its file system is, in percent.
        used_percent: f64,
        /// How much must be freed for the broker to start, in MiB.
        to_free_mib: u64,
    },
}

impl std::fmt::Debug for TestkitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Where the server binaries are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerBinaries {
    /// The name server binary.
    pub namesrv: PathBuf,
    /// The broker binary.
    pub broker: PathBuf,
}

impl ServerBinaries {
    /// `$ROCKETMQ_SERVERS_DIR` or `~/.cache/rocketmq-servers-1.0.0`.
    pub fn default_dir() -> PathBuf {
        match std::env::var_os(SERVERS_DIR_ENV) {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => {
                let home = std::env::var_os("HOME").unwrap_or_else(|| OsString::from("."));
                PathBuf::from(home).join(".cache/rocketmq-servers-1.0.0")
            }
        }
    }

    /// Finds the binaries in [`default_dir`](Self::default_dir)`/bin`.
    pub fn locate() -> Result<Self, TestkitError> {
        Self::locate_in(&Self::default_dir())
    }

    /// Finds the binaries in `dir/bin`.
    pub fn locate_in(dir: &Path) -> Result<Self, TestkitError> {
        let bin = dir.join("bin");
        let binaries = Self {
            namesrv: bin.join(NAMESRV_BINARY),
            broker: bin.join(BROKER_BINARY),
        };
        let missing: Vec<&str> = [
            (NAMESRV_BINARY, &binaries.namesrv),
            (BROKER_BINARY, &binaries.broker),
        ]
        .into_iter()
        .filter(|(_, path)| !path.is_file())
        .map(|(name, _)| name)
        .collect();
        if missing.is_empty() {
            Ok(binaries)
        } else {
            Err(TestkitError::BinariesMissing {
                dir: bin.display().to_string(),
                missing: missing.join(", "),
            })
        }
    }
}

/// How the test cluster's servers are configured and handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterOptions {
    /// After how long without a heartbeat a broker drops a client (the broker's
    /// `channelExpiredTimeout`; 120 s in production). The broker scans every 10 s, so expiry
    /// is seen between this and this plus 10 s.
    pub channel_expired_timeout: Duration,
    /// How long a server may take to become ready.
    pub start_timeout: Duration,
    /// How long a stopped server may take to exit after SIGTERM before it is killed.
    pub stop_grace: Duration,
    /// The name of the first broker.
    pub broker_name: String,
    /// When set, the brokers enforce authentication (`authenticationEnabled`), with one super
    /// user whose user name and password are this access key and secret key: every request
    /// must be signed with them. The kit's own requests (topic creation) are.
    pub authentication: Option<Credentials>,
    /// Start the name server in its TLS test mode (`tls.test.mode.enable = true`): it makes
    /// itself a self-signed certificate and serves TLS and plaintext on the same port.
    pub namesrv_tls_test_mode: bool,
    /// The loopback address brokers register with the name server (their `brokerIp1`), which
    /// clients are then sent to, instead of `127.0.0.1`, where they still listen: a test can put
    /// a proxy on this address and the broker's port (a TLS terminator, say). `None`: 127.0.0.1.
    pub broker_advertised_ip: Option<std::net::Ipv4Addr>,
    /// The brokers' `useServerSideResetOffset` (true by default, as in the Rust broker 1.0 and
    /// Java 5.2+): an operator's reset is stored by the broker and handed to the next pull.
    /// False: the broker pushes RESET_CONSUMER_CLIENT_OFFSET to the group's clients instead.
    pub server_side_reset: bool,
    /// The name server's port on 127.0.0.1. `None`: a free one. A port in use is
    /// [`TestkitError::PortInUse`] at once (not tried again on other ports).
    pub namesrv_port: Option<u16>,
    /// The cluster's directory (configs, stores, logs): created if missing, and kept, with its
    /// stores, when the cluster stops, so that a cluster started on it again finds its topics,
    /// offsets and messages. `None`: a temporary directory, deleted when the cluster is dropped.
    pub dir: Option<PathBuf>,
    /// How many name servers run (at least 1): independent ones, as RocketMQ's are, every
    /// broker registering with each. The first is [`TestCluster::namesrv_addr`]; all of them,
    /// as clients are given them, [`TestCluster::namesrv_addrs`].
    pub name_servers: usize,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            channel_expired_timeout: Duration::from_secs(10),
            start_timeout: Duration::from_secs(30),
            stop_grace: Duration::from_secs(5),
            broker_name: "broker-a".into(),
            authentication: None,
            namesrv_tls_test_mode: false,
            broker_advertised_ip: None,
            server_side_reset: true,
            namesrv_port: None,
            dir: None,
            name_servers: 1,
        }
    }
}

/// A broker of the test cluster.
#[derive(Debug)]
struct Broker {
    name: String,
    port: u16,
    process: ServerProcess,
}

/// A running name server and its brokers. Dropping it stops every server (SIGTERM, then SIGKILL
/// after [`ClusterOptions::stop_grace`]) and deletes the directory, unless the thread is
/// panicking: then the directory is kept with the servers' configs and logs and each broker's
/// `store/config` (its message data is deleted), and its path printed. A directory given in
/// [`ClusterOptions::dir`] is always kept whole.
///
/// A broker is not started on a disk more than 90 % used, which broker 1.0 refuses without saying
/// why: [`TestkitError::DiskTooFull`] says how much to free.
///
/// A test process that dies without dropping it (SIGKILL, an abort) does not leave its servers
/// behind: each has a watchdog that kills it with SIGKILL when the process is gone. The
/// directory stays then.
#[derive(Debug)]
pub struct TestCluster {
    options: ClusterOptions,
    binaries: ServerBinaries,
    namesrv_port: u16,
    name_server: ServerProcess,
    /// The name servers after the first ([`ClusterOptions::name_servers`]), with their ports.
    more_name_servers: Vec<(u16, ServerProcess)>,
    brokers: Vec<Broker>,
    // Dropped last: the servers are stopped before their files go.
    dir: Option<ClusterDir>,
}

/// Where a cluster's files are: a temporary directory of its own, or one it was given.
#[derive(Debug)]
enum ClusterDir {
    /// Deleted when dropped.
    Temporary(tempfile::TempDir),
    /// [`ClusterOptions::dir`]: kept.
    Given(PathBuf),
}

impl ClusterDir {
    fn path(&self) -> &Path {
        match self {
            ClusterDir::Temporary(dir) => dir.path(),
            ClusterDir::Given(path) => path,
        }
    }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> TestkitError {
    let what = what.into();
    move |source| TestkitError::Io { what, source }
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// How many times a server start is tried (with fresh ports) before giving up.
const START_ATTEMPTS: u32 = 3;

impl TestCluster {
    /// A name server and one broker with default options.
    pub fn start() -> Result<Self, TestkitError> {
        Self::start_with(ClusterOptions::default())
    }

    /// A name server and one broker. A start that fails is tried again on fresh ports (see
    /// [`add_broker`](Self::add_broker)).
    pub fn start_with(options: ClusterOptions) -> Result<Self, TestkitError> {
        let mut attempt = 1;
        loop {
            match Self::try_start(options.clone()) {
                Err(e)
                    if attempt < START_ATTEMPTS
                        && !matches!(
                            e,
                            TestkitError::DiskTooFull { .. } | TestkitError::PortInUse(_)
                        ) =>
                {
                    tracing::warn!(attempt, error = %e, "test cluster did not start; trying other ports");
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    fn try_start(options: ClusterOptions) -> Result<Self, TestkitError> {
        let binaries = ServerBinaries::locate()?;
        let mut ports = PortReservation::default();
        let namesrv_port = match options.namesrv_port {
            Some(port) => ports.exactly(port)?,
            None => ports.any()?,
        };
        let health_port = ports.any()?;
        let dir = match &options.dir {
            Some(path) => {
                std::fs::create_dir_all(path).map_err(io(format!(
                    "cannot create the cluster directory {}",
                    path.display()
                )))?;
                ClusterDir::Given(path.clone())
            }
            None => ClusterDir::Temporary(
                tempfile::Builder::new()
                    .prefix("rocketmq-testkit-")
                    .tempdir()
                    .map_err(io("cannot create the cluster directory"))?,
            ),
        };
        let name_server = name_server_process(
            dir.path(),
            "namesrv",
            &binaries,
            &options,
            namesrv_port,
            health_port,
        )?;
        let mut more_name_servers = Vec::new();
        for i in 1..options.name_servers.max(1) {
            let port = ports.any()?;
            let health_port = ports.any()?;
            let name = format!("namesrv-{}", i + 1);
            let process =
                name_server_process(dir.path(), &name, &binaries, &options, port, health_port)?;
            more_name_servers.push((port, process));
        }
        let mut cluster = TestCluster {
            options,
            binaries,
            namesrv_port,
            name_server,
            more_name_servers,
            brokers: Vec::new(),
            dir: Some(dir),
        };
        ports.release();
        cluster.name_server.start(cluster.options.start_timeout)?;
        for (_, name_server) in &mut cluster.more_name_servers {
            name_server.start(cluster.options.start_timeout)?;
        }
        let first = cluster.options.broker_name.clone();
        cluster.add_broker(&first)?;
        Ok(cluster)
    }

    fn dir_path(&self) -> &Path {
        match &self.dir {
            Some(dir) => dir.path(),
            None => Path::new("."),
        }
    }

    /// The cluster's directory: configs, stores and the servers' logs (`*.log`).
    pub fn dir(&self) -> &Path {
        self.dir_path()
    }

    /// The options the cluster runs with.
    pub fn options(&self) -> &ClusterOptions {
        &self.options
    }

    /// The (first) name server's address, `127.0.0.1:port`.
    pub fn namesrv_addr(&self) -> String {
        format!("127.0.0.1:{}", self.namesrv_port)
    }

    /// Every name server's address, as clients and brokers are given them: `host:port;host:port`
    /// ([`ClusterOptions::name_servers`]; the first is [`namesrv_addr`](Self::namesrv_addr)).
    pub fn namesrv_addrs(&self) -> String {
        std::iter::once(self.namesrv_port)
            .chain(self.more_name_servers.iter().map(|(port, _)| *port))
            .map(|port| format!("127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(";")
    }

    /// The name server `index` (0: the first), or an error naming how many there are.
    fn name_server_at(&mut self, index: usize) -> Result<&mut ServerProcess, TestkitError> {
        let count = 1 + self.more_name_servers.len();
        match index {
            0 => Ok(&mut self.name_server),
            i => self
                .more_name_servers
                .get_mut(i - 1)
                .map(|(_, process)| process)
                .ok_or(TestkitError::UnknownNameServer { index: i, count }),
        }
    }

    /// A new remoting client that signs its requests with the cluster's credentials, when it
    /// enforces authentication (see [`ClusterOptions::authentication`]).
    pub fn remoting(&self) -> RemotingClient {
        match &self.options.authentication {
            Some(credentials) => {
                RemotingClient::with_credentials(ClientConfig::default(), credentials.clone())
            }
            None => RemotingClient::default(),
        }
    }

    /// The names of the brokers, in the order they were added.
    pub fn broker_names(&self) -> Vec<String> {
        self.brokers.iter().map(|b| b.name.clone()).collect()
    }

    fn broker_index(&self, name: &str) -> Result<usize, TestkitError> {
        self.brokers
            .iter()
            .position(|b| b.name == name)
            .ok_or_else(|| TestkitError::UnknownBroker(name.to_string()))
    }

    /// The address a broker listens on, `127.0.0.1:port` (clients are sent there too, unless
    /// [`ClusterOptions::broker_advertised_ip`] is set).
    pub fn broker_addr(&self, name: &str) -> Result<String, TestkitError> {
        let i = self.broker_index(name)?;
        Ok(format!("127.0.0.1:{}", self.brokers[i].port))
    }

    /// The address of the first broker.
    pub fn first_broker_addr(&self) -> String {
        self.brokers
            .first()
            .map(|b| format!("127.0.0.1:{}", b.port))
            .unwrap_or_default()
    }

    /// Adds (and starts) a master broker named `name`, registered with the name server.
    ///
    /// Ports are reserved by binding them and released just before the broker starts, so another
    /// process (an outgoing connection's ephemeral port, a parallel test) can take one in
    /// between: a start that fails is tried again on fresh ports, up to three times.
    pub fn add_broker(&mut self, name: &str) -> Result<String, TestkitError> {
        let mut attempt = 1;
        loop {
            match self.try_add_broker(name) {
                Err(e)
                    if attempt < START_ATTEMPTS
                        && !matches!(e, TestkitError::DiskTooFull { .. }) =>
                {
                    tracing::warn!(broker = name, attempt, error = %e, "test broker did not start; trying other ports");
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    fn try_add_broker(&mut self, name: &str) -> Result<String, TestkitError> {
        let mut ports = PortReservation::default();
        let port = ports.with_minus_two()?;
        let ha_port = ports.any()?;
        let health_port = ports.any()?;
        let home = self.dir_path().join(name);
        let store = home.join("store");
        std::fs::create_dir_all(&store)
            .map_err(io(format!("cannot create the store of {name}")))?;
        disk::check_room(&store)?;
        let store_str = toml_str(&store.display().to_string());
        let config = format!(
            r#"[broker]
namesrvAddr = {namesrv}
brokerIp1 = {advertised}
listenPort = {port}
storePathRootDir = {store_str}
autoCreateTopicEnable = true
autoCreateSubscriptionGroup = true
channelExpiredTimeout = {expiry}
useServerSideResetOffset = {server_side_reset}
# A topic created through the admin API reaches the name server at the broker's next periodic
# registration when its immediate one does not (seen with broker 1.0): every 10 s, its floor,
# instead of 30 s, so that `create_topic`'s 20 s wait always covers one.
registerNameServerPeriod = 10000

[broker.brokerServerConfig]
bindAddress = "127.0.0.1"

[broker.brokerIdentity]
brokerName = {name_str}
brokerClusterName = "DefaultCluster"
brokerId = 0

[store]
storeType = "LocalFile"
brokerRole = "ASYNC_MASTER"
storePathRootDir = {store_str}
haListenAddress = "127.0.0.1"
haListenPort = {ha_port}
mappedFileSizeCommitLog = 67108864
# Disk limits as high as broker 1.0 takes them (it caps the warning level at 90 % used and refuses
# to start above it, which `disk::check_room` reports before starting): the tests write little.
diskMaxUsedSpaceRatio = 95
diskSpaceWarningLevelRatio = 99
diskSpaceCleanForciblyRatio = 98
"#,
            namesrv = toml_str(&self.namesrv_addrs()),
            expiry = self.options.channel_expired_timeout.as_millis(),
            server_side_reset = self.options.server_side_reset,
            name_str = toml_str(name),
            advertised = toml_str(
                &self
                    .options
                    .broker_advertised_ip
                    .unwrap_or(std::net::Ipv4Addr::LOCALHOST)
                    .to_string()
            ),
        );
        let config = match &self.options.authentication {
            None => config,
            Some(credentials) => {
                let auth_dir = home.join("auth");
                std::fs::create_dir_all(&auth_dir)
                    .map_err(io(format!("cannot create the auth directory of {name}")))?;
                authenticated(&config, &auth_dir, credentials)
            }
        };
        let config_path = home.join("broker.toml");
        std::fs::write(&config_path, config)
            .map_err(io(format!("cannot write the config of {name}")))?;
        let process = ServerProcess::new(
            name,
            &self.binaries.broker,
            vec![
                "-c".into(),
                config_path.into_os_string(),
                "-n".into(),
                self.namesrv_addrs().into(),
            ],
            server_env(&home, health_port),
            self.dir_path().join(format!("{name}.log")),
            loopback(health_port),
        );
        self.brokers.push(Broker {
            name: name.to_string(),
            port,
            process,
        });
        ports.release();
        let timeout = self.options.start_timeout;
        let last = self.brokers.len() - 1;
        if let Err(e) = self.brokers[last].process.start(timeout) {
            self.brokers.pop();
            // The disk may have filled up while it started (parallel tests write too).
            disk::check_room(&store)?;
            return Err(e);
        }
        Ok(format!("127.0.0.1:{port}"))
    }

    /// Stops a broker (SIGTERM: it unregisters from the name server and closes its client
    /// connections). Its store and ports are kept for [`start_broker`](Self::start_broker).
    pub fn stop_broker(&mut self, name: &str) -> Result<(), TestkitError> {
        let i = self.broker_index(name)?;
        let grace = self.options.stop_grace;
        self.brokers[i].process.stop(grace);
        Ok(())
    }

    /// Kills a broker with SIGKILL: no unregistration, no goodbye to its clients.
    pub fn kill_broker(&mut self, name: &str) -> Result<(), TestkitError> {
        let i = self.broker_index(name)?;
        self.brokers[i].process.kill();
        Ok(())
    }

    /// Starts a stopped broker again, with the same ports and store.
    pub fn start_broker(&mut self, name: &str) -> Result<(), TestkitError> {
        let i = self.broker_index(name)?;
        disk::check_room(&self.dir_path().join(name).join("store"))?;
        let timeout = self.options.start_timeout;
        self.brokers[i].process.start(timeout)
    }

    /// Whether a broker is running.
    pub fn broker_running(&mut self, name: &str) -> Result<bool, TestkitError> {
        let i = self.broker_index(name)?;
        Ok(self.brokers[i].process.is_running())
    }

    /// Stops the name server (SIGTERM).
    pub fn stop_name_server(&mut self) {
        let grace = self.options.stop_grace;
        self.name_server.stop(grace);
    }

    /// Starts the name server again on the same port. Brokers register again on their next
    /// periodic registration (every 30 s), or at once when restarted.
    pub fn start_name_server(&mut self) -> Result<(), TestkitError> {
        let timeout = self.options.start_timeout;
        self.name_server.start(timeout)
    }

    /// Kills name server `index` (0: the first; see [`ClusterOptions::name_servers`]) with
    /// SIGKILL: its routes are gone with it, and it says nothing to anyone.
    pub fn kill_name_server(&mut self, index: usize) -> Result<(), TestkitError> {
        self.name_server_at(index)?.kill();
        Ok(())
    }

    /// Starts name server `index` again on the same port, empty: it routes a broker again at
    /// the broker's next periodic registration (every 10 s in the kit).
    pub fn start_name_server_at(&mut self, index: usize) -> Result<(), TestkitError> {
        let timeout = self.options.start_timeout;
        self.name_server_at(index)?.start(timeout)
    }

    /// The process ids of the servers started and not stopped since: the name server's first,
    /// then the brokers' in the order they were added.
    pub fn server_pids(&self) -> Vec<u32> {
        std::iter::once(&self.name_server)
            .chain(self.more_name_servers.iter().map(|(_, process)| process))
            .chain(self.brokers.iter().map(|b| &b.process))
            .filter_map(ServerProcess::pid)
            .collect()
    }

    /// The servers not running (exited by themselves, or stopped through the kit): `"namesrv"`
    /// and broker names.
    pub fn servers_down(&mut self) -> Vec<String> {
        let mut down = Vec::new();
        if !self.name_server.is_running() {
            down.push("namesrv".to_string());
        }
        for broker in &mut self.brokers {
            if !broker.process.is_running() {
                down.push(broker.name.clone());
            }
        }
        down
    }

    /// The path of a server's log: `"namesrv"` or a broker name.
    pub fn log_path(&self, server: &str) -> Result<PathBuf, TestkitError> {
        if server == "namesrv" {
            return Ok(self.name_server.log_path().to_path_buf());
        }
        let i = self.broker_index(server)?;
        Ok(self.brokers[i].process.log_path().to_path_buf())
    }

    /// The end of a server's log (`"namesrv"` or a broker name), for failure messages.
    pub fn log_tail(&self, server: &str) -> String {
        match self.log_path(server) {
            Ok(path) => process::log_tail(&path),
            Err(e) => e.to_string(),
        }
    }

    /// Creates `topic` with `queues` read and write queues on every running broker, then waits
    /// until the name server routes it with every one of them, and returns that route.
    pub async fn create_topic(&self, topic: &str, queues: i32) -> Result<TopicRoute, TestkitError> {
        let admin = Admin::new(self.remoting());
        let config = TopicConfig::new(topic, queues);
        let names: Vec<(String, String)> = self
            .brokers
            .iter()
            .map(|b| (b.name.clone(), format!("127.0.0.1:{}", b.port)))
            .collect();
        for (name, addr) in &names {
            admin.create_topic(addr, &config).await.map_err(|e| {
                TestkitError::Timeout(format!("cannot create topic `{topic}` on {name}: {e}"))
            })?;
        }
        let name_server = NameServerClient::from_addresses(&self.namesrv_addr())
            .map_err(|e| TestkitError::Timeout(e.to_string()))?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let last = match name_server.route(topic).await {
                Ok(route) => {
                    let complete = names.iter().all(|(name, _)| {
                        route
                            .queue_datas
                            .iter()
                            .any(|q| &q.broker_name == name && q.read_queue_nums == queues)
                    });
                    if complete {
                        return Ok(route);
                    }
                    format!("{route:?}")
                }
                Err(e) => e.to_string(),
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(TestkitError::Timeout(format!(
                    "the name server did not route topic `{topic}` on every broker within 20 s; last answer: {last}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A name server of the cluster in `dir/name` (its files, and `dir/name.log`), on `port`.
fn name_server_process(
    dir: &Path,
    name: &str,
    binaries: &ServerBinaries,
    options: &ClusterOptions,
    port: u16,
    health_port: u16,
) -> Result<ServerProcess, TestkitError> {
    let ns_dir = dir.join(name);
    std::fs::create_dir_all(&ns_dir).map_err(io("cannot create the name server directory"))?;
    let mut config = format!(
        "rocketmqHome = {}\nkvConfigPath = {}\nconfigStorePath = {}\n",
        toml_str(&ns_dir.display().to_string()),
        toml_str(&ns_dir.join("kvConfig.json").display().to_string()),
        toml_str(&ns_dir.join("namesrv.properties").display().to_string()),
    );
    if options.namesrv_tls_test_mode {
        // Read as a Java property too: a self-signed certificate, TLS beside plaintext.
        config.push_str("tls.test.mode.enable = true\n");
    }
    let config_path = ns_dir.join("namesrv.toml");
    std::fs::write(&config_path, config).map_err(io("cannot write the name server config"))?;
    let label = if name == "namesrv" {
        "name server".to_string()
    } else {
        format!("name server {name}")
    };
    Ok(ServerProcess::new(
        label,
        &binaries.namesrv,
        vec![
            "-c".into(),
            config_path.into_os_string(),
            "--bindAddress".into(),
            "127.0.0.1".into(),
            "--listenPort".into(),
            port.to_string().into(),
        ],
        server_env(&ns_dir, health_port),
        dir.join(format!("{name}.log")),
        loopback(health_port),
    ))
}

/// `config` (a broker's TOML, its `[broker]` table first) with authentication enforced for one
/// super user named by `credentials`' access key, whose password is its secret key.
fn authenticated(config: &str, auth_dir: &Path, credentials: &Credentials) -> String {
    let user = serde_json::json!({
        "username": credentials.access_key(),
        "password": credentials.secret_key(),
    });
    let lines = format!(
        "authenticationEnabled = true\nauthConfigPath = {}\ninitAuthenticationUser = {}\n",
        toml_str(&auth_dir.display().to_string()),
        toml_str(&user.to_string()),
    );
    // Into the `[broker]` table: before the next table starts.
    match config.find("\n[broker.") {
        Some(at) => format!("{}\n{lines}{}", &config[..at], &config[at..]),
        None => format!("{config}{lines}"),
    }
}

/// Calls `check` every `every` until it returns `Some`, for at most `within` (tokio time).
pub async fn wait_until<T, F, Fut>(within: Duration, every: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}

fn server_env(home: &Path, health_port: u16) -> Vec<(OsString, OsString)> {
    vec![
        ("ROCKETMQ_HOME".into(), home.as_os_str().to_owned()),
        (
            "ROCKETMQ_HEALTH_BIND_ADDR".into(),
            format!("127.0.0.1:{health_port}").into(),
        ),
        // Exit promptly on SIGTERM (the default budget is 45 s).
        ("ROCKETMQ_SHUTDOWN_TIMEOUT_SECONDS".into(), "5".into()),
    ]
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        // SIGTERM everything at once, then wait for all with one deadline.
        for broker in &mut self.brokers {
            broker.process.terminate();
        }
        self.name_server.terminate();
        for (_, name_server) in &mut self.more_name_servers {
            name_server.terminate();
        }
        let deadline = Instant::now() + self.options.stop_grace;
        for broker in &mut self.brokers {
            broker.process.reap(deadline);
        }
        self.name_server.reap(deadline);
        for (_, name_server) in &mut self.more_name_servers {
            name_server.reap(deadline);
        }
        if std::thread::panicking()
            && let Some(ClusterDir::Temporary(dir)) = self.dir.take()
        {
            let kept = dir.keep();
            // Message data runs to hundreds of megabytes per broker, and a failing CI run
            // would leave it behind on each retry: keep what a developer reads.
            for broker in &self.brokers {
                disk::drop_message_data(&kept.join(&broker.name).join("store"));
            }
            // A failing test's output is where a developer looks first.
            eprintln!(
                "testkit: the test failed; server configs, logs and the brokers' store/config \
                     (offsets, subscriptions) kept in {}",
                kept.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authentication_goes_into_the_broker_table() {
        let config =
            "[broker]\nlistenPort = 1\n\n[broker.brokerServerConfig]\nbindAddress = \"x\"\n";
        let credentials = Credentials::new("ak", "s\"k").unwrap();
        let text = authenticated(config, Path::new("/tmp/auth"), &credentials);
        let broker_table = text.split("[broker.").next().unwrap();
        assert!(
            broker_table.contains("authenticationEnabled = true\n"),
            "{text}"
        );
        assert!(
            broker_table.contains("authConfigPath = \"/tmp/auth\"\n"),
            "{text}"
        );
        assert!(
            broker_table.contains(
                r#"initAuthenticationUser = "{\"password\":\"s\\\"k\",\"username\":\"ak\"}""#
            ),
            "{text}"
        );
        assert!(text.ends_with("bindAddress = \"x\"\n"), "{text}");
    }

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_str("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(toml_str("x\ny"), r#""x\u000Ay""#);
    }

    #[test]
    fn missing_binaries_name_the_install_script() {
        let dir = tempfile::tempdir().unwrap();
        let err = ServerBinaries::locate_in(dir.path()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("scripts/install-rocketmq-servers"), "{text}");
        assert!(
            text.contains(NAMESRV_BINARY) && text.contains(BROKER_BINARY),
            "{text}"
        );
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        std::fs::write(dir.path().join("bin").join(NAMESRV_BINARY), "").unwrap();
        let err = ServerBinaries::locate_in(dir.path()).unwrap_err();
        assert!(
            matches!(&err, TestkitError::BinariesMissing { missing, .. } if missing == BROKER_BINARY),
            "{err}"
        );
    }
}
