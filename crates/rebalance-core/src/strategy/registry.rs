//! Strategies built by name, so that configuration files and the command line can name them.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    AllocateError, AllocateStrategy, Averagely, AveragelyByCircle, BalancedSticky, ByConfig,
    ByMachineRoom, ConsistentHash, Designated, MachineRoomNearby,
};
use crate::{ClientId, MessageQueue};

/// A shared strategy.
pub type StrategyRef = Arc<dyn AllocateStrategy>;

/// A strategy's parameters: a JSON object (`{"virtual_node_count": 10}`).
pub type Params = serde_json::Map<String, Value>;

/// Builds a strategy from its parameters; may build inner strategies through the registry.
pub type StrategyFactory = Arc<
    dyn Fn(&Params, &StrategyRegistry) -> Result<StrategyRef, StrategyConfigError> + Send + Sync,
>;

/// A strategy named in configuration: `{"name": "consistent_hash", "params": {"virtual_node_count": 20}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StrategySpec {
    /// The strategy's name.
    pub name: String,
    /// Its parameters.
    #[serde(default)]
    pub params: Params,
}

impl StrategySpec {
    /// A spec without parameters.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            params: Params::new(),
        }
    }

    /// Builds the strategy with the built-in registry.
    pub fn build(&self) -> Result<StrategyRef, StrategyConfigError> {
        build_strategy(&self.name, &self.params)
    }
}

/// Why a strategy could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StrategyConfigError {
    /// No strategy has this name.
    #[error("unknown strategy `{name}` (known: {known})")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names the registry knows, comma separated.
        known: String,
    },
    /// A parameter is missing or has the wrong type.
    #[error("parameter `{key}` of strategy `{strategy}` {problem}")]
    Param {
        /// The strategy being built.
        strategy: String,
        /// The parameter.
        key: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The parameters are well formed but the Java client rejects them (e.g. a negative virtual
    /// node count); every allocation would fail with this error. The message says what is
    /// wrong and quotes the Java client's own words (which [`AllocateError`]'s `Display` keeps).
    #[error("{}", rejected_message(.0))]
    Rejected(#[from] AllocateError),
    /// A parameter the strategy does not read (most likely a misspelling, which would leave the
    /// default in place). Only [`StrategyRegistry::build_for_runtime`] refuses it, unless told
    /// to allow it; [`StrategyRegistry::build`] warns.
    #[error(
        "strategy `{strategy}` has no parameter `{key}` ({reads}); a misspelled name would \
         leave the default in place"
    )]
    UnknownParam {
        /// The strategy given the parameter (an inner strategy's name for `inner_params`).
        strategy: String,
        /// The parameter.
        key: String,
        /// What the strategy reads: `"it reads a, b"` or `"it takes none"`.
        reads: String,
    },
    /// Parameters with which every member of the group would get nothing, so that a runtime
    /// would consume nothing while reporting balanced rounds (such as `consistent_hash` with
    /// `virtual_node_count` 0, which the Java client accepts): what
    /// [`AllocateStrategy::allocates_nothing`] says. Only
    /// [`StrategyRegistry::build_for_runtime`] refuses them here (and a runtime refuses such a
    /// strategy given as a value when it starts, see [`if_allocates_nothing`](Self::if_allocates_nothing)).
    #[error("strategy `{strategy}` would allocate nothing to anybody: {reason}")]
    AllocatesNothing {
        /// The strategy (a wrapper's name when its inner strategy is at fault: the reason
        /// names the inner one).
        strategy: String,
        /// Which parameter value, and why ([`AllocateStrategy::allocates_nothing`]).
        reason: String,
    },
}

