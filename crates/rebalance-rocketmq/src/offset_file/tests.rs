use std::io::Write;
use std::path::Path;

use proptest::prelude::*;

use super::atomic::Steps;
use super::files::{OffsetFiles, Source, load};
use super::format::{parse, render};
use super::*;

/// A file as the Java client writes it (`OffsetSerializeWrapper`, `LocalFileOffsetStore`):
/// fastjson's pretty format, tabs, queue objects as keys, fields in alphabetical order.
const JAVA_FILE: &str = "{\n\t\"offsetTable\":{{\n\t\t\t\"brokerName\":\"broker-a\",\n\t\t\t\"queueId\":0,\n\t\t\t\"topic\":\"T\"\n\t\t}:42,{\n\t\t\t\"brokerName\":\"broker-a\",\n\t\t\t\"queueId\":1,\n\t\t\t\"topic\":\"T\"\n\t\t}:17\n\t}\n}";

fn q(topic: &str, broker: &str, id: i32) -> MessageQueue {
    MessageQueue::new(topic, broker, id)
}

fn table(entries: &[(MessageQueue, i64)]) -> OffsetTable {
    entries.iter().cloned().collect()
}

fn java_table() -> OffsetTable {
    table(&[(q("T", "broker-a", 0), 42), (q("T", "broker-a", 1), 17)])
}

fn files_in(dir: &Path) -> OffsetFiles {
    OffsetFiles::new(dir.join("G").join(OFFSET_FILE_NAME))
}

fn write(path: &Path, text: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A path naming a directory, not a file, is refused at open (found by review: `/data/offsets/`
/// opened as a file `offsets` in `/data`, its backup and temporary files in a directory that
/// did not exist, and every persist failed).
#[test]
fn a_path_naming_no_file_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let missing = format!("{}/missing/", dir.path().display());
    for path in [missing.as_str(), ".", "..", "/", "offsets/.", "offsets/.."] {
        assert!(
            matches!(
                FileOffsetStore::open(path),
                Err(OffsetFileError::NotAFile { .. })
            ),
            "{path}"
        );
    }
    let text = FileOffsetStore::open(missing.as_str())
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("names a directory") && text.contains("offsets.json"),
        "{text}"
    );
    assert!(!dir.path().join("missing").exists(), "nothing created");
    FileOffsetStore::open(dir.path().join("offsets.json")).unwrap();
}

#[test]
fn a_file_as_java_writes_it_is_read_as_is() {
    assert_eq!(parse(JAVA_FILE.as_bytes()), Ok(java_table()));
}

#[test]
fn what_we_write_is_the_java_layout() {
    assert_eq!(render(&java_table()), JAVA_FILE);
    assert_eq!(render(&OffsetTable::new()), "{\n\t\"offsetTable\":{}\n}");
    assert_eq!(
        parse(render(&OffsetTable::new()).as_bytes()),
        Ok(OffsetTable::new())
    );
}

#[test]
fn keys_in_any_order_any_whitespace_and_string_keys_are_read() {
    let expected = java_table();
    for text in [
        // The Rust broker's field order, compact.
        r#"{"offsetTable":{{"topic":"T","brokerName":"broker-a","queueId":0}:42,{"queueId":1,"topic":"T","brokerName":"broker-a"}:17}}"#,
        // Spaces and CRLF, other fields beside the table.
        "{ \"version\" : 3 ,\r\n \"offsetTable\" : { { \"topic\" : \"T\" , \"queueId\" : 0 , \"brokerName\" : \"broker-a\" } : 42 ,\r\n{\"brokerName\":\"broker-a\",\"queueId\":1,\"topic\":\"T\"} : 17 } }",
        // Keys written as JSON strings holding the queue object.
        r#"{"offsetTable":{"{\"brokerName\":\"broker-a\",\"queueId\":0,\"topic\":\"T\"}":42,"{\"brokerName\":\"broker-a\",\"queueId\":1,\"topic\":\"T\"}":17}}"#,
    ] {
        assert_eq!(parse(text.as_bytes()), Ok(expected.clone()), "{text}");
    }
    // A missing or null table is an empty one, as Java reads it; a later duplicate wins.
    assert_eq!(parse(b"{}"), Ok(OffsetTable::new()));
    assert_eq!(parse(br#"{"offsetTable":null}"#), Ok(OffsetTable::new()));
    let twice = r#"{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:1,{"topic":"T","brokerName":"b","queueId":0}:2}}"#;
    assert_eq!(parse(twice.as_bytes()), Ok(table(&[(q("T", "b", 0), 2)])));
}

#[test]
fn anything_but_an_offset_table_is_an_error_saying_why() {
    for (text, why) in [
        ("", "empty"),
        (" \n\t", "whitespace"),
        ("null", "not an offset table"),
        ("[1,2]", "not an offset table"),
        ("{\"offsetTable\":[]}", "not an offset table"),
        ("{\"offsetTable\":{\"T\":1}}", "not a message queue"),
        (
            "{\"offsetTable\":{{\"topic\":\"T\",\"brokerName\":\"b\"}:1}}",
            "not a message queue",
        ),
        (
            "{\"offsetTable\":{{\"topic\":\"T\",\"brokerName\":\"b\",\"queueId\":0}:\"1\"}}",
            "not an integer",
        ),
        (
            "{\"offsetTable\":{{\"topic\":\"T\",\"brokerName\":\"b\",\"queueId\":0}:1.5}}",
            "not an integer",
        ),
        ("{\"offsetTable\":{}} {}", "not an offset table"),
    ] {
        let reason = parse(text.as_bytes()).expect_err(text);
        assert!(reason.contains(why), "{text}: {reason}");
    }
    let reason = parse(&[0xff, 0xfe, b'{']).unwrap_err();
    assert!(reason.contains("UTF-8"), "{reason}");
}

fn names() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9%_-]{1,12}",
        // Quotes, backslashes, braces, colons, control characters and any Unicode.
        "[\"\\\\{}:,\\x00-\\x1f\u{e9}\u{4e2d}\u{1f600}a-z]{0,12}",
        any::<String>(),
    ]
}

