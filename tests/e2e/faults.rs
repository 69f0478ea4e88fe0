//! What the fault scenarios add to the kit: a group of consumer processes on one topic, one
//! member's proxies (every connection of that member through a [`FaultProxy`], the others
//! direct), and the figures a scenario reports: zombie consumption (messages a member consumed
//! from queues another member held at that moment), consumption of an ordered queue by two
//! members at once, the takeover of a member's queues, and a process's memory over time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rebalance_rocketmq::testkit::{Direction, FaultProxy, ProxyCounters, ResetPoint, TestCluster};

use super::log::{Event, Line};
use super::{ConsumerProcess, Log, Queue, queue_set};

/// A consumer group of processes on one topic (the group is named after the topic), members
/// labelled `{topic}-c1`, `{topic}-c2`, ...
pub struct Group {
    /// The topic (and the group).
    pub topic: String,
    /// The members' labels.
    pub labels: Vec<String>,
    /// The processes, in the labels' order.
    pub members: Vec<ConsumerProcess>,
}

impl Group {
    /// Starts `n` members with `extra` arguments; member `i` also gets `own(i)`.
    pub fn start(
        cluster: &TestCluster,
        log: &Log,
        topic: &str,
        n: usize,
        extra: &[&str],
        own: impl Fn(usize) -> Vec<String>,
    ) -> Self {
        let labels: Vec<String> = (1..=n).map(|i| format!("{topic}-c{i}")).collect();
        let members = labels
            .iter()
            .enumerate()
            .map(|(i, label)| {
                let own = own(i);
                let mut args: Vec<&str> = extra.to_vec();
                args.extend(own.iter().map(String::as_str));
                ConsumerProcess::spawn(cluster, log, label, topic, topic, &args)
            })
            .collect();
        Self {
            topic: topic.to_string(),
            labels,
            members,
        }
    }

    /// The labels as `&str`s.
    pub fn names(&self) -> Vec<&str> {
        self.labels.iter().map(String::as_str).collect()
    }

    /// The labels of every member but `i`.
    pub fn others(&self, i: usize) -> Vec<&str> {
        self.labels
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, l)| l.as_str())
            .collect()
    }

    /// Waits until `members` share the topic's queues (fails after `within`).
    pub async fn wait_partitioned(&self, log: &Log, members: &[&str], within: Duration) {
        log.wait_for_partition(&self.topic, members, &queue_set(&self.topic), within)
            .await;
    }
}

/// Every connection of one member through fault proxies: one per broker and one per name
/// server, the member told to dial them with `--connect-via`; the other members reach the
/// servers directly.
pub struct MemberProxies {
    proxies: Vec<FaultProxy>,
    args: Vec<String>,
}

impl MemberProxies {
    /// Proxies to every broker of `cluster` (`brokers`, by name), and with `name_servers` to
    /// every name server too.
    pub async fn start(cluster: &TestCluster, brokers: &[&str], name_servers: bool) -> Self {
        let mut upstreams: Vec<String> = brokers
            .iter()
            .map(|b| cluster.broker_addr(b).expect("a broker of the cluster"))
            .collect();
        if name_servers {
            upstreams.extend(cluster.namesrv_addrs().split(';').map(str::to_string));
        }
        let mut proxies = Vec::new();
        let mut args = Vec::new();
        for (i, upstream) in upstreams.iter().enumerate() {
            let proxy = FaultProxy::start_seeded(upstream, 0x5eed + i as u64)
                .await
                .expect("a fault proxy on loopback");
            args.push("--connect-via".to_string());
            args.push(format!("{upstream}={}", proxy.addr()));
            proxies.push(proxy);
        }
        Self { proxies, args }
    }

    /// The member's `--connect-via` arguments.
    pub fn args(&self) -> Vec<String> {
        self.args.clone()
    }

    /// Cuts the member off: nothing moves on its connections, new ones are never answered.
    pub fn black_hole(&self) {
        self.proxies.iter().for_each(FaultProxy::black_hole);
    }

    /// A transparent network again (black-holed connections resume).
    pub fn heal(&self) {
        self.proxies.iter().for_each(FaultProxy::heal);
    }

    /// `latency` (and up to `jitter` more) each way on every connection.
    pub fn set_latency(&self, latency: Duration, jitter: Duration) {
        for proxy in &self.proxies {
            proxy.set_latency(Direction::Both, latency, jitter);
        }
    }

    /// Resets the connection of every `n`-th request of each proxy, at `at`.
    pub fn reset_every_nth_request(&self, n: u64, at: ResetPoint) {
        for proxy in &self.proxies {
            proxy.reset_every_nth_request(n, at);
        }
    }

