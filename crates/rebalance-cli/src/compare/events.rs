//! Membership events: `join` (a member with a fresh id), `leave:i` (the member at position `i`
//! of the current sorted list; also spelled `leave-position:i`), `leave-client:i` (client
//! number `i`, numbered as they were created: the first members `0..N`, joiners on from `N`,
//! which is what `rebalance simulate`'s `leave:i` means) and `leave` (a position picked with
//! the seeded generator).

use std::fmt;
use std::str::FromStr;

use rebalance_core::ClientId;

use crate::rng::SplitMix64;
use crate::workload;

/// One membership event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A member with a fresh id joins.
    Join,
    /// The member at this position of the sorted list leaves; `None` picks one at random.
    Leave(Option<usize>),
    /// Client number `i` (in the order members were created, as `rebalance simulate` numbers
    /// its clients) leaves.
    LeaveClient(usize),
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Join => f.write_str("join"),
            Event::Leave(Some(i)) => write!(f, "leave:{i}"),
            Event::Leave(None) => f.write_str("leave"),
            Event::LeaveClient(i) => write!(f, "leave-client:{i}"),
        }
    }
}

impl FromStr for Event {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "join" => Ok(Event::Join),
            "leave" => Ok(Event::Leave(None)),
            other => {
                let number = |what: &str, i: &str| {
                    i.trim().parse::<usize>().map_err(|_| {
                        format!("`{other}`: the {what} after the colon must be a number")
                    })
                };
                if let Some(i) = other
                    .strip_prefix("leave:")
                    .or_else(|| other.strip_prefix("leave-position:"))
                {
                    number("position", i).map(|i| Event::Leave(Some(i)))
                } else if let Some(i) = other.strip_prefix("leave-client:") {
                    number("client number", i).map(Event::LeaveClient)
                } else {
                    Err(format!(
                        "unknown event `{other}` (join, leave, leave:i or leave-position:i, \
                         leave-client:i)"
                    ))
                }
            }
        }
    }
}

/// Parses `join,leave:3,join,leave:0`.
pub fn parse_events(text: &str) -> Result<Vec<Event>, String> {
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(str::parse)
        .collect()
}

/// A group's member list as events change it: always sorted, fresh ids continuing the
/// workload's numbering.
#[derive(Debug, Clone)]
pub struct Members {
    ids: Vec<ClientId>,
    next_id: usize,
}

impl Members {
    /// Members `0..n` of the workload, sorted.
    pub fn new(n: usize) -> Self {
        Self {
            ids: workload::client_ids(n),
            next_id: n,
        }
    }

    /// The current sorted list.
    pub fn ids(&self) -> &[ClientId] {
        &self.ids
    }

    /// Applies `event` and says what happened (`join room1@...`, `leave:3 room0@...`).
    pub fn apply(&mut self, event: Event, rng: &mut SplitMix64) -> Result<String, String> {
        match event {
            Event::Join => {
                let id = workload::client_id(self.next_id);
                self.next_id += 1;
                let at = self.ids.partition_point(|c| c < &id);
                self.ids.insert(at, id.clone());
                Ok(format!("join {id}"))
            }
            Event::Leave(position) => {
                if self.ids.len() <= 1 {
                    return Err("the last member cannot leave".into());
                }
                let i = position.unwrap_or_else(|| rng.below(self.ids.len() as u64) as usize);
                if i >= self.ids.len() {
                    return Err(format!(
                        "leave:{i}: there are only {} members",
                        self.ids.len()
                    ));
                }
                let id = self.ids.remove(i);
                Ok(format!("leave:{i} {id}"))
            }
            Event::LeaveClient(n) => {
                let id = workload::client_id(n);
                let Ok(i) = self.ids.binary_search(&id) else {
                    return Err(format!(
                        "leave-client:{n}: client {n} is not a member (it left, or has not \
                         joined: {} were created)",
                        self.next_id
                    ));
                };
                if self.ids.len() <= 1 {
                    return Err("the last member cannot leave".into());
                }
                self.ids.remove(i);
                Ok(format!("leave-client:{n} {id}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_joins_and_leaves_by_index_and_prints_them_back() {
        assert_eq!(
            parse_events("join,leave:3,join,leave:0").unwrap(),
            [
                Event::Join,
                Event::Leave(Some(3)),
                Event::Join,
                Event::Leave(Some(0))
            ]
        );
        assert!(parse_events("jump").is_err());
        // What the rows print reads back as the same event.
        for event in [Event::Join, Event::Leave(Some(3)), Event::Leave(None)] {
            assert_eq!(event.to_string().parse::<Event>(), Ok(event));
        }
        assert!(parse_events("leave:x").is_err());
    }

    #[test]
    fn clients_leave_by_number_as_in_simulate() {
        assert_eq!(
            parse_events("leave-position:1,leave-client:4").unwrap(),
            [Event::Leave(Some(1)), Event::LeaveClient(4)]
        );
        assert_eq!(
            Event::LeaveClient(4).to_string().parse::<Event>(),
            Ok(Event::LeaveClient(4))
        );
        let mut m = Members::new(3);
        let mut rng = SplitMix64::new(0);
        m.apply(Event::Join, &mut rng).unwrap();
        // Client 3 is the joiner, wherever its id sorts.
        let what = m.apply(Event::LeaveClient(3), &mut rng).unwrap();
        assert_eq!(what, format!("leave-client:3 {}", workload::client_id(3)));
        assert!(!m.ids().contains(&workload::client_id(3)));
        let err = m.apply(Event::LeaveClient(3), &mut rng).unwrap_err();
        assert!(err.contains("client 3 is not a member"), "{err}");
    }

    #[test]
    fn members_stay_sorted_and_fresh_ids_are_new() {
        let mut m = Members::new(3);
        let mut rng = SplitMix64::new(0);
        m.apply(Event::Join, &mut rng).unwrap();
        m.apply(Event::Join, &mut rng).unwrap();
        assert_eq!(m.ids().len(), 5);
        // Strictly increasing: the second joiner's id is new too.
        assert!(m.ids().windows(2).all(|w| w[0] < w[1]));
        let first = m.ids()[0].clone();
        let what = m.apply(Event::Leave(Some(0)), &mut rng).unwrap();
        assert!(what.contains(first.as_str()));
        assert!(!m.ids().contains(&first));
        assert!(m.apply(Event::Leave(Some(9)), &mut rng).is_err());
    }
}
