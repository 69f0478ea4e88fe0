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

/// How long the fault lasts.
const FAULT: Duration = Duration::from_secs(60);
/// Messages a second streamed to each topic.
const RATE: u32 = 10;
/// How long members may take to share the queues once started.
const PARTITION_WITHIN: Duration = Duration::from_secs(30);
/// How long every message sent may take to be consumed once the producer stopped.
const CONSUMED_WITHIN: Duration = Duration::from_secs(90);

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
            zombies: zombies(&log, &group.topic, &victim),
            takeover: takeover(&log, &group.topic, &survivors, orphans, cut_at),
        });
        for member in &mut group.members {
            member.assert_running();
        }
    }
    // `E2E_FAULTS_DEBUG=1`: the victims' lines from the cut on.
    if std::env::var_os("E2E_FAULTS_DEBUG").is_some() {
        for line in log.lines() {
            if line.at >= cut_at && groups.iter().any(|g| g.labels[2] == line.client) {
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
             (queues {:?}; the last {:?} after the member was back), takeover (given, consumed) \
             {:?} after the cut",
            f.sent,
            f.duplicates,
            f.zombies.messages,
            f.zombies.queues,
            f.zombies.last_after(back_at),
            f.takeover,
        );
    }
    let [concurrent, orderly]: [CutFigures; 2] = figures
        .try_into()
        .unwrap_or_else(|_| unreachable!("two groups"));
    [concurrent, orderly]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_frozen_for_60_s_loses_nothing_and_never_shares_an_ordered_queue() {
    let [concurrent, orderly] = cut_off(Cut::Freeze, "Frozen").await;
    assert!(concurrent.takeover.is_some() && orderly.takeover.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cut_off_for_60_s_loses_nothing_and_never_shares_an_ordered_queue() {
    let [concurrent, orderly] = cut_off(Cut::Partition, "Partition").await;
    assert!(concurrent.takeover.is_some() && orderly.takeover.is_some());
}
