//! `local-cluster down` and `status`: through the state file of the `up` running the cluster.

use std::io::Write;
use std::time::{Duration, Instant};

use super::state::{self, State};
use super::{DownArgs, LocalClusterError, StatusArgs, cluster_dir, write_text};

/// How often `down` looks whether the cluster stopped.
const POLL: Duration = Duration::from_millis(100);
/// How long the servers may take to go once their `up` was killed (their watchdogs kill them).
const AFTER_KILL: Duration = Duration::from_secs(10);

/// Waits until `done` or `within` has passed: whether it is done. A `within` too long to add to
/// the clock (`--timeout 9999999999999999999`) waits until `done`.
fn wait_until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now().checked_add(within);
    loop {
        if done() {
            return true;
        }
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// Runs `down`: SIGTERM to the `up`, which stops its servers and removes its state file; waits
/// until it and its servers are gone (killing it after `--timeout`).
pub fn down(args: &DownArgs, out: &mut dyn Write) -> Result<(), LocalClusterError> {
    let dir = cluster_dir(args.dir.as_deref());
    let Some(state) = State::read(&dir)? else {
        return Err(LocalClusterError::NotRunning { dir });
    };
    if !state.up_runs() {
        // Its `up` died without cleaning up (killed): its watchdogs killed the servers; any
        // left are killed now.
        for pid in state.servers_running() {
            state::signal(pid, "-KILL");
        }
        State::remove(&dir)?;
        writeln!(
            out,
            "no local cluster was running from {} (its process {} is gone); its state file is removed",
            dir.display(),
            state.pid
        )?;
        return Ok(());
    }
    state::signal(state.pid, "-TERM");
    let stopped = wait_until(args.timeout, || {
        !state.up_runs() && state.servers_running().is_empty()
    });
    if !stopped {
        state::signal(state.pid, "-KILL");
        wait_until(AFTER_KILL, || state.servers_running().is_empty());
        State::remove(&dir)?;
        return Err(LocalClusterError::StopTimeout {
            pid: state.pid,
            waited: args.timeout,
        });
    }
    // Removed by the `up` as it stopped; gone anyway.
    State::remove(&dir)?;
    writeln!(
        out,
        "stopped the local cluster of {} (name server {}); the data stays there",
        dir.display(),
        state.namesrv
    )?;
    Ok(())
}

/// Runs `status`: the running cluster, or [`LocalClusterError::NotRunning`].
pub fn status(args: &StatusArgs, out: &mut dyn Write) -> Result<(), LocalClusterError> {
    let dir = cluster_dir(args.dir.as_deref());
    match State::read(&dir)? {
        Some(state) if state.up_runs() => {
            if args.json {
                writeln!(out, "{}", serde_json::to_string(&state).unwrap_or_default())?;
            } else {
                write_text(&state, out)?;
            }
            Ok(())
        }
        _ => Err(LocalClusterError::NotRunning { dir }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_too_long_for_the_clock_waits_until_done() {
        for within in [
            Duration::MAX,
            Duration::from_secs(9_999_999_999_999_999_999),
        ] {
            let mut polls = 0;
            let done = wait_until(within, || {
                polls += 1;
                polls == 3
            });
            assert!(done, "{within:?}");
            assert_eq!(polls, 3);
        }
        assert!(!wait_until(Duration::ZERO, || false));
    }
}
