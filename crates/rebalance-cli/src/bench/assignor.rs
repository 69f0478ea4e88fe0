//! `rebalance bench --assignor`: one group assignment on the Kafka reference workload, initially
//! or after a member left.

use std::fmt;
use std::str::FromStr;

use rebalance_core::assignor::{AssignorRegistry, GroupAssignment, GroupSubscription};
use rebalance_core::strategy::Params;
use serde_json::{Value, json};

use super::BenchError;
use super::strategy::human;
use super::timing::{Measured, Sampling, measure, round3};
use crate::{limits, workload};

/// Which assignment is timed (on the command line, `initial` or `member_left`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Scenario {
    /// The first assignment of a fresh group.
    #[default]
    Initial,
    /// The re-assignment after `consumer-{M/2}` left, everyone else owning its first
    /// assignment at generation 1.
    #[value(name = "member_left", alias = "member-left")]
    MemberLeft,
}

impl Scenario {
    /// The name on the command line and in the JSON line.
    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::Initial => "initial",
            Scenario::MemberLeft => "member_left",
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "initial" => Ok(Scenario::Initial),
            "member_left" | "member-left" => Ok(Scenario::MemberLeft),
            _ => Err(format!("unknown scenario `{s}` (initial, member_left)")),
        }
    }
}

/// An assignor benchmark case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignorCase {
    /// The assignor's registered name.
    pub assignor: String,
    /// Topics.
    pub topics: usize,
    /// Partitions per topic.
    pub partitions: u32,
    /// Members at the start.
    pub members: usize,
    /// What is timed.
    pub scenario: Scenario,
    /// Seeds the topic names.
    pub seed: u64,
    /// Exactly this many samples, or fitted into about a second.
    pub runs: Option<usize>,
}

/// What an assignor benchmark measured.
#[derive(Debug, Clone, PartialEq)]
pub struct AssignorResult {
    /// The case.
    pub case: AssignorCase,
    /// The timed assignment (median, µs).
    pub assign: Measured,
    /// Partitions that a remaining member owned but lost (0 for `initial`).
    pub moved: usize,
    /// Partitions the departed member owned (0 for `initial`).
    pub orphaned: usize,
    /// The smallest and largest share of the timed assignment.
    pub sizes: (usize, usize),
}

/// Runs an assignor benchmark case.
pub fn run(case: &AssignorCase, registry: &AssignorRegistry) -> Result<AssignorResult, BenchError> {
    if case.topics == 0 || case.partitions == 0 || case.members == 0 {
        return Err(BenchError::Arguments(
            "--topics, --partitions and --members must be at least 1".into(),
        ));
    }
    check_sizes(case)?;
    let assignor = registry.build(&case.assignor, &Params::new())?;
    let topics = workload::topic_names(case.topics, case.seed);
    let group = workload::kafka_group(&topics, case.partitions, case.members);
    let assign_error = |e| BenchError::Assign(case.assignor.clone(), e);
    let (timed, orphaned) = match case.scenario {
        Scenario::Initial => (group, 0),
        Scenario::MemberLeft => {
            let first = assignor.assign(&group).map_err(assign_error)?;
            let leaving = workload::leaving_member(case.members);
            let orphaned = first.get(&leaving).map_or(0, |p| p.len());
            (
                workload::after_assignment(&group, &first, 1, &leaving),
                orphaned,
            )
        }
    };
    if timed.members.is_empty() {
        return Err(BenchError::Arguments(
            "member_left needs at least two members".into(),
        ));
    }
    let mut last: Option<GroupAssignment> = None;
    let assign = measure(Sampling::within_a_second(9, case.runs), || {
        assignor.assign(&timed).map(|a| {
            let n = a.assigned_count();
            last = Some(a);
            n
        })
    })
    .map_err(assign_error)?;
    let result = last.unwrap_or_else(|| GroupAssignment::from_lists(Vec::<(String, _)>::new()));
    let shares: Vec<usize> = result.iter().map(|(_, p)| p.len()).collect();
    let sizes = (
        shares.iter().copied().min().unwrap_or(0),
        shares.iter().copied().max().unwrap_or(0),
    );
    Ok(AssignorResult {
        moved: workload::moved(&timed, &result),
        orphaned,
        sizes,
        assign,
        case: case.clone(),
    })
}

