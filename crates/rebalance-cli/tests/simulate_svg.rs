//! `rebalance simulate --svg FILE`: the picture shows every stretch a client held a queue (as
//! replayed here from the JSON lines of the same run), the unowned and double-owned time the
//! summary line counts, and the scripted events on the axis; standard output is the same with
//! or without it; a bad path fails at once and a failed run leaves no file.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use serde_json::Value;

const CHURN: &str =
    "join@5s,join@6s,leave:2@10s,crash:3@15s,ns-down@20s,join@30s,ns-up@40s,leave:0@50s";

/// A file in the temporary directory, named for this run (each test removes its own).
fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rebalance-sim-svg-{}-{name}", std::process::id()))
}

/// The attributes of every element whose class list holds `class`.
fn elements(svg: &str, class: &str) -> Vec<HashMap<String, String>> {
    let mut found = Vec::new();
    for tag in svg.split('<').skip(1) {
        let tag = tag.split('>').next().unwrap_or_default();
        let mut attrs = HashMap::new();
        let mut rest = tag;
        while let Some(eq) = rest.find("=\"") {
            let name = rest[..eq]
                .rsplit(' ')
                .next()
                .unwrap_or_default()
                .to_string();
            let value = &rest[eq + 2..];
            let close = value.find('"').expect("closed attribute");
            attrs.insert(name, value[..close].to_string());
            rest = &value[close + 1..];
        }
        if attrs
            .get("class")
            .is_some_and(|c| c.split(' ').any(|c| c == class))
        {
            found.push(attrs);
        }
    }
    found
}

fn queue_name(triple: &Value) -> String {
    format!(
        "{}/{}/{}",
        triple[0].as_str().unwrap(),
        triple[1].as_str().unwrap(),
        triple[2]
    )
}

/// Every stretch a client held a queue, replayed from the JSON lines: from its `added` line to
/// its `removed` line, its client's crash, or the end.
fn holds_from_json(lines: &[Value], end_ms: u64) -> BTreeSet<(String, usize, u64, u64)> {
    let index: HashMap<&str, usize> = lines
        .iter()
        .filter(|l| l.get("status").is_some())
        .map(|l| {
            (
                l["client"].as_str().unwrap(),
                l["index"].as_u64().unwrap() as usize,
            )
        })
        .collect();
    let mut open: BTreeMap<(String, usize), u64> = BTreeMap::new();
    let mut holds = BTreeSet::new();
    // A crash ends its client's holds after the callbacks of its instant (as the summary
    // counts them), although its line comes before them.
    let mut crashes: Vec<(u64, usize)> = Vec::new();
    let crash = |open: &mut BTreeMap<(String, usize), u64>,
                 holds: &mut BTreeSet<(String, usize, u64, u64)>,
                 (t, crashed): (u64, usize)| {
        let gone: Vec<(String, usize)> = open
            .keys()
            .filter(|(_, c)| *c == crashed)
            .cloned()
            .collect();
        for key in gone {
            let since = open.remove(&key).unwrap();
            holds.insert((key.0, key.1, since, t));
        }
    };
    for line in lines {
        let Some(t) = line.get("t_ms").and_then(Value::as_u64) else {
            continue;
        };
        while crashes.first().is_some_and(|(at, _)| *at < t) {
            crash(&mut open, &mut holds, crashes.remove(0));
        }
        if let Some(scenario) = line.get("scenario").and_then(Value::as_str) {
            if let Some(crashed) = scenario.strip_prefix("crash:") {
                crashes.push((t, crashed.parse().unwrap()));
            }
            continue;
        }
        let client = index[line["client"].as_str().unwrap()];
        for q in line["queues"].as_array().unwrap() {
            let key = (queue_name(q), client);
            if line["event"] == "added" {
                open.entry(key).or_insert(t);
            } else if let Some(since) = open.remove(&key) {
                holds.insert((key.0, key.1, since, t));
            }
        }
    }
    for pending in crashes {
        crash(&mut open, &mut holds, pending);
    }
    for ((queue, client), since) in open {
        holds.insert((queue, client, since, end_ms));
    }
    holds
}

fn sum_ms(spans: &[HashMap<String, String>]) -> u64 {
    spans
        .iter()
        .map(|a| {
            a["data-to-ms"].parse::<u64>().unwrap() - a["data-from-ms"].parse::<u64>().unwrap()
        })
        .sum()
}

