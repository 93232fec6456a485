//! Reading a page of tasks with the relations its selection shows.
//!
//! A list whose whole selection is plain is answered in one pass
//! ([`super::plain_page`]): the tenant's list (`tasks`) read narrow, a
//! nested list from the loader. A nested list (a conversation's turns,
//! `Task.children`) is read with the same list of every parent resolved
//! beside it, one statement for all of them ([`group_page`]), and so are
//! its steps and events. Either, when not plain, looks ahead at what its
//! items select and reads it before they resolve, so each item finds its
//! rows in the operation's loader cache:
//!
//! - When the page, its steps and its event windows are all shown as
//!   summaries (no JSON column selected), the page and both relations are
//!   one statement (`Tasks::page_with_summaries`), fed to the loader.
//! - Otherwise the page is read, then each selected relation in one batch
//!   for the whole page (steps and events together when both are
//!   summaries, `Tasks::step_and_event_summaries`, for a top-level page;
//!   a nested page's go through the loader, one batch for all parents).
//! - Reviews, artifacts and parents are a batch each, either way.
//! - Nested pages (children; a conversation list's turns) are read for
//!   every item at once by the list ([`read_ahead_groups`]), and their own
//!   items' relations with them, one level after another.
//!
//! The loader batches by time as well, but a busy server may take longer
//! than the batch delay to resolve a whole page; reading ahead makes the
//! number of statements independent of the page's size and the server's
//! speed.

use std::sync::Arc;

use async_graphql::{Context, InputType, Lookahead, SelectionField};
use brainstem_domain::{
    Error, TaskId, TenantScope,
    page::PageRequest,
    tasks::{
        self, Detail, EventSpan, EventWindow, Fields, StepAndEventSummaries, TaskFilter, TaskGroup,
    },
};
use uuid::Uuid;

use super::{
    Task,
    plain_page::{self, TaskPage},
};
use crate::{
    error::ResultExt,
    schema::{
        context::domain,
        loaders::{
            BrainstemLoader, TaskArtifactsKey, TaskEventsKey, TaskGroupPageKey, TaskKey,
            TaskReviewsKey, TaskStepsKey, loader,
        },
        page::{ListOrder, connection, ordered_page_request},
    },
};

/// The page `request` asks for of a scope's tasks that pass `filter`,
/// with the relations the selection shows read ahead.
pub(crate) async fn task_page(
    ctx: &Context<'_>,
    scope: TenantScope,
    filter: TaskFilter,
    request: PageRequest,
) -> async_graphql::Result<TaskPage> {
    if let Some(plan) = plain_page::Operation::of(ctx).plan(&ctx.item.node) {
        return plain_page::answer(&domain(ctx).tasks, scope, filter, request, plan)
            .await
            .gql();
    }
    let node = ctx.look_ahead().field("edges").field("node");
    let shown = Shown::of(&node)?;
    let detail = page_detail(&ctx.look_ahead());
    let page = if detail == Detail::Summary && shown.all_summaries() {
        let spans: Vec<EventSpan> = shown.events.iter().map(|(span, _)| *span).collect();
        let (page, summaries) = domain(ctx)
            .tasks
            .page_with_summaries(
                scope,
                filter,
                request,
                &Fields::summaries(),
                shown.steps.is_some(),
                &spans,
            )
            .await
            .gql()?;
        let items: Vec<&tasks::Task> = page.items.iter().collect();
        feed(loader(ctx), &items, &shown, summaries).await;
        read_ahead(ctx, scope, &node, &items, None).await?;
        page
    } else {
        let page = domain(ctx)
            .tasks
            .list(scope, filter, request, detail)
            .await
            .gql()?;
        let items: Vec<&tasks::Task> = page.items.iter().collect();
        read_ahead(ctx, scope, &node, &items, Some((&shown, Beside::Nothing))).await?;
        page
    };
    Ok(TaskPage::General(connection(page, |t| t.id.uuid(), Task)))
}

