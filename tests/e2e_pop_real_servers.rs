//! End to end on the real servers, POP consumption: consumers are separate processes (the
//! `rocketmq_consumer` example, `--consume --json --pop`) in one group on a topic of 8 queues
//! over two brokers. Every member pops every queue of each broker (server-side assignment in
//! POP mode: one shared queue, id -1, per broker); one member is killed with SIGKILL and
//! another leaves cleanly while the test produces, and the union of what was consumed must
//! hold every message sent (duplicates are counted and printed, with the delay until the
//! killed member's messages were consumed again).
//!
//! The members pop orderly (`--pop-mode orderly`, the default): the Rust broker 1.0 never
//! brings back the messages of an ordinary POP that are not acknowledged, so a killed member's
//! popped messages would be lost (`crates/rebalance-rocketmq/tests/pop_real_servers.rs`
//! `the_rust_broker_never_brings_unacknowledged_messages_back`); an orderly pop's come back
//! once their invisible time has passed. The invisible time is the example's 5 s.
//!
//! `comparison_of_client_side_rebalance_and_pop` (ignored: run it by name) measures both ways
//! on the same scenario for `BENCHMARKS.md`:
//! `cargo build --release --example rocketmq_consumer && cargo test --release --test e2e_pop_real_servers -- --ignored --nocapture`.

mod e2e;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use e2e::{ConsumerProcess, Delivery, Log, Producer, Queue, queue_set};
use rebalance_rocketmq::testkit::TestCluster;
use tokio::task::JoinHandle;

/// How long the members may take to be assigned their queues once started.
const READY_WITHIN: Duration = Duration::from_secs(30);
/// How long every message sent may take to be consumed once the producer stopped.
const CONSUMED_WITHIN: Duration = Duration::from_secs(90);
/// The members' invisible time (the example's default).
const INVISIBLE: Duration = Duration::from_secs(5);

fn labels(prefix: &str, n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("{prefix}-c{i}")).collect()
}

/// The queues every POP member holds: one per broker, id -1.
fn shared_queues() -> BTreeSet<Queue> {
    e2e::BROKERS
        .iter()
        .map(|b| Queue {
            broker: b.to_string(),
            id: -1,
        })
        .collect()
}

/// Waits until each of `members` holds the shared queues of both brokers.
async fn wait_for_pop_assignment(log: &Log, topic: &str, members: &[&str]) -> Duration {
    let started = Instant::now();
    let shared = shared_queues();
    e2e::eventually(
        &format!("{members:?} each pop both brokers' queues of {topic}"),
        READY_WITHIN,
        || {
            let held = log.holdings(topic, None);
            members
                .iter()
                .all(|m| held.get(*m) == Some(&shared))
                .then_some(())
        },
    )
    .await;
    started.elapsed()
}

/// Sends `count` messages `{prefix}-{i}` round robin at `per_second`; returns their bodies.
fn send_paced(
    producer: &Producer,
    prefix: &str,
    count: usize,
    per_second: u32,
) -> JoinHandle<Vec<String>> {
    let producer = producer.clone();
    let prefix = prefix.to_string();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1) / per_second.max(1));
        let mut bodies = Vec::with_capacity(count);
        let queues = producer.queues().to_vec();
        for i in 0..count {
            tick.tick().await;
            let body = format!("{prefix}-{i}");
            producer.send_to(&queues[i % queues.len()], &body).await;
            bodies.push(body);
        }
        bodies
    })
}

/// The first consumption of a redelivered message (consumed before, or counted) by one of
/// `survivors` after `since`, if any.
fn first_redelivery(
    log: &Log,
    topic: &str,
    survivors: &[&str],
    since: Instant,
) -> Option<Duration> {
    log.messages(topic)
        .iter()
        .filter(|(client, at, m)| {
            *at >= since && m.reconsume_times > 0 && survivors.contains(&client.as_str())
        })
        .map(|(_, at, _)| *at - since)
        .min()
}

fn report(scenario: &str, sent: usize, delivery: &Delivery) {
    eprintln!(
        "e2e {scenario}: {sent} sent, none lost, {} consumptions beyond the first ({} messages \
         consumed twice or more); distinct messages per consumer: {:?}",
        delivery.extra,
        delivery.duplicated().len(),
        delivery.unique_per_client
    );
}