impl StrategyConfigError {
    /// [`AllocatesNothing`](Self::AllocatesNothing) when `strategy` would give nobody anything
    /// ([`AllocateStrategy::allocates_nothing`] says why), else `None`: what a runtime refuses,
    /// for a strategy built by name ([`StrategyRegistry::build_for_runtime`]) or given as a
    /// value alike.
    ///
    /// ```
    /// use rebalance_core::strategy::{Averagely, ConsistentHash, StrategyConfigError};
    ///
    /// let err = StrategyConfigError::if_allocates_nothing(&ConsistentHash::new(0).unwrap()).unwrap();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "strategy `consistent_hash` would allocate nothing to anybody: `virtual_node_count` is 0, \
    ///      so the hash ring has no points (give it 1 or more; the default is 10)"
    /// );
    /// assert!(StrategyConfigError::if_allocates_nothing(&Averagely).is_none());
    /// ```
    pub fn if_allocates_nothing(strategy: &dyn AllocateStrategy) -> Option<Self> {
        let reason = strategy.allocates_nothing()?;
        Some(Self::AllocatesNothing {
            strategy: strategy.name().to_string(),
            reason,
        })
    }
}

/// [`StrategyConfigError::Rejected`]'s message: a sentence, with Java's words quoted.
fn rejected_message(e: &AllocateError) -> String {
    match e {
        AllocateError::IllegalVirtualNodeCount(n) => format!(
            "parameter `virtual_node_count` of strategy `consistent_hash` must be from 0 to {}, \
             not {n} (the Java client says \"{e}\")",
            ConsistentHash::MAX_VIRTUAL_NODES
        ),
        AllocateError::TooManyVirtualNodes(n) => format!(
            "parameter `virtual_node_count` of strategy `consistent_hash` must be from 0 to {}, \
             not {n} (this library's limit; the Java client accepts it)",
            ConsistentHash::MAX_VIRTUAL_NODES
        ),
        other => format!("the strategy refuses its parameters (the Java client says \"{other}\")"),
    }
}

/// Named strategy factories: the built-in ones, plus any you register.
///
/// Built-in names (Java names as aliases): `averagely` (`AVG`), `averagely_by_circle`
/// (`AVG_BY_CIRCLE`), `by_config` (`CONFIG`; `message_queue_list`), `by_machine_room`
/// (`MACHINE_ROOM`; `consumer_idcs`), `consistent_hash` (`CONSISTENT_HASH`;
/// `virtual_node_count`, `hash_function`), `machine_room_nearby` (`inner_strategy`,
/// `inner_params`), `designated` (`consumers`, `inner_strategy`, `inner_params`), and our own
/// `balanced_sticky` (`virtual_nodes`; `weights`, an object `{"id": weight}` or a string
/// `"id:weight,id:weight"`, and `default_weight` for ids not listed, 1 unless given).
///
/// ```
/// use rebalance_core::strategy::{Params, StrategyRegistry};
///
/// let registry = StrategyRegistry::default();
/// let params: Params = serde_json::from_str(r#"{"virtual_node_count": 20}"#).unwrap();
/// let strategy = registry.build("consistent_hash", &params).unwrap();
/// assert_eq!(strategy.name(), "consistent_hash");
/// assert!(registry.build("nope", &Params::new()).is_err());
/// ```
#[derive(Clone)]
pub struct StrategyRegistry {
    factories: BTreeMap<String, StrategyFactory>,
    /// The parameters each built-in strategy reads.
    keys: BTreeMap<String, &'static [&'static str]>,
}

impl fmt::Debug for StrategyRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.factories.keys()).finish()
    }
}

