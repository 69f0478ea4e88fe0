//! `rebalance allocate`: RocketMQ allocation cases in, every member's share out.
//!
//! It is the parity tool: every answer is exactly what the Java client's strategies compute on
//! the case as given, including inputs a runtime never produces (duplicate ids, unsorted lists)
//! and parameters a runtime refuses. Those get [`CaseAnswer::warnings`] saying so.

use std::collections::{HashMap, HashSet};
use std::io::Write;

use rebalance_core::strategy::{Params, StrategyConfigError, StrategyRegistry};
use rebalance_core::{AllocateError, ClientId, MessageQueue};
use serde_json::Value;

use crate::jsonl::{LineError, field, str_field};
use crate::table;

/// The answer to one case: each queried client id with its queues or its error.
#[derive(Debug)]
pub struct CaseAnswer {
    /// The case's `id`, as given.
    pub id: Value,
    /// The strategy's name, as given.
    pub strategy: String,
    /// Queried ids in order: distinct ids of `cid_all`, then `extra_cids`.
    pub results: Vec<(ClientId, Result<Vec<MessageQueue>, AllocateError>)>,
    /// What in the case a runtime would never do (see [`warnings`]); the answer is Java's all
    /// the same.
    pub warnings: Vec<String>,
}

/// What a runtime would never do with this case, while `rebalance allocate` answers as Java
/// does: parameters the strategy does not read (a runtime's builder refuses them), parameters
/// with which nobody gets a queue (refused too), a consumer id listed more than once (a runtime
/// lists each once), and unsorted lists (a runtime sorts them before allocating).
pub fn warnings(
    registry: &StrategyRegistry,
    strategy: &str,
    params: &Params,
    group: &str,
    mq_all: &[MessageQueue],
    cid_all: &[ClientId],
) -> Vec<String> {
    let mut warnings: Vec<String> = registry
        .unknown_params(strategy, params)
        .into_iter()
        .map(|e| format!("{e}; a runtime's builder refuses it"))
        .collect();
    if let Some(e) = registry.allocates_nothing(strategy, params) {
        warnings.push(format!(
            "{e}; the Java client accepts it, a runtime's builder and `rebalance simulate` refuse it"
        ));
    }
    // Each id's count, ids in the order they first appear.
    let mut counts: HashMap<&str, usize> = HashMap::with_capacity(cid_all.len());
    let mut order: Vec<&ClientId> = Vec::new();
    for cid in cid_all {
        let n = counts.entry(cid.as_str()).or_insert(0);
        if *n == 0 {
            order.push(cid);
        }
        *n += 1;
    }
    let repeated: Vec<(&ClientId, usize)> = order
        .into_iter()
        .map(|cid| (cid, counts[cid.as_str()]))
        .filter(|&(_, n)| n > 1)
        .collect();
    if !repeated.is_empty() {
        let lost = lost_to_repeats(registry, strategy, params, group, mq_all, cid_all);
        for (cid, n) in repeated {
            let times = if n == 2 {
                "twice".to_string()
            } else {
                format!("{n} times")
            };
            let mut w =
                format!("consumer id {cid} appears {times}: a runtime would never list it twice");
            match lost {
                0 => {}
                1 => w.push_str("; one queue is owned by nobody"),
                n => w.push_str(&format!("; {n} queues are owned by nobody")),
            }
            warnings.push(w);
        }
    }
    if !mq_all.is_sorted() {
        warnings.push(
            "mq_all is not sorted: a runtime sorts the queues (by topic, broker, queue id) before \
             allocating; this answer is for the order given"
                .into(),
        );
    }
    if !cid_all.is_sorted() {
        warnings.push(
            "cid_all is not sorted: a runtime sorts the consumer ids before allocating; this \
             answer is for the order given"
                .into(),
        );
    }
    warnings
}

/// How many more queues nobody owns with `cid_all` as given than with each id listed once.
fn lost_to_repeats(
    registry: &StrategyRegistry,
    strategy: &str,
    params: &Params,
    group: &str,
    mq_all: &[MessageQueue],
    cid_all: &[ClientId],
) -> usize {
    let Ok(strategy) = registry.build(strategy, params) else {
        return 0;
    };
    let unowned = |cids: &[ClientId]| {
        strategy.plan(group, mq_all, cids).ok().map(|plan| {
            let owned: HashSet<MessageQueue> =
                plan.iter().flat_map(|(_, share)| share.to_vec()).collect();
            mq_all.iter().filter(|q| !owned.contains(q)).count()
        })
    };
    let mut seen = HashSet::new();
    let once: Vec<ClientId> = cid_all
        .iter()
        .filter(|c| seen.insert(c.as_str()))
        .cloned()
        .collect();
    match (unowned(cid_all), unowned(&once)) {
        (Some(given), Some(deduplicated)) => given.saturating_sub(deduplicated),
        _ => 0,
    }
}

