//! The few pieces of Java semantics that decide allocation results.
//!
//! A Rust consumer in a group of Java consumers must sort, split and hash exactly like the Java
//! client, or the group disagrees about who owns what. Everything here is a pure function with the
//! Java behaviour spelled out in its documentation.

use std::cmp::Ordering;

/// Compares two strings like Java's `String.compareTo`: lexicographically over UTF-16 code units.
///
/// This differs from Rust's `str` order (UTF-8 bytes, which is code-point order) only when a
/// supplementary character (U+10000 and above, a surrogate pair in UTF-16) meets a BMP character
/// in U+E000..=U+FFFF: Java puts the supplementary character first.
///
/// ```
/// use rebalance_core::java::compare_str;
/// use std::cmp::Ordering;
///
/// assert_eq!(compare_str("broker-10", "broker-2"), Ordering::Less);
/// // U+1F600 is a surrogate pair (0xD83D ...) and sorts before U+FF5A in Java.
/// assert_eq!(compare_str("😀", "ｚ"), Ordering::Less);
/// assert_eq!("😀".cmp("ｚ"), Ordering::Greater);
/// ```
pub fn compare_str(a: &str, b: &str) -> Ordering {
    let (ab, bb) = (a.as_bytes(), b.as_bytes());
    // UTF-8 agrees with UTF-16 on every common prefix, so skip it at memory speed.
    let common = common_prefix(ab, bb);
    match (ab.get(common), bb.get(common)) {
        (None, None) => return Ordering::Equal,
        (None, Some(_)) => return Ordering::Less,
        (Some(_), None) => return Ordering::Greater,
        // An ASCII byte is a whole character, and its UTF-16 unit is the byte itself, below
        // every other character's first unit (and both sides start a character here, since
        // their prefixes are the same bytes).
        (Some(&x), Some(&y)) if x.is_ascii() || y.is_ascii() => return x.cmp(&y),
        _ => {}
    }
    // Back up to the start of the character the first difference falls in.
    let start = (0..=common)
        .rev()
        .find(|&i| a.is_char_boundary(i) && b.is_char_boundary(i))
        .unwrap_or(0);
    match (a[start..].chars().next(), b[start..].chars().next()) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(x), Some(y)) => utf16_key(x).cmp(&utf16_key(y)),
    }
}

/// The length of the longest common prefix of `a` and `b`, compared eight bytes at a time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let len = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= len {
        let (x, y) = (&a[i..i + 8], &b[i..i + 8]);
        if x != y {
            break;
        }
        i += 8;
    }
    i + a[i..len]
        .iter()
        .zip(&b[i..len])
        .take_while(|(x, y)| x == y)
        .count()
}

/// Orders a character by its first UTF-16 code unit, then by code point.
///
/// Two different characters can share a first unit only when both are supplementary with the same
/// high surrogate; their low surrogates then order like their code points.
fn utf16_key(c: char) -> (u16, u32) {
    let mut units = [0u16; 2];
    (c.encode_utf16(&mut units)[0], u32::from(c))
}

/// Compares two queue ids like `MessageQueue.compareTo` in Java: by the sign of the 32-bit
/// wrapping difference `a - b`.
///
/// For ids whose difference fits in 32 bits (every pair of non-negative ids, so every real queue
/// id) this is the ordinary integer order. For extreme pairs such as `i32::MIN` and `i32::MAX`
/// the subtraction wraps and the result is not a consistent order; that is why
/// [`crate::MessageQueue`]'s `Ord` uses the integer order instead and this function exists only
/// for callers that need the Java answer for one pair.
pub fn compare_queue_id(a: i32, b: i32) -> Ordering {
    a.wrapping_sub(b).cmp(&0)
}

