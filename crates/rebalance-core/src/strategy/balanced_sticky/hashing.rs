//! The stable hashes the strategy is defined by.
//!
//! Every client of a group must place queues and members at the same ring positions, in any
//! language, so these are spelled out exactly: FNV-1a (64-bit) over bytes, finished with
//! SplitMix64's mixing function.

use crate::{ClientId, MessageQueue};

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
/// SplitMix64's increment (the golden ratio), used to derive the `k`-th point of a member.
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
/// Salt of the capacity rank, so that it is independent of the ring points.
const RANK_SALT: u64 = 0x5851_f42d_4c95_7f2d;
/// Separates the fields of a queue's key (0xFF never occurs in UTF-8).
const SEPARATOR: u8 = 0xff;

/// SplitMix64's finalizer: a bijection of `u64` that mixes every input bit into every output bit.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn fnv1a(state: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(state, |h, &b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
}

/// FNV-1a of a member id's UTF-8 bytes.
pub(crate) fn member_seed(cid: &ClientId) -> u64 {
    fnv1a(FNV_OFFSET, cid.as_bytes())
}

/// The ring position of a member's point `k` (k = 0, 1, ...).
pub(crate) fn member_point(seed: u64, k: u64) -> u64 {
    mix64(seed.wrapping_add((k + 1).wrapping_mul(GOLDEN)))
}

/// The key that orders members for the extra queue (see the module docs).
pub(crate) fn member_rank(seed: u64) -> u64 {
    mix64(seed ^ RANK_SALT)
}

/// The FNV-1a state after a queue's topic and broker name (shared by the queues of one broker).
pub(crate) fn broker_state(mq: &MessageQueue) -> u64 {
    let h = fnv1a(FNV_OFFSET, mq.topic.as_bytes());
    let h = fnv1a(h, &[SEPARATOR]);
    let h = fnv1a(h, mq.broker_name.as_bytes());
    fnv1a(h, &[SEPARATOR])
}

/// A queue's ring position: FNV-1a over `topic 0xFF broker 0xFF queue_id (4 bytes, little
/// endian)`, mixed.
pub(crate) fn queue_point(broker_state: u64, queue_id: i32) -> u64 {
    mix64(fnv1a(broker_state, &queue_id.to_le_bytes()))
}

/// Every queue's ring position, reusing the broker part while consecutive queues share it.
pub(crate) fn queue_points(mq_all: &[MessageQueue]) -> Vec<u64> {
    let mut previous: Option<(&MessageQueue, u64)> = None;
    mq_all
        .iter()
        .map(|mq| {
            let state = match previous {
                Some((p, s)) if p.topic == mq.topic && p.broker_name == mq.broker_name => s,
                _ => broker_state(mq),
            };
            previous = Some((mq, state));
            queue_point(state, mq.queue_id)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_and_mix_are_the_published_functions() {
        // FNV-1a 64 test vectors.
        assert_eq!(fnv1a(FNV_OFFSET, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(FNV_OFFSET, b"foobar"), 0x8594_4171_f739_67e8);
        // SplitMix64 with seed 0: the first output is mix64(GOLDEN).
        assert_eq!(mix64(GOLDEN), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn points_ranks_and_queue_points_are_the_spelled_out_functions() {
        // Computed apart from this code (a few lines of Python following the definitions
        // above): a client in another language must place everything at these positions.
        let seed = member_seed(&ClientId::from("c0"));
        assert_eq!(seed, 0x08a2_7e07_b54a_66a6);
        let points: Vec<u64> = (0..3).map(|k| member_point(seed, k)).collect();
        assert_eq!(
            points,
            [
                0x1886_5ce0_90ad_7efd,
                0x44e4_a722_f505_078a,
                0x17cf_4ee0_e2fb_55e6
            ]
        );
        assert_eq!(member_rank(seed), 0x65af_52df_71f3_b149);
        let state = broker_state(&MessageQueue::new("T", "broker-a", 0));
        assert_eq!(queue_point(state, 3), 0xe33e_7593_28b2_ae6d);
        assert_eq!(queue_point(state, -1), 0xa6e5_2991_9892_cc50);
    }

    proptest::proptest! {
        /// The shortcut for consecutive queues of one broker gives each queue its own point,
        /// whatever the topics and brokers around it.
        #[test]
        fn queue_points_agree_with_hashing_each_queue(
            picks in proptest::collection::vec((0usize..2, 0usize..2, 0i32..3), 0..12),
        ) {
            let queues: Vec<MessageQueue> = picks
                .into_iter()
                .map(|(t, b, id)| MessageQueue::new(["T", "U"][t], ["b1", "b2"][b], id))
                .collect();
            let slow: Vec<u64> = queues
                .iter()
                .map(|q| queue_point(broker_state(q), q.queue_id))
                .collect();
            proptest::prop_assert_eq!(queue_points(&queues), slow);
        }
    }

    #[test]
    fn queue_points_reuse_the_broker_prefix_without_changing_results() {
        let queues = [
            MessageQueue::new("T", "b", 0),
            MessageQueue::new("T", "b", 1),
            MessageQueue::new("T", "c", 1),
        ];
        let fast = queue_points(&queues);
        let slow: Vec<u64> = queues
            .iter()
            .map(|q| queue_point(broker_state(q), q.queue_id))
            .collect();
        assert_eq!(fast, slow);
        assert_ne!(fast[1], fast[2]);
        // The separator keeps "T"+"bc" apart from "Tb"+"c".
        let a = broker_state(&MessageQueue::new("T", "bc", 0));
        let b = broker_state(&MessageQueue::new("Tb", "c", 0));
        assert_ne!(a, b);
    }
}
