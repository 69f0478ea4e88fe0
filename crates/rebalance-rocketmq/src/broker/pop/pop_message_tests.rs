//! POP_MESSAGE requests and the reading of every kind of answer, malformed ones included.

use proptest::prelude::*;

use super::*;
use crate::message::tests::{encode_messages, sample};

fn request() -> PopRequest {
    PopRequest::new("G", MessageQueue::new("T", "broker-a", 3))
}

/// A 0 answer with the header a broker writes for a pop of `records` at time 5000.
fn found(records: &[StoredMessage], start: &str, offsets: &str) -> RemotingCommand {
    RemotingCommand::response(0, 1, Some("FOUND".into()))
        .with_ext("popTime", 5000)
        .with_ext("invisibleTime", 60000)
        .with_ext("reviveQid", 2)
        .with_ext("restNum", 7)
        .with_ext("startOffsetInfo", start)
        .with_ext("msgOffsetInfo", offsets)
        .with_body(encode_messages(records))
}

fn read(response: &RemotingCommand) -> Result<PopOutcome, RemoteError> {
    read_pop_answer(response, &request(), &DecodeLimits::default())
}

fn batch(response: &RemotingCommand) -> PopBatch {
    match read(response) {
        Ok(PopOutcome::Found(batch)) => batch,
        other => panic!("not found: {other:?}"),
    }
}

#[test]
fn the_request_carries_every_field_the_brokers_require() {
    let command = pop_message_request(&request(), None).unwrap();
    assert_eq!(command.code, 200050);
    for (name, value) in [
        ("consumerGroup", "G"),
        ("topic", "T"),
        ("queueId", "3"),
        ("maxMsgNums", "32"),
        ("invisibleTime", "60000"),
        ("pollTime", "15000"),
        ("bornTime", "0"),
        ("initMode", "1"),
        ("expType", "TAG"),
        ("exp", "*"),
        ("order", "false"),
        ("bname", "broker-a"),
    ] {
        assert_eq!(command.ext(name), Some(value), "{name}");
    }
    assert_eq!(command.ext("attemptId"), None);
    let custom = request()
        .with_max_messages(1)
        .with_invisible_time(Duration::from_millis(5500))
        .with_poll_time(Duration::ZERO)
        .with_init_mode(PopInitMode::from(ConsumeFrom::FirstOffset))
        .with_filter(PopFilter::Tags(TagExpression::parse("A || B").unwrap()))
        .with_born_time(1_700_000_000_000)
        .orderly(Some("attempt-1".into()));
    let ns = Namespace::new("NS").unwrap();
    let command = pop_message_request(&custom, Some(&ns)).unwrap();
    for (name, value) in [
        ("consumerGroup", "NS%G"),
        ("topic", "NS%T"),
        ("maxMsgNums", "1"),
        ("invisibleTime", "5500"),
        ("pollTime", "0"),
        ("bornTime", "1700000000000"),
        ("initMode", "0"),
        ("exp", "A||B"),
        ("order", "true"),
        ("attemptId", "attempt-1"),
    ] {
        assert_eq!(command.ext(name), Some(value), "{name}");
    }
    let sql = request().with_filter(PopFilter::Sql92("a > 1".into()));
    let command = pop_message_request(&sql, None).unwrap();
    assert_eq!(command.ext("expType"), Some("SQL92"));
    assert_eq!(command.ext("exp"), Some("a > 1"));
}

#[test]
fn requests_a_broker_would_refuse_are_not_sent() {
    let any = MessageQueue::new("T", "broker-a", -1);
    assert!(pop_message_request(&PopRequest::new("G", any), None).is_ok());
    for (bad, what) in [
        (PopRequest::new("", MessageQueue::new("T", "b", 0)), "group"),
        (PopRequest::new("G", MessageQueue::new("", "b", 0)), "topic"),
        (
            PopRequest::new("G", MessageQueue::new("T", "", 0)),
            "broker",
        ),
        (
            PopRequest::new("G", MessageQueue::new("T", "a b", 0)),
            "whitespace",
        ),
        (
            PopRequest::new("G", MessageQueue::new("T", "b", -2)),
            "queue id",
        ),
        (request().with_max_messages(0), "max messages"),
        (request().with_max_messages(33), "max messages"),
        (
            request().with_invisible_time(Duration::from_micros(999)),
            "invisible",
        ),
        (request().with_born_time(-1), "born"),
        (request().with_filter(PopFilter::Sql92(" ".into())), "SQL92"),
    ] {
        let err = pop_message_request(&bad, None).unwrap_err();
        assert!(
            matches!(&err, PopError::InvalidRequest { request: "POP", reason } if reason.contains(what)),
            "{what}: {err}"
        );
    }
}

