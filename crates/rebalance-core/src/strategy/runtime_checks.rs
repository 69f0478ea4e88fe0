//! Building a strategy for a runtime: what [`StrategyRegistry::build`] accepts, as the Java
//! client does, but a runtime must refuse, since it would consume nothing in silence: parameter
//! keys the strategy does not read, and values with which nobody gets a queue.

use serde_json::Value;

use super::registry::{
    Params, StrategyConfigError, StrategyRef, StrategyRegistry, integer, queue_list, string_list,
};

/// Whether [`StrategyRegistry::build_for_runtime`] refuses parameters a strategy does not read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UnknownParams {
    /// Refuse them with [`StrategyConfigError::UnknownParam`] (the default).
    #[default]
    Refuse,
    /// Accept them (with a tracing warning), for configuration written for a newer version.
    Allow,
}

impl StrategyRegistry {
    /// Builds the strategy called `name` for a runtime, refusing what would make it consume
    /// nothing in silence: parameters the strategy does not read (unless `unknown` allows them;
    /// see [`unknown_params`](Self::unknown_params)) and values with which nobody would get a
    /// queue (see [`allocates_nothing`](Self::allocates_nothing)).
    ///
    /// [`build`](Self::build) accepts both, as the Java client does (the reference vectors
    /// check that).
    ///
    /// ```
    /// use rebalance_core::strategy::{Params, StrategyConfigError, StrategyRegistry, UnknownParams};
    ///
    /// let registry = StrategyRegistry::default();
    /// let zero: Params = serde_json::from_str(r#"{"virtual_node_count": 0}"#).unwrap();
    /// assert!(registry.build("consistent_hash", &zero).is_ok());
    /// let err = registry
    ///     .build_for_runtime("consistent_hash", &zero, UnknownParams::Refuse)
    ///     .unwrap_err();
    /// assert!(matches!(err, StrategyConfigError::AllocatesNothing { .. }));
    ///
    /// let typo: Params = serde_json::from_str(r#"{"virtual_nodes": 20}"#).unwrap();
    /// assert!(registry.build_for_runtime("consistent_hash", &typo, UnknownParams::Refuse).is_err());
    /// assert!(registry.build_for_runtime("consistent_hash", &typo, UnknownParams::Allow).is_ok());
    /// ```
    pub fn build_for_runtime(
        &self,
        name: &str,
        params: &Params,
        unknown: UnknownParams,
    ) -> Result<StrategyRef, StrategyConfigError> {
        let strategy = self.build(name, params)?;
        if unknown == UnknownParams::Refuse {
            if let Some(e) = self.unknown_params(name, params).into_iter().next() {
                return Err(e);
            }
        }
        if let Some(e) = self.allocates_nothing(name, params) {
            return Err(e);
        }
        Ok(strategy)
    }

    /// The parameters of `params` that built-in strategy `name` does not read, as
    /// [`StrategyConfigError::UnknownParam`]s, including those of a wrapper's `inner_params`
    /// (empty for a strategy registered without a list of keys).
    pub fn unknown_params(&self, name: &str, params: &Params) -> Vec<StrategyConfigError> {
        let Some(keys) = self.param_keys(name) else {
            return Vec::new();
        };
        let mut found: Vec<StrategyConfigError> = params
            .keys()
            .filter(|k| !keys.contains(&k.as_str()))
            .map(|k| StrategyConfigError::UnknownParam {
                strategy: name.to_string(),
                key: k.clone(),
                reads: if keys.is_empty() {
                    "it takes none".to_string()
                } else {
                    format!("it reads {}", keys.join(", "))
                },
            })
            .collect();
        if let Some((inner, inner_params)) = inner_spec(name, keys, params) {
            found.extend(self.unknown_params(inner, &inner_params));
        }
        found
    }

    /// Why built-in strategy `name` with `params` would give nobody anything, whatever the
    /// queues and members: `consistent_hash` with `virtual_node_count` 0, `by_machine_room`
    /// whose `consumer_idcs` name no room (or only names holding an '@', which no room has),
    /// `by_config` with an empty `message_queue_list`, or a wrapper (`machine_room_nearby`,
    /// `designated`) around such a strategy. `None` when the parameters are fine, cannot be
    /// read, or `name` is not a built-in.
    pub fn allocates_nothing(&self, name: &str, params: &Params) -> Option<StrategyConfigError> {
        let keys = self.param_keys(name)?;
        let nothing = |reason: &str| {
            Some(StrategyConfigError::AllocatesNothing {
                strategy: name.to_string(),
                reason: reason.to_string(),
            })
        };
        match name {
            "consistent_hash" | "CONSISTENT_HASH" => {
                match integer(params, name, "virtual_node_count") {
                    Ok(Some(0)) => nothing(
                        "`virtual_node_count` is 0, so the hash ring has no points (give it 1 or \
                         more; the default is 10)",
                    ),
                    _ => None,
                }
            }
            "by_machine_room" | "MACHINE_ROOM" => {
                match string_list(params, name, "consumer_idcs") {
                    Ok(rooms) if rooms.is_empty() => {
                        nothing("`consumer_idcs` names no machine room, so no queue is eligible")
                    }
                    // A broker `room@broker` has a room without '@'.
                    Ok(rooms) if rooms.iter().all(|r| r.contains('@')) => nothing(
                        "every room of `consumer_idcs` holds an '@', so none matches a broker \
                         named `room@broker` and no queue is eligible",
                    ),
                    _ => None,
                }
            }
            "by_config" | "CONFIG" => match queue_list(params, name, "message_queue_list") {
                Ok(queues) if queues.is_empty() => {
                    nothing("`message_queue_list` is empty, so this client takes no queue")
                }
                _ => None,
            },
            _ => {
                let (inner, inner_params) = inner_spec(name, keys, params)?;
                self.allocates_nothing(inner, &inner_params)
            }
        }
    }
}

