//! Every public Kafka reference vector (`tests/data/kafka-assign.jsonl` at the workspace root)
//! against the assignors themselves.
//!
//! - range and roundrobin: exactly Kafka's result (or Kafka's error).
//! - sticky and cooperative_sticky: valid, at least as balanced as Kafka's result, and moving no
//!   more owned partitions than Kafka's `moved`. Cooperative results are then fed back (each
//!   member owning what it got, one generation later) and the follow-up must complete the
//!   assignment without revoking anything.
//! - "At least as balanced" is checked two ways: Kafka's own notion (nobody could take a
//!   partition it subscribes to from a member holding two or more more), and the plain spread
//!   (max minus min partitions per member, over the members subscribing to at least one
//!   existing topic) no wider than Kafka's. Kafka's spread is read in these categories (see
//!   [`kafka_bound`]):
//!   - Kafka gives partitions to a member without an existing subscribed topic (an empty
//!     subscription first in hash order): its subscribers share fewer partitions, so Kafka's
//!     spread among them is no bound; ours must still be at most 1 there (these groups take the
//!     identical-subscriptions path).
//!   - Kafka keeps an owned partition that does not exist: it is not counted.
//!   - Cooperative round one in which Kafka gives a subscribing member a partition of a topic it
//!     no longer subscribes to (its previous-owner rule): that partition stays with its old
//!     lister in Kafka and is not held back, while a valid result hands it to a subscriber, who
//!     waits a round. Kafka's round-one spread can then be out of reach: in
//!     `rule_prev_generation_unsubscribed` every valid result moving no more than Kafka has a
//!     round-one spread of 2 or a completed spread of 2, against Kafka's 1 and 0. There the
//!     completed result (the follow-up) is compared with Kafka's completed result, the sticky
//!     vector with the same input, when there is one.
//!
//!   A cooperative follow-up is also compared with that sticky vector whenever one exists.
//! - Sequences (join, leave, subscription and partition changes) run step by step, each step
//!   owning our own previous result wherever the vector's step owns Kafka's previous result.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use rebalance_core::assignor::{
    AssignorRegistry, GroupSubscription, MemberSubscription, Topic, TopicPartition,
};
use rebalance_core::strategy::Params;
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::{Value, json};

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/data/kafka-assign.jsonl"
);

type Assignment = BTreeMap<String, BTreeSet<(String, i32)>>;

#[derive(Deserialize)]
struct CaseJson {
    assignor: String,
    partitions_per_topic: BTreeMap<String, u32>,
    members: OrderedMembers,
    #[serde(default)]
    partition_racks: Option<BTreeMap<String, Vec<Vec<Option<String>>>>>,
}

#[derive(Deserialize)]
struct MemberJson {
    #[serde(default)]
    topics: Option<Vec<String>>,
    #[serde(default)]
    owned: Option<Vec<(String, i32)>>,
    #[serde(default)]
    generation: Option<i32>,
    #[serde(default)]
    rack: Option<String>,
    #[serde(default)]
    group_instance_id: Option<String>,
}

/// The members object's entries in the order they are written: the order the leader received
/// the members in, which range and round robin depend on (a `serde_json::Value` sorts keys).
struct OrderedMembers(Vec<(String, MemberJson)>);

impl<'de> Deserialize<'de> for OrderedMembers {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = OrderedMembers;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of members")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(OrderedMembers(entries))
            }
        }
        deserializer.deserialize_map(Entries)
    }
}

/// The assignor's name and the group of one vector line.
fn parse_group(line: &str) -> (String, GroupSubscription) {
    let case: CaseJson = serde_json::from_str(line).expect("a vector parses");
    let mut group = GroupSubscription::new();
    for (name, count) in case.partitions_per_topic {
        group
            .partitions_per_topic
            .insert(Topic::from(name.as_str()), count);
    }
    for (name, racks) in case.partition_racks.unwrap_or_default() {
        let racks = racks
            .into_iter()
            .map(|replicas| replicas.into_iter().flatten().collect())
            .collect();
        group
            .partition_racks
            .insert(Topic::from(name.as_str()), racks);
    }
    for (id, m) in case.members.0 {
        let topics: Arc<[Topic]> = m
            .topics
            .unwrap_or_default()
            .iter()
            .map(|t| Topic::from(t.as_str()))
            .collect();
        let mut member = MemberSubscription::with_shared_topics(id, topics);
        member.owned = m
            .owned
            .unwrap_or_default()
            .into_iter()
            .map(|(t, p)| TopicPartition::new(t.as_str(), p))
            .collect();
        member.generation = m.generation;
        member.rack = m.rack;
        member.group_instance_id = m.group_instance_id;
        group.members.push(member);
    }
    (case.assignor, group)
}