#[test]
fn a_held_pop_waits_its_poll_time_and_10_s_more() {
    let three = Duration::from_secs(3);
    assert_eq!(
        pop_timeout(Duration::from_secs(15), three),
        Duration::from_secs(25)
    );
    assert_eq!(pop_timeout(Duration::ZERO, three), Duration::from_secs(10));
    assert_eq!(
        pop_timeout(Duration::ZERO, Duration::from_secs(30)),
        Duration::from_secs(30)
    );
    assert_eq!(pop_timeout(Duration::MAX, three), Duration::MAX);
}

#[test]
fn every_code_has_its_outcome() {
    let bare = |code| RemotingCommand::response(code, 1, Some("remark".into()));
    // The Rust broker sends no header with 209 and 210.
    assert_eq!(read(&bare(210)), Ok(PopOutcome::NoMessage));
    assert_eq!(read(&bare(19)), Ok(PopOutcome::NoMessage));
    assert_eq!(read(&bare(209)), Ok(PopOutcome::PollingFull));
    assert_eq!(read(&bare(215)), Ok(PopOutcome::FlowControl));
    assert!(matches!(
        read(&bare(2)),
        Err(RemoteError::Refused { code: 2, .. })
    ));
    for code in [1, 13, 14, 17, 23, 26, 29, 501] {
        assert_eq!(
            read(&bare(code)),
            Err(RemoteError::Refused {
                code,
                remark: "remark".into()
            })
        );
    }
}

#[test]
fn found_messages_get_handles_built_from_the_info_strings() {
    let records = [sample(100, "a"), sample(101, "b"), sample(102, "c")];
    let batch = batch(&found(&records, "0 3 100", "0 3 100,101,102"));
    assert_eq!(
        (
            batch.pop_time,
            batch.invisible_time,
            batch.revive_queue_id,
            batch.rest
        ),
        (5000, Duration::from_secs(60), 2, 7)
    );
    assert!(batch.unmatched.is_empty());
    let handles: Vec<&str> = batch.messages.iter().map(|m| m.handle.as_str()).collect();
    assert_eq!(
        handles,
        [
            "100 5000 60000 2 0 broker-a 3 100",
            "100 5000 60000 2 0 broker-a 3 101",
            "100 5000 60000 2 0 broker-a 3 102"
        ]
    );
    let m = &batch.messages[1].message;
    assert_eq!(m.queue(), &MessageQueue::new("T", "broker-a", 3));
    assert_eq!(m.topic(), "T");
    assert_eq!(m.queue_offset(), 101);
    assert_eq!(m.msg_id(), "ID101");
    assert_eq!(&m.body()[..], b"b");
    assert_eq!(
        m.property(POP_CK),
        Some("100 5000 60000 2 0 broker-a 3 101")
    );
    assert_eq!(m.property(FIRST_POP_TIME), Some("5000"));
}

#[test]
fn the_rust_brokers_offset_info_reads_the_same() {
    let records = [sample(100, "a"), sample(101, "b")];
    let batch = batch(&found(&records, "0 3 100", "0 3 100;101"));
    assert_eq!(batch.messages[1].handle.fields().queue_offset, 101);
}

#[test]
fn without_info_strings_the_batch_offsets_stand_in() {
    let records = [sample(40, "a"), sample(42, "b")];
    let response = RemotingCommand::response(0, 1, None)
        .with_ext("popTime", 5000)
        .with_ext("invisibleTime", 60000)
        .with_ext("reviveQid", 0)
        .with_body(encode_messages(&records));
    let batch = batch(&response);
    assert_eq!(batch.rest, 0, "restNum is optional");
    let handles: Vec<&str> = batch.messages.iter().map(|m| m.handle.as_str()).collect();
    assert_eq!(
        handles,
        [
            "40 5000 60000 0 0 broker-a 3 40",
            "40 5000 60000 0 0 broker-a 3 42"
        ]
    );
}

