//! [`FileOffsetStore`]: a broadcasting consumer's offsets in a local file, in the layout and
//! format of the Java client's `LocalFileOffsetStore`, so that a restarted consumer resumes
//! where it stopped, and offsets a Java broadcasting consumer wrote are read as they are.
//!
//! **The path.** Java keeps one file per client and group,
//! `{dir}/{clientId}/{group}/offsets.json`, where `dir` is the JVM property
//! `rocketmq.client.localOffsetStoreDir` (default `~/.rocketmq_offsets`) and the client id is
//! `{ip}@{instanceName}` (`{ip}@DEFAULT` for a broadcasting consumer left at the defaults).
//! [`FileOffsetStore::java_default`] and [`FileOffsetStore::java_layout`] (the directory
//! given, as the property does) reproduce it. Since that path holds the client's IP, a host
//! whose address changes finds no file and starts over; [`FileOffsetStore::in_dir`] leaves the
//! client id out (`{dir}/{group}/offsets.json`), and [`FileOffsetStore::open`] takes the file's
//! path as it is. `in_dir(~/.rocketmq_offsets/{clientId}, group)` is the Java file.
//!
//! **The format** (`format.rs`): fastjson's, `{"offsetTable":{<queue object>:<offset>,…}}`
//! with queue objects as keys (not JSON; read and written with the crate's fastjson queue
//! keys), pretty-printed with tabs as Java writes it.
//!
//! **Reading** happens once, when the store is opened, so a file that cannot be used is an
//! error before the consumer starts (the consumer never sees a half-read table):
//!
//! | `offsets.json` | `offsets.json.bak` | the store opens with |
//! |---|---|---|
//! | a table | anything | its offsets |
//! | missing | a table | the backup's offsets |
//! | missing | missing | no offsets (each queue starts at the consumer's `ConsumeFrom` position) |
//! | missing | not a table | [`OffsetFileError::Corrupt`], naming the backup |
//! | empty, truncated, garbage | anything | [`OffsetFileError::Corrupt`], naming the file and saying whether the backup is readable |
//! | over [`MAX_OFFSET_FILE_BYTES`] | anything | [`OffsetFileError::TooLarge`] |
//!
//! **Where this differs from Java, on purpose:** Java also falls back to the backup when
//! `offsets.json` is empty or unparsable (a crash during its in-place write leaves it so). This
//! store refuses instead, with the file's path and what to do (move the readable backup over
//! the file, or delete both to start over): a damaged main file means the disk or someone else
//! damaged it, since this store's own writes never leave one, and resuming silently from an
//! older table would consume again everything since. A Java consumer killed mid-write leaves
//! such a file; the error says how to recover it.
//!
//! **Writing** (`atomic.rs`) replaces the whole file through a temporary file in the same
//! directory: write this store's own `offsets.json.tmp-{pid}-{n}` and fsync it, rename
//! `offsets.json` to `offsets.json.bak`, rename the temporary file to `offsets.json`, fsync
//! the directory. A crash at any point leaves the old table or the new one (between the
//! renames only the backup exists, and the open rule reads it), and at most a temporary file
//! behind, never read: the next open of the file removes the temporary files older than
//! [`STALE_TEMPORARY_AGE`] (a write takes milliseconds, and at most its 10 s timeout), so that
//! crashes do not pile them up. A temporary file is never written through a symbolic link found
//! at its name: the link is removed. `offsets.json.bak` therefore holds the table as it
//! was before the last write, as Java's does; it is read only when `offsets.json` is missing.
//! Java writes the file in place, without fsync.
//!
//! **When.** The runtime persists the committed offsets on its persistence tick (every 5 s)
//! with one [`persist_many`](OffsetStore::persist_many), and the final offsets of released
//! queues (a shutdown releases them all) the same way: each call writes the file once, and
//! not at all when no offset changed, on a blocking thread. Each answer is `Ok` only once the
//! file holding the offset is on disk, and comes within 10 s: a write still under way then (a
//! hung disk or network file system) goes on in the background, the answer is an error (the
//! runtime tries again at its next tick), and later writes wait for it without taking another
//! thread. Offsets of queues this client no longer holds stay in the file (as since Java
//! 5.2.0): a queue that comes back resumes from them.
//!
//! **One writer per file.** A store holds an advisory lock on `offsets.json.lock`, beside the
//! file, from its open until it (every clone of it) is dropped: a second store of the same file,
//! in this process or another, fails to open with [`OffsetFileError::InUse`], instead of the
//! two overwriting each other's progress (each write replaces the whole table), as two Java
//! clients with one client id do (Java does not lock the file, and a Java consumer writing the
//! same file is not kept off). Where the file system cannot lock, the store goes on without,
//! with a warning. A store refuses calls for a group other than the first one it served.

