//! The parent: the servers, the preload, the runs (a child process per consumer run) and the
//! summary table.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use rebalance_rocketmq::testkit::TestCluster;
use serde_json::Value;

use crate::Settings;
use crate::measure::{load_average, process_cpu};
use crate::preload::preload;

const TOPIC: &str = "BenchConsume";

/// A pause between two consumer runs, for the broker to settle (the last child's connections
/// close, its writes are flushed).
const BETWEEN_RUNS: Duration = Duration::from_secs(2);

pub fn main(s: &Settings) -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let cluster = TestCluster::start()?;
    let per_queue = s.messages / u64::from(s.queues);
    let took = runtime.block_on(preload(&cluster, TOPIC, s.queues, per_queue, s.body_size))?;
    eprintln!(
        "preloaded {} messages of {} bytes into {} queues in {:.1} s ({:.0} messages/s)",
        s.messages,
        s.body_size,
        s.queues,
        took.as_secs_f64(),
        s.messages as f64 / took.as_secs_f64()
    );
    let broker_pid = cluster
        .server_pids()
        .get(1)
        .copied()
        .ok_or("the broker is not running")?;
    let exe = std::env::current_exe()?;
    let mut rows = Vec::new();
    let n = s.consumers.len();
    for run in 0..s.runs as usize {
        for i in 0..n {
            let kind = &s.consumers[(run + i) % n];
            std::thread::sleep(BETWEEN_RUNS);
            let load = load_average();
            let broker_before = process_cpu(broker_pid)?;
            let mut child = Command::new(&exe);
            child
                .arg("child")
                .arg(kind)
                .args(["--namesrv", &cluster.namesrv_addr()])
                .args(["--topic", TOPIC])
                .args(["--group", &format!("bench-{kind}-{run}")])
                .args(["--queues", &s.queues.to_string()])
                .args(["--per-queue", &per_queue.to_string()])
                .args(["--body-size", &s.body_size.to_string()])
                .args(["--timeout", &s.timeout.as_secs().to_string()]);
            if let (true, Some(peer)) = (kind == crate::PEER, &s.peer) {
                child.args(["--peer", peer]);
            }
            if let Some(batch) = s.batch {
                child.args(["--batch", &batch.to_string()]);
            }
            if let Some(pull) = s.pull {
                child.args(["--pull", &pull.to_string()]);
            }
            let output = child
                .stdin(Stdio::null())
                .stderr(Stdio::inherit())
                .output()?;
            let broker_cpu = process_cpu(broker_pid)?.saturating_sub(broker_before);
            let stdout = String::from_utf8_lossy(&output.stdout);
            let mut row: Value = stdout
                .lines()
                .rev()
                .find_map(|line| {
                    serde_json::from_str::<Value>(line)
                        .ok()
                        .filter(|v| v.get("consumer").is_some())
                })
                .ok_or_else(|| {
                    format!(
                        "the {kind} run ({}) printed no result; its output:\n{stdout}",
                        output.status
                    )
                })?;
            let messages = row["messages"].as_f64().unwrap_or(0.0);
            row["run"] = (run + 1).into();
            row["broker_cpu_s"] = broker_cpu.as_secs_f64().into();
            row["broker_cpu_s_per_million"] = if messages > 0.0 {
                (broker_cpu.as_secs_f64() * 1e6 / messages).into()
            } else {
                Value::Null
            };
            row["load_1m"] = load.into();
            if s.json {
                println!("{row}");
            } else {
                eprintln!(
                    "run {} {kind}: {} of {} messages, {:.0} messages/s ({:.0} from the first message), {:.2} CPU s per million, peak RSS {:.1} MiB, broker {:.2} CPU s per million, load {:.2}",
                    run + 1,
                    row["messages"],
                    row["expected"],
                    row["msgs_per_s"].as_f64().unwrap_or(0.0),
                    row["steady_msgs_per_s"].as_f64().unwrap_or(0.0),
                    row["cpu_s_per_million"].as_f64().unwrap_or(0.0),
                    row["max_rss_mib"].as_f64().unwrap_or(0.0),
                    row["broker_cpu_s_per_million"].as_f64().unwrap_or(0.0),
                    load.unwrap_or(f64::NAN),
                );
                if row["complete"] != true {
                    eprintln!(
                        "  incomplete: {} deliveries, {} unexpected, {} redelivered from the retry topic, the last new message seen by {:.2} s, then none until the timeout",
                        row["deliveries"],
                        row["unexpected"],
                        row["redelivered"],
                        row["last_progress_s"].as_f64().unwrap_or(f64::NAN),
                    );
                }
            }
            rows.push(row);
        }
    }
    if !s.json {
        print!("{}", summary(s, &rows));
    }
    drop(cluster);
    if rows.iter().any(|r| r["complete"] != true) {
        eprintln!(
            "consume-peer: a run did not consume every message within --timeout: its figures are over what it consumed by then"
        );
    }
    Ok(())
}

/// Median, minimum and maximum.
fn spread(values: &mut [f64]) -> Option<(f64, f64, f64)> {
    values.sort_by(f64::total_cmp);
    let (first, last) = (values.first()?, values.last()?);
    let mid = values.len() / 2;
    let median = if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    };
    Some((median, *first, *last))
}

fn cell((median, min, max): (f64, f64, f64), decimals: usize) -> String {
    format!("{median:.decimals$} ({min:.decimals$}–{max:.decimals$})")
}

