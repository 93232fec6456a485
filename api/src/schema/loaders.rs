//! DataLoader batching for every relation a list fans out to.
//!
//! One [`Loaders`] value implements [`Loader`] once per relation (async-graphql
//! keeps a batch per key type). Resolvers of a list's items ask for their
//! related rows by key; the loads that arrive together are answered by
//! one domain call, so listing N objects costs the same number of
//! statements as listing one.
//!
//! A list resolver that knows its page also *prefetches* (for tasks: see
//! `schema::tasks::listing`): it asks for the relations the operation
//! selects, for every item at once, so the batches are whole however long
//! resolving the page takes. Otherwise batching is by time: a batch is
//! queried `graphql_batch_delay_ms` after its first key.
//!
//! Each operation gets a loader of its own (see `schema::operation`)
//! whose cache lives as long as the operation, so batches never mix
//! operations and nothing is stale; keys of tenant data carry the caller's
//! [`TenantScope`], and every batch is read through that scope.

use std::{collections::HashMap, sync::Arc};

use async_graphql::dataloader::{DataLoader, HashMapCache, Loader};
use brainstem_domain::{
    CapabilityId, Domain, TaskId, TenantScope,
    capabilities::{Capability, PartnerToolDef},
    page::{Page, PageRequest},
    plans::Plan,
    tasks::{Artifact, Detail, EventWindow, Review, StepAttempt, Task, TaskEvent, TaskGroup},
};
use uuid::Uuid;

use crate::error::ResultExt;

/// The loader every resolver uses (see [`loader`]).
pub type BrainstemLoader = DataLoader<Loaders, HashMapCache>;

pub struct Loaders {
    pub(super) domain: Domain,
}

impl Loaders {
    /// A loader for one operation: a batch is queried `delay` after its
    /// first key arrives, and what it loaded is kept until the operation
    /// ends.
    pub fn new(domain: Domain, delay: std::time::Duration) -> BrainstemLoader {
        DataLoader::with_cache(
            Self { domain },
            brainstem_domain::row_security::spawn,
            HashMapCache::default(),
        )
        .delay(delay)
    }
}

/// The operation's loader.
pub fn loader<'a>(ctx: &'a async_graphql::Context<'_>) -> &'a BrainstemLoader {
    // Every operation gets one before it runs (see `schema::operation`).
    ctx.data_unchecked::<BrainstemLoader>()
}

/// A capability by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CapabilityKey(pub CapabilityId);

impl Loader<CapabilityKey> for Loaders {
    type Value = Capability;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[CapabilityKey],
    ) -> Result<HashMap<CapabilityKey, Capability>, Self::Error> {
        let ids: Vec<CapabilityId> = keys.iter().map(|k| k.0).collect();
        let found = self.domain.capabilities.get_many(&ids).await.gql()?;
        Ok(found
            .into_iter()
            .map(|c| (CapabilityKey(c.id), c))
            .collect())
    }
}

/// The plans of one capability version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CapabilityPlansKey(pub CapabilityId, pub i32);

impl Loader<CapabilityPlansKey> for Loaders {
    type Value = Vec<Plan>;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[CapabilityPlansKey],
    ) -> Result<HashMap<CapabilityPlansKey, Vec<Plan>>, Self::Error> {
        let versions: Vec<(CapabilityId, i32)> = keys.iter().map(|k| (k.0, k.1)).collect();
        let mut found = self
            .domain
            .capabilities
            .plans_of_many(&versions)
            .await
            .gql()?;
        Ok(keys
            .iter()
            .map(|k| (*k, found.remove(&(k.0, k.1)).unwrap_or_default()))
            .collect())
    }
}

/// The partner tools of one capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CapabilityToolsKey(pub CapabilityId);

impl Loader<CapabilityToolsKey> for Loaders {
    type Value = Vec<PartnerToolDef>;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[CapabilityToolsKey],
    ) -> Result<HashMap<CapabilityToolsKey, Vec<PartnerToolDef>>, Self::Error> {
        let ids: Vec<CapabilityId> = keys.iter().map(|k| k.0).collect();
        let mut found = self.domain.capabilities.tools_of_many(&ids).await.gql()?;
        Ok(keys
            .iter()
            .map(|k| (*k, found.remove(&k.0).unwrap_or_default()))
            .collect())
    }
}

/// Task ids grouped by the tenant they belong to, so each tenant's rows are
/// read through its own scope.
pub(super) fn by_scope(
    keys: impl Iterator<Item = (TenantScope, TaskId)>,
) -> HashMap<TenantScope, Vec<TaskId>> {
    let mut out: HashMap<TenantScope, Vec<TaskId>> = HashMap::new();
    for (scope, id) in keys {
        let ids = out.entry(scope).or_default();
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    out
}

/// A task by id (a child's parent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskKey(pub TenantScope, pub TaskId);

impl Loader<TaskKey> for Loaders {
    type Value = Task;
    type Error = async_graphql::Error;

    async fn load(&self, keys: &[TaskKey]) -> Result<HashMap<TaskKey, Task>, Self::Error> {
        let mut out = HashMap::new();
        for (scope, ids) in by_scope(keys.iter().map(|k| (k.0, k.1))) {
            for task in self.domain.tasks.get_many(scope, &ids).await.gql()? {
                out.insert(TaskKey(scope, task.id), task);
            }
        }
        Ok(out)
    }
}

/// One page of a parent's tasks (a conversation's turns, a task's
/// children), read to the [`Detail`] its selection shows: the parents a
/// list resolves together are read in one statement
/// (`Tasks::pages_by`), one per distinct request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskGroupPageKey {
    pub scope: TenantScope,
    pub group: TaskGroup,
    pub parent: Uuid,
    pub request: PageRequest,
    pub detail: Detail,
}