fn queue_list(case: &Value, key: &str) -> Result<Vec<MessageQueue>, LineError> {
    let items = field(case, key)?.as_array().ok_or_else(|| {
        LineError(format!(
            "field `{key}` must be a list of [topic, broker, queue_id]"
        ))
    })?;
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            MessageQueue::from_json(v).ok_or_else(|| {
                LineError(format!(
                    "field `{key}`[{i}] is not a [topic, broker, queue_id] triple: {v}"
                ))
            })
        })
        .collect()
}

fn id_list(case: &Value, key: &str, required: bool) -> Result<Vec<ClientId>, LineError> {
    let items = match case.get(key) {
        None | Some(Value::Null) if !required => return Ok(Vec::new()),
        _ => field(case, key)?,
    };
    let items = items
        .as_array()
        .ok_or_else(|| LineError(format!("field `{key}` must be a list of strings")))?;
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str()
                .map(ClientId::from)
                .ok_or_else(|| LineError(format!("field `{key}`[{i}] must be a string, not {v}")))
        })
        .collect()
}

/// How a case's answers are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Method {
    /// The strategy's one-pass plan, with `allocate` only for the ids the plan does not answer
    /// (outsiders, the empty id, errors).
    #[default]
    Plan,
    /// One `allocate_shared` call per queried id: what every client of a group runs.
    EachMember,
}

/// Computes one case with the strategy's one-pass plan (see [`Method::Plan`]), so every
/// answer is exactly Java's.
pub fn answer(case: &Value, registry: &StrategyRegistry) -> Result<CaseAnswer, LineError> {
    answer_with(case, registry, Method::Plan)
}

/// Computes one case by `method`.
pub fn answer_with(
    case: &Value,
    registry: &StrategyRegistry,
    method: Method,
) -> Result<CaseAnswer, LineError> {
    let id = field(case, "id")?.clone();
    let strategy_name = str_field(case, "strategy")?;
    let params: Params = match case.get("params") {
        None | Some(Value::Null) => Params::new(),
        Some(Value::Object(p)) => p.clone(),
        Some(_) => return Err(LineError("field `params` must be an object".into())),
    };
    let group = match case.get("group") {
        None | Some(Value::Null) => "",
        Some(Value::String(g)) => g.as_str(),
        Some(_) => return Err(LineError("field `group` must be a string".into())),
    };
    let mq_all = queue_list(case, "mq_all")?;
    let cid_all = id_list(case, "cid_all", true)?;
    let extra = id_list(case, "extra_cids", false)?;
    // Before anything is built: a hash ring of every member's virtual nodes.
    crate::limits::check_ring(strategy_name, &params, cid_all.len()).map_err(LineError)?;
    let warnings = warnings(registry, strategy_name, &params, group, &mq_all, &cid_all);

    let mut seen = HashSet::new();
    let queried: Vec<ClientId> = cid_all
        .iter()
        .chain(&extra)
        .filter(|c| seen.insert(c.as_str()))
        .cloned()
        .collect();

    let strategy = match registry.build(strategy_name, &params) {
        Ok(s) => s,
        // The Java constructor throws, so every call reports it.
        Err(StrategyConfigError::Rejected(e)) => {
            let results = queried.into_iter().map(|c| (c, Err(e.clone()))).collect();
            return Ok(CaseAnswer {
                id,
                strategy: strategy_name.to_string(),
                results,
                warnings,
            });
        }
        Err(e) => return Err(LineError(e.to_string())),
    };
    let plan = match method {
        Method::Plan => strategy.plan(group, &mq_all, &cid_all).ok(),
        Method::EachMember => None,
    };
    let results = queried
        .into_iter()
        .map(|cid| {
            let result = match (method, plan.as_ref().and_then(|p| p.share(&cid))) {
                (Method::Plan, Some(share)) => Ok(share.to_vec()),
                (Method::Plan, None) => strategy.allocate(group, &cid, &mq_all, &cid_all),
                (Method::EachMember, _) => strategy
                    .allocate_shared(group, &cid, &mq_all, &cid_all)
                    .map(|share| share.to_vec()),
            };
            (cid, result)
        })
        .collect();
    Ok(CaseAnswer {
        id,
        strategy: strategy_name.to_string(),
        results,
        warnings,
    })
}

