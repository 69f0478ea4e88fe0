//! [`OffsetFileError`]: why an offset file cannot be opened, read or written.

use std::path::PathBuf;

/// Why a [`FileOffsetStore`](super::FileOffsetStore) cannot be opened, or an offset file read.
/// Every error names the file or directory concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OffsetFileError {
    /// The file exists but could not be read (permissions, a directory in its place, an I/O
    /// error).
    #[error("cannot read the offset file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The file's directory could not be created, or a file could not be written in it.
    #[error("cannot write offset files in {}: {source}", dir.display())]
    NotWritable {
        /// The directory.
        dir: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than any offset table this store reads or writes
    /// ([`MAX_OFFSET_FILE_BYTES`](super::MAX_OFFSET_FILE_BYTES)).
    #[error(
        "the offset file {} is {size} bytes, over the {limit}-byte limit of an offset file: it is \
         not one (move it away to start over from the consumer's ConsumeFrom position)",
        path.display()
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size (at least; it may have grown while read).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The file is not an offset table: corrupt, truncated, empty, or another kind of file. It
    /// is never taken for "no offsets", which would start every queue over.
    #[error("the offset file {} is corrupt or truncated ({reason}); {advice}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
        /// What the operator can do: whether a readable backup exists, and how to use it or
        /// start over.
        advice: String,
    },
    /// A client id or group cannot name a directory of the offset file's path: empty, `.`,
    /// `..`, or holding a path separator or NUL.
    #[error(
        "the {what} `{value}` cannot name a directory of the offset file's path (empty, `.`, \
         `..`, or holding `/`, `\\` or NUL)"
    )]
    BadName {
        /// What it is (`client id`, `group`).
        what: &'static str,
        /// Its value.
        value: String,
    },
    /// The path given for the file ends with a separator (or names no file: `.`, `..`, a
    /// root): it would be read as a file named after its last directory, beside which the
    /// backup and temporary files could not be written.
    #[error(
        "the offset file path {} names a directory, not a file: give the file's path (such as {})",
        path.display(),
        path.join(super::OFFSET_FILE_NAME).display()
    )]
    NotAFile {
        /// The path given.
        path: PathBuf,
    },
    /// The default directory (`~/.rocketmq_offsets`) was asked for and this user has no home
    /// directory.
    #[error(
        "no home directory for the default offset directory ~/.rocketmq_offsets: set HOME, or \
         give the directory (FileOffsetStore::java_layout or in_dir)"
    )]
    NoHome,
    /// Another store holds the file: another consumer, in this process or another, opened it
    /// and has not let it go. Two writers would overwrite each other's progress (each write
    /// replaces the whole table).
    #[error(
        "the offset file {} is in use by another consumer (in this process or another, which holds {}): two writers would overwrite each other's progress; give each consumer its own file, or stop the other one first",
        path.display(),
        lock.display()
    )]
    InUse {
        /// The file.
        path: PathBuf,
        /// The lock file beside it.
        lock: PathBuf,
    },
}