mod atomic;
mod error;
mod files;
mod format;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::namespace::{self, Namespace};
use async_trait::async_trait;
use rebalance_core::MessageQueue;
use rebalance_runtime::{OffsetScope, OffsetStore, RemoteError};

pub use error::OffsetFileError;
pub use files::{OFFSET_FILE_NAME, STALE_TEMPORARY_AGE};
pub use format::OffsetTable;

use atomic::{RealSteps, replace};
use files::{OffsetFiles, Source};

/// The largest offset file read or written: 32 MiB, some 300,000 queues in Java's layout.
pub const MAX_OFFSET_FILE_BYTES: u64 = 32 * 1024 * 1024;

/// How long a persist waits for the file to be written: a write still under way after it (a
/// hung disk or network file system) goes on in the background, and the persist answers an
/// error.
const WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A per-client [`OffsetStore`] ([`OffsetScope::Client`]) in a local file, for broadcasting
/// consumers: see the [module documentation](self) for the path, the format, the read rule
/// and how a write survives a crash.
///
/// Open it before building the consumer, so that an unusable file stops the program before
/// the consumer starts, and give it with
/// [`offset_store`](rebalance_runtime::ConsumerBuilder::offset_store) after `cluster` (or
/// after the broker client's store).
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use rebalance_rocketmq::FileOffsetStore;
/// use rebalance_runtime::config::MessageModel;
/// use rebalance_consume::{ConcurrentContext, ConcurrentListener, ConsumeResult, Message, PushConsumer};
/// use rebalance_runtime::memory::InMemoryCluster;
///
/// struct Print;
/// #[async_trait::async_trait]
/// impl ConcurrentListener for Print {
///     async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
///         for m in messages {
///             println!("{}", String::from_utf8_lossy(m.body()));
///         }
///         ConsumeResult::Success
///     }
/// }
///
/// let dir = tempfile::tempdir()?;
/// let cluster = InMemoryCluster::new();
/// cluster.create_topic("Prices", 1, 4);
/// let client = cluster.client("10.0.0.1@DEFAULT");
/// // `{dir}/price-watchers/offsets.json`; a corrupt file is an error here.
/// let offsets = Arc::new(FileOffsetStore::in_dir(dir.path(), "price-watchers")?);
/// let consumer = PushConsumer::builder("price-watchers")
///     .subscribe("Prices")
///     .message_model(MessageModel::Broadcasting)
///     .configure(|c| c.cluster(client.clone()).offset_store(offsets.clone()))
///     .source(Arc::new(client))
///     .concurrently(Arc::new(Print))
///     .start()
///     .await?;
/// consumer.consumer().wait_for_assignment(|a| a.len() == 4, std::time::Duration::from_secs(60)).await?;
/// consumer.shutdown().await;
/// // The shutdown persisted every queue's offset: a restart resumes from them (the file is
/// // one store's at a time: this one's until it and the consumer holding it are gone).
/// let path = offsets.path().to_path_buf();
/// drop((consumer, offsets));
/// let reopened = FileOffsetStore::open(path)?;
/// assert_eq!(reopened.offsets().len(), 4);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FileOffsetStore {
    inner: Arc<Inner>,
    /// The namespace the file's topics are in (see [`with_namespace`](Self::with_namespace)).
    namespace: Option<Namespace>,
}

#[derive(Debug)]
struct Inner {
    files: OffsetFiles,
    /// The offsets (the file's, and those persisted since), and their version.
    table: Mutex<Versioned>,
    /// The version the file holds.
    written: AtomicU64,
    /// Held by the one write under way, from before it starts on its blocking thread until it
    /// ends there (even when its persist stopped waiting), so that a hung write holds one
    /// thread, and the persists after it wait for it without holding any.
    writing: Arc<tokio::sync::Mutex<()>>,
    /// The group this store serves: the first one it was called for.
    group: OnceLock<String>,
    /// How long a persist waits for its write.
    write_timeout: std::time::Duration,
    /// The lock on the file, held while the store (any clone of it) lives.
    _held: Option<std::fs::File>,
}