/// Splits a string like Java's `String.split(String)` with a single-character literal separator:
/// the pieces between separators, with *trailing* empty pieces removed.
///
/// A string without the separator yields itself (even when empty); a string made only of
/// separators yields nothing.
///
/// ```
/// use rebalance_core::java::split;
///
/// assert_eq!(split("roomA@b1@", '@'), ["roomA", "b1"]);
/// assert_eq!(split("roomA@@b", '@'), ["roomA", "", "b"]);
/// assert!(split("@@", '@').is_empty());
/// assert_eq!(split("", '@'), [""]);
/// ```
pub fn split(s: &str, separator: char) -> Vec<&str> {
    if !s.contains(separator) {
        return vec![s];
    }
    let mut fields: Vec<&str> = s.split(separator).collect();
    while fields.last().is_some_and(|f| f.is_empty()) {
        fields.pop();
    }
    fields
}

/// Java's `String.hashCode`: `s[0]·31^(n−1) + … + s[n−1]` over UTF-16 code units, wrapping at
/// 32 bits.
///
/// ```
/// assert_eq!(rebalance_core::java::string_hash("hello"), 99162322);
/// ```
pub fn string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn by_utf16(a: &str, b: &str) -> Ordering {
        a.encode_utf16().cmp(b.encode_utf16())
    }

    #[test]
    fn spec_example_order() {
        let mut v = vec!["ｚ", "\u{E000}", "𠀀", "😀", "z"];
        v.sort_by(|a, b| compare_str(a, b));
        assert_eq!(v, ["z", "😀", "𠀀", "\u{E000}", "ｚ"]);
    }

    #[test]
    fn usual_consequences() {
        assert_eq!(compare_str("A", "a"), Ordering::Less);
        assert_eq!(compare_str("", "a"), Ordering::Less);
        assert_eq!(compare_str("ab", "a"), Ordering::Greater);
        assert_eq!(compare_str("C9", "a"), Ordering::Less);
        assert_eq!(compare_str("c10", "c2"), Ordering::Less);
        assert_eq!(compare_str("same", "same"), Ordering::Equal);
    }

    #[test]
    fn queue_id_wraps_like_java() {
        assert_eq!(compare_queue_id(1, 2), Ordering::Less);
        assert_eq!(compare_queue_id(-1, i32::MAX), Ordering::Less);
        // MIN - MAX wraps to 1: Java calls MIN the larger one.
        assert_eq!(compare_queue_id(i32::MIN, i32::MAX), Ordering::Greater);
    }

    #[test]
    fn java_hash_code() {
        assert_eq!(string_hash(""), 0);
        assert_eq!(string_hash("a"), 97);
        assert_eq!(string_hash("polygenelubricants"), i32::MIN);
        // A supplementary character hashes as its two surrogate units.
        assert_eq!(string_hash("😀"), 0xD83D * 31 + 0xDE00);
    }

    fn mixed_string() -> impl Strategy<Value = String> {
        let chars = prop_oneof![
            Just('a'),
            Just('b'),
            Just('é'),
            Just('\u{E000}'),
            Just('ｚ'),
            Just('\u{FFFD}'),
            Just('😀'),
            Just('😁'),
            Just('𠀀'),
        ];
        proptest::collection::vec(chars, 0..6).prop_map(|v| v.into_iter().collect())
    }

    proptest! {
        #[test]
        fn matches_utf16_order(a in mixed_string(), b in mixed_string()) {
            prop_assert_eq!(compare_str(&a, &b), by_utf16(&a, &b));
        }

        /// Long common prefixes, so that the eight-byte steps and the byte tail both decide.
        #[test]
        fn matches_utf16_order_after_a_shared_prefix(
            p in proptest::collection::vec(mixed_string(), 0..5),
            a in mixed_string(),
            b in mixed_string(),
        ) {
            let p = p.concat();
            let (a, b) = (format!("{p}{a}"), format!("{p}{b}"));
            prop_assert_eq!(compare_str(&a, &b), by_utf16(&a, &b));
        }

        #[test]
        fn matches_utf16_order_any(a in any::<String>(), b in any::<String>()) {
            prop_assert_eq!(compare_str(&a, &b), by_utf16(&a, &b));
        }

        #[test]
        fn queue_ids_agree_with_integer_order_when_no_overflow(a in 0..=i32::MAX, b in 0..=i32::MAX) {
            prop_assert_eq!(compare_queue_id(a, b), a.cmp(&b));
        }
    }
}
