use super::*;
use crate::assignor::test_support::{group, lists};

#[test]
fn initial_assignment_is_balanced() {
    let g = group(
        &[("t0", 3), ("t1", 3)],
        &[("c0", &["t0", "t1"]), ("c1", &["t0", "t1"])],
    );
    let a = Sticky.assign(&g).unwrap();
    let sizes: Vec<usize> = lists(&a).iter().map(|(_, l)| l.len()).collect();
    assert_eq!(sizes, [3, 3]);
}
