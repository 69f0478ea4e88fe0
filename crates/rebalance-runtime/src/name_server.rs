//! [`NameServer`]: where topic routes come from.

use async_trait::async_trait;
use rebalance_core::TopicRoute;

use crate::{RouteError, RouteShare};

/// A source of topic routes (a RocketMQ name server, or the in-memory cluster).
///
/// "Topic not found" ([`RouteError::TopicNotFound`]) must be distinct from a failure of the name
/// server ([`RouteError::NameServer`]): the runtime keeps the last good route on failures and
/// only gives a topic up when the name server keeps saying it does not exist.
///
/// Every call must end in bounded time (the RocketMQ transport's requests time out after 3 s):
/// the runtime awaits each answer, and a call that never returns stalls the route polling
/// (and a producer's first selection of a new topic).
#[async_trait]
pub trait NameServer: Send + Sync + 'static {
    /// The current route of `topic`.
    async fn topic_route(&self, topic: &str) -> Result<TopicRoute, RouteError>;

    /// Route data to share with the other consumers reading routes from this source in this
    /// process (see [`RouteShare`]); `None` (the default): every consumer derives and holds its
    /// own, as one consumer per process does.
    fn route_share(&self) -> Option<RouteShare> {
        None
    }
}
