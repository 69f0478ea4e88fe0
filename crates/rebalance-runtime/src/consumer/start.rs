//! [`ConsumerBuilder::start`]: checks the configuration, makes first contact, spawns the tasks.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, OnceLock};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::checks::Checked;
use super::handle::{HandleInner, TaskFailure};
use super::{ConsumerBuilder, ConsumerError, ConsumerHandle};
use crate::assignment::{Assignment, ReportKind, RoundReport};
use crate::callbacks::caught;
use crate::context::Context;
use crate::directory::Registration;
use crate::route_sync::RouteSync;
use crate::routes::RouteTable;
use crate::service::{Outputs, PENDING_RESETS, Service};
use crate::wake::{Trigger, WakeReasons};
use crate::{RemoteError, heartbeat};

impl ConsumerBuilder {
    /// Starts the consumer: fetches the routes and sends a first heartbeat, then spawns its
    /// tasks and runs a first round once the group has settled (by default 20 ms after the
    /// start when the directory lists nobody else in the group, 20 ms after the last of a quick
    /// burst of members starting together, or 1 s after the start when joining members
    /// already running: [`Intervals::adaptive_settle`](crate::config::Intervals::adaptive_settle),
    /// or [`Intervals::membership_settle`](crate::config::Intervals::membership_settle) when set). Must be called inside a tokio runtime.
    ///
    /// Fails without starting anything when the configuration cannot work: no subscribed topic
    /// ([`ConsumerError::NoSubscription`]), a strategy that would allocate nothing to anybody
    /// ([`ConsumerError::Strategy`] with
    /// [`StrategyConfigError::AllocatesNothing`](rebalance_core::strategy::StrategyConfigError::AllocatesNothing),
    /// as [`AllocateStrategy::allocates_nothing`](rebalance_core::strategy::AllocateStrategy::allocates_nothing)
    /// says: `ConsistentHash::new(0)`, say), a missing part (including the locker that orderly
    /// consumption or an exclusive hand-off needs in clustering mode), an invalid interval, or
    /// broadcasting with a group-shared offset store;
    /// and with [`ConsumerError::TaskPanicked`] when the name server or the directory panics in
    /// the first route poll or heartbeat (the failures they report are not errors here: the
    /// consumer starts and its tasks try again).
    pub async fn start(self) -> Result<ConsumerHandle, ConsumerError> {
        tokio::runtime::Handle::try_current().map_err(|_| ConsumerError::NoRuntime)?;
        let Checked {
            ctx,
            subscriptions: requested,
            shutdown,
        } = self.check()?;
        let token = shutdown.map_or_else(CancellationToken::new, |t| t.child_token());
        let trigger = Arc::new(Trigger::new());
        let subscriptions = ctx.effective(&requested);
        let topics: BTreeSet<String> = subscriptions.keys().cloned().collect();
        let (subscriptions_tx, subscriptions_rx) = watch::channel(Arc::new(topics));
        let registration = Arc::new(ctx.registration(&subscriptions));
        let (registration_tx, registration_rx) = watch::channel(registration.clone());
        let last_registration = registration_rx.clone();
        let published_registration = registration_rx.clone();
        let (routes_tx, routes_rx) = watch::channel(Arc::new(RouteTable::default()));
        let (assignment_tx, assignment_rx) = watch::channel(Arc::new(Assignment::default()));
        let (rounds_tx, rounds_rx) = watch::channel(Arc::new(RoundReport::default()));
        let (leases_tx, leases_rx) = watch::channel(Arc::<crate::lease::HeldLeases>::default());
        let (resets_tx, resets_rx) = tokio::sync::mpsc::channel(PENDING_RESETS);
        // What the application subscribes to: its handles edit it, the service follows.
        let (requested_tx, requested_rx) = watch::channel(requested.clone());

        let span = tracing::info_span!("consumer", group = %ctx.group, client = %ctx.client_id);
        let mut route_sync = RouteSync::new(
            ctx.name_server.clone(),
            ctx.intervals.poll_name_server,
            ctx.intervals.topic_gone_after,
            subscriptions_rx,
            routes_tx,
            trigger.clone(),
        );
        // The first poll and heartbeat run here, in the caller's task: a panic in them is
        // contained as it is in the tasks that repeat them later, and reported the same way.
        let first_contact = async {
            let subscriptions: Vec<String> = subscriptions
                .iter()
                .map(|(topic, tags)| format!("{topic}: {tags}"))
                .collect();
            tracing::info!(?subscriptions, retry_topic = ?ctx.retry_topic, allocation = ctx.allocation.name(), model = ?ctx.message_model, order = ?ctx.consume_order, "starting consumer");
            caught(route_sync.poll_all())
                .await
                .map_err(|message| ("route sync", message))?;
            caught(heartbeat::beat(
                &*ctx.directory,
                &registration,
                &ctx.activity.membership,
            ))
                .await
                .map_err(|message| ("heartbeat", message))
        }
        .instrument(span.clone())
        .await;
        match first_contact {
            Err((task, message)) => {
                span.in_scope(|| tracing::error!(task, panic = %message, "a consumer task panicked while starting; the consumer does not start"));
                return Err(ConsumerError::TaskPanicked { task, message });
            }
            Ok(Err(RemoteError::ClientIdInUse { .. })) => {
                return Err(ConsumerError::ClientIdInUse {
                    client_id: ctx.client_id.clone(),
                    group: ctx.group.clone(),
                });
            }
            Ok(_) => {}
        }
        trigger.wake(WakeReasons::START);

        let heartbeat_now = Arc::new(tokio::sync::Notify::new());
        let helpers = TaskTracker::new();
        let tasks = TaskTracker::new();
        let failure = Arc::new(OnceLock::new());
        // The helper tasks, for `abort` (the service's own task is stopped by `killed`).
        let aborts = vec![
            helpers
                .spawn(
                    helper(
                        "route sync",
                        route_sync.run(token.clone()),
                        failure.clone(),
                        token.clone(),
                    )
                    .instrument(span.clone()),
                )
                .abort_handle(),
            helpers
                .spawn(
                    helper(
                        "heartbeat",
                        heartbeat::run(
                            ctx.directory.clone(),
                            registration_rx,
                            ctx.intervals.heartbeat,
                            heartbeat_now.clone(),
                            ctx.activity.clone(),
                            token.clone(),
                        ),
                        failure.clone(),
                        token.clone(),
                    )
                    .instrument(span.clone()),
                )
                .abort_handle(),
        ];
        let last_words = LastWords {
            ctx: ctx.clone(),
            assignment: assignment_tx.clone(),
            rounds: rounds_tx.clone(),
            leases: leases_tx.clone(),
        };
        let service = Service::new(
            ctx.clone(),
            requested,
            routes_rx,
            trigger.clone(),
            Outputs {
                subscriptions: subscriptions_tx,
                registration: registration_tx,
                assignment: assignment_tx,
                rounds: rounds_tx,
                heartbeat_now,
                leases: leases_tx,
            },
            token.child_token(),
            resets_rx,
        );
        let killed = CancellationToken::new();
        let service = {
            let ctx = ctx.clone();
            let token = token.clone();
            let failure = failure.clone();
            let killed = killed.clone();
            async move {
                let mut run = Box::pin(caught(service.run(
                    requested_rx,
                    token.clone(),
                    helpers.clone(),
                )));
                let ended = tokio::select! {
                    biased;
                    _ = killed.cancelled() => None,
                    ended = &mut run => Some(ended),
                };
                // The service is gone (dropped where it stood, when killed): only the last
                // word is left to say.
                drop(run);
                match ended {
                    None => {
                        tracing::warn!("aborted: every task stopped; nothing was released");
                        last_words.say(ReportKind::Aborted);
                    }
                    Some(Ok(())) => {}
                    Some(Err(message)) => {
                        record_failure(&failure, SERVICE_TASK, message);
                        after_service_panic(&ctx, &token, &helpers, &last_registration).await;
                        last_words.say(ReportKind::TaskPanicked { task: SERVICE_TASK });
                    }
                }
            }
        };
        let serial = ctx.activity.serial;
        let service = crate::app_code::as_callback_of(serial, service.instrument(span.clone()));
        tasks.spawn(service);
        tasks.close();
        let handle = ConsumerHandle {
            inner: Arc::new(HandleInner {
                ctx,
                token,
                trigger,
                requested: requested_tx,
                assignment: assignment_rx,
                rounds: rounds_rx,
                tasks,
                aborts,
                killed,
                failure,
                serial,
                leases: leases_rx,
                resets: resets_tx,
                registration: published_registration,
            }),
        };
        handle
            .inner
            .ctx
            .directory
            .consumer_started(handle.started());
        Ok(handle)
    }
}

