//! What a [`BrokerClient`](super::BrokerClient) told the brokers about each of its
//! registrations: when each subscription was made (its `subVersion`) and which brokers were
//! heartbeated, so that unregistering reaches all of them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use rebalance_runtime::Registration;
use tokio::time::Instant;

/// Subscription versions: milliseconds since the Unix epoch, as the Java client stamps
/// `subVersion`, strictly increasing within a client. Brokers keep the subscription with the
/// newest version, so a topic subscribed later must carry a larger one.
///
/// The wall clock is read once, at creation, to line versions up with other clients'; after
/// that, time comes from tokio's clock (paused in tests).
#[derive(Debug)]
struct VersionClock {
    base_millis: i64,
    start: Instant,
    last: i64,
}

impl VersionClock {
    fn new() -> Self {
        let base_millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Self {
            base_millis,
            start: Instant::now(),
            last: i64::MIN,
        }
    }

    fn next(&mut self) -> i64 {
        let elapsed = i64::try_from(self.start.elapsed().as_millis()).unwrap_or(i64::MAX);
        let now = self.base_millis.saturating_add(elapsed);
        self.last = now.max(self.last.saturating_add(1));
        self.last
    }
}

/// How long after the last heartbeat a broker has surely forgotten a client: RocketMQ's channel
/// expiry (120 s after the last heartbeat it received) plus the 10 s between its scans. A broker
/// not heartbeated for that long needs no unregistration.
pub(crate) const BROKER_FORGETS_AFTER: Duration = Duration::from_secs(130);

/// Whether a broker last heartbeated at `last` still knows the client at `now`.
fn still_known(last: Instant, now: Instant) -> bool {
    now.duration_since(last) < BROKER_FORGETS_AFTER
}

/// One client id in one group.
#[derive(Debug, Default)]
struct Record {
    /// Per subscribed topic, its tag expression and `subVersion`: when it was first seen
    /// subscribed with that expression.
    versions: BTreeMap<String, (String, i64)>,
    /// Every broker heartbeated since the last unregistration, with when it was last sent a
    /// heartbeat.
    heartbeated: BTreeMap<String, Instant>,
    /// The registration last heartbeated and its subscriptions' versions, as sent: sent again
    /// as they are to a broker reconnected to.
    last: Option<(Registration, Vec<i64>)>,
}

#[derive(Debug)]
struct State {
    clock: VersionClock,
    records: HashMap<(String, String), Record>,
}

/// The bookkeeping of every registration a broker client sent. Never held across an `.await`.
#[derive(Debug)]
pub(crate) struct Registrations {
    state: Mutex<State>,
}

impl Default for Registrations {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                clock: VersionClock::new(),
                records: HashMap::new(),
            }),
        }
    }
}

/// A registration's client id and group.
pub(crate) type Key = (String, String);

fn key(registration: &Registration) -> Key {
    (
        registration.client_id.as_str().to_string(),
        registration.group.clone(),
    )
}

