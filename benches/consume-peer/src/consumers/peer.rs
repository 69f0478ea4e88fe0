//! (c) The peer: rocketmq-rust's `DefaultMQPushConsumer` (crate `rocketmq-client-rust` 1.0.0)
//! with its default options, from the first offset, with a no-op concurrent listener. It runs on
//! the runtime its `RuntimeOwner` builds (one worker per CPU, like tokio's default), without
//! logging or metrics (a no-op telemetry handle), as ours runs without a tracing subscriber.

use std::sync::Arc;

use rocketmq_client_rust::{
    ClientResult, ClientRuntime, ClientRuntimeConfig, ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus, DefaultMQPushConsumer, MQPushConsumer, MessageListenerConcurrently,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_observability::TelemetryHandle;
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};

use crate::tally::Tally;

struct NoOp(Arc<Tally>);

impl MessageListenerConcurrently for NoOp {
    fn consume_message(
        &self,
        msgs: &[&MessageExt],
        _context: &ConsumeConcurrentlyContext,
    ) -> ClientResult<ConsumeConcurrentlyStatus> {
        for m in msgs {
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
    tally: Arc<Tally>,
) -> Result<Running, Box<dyn std::error::Error>> {
    let owner = RuntimeOwner::plan(RuntimeConfig {
        thread_name: "rocketmq-rust".into(),
        ..RuntimeConfig::default()
    })
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
    let mut consumer = DefaultMQPushConsumer::builder(client_runtime.clone())
        .consumer_group(group.to_string())
        .name_server_addr(namesrv.to_string())
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .build();
    consumer.subscribe(topic, "*").await?;
    consumer.register_message_listener_concurrently(NoOp(tally));
    consumer.start().await?;
    Ok(Running {
        _owner: owner,
        _client_runtime: client_runtime,
        _consumer: consumer,
    })
}