/// The name of the service task in [`ConsumerError::TaskPanicked`] and the reports.
const SERVICE_TASK: &str = "rebalance service";

/// What the service's task says when the service died (aborted, or panicked): that nothing is
/// held any more, and why, as the consumer's last report.
struct LastWords {
    ctx: Arc<Context>,
    assignment: watch::Sender<Arc<Assignment>>,
    rounds: watch::Sender<Arc<RoundReport>>,
    leases: watch::Sender<Arc<crate::lease::HeldLeases>>,
}

impl LastWords {
    fn say(self, kind: ReportKind) {
        self.leases.send_replace(Arc::default());
        let round = self.rounds.borrow().round;
        crate::metrics::forget_owned(&self.ctx.group, &self.ctx.owned_gauge);
        // Nothing is taken back any more.
        self.ctx.take_backs.set(std::iter::empty());
        self.assignment.send_replace(Arc::new(Assignment {
            round,
            balanced: false,
            queues: Default::default(),
            shared: Vec::new(),
        }));
        self.rounds.send_replace(Arc::new(RoundReport {
            client_id: Some(self.ctx.client_id.clone()),
            kind,
            round,
            ..RoundReport::default()
        }));
    }
}

/// Runs a helper task (route sync, heartbeat). One that panics stops the consumer the ordinary
/// way, through its token: the service, still alive, releases everything.
async fn helper(
    task: &'static str,
    future: impl Future<Output = ()>,
    failure: Arc<OnceLock<TaskFailure>>,
    token: CancellationToken,
) {
    if let Err(message) = caught(future).await {
        record_failure(&failure, task, message);
        token.cancel();
    }
}

/// Logs a task's panic and keeps the first one for [`ConsumerHandle::join`].
fn record_failure(failure: &OnceLock<TaskFailure>, task: &'static str, message: String) {
    tracing::error!(task, panic = %message, "a consumer task panicked; the consumer stops");
    let _ = failure.set(TaskFailure { task, message });
}

/// What can still be done once the service task (the owner of the queue table) has panicked:
/// stop the other tasks and cancel every lease (both through the consumer's token), and
/// unregister so that the group rebalances without waiting for the heartbeat to expire. The
/// table is gone with the task, so nothing is announced, persisted or unlocked.
async fn after_service_panic(
    ctx: &Context,
    token: &CancellationToken,
    helpers: &TaskTracker,
    registration: &watch::Receiver<Arc<Registration>>,
) {
    token.cancel();
    helpers.close();
    helpers.wait().await;
    let registration = registration.borrow().clone();
    match ctx.directory.unregister(&registration).await {
        Ok(()) => tracing::warn!("unregistered from the group after the service panicked"),
        Err(e) => {
            tracing::warn!(error = %e, "could not unregister after the service panicked; the directory will expire this client")
        }
    }
}