#[derive(Debug)]
struct Versioned {
    offsets: OffsetTable,
    /// Bumped by every change of `offsets`.
    version: u64,
}

impl FileOffsetStore {
    /// Opens the offset table in the file `path` (creating its directory, synced into its
    /// parent): reads it (or its `.bak`, by the rule in the [module documentation](self)) and
    /// checks that files can be written beside it. The file itself is written at the first
    /// persist.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, OffsetFileError> {
        let path = path.into();
        if files::names_no_file(&path) {
            return Err(OffsetFileError::NotAFile { path });
        }
        let files = OffsetFiles::new(path);
        atomic::create_dir_synced(&files.dir, &mut RealSteps).map_err(|source| {
            OffsetFileError::NotWritable {
                dir: files.dir.clone(),
                source,
            }
        })?;
        // Before reading: a table read while another store writes it would be stale at once.
        let held = files.take()?;
        let (offsets, source) = files::load(&files)?;
        probe_writable(&files.dir)?;
        files::remove_stale_temporaries(&files);
        match source {
            Source::Main => {
                tracing::info!(path = %files.main.display(), offsets = offsets.len(), "opened the offset file")
            }
            Source::Backup => tracing::warn!(
                path = %files.main.display(),
                backup = %files.bak.display(),
                offsets = offsets.len(),
                "the offset file is missing (a write was interrupted, or it was deleted): resuming from its backup"
            ),
            Source::Nothing => {
                tracing::info!(path = %files.main.display(), "no offset file yet: every queue starts at the consumer's ConsumeFrom position")
            }
        }
        Ok(Self {
            namespace: None,
            inner: Arc::new(Inner {
                files,
                table: Mutex::new(Versioned {
                    offsets,
                    version: 0,
                }),
                written: AtomicU64::new(0),
                writing: Arc::new(tokio::sync::Mutex::new(())),
                group: OnceLock::new(),
                write_timeout: WRITE_TIMEOUT,
                _held: held,
            }),
        })
    }

    /// Reads the table in the file `path` as an open reads it (the backup only when the file is
    /// missing), without taking the file: to look at the progress of a consumer that has it
    /// open (a tool, a test). A table being replaced is read whole, the old one or the new.
    pub fn peek(path: impl Into<PathBuf>) -> Result<OffsetTable, OffsetFileError> {
        let path = path.into();
        if files::names_no_file(&path) {
            return Err(OffsetFileError::NotAFile { path });
        }
        files::load(&OffsetFiles::new(path)).map(|(offsets, _)| offsets)
    }

    /// Opens `{dir}/{group}/offsets.json`: a path that does not depend on the client id, so
    /// that it survives a change of the host's address. With `dir` =
    /// `~/.rocketmq_offsets/{clientId}` it is the Java client's file.
    pub fn in_dir(dir: impl AsRef<Path>, group: &str) -> Result<Self, OffsetFileError> {
        Self::open(files::group_path(dir.as_ref(), group)?)
    }

    /// Opens the Java client's file at its default place,
    /// `~/.rocketmq_offsets/{client_id}/{group}/offsets.json`.
    ///
    /// A Java broadcasting consumer's client id is `{ip}@{instanceName}` (`{ip}@DEFAULT` by
    /// default; with a unit name `@{unitName}` follows): pass the same to share its file. This
    /// library's default client id holds the process id and changes at every start, so pass a
    /// stable one here and to the consumer. With a (v1) namespace, Java's group directory is
    /// the namespaced group, `{namespace}%{group}`, and its keys the namespaced topics: give
    /// the store the namespace too ([`with_namespace`](Self::with_namespace)). The home directory is `$HOME` (Java's
    /// `user.home` comes from the password database; they differ only when `HOME` was
    /// changed).
    pub fn java_default(client_id: &str, group: &str) -> Result<Self, OffsetFileError> {
        Self::java_layout(files::java_default_dir()?, client_id, group)
    }

    /// Opens `{store_dir}/{client_id}/{group}/offsets.json`: the Java client's file when
    /// `store_dir` is its `rocketmq.client.localOffsetStoreDir` (see
    /// [`java_default`](Self::java_default) for the client id and group).
    pub fn java_layout(
        store_dir: impl AsRef<Path>,
        client_id: &str,
        group: &str,
    ) -> Result<Self, OffsetFileError> {
        Self::open(files::java_path(store_dir.as_ref(), client_id, group)?)
    }

    /// Keys the file's queues by their topics in `namespace` (`{namespace}%{topic}`, a retry
    /// topic `%RETRY%{namespace}%{group}`), as a Java client in that (v1) namespace writes
    /// them: its queues carry the namespaced topic. Give the consumer's namespace to read and
    /// keep a Java broadcasting consumer's file; without it, the file's namespaced keys are
    /// never found (every queue starts at its `ConsumeFrom` position) and plain keys are
    /// written beside them, which the Java client does not read. The consumer's queues (plain
    /// names, as the runtime knows them) are put in the namespace on the way in;
    /// [`offsets`](Self::offsets) shows the file's keys.
    pub fn with_namespace(mut self, namespace: Namespace) -> Self {
        self.namespace = Some(namespace);
        self
    }

    /// `queue` as the file keys it: its topic in the namespace, if any.
    fn key<'a>(&self, queue: &'a MessageQueue) -> std::borrow::Cow<'a, MessageQueue> {
        match namespace::wrap(self.namespace.as_ref(), &queue.topic) {
            std::borrow::Cow::Borrowed(_) => std::borrow::Cow::Borrowed(queue),
            std::borrow::Cow::Owned(topic) => std::borrow::Cow::Owned(MessageQueue::new(
                topic,
                queue.broker_name.clone(),
                queue.queue_id,
            )),
        }
    }

    /// The offset file (`offsets.json`; the backup is beside it, `offsets.json.bak`).
    pub fn path(&self) -> &Path {
        &self.inner.files.main
    }

    /// Every offset the store holds: the file's as opened, and those persisted since (written
    /// to the file or about to be).
    pub fn offsets(&self) -> OffsetTable {
        self.inner.lock_table().offsets.clone()
    }

    /// Refuses a group other than the first this store served (one file, one group).
    fn check_group(&self, group: &str) -> Result<(), RemoteError> {
        let served = self.inner.group.get_or_init(|| group.to_string());
        if served == group {
            return Ok(());
        }
        Err(RemoteError::Storage(format!(
            "the offset file {} keeps group `{served}`'s offsets, not group `{group}`'s: give \
             each consumer a FileOffsetStore of its own",
            self.inner.files.main.display()
        )))
    }

    /// Writes the table to the file unless it already holds `version` or a later one; an
    /// error when that has not happened within the store's write timeout (the write goes on).
    async fn flush(&self, version: u64) -> Result<(), RemoteError> {
        if self.inner.written.load(Ordering::Acquire) >= version {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + self.inner.write_timeout;
        let unfinished = || {
            RemoteError::Storage(format!(
                "writing the offset file {} has not finished after {:?} (a slow or hung disk?); \
                 it goes on in the background, and the next persist writes the offsets again",
                self.inner.files.main.display(),
                self.inner.write_timeout
            ))
        };
        let Ok(writing) =
            tokio::time::timeout_at(deadline, self.inner.writing.clone().lock_owned()).await
        else {
            return Err(unfinished());
        };
        let inner = self.inner.clone();
        let write = tokio::task::spawn_blocking(move || {
            let _writing = writing;
            inner.write_latest()
        });
        match tokio::time::timeout_at(deadline, write).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => Err(RemoteError::Storage(format!(
                "writing the offset file {} was interrupted: {e}",
                self.inner.files.main.display()
            ))),
            Err(_) => Err(unfinished()),
        }
    }
}