/// The page `request` asks for of one parent's tasks (`group`: a
/// conversation's turns or a task's children), read through the loader
/// with the pages of the parents resolved beside it (one statement for a
/// whole list of parents), with the relations the selection shows read
/// ahead. The caller has checked that it may see `parent`.
pub(crate) async fn group_page(
    ctx: &Context<'_>,
    scope: TenantScope,
    group: TaskGroup,
    parent: Uuid,
    request: PageRequest,
) -> async_graphql::Result<TaskPage> {
    let plan = plain_page::Operation::of(ctx).plan(&ctx.item.node);
    let key = TaskGroupPageKey {
        scope,
        group,
        parent,
        request,
        detail: page_detail(&ctx.look_ahead()),
    };
    let page = loader(ctx)
        .load_one(key)
        .await?
        .ok_or_else(|| Error::internal(format!("no page of {group:?} read for {parent}")))
        .gql()?;
    if let Some(plan) = plan {
        return plain_page::answer_nested(loader(ctx), &page, plan).await;
    }
    let node = ctx.look_ahead().field("edges").field("node");
    let shown = Shown::of(&node)?;
    let items: Vec<&tasks::Task> = page.items.iter().collect();
    read_ahead(ctx, scope, &node, &items, Some((&shown, Beside::Siblings))).await?;
    let page = Arc::unwrap_or_clone(page);
    Ok(TaskPage::General(connection(page, |t| t.id.uuid(), Task)))
}

/// Read the nested pages of tasks (`group`: a conversation's turns, a
/// task's children) that the items of a list select (`node`, the items'
/// selection) for all the list's `parents` at once, and what those pages'
/// items select: one statement per distinct page request for the pages,
/// then one per relation for all their items, however the operation's
/// resolvers are scheduled. Each parent's [`group_page`] then finds its
/// rows in the loader's cache. A selection with invalid arguments is left
/// to the field, which reports them.
pub(crate) async fn read_ahead_groups(
    ctx: &Context<'_>,
    scope: TenantScope,
    group: TaskGroup,
    node: &Lookahead<'_>,
    parents: &[Uuid],
) -> async_graphql::Result<()> {
    if parents.is_empty() {
        return Ok(());
    }
    let name = match group {
        TaskGroup::Turns => "turns",
        TaskGroup::Children => "children",
    };
    for selection in node.field(name).selection_fields() {
        let Some(request) = request_of(&selection) else {
            continue;
        };
        let page = Lookahead::from(selection);
        let detail = page_detail(&page);
        let keys = parents.iter().map(|&parent| TaskGroupPageKey {
            scope,
            group,
            parent,
            request,
            detail,
        });
        let pages = loader(ctx).load_many(keys.collect::<Vec<_>>()).await?;
        let items: Vec<&tasks::Task> = pages.values().flat_map(|p| &p.items).collect();
        let node = page.field("edges").field("node");
        let shown = Shown::of(&node)?;
        let shown = Some((&shown, Beside::Nothing));
        read_ahead(ctx, scope, &node, &items, shown).await?;
    }
    Ok(())
}

/// The page a nested list's selection asks for, if its arguments are
/// valid (the same request its resolver makes of them).
fn request_of(field: &SelectionField<'_>) -> Option<PageRequest> {
    let args = field.arguments().ok()?;
    let arg = |name: &str| {
        args.iter()
            .find(|(n, _)| n.as_str() == name)
            .map(|(_, v)| v.clone())
            .filter(|v| *v != async_graphql::Value::Null)
    };
    let int = |name: &str| match arg(name) {
        None => Some(None),
        Some(async_graphql::Value::Number(n)) => n.as_i64()?.try_into().ok().map(Some),
        Some(_) => None,
    };
    let text = |name: &str| match arg(name) {
        None => Some(None),
        Some(async_graphql::Value::String(s)) => Some(Some(s)),
        Some(_) => None,
    };
    let order = match arg("orderBy") {
        None => None,
        Some(value) => Some(ListOrder::parse(Some(value)).ok()?),
    };
    ordered_page_request(
        int("first")?,
        text("after")?,
        int("last")?,
        text("before")?,
        order,
    )
    .ok()
}

/// The steps and event windows a page's items select.
struct Shown {
    /// How much of each step, if steps are selected.
    steps: Option<Detail>,
    /// Each selection of `events` (aliases may differ in arguments) with
    /// valid arguments (bad ones are reported by the field itself).
    events: Vec<(EventSpan, Detail)>,
}

