//! The totals, the ratio and the table: what `--sample` and the table report, checked against
//! the rows they are made of.

use super::*;

fn args(extra: &[&str]) -> CompareArgs {
    crate::test_args::parse("compare", extra).unwrap_or_else(|e| panic!("{extra:?}: {e}"))
}

/// 12 queues over 4 members (blocks of 3 under averagely), then `events`.
fn twelve_over_four(events: &str, extra: &[&str]) -> CompareArgs {
    let base = ["--queues", "12", "--consumers", "4", "--events", events];
    args(&[&base[..], extra].concat())
}

fn output(args: &CompareArgs) -> (String, Vec<Summary>) {
    let mut out = Vec::new();
    let summaries = run(args, &mut out).unwrap();
    (String::from_utf8(out).unwrap(), summaries)
}

fn refusal(args: &CompareArgs) -> String {
    match run(args, &mut Vec::new()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("accepted: {args:?}"),
    }
}

#[test]
fn totals_add_up_the_rows_and_the_ratio_is_moved_over_the_minimum() {
    let a = twelve_over_four(
        "leave:0,join,join",
        &["--strategies", "averagely,consistent_hash", "--json"],
    );
    let (text, summaries) = output(&a);
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(summaries.len(), 2);
    for s in &summaries {
        let own: Vec<&Value> = rows
            .iter()
            .filter(|r| r["strategy"] == s.strategy)
            .collect();
        assert_eq!(own.len(), 4, "start and three events");
        let sum = |key: &str| own.iter().map(|r| r[key].as_u64().unwrap()).sum::<u64>();
        let worst = own.iter().map(|r| r["spread"].as_u64().unwrap()).max();
        assert_eq!(s.moved as u64, sum("moved"), "{s:?}");
        assert_eq!(s.min_moves as u64, sum("min_moves"), "{s:?}");
        assert_eq!(Some(s.worst_spread as u64), worst, "{s:?}");
        assert!(s.min_moves > 0);
        assert_eq!(s.ratio(), Some(s.moved as f64 / s.min_moves as f64));
    }
    // Hand-worked for averagely: the leave moves 6 (minimum 3), each join 3 or more.
    assert_eq!(rows[1]["moved"], 6);
}

#[test]
fn the_ratio_needs_a_minimum() {
    let mut s = Summary::default();
    assert_eq!((s.ratio(), s.ratio_text()), (None, "-".to_string()));
    s.moved = 5;
    s.min_moves = 2;
    assert_eq!(
        (s.ratio(), s.ratio_text()),
        (Some(2.5), "2.50x".to_string())
    );
}

#[test]
fn the_table_shows_every_step_and_the_totals() {
    let a = twelve_over_four("leave:0", &["--strategies", "averagely"]);
    let (text, _) = output(&a);
    let words = |line: &str| {
        line.split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let lines: Vec<Vec<String>> = text.lines().map(words).filter(|w| !w.is_empty()).collect();
    assert!(lines[0].contains(&"minimum".to_string()), "{text}");
    assert!(
        lines.iter().any(|w| w[..3] == ["averagely", "0", "start"]),
        "{text}"
    );
    // 12 queues in blocks of 3 over 4, then 4 over 3: 6 moved where 3 had to.
    assert!(
        lines
            .iter()
            .any(|w| w[..3] == ["averagely", "1", "leave:0"] && w[6..] == ["6", "3"]),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|w| w[..4] == ["averagely", "6", "3", "2.00x"]),
        "the totals: {text}"
    );
}

#[test]
fn sample_totals_are_the_sum_of_their_regimes() {
    let mut a = args(&[
        "--queues",
        "300",
        "--consumers",
        "40",
        "--sample",
        "20",
        "--seed",
        "3",
        "--strategies",
        "balanced_sticky,averagely",
        "--json",
    ]);
    let (text, summaries) = output(&a);
    for (line, s) in text.lines().zip(&summaries) {
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["strategy"], s.strategy.as_str());
        assert_eq!(v["moved"], s.moved);
        assert_eq!(v["min_moves"], s.min_moves);
        assert!(s.min_moves > 0 && s.moved >= s.min_moves, "{v}");
        let ratio = (s.moved as f64 / s.min_moves as f64 * 1000.0).round() / 1000.0;
        assert_eq!(v["ratio"].as_f64(), Some(ratio), "{v}");
        let regimes = v["by_queues_per_member"].as_object().unwrap();
        assert_eq!(regimes.len(), 4);
        let sum = |key: &str| {
            regimes
                .values()
                .map(|r| r[key].as_u64().unwrap())
                .sum::<u64>()
        };
        assert_eq!(sum("moved"), s.moved as u64, "{v}");
        assert_eq!(sum("min_moves"), s.min_moves as u64, "{v}");
    }
    assert_eq!(text.lines().count(), 2);
    // The table reports the same totals.
    a.json = false;
    let (table, _) = output(&a);
    for s in &summaries {
        let row = table
            .lines()
            .find(|l| l.starts_with(s.strategy.as_str()))
            .unwrap_or_else(|| panic!("{table}"));
        let cells: Vec<&str> = row.split_whitespace().collect();
        let expected = [s.moved.to_string(), s.min_moves.to_string(), s.ratio_text()];
        assert_eq!(cells[1..4], expected, "{table}");
    }
}