impl Default for StrategyRegistry {
    fn default() -> Self {
        let mut r = Self::empty();
        r.register_simple(&["averagely", "AVG"], |_| Ok(Arc::new(Averagely)));
        r.register_simple(&["averagely_by_circle", "AVG_BY_CIRCLE"], |_| {
            Ok(Arc::new(AveragelyByCircle))
        });
        r.register_simple(&["by_config", "CONFIG"], |p| {
            Ok(Arc::new(ByConfig::new(queue_list(
                p,
                "by_config",
                "message_queue_list",
            )?)))
        });
        r.register_simple(&["by_machine_room", "MACHINE_ROOM"], |p| {
            Ok(Arc::new(ByMachineRoom::new(string_list(
                p,
                "by_machine_room",
                "consumer_idcs",
            )?)))
        });
        r.register_simple(&["consistent_hash", "CONSISTENT_HASH"], consistent_hash);
        r.register_simple(&["balanced_sticky"], balanced_sticky);
        r.register("machine_room_nearby", |p, reg| {
            Ok(Arc::new(MachineRoomNearby::new(inner(
                p,
                reg,
                "machine_room_nearby",
            )?)))
        });
        r.register("designated", |p, reg| {
            let consumers = string_list(p, "designated", "consumers")?;
            Ok(Arc::new(Designated::new(
                inner(p, reg, "designated")?,
                consumers,
            )))
        });
        // After the registrations: `register` forgets a name's list.
        r.reads(
            &["averagely", "AVG", "averagely_by_circle", "AVG_BY_CIRCLE"],
            &[],
        );
        r.reads(&["by_config", "CONFIG"], &["message_queue_list"]);
        r.reads(&["by_machine_room", "MACHINE_ROOM"], &["consumer_idcs"]);
        r.reads(
            &["consistent_hash", "CONSISTENT_HASH"],
            &["virtual_node_count", "hash_function"],
        );
        r.reads(
            &["balanced_sticky"],
            &["virtual_nodes", "default_weight", "weights"],
        );
        r.reads(
            &["machine_room_nearby"],
            &["inner_strategy", "inner_params"],
        );
        r.reads(
            &["designated"],
            &["consumers", "inner_strategy", "inner_params"],
        );
        r
    }
}

impl StrategyRegistry {
    /// A registry without any strategy.
    pub fn empty() -> Self {
        Self {
            factories: BTreeMap::new(),
            keys: BTreeMap::new(),
        }
    }

    /// Adds (or replaces) a strategy. Its parameters are not checked against a list of the
    /// keys it reads (the built-in strategies' are: see [`param_keys`](Self::param_keys)).
    pub fn register<F>(&mut self, name: impl Into<String>, factory: F) -> &mut Self
    where
        F: Fn(&Params, &StrategyRegistry) -> Result<StrategyRef, StrategyConfigError>
            + Send
            + Sync
            + 'static,
    {
        let name = name.into();
        self.keys.remove(&name);
        self.factories.insert(name, Arc::new(factory));
        self
    }

    fn reads(&mut self, names: &[&str], keys: &'static [&'static str]) {
        for name in names {
            self.keys.insert((*name).to_string(), keys);
        }
    }

    /// The parameters built-in strategy `name` reads; `None` for a name registered without a
    /// list (or unknown). [`build`](Self::build) warns about any other key it is given: most
    /// likely a misspelling, which would otherwise leave the default in place silently (and a
    /// group whose members disagree on, say, `virtual_node_count` disagrees on its plan).
    pub fn param_keys(&self, name: &str) -> Option<&'static [&'static str]> {
        self.keys.get(name).copied()
    }

    fn register_simple<F>(&mut self, names: &[&str], factory: F)
    where
        F: Fn(&Params) -> Result<StrategyRef, StrategyConfigError> + Send + Sync + 'static,
    {
        let factory: StrategyFactory = Arc::new(move |p: &Params, _: &StrategyRegistry| factory(p));
        for name in names {
            self.factories.insert((*name).to_string(), factory.clone());
        }
    }

    /// Builds the strategy called `name`.
    pub fn build(&self, name: &str, params: &Params) -> Result<StrategyRef, StrategyConfigError> {
        if let Some(keys) = self.param_keys(name) {
            for key in params.keys().filter(|k| !keys.contains(&k.as_str())) {
                tracing::warn!(strategy = name, key, reads = ?keys, "strategy parameter not read (misspelled?); ignored");
            }
        }
        self.build_quietly(name, params)
    }

    /// [`build`](Self::build) without its warnings about parameters not read.
    pub(super) fn build_quietly(
        &self,
        name: &str,
        params: &Params,
    ) -> Result<StrategyRef, StrategyConfigError> {
        let factory = self
            .factories
            .get(name)
            .ok_or_else(|| StrategyConfigError::Unknown {
                name: name.to_string(),
                known: self.names().collect::<Vec<_>>().join(", "),
            })?;
        factory(params, self)
    }

    /// The registered names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.factories.keys().map(String::as_str)
    }
}

