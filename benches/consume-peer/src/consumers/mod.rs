//! The three consumers. Each is given the name server, the topic, a fresh group and the
//! [`Tally`](crate::tally::Tally) its no-op listener feeds, and starts consuming from the first
//! offset with its library's default options (which match: 20 consume workers, batches of 1,
//! pulls of 32 messages, 1,000 messages buffered per queue at most).

pub mod ours;
#[cfg(feature = "peer")]
pub mod peer;
pub mod raw;
pub mod stream;
