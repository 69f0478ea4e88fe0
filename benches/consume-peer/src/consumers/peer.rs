//! (c) The peer: rocketmq-rust's `DefaultMQPushConsumer` (crate `rocketmq-client-rust` 1.0.0),
//! from the first offset, with a no-op concurrent listener. It runs on the runtime its
//! `RuntimeOwner` builds (one worker per CPU, like tokio's default), without logging or metrics
//! (a no-op telemetry handle), as ours runs without a tracing subscriber.
//!
//! Its settings come from `--peer` ([`PeerConfig`]). The default, [`crate::FAIR_PEER`], is the library's
//! defaults (20 consume tasks, batches of 1, pulls of 32: the same as ours and Java's) with one
//! change: the runtime's metadata-I/O blocking lane, which runs every listener call, gets a
//! queue deep enough for every consume task. With the runtime's default lanes on a 2-CPU
//! machine (4 running, 16 queued, for 20 consume tasks) some listener calls are refused at once
//! (`runtime.capacity.exhausted`, `BlockingQueueAdmission`) and each refusal is treated as a
//! failed consumption: the message is sent back to the retry topic and redelivered about 10 s
//! later. `--peer defaults` runs it that way. See BENCHMARKS.md ("A fair peer").

use std::sync::Arc;

use rocketmq_client_rust::{
    ClientResult, ClientRuntime, ClientRuntimeConfig, ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus, ConsumerTuningProfile, DefaultMQPushConsumer, MQPushConsumer,
    MessageListenerConcurrently,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_observability::TelemetryHandle;
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};

use crate::tally::Tally;

/// The peer's settings (`--peer`): `defaults`, or a comma-separated list of `key=value`, each
/// overriding one of the library's defaults.
///
/// - `lane=N`: listener calls running at once (the runtime's metadata-I/O lane; default 2 per
///   CPU, at least 2; the runtime's blocking threads are raised to at least `N`);
/// - `lane-queue=N`: listener calls waiting for the lane before one is refused (default 8 per
///   CPU, at least 8);
/// - `threads=N`: consume tasks (`consume_thread_min`, default 20);
/// - `batch=N`: messages per listener call (`consume_message_batch_max_size`, default 1);
/// - `pull=N`: messages per pull (`pull_batch_size`, default 32);
/// - `profile=throughput`: its `ConsumerTuningProfile::Throughput` (batches of 16, pulls of 128,
///   4,096 messages buffered per queue), applied before the keys above.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerConfig {
    pub lane: Option<usize>,
    pub lane_queue: Option<usize>,
    pub threads: Option<u32>,
    pub batch: Option<u32>,
    pub pull: Option<u32>,
    pub throughput_profile: bool,
}

impl PeerConfig {
    /// Parses `--peer`'s value.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut c = Self::default();
        if spec == "defaults" {
            return Ok(c);
        }
        for item in spec.split(',') {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("--peer: `{item}` is not key=value (or `defaults`)"))?;
            let n = |max: u64| -> Result<u64, String> {
                match value.parse::<u64>() {
                    Ok(n) if (1..=max).contains(&n) => Ok(n),
                    _ => Err(format!("--peer: {key}={value}: a number from 1 to {max}")),
                }
            };
            match key {
                "lane" => c.lane = Some(n(512)? as usize),
                "lane-queue" => c.lane_queue = Some(n(1 << 20)? as usize),
                "threads" => c.threads = Some(n(1000)? as u32),
                "batch" => c.batch = Some(n(1024)? as u32),
                "pull" => c.pull = Some(n(1024)? as u32),
                "profile" if value == "throughput" => c.throughput_profile = true,
                _ => {
                    return Err(format!(
                        "--peer: unknown key `{item}` (lane, lane-queue, threads, batch, pull, profile=throughput)"
                    ));
                }
            }
        }
        Ok(c)
    }

    /// The runtime's configuration: its defaults, with the metadata-I/O lane as asked.
    fn runtime(&self) -> Result<RuntimeConfig, String> {
        let mut config = RuntimeConfig {
            thread_name: "rocketmq-rust".into(),
            ..RuntimeConfig::default()
        };
        if let Some(lane) = self.lane {
            if lane > config.max_blocking_threads {
                config = config
                    .with_max_blocking_threads(lane)
                    .map_err(|e| format!("--peer lane={lane}: {e:?}"))?;
            }
            config.blocking_lane_policies.metadata_io.max_concurrency = lane;
        }
        if let Some(depth) = self.lane_queue {
            config.blocking_lane_policies.metadata_io.max_queue_depth = depth;
        }
        config
            .validate()
            .map_err(|e| format!("--peer: the runtime refuses this configuration: {e:?}"))?;
        Ok(config)
    }
}

/// The property a message redelivered from a retry topic carries (its original topic).
const RETRY_TOPIC: &str = "RETRY_TOPIC";

