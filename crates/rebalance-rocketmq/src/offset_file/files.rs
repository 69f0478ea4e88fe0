//! Where an offset table lives (the file, its `.bak` and the temporary file of a write, in one
//! directory), the Java client's path layout, and the rule that reads a table at open.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use super::format::{OffsetTable, parse};
use super::{MAX_OFFSET_FILE_BYTES, OffsetFileError};

/// The file's name in the Java layout.
pub const OFFSET_FILE_NAME: &str = "offsets.json";

/// The Java client's default directory under the home directory (`rocketmq.client
/// .localOffsetStoreDir` unset).
const JAVA_DEFAULT_DIR: &str = ".rocketmq_offsets";

/// The files of one offset table.
#[derive(Debug, Clone)]
pub(super) struct OffsetFiles {
    /// The table (`offsets.json`).
    pub(super) main: PathBuf,
    /// The table before the last write (`offsets.json.bak`).
    pub(super) bak: PathBuf,
    /// A write under way (`offsets.json.tmp-{pid}-{random}-{n}`, one name per [`OffsetFiles`] value
    /// of this process, so that two writers of one file never write into the same temporary
    /// file); never read.
    pub(super) tmp: PathBuf,
    /// Their directory.
    pub(super) dir: PathBuf,
    /// Locked by the store that has the file open (`offsets.json.lock`); never read.
    pub(super) lock: PathBuf,
}

/// Whether `path` names no file: its last part, as written, is empty (it ends with a
/// separator: `Path` would drop it and read `/data/offsets/` as a file `offsets` in `/data`,
/// with its backup in `/data/offsets/.bak`), `.` or `..`; or it is a root.
pub(super) fn names_no_file(path: &Path) -> bool {
    let text = path.as_os_str().to_string_lossy();
    let last = text
        .rsplit(std::path::is_separator)
        .next()
        .unwrap_or_default();
    matches!(last, "" | "." | "..") || path.file_name().is_none()
}

impl OffsetFiles {
    /// The files of the table at `main`, with a temporary file of their own.
    pub(super) fn new(main: PathBuf) -> Self {
        let with_suffix = |suffix: &str| {
            let mut name = main.as_os_str().to_os_string();
            name.push(suffix);
            PathBuf::from(name)
        };
        let dir = match main.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Self {
            bak: with_suffix(".bak"),
            tmp: with_suffix(&format!(".tmp-{}", unique())),
            lock: with_suffix(".lock"),
            dir,
            main,
        }
    }

    /// Takes the file for this store: an exclusive advisory lock on `offsets.json.lock`, held
    /// while the returned file is open. [`OffsetFileError::InUse`] when another store holds it
    /// (in this process or another: the lock is per open file). Where the file system cannot
    /// lock, the store goes on without, saying so.
    pub(super) fn take(&self) -> Result<Option<std::fs::File>, OffsetFileError> {
        let opened = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock);
        // One left by another user, not writable here, locks as well read-only (found by
        // review: the store, which writes through its directory, no longer opened).
        let file = match opened {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && self.lock.exists() => {
                std::fs::File::open(&self.lock)
            }
            other => other,
        }
        .map_err(|source| OffsetFileError::Read {
            path: self.lock.clone(),
            source,
        })?;
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(std::fs::TryLockError::WouldBlock) => Err(OffsetFileError::InUse {
                path: self.main.clone(),
                lock: self.lock.clone(),
            }),
            Err(std::fs::TryLockError::Error(e)) => {
                tracing::warn!(lock = %self.lock.display(), error = %e, "cannot lock the offset file (the file system does not lock?): nothing keeps another consumer from writing it too");
                Ok(None)
            }
        }
    }
}

/// How old a temporary file of a write (`offsets.json.tmp-*`) or of the writability probe
/// (`.offsets.json.probe-*`) must be for an open to remove it as left by a crash: a write
/// lasts milliseconds (at most its 10 s timeout), so a younger one may be another live
/// writer's.
pub const STALE_TEMPORARY_AGE: Duration = Duration::from_secs(10 * 60);

/// Removes the temporary files of `files`' table that a crashed writer left (see
/// [`STALE_TEMPORARY_AGE`]). What cannot be listed or removed is logged and left: it is never
/// read, and the table was opened.
pub(super) fn remove_stale_temporaries(files: &OffsetFiles) {
    let Some(name) = files.main.file_name().and_then(|n| n.to_str()) else {
        return;
    };
    let temporary = format!("{name}.tmp-");
    let probe = format!(".{OFFSET_FILE_NAME}.probe-");
    let entries = match std::fs::read_dir(&files.dir) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::debug!(dir = %files.dir.display(), error = %e, "could not list the offset file's directory for temporary files left by a crash");
            return;
        }
    };
    let now = SystemTime::now();
    let mut removed = 0usize;
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(entry_name) = file_name.to_str() else {
            continue;
        };
        if !entry_name.starts_with(&temporary) && !entry_name.starts_with(&probe) {
            continue;
        }
        let path = entry.path();
        // The entry's own time (a link's, not its target's): only files and links are removed.
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let age = meta
            .modified()
            .ok()
            .and_then(|at| now.duration_since(at).ok());
        if meta.is_dir() || age.is_none_or(|age| age < STALE_TEMPORARY_AGE) {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => removed += 1,
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "could not remove a temporary file left by a crash")
            }
        }
    }
    if removed > 0 {
        tracing::info!(dir = %files.dir.display(), removed, "removed temporary files that interrupted writes of the offset file left");
    }
}