/// Three `--pop` members, 600 messages; one SIGKILLed and one leaving cleanly while the test
/// produces: every message sent is consumed. The killed member's popped messages come back to
/// a survivor once their invisible time has passed.
///
/// The victim's listener takes a minute a message, so that it dies holding every message it
/// popped (its extensions keep them invisible until then). With a listener of 2 s it could
/// die between batches: all it popped acknowledged, its queues held only by the Rust broker
/// 1.0's invisible time of an acknowledged orderly batch, so nothing came back consumed again
/// (the redelivery this test waits for), by a margin of about 0.3 s on an idle machine. And it
/// starts alone, and pops a message of a queue of each broker before the others start: it
/// holds those at the kill whatever the others win later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop_members_killed_and_leaving_lose_nothing() {
    let _one = e2e::exclusive().await;
    let topic = "E2ePop";
    let cluster = e2e::two_broker_cluster(&[topic]).await;
    let log = Log::default();
    let labels = labels(topic, 3);
    let members: Vec<&str> = labels.iter().map(String::as_str).collect();
    // Each message takes 100 ms, the victim's a minute, so that the kill finds everything it
    // popped in its listener or waiting for it.
    let extra = ["--pop", "--consume-time", "100ms"];
    let slow = ["--pop", "--consume-time", "60s"];
    let victim_process = ConsumerProcess::spawn(&cluster, &log, &labels[2], topic, topic, &slow);
    wait_for_pop_assignment(&log, topic, &members[2..]).await;
    let producer = Producer::new(&cluster, topic);
    // Not numbered like the paced messages (the invisible-time check below reads their number).
    let mut early = Vec::new();
    for broker in e2e::BROKERS {
        let Some(queue) = producer.queues().iter().find(|q| &*q.broker_name == broker) else {
            panic!("no queue of {broker} in {:?}", producer.queues());
        };
        let body = format!("{topic}-early{broker}");
        producer.send_to(queue, &body).await;
        early.push(body);
    }
    // Popped at once: the victim's long polls are waiting.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut consumers: Vec<ConsumerProcess> = labels[..2]
        .iter()
        .map(|l| ConsumerProcess::spawn(&cluster, &log, l, topic, topic, &extra))
        .collect();
    consumers.push(victim_process);
    let took = wait_for_pop_assignment(&log, topic, &members).await;
    eprintln!("e2e pop: the three members pop both brokers' queues {took:?} after their start");
    let sending_started = Instant::now();
    let sending = send_paced(&producer, topic, 600, 30);
    tokio::time::sleep(Duration::from_secs(4)).await;

    let victim = members[2];
    assert!(
        !log.messages(topic).iter().any(|(c, _, _)| c == victim),
        "{victim} finished a message before the kill: it may hold nothing unacknowledged"
    );
    let killed_at = consumers[2].sigkill();
    let survivors = &members[..2];
    let redelivered = e2e::eventually(
        &format!("a survivor consumes a message {victim} had popped"),
        INVISIBLE + Duration::from_secs(20),
        || first_redelivery(&log, topic, survivors, killed_at),
    )
    .await;
    eprintln!(
        "e2e pop SIGKILL: the first of {victim}'s popped messages consumed again by a survivor {redelivered:?} after the kill (invisible time {INVISIBLE:?})"
    );
    let leaving = Instant::now();
    consumers[1].sigterm(Duration::from_secs(30)).await;
    eprintln!(
        "e2e pop clean leave: {} left {:?} after SIGTERM",
        members[1],
        leaving.elapsed()
    );
    let mut sent = sending.await.expect("the producer");
    assert_eq!(sent.len(), 600);
    sent.extend(early);
    let delivery = log.wait_for_all(topic, &sent, CONSUMED_WITHIN).await;
    report(
        "pop: SIGKILL and clean leave while producing",
        sent.len(),
        &delivery,
    );
    eprintln!(
        "e2e pop: {} messages consumed twice; redelivery {redelivered:?} after the kill",
        delivery.duplicated().len()
    );
    // Never before its invisible time: a message popped no sooner than it was sent (the
    // producer sends the i-th no sooner than i / 30 s after it started) comes again at least
    // the invisible time later. (Until the clean leave, which hands back at once what the
    // leaving member had not started.)
    for (client, at, m) in log.messages(topic) {
        if m.reconsume_times == 0 || !survivors.contains(&client.as_str()) || at >= leaving {
            continue;
        }
        let Some(i) = m
            .body
            .rsplit('-')
            .next()
            .and_then(|i| i.parse::<u32>().ok())
        else {
            continue;
        };
        let earliest = sending_started + Duration::from_secs(1) * i / 30 + INVISIBLE;
        assert!(
            at + Duration::from_millis(200) >= earliest,
            "{} came again {:?} before its invisible time could have passed",
            m.body,
            earliest - at
        );
    }
    consumers[0].assert_running();
    log.assert_no_garbage();
}

