//! A bad day on the real servers: end to end, with consumer processes (the `rocketmq_consumer`
//! example, `--consume --json`) in groups of three on topics of 8 queues over two brokers while
//! the test streams messages to them (the kit's producer, SEND_MESSAGE to each queue in turn),
//! one fault at a time: a member cut off from the brokers for 60 s (every connection of it
//! through the test kit's `FaultProxy`, black-holed, then healed), a member frozen for 60 s
//! (SIGSTOP, then SIGCONT: a GC pause, a frozen VM), a broker killed and restarted on its store,
//! name servers killed, a slow network that resets connections, and a stuck listener.
//!
//! Every scenario fails when a message sent is never consumed (lost = 0), and prints its figures
//! on one line starting with `e2e-faults`: duplicates (consumptions beyond the first), zombie
//! consumption (first deliveries a frozen or cut-off member consumed from queues another member
//! held at that moment, from the members' `added` and `removed` lines), takeover times, and for
//! ordered queues whether two members ever consumed one at once (asserted never). RELIABILITY.md
//! collects them.
//!
//! The consumers rebalance every 2 s and heartbeat every 3 s; the kit's brokers drop a client
//! silent for 10 s (scanned every 10 s). The scenarios run side by side (each on a cluster of
//! its own), two at a time with the default test threads:
//! `cargo build --example rocketmq_consumer && cargo test --test e2e_faults_real_servers -- --nocapture`.

mod e2e;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use e2e::{
    Group, Log, MemberProxies, Producer, Queue, Stream, ordered_overlaps, takeover, zombies,
};
use rebalance::MessageQueue;
use rebalance::runtime::OffsetStore;
use rebalance_rocketmq::testkit::{ClusterOptions, ResetPoint, TestCluster};

/// How long the fault lasts.
const FAULT: Duration = Duration::from_secs(60);
/// Messages a second streamed to each topic.
const RATE: u32 = 10;
/// How long members may take to share the queues once started.
const PARTITION_WITHIN: Duration = Duration::from_secs(30);
/// How long every message sent may take to be consumed once the producer stopped.
const CONSUMED_WITHIN: Duration = Duration::from_secs(90);

/// Prints how long a scenario took when it ends, its cluster stopped: its cost in CI.
struct Cost(&'static str, Instant);

impl Drop for Cost {
    fn drop(&mut self) {
        eprintln!(
            "e2e-faults {}: took {:.0?} (servers started and stopped)",
            self.0,
            self.1.elapsed()
        );
    }
}

/// What cuts the third member of each group off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// SIGSTOP, then SIGCONT.
    Freeze,
    /// Every connection to the brokers black-holed, then healed.
    Partition,
}

/// One group's figures after a cut.
struct CutFigures {
    sent: usize,
    duplicates: usize,
    zombies: e2e::Zombies,
    /// First deliveries the victim consumed once back that another member had consumed: before
    /// it took its share again, and after (a rebalance's overlap).
    stale: (usize, usize),
    /// The survivors' takeover of the victim's queues, from the cut: given, and consumed.
    takeover: Option<(Duration, Duration)>,
}