#[test]
fn the_picture_shows_every_hold_gap_overlap_and_event_of_the_run() {
    let path = temp("churn.svg");
    let run = common::rebalance(
        &[
            "simulate",
            "--queues",
            "12",
            "--consumers",
            "4",
            "--events",
            CHURN,
            "--duration",
            "90s",
            "--seed",
            "7",
            "--settle",
            "0s",
            "--json",
            "--svg",
            path.to_str().unwrap(),
        ],
        None,
    );
    assert!(run.success, "{}", run.stderr);
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));

    let drawn: BTreeSet<(String, usize, u64, u64)> = elements(&svg, "hold")
        .into_iter()
        .map(|a| {
            (
                a["data-queue"].clone(),
                a["data-client"].parse().unwrap(),
                a["data-from-ms"].parse().unwrap(),
                a["data-to-ms"].parse().unwrap(),
            )
        })
        .collect();
    let expected = holds_from_json(&run.lines, 90_000);
    assert!(expected.len() > 12, "the churn moved queues: {expected:?}");
    assert_eq!(drawn, expected);

    // The marks add up to what the summary line counts (all 12 queues are drawn).
    let summary = &run.lines.last().unwrap()["summary"];
    let unowned = elements(&svg, "unowned");
    assert!(!unowned.is_empty());
    assert_eq!(
        sum_ms(&unowned),
        summary["unowned_queue_ms"].as_u64().unwrap()
    );
    assert_eq!(
        sum_ms(&elements(&svg, "doubled")),
        summary["double_owned_queue_ms"].as_u64().unwrap()
    );

    // Every scripted event on the axis, a join with the index it took.
    let events: Vec<(String, u64)> = elements(&svg, "event")
        .into_iter()
        .map(|a| (a["data-event"].clone(), a["data-at-ms"].parse().unwrap()))
        .collect();
    let scripted: Vec<(String, u64)> = run
        .lines
        .iter()
        .filter_map(|l| {
            Some((
                l.get("scenario")?.as_str()?.to_string(),
                l["t_ms"].as_u64()?,
            ))
        })
        .collect();
    let mut joins = 4..;
    let renamed: Vec<(String, u64)> = scripted
        .into_iter()
        .map(|(e, t)| match e.as_str() {
            "join" => (format!("join:{}", joins.next().unwrap()), t),
            _ => (e, t),
        })
        .collect();
    assert_eq!(events, renamed);
    let band = &elements(&svg, "ns-down")[0];
    assert_eq!(
        (band["data-from-ms"].as_str(), band["data-to-ms"].as_str()),
        ("20000", "40000")
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn standard_output_is_the_same_with_or_without_the_picture() {
    let path = temp("same.svg");
    let args = [
        "simulate",
        "--queues",
        "8",
        "--consumers",
        "3",
        "--events",
        "join@2s,crash:0@4s",
        "--duration",
        "20s",
    ];
    for json in [false, true] {
        let mut plain: Vec<&str> = args.to_vec();
        if json {
            plain.push("--json");
        }
        let mut with_svg = plain.clone();
        with_svg.extend(["--svg", path.to_str().unwrap()]);
        let a = common::rebalance_text(&plain);
        let b = common::rebalance_text(&with_svg);
        assert_eq!(a.code, Some(0), "{}", a.stderr);
        assert_eq!(a.stdout, b.stdout, "json: {json}");
        assert_eq!(a.stderr, b.stderr);
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .contains(r#"class="hold""#)
        );
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn with_messages_the_picture_shows_the_lag() {
    let path = temp("lag.svg");
    let run = common::rebalance_text(&[
        "simulate",
        "--queues",
        "4",
        "--consumers",
        "2",
        "--events",
        "crash:1@3s",
        "--duration",
        "20s",
        "--produce",
        "20",
        "--drain",
        "5s",
        "--svg",
        path.to_str().unwrap(),
    ]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let svg = std::fs::read_to_string(&path).unwrap();
    let lag = elements(&svg, "lag");
    assert_eq!(lag.len(), 1);
    // The crashed client's queues wait until it expires: messages pile up on them.
    let peak: u64 = lag[0]["data-max"].parse().unwrap();
    assert!(peak > 20, "{peak}");
    assert_eq!(elements(&svg, "production-stops").len(), 1);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_bad_path_fails_at_once_and_a_failed_run_leaves_no_file() {
    let run = common::rebalance_text(&["simulate", "--svg", "/nonexistent/x.svg"]);
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr
            .contains("rebalance simulate: --svg `/nonexistent/x.svg`: "),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty(), "nothing ran: {}", run.stdout);
    let path = temp("failed.svg");
    let _ = std::fs::remove_file(&path);
    let run = common::rebalance_text(&[
        "simulate",
        "--consumers",
        "2",
        "--events",
        "crash:7@1s",
        "--svg",
        path.to_str().unwrap(),
    ]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("client 7"), "{}", run.stderr);
    assert!(!path.exists(), "a failed run leaves no picture");
}
