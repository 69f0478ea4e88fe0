//! The consumers' JSON lines, in the order they were printed, each with the instant it was
//! printed, and what they say: who held which queue when, and who consumed which message.
//!
//! The instant is the consumer's own (its line's `unix_us`, the wall clock when it printed it, put
//! on the test's clock), not when the test read the line: a consumer process the machine runs
//! late has its lines read late, and in the order of reading its consumption would look later
//! than another member's taking of the queue that in fact came after it. A line without
//! `unix_us` (an example built before it had one, `REBALANCE_E2E_CONSUMER`) is timed when read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rebalance::MessageQueue;
use serde_json::Value;

/// A queue as the consumers' lines name it: broker and queue id (the topic is the test's).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Queue {
    /// The broker.
    pub broker: String,
    /// The queue id.
    pub id: i64,
}

impl Queue {
    /// The log's name of `queue`.
    pub fn of(queue: &MessageQueue) -> Self {
        Self {
            broker: queue.broker_name.to_string(),
            id: i64::from(queue.queue_id),
        }
    }
}

impl std::fmt::Display for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.broker, self.id)
    }
}

/// A message consumed.
#[derive(Debug, Clone)]
pub struct Msg {
    /// Its topic (a redelivered message's original topic).
    pub topic: String,
    /// Where it was pulled from (the retry topic's queue for a redelivery).
    pub queue: Queue,
    /// Its offset there.
    pub offset: i64,
    /// Its body.
    pub body: String,
    /// How many times it was delivered before.
    pub reconsume_times: i64,
}

/// What a line says.
#[derive(Debug, Clone)]
pub enum Event {
    /// Queues of a topic added to the consumer.
    Added(String, Vec<Queue>),
    /// Queues of a topic removed from it.
    Removed(String, Vec<Queue>),
    /// A message consumed.
    Message(Msg),
}

/// One line of a consumer.
#[derive(Debug, Clone)]
pub struct Line {
    /// When the consumer printed it (when the test read it, for a line without `unix_us`).
    pub at: Instant,
    /// The consumer's label.
    pub client: String,
    /// What it says.
    pub event: Event,
}

struct Lines {
    /// In the order of their instants (of reading, for lines printed at the same one).
    lines: Vec<Line>,
    /// Lines that were not what the example promises.
    garbage: Vec<String>,
    /// The test's clock and the wall clock read together: puts the lines' `unix_us` on the
    /// test's clock.
    anchor: (Instant, SystemTime),
}

impl Default for Lines {
    fn default() -> Self {
        Self {
            lines: Vec::new(),
            garbage: Vec::new(),
            anchor: anchor(),
        }
    }
}

/// The test's clock and the wall clock read together: of a few tries, the one whose wall-clock
/// reading came closest after its first read of the test's clock (a thread preempted between
/// the two reads would put every line that much early), with the middle of the test's two reads.
fn anchor() -> (Instant, SystemTime) {
    (0..5)
        .map(|_| {
            let before = Instant::now();
            let wall = SystemTime::now();
            let after = Instant::now();
            (after - before, before + (after - before) / 2, wall)
        })
        .min_by_key(|(gap, _, _)| *gap)
        .map_or_else(
            || (Instant::now(), SystemTime::now()),
            |(_, at, wall)| (at, wall),
        )
}

impl Lines {
    /// When a line read at `read_at` was printed, from its `unix_us`: never after it was read
    /// (the two clocks may drift apart by a little).
    fn printed_at(&self, unix_us: Option<u64>, read_at: Instant) -> Instant {
        let Some(unix_us) = unix_us else {
            return read_at;
        };
        let (instant, wall) = self.anchor;
        let printed = SystemTime::UNIX_EPOCH + Duration::from_micros(unix_us);
        let at = match printed.duration_since(wall) {
            Ok(after) => instant.checked_add(after),
            Err(before) => instant.checked_sub(before.duration()),
        };
        at.map_or(read_at, |at| at.min(read_at))
    }
}

/// Every consumer's lines.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Lines>>);

