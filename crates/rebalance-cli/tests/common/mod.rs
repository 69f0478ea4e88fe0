//! Runs the `rebalance` binary for the integration tests and reads its JSON lines.

// Each test binary compiles this module and reads only some of a run's fields.
#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

/// What one run of the binary gave.
pub struct Run {
    /// Whether it exited successfully.
    pub success: bool,
    /// Its standard output, one JSON value per line.
    pub lines: Vec<Value>,
    /// Its standard error.
    pub stderr: String,
}

/// Runs `rebalance ARGS`, writing `stdin` to its standard input when given (none otherwise).
/// Panics, naming the line, if any output line is not JSON.
pub fn rebalance(args: &[&str], stdin: Option<&str>) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rebalance"))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run rebalance");
    // Written from another thread so that a large input cannot deadlock against a full pipe.
    let writer = child.stdin.take().map(|mut pipe| {
        let text = stdin.unwrap_or_default().to_string();
        std::thread::spawn(move || pipe.write_all(text.as_bytes()))
    });
    let output = child.wait_with_output().expect("wait for rebalance");
    if let Some(writer) = writer {
        writer.join().expect("writer").expect("write stdin");
    }
    let lines = String::from_utf8(output.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    Run {
        success: output.status.success(),
        lines,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// What one run of the binary gave, as text.
pub struct TextRun {
    /// Its exit status (`None` when killed by a signal).
    pub code: Option<i32>,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

/// Runs `rebalance ARGS` with no standard input and returns its output as text (for commands
/// whose output is not JSON, and for runs that must fail).
pub fn rebalance_text(args: &[&str]) -> TextRun {
    let output = Command::new(env!("CARGO_BIN_EXE_rebalance"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run rebalance");
    TextRun {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Whether process `pid` runs: it exists and has not exited (a zombie waiting for its parent
/// has exited). Linux (`/proc`).
pub fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // The state follows the command name, which is in parentheses.
            let (_, rest) = stat.rsplit_once(')')?;
            rest.split_whitespace().next().map(|s| s != "Z" && s != "X")
        })
        .unwrap_or(false)
}