fn tables() -> impl Strategy<Value = OffsetTable> {
    prop::collection::btree_map(
        (names(), names(), any::<i32>()).prop_map(|(t, b, id)| MessageQueue::new(t, b, id)),
        any::<i64>(),
        0..6,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the names and offsets, what is written reads back the same.
    #[test]
    fn what_is_written_reads_back(table in tables()) {
        prop_assert_eq!(parse(render(&table).as_bytes()), Ok(table));
    }

    /// A file cut anywhere (a crash during Java's in-place write) is an error, never a shorter
    /// table.
    #[test]
    fn a_truncated_file_is_an_error(table in tables(), cut in any::<prop::sample::Index>()) {
        let text = render(&table);
        let at = cut.index(text.len());
        let cut = &text.as_bytes()[..at];
        prop_assert!(parse(cut).is_err(), "{:?} parsed", String::from_utf8_lossy(cut));
    }

    /// Any bytes are parsed without panicking.
    #[test]
    fn any_bytes_are_parsed_without_panicking(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = parse(&bytes);
    }

    /// Text close to an offset file is parsed without panicking.
    #[test]
    fn offset_like_text_is_parsed_without_panicking(text in "[{}\\[\\]\":,0-9a-zA-Z \\\\-]{0,120}") {
        let _ = parse(format!("{{\"offsetTable\":{text}").as_bytes());
        let _ = parse(text.as_bytes());
    }
}

// ----- The open rule -----

#[test]
fn no_file_is_no_offsets_and_nothing_is_written_until_a_persist() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileOffsetStore::in_dir(dir.path(), "G").unwrap();
    assert_eq!(store.path(), dir.path().join("G").join("offsets.json"));
    assert!(store.offsets().is_empty());
    assert!(!store.path().exists());
    // The probe left nothing behind: only the lock the store holds.
    let names: Vec<_> = std::fs::read_dir(dir.path().join("G"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["offsets.json.lock"]);
}

#[test]
fn the_main_file_wins_over_its_backup() {
    let dir = tempfile::tempdir().unwrap();
    let files = files_in(dir.path());
    write(&files.main, JAVA_FILE.as_bytes());
    write(&files.bak, b"garbage");
    assert_eq!(load(&files).unwrap(), (java_table(), Source::Main));
}

#[test]
fn a_missing_main_file_is_resumed_from_its_backup() {
    let dir = tempfile::tempdir().unwrap();
    let files = files_in(dir.path());
    write(&files.bak, JAVA_FILE.as_bytes());
    let store = FileOffsetStore::open(&files.main).unwrap();
    assert_eq!(store.offsets(), java_table());
}

#[test]
fn a_corrupt_backup_of_a_missing_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let files = files_in(dir.path());
    write(&files.bak, &JAVA_FILE.as_bytes()[..30]);
    let error = FileOffsetStore::open(&files.main).unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(&error, OffsetFileError::Corrupt { path, .. } if *path == files.bak),
        "{error:?}"
    );
    assert!(text.contains(&files.bak.display().to_string()), "{text}");
}

