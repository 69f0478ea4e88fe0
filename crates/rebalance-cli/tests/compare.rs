//! `rebalance compare`'s numbers on cases small enough to work out by hand: the spread counts
//! members that own nothing, `moved` and `min_moves` compare each plan with the one before the
//! event, and `max_over_mean` keeps three decimals.

mod common;

use serde_json::Value;

fn compare(queues: &str, consumers: &str, events: &str) -> Vec<Value> {
    let run = common::rebalance(
        &[
            "compare",
            "--queues",
            queues,
            "--consumers",
            consumers,
            "--events",
            events,
            "--strategies",
            "averagely",
            "--json",
        ],
        None,
    );
    assert!(run.success, "{}", run.stderr);
    run.lines
}

#[test]
fn a_leave_moves_the_departed_share_at_least() {
    // 12 queues over 4 members in blocks of 3; the first member leaves and the blocks of 4
    // shift: 3 queues change owner at the front, 2 and 1 further on.
    let lines = compare("12", "4", "leave:0,join");
    assert_eq!(lines.len(), 3);
    let start = &lines[0];
    assert_eq!(start["event"], "start");
    assert_eq!(
        (&start["moved"], &start["min_moves"]),
        (&0.into(), &0.into())
    );
    let leave = &lines[1];
    assert_eq!(leave["event"], "leave:0");
    assert_eq!(leave["members"], 3);
    assert_eq!(leave["spread"], 0);
    assert_eq!(leave["max_over_mean"].as_f64(), Some(1.0));
    assert_eq!(leave["moved"], 6, "{leave}");
    assert_eq!(
        leave["min_moves"], 3,
        "the departed member's 3 queues: {leave}"
    );
    // A join to 3 balanced members of 4 must take 12 div 4 = 3 queues from them.
    assert_eq!(lines[2]["min_moves"], 3, "{}", lines[2]);
}

#[test]
fn members_owning_nothing_count_in_the_spread() {
    // 3 queues over 4 members: shares 1, 1, 1, 0; the mean is 3/4.
    let lines = compare("3", "4", "join");
    let start = &lines[0];
    assert_eq!(start["spread"], 1, "{start}");
    assert_eq!(start["max_over_mean"].as_f64(), Some(1.333), "{start}");
    let join = &lines[1];
    assert_eq!(join["members"], 5);
    assert_eq!(join["spread"], 1, "{join}");
    assert_eq!(join["max_over_mean"].as_f64(), Some(1.667), "{join}");
}