/// A wrapper's inner strategy and its parameters, as the registry's factories read them, when `keys` (the
/// wrapper's) include `inner_strategy`.
fn inner_spec<'p>(name: &str, keys: &[&str], p: &'p Params) -> Option<(&'p str, Params)> {
    if !keys.contains(&"inner_strategy") {
        return None;
    }
    let inner = match p.get("inner_strategy") {
        None | Some(Value::Null) => "averagely",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return None,
    };
    let params = match p.get("inner_params") {
        None | Some(Value::Null) => Params::new(),
        Some(Value::Object(o)) => o.clone(),
        Some(_) => return None,
    };
    // A wrapper wrapping itself by name would never end; the factory refuses it anyway.
    (inner != name).then_some((inner, params))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;
    use crate::strategy::Averagely;

    fn params(v: Value) -> Params {
        serde_json::from_value(v).unwrap_or_default()
    }

    /// Every built-in strategy's parameter values with which a runtime would consume nothing are
    /// refused for a runtime, through wrappers too, and accepted by the plain `build` (Java
    /// accepts them); ordinary values are accepted by both.
    #[test]
    fn a_runtime_refuses_parameters_that_allocate_nothing() {
        let r = StrategyRegistry::default();
        let refused = [
            ("consistent_hash", json!({"virtual_node_count": 0})),
            ("CONSISTENT_HASH", json!({"virtual_node_count": "0"})),
            ("by_machine_room", json!({"consumer_idcs": ""})),
            ("MACHINE_ROOM", json!({"consumer_idcs": []})),
            ("by_machine_room", json!({"consumer_idcs": " , "})),
            (
                "by_machine_room",
                json!({"consumer_idcs": "roomA@broker-a"}),
            ),
            ("by_config", json!({"message_queue_list": []})),
            (
                "machine_room_nearby",
                json!({"inner_strategy": "consistent_hash", "inner_params": {"virtual_node_count": 0}}),
            ),
            (
                "designated",
                json!({"consumers": ["a"], "inner_strategy": "by_config",
                       "inner_params": {"message_queue_list": []}}),
            ),
        ];
        for (name, p) in refused {
            let p = params(p);
            assert!(r.build(name, &p).is_ok(), "{name} {p:?}: Java accepts it");
            let err = r
                .build_for_runtime(name, &p, UnknownParams::Allow)
                .unwrap_err();
            assert!(
                matches!(err, StrategyConfigError::AllocatesNothing { .. }),
                "{name} {p:?}: {err}"
            );
        }
        let err = r
            .build_for_runtime(
                "consistent_hash",
                &params(json!({"virtual_node_count": 0})),
                UnknownParams::Refuse,
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "strategy `consistent_hash` would allocate nothing to anybody: `virtual_node_count` \
             is 0, so the hash ring has no points (give it 1 or more; the default is 10)"
        );
        let accepted = [
            ("averagely", json!({})),
            ("averagely_by_circle", json!({})),
            ("consistent_hash", json!({"virtual_node_count": 1})),
            ("consistent_hash", json!({})),
            ("by_machine_room", json!({"consumer_idcs": "room0"})),
            ("by_config", json!({"message_queue_list": [["T", "b", 0]]})),
            ("machine_room_nearby", json!({})),
            // Nobody designated: everyone consumes (with a warning), not nobody.
            ("designated", json!({"consumers": []})),
            (
                "balanced_sticky",
                json!({"weights": {"a": 0}, "default_weight": 0}),
            ),
        ];
        for (name, p) in accepted {
            let p = params(p);
            assert!(
                r.build_for_runtime(name, &p, UnknownParams::Refuse).is_ok(),
                "{name} {p:?}"
            );
        }
    }

    #[test]
    fn a_runtime_refuses_unknown_keys_unless_allowed() {
        let r = StrategyRegistry::default();
        let typo = params(json!({"virtual_nodes": 20}));
        let err = r
            .build_for_runtime("consistent_hash", &typo, UnknownParams::Refuse)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "strategy `consistent_hash` has no parameter `virtual_nodes` (it reads \
             virtual_node_count, hash_function); a misspelled name would leave the default in place"
        );
        assert!(
            r.build_for_runtime("consistent_hash", &typo, UnknownParams::Allow)
                .is_ok()
        );
        // Inside a wrapper's inner parameters, named by the inner strategy.
        let nested = params(json!({"inner_strategy": "averagely", "inner_params": {"x": 1}}));
        let found = r.unknown_params("machine_room_nearby", &nested);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0].to_string(),
            "strategy `averagely` has no parameter `x` (it takes none); a misspelled name would \
             leave the default in place"
        );
        assert!(
            r.build_for_runtime("machine_room_nearby", &nested, UnknownParams::Refuse)
                .is_err()
        );
        // A strategy of the user's own is not checked: its keys are not known.
        let mut custom = StrategyRegistry::default();
        custom.register("mine", |_, _| Ok(Arc::new(Averagely)));
        assert!(
            custom
                .build_for_runtime("mine", &typo, UnknownParams::Refuse)
                .is_ok()
        );
    }
}