impl CaseAnswer {
    /// `{"id": ..., "plan": {cid: [[topic, broker, queue_id], ...]}, "errors": {cid: "message"}}`,
    /// keys in query order, and `"warnings": ["...", ...]` when there are any.
    pub fn write_json(&self, out: &mut impl Write) -> std::io::Result<()> {
        let json = |v: &dyn erased::Json| v.to_json();
        write!(out, "{{\"id\":{},\"plan\":{{", json(&self.id))?;
        let mut first = true;
        for (cid, result) in &self.results {
            if let Ok(queues) = result {
                let triples: Vec<Value> = queues.iter().map(MessageQueue::to_json_triple).collect();
                write!(
                    out,
                    "{}{}:{}",
                    if first { "" } else { "," },
                    json(&cid.as_str()),
                    Value::Array(triples)
                )?;
                first = false;
            }
        }
        write!(out, "}},\"errors\":{{")?;
        let mut first = true;
        for (cid, result) in &self.results {
            if let Err(e) = result {
                write!(
                    out,
                    "{}{}:{}",
                    if first { "" } else { "," },
                    json(&cid.as_str()),
                    json(&e.java_message())
                )?;
                first = false;
            }
        }
        write!(out, "}}")?;
        if !self.warnings.is_empty() {
            write!(out, ",\"warnings\":{}", json(&self.warnings))?;
        }
        writeln!(out, "}}")
    }

    /// A table: member, count, queues.
    pub fn write_pretty(&self, out: &mut impl Write) -> std::io::Result<()> {
        writeln!(out, "case {} ({})", self.id, self.strategy)?;
        let rows = self.results.iter().map(|(cid, result)| {
            let (count, queues) = match result {
                Ok(q) => (q.len().to_string(), table::compact_queues(q)),
                Err(e) => ("-".to_string(), format!("error: {}", e.java_message())),
            };
            vec![cid.to_string(), count, queues]
        });
        table::write(out, &["member", "count", "queues"], rows)?;
        for w in &self.warnings {
            writeln!(out, "warning: {w}")?;
        }
        writeln!(out)
    }
}

/// Serializing to a JSON string, for values and strings alike.
mod erased {
    pub trait Json {
        fn to_json(&self) -> String;
    }
    impl<T: serde::Serialize + ?Sized> Json for T {
        fn to_json(&self) -> String {
            // Serializing a string or a JSON value cannot fail.
            serde_json::to_string(self).unwrap_or_else(|_| "null".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(line: &str) -> String {
        let case: Value = serde_json::from_str(line).unwrap();
        let answer = answer(&case, &StrategyRegistry::default()).unwrap();
        let mut out = Vec::new();
        answer.write_json(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn answers_in_query_order_with_errors() {
        let out = run(r#"{"id":"x","strategy":"averagely","params":{},"group":"G",
                "mq_all":[["T","b",0],["T","b",1],["T","b",2]],"cid_all":["c2","c1","c2",""],"extra_cids":["zz"]}"#);
        assert_eq!(
            out,
            "{\"id\":\"x\",\"plan\":{\"c2\":[[\"T\",\"b\",0]],\"c1\":[[\"T\",\"b\",1]],\"zz\":[]},\
             \"errors\":{\"\":\"IllegalArgumentException: currentCID is empty\"},\
             \"warnings\":[\"consumer id c2 appears twice: a runtime would never list it twice\",\
             \"cid_all is not sorted: a runtime sorts the consumer ids before allocating; this \
             answer is for the order given\"]}\n"
        );
    }

    #[test]
    fn constructor_errors_are_reported_for_every_id() {
        let out = run(
            r#"{"id":1,"strategy":"consistent_hash","params":{"virtual_node_count":-1},
                         "mq_all":[["T","b",0]],"cid_all":["a","b"]}"#,
        );
        assert!(
            out.contains("\"a\":\"IllegalArgumentException: illegal virtualNodeCnt :-1\""),
            "{out}"
        );
        assert!(out.contains("\"b\":\"IllegalArgumentException"), "{out}");
    }

    #[test]
    fn malformed_cases_name_the_problem() {
        let registry = StrategyRegistry::default();
        let err = |line: &str| {
            answer(&serde_json::from_str(line).unwrap(), &registry)
                .unwrap_err()
                .0
        };
        assert!(
            err(r#"{"id":1,"strategy":"nope","mq_all":[],"cid_all":[]}"#)
                .contains("unknown strategy")
        );
        assert!(
            err(r#"{"id":1,"strategy":"averagely","cid_all":[]}"#)
                .contains("missing field `mq_all`")
        );
        assert!(
            err(r#"{"id":1,"strategy":"averagely","mq_all":[["T","b","x"]],"cid_all":[]}"#)
                .contains("mq_all`[0]")
        );
        assert!(
            err(r#"{"id":1,"strategy":"averagely","mq_all":[],"cid_all":[3]}"#)
                .contains("cid_all`[0]")
        );
        assert!(err(r#"[1,2]"#).contains("JSON object"));
    }
}
