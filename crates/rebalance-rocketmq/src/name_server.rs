//! [`NameServerClient`]: topic routes from a list of RocketMQ name servers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use rebalance_core::TopicRoute;
use rebalance_runtime::{NameServer, RemoteError, RouteError};

use crate::acl::Credentials;
use crate::client::{ClientConfig, RemotingClient};
use crate::command::{RemotingCommand, request_code, response_code};
use crate::denial::Op;
use crate::error::AddressError;
use crate::namespace::{self, Namespace};
use crate::route::{RouteCache, parse_route};

/// Splits a name server list as RocketMQ writes it (`host:port;host:port`), ignoring blanks.
///
/// ```
/// use rebalance_rocketmq::name_server::parse_addresses;
///
/// assert_eq!(parse_addresses(" 10.0.0.1:9876; 10.0.0.2:9876 ;").unwrap(),
///            ["10.0.0.1:9876", "10.0.0.2:9876"]);
/// assert!(parse_addresses("10.0.0.1").is_err());
/// assert!(parse_addresses(" ; ").is_err());
/// ```
pub fn parse_addresses(list: &str) -> Result<Vec<String>, AddressError> {
    let addrs: Vec<String> = list
        .split(';')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(|a| match a.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                Ok(a.to_string())
            }
            _ => Err(AddressError::Malformed(a.to_string())),
        })
        .collect::<Result<_, _>>()?;
    if addrs.is_empty() {
        return Err(AddressError::Empty);
    }
    Ok(addrs)
}

struct Inner {
    remoting: RemotingClient,
    addrs: Vec<String>,
    /// The index of the address that answered last; tried first.
    preferred: AtomicUsize,
    routes: RouteCache,
    namespace: Option<Namespace>,
}

/// Fetches topic routes (GET_ROUTEINFO_BY_TOPIC) from a list of name servers, trying the next
/// address when one fails and remembering the one that answered. Implements the runtime's
/// [`NameServer`]; every route it fetches lands in its [`RouteCache`], where the broker clients
/// find broker addresses, unless it fails [`TopicRoute::validate`](rebalance_core::TopicRoute::validate)
/// (then it is that name server's bad response, and the next one is asked). A "topic not found" answer forgets the topic's cached route, so that
/// heartbeats, unregistrations and member lists stop using the brokers of a topic that is gone;
/// the brokers' addresses stay known (other topics may use them), and the runtime keeps its own
/// last good route until it decides the topic is gone.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use rebalance_rocketmq::NameServerClient;
///
/// let name_server = NameServerClient::from_addresses("10.0.0.1:9876;10.0.0.2:9876")?;
/// let route = name_server.route("TopicTest").await?;
/// println!("{} brokers", route.broker_datas.len());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct NameServerClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for NameServerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NameServerClient")
            .field("addrs", &self.inner.addrs)
            .field("namespace", &self.inner.namespace)
            .field("preferred", &self.preferred_address())
            .finish()
    }
}

impl NameServerClient {
    /// A client of the name servers in `addresses` (`host:port;host:port`) over `remoting`
    /// (whose credentials, if any, sign every request), in no namespace.
    pub fn new(remoting: RemotingClient, addresses: &str) -> Result<Self, AddressError> {
        Self::with_parts(remoting, addresses, None)
    }

    fn with_parts(
        remoting: RemotingClient,
        addresses: &str,
        namespace: Option<Namespace>,
    ) -> Result<Self, AddressError> {
        Ok(Self {
            inner: Arc::new(Inner {
                remoting,
                addrs: parse_addresses(addresses)?,
                preferred: AtomicUsize::new(0),
                routes: RouteCache::default(),
                namespace,
            }),
        })
    }

    /// A builder for a client of the name servers in `addresses` (`host:port;host:port`), with
    /// credentials, a namespace or other timeouts.
    ///
    /// ```
    /// use rebalance_rocketmq::{BrokerClient, Credentials, NameServerClient, Namespace};
    ///
    /// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let name_server = NameServerClient::builder("10.0.0.1:9876;10.0.0.2:9876")
    ///     .credentials(Credentials::new("my-access-key", "my-secret-key")?)
    ///     .namespace(Namespace::new("MQ_INST_1")?)
    ///     .build()?;
    /// // Signs and namespaces too: it shares the name server client's settings.
    /// let brokers = BrokerClient::new(name_server.clone());
    /// assert_eq!(name_server.namespace().map(|ns| ns.as_str()), Some("MQ_INST_1"));
    /// # Ok(()) }
    /// # demo().unwrap();
    /// ```
    pub fn builder(addresses: &str) -> NameServerClientBuilder {
        NameServerClientBuilder {
            addresses: addresses.to_string(),
            config: ClientConfig::default(),
            credentials: None,
            namespace: None,
            overrides: Vec::new(),
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// The namespace the client's names are wrapped in, if any.
    pub fn namespace(&self) -> Option<&Namespace> {
        self.inner.namespace.as_ref()
    }

    /// `name` (a topic or a group) as the servers know it: wrapped in the namespace, if any.
    pub fn wire_name<'a>(&self, name: &'a str) -> std::borrow::Cow<'a, str> {
        namespace::wrap(self.namespace(), name)
    }