#[test]
fn an_empty_or_truncated_main_file_is_an_error_even_with_a_good_backup() {
    for main in [&b""[..], &JAVA_FILE.as_bytes()[..JAVA_FILE.len() - 1]] {
        let dir = tempfile::tempdir().unwrap();
        let files = files_in(dir.path());
        write(&files.main, main);
        write(&files.bak, JAVA_FILE.as_bytes());
        let error = FileOffsetStore::open(&files.main).unwrap_err();
        let OffsetFileError::Corrupt { path, advice, .. } = &error else {
            panic!("{error:?}");
        };
        assert_eq!(path, &files.main);
        assert!(advice.contains("holds 2 offsets"), "{advice}");
        let text = error.to_string();
        assert!(text.contains(&files.main.display().to_string()), "{text}");
        assert!(text.contains(&files.bak.display().to_string()), "{text}");
    }
}

#[test]
fn a_garbage_main_file_without_a_backup_is_an_error_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let files = files_in(dir.path());
    write(&files.main, b"{\"offsetTable\":{{\"brokerName\":\"b\"");
    let error = FileOffsetStore::open(&files.main).unwrap_err();
    assert!(error.to_string().contains("no readable backup"), "{error}");
}

#[test]
fn a_file_over_the_limit_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let files = files_in(dir.path());
    std::fs::create_dir_all(&files.dir).unwrap();
    // Sparse: nothing is written.
    std::fs::File::create(&files.main)
        .unwrap()
        .set_len(MAX_OFFSET_FILE_BYTES + 1)
        .unwrap();
    let error = FileOffsetStore::open(&files.main).unwrap_err();
    assert!(
        matches!(error, OffsetFileError::TooLarge { size, .. } if size == MAX_OFFSET_FILE_BYTES + 1),
        "{error:?}"
    );
}

#[test]
fn a_directory_that_cannot_be_made_is_an_error_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("file");
    write(&blocker, b"not a directory");
    let error = FileOffsetStore::in_dir(&blocker, "G").unwrap_err();
    assert!(
        matches!(&error, OffsetFileError::NotWritable { dir, .. } if *dir == blocker.join("G")),
        "{error:?}"
    );
}

#[test]
fn the_java_layout_and_names_that_cannot_be_directories() {
    let root = Path::new("/var/offsets");
    assert_eq!(
        files::java_path(root, "10.0.0.1@DEFAULT", "NS%G").unwrap(),
        Path::new("/var/offsets/10.0.0.1@DEFAULT/NS%G/offsets.json")
    );
    for (client, group) in [
        ("", "G"),
        ("..", "G"),
        ("a/b", "G"),
        ("c", ""),
        ("c", "."),
        ("c", "x\\y"),
        ("c", "x\0"),
    ] {
        assert!(
            matches!(
                files::java_path(root, client, group),
                Err(OffsetFileError::BadName { .. })
            ),
            "{client:?} {group:?}"
        );
    }
    if let Ok(dir) = files::java_default_dir() {
        assert!(dir.ends_with(".rocketmq_offsets"), "{}", dir.display());
    }
}

#[test]
fn a_java_clients_file_is_found_in_its_layout_and_read_as_is() {
    let root = tempfile::tempdir().unwrap();
    let java_file = root
        .path()
        .join("10.0.0.1@DEFAULT")
        .join("G")
        .join("offsets.json");
    write(&java_file, JAVA_FILE.as_bytes());
    let store = FileOffsetStore::java_layout(root.path(), "10.0.0.1@DEFAULT", "G").unwrap();
    assert_eq!(store.path(), java_file);
    assert_eq!(store.offsets(), java_table());
    drop(store);
    let same = FileOffsetStore::in_dir(root.path().join("10.0.0.1@DEFAULT"), "G").unwrap();
    assert_eq!(same.path(), java_file);
}

// ----- The store -----