impl Registrations {
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        // A panic elsewhere while holding the lock leaves consistent maps: keep going.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut state)
    }

    /// The `subVersion` of each of `registration.subscriptions`, in that order. A topic not
    /// subscribed in the previous registration, or subscribed with another tag expression,
    /// gets a new, larger version (as the Java client stamps a subscription when it is made; the
    /// broker keeps the newest); a topic dropped is forgotten, so subscribing it again is a new
    /// subscription.
    pub(crate) fn sub_versions(&self, registration: &Registration) -> Vec<i64> {
        self.with(|state| {
            let record = state.records.entry(key(registration)).or_default();
            let subscribed: BTreeSet<&str> = registration.topics().collect();
            record
                .versions
                .retain(|topic, _| subscribed.contains(topic.as_str()));
            registration
                .subscriptions
                .iter()
                .map(|s| {
                    let expression = s.expression.as_str();
                    match record.versions.get(&s.topic) {
                        Some((same, version)) if same == expression => *version,
                        _ => {
                            let version = state.clock.next();
                            tracing::debug!(group = %registration.group, topic = %s.topic, tags = expression, version, "new subscription");
                            record
                                .versions
                                .insert(s.topic.clone(), (expression.to_string(), version));
                            version
                        }
                    }
                })
                .collect()
        })
    }

    /// Records that `brokers` are sent a heartbeat for `registration`, with the versions
    /// `sub_versions` gave it.
    pub(crate) fn heartbeating(
        &self,
        registration: &Registration,
        sub_versions: &[i64],
        brokers: &BTreeSet<String>,
    ) {
        self.with(|state| {
            let record = state.records.entry(key(registration)).or_default();
            let now = Instant::now();
            record
                .heartbeated
                .extend(brokers.iter().map(|b| (b.clone(), now)));
            let unchanged = record
                .last
                .as_ref()
                .is_some_and(|(r, v)| r == registration && v == sub_versions);
            if !unchanged {
                record.last = Some((registration.clone(), sub_versions.to_vec()));
            }
        })
    }

    /// The registrations heartbeated at `broker` (and not unregistered there since).
    pub(crate) fn heartbeated_at(&self, broker: &str) -> Vec<Key> {
        self.with(|state| {
            state
                .records
                .iter()
                .filter(|(_, record)| {
                    record.heartbeated.contains_key(broker) && record.last.is_some()
                })
                .map(|(key, _)| key.clone())
                .collect()
        })
    }

    /// The last heartbeat of the registration `key`, as it was sent (registration and
    /// versions), if it is still heartbeated at `broker`. Read when it is to be sent again, not
    /// before: a registration heartbeated since is sent as it is now, never in an older form.
    pub(crate) fn last_heartbeat(
        &self,
        key: &Key,
        broker: &str,
    ) -> Option<(Registration, Vec<i64>)> {
        self.with(|state| {
            let record = state.records.get(key)?;
            if !record.heartbeated.contains_key(broker) {
                return None;
            }
            record.last.clone()
        })
    }

    /// The brokers heartbeated for `registration` that are not among `serving` (the brokers of
    /// its topics now): those of topics dropped since. A broker left that was last heartbeated
    /// [`BROKER_FORGETS_AFTER`] ago or more has forgotten the client by itself: it is forgotten
    /// here too, and not returned (one gone for good would otherwise be told again with every
    /// heartbeat, for ever).
    pub(crate) fn left(
        &self,
        registration: &Registration,
        serving: &BTreeSet<String>,
    ) -> BTreeSet<String> {
        let now = Instant::now();
        self.with(|state| match state.records.get_mut(&key(registration)) {
            Some(record) => {
                record.heartbeated.retain(|broker, &mut last| {
                    let keep = serving.contains(broker) || still_known(last, now);
                    if !keep {
                        tracing::debug!(broker, group = %registration.group, "a broker left and not heartbeated for the broker's expiry has forgotten the client");
                    }
                    keep
                });
                record
                    .heartbeated
                    .keys()
                    .filter(|b| !serving.contains(*b))
                    .cloned()
                    .collect()
            }
            None => BTreeSet::new(),
        })
    }

    /// Forgets `brokers`, which accepted the unregistration of `registration`'s client.
    pub(crate) fn unregistered(&self, registration: &Registration, brokers: &BTreeSet<String>) {
        self.with(|state| {
            if let Some(record) = state.records.get_mut(&key(registration)) {
                record.heartbeated.retain(|b, _| !brokers.contains(b));
            }
        })
    }

    /// Takes the brokers heartbeated for `registration` (to unregister at), with when each was
    /// last heartbeated, and forgets its subscriptions: registering again afterwards is a new
    /// subscription. Brokers last heartbeated [`BROKER_FORGETS_AFTER`] ago or more are left
    /// out: they have forgotten the client.
    pub(crate) fn take_heartbeated(
        &self,
        registration: &Registration,
    ) -> BTreeMap<String, Instant> {
        let now = Instant::now();
        let mut taken = self.with(|state| {
            state
                .records
                .remove(&key(registration))
                .map(|record| record.heartbeated)
                .unwrap_or_default()
        });
        taken.retain(|_, &mut last| still_known(last, now));
        taken
    }

    /// Puts back brokers an unregistration did not reach, with when each was last heartbeated,
    /// so that the next one tries again (until they have forgotten the client).
    pub(crate) fn still_registered(
        &self,
        registration: &Registration,
        brokers: BTreeMap<String, Instant>,
    ) {
        if brokers.is_empty() {
            return;
        }
        self.with(|state| {
            let record = state.records.entry(key(registration)).or_default();
            record.heartbeated.extend(brokers);
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rebalance_runtime::subscription::{Subscription, TagExpression};

    use super::*;

    fn registration(group: &str, topics: &[&str]) -> Registration {
        Registration {
            client_id: "c".into(),
            group: group.into(),
            message_model: Default::default(),
            consume_order: Default::default(),
            consume_from: Default::default(),
            subscriptions: topics.iter().map(|t| Subscription::all(*t)).collect(),
        }
    }

    fn set(addrs: &[&str]) -> BTreeSet<String> {
        addrs.iter().map(|a| a.to_string()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_changed_tag_expression_is_a_new_subscription() {
        let book = Registrations::default();
        let with_tags = |expression: &str| {
            let mut r = registration("G", &["T"]);
            r.subscriptions[0].expression = TagExpression::parse(expression).unwrap();
            r
        };
        let [all] = book.sub_versions(&with_tags("*"))[..] else {
            panic!("one version per topic")
        };
        tokio::time::advance(Duration::from_secs(2)).await;
        let [tagged] = book.sub_versions(&with_tags("TagA || TagB"))[..] else {
            panic!("one version per topic")
        };
        assert_eq!(tagged, all + 2_000, "stamped when the tags changed");
        assert_eq!(
            book.sub_versions(&with_tags("TagA || TagB")),
            [tagged],
            "unchanged"
        );
        assert!(
            book.sub_versions(&with_tags("*"))[0] > tagged,
            "back to `*`: newer again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn each_topic_keeps_the_version_of_its_subscription() {
        let book = Registrations::default();
        let [t] = book.sub_versions(&registration("G", &["T"]))[..] else {
            panic!("one version per topic")
        };
        assert_eq!(
            book.sub_versions(&registration("G", &["T"])),
            [t],
            "unchanged"
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        let both = book.sub_versions(&registration("G", &["T", "U"]));
        assert_eq!(both[0], t, "T keeps its version");
        assert_eq!(both[1], t + 5_000, "U stamped when subscribed, 5 s later");
        // Dropped, then subscribed again: a newer subscription, even within the millisecond.
        assert_eq!(book.sub_versions(&registration("G", &["U"])), [both[1]]);
        let again = book.sub_versions(&registration("G", &["T", "U"]));
        assert_eq!(again, [both[1] + 1, both[1]]);
        // Another group of the same client has subscriptions of its own.
        let other = book.sub_versions(&registration("H", &["T"]));
        assert!(other[0] > again[0]);
        assert_eq!(book.sub_versions(&registration("G", &["T", "U"])), again);
    }

    /// The brokers of a taken or given-back map.
    fn names(map: BTreeMap<String, Instant>) -> BTreeSet<String> {
        map.into_keys().collect()
    }

    #[tokio::test(start_paused = true)]
    async fn brokers_left_are_those_heartbeated_and_no_longer_serving() {
        let book = Registrations::default();
        let g = registration("G", &["T", "U"]);
        assert_eq!(
            book.left(&g, &set(&[])),
            set(&[]),
            "nothing heartbeated yet"
        );
        book.heartbeating(&g, &[], &set(&["a:1", "b:1"]));
        book.heartbeating(&registration("H", &["U"]), &[], &set(&["b:1"]));
        let t_only = registration("G", &["T"]);
        assert_eq!(book.left(&t_only, &set(&["a:1"])), set(&["b:1"]));
        book.unregistered(&t_only, &set(&["b:1"]));
        assert_eq!(book.left(&t_only, &set(&["a:1"])), set(&[]), "told once");
        assert_eq!(names(book.take_heartbeated(&t_only)), set(&["a:1"]));
        // Another group's registration at the same broker is its own.
        assert_eq!(
            names(book.take_heartbeated(&registration("H", &[]))),
            set(&["b:1"])
        );
    }

    #[tokio::test(start_paused = true)]
    async fn heartbeated_brokers_are_remembered_until_unregistered() {
        let book = Registrations::default();
        let g = registration("G", &["T", "U"]);
        book.heartbeating(&g, &[], &set(&["a:1", "b:1"]));
        // U dropped, and now every topic: the brokers heartbeated before are still known.
        book.heartbeating(&registration("G", &["T"]), &[], &set(&["a:1"]));
        book.heartbeating(&registration("H", &["T"]), &[], &set(&["c:1"]));
        let empty = registration("G", &[]);
        let taken = book.take_heartbeated(&empty);
        assert_eq!(names(taken.clone()), set(&["a:1", "b:1"]));
        assert!(book.take_heartbeated(&empty).is_empty(), "taken");
        // What an unregistration did not reach is tried again next time.
        book.still_registered(
            &empty,
            taken.into_iter().filter(|(b, _)| b == "b:1").collect(),
        );
        assert_eq!(names(book.take_heartbeated(&g)), set(&["b:1"]));
        assert_eq!(
            names(book.take_heartbeated(&registration("H", &[]))),
            set(&["c:1"])
        );
    }

    /// A broker that left the routes and never accepts the unregistration (decommissioned, or
    /// a slave back at another address) was told again with every heartbeat, for ever.
    #[tokio::test(start_paused = true)]
    async fn a_broker_not_heartbeated_for_its_expiry_is_told_nothing_more() {
        let book = Registrations::default();
        let both = registration("G", &["T", "U"]);
        let t_only = registration("G", &["T"]);
        book.heartbeating(&both, &[], &set(&["a:1", "gone:1"]));
        // From now on only a:1 serves, and gone:1 never answers.
        let step = Duration::from_secs(30);
        let mut told = 0;
        for _ in 0..10 {
            tokio::time::advance(step).await;
            book.heartbeating(&t_only, &[], &set(&["a:1"]));
            if book.left(&t_only, &set(&["a:1"])) == set(&["gone:1"]) {
                told += 1;
            }
        }
        // Told at 30, 60, 90 and 120 s; at 150 s it has surely expired the client by itself.
        assert_eq!(told, 4);
        assert!(book.heartbeated_at("gone:1").is_empty());
        assert_eq!(names(book.take_heartbeated(&t_only)), set(&["a:1"]));
    }

    #[tokio::test(start_paused = true)]
    async fn an_unregistration_skips_brokers_that_have_forgotten_the_client() {
        let book = Registrations::default();
        let g = registration("G", &["T"]);
        book.heartbeating(&g, &[], &set(&["a:1", "b:1"]));
        tokio::time::advance(BROKER_FORGETS_AFTER - Duration::from_secs(1)).await;
        book.heartbeating(&g, &[], &set(&["a:1"]));
        tokio::time::advance(Duration::from_secs(1)).await;
        let taken = book.take_heartbeated(&g);
        assert_eq!(names(taken.clone()), set(&["a:1"]));
        // Given back after a failed unregistration, it keeps its time: it expires on schedule.
        book.still_registered(&g, taken);
        tokio::time::advance(BROKER_FORGETS_AFTER - Duration::from_secs(1)).await;
        assert_eq!(names(book.take_heartbeated(&g)), set(&[]));
    }
}
