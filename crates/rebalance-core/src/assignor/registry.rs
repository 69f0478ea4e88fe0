//! Group assignors built by name, so that configuration files and the command line can name them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use super::{Broadcast, CooperativeSticky, GroupAssignor, Range, RoundRobin, Sticky};
use crate::strategy::{Params, UnknownParams};

/// A shared group assignor.
pub type AssignorRef = Arc<dyn GroupAssignor>;

/// Builds an assignor from its parameters.
pub type AssignorFactory =
    Arc<dyn Fn(&Params) -> Result<AssignorRef, AssignorConfigError> + Send + Sync>;

/// Why an assignor could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AssignorConfigError {
    /// No assignor has this name.
    #[error("unknown assignor `{name}` (known: {known})")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names the registry knows, comma separated.
        known: String,
    },
    /// A parameter is missing or wrong.
    #[error("assignor `{assignor}`: {problem}")]
    Param {
        /// The assignor being built.
        assignor: String,
        /// What is wrong.
        problem: String,
    },
    /// A parameter given to a built-in assignor, which reads none. Only
    /// [`AssignorRegistry::build_for_runtime`] refuses it, unless told to allow it.
    #[error("assignor `{assignor}` has no parameter `{key}` (the built-in assignors take none)")]
    UnknownParam {
        /// The assignor being built.
        assignor: String,
        /// The parameter.
        key: String,
    },
}

/// Named assignor factories: the built-in ones, plus any you register.
///
/// Built-in names: `range`, `roundrobin`, `sticky`, `cooperative_sticky`, `broadcast`, and
/// Kafka's spellings `round_robin` and `cooperative-sticky` as aliases.
///
/// ```
/// use rebalance_core::assignor::{AssignorRegistry, Broadcast};
/// use rebalance_core::strategy::Params;
/// use std::sync::Arc;
///
/// let mut registry = AssignorRegistry::default();
/// assert_eq!(registry.build("cooperative_sticky", &Params::new()).unwrap().name(), "cooperative_sticky");
/// registry.register("fan_out", |_| Ok(Arc::new(Broadcast)));
/// assert!(registry.build("fan_out", &Params::new()).is_ok());
/// assert!(registry.build("nope", &Params::new()).is_err());
/// ```
#[derive(Clone)]
pub struct AssignorRegistry {
    factories: BTreeMap<String, AssignorFactory>,
    /// The built-in names (which read no parameter), until replaced by a registration.
    built_in: BTreeSet<String>,
}

impl fmt::Debug for AssignorRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.factories.keys()).finish()
    }
}

impl Default for AssignorRegistry {
    fn default() -> Self {
        let mut r = Self::empty();
        r.register("range", |_| Ok(Arc::new(Range)));
        r.register("roundrobin", |_| Ok(Arc::new(RoundRobin)));
        r.register("round_robin", |_| Ok(Arc::new(RoundRobin)));
        r.register("sticky", |_| Ok(Arc::new(Sticky)));
        r.register("cooperative_sticky", |_| Ok(Arc::new(CooperativeSticky)));
        r.register("cooperative-sticky", |_| Ok(Arc::new(CooperativeSticky)));
        r.register("broadcast", |_| Ok(Arc::new(Broadcast)));
        r.built_in = r.factories.keys().cloned().collect();
        r
    }
}

impl AssignorRegistry {
    /// A registry without any assignor.
    pub fn empty() -> Self {
        Self {
            factories: BTreeMap::new(),
            built_in: BTreeSet::new(),
        }
    }

    /// Adds (or replaces) an assignor.
    pub fn register<F>(&mut self, name: impl Into<String>, factory: F) -> &mut Self
    where
        F: Fn(&Params) -> Result<AssignorRef, AssignorConfigError> + Send + Sync + 'static,
    {
        let name = name.into();
        self.built_in.remove(&name);
        self.factories.insert(name, Arc::new(factory));
        self
    }