/// A Java broadcasting consumer in the namespace `NS` keys its queues by their namespaced
/// topics (`NS%T`), in the directory of its namespaced group: read and kept with
/// `with_namespace`, whose consumer knows the plain names (found by review: the keys were
/// never found, the consumer started over from its `ConsumeFrom` position, and plain keys were
/// written beside them, which the Java client does not read).
#[tokio::test]
async fn a_namespaced_java_file_is_read_and_kept_in_its_namespace() {
    let root = tempfile::tempdir().unwrap();
    let java_file = root
        .path()
        .join("10.0.0.1@DEFAULT")
        .join("NS%G")
        .join("offsets.json");
    write(
        &java_file,
        JAVA_FILE.replace("\"T\"", "\"NS%T\"").as_bytes(),
    );
    let namespace = crate::Namespace::new("NS").unwrap();
    let store = FileOffsetStore::java_layout(root.path(), "10.0.0.1@DEFAULT", "NS%G")
        .unwrap()
        .with_namespace(namespace.clone());
    let (q0, q1) = (q("T", "broker-a", 0), q("T", "broker-a", 1));
    assert_eq!(store.read("G", &q0).await, Ok(Some(42)));
    assert_eq!(
        store.read_many("G", &[q0.clone(), q1.clone()]).await,
        vec![Ok(Some(42)), Ok(Some(17))]
    );
    store.persist("G", &q0, 50).await.unwrap();
    let answers = store.persist_many("G", &[(q1.clone(), 20)]).await;
    assert_eq!(answers, vec![Ok(())]);
    let in_file = table(&[
        (q("NS%T", "broker-a", 0), 50),
        (q("NS%T", "broker-a", 1), 20),
    ]);
    assert_eq!(store.offsets(), in_file, "the file's keys, namespaced");
    drop(store);
    let reopened = FileOffsetStore::java_layout(root.path(), "10.0.0.1@DEFAULT", "NS%G").unwrap();
    assert_eq!(reopened.offsets(), in_file, "as written");
    // Without the namespace, nothing of it is found.
    assert_eq!(reopened.read("G", &q0).await, Ok(None));
}

#[tokio::test]
async fn persist_many_writes_the_whole_table_once_and_keeps_the_previous_as_backup() {
    let dir = tempfile::tempdir().unwrap();
    let files = files_in(dir.path());
    write(&files.main, JAVA_FILE.as_bytes());
    let store = FileOffsetStore::open(&files.main).unwrap();
    let other = q("U", "broker-b", 3);
    let answers = store
        .persist_many("G", &[(q("T", "broker-a", 0), 50), (other.clone(), 9)])
        .await;
    assert_eq!(answers, vec![Ok(()), Ok(())]);
    // Queue 1 was not persisted now: its entry is kept (Java since 5.2.0).
    let expected = table(&[
        (q("T", "broker-a", 0), 50),
        (q("T", "broker-a", 1), 17),
        (other, 9),
    ]);
    assert_eq!(
        std::fs::read_to_string(&files.main).unwrap(),
        render(&expected)
    );
    assert_eq!(std::fs::read_to_string(&files.bak).unwrap(), JAVA_FILE);
    assert!(!store.inner.files.tmp.exists());
    assert_eq!(
        std::fs::read_dir(&files.dir).unwrap().count(),
        3,
        "the file, its backup and the lock"
    );
    assert_eq!(store.read("G", &q("T", "broker-a", 1)).await, Ok(Some(17)));
    assert_eq!(FileOffsetStore::peek(&files.main).unwrap(), expected);
}

#[tokio::test]
async fn an_unchanged_offset_is_not_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileOffsetStore::in_dir(dir.path(), "G").unwrap();
    let queue = q("T", "b", 0);
    store.persist("G", &queue, 5).await.unwrap();
    assert!(store.path().exists());
    std::fs::remove_file(store.path()).unwrap();
    store.persist_many("G", &[(queue.clone(), 5)]).await[0]
        .clone()
        .unwrap();
    store.persist("G", &queue, 5).await.unwrap();
    assert!(!store.path().exists(), "nothing changed, nothing written");
    store.persist("G", &queue, 6).await.unwrap();
    assert_eq!(
        FileOffsetStore::peek(store.path()).unwrap(),
        table(&[(queue, 6)])
    );
}

#[tokio::test]
async fn a_failed_write_is_an_error_naming_the_file_and_is_written_at_the_next_persist() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileOffsetStore::open(files_in(dir.path()).main).unwrap();
    let files = store.inner.files.clone();
    // A directory where the temporary file goes: creating it fails, even as root.
    std::fs::create_dir_all(&files.tmp).unwrap();
    let queue = q("T", "b", 0);
    let answers = store.persist_many("G", &[(queue.clone(), 7)]).await;
    let Err(RemoteError::Storage(text)) = &answers[0] else {
        panic!("{answers:?}");
    };
    assert!(text.contains(&files.main.display().to_string()), "{text}");
    assert!(!files.main.exists());
    std::fs::remove_dir(&files.tmp).unwrap();
    // Nothing new to record, but the file is behind: written now.
    assert_eq!(
        store.persist_many("G", &[(queue.clone(), 7)]).await,
        vec![Ok(())]
    );
    assert_eq!(
        FileOffsetStore::peek(&files.main).unwrap(),
        table(&[(queue, 7)])
    );
}

