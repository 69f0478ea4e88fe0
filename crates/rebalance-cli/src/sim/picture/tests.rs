use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use rebalance_core::strategy::{Params, StrategyRegistry};
use rebalance_core::{ClientId, MessageQueue};
use rebalance_runtime::RemovalReason;
use rebalance_runtime::allocation::Allocation;

use super::*;
use crate::sim::engine::{Change, Record, Status};
use crate::sim::scenario::parse_events;
use crate::sim::summarize;

/// The attributes of every element of the picture whose class list holds `class`.
pub(crate) fn elements(svg: &str, class: &str) -> Vec<HashMap<String, String>> {
    let mut found = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find('<') {
        let tail = &rest[start + 1..];
        let end = tail.find('>').unwrap_or(tail.len());
        let attrs = attributes(&tail[..end]);
        if attrs
            .get("class")
            .is_some_and(|c| c.split(' ').any(|c| c == class))
        {
            found.push(attrs);
        }
        rest = &tail[end..];
    }
    found
}

fn attributes(tag: &str) -> HashMap<String, String> {
    let mut attrs = HashMap::new();
    let mut rest = tag;
    while let Some(eq) = rest.find("=\"") {
        let name = rest[..eq]
            .rsplit(' ')
            .next()
            .unwrap_or_default()
            .to_string();
        let value_start = &rest[eq + 2..];
        let close = value_start.find('"').expect("a closed attribute");
        attrs.insert(name, value_start[..close].to_string());
        rest = &value_start[close + 1..];
    }
    attrs
}

fn q(i: i32) -> MessageQueue {
    MessageQueue::new("T", "b", i)
}

fn id(i: usize) -> ClientId {
    format!("c{i}").as_str().into()
}

fn record(t_ms: u64, client: usize, added: bool, queues: &[i32]) -> Record {
    Record {
        t_ms,
        client: id(client),
        change: if added {
            Change::Added
        } else {
            Change::Removed(RemovalReason::Reassigned)
        },
        topic: "T".into(),
        queues: queues.iter().map(|&i| q(i)).collect(),
    }
}

fn end(index: usize, status: Status, stopped_ms: Option<u64>) -> ClientEnd {
    ClientEnd {
        client: id(index),
        index,
        status,
        owned: Vec::new(),
        rounds: 1,
        started_ms: 0,
        stopped_ms,
    }
}

fn config(consumers: usize, events: &str, duration_ms: u64) -> Config {
    Config {
        allocation: Allocation::Strategy(
            StrategyRegistry::default()
                .build("averagely", &Params::new())
                .unwrap(),
        ),
        topics: 1,
        queues: 3,
        brokers: 1,
        consumers,
        events: parse_events(events).unwrap(),
        duration: Duration::from_millis(duration_ms),
        seed: 0,
        settle: None,
        traffic: None,
    }
}

fn hand_over() -> (Config, Outcome) {
    let outcome = Outcome {
        records: vec![
            record(100, 0, true, &[0, 1]),
            record(1000, 1, true, &[1]),
            record(1500, 0, false, &[1]),
            record(2000, 1, true, &[2]),
        ],
        clients: vec![
            end(0, Status::Running, None),
            end(1, Status::Crashed, Some(3000)),
        ],
        queues: [q(0), q(1), q(2)].into(),
        duration_ms: 4000,
        messages: None,
    };
    let config = config(1, "join@900ms,crash:1@3s,ns-down@3500ms", 4000);
    (config, outcome)
}