/// The answer to one case as `rebalance assign` writes it: `{"id", "assignment", "error"}`.
fn answer_of(id: &str, assignor: &str, group: &GroupSubscription) -> Value {
    let (assignment, error) = run(assignor, group);
    json!({"id": id, "assignment": assignment, "error": error})
}

/// The assignor's answer in the vectors' form: (`expected`, `error`), an assignment as JSON (in
/// member order) or Kafka's exception message.
fn run(assignor: &str, group: &GroupSubscription) -> (Value, Value) {
    let assignor = AssignorRegistry::default()
        .build(assignor, &Params::new())
        .expect("a vector names a built-in assignor");
    match assignor.assign(group) {
        Ok(a) => {
            let members: serde_json::Map<String, Value> = a
                .iter()
                .map(|(member, partitions)| {
                    let list = partitions
                        .iter()
                        .map(|(t, p)| json!([t.to_string(), p]))
                        .collect();
                    (member.to_string(), Value::Array(list))
                })
                .collect();
            (Value::Object(members), Value::Null)
        }
        Err(e) => (Value::Null, Value::from(e.java_message())),
    }
}

fn parse_assignment(v: &Value) -> Assignment {
    v.as_object()
        .expect("assignment object")
        .iter()
        .map(|(m, list)| {
            let set = list
                .as_array()
                .expect("list")
                .iter()
                .map(|tp| {
                    (
                        tp[0].as_str().expect("topic").to_string(),
                        tp[1].as_i64().expect("p") as i32,
                    )
                })
                .collect();
            (m.clone(), set)
        })
        .collect()
}

struct Checked {
    moved: usize,
    /// Existing subscribed partitions nobody got (cooperative: held back).
    unassigned: usize,
    problems: Vec<String>,
}

fn exists(group: &GroupSubscription, t: &str, p: i32) -> bool {
    group
        .partitions_per_topic
        .get(&Topic::from(t))
        .is_some_and(|&n| p >= 0 && (p as i64) < n as i64)
}

/// Each member's existing subscribed topics.
fn effective(group: &GroupSubscription) -> HashMap<String, BTreeSet<String>> {
    group
        .members
        .iter()
        .map(|m| {
            let topics = m
                .topics
                .iter()
                .filter(|t| group.partitions_per_topic.get(*t).is_some_and(|&n| n > 0))
                .map(|t| t.to_string())
                .collect();
            (m.member_id.to_string(), topics)
        })
        .collect()
}

/// Validity, completeness (`complete`: nothing held back) and movement of a sticky result.
fn check_sticky(group: &GroupSubscription, got: &Assignment, complete: bool) -> Checked {
    let mut problems = Vec::new();
    let subs = effective(group);
    let mut owner: HashMap<(String, i32), String> = HashMap::new();
    for (m, list) in got {
        for (t, p) in list {
            if owner.insert((t.clone(), *p), m.clone()).is_some() {
                problems.push(format!("{t}-{p} assigned twice"));
            }
            if !exists(group, t, *p) {
                problems.push(format!("{m} got nonexistent {t}-{p}"));
            }
            if !subs[m].contains(t) {
                problems.push(format!("{m} got {t}-{p} without subscribing"));
            }
        }
    }
    let mut listed: HashMap<(String, i32), Vec<String>> = HashMap::new();
    for m in &group.members {
        for tp in &m.owned {
            listed
                .entry((tp.topic.to_string(), tp.partition))
                .or_default()
                .push(m.member_id.to_string());
        }
    }
    let all: BTreeSet<(String, i32)> = subs
        .values()
        .flatten()
        .flat_map(|t| {
            (0..group.partitions_per_topic[&Topic::from(t.as_str())] as i32)
                .map(move |p| (t.clone(), p))
        })
        .collect();
    let mut unassigned = 0;
    for tp in &all {
        if !owner.contains_key(tp) {
            unassigned += 1;
            if complete || !listed.contains_key(tp) {
                problems.push(format!("{}-{} not assigned", tp.0, tp.1));
            }
        }
    }
    let moved = listed
        .iter()
        .filter(|(tp, _)| exists(group, &tp.0, tp.1))
        .filter(|(tp, ms)| {
            ms.iter()
                .any(|m| !got.get(m).is_some_and(|l| l.contains(*tp)))
        })
        .count();
    Checked {
        moved,
        unassigned,
        problems,
    }
}

