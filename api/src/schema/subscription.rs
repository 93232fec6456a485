//! Subscriptions: a task's events (resumable), live task updates, and a
//! memory import job's progress.
//!
//! Each WebSocket connection may hold a bounded number of subscriptions at
//! once ([`SubscriptionSlots`]); one more answers `RATE_LIMITED`.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use async_graphql::{Context, ID, InputObject, Subscription as SubscriptionObject};
use brainstem_domain::{Error, TaskId, events, metrics::metrics};
use futures_util::{Stream, StreamExt, stream::BoxStream};

use super::{
    context::{RenderOne, domain, principal, require_scope},
    conversations,
    ids::{self, NodeType},
    memory::{MemoryImportJob, import_job_id},
    tasks::{Task, TaskEvent, TaskStatus},
};
use crate::error::ResultExt;

/// Where a `taskEvents` resolver may hand its stream instead of returning
/// it: the WebSocket connection delivers the events itself.
pub trait DeliverEvents: Send + Sync {
    /// Deliver `deliveries` for a subscriber of `tenant`, holding `slot`
    /// while they run.
    fn deliver(
        &self,
        tenant: brainstem_domain::TenantId,
        deliveries: BoxStream<'static, events::Delivery>,
        slot: Option<SlotGuard>,
    );
}

/// Put in a subscription request's data by a transport that delivers
/// `taskEvents` itself.
pub struct EventRoute(pub Box<dyn DeliverEvents>);

/// How many subscriptions one connection may hold.
pub struct SubscriptionSlots {
    used: AtomicUsize,
    max: usize,
}

impl SubscriptionSlots {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            used: AtomicUsize::new(0),
            max,
        })
    }

    fn acquire(self: &Arc<Self>) -> Option<SlotGuard> {
        let mut used = self.used.load(Ordering::SeqCst);
        loop {
            if used >= self.max {
                return None;
            }
            match self
                .used
                .compare_exchange(used, used + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    metrics().subscriptions_open.inc();
                    return Some(SlotGuard(self.clone()));
                }
                Err(now) => used = now,
            }
        }
    }
}

/// Frees its slot when the subscription's stream is dropped.
pub struct SlotGuard(Arc<SubscriptionSlots>);

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.0.used.fetch_sub(1, Ordering::SeqCst);
        metrics().subscriptions_open.dec();
    }
}

fn slot(ctx: &Context<'_>) -> async_graphql::Result<Option<SlotGuard>> {
    match ctx.data_opt::<Arc<SubscriptionSlots>>() {
        None => Ok(None),
        Some(slots) => slots.acquire().map(Some).ok_or_else(|| {
            crate::error::to_gql(Error::RateLimited {
                message: format!(
                    "this connection already holds {} subscriptions; close one first",
                    slots.max
                ),
                retry_after_secs: 1,
            })
        }),
    }
}

#[derive(InputObject, Default)]
pub struct TaskUpdatesFilter {
    /// Only tasks now in one of these statuses.
    pub statuses: Option<Vec<TaskStatus>>,
}

#[derive(Default)]
pub struct Subscription;