    /// The proxies' counters added up.
    pub fn counters(&self) -> ProxyCounters {
        let mut total = ProxyCounters::default();
        for c in self.proxies.iter().map(FaultProxy::counters) {
            total.accepted += c.accepted;
            total.requests += c.requests;
            total.resets += c.resets;
            total.bytes_to_server += c.bytes_to_server;
            total.bytes_to_client += c.bytes_to_client;
            total.replies_dropped += c.replies_dropped;
        }
        total
    }
}

/// A member's consumption of queues that another member held at that moment.
#[derive(Debug, Default)]
pub struct Zombies {
    /// First deliveries consumed from a queue another member held, from the cut until the
    /// member took a queue again once back: what it consumed of queues it no longer owned.
    pub messages: usize,
    /// When the member consumed the first and the last of them.
    pub first: Option<Instant>,
    /// See `first`.
    pub last: Option<Instant>,
    /// The queues they came from.
    pub queues: BTreeSet<Queue>,
    /// First deliveries consumed, once the member was back and took its share again, from a
    /// queue another member still held: not a zombie's consumption but the overlap of a
    /// rebalance, as when any member joins (the new owner starts before the old one's round
    /// gives the queue up; the members do not act at the same instant).
    pub rejoining: usize,
}

impl Zombies {
    /// How long after `since` the last one was consumed (zero when none was, or all before).
    pub fn last_after(&self, since: Instant) -> Duration {
        self.last
            .map_or(Duration::ZERO, |last| last.saturating_duration_since(since))
    }
}

/// The lines of `log` in the order they were printed, each with who held which queue of `topic`
/// just before it (from the `added` and `removed` lines printed before).
fn with_holdings(
    log: &Log,
    topic: &str,
    mut each: impl FnMut(&Line, &BTreeMap<String, BTreeSet<Queue>>),
) {
    let mut held: BTreeMap<String, BTreeSet<Queue>> = BTreeMap::new();
    for line in log.lines() {
        each(&line, &held);
        match &line.event {
            Event::Added(t, queues) if t == topic => {
                held.entry(line.client.clone())
                    .or_default()
                    .extend(queues.iter().cloned());
            }
            Event::Removed(t, queues) if t == topic => {
                let mine = held.entry(line.client.clone()).or_default();
                for q in queues {
                    mine.remove(q);
                }
            }
            _ => {}
        }
    }
}

/// Where a member back from a cut stands, line by line: whether it took its share again (its
/// first queue of the topic added at or after `back`), and the queues it gave up again since.
struct Rejoin<'a> {
    topic: &'a str,
    member: &'a str,
    back: Instant,
    rejoined: bool,
    given_up_again: BTreeSet<Queue>,
}

impl<'a> Rejoin<'a> {
    fn new(topic: &'a str, member: &'a str, back: Instant) -> Self {
        Self {
            topic,
            member,
            back,
            rejoined: false,
            given_up_again: BTreeSet::new(),
        }
    }

    /// Follows `line`: true when it is one of the member's `added` or `removed` lines that
    /// moves where it stands.
    fn follow(&mut self, line: &Line) -> bool {
        if line.client != self.member {
            return false;
        }
        match &line.event {
            Event::Added(t, queues) if t == self.topic && line.at >= self.back => {
                self.rejoined = true;
                for q in queues {
                    self.given_up_again.remove(q);
                }
                true
            }
            Event::Removed(t, queues) if t == self.topic && self.rejoined => {
                self.given_up_again.extend(queues.iter().cloned());
                true
            }
            _ => false,
        }
    }

    /// Whether the member's consumption of `queue` now is a rebalance's overlap (it took its
    /// share again and has not given `queue` up since), not a zombie's.
    fn overlaps(&self, queue: &Queue) -> bool {
        self.rejoined && !self.given_up_again.contains(queue)
    }
}

