//! Reading tasks: one, a page, a subject's, and the relations a list fans
//! out to (events, steps, reviews, artifacts), batched by task; and the
//! tenant's reviews as one list.

use super::fields::Summary;
use super::*;

/// How much of a task, step or event row a read decodes. `Summary` leaves
/// the JSON columns empty (a task's `payload`, `frozen_plan`, step ids,
/// `attempts`, `state`, `step_outputs`, `usage` and `result`; a step's `args`,
/// `output` and `usage`; an event's `data` and `data_keys`): for a reader
/// that shows none of them, such as a dashboard's page of tasks, which
/// would otherwise parse them for every row and throw them away. A summary
/// is for showing only; nothing that changes a task reads one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Detail {
    Full,
    Summary,
}

/// A nested list of tasks, read for many parents at once
/// ([`Tasks::pages_by`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskGroup {
    /// A conversation's turns.
    Turns,
    /// The tasks a task spawned.
    Children,
}

impl TaskGroup {
    /// The column naming a task's parent in this list.
    fn column(self) -> task::Column {
        match self {
            TaskGroup::Turns => task::Column::ConversationId,
            TaskGroup::Children => task::Column::ParentTaskId,
        }
    }
}

/// Pages of rows as pages of tasks.
fn tasks_of<M>(
    pages: HashMap<Uuid, Page<M>>,
    task: impl Fn(M) -> Result<Task> + Copy,
) -> Result<HashMap<Uuid, Page<Task>>> {
    pages
        .into_iter()
        .map(|(parent, page)| Ok((parent, page.try_map(task)?)))
        .collect()
}

impl Tasks {
    /// Runnable tasks of every tenant waiting for a worker at `now` (for
    /// the `queue_depth` metric).
    pub async fn queue_depth(&self, now: DateTime<Utc>) -> Result<u64> {
        use sea_orm::PaginatorTrait;
        crate::kernel::row_security::as_platform(
            crate::kernel::row_security::Bypass::Queue,
            // unscoped: the shared work queue, counted; no row is read.
            task::Entity::find()
                .filter(task::Column::Status.eq(TaskStatus::Pending.as_str()))
                .filter(task::Column::LeaseOwner.is_null())
                .filter(task::Column::RunAfter.lte(now))
                .count(&self.db),
        )
        .await
        .map_err(Error::from)
    }

    pub async fn get(&self, scope: TenantScope, id: TaskId) -> Result<Task> {
        get_task(&self.db, scope, id).await
    }

    /// Several tasks at once (for batch loading); missing ids are absent.
    pub async fn get_many(&self, scope: TenantScope, ids: &[TaskId]) -> Result<Vec<Task>> {
        task::Entity::find_in(scope)
            .filter(task::Column::Id.is_in(ids.iter().map(|i| i.uuid()).collect::<Vec<_>>()))
            .all(&self.db)
            .await?
            .into_iter()
            .map(Task::try_from)
            .collect()
    }

    pub async fn list(
        &self,
        scope: TenantScope,
        filter: TaskFilter,
        request: PageRequest,
        detail: Detail,
    ) -> Result<Page<Task>> {
        let select = super::filter::filtered(self.db.get_database_backend(), scope, filter)?;
        match detail {
            Detail::Full => {
                let page = page::fetch(&self.db, select, task::Column::Id, request).await?;
                page.try_map(Task::try_from)
            }
            Detail::Summary => {
                let select = select.select_only().columns(Summary::<Task>::columns());
                let page = page::fetch_as::<_, _, Summary<Task>>(
                    &self.db,
                    select,
                    task::Column::Id,
                    request,
                )
                .await?;
                page.try_map(|s| Ok(s.0))
            }
        }
    }

    /// One page of each parent's tasks in one statement: the turns of
    /// each of `parents` (conversations) or the children of each (tasks),
    /// every page as `request` asks; a parent without tasks gets an empty
    /// page. The caller has checked that it may see each parent.
    pub async fn pages_by(
        &self,
        scope: TenantScope,
        group: TaskGroup,
        parents: &[Uuid],
        request: PageRequest,
        detail: Detail,
    ) -> Result<HashMap<Uuid, Page<Task>>> {
        let select = task::Entity::find_in(scope);
        let (id, parent) = (task::Column::Id, group.column());
        match detail {
            Detail::Full => tasks_of(
                page::fetch_groups_as::<_, _, task::Model>(
                    &self.db, select, id, parent, parents, request,
                )
                .await?,
                Task::try_from,
            ),
            Detail::Summary => tasks_of(
                page::fetch_groups_as::<_, _, Summary<Task>>(
                    &self.db,
                    select.select_only().columns(Summary::<Task>::columns()),
                    id,
                    parent,
                    parents,
                    request,
                )
                .await?,
                |s| Ok(s.0),
            ),
        }
    }

