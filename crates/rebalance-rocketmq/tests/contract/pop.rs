//! The broker contract for POP consumption and server-side assignment: the same scenarios on
//! the in-memory cluster (the Java broker's behaviour) and on the real Rust broker 1.0, whose
//! differences are [`Deviation`]s.

use std::collections::BTreeSet;
use std::time::Duration;

use rebalance_consume::{Message, PopRequest, PopResult, PopStart};
use rebalance_core::ClientId;
use rebalance_runtime::config::{ConsumeFrom, ConsumeOrder, MessageModel};
use rebalance_runtime::subscription::{Subscription, TagExpression};
use rebalance_runtime::{AssignmentRequest, ReadMode, Registration, RemoteError, ServerAnswer};
use tokio::time::Instant;

use super::{Backend, Deviation, eventually, read_all};

/// A pop of every queue of the broker (or of queue `queue_id`) for `group`, answered at once,
/// invisible for `invisible`, from the queues' first messages.
fn pop_request(
    b: &dyn Backend,
    group: &str,
    topic: &str,
    queue_id: i32,
    invisible: Duration,
) -> PopRequest {
    PopRequest::new(group, b.queue(topic, queue_id), TagExpression::all())
        .with_invisible_time(invisible)
        .with_poll_time(Duration::ZERO)
        .with_start(PopStart::Earliest)
}

async fn pop(b: &dyn Backend, request: &PopRequest) -> Vec<Message> {
    match b.pop_source().pop(request).await {
        Ok(PopResult::Found { messages, filtered }) => {
            assert!(filtered.is_empty(), "{}: nothing filtered", b.name());
            messages
        }
        Ok(_) => Vec::new(),
        Err(e) => panic!("{}: pop: {e}", b.name()),
    }
}

/// Pops with `request` until `want` messages came or 10 s passed.
async fn pop_until(b: &dyn Backend, request: &PopRequest, want: usize) -> Vec<Message> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while got.len() < want && Instant::now() < deadline {
        let found = pop(b, request).await;
        if found.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        got.extend(found);
    }
    got
}

fn bodies(messages: &[Message]) -> BTreeSet<String> {
    messages
        .iter()
        .map(|m| String::from_utf8_lossy(m.body()).into_owned())
        .collect()
}

fn handles(messages: &[Message]) -> Vec<&str> {
    messages
        .iter()
        .filter_map(Message::receipt_handle)
        .collect()
}

/// Sends `count` messages `{prefix}{i}` to queue `queue_id` of `topic` and waits until they
/// are stored.
async fn send(b: &dyn Backend, topic: &str, queue_id: i32, prefix: &str, count: usize) {
    let queue = b.queue(topic, queue_id);
    let before = read_all(b, "ContractPopReader", &queue).await.len();
    for i in 0..count {
        b.send(&queue, &format!("{prefix}{i}")).await;
    }
    eventually(
        "the messages are stored",
        Duration::from_secs(10),
        || async {
            (read_all(b, "ContractPopReader", &queue).await.len() >= before + count).then_some(())
        },
    )
    .await;
}

/// Ordinary POP: popped messages are invisible to the next pop; once their invisible time has
/// passed, the unacknowledged ones come back counted once more (under the topic, from the POP
/// retry topic) and the acknowledged ones never do; a change of invisible time moves a
/// message's redelivery. The Rust broker 1.0 brings nothing back and refuses the change
/// ([`Deviation::PopNotRevived`]).
pub async fn ordinary_pops_hide_and_revive_unacknowledged_messages(b: &dyn Backend) {
    let (group, topic) = ("ContractPop", "ContractPop");
    b.create_topic(topic, 2).await;
    send(b, topic, 0, "a", 2).await;
    send(b, topic, 1, "b", 2).await;
    let invisible = Duration::from_secs(3);
    let request = pop_request(b, group, topic, -1, invisible);
    let popped = pop_until(b, &request, 4).await;
    assert_eq!(popped.len(), 4, "{}: every queue of the broker", b.name());
    assert!(pop(b, &request).await.is_empty(), "{}: invisible", b.name());
    let (acked, left): (Vec<Message>, Vec<Message>) =
        popped.into_iter().partition(|m| m.queue().queue_id == 0);
    b.pop_source()
        .ack(group, topic, &handles(&acked))
        .await
        .unwrap_or_else(|e| panic!("{}: ack: {e}", b.name()));
    let changed = b
        .pop_source()
        .change_invisible_time(group, topic, handles(&left)[0], Duration::from_secs(30))
        .await;
    tokio::time::sleep(invisible + Duration::from_secs(6)).await;
    let back = pop_until(
        b,
        &request.clone().with_invisible_time(Duration::from_secs(60)),
        1,
    )
    .await;
    if b.deviates(Deviation::PopNotRevived) {
        assert!(back.is_empty(), "{}: nothing revived: {back:?}", b.name());
        assert!(
            matches!(&changed, Err(RemoteError::Refused { code: 1, .. })),
            "{}: change refused: {changed:?}",
            b.name()
        );
        return;
    }
    assert!(changed.is_ok(), "{}: {changed:?}", b.name());
    let expected: BTreeSet<String> = bodies(&left[1..]);
    assert_eq!(
        bodies(&back),
        expected,
        "{}: the one not postponed",
        b.name()
    );
    assert!(
        back.iter()
            .all(|m| m.reconsume_times() == 1 && m.topic() == topic)
    );
}