/// What `member` consumed of `topic` (first deliveries, from the topic's own queues) while
/// another member held the queue, as the members' `added` and `removed` lines say: the
/// consumption of a member that no longer owns a queue (frozen, cut off) while its new owner
/// consumes it too. `back`: when the member was back (thawed, healed); what it consumed from its
/// first queue added after that (its share taken again) is counted apart, as `rejoining`, unless
/// it had given that queue up again since (its `removed` line after the rejoin): that is a
/// zombie's consumption again. (A queue's `added` line may come a moment after the first
/// messages of the queue, the example printing the assignment's changes from a task of its own:
/// so the rejoin overlap is not asked to wait for it.)
pub fn zombies(log: &Log, topic: &str, member: &str, back: Instant) -> Zombies {
    let mut zombies = Zombies::default();
    let mut rejoin = Rejoin::new(topic, member, back);
    with_holdings(log, topic, |line, held| {
        if rejoin.follow(line) || line.client != member {
            return;
        }
        let Event::Message(m) = &line.event else {
            return;
        };
        if m.topic != topic || m.reconsume_times > 0 {
            return;
        }
        let elsewhere = held
            .iter()
            .any(|(client, queues)| client != member && queues.contains(&m.queue));
        if !elsewhere {
            return;
        }
        if rejoin.overlaps(&m.queue) {
            zombies.rejoining += 1;
        } else {
            zombies.messages += 1;
            zombies.first.get_or_insert(line.at);
            zombies.last = Some(line.at);
            zombies.queues.insert(m.queue.clone());
        }
    });
    zombies
}

/// First deliveries of `topic` that `member` consumed after `since` that another member had
/// consumed before: (before it took its share again, after). Before: a member back from a
/// freeze or a partition resuming its old queues from its own stale position, after their new
/// owners consumed them. After (from its first queue added at or after `since`, as in
/// [`zombies`], and but for a queue it gave up again): the new owner of a queue starting from the
/// stored offset while the old one, which has not given it up yet, consumed further: a
/// rebalance's overlap, as when any member joins.
pub fn stale_after(log: &Log, topic: &str, member: &str, since: Instant) -> (usize, usize) {
    let mut consumed_by_others: BTreeSet<(Queue, i64)> = BTreeSet::new();
    let (mut stale, mut rejoining) = (0, 0);
    let mut rejoin = Rejoin::new(topic, member, since);
    for line in log.lines() {
        if rejoin.follow(&line) {
            continue;
        }
        let Event::Message(m) = &line.event else {
            continue;
        };
        if m.topic != topic || m.reconsume_times > 0 {
            continue;
        }
        let key = (m.queue.clone(), m.offset);
        if line.client != member {
            consumed_by_others.insert(key);
        } else if line.at >= since && consumed_by_others.contains(&key) {
            if rejoin.overlaps(&m.queue) {
                rejoining += 1;
            } else {
                stale += 1;
            }
        }
    }
    (stale, rejoining)
}

/// For an ordered topic, the consumptions that show two members consuming a queue at once:
/// in the order they were printed, each queue's offsets go on by one, or start again at or
/// before the last one (a new owner resumes from the last persisted offset, a suspended batch
/// is consumed again); a jump forward means that two members took turns on the queue (or that a
/// message was skipped). Each is described in words.
pub fn ordered_overlaps(log: &Log, topic: &str) -> Vec<String> {
    let queues = queue_set(topic);
    let mut last: BTreeMap<Queue, (String, i64)> = BTreeMap::new();
    let mut overlaps = Vec::new();
    for line in log.lines() {
        let Event::Message(m) = &line.event else {
            continue;
        };
        if m.topic != topic || !queues.contains(&m.queue) {
            continue;
        }
        if let Some((client, offset)) = last.get(&m.queue)
            && m.offset > offset + 1
        {
            overlaps.push(format!(
                "{}: {} consumed offset {} right after {client} consumed {offset}",
                m.queue, line.client, m.offset
            ));
        }
        last.insert(m.queue.clone(), (line.client.clone(), m.offset));
    }
    overlaps
}

/// When `survivors` took over `orphans` after `since`: for each queue, the first time a
/// survivor was given it and the first time a survivor consumed a first delivery from it;
/// the latest of each over the queues. `None` until both are known for every queue.
pub fn takeover(
    log: &Log,
    topic: &str,
    survivors: &[&str],
    orphans: &BTreeSet<Queue>,
    since: Instant,
) -> Option<(Duration, Duration)> {
    let messages = log.messages(topic);
    let mut assigned = Duration::ZERO;
    let mut consumed = Duration::ZERO;
    for queue in orphans {
        let added = log
            .first_added_after(topic, queue, since)
            .into_iter()
            .filter(|(client, _)| survivors.contains(&client.as_str()))
            .map(|(_, at)| at)
            .min()?;
        let first = messages
            .iter()
            .filter(|(client, at, m)| {
                *at >= since
                    && m.reconsume_times == 0
                    && &m.queue == queue
                    && survivors.contains(&client.as_str())
            })
            .map(|(_, at, _)| *at)
            .min()?;
        assigned = assigned.max(added - since);
        consumed = consumed.max(first - since);
    }
    Some((assigned, consumed))
}