#[test]
fn redelivered_messages_keep_the_brokers_handle_and_show_the_popped_topic() {
    // The broker re-encodes a retry topic's message under the popped topic, with POP_CK set,
    // the retry queue's id and offset, and the reconsume count.
    let mut retry = sample(5, "again");
    retry.queue_id = 0;
    retry.reconsume_times = 1;
    retry
        .properties
        .insert(POP_CK.into(), "5 4000 60000 2 1 broker-a 0 5 0".into());
    retry
        .properties
        .insert(FIRST_POP_TIME.into(), "1000".into());
    let fresh = sample(100, "new");
    let batch = batch(&found(&[retry, fresh], "1 0 5;0 3 100", "1 0 5;0 3 100"));
    let again = &batch.messages[0];
    assert_eq!(again.handle.as_str(), "5 4000 60000 2 1 broker-a 0 5 0");
    assert_eq!(again.handle.fields().retry, RetryFlag::V1);
    assert_eq!(
        again.message.queue(),
        &MessageQueue::new("%RETRY%G_T", "broker-a", 0)
    );
    assert_eq!(again.message.topic(), "T");
    assert_eq!(again.message.reconsume_times(), 1);
    assert_eq!(again.message.property(FIRST_POP_TIME), Some("1000"), "kept");
    assert_eq!(
        batch.messages[1].handle.as_str(),
        "100 5000 60000 2 0 broker-a 3 100"
    );
}

#[test]
fn a_retry_topics_record_without_handle_gets_the_retry_flag() {
    // popResponseReturnActualRetryTopic: the record keeps its retry topic and has no POP_CK.
    let mut retry = sample(9, "again");
    retry.topic = "%RETRY%G_T".into();
    retry.queue_id = 0;
    let batch = batch(&found(&[retry], "1 0 9", "1 0 9"));
    let popped = &batch.messages[0];
    assert_eq!(popped.handle.as_str(), "9 5000 60000 2 1 broker-a 0 9");
    assert_eq!(popped.message.queue().topic.as_ref(), "%RETRY%G_T");
    assert_eq!(popped.message.topic(), "T");
}

#[test]
fn messages_the_tags_do_not_match_are_handed_back_for_acknowledgement() {
    let mut other = sample(101, "b");
    other.properties.insert("TAGS".into(), "Other".into());
    let records = [sample(100, "a"), other];
    let response = found(&records, "0 3 100", "0 3 100,101");
    let tagged = request().with_filter(PopFilter::Tags(TagExpression::parse("TagA").unwrap()));
    let Ok(PopOutcome::Found(batch)) =
        read_pop_answer(&response, &tagged, &DecodeLimits::default())
    else {
        panic!("not found");
    };
    assert_eq!(batch.messages.len(), 1);
    assert_eq!(batch.messages[0].message.queue_offset(), 100);
    let unmatched: Vec<&str> = batch.unmatched.iter().map(|h| h.as_str()).collect();
    assert_eq!(unmatched, ["100 5000 60000 2 0 broker-a 3 101"]);
    // SQL92 is the broker's to filter.
    let sql = request().with_filter(PopFilter::Sql92("a > 1".into()));
    let Ok(PopOutcome::Found(batch)) = read_pop_answer(&response, &sql, &DecodeLimits::default())
    else {
        panic!("not found");
    };
    assert_eq!(batch.messages.len(), 2);
}

#[test]
fn orderly_pops_take_the_reconsume_count_from_the_order_info() {
    let records = [sample(120, "a"), sample(121, "b"), sample(122, "c")];
    let response = found(&records, "0 3 120", "0 3 120,121,122")
        .with_ext("reviveQid", 999)
        .with_ext("orderCountInfo", "0 qo3%120 2;0 3 1;0 qo3%121 0");
    let orderly = request().orderly(None);
    let Ok(PopOutcome::Found(batch)) =
        read_pop_answer(&response, &orderly, &DecodeLimits::default())
    else {
        panic!("not found");
    };
    assert!(batch.messages.iter().all(|m| m.handle.is_orderly()));
    let counts: Vec<i32> = batch
        .messages
        .iter()
        .map(|m| m.message.reconsume_times())
        .collect();
    assert_eq!(
        counts,
        [2, 0, 1],
        "its own count, else the queue's; 0 leaves it"
    );
}

