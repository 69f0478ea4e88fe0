//! `rebalance assign`: Kafka-style group assignment cases in, every member's partitions out.
//!
//! A case is one JSON object per line, in the format of the Kafka reference vectors: `id`,
//! `assignor`, `partitions_per_topic`, `members` (member id → `topics`, `owned`, `generation`,
//! `rack`, `group_instance_id`) and `partition_racks`; other fields are ignored. The order of the
//! keys of `members` is the order the leader received the members in, so it is read as written
//! (a `serde_json::Value` would sort it): the case is parsed a second time from the line's text
//! with an order-keeping visitor, rather than switching serde_json to `preserve_order` for the
//! whole workspace, which would change how every other command prints JSON objects.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::sync::Arc;

use rebalance_core::assignor::{
    AssignError, AssignorRegistry, GroupAssignment, GroupSubscription, MemberSubscription, Topic,
    TopicPartition,
};
use rebalance_core::strategy::Params;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::jsonl::{LineError, field};
use crate::limits::{MAX_BROADCAST_PAIRS, MAX_QUEUES};
use crate::table;

/// The answer to one case.
#[derive(Debug)]
pub struct CaseAnswer {
    /// The case's `id`, as given.
    pub id: Value,
    /// The assignor's name, as given.
    pub assignor: String,
    /// Every member's partitions, or the assignor's error.
    pub result: Result<GroupAssignment, AssignError>,
}

#[derive(Deserialize)]
struct CaseJson {
    assignor: String,
    /// Read wider than Kafka's `int` so that an out-of-range count gets its own message.
    partitions_per_topic: BTreeMap<String, i64>,
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

/// The members object's entries in the order they are written (duplicate keys kept, so the
/// assignor can report them).
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
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(OrderedMembers(entries))
            }
        }
        deserializer.deserialize_map(Entries)
    }
}

/// Reads the group of one case from the line's text.
pub fn parse_group(line: &str) -> Result<(String, GroupSubscription), LineError> {
    let case: CaseJson = serde_json::from_str(line)?;
    let mut group = GroupSubscription::new();
    // One shared string per topic name, so owned lists and subscriptions point at it.
    let mut names: BTreeMap<String, Topic> = BTreeMap::new();
    let mut topic = |name: String| -> Topic {
        names
            .entry(name)
            .or_insert_with_key(|n| Topic::from(n.as_str()))
            .clone()
    };
    let mut total: u64 = 0;
    for (name, count) in case.partitions_per_topic {
        let count = partition_count(&name, count)?;
        total += u64::from(count);
        group.partitions_per_topic.insert(topic(name), count);
    }
    if total > MAX_QUEUES as u64 {
        return Err(LineError(format!(
            "the case has {total} partitions in all; at most {MAX_QUEUES} per case"
        )));
    }
    for (name, racks) in case.partition_racks.unwrap_or_default() {
        let racks = racks
            .into_iter()
            .map(|replicas| replicas.into_iter().flatten().collect())
            .collect();
        group.partition_racks.insert(topic(name), racks);
    }
    for (id, m) in case.members.0 {
        let topics: Arc<[Topic]> = m
            .topics
            .unwrap_or_default()
            .into_iter()
            .map(&mut topic)
            .collect();
        let mut member = MemberSubscription::with_shared_topics(id, topics);
        member.owned = m
            .owned
            .unwrap_or_default()
            .into_iter()
            .map(|(t, p)| TopicPartition::new(topic(t), p))
            .collect();
        member.generation = m.generation;
        member.rack = m.rack;
        member.group_instance_id = m.group_instance_id;
        group.members.push(member);
    }
    if case.assignor == "broadcast" {
        let pairs = broadcast_pairs(&group);
        if pairs > MAX_BROADCAST_PAIRS as u64 {
            return Err(LineError(format!(
                "broadcast would give {pairs} member-partition pairs; at most \
                 {MAX_BROADCAST_PAIRS} per case"
            )));
        }
    }
    Ok((case.assignor, group))
}

/// A topic's partition count: from 0 to Kafka's largest `int`.
fn partition_count(topic: &str, count: i64) -> Result<u32, LineError> {
    if count < 0 {
        return Err(LineError(format!(
            "partitions_per_topic `{topic}`: {count} is negative"
        )));
    }
    u32::try_from(count)
        .ok()
        .filter(|&c| c <= i32::MAX as u32)
        .ok_or_else(|| {
            LineError(format!(
                "partitions_per_topic `{topic}`: {count} is more than {}",
                i32::MAX
            ))
        })
}

