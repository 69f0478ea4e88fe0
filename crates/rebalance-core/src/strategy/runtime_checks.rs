//! Building a strategy for a runtime: what [`StrategyRegistry::build`] accepts, as the Java
//! client does, but a runtime must refuse, since it would consume nothing in silence: parameter
//! keys the strategy does not read, and values with which nobody gets a queue.

use serde_json::Value;

use super::registry::{Params, StrategyConfigError, StrategyRef, StrategyRegistry};

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
        if unknown == UnknownParams::Refuse
            && let Some(e) = self.unknown_params(name, params).into_iter().next()
        {
            return Err(e);
        }
        if let Some(e) = StrategyConfigError::if_allocates_nothing(&*strategy) {
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
        if let Some((inner, inner_params)) = inner_spec(keys, params) {
            found.extend(self.unknown_params(inner, &inner_params));
        }
        found
    }

    /// Why the strategy `name` builds with `params` would give nobody anything, whatever the
    /// queues and members: [`StrategyConfigError::if_allocates_nothing`] of the strategy built
    /// (see [`AllocateStrategy::allocates_nothing`](super::AllocateStrategy::allocates_nothing)):
    /// `consistent_hash` with `virtual_node_count` 0, `by_machine_room` whose `consumer_idcs`
    /// name no room (or only names holding an '@', which no room has), `by_config` with an
    /// empty `message_queue_list`, or a wrapper (`machine_room_nearby`, `designated`) around
    /// such a strategy, and whatever a strategy registered by you says of itself. `None` when
    /// the strategy may allocate something, or cannot be built.
    pub fn allocates_nothing(&self, name: &str, params: &Params) -> Option<StrategyConfigError> {
        let strategy = self.build_quietly(name, params).ok()?;
        StrategyConfigError::if_allocates_nothing(&*strategy)
    }
}

/// A wrapper's inner strategy and its parameters, as the registry's factories read them, when `keys` (the
/// wrapper's) include `inner_strategy`.
fn inner_spec<'p>(keys: &[&str], p: &'p Params) -> Option<(&'p str, Params)> {
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
    // A wrapper may wrap itself, as the factories build it: each level's parameters are the
    // level above's `inner_params`, so the descent ends (found by review: it stopped there,
    // and a misspelled key inside went unseen).
    Some((inner, params))
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
            let built = r.build(name, &p);
            assert!(built.is_ok(), "{name} {p:?}: Java accepts it");
            let err = r
                .build_for_runtime(name, &p, UnknownParams::Allow)
                .unwrap_err();
            assert!(
                matches!(err, StrategyConfigError::AllocatesNothing { .. }),
                "{name} {p:?}: {err}"
            );
            // One source of truth: the strategy built says so itself, as a value given to a
            // runtime would.
            let from_value = StrategyConfigError::if_allocates_nothing(&*built.unwrap());
            assert_eq!(from_value.as_ref(), Some(&err), "{name} {p:?}");
            assert_eq!(r.allocates_nothing(name, &p), Some(err), "{name} {p:?}");
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
            assert_eq!(r.allocates_nothing(name, &p), None, "{name} {p:?}");
        }
        // A wrapper names its inner strategy in the reason.
        let err = r
            .build_for_runtime(
                "designated",
                &params(json!({"consumers": ["a"], "inner_strategy": "by_config",
                               "inner_params": {"message_queue_list": []}})),
                UnknownParams::Refuse,
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "strategy `designated` would allocate nothing to anybody: its inner strategy \
             `by_config` allocates nothing: `message_queue_list` is empty, so this client takes \
             no queue"
        );
    }

    /// A strategy registered by name is asked too: it says of itself whether it allocates
    /// nothing.
    #[test]
    fn a_registered_strategy_is_asked_whether_it_allocates_nothing() {
        #[derive(Debug)]
        struct Never;
        impl crate::strategy::AllocateStrategy for Never {
            fn name(&self) -> &str {
                "never"
            }
            fn allocate(
                &self,
                _: &str,
                _: &crate::ClientId,
                _: &[crate::MessageQueue],
                _: &[crate::ClientId],
            ) -> Result<Vec<crate::MessageQueue>, crate::strategy::AllocateError> {
                Ok(Vec::new())
            }
            fn allocates_nothing(&self) -> Option<String> {
                Some("it never does".into())
            }
        }
        let mut r = StrategyRegistry::default();
        r.register("never", |_, _| Ok(Arc::new(Never)));
        let err = r
            .build_for_runtime("never", &Params::new(), UnknownParams::Refuse)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "strategy `never` would allocate nothing to anybody: it never does"
        );
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
        // Through a wrapper wrapping itself too (found by review: not looked into).
        let twice = params(json!({
            "inner_strategy": "machine_room_nearby",
            "inner_params": {
                "inner_strategy": "consistent_hash",
                "inner_params": {"virtual_nodes": 20},
            },
        }));
        let found = r.unknown_params("machine_room_nearby", &twice);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].to_string().contains("`virtual_nodes`"),
            "{found:?}"
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
