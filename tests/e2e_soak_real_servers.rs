//! A soak on the real servers: two groups (one consuming concurrently, one in order) of consumer
//! processes (the `rocketmq_consumer` example) on topics of 8 queues over two brokers, streamed
//! to at a steady rate, while every few seconds a member joins, leaves (SIGTERM), is killed
//! (SIGKILL) or is frozen (SIGSTOP, then SIGCONT 5 to 20 s later), each group keeping between 2
//! and 5 members. At the end: nothing lost (asserted), no ordered queue consumed by two members
//! at once (asserted), the duplicates, the takeover of the queues of each member that was
//! killed, frozen or left (percentiles), and each process's memory over time.
//!
//! `scripts/soak --duration 30m --rate 20` runs it for longer (the environment variables below);
//! CI runs it for 3 minutes. `SOAK_DURATION_SECS` (180), `SOAK_RATE` (messages a second per
//! topic, 20), `SOAK_EVENT_EVERY_SECS` (5), `SOAK_SEED` (1), and `SOAK_REPORT` (a file the report
//! is also written to).

mod e2e;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use e2e::{ConsumerProcess, Log, Producer, Queue, ordered_overlaps, percentile, takeover};

/// How long every message sent may take to be consumed once the producer stopped (the
/// ordered queues of a member killed just before wait for `lock_lifetime`).
const CONSUMED_WITHIN: Duration = Duration::from_secs(120);
/// The fewest and most members of each group.
const MIN_MEMBERS: usize = 2;
const MAX_MEMBERS: usize = 5;

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text} is not a whole number")),
        Err(_) => default,
    }
}

/// A small deterministic random source (xorshift64*), so that a seed replays the same story.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One member process and what happens to it.
struct Member {
    label: String,
    group: usize,
    process: ConsumerProcess,
    /// When it was started.
    spawned: Instant,
    /// When to wake it, while frozen.
    frozen_until: Option<Instant>,
    /// Resident memory samples: seconds since the soak began, MiB.
    memory: Vec<(u64, u64)>,
}