/// Orderly POP: the queue is held for other attempts while its batch is out; once the
/// invisible time has passed the same messages come again, in order, counted once more;
/// acknowledged in order, the queue moves on (Java lets it go at once; the Rust broker 1.0
/// holds it until the invisible time, [`Deviation::OrderlyBatchHoldsQueue`]); a later message
/// acknowledged before an earlier one leaves the earlier to come again (Java), or not (the
/// Rust broker 1.0, [`Deviation::OrderlyAckOutOfOrder`]).
pub async fn orderly_pops_hold_the_queue_and_redeliver_in_order(b: &dyn Backend) {
    let (group, topic) = ("ContractPopOrderly", "ContractPopOrderly");
    b.create_topic(topic, 1).await;
    send(b, topic, 0, "m", 3).await;
    let invisible = Duration::from_secs(3);
    let attempt = |a: &str| pop_request(b, group, topic, 0, invisible).orderly(Some(a.to_owned()));
    let offsets = |m: &[Message]| -> Vec<(i64, i32)> {
        m.iter()
            .map(|m| (m.queue_offset(), m.reconsume_times()))
            .collect()
    };
    // The Rust broker's first orderly pop of a queue without offset may return one message:
    // the same attempt again returns the batch.
    let mut first = pop_until(b, &attempt("a1"), 1).await;
    if first.len() < 3 {
        first = pop(b, &attempt("a1")).await;
    }
    assert_eq!(offsets(&first), [(0, 0), (1, 0), (2, 0)], "{}", b.name());
    assert!(
        pop(b, &attempt("a2")).await.is_empty(),
        "{}: held",
        b.name()
    );
    tokio::time::sleep(invisible + Duration::from_millis(500)).await;
    let again = pop_until(b, &attempt("a3"), 3).await;
    assert_eq!(
        offsets(&again),
        [(0, 1), (1, 1), (2, 1)],
        "{}: again, counted",
        b.name()
    );
    // The middle one first: Java keeps the first one to come again, the Rust broker skips it.
    b.pop_source()
        .ack(group, topic, &handles(&again[1..2]))
        .await
        .unwrap();
    b.pop_source()
        .ack(group, topic, &handles(&again[2..]))
        .await
        .unwrap();
    tokio::time::sleep(invisible + Duration::from_millis(500)).await;
    let rest = pop_until(b, &attempt("a4"), 1).await;
    let rest_offsets: Vec<i64> = rest.iter().map(Message::queue_offset).collect();
    if b.deviates(Deviation::OrderlyAckOutOfOrder) {
        // Skipped (offset 0 never comes again), or none of them taken (all again).
        assert!(
            rest_offsets.is_empty() || rest_offsets == [0, 1, 2],
            "{}: {rest:?}",
            b.name()
        );
    } else {
        assert_eq!(rest_offsets, [0, 1, 2], "{}: from offset 0 again", b.name());
    }
    // Acknowledged in order this time.
    if !rest.is_empty() {
        b.pop_source()
            .ack(group, topic, &handles(&rest))
            .await
            .unwrap();
        if b.deviates(Deviation::OrderlyBatchHoldsQueue) {
            tokio::time::sleep(invisible + Duration::from_millis(500)).await;
        }
    }
    // A batch acknowledged in full: a new message comes at once (Java), or as late as the
    // batch's invisible time (the Rust broker 1.0).
    send(b, topic, 0, "n", 2).await;
    let next = pop_until(b, &attempt("a5"), 2).await;
    assert_eq!(offsets(&next), [(3, 0), (4, 0)], "{}", b.name());
    let acked_at = Instant::now();
    b.pop_source()
        .ack(group, topic, &handles(&next))
        .await
        .unwrap();
    send(b, topic, 0, "o", 1).await;
    let after = pop_until(b, &attempt("a6"), 1).await;
    assert_eq!(offsets(&after), [(5, 0)], "{}", b.name());
    let waited = acked_at.elapsed();
    if b.deviates(Deviation::OrderlyBatchHoldsQueue) {
        // The hold ends at the batch's pop time plus the invisible time, before `acked_at`;
        // the rest is a send, its dispatch and the pops' polling, with room for a loaded
        // machine.
        assert!(
            waited < invisible + Duration::from_secs(4),
            "{}: at the latest once the invisible time passed: {waited:?}",
            b.name()
        );
    } else {
        assert!(
            waited < Duration::from_millis(500),
            "{}: {waited:?}",
            b.name()
        );
    }
}