#[test]
fn malformed_answers_are_typed_errors_naming_the_pop() {
    let records = [sample(100, "a")];
    let good = found(&records, "0 3 100", "0 3 100");
    let without = |name: &str| {
        let mut r = good.clone();
        r.ext_fields.remove(name);
        r
    };
    let mut bad_handle = sample(100, "a");
    bad_handle
        .properties
        .insert(POP_CK.into(), "not a handle".into());
    let cases = [
        without("popTime"),
        without("invisibleTime"),
        without("reviveQid"),
        good.clone().with_ext("popTime", "soon"),
        good.clone().with_ext("reviveQid", "99999999999"),
        good.clone().with_ext("restNum", "many"),
        good.clone().with_ext("startOffsetInfo", "0 3"),
        good.clone().with_ext("msgOffsetInfo", "0 3 x"),
        good.clone().with_ext("orderCountInfo", "0 qo3 1"),
        good.clone().with_body(&b"\x00\x00\x00\x05xyz"[..]),
        good.clone()
            .with_body(encode_messages(&records).slice(..50)),
        found(&[bad_handle], "0 3 100", "0 3 100"),
        good.clone().with_ext("invisibleTime", "-1"),
    ];
    for (i, response) in cases.iter().enumerate() {
        let err = read(response).unwrap_err();
        assert!(
            matches!(&err, RemoteError::BadResponse(text) if text.contains("POP")),
            "case {i}: {err:?}"
        );
    }
    let Err(RemoteError::BadResponse(text)) = read(&cases[11]) else {
        panic!()
    };
    assert!(
        text.contains("T@broker-a:3") && text.contains("offset 100"),
        "{text}"
    );
}

#[test]
fn namespaced_origin_topics_come_back_plain() {
    let ns = Namespace::new("NS").unwrap();
    let mut record = sample(100, "a");
    record
        .properties
        .insert(property::RETRY_TOPIC.into(), "NS%Origin".into());
    let batch = plain_names(batch(&found(&[record], "0 3 100", "0 3 100")), &ns);
    assert_eq!(
        batch.messages[0].message.property(property::RETRY_TOPIC),
        Some("Origin")
    );
}

proptest! {
    /// Whatever the header strings and the body, reading a 0 answer never panics.
    #[test]
    fn reading_never_panics(
        start in "[0-9 ;,]{0,20}",
        offsets in "[0-9 ;,]{0,20}",
        body in proptest::collection::vec(any::<u8>(), 0..200),
        cut in 0usize..400,
    ) {
        let records = encode_messages(&[sample(1, "x"), sample(2, "y")]);
        let mut bytes = records.to_vec();
        bytes.truncate(cut);
        bytes.extend(body);
        let response = found(&[], &start, &offsets).with_body(bytes);
        let _ = read(&response);
    }
}

/// Found by review: a popped message at a negative offset, or at `i64::MAX` (none after it),
/// was delivered and panicked the consumer. Such an answer is a bad response naming the offset,
/// whether the record, `msgOffsetInfo` or the message's receipt handle says it.
#[test]
fn a_message_at_an_impossible_offset_is_a_bad_response() {
    let at = |offset| {
        let mut m = sample(0, "x");
        m.queue_offset = offset;
        m
    };
    let mut handled = sample(100, "a");
    handled.properties.insert(
        POP_CK.into(),
        format!("100 5000 60000 2 0 broker-a 3 {}", i64::MAX),
    );
    let cases = [
        (found(&[at(-1)], "", ""), -1),
        (found(&[at(i64::MIN)], "", ""), i64::MIN),
        (found(&[at(i64::MAX)], "", ""), i64::MAX),
        (
            found(&[at(7)], "0 3 7", &format!("0 3 {}", i64::MAX)),
            i64::MAX,
        ),
        (found(&[handled], "0 3 100", "0 3 100"), i64::MAX),
    ];
    for (i, (response, offset)) in cases.iter().enumerate() {
        let err = read(response).unwrap_err();
        assert!(
            matches!(&err, RemoteError::BadResponse(text)
                if text.contains("POP") && text.contains(&format!("queue offset {offset}:"))),
            "case {i}: {err:?}"
        );
    }
    let highest = i64::MAX - 1;
    let batch = batch(&found(&[at(highest)], "", ""));
    assert_eq!(batch.messages[0].message.queue_offset(), highest);
}