/// Refuses a workload above the limits of [`limits`] before anything is built.
fn check_sizes(case: &AssignorCase) -> Result<(), BenchError> {
    let bad = |m: String| Err(BenchError::Arguments(m));
    if case.topics > limits::MAX_TOPICS || case.members > limits::MAX_CONSUMERS {
        return bad(format!(
            "at most {} --topics and {} --members",
            limits::MAX_TOPICS,
            limits::MAX_CONSUMERS
        ));
    }
    let total = case.topics.saturating_mul(case.partitions as usize);
    if total > limits::MAX_QUEUES {
        return bad(format!(
            "--topics {} x --partitions {} is more than {} partitions in all",
            case.topics,
            case.partitions,
            limits::MAX_QUEUES
        ));
    }
    if case.assignor == "broadcast"
        && total.saturating_mul(case.members) > limits::MAX_BENCH_BROADCAST_PAIRS
    {
        return bad(format!(
            "broadcast gives every member every partition: --members {} x {total} partitions \
             is more than {} member-partition pairs",
            case.members,
            limits::MAX_BENCH_BROADCAST_PAIRS
        ));
    }
    super::check_runs(case.runs)
}

impl AssignorResult {
    /// The JSON line: `{"assignor", "topics", "partitions", "members", "scenario", "median_us",
    /// "moved"}`, then `runs`, `orphaned`, `min_share`, `max_share` and `seed`.
    pub fn to_json(&self) -> Value {
        json!({
            "assignor": self.case.assignor,
            "topics": self.case.topics,
            "partitions": self.case.partitions,
            "members": self.case.members,
            "scenario": self.case.scenario.as_str(),
            "median_us": round3(self.assign.median_us),
            "moved": self.moved,
            "runs": self.assign.runs,
            "orphaned": self.orphaned,
            "min_share": self.sizes.0,
            "max_share": self.sizes.1,
            "seed": self.case.seed,
        })
    }

    /// One line for people.
    pub fn to_text(&self) -> String {
        format!(
            "{} {} topics={} partitions={} members={}: {} (median of {}), moved {}, orphaned {}, shares {}..{}",
            self.case.assignor,
            self.case.scenario,
            self.case.topics,
            self.case.partitions,
            self.case.members,
            human(self.assign.median_us),
            self.assign.runs,
            self.moved,
            self.orphaned,
            self.sizes.0,
            self.sizes.1,
        )
    }
}