/// Something done to a member, whose queues the others then take over.
struct Fault {
    kind: &'static str,
    group: usize,
    victim: String,
    orphans: BTreeSet<Queue>,
    at: Instant,
    /// A frozen member's waking.
    woke: Option<Instant>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_joins_leaves_kills_and_freezes_lose_nothing() {
    let duration = Duration::from_secs(env_u64("SOAK_DURATION_SECS", 180));
    let rate = u32::try_from(env_u64("SOAK_RATE", 20)).expect("SOAK_RATE fits 32 bits");
    let every = Duration::from_secs(env_u64("SOAK_EVENT_EVERY_SECS", 5).max(1));
    let mut rng = Rng(env_u64("SOAK_SEED", 1).max(1));
    let topics = ["SoakConc", "SoakOrd"];
    let extra: [&[&str]; 2] = [&[], &["--orderly"]];
    let cluster = e2e::two_broker_cluster(&topics).await;
    let log = Log::default();
    let began = Instant::now();
    let mut next_label = [0usize; 2];
    let spawn = |group: usize, next_label: &mut [usize; 2]| {
        next_label[group] += 1;
        let label = format!("{}-m{}", topics[group], next_label[group]);
        let process = ConsumerProcess::spawn(
            &cluster,
            &log,
            &label,
            topics[group],
            topics[group],
            extra[group],
        );
        Member {
            label,
            group,
            process,
            spawned: Instant::now(),
            frozen_until: None,
            memory: Vec::new(),
        }
    };
    let mut live: Vec<Member> = Vec::new();
    for group in 0..2 {
        for _ in 0..3 {
            live.push(spawn(group, &mut next_label));
        }
    }
    for (group, topic) in topics.iter().enumerate() {
        let names: Vec<String> = live
            .iter()
            .filter(|m| m.group == group)
            .map(|m| m.label.clone())
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        log.wait_for_partition(
            topic,
            &names,
            &e2e::queue_set(topic),
            Duration::from_secs(30),
        )
        .await;
    }
    let streams: Vec<e2e::Stream> = topics
        .iter()
        .map(|t| Producer::new(&cluster, t).stream(t, rate))
        .collect();
    let mut gone: Vec<Member> = Vec::new();
    let mut faults: Vec<Fault> = Vec::new();
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut next_event = Instant::now() + every;
    let mut next_sample = Instant::now();
    while began.elapsed() < duration {
        let now = Instant::now();
        // Wake the members whose freeze is over.
        for member in live.iter_mut() {
            if member.frozen_until.is_some_and(|until| now >= until) {
                member.process.sigcont();
                member.frozen_until = None;
            }
        }
        if now >= next_sample {
            for member in live.iter_mut() {
                if let Some(kib) = member.process.rss_kib() {
                    member.memory.push((began.elapsed().as_secs(), kib / 1024));
                }
            }
            next_sample = now + Duration::from_secs(5);
        }
        if now >= next_event {
            next_event = now + every;
            let group = rng.below(2);
            let members: Vec<usize> = (0..live.len())
                .filter(|i| live[*i].group == group)
                .collect();
            // Only members that run (not frozen) are left, killed or frozen, and each group
            // keeps at least MIN_MEMBERS running.
            let running: Vec<usize> = members
                .iter()
                .copied()
                .filter(|i| live[*i].frozen_until.is_none())
                .collect();
            let action = match rng.below(4) {
                0 if members.len() < MAX_MEMBERS => "join",
                _ if members.len() < MIN_MEMBERS + 1 => "join",
                1 if running.len() > MIN_MEMBERS => "leave",
                2 if running.len() > MIN_MEMBERS => "kill",
                3 if running.len() > MIN_MEMBERS => "freeze",
                _ if members.len() < MAX_MEMBERS => "join",
                _ => "none",
            };
            *counts.entry(action).or_default() += 1;
            let victim = (!running.is_empty()).then(|| running[rng.below(running.len())]);
            match (action, victim) {
                ("join", _) => live.push(spawn(group, &mut next_label)),
                ("leave" | "kill" | "freeze", Some(i)) => {
                    let orphans = log
                        .holdings(topics[group], None)
                        .remove(&live[i].label)
                        .unwrap_or_default();
                    let at = Instant::now();
                    faults.push(Fault {
                        kind: action,
                        group,
                        victim: live[i].label.clone(),
                        orphans,
                        at,
                        woke: None,
                    });
                    match action {
                        "freeze" => {
                            live[i].process.sigstop();
                            let secs = 5 + rng.below(16) as u64;
                            let woke = at + Duration::from_secs(secs);
                            live[i].frozen_until = Some(woke);
                            if let Some(fault) = faults.last_mut() {
                                fault.woke = Some(woke);
                            }
                        }
                        "kill" => {
                            live[i].process.sigkill();
                            gone.push(live.remove(i));
                        }
                        _ => {
                            live[i].process.sigterm(Duration::from_secs(30)).await;
                            gone.push(live.remove(i));
                        }
                    }
                }
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for member in live.iter_mut() {
        if member.frozen_until.take().is_some() {
            member.process.sigcont();
        }
    }
    let mut sent = Vec::new();
    for stream in streams {
        sent.push(stream.stop().await);
    }
    let mut report = String::new();
    let _ = writeln!(
        report,
        "soak: {:?} at {rate} messages/s per topic, an event every {every:?}: {counts:?}",
        duration
    );
    for (group, topic) in topics.iter().enumerate() {
        let delivery = log.wait_for_all(topic, &sent[group], CONSUMED_WITHIN).await;
        let labels: BTreeSet<String> = live
            .iter()
            .chain(&gone)
            .filter(|m| m.group == group)
            .map(|m| m.label.clone())
            .collect();
        let spawned: BTreeMap<&str, Instant> = live
            .iter()
            .chain(&gone)
            .map(|m| (m.label.as_str(), m.spawned))
            .collect();
        // Per kind of fault: the takeover times, how many were not taken over, and how many
        // were taken over by a member started after the fault (it never saw the member that
        // left in the group, so it cannot take over its locks before the broker expires them).
        let mut by_kind: BTreeMap<&str, (Vec<Duration>, usize, usize)> = BTreeMap::new();
        for fault in faults
            .iter()
            .filter(|f| f.group == group && !f.orphans.is_empty())
        {
            let survivors: Vec<&str> = labels
                .iter()
                .filter(|l| **l != fault.victim)
                .map(String::as_str)
                .collect();
            let entry = by_kind.entry(fault.kind).or_default();
            // A frozen member that consumed one of its queues again (once awake) before anyone
            // else did kept its queues: no takeover to measure.
            if let Some(woke) = fault.woke {
                let messages = log.messages(topic);
                let first_of = |queue: &Queue, victim: bool| {
                    messages
                        .iter()
                        .filter(|(client, at, m)| {
                            *at >= fault.at
                                && &m.queue == queue
                                && (*client == fault.victim) == victim
                        })
                        .map(|(_, at, _)| *at)
                        .min()
                };
                let kept = fault.orphans.iter().any(|q| {
                    first_of(q, true)
                        .is_some_and(|v| v >= woke && first_of(q, false).is_none_or(|s| v < s))
                });
                if kept {
                    entry.1 += 1;
                    continue;
                }
            }
            match takeover(&log, topic, &survivors, &fault.orphans, fault.at) {
                Some((_, consumed)) => {
                    entry.0.push(consumed);
                    // Whoever first consumed one of the queues after the fault.
                    let first = log
                        .messages(topic)
                        .into_iter()
                        .find(|(client, at, m)| {
                            *at >= fault.at
                                && fault.orphans.contains(&m.queue)
                                && *client != fault.victim
                        })
                        .map(|(client, _, _)| client);
                    let newcomer = first
                        .and_then(|c| spawned.get(c.as_str()).copied())
                        .is_some_and(|s| s > fault.at);
                    entry.2 += usize::from(newcomer);
                }
                // A frozen member back before the others took its queues over.
                None => entry.1 += 1,
            }
        }
        let _ = writeln!(
            report,
            "{topic}: {} sent, lost 0, duplicates {} ({} messages consumed twice or more)",
            sent[group].len(),
            delivery.extra,
            delivery.duplicated().len(),
        );
        for (kind, (times, kept, newcomers)) in &by_kind {
            let _ = writeln!(
                report,
                "  takeover after {kind}: {} times, p50 {:?}, p90 {:?}, p99 {:?}, max {:?}; {kept} \
                 not taken over (the member was back first); {newcomers} first consumed by a \
                 member started after it",
                times.len(),
                percentile(times, 50.0),
                percentile(times, 90.0),
                percentile(times, 99.0),
                percentile(times, 100.0)
            );
        }
    }
    let overlaps = ordered_overlaps(&log, topics[1]);
    let _ = writeln!(
        report,
        "memory (MiB) of each process, every 5 s (first, max, last):"
    );
    for member in live.iter().chain(&gone) {
        let max = member.memory.iter().map(|(_, m)| *m).max().unwrap_or(0);
        let first = member.memory.first().map_or(0, |(_, m)| *m);
        let last = member.memory.last().map_or(0, |(_, m)| *m);
        let series: Vec<String> = member
            .memory
            .iter()
            .step_by(12)
            .map(|(t, m)| format!("{t}s:{m}"))
            .collect();
        let _ = writeln!(
            report,
            "  {}: {first}, {max}, {last}; {}",
            member.label,
            series.join(" ")
        );
    }
    eprint!("{report}");
    if let Some(path) = std::env::var("SOAK_REPORT").ok().filter(|p| !p.is_empty()) {
        std::fs::write(&path, &report).unwrap_or_else(|e| panic!("write {path}: {e}"));
    }
    assert!(
        overlaps.is_empty(),
        "two members consumed an ordered queue at once: {overlaps:?}"
    );
    for member in live.iter_mut() {
        member.process.assert_running();
    }
    log.assert_no_garbage();
}
