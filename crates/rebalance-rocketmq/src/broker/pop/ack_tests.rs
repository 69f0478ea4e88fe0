//! ACK, BATCH_ACK and CHANGE_MESSAGE_INVISIBLETIME requests and answers.

use serde_json::json;

use super::*;

fn handle(text: &str) -> ReceiptHandle {
    ReceiptHandle::parse(text).unwrap()
}

fn normal() -> ReceiptHandle {
    handle("100 5000 60000 2 0 broker-a 3 101")
}

fn retried() -> ReceiptHandle {
    handle("5 6000 60000 4 1 broker-a 0 5 0")
}

#[test]
fn an_ack_names_the_real_topic_queue_and_offset_of_its_handle() {
    let command = ack_message_request(&AckRequest::new("G", "T", normal()), None).unwrap();
    assert_eq!(command.code, 200051);
    for (name, value) in [
        ("consumerGroup", "G"),
        ("topic", "T"),
        ("queueId", "3"),
        ("offset", "101"),
        ("extraInfo", "100 5000 60000 2 0 broker-a 3 101"),
        ("bname", "broker-a"),
    ] {
        assert_eq!(command.ext(name), Some(value), "{name}");
    }
    let command = ack_message_request(&AckRequest::new("G", "T", retried()), None).unwrap();
    assert_eq!(command.ext("topic"), Some("%RETRY%G_T"));
    assert_eq!(command.ext("queueId"), Some("0"));
    assert_eq!(
        command.ext("extraInfo"),
        Some("5 6000 60000 4 1 broker-a 0 5 0"),
        "verbatim"
    );
    let v2 = handle("5 6000 60000 4 2 broker-a 0 5");
    let ns = Namespace::new("NS").unwrap();
    let command = ack_message_request(&AckRequest::new("G", "T", v2), Some(&ns)).unwrap();
    assert_eq!(command.ext("consumerGroup"), Some("NS%G"));
    assert_eq!(command.ext("topic"), Some("%RETRY%NS%G+NS%T"));
    let command = ack_message_request(&AckRequest::new("G", "T", normal()), Some(&ns)).unwrap();
    assert_eq!(command.ext("topic"), Some("NS%T"));
    for (group, topic) in [("", "T"), ("G", "")] {
        assert!(matches!(
            ack_message_request(&AckRequest::new(group, topic, normal()), None),
            Err(PopError::InvalidRequest { .. })
        ));
    }
}

#[test]
fn a_change_of_invisible_time_carries_it_from_now() {
    let request = ChangeInvisibleTimeRequest::new("G", "T", retried(), Duration::from_millis(1500));
    let command = change_invisible_time_request(&request, None).unwrap();
    assert_eq!(command.code, 200053);
    for (name, value) in [
        ("consumerGroup", "G"),
        ("topic", "%RETRY%G_T"),
        ("queueId", "0"),
        ("offset", "5"),
        ("extraInfo", "5 6000 60000 4 1 broker-a 0 5 0"),
        ("invisibleTime", "1500"),
        ("bname", "broker-a"),
    ] {
        assert_eq!(command.ext(name), Some(value), "{name}");
    }
}

#[test]
fn ack_answers_are_typed() {
    assert_eq!(
        read_ack_answer(&RemotingCommand::response(0, 1, None)),
        Ok(AckOutcome::Acked)
    );
    assert_eq!(
        read_ack_answer(&RemotingCommand::response(
            208,
            1,
            Some("not in range".into())
        )),
        Ok(AckOutcome::NoMessage {
            remark: "not in range".into()
        })
    );
    for code in [1, 13, 14, 17, 29] {
        assert!(matches!(
            read_ack_answer(&RemotingCommand::response(code, 1, None)),
            Err(RemoteError::Refused { code: c, .. }) if c == code
        ));
    }
}

