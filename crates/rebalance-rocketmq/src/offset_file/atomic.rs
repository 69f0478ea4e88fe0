//! Replacing the offset file so that a crash at any point leaves the old table or the new one,
//! never a damaged file or none (the Java client rewrites the file in place, and a crash
//! mid-write leaves it truncated).
//!
//! [`replace`] does, in `offsets.json`'s directory:
//!
//! 1. write the new text to this writer's own temporary file (`offsets.json.tmp-{pid}-{random}-{n}`)
//!    and fsync it;
//! 2. if `offsets.json` exists, rename it to `offsets.json.bak` (replacing the older backup;
//!    gone meanwhile, moved by another writer, it is left to that writer);
//! 3. rename the temporary file to `offsets.json`;
//! 4. fsync the directory, so that both renames are durable before the write is reported done.
//!
//! After a crash: during 1, `offsets.json` is untouched (old); between 2 and 3, `offsets.json`
//! is missing and `offsets.json.bak` holds the old table, which is what the open rule
//! (`files::load`) and the Java client read when the main file is missing; after 3, the new
//! table. Any subset of the two renames reaching the disk before a power loss gives one of
//! these states too, since the temporary file's data is synced before either.
//!
//! Two writers of one file (two processes given one path, against the documented rule) each
//! write their own temporary file and only rename whole files, so whatever their interleaving,
//! `offsets.json` (or, while it is missing, its backup) holds one of their tables: the last
//! rename wins, and neither write fails for the other's.
//!
//! The steps go through [`Steps`], so that tests can stop a write after any number of bytes
//! or between any two steps (a process crash; what a power loss does to data not yet synced is
//! the file system's, and the fsyncs are what this code does about it).

use std::io::Write;
use std::path::Path;

use super::files::OffsetFiles;

/// The file system operations a write is made of.
pub(super) trait Steps {
    /// Creates or truncates `path` (never through a link: [`create_file`]), writes `bytes` and syncs them to disk.
    fn write_synced(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()>;
    /// Renames `from` to `to`, replacing `to`.
    fn rename(&mut self, from: &Path, to: &Path) -> std::io::Result<()>;
    /// Syncs the directory `dir` (its entries: the renames) to disk.
    fn sync_dir(&mut self, dir: &Path) -> std::io::Result<()>;
}

/// The real file system.
pub(super) struct RealSteps;

impl Steps for RealSteps {
    fn write_synced(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let mut file = create_file(path)?;
        file.write_all(bytes)?;
        file.sync_all()
    }

    fn rename(&mut self, from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::rename(from, to)
    }

    fn sync_dir(&mut self, dir: &Path) -> std::io::Result<()> {
        #[cfg(unix)]
        {
            std::fs::File::open(dir)?.sync_all()
        }
        // Windows cannot open a directory as a file; its renames are not synced separately.
        #[cfg(not(unix))]
        {
            let _ = dir;
            Ok(())
        }
    }
}

/// Creates or truncates `path` for writing, never through a symbolic link: a link found at
/// `path` (planted there, which `File::create` would follow and truncate the file it points to)
/// is removed, the link itself and not what it points to, and the file created in its place.
/// On Unix the open refuses a link itself (`O_NOFOLLOW`), so a link put back in between is
/// refused too; elsewhere the check comes before the open.
pub(super) fn create_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW);
    }
    let is_link =
        || std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink());
    #[cfg(not(unix))]
    if is_link() {
        std::fs::remove_file(path)?;
    }
    match options.open(path) {
        Err(e) if is_link() => {
            tracing::warn!(path = %path.display(), error = %e, "a symbolic link stood where the offset file's temporary file is written; removed it");
            std::fs::remove_file(path)?;
            options.open(path)
        }
        result => result,
    }
}

/// Replaces the table of `files` with `text` (see the module's documentation). Which step
/// failed is in the error's message; a write that fails before its temporary file became
/// `offsets.json` removes it (each store has its own, so failed writes would pile up).
pub(super) fn replace(
    files: &OffsetFiles,
    text: &[u8],
    steps: &mut impl Steps,
) -> std::io::Result<()> {
    if let Err(e) = write_and_rename(files, text, steps) {
        if let Err(left) = std::fs::remove_file(&files.tmp)
            && left.kind() != std::io::ErrorKind::NotFound
        {
            tracing::debug!(path = %files.tmp.display(), error = %left, "could not remove the temporary file of a failed write");
        }
        return Err(e);
    }
    steps
        .sync_dir(&files.dir)
        .map_err(at("syncing the directory", &files.dir))
}

/// Steps 1 to 3: the new table written, synced and renamed to `offsets.json`.
fn write_and_rename(
    files: &OffsetFiles,
    text: &[u8],
    steps: &mut impl Steps,
) -> std::io::Result<()> {
    steps
        .write_synced(&files.tmp, text)
        .map_err(at("writing", &files.tmp))?;
    if files.main.exists() {
        match steps.rename(&files.main, &files.bak) {
            Ok(()) => {}
            // Another writer moved it to the backup after `exists`: so much the better.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::debug!(path = %files.main.display(), "the offset file was moved away by another writer during this write");
            }
            Err(e) => return Err(at("keeping the previous table as", &files.bak)(e)),
        }
    }
    steps
        .rename(&files.tmp, &files.main)
        .map_err(at("renaming the new table to", &files.main))
}

/// An error of `step` on `path`, saying so.
fn at(step: &str, path: &Path) -> impl FnOnce(std::io::Error) -> std::io::Error {
    let step = step.to_string();
    let path = path.display().to_string();
    move |e: std::io::Error| std::io::Error::new(e.kind(), format!("{step} {path}: {e}"))
}

/// Creates `dir` and its missing parents, and syncs the parent of each directory created, from
/// the deepest up: an fsync of a directory makes its entries durable, not its own entry in its
/// parent, and the writes sync only `dir`. A parent that cannot be synced (no read permission
/// on a directory created by someone else) is logged: the directories exist, and only a power
/// loss soon after could lose them.
pub(super) fn create_dir_synced(dir: &Path, steps: &mut impl Steps) -> std::io::Result<()> {
    let created: Vec<&Path> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .collect();
    std::fs::create_dir_all(dir)?;
    for made in created {
        let parent = match made.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            // A relative path's first directory: its parent is the working directory.
            _ => Path::new("."),
        };
        if let Err(e) = steps.sync_dir(parent) {
            tracing::warn!(dir = %parent.display(), error = %e, "could not sync a directory holding a new offset directory");
        }
    }
    Ok(())
}
