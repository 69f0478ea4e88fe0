//! The library behind the `rebalance` command, so that its commands can be tested and reused.
//!
//! The command plans, simulates and benchmarks consumer groups, and talks to a real RocketMQ
//! cluster: `allocate` and `assign` answer RocketMQ and Kafka cases given as JSON lines (the
//! parity tools), `simulate` runs real runtime clients on the in-memory cluster through a
//! scripted scenario on a simulated clock, `compare` and `bench` weigh the strategies,
//! `produce-sim` the producer's queue selection, `plan`, `describe` and `send` use a real
//! cluster, and `local-cluster` runs one on loopback. Every subcommand, its flags and its JSON
//! lines: the guide's page of the command (`docs/guide/cli.md` in the repository), or
//! `rebalance SUBCOMMAND --help`.
//!
//! **Where to start**: each subcommand is a module with its arguments (a `clap` struct) and a
//! `run` writing what the command prints: [`allocate`], [`assign`], [`sim`] (with its model,
//! [`sim::timeline`], and its picture, [`sim::picture`]), [`compare`], [`bench`](mod@bench),
//! [`produce_sim`], [`plan`], [`describe`], [`send`], `local_cluster` (feature
//! `local-cluster`). [`limits`] bounds every size and duration before anything is built, and
//! [`jsonl`] runs a JSON Lines batch. For example, one RocketMQ allocation case, answered as
//! `rebalance allocate` answers it:
//!
//! ```
//! use rebalance_cli::allocate;
//! use rebalance_core::strategy::StrategyRegistry;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let case = serde_json::json!({
//!     "id": "c1", "strategy": "averagely", "group": "G",
//!     "mq_all": [["T", "broker-a", 0], ["T", "broker-a", 1], ["T", "broker-a", 2]],
//!     "cid_all": ["10.0.0.1@1", "10.0.0.2@1"],
//! });
//! let answer = allocate::answer(&case, &StrategyRegistry::default()).expect("a valid case");
//! let mut line = Vec::new();
//! answer.write_json(&mut line)?;
//! let line: serde_json::Value = serde_json::from_slice(&line)?;
//! assert_eq!(line["plan"]["10.0.0.1@1"], serde_json::json!([["T", "broker-a", 0], ["T", "broker-a", 1]]));
//! assert_eq!(line["plan"]["10.0.0.2@1"], serde_json::json!([["T", "broker-a", 2]]));
//! # Ok(()) }
//! ```
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
#[cfg(test)]
mod test_server;
pub mod workload;