/// Two groups on a cluster of their own, one consuming concurrently, one in order, each of
/// three members streamed to at [`RATE`]; the third member of each is cut off for [`FAULT`]
/// (`cut`), then back for 20 s before the stream stops. Returns each group's figures
/// (concurrent, orderly), once every message sent was consumed, and fails if two members
/// consumed an ordered queue at once.
async fn cut_off(cut: Cut, name: &str) -> [CutFigures; 2] {
    let topics = [format!("{name}Conc"), format!("{name}Ord")];
    let cluster = e2e::two_broker_cluster(&[&topics[0], &topics[1]]).await;
    let log = Log::default();
    let mut proxies = Vec::new();
    let mut groups = Vec::new();
    for (topic, extra) in topics.iter().zip([&[][..], &["--orderly"][..]]) {
        let own = match cut {
            Cut::Partition => {
                let member = MemberProxies::start(&cluster, &e2e::BROKERS, false).await;
                let args = member.args();
                proxies.push(member);
                args
            }
            Cut::Freeze => Vec::new(),
        };
        groups.push(Group::start(&cluster, &log, topic, 3, extra, |i| {
            if i == 2 { own.clone() } else { Vec::new() }
        }));
    }
    for group in &groups {
        group
            .wait_partitioned(&log, &group.names(), PARTITION_WITHIN)
            .await;
    }
    let producer_of = |topic: &str| Producer::new(&cluster, topic);
    let streams: Vec<Stream> = topics
        .iter()
        .map(|t| producer_of(t).stream(t, RATE))
        .collect();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let orphans: Vec<BTreeSet<Queue>> = groups
        .iter()
        .map(|g| {
            log.holdings(&g.topic, None)
                .remove(&g.labels[2])
                .unwrap_or_default()
        })
        .collect();
    let cut_at = Instant::now();
    match cut {
        Cut::Freeze => groups.iter().for_each(|g| {
            g.members[2].sigstop();
        }),
        Cut::Partition => proxies.iter().for_each(MemberProxies::black_hole),
    }
    tokio::time::sleep(FAULT).await;
    let back_at = Instant::now();
    match cut {
        Cut::Freeze => groups.iter().for_each(|g| {
            g.members[2].sigcont();
        }),
        Cut::Partition => proxies.iter().for_each(MemberProxies::heal),
    }
    tokio::time::sleep(Duration::from_secs(20)).await;
    let mut sent = Vec::new();
    for stream in streams {
        sent.push(stream.stop().await);
    }
    let mut figures = Vec::new();
    for ((group, sent), orphans) in groups.iter_mut().zip(&sent).zip(&orphans) {
        let delivery = log.wait_for_all(&group.topic, sent, CONSUMED_WITHIN).await;
        let victim = group.labels[2].clone();
        let survivors = group.others(2);
        figures.push(CutFigures {
            sent: sent.len(),
            duplicates: delivery.extra,
            zombies: zombies(&log, &group.topic, &victim, back_at),
            stale: e2e::stale_after(&log, &group.topic, &victim, back_at),
            takeover: takeover(&log, &group.topic, &survivors, orphans, cut_at),
        });
        for member in &mut group.members {
            member.assert_running();
        }
    }
    // `E2E_FAULTS_DEBUG=1`: from the cut on, the victims' lines and every member's queues
    // added and removed.
    if std::env::var_os("E2E_FAULTS_DEBUG").is_some() {
        for line in log.lines() {
            let victims = groups.iter().any(|g| g.labels[2] == line.client);
            let moves = !matches!(line.event, e2e::Event::Message(_));
            if line.at >= cut_at && (victims || moves) {
                eprintln!(
                    "{:?} after the cut: {} {:?}",
                    line.at - cut_at,
                    line.client,
                    line.event
                );
            }
        }
    }
    let overlaps = ordered_overlaps(&log, &topics[1]);
    assert!(
        overlaps.is_empty(),
        "two members consumed an ordered queue at once: {overlaps:?}"
    );
    log.assert_no_garbage();
    for (kind, f) in ["concurrent", "orderly"].iter().zip(&figures) {
        eprintln!(
            "e2e-faults {cut:?} {kind}: {} sent, lost 0, duplicates {}, zombie messages {} \
             (queues {:?}; the last {:?} after the member was back), consumed again by the \
             member once back {}, consumed once back from queues another member still held \
             (a rebalance's overlap) {} (of which consumed by it before: {}), takeover (given, \
             consumed) {:?} after the cut",
            f.sent,
            f.duplicates,
            f.zombies.messages,
            f.zombies.queues,
            f.zombies.last_after(back_at),
            f.stale.0,
            f.zombies.rejoining,
            f.stale.1,
            f.takeover,
        );
    }
    let [concurrent, orderly]: [CutFigures; 2] = figures
        .try_into()
        .unwrap_or_else(|_| unreachable!("two groups"));
    [concurrent, orderly]
}