impl Inner {
    fn lock_table(&self) -> std::sync::MutexGuard<'_, Versioned> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `offsets`; the version the file must reach to hold them.
    fn update(&self, offsets: &[(MessageQueue, i64)]) -> u64 {
        let mut table = self.lock_table();
        let mut changed = false;
        for (queue, offset) in offsets {
            if table.offsets.get(queue) != Some(offset) {
                table.offsets.insert(queue.clone(), *offset);
                changed = true;
            }
        }
        if changed {
            table.version += 1;
        }
        table.version
    }

    /// Writes the latest table, unless the file already holds it (a write that finished while
    /// this one waited wrote it). Blocking: runs on a blocking thread, with `writing` held.
    fn write_latest(&self) -> Result<(), RemoteError> {
        let (version, offsets) = {
            let table = self.lock_table();
            (table.version, table.offsets.clone())
        };
        if self.written.load(Ordering::Acquire) >= version {
            return Ok(());
        }
        let text = format::render(&offsets);
        let size = u64::try_from(text.len()).unwrap_or(u64::MAX);
        if size > MAX_OFFSET_FILE_BYTES {
            return Err(RemoteError::Storage(format!(
                "the offset table of {} queues takes {size} bytes, over the {MAX_OFFSET_FILE_BYTES}-byte \
                 limit of an offset file; not written to {}",
                offsets.len(),
                self.files.main.display()
            )));
        }
        match replace(&self.files, text.as_bytes(), &mut RealSteps) {
            Ok(()) => {
                self.written.store(version, Ordering::Release);
                tracing::debug!(path = %self.files.main.display(), offsets = offsets.len(), version, "wrote the offset file");
                Ok(())
            }
            Err(e) => Err(RemoteError::Storage(format!(
                "cannot write the offset file {}: {e}",
                self.files.main.display()
            ))),
        }
    }
}

