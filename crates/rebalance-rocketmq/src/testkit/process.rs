//! One server process: spawn with its log captured, wait until ready, stop with SIGTERM.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::TestkitError;

/// How often readiness and exit are polled.
const POLL: Duration = Duration::from_millis(25);

/// A server the kit can start, stop and start again with the same ports and store.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    pub(crate) name: String,
    program: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    log_path: PathBuf,
    health_addr: SocketAddr,
    child: Option<Child>,
}

impl ServerProcess {
    pub(crate) fn new(
        name: impl Into<String>,
        program: &Path,
        args: Vec<OsString>,
        env: Vec<(OsString, OsString)>,
        log_path: PathBuf,
        health_addr: SocketAddr,
    ) -> Self {
        Self {
            name: name.into(),
            program: program.to_path_buf(),
            args,
            env,
            log_path,
            health_addr,
            child: None,
        }
    }

    pub(crate) fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    pub(crate) fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Starts the process (its output appended to its log) and waits until `/readyz` says 200.
    pub(crate) fn start(&mut self, timeout: Duration) -> Result<(), TestkitError> {
        if self.is_running() {
            return Ok(());
        }
        let io = |what: &str, source| TestkitError::Io {
            what: format!("{what} for {}", self.name),
            source,
        };
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| io("cannot open the log", e))?;
        let _ = writeln!(log, "---- testkit: starting {} ----", self.name);
        let stderr = log.try_clone().map_err(|e| io("cannot share the log", e))?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .map_err(|e| io(&format!("cannot run {}", self.program.display()), e))?;
        tracing::info!(server = %self.name, pid = child.id(), "server started, waiting until ready");
        self.child = Some(child);
        self.wait_ready(timeout)
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<(), TestkitError> {
        let started = Instant::now();
        loop {
            if let Some(child) = &mut self.child {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(TestkitError::Exited {
                        server: self.name.clone(),
                        status: status.to_string(),
                        log_tail: log_tail(&self.log_path),
                    });
                }
            }
            if ready(self.health_addr) {
                tracing::info!(server = %self.name, after = ?started.elapsed(), "server ready");
                return Ok(());
            }
            if started.elapsed() > timeout {
                self.kill();
                return Err(TestkitError::NotReady {
                    server: self.name.clone(),
                    waited: timeout,
                    log_tail: log_tail(&self.log_path),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// Sends SIGTERM (without waiting).
    pub(crate) fn terminate(&mut self) {
        if let Some(child) = &mut self.child {
            if matches!(child.try_wait(), Ok(None)) {
                let sent = Command::new("kill")
                    .args(["-TERM", &child.id().to_string()])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
                if !matches!(sent, Ok(s) if s.success()) {
                    let _ = child.kill();
                }
            }
        }
    }

    /// Waits until the process has exited, killing it after `deadline`.
    pub(crate) fn reap(&mut self, deadline: Instant) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    tracing::info!(server = %self.name, %status, "server stopped");
                    return;
                }
                Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
                _ => {
                    tracing::warn!(server = %self.name, "server ignored SIGTERM, killing it");
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
            }
        }
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub(crate) fn stop(&mut self, grace: Duration) {
        self.terminate();
        self.reap(Instant::now() + grace);
    }

    /// SIGKILL at once: the server gets no chance to unregister or close connections cleanly.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            tracing::info!(server = %self.name, "server killed");
        }
    }
}

/// Whether `GET /readyz` on `addr` answers 200.
fn ready(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = stream.set_write_timeout(Some(Duration::from_millis(500)));
    let request = format!("GET /readyz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut status = Vec::with_capacity(16);
    let mut buf = [0u8; 64];
    while status.len() < 12 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => status.extend_from_slice(&buf[..n]),
        }
    }
    status.starts_with(b"HTTP/1.1 200") || status.starts_with(b"HTTP/1.0 200")
}

/// The last lines of a log (at most 60 lines of the last 8 KiB).
pub(crate) fn log_tail(path: &Path) -> String {
    let Ok(mut file) = File::open(path) else {
        return format!("(no log at {})", path.display());
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(8192)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let tail = &lines[lines.len().saturating_sub(60)..];
    format!("{}:\n{}", path.display(), tail.join("\n"))
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn script(dir: &Path, body: &str) -> PathBuf {
        let path = dir.join("server.sh");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn unused_addr() -> SocketAddr {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    }

    fn server(dir: &Path, body: &str, health: SocketAddr) -> ServerProcess {
        ServerProcess::new(
            "fake",
            &script(dir, body),
            vec![],
            vec![],
            dir.join("fake.log"),
            health,
        )
    }

    #[test]
    fn a_server_that_exits_reports_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut fake = server(
            dir.path(),
            "echo 'bad config key: foo' >&2; exit 3",
            unused_addr(),
        );
        let err = fake.start(Duration::from_secs(10)).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, TestkitError::Exited { .. }), "{text}");
        assert!(
            text.contains("bad config key: foo") && text.contains("exit status: 3"),
            "{text}"
        );
        assert!(!fake.is_running());
    }

    #[test]
    fn a_server_that_never_gets_ready_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let mut fake = server(dir.path(), "echo starting; exec sleep 30", unused_addr());
        let err = fake.start(Duration::from_millis(300)).unwrap_err();
        assert!(matches!(err, TestkitError::NotReady { .. }), "{err}");
        assert!(err.to_string().contains("starting"), "{err}");
        assert!(!fake.is_running());
    }

    #[test]
    fn readiness_is_a_200_on_readyz_and_stop_sends_sigterm() {
        let dir = tempfile::tempdir().unwrap();
        let health = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = health.local_addr().unwrap();
        // Not ready at first (503), then ready (200); records the request lines.
        let probes = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for answer in ["503 Service Unavailable", "200 OK"] {
                let (mut conn, _) = health.accept().unwrap();
                let mut buf = [0u8; 512];
                let n = conn.read(&mut buf).unwrap();
                let request = String::from_utf8_lossy(&buf[..n]).to_string();
                lines.push(request.lines().next().unwrap_or_default().to_string());
                let _ = conn.write_all(
                    format!("HTTP/1.1 {answer}\r\nContent-Length: 0\r\n\r\n").as_bytes(),
                );
            }
            lines
        });
        // Ends on SIGTERM only (no kill needed).
        let mut fake = server(
            dir.path(),
            "trap 'exit 0' TERM; while :; do sleep 0.05; done",
            addr,
        );
        fake.start(Duration::from_secs(10)).unwrap();
        assert_eq!(
            probes.join().unwrap(),
            ["GET /readyz HTTP/1.1", "GET /readyz HTTP/1.1"]
        );
        assert!(fake.is_running());
        let started = Instant::now();
        fake.stop(Duration::from_secs(5));
        assert!(!fake.is_running());
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "stopped by SIGTERM, not by the kill"
        );
    }
}