/// What a cut-off member may still consume of queues it no longer owns: the batches that were
/// in its listener when it was cut off (one message each here), finishing when it is back.
const ZOMBIE_BOUND: usize = 5;
/// Duplicates of a concurrent group around a cut: the survivors consume again what the victim
/// consumed and had not persisted (up to 5 s of its two or three queues, at 10 messages a second
/// over 8 queues) and the queues moving back to it once it is back (their final offsets are
/// persisted first).
const CUT_DUPLICATES_BOUND: usize = 30;
/// What the victim may consume, once it took its share again, from queues another member has
/// not given up yet: a rebalance's overlap, as when any member joins (the others give its share
/// up at their next round, which the broker's notice or a membership check wakes, a second at
/// most on a quiet machine; the victim's round comes `rebalance_min`, a second, after its
/// release). At 10 messages a second over 8 queues, its two or three queues bring about 4 a
/// second: the bound leaves the others' rounds several seconds on a loaded machine.
const REJOIN_OVERLAP_BOUND: usize = 30;

/// The bounds every cut must keep: once back, the victim consumes nothing another member
/// owns or consumed meanwhile before it takes its share again (it releases what it held before
/// it consumes, and takes its share again from the stored offsets), and then no more than a
/// rebalance's overlap; its ordered queues are taken over once the broker
/// dropped it (its expiry, seen at the next scan) and `lock_lifetime` passed, never sooner.
fn assert_cut_bounds(cut: Cut, [concurrent, orderly]: &[CutFigures; 2]) {
    for (kind, f) in [("concurrent", concurrent), ("orderly", orderly)] {
        assert!(
            f.zombies.messages <= ZOMBIE_BOUND,
            "{cut:?} {kind}: {} zombie messages",
            f.zombies.messages
        );
        assert!(
            f.stale.0 <= ZOMBIE_BOUND,
            "{cut:?} {kind}: consumed {} messages again once back",
            f.stale.0
        );
        assert!(
            f.zombies.rejoining <= REJOIN_OVERLAP_BOUND,
            "{cut:?} {kind}: consumed {} messages, once it took its share again, from queues \
             another member still held",
            f.zombies.rejoining
        );
    }
    assert!(
        concurrent.duplicates <= CUT_DUPLICATES_BOUND,
        "{cut:?}: {} duplicates",
        concurrent.duplicates
    );
    // The broker drops the cut member 7 to 20 s after the cut (its channel expiry, 10 s,
    // scanned every 10 s, from its last heartbeat); then a membership check (1 s), and for
    // an ordered queue lock_lifetime (30 s), a round (2 s), a lock retry (0.5 s) and a pull:
    // about 54 s at the worst phase on an idle machine. The bounds leave 10 s for a loaded one
    // and stay under what the old wait for the broker's own 60 s lock expiry took (67 s or
    // more).
    let expiry = Duration::from_secs(10) + Duration::from_secs(10);
    let (_, taken) = orderly
        .takeover
        .expect("the orderly queues were taken over");
    assert!(
        taken >= LOCK_LIFETIME && taken <= expiry + LOCK_LIFETIME + Duration::from_secs(14),
        "{cut:?}: ordered queues taken over {taken:?} after the cut"
    );
    let (_, taken) = concurrent
        .takeover
        .expect("the concurrent queues were taken over");
    assert!(
        taken <= expiry + Duration::from_secs(14),
        "{cut:?}: concurrent queues taken over {taken:?} after the cut"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_frozen_for_60_s_loses_nothing_and_never_shares_an_ordered_queue() {
    let _cost = Cost("frozen member", Instant::now());
    assert_cut_bounds(Cut::Freeze, &cut_off(Cut::Freeze, "Frozen").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cut_off_for_60_s_loses_nothing_and_never_shares_an_ordered_queue() {
    let _cost = Cost("partition", Instant::now());
    assert_cut_bounds(Cut::Partition, &cut_off(Cut::Partition, "Partition").await);
}

/// The broker's lock lifetime: a lock nobody renews is free this long after its last renewal.
const BROKER_LOCK_EXPIRY: Duration = Duration::from_secs(60);
/// The members' `lock_lifetime` (the Java client's 30 s, the example's default).
const LOCK_LIFETIME: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orderly_member_killed_is_taken_over_after_the_lock_lifetime() {
    let _cost = Cost("orderly SIGKILL", Instant::now());
    let topic = "KilledOrd";
    let cluster = e2e::two_broker_cluster(&[topic]).await;
    let log = Log::default();
    let mut group = Group::start(&cluster, &log, topic, 3, &["--orderly"], |_| Vec::new());
    group
        .wait_partitioned(&log, &group.names(), PARTITION_WITHIN)
        .await;
    let stream = Producer::new(&cluster, topic).stream(topic, RATE);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let orphans = log
        .holdings(topic, None)
        .remove(&group.labels[2])
        .unwrap_or_default();
    let killed_at = group.members[2].sigkill();
    let survivors = group.others(2);
    // The broker drops the killed member when its connection closes; the survivors see it at
    // once (its departure is pushed), then wait lock_lifetime before they ask the brokers to
    // drop its locks, where they used to wait for the broker's 60 s.
    // About 34 s at the worst phase on an idle machine (a membership check, lock_lifetime, a
    // round, a lock retry); the old wait for the broker's 60 s expiry took 55 s or more.
    let bound = LOCK_LIFETIME + e2e::REBALANCE_INTERVAL + Duration::from_secs(18);
    let (given, consumed) = e2e::eventually(
        &format!("the survivors take over (and consume from) every queue of the killed member: {orphans:?}"),
        BROKER_LOCK_EXPIRY + Duration::from_secs(30),
        || takeover(&log, topic, &survivors, &orphans, killed_at),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let sent = stream.stop().await;
    let delivery = log.wait_for_all(topic, &sent, CONSUMED_WITHIN).await;
    let overlaps = ordered_overlaps(&log, topic);
    eprintln!(
        "e2e-faults orderly SIGKILL: {} sent, lost 0, duplicates {}, {} queues taken over \
         {given:?} (given) and {consumed:?} (consumed) after the kill (bound {bound:?}; the \
         broker's locks live {BROKER_LOCK_EXPIRY:?})",
        sent.len(),
        delivery.extra,
        orphans.len()
    );
    assert!(
        overlaps.is_empty(),
        "two members consumed an ordered queue at once: {overlaps:?}"
    );
    assert!(
        consumed <= bound,
        "takeover took {consumed:?}, over {bound:?}"
    );
    for member in &mut group.members[..2] {
        member.assert_running();
    }
    log.assert_no_garbage();
}

/// An orderly group while broker-a is killed and restarted on its store (10 s down): the
/// restarted broker has lost its lock table, and whoever asks first gets the locks; a member
/// stops trusting its locks at broker-a as its connection closes and asks for them again, so no
/// ordered queue is consumed by two members at once (it used to trust them for up to
/// `lock_lifetime` more), nothing is lost, and broker-a's queues are consumed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orderly_group_across_a_broker_restart_never_shares_an_ordered_queue() {
    let _cost = Cost("orderly broker restart", Instant::now());
    let topic = "BrokerRestartOrd";
    let mut cluster = e2e::two_broker_cluster(&[topic]).await;
    let log = Log::default();
    let group = Group::start(&cluster, &log, topic, 3, &["--orderly"], |_| Vec::new());
    group
        .wait_partitioned(&log, &group.names(), PARTITION_WITHIN)
        .await;
    let stream = Producer::new(&cluster, topic).stream_tolerant(topic, RATE);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (killed_at, back_at) = kill_and_restart_broker_a(&mut cluster).await;
    let resumed = consumed_on_a_after(&log, topic, back_at, Duration::from_secs(90)).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let sent = stream.stop().await;
    let delivery = log.wait_for_all(topic, &sent, CONSUMED_WITHIN).await;
    let overlaps = ordered_overlaps(&log, topic);
    eprintln!(
        "e2e-faults orderly broker restart: {} sent, lost 0, duplicates {}, broker-a down \
         {:?}, its queues consumed again {resumed:?} after it was back, overlaps {}",
        sent.len(),
        delivery.extra,
        back_at - killed_at,
        overlaps.len()
    );
    assert!(
        overlaps.is_empty(),
        "two members consumed an ordered queue at once: {overlaps:?}"
    );
    log.assert_no_garbage();
}

/// Kills broker-a (SIGKILL) and starts it again on its store 10 s later; when it was killed,
/// and when it was back.
async fn kill_and_restart_broker_a(cluster: &mut TestCluster) -> (Instant, Instant) {
    let killed_at = Instant::now();
    cluster.kill_broker(e2e::BROKERS[0]).expect("kill broker-a");
    tokio::time::sleep(Duration::from_secs(10)).await;
    cluster
        .start_broker(e2e::BROKERS[0])
        .expect("broker-a starts again on its store");
    (killed_at, Instant::now())
}

/// How long after `since` a message of broker-a was first consumed, waiting up to `within`.
async fn consumed_on_a_after(log: &Log, topic: &str, since: Instant, within: Duration) -> Duration {
    e2e::eventually(
        "a message sent to broker-a after its restart is consumed",
        within,
        || {
            log.messages(topic)
                .iter()
                .filter(|(_, at, m)| *at > since && m.queue.broker == e2e::BROKERS[0])
                .map(|(_, at, _)| *at - since)
                .min()
        },
    )
    .await
}

/// The committed offsets of `group` on `queues`, read from the brokers (`None`: none stored).
async fn committed(
    cluster: &TestCluster,
    group: &str,
    queues: &[MessageQueue],
) -> Vec<Option<i64>> {
    let name_server =
        rebalance_rocketmq::NameServerClient::from_addresses(&cluster.namesrv_addrs())
            .expect("the name servers");
    let brokers = rebalance_rocketmq::BrokerClient::new(name_server);
    brokers
        .read_many(group, queues)
        .await
        .into_iter()
        .map(|r| r.expect("the broker answers offset queries"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_and_restarted_on_its_store_keeps_its_offsets_and_loses_nothing() {
    let _cost = Cost("broker restart", Instant::now());
    let topic = "BrokerRestart";
    let mut cluster = e2e::two_broker_cluster(&[topic]).await;
    let log = Log::default();
    let group = Group::start(&cluster, &log, topic, 3, &[], |_| Vec::new());
    group
        .wait_partitioned(&log, &group.names(), PARTITION_WITHIN)
        .await;
    // Sends to the broker that is down fail and are not counted as sent.
    let stream = Producer::new(&cluster, topic).stream_tolerant(topic, RATE);
    // Long enough for offsets to be persisted (every 5 s, and with every pull), and for a
    // replay from the start to stand out (about 25 messages a queue by then).
    tokio::time::sleep(Duration::from_secs(20)).await;
    let on_a: Vec<MessageQueue> = e2e::queues(topic)
        .into_iter()
        .filter(|q| &*q.broker_name == e2e::BROKERS[0])
        .collect();
    let before = committed(&cluster, topic, &on_a).await;
    assert!(
        before.iter().all(|o| o.is_some_and(|o| o > 0)),
        "{before:?}"
    );
    let (killed_at, back_at) = kill_and_restart_broker_a(&mut cluster).await;
    let down_for = back_at - killed_at;
    // Broker 1.0 writes its consumer offsets to its store only now and then: killed, it comes
    // back without the latest ones (or any), as Apache RocketMQ's users report of brokers
    // (#2705, #2181). The members' pulls carry their committed offsets, which it stores again.
    let restarted = committed(&cluster, topic, &on_a).await;
    let mut restored = None;
    while back_at.elapsed() < Duration::from_secs(30) {
        let now = committed(&cluster, topic, &on_a).await;
        if now.iter().zip(&before).all(|(now, before)| now >= before) {
            restored = Some(back_at.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Consumption of broker-a's queues goes on: a message sent there after the restart is
    // consumed.
    let resumed = consumed_on_a_after(&log, topic, back_at, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let sent = stream.stop().await;
    let delivery = log.wait_for_all(topic, &sent, CONSUMED_WITHIN).await;
    // Persisted by the members at their next tick (5 s).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = committed(&cluster, topic, &on_a).await;
    // What was consumed again of broker-a's queues after the restart below the offsets
    // committed before the kill: members that lost their positions (re-reading offsets the
    // broker had not written) would replay from 0 and still pass "restored" (found by a test
    // audit). A batch in flight at the kill may come again.
    let replayed = log
        .messages(topic)
        .iter()
        .filter(|(_, at, m)| {
            *at > back_at
                && m.queue.broker == e2e::BROKERS[0]
                && usize::try_from(m.queue.id)
                    .ok()
                    .and_then(|id| before.get(id).copied().flatten())
                    .is_some_and(|committed| m.offset < committed)
        })
        .count();
    eprintln!(
        "e2e-faults broker restart: {} sent, lost 0, duplicates {}, replayed below the offsets \
         committed before the kill {replayed}; broker-a down {down_for:?}, \
         its queues consumed again {resumed:?} after it was back; its committed offsets before \
         the kill {before:?}, as it came back {restarted:?} (broker 1.0 writes them to its store only now and then), \
         restored by the members' pulls {restored:?} after it was back, at the end {after:?}",
        sent.len(),
        delivery.extra
    );
    assert!(
        restored.is_some(),
        "the offsets were not restored within 30 s of the restart: {before:?} before the kill"
    );
    for (before, after) in before.iter().zip(&after) {
        assert!(
            after >= before,
            "an offset went back: {before:?} before the kill, {after:?} at the end"
        );
    }
    // A replay from the start would be every message below those offsets.
    let below: i64 = before.iter().flatten().sum();
    let bound = (5 * RATE as usize).min(usize::try_from(below / 2).unwrap_or(0));
    assert!(
        replayed <= bound,
        "{replayed} of broker-a's messages (of {below} below the offsets committed before the \
         kill) consumed again, over {bound}"
    );
    log.assert_no_garbage();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumption_goes_on_without_one_then_without_any_name_server() {
    let _cost = Cost("name servers", Instant::now());
    let topic = "NameServers";
    let options = ClusterOptions {
        name_servers: 2,
        ..ClusterOptions::default()
    };
    let mut cluster = e2e::two_broker_cluster_with(options, &[topic]).await;
    let log = Log::default();
    let group = Group::start(&cluster, &log, topic, 3, &[], |_| Vec::new());
    group
        .wait_partitioned(&log, &group.names(), PARTITION_WITHIN)
        .await;
    let producer = Producer::new(&cluster, topic);
    let stream = producer.stream_tolerant(topic, RATE);
    tokio::time::sleep(Duration::from_secs(4)).await;
    // Consumed within `within` of `since`: the count of messages consumed after it.
    let consumed_since = |since: Instant| {
        log.messages(topic)
            .iter()
            .filter(|(_, at, _)| *at > since)
            .count()
    };
    cluster
        .kill_name_server(0)
        .expect("kill the first name server");
    let one_down = Instant::now();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let with_one = consumed_since(one_down);
    cluster
        .kill_name_server(1)
        .expect("kill the second name server");
    let both_down = Instant::now();
    tokio::time::sleep(FAULT).await;
    let without_any = consumed_since(both_down);
    cluster
        .start_name_server_at(0)
        .expect("restart a name server");
    cluster
        .start_name_server_at(1)
        .expect("restart a name server");
    tokio::time::sleep(Duration::from_secs(15)).await;
    let sent = stream.stop().await;
    let delivery = log.wait_for_all(topic, &sent, CONSUMED_WITHIN).await;
    eprintln!(
        "e2e-faults name servers: {} sent, lost 0, duplicates {}; consumed {with_one} messages in \
         the 20 s with one name server down, {without_any} in the {FAULT:?} with both down",
        sent.len(),
        delivery.extra
    );
    // 10 a second: most of them with one name server, and with none (the last good route).
    assert!(
        with_one >= 150,
        "{with_one} consumed with one name server down"
    );
    assert!(
        without_any as u64 >= FAULT.as_secs() * u64::from(RATE) * 3 / 4,
        "{without_any} consumed with both name servers down"
    );
    for mut member in group.members {
        member.assert_running();
    }
    log.assert_no_garbage();
}

/// The slow network resets the connection of every n-th request of each server.
const RESET_EVERY: u64 = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_on_a_slow_network_that_resets_loses_nothing() {
    let _cost = Cost("slow network", Instant::now());
    let topic = "SlowNet";
    let cluster = e2e::two_broker_cluster(&[topic]).await;
    let log = Log::default();
    // Every connection of the third member, to the brokers and the name server, goes through a
    // proxy.
    let proxies = MemberProxies::start(&cluster, &e2e::BROKERS, true).await;
    let own = proxies.args();
    let group = Group::start(&cluster, &log, topic, 3, &[], |i| {
        if i == 2 { own.clone() } else { Vec::new() }
    });
    group
        .wait_partitioned(&log, &group.names(), PARTITION_WITHIN)
        .await;
    let stream = Producer::new(&cluster, topic).stream(topic, RATE);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let slow_from = Instant::now();
    proxies.set_latency(Duration::from_millis(200), Duration::from_millis(50));
    // The member sends a few requests a second to each server (long polls, heartbeats, offsets),
    // so a reset every 50th request resets each connection every half a minute or so.
    proxies.reset_every_nth_request(RESET_EVERY, ResetPoint::MidReply);
    tokio::time::sleep(FAULT).await;
    let counters = proxies.counters();
    proxies.heal();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let sent = stream.stop().await;
    let delivery = log.wait_for_all(topic, &sent, CONSUMED_WITHIN).await;
    let slow_member = &group.labels[2];
    let consumed_slow = log
        .messages(topic)
        .iter()
        .filter(|(client, at, _)| client == slow_member && *at > slow_from)
        .count();
    // In the last 20 s of the fault, after its connections were reset (about every half a
    // minute): a member that consumed a little and then stuck would pass "more than zero"
    // (found by a test audit).
    let late_from = slow_from + FAULT - Duration::from_secs(20);
    let consumed_late = log
        .messages(topic)
        .iter()
        .filter(|(client, at, _)| {
            client == slow_member && *at > late_from && *at <= slow_from + FAULT
        })
        .count();
    eprintln!(
        "e2e-faults slow network: {} sent, lost 0, duplicates {}; the slow member (200 ms each \
         way, up to 50 ms jitter, a reset every {RESET_EVERY}th request mid-reply) consumed {consumed_slow} \
         messages meanwhile ({consumed_late} in the last 20 s of it); its proxies: {} requests, {} resets, {} connections",
        sent.len(),
        delivery.extra,
        counters.requests,
        counters.resets,
        counters.accepted
    );
    assert!(counters.resets > 0, "no reset happened: {counters:?}");
    assert!(consumed_slow > 0, "the slow member consumed nothing");
    assert!(
        consumed_late > 0,
        "the slow member consumed nothing in the last 20 s of the fault ({consumed_slow} in all)"
    );
    // Measured 13 to 17: what a reset in the middle of a reply brings again, and the
    // rebalances; not a replay.
    assert!(
        delivery.extra <= 60,
        "{} duplicates on a slow network",
        delivery.extra
    );
    for mut member in group.members {
        member.assert_running();
    }
    log.assert_no_garbage();
}

/// The size of each message of the stuck-listener scenario.
const STUCK_BODY: usize = 2048;

/// How many messages each queue of the stuck member may buffer.
const STUCK_QUEUE_LIMIT: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_listeners_memory_stays_within_the_buffer_limits() {
    let _cost = Cost("stuck listener", Instant::now());
    let topic = "Stuck";
    let cluster = e2e::two_broker_cluster(&[topic]).await;
    let log = Log::default();
    // The second member's listener hangs after 20 messages, and each of its queues buffers at
    // most STUCK_QUEUE_LIMIT messages, reached within seconds: all the growth after that would
    // be past the limits (found by a test audit: with the default 1,000 per queue, reached near
    // the end, a member with no limit at all passed). The other consumes on.
    let mut group = Group::start(&cluster, &log, topic, 2, &[], |i| {
        if i == 1 {
            vec![
                "--stall-after".into(),
                "20".into(),
                "--queue-max-messages".into(),
                STUCK_QUEUE_LIMIT.to_string(),
            ]
        } else {
            Vec::new()
        }
    });
    group
        .wait_partitioned(&log, &group.names(), PARTITION_WITHIN)
        .await;
    let stuck = &group.members[1];
    let held = log
        .holdings(topic, None)
        .remove(&group.labels[1])
        .unwrap_or_default()
        .len();
    let baseline = stuck.rss_kib().expect("the stuck member's memory");
    let sampler = e2e::MemorySampler::start(stuck.pid(), Duration::from_secs(1));
    // 200 messages of 2 KiB a second for 60 s: 1,500 per queue, the limit of each reached in
    // about 4 s (the byte limit, 100 MiB, is far).
    let stream = Producer::new(&cluster, topic).stream_sized(topic, 200, STUCK_BODY);
    tokio::time::sleep(FAULT).await;
    let samples = sampler.samples();
    drop(sampler);
    group.members[1].assert_running();
    assert!(
        samples.len() as u64 >= FAULT.as_secs() - 5,
        "the sampler stopped early: {samples:?}"
    );
    // The limits: per queue held, STUCK_QUEUE_LIMIT messages.
    let limit_kib = (held * STUCK_QUEUE_LIMIT * STUCK_BODY / 1024) as u64;
    // Once every limit is reached (15 s in), the memory is flat: 12,000 messages of 2 KiB went
    // by the stuck member's queues meanwhile, about 12 MiB if it buffered them.
    let plateau: Vec<u64> = samples
        .iter()
        .filter(|(t, _)| *t >= Duration::from_secs(15))
        .map(|(_, kib)| *kib)
        .collect();
    let spread =
        plateau.iter().max().copied().unwrap_or(0) - plateau.iter().min().copied().unwrap_or(0);
    let max = samples
        .iter()
        .map(|(_, kib)| *kib)
        .max()
        .unwrap_or(baseline);
    let late: Vec<u64> = samples
        .iter()
        .filter(|(t, _)| *t >= FAULT - Duration::from_secs(15))
        .map(|(_, kib)| *kib)
        .collect();
    let grew_late =
        late.last().copied().unwrap_or(0) as i64 - late.first().copied().unwrap_or(0) as i64;
    let series: Vec<String> = samples
        .iter()
        .step_by(5)
        .map(|(t, kib)| format!("{}s {} MiB", t.as_secs(), kib / 1024))
        .collect();
    // The stuck member goes; its queues move to the other, which consumes everything.
    group.members[1].sigkill();
    let sent = stream.stop().await;
    let delivery = log.wait_for_all(topic, &sent, CONSUMED_WITHIN).await;
    eprintln!(
        "e2e-faults stuck listener: {} sent, lost 0, duplicates {}; the stuck member (holding \
         {held} queues, limits {limit_kib} KiB of bodies) went from {} MiB to at most {} MiB, {} \
         KiB more in the last 15 s; its memory: {series:?}",
        sent.len(),
        delivery.extra,
        baseline / 1024,
        max / 1024,
        grew_late
    );
    // Within the buffer limits (bodies, with their copy in the message and its decoding, and
    // the allocator's slack), and flat once they are reached.
    assert!(
        max <= baseline + 4 * limit_kib + 64 * 1024,
        "{max} KiB, from {baseline} KiB, over the limits of {limit_kib} KiB"
    );
    assert!(
        grew_late <= (max / 10) as i64 + 4 * 1024,
        "still growing at the end: {grew_late} KiB in 15 s"
    );
    assert!(
        spread <= 4 * 1024,
        "not flat once the limits were reached: {spread} KiB apart after 15 s: {series:?}"
    );
    group.members[0].assert_running();
    log.assert_no_garbage();
}