#[tokio::test]
async fn a_store_serves_one_group_and_keeps_released_queues() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileOffsetStore::in_dir(dir.path(), "G").unwrap();
    let queue = q("T", "b", 0);
    assert_eq!(store.read("G", &queue).await, Ok(None));
    store.persist("G", &queue, 3).await.unwrap();
    store.remove("G", &queue).await.unwrap();
    assert_eq!(
        store.read_many("G", std::slice::from_ref(&queue)).await,
        vec![Ok(Some(3))]
    );
    let refused = store.read("H", &queue).await.unwrap_err();
    assert!(refused.to_string().contains("group `G`"), "{refused}");
    assert!(store.persist_many("H", &[(queue, 1)]).await[0].is_err());
    assert_eq!(store.scope(), OffsetScope::Client);
}

// ----- Crashes during a write -----

/// A process that dies after `budget` units of work: creating a file, each byte written,
/// the fsync, each rename and the directory's sync cost one each.
struct CrashAfter {
    budget: usize,
}

impl CrashAfter {
    fn spend(&mut self, units: usize) -> usize {
        let spent = units.min(self.budget);
        self.budget -= spent;
        spent
    }
}

fn crashed() -> std::io::Error {
    std::io::Error::other("crashed")
}

impl Steps for CrashAfter {
    fn write_synced(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        if self.spend(1) == 0 {
            return Err(crashed());
        }
        let mut file = std::fs::File::create(path)?;
        let written = self.spend(bytes.len());
        file.write_all(&bytes[..written])?;
        if written < bytes.len() || self.spend(1) == 0 {
            return Err(crashed());
        }
        // What is written is in the page cache: a process crash keeps it either way.
        Ok(())
    }

    fn rename(&mut self, from: &Path, to: &Path) -> std::io::Result<()> {
        if self.spend(1) == 0 {
            return Err(crashed());
        }
        std::fs::rename(from, to)
    }

    fn sync_dir(&mut self, _dir: &Path) -> std::io::Result<()> {
        if self.spend(1) == 0 {
            return Err(crashed());
        }
        Ok(())
    }
}

/// How the files stand before the write that crashes.
#[derive(Debug, Clone)]
struct Before {
    /// `offsets.json`.
    main: Option<OffsetTable>,
    /// `offsets.json.bak`.
    bak: Option<OffsetTable>,
    /// A temporary file left by an earlier crash.
    stale_tmp: bool,
}