/// Builds the group a case times, for other harnesses (criterion) that time it themselves.
pub fn timed_group(
    case: &AssignorCase,
    registry: &AssignorRegistry,
) -> Result<GroupSubscription, BenchError> {
    check_sizes(case)?;
    let assignor = registry.build(&case.assignor, &Params::new())?;
    let topics = workload::topic_names(case.topics, case.seed);
    let group = workload::kafka_group(&topics, case.partitions, case.members);
    match case.scenario {
        Scenario::Initial => Ok(group),
        Scenario::MemberLeft => {
            let first = assignor
                .assign(&group)
                .map_err(|e| BenchError::Assign(case.assignor.clone(), e))?;
            Ok(workload::after_assignment(
                &group,
                &first,
                1,
                &workload::leaving_member(case.members),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_left_on_a_small_group_moves_nothing_with_sticky() {
        let case = AssignorCase {
            assignor: "sticky".into(),
            topics: 3,
            partitions: 8,
            members: 5,
            scenario: Scenario::MemberLeft,
            seed: 1,
            runs: Some(3),
        };
        let r = run(&case, &AssignorRegistry::default()).unwrap();
        assert_eq!(r.moved, 0);
        assert!(r.orphaned > 0);
        assert!(r.sizes.1 - r.sizes.0 <= 1);
        let v = r.to_json();
        for key in [
            "assignor",
            "topics",
            "partitions",
            "members",
            "scenario",
            "median_us",
            "moved",
        ] {
            assert!(v.get(key).is_some(), "{key} missing from {v}");
        }
        assert_eq!(v["scenario"], "member_left");
    }

    #[test]
    fn range_reports_what_a_leave_moves_and_the_shares() {
        // 12 partitions over consumer-0..3 in blocks of 3; consumer-2 leaves and the blocks of
        // 4 are 0-3, 4-7, 8-11: consumer-1 loses partition 3, nobody else loses anything.
        let case = |scenario, partitions| AssignorCase {
            assignor: "range".into(),
            topics: 1,
            partitions,
            members: 4,
            scenario,
            seed: 1,
            runs: Some(1),
        };
        let r = run(
            &case(Scenario::MemberLeft, 12),
            &AssignorRegistry::default(),
        )
        .unwrap();
        let v = r.to_json();
        assert_eq!(v["moved"], 1, "{v}");
        assert_eq!(v["orphaned"], 3, "{v}");
        assert_eq!((&v["min_share"], &v["max_share"]), (&4.into(), &4.into()));
        // 10 partitions over 4: shares 3, 3, 2, 2.
        let r = run(&case(Scenario::Initial, 10), &AssignorRegistry::default()).unwrap();
        let v = r.to_json();
        assert_eq!((&v["moved"], &v["orphaned"]), (&0.into(), &0.into()));
        assert_eq!(
            (&v["min_share"], &v["max_share"]),
            (&2.into(), &3.into()),
            "{v}"
        );
    }

    #[test]
    fn scenarios_parse() {
        assert_eq!("initial".parse(), Ok(Scenario::Initial));
        assert_eq!("member_left".parse(), Ok(Scenario::MemberLeft));
        assert!("other".parse::<Scenario>().is_err());
        // The text line names the scenario as the command line does.
        for scenario in [Scenario::Initial, Scenario::MemberLeft] {
            assert_eq!(scenario.to_string().parse(), Ok(scenario));
        }
    }

    /// What criterion times is the group `run` times: after a member left, the others own
    /// their first assignment at generation 1, and the departed member's share is what nobody
    /// owns. The text line names the case and what it found.
    #[test]
    fn the_timed_group_and_the_text_line() {
        let registry = AssignorRegistry::default();
        let case = AssignorCase {
            assignor: "sticky".into(),
            topics: 3,
            partitions: 8,
            members: 5,
            scenario: Scenario::MemberLeft,
            seed: 1,
            runs: Some(1),
        };
        let group = timed_group(&case, &registry).unwrap();
        assert_eq!(group.members.len(), 4);
        assert!(
            group
                .members
                .iter()
                .all(|m| m.member_id.as_str() != "consumer-2")
        );
        assert!(group.members.iter().all(|m| m.generation == Some(1)));
        let owned: usize = group.members.iter().map(|m| m.owned.len()).sum();
        let r = run(&case, &registry).unwrap();
        assert_eq!(owned + r.orphaned, 24);
        let initial = AssignorCase {
            scenario: Scenario::Initial,
            ..case.clone()
        };
        let fresh = timed_group(&initial, &registry).unwrap();
        assert_eq!(fresh.members.len(), 5);
        assert!(fresh.members.iter().all(|m| m.owned.is_empty()));
        let text = r.to_text();
        assert!(
            text.starts_with("sticky member_left topics=3 partitions=8 members=5:"),
            "{text}"
        );
        assert!(
            text.contains(&format!("moved 0, orphaned {}", r.orphaned)),
            "{text}"
        );
    }

    /// Cases built in code skip the command line's own bounds; `run` checks them again before
    /// building anything.
    #[test]
    fn sizes_are_checked_before_anything_is_built() {
        let registry = AssignorRegistry::default();
        let base = AssignorCase {
            assignor: "range".into(),
            topics: 2,
            partitions: 4,
            members: 3,
            scenario: Scenario::Initial,
            seed: 1,
            runs: Some(1),
        };
        let refusal = |case: AssignorCase| match run(&case, &registry) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted: {case:?}"),
        };
        for empty in [
            AssignorCase {
                topics: 0,
                ..base.clone()
            },
            AssignorCase {
                partitions: 0,
                ..base.clone()
            },
            AssignorCase {
                members: 0,
                ..base.clone()
            },
        ] {
            assert!(refusal(empty).contains("at least 1"));
        }
        let many_topics = AssignorCase {
            topics: limits::MAX_TOPICS + 1,
            ..base.clone()
        };
        assert!(refusal(many_topics).contains("--topics"));
        let many_members = AssignorCase {
            members: limits::MAX_CONSUMERS + 1,
            ..base.clone()
        };
        assert!(refusal(many_members).contains("--members"));
        let many_partitions = AssignorCase {
            topics: 1_000,
            partitions: 20_000,
            ..base.clone()
        };
        assert!(refusal(many_partitions).contains("partitions in all"));
        // Every member gets every partition only under broadcast: 10,000 x 20,000 pairs is too
        // many there, and a small broadcast is fine.
        let wide_broadcast = AssignorCase {
            assignor: "broadcast".into(),
            topics: 10,
            partitions: 1_000,
            members: 20_000,
            ..base.clone()
        };
        assert!(refusal(wide_broadcast).contains("member-partition pairs"));
        let small_broadcast = AssignorCase {
            assignor: "broadcast".into(),
            ..base
        };
        let r = run(&small_broadcast, &registry).unwrap();
        assert_eq!(r.sizes, (8, 8));
    }
}