/// Balance of a complete result: with identical subscriptions, a spread no larger than `kafka`;
/// otherwise Kafka's notion: nobody could take a partition it subscribes to from a member with
/// two or more partitions more.
fn balance_problems(
    group: &GroupSubscription,
    got: &Assignment,
    kafka_spread: Option<usize>,
) -> Vec<String> {
    let subs = effective(group);
    let sizes: HashMap<&String, usize> = got.iter().map(|(m, l)| (m, l.len())).collect();
    let identical =
        subs.values().all(|s| !s.is_empty()) && subs.values().collect::<BTreeSet<_>>().len() == 1;
    let mut problems = Vec::new();
    if identical {
        let spread = sizes.values().max().unwrap_or(&0) - sizes.values().min().unwrap_or(&0);
        if spread > kafka_spread.unwrap_or(1).max(1) {
            problems.push(format!("spread {spread} > Kafka's {kafka_spread:?}"));
        }
    } else {
        for (a, la) in got {
            for (b, lb) in got {
                if lb.len() >= la.len() + 2 && lb.iter().any(|(t, _)| subs[a].contains(t)) {
                    problems.push(format!(
                        "{a} ({}) could take from {b} ({})",
                        la.len(),
                        lb.len()
                    ));
                }
            }
        }
    }
    problems
}

/// Kafka's result restricted to partitions that exist.
fn kafka_spread(group: &GroupSubscription, expected: &Assignment) -> usize {
    let sizes: Vec<usize> = expected
        .values()
        .map(|l| l.iter().filter(|(t, p)| exists(group, t, *p)).count())
        .collect();
    sizes.iter().max().unwrap_or(&0) - sizes.iter().min().unwrap_or(&0)
}

/// The plain balance measure: max minus min partitions per member, over the members that
/// subscribe to at least one existing topic, counting only partitions that exist.
fn plain_spread(group: &GroupSubscription, a: &Assignment) -> usize {
    let sizes: Vec<usize> = effective(group)
        .iter()
        .filter(|(_, topics)| !topics.is_empty())
        .map(|(m, _)| {
            a.get(m).map_or(0, |l| {
                l.iter().filter(|(t, p)| exists(group, t, *p)).count()
            })
        })
        .collect();
    sizes.iter().max().unwrap_or(&0) - sizes.iter().min().unwrap_or(&0)
}

/// Whether Kafka's result gives a subscribing member a partition of a topic it does not (or no
/// longer) subscribes to: its previous-owner rule.
fn kafka_gives_unsubscribed(group: &GroupSubscription, kafka: &Assignment) -> bool {
    let subs = effective(group);
    kafka
        .iter()
        .any(|(m, l)| !subs[m].is_empty() && l.iter().any(|(t, _)| !subs[m].contains(t)))
}

/// The spread our result must not exceed, from Kafka's result on the same input: Kafka's plain
/// spread without partitions that do not exist, and at least 1 when Kafka gives partitions to a
/// member with no existing subscribed topic (see the module docs).
fn kafka_bound(group: &GroupSubscription, kafka: &Assignment) -> usize {
    let subs = effective(group);
    let feeds_unsubscribed_member = kafka
        .iter()
        .any(|(m, l)| subs[m].is_empty() && l.iter().any(|(t, p)| exists(group, t, *p)));
    let spread = plain_spread(group, kafka);
    if feeds_unsubscribed_member {
        spread.max(1)
    } else {
        spread
    }
}

/// A problem when our plain spread is wider than Kafka's allows.
fn spread_problem(
    group: &GroupSubscription,
    got: &Assignment,
    kafka: &Assignment,
    what: &str,
) -> Option<String> {
    let (ours, bound) = (plain_spread(group, got), kafka_bound(group, kafka));
    (ours > bound).then(|| format!("{what} spread {ours} > Kafka's {bound}"))
}