fn befores() -> impl Strategy<Value = Before> {
    (
        prop::option::of(tables()),
        prop::option::of(tables()),
        any::<bool>(),
    )
        .prop_map(|(main, bak, stale_tmp)| Before {
            main,
            bak,
            stale_tmp,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A crash at any point of a write leaves the old offsets or the new ones, never an
    /// unreadable file or no offsets; and the next write after the crash works.
    #[test]
    fn a_crash_at_any_point_of_a_write_leaves_the_old_or_the_new_offsets(
        before in befores(),
        new in tables(),
        newer in tables(),
        crash_at in any::<prop::sample::Index>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let files = files_in(dir.path());
        std::fs::create_dir_all(&files.dir).unwrap();
        if let Some(main) = &before.main {
            std::fs::write(&files.main, render(main)).unwrap();
        }
        if let Some(bak) = &before.bak {
            std::fs::write(&files.bak, render(bak)).unwrap();
        }
        if before.stale_tmp {
            std::fs::write(&files.tmp, "{\"offsetTable\":{{\"bro").unwrap();
        }
        let (old, _) = load(&files).unwrap();
        let text = render(&new);
        // Every unit of a whole write: create, bytes, fsync, [rename to .bak], rename, sync.
        let total = 1 + text.len() + 1 + usize::from(files.main.exists()) + 1 + 1;
        let budget = crash_at.index(total + 1);
        let outcome = atomic::replace(&files, text.as_bytes(), &mut CrashAfter { budget });
        prop_assert_eq!(outcome.is_ok(), budget == total);
        let (after, _) = load(&files).map_err(|e| TestCaseError::fail(e.to_string()))?;
        if budget == total {
            prop_assert_eq!(&after, &new);
        } else {
            prop_assert!(after == old || after == new, "after {budget} of {total}: {after:?}");
        }
        // The store opened after the crash writes again.
        atomic::replace(&files, render(&newer).as_bytes(), &mut atomic::RealSteps).unwrap();
        prop_assert_eq!(load(&files).unwrap().0, newer);
    }
}

// ----- Two writers of one file -----

/// The real steps, with `between` run once at step `at` of the write: 0 halfway through
/// writing the temporary file, 1 before the first rename, 2 before the second (or the
/// directory's sync when there is one rename only).
struct Interleaved<F: FnMut()> {
    at: usize,
    step: usize,
    between: Option<F>,
}

impl<F: FnMut()> Interleaved<F> {
    fn step(&mut self) {
        if self.step == self.at
            && let Some(mut between) = self.between.take()
        {
            between();
        }
        self.step += 1;
    }
}

impl<F: FnMut()> Steps for Interleaved<F> {
    fn write_synced(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let mut file = std::fs::File::create(path)?;
        let half = bytes.len() / 2;
        file.write_all(&bytes[..half])?;
        self.step();
        file.write_all(&bytes[half..])?;
        file.sync_all()
    }

    fn rename(&mut self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.step();
        std::fs::rename(from, to)
    }

    fn sync_dir(&mut self, dir: &Path) -> std::io::Result<()> {
        self.step();
        atomic::RealSteps.sync_dir(dir)
    }
}

/// Two stores given one file (two processes with one client id, as two Java clients on one
/// host at the default `{ip}@DEFAULT`): whatever point of one's write the other's whole write
/// comes at, both succeed and the file holds one of their tables, never a damaged one.
#[test]
fn two_writers_of_one_file_never_leave_it_unreadable() {
    let mine = table(&[
        (q("T", "broker-a", 0), 1_000_000),
        (q("T", "broker-a", 1), 7),
    ]);
    let theirs = table(&[(q("U", "broker-b", 5), 3)]);
    for at in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("G").join(OFFSET_FILE_NAME);
        write(&main, JAVA_FILE.as_bytes());
        let my_files = OffsetFiles::new(main.clone());
        let their_files = OffsetFiles::new(main.clone());
        let mut theirs_written = None;
        let mut steps = Interleaved {
            at,
            step: 0,
            between: Some(|| {
                theirs_written = Some(atomic::replace(
                    &their_files,
                    render(&theirs).as_bytes(),
                    &mut atomic::RealSteps,
                ));
            }),
        };
        let outcome = atomic::replace(&my_files, render(&mine).as_bytes(), &mut steps);
        assert!(outcome.is_ok(), "at {at}: {outcome:?}");
        let theirs_written = theirs_written.expect("the other write ran");
        assert!(theirs_written.is_ok(), "at {at}: {theirs_written:?}");
        let (after, _) = load(&my_files).unwrap_or_else(|e| panic!("at {at}: {e}"));
        assert_eq!(after, mine, "at {at}: the last write's table");
    }
}

/// The other writer moved `offsets.json` away after this one saw it (its own write under
/// way): this write still succeeds.
#[test]
fn a_main_file_moved_away_by_another_writer_does_not_fail_the_write() {
    let dir = tempfile::tempdir().unwrap();
    let files = files_in(dir.path());
    write(&files.main, JAVA_FILE.as_bytes());
    let mut steps = Interleaved {
        at: 1,
        step: 0,
        between: Some(|| std::fs::rename(&files.main, &files.bak).unwrap()),
    };
    let new = table(&[(q("T", "broker-a", 0), 50)]);
    atomic::replace(&files, render(&new).as_bytes(), &mut steps).unwrap();
    assert_eq!(load(&files).unwrap(), (new, Source::Main));
    assert_eq!(std::fs::read_to_string(&files.bak).unwrap(), JAVA_FILE);
}

/// A huge key or value (a hostile or foreign file under the size limit) is named by its
/// beginning: the error, logged and shown to an operator, stays short.
#[test]
fn a_huge_key_or_value_is_quoted_short_in_the_error() {
    let long = "x".repeat(1 << 20);
    let queue = r#"{"brokerName":"b","queueId":0,"topic":"T"}"#;
    for text in [
        format!("{{\"offsetTable\":{{\"{long}\":1}}}}"),
        format!("{{\"offsetTable\":{{{queue}:\"{long}\"}}}}"),
        format!("{{\"offsetTable\":{{{{\"brokerName\":\"{long}\"}}:1}}}}"),
        format!("{{\"offsetTable\":\"{long}\"}}"),
    ] {
        let reason = parse(text.as_bytes()).unwrap_err();
        assert!(reason.len() < 1_000, "{} bytes", reason.len());
        assert!(reason.contains("xxxx"), "{reason}");
    }
}

/// A write that fails (here: the backup's place is taken by a directory) leaves no temporary
/// file behind: each store has its own, and failed writes of many runs would pile up.
#[tokio::test]
async fn a_failed_write_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let files = files_in(dir.path());
    write(&files.main, JAVA_FILE.as_bytes());
    std::fs::create_dir_all(files.bak.join("taken")).unwrap();
    let store = FileOffsetStore::open(&files.main).unwrap();
    let answer = store.persist("G", &q("T", "broker-a", 0), 50).await;
    assert!(answer.is_err(), "{answer:?}");
    let names: Vec<_> = std::fs::read_dir(&files.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains(".tmp")), "{names:?}");
    assert_eq!(std::fs::read_to_string(&files.main).unwrap(), JAVA_FILE);
}