/// CPU time (user + system) of a process so far, from `/proc`.
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command (in parentheses, which may hold spaces).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // Linux reports in USER_HZ, 100 on every supported platform.
    Some(Duration::from_millis(ticks * 10))
}

fn total_cpu(consumers: &[ConsumerProcess]) -> Duration {
    consumers.iter().filter_map(|c| cpu_time(c.pid())).sum()
}

/// One way of consuming measured on the comparison's scenario.
struct Measure {
    throughput: f64,
    cpu_per_message: Duration,
    again_after_kill: Duration,
    duplicates: usize,
    extra: usize,
}

/// How many messages the comparison's backlog holds: `E2E_CMP_BACKLOG`, 600 by default (a
/// longer run measures the CPU per message better: the members' CPU is counted in 10 ms ticks).
fn backlog_size() -> usize {
    std::env::var("E2E_CMP_BACKLOG")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(600)
}

/// The comparison's scenario with `extra` arguments: three members consume a backlog of 600
/// messages, or `E2E_CMP_BACKLOG` (throughput, CPU per message); then the third leaves cleanly and a slow one (2 s a
/// message, so that it holds messages when it dies) joins; 600 more are streamed at 30 a
/// second while the slow one is killed (the time until a survivor consumes again one of its
/// messages, or a message of its queues) and the second leaves cleanly (the duplicates).
async fn measure(cluster: &TestCluster, topic: &str, extra: &[&str], pop: bool) -> Measure {
    let log = Log::default();
    let labels = labels(topic, 4);
    let members: Vec<&str> = labels.iter().map(String::as_str).collect();
    // The backlog waits before the members start (the harness starts them from the queues'
    // first offsets), so that the figures are the members' own, not the producer's pace.
    let producer = Producer::new(cluster, topic);
    let backlog = producer
        .send(&format!("{topic}-backlog"), backlog_size())
        .await;
    let mut consumers: Vec<ConsumerProcess> = labels[..3]
        .iter()
        .map(|l| ConsumerProcess::spawn(cluster, &log, l, topic, topic, extra))
        .collect();
    let ready = |log: &Log, members: &[&str]| {
        let log = log.clone();
        let members: Vec<String> = members.iter().map(|m| m.to_string()).collect();
        async move {
            let members: Vec<&str> = members.iter().map(String::as_str).collect();
            if pop {
                wait_for_pop_assignment(&log, topic, &members).await;
            } else {
                log.wait_for_partition(topic, &members, &queue_set(topic), READY_WITHIN)
                    .await;
            }
        }
    };
    ready(&log, &members[..3]).await;
    log.wait_for_all(topic, &backlog, CONSUMED_WITHIN).await;
    // The members' CPU from their start (start-up included), and the time from the first
    // message consumed to the last.
    let cpu = total_cpu(&consumers);
    let times: Vec<Instant> = log
        .messages(topic)
        .iter()
        .filter(|(_, _, m)| m.body.contains("-backlog"))
        .map(|(_, at, _)| *at)
        .collect();
    let took = match (times.iter().min(), times.iter().max()) {
        (Some(first), Some(last)) => last.duration_since(*first),
        _ => Duration::ZERO,
    };
    let throughput = backlog.len() as f64 / took.as_secs_f64().max(1e-3);

    consumers[2].sigterm(Duration::from_secs(30)).await;
    let mut slow: Vec<&str> = extra.to_vec();
    slow.extend(["--consume-time", "2s"]);
    consumers.push(ConsumerProcess::spawn(
        cluster, &log, members[3], topic, topic, &slow,
    ));
    let group = [members[0], members[1], members[3]];
    ready(&log, &group).await;
    let sending = send_paced(&producer, topic, 600, 30);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let victim = members[3];
    let orphans: BTreeSet<Queue> = log.holdings(topic, None).remove(victim).unwrap_or_default();
    let killed_at = consumers[3].sigkill();
    let survivors = &members[..2];
    let again_after_kill = e2e::eventually(
        &format!("the survivors consume again what {victim} held"),
        Duration::from_secs(60),
        || {
            if pop {
                first_redelivery(&log, topic, survivors, killed_at)
            } else {
                // The last of the victim's queues whose messages a survivor consumes.
                let messages = log.messages(topic);
                let mut last = Duration::ZERO;
                for queue in &orphans {
                    let first = messages
                        .iter()
                        .filter(|(c, at, m)| {
                            *at >= killed_at && &m.queue == queue && survivors.contains(&c.as_str())
                        })
                        .map(|(_, at, _)| *at - killed_at)
                        .min()?;
                    last = last.max(first);
                }
                Some(last)
            }
        },
    )
    .await;
    consumers[1].sigterm(Duration::from_secs(30)).await;
    let sent = sending.await.expect("the producer");
    let delivery = log.wait_for_all(topic, &sent, CONSUMED_WITHIN).await;
    report(topic, sent.len(), &delivery);
    consumers[0].sigterm(Duration::from_secs(30)).await;
    Measure {
        throughput,
        cpu_per_message: cpu / backlog.len() as u32,
        again_after_kill,
        duplicates: delivery.duplicated().len(),
        extra: delivery.extra,
    }
}