struct NoOp(Arc<Tally>);

impl MessageListenerConcurrently for NoOp {
    fn consume_message(
        &self,
        msgs: &[&MessageExt],
        _context: &ConsumeConcurrentlyContext,
    ) -> ClientResult<ConsumeConcurrentlyStatus> {
        for m in msgs {
            // A redelivery from the group's retry topic carries that topic's queue and offset,
            // which do not name the original message: counted apart.
            if m.property(RETRY_TOPIC).is_some() {
                self.0.record_redelivery();
                continue;
            }
            let body = m.body().map_or(0, |b| b.len());
            self.0.record(m.queue_id(), m.queue_offset(), body);
        }
        Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
    }
}

/// What keeps the peer running: its runtime owner, client runtime and consumer.
pub struct Running {
    _owner: RuntimeOwner,
    _client_runtime: Arc<ClientRuntime>,
    _consumer: DefaultMQPushConsumer,
}

/// Starts rocketmq-rust's push consumer; it runs until the process exits.
pub async fn start(
    namesrv: &str,
    topic: &str,
    group: &str,
    config: &PeerConfig,
    tally: Arc<Tally>,
) -> Result<Running, Box<dyn std::error::Error>> {
    let owner = RuntimeOwner::plan(config.runtime()?)
        .map_err(|e| format!("rocketmq-rust runtime configuration: {e:?}"))?
        .build()
        .map_err(|e| format!("rocketmq-rust runtime: {e:?}"))?;
    // `CONSUME_PEER_LOG=1`: rocketmq-rust's own logging (its default telemetry, as its
    // examples install it), to see why it is slow or stalls. Off for the measured runs.
    let telemetry = if std::env::var_os("CONSUME_PEER_LOG").is_some() {
        let guard = rocketmq_observability::install_global(
            &rocketmq_observability::TelemetryBootstrapConfig::default(),
        )
        .map_err(|e| format!("rocketmq-rust telemetry: {e:?}"))?;
        let handle = guard.handle();
        std::mem::forget(guard); // kept for the life of the process
        handle
    } else {
        TelemetryHandle::noop()
    };
    let client_runtime = ClientRuntime::try_new(
        owner.root_context().component("client"),
        ClientRuntimeConfig::default(),
        telemetry,
    )?;
    let mut builder = DefaultMQPushConsumer::builder(client_runtime.clone())
        .consumer_group(group.to_string())
        .name_server_addr(namesrv.to_string())
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset);
    if config.throughput_profile {
        builder = builder.tuning_profile(ConsumerTuningProfile::Throughput);
    }
    if let Some(threads) = config.threads {
        builder = builder.consume_thread_min(threads);
    }
    if let Some(batch) = config.batch {
        builder = builder.consume_message_batch_max_size(batch);
    }
    if let Some(pull) = config.pull {
        builder = builder.pull_batch_size(pull);
    }
    let mut consumer = builder.build();
    consumer.subscribe(topic, "*").await?;
    consumer.register_message_listener_concurrently(NoOp(tally));
    consumer.start().await?;
    Ok(Running {
        _owner: owner,
        _client_runtime: client_runtime,
        _consumer: consumer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_spec_parses_and_refuses_what_it_cannot_use() {
        assert_eq!(PeerConfig::parse("defaults"), Ok(PeerConfig::default()));
        let c = PeerConfig::parse("lane=20,lane-queue=64,threads=8,batch=16,pull=128").unwrap();
        assert_eq!(
            (c.lane, c.lane_queue, c.threads, c.batch, c.pull),
            (Some(20), Some(64), Some(8), Some(16), Some(128))
        );
        assert!(PeerConfig::parse("lane=0").is_err());
        assert!(PeerConfig::parse("speed=11").is_err());
        assert!(PeerConfig::parse("lane").is_err());
        assert!(
            PeerConfig::parse("profile=throughput")
                .unwrap()
                .throughput_profile
        );
        assert!(PeerConfig::parse("profile=fast").is_err());
    }

    #[test]
    fn the_fair_default_gives_the_lane_room_for_every_consume_task() {
        let runtime = PeerConfig::parse(crate::FAIR_PEER)
            .unwrap()
            .runtime()
            .unwrap();
        let lane = &runtime.blocking_lane_policies.metadata_io;
        // The queue alone must hold every consume task that may call the listener (64: the
        // consume scheduler's workers, consume_thread_max): a task granted a running slot keeps
        // its queue place until it is next polled, so running slots add no room.
        assert!(lane.max_queue_depth >= 64, "{lane:?}");
        let wide = PeerConfig::parse("lane=40").unwrap().runtime().unwrap();
        assert_eq!(wide.blocking_lane_policies.metadata_io.max_concurrency, 40);
        assert!(wide.max_blocking_threads >= 40);
    }
}