impl Shown {
    fn of(node: &Lookahead<'_>) -> async_graphql::Result<Self> {
        let steps = node.field("steps");
        let steps = steps
            .exists()
            .then(|| step_detail(|f| steps.field(f).exists()));
        let mut events = Vec::new();
        for field in node.field("events").selection_fields() {
            if let Some(span) = span_of(&field)? {
                let detail = event_detail(|f| field.selection_set().any(|c| c.name() == f));
                events.push((span, detail));
            }
        }
        Ok(Self { steps, events })
    }

    /// Whether steps or events are shown, all of them as summaries.
    fn all_summaries(&self) -> bool {
        (self.steps.is_some() || !self.events.is_empty())
            && self.steps.is_none_or(|d| d == Detail::Summary)
            && self.events.iter().all(|(_, d)| *d == Detail::Summary)
    }
}

/// The span an `events` selection asks for, if its arguments are valid.
fn span_of(field: &SelectionField<'_>) -> async_graphql::Result<Option<EventSpan>> {
    let args = field.arguments()?;
    let int = |name: &str| {
        args.iter().find_map(|(n, v)| match v {
            async_graphql::Value::Number(x) if n.as_str() == name => x.as_i64(),
            _ => None,
        })
    };
    let first = int("first").map_or(Ok(100), i32::try_from);
    let last = int("last").map(i32::try_from).transpose();
    Ok(match (first, last) {
        (Ok(first), Ok(last)) => event_span(int("after"), first, last).ok(),
        _ => None,
    })
}

/// The events `Task.events(after, first, last)` reads.
pub(super) fn event_span(
    after: Option<i64>,
    first: i32,
    last: Option<i32>,
) -> Result<EventSpan, Error> {
    let after = after.unwrap_or(0);
    match last {
        Some(n) if (1..=1000).contains(&n) => Ok(EventSpan::Last { after, n: n as u64 }),
        Some(_) => Err(Error::validation("`last` must be between 1 and 1000")),
        None if (1..=1000).contains(&first) => Ok(EventSpan::First {
            after,
            n: first as u64,
        }),
        None => Err(Error::validation("`first` must be between 1 and 1000")),
    }
}

/// A page of tasks that shows none of a task's JSON (`payload`,
/// `frozenPlan`, `settledStepIds`, `state`, `usage`, `result`), under
/// `edges.node` or `nodes`, reads summaries.
pub(super) fn page_detail(look: &Lookahead<'_>) -> Detail {
    let shows = |f: &str| {
        look.field("edges").field("node").field(f).exists() || look.field("nodes").field(f).exists()
    };
    detail(
        [
            "payload",
            "frozenPlan",
            "settledStepIds",
            "state",
            "usage",
            "result",
        ]
        .into_iter()
        .any(shows),
    )
}

/// A selection of steps that shows none of their JSON needs only a
/// summary of each row; `shows(field)` says whether it names a field.
pub(super) fn step_detail(shows: impl Fn(&str) -> bool) -> Detail {
    detail(["args", "output", "usage"].into_iter().any(shows))
}

/// The same for events (`data`, `dataKeys`).
pub(super) fn event_detail(shows: impl Fn(&str) -> bool) -> Detail {
    detail(["data", "dataKeys"].into_iter().any(shows))
}

fn detail(full: bool) -> Detail {
    if full { Detail::Full } else { Detail::Summary }
}

/// Put the summaries of a page's steps and events (read with the page, or
/// after it) into the loader, under the keys the items' resolvers ask for.
async fn feed(
    loader: &BrainstemLoader,
    page: &[&tasks::Task],
    shown: &Shown,
    (mut steps, mut events): StepAndEventSummaries,
) {
    if shown.steps.is_some() {
        loader
            .feed_many(page.iter().map(|t| {
                let rows = steps.remove(&t.id).unwrap_or_default();
                let key = TaskStepsKey(t.scope(), t.id, Detail::Summary);
                (key, rows.into_iter().map(Arc::new).collect())
            }))
            .await;
    }
    let mut fed = Vec::new();
    for task in page {
        for (span, _) in &shown.events {
            let window = span.window(task);
            let rows = events.remove(&(task.id, window)).unwrap_or_default();
            let key = TaskEventsKey(task.scope(), task.id, window, Detail::Summary);
            fed.push((key, rows.into_iter().map(Arc::new).collect()));
        }
    }
    loader.feed_many(fed).await;
}