/// What identifies a case's input: the same group for sticky and cooperative_sticky.
fn input_key(case: &Value) -> String {
    json!([
        case["partitions_per_topic"],
        case["members"],
        case["partition_racks"]
    ])
    .to_string()
}

/// The follow-up round of a cooperative result: everyone owns what it got, one generation later.
fn follow_up(group: &GroupSubscription, got: &Assignment) -> GroupSubscription {
    let next = group
        .members
        .iter()
        .filter_map(|m| m.generation)
        .max()
        .unwrap_or(0)
        + 1;
    let mut g = group.clone();
    for m in &mut g.members {
        m.owned = got[m.member_id.as_str()]
            .iter()
            .map(|(t, p)| TopicPartition::new(t.as_str(), *p))
            .collect();
        m.generation = Some(next);
    }
    g
}

#[test]
fn assign_meets_every_kafka_vector() {
    let text = std::fs::read_to_string(VECTORS).expect("vectors");
    let lines: Vec<&str> = text.lines().collect();
    let cases: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).expect("vector"))
        .collect();
    let first_answers: Vec<Value> = lines
        .iter()
        .zip(&cases)
        .map(|(line, case)| {
            let (assignor, group) = parse_group(line);
            answer_of(case["id"].as_str().expect("id"), &assignor, &group)
        })
        .collect();
    assert_eq!(first_answers.len(), cases.len());

    // Kafka's sticky result per input: the completed result of a cooperative case on it.
    let sticky_results: HashMap<String, Assignment> = cases
        .iter()
        .filter(|c| c["assignor"] == "sticky" && c["sequence"].is_null() && c["error"].is_null())
        .map(|c| (input_key(c), parse_assignment(&c["expected"])))
        .collect();
    let mut failures = Vec::new();
    let mut passed: BTreeMap<String, usize> = BTreeMap::new();
    let mut follow_ups = Vec::new();
    let mut follow_up_groups = Vec::new();
    let mut sequences: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, (case, answer)) in cases.iter().zip(&first_answers).enumerate() {
        let id = case["id"].as_str().expect("id");
        assert_eq!(case["id"], answer["id"]);
        let assignor = case["assignor"].as_str().expect("assignor");
        if let Some(seq) = case["sequence"].as_str() {
            sequences.entry(seq.to_string()).or_default().push(i);
            if case["step"] != 0 {
                continue; // checked below, step by step, on our own previous results
            }
        }
        let (_, group) = parse_group(lines[i]);
        let mut problems = Vec::new();
        match assignor {
            "range" | "roundrobin" => {
                if case["expected"] != answer["assignment"] || case["error"] != answer["error"] {
                    problems.push(format!(
                        "expected {} / {}, got {} / {}",
                        case["expected"], case["error"], answer["assignment"], answer["error"]
                    ));
                }
            }
            _ if case["category"] == "edge_owned_partition_out_of_range" => {
                // Kafka fails or keeps the nonexistent partition; we ignore it (documented).
                let got = parse_assignment(&answer["assignment"]);
                let c = check_sticky(&group, &got, assignor == "sticky");
                problems.extend(c.problems);
                problems.extend(balance_problems(&group, &got, None));
                if case["error"].is_null() {
                    let expected = parse_assignment(&case["expected"]);
                    problems.extend(spread_problem(&group, &got, &expected, "plain"));
                }
            }
            _ if !case["error"].is_null() => {
                if case["error"] != answer["error"] {
                    problems.push(format!(
                        "expected error {}, got {}",
                        case["error"], answer["error"]
                    ));
                }
            }
            _ => {
                let got = parse_assignment(&answer["assignment"]);
                let expected = parse_assignment(&case["expected"]);
                let cooperative = assignor == "cooperative_sticky";
                let c = check_sticky(&group, &got, !cooperative);
                problems.extend(c.problems);
                let kafka_moved = case["moved"].as_u64().expect("moved") as usize;
                if c.moved > kafka_moved {
                    problems.push(format!("moved {} > Kafka's {kafka_moved}", c.moved));
                }
                if cooperative {
                    if !kafka_gives_unsubscribed(&group, &expected) {
                        problems.extend(spread_problem(&group, &got, &expected, "round-one"));
                    }
                    let next = follow_up(&group, &got);
                    follow_ups.push(answer_of(id, assignor, &next));
                    let target = sticky_results.get(&input_key(case)).cloned();
                    follow_up_groups.push((id.to_string(), next, target));
                } else {
                    problems.extend(balance_problems(
                        &group,
                        &got,
                        Some(kafka_spread(&group, &expected)),
                    ));
                    problems.extend(spread_problem(&group, &got, &expected, "plain"));
                }
            }
        }
        if problems.is_empty() {
            *passed.entry(assignor.to_string()).or_default() += 1;
        } else {
            failures.push(format!("{id}: {}", problems.join("; ")));
        }
    }

    // Cooperative follow-ups: complete, balanced, nothing revoked.
    let answers = follow_ups;
    for ((id, group, target), answer) in follow_up_groups.iter().zip(&answers) {
        let got = parse_assignment(&answer["assignment"]);
        let c = check_sticky(group, &got, true);
        let mut problems = c.problems;
        if c.moved > 0 {
            problems.push(format!("follow-up moved {}", c.moved));
        }
        problems.extend(balance_problems(group, &got, None));
        if let Some(target) = target {
            problems.extend(spread_problem(group, &got, target, "completed"));
        }
        if problems.is_empty() {
            *passed.entry("cooperative_sticky".into()).or_default() += 1;
        } else {
            failures.push(format!("{id} (follow-up): {}", problems.join("; ")));
        }
    }

    // Sequences, step by step, all sequences' step k in one run.
    let mut previous: HashMap<String, (Assignment, Assignment)> = HashMap::new(); // ours, Kafka's
    for (seq, steps) in &sequences {
        let first = steps[0];
        previous.insert(
            seq.clone(),
            (
                parse_assignment(&first_answers[first]["assignment"]),
                parse_assignment(&cases[first]["expected"]),
            ),
        );
    }
    let longest = sequences.values().map(Vec::len).max().unwrap_or(0);
    for step in 1..longest {
        let mut input = Vec::new();
        let mut batch = Vec::new();
        for (seq, steps) in &sequences {
            let Some(&i) = steps.get(step) else { continue };
            let (_, mut group) = parse_group(lines[i]);
            let (ours, kafkas) = &previous[seq];
            for m in &mut group.members {
                let owned: BTreeSet<(String, i32)> = m
                    .owned
                    .iter()
                    .map(|tp| (tp.topic.to_string(), tp.partition))
                    .collect();
                if kafkas.get(m.member_id.as_str()) == Some(&owned) {
                    m.owned = ours[m.member_id.as_str()]
                        .iter()
                        .map(|(t, p)| TopicPartition::new(t.as_str(), *p))
                        .collect();
                }
            }
            let id = cases[i]["id"].as_str().expect("id");
            let assignor = cases[i]["assignor"].as_str().expect("assignor");
            input.push(answer_of(id, assignor, &group));
            batch.push((seq.clone(), i, group));
        }
        let answers = input;
        for ((seq, i, group), answer) in batch.into_iter().zip(&answers) {
            let case = &cases[i];
            let assignor = case["assignor"].as_str().expect("assignor");
            let got = parse_assignment(&answer["assignment"]);
            let expected = parse_assignment(&case["expected"]);
            let cooperative = assignor == "cooperative_sticky";
            let c = check_sticky(&group, &got, !cooperative);
            let mut problems = c.problems;
            let kafka_moved = case["moved"].as_u64().expect("moved") as usize;
            if c.moved > kafka_moved {
                problems.push(format!("moved {} > Kafka's {kafka_moved}", c.moved));
            }
            let pending = c.unassigned > 0;
            if !cooperative || !pending {
                problems.extend(balance_problems(
                    &group,
                    &got,
                    Some(kafka_spread(&group, &expected)),
                ));
            }
            if !cooperative || !kafka_gives_unsubscribed(&group, &expected) {
                problems.extend(spread_problem(&group, &got, &expected, "plain"));
            }
            if case["event"] == "cooperative_followup" && pending {
                problems.push("a follow-up still holds partitions back".into());
            }
            if problems.is_empty() {
                *passed.entry(assignor.to_string()).or_default() += 1;
            } else {
                failures.push(format!(
                    "{} (step {step}): {}",
                    case["id"],
                    problems.join("; ")
                ));
            }
            previous.insert(seq, (got, expected));
        }
    }

    assert!(
        failures.is_empty(),
        "{} checks failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("Kafka vectors passed: {passed:?}");
}