    /// `name` as the servers sent it, as the application knows it: unwrapped from the
    /// namespace, if any.
    pub fn plain_name<'a>(&self, name: &'a str) -> std::borrow::Cow<'a, str> {
        namespace::unwrap(self.namespace(), name)
    }

    /// A client of the name servers in `addresses` with a new [`RemotingClient`] of default
    /// settings. Connects lazily, on the first request.
    pub fn from_addresses(addresses: &str) -> Result<Self, AddressError> {
        Self::new(RemotingClient::default(), addresses)
    }

    /// The name server addresses, in the order given.
    pub fn addresses(&self) -> &[String] {
        &self.inner.addrs
    }

    /// The address tried first: the last one that answered.
    pub fn preferred_address(&self) -> &str {
        let i = self.inner.preferred.load(Ordering::Relaxed);
        &self.inner.addrs[i % self.inner.addrs.len()]
    }

    /// The routes fetched so far and their brokers' addresses.
    pub fn routes(&self) -> &RouteCache {
        &self.inner.routes
    }

    /// The connections used, shared with the broker clients built on this client.
    pub fn remoting(&self) -> &RemotingClient {
        &self.inner.remoting
    }

    /// The route of `topic` (a plain name: the namespace is added on the wire), from the
    /// first name server that answers.
    pub async fn route(&self, topic: &str) -> Result<TopicRoute, RouteError> {
        let wire_topic = self.wire_name(topic);
        let op = Op::new("route lookup", format!("topic `{wire_topic}`"));
        let addrs = &self.inner.addrs;
        let start = self.inner.preferred.load(Ordering::Relaxed) % addrs.len();
        let mut last_error = RemoteError::Unreachable("no name server tried".into());
        for k in 0..addrs.len() {
            let index = (start + k) % addrs.len();
            let addr = addrs[index].as_str();
            let request = RemotingCommand::request(request_code::GET_ROUTEINFO_BY_TOPIC)
                .with_ext("topic", &wire_topic);
            let outcome = self
                .inner
                .remoting
                .call(addr, &op, request)
                .await
                .and_then(|response| match response.code {
                    // A route that makes no sense is this name server's failure: it is not
                    // cached, where the broker clients would plan heartbeats and unregistrations
                    // from it, and the next name server is asked.
                    response_code::SUCCESS => parse_route(&response.body)
                        .map_err(|e| RemoteError::BadResponse(e.to_string()))
                        .and_then(|route| match route.validate() {
                            Ok(()) => Ok(Some(route)),
                            Err(defect) => Err(RemoteError::BadResponse(format!(
                                "route of `{topic}` makes no sense: {defect}"
                            ))),
                        }),
                    response_code::TOPIC_NOT_EXIST => Ok(None),
                    code => Err(RemoteError::Refused {
                        code,
                        remark: response.remark_or_empty().to_string(),
                    }),
                });
            match outcome {
                Ok(found) => {
                    self.remember(start, index);
                    return match found {
                        Some(route) => {
                            tracing::debug!(
                                addr,
                                topic,
                                brokers = route.broker_datas.len(),
                                "route fetched"
                            );
                            self.inner.routes.update(topic, &route);
                            Ok(route)
                        }
                        None => {
                            // The topic's route goes; its brokers' addresses stay, for offsets
                            // and locks of queues still held (a name server that restarted empty
                            // says "not found" until the brokers register again). Brokers
                            // heartbeated are still unregistered at (see `BrokerClient`).
                            if self.inner.routes.forget(topic) {
                                tracing::info!(
                                    addr,
                                    topic,
                                    "topic not found; cached route forgotten"
                                );
                            } else {
                                tracing::debug!(addr, topic, "topic not found");
                            }
                            Err(RouteError::TopicNotFound(topic.to_string()))
                        }
                    };
                }
                Err(error) => {
                    if k + 1 < addrs.len() {
                        tracing::warn!(addr, topic, %error, "name server failed, trying the next one");
                    } else {
                        tracing::warn!(addr, topic, %error, "name server failed, none left to try");
                    }
                    last_error = error;
                }
            }
        }
        Err(RouteError::NameServer(last_error))
    }

    fn remember(&self, previous: usize, index: usize) {
        if previous != index {
            tracing::info!(
                from = %self.inner.addrs[previous],
                to = %self.inner.addrs[index],
                "name server failover"
            );
            self.inner.preferred.store(index, Ordering::Relaxed);
        }
    }
}

