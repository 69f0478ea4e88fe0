//! `rebalance plan`: the whole group's current plan, from a real RocketMQ name server (the
//! topic's queues) and broker (the group's members).

use std::collections::HashSet;
use std::io::{self, Write};
use std::time::Duration;

use rebalance_core::strategy::{Params, StrategyConfigError, StrategyRef, build_strategy};
use rebalance_core::{AllocateError, ClientId, MessageQueue};
use rebalance_rocketmq::{AddressError, BrokerClient, ClientConfig};
use rebalance_runtime::{GroupDirectory, RemoteError, RouteError};
use serde_json::{Map, Value};

use crate::args::{parse_param, parse_timeout};
use crate::connect::{ConnectArgs, ConnectError};
use crate::table;

/// The command's arguments.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The name server addresses, `host:port;host:port`.
    #[arg(long)]
    pub namesrv: String,
    /// The consumer group.
    #[arg(long)]
    pub group: String,
    /// The topic.
    #[arg(long)]
    pub topic: String,
    /// The allocation strategy: `averagely`, `averagely_by_circle`, `by_config`,
    /// `by_machine_room`, `consistent_hash`, `machine_room_nearby`, `designated`,
    /// `balanced_sticky` (with their `--param`s).
    #[arg(long, default_value = "averagely")]
    pub strategy: String,
    /// A strategy parameter, `key=value` (repeatable; a key the strategy does not read is
    /// ignored with a warning).
    #[arg(long = "param", value_parser = parse_param)]
    pub params: Vec<(String, Value)>,
    /// One JSON line instead of a table.
    #[arg(long)]
    pub json: bool,
    /// How long each request to a server may take.
    #[arg(long, default_value = "3s", value_parser = parse_timeout)]
    pub timeout: Duration,
    /// Credentials, namespace and TLS.
    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// Why the plan could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The name server list is unusable.
    #[error("--namesrv: {0}")]
    Address(#[from] AddressError),
    /// The route could not be fetched.
    #[error("route of the topic: {0}")]
    Route(#[from] RouteError),
    /// The group's members could not be fetched.
    #[error("consumer list of the group: {0}")]
    Members(#[from] RemoteError),
    /// The strategy could not be built (its message names it).
    #[error(transparent)]
    Strategy(#[from] StrategyConfigError),
    /// The strategy refused the inputs.
    #[error("allocation: {}", .0.java_message())]
    Allocate(#[from] AllocateError),
    /// The credentials, namespace or TLS flags are unusable.
    #[error(transparent)]
    Connect(#[from] ConnectError),
}

/// The group's plan for one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPlan {
    /// The consumer group.
    pub group: String,
    /// The topic.
    pub topic: String,
    /// The strategy's name.
    pub strategy: String,
    /// The topic's subscribable queues, sorted the Java way.
    pub queues: Vec<MessageQueue>,
    /// Every member with its share, members sorted the Java way.
    pub shares: Vec<(ClientId, Vec<MessageQueue>)>,
}

/// Asks the name server for the topic's queues and a broker for the group's members, then
/// computes the plan.
pub async fn fetch(args: &PlanArgs) -> Result<GroupPlan, PlanError> {
    // The strategy first: a misspelled name or a bad parameter is reported without any
    // network call.
    let params: Params = args.params.iter().cloned().collect();
    let strategy = build_strategy(&args.strategy, &params)?;
    let config = ClientConfig {
        request_timeout: args.timeout,
        connect_timeout: args.timeout,
        ..ClientConfig::default()
    };
    let name_server = args.connect.name_server(&args.namesrv, config)?;
    let route = name_server.route(&args.topic).await?;
    let queues = route.subscribable_queues(&args.topic);
    let members = BrokerClient::new(name_server)
        .consumer_ids(&args.group, &args.topic)
        .await?;
    compute_with(
        &args.group,
        &args.topic,
        &args.strategy,
        &strategy,
        queues,
        members,
    )
}

/// What the arguments ask for that will be ignored (`--param` keys the strategy does not read),
/// and parameters with which nobody gets a queue (the plan shows Java's answer, empty shares).
pub fn warnings(args: &PlanArgs) -> Vec<String> {
    strategy_warnings(
        &args.strategy,
        &args.params,
        "a consumer's builder refuses it",
    )
}

/// The `--param` keys `strategy` does not read, and, when with `params` it gives nobody
/// anything, why, followed by `consequence`.
pub(crate) fn strategy_warnings(
    strategy: &str,
    params: &[(String, serde_json::Value)],
    consequence: &str,
) -> Vec<String> {
    let params: Params = params.iter().cloned().collect();
    let mut warnings = crate::limits::unknown_param_warnings(strategy, false, &params);
    let registry = rebalance_core::strategy::StrategyRegistry::default();
    if let Some(e) = registry.allocates_nothing(strategy, &params) {
        warnings.push(format!("{e}; {consequence}"));
    }
    warnings
}

/// The plan of `members` over `queues` (both sorted the Java way first, members deduplicated).
/// A group without members, or a topic without queues, has an empty plan.
pub fn compute(
    group: &str,
    topic: &str,
    strategy_name: &str,
    params: &Params,
    queues: Vec<MessageQueue>,
    members: Vec<ClientId>,
) -> Result<GroupPlan, PlanError> {
    let strategy = build_strategy(strategy_name, params)?;
    compute_with(group, topic, strategy_name, &strategy, queues, members)
}

/// Like [`compute`], with the strategy already built (`strategy_name` is only shown).
pub fn compute_with(
    group: &str,
    topic: &str,
    strategy_name: &str,
    strategy: &StrategyRef,
    mut queues: Vec<MessageQueue>,
    mut members: Vec<ClientId>,
) -> Result<GroupPlan, PlanError> {
    queues.sort();
    queues.dedup();
    members.sort();
    members.dedup();
    let shares = if queues.is_empty() || members.is_empty() {
        members.into_iter().map(|m| (m, Vec::new())).collect()
    } else {
        let plan = strategy.plan(group, &queues, &members)?;
        let mut shares = plan.to_lists();
        shares.sort_by(|a, b| a.0.cmp(&b.0));
        shares
    };
    Ok(GroupPlan {
        group: group.to_string(),
        topic: topic.to_string(),
        strategy: strategy_name.to_string(),
        queues,
        shares,
    })
}

impl GroupPlan {
    /// The queues no member gets.
    pub fn unassigned(&self) -> Vec<MessageQueue> {
        let assigned: HashSet<&MessageQueue> = self.shares.iter().flat_map(|(_, s)| s).collect();
        self.queues
            .iter()
            .filter(|q| !assigned.contains(q))
            .cloned()
            .collect()
    }

    /// The plan as JSON: `{"group", "topic", "plan": {client: [[topic, broker, queue_id], ...]},
    /// "strategy"}` (a `serde_json` map sorts its keys; [`write_json`](Self::write_json) keeps
    /// this order and the members' Java order).
    pub fn to_json(&self) -> Value {
        let plan: Map<String, Value> = self
            .shares
            .iter()
            .map(|(member, share)| {
                let triples = share.iter().map(MessageQueue::to_json_triple).collect();
                (member.to_string(), Value::Array(triples))
            })
            .collect();
        let mut out = Map::new();
        out.insert("group".into(), Value::from(self.group.as_str()));
        out.insert("topic".into(), Value::from(self.topic.as_str()));
        out.insert("plan".into(), Value::Object(plan));
        out.insert("strategy".into(), Value::from(self.strategy.as_str()));
        Value::Object(out)
    }

    /// One JSON line: the same value as [`to_json`](Self::to_json), keys in the order it
    /// lists them, members in Java order.
    pub fn write_json(&self, out: &mut impl Write) -> io::Result<()> {
        let text = |s: &str| Value::from(s).to_string();
        write!(
            out,
            "{{\"group\":{},\"topic\":{},\"plan\":{{",
            text(&self.group),
            text(&self.topic)
        )?;
        for (i, (member, share)) in self.shares.iter().enumerate() {
            let triples: Vec<Value> = share.iter().map(MessageQueue::to_json_triple).collect();
            write!(
                out,
                "{}{}:{}",
                if i == 0 { "" } else { "," },
                text(member),
                Value::Array(triples)
            )?;
        }
        writeln!(out, "}},\"strategy\":{}}}", text(&self.strategy))
    }

    /// A table: member, count, queues; then the queues nobody gets, if any.
    pub fn write_table(&self, out: &mut impl Write) -> io::Result<()> {
        writeln!(
            out,
            "group {}, topic {}, strategy {}: {} queues, {} members",
            self.group,
            self.topic,
            self.strategy,
            self.queues.len(),
            self.shares.len()
        )?;
        let rows = self.shares.iter().map(|(member, share)| {
            vec![
                member.to_string(),
                share.len().to_string(),
                table::compact_queues(share),
            ]
        });
        table::write(out, &["member", "count", "queues"], rows)?;
        let unassigned = self.unassigned();
        if !unassigned.is_empty() {
            writeln!(
                out,
                "unassigned: {} ({})",
                unassigned.len(),
                table::compact_queues(&unassigned)
            )?;
        }
        Ok(())
    }
}

/// Runs the command on a single-threaded runtime and prints the plan.
pub fn run(args: &PlanArgs, out: &mut impl Write) -> Result<(), RunError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let plan = runtime.block_on(fetch(args))?;
    if args.json {
        plan.write_json(out)?;
    } else {
        plan.write_table(out)?;
    }
    Ok(())
}

/// Why [`run`] failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The plan could not be made.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// Writing (or starting the runtime) failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl RunError {
    /// Whether the arguments are at fault (exit status 2: a bad `--namesrv` list, strategy or
    /// parameter) rather than the run (exit status 1: a server unreachable or refusing, a
    /// strategy refusing the inputs, output failing).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            RunError::Plan(PlanError::Address(_) | PlanError::Strategy(_) | PlanError::Connect(_))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queues(n: i32) -> Vec<MessageQueue> {
        // Deliberately out of order: the plan sorts them.
        (0..n)
            .rev()
            .map(|i| MessageQueue::new("T", "broker-a", i))
            .collect()
    }

    fn ids(names: &[&str]) -> Vec<ClientId> {
        names.iter().copied().map(ClientId::from).collect()
    }

    #[test]
    fn sorts_inputs_the_java_way_before_allocating() {
        let plan = compute(
            "G",
            "T",
            "averagely",
            &Params::new(),
            queues(5),
            ids(&["10.0.0.2@1", "10.0.0.10@1", "10.0.0.2@1"]),
        )
        .unwrap();
        let got: Vec<(String, Vec<i32>)> = plan
            .shares
            .iter()
            .map(|(m, s)| (m.to_string(), s.iter().map(|q| q.queue_id).collect()))
            .collect();
        // "10.0.0.10@1" < "10.0.0.2@1" in Java order; the duplicate id counts once.
        assert_eq!(
            got,
            [
                ("10.0.0.10@1".to_string(), vec![0, 1, 2]),
                ("10.0.0.2@1".to_string(), vec![3, 4])
            ]
        );
        assert!(plan.unassigned().is_empty());
        assert_eq!(
            plan.to_json(),
            serde_json::json!({
                "group": "G", "topic": "T", "strategy": "averagely",
                "plan": {
                    "10.0.0.10@1": [["T", "broker-a", 0], ["T", "broker-a", 1], ["T", "broker-a", 2]],
                    "10.0.0.2@1": [["T", "broker-a", 3], ["T", "broker-a", 4]],
                }
            })
        );
        let mut line = Vec::new();
        plan.write_json(&mut line).unwrap();
        let text = String::from_utf8(line).unwrap();
        assert!(
            text.starts_with(r#"{"group":"G","topic":"T","plan":{"#),
            "{text}"
        );
        assert_eq!(text.lines().count(), 1);
    }

    #[test]
    fn tables_show_shares_and_what_nobody_gets() {
        let plan = compute(
            "G",
            "T",
            "averagely",
            &Params::new(),
            queues(3),
            ids(&["a", "b"]),
        )
        .unwrap();
        let mut out = Vec::new();
        plan.write_table(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "group G, topic T, strategy averagely: 3 queues, 2 members\n\
             member  count  queues\n\
             a       2      T/broker-a:0,1\n\
             b       1      T/broker-a:2\n"
        );
        // More members than queues: the last ones get nothing, and every queue is assigned.
        let plan = compute(
            "G",
            "T",
            "averagely",
            &Params::new(),
            queues(1),
            ids(&["a", "b"]),
        )
        .unwrap();
        assert_eq!(plan.shares[1].1, vec![]);
        assert!(plan.unassigned().is_empty());
    }

    #[test]
    fn empty_groups_and_topics_have_empty_plans() {
        let plan = compute("G", "T", "averagely", &Params::new(), queues(4), vec![]).unwrap();
        assert!(plan.shares.is_empty());
        assert_eq!(plan.unassigned().len(), 4);
        let plan = compute("G", "T", "averagely", &Params::new(), vec![], ids(&["a"])).unwrap();
        assert_eq!(plan.shares, [(ClientId::from("a"), vec![])]);
    }

    #[test]
    fn strategy_errors_are_reported() {
        let err = compute("G", "T", "nope", &Params::new(), queues(1), ids(&["a"])).unwrap_err();
        assert!(matches!(err, PlanError::Strategy(_)), "{err}");
        let mut params = Params::new();
        params.insert("virtual_node_count".into(), Value::from(-1));
        let err =
            compute("G", "T", "consistent_hash", &params, queues(1), ids(&["a"])).unwrap_err();
        assert!(err.to_string().contains("virtualNodeCnt"), "{err}");
    }

    /// A ring of the members' virtual nodes over the limit is refused before it is built, by
    /// the strategy itself, with the limit named (found by review: `allocate` built 131 M
    /// points for one 38 KB line); the members are deduplicated first.
    #[test]
    fn a_hash_ring_over_the_limit_is_refused_before_it_is_built() {
        let mut params = Params::new();
        params.insert("virtual_node_count".into(), Value::from(65_536));
        let members: Vec<String> = (0..2_000).map(|i| format!("c{i}")).collect();
        let members: Vec<&str> = members.iter().map(String::as_str).collect();
        let err = compute(
            "G",
            "T",
            "consistent_hash",
            &params,
            queues(4),
            ids(&members),
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                PlanError::Allocate(AllocateError::RingTooLarge {
                    members: 2_000,
                    virtual_nodes: 65_536,
                    max: 20_000_000,
                })
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains("limit of 20000000 points"),
            "{err}"
        );
        let repeated = ids(&["a"; 2_000]);
        assert!(compute("G", "T", "consistent_hash", &params, queues(4), repeated).is_ok());
    }
}