/// Checks that a file can be created in `dir` (a read-only directory fails at open, not at
/// every persistence tick); the probe's name is this call's own (two stores opened at once
/// must not remove each other's).
fn probe_writable(dir: &Path) -> Result<(), OffsetFileError> {
    let probe = dir.join(format!(".{OFFSET_FILE_NAME}.probe-{}", files::unique()));
    let not_writable = |source| OffsetFileError::NotWritable {
        dir: dir.to_path_buf(),
        source,
    };
    atomic::create_file(&probe).map_err(not_writable)?;
    std::fs::remove_file(&probe).map_err(not_writable)
}

#[async_trait]
impl OffsetStore for FileOffsetStore {
    async fn read(&self, group: &str, queue: &MessageQueue) -> Result<Option<i64>, RemoteError> {
        self.check_group(group)?;
        let key = self.key(queue);
        Ok(self.inner.lock_table().offsets.get(&*key).copied())
    }

    /// One look at the table for all of them.
    async fn read_many(
        &self,
        group: &str,
        queues: &[MessageQueue],
    ) -> Vec<Result<Option<i64>, RemoteError>> {
        if let Err(e) = self.check_group(group) {
            return vec![Err(e); queues.len()];
        }
        let table = self.inner.lock_table();
        queues
            .iter()
            .map(|queue| Ok(table.offsets.get(&*self.key(queue)).copied()))
            .collect()
    }

    /// Records the offset and writes the file (not when the offset is already stored).
    async fn persist(
        &self,
        group: &str,
        queue: &MessageQueue,
        offset: i64,
    ) -> Result<(), RemoteError> {
        self.check_group(group)?;
        let version = self.inner.update(&[(self.key(queue).into_owned(), offset)]);
        self.flush(version).await
    }

    /// Records every offset and writes the file once (not at all when none changed and the
    /// file is up to date); every answer is that write's.
    async fn persist_many(
        &self,
        group: &str,
        offsets: &[(MessageQueue, i64)],
    ) -> Vec<Result<(), RemoteError>> {
        if let Err(e) = self.check_group(group) {
            return vec![Err(e); offsets.len()];
        }
        let version = if self.namespace.is_some() {
            let keyed: Vec<(MessageQueue, i64)> = offsets
                .iter()
                .map(|(queue, offset)| (self.key(queue).into_owned(), *offset))
                .collect();
            self.inner.update(&keyed)
        } else {
            self.inner.update(offsets)
        };
        let answer = self.flush(version).await;
        vec![answer; offsets.len()]
    }

    // `remove` keeps the offset (the default does nothing): the file is the only copy, and a
    // queue that comes back resumes from it.

    fn scope(&self) -> OffsetScope {
        OffsetScope::Client
    }
}