/// What a broadcast assignment holds: every member's subscribed partitions, summed.
pub fn broadcast_pairs(group: &GroupSubscription) -> u64 {
    group
        .members
        .iter()
        .flat_map(|m| m.topics.iter())
        .map(|t| u64::from(group.partitions_per_topic.get(t).copied().unwrap_or(0)))
        .fold(0, u64::saturating_add)
}

/// Computes one case: `line` is the case's text, `case` the same parsed as a [`Value`].
pub fn answer(
    line: &str,
    case: &Value,
    registry: &AssignorRegistry,
) -> Result<CaseAnswer, LineError> {
    let id = field(case, "id")?.clone();
    let (assignor_name, group) = parse_group(line)?;
    let assignor = registry
        .build(&assignor_name, &Params::new())
        .map_err(|e| LineError(e.to_string()))?;
    let result = assignor.assign(&group);
    Ok(CaseAnswer {
        id,
        assignor: assignor_name,
        result,
    })
}

fn json_str(s: &str) -> String {
    // Serializing a string cannot fail.
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

impl CaseAnswer {
    /// `{"id": ..., "assignment": {member: [[topic, partition], ...]}, "error": null}`, members
    /// in input order; on an error `"assignment": null` and `"error": "Exception: message"`.
    pub fn write_json(&self, out: &mut impl Write) -> std::io::Result<()> {
        let id = serde_json::to_string(&self.id).unwrap_or_else(|_| "null".into());
        write!(out, "{{\"id\":{id},\"assignment\":")?;
        match &self.result {
            Ok(assignment) => {
                out.write_all(b"{")?;
                let mut escaped: BTreeMap<&str, String> = BTreeMap::new();
                for (i, (member, partitions)) in assignment.iter().enumerate() {
                    if i > 0 {
                        out.write_all(b",")?;
                    }
                    write!(out, "{}:[", json_str(member))?;
                    for (j, (topic, p)) in partitions.iter().enumerate() {
                        let t = escaped
                            .entry(topic.as_str())
                            .or_insert_with(|| json_str(topic));
                        write!(out, "{}[{t},{p}]", if j > 0 { "," } else { "" })?;
                    }
                    out.write_all(b"]")?;
                }
                writeln!(out, "}},\"error\":null}}")
            }
            Err(e) => writeln!(out, "null,\"error\":{}}}", json_str(&e.java_message())),
        }
    }

    /// A table: member, count, partitions (runs joined), and what waits for revocation.
    pub fn write_pretty(&self, out: &mut impl Write) -> std::io::Result<()> {
        writeln!(out, "case {} ({})", self.id, self.assignor)?;
        match &self.result {
            Ok(assignment) => {
                let rows = assignment.iter().map(|(member, partitions)| {
                    vec![
                        member.to_string(),
                        partitions.len().to_string(),
                        compact_partitions(partitions.iter()),
                    ]
                });
                table::write(out, &["member", "count", "partitions"], rows)?;
                let pending = assignment.pending_revocation();
                if !pending.is_empty() {
                    writeln!(
                        out,
                        "pending revocation: {}",
                        compact_partitions(pending.iter())
                    )?;
                }
            }
            Err(e) => writeln!(out, "error: {}", e.java_message())?,
        }
        writeln!(out)
    }
}

/// `t0:0-2,5 t1:1`: partitions grouped by topic, runs of numbers joined.
fn compact_partitions<'a>(partitions: impl Iterator<Item = (&'a Topic, i32)>) -> String {
    let mut groups: Vec<(&Topic, Vec<(i32, i32)>)> = Vec::new();
    for (topic, p) in partitions {
        match groups.last_mut() {
            Some((t, runs)) if *t == topic => match runs.last_mut() {
                Some((_, end)) if end.checked_add(1) == Some(p) => *end = p,
                _ => runs.push((p, p)),
            },
            _ => groups.push((topic, vec![(p, p)])),
        }
    }
    let run = |&(a, b): &(i32, i32)| match b - a {
        0 => a.to_string(),
        1 => format!("{a},{b}"),
        _ => format!("{a}-{b}"),
    };
    groups
        .iter()
        .map(|(t, runs)| format!("{t}:{}", runs.iter().map(run).collect::<Vec<_>>().join(",")))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(line: &str) -> String {
        let case: Value = serde_json::from_str(line).unwrap();
        let answer = answer(line, &case, &AssignorRegistry::default()).unwrap();
        let mut out = Vec::new();
        answer.write_json(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn members_keep_their_written_order() {
        let out = run(
            r#"{"id":"x","assignor":"range","partitions_per_topic":{"t0":3},"members":{"zz":{"topics":["t0"]},"aa":{"topics":["t0"],"owned":[],"generation":null,"rack":null,"group_instance_id":null}},"partition_racks":null,"expected":{}}"#,
        );
        assert_eq!(
            out,
            "{\"id\":\"x\",\"assignment\":{\"zz\":[[\"t0\",2]],\"aa\":[[\"t0\",0],[\"t0\",1]]},\"error\":null}\n"
        );
    }

    #[test]
    fn kafka_errors_are_reported_in_the_error_field() {
        let out = run(
            r#"{"id":7,"assignor":"sticky","partitions_per_topic":{"t0":3},"members":{},"partition_racks":null}"#,
        );
        assert_eq!(
            out,
            "{\"id\":7,\"assignment\":null,\"error\":\"ArithmeticException: / by zero\"}\n"
        );
    }

    #[test]
    fn malformed_cases_name_the_problem() {
        let registry = AssignorRegistry::default();
        let err = |line: &str| {
            let case: Value = serde_json::from_str(line).unwrap();
            answer(line, &case, &registry).unwrap_err().0
        };
        assert!(
            err(r#"{"id":1,"assignor":"nope","partitions_per_topic":{},"members":{}}"#)
                .contains("unknown assignor `nope`")
        );
        assert!(
            err(r#"{"id":1,"assignor":"range","partitions_per_topic":{}}"#)
                .contains("missing field `members`")
        );
        assert!(
            err(r#"{"id":1,"assignor":"range","partitions_per_topic":{"t":-1},"members":{}}"#)
                .contains("-1")
        );
        assert!(
            err(r#"{"id":1,"assignor":"range","partitions_per_topic":{},"members":{"a":{"owned":[["t"]]}}}"#)
                .contains("invalid length 1")
        );
        assert!(err(r#"{"assignor":"range"}"#).contains("missing field `id`"));
    }

    #[test]
    fn absurd_partition_counts_are_refused_before_anything_is_built() {
        let registry = AssignorRegistry::default();
        let err = |line: &str| {
            let case: Value = serde_json::from_str(line).unwrap();
            answer(line, &case, &registry).unwrap_err().0
        };
        let case = |assignor: &str, counts: &str, members: &str| {
            format!(
                r#"{{"id":1,"assignor":"{assignor}","partitions_per_topic":{counts},"members":{members}}}"#
            )
        };
        let one = r#"{"a":{"topics":["t","u"]}}"#;
        let e = err(&case("broadcast", r#"{"t":3000000000}"#, one));
        assert!(e.contains("`t`: 3000000000 is more than 2147483647"), "{e}");
        let e = err(&case("range", r#"{"t":-5}"#, one));
        assert!(e.contains("`t`: -5 is negative"), "{e}");
        let e = err(&case("range", r#"{"t":6000000,"u":4000001}"#, one));
        assert!(
            e.contains("10000001 partitions in all; at most 10000000"),
            "{e}"
        );
        // 3 members x 4,000,000 partitions: fine for range, too big an answer for broadcast.
        let three = r#"{"a":{"topics":["t"]},"b":{"topics":["t"]},"c":{"topics":["t"]}}"#;
        let e = err(&case("broadcast", r#"{"t":4000000}"#, three));
        assert!(e.contains("12000000 member-partition pairs"), "{e}");
        let line = case("broadcast", r#"{"t":2}"#, three);
        assert_eq!(parse_group(&line).map(|(_, g)| broadcast_pairs(&g)), Ok(6));
    }

    #[test]
    fn pretty_lists_runs_and_pending_revocations() {
        let line = r#"{"id":"p","assignor":"cooperative_sticky","partitions_per_topic":{"t":4},"members":{"a":{"topics":["t"],"owned":[["t",0],["t",1],["t",2],["t",3]],"generation":1},"b":{"topics":["t"]}}}"#;
        let case: Value = serde_json::from_str(line).unwrap();
        let answer = answer(line, &case, &AssignorRegistry::default()).unwrap();
        let mut out = Vec::new();
        answer.write_pretty(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().eq(["a", "2", "t:0,1"])),
            "{text}"
        );
        assert!(text.contains("pending revocation: t:2,3"), "{text}");
    }

    #[test]
    fn duplicate_members_are_an_error() {
        let out = run(
            r#"{"id":1,"assignor":"range","partitions_per_topic":{"t":1},"members":{"a":{"topics":["t"]},"a":{"topics":["t"]}}}"#,
        );
        assert!(
            out.contains("\"error\":\"IllegalArgumentException: member `a` appears more than once"),
            "{out}"
        );
    }
}