/// What a page is read beside: nothing (a top-level list, whose relations
/// may take a statement of their own), or its parent's siblings' pages (a
/// nested list, whose relations go through the loader so that one
/// statement serves every parent's page).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Beside {
    Nothing,
    Siblings,
}

/// Read the selected relations of every task of a page in batches: steps
/// and events too if `shown` (they were not read with the page), then
/// reviews, artifacts and parents.
async fn read_ahead(
    ctx: &Context<'_>,
    scope: TenantScope,
    node: &Lookahead<'_>,
    page: &[&tasks::Task],
    shown: Option<(&Shown, Beside)>,
) -> async_graphql::Result<()> {
    if page.is_empty() || !node.exists() {
        return Ok(());
    }
    let loader = loader(ctx);
    let steps_and_events = async {
        match shown {
            Some((shown, beside)) => steps_and_events(ctx, scope, page, shown, beside).await,
            None => Ok(()),
        }
    };
    let reviews = async {
        if node.field("reviews").exists() || node.field("pendingReview").exists() {
            loader
                .load_many(page.iter().map(|t| TaskReviewsKey(t.scope(), t.id)))
                .await?;
        }
        Ok(())
    };
    let artifacts = async {
        if node.field("artifacts").exists() {
            loader
                .load_many(page.iter().map(|t| TaskArtifactsKey(t.scope(), t.id)))
                .await?;
        }
        Ok(())
    };
    let children = async {
        let ids: Vec<Uuid> = page.iter().map(|t| t.id.uuid()).collect();
        // Boxed: nested lists recurse, and a resolver's future stays small.
        Box::pin(read_ahead_groups(
            ctx,
            scope,
            TaskGroup::Children,
            node,
            &ids,
        ))
        .await
    };
    let parents = async {
        if node.field("parent").exists() {
            loader
                .load_many(
                    page.iter()
                        .filter_map(|t| t.parent.map(|p| TaskKey(t.scope(), p))),
                )
                .await?;
        }
        Ok(())
    };
    futures_util::try_join!(steps_and_events, reviews, artifacts, children, parents)?;
    Ok(())
}

/// The steps and event windows `shown` of a page of `scope` read already:
/// in one statement when both are summaries and the page is read alone,
/// else one batch each.
async fn steps_and_events(
    ctx: &Context<'_>,
    scope: TenantScope,
    page: &[&tasks::Task],
    shown: &Shown,
    beside: Beside,
) -> async_graphql::Result<()> {
    let loader = loader(ctx);
    let step_keys: Vec<TaskStepsKey> = match shown.steps {
        Some(detail) => page
            .iter()
            .map(|t| TaskStepsKey(t.scope(), t.id, detail))
            .collect(),
        None => Vec::new(),
    };
    let event_keys: Vec<TaskEventsKey> = page
        .iter()
        .flat_map(|t| {
            shown
                .events
                .iter()
                .map(|(span, detail)| TaskEventsKey(t.scope(), t.id, span.window(t), *detail))
        })
        .collect();
    let together = shown.steps.is_some() && !shown.events.is_empty() && shown.all_summaries();
    if together && beside == Beside::Nothing {
        let tasks: Vec<TaskId> = step_keys.iter().map(|k| k.1).collect();
        let windows: Vec<(TaskId, EventWindow)> = event_keys.iter().map(|k| (k.1, k.2)).collect();
        let summaries = domain(ctx)
            .tasks
            .step_and_event_summaries(scope, &tasks, &windows)
            .await
            .gql()?;
        feed(loader, page, shown, summaries).await;
        return Ok(());
    }
    let steps = async {
        if !step_keys.is_empty() {
            loader.load_many(step_keys.iter().copied()).await?;
        }
        Ok::<_, async_graphql::Error>(())
    };
    let events = async {
        if !event_keys.is_empty() {
            loader.load_many(event_keys.iter().copied()).await?;
        }
        Ok(())
    };
    futures_util::try_join!(steps, events)?;
    Ok(())
}
