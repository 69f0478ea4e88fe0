//! Real RocketMQ servers for tests.
