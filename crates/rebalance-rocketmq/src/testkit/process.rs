//! One server process: spawn with its log captured, wait until ready, stop with SIGTERM; and a
//! watchdog that kills it if the test process dies without stopping it.

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

/// The watchdog's program: wait for the end of standard input, then kill the server (`$1`).
/// Nothing is ever written to its standard input, so the end comes when the only writer, the
/// test process, closes it: when it dies, however it dies.
const WATCHDOG_SCRIPT: &str = "while read -r _; do :; done; kill -KILL \"$1\" 2>/dev/null";

/// A `sh` that kills the server when the test process dies without stopping it (SIGKILL, an
/// abort, a crash): it waits for the end of a pipe whose only write end this process holds
/// (close-on-exec, so no other child inherits it), and the kernel closes that end when the
/// process dies. Unlike `PR_SET_PDEATHSIG`, which fires when the *thread* that spawned the
/// server ends, this is tied to the whole process, so servers started by one test thread (or a
/// short-lived runtime thread) and used by another are safe.
///
/// [`dismiss`](Self::dismiss) (and drop) kill the watchdog itself, before its pipe closes, so
/// that it never signals a pid the server no longer has.
#[derive(Debug)]
struct Watchdog {
    /// The `sh`; its `stdin` is the pipe's write end.
    sh: Child,
}

impl Watchdog {
    fn spawn(server_pid: u32) -> std::io::Result<Self> {
        let sh = Command::new("sh")
            .args(["-c", WATCHDOG_SCRIPT, "testkit-watchdog"])
            .arg(server_pid.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(Self { sh })
    }

    /// The watchdog's own process id.
    #[cfg(test)]
    fn pid(&self) -> u32 {
        self.sh.id()
    }

    /// Stops watching: the server was stopped (and reaped) by the kit.
    fn dismiss(self) {}
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Killed (and reaped) before `sh.stdin`, the pipe, is closed by the fields' drop.
        let _ = self.sh.kill();
        let _ = self.sh.wait();
    }
}

/// A started server and its watchdog.
#[derive(Debug)]
struct Running {
    child: Child,
    watchdog: Watchdog,
}

/// A server the kit can start, stop and start again with the same ports and store.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    pub(crate) name: String,
    program: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    log_path: PathBuf,
    health_addr: SocketAddr,
    running: Option<Running>,
}

/// Spawns `command`, trying again for up to a second while the program is "text file busy"
/// (`ETXTBSY`): a program written just before (an installed binary, a test's script) is busy
/// while another thread of this process has forked and not yet exec'd, the child holding the
/// file open for writing until its exec closes it (found in CI: a test's fake server script).
fn spawn_retrying_busy(command: &mut Command) -> std::io::Result<std::process::Child> {
    const TEXT_FILE_BUSY: i32 = 26; // ETXTBSY on Linux and the BSDs
    let mut tries = 0;
    loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(TEXT_FILE_BUSY) && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
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
            running: None,
        }
    }

    /// Whether the server runs. One found exited is forgotten (and its watchdog dismissed).
    pub(crate) fn is_running(&mut self) -> bool {
        self.exit_status().is_none() && self.running.is_some()
    }

    /// The server's process id, while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.running.as_ref().map(|r| r.child.id())
    }

    /// How the server exited, when it did since it was last seen running: it is then forgotten
    /// and its watchdog dismissed (its pid may be reused from now on).
    fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        let running = self.running.as_mut()?;
        let status = match running.child.try_wait() {
            Ok(Some(status)) => status,
            _ => return None,
        };
        if let Some(Running { watchdog, .. }) = self.running.take() {
            watchdog.dismiss();
        }
        Some(status)
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
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr);
        let mut child = spawn_retrying_busy(&mut command)
            .map_err(|e| io(&format!("cannot run {}", self.program.display()), e))?;
        let watchdog = match Watchdog::spawn(child.id()) {
            Ok(watchdog) => watchdog,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io("cannot start the watchdog (sh)", e));
            }
        };
        tracing::info!(server = %self.name, pid = child.id(), "server started, waiting until ready");
        self.running = Some(Running { child, watchdog });
        self.wait_ready(timeout)
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<(), TestkitError> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.exit_status() {
                return Err(TestkitError::Exited {
                    server: self.name.clone(),
                    status: status.to_string(),
                    log_tail: log_tail(&self.log_path),
                });
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
        if self.exit_status().is_some() {
            return;
        }
        let Some(running) = &mut self.running else {
            return;
        };
        let sent = Command::new("kill")
            .args(["-TERM", &running.child.id().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !matches!(sent, Ok(s) if s.success()) {
            let _ = running.child.kill();
        }
    }

    /// Waits until the process has exited, killing it after `deadline`.
    pub(crate) fn reap(&mut self, deadline: Instant) {
        while self.running.is_some() {
            if let Some(status) = self.exit_status() {
                tracing::info!(server = %self.name, %status, "server stopped");
                return;
            }
            if Instant::now() >= deadline {
                tracing::warn!(server = %self.name, "server ignored SIGTERM, killing it");
                self.kill();
                return;
            }
            std::thread::sleep(POLL);
        }
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub(crate) fn stop(&mut self, grace: Duration) {
        self.terminate();
        self.reap(Instant::now() + grace);
    }

    /// SIGKILL at once: the server gets no chance to unregister or close connections cleanly.
    pub(crate) fn kill(&mut self) {
        if let Some(Running {
            mut child,
            watchdog,
        }) = self.running.take()
        {
            // The watchdog first, while the server's pid is certainly still the server's.
            watchdog.dismiss();
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

    /// Whether a process exists (a child of ours, once reaped, does not).
    fn alive(pid: u32) -> bool {
        Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
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
        let watchdog = fake.running.as_ref().unwrap().watchdog.pid();
        assert!(alive(watchdog), "a watchdog runs beside the server");
        let started = Instant::now();
        fake.stop(Duration::from_secs(5));
        assert!(!fake.is_running());
        assert!(
            !alive(watchdog),
            "the watchdog is dismissed (and reaped) with the server"
        );
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "stopped by SIGTERM, not by the kill"
        );
    }
}