#[test]
fn a_changed_handle_starts_at_its_own_offset_with_the_answered_times() {
    let answer = RemotingCommand::response(0, 1, None)
        .with_ext("popTime", 9000)
        .with_ext("invisibleTime", 1500)
        .with_ext("reviveQid", 4);
    let ChangeOutcome::Changed(new) = read_change_answer(&answer, &normal()).unwrap() else {
        panic!("not changed");
    };
    assert_eq!(new.as_str(), "101 9000 1500 4 0 broker-a 3 101");
    let ChangeOutcome::Changed(new) = read_change_answer(&answer, &retried()).unwrap() else {
        panic!("not changed");
    };
    assert_eq!(
        new.as_str(),
        "5 9000 1500 4 1 broker-a 0 5 0",
        "the generation kept"
    );
    assert_eq!(
        read_change_answer(
            &RemotingCommand::response(208, 1, Some("gone".into())),
            &normal()
        ),
        Ok(ChangeOutcome::NoMessage {
            remark: "gone".into()
        })
    );
    assert!(matches!(
        read_change_answer(&RemotingCommand::response(13, 1, None), &normal()),
        Err(RemoteError::Refused { code: 13, .. })
    ));
    for (name, value) in [
        ("popTime", None),
        ("invisibleTime", Some("x")),
        ("reviveQid", Some("1.5")),
    ] {
        let mut bad = answer.clone();
        match value {
            Some(v) => bad = bad.with_ext(name, v),
            None => {
                bad.ext_fields.remove(name);
            }
        }
        assert!(
            matches!(read_change_answer(&bad, &normal()), Err(RemoteError::BadResponse(t)) if t.contains(name)),
            "{name}"
        );
    }
}

#[test]
fn a_batch_ack_has_one_entry_per_pop_with_the_bits_of_its_offsets() {
    let handles = vec![
        handle("100 5000 60000 2 0 broker-a 3 100"),
        handle("100 5000 60000 2 0 broker-a 3 102"),
        handle("100 5000 60000 2 0 broker-a 3 170"),
        handle("5 6000 60000 4 1 broker-a 0 5 0"),
    ];
    let ns = Namespace::new("NS").unwrap();
    let command = batch_ack_request(&BatchAckRequest::new("G", "T", handles), Some(&ns)).unwrap();
    assert_eq!(command.code, 200151);
    assert!(command.ext_fields.is_empty(), "no header");
    let body: serde_json::Value = serde_json::from_slice(&command.body).unwrap();
    // Bits 0, 2 and 70: two little-endian 64-bit words.
    let mut bits = vec![0u8; 16];
    bits[0] = 0b101;
    bits[8] = 0b100_0000;
    assert_eq!(
        body,
        json!({
            "brokerName": "broker-a",
            "acks": [
                {"c": "NS%G", "t": "NS%T", "r": "0", "so": 100, "q": 3, "rq": 2, "pt": 5000,
                 "it": 60000, "b": bits},
                {"c": "NS%G", "t": "NS%T", "r": "1", "so": 5, "q": 0, "rq": 4, "pt": 6000,
                 "it": 60000, "b": [1, 0, 0, 0, 0, 0, 0, 0]},
            ]
        })
    );
}

#[test]
fn batch_acks_a_broker_would_misread_are_not_sent() {
    let batch = |handles: Vec<ReceiptHandle>| {
        batch_ack_request(&BatchAckRequest::new("G", "T", handles), None)
    };
    assert!(
        matches!(batch(vec![]), Err(PopError::InvalidRequest { reason, .. }) if reason.contains("no receipt"))
    );
    assert!(matches!(
        batch(vec![normal(), handle("100 5000 60000 2 0 broker-b 3 101")]),
        Err(PopError::InvalidRequest { reason, .. }) if reason.contains("one batch per broker")
    ));
    for text in [
        "100 5000 60000 2 0 broker-a 3 99",
        "0 5000 60000 2 0 broker-a 3 65536",
        "-9223372036854775808 1 1 1 0 broker-a 3 9223372036854775807",
    ] {
        assert!(
            matches!(batch(vec![handle(text)]), Err(PopError::InvalidRequest { reason, .. }) if reason.contains("checkpoint offset")),
            "{text}"
        );
    }
    assert!(batch(vec![handle("0 5000 60000 2 0 broker-a 3 65535")]).is_ok());
    assert!(batch_ack_request(&BatchAckRequest::new("", "T", vec![normal()]), None).is_err());
}

#[test]
fn bit_sets_are_whole_words() {
    assert_eq!(bit_set(&[0]), [1, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(bit_set(&[63]), [0, 0, 0, 0, 0, 0, 0, 0x80]);
    assert_eq!(bit_set(&[64]).len(), 16);
    assert_eq!(
        bit_set(&[MAX_BATCH_ACK_SPAN - 1]).len(),
        (MAX_BATCH_ACK_SPAN / 8) as usize
    );
}
