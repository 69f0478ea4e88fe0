//! Requests the servers refused this client (its credentials or its permissions): a typed
//! [`RemoteError::Denied`] naming the operation and the resource, logged once per resource.
//!
//! A denied request is never retried here: the runtime's own schedule (heartbeats every 30 s,
//! rounds) asks again, and the answer is logged at ERROR the first time a resource is denied,
//! at debug afterwards, and at info when the resource is served again.

use std::collections::HashSet;
use std::sync::Mutex;

use rebalance_runtime::RemoteError;

use crate::acl::{self, Credentials};
use crate::command::RemotingCommand;

/// How many denied resources are remembered; beyond that, further ones are logged at ERROR
/// every time (no bookkeeping grows without bound, whatever the servers answer).
const MAX_REMEMBERED: usize = 4096;

/// What a request does and to what, for the errors and logs of a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Op {
    /// What is asked (`heartbeat`, `offset commit`, ...).
    pub operation: &'static str,
    /// What it is asked about (`group ns%G`, ...), with the names the servers know: in a
    /// namespace, the wrapped names, which are what permissions are granted on.
    pub resource: String,
}

impl Op {
    pub(crate) fn new(operation: &'static str, resource: impl Into<String>) -> Self {
        Self {
            operation,
            resource: resource.into(),
        }
    }
}

/// The resources denied so far (one record per resource, shared by every client built on one
/// [`RemotingClient`](crate::RemotingClient)). Never held across an `.await`.
#[derive(Debug, Default)]
pub(crate) struct Denials {
    denied: Mutex<HashSet<String>>,
}

impl Denials {
    fn with<T>(&self, f: impl FnOnce(&mut HashSet<String>) -> T) -> T {
        let mut denied = self.denied.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut denied)
    }

    /// Whether `response` from `server` to `op` is a refusal of this client's credentials or
    /// permissions: then the typed error (logged once per resource), else `Ok`.
    pub(crate) fn check(
        &self,
        server: &str,
        op: &Op,
        credentials: Option<&Credentials>,
        response: &RemotingCommand,
    ) -> Result<(), RemoteError> {
        if !acl::is_denial(response) {
            self.served(op);
            return Ok(());
        }
        let remark = response.remark_or_empty();
        let first = self.with(|denied| {
            if denied.contains(&op.resource) {
                return false;
            }
            if denied.len() < MAX_REMEMBERED {
                denied.insert(op.resource.clone());
            }
            true
        });
        if first {
            let advice = match credentials {
                None => "this client sends no credentials: build the NameServerClient with \
                         `NameServerClient::builder(..).credentials(..)`"
                    .to_string(),
                Some(c) => format!(
                    "check the secret of access key `{}` and its permissions on {}",
                    c.access_key(),
                    op.resource
                ),
            };
            tracing::error!(
                server,
                operation = op.operation,
                resource = %op.resource,
                code = response.code,
                remark,
                "request denied: {advice}; not retried before the next scheduled attempt"
            );
        } else {
            tracing::debug!(server, operation = op.operation, resource = %op.resource, code = response.code, remark, "request denied again");
        }
        Err(RemoteError::Denied {
            server: server.to_string(),
            operation: op.operation,
            resource: op.resource.clone(),
            code: response.code,
            remark: remark.to_string(),
        })
    }

    /// Notes that `op`'s resource was served: a resource denied before is logged as served
    /// again, and would be logged at ERROR again if denied later.
    fn served(&self, op: &Op) {
        let was_denied = self.with(|denied| !denied.is_empty() && denied.remove(&op.resource));
        if was_denied {
            tracing::info!(operation = op.operation, resource = %op.resource, "request served again after a denial");
        }
    }

    /// How many resources are remembered as denied.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.with(|denied| denied.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(code: i32) -> RemotingCommand {
        RemotingCommand::response(
            code,
            1,
            Some("Authentication credentials are invalid".into()),
        )
    }

    #[test]
    fn a_denial_is_a_typed_error_naming_operation_and_resource() {
        let denials = Denials::default();
        let op = Op::new("heartbeat", "group `G`");
        let err = denials
            .check("127.0.0.1:10911", &op, None, &answer(16))
            .unwrap_err();
        assert_eq!(
            err,
            RemoteError::Denied {
                server: "127.0.0.1:10911".into(),
                operation: "heartbeat",
                resource: "group `G`".into(),
                code: 16,
                remark: "Authentication credentials are invalid".into(),
            }
        );
        assert_eq!(
            err.to_string(),
            "127.0.0.1:10911 denied heartbeat on group `G` (code 16: Authentication credentials are invalid)"
        );
        assert!(denials.check("b", &op, None, &answer(0)).is_ok());
        assert!(
            denials.check("b", &op, None, &answer(22)).is_ok(),
            "not a denial"
        );
    }

    #[test]
    fn each_resource_is_remembered_once_until_served_again() {
        let denials = Denials::default();
        let g = Op::new("heartbeat", "group `G`");
        let g_list = Op::new("consumer list", "group `G`");
        let t = Op::new("offset commit", "group `G` on topic `T`");
        for _ in 0..100 {
            assert!(denials.check("b", &g, None, &answer(16)).is_err());
            assert!(denials.check("b", &g_list, None, &answer(16)).is_err());
        }
        assert!(denials.check("b", &t, None, &answer(16)).is_err());
        assert_eq!(denials.len(), 2);
        assert!(denials.check("b", &g, None, &answer(0)).is_ok());
        assert_eq!(denials.len(), 1, "served again: forgotten");
    }

    #[test]
    fn the_record_is_bounded() {
        let denials = Denials::default();
        for n in 0..MAX_REMEMBERED + 100 {
            let op = Op::new("offset read", format!("group `G{n}`"));
            assert!(denials.check("b", &op, None, &answer(16)).is_err());
        }
        assert_eq!(denials.len(), MAX_REMEMBERED);
    }
}