/// Sets the modification time of `path` to `age` ago.
fn age(path: &Path, age: std::time::Duration) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.set_modified(std::time::SystemTime::now() - age)
        .unwrap();
}

/// Temporary files that crashed writes (and probes) left are removed at the next open once
/// they are old enough not to be a live writer's; nothing else in the directory is touched.
#[test]
fn an_open_removes_the_temporary_files_that_crashes_left() {
    let dir = tempfile::tempdir().unwrap();
    let files = files_in(dir.path());
    write(&files.main, JAVA_FILE.as_bytes());
    let old = [
        files.dir.join("offsets.json.tmp-4242-0"),
        files.dir.join("offsets.json.tmp-4242-7"),
        files.dir.join(".offsets.json.probe-4242-1"),
    ];
    let young = files.dir.join("offsets.json.tmp-4343-0");
    let other = files.dir.join("notes.tmp-1");
    for path in old.iter().chain([&young, &other]) {
        write(path, b"half a table");
    }
    for path in old.iter().chain([&other]) {
        age(
            path,
            STALE_TEMPORARY_AGE + std::time::Duration::from_secs(60),
        );
    }
    age(&young, STALE_TEMPORARY_AGE / 2);
    let store = FileOffsetStore::open(&files.main).unwrap();
    assert_eq!(store.offsets(), java_table());
    let mut names: Vec<_> = std::fs::read_dir(&files.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "notes.tmp-1",
            "offsets.json",
            "offsets.json.lock",
            "offsets.json.tmp-4343-0"
        ]
    );
}

/// A symbolic link planted at a temporary file's name is never written through: the file it
/// points to keeps its bytes, and the table is written all the same.
#[cfg(unix)]
#[test]
fn a_link_at_the_temporary_files_name_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let files = files_in(dir.path());
    write(&files.main, JAVA_FILE.as_bytes());
    let victim = dir.path().join("victim");
    write(&victim, b"precious");
    std::os::unix::fs::symlink(&victim, &files.tmp).unwrap();
    let table = table(&[(q("T", "broker-a", 0), 50)]);
    super::atomic::replace(
        &files,
        render(&table).as_bytes(),
        &mut super::atomic::RealSteps,
    )
    .unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert_eq!(load(&files).unwrap(), (table, Source::Main));
    assert!(
        std::fs::symlink_metadata(&files.tmp).is_err(),
        "the link is gone"
    );
}

/// Stores of one file opened at the same time in one process (two consumers started together
/// with one client id) do not take each other's writability probe for a failure: each open
/// either takes the file or finds it in use, nothing else.
#[test]
fn stores_opened_together_take_the_file_or_find_it_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("G").join(OFFSET_FILE_NAME);
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let main = main.clone();
            std::thread::spawn(move || {
                (0..50)
                    .map(|_| FileOffsetStore::open(&main).map(|_| ()))
                    .find(|r| !matches!(r, Ok(()) | Err(OffsetFileError::InUse { .. })))
            })
        })
        .collect();
    for thread in threads {
        if let Some(Err(e)) = thread.join().unwrap() {
            panic!("{e}");
        }
    }
}

/// One store at a time per file: a second one, in this process (or another), is refused
/// while the first (any clone of it) lives, instead of the two overwriting each other's
/// progress (found by review); once it is dropped, the file opens again.
#[tokio::test]
async fn a_file_in_use_by_another_store_is_refused_until_it_is_let_go() {
    let dir = tempfile::tempdir().unwrap();
    let first = FileOffsetStore::in_dir(dir.path(), "G").unwrap();
    let clone = first.clone();
    let queue = q("T", "broker-a", 0);
    first.persist("G", &queue, 500).await.unwrap();
    let err = FileOffsetStore::in_dir(dir.path(), "G").unwrap_err();
    assert!(matches!(err, OffsetFileError::InUse { .. }), "{err}");
    assert!(
        err.to_string().contains("in use by another consumer"),
        "{err}"
    );
    drop(first);
    assert!(matches!(
        FileOffsetStore::open(clone.path()),
        Err(OffsetFileError::InUse { .. })
    ));
    let path = clone.path().to_path_buf();
    // Looking without taking it is always possible.
    assert_eq!(
        FileOffsetStore::peek(&path).unwrap(),
        table(&[(queue.clone(), 500)])
    );
    drop(clone);
    let second = FileOffsetStore::open(&path).unwrap();
    assert_eq!(second.offsets(), table(&[(queue, 500)]));
}

