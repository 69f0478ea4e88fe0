//! Prints the plan of a small consumer group under each RocketMQ allocation strategy.
//!
//! `cargo run --example strategies`

use rebalance::core::strategy::{Params, StrategyRegistry};
use rebalance::{ClientId, MessageQueue};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Two brokers in two machine rooms, 6 queues each; three consumers, two of them in room0.
    let mut queues: Vec<MessageQueue> = ["room0@broker-a", "room1@broker-b"]
        .into_iter()
        .flat_map(|broker| (0..6).map(move |id| MessageQueue::new("Orders", broker, id)))
        .collect();
    let mut members: Vec<ClientId> = ["room0@10.0.0.1@1", "room0@10.0.0.2@1", "room2@10.0.0.3@1"]
        .into_iter()
        .map(ClientId::from)
        .collect();
    // Every client sorts its inputs the Java way, so every client computes the same plan.
    queues.sort();
    members.sort();

    let cases: [(&str, serde_json::Value); 8] = [
        ("averagely", json!({})),
        ("averagely_by_circle", json!({})),
        ("consistent_hash", json!({"virtual_node_count": 10})),
        ("balanced_sticky", json!({})),
        ("by_machine_room", json!({"consumer_idcs": ["room1"]})),
        (
            "machine_room_nearby",
            json!({"inner_strategy": "averagely"}),
        ),
        (
            "designated",
            json!({"consumers": ["room0@10.0.0.1@1", "room2@10.0.0.3@1"], "inner_strategy": "averagely"}),
        ),
        (
            "by_config",
            json!({"message_queue_list": [["Orders", "room0@broker-a", 0]]}),
        ),
    ];
    let registry = StrategyRegistry::default();
    for (name, params) in cases {
        let params: Params = serde_json::from_value(params)?;
        let strategy = registry.build(name, &params)?;
        let plan = strategy.plan("orders-group", &queues, &members)?;
        println!("{name} {}", serde_json::Value::Object(params));
        for (member, share) in plan.iter() {
            let ids: Vec<String> = share
                .iter()
                .map(|q| format!("{}:{}", q.broker_name, q.queue_id))
                .collect();
            println!(
                "  {member:<20} {:>2} queues  {}",
                share.len(),
                ids.join(" ")
            );
        }
    }
    Ok(())
}