    /// Stored events with `seq > after`, oldest first, at most `limit`.
    pub async fn events(
        &self,
        scope: TenantScope,
        task_id: TaskId,
        after: i64,
        limit: u64,
    ) -> Result<Vec<TaskEvent>> {
        events_after(&self.db, scope, task_id, after, limit).await
    }

    /// [`Tasks::events`], known to reach at least `through` (an event
    /// this process has seen committed): read from the primary when a
    /// replica has not replayed it yet.
    pub async fn events_through(
        &self,
        scope: TenantScope,
        task_id: TaskId,
        after: i64,
        limit: u64,
        through: i64,
    ) -> Result<Vec<TaskEvent>> {
        let events = self.events(scope, task_id, after, limit).await?;
        let reached = events.last().map_or(after, |e| e.seq);
        match &self.primary {
            Some(primary) if reached < through && (events.len() as u64) < limit => {
                events_after(primary, scope, task_id, after, limit).await
            }
            _ => Ok(events),
        }
    }

    /// Up to `limit` of a subject's tasks (not `except`), newest first.
    pub async fn recent_of_subject(
        &self,
        scope: TenantScope,
        subject: Uuid,
        except: Option<TaskId>,
        limit: u64,
    ) -> Result<Vec<Task>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        task::Entity::find_in(scope)
            .filter(about_subject(subject, except))
            .order_by_desc(task::Column::Id)
            .limit(limit)
            .all(&self.db)
            .await?
            .into_iter()
            .map(Task::try_from)
            .collect()
    }

    /// How many of a subject's tasks (not `except`) are unfinished.
    pub async fn open_of_subject(
        &self,
        scope: TenantScope,
        subject: Uuid,
        except: Option<TaskId>,
    ) -> Result<u64> {
        let open: Vec<&str> = TaskStatus::ALL
            .iter()
            .filter(|s| !s.is_terminal())
            .map(|s| s.as_str())
            .collect();
        Ok(task::Entity::find_in(scope)
            .filter(about_subject(subject, except))
            .filter(task::Column::Status.is_in(open))
            .count(&self.db)
            .await?)
    }

    /// The turns of `conversation` before the task `before`, oldest first,
    /// at most `limit` (the latest ones). A turn a newer turn rolled back
    /// is not part of the history (see `turns`).
    pub async fn earlier_turns(
        &self,
        scope: TenantScope,
        conversation: ConversationId,
        before: TaskId,
        limit: u64,
    ) -> Result<Vec<Task>> {
        use brainstem_entity::turn_interruption as ti;
        let rolled_back = sea_orm::sea_query::Query::select()
            .column(ti::Column::TaskId)
            .from(ti::Entity)
            .and_where(ti::Column::TenantId.eq(scope.tenant_id().uuid()))
            .and_where(ti::Column::ConversationId.eq(conversation.uuid()))
            .and_where(ti::Column::Strategy.eq(Multitask::Rollback.as_str()))
            .to_owned();
        let mut turns = task::Entity::find_in(scope)
            .filter(task::Column::ConversationId.eq(conversation.uuid()))
            .filter(task::Column::Id.lt(before.uuid()))
            .filter(task::Column::Id.not_in_subquery(rolled_back))
            .order_by_desc(task::Column::Id)
            .limit(limit)
            .all(&self.db)
            .await?
            .into_iter()
            .map(Task::try_from)
            .collect::<Result<Vec<_>>>()?;
        turns.reverse();
        Ok(turns)
    }

    /// Every attempt of every step, in the order they ran.
    pub async fn steps(&self, scope: TenantScope, task_id: TaskId) -> Result<Vec<StepAttempt>> {
        Ok(task_step::Entity::find_in(scope)
            .filter(task_step::Column::TaskId.eq(task_id.uuid()))
            .order_by_asc(task_step::Column::Id)
            .all(&self.db)
            .await?
            .into_iter()
            .map(StepAttempt::from)
            .collect())
    }

    pub async fn reviews(&self, scope: TenantScope, task_id: TaskId) -> Result<Vec<Review>> {
        review::Entity::find_in(scope)
            .filter(review::Column::TaskId.eq(task_id.uuid()))
            .order_by_asc(review::Column::Id)
            .all(&self.db)
            .await?
            .into_iter()
            .map(Review::try_from)
            .collect()
    }

    /// A page of the scope's reviews in any of `statuses` (all when
    /// empty), of every task: a dashboard's queue of decisions.
    pub async fn review_page(
        &self,
        scope: TenantScope,
        statuses: &[ReviewStatus],
        request: PageRequest,
    ) -> Result<Page<Review>> {
        let mut select = review::Entity::find_in(scope);
        if !statuses.is_empty() {
            let statuses: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
            select = select.filter(review::Column::Status.is_in(statuses));
        }
        page::fetch(&self.db, select, review::Column::Id, request)
            .await?
            .try_map(Review::try_from)
    }

    pub async fn artifacts(&self, scope: TenantScope, task_id: TaskId) -> Result<Vec<Artifact>> {
        Ok(artifact::Entity::find_in(scope)
            .filter(artifact::Column::TaskId.eq(task_id.uuid()))
            .order_by_asc(artifact::Column::Id)
            .all(&self.db)
            .await?
            .into_iter()
            .map(Artifact::from)
            .collect())
    }

    /// The events of several tasks at once, each window oldest first: one
    /// statement for any number of tasks (for batch loading).
    pub async fn events_of_many(
        &self,
        scope: TenantScope,
        windows: &[(TaskId, EventWindow)],
        detail: Detail,
    ) -> Result<HashMap<(TaskId, EventWindow), Vec<TaskEvent>>> {
        let mut out: HashMap<(TaskId, EventWindow), Vec<TaskEvent>> =
            windows.iter().map(|w| (*w, Vec::new())).collect();
        let windows: Vec<&(TaskId, EventWindow)> =
            windows.iter().filter(|(_, w)| w.until > w.after).collect();
        if windows.is_empty() {
            return Ok(out);
        }
        let select = task_event::Entity::find_in(scope)
            .filter(in_windows(&windows))
            .order_by_asc(task_event::Column::TaskId)
            .order_by_asc(task_event::Column::Seq);
        let events: Vec<TaskEvent> = match detail {
            Detail::Full => select
                .all(&self.db)
                .await?
                .into_iter()
                .map(TaskEvent::try_from)
                .collect::<Result<_>>()?,
            Detail::Summary => select
                .select_only()
                .columns(Summary::<TaskEvent>::columns())
                .into_model::<Summary<TaskEvent>>()
                .all(&self.db)
                .await?
                .into_iter()
                .map(|s| s.0)
                .collect(),
        };
        spread(&windows, events, &mut out);
        Ok(out)
    }

    /// Every attempt of every step of several tasks at once, by task.
    pub async fn steps_of_many(
        &self,
        scope: TenantScope,
        ids: &[TaskId],
        detail: Detail,
    ) -> Result<HashMap<TaskId, Vec<StepAttempt>>> {
        let select = task_step::Entity::find_in(scope)
            .filter(task_step::Column::TaskId.is_in(ids.iter().map(|i| i.uuid())))
            .order_by_asc(task_step::Column::Id);
        Ok(match detail {
            Detail::Full => {
                let rows = select.all(&self.db).await?;
                group(ids, rows, |r| r.task_id.into(), StepAttempt::from)
            }
            Detail::Summary => {
                let rows = select
                    .select_only()
                    .columns(Summary::<(TaskId, StepAttempt)>::columns())
                    .into_model::<Summary<(TaskId, StepAttempt)>>()
                    .all(&self.db)
                    .await?;
                group(ids, rows, |r| r.0.0, |r| r.0.1)
            }
        })
    }

    /// The reviews of several tasks at once, by task.
    pub async fn reviews_of_many(
        &self,
        scope: TenantScope,
        ids: &[TaskId],
    ) -> Result<HashMap<TaskId, Vec<Review>>> {
        let rows = review::Entity::find_in(scope)
            .filter(review::Column::TaskId.is_in(ids.iter().map(|i| i.uuid())))
            .order_by_asc(review::Column::Id)
            .all(&self.db)
            .await?
            .into_iter()
            .map(Review::try_from)
            .collect::<Result<Vec<_>>>()?;
        Ok(group(ids, rows, |r| r.task_id, |r| r))
    }

    /// The artifacts of several tasks at once, by task.
    pub async fn artifacts_of_many(
        &self,
        scope: TenantScope,
        ids: &[TaskId],
    ) -> Result<HashMap<TaskId, Vec<Artifact>>> {
        let rows = artifact::Entity::find_in(scope)
            .filter(artifact::Column::TaskId.is_in(ids.iter().map(|i| i.uuid())))
            .order_by_asc(artifact::Column::Id)
            .all(&self.db)
            .await?;
        Ok(group(ids, rows, |r| r.task_id.into(), Artifact::from))
    }
}

