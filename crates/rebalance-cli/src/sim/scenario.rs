//! The scripted events of a simulation: `join@5s,leave:2@10s,crash:3@15s,ns-down@20s,ns-up@40s`.

use std::time::Duration;

use crate::args::parse_duration;

/// What happens at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// A new client starts (taking the next index).
    Join,
    /// Client `i` shuts down cleanly.
    Leave(usize),
    /// Client `i` stops without releasing or unregistering.
    Crash(usize),
    /// The name server becomes unreachable.
    NameServerDown,
    /// The name server is back.
    NameServerUp,
}

/// The event as it is written in `--events` (without its time): `join`, `leave:2`, `crash:3`,
/// `ns-down`, `ns-up`.
impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Join => f.write_str("join"),
            Action::Leave(i) => write!(f, "leave:{i}"),
            Action::Crash(i) => write!(f, "crash:{i}"),
            Action::NameServerDown => f.write_str("ns-down"),
            Action::NameServerUp => f.write_str("ns-up"),
        }
    }
}

/// One scripted event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// When, from the start of the simulation.
    pub at: Duration,
    /// What.
    pub action: Action,
}

/// Parses a comma-separated event list, sorted by time (stable for equal times).
pub fn parse_events(text: &str) -> Result<Vec<Event>, String> {
    let mut events = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (what, at) = item
            .split_once('@')
            .ok_or_else(|| format!("event `{item}` has no time (write e.g. join@5s)"))?;
        let at = parse_duration(at).map_err(|e| format!("event `{item}`: {e}"))?;
        let index = |arg: Option<&str>| -> Result<usize, String> {
            arg.ok_or_else(|| format!("event `{item}` needs a client index (e.g. leave:2@10s)"))?
                .parse()
                .map_err(|_| format!("event `{item}`: the client index must be a number"))
        };
        let (name, arg) = match what.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (what, None),
        };
        let action = match name {
            "join" => Action::Join,
            // `leave-client:i` as `compare` spells the same event.
            "leave" | "leave-client" => Action::Leave(index(arg)?),
            "crash" => Action::Crash(index(arg)?),
            "ns-down" => Action::NameServerDown,
            "ns-up" => Action::NameServerUp,
            _ => {
                return Err(format!(
                    "unknown event `{name}` (join, leave:i or leave-client:i, crash:i, ns-down, \
                     ns-up)"
                ));
            }
        };
        events.push(Event { at, action });
    }
    events.sort_by_key(|e| e.at);
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_print_as_they_are_written() {
        let text = "join@1s,leave:2@2s,crash:3@3s,ns-down@4s,ns-up@5s";
        let events = parse_events(text).unwrap();
        let written: Vec<String> = events.iter().map(|e| e.action.to_string()).collect();
        assert_eq!(written, ["join", "leave:2", "crash:3", "ns-down", "ns-up"]);
        assert_eq!(
            parse_events("leave-client:2@1s").unwrap()[0].action,
            Action::Leave(2)
        );
    }

    #[test]
    fn parses_the_documented_example() {
        let events = parse_events("join@5s,leave:2@10s,crash:3@15s,ns-down@20s,ns-up@40s").unwrap();
        let actions: Vec<Action> = events.iter().map(|e| e.action).collect();
        assert_eq!(
            actions,
            [
                Action::Join,
                Action::Leave(2),
                Action::Crash(3),
                Action::NameServerDown,
                Action::NameServerUp
            ]
        );
        assert_eq!(events[4].at, Duration::from_secs(40));
    }

    #[test]
    fn sorts_and_rejects_nonsense() {
        let events = parse_events("ns-up@40s, join@1s").unwrap();
        assert_eq!(events[0].action, Action::Join);
        assert!(parse_events("join").is_err());
        assert!(parse_events("leave@3s").is_err());
        assert!(parse_events("leave:x@3s").is_err());
        assert!(parse_events("explode@3s").is_err());
        assert!(parse_events("").unwrap().is_empty());
    }
}
