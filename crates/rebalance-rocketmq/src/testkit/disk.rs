//! Room on the disk for a broker's store.
//!
//! Broker 1.0 measures its store's file system as `(total - available) / total` and refuses to
//! start above its warning level, which it caps at 90 % whatever the configuration says. It then
//! exits with status 70, and its log names no reason ("Rolling back broker startup …
//! core.service.failed"). On a shared machine whose disk is nearly full, every real-server test
//! would fail that way; this check names the cause instead.

use std::path::Path;

use super::TestkitError;

/// The used fraction above which broker 1.0 refuses to start.
const BROKER_LIMIT: f64 = 0.90;

/// Fails with [`TestkitError::DiskTooFull`] when the file system holding `store` is fuller than
/// broker 1.0 accepts. A file system that cannot be measured is let through: the broker then
/// decides.
pub(super) fn check_room(store: &Path) -> Result<(), TestkitError> {
    let Some((total, available)) = measure(store) else {
        return Ok(());
    };
    match too_full(total, available) {
        None => Ok(()),
        Some((used, to_free)) => Err(TestkitError::DiskTooFull {
            path: store.display().to_string(),
            used_percent: used * 100.0,
            to_free_mib: to_free.div_ceil(1 << 20),
        }),
    }
}

/// Removes a stopped broker's message data from its store, keeping `config/` (offsets,
/// subscriptions, topics as the broker saw them). Best effort: what cannot be removed stays.
pub(super) fn drop_message_data(store: &Path) {
    let Ok(entries) = std::fs::read_dir(store) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name() == "config" {
            continue;
        }
        let path = entry.path();
        let _ = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
    }
}

/// The total and available bytes of the file system holding `path`, as the broker reads them.
fn measure(path: &Path) -> Option<(u64, u64)> {
    let stats = rustix::fs::statvfs(path).ok()?;
    let unit = stats.f_frsize.max(1);
    Some((
        stats.f_blocks.saturating_mul(unit),
        stats.f_bavail.saturating_mul(unit),
    ))
}

/// The used fraction and the bytes to free, when `available` of `total` is too little.
fn too_full(total: u64, available: u64) -> Option<(f64, u64)> {
    if total == 0 || available > total {
        return None;
    }
    let used = (total - available) as f64 / total as f64;
    if used <= BROKER_LIMIT {
        return None;
    }
    let needed = (total as f64 * (1.0 - BROKER_LIMIT)).ceil() as u64;
    Some((used, needed.saturating_sub(available)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_more_than_ninety_percent_used_is_too_full_and_says_how_much_to_free() {
        let total = 1000 << 20;
        assert_eq!(too_full(total, 101 << 20), None);
        assert_eq!(too_full(total, 100 << 20), None, "exactly 90 % is accepted");
        let (used, to_free) = too_full(total, 60 << 20).expect("94 % used");
        assert!((used - 0.94).abs() < 1e-9);
        assert_eq!(to_free, 40 << 20);
    }

    #[test]
    fn an_unmeasurable_file_system_is_let_through() {
        assert_eq!(too_full(0, 0), None);
        assert_eq!(too_full(10, 20), None);
    }

    #[test]
    fn message_data_is_dropped_and_the_config_kept() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = dir.path();
        for sub in ["config", "commitlog", "consumequeue/T/0"] {
            std::fs::create_dir_all(store.join(sub)).expect("mkdir");
        }
        std::fs::write(store.join("config/consumerOffset.json"), "{}").expect("write");
        std::fs::write(store.join("commitlog/00000000000000000000"), "x").expect("write");
        std::fs::write(store.join("checkpoint"), "x").expect("write");
        drop_message_data(store);
        let mut left: Vec<_> = std::fs::read_dir(store)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["config"]);
        assert!(store.join("config/consumerOffset.json").exists());
    }

    #[test]
    fn the_disk_of_a_temporary_directory_is_measured() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (total, available) = measure(dir.path()).expect("statvfs of a directory");
        assert!(total > 0 && available <= total, "{available} of {total}");
        assert_eq!(measure(&dir.path().join("missing")), None);
    }
}