/// Registers client `id` of `group`, subscribing to `topic` (a heartbeat), from a client of its
/// own, which is returned (a broker forgets a client whose connections closed).
async fn register_as(
    b: &dyn Backend,
    group: &str,
    topic: &str,
    id: &str,
) -> std::sync::Arc<dyn rebalance_runtime::GroupDirectory> {
    let registration = Registration {
        client_id: ClientId::from(id),
        group: group.to_owned(),
        message_model: MessageModel::Clustering,
        consume_order: ConsumeOrder::Concurrent,
        consume_from: ConsumeFrom::LastOffset,
        subscriptions: vec![Subscription::all(topic)],
    };
    let directory = b.directory_of_another_client();
    directory
        .register(&registration)
        .await
        .unwrap_or_else(|e| panic!("{}: heartbeat of {id}: {e}", b.name()));
    directory
}

/// Server-side assignment: in PULL mode, AVG gives each registered client its averagely share;
/// in POP mode with no share, every client one queue per broker, id -1; a strategy the broker
/// does not know: no assignment (Java), or an empty one (the Rust broker 1.0,
/// [`Deviation::UnknownStrategyEmpty`]); the read mode of a retry topic is refused.
pub async fn server_side_assignment_follows_the_read_mode(b: &dyn Backend) {
    let (group, topic) = ("ContractAssign", "ContractAssign");
    b.create_topic(topic, 4).await;
    let ids = ["127.0.0.1@contract-a", "127.0.0.1@contract-b"];
    let mut members = Vec::new();
    for id in ids {
        members.push(register_as(b, group, topic, id).await);
    }
    let source = b.assignments();
    let ask = |id: &'static str, strategy: &'static str| {
        let source = source.clone();
        async move {
            let me = ClientId::from(id);
            let request = AssignmentRequest {
                group,
                client_id: &me,
                topic,
                strategy,
            };
            source
                .query_assignment(&request)
                .await
                .unwrap_or_else(|e| panic!("query: {e}"))
        }
    };
    let shares = |answer: ServerAnswer| -> Vec<(i32, ReadMode)> {
        match answer {
            ServerAnswer::Queues(queues) => {
                queues.iter().map(|q| (q.queue.queue_id, q.mode)).collect()
            }
            ServerAnswer::Unbalanced => panic!("unbalanced"),
        }
    };
    use ReadMode::{Pop, Pull};
    assert_eq!(
        shares(ask(ids[0], "AVG").await),
        [(0, Pull), (1, Pull)],
        "{}",
        b.name()
    );
    assert_eq!(
        shares(ask(ids[1], "AVG").await),
        [(2, Pull), (3, Pull)],
        "{}",
        b.name()
    );
    let unknown = ask(ids[0], "CONSISTENT_HASH").await;
    if b.deviates(Deviation::UnknownStrategyEmpty) {
        assert_eq!(unknown, ServerAnswer::Queues(Vec::new()), "{}", b.name());
    } else {
        assert_eq!(unknown, ServerAnswer::Unbalanced, "{}", b.name());
    }
    source.set_read_mode(group, topic, Pop, 0).await.unwrap();
    for id in ids {
        assert_eq!(
            shares(ask(id, "AVG").await),
            [(-1, Pop)],
            "{}: {id}",
            b.name()
        );
    }
    let retry = source
        .set_read_mode(group, &format!("%RETRY%{group}"), Pop, 0)
        .await;
    assert!(retry.is_err(), "{}: {retry:?}", b.name());
    drop(members);
}