/// Records the directories synced; does nothing else.
#[derive(Default)]
struct SyncedDirs(Vec<std::path::PathBuf>);

impl Steps for SyncedDirs {
    fn write_synced(&mut self, _: &Path, _: &[u8]) -> std::io::Result<()> {
        unreachable!("no file is written")
    }

    fn rename(&mut self, _: &Path, _: &Path) -> std::io::Result<()> {
        unreachable!("nothing is renamed")
    }

    fn sync_dir(&mut self, dir: &Path) -> std::io::Result<()> {
        self.0.push(dir.to_path_buf());
        Ok(())
    }
}

/// The directories an open creates (`{dir}/{clientId}/{group}`) are synced into their parents,
/// so that a power loss after the first write cannot take the directory, and the file in it,
/// away; directories already there are not synced again.
#[test]
fn created_directories_are_synced_into_their_parents() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("10.0.0.1@DEFAULT").join("G");
    let mut steps = SyncedDirs::default();
    atomic::create_dir_synced(&dir, &mut steps).unwrap();
    assert!(dir.is_dir());
    assert_eq!(
        steps.0,
        vec![
            root.path().join("10.0.0.1@DEFAULT"),
            root.path().to_path_buf()
        ]
    );
    let mut again = SyncedDirs::default();
    atomic::create_dir_synced(&dir, &mut again).unwrap();
    assert!(again.0.is_empty(), "{:?}", again.0);
}

/// A write that hangs (a hung disk or network file system; here: a FIFO where the temporary
/// file goes, whose opening blocks until a reader comes) does not hang the persist: the
/// runtime awaits every call, and a call that never returns stalls its rounds and shutdown.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_write_is_an_error_in_bounded_time_and_the_next_write_works() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = FileOffsetStore::in_dir(dir.path(), "G").unwrap();
    Arc::get_mut(&mut store.inner).unwrap().write_timeout = std::time::Duration::from_millis(300);
    let fifo = store.inner.files.tmp.clone();
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    // The hung write is let go at the end, or when the test fails (so that it ends).
    struct Release(Option<std::path::PathBuf>);
    impl Release {
        fn now(&mut self) {
            if let Some(fifo) = self.0.take() {
                // Blocks until the hung write has written its table and closed the file.
                let _ = std::thread::spawn(move || std::fs::read(fifo)).join();
            }
        }
    }
    impl Drop for Release {
        fn drop(&mut self) {
            self.now();
        }
    }
    let mut release = Release(Some(fifo));
    let queue = q("T", "b", 0);
    // Bounded by the store (300 ms here), not by the disk: without the bound, the write would
    // hang until the release, and the test would fail on this timeout instead.
    let bound = std::time::Duration::from_secs(20);
    let answer = tokio::time::timeout(bound, store.persist("G", &queue, 5))
        .await
        .expect("the persist answers while the write hangs");
    let Err(RemoteError::Storage(text)) = &answer else {
        panic!("{answer:?}");
    };
    assert!(text.contains("not finished"), "{text}");
    // A second persist while the first write still hangs waits for it no longer either.
    let again = tokio::time::timeout(bound, store.persist("G", &queue, 6))
        .await
        .expect("the second persist answers too");
    assert!(again.is_err(), "{again:?}");
    release.now();
    // Once the disk answers again, the next persist writes the file.
    store.persist("G", &queue, 7).await.unwrap();
    assert_eq!(
        FileOffsetStore::peek(store.path()).unwrap(),
        table(&[(queue, 7)])
    );
}

/// The temporary file's name carries a random part drawn once per process beside the process
/// id: two writers with the same pid (two containers' pid 1 on one volume) do not share it.
#[test]
fn temporary_names_carry_a_random_part_beside_the_pid() {
    let a = files::unique();
    let b = files::unique();
    let parts: Vec<&str> = a.split('-').collect();
    assert_eq!(parts.len(), 3, "{a}");
    assert_eq!(parts[0], std::process::id().to_string());
    assert_eq!(parts[1].len(), 16, "{a}");
    assert!(u64::from_str_radix(parts[1], 16).is_ok(), "{a}");
    assert_ne!(a, b, "one name per file");
    assert_eq!(
        a.rsplit_once('-').unwrap().0,
        b.rsplit_once('-').unwrap().0,
        "one random part per process"
    );
}