/// Builds a built-in strategy by name (see [`StrategyRegistry`]).
pub fn build_strategy(name: &str, params: &Params) -> Result<StrategyRef, StrategyConfigError> {
    StrategyRegistry::default().build(name, params)
}

fn param_error(strategy: &str, key: &str, problem: impl Into<String>) -> StrategyConfigError {
    StrategyConfigError::Param {
        strategy: strategy.to_string(),
        key: key.to_string(),
        problem: problem.into(),
    }
}

/// An integer given as a JSON number or a numeric string.
fn int_value(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// An optional integer parameter, as a JSON number or a numeric string.
pub(super) fn integer(
    p: &Params,
    strategy: &str,
    key: &str,
) -> Result<Option<i64>, StrategyConfigError> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => int_value(v).map(Some).ok_or_else(|| {
            let problem = match v {
                Value::String(s) => format!("must be an integer, not `{s}`"),
                _ => "must be an integer".to_string(),
            };
            param_error(strategy, key, problem)
        }),
    }
}

fn balanced_sticky(p: &Params) -> Result<StrategyRef, StrategyConfigError> {
    const S: &str = "balanced_sticky";
    let nodes = match integer(p, S, "virtual_nodes")? {
        None => BalancedSticky::DEFAULT_VIRTUAL_NODES,
        Some(n) => usize::try_from(n)
            .ok()
            .filter(|&n| (1..=65_536).contains(&n))
            .ok_or_else(|| param_error(S, "virtual_nodes", "must be between 1 and 65536"))?,
    };
    let strategy = BalancedSticky::new(nodes);
    let default_weight = match integer(p, S, "default_weight")? {
        None => None,
        Some(w) => Some(weight(w).ok_or_else(|| param_error(S, "default_weight", WEIGHT_RANGE))?),
    };
    let table = weight_table(p)?;
    if table.is_none() && default_weight.is_none() {
        return Ok(Arc::new(strategy));
    }
    let table = table.unwrap_or_default();
    let default_weight = default_weight.unwrap_or(1);
    Ok(Arc::new(strategy.with_weights(move |cid: &ClientId| {
        table.get(cid).copied().unwrap_or(default_weight)
    })))
}

const WEIGHT_RANGE: &str = "must be an integer from 0 to 4294967295";

fn weight(w: i64) -> Option<u32> {
    u32::try_from(w).ok()
}

/// balanced_sticky's `weights`: `{"id": weight, ...}` or `"id:weight,id:weight"` (split at the
/// last colon, so ids may hold colons).
fn weight_table(p: &Params) -> Result<Option<BTreeMap<ClientId, u32>>, StrategyConfigError> {
    const S: &str = "balanced_sticky";
    let bad = |problem: String| param_error(S, "weights", problem);
    let entries: Vec<(&str, Option<i64>, String)> = match p.get("weights") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(o)) => o
            .iter()
            .map(|(id, v)| (id.as_str(), int_value(v), v.to_string()))
            .collect(),
        Some(Value::String(text)) => text
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (id, w) = e
                    .rsplit_once(':')
                    .ok_or_else(|| bad(format!("`{e}` is not `id:weight`")))?;
                Ok((id.trim(), w.trim().parse().ok(), w.trim().to_string()))
            })
            .collect::<Result<_, StrategyConfigError>>()?,
        Some(_) => {
            return Err(bad(
                "must be an object {\"id\": weight} or a string \"id:weight,...\"".into(),
            ));
        }
    };
    let mut table = BTreeMap::new();
    for (id, w, text) in entries {
        let w = w
            .and_then(weight)
            .ok_or_else(|| bad(format!("the weight of `{id}` ({text}) {WEIGHT_RANGE}")))?;
        if id.is_empty() {
            return Err(bad("has an empty id".into()));
        }
        table.insert(ClientId::from(id), w);
    }
    Ok(Some(table))
}