/// Stored events of a task with `seq > after`, oldest first.
pub async fn events_after<C: ConnectionTrait>(
    db: &C,
    scope: TenantScope,
    task_id: TaskId,
    after: i64,
    limit: u64,
) -> Result<Vec<TaskEvent>> {
    task_event::Entity::find_in(scope)
        .filter(task_event::Column::TaskId.eq(task_id.uuid()))
        .filter(task_event::Column::Seq.gt(after))
        .order_by_asc(task_event::Column::Seq)
        .limit(limit)
        .all(db)
        .await?
        .into_iter()
        .map(TaskEvent::try_from)
        .collect()
}

/// Events in any of `windows` (each a task's sequence range).
pub(super) fn in_windows(windows: &[&(TaskId, EventWindow)]) -> Condition {
    let mut any = Condition::any();
    for (task, window) in windows {
        any = any.add(
            Condition::all()
                .add(task_event::Column::TaskId.eq(task.uuid()))
                .add(task_event::Column::Seq.gt(window.after))
                .add(task_event::Column::Seq.lte(window.until)),
        );
    }
    any
}

/// Hand each of `events` to the windows holding it in `out`. Windows of
/// one task may overlap; an event goes to each (the last one takes it, the
/// others a copy).
pub(super) fn spread(
    windows: &[&(TaskId, EventWindow)],
    events: Vec<TaskEvent>,
    out: &mut HashMap<(TaskId, EventWindow), Vec<TaskEvent>>,
) {
    for event in events {
        let holds = |(task, window): &(TaskId, EventWindow)| {
            *task == event.task_id && event.seq > window.after && event.seq <= window.until
        };
        let Some(last) = windows.iter().rposition(|w| holds(w)) else {
            continue;
        };
        for target in windows[..last].iter().filter(|w| holds(w)) {
            if let Some(list) = out.get_mut(target) {
                list.push(event.clone());
            }
        }
        if let Some(list) = out.get_mut(windows[last]) {
            list.push(event);
        }
    }
}

/// Rows grouped by task, every id present (with an empty list if need be),
/// each group in the rows' order.
pub(super) fn group<R, T>(
    ids: &[TaskId],
    rows: Vec<R>,
    task_of: impl Fn(&R) -> TaskId,
    convert: impl Fn(R) -> T,
) -> HashMap<TaskId, Vec<T>> {
    let mut out: HashMap<TaskId, Vec<T>> = ids.iter().map(|id| (*id, Vec::new())).collect();
    for row in rows {
        let task = task_of(&row);
        out.entry(task).or_default().push(convert(row));
    }
    out
}

pub async fn get_task<C: ConnectionTrait>(db: &C, scope: TenantScope, id: TaskId) -> Result<Task> {
    task::Entity::find_by_id_in(scope, id.uuid())
        .one(db)
        .await?
        .ok_or_else(|| Error::not_found("task"))
        .and_then(Task::try_from)
}

/// A subject's tasks, but not `except`.
pub(super) fn about_subject(subject: Uuid, except: Option<TaskId>) -> Condition {
    let mut about = Condition::all().add(task::Column::SubjectId.eq(subject));
    if let Some(except) = except {
        about = about.add(task::Column::Id.ne(except.uuid()));
    }
    about
}
