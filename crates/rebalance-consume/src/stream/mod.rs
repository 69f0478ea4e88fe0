//! The stream consumer: a group member whose messages come as a [`Stream`](futures_util::Stream)
//! the application drives (`while let Some(message) = stream.next().await`), acknowledging
//! each one: the Java client's `DefaultLitePullConsumer`, in Rust's shape.
//!
//! It is the push consumer with the stream in the listener's place, on the same lease seam and
//! pull loops: the same buffer and flow control (a stream nobody polls stops pulling once each
//! queue's buffer is full), the same commits (a queue's committed offset is its smallest offset
//! not acknowledged), the same hand-off (a queue taken away yields nothing more; what was
//! yielded and not acknowledged is waited for, bounded by `await_in_flight`, and the final
//! commit covers exactly what was acknowledged), the same send-back to the retry topic and then
//! the dead letters.
//!
//! - Subscribe mode ([`StreamConsumerBuilder::subscribe`]): the group shares the topic's queues
//!   and rebalances them; assign mode ([`StreamConsumerBuilder::assign`]): this consumer takes
//!   the queues named, whatever the others.
//! - [`MessageStream`] yields [`StreamMessage`]s: [`ack`](StreamMessage::ack), or
//!   [`nack`](StreamMessage::nack) for a redelivery. [`OrderedStream`] yields each queue's
//!   messages in order as [`OrderedBatch`]es under the queue's lock:
//!   [`commit`](OrderedBatch::commit) or [`suspend`](OrderedBatch::suspend).
//! - [`StreamConsumerHandle`]: [`seek`](StreamConsumerHandle::seek) ([`SeekTo`]),
//!   [`pause`](StreamConsumerHandle::pause) / [`resume`](StreamConsumerHandle::resume),
//!   [`committed`](StreamConsumerHandle::committed), [`commit`](StreamConsumerHandle::commit)
//!   (offsets are also persisted every 5 s), [`watch`](StreamConsumerHandle::watch) of the
//!   queues held, [`shutdown`](StreamConsumerHandle::shutdown).
//!
//! ```
//! use rebalance_consume::StreamConsumer;
//! use rebalance_consume::memory::{ClusterMessages, OutgoingMessage};
//! use rebalance_runtime::memory::InMemoryCluster;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cluster = InMemoryCluster::new();
//! cluster.create_topic("Orders", 1, 4);
//! let mut stream = StreamConsumer::builder("billing")
//!     .cluster(cluster.client("10.0.0.1@1"))
//!     .subscribe("Orders")
//!     .start()
//!     .await?;
//! stream.handle().ready(std::time::Duration::from_secs(10)).await?;
//! cluster.send("Orders", OutgoingMessage::new("order 1"))?;
//! while let Some(message) = stream.next().await {
//!     assert_eq!(&message.body()[..], b"order 1");
//!     message.ack();
//!     break;
//! }
//! stream.handle().shutdown().await;
//! # Ok(()) }
//! ```

mod assign;
mod builder;
mod handle;
mod messages;
mod ordered;
mod stale;
#[cfg(test)]
mod tests;

pub use builder::{StreamConsumer, StreamConsumerBuilder, StreamConsumerError};
pub use handle::{COMMIT_WAIT, SEEK_LOOKUP_TIMEOUT, SeekError, SeekTo, StreamConsumerHandle};
pub use messages::{MessageStream, StreamMessage};
pub use ordered::{OrderedBatch, OrderedStream};