#[test]
fn every_hold_is_a_stretch_and_gaps_overlaps_and_events_are_marked() {
    let (config, outcome) = hand_over();
    let svg = draw(&config, &outcome, &summarize(&outcome));
    assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
    let holds: BTreeSet<(String, String, String, String)> = elements(&svg, "hold")
        .into_iter()
        .map(|a| {
            (
                a["data-queue"].clone(),
                a["data-client"].clone(),
                a["data-from-ms"].clone(),
                a["data-to-ms"].clone(),
            )
        })
        .collect();
    let expect = |queue: i32, client: usize, from: u64, to: u64| {
        (
            queue_name(&q(queue)),
            client.to_string(),
            from.to_string(),
            to.to_string(),
        )
    };
    assert_eq!(
        holds,
        [
            expect(0, 0, 100, 4000),
            expect(1, 0, 100, 1500),
            expect(1, 1, 1000, 3000),
            expect(2, 1, 2000, 3000),
        ]
        .into()
    );
    let spans = |class: &str| -> BTreeSet<(String, String, String)> {
        elements(&svg, class)
            .into_iter()
            .map(|a| {
                (
                    a["data-queue"].clone(),
                    a["data-from-ms"].clone(),
                    a["data-to-ms"].clone(),
                )
            })
            .collect()
    };
    let span =
        |queue: i32, from: u64, to: u64| (queue_name(&q(queue)), from.to_string(), to.to_string());
    assert_eq!(
        spans("unowned"),
        [
            span(0, 0, 100),
            span(1, 0, 100),
            span(1, 3000, 4000),
            span(2, 0, 2000),
            span(2, 3000, 4000),
        ]
        .into()
    );
    assert_eq!(spans("doubled"), [span(1, 1000, 1500)].into());
    assert_eq!(elements(&svg, "doubled")[0]["data-clients"], "0,1");
    let events: Vec<(String, String)> = elements(&svg, "event")
        .into_iter()
        .map(|a| (a["data-event"].clone(), a["data-at-ms"].clone()))
        .collect();
    assert_eq!(
        events,
        [
            ("join:1".to_string(), "900".to_string()),
            ("crash:1".into(), "3000".into()),
            ("ns-down".into(), "3500".into()),
        ]
    );
    let band = &elements(&svg, "ns-down")[0];
    assert_eq!(
        (band["data-from-ms"].as_str(), band["data-to-ms"].as_str()),
        ("3500", "4000")
    );
    assert!(svg.contains("crashed"), "a hold ended by a crash says so");
    assert_eq!(elements(&svg, "legend-client").len(), 2);
    assert!(elements(&svg, "note").is_empty(), "nothing was left out");
    assert!(
        elements(&svg, "lag").is_empty(),
        "no messages, no lag panel"
    );
}

#[test]
fn a_huge_run_is_capped_and_bounded() {
    // 1,000 queues; 300 clients each taking every queue in turn, 40,000 times over an hour.
    let queues: Vec<MessageQueue> = (0..1000).map(q).collect();
    let mut records = Vec::new();
    let mut holder = vec![None::<usize>; 1000];
    for step in 0..40_000u64 {
        let queue = (step * 7919 % 1000) as i32;
        let client = (step % 300) as usize;
        let t_ms = step * 90;
        if let Some(old) = holder[queue as usize] {
            records.push(record(t_ms, old, false, &[queue]));
        }
        records.push(record(t_ms + 5, client, true, &[queue]));
        holder[queue as usize] = Some(client);
    }
    let outcome = Outcome {
        records,
        clients: (0..300).map(|i| end(i, Status::Running, None)).collect(),
        queues: queues.iter().cloned().collect(),
        duration_ms: 3_600_000,
        messages: None,
    };
    let config = config(
        300,
        "join@10s,leave:3@20s,crash:4@30s,ns-down@40s,ns-up@50s",
        3_600_000,
    );
    let svg = draw(&config, &outcome, &summarize(&outcome));
    assert!(svg.len() < 2_000_000, "{} bytes", svg.len());
    let rows: BTreeSet<String> = elements(&svg, "hold")
        .into_iter()
        .map(|a| a["data-queue"].clone())
        .collect();
    assert_eq!(rows.len(), MAX_ROWS);
    let shapes = elements(&svg, "hold").len()
        + elements(&svg, "unowned").len()
        + elements(&svg, "doubled").len();
    assert!(shapes <= SHAPE_BUDGET, "{shapes}");
    assert_eq!(elements(&svg, "legend-client").len(), MAX_LEGEND_CLIENTS);
    let notes: Vec<String> = svg
        .lines()
        .filter(|l| l.contains(r#"class="note""#))
        .map(str::to_string)
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("40 of 1000 queues shown")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.contains("more clients")),
        "{notes:?}"
    );
    assert_eq!(elements(&svg, "event").len(), 5);
}