    /// Builds the assignor called `name` for a runtime: like [`build`](Self::build), but a
    /// parameter given to a built-in assignor (none reads any) is refused unless `unknown`
    /// allows it. No parameter value of a built-in assignor makes it assign nothing.
    ///
    /// ```
    /// use rebalance_core::assignor::AssignorRegistry;
    /// use rebalance_core::strategy::{Params, UnknownParams};
    ///
    /// let registry = AssignorRegistry::default();
    /// let params: Params = serde_json::from_str(r#"{"sticky": true}"#).unwrap();
    /// assert!(registry.build_for_runtime("range", &params, UnknownParams::Refuse).is_err());
    /// assert!(registry.build_for_runtime("range", &params, UnknownParams::Allow).is_ok());
    /// ```
    pub fn build_for_runtime(
        &self,
        name: &str,
        params: &Params,
        unknown: UnknownParams,
    ) -> Result<AssignorRef, AssignorConfigError> {
        let assignor = self.build(name, params)?;
        if unknown == UnknownParams::Refuse
            && self.built_in.contains(name)
            && let Some(key) = params.keys().next()
        {
            return Err(AssignorConfigError::UnknownParam {
                assignor: name.to_string(),
                key: key.clone(),
            });
        }
        Ok(assignor)
    }

    /// Builds the assignor called `name`.
    pub fn build(&self, name: &str, params: &Params) -> Result<AssignorRef, AssignorConfigError> {
        let factory = self
            .factories
            .get(name)
            .ok_or_else(|| AssignorConfigError::Unknown {
                name: name.to_string(),
                known: self.names().collect::<Vec<_>>().join(", "),
            })?;
        factory(params)
    }

    /// The registered names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.factories.keys().map(String::as_str)
    }
}

/// Builds a built-in assignor by name (see [`AssignorRegistry`]).
pub fn build_assignor(name: &str) -> Result<AssignorRef, AssignorConfigError> {
    AssignorRegistry::default().build(name, &Params::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An assignor's `name()` is what a group advertises and what the registry builds it by:
    /// every built-in name and alias builds an assignor whose own name builds the same one.
    #[test]
    fn every_built_in_answers_to_its_canonical_name() {
        let registry = AssignorRegistry::default();
        let canonical = |name: &str| {
            registry
                .build(name, &Params::new())
                .unwrap()
                .name()
                .to_string()
        };
        let expected = [
            ("range", "range"),
            ("roundrobin", "roundrobin"),
            ("round_robin", "roundrobin"),
            ("sticky", "sticky"),
            ("cooperative_sticky", "cooperative_sticky"),
            ("cooperative-sticky", "cooperative_sticky"),
            ("broadcast", "broadcast"),
        ];
        let mut names: Vec<&str> = expected.iter().map(|(name, _)| *name).collect();
        names.sort_unstable();
        assert_eq!(registry.names().collect::<Vec<_>>(), names);
        for (name, want) in expected {
            assert_eq!(canonical(name), want, "built by {name}");
            assert_eq!(canonical(want), want, "{want} built by its own name");
        }
    }

    #[test]
    fn a_runtime_refuses_parameters_of_built_in_assignors_unless_allowed() {
        let r = AssignorRegistry::default();
        let p: Params = serde_json::from_str(r#"{"partitions": 3}"#).unwrap();
        for name in ["range", "cooperative-sticky", "broadcast"] {
            let err = r
                .build_for_runtime(name, &p, UnknownParams::Refuse)
                .err()
                .unwrap_or_else(|| panic!("{name} took a parameter"));
            assert_eq!(
                err.to_string(),
                format!(
                    "assignor `{name}` has no parameter `partitions` (the built-in assignors take none)"
                )
            );
            assert!(r.build_for_runtime(name, &p, UnknownParams::Allow).is_ok());
            assert!(
                r.build_for_runtime(name, &Params::new(), UnknownParams::Refuse)
                    .is_ok()
            );
        }
        // An assignor of the user's own may read parameters: not checked.
        let mut custom = AssignorRegistry::default();
        custom.register("range", |_| Ok(Arc::new(Broadcast)));
        assert!(
            custom
                .build_for_runtime("range", &p, UnknownParams::Refuse)
                .is_ok()
        );
    }

    #[test]
    fn an_unknown_name_lists_the_known_ones() {
        let err = AssignorRegistry::default()
            .build("sticky_v2", &Params::new())
            .unwrap_err();
        let AssignorConfigError::Unknown { name, known } = err else {
            panic!("expected Unknown, got {err:?}");
        };
        assert_eq!(name, "sticky_v2");
        assert!(
            known.contains("cooperative_sticky") && known.contains("range"),
            "{known}"
        );
    }
}