fn consistent_hash(p: &Params) -> Result<StrategyRef, StrategyConfigError> {
    const S: &str = "consistent_hash";
    let count =
        integer(p, S, "virtual_node_count")?.unwrap_or(ConsistentHash::DEFAULT_VIRTUAL_NODES);
    match p.get("hash_function") {
        None | Some(Value::Null) => {}
        Some(Value::String(h)) if ["default MD5", "md5", "MD5"].contains(&h.as_str()) => {}
        Some(other) => {
            return Err(param_error(
                S,
                "hash_function",
                format!(
                    "must be \"md5\" (plug other hashes in with ConsistentHash::with_hash), not {other}"
                ),
            ));
        }
    }
    Ok(Arc::new(ConsistentHash::new(count)?))
}

fn inner(
    p: &Params,
    registry: &StrategyRegistry,
    strategy: &str,
) -> Result<StrategyRef, StrategyConfigError> {
    let name = match p.get("inner_strategy") {
        None | Some(Value::Null) => "averagely",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => {
            return Err(param_error(
                strategy,
                "inner_strategy",
                "must be a strategy name",
            ));
        }
    };
    let params = match p.get("inner_params") {
        None | Some(Value::Null) => Params::new(),
        Some(Value::Object(o)) => o.clone(),
        Some(_) => return Err(param_error(strategy, "inner_params", "must be an object")),
    };
    registry.build(name, &params)
}

/// A list of strings: a JSON array of strings, or one comma-separated string (whose empty
/// entries, as after a trailing comma, are dropped: an empty room would make brokers named
/// `@x` eligible).
pub(super) fn string_list(
    p: &Params,
    strategy: &str,
    key: &str,
) -> Result<Vec<String>, StrategyConfigError> {
    match p.get(key) {
        None | Some(Value::Null) => Err(param_error(strategy, key, "is required")),
        Some(Value::String(s)) => Ok(s
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(String::from)
            .collect()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(String::from)
                    .ok_or_else(|| param_error(strategy, key, "must hold only strings"))
            })
            .collect(),
        Some(_) => Err(param_error(strategy, key, "must be a list of strings")),
    }
}