fn queues_of(value: &Value) -> Option<(String, Vec<Queue>)> {
    let topic = value.get("topic")?.as_str()?.to_string();
    let queues = value
        .get("queues")?
        .as_array()?
        .iter()
        .map(|triple| {
            Some(Queue {
                broker: triple.get(1)?.as_str()?.to_string(),
                id: triple.get(2)?.as_i64()?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some((topic, queues))
}

/// What a line says, and when it was printed (its `unix_us`, if it has one).
fn parse(text: &str) -> Option<(Event, Option<u64>)> {
    let value: Value = serde_json::from_str(text).ok()?;
    let unix_us = value.get("unix_us").and_then(Value::as_u64);
    let event = match value.get("event")?.as_str()? {
        "added" => queues_of(&value).map(|(t, q)| Event::Added(t, q)),
        "removed" => queues_of(&value).map(|(t, q)| Event::Removed(t, q)),
        "message" => Some(Event::Message(Msg {
            topic: value.get("topic")?.as_str()?.to_string(),
            queue: Queue {
                broker: value.get("broker")?.as_str()?.to_string(),
                id: value.get("queue")?.as_i64()?,
            },
            offset: value.get("offset")?.as_i64()?,
            body: value.get("body")?.as_str()?.to_string(),
            reconsume_times: value.get("reconsume_times")?.as_i64()?,
        })),
        _ => None,
    }?;
    Some((event, unix_us))
}

impl Log {
    fn lock(&self) -> std::sync::MutexGuard<'_, Lines> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a line of `client`'s standard output, read at `read_at`, in its place among the
    /// lines printed before and after it.
    pub fn record(&self, client: &str, read_at: Instant, text: &str) {
        let mut lines = self.lock();
        match parse(text) {
            Some((event, unix_us)) => {
                let at = lines.printed_at(unix_us, read_at);
                let place = lines.lines.partition_point(|line| line.at <= at);
                lines.lines.insert(
                    place,
                    Line {
                        at,
                        client: client.to_string(),
                        event,
                    },
                );
            }
            None => lines.garbage.push(format!("{client}: {text}")),
        }
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<Line> {
        self.lock().lines.clone()
    }

    /// Fails if a consumer printed a line that is not one of the example's JSON lines.
    pub fn assert_no_garbage(&self) {
        let lines = self.lock();
        assert!(
            lines.garbage.is_empty(),
            "lines that are not the example's JSON: {:?}",
            lines.garbage
        );
    }

    /// The messages of `topic` consumed, with who consumed them and when.
    pub fn messages(&self, topic: &str) -> Vec<(String, Instant, Msg)> {
        self.lock()
            .lines
            .iter()
            .filter_map(|line| match &line.event {
                Event::Message(m) if m.topic == topic => {
                    Some((line.client.clone(), line.at, m.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// The queues of `topic` each consumer held after its lines printed before `until` (all of them
    /// when `None`).
    pub fn holdings(
        &self,
        topic: &str,
        until: Option<Instant>,
    ) -> BTreeMap<String, BTreeSet<Queue>> {
        let mut held: BTreeMap<String, BTreeSet<Queue>> = BTreeMap::new();
        for line in self.lock().lines.iter() {
            if until.is_some_and(|until| line.at > until) {
                continue;
            }
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
        held
    }

    /// When each consumer was first given `queue` of `topic` after `since`.
    pub fn first_added_after(
        &self,
        topic: &str,
        queue: &Queue,
        since: Instant,
    ) -> Vec<(String, Instant)> {
        let mut first: BTreeMap<String, Instant> = BTreeMap::new();
        for line in self.lock().lines.iter() {
            if line.at < since {
                continue;
            }
            if let Event::Added(t, queues) = &line.event
                && t == topic
                && queues.contains(queue)
            {
                first.entry(line.client.clone()).or_insert(line.at);
            }
        }
        first.into_iter().collect()
    }

    /// Whether `members`, between them, hold every queue of `all`, each once, in shares that
    /// differ by one queue at most (the `averagely` strategy's). A member that holds nothing
    /// has not run its round yet, and until every member has run one with the same member list
    /// the shares are uneven or overlap: a check of the coverage alone would pass while the
    /// first member still holds every queue, which the newcomers take in a moment.
    pub fn partitioned(&self, topic: &str, members: &[&str], all: &BTreeSet<Queue>) -> bool {
        let held = self.holdings(topic, None);
        let mut seen = BTreeSet::new();
        let mut sizes = Vec::new();
        for member in members {
            let queues = held.get(*member).cloned().unwrap_or_default();
            sizes.push(queues.len());
            seen.extend(queues);
        }
        let (least, most) = (sizes.iter().min(), sizes.iter().max());
        sizes.iter().sum::<usize>() == all.len()
            && &seen == all
            && least.is_some_and(|l| *l > 0)
            && most.zip(least).is_some_and(|(m, l)| m - l <= 1)
    }

    /// Fails unless, within `within`, `members` hold every queue of `all` between them, each
    /// once; returns how long that took.
    pub async fn wait_for_partition(
        &self,
        topic: &str,
        members: &[&str],
        all: &BTreeSet<Queue>,
        within: Duration,
    ) -> Duration {
        let started = Instant::now();
        let what = format!("{members:?} share the {} queues of {topic}", all.len());
        super::eventually(&what, within, || {
            self.partitioned(topic, members, all).then_some(())
        })
        .await;
        started.elapsed()
    }

    /// What was consumed of `sent`, once every message of it was (fails after `within` with the
    /// messages missing).
    pub async fn wait_for_all(&self, topic: &str, sent: &[String], within: Duration) -> Delivery {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let delivery = Delivery::of(&self.messages(topic), sent);
            if delivery.missing.is_empty() {
                return delivery;
            }
            if tokio::time::Instant::now() >= deadline {
                let examples: Vec<&String> = delivery.missing.iter().take(10).collect();
                panic!(
                    "{} of the {} messages sent to {topic} were never consumed within {within:?} \
                     (lost), e.g. {examples:?}; consumed per consumer: {:?}",
                    delivery.missing.len(),
                    sent.len(),
                    delivery.unique_per_client
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Who consumed what of the messages sent.
#[derive(Debug, Default)]
pub struct Delivery {
    /// Every consumption of each message sent: the consumer and the reconsume count.
    pub by_body: BTreeMap<String, Vec<(String, i64)>>,
    /// The messages sent that nobody consumed.
    pub missing: Vec<String>,
    /// How many distinct messages each consumer consumed.
    pub unique_per_client: BTreeMap<String, usize>,
    /// Consumptions of a message beyond its first (redeliveries after a failure included).
    pub extra: usize,
}

impl Delivery {
    /// What `messages` say about `sent`.
    pub fn of(messages: &[(String, Instant, Msg)], sent: &[String]) -> Self {
        let sent_set: BTreeSet<&String> = sent.iter().collect();
        let mut by_body: BTreeMap<String, Vec<(String, i64)>> = BTreeMap::new();
        for (client, _, m) in messages {
            if sent_set.contains(&m.body) {
                by_body
                    .entry(m.body.clone())
                    .or_default()
                    .push((client.clone(), m.reconsume_times));
            }
        }
        let missing = sent
            .iter()
            .filter(|b| !by_body.contains_key(*b))
            .cloned()
            .collect();
        let mut per_client: BTreeMap<String, BTreeSet<&String>> = BTreeMap::new();
        let mut extra = 0;
        for (body, consumptions) in &by_body {
            extra += consumptions.len() - 1;
            for (client, _) in consumptions {
                per_client.entry(client.clone()).or_default().insert(body);
            }
        }
        let unique_per_client = per_client.into_iter().map(|(c, b)| (c, b.len())).collect();
        Self {
            by_body,
            missing,
            unique_per_client,
            extra,
        }
    }

    /// The messages consumed more than once, with their consumers.
    pub fn duplicated(&self) -> Vec<(&String, &Vec<(String, i64)>)> {
        self.by_body.iter().filter(|(_, c)| c.len() > 1).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unix_us_now() -> u64 {
        let since = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH);
        u64::try_from(since.map_or(0, |d| d.as_micros())).unwrap_or(u64::MAX)
    }

    #[test]
    fn lines_are_ordered_by_when_the_consumers_printed_them_not_when_they_were_read() {
        let log = Log::default();
        let printed = unix_us_now();
        let read = Instant::now() + Duration::from_secs(1);
        let added = format!(
            r#"{{"unix_us": {}, "event": "added", "topic": "T", "queues": [["T", "b", 1]]}}"#,
            printed + 1_000
        );
        let message = format!(
            r#"{{"unix_us": {}, "event": "message", "topic": "T", "broker": "b", "queue": 1,
                "offset": 7, "body": "m", "reconsume_times": 0}}"#,
            printed + 3_000
        );
        // The second member's line, printed later, is read first (its reader ran sooner).
        log.record("second", read, &message);
        log.record("first", read + Duration::from_millis(5), &added);
        // A line without `unix_us` is timed when read.
        let untimed = r#"{"event": "removed", "topic": "T", "queues": [["T", "b", 1]]}"#;
        log.record("third", read, untimed);
        let lines = log.lines();
        let clients: Vec<&str> = lines.iter().map(|l| l.client.as_str()).collect();
        assert_eq!(clients, ["first", "second", "third"]);
        assert_eq!(lines[1].at - lines[0].at, Duration::from_millis(2));
        assert!(lines[1].at < read, "printed before it was read");
        assert_eq!(lines[2].at, read);
        log.assert_no_garbage();
    }

    #[test]
    fn lines_printed_at_the_same_instant_keep_the_order_they_were_read_in() {
        let log = Log::default();
        let printed = unix_us_now();
        let read = Instant::now() + Duration::from_secs(1);
        for client in ["a", "b", "c"] {
            let line = format!(
                r#"{{"unix_us": {printed}, "event": "removed", "topic": "T", "queues": []}}"#
            );
            log.record(client, read, &line);
        }
        let clients: Vec<String> = log.lines().into_iter().map(|l| l.client).collect();
        assert_eq!(clients, ["a", "b", "c"]);
    }

    #[test]
    fn a_line_is_never_placed_after_it_was_read() {
        let log = Log::default();
        let read = Instant::now();
        let from_the_future = format!(
            r#"{{"unix_us": {}, "event": "removed", "topic": "T", "queues": []}}"#,
            unix_us_now() + 60_000_000
        );
        log.record("c", read, &from_the_future);
        assert_eq!(log.lines()[0].at, read);
    }
}
