//! The library behind the `rebalance` command, so that its commands can be tested and reused.
#![warn(missing_docs)]

pub mod allocate;
pub mod args;
pub mod assign;
pub mod jsonl;
pub mod plan;
pub mod produce_sim;
pub mod sim;
pub mod table;