/// Builds a [`NameServerClient`] with credentials, a namespace or other timeouts (see
/// [`NameServerClient::builder`]).
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct NameServerClientBuilder {
    addresses: String,
    config: ClientConfig,
    credentials: Option<Credentials>,
    namespace: Option<Namespace>,
    /// Address overrides, `(advertised, actual)`, checked by `build`.
    overrides: Vec<(String, String)>,
    #[cfg(feature = "tls")]
    tls: Option<crate::tls::TlsConfig>,
}

impl NameServerClientBuilder {
    /// Dials `advertised` (a broker's address as the routes give it, or a name server's) at
    /// `actual`, for the client and everything built from it: a broker behind NAT, port
    /// forwarding or a sidecar advertises an address this host cannot reach (see
    /// [`AddressMap`](crate::AddressMap), which says what keeps the advertised address, TLS
    /// server names included). Both must be `host:port`; [`build`](Self::build) refuses them
    /// otherwise, and one advertised address mapped to two addresses.
    pub fn connect_via(mut self, advertised: impl Into<String>, actual: impl Into<String>) -> Self {
        self.overrides.push((advertised.into(), actual.into()));
        self
    }

    /// Runs every connection of the client, and of everything built from it (name servers and
    /// brokers), over TLS with `tls` (feature `tls`; see [`crate::tls`]).
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: crate::tls::TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Timeouts and backoff of the connections ([`ClientConfig::default`] otherwise).
    pub fn client_config(mut self, config: ClientConfig) -> Self {
        self.config = config;
        self
    }

    /// Signs every request of the client, and of everything built from it, with `credentials`
    /// (ACL 1.0 signing, which ACL 2.0 brokers verify the same way; see [`crate::acl`]).
    pub fn credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// Puts every topic and group name of the client, and of everything built from it, in
    /// `namespace` (the v1 form, `{ns}%{name}`; see [`crate::namespace`]).
    pub fn namespace(mut self, namespace: Namespace) -> Self {
        self.namespace = Some(namespace);
        self
    }

    /// The client, with a [`RemotingClient`] of its own. Connects lazily, on the first request.
    pub fn build(self) -> Result<NameServerClient, AddressError> {
        let remoting = match self.credentials {
            Some(credentials) => RemotingClient::with_credentials(self.config, credentials),
            None => RemotingClient::new(self.config),
        };
        #[cfg(feature = "tls")]
        let remoting = match self.tls {
            Some(tls) => remoting.using_tls(tls),
            None => remoting,
        };
        if !self.overrides.is_empty() {
            let mut map = crate::AddressMap::new();
            for (advertised, actual) in self.overrides {
                map.insert(advertised, actual)?;
            }
            remoting.set_address_map(map);
        }
        NameServerClient::with_parts(remoting, &self.addresses, self.namespace)
    }
}

#[async_trait]
impl NameServer for NameServerClient {
    async fn topic_route(&self, topic: &str) -> Result<TopicRoute, RouteError> {
        self.route(topic).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_lists() {
        assert_eq!(parse_addresses("a:1").unwrap(), ["a:1"]);
        assert_eq!(
            parse_addresses("[::1]:9876;b:2").unwrap(),
            ["[::1]:9876", "b:2"]
        );
        assert_eq!(parse_addresses(""), Err(AddressError::Empty));
        assert_eq!(
            parse_addresses("a:1;b:x"),
            Err(AddressError::Malformed("b:x".into()))
        );
        assert_eq!(
            parse_addresses(":9876"),
            Err(AddressError::Malformed(":9876".into()))
        );
        assert_eq!(
            parse_addresses("a:70000"),
            Err(AddressError::Malformed("a:70000".into()))
        );
        let client = NameServerClient::from_addresses("a:1;b:2").unwrap();
        assert_eq!(client.addresses(), ["a:1", "b:2"]);
        assert_eq!(client.preferred_address(), "a:1");
    }

    #[test]
    fn the_builder_checks_its_address_overrides() {
        let client = NameServerClient::builder("a:1")
            .connect_via("10.0.0.5:10911", "127.0.0.1:20911")
            .build()
            .unwrap();
        let map = client.remoting().address_map();
        assert_eq!(map.dial_address("10.0.0.5:10911"), "127.0.0.1:20911");
        assert_eq!(map.dial_address("a:1"), "a:1");
        let err = NameServerClient::builder("a:1")
            .connect_via("10.0.0.5", "127.0.0.1:20911")
            .build()
            .unwrap_err();
        assert_eq!(err, AddressError::Malformed("10.0.0.5".into()));
        let err = NameServerClient::builder("a:1")
            .connect_via("b:2", "c:3")
            .connect_via("b:2", "d:4")
            .build()
            .unwrap_err();
        assert!(
            matches!(err, AddressError::ConflictingOverride { .. }),
            "{err}"
        );
    }
}
