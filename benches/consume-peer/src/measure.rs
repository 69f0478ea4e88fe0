//! CPU time and peak memory, from the kernel: `getrusage` for this process, `/proc` for
//! another (the broker).

use std::time::Duration;

/// This process's CPU time and peak resident set so far.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    pub user: Duration,
    pub system: Duration,
    /// Peak resident set size, KiB.
    pub max_rss_kib: u64,
    /// Context switches: voluntary (a thread parked, waiting for work) and involuntary.
    pub switches: u64,
}

impl Usage {
    pub fn cpu(&self) -> Duration {
        self.user + self.system
    }
}

fn duration(t: libc::timeval) -> Duration {
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let micros = u32::try_from(t.tv_usec).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(u64::from(micros))
}

/// `getrusage(RUSAGE_SELF)`: every thread of this process.
pub fn own_usage() -> std::io::Result<Usage> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a `rusage` into the pointer it is given, which is valid and
    // large enough; it is read only when the call succeeds.
    let usage = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        usage.assume_init()
    };
    Ok(Usage {
        user: duration(usage.ru_utime),
        system: duration(usage.ru_stime),
        max_rss_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0),
        switches: u64::try_from(usage.ru_nvcsw).unwrap_or(0)
            + u64::try_from(usage.ru_nivcsw).unwrap_or(0),
    })
}

/// The CPU time (user + system) another process has used, from `/proc/PID/stat`.
pub fn process_cpu(pid: u32) -> std::io::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat_cpu(&stat, clock_ticks()).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("/proc/{pid}/stat: no utime and stime in {stat:?}"),
        )
    })
}

fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|t| *t > 0).unwrap_or(100)
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line, whose second field (the
/// command, in parentheses) may contain spaces.
fn parse_stat_cpu(stat: &str, ticks_per_second: u64) -> Option<Duration> {
    let after_command = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_command.split_whitespace();
    // Fields 3.. after the command; utime is field 14, so the 12th from here.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let ticks = utime + stime;
    Some(Duration::from_secs_f64(
        ticks as f64 / ticks_per_second as f64,
    ))
}

/// The 1-minute load average.
pub fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_utime_and_stime_past_a_command_with_spaces() {
        let line =
            "4242 (rocketmq broker) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 130 0 0 20 0 30 0";
        assert_eq!(
            parse_stat_cpu(line, 100),
            Some(Duration::from_millis(3_800))
        );
        assert_eq!(parse_stat_cpu("4242 (x) S 1", 100), None);
    }

    #[test]
    fn own_usage_grows_with_work() {
        let before = own_usage().unwrap();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = own_usage().unwrap();
        assert!(after.cpu() > before.cpu(), "{before:?} then {after:?}");
        assert!(after.max_rss_kib > 0);
        assert!(process_cpu(std::process::id()).is_ok());
    }
}
