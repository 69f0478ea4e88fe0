//! RocketMQ remoting transport for the rebalance runtime.
#![warn(missing_docs)]

pub mod codec;
pub mod command;

pub use codec::{CodecError, RemotingCodec};
pub use command::{RemotingCommand, request_code, response_code};
