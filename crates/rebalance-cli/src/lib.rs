//! The library behind the `rebalance` command, so that its commands can be tested and reused.
#![warn(missing_docs)]

pub mod allocate;
pub mod args;
pub mod assign;
pub mod bench;
pub mod compare;
pub mod connect;
pub mod describe;
pub mod jsonl;
pub mod limits;
#[cfg(feature = "local-cluster")]
pub mod local_cluster;
pub mod plan;
pub mod produce_sim;
pub mod rng;
pub mod send;
pub mod sim;
pub mod svg;
pub mod table;
#[cfg(test)]
mod test_args;
pub mod workload;