/// `{pid}-{random}-{n}`: a name no other file of this process or of another running process
/// takes, also one with the same process id in another PID namespace (two containers sharing a
/// volume, each its own pid 1) or on another host (a shared file system). Found by review:
/// `{pid}-{n}` alone gave two such writers the same temporary file, whose interleaved writes
/// could tear the offset file.
pub(super) fn unique() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{}-{:016x}-{n}", std::process::id(), process_token())
}

/// A random number drawn once per process (std's hash keys are seeded by the OS).
fn process_token() -> u64 {
    static TOKEN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TOKEN.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.finish()
    })
}

/// `name` as one directory of a path, or why it cannot be one.
fn component<'a>(what: &'static str, name: &'a str) -> Result<&'a str, OffsetFileError> {
    let bad = name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']);
    if bad {
        return Err(OffsetFileError::BadName {
            what,
            value: name.to_string(),
        });
    }
    Ok(name)
}

/// `{dir}/{group}/offsets.json`.
pub(super) fn group_path(dir: &Path, group: &str) -> Result<PathBuf, OffsetFileError> {
    Ok(dir.join(component("group", group)?).join(OFFSET_FILE_NAME))
}

/// `{store_dir}/{client_id}/{group}/offsets.json`, the Java client's layout.
pub(super) fn java_path(
    store_dir: &Path,
    client_id: &str,
    group: &str,
) -> Result<PathBuf, OffsetFileError> {
    group_path(&store_dir.join(component("client id", client_id)?), group)
}

/// `~/.rocketmq_offsets`, the Java client's default directory.
pub(super) fn java_default_dir() -> Result<PathBuf, OffsetFileError> {
    // Deprecated before Rust 1.86 for Windows' sake; it reads HOME first, as wanted here.
    #[allow(deprecated)]
    let home = std::env::home_dir().filter(|h| !h.as_os_str().is_empty());
    home.map(|h| h.join(JAVA_DEFAULT_DIR))
        .ok_or(OffsetFileError::NoHome)
}

/// Where a table was read from at open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// `offsets.json`.
    Main,
    /// `offsets.json.bak`, because `offsets.json` did not exist.
    Backup,
    /// Neither file exists: no offsets yet.
    Nothing,
}

/// The table of `files`, by this rule:
///
/// - `offsets.json` exists: its table, or an error if it is not one (empty, truncated,
///   garbage, too large), never the backup in its place;
/// - it does not exist and `offsets.json.bak` does: the backup's table (or an error);
/// - neither exists: no offsets.
pub(super) fn load(files: &OffsetFiles) -> Result<(OffsetTable, Source), OffsetFileError> {
    if let Some(bytes) = read_bounded(&files.main)? {
        return match parse(&bytes) {
            Ok(table) => Ok((table, Source::Main)),
            Err(reason) => Err(OffsetFileError::Corrupt {
                path: files.main.clone(),
                reason,
                advice: advice_for_main(files),
            }),
        };
    }
    match read_bounded(&files.bak)? {
        Some(bytes) => match parse(&bytes) {
            Ok(table) => Ok((table, Source::Backup)),
            Err(reason) => Err(OffsetFileError::Corrupt {
                path: files.bak.clone(),
                reason,
                advice: format!(
                    "{} is missing, so this backup would be used: delete it to start over from \
                     the consumer's ConsumeFrom position",
                    files.main.display()
                ),
            }),
        },
        None => Ok((OffsetTable::new(), Source::Nothing)),
    }
}

/// What to do about a corrupt `offsets.json`: whether its backup could be used.
fn advice_for_main(files: &OffsetFiles) -> String {
    let backup = read_bounded(&files.bak)
        .ok()
        .flatten()
        .and_then(|bytes| parse(&bytes).ok());
    match backup {
        Some(table) => format!(
            "its backup {} is readable and holds {} offsets, from before the last write: move it \
             over {} to resume from them, or delete both files to start over from the \
             consumer's ConsumeFrom position",
            files.bak.display(),
            table.len(),
            files.main.display()
        ),
        None => format!(
            "there is no readable backup ({}): delete the file to start over from the \
             consumer's ConsumeFrom position",
            files.bak.display()
        ),
    }
}

/// The bytes of `path`, `None` if it does not exist; at most [`MAX_OFFSET_FILE_BYTES`].
pub(super) fn read_bounded(path: &Path) -> Result<Option<Vec<u8>>, OffsetFileError> {
    let read_error = |source| OffsetFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_error(e)),
    };
    let too_large = |size| OffsetFileError::TooLarge {
        path: path.to_path_buf(),
        size,
        limit: MAX_OFFSET_FILE_BYTES,
    };
    let size = file.metadata().map_err(read_error)?.len();
    if size > MAX_OFFSET_FILE_BYTES {
        return Err(too_large(size));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    // One byte over the limit tells a file that grew while read.
    file.take(MAX_OFFSET_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if read > MAX_OFFSET_FILE_BYTES {
        return Err(too_large(read));
    }
    Ok(Some(bytes))
}