/// The markdown table of the runs (those cut short by the timeout over what they consumed), and the targets' ratios.
fn summary(s: &Settings, rows: &[Value]) -> String {
    let columns: [(&str, usize); 6] = [
        ("msgs_per_s", 0),
        ("steady_msgs_per_s", 0),
        ("cpu_s_per_million", 2),
        ("max_rss_mib", 1),
        ("broker_cpu_s_per_million", 2),
        ("context_switches_per_thousand", 1),
    ];
    let mut medians: BTreeMap<&str, Vec<Option<f64>>> = BTreeMap::new();
    let mut out = format!(
        "\n{} messages of {} bytes in {} queues; {} run(s) per consumer; listener batches of {}, pulls of {}; load average {}\n\n",
        s.messages,
        s.body_size,
        s.queues,
        s.runs,
        s.batch.unwrap_or(1),
        s.pull.unwrap_or(32),
        load_range(rows)
    );
    out.push_str("| consumer | runs complete | messages/s | messages/s from the first message | CPU s per million messages | peak RSS (MiB) | broker CPU s per million | context switches per 1,000 messages |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for kind in &s.consumers {
        // Every run counts; a run cut short by --timeout over what it consumed by then.
        let runs: Vec<&Value> = rows
            .iter()
            .filter(|r| r["consumer"] == kind.as_str())
            .collect();
        let complete = runs.iter().filter(|r| r["complete"] == true).count();
        let mut cells = Vec::new();
        let mut kind_medians = Vec::new();
        for (column, decimals) in columns {
            let mut values: Vec<f64> = runs.iter().filter_map(|r| r[column].as_f64()).collect();
            match spread(&mut values) {
                Some(s) => {
                    cells.push(cell(s, decimals));
                    kind_medians.push(Some(s.0));
                }
                None => {
                    cells.push("-".into());
                    kind_medians.push(None);
                }
            }
        }
        out.push_str(&format!(
            "| {kind} | {complete}/{} | {} |\n",
            runs.len(),
            cells.join(" | ")
        ));
        medians.insert(kind.as_str(), kind_medians);
    }
    let median = |kind: &str, column: usize| medians.get(kind).and_then(|m| m[column]);
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".into(),
    };
    out.push_str(&format!(
        "\nours / raw throughput: {} from start (target >= 0.90), {} from the first message (target >= 0.95); CPU per message: {} (target <= 1.2)\n",
        ratio(median("ours", 0), median("raw", 0)),
        ratio(median("ours", 1), median("raw", 1)),
        ratio(median("ours", 2), median("raw", 2)),
    ));
    if medians.contains_key(crate::PEER) {
        out.push_str(&format!(
            "ours / {peer} ({config}) throughput: {} from start, {} from the first message; CPU per message: {}\n",
            ratio(median("ours", 0), median(crate::PEER, 0)),
            ratio(median("ours", 1), median(crate::PEER, 1)),
            ratio(median("ours", 2), median(crate::PEER, 2)),
            peer = crate::PEER,
            config = s.peer.as_deref().unwrap_or(crate::FAIR_PEER),
        ));
    }
    out
}

fn load_range(rows: &[Value]) -> String {
    let mut loads: Vec<f64> = rows.iter().filter_map(|r| r["load_1m"].as_f64()).collect();
    match spread(&mut loads) {
        Some((_, min, max)) => format!("{min:.2} to {max:.2} (1 min, at each run's start)"),
        None => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_median_min_and_max() {
        assert_eq!(spread(&mut [3.0, 1.0, 2.0]), Some((2.0, 1.0, 3.0)));
        assert_eq!(spread(&mut [4.0, 1.0, 2.0, 3.0]), Some((2.5, 1.0, 4.0)));
        assert_eq!(spread(&mut []), None);
    }

    #[test]
    fn the_summary_has_a_row_per_consumer_and_the_ratios() {
        let settings = Settings {
            consumers: vec!["ours".into(), "raw".into(), "rocketmq-rust".into()],
            ..Settings::default()
        };
        let row = |kind: &str, rate: f64, cpu: f64| {
            serde_json::json!({"consumer": kind, "complete": true, "msgs_per_s": rate,
                "steady_msgs_per_s": rate, "cpu_s_per_million": cpu, "max_rss_mib": 10.0,
                "broker_cpu_s_per_million": 1.0, "load_1m": 1.5})
        };
        let rows = vec![
            row("ours", 90.0, 2.0),
            row("raw", 100.0, 1.0),
            row("rocketmq-rust", 45.0, 8.0),
            serde_json::json!({"consumer": "rocketmq-rust", "complete": false, "msgs_per_s": 15.0}),
        ];
        let text = summary(&settings, &rows);
        assert!(text.contains("| ours | 1/1 | 90 (90–90) |"), "{text}");
        assert!(
            text.contains("| rocketmq-rust | 1/2 | 30 (15–45) |"),
            "{text}"
        );
        assert!(
            text.contains("ours / raw throughput: 0.90 from start"),
            "{text}"
        );
        assert!(text.contains("0.90 from the first message"), "{text}");
        assert!(text.contains("CPU per message: 2.00 (target"), "{text}");
        assert!(
            text.contains("ours / rocketmq-rust (lane-queue=64) throughput: 3.00 from start"),
            "{text}"
        );
        assert!(text.contains("CPU per message: 0.25"), "{text}");
    }
}