#[SubscriptionObject]
impl Subscription {
    /// The task's events with `seq > after` (default 0: all), then live ones
    /// as they happen: each stored event exactly once, in order, with no gap
    /// between replay and live. Token deltas arrive live; joining mid-step,
    /// the text so far comes first as one delta. The stream ends after the
    /// event that makes the task COMPLETED, FAILED or CANCELLED. To resume
    /// after a disconnect, subscribe again with the last `seq` seen.
    async fn task_events(
        &self,
        ctx: &Context<'_>,
        task_id: ID,
        after: Option<i64>,
    ) -> async_graphql::Result<BoxStream<'static, TaskEvent>> {
        // Rendering one event for the WebSocket fan-out (see `crate::fanout`):
        // the subscription's checks were done when it started.
        if let Some(one) = ctx.data_opt::<RenderOne>() {
            let event = TaskEvent::from(one.0.clone());
            return Ok(futures_util::stream::once(async move { event }).boxed());
        }
        let principal = principal(ctx)?;
        let scope = principal.require_scope("tasks:read").gql()?;
        let id = ids::decode_as(&task_id, NodeType::Task)
            .map(TaskId::from)
            .gql()?;
        let domain = domain(ctx);
        // Another tenant's task is NOT_FOUND, before anything streams.
        domain.tasks.get(scope, id).await.gql()?;
        let guard = slot(ctx)?;
        let after = after.unwrap_or(0).max(0);
        if let Some(EventRoute(route)) = ctx.data_opt::<EventRoute>() {
            // Over WebSocket: the connection delivers the events itself and
            // shares each event's rendering among subscribers of one shape.
            let deliveries = events::task_event_deliveries(
                domain.tasks.clone(),
                domain.events.clone(),
                scope,
                id,
                after,
            );
            route.deliver(scope.tenant_id(), deliveries.boxed(), guard);
            return Ok(futures_util::stream::empty().boxed());
        }
        let stream = events::task_events(
            domain.tasks.clone(),
            domain.events.clone(),
            scope,
            id,
            after,
        );
        Ok(stream
            .map(move |e| {
                let _held = &guard;
                TaskEvent::from(e)
            })
            .boxed())
    }

    /// The live events of every turn of one of the caller's conversations,
    /// turns started later included (each event names its `taskId`). Live
    /// only: to replay a turn, subscribe to its `taskEvents(after:)`.
    async fn conversation_events(
        &self,
        ctx: &Context<'_>,
        conversation_id: ID,
    ) -> async_graphql::Result<BoxStream<'static, TaskEvent>> {
        let principal = principal(ctx)?;
        let id = conversations::conversation_id(&conversation_id)?;
        let domain = domain(ctx);
        // Anyone else's conversation is NOT_FOUND, before anything streams.
        let conversation = domain.conversations.get(principal, id).await.gql()?;
        let guard = slot(ctx)?;
        let stream = brainstem_domain::conversations::conversation_events(
            domain.tasks.clone(),
            domain.events.clone(),
            conversation.scope,
            conversation.id,
        );
        Ok(stream
            .map(move |e| {
                let _held = &guard;
                TaskEvent::from(e)
            })
            .boxed())
    }

    /// The caller's tenant's tasks as they change (status changes and
    /// settled steps), for live lists and dashboards.
    async fn task_updates(
        &self,
        ctx: &Context<'_>,
        filter: Option<TaskUpdatesFilter>,
    ) -> async_graphql::Result<impl Stream<Item = Task> + use<>> {
        let principal = principal(ctx)?;
        let scope = principal.require_scope("tasks:read").gql()?;
        let domain = domain(ctx);
        let guard = slot(ctx)?;
        let statuses: Vec<brainstem_domain::tasks::TaskStatus> = filter
            .and_then(|f| f.statuses)
            .unwrap_or_default()
            .into_iter()
            .map(Into::into)
            .collect();
        let stream = events::task_updates(domain.tasks.clone(), domain.events.clone(), scope);
        Ok(stream.filter_map(move |task| {
            let _held = &guard;
            let keep = match task {
                Ok(t) if statuses.is_empty() || statuses.contains(&t.status) => Some(Task(t)),
                _ => None,
            };
            async move { keep }
        }))
    }

    /// A memory import job as it is now, then each time its progress
    /// changes, ending after it completes. Works wherever the job runs:
    /// a change made in this server process is sent at once, one made by
    /// another process when the job is next read (every 250 ms). Another
    /// tenant's job is `NOT_FOUND`, before anything streams.
    async fn memory_import_job(
        &self,
        ctx: &Context<'_>,
        id: ID,
    ) -> async_graphql::Result<BoxStream<'static, async_graphql::Result<MemoryImportJob>>> {
        let scope = require_scope(ctx, "memory:read")?;
        let id = import_job_id(&id)?;
        let jobs = domain(ctx).memory.watch_import_job(scope, id).await.gql()?;
        let guard = slot(ctx)?;
        Ok(jobs
            .map(move |job| {
                let _held = &guard;
                job.map(MemoryImportJob).gql()
            })
            .boxed())
    }
}
