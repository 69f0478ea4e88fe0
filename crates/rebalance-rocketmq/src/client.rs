//! [`RemotingClient`]: connections shared per address, re-established with backoff.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use rebalance_runtime::RemoteError;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::acl::{self, Credentials};
use crate::address_map::AddressMap;
use crate::command::RemotingCommand;
use crate::connection::{Connection, ConnectionConfig, panic_message};
use crate::denial::{Denials, Op};
use crate::error::TransportError;
use crate::notify::MembershipNotifier;
use crate::questions::ServerQuestions;

/// Timeouts and backoff of a [`RemotingClient`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientConfig {
    /// How long a TCP connect may take (3 s).
    pub connect_timeout: Duration,
    /// How long a request waits for its response (3 s, as the Java client).
    pub request_timeout: Duration,
    /// The wait after the first failed connection attempt to an address (100 ms); it doubles with
    /// every further failure.
    pub reconnect_backoff_min: Duration,
    /// The longest wait between two connection attempts to an address (5 s). Also how long a
    /// connection the server never answered on must have been open for its close not to count
    /// as a failed attempt.
    pub reconnect_backoff_max: Duration,
    /// Framing and queueing of each connection.
    pub connection: ConnectionConfig,
    /// Forget an address that no call has used for this long (120 s, the Java client's idle
    /// channel time): its connection is dropped (closed unless a caller still holds it) with
    /// the count of its failed attempts, so a client whose servers come and go under new
    /// addresses does not keep an entry for every address it ever used. The next use of a
    /// forgotten address connects as if for the first time: that is no reconnection. Calls
    /// look for idle addresses at most twice per period, so an address is forgotten between one
    /// and one and a half periods after its last use, at the next call. Keep it longer than the
    /// consumers' heartbeat interval (30 s): a broker forgets the consumers of a connection that
    /// closed (and closes connections idle for 120 s itself). `None`: never forget.
    pub forget_idle_after: Option<Duration>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(3),
            reconnect_backoff_min: Duration::from_millis(100),
            reconnect_backoff_max: Duration::from_secs(5),
            connection: ConnectionConfig::default(),
            forget_idle_after: Some(Duration::from_secs(120)),
        }
    }
}

impl ClientConfig {
    /// The wait before the next attempt after `failures` consecutive failed attempts (≥ 1).
    pub fn backoff(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(20);
        self.reconnect_backoff_min
            .saturating_mul(1 << doublings)
            .min(self.reconnect_backoff_max)
    }
}

struct Failure {
    error: TransportError,
    at: Instant,
}

/// A connection made, and when.
struct Opened {
    conn: Connection,
    at: Instant,
}

/// One attempt to have a connection to an address: made once, shared by every caller that
/// needs the address meanwhile, replaced by a new attempt when its connection closes or when
/// it failed and the backoff has passed.
struct Attempt {
    outcome: OnceCell<Result<Opened, Failure>>,
    /// Consecutive failed attempts before this one.
    failures_before: u32,
    reconnect: bool,
    /// When a call last asked for the address, in milliseconds after the client's epoch.
    last_used: AtomicU64,
}

impl Attempt {
    fn new(failures_before: u32, reconnect: bool, now: u64) -> Arc<Self> {
        Arc::new(Self {
            outcome: OnceCell::new(),
            failures_before,
            reconnect,
            last_used: AtomicU64::new(now),
        })
    }

    /// An attempt that already failed: the next one waits out the backoff after
    /// `failures_before + 1` failures.
    fn failed(failures_before: u32, failure: Failure, now: u64) -> Arc<Self> {
        Arc::new(Self {
            outcome: OnceCell::new_with(Some(Err(failure))),
            failures_before,
            reconnect: true,
            last_used: AtomicU64::new(now),
        })
    }
}

/// Called with an address each time a connection to it is made again (after one was lost,
/// or after failed attempts), or each time one is lost (the disconnect hooks), for as long as
/// `live` says it is still wanted.
#[derive(Clone)]
struct ReconnectHook {
    call: Arc<dyn Fn(&str) + Send + Sync>,
    live: Arc<dyn Fn() -> bool + Send + Sync>,
}

/// A request that failed, and whether it got as far as a connection (else it never left).
#[derive(Debug)]
pub(crate) struct InvokeFailed {
    pub(crate) error: TransportError,
    pub(crate) connected: bool,
}

struct Inner {
    config: ClientConfig,
    slots: DashMap<String, Arc<Attempt>>,
    /// What `last_used` counts from.
    epoch: Instant,
    /// When the next look for idle addresses is due, in milliseconds after `epoch`.
    next_forget: AtomicU64,
    questions: Arc<ServerQuestions>,
    reconnect_hooks: std::sync::RwLock<Vec<ReconnectHook>>,
    /// Called with the address of a connection lost (see [`RemotingClient::on_disconnect`]).
    disconnect_hooks: std::sync::RwLock<Vec<ReconnectHook>>,
    /// Signs every request sent, when set.
    credentials: Option<Credentials>,
    /// The resources the servers refused this client, each logged once.
    denials: Denials,
    /// Where to dial each advertised address; read at each connection attempt only.
    address_map: std::sync::RwLock<Arc<AddressMap>>,
    /// TLS on every connection, when set.
    #[cfg(feature = "tls")]
    tls: Option<crate::tls::TlsConfig>,
}

/// A client of RocketMQ servers: one shared [`Connection`] per address, opened on first use,
/// replaced on the next use after it closed, and retried with exponential backoff after a failed
/// attempt (calls during the backoff fail at once with [`TransportError::BackingOff`]). A
/// connection that closes within `reconnect_backoff_max` of opening without a word from the
/// server counts as a failed attempt: the first such close is reconnected at once, the next
/// ones back off.
///
/// Server pushes of `NOTIFY_CONSUMER_IDS_CHANGED` on any of its connections reach
/// [`membership`](Self::membership).
///
/// Made [`with_credentials`](Self::with_credentials), it signs every request it sends (ACL 1.0,
/// see [`acl`]), sync and one-way, to every server; the answers it writes to the
/// servers' own requests are not signed.
///
/// With an [`AddressMap`] ([`with_address_map`](Self::with_address_map)), it dials the servers
/// whose advertised addresses this host cannot reach (a broker behind NAT, port forwarding or a
/// sidecar) at the addresses it can; everything else, TLS server names included, keeps the
/// advertised address (see [`address_map`](crate::address_map)).
///
/// Cheap to clone; the connections close when the last clone is dropped.
#[derive(Clone)]
pub struct RemotingClient {
    inner: Arc<Inner>,
}

impl Default for RemotingClient {
    fn default() -> Self {
        Self::new(ClientConfig::default())
    }
}

impl std::fmt::Debug for RemotingClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemotingClient")
            .field("config", &self.inner.config)
            .field("credentials", &self.inner.credentials)
            .field("addresses", &self.inner.slots.len())
            .finish()
    }
}

impl RemotingClient {
    /// A client with no connection yet, sending no credentials.
    pub fn new(config: ClientConfig) -> Self {
        Self::build(config, None)
    }