/// A list of queues: `[[topic, broker, queue_id], ...]` or `[{"topic", "brokerName", "queueId"}, ...]`.
pub(super) fn queue_list(
    p: &Params,
    strategy: &str,
    key: &str,
) -> Result<Vec<MessageQueue>, StrategyConfigError> {
    let Some(Value::Array(items)) = p.get(key) else {
        return Err(param_error(
            strategy,
            key,
            "must be a list of [topic, broker, queue_id]",
        ));
    };
    items
        .iter()
        .map(|item| {
            MessageQueue::from_json(item)
                .ok_or_else(|| param_error(strategy, key, format!("has a bad queue: {item}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(v: Value) -> Params {
        match v {
            Value::Object(o) => o,
            _ => unreachable!("test params are objects"),
        }
    }

    #[test]
    fn every_builtin_lists_the_parameters_it_reads() {
        let r = StrategyRegistry::default();
        for name in r.names() {
            assert!(r.param_keys(name).is_some(), "{name} lists no keys");
        }
        assert_eq!(
            r.param_keys("CONSISTENT_HASH"),
            Some(&["virtual_node_count", "hash_function"][..])
        );
        assert_eq!(r.param_keys("AVG_BY_CIRCLE"), Some(&[][..]));
        // A strategy registered over a built-in name is not checked against its old list.
        let mut custom = StrategyRegistry::default();
        custom.register("averagely", |_, _| Ok(Arc::new(Averagely)));
        assert_eq!(custom.param_keys("averagely"), None);
        assert_eq!(custom.param_keys("AVG"), Some(&[][..]));
    }

    #[test]
    fn builds_every_builtin() {
        let r = StrategyRegistry::default();
        assert_eq!(r.build("AVG", &Params::new()).unwrap().name(), "averagely");
        let p = params(json!({"consumer_idcs": "room0,room1"}));
        assert_eq!(
            r.build("by_machine_room", &p).unwrap().name(),
            "by_machine_room"
        );
        let p = params(
            json!({"message_queue_list": [["T", "b", 1], {"topic": "T", "brokerName": "c", "queueId": 2}]}),
        );
        assert_eq!(r.build("by_config", &p).unwrap().name(), "by_config");
        let p = params(
            json!({"inner_strategy": "consistent_hash", "inner_params": {"virtual_node_count": "3"}}),
        );
        assert_eq!(
            r.build("machine_room_nearby", &p).unwrap().name(),
            "machine_room_nearby"
        );
        let p = params(json!({"consumers": ["10.0.0.1"]}));
        assert_eq!(r.build("designated", &p).unwrap().name(), "designated");
        let p = params(json!({"virtual_nodes": "16"}));
        assert_eq!(
            r.build("balanced_sticky", &p).unwrap().name(),
            "balanced_sticky"
        );
        let p = params(json!({"virtual_nodes": 0}));
        assert!(matches!(
            r.build("balanced_sticky", &p),
            Err(StrategyConfigError::Param { .. })
        ));
    }

    #[test]
    fn balanced_sticky_weights_from_an_object_or_a_string() {
        let r = StrategyRegistry::default();
        let queues: Vec<MessageQueue> = (0..12).map(|i| MessageQueue::new("T", "b", i)).collect();
        let ids: Vec<ClientId> = ["a", "b", "fe80::1@7"].map(ClientId::from).to_vec();
        let sizes = |p: Value| {
            let s = r.build("balanced_sticky", &params(p)).unwrap();
            let plan = s.plan("G", &queues, &ids).unwrap();
            ids.iter()
                .map(|c| plan.share(c).map_or(0, |s| s.len()))
                .collect::<Vec<_>>()
        };
        assert_eq!(sizes(json!({"weights": {"a": 2}})), [6, 3, 3]);
        assert_eq!(sizes(json!({"weights": "a:2, fe80::1@7:0"})), [8, 4, 0]);
        assert_eq!(
            sizes(json!({"weights": {"b": "3"}, "default_weight": 0})),
            [0, 12, 0]
        );
        assert_eq!(sizes(json!({"default_weight": 5})), [4, 4, 4]);
        for bad in [
            json!({"weights": "a=2"}),
            json!({"weights": {"a": -1}}),
            json!({"weights": {"a": 1.5}}),
            json!({"weights": [1, 2]}),
            json!({"weights": ":3"}),
            json!({"default_weight": 4_294_967_296_i64}),
        ] {
            let err = r
                .build("balanced_sticky", &params(bad.clone()))
                .unwrap_err();
            assert!(
                matches!(&err, StrategyConfigError::Param { key, .. } if key == "weights" || key == "default_weight"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn bad_parameters_are_named() {
        let r = StrategyRegistry::default();
        let err = r
            .build(
                "consistent_hash",
                &params(json!({"virtual_node_count": "x"})),
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "parameter `virtual_node_count` of strategy `consistent_hash` must be an integer, not `x`"
        );
        let err = r
            .build(
                "consistent_hash",
                &params(json!({"virtual_node_count": -1})),
            )
            .unwrap_err();
        assert_eq!(
            err,
            StrategyConfigError::Rejected(AllocateError::IllegalVirtualNodeCount(-1))
        );
        // A sentence that still quotes Java's words (which the reference vectors check).
        assert_eq!(
            err.to_string(),
            "parameter `virtual_node_count` of strategy `consistent_hash` must be from 0 to 65536, \
             not -1 (the Java client says \"illegal virtualNodeCnt :-1\")"
        );
        // Java's name for its hash, and ours; nothing else (only MD5 is built in).
        for h in ["default MD5", "md5", "MD5"] {
            let p = params(json!({"hash_function": h}));
            assert!(r.build("consistent_hash", &p).is_ok(), "{h}");
        }
        for h in [json!("crc32"), json!(5)] {
            let p = params(json!({"hash_function": h}));
            let err = r.build("consistent_hash", &p).unwrap_err();
            assert!(
                matches!(&err, StrategyConfigError::Param { key, .. } if key == "hash_function"),
                "{h}: {err}"
            );
        }
        let err = r.build("by_config", &Params::new()).unwrap_err();
        assert!(matches!(err, StrategyConfigError::Param { .. }));
        let err = r
            .build(
                "machine_room_nearby",
                &params(json!({"inner_strategy": "zzz"})),
            )
            .unwrap_err();
        assert!(matches!(err, StrategyConfigError::Unknown { .. }));
    }

    #[test]
    fn shared_answers_agree_with_allocate() {
        let r = StrategyRegistry::default();
        let queues: Vec<MessageQueue> = (0..12)
            .map(|i| MessageQueue::new("T", format!("b{}", i % 3), i / 3))
            .collect();
        let cids: Vec<ClientId> = ["room0@c0", "room1@c1", "room0@c2"]
            .into_iter()
            .map(ClientId::from)
            .collect();
        let with = |name: &str| match name {
            "by_machine_room" => params(json!({"consumer_idcs": "room0,room1"})),
            "by_config" => params(json!({"message_queue_list": [["T", "b1", 0]]})),
            "machine_room_nearby" => params(json!({"inner_strategy": "averagely"})),
            "designated" => params(json!({"consumers": ["room1@c1"]})),
            _ => Params::new(),
        };
        // The canonical names (the Java aliases are upper case).
        let names: Vec<String> = r
            .names()
            .filter(|n| n.chars().all(|c| !c.is_ascii_uppercase()))
            .map(str::to_string)
            .collect();
        assert_eq!(names.len(), 8, "{names:?}");
        // Java's names build the same strategies.
        for (alias, name) in [
            ("AVG", "averagely"),
            ("AVG_BY_CIRCLE", "averagely_by_circle"),
            ("CONFIG", "by_config"),
            ("MACHINE_ROOM", "by_machine_room"),
            ("CONSISTENT_HASH", "consistent_hash"),
        ] {
            assert_eq!(r.build(alias, &with(name)).unwrap().name(), name);
        }
        for name in names {
            let strategy = r.build(&name, &with(&name)).unwrap();
            // A strategy reports the name it is built by (logs and the CLI print it).
            assert_eq!(strategy.name(), name);
            for cid in &cids {
                let owned = strategy.allocate("G", cid, &queues, &cids).unwrap();
                let shared = strategy.allocate_shared("G", cid, &queues, &cids).unwrap();
                assert_eq!(*shared, *owned, "{name} for {cid}");
            }
        }
        let by_config = r.build("by_config", &with("by_config")).unwrap();
        let a = by_config
            .allocate_shared("G", &cids[0], &queues, &cids)
            .unwrap();
        let b = by_config
            .allocate_shared("G", &cids[1], &queues, &cids)
            .unwrap();
        assert!(Arc::ptr_eq(&a, &b), "by_config copied its list");
    }

    #[test]
    fn limits_are_inclusive() {
        let r = StrategyRegistry::default();
        let nodes = |n: i64| r.build("balanced_sticky", &params(json!({"virtual_nodes": n})));
        assert!(nodes(1).is_ok());
        assert!(nodes(65_536).is_ok(), "65536 is the documented maximum");
        for bad in [0, 65_537] {
            let err = nodes(bad).unwrap_err();
            assert!(
                matches!(&err, StrategyConfigError::Param { key, .. } if key == "virtual_nodes"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn wrappers_default_to_averagely_inside() {
        let r = StrategyRegistry::default();
        // One room, four queues, two consumers: averagely gives a [0, 1], by circle [0, 2].
        let queues: Vec<MessageQueue> = (0..4)
            .map(|i| MessageQueue::new("T", "room0@b", i))
            .collect();
        let cids: Vec<ClientId> = ["room0@a", "room0@b"].map(ClientId::from).to_vec();
        let ids = |q: Vec<MessageQueue>| q.iter().map(|q| q.queue_id).collect::<Vec<_>>();
        for (name, p) in [
            ("machine_room_nearby", json!({})),
            ("designated", json!({"consumers": ["room0@a", "room0@b"]})),
        ] {
            let s = r.build(name, &params(p)).unwrap();
            let got = s.allocate("G", &cids[0], &queues, &cids).unwrap();
            assert_eq!(ids(got), [0, 1], "{name}");
        }
    }

    #[test]
    fn comma_separated_lists_are_trimmed() {
        let r = StrategyRegistry::default();
        let queues: Vec<MessageQueue> = (0..2)
            .map(|i| MessageQueue::new("T", "room1@b", i))
            .collect();
        let cids: Vec<ClientId> = ["10.0.0.1@1", "10.0.0.2@1"].map(ClientId::from).to_vec();
        let s = r
            .build(
                "by_machine_room",
                &params(json!({"consumer_idcs": "room0, room1"})),
            )
            .unwrap();
        let plan = s.plan("G", &queues, &cids).unwrap();
        assert_eq!(plan.assigned_count(), 2, "` room1` names room1");
        let s = r
            .build(
                "designated",
                &params(json!({"consumers": "10.0.0.9, 10.0.0.2"})),
            )
            .unwrap();
        let mine = s.allocate("G", &cids[1], &queues, &cids).unwrap();
        assert_eq!(mine.len(), 2, "` 10.0.0.2` designates 10.0.0.2@1");
    }

    #[test]
    fn empty_entries_of_comma_separated_lists_are_dropped() {
        let r = StrategyRegistry::default();
        // A broker with an empty room: eligible only if the list held an empty room.
        let queues = vec![MessageQueue::new("T", "@b", 0)];
        let cids: Vec<ClientId> = ["10.0.0.1@1"].map(ClientId::from).to_vec();
        for list in ["room0,", "room0, ,room1", ",room0"] {
            let s = r
                .build("by_machine_room", &params(json!({"consumer_idcs": list})))
                .unwrap();
            let plan = s.plan("G", &queues, &cids).unwrap();
            assert_eq!(plan.assigned_count(), 0, "{list:?} names no empty room");
        }
        // A JSON array says exactly what it holds, an empty room included.
        let s = r
            .build(
                "by_machine_room",
                &params(json!({"consumer_idcs": ["room0", ""]})),
            )
            .unwrap();
        assert_eq!(s.plan("G", &queues, &cids).unwrap().assigned_count(), 1);
    }

    #[test]
    fn users_can_register_their_own() {
        let mut r = StrategyRegistry::default();
        r.register("mine", |_, _| Ok(Arc::new(Averagely)));
        assert!(r.build("mine", &Params::new()).is_ok());
        assert!(r.names().any(|n| n == "mine"));
    }

    #[test]
    fn debug_lists_the_registered_names() {
        let mut r = StrategyRegistry::empty();
        assert_eq!(format!("{r:?}"), "{}");
        r.register("mine", |_, _| Ok(Arc::new(Averagely)));
        r.register("also_mine", |_, _| Ok(Arc::new(Averagely)));
        assert_eq!(format!("{r:?}"), r#"{"also_mine", "mine"}"#);
    }
}
