//! The routes a consumer or a producer knows: [`RouteTable`], every polled topic's
//! [`TopicState`], as the route sync publishes it (a producer's
//! [`ProducerHandle::routes`](crate::producer::ProducerHandle::routes) shows it, and the
//! rebalance rounds read it), and the data derived from one route. The task that polls the name
//! server and publishes the table is the runtime's own; a
//! [`RouteShare`](crate::RouteShare) lets the consumers of one process derive each route once.

use std::collections::HashMap;
use std::sync::Arc;

use rebalance_core::{MessageQueue, PublishError, PublishInfo, TopicRoute};

use crate::error::RouteError;

/// What the runtime knows of one topic.
#[derive(Debug, Clone, PartialEq)]
pub enum TopicState {
    /// No route has been fetched yet: why the last poll gave none (the name server failed, or
    /// does not know the topic), or `None` before the first answer.
    Unknown(Option<RouteError>),
    /// The last good route, the queues consumers may subscribe to (sorted the Java way) and
    /// the queues producers may send to.
    Known {
        /// The route.
        route: Arc<TopicRoute>,
        /// Its subscribable queues.
        queues: Arc<[MessageQueue]>,
        /// Its publish queues, or why a producer cannot send to it (no writable queue, no
        /// master, a malformed `orderTopicConf`).
        publish: Result<Arc<PublishInfo>, PublishError>,
    },
    /// The name server has said for `topic_gone_after` that the topic does not exist.
    Gone,
}

/// The state of a topic not polled (yet).
static NOT_POLLED: TopicState = TopicState::Unknown(None);

/// Every subscribed topic's state, as RouteSync last published it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteTable {
    pub(crate) topics: HashMap<String, TopicState>,
}

impl RouteTable {
    /// The state of `topic` (`Unknown` when it is not polled).
    pub fn topic(&self, topic: &str) -> &TopicState {
        self.topics.get(topic).unwrap_or(&NOT_POLLED)
    }

    /// The subscribable queues of `topic`, when its route is known.
    pub fn queues(&self, topic: &str) -> Option<&Arc<[MessageQueue]>> {
        match self.topic(topic) {
            TopicState::Known { queues, .. } => Some(queues),
            _ => None,
        }
    }

    /// The publish queues of `topic`, when its route is known and has some.
    pub fn publish_info(&self, topic: &str) -> Option<&Arc<PublishInfo>> {
        match self.topic(topic) {
            TopicState::Known {
                publish: Ok(info), ..
            } => Some(info),
            _ => None,
        }
    }

    /// The topics polled, in no particular order.
    pub fn topics(&self) -> impl Iterator<Item = &str> {
        self.topics.keys().map(String::as_str)
    }
}

/// What the route sync derived from a topic's last good route, shared with every table it
/// publishes (and with the other consumers of a [`RouteShare`](crate::RouteShare)).
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(crate) route: Arc<TopicRoute>,
    pub(crate) queues: Arc<[MessageQueue]>,
    pub(crate) publish: Result<Arc<PublishInfo>, PublishError>,
}

impl Known {
    pub(crate) fn new(topic: &str, route: TopicRoute) -> Self {
        Self {
            queues: route.subscribable_queues(topic).into(),
            publish: route.publish_info(topic).map(Arc::new),
            route: Arc::new(route),
        }
    }
}