#[test]
fn a_chart_is_ignored_with_sample_and_said_so() {
    let with = args(&[
        "--queues",
        "16",
        "--consumers",
        "2",
        "--sample",
        "1",
        "--svg",
        "out.svg",
    ]);
    let warnings = warnings(&with);
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains("--svg out.svg"), "{warnings:?}");
    let without = args(&["--queues", "16", "--consumers", "2", "--svg", "out.svg"]);
    assert!(super::warnings(&without).is_empty());
}

#[test]
fn sizes_are_checked_before_anything_is_built() {
    // Arguments built in code skip the command line's own bounds; `run` checks them again.
    let base = args(&[
        "--queues",
        "16",
        "--consumers",
        "2",
        "--events",
        "leave:0,join",
    ]);
    let zero = CompareArgs {
        queues: 0,
        ..base.clone()
    };
    assert!(refusal(&zero).contains("at least 1"));
    let nobody = CompareArgs {
        consumers: 0,
        ..base.clone()
    };
    assert!(refusal(&nobody).contains("at least 1"));
    let huge = CompareArgs {
        queues: limits::MAX_QUEUES + 1,
        ..base.clone()
    };
    assert!(refusal(&huge).contains("--queues must be at most"));
    // The joiners count: the group grows past the limit only with them.
    let crowd = CompareArgs {
        consumers: limits::MAX_CONSUMERS,
        ..base.clone()
    };
    let refused = refusal(&crowd);
    assert!(
        refused.contains("1 join(s) make 1000001 members"),
        "{refused}"
    );
    let samples = CompareArgs {
        events: None,
        sample: Some(limits::MAX_SAMPLES + 1),
        ..base
    };
    assert!(refusal(&samples).contains("--sample must be at most"));
}

#[test]
fn samples_draw_groups_across_the_whole_range_and_alternate_joins_and_leaves() {
    let a = args(&["--queues", "11", "--consumers", "4", "--sample", "1"]);
    let mut rng = SplitMix64::new(7);
    let mut queues = std::collections::BTreeSet::new();
    let mut members = std::collections::BTreeSet::new();
    for k in 0..400 {
        let (q, n, event) = draw(&a, k, &mut rng);
        queues.insert(q);
        members.insert(n);
        let expected = if k % 2 == 0 {
            Event::Join
        } else {
            Event::Leave(None)
        };
        assert_eq!(event, expected, "sample {k}");
    }
    assert_eq!(queues.into_iter().collect::<Vec<_>>(), [8, 9, 10, 11]);
    assert_eq!(members.into_iter().collect::<Vec<_>>(), [2, 3, 4]);
}

#[test]
fn brackets_go_by_queues_per_member() {
    assert_eq!(regime(15, 4), 0, "3.75 per member: <4");
    assert_eq!(regime(16, 4), 1, "4 per member: 4-16");
    assert_eq!(regime(63, 4), 1);
    assert_eq!(regime(64, 4), 2, "16 per member: 16-64");
    assert_eq!(regime(255, 4), 2);
    assert_eq!(regime(256, 4), 3, "64 per member: >=64");
    assert_eq!(regime(1_000_000, 2), 3);
}

#[test]
fn sampling_needs_room_to_draw() {
    for (queues, consumers) in [("7", "2"), ("8", "1")] {
        let a = args(&[
            "--queues",
            queues,
            "--consumers",
            consumers,
            "--sample",
            "1",
        ]);
        assert!(
            refusal(&a).contains("--sample needs"),
            "{queues} x {consumers}"
        );
    }
    let smallest = args(&["--queues", "8", "--consumers", "2", "--sample", "2"]);
    let (_, summaries) = output(&smallest);
    assert!(summaries.iter().all(|s| s.min_moves > 0), "{summaries:?}");
}