/// Client-side rebalance against POP on the same scenario (see [`measure`]): prints the table
/// of `BENCHMARKS.md`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement for BENCHMARKS.md: run it by name"]
async fn comparison_of_client_side_rebalance_and_pop() {
    let _one = e2e::exclusive().await;
    let (pulled, popped) = ("E2eCmpPull", "E2eCmpPop");
    let cluster = e2e::two_broker_cluster(&[pulled, popped]).await;
    let mut rows = BTreeMap::new();
    rows.insert(
        "client-side rebalance (pull)",
        measure(&cluster, pulled, &[], false).await,
    );
    rows.insert(
        "server-side assignment + orderly POP",
        measure(&cluster, popped, &["--pop"], true).await,
    );
    eprintln!(
        "| way | consumed again after SIGKILL | duplicates (messages / extra consumptions) | a backlog of {}: messages per second, first consumed to last | CPU per message (from the members' start) |",
        backlog_size()
    );
    eprintln!("|---|---|---|---|---|");
    for (way, m) in rows {
        eprintln!(
            "| {way} | {:.1} s | {} / {} | {:.0} msg/s | {:.0} µs |",
            m.again_after_kill.as_secs_f64(),
            m.duplicates,
            m.extra,
            m.throughput,
            m.cpu_per_message.as_secs_f64() * 1e6
        );
    }
}

/// The stream consumer pops too (`--api stream --pop`): two members pop every queue of both
/// brokers while messages stream in, one leaves cleanly halfway, and every message sent is
/// consumed (each acknowledged at its broker as the stream acknowledges it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_members_pop_and_lose_nothing_across_a_clean_leave() {
    let _one = e2e::exclusive().await;
    let topic = "E2eStreamPop";
    let cluster = e2e::two_broker_cluster(&[topic]).await;
    let log = Log::default();
    let labels = labels(topic, 2);
    let members: Vec<&str> = labels.iter().map(String::as_str).collect();
    let extra = ["--pop", "--api", "stream", "--consume-time", "20ms"];
    let mut consumers: Vec<ConsumerProcess> = labels
        .iter()
        .map(|l| ConsumerProcess::spawn(&cluster, &log, l, topic, topic, &extra))
        .collect();
    wait_for_pop_assignment(&log, topic, &members).await;
    let producer = Producer::new(&cluster, topic);
    let sending = send_paced(&producer, topic, 300, 30);
    tokio::time::sleep(Duration::from_secs(4)).await;
    consumers[1].sigterm(Duration::from_secs(30)).await;
    let sent = sending.await.expect("the producer");
    let delivery = log.wait_for_all(topic, &sent, CONSUMED_WITHIN).await;
    report(
        "stream pop: a clean leave while producing",
        sent.len(),
        &delivery,
    );
    assert!(
        log.messages(topic).iter().any(|(c, _, _)| c == members[1]),
        "{} consumed nothing before it left",
        members[1]
    );
    consumers[0].assert_running();
    log.assert_no_garbage();
}