#[test]
fn a_row_with_too_many_changes_is_drawn_by_columns() {
    // One queue flipping between two clients every 10 ms for 100 s, with a 1 ms gap each time
    // and a double ownership at 50 s.
    let mut records = Vec::new();
    for k in 0..10_000u64 {
        let t = k * 10;
        records.push(record(t, (k % 2) as usize, true, &[0]));
        records.push(record(t + 9, (k % 2) as usize, false, &[0]));
    }
    records.push(record(50_003, 1, true, &[0]));
    records.push(record(50_004, 1, false, &[0]));
    records.sort_by_key(|r| r.t_ms);
    let outcome = Outcome {
        records,
        clients: vec![end(0, Status::Running, None), end(1, Status::Running, None)],
        queues: [q(0)].into(),
        duration_ms: 100_000,
        messages: None,
    };
    let svg = draw(&config(2, "", 100_000), &outcome, &summarize(&outcome));
    assert!(svg.len() < 200_000, "{} bytes", svg.len());
    let holds = elements(&svg, "hold");
    assert!(holds.iter().all(|a| a["class"] == "hold coarse"));
    assert!(!elements(&svg, "unowned").is_empty(), "the gaps still show");
    let doubled = elements(&svg, "doubled");
    assert_eq!(doubled.len(), 1, "one column with double ownership");
    let (from, to): (u64, u64) = (
        doubled[0]["data-from-ms"].parse().unwrap(),
        doubled[0]["data-to-ms"].parse().unwrap(),
    );
    assert!(from <= 50_003 && 50_004 <= to, "{from}..{to}");
    assert!(svg.contains("drawn by columns"));
}

#[test]
fn the_lag_panel_shows_the_peak() {
    use crate::sim::traffic::{Delivery, MessageOutcome, Produced, Traffic};
    let (mut config, mut outcome) = hand_over();
    config.traffic = Some(Traffic {
        rate: 1.0,
        consume_time: Duration::ZERO,
        fail_every: None,
        orderly: false,
        exclusive_hand_off: false,
        drain: Duration::from_millis(1000),
        pop: None,
    });
    config.duration = Duration::from_millis(3000);
    let produced = |k: u64| Produced {
        msg_id: format!("m{k}"),
        topic: "T".into(),
        t_ms: k * 100,
    };
    outcome.messages = Some(MessageOutcome {
        produced: (0..5).map(produced).collect(),
        deliveries: vec![Delivery {
            t_ms: 3500,
            client: id(0),
            topic: "T".into(),
            queue: q(0),
            offset: 0,
            msg_id: "m0".into(),
            reconsume_times: 0,
            failed: false,
        }],
        dead_lettered: Vec::new(),
        send_failures: 0,
    });
    let svg = draw(&config, &outcome, &summarize(&outcome));
    let lag = elements(&svg, "lag");
    assert_eq!(lag.len(), 1);
    assert_eq!(lag[0]["data-max"], "5");
    assert_eq!(elements(&svg, "production-stops").len(), 1);
    assert!(
        svg.contains("5 sent · 1 consumed · 4 lost"),
        "the message counts are in the subtitle"
    );
}

#[test]
fn times_read_well() {
    assert_eq!(fmt_ms(0), "0s");
    assert_eq!(fmt_ms(1500), "1.5s");
    assert_eq!(fmt_ms(90_000), "1m30s");
    assert_eq!(fmt_ms(120_000), "2m");
    assert_eq!(fmt_ms(7_200_000), "2h");
    assert_eq!(fmt_ms(3_660_250), "1h1m0.25s");
    assert_eq!(tick_step(60_000), 10_000);
    assert_eq!(tick_step(3_600_000), 600_000);
    assert_eq!(tick_step(604_800_000), 86_400_000);
}