/// A process's resident memory, sampled every second by a thread until dropped.
pub struct MemorySampler {
    samples: std::sync::Arc<std::sync::Mutex<Vec<(Duration, u64)>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MemorySampler {
    /// Samples `pid`'s `VmRSS` every `every`.
    pub fn start(pid: u32, every: Duration) -> Self {
        let samples = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let (samples, stop) = (samples.clone(), stop.clone());
            std::thread::spawn(move || {
                let started = Instant::now();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let Some(kib) = super::consumer::rss_kib(pid) else {
                        return;
                    };
                    samples
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((started.elapsed(), kib));
                    std::thread::sleep(every);
                }
            })
        };
        Self {
            samples,
            stop,
            thread: Some(thread),
        }
    }

    /// The samples so far: time since the start, KiB.
    pub fn samples(&self) -> Vec<(Duration, u64)> {
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for MemorySampler {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Percentile `p` (0 to 100) of `values` (nearest rank); zero when empty.
pub fn percentile(values: &[Duration], p: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = values.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `client`'s line `json`, printed (and read) `ms` after `t0`.
    fn line(log: &Log, t0: Instant, ms: u64, client: &str, json: &str) {
        log.record(client, t0 + Duration::from_millis(ms), json);
    }

    fn added(queue: i64) -> String {
        format!(r#"{{"event": "added", "topic": "T", "queues": [["T", "b", {queue}]]}}"#)
    }

    fn removed(queue: i64) -> String {
        format!(r#"{{"event": "removed", "topic": "T", "queues": [["T", "b", {queue}]]}}"#)
    }

    fn message(queue: i64, offset: i64) -> String {
        format!(
            r#"{{"event": "message", "topic": "T", "broker": "b", "queue": {queue},
                "offset": {offset}, "body": "{queue}-{offset}", "reconsume_times": 0}}"#
        )
    }

    #[test]
    fn what_a_member_consumes_again_once_back_is_split_at_its_rejoin() {
        let (log, t0) = (Log::default(), Instant::now());
        line(&log, t0, 0, "other", &added(0));
        line(&log, t0, 1, "other", &message(0, 4));
        line(&log, t0, 2, "other", &message(0, 5));
        line(&log, t0, 3, "other", &message(0, 6));
        // Back at 10 ms: offset 4 again from its own stale position, then, having taken the
        // queue again before the other gave it up, 5 from the stored offset.
        line(&log, t0, 11, "victim", &message(0, 4));
        line(&log, t0, 20, "victim", &added(0));
        line(&log, t0, 21, "victim", &message(0, 5));
        // Given up again, and still consuming: stale again.
        line(&log, t0, 30, "victim", &removed(0));
        line(&log, t0, 31, "victim", &message(0, 6));
        let (stale, rejoining) = stale_after(&log, "T", "victim", t0 + Duration::from_millis(10));
        assert_eq!((stale, rejoining), (2, 1));
    }

    #[test]
    fn a_zombie_consumes_what_another_holds_and_a_rejoining_member_overlaps_apart() {
        let (log, t0) = (Log::default(), Instant::now());
        line(&log, t0, 0, "victim", &added(0));
        line(&log, t0, 1, "victim", &message(0, 0));
        // Cut off: another member takes queue 0; the victim still consumes from it.
        line(&log, t0, 10, "other", &added(0));
        line(&log, t0, 11, "victim", &message(0, 1));
        line(&log, t0, 12, "victim", &message(0, 2));
        // Back at 20 ms: it releases, then takes queue 0 again before the other gives it up.
        line(&log, t0, 21, "victim", &removed(0));
        line(&log, t0, 22, "victim", &message(0, 3));
        line(&log, t0, 30, "victim", &added(0));
        line(&log, t0, 31, "victim", &message(0, 4));
        line(&log, t0, 40, "other", &removed(0));
        line(&log, t0, 41, "victim", &message(0, 5));
        // Queue 1 moves to the other; the victim, having given it up, still consumes from it.
        line(&log, t0, 50, "other", &added(1));
        line(&log, t0, 51, "victim", &message(1, 0));
        line(&log, t0, 52, "victim", &removed(1));
        line(&log, t0, 53, "victim", &message(1, 1));
        let z = zombies(&log, "T", "victim", t0 + Duration::from_millis(20));
        assert_eq!(
            z.messages, 4,
            "offsets 1 and 2 of queue 0 while cut off, 3 once back, 1 of queue 1 given up"
        );
        assert_eq!(
            z.last_after(t0 + Duration::from_millis(20)),
            Duration::from_millis(33)
        );
        assert_eq!(
            z.rejoining, 2,
            "offset 4 of queue 0 before the other gave it up, 0 of queue 1 (its added line late)"
        );
        assert_eq!(z.queues.len(), 2);
    }
}