impl Loader<TaskGroupPageKey> for Loaders {
    /// Shared: a list of parents reads its pages ahead, then each
    /// parent's field takes its own from the cache.
    type Value = Arc<Page<Task>>;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[TaskGroupPageKey],
    ) -> Result<HashMap<TaskGroupPageKey, Arc<Page<Task>>>, Self::Error> {
        let mut batches: HashMap<_, Vec<Uuid>> = HashMap::new();
        for k in keys {
            batches
                .entry((k.scope, k.group, k.request, k.detail))
                .or_default()
                .push(k.parent);
        }
        let mut out = HashMap::new();
        for ((scope, group, request, detail), parents) in batches {
            let pages = self
                .domain
                .tasks
                .pages_by(scope, group, &parents, request, detail)
                .await
                .gql()?;
            out.extend(pages.into_iter().map(|(parent, page)| {
                let key = TaskGroupPageKey {
                    scope,
                    group,
                    parent,
                    request,
                    detail,
                };
                (key, Arc::new(page))
            }));
        }
        Ok(out)
    }
}

/// Every attempt of every step of a task, read to the [`Detail`] its
/// selection shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskStepsKey(pub TenantScope, pub TaskId, pub Detail);

impl Loader<TaskStepsKey> for Loaders {
    type Value = Vec<Arc<StepAttempt>>;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[TaskStepsKey],
    ) -> Result<HashMap<TaskStepsKey, Vec<Arc<StepAttempt>>>, Self::Error> {
        let mut out = HashMap::new();
        for detail in [Detail::Full, Detail::Summary] {
            let keys = keys.iter().filter(|k| k.2 == detail).map(|k| (k.0, k.1));
            for (scope, ids) in by_scope(keys) {
                for (id, steps) in self
                    .domain
                    .tasks
                    .steps_of_many(scope, &ids, detail)
                    .await
                    .gql()?
                {
                    out.insert(
                        TaskStepsKey(scope, id, detail),
                        steps.into_iter().map(Arc::new).collect(),
                    );
                }
            }
        }
        Ok(out)
    }
}

/// A window of a task's events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskEventsKey(pub TenantScope, pub TaskId, pub EventWindow, pub Detail);

impl Loader<TaskEventsKey> for Loaders {
    type Value = Vec<Arc<TaskEvent>>;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[TaskEventsKey],
    ) -> Result<HashMap<TaskEventsKey, Vec<Arc<TaskEvent>>>, Self::Error> {
        let mut by: HashMap<(TenantScope, Detail), Vec<(TaskId, EventWindow)>> = HashMap::new();
        for key in keys {
            by.entry((key.0, key.3)).or_default().push((key.1, key.2));
        }
        let mut out = HashMap::new();
        for ((scope, detail), windows) in by {
            for ((id, window), events) in self
                .domain
                .tasks
                .events_of_many(scope, &windows, detail)
                .await
                .gql()?
            {
                out.insert(
                    TaskEventsKey(scope, id, window, detail),
                    events.into_iter().map(Arc::new).collect(),
                );
            }
        }
        Ok(out)
    }
}

/// The reviews of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskReviewsKey(pub TenantScope, pub TaskId);

impl Loader<TaskReviewsKey> for Loaders {
    type Value = Vec<Review>;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[TaskReviewsKey],
    ) -> Result<HashMap<TaskReviewsKey, Vec<Review>>, Self::Error> {
        let mut out = HashMap::new();
        for (scope, ids) in by_scope(keys.iter().map(|k| (k.0, k.1))) {
            for (id, reviews) in self.domain.tasks.reviews_of_many(scope, &ids).await.gql()? {
                out.insert(TaskReviewsKey(scope, id), reviews);
            }
        }
        Ok(out)
    }
}

/// The artifacts of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskArtifactsKey(pub TenantScope, pub TaskId);

impl Loader<TaskArtifactsKey> for Loaders {
    type Value = Vec<Artifact>;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[TaskArtifactsKey],
    ) -> Result<HashMap<TaskArtifactsKey, Vec<Artifact>>, Self::Error> {
        let mut out = HashMap::new();
        for (scope, ids) in by_scope(keys.iter().map(|k| (k.0, k.1))) {
            for (id, artifacts) in self
                .domain
                .tasks
                .artifacts_of_many(scope, &ids)
                .await
                .gql()?
            {
                out.insert(TaskArtifactsKey(scope, id), artifacts);
            }
        }
        Ok(out)
    }
}
