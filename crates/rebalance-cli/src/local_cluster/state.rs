//! What a running local cluster leaves in its directory for `down` and `status`
//! (`local-cluster.json`), and how another process tells whether a process still runs.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

/// The state file's name in the cluster's directory.
pub const STATE_FILE: &str = "local-cluster.json";
/// The log of a detached `up` (its standard output and error), in the cluster's directory.
pub const DETACHED_LOG: &str = "local-cluster.log";
/// The most bytes of a state file read (it holds a few addresses).
const MAX_STATE_BYTES: u64 = 1 << 20;

/// A broker of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerInfo {
    /// Its name (`broker-a`, `broker-b`, …).
    pub name: String,
    /// Where it listens, `127.0.0.1:port`.
    pub addr: String,
}

/// A topic created at start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicInfo {
    /// Its name.
    pub topic: String,
    /// Its read and write queues on each broker.
    pub queues: i32,
}

/// A running cluster, as `up` prints it (`--json`) and writes it to [`STATE_FILE`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// The name server's address, `127.0.0.1:port`: what `--namesrv` takes.
    pub namesrv: String,
    /// The brokers.
    pub brokers: Vec<BrokerInfo>,
    /// The topics created at start.
    pub topics: Vec<TopicInfo>,
    /// The cluster's directory (configs, stores, logs).
    pub dir: PathBuf,
    /// The process id of the `rebalance local-cluster up` that runs it.
    pub pid: u32,
    /// The servers' process ids: the name server's, then the brokers'.
    pub server_pids: Vec<u32>,
}

/// Why the state file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Reading or writing it failed.
    #[error("`{}`: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// It holds something else.
    #[error("`{}` is not a local cluster's state ({reason}); remove it if no cluster runs", path.display())]
    Garbled {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl State {
    /// The state file of the cluster in `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(STATE_FILE)
    }

    /// Reads the state file of `dir`; `None` when there is none.
    pub fn read(dir: &Path) -> Result<Option<State>, StateError> {
        let path = Self::path(dir);
        let io = |source| StateError::Io {
            path: path.clone(),
            source,
        };
        let text = match std::fs::File::open(&path) {
            Ok(file) => {
                let mut text = String::new();
                io::Read::read_to_string(&mut io::Read::take(file, MAX_STATE_BYTES), &mut text)
                    .map_err(io)?;
                text
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| StateError::Garbled {
                path: path.clone(),
                reason: e.to_string(),
            })
    }

    /// Writes the state file (whole or not at all: written beside it, then renamed).
    pub fn write(&self) -> Result<(), StateError> {
        let path = Self::path(&self.dir);
        let partial = self.dir.join(format!("{STATE_FILE}.partial"));
        let text = serde_json::to_string_pretty(self).unwrap_or_default();
        std::fs::write(&partial, text)
            .and_then(|()| std::fs::rename(&partial, &path))
            .map_err(|source| StateError::Io { path, source })
    }

    /// Removes the state file (the cluster stopped).
    pub fn remove(dir: &Path) -> Result<(), StateError> {
        let path = Self::path(dir);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(StateError::Io { path, source: e })
            }
            _ => Ok(()),
        }
    }

    /// Whether the `up` that wrote this state still runs.
    pub fn up_runs(&self) -> bool {
        alive(self.pid) && command_line(self.pid).is_none_or(|c| c.contains("local-cluster"))
    }

    /// The servers of this state still running.
    pub fn servers_running(&self) -> Vec<u32> {
        self.server_pids
            .iter()
            .copied()
            .filter(|pid| alive(*pid) && command_line(*pid).is_none_or(|c| c.contains("rocketmq")))
            .collect()
    }
}

/// Whether process `pid` exists and has not exited (a zombie waiting for its parent counts as
/// exited). Reads `/proc` where there is one, else asks `kill -0`.
pub fn alive(pid: u32) -> bool {
    if Path::new("/proc/self").exists() {
        return match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // The state follows the command name, which is in parentheses and may hold any.
            Ok(stat) => stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state != "Z" && state != "X"),
            Err(_) => false,
        };
    }
    signal(pid, "-0")
}

/// Process `pid`'s command line (arguments joined by spaces), where `/proc` tells.
pub fn command_line(pid: u32) -> Option<String> {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        bytes
            .split(|b| *b == 0)
            .map(String::from_utf8_lossy)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// Sends a signal (`-TERM`, `-KILL`, `-0`) with `kill`: whether it was delivered.
pub fn signal(pid: u32, which: &str) -> bool {
    Command::new("kill")
        .args([which, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(dir: &Path) -> State {
        State {
            namesrv: "127.0.0.1:9876".into(),
            brokers: vec![BrokerInfo {
                name: "broker-a".into(),
                addr: "127.0.0.1:10911".into(),
            }],
            topics: vec![TopicInfo {
                topic: "T".into(),
                queues: 8,
            }],
            dir: dir.to_path_buf(),
            pid: std::process::id(),
            server_pids: vec![],
        }
    }

    #[test]
    fn written_read_and_removed() {
        let dir = std::env::temp_dir().join(format!("rebalance-lc-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(State::read(&dir).unwrap(), None);
        let s = state(&dir);
        s.write().unwrap();
        assert_eq!(State::read(&dir).unwrap(), Some(s));
        State::remove(&dir).unwrap();
        State::remove(&dir).unwrap();
        assert_eq!(State::read(&dir).unwrap(), None);
        std::fs::write(State::path(&dir), "{\"namesrv\": 1}").unwrap();
        let err = State::read(&dir).unwrap_err();
        assert!(
            err.to_string().contains("remove it if no cluster runs"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        assert!(alive(std::process::id()));
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!alive(pid));
        let mut zombie = Command::new("true").spawn().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while alive(zombie.id()) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!alive(zombie.id()), "exited, not yet reaped: not running");
        zombie.wait().unwrap();
    }
}