    /// A client with no connection yet that signs every request with `credentials`.
    pub fn with_credentials(config: ClientConfig, credentials: Credentials) -> Self {
        Self::build(config, Some(credentials))
    }

    fn build(config: ClientConfig, credentials: Option<Credentials>) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                slots: DashMap::new(),
                epoch: Instant::now(),
                next_forget: AtomicU64::new(0),
                questions: Arc::new(ServerQuestions::default()),
                reconnect_hooks: std::sync::RwLock::new(Vec::new()),
                disconnect_hooks: std::sync::RwLock::new(Vec::new()),
                credentials,
                denials: Denials::default(),
                address_map: std::sync::RwLock::new(Arc::new(AddressMap::new())),
                #[cfg(feature = "tls")]
                tls: None,
            }),
        }
    }

    /// The credentials every request is signed with, if any.
    pub fn credentials(&self) -> Option<&Credentials> {
        self.inner.credentials.as_ref()
    }

    /// `request` as it is sent: signed when the client has credentials.
    fn signed(&self, mut request: RemotingCommand) -> RemotingCommand {
        if let Some(credentials) = &self.inner.credentials {
            acl::sign(&mut request, credentials);
        }
        request
    }

    /// A client with no connection yet whose every connection (to the name servers and to the
    /// brokers) runs TLS with `tls` (feature `tls`; see [`tls`](crate::tls)).
    #[cfg(feature = "tls")]
    pub fn with_tls(config: ClientConfig, tls: crate::tls::TlsConfig) -> Self {
        Self::new(config).using_tls(tls)
    }

    /// This new client (credentials and all) with TLS on every connection.
    #[cfg(feature = "tls")]
    pub(crate) fn using_tls(mut self, tls: crate::tls::TlsConfig) -> Self {
        // A new client is not shared yet: its state is ours to complete.
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.tls = Some(tls);
        }
        self
    }

    /// The TLS configuration of every connection, if the client uses TLS.
    #[cfg(feature = "tls")]
    pub fn tls(&self) -> Option<&crate::tls::TlsConfig> {
        self.inner.tls.as_ref()
    }

    /// This client, dialing the advertised addresses `map` names at the addresses it gives
    /// (see [`address_map`](crate::address_map): brokers behind NAT, port forwarding or a
    /// sidecar). Replaces the previous map; see [`set_address_map`](Self::set_address_map).
    ///
    /// ```
    /// use rebalance_rocketmq::{AddressMap, ClientConfig, NameServerClient, RemotingClient};
    ///
    /// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let map = AddressMap::new().with("10.0.0.5:10911", "127.0.0.1:20911")?;
    /// let remoting = RemotingClient::new(ClientConfig::default()).with_address_map(map);
    /// let name_server = NameServerClient::new(remoting, "nameserver.example:9876")?;
    /// # Ok(()) }
    /// # demo().unwrap();
    /// ```
    #[must_use]
    pub fn with_address_map(self, map: AddressMap) -> Self {
        self.set_address_map(map);
        self
    }

    /// Replaces the address map of this client and of every clone of it. It applies to the
    /// connections opened from now on: a connection already open keeps the path it was dialed
    /// on until it closes ([`close`](Self::close) an address to move it at once).
    pub fn set_address_map(&self, map: AddressMap) {
        for (advertised, actual) in map.iter() {
            tracing::info!(advertised, actual, "address override");
        }
        let mut slot = self
            .inner
            .address_map
            .write()
            .unwrap_or_else(|e| e.into_inner());
        *slot = Arc::new(map);
    }

    /// The address map in use (empty unless one was given).
    pub fn address_map(&self) -> Arc<AddressMap> {
        let slot = self.inner.address_map.read();
        slot.unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Opens a connection to `addr` (dialing its override, if it has one), over TLS when the
    /// client has a TLS configuration.
    async fn open(&self, addr: &str) -> Result<Connection, TransportError> {
        let config = &self.inner.config;
        let handler = self.inner.questions.clone();
        let map = self.address_map();
        let dial = map.dial_address(addr);
        if dial != addr {
            tracing::debug!(addr, dial, "dialing an overridden address");
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.inner.tls {
            let timeout = config.connect_timeout;
            return Connection::connect_tls_via(
                addr,
                dial,
                timeout,
                config.connection,
                tls,
                handler,
            )
            .await;
        }
        Connection::connect_via(
            addr,
            dial,
            config.connect_timeout,
            config.connection,
            handler,
        )
        .await
    }

    /// The client's configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// Calls `hook` with the address each time a connection to it is made again: after one was
    /// lost (closed by the server, or after a silent server's timeout) or after failed
    /// attempts; not for the first connection, nor after [`close`](Self::close). A server that
    /// lost a connection may have forgotten what was said on it (a broker drops the consumers
    /// that heartbeated on it). The hook runs on the connecting task: it must not block. A
    /// panic in it is logged; the connection is used all the same.
    pub fn on_reconnect(&self, hook: impl Fn(&str) + Send + Sync + 'static) {
        self.on_reconnect_while(|| true, hook);
    }

    /// [`on_reconnect`](Self::on_reconnect) for a hook that is wanted only while `live` says
    /// so (while its owner exists): a hook no longer live is not called, and is dropped when
    /// the next one is registered or at the next reconnection.
    pub(crate) fn on_reconnect_while(
        &self,
        live: impl Fn() -> bool + Send + Sync + 'static,
        hook: impl Fn(&str) + Send + Sync + 'static,
    ) {
        live_hooks(&self.inner.reconnect_hooks).push(ReconnectHook {
            call: Arc::new(hook),
            live: Arc::new(live),
        });
    }

    /// Registers `hook`, called with a server's address as soon as a connection to it is lost:
    /// closed by the server (a broker that stopped or restarted), failed on a read or a write,
    /// or closed after the server stayed silent past its limit. Not when this client closed it
    /// ([`close`](Self::close), [`close_all`](Self::close_all), an idle address forgotten).
    /// A broker whose connection was lost may have restarted, and lost its lock table (the
    /// broker client reports it through [`QueueLocker::lock_losses`](rebalance_runtime::QueueLocker::lock_losses)).
    ///
    /// Called on a task of its own, after the connection closed; it must not block. A hook that
    /// panics is logged and the others still run.
    pub fn on_disconnect(&self, hook: impl Fn(&str) + Send + Sync + 'static) {
        self.on_disconnect_while(|| true, hook);
    }

    /// [`on_disconnect`](Self::on_disconnect) for a hook that is wanted only while `live` says
    /// so (see [`on_reconnect_while`](Self::on_reconnect_while)).
    pub(crate) fn on_disconnect_while(
        &self,
        live: impl Fn() -> bool + Send + Sync + 'static,
        hook: impl Fn(&str) + Send + Sync + 'static,
    ) {
        live_hooks(&self.inner.disconnect_hooks).push(ReconnectHook {
            call: Arc::new(hook),
            live: Arc::new(live),
        });
    }

    /// Watches `conn` (to `addr`) on a task of its own, which ends with the connection: when it
    /// is lost, the disconnect hooks are called. The task holds neither the connection (which
    /// still closes when its last handle is dropped) nor the client.
    fn watch_close(&self, addr: &str, conn: &Connection) {
        let watch = conn.close_watch();
        let client = Arc::downgrade(&self.inner);
        let addr = addr.to_string();
        tokio::spawn(async move {
            if !watch.lost().await {
                return;
            }
            let Some(inner) = client.upgrade() else {
                return;
            };
            let hooks = live_hooks(&inner.disconnect_hooks).clone();
            tracing::info!(addr, hooks = hooks.len(), "connection lost");
            call_hooks(&hooks, &addr, "a disconnect hook panicked");
        });
    }

    /// How many addresses the client remembers.
    #[cfg(test)]
    pub(crate) fn address_count(&self) -> usize {
        self.inner.slots.len()
    }

    /// How many reconnect hooks are registered.
    #[cfg(test)]
    pub(crate) fn reconnect_hook_count(&self) -> usize {
        let hooks = self.inner.reconnect_hooks.read();
        hooks.unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Where the brokers' membership-change notifications arrive.
    pub fn membership(&self) -> &Arc<MembershipNotifier> {
        self.inner.questions.membership()
    }

    /// What answers the servers' requests on this client's connections (membership changes,
    /// running info, consumer status, offset resets).
    pub fn questions(&self) -> &Arc<ServerQuestions> {
        &self.inner.questions
    }

    /// The open connection to `addr`, connecting (or reconnecting) when needed.
    ///
    /// A connection attempt runs on its own task: a caller that stops waiting (a timeout
    /// shorter than the connect timeout, a dropped future) does not cancel it, so its outcome
    /// still reaches the other callers and a failure still backs off.
    pub async fn connection(&self, addr: &str) -> Result<Connection, TransportError> {
        let now = self.now();
        self.forget_idle_if_due(now);
        if let Some(conn) = self.open_connection(addr, now) {
            return Ok(conn);
        }
        let client = self.clone();
        let target = addr.to_string();
        match tokio::spawn(async move { client.shared_attempt(&target).await }).await {
            Ok(outcome) => outcome,
            Err(e) => Err(TransportError::Connect {
                addr: addr.to_string(),
                reason: format!("connection task failed: {e}"),
            }),
        }
    }

    /// The connection of the current attempt to `addr`, starting a new attempt when the last
    /// connection closed or the backoff after a failed one has passed.
    async fn shared_attempt(&self, addr: &str) -> Result<Connection, TransportError> {
        for _ in 0..3 {
            let now = self.now();
            let attempt = self
                .inner
                .slots
                .entry(addr.to_string())
                .or_insert_with(|| Attempt::new(0, false, now))
                .value()
                .clone();
            let made_here = AtomicBool::new(false);
            let outcome = attempt
                .outcome
                .get_or_init(|| {
                    made_here.store(true, Ordering::Relaxed);
                    self.connect(addr, attempt.failures_before, attempt.reconnect)
                })
                .await;
            match outcome {
                Ok(opened) if opened.conn.is_open() => return Ok(opened.conn.clone()),
                Ok(opened) => {
                    let next = self.after_close(addr, &attempt, opened, now);
                    self.replace(addr, &attempt, next);
                }
                Err(failure) => {
                    let failures = attempt.failures_before + 1;
                    let wait = self.inner.config.backoff(failures);
                    let elapsed = failure.at.elapsed();
                    if made_here.load(Ordering::Relaxed) {
                        return Err(failure.error.clone());
                    }
                    if elapsed < wait {
                        return Err(TransportError::BackingOff {
                            addr: addr.to_string(),
                            retry_in: wait - elapsed,
                            last_error: failure.error.to_string(),
                        });
                    }
                    self.replace(addr, &attempt, Attempt::new(failures, true, now));
                }
            }
        }
        Err(TransportError::Connect {
            addr: addr.to_string(),
            reason: "the connection closed again right after connecting".into(),
        })
    }

    /// What follows a closed connection. One that the server answered on, or that lived at
    /// least `reconnect_backoff_max`, was healthy: reconnect at once, with no failure counted (a
    /// load balancer that closes connections after a while is not a failure). One that closed
    /// sooner without a word from the server (a proxy with no backend, a server refusing this
    /// client's traffic, a broker going down) counts as a failure: the first is reconnected at
    /// once, but when the connection that replaced it closes the same way, the next attempt
    /// waits out the backoff. Without that, every call would reconnect at once, and each
    /// reconnection's hooks (the broker client heartbeats again) would make the calls that
    /// reconnect again.
    fn after_close(
        &self,
        addr: &str,
        attempt: &Attempt,
        opened: &Opened,
        now: u64,
    ) -> Arc<Attempt> {
        // How long it was open, not how long until this call noticed: calls 30 s apart to a
        // server that closes every connection at once must still back off.
        let lived = opened
            .conn
            .closed_at()
            .unwrap_or_else(Instant::now)
            .saturating_duration_since(opened.at);
        if opened.conn.heard_from_server() || lived >= self.inner.config.reconnect_backoff_max {
            tracing::info!(addr, "connection lost, reconnecting");
            return Attempt::new(0, true, now);
        }
        if attempt.failures_before == 0 {
            tracing::info!(
                addr,
                ?lived,
                "connection closed soon after it opened; reconnecting"
            );
            return Attempt::new(1, true, now);
        }
        let failures = attempt.failures_before;
        let backoff = self.inner.config.backoff(failures + 1);
        tracing::warn!(
            addr,
            ?lived,
            failures,
            ?backoff,
            "connection closed soon after it opened, again; backing off"
        );
        let error = TransportError::Closed {
            addr: addr.to_string(),
            reason: format!("{} ms after it opened", lived.as_millis()),
        };
        Attempt::failed(
            failures,
            Failure {
                error,
                at: Instant::now(),
            },
            now,
        )
    }

    async fn connect(
        &self,
        addr: &str,
        failures_before: u32,
        reconnect: bool,
    ) -> Result<Opened, Failure> {
        if reconnect {
            tracing::info!(addr, failures_before, "reconnecting");
        } else {
            tracing::debug!(addr, "connecting");
        }
        let config = &self.inner.config;
        match self.open(addr).await {
            Ok(conn) => {
                tracing::info!(addr, reconnect, "connected");
                self.watch_close(addr, &conn);
                if reconnect {
                    // Called without the lock: a hook may register another.
                    let hooks = live_hooks(&self.inner.reconnect_hooks).clone();
                    call_hooks(&hooks, addr, "a reconnect hook panicked");
                }
                Ok(Opened {
                    conn,
                    at: Instant::now(),
                })
            }
            Err(error) => {
                let backoff = config.backoff(failures_before + 1);
                tracing::warn!(addr, %error, ?backoff, "connection attempt failed, backing off");
                Err(Failure {
                    error,
                    at: Instant::now(),
                })
            }
        }
    }

    /// The connection to `addr` if one is open, without waiting; notes that `addr` was used
    /// `now`.
    fn open_connection(&self, addr: &str, now: u64) -> Option<Connection> {
        let attempt = self.inner.slots.get(addr)?;
        attempt.last_used.store(now, Ordering::Relaxed);
        match attempt.value().outcome.get() {
            Some(Ok(opened)) if opened.conn.is_open() => Some(opened.conn.clone()),
            _ => None,
        }
    }

    /// Milliseconds since the client's epoch.
    fn now(&self) -> u64 {
        let elapsed = self.inner.epoch.elapsed().as_millis();
        u64::try_from(elapsed).unwrap_or(u64::MAX)
    }

    /// Forgets the addresses no call has used for `forget_idle_after`, when a look is due (at
    /// most twice per period, so a busy client pays one clock read and one atomic load per
    /// call). An attempt still connecting is kept: its callers are waiting for it.
    fn forget_idle_if_due(&self, now: u64) {
        let Some(idle) = self.inner.config.forget_idle_after else {
            return;
        };
        let idle = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        let due = self.inner.next_forget.load(Ordering::Relaxed);
        if now < due {
            return;
        }
        let next = now.saturating_add(idle / 2).max(now.saturating_add(1));
        let claimed = self.inner.next_forget.compare_exchange(
            due,
            next,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        if claimed.is_err() {
            return; // another call is looking
        }
        self.inner.slots.retain(|addr, attempt| {
            let unused = now.saturating_sub(attempt.last_used.load(Ordering::Relaxed));
            let keep = unused < idle || attempt.outcome.get().is_none();
            if !keep {
                tracing::debug!(addr, unused_ms = unused, "forgetting an idle address");
            }
            keep
        });
    }

    fn replace(&self, addr: &str, old: &Arc<Attempt>, new: Arc<Attempt>) {
        if let Some(mut slot) = self.inner.slots.get_mut(addr)
            && Arc::ptr_eq(slot.value(), old)
        {
            *slot = new;
        }
    }

    /// Sends `request` to `addr` and waits for the response, up to the configured timeout.
    pub async fn invoke(
        &self,
        addr: &str,
        request: RemotingCommand,
    ) -> Result<RemotingCommand, TransportError> {
        self.invoke_with_timeout(addr, request, self.inner.config.request_timeout)
            .await
    }

    /// Sends `request` for `op` to `addr` and returns the response whatever its code, except a
    /// refusal of this client's credentials or permissions: that is [`RemoteError::Denied`],
    /// logged once per resource.
    pub(crate) async fn call(
        &self,
        addr: &str,
        op: &Op,
        request: RemotingCommand,
    ) -> Result<RemotingCommand, RemoteError> {
        self.call_with_timeout(addr, op, request, self.inner.config.request_timeout)
            .await
    }

    /// [`call`](Self::call), waiting up to `timeout` (a held pull, a send-back).
    pub(crate) async fn call_with_timeout(
        &self,
        addr: &str,
        op: &Op,
        request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, RemoteError> {
        let response = self.invoke_with_timeout(addr, request, timeout).await?;
        self.check_denied(addr, op, &response)?;
        Ok(response)
    }

    /// [`RemoteError::Denied`] when `response` (from `addr`, to a request for `op`) refuses
    /// this client's credentials or permissions, logged once per resource.
    pub(crate) fn check_denied(
        &self,
        addr: &str,
        op: &Op,
        response: &RemotingCommand,
    ) -> Result<(), RemoteError> {
        self.inner
            .denials
            .check(addr, op, self.credentials(), response)
    }

    /// Sends `request` to `addr` and waits for the response, up to `timeout` (connecting
    /// included). The request is signed when the client has credentials.
    pub async fn invoke_with_timeout(
        &self,
        addr: &str,
        request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, TransportError> {
        self.invoke_telling(addr, request, timeout)
            .await
            .map_err(|failed| failed.error)
    }

    /// [`invoke_with_timeout`](Self::invoke_with_timeout), telling a failure before the
    /// request could leave (no connection within the time, or none at all) from one after.
    pub(crate) async fn invoke_telling(
        &self,
        addr: &str,
        request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, InvokeFailed> {
        let request = self.signed(request);
        // No deadline is computed: a timeout too long to add to the clock is only a long wait.
        let started = Instant::now();
        // A deadline shorter than the connect timeout does not cancel the attempt (see
        // `connection`): its failure is still recorded and backed off from.
        let conn = match tokio::time::timeout(timeout, self.connection(addr)).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(error)) => {
                return Err(InvokeFailed {
                    error,
                    connected: false,
                });
            }
            Err(_) => {
                return Err(InvokeFailed {
                    error: TransportError::Timeout {
                        addr: addr.to_string(),
                        after: timeout,
                    },
                    connected: false,
                });
            }
        };
        let left = timeout.saturating_sub(started.elapsed());
        conn.request(request, left).await.map_err(|e| InvokeFailed {
            error: match e {
                TransportError::Timeout { addr, .. } => TransportError::Timeout {
                    addr,
                    after: timeout,
                },
                other => other,
            },
            connected: true,
        })
    }

    /// Sends a one-way `request` to `addr` (signed when the client has credentials).
    pub async fn invoke_oneway(
        &self,
        addr: &str,
        request: RemotingCommand,
    ) -> Result<(), TransportError> {
        let request = self.signed(request);
        let conn = self.connection(addr).await?;
        conn.send_oneway(request, self.inner.config.request_timeout)
            .await
    }

    /// Closes the connection to `addr`, if any (the next use reconnects at once).
    pub fn close(&self, addr: &str) {
        if let Some((_, attempt)) = self.inner.slots.remove(addr)
            && let Some(Ok(opened)) = attempt.outcome.get()
        {
            opened.conn.close();
        }
    }

    /// Closes every connection.
    pub fn close_all(&self) {
        let addrs: Vec<String> = self.inner.slots.iter().map(|e| e.key().clone()).collect();
        for addr in addrs {
            self.close(&addr);
        }
    }
}

/// The hooks of `hooks`, without those no longer live.
fn live_hooks(
    hooks: &std::sync::RwLock<Vec<ReconnectHook>>,
) -> std::sync::RwLockWriteGuard<'_, Vec<ReconnectHook>> {
    let mut hooks = hooks.write().unwrap_or_else(|e| e.into_inner());
    hooks.retain(|hook| (hook.live)());
    hooks
}

/// Calls each of `hooks` with `addr` (without the lock: a hook may register another). The
/// application's code: a panic in one must not undo what it was told about, nor skip the others.
fn call_hooks(hooks: &[ReconnectHook], addr: &str, panicked: &'static str) {
    for hook in hooks {
        let called = std::panic::catch_unwind(AssertUnwindSafe(|| (hook.call)(addr)));
        if let Err(panic) = called {
            let message = panic_message(&*panic);
            tracing::error!(addr, panic = %message, "{panicked}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::RemotingCodec;
    use futures_util::{SinkExt, StreamExt};
    use std::sync::atomic::AtomicUsize;
    use tokio::net::TcpListener;
    use tokio_util::codec::Framed;

    /// A loopback server answering every request with code 0 and the request's code as remark,
    /// until it has served `connections` connections.
    async fn echo_server(listener: TcpListener, connections: usize) {
        for _ in 0..connections {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut framed = Framed::new(socket, RemotingCodec::default());
                while let Some(Ok(req)) = framed.next().await {
                    let answer =
                        RemotingCommand::response(0, req.opaque, Some(req.code.to_string()));
                    if framed.send(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    }

    /// A reconnect hook is the application's code: one that panics must not undo the
    /// connection it was told about (before, the attempt died with it, so every reconnection
    /// failed for as long as the hook was registered).
    #[tokio::test]
    async fn a_panicking_reconnect_hook_does_not_stop_the_reconnection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            // The first connection answers one request, then closes; the next ones answer.
            let (first, _) = listener.accept().await.unwrap();
            let mut framed = Framed::new(first, RemotingCodec::default());
            if let Some(Ok(req)) = framed.next().await {
                let _ = framed
                    .send(RemotingCommand::response(0, req.opaque, None))
                    .await;
            }
            drop(framed);
            echo_server(listener, 2).await;
        });
        let client = RemotingClient::new(ClientConfig {
            reconnect_backoff_min: Duration::from_millis(1),
            ..Default::default()
        });
        let called = Arc::new(AtomicUsize::new(0));
        client.on_reconnect({
            let called = called.clone();
            move |_| {
                called.fetch_add(1, Ordering::SeqCst);
                panic!("injected hook panic");
            }
        });
        let conn = client.connection(&addr).await.unwrap();
        client
            .invoke(&addr, RemotingCommand::request(1))
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), conn.closed())
            .await
            .unwrap();
        let answer = client.invoke(&addr, RemotingCommand::request(2)).await;
        assert_eq!(answer.unwrap().remark.as_deref(), Some("2"));
        assert_eq!(called.load(Ordering::SeqCst), 1);
    }

    /// A connection the server closes calls the disconnect hooks with its address (a broker
    /// that restarted has lost its lock table); one the client closes itself does not.
    #[tokio::test]
    async fn a_connection_closed_by_the_server_calls_the_disconnect_hooks_and_the_clients_own_close_does_not()
     {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            // The first connection answers one request, then closes; the next ones answer.
            let (first, _) = listener.accept().await.unwrap();
            let mut framed = Framed::new(first, RemotingCodec::default());
            if let Some(Ok(req)) = framed.next().await {
                let _ = framed
                    .send(RemotingCommand::response(0, req.opaque, None))
                    .await;
            }
            drop(framed);
            echo_server(listener, 2).await;
        });
        let client = RemotingClient::new(ClientConfig {
            reconnect_backoff_min: Duration::from_millis(1),
            ..Default::default()
        });
        let (lost_tx, mut lost) = tokio::sync::mpsc::unbounded_channel();
        client.on_disconnect(move |addr| {
            let _ = lost_tx.send(addr.to_string());
        });
        let conn = client.connection(&addr).await.unwrap();
        client
            .invoke(&addr, RemotingCommand::request(1))
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), conn.closed())
            .await
            .unwrap();
        let told = tokio::time::timeout(Duration::from_secs(5), lost.recv()).await;
        assert_eq!(told.unwrap().as_deref(), Some(addr.as_str()));
        // Reconnected; closed by the client this time.
        let answer = client.invoke(&addr, RemotingCommand::request(2)).await;
        assert_eq!(answer.unwrap().remark.as_deref(), Some("2"));
        let conn = client.connection(&addr).await.unwrap();
        client.close(&addr);
        tokio::time::timeout(Duration::from_secs(5), conn.closed())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            lost.try_recv().is_err(),
            "the client's own closes are no loss"
        );
    }

    #[tokio::test]
    async fn after_a_timeout_on_a_silent_connection_the_next_call_reconnects() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            // The first connection reads requests and never answers (a half-open socket looks
            // the same from the client); the second one answers.
            let (silent, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut framed = Framed::new(silent, RemotingCodec::default());
                while let Some(Ok(_)) = framed.next().await {}
            });
            echo_server(listener, 1).await;
        });
        // The silence limit is below the request timeout: the request gets what is left of its
        // deadline after connecting, so with equal values it times out just short of the limit.
        let client = RemotingClient::new(ClientConfig {
            request_timeout: Duration::from_millis(200),
            connection: ConnectionConfig {
                close_after_silence: Some(Duration::from_millis(100)),
                ..Default::default()
            },
            ..Default::default()
        });
        let err = client
            .invoke(&addr, RemotingCommand::request(1))
            .await
            .unwrap_err();
        assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
        let answer = client
            .invoke(&addr, RemotingCommand::request(2))
            .await
            .unwrap();
        assert_eq!(answer.remark.as_deref(), Some("2"));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let config = ClientConfig {
            reconnect_backoff_min: Duration::from_millis(100),
            reconnect_backoff_max: Duration::from_millis(1000),
            ..Default::default()
        };
        let got: Vec<u128> = (1..=6).map(|n| config.backoff(n).as_millis()).collect();
        assert_eq!(got, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(config.backoff(u32::MAX), Duration::from_millis(1000));
        // What the client is made with is what it reports (the producer reads its timeout).
        assert_eq!(RemotingClient::new(config).config(), &config);
    }

    #[tokio::test]
    async fn one_connection_per_address_shared_by_concurrent_callers() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        // The server accepts a single connection: a second one would never be answered.
        tokio::spawn(echo_server(listener, 1));
        let client = RemotingClient::default();
        let calls = (0..20).map(|i| {
            let client = client.clone();
            let addr = addr.clone();
            async move { client.invoke(&addr, RemotingCommand::request(i)).await }
        });
        let answers = futures_util::future::join_all(calls).await;
        for (i, answer) in answers.into_iter().enumerate() {
            assert_eq!(answer.unwrap().remark, Some(i.to_string()));
        }
    }

    #[tokio::test]
    async fn a_lost_connection_is_replaced_on_next_use() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(echo_server(listener, 2));
        let client = RemotingClient::default();
        let first = client.connection(&addr).await.unwrap();
        first.close();
        assert!(!first.is_open());
        let answer = client
            .invoke(&addr, RemotingCommand::request(5))
            .await
            .unwrap();
        assert_eq!(answer.remark.as_deref(), Some("5"));
        assert!(client.connection(&addr).await.unwrap().is_open());
    }

    /// `close` is the application's own doing: the connection closes, the next use opens a
    /// new one, and that is no reconnection (the hooks are for connections the server lost).
    #[tokio::test]
    async fn close_and_close_all_end_the_connections_and_the_next_use_connects_afresh() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(echo_server(listener, 3));
        let client = RemotingClient::default();
        let reconnects = count_reconnects(&client);
        let first = client.connection(&addr).await.unwrap();
        client.close(&addr);
        tokio::time::timeout(Duration::from_secs(5), first.closed())
            .await
            .unwrap();
        let second = client.connection(&addr).await.unwrap();
        assert!(second.is_open());
        client.close_all();
        assert!(!second.is_open());
        let answer = client.invoke(&addr, RemotingCommand::request(9)).await;
        assert_eq!(answer.unwrap().remark.as_deref(), Some("9"));
        assert_eq!(reconnects.load(Ordering::SeqCst), 0);
    }

    /// The brokers' pushes arrive on the connections this client opens, and reach the watchers
    /// of [`RemotingClient::membership`].
    #[tokio::test]
    async fn a_membership_change_pushed_by_a_server_reaches_the_watchers() {
        use crate::command::{FLAG_ONEWAY, request_code};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            let mut framed = Framed::new(socket, RemotingCodec::default());
            let Some(Ok(req)) = framed.next().await else {
                return;
            };
            let _ = framed
                .send(RemotingCommand::response(0, req.opaque, None))
                .await;
            let mut push = RemotingCommand::request(request_code::NOTIFY_CONSUMER_IDS_CHANGED)
                .with_ext("consumerGroup", "G");
            push.flag = FLAG_ONEWAY;
            let _ = framed.send(push).await;
            // Keeps the connection open until the client goes.
            while let Some(Ok(_)) = framed.next().await {}
        });
        let client = RemotingClient::default();
        let mut changes = client.membership().subscribe("G");
        client
            .invoke(&addr, RemotingCommand::request(1))
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), changes.changed())
            .await
            .expect("the push never reached the watcher")
            .unwrap();
        assert_eq!(*changes.borrow(), 1);
    }

    /// How many times `client` calls its reconnect hooks.
    fn count_reconnects(client: &RemotingClient) -> Arc<AtomicUsize> {
        let reconnects = Arc::new(AtomicUsize::new(0));
        let counter = reconnects.clone();
        client.on_reconnect(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        reconnects
    }

    /// A port nobody listens on: bound, noted, closed.
    fn refused_address() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    }

    #[tokio::test]
    async fn failed_attempts_back_off_instead_of_spinning() {
        let addr = refused_address();
        let client = RemotingClient::new(ClientConfig {
            reconnect_backoff_min: Duration::from_millis(300),
            reconnect_backoff_max: Duration::from_secs(2),
            ..Default::default()
        });
        let err = client.connection(&addr).await.unwrap_err();
        assert!(matches!(err, TransportError::Connect { .. }), "{err}");
        // Within the backoff: no new attempt, a fast typed error.
        let err = client.connection(&addr).await.unwrap_err();
        assert!(
            matches!(&err, TransportError::BackingOff { retry_in, .. } if *retry_in <= Duration::from_millis(300)),
            "{err}"
        );
        // The server comes up on that port; after the backoff the next use connects.
        let listener = TcpListener::bind(&addr).await.unwrap();
        tokio::spawn(echo_server(listener, 1));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let answer = client
            .invoke(&addr, RemotingCommand::request(9))
            .await
            .unwrap();
        assert_eq!(answer.remark.as_deref(), Some("9"));
    }

    /// An address whose connection attempts hang: a listener whose accept queue is full (it
    /// never accepts), so the kernel drops further SYNs. Keep the returned sockets alive.
    async fn blackhole() -> (String, tokio::net::TcpListener, tokio::net::TcpStream) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(0).unwrap();
        let addr = listener.local_addr().unwrap();
        let filler = tokio::net::TcpStream::connect(addr).await.unwrap();
        (addr.to_string(), listener, filler)
    }

    #[tokio::test(start_paused = true)]
    async fn a_connect_cut_short_by_the_request_timeout_still_backs_off() {
        let (addr, _listener, _filler) = blackhole().await;
        // A request timeout shorter than the connect timeout cuts the attempt short.
        let client = RemotingClient::new(ClientConfig {
            connect_timeout: Duration::from_millis(400),
            request_timeout: Duration::from_millis(200),
            reconnect_backoff_min: Duration::from_secs(30),
            reconnect_backoff_max: Duration::from_secs(30),
            ..Default::default()
        });
        let err = client
            .invoke(&addr, RemotingCommand::request(1))
            .await
            .unwrap_err();
        assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
        // The attempt goes on and its failure is remembered: within the backoff, no new attempt
        // and no wait.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = Instant::now();
        let err = client
            .invoke(&addr, RemotingCommand::request(2))
            .await
            .unwrap_err();
        assert!(matches!(err, TransportError::BackingOff { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_millis(100));
    }

    /// A caller that gives up on [`RemotingClient::connection`] (a timeout around it, or a
    /// dropped one-way send) must not cancel the attempt: its failure is remembered and the next
    /// call backs off instead of trying again at once.
    #[tokio::test(start_paused = true)]
    async fn a_caller_giving_up_on_a_connect_does_not_cancel_the_backoff() {
        let (addr, _listener, _filler) = blackhole().await;
        let client = RemotingClient::new(ClientConfig {
            connect_timeout: Duration::from_millis(400),
            reconnect_backoff_min: Duration::from_secs(30),
            reconnect_backoff_max: Duration::from_secs(30),
            ..Default::default()
        });
        let gave_up =
            tokio::time::timeout(Duration::from_millis(100), client.connection(&addr)).await;
        assert!(gave_up.is_err(), "{gave_up:?}");
        let oneway = tokio::time::timeout(
            Duration::from_millis(100),
            client.invoke_oneway(&addr, RemotingCommand::request(1)),
        )
        .await;
        assert!(oneway.is_err(), "{oneway:?}");
        // The attempt went on and failed at 400 ms: within the backoff, no new attempt.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = Instant::now();
        let err = client.connection(&addr).await.unwrap_err();
        assert!(matches!(err, TransportError::BackingOff { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_millis(100));
    }

    /// A timeout too long to add to the clock (from a configuration, a command line) is no
    /// reason to panic: it is only a long wait.
    #[tokio::test]
    async fn an_immense_timeout_is_a_long_wait_not_a_panic() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(echo_server(listener, 1));
        let client = RemotingClient::new(ClientConfig {
            request_timeout: Duration::MAX,
            ..Default::default()
        });
        let answer = client
            .invoke(&addr, RemotingCommand::request(4))
            .await
            .unwrap();
        assert_eq!(answer.remark.as_deref(), Some("4"));
        let answer = client
            .invoke_with_timeout(&addr, RemotingCommand::request(5), Duration::MAX)
            .await
            .unwrap();
        assert_eq!(answer.remark.as_deref(), Some("5"));
    }

    /// A server that accepts every connection and closes it at once (a proxy with no
    /// backend); returns its address and how many connections it accepted.
    async fn closing_server() -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                drop(socket);
            }
        });
        (addr, accepted)
    }

    /// How long a connection lived is measured to its close, not to the call that notices it:
    /// calls further apart than `reconnect_backoff_max` (heartbeats every 30 s) to a server
    /// that closes every connection at once reconnected at once every time, hooks included.
    #[tokio::test]
    async fn closes_noticed_late_still_count_as_closes_right_after_opening() {
        let (addr, accepted) = closing_server().await;
        let client = RemotingClient::new(ClientConfig {
            reconnect_backoff_min: Duration::from_millis(20),
            reconnect_backoff_max: Duration::from_millis(60),
            ..Default::default()
        });
        let hooks = Arc::new(AtomicUsize::new(0));
        client.on_reconnect({
            let hooks = hooks.clone();
            move |_| {
                hooks.fetch_add(1, Ordering::SeqCst);
            }
        });
        let mut outcomes = Vec::new();
        for _ in 0..3 {
            let outcome = client.connection(&addr).await;
            if let Ok(conn) = &outcome {
                tokio::time::timeout(Duration::from_secs(5), conn.closed())
                    .await
                    .unwrap();
            }
            outcomes.push(outcome.is_ok());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The first connection, then the first close right after opening is reconnected at
        // once; the second such close backs off.
        assert_eq!(outcomes, [true, true, false]);
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        assert_eq!(hooks.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn connections_that_close_as_they_open_back_off_from_the_second() {
        let (addr, accepted) = closing_server().await;
        let client = RemotingClient::new(ClientConfig {
            reconnect_backoff_min: Duration::from_millis(200),
            ..Default::default()
        });
        let reconnects = count_reconnects(&client);
        let call = |n| client.invoke(&addr, RemotingCommand::request(n));
        let err = call(1).await.unwrap_err();
        assert!(matches!(err, TransportError::Closed { .. }), "{err}");
        // The first early close is taken for bad luck: reconnected at once.
        let err = call(2).await.unwrap_err();
        assert!(matches!(err, TransportError::Closed { .. }), "{err}");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        assert_eq!(reconnects.load(Ordering::SeqCst), 1);
        // The second is not: the next attempt waits out the backoff after two failures.
        let err = call(3).await.unwrap_err();
        assert!(
            matches!(&err, TransportError::BackingOff { retry_in, last_error, .. }
                if *retry_in > Duration::from_millis(200) && last_error.contains("after it opened")),
            "{err}"
        );
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(call(4).await.is_err());
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
    }

    /// A server that answers in another protocol and closes (an HTTP port, a TLS-only broker
    /// reached without TLS) backs off as one that closes at once: its bytes are no frame, so
    /// they are not an answer (found by review: counted as heard, they reset the backoff at
    /// every close, and the client reconnected at every call).
    #[tokio::test]
    async fn a_server_speaking_another_protocol_backs_off() {
        use tokio::io::AsyncWriteExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let _ = socket
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
        let client = RemotingClient::new(ClientConfig {
            reconnect_backoff_min: Duration::from_millis(500),
            ..Default::default()
        });
        let mut backing_off = 0;
        for n in 1..=5 {
            match client.invoke(&addr, RemotingCommand::request(n)).await {
                Err(TransportError::BackingOff { .. }) => backing_off += 1,
                Err(_) => {}
                Ok(answer) => panic!("answered {answer:?}"),
            }
        }
        assert!(backing_off >= 3, "{backing_off} of 5 calls backed off");
        assert!(accepted.load(Ordering::SeqCst) <= 2);
    }

    #[tokio::test]
    async fn a_connection_that_lived_long_is_reconnected_at_once_when_it_closes() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (hang_up, on_hang_up) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            // The first connection closes at once; the second says nothing until told to
            // close; then an echo server.
            drop(listener.accept().await.unwrap());
            let (second, _) = listener.accept().await.unwrap();
            let _ = on_hang_up.await;
            drop(second);
            echo_server(listener, 1).await;
        });
        let client = RemotingClient::new(ClientConfig {
            reconnect_backoff_min: Duration::from_millis(200),
            ..Default::default()
        });
        let call = |n| client.invoke(&addr, RemotingCommand::request(n));
        assert!(call(1).await.is_err(), "closed as it opened");
        let conn = client.connection(&addr).await.unwrap();
        // After `reconnect_backoff_max` open, the connection counts as healthy, although the
        // server never answered on it: its close is not a second early one, and the next
        // call reconnects at once.
        jump(ClientConfig::default().reconnect_backoff_max).await;
        hang_up.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), conn.closed())
            .await
            .unwrap();
        let answer = call(3).await.unwrap();
        assert_eq!(answer.remark.as_deref(), Some("3"));
    }

    /// A load balancer that closes every connection after its first answer: the closes are
    /// early, but the server answered, so nothing backs off.
    #[tokio::test]
    async fn connections_closed_after_an_answer_are_reconnected_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let mut framed = Framed::new(socket, RemotingCodec::default());
                if let Some(Ok(req)) = framed.next().await {
                    let answer = RemotingCommand::response(0, req.opaque, None);
                    let _ = framed.send(answer).await;
                }
            }
        });
        let client = RemotingClient::new(ClientConfig {
            reconnect_backoff_min: Duration::from_secs(10),
            ..Default::default()
        });
        for n in 0..6 {
            let conn = client.connection(&addr).await.unwrap();
            client
                .invoke(&addr, RemotingCommand::request(n))
                .await
                .unwrap();
            tokio::time::timeout(Duration::from_secs(5), conn.closed())
                .await
                .unwrap();
        }
    }

    /// The broker client's reconnect hook heartbeats again through the same client: with a
    /// server that closes every connection, each reconnection made the calls that reconnect
    /// again, at once, for ever.
    #[tokio::test]
    async fn a_reconnect_hook_that_calls_does_not_feed_a_reconnection_storm() {
        let (addr, accepted) = closing_server().await;
        let client = RemotingClient::default();
        client.on_reconnect({
            let client = client.clone();
            move |addr| {
                let (client, addr) = (client.clone(), addr.to_string());
                tokio::spawn(async move {
                    for n in 0..2 {
                        let _ = client.invoke(&addr, RemotingCommand::request(n)).await;
                    }
                });
            }
        });
        for n in 0..2 {
            let _ = client.invoke(&addr, RemotingCommand::request(n)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let n = accepted.load(Ordering::SeqCst);
        assert!(n <= 3, "{n} connections in half a second");
    }

    #[tokio::test]
    async fn consecutive_failures_lengthen_the_backoff() {
        let addr = refused_address();
        let client = RemotingClient::new(ClientConfig {
            reconnect_backoff_min: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_secs(10),
            ..Default::default()
        });
        assert!(client.connection(&addr).await.is_err());
        tokio::time::sleep(Duration::from_millis(60)).await;
        // Second attempt fails too; now the backoff is 100 ms.
        let err = client.connection(&addr).await.unwrap_err();
        assert!(matches!(err, TransportError::Connect { .. }), "{err}");
        let err = client.connection(&addr).await.unwrap_err();
        assert!(
            matches!(&err, TransportError::BackingOff { retry_in, .. } if *retry_in > Duration::from_millis(50)),
            "{err}"
        );
    }

    /// A broker behind a port forward: every call to its advertised address dials the
    /// forward, over one connection that keeps the advertised address as its identity; other
    /// addresses are dialed as they are; a failure names both addresses.
    #[tokio::test]
    async fn an_address_override_dials_the_mapped_address_under_the_advertised_one() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let actual = listener.local_addr().unwrap().to_string();
        tokio::spawn(echo_server(listener, 1));
        let advertised = "10.255.255.1:10911";
        let unreachable = refused_address();
        let map = AddressMap::new()
            .with(advertised, actual.as_str())
            .unwrap()
            .with("10.255.255.2:10911", unreachable.as_str())
            .unwrap();
        let client = RemotingClient::default().with_address_map(map.clone());
        assert_eq!(*client.clone().address_map(), map, "clones share the map");
        for n in 1..=3 {
            let answer = client
                .invoke(advertised, RemotingCommand::request(n))
                .await
                .unwrap();
            assert_eq!(answer.remark.as_deref(), Some(n.to_string().as_str()));
        }
        let conn = client.connection(advertised).await.unwrap();
        assert_eq!(conn.addr(), advertised);
        assert_eq!(client.address_count(), 1);
        let err = client
            .invoke("10.255.255.2:10911", RemotingCommand::request(1))
            .await
            .unwrap_err();
        match &err {
            TransportError::Connect { addr, reason } => {
                assert_eq!(addr, "10.255.255.2:10911");
                assert!(reason.contains(&unreachable), "{reason}");
            }
            other => panic!("not a connection error: {other}"),
        }
    }

    /// A new map applies to the connections opened after it; an open one keeps its path until
    /// it is closed.
    #[tokio::test]
    async fn a_new_address_map_applies_from_the_next_connection() {
        let first = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let first_addr = first.local_addr().unwrap().to_string();
        let second = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let second_addr = second.local_addr().unwrap().to_string();
        // The first server answers with 1000 + the code, the second with the code.
        tokio::spawn(async move {
            let (socket, _) = first.accept().await.unwrap();
            let mut framed = Framed::new(socket, RemotingCodec::default());
            while let Some(Ok(req)) = framed.next().await {
                let remark = Some((1000 + req.code).to_string());
                let _ = framed
                    .send(RemotingCommand::response(0, req.opaque, remark))
                    .await;
            }
        });
        tokio::spawn(echo_server(second, 1));
        let advertised = "broker-a.example:10911";
        let client = RemotingClient::default()
            .with_address_map(AddressMap::new().with(advertised, first_addr).unwrap());
        let ask = |n| client.invoke(advertised, RemotingCommand::request(n));
        assert_eq!(ask(1).await.unwrap().remark.as_deref(), Some("1001"));
        client.set_address_map(AddressMap::new().with(advertised, second_addr).unwrap());
        assert_eq!(ask(2).await.unwrap().remark.as_deref(), Some("1002"));
        client.close(advertised);
        assert_eq!(ask(3).await.unwrap().remark.as_deref(), Some("3"));
    }

    /// Moves the clock on by `by` at once (real time runs again afterwards, for the sockets).
    async fn jump(by: Duration) {
        tokio::time::pause();
        tokio::time::advance(by).await;
        tokio::time::resume();
    }

    /// A server that serves one connection and reports when the client has closed it.
    async fn server_reporting_close() -> (String, tokio::sync::oneshot::Receiver<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (closed, on_close) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            let mut framed = Framed::new(socket, RemotingCodec::default());
            while let Some(Ok(_)) = framed.next().await {}
            let _ = closed.send(());
        });
        (addr, on_close)
    }

    /// A client whose brokers restart under new addresses must not keep an entry (and a
    /// connection) for each address it ever used: an address no call used for the idle period
    /// is forgotten at a later call, its connection closed unless a caller still holds it;
    /// addresses in use are kept, and a forgotten one connects afresh, with no reconnect hook.
    #[tokio::test]
    async fn addresses_left_unused_are_forgotten_and_their_connections_closed() {
        let (unheld, unheld_closed) = server_reporting_close().await;
        let (held, _held_closed) = server_reporting_close().await;
        let (used, _used_closed) = server_reporting_close().await;
        let client = RemotingClient::new(ClientConfig {
            forget_idle_after: Some(Duration::from_secs(120)),
            ..Default::default()
        });
        let reconnects = count_reconnects(&client);
        client.connection(&unheld).await.unwrap();
        let held_connection = client.connection(&held).await.unwrap();
        client.connection(&used).await.unwrap();

        jump(Duration::from_secs(100)).await;
        client.connection(&used).await.unwrap();
        assert_eq!(client.address_count(), 3, "nothing idle for 120 s yet");
        jump(Duration::from_secs(50)).await;
        client.connection(&used).await.unwrap();
        assert_eq!(client.address_count(), 3, "no look due yet");
        jump(Duration::from_secs(20)).await;
        client.connection(&used).await.unwrap();
        assert_eq!(client.address_count(), 1, "only the address in use is left");

        tokio::time::timeout(Duration::from_secs(5), unheld_closed)
            .await
            .expect("the forgotten connection nobody held was not closed")
            .unwrap();
        assert!(
            held_connection.is_open(),
            "a caller's connection stays open"
        );
        assert!(client.connection(&used).await.unwrap().is_open());
        assert_eq!(reconnects.load(Ordering::SeqCst), 0);
    }

    /// Forgetting an address forgets its failures too: after the idle period the next call
    /// tries at once instead of waiting out a long backoff.
    #[tokio::test]
    async fn a_forgotten_address_is_tried_again_without_its_backoff() {
        let addr = refused_address();
        let client = RemotingClient::new(ClientConfig {
            reconnect_backoff_min: Duration::from_secs(1000),
            reconnect_backoff_max: Duration::from_secs(1000),
            forget_idle_after: Some(Duration::from_secs(120)),
            ..Default::default()
        });
        let err = client.connection(&addr).await.unwrap_err();
        assert!(matches!(err, TransportError::Connect { .. }), "{err}");
        jump(Duration::from_secs(100)).await;
        let err = client.connection(&addr).await.unwrap_err();
        assert!(matches!(err, TransportError::BackingOff { .. }), "{err}");
        jump(Duration::from_secs(200)).await;
        let err = client.connection(&addr).await.unwrap_err();
        assert!(matches!(err, TransportError::Connect { .. }), "{err}");
        let err = client.connection(&addr).await.unwrap_err();
        assert!(
            matches!(&err, TransportError::BackingOff { retry_in, .. } if *retry_in > Duration::from_secs(900)),
            "{err}"
        );
    }

    /// With `forget_idle_after: None` nothing is forgotten, however long it lies unused.
    #[tokio::test]
    async fn with_no_idle_period_every_address_is_kept() {
        let (addr, _closed) = server_reporting_close().await;
        let client = RemotingClient::new(ClientConfig {
            forget_idle_after: None,
            ..Default::default()
        });
        let first = client.connection(&addr).await.unwrap();
        drop(first);
        jump(Duration::from_secs(100_000)).await;
        assert!(client.connection(&addr).await.unwrap().is_open());
        assert_eq!(client.address_count(), 1);
    }
}
