//! Reading tasks: one, a page, a subject's, and the relations a list fans
//! out to (events, steps, reviews, artifacts), batched by task.

use super::*;

impl Tasks {
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
    ) -> Result<Page<Task>> {
        let mut select = task::Entity::find_in(scope);
        if !filter.statuses.is_empty() {
            select = select.filter(
                task::Column::Status.is_in(
                    filter
                        .statuses
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>(),
                ),
            );
        }
        if let Some(intent) = filter.intent {
            select = select.filter(task::Column::Intent.eq(intent));
        }
        if let Some(channel) = filter.channel {
            select = select.filter(task::Column::Channel.eq(channel.as_str()));
        }
        if let Some(parent) = filter.parent {
            select = select.filter(task::Column::ParentTaskId.eq(parent.uuid()));
        }
        let page = page::fetch(&self.db, select, task::Column::Id, request).await?;
        let items = page
            .items
            .into_iter()
            .map(Task::try_from)
            .collect::<Result<Vec<_>>>()?;
        Ok(Page {
            items,
            has_next_page: page.has_next_page,
            has_previous_page: page.has_previous_page,
        })
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

    /// A subject's tasks for its dossier: the newest `limit` and how many
    /// are not finished (its pending work), leaving out `except` (the task
    /// asking).
    pub async fn of_subject(
        &self,
        scope: TenantScope,
        subject: Uuid,
        except: Option<TaskId>,
        limit: u64,
    ) -> Result<SubjectTasks> {
        Ok(SubjectTasks {
            recent: self
                .recent_of_subject(scope, subject, except, limit)
                .await?,
            open: self.open_of_subject(scope, subject, except).await?,
        })
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
    ) -> Result<HashMap<(TaskId, EventWindow), Vec<TaskEvent>>> {
        let mut out: HashMap<(TaskId, EventWindow), Vec<TaskEvent>> =
            windows.iter().map(|w| (*w, Vec::new())).collect();
        let windows: Vec<&(TaskId, EventWindow)> =
            windows.iter().filter(|(_, w)| w.until > w.after).collect();
        if windows.is_empty() {
            return Ok(out);
        }
        let mut any = Condition::any();
        for (task, window) in &windows {
            any = any.add(
                Condition::all()
                    .add(task_event::Column::TaskId.eq(task.uuid()))
                    .add(task_event::Column::Seq.gt(window.after))
                    .add(task_event::Column::Seq.lte(window.until)),
            );
        }
        let rows = task_event::Entity::find_in(scope)
            .filter(any)
            .order_by_asc(task_event::Column::TaskId)
            .order_by_asc(task_event::Column::Seq)
            .all(&self.db)
            .await?;
        for row in rows {
            let event = TaskEvent::try_from(row)?;
            // Windows of one task may overlap; an event goes to each (the
            // last one takes it, the others a copy).
            let mut targets: Vec<(TaskId, EventWindow)> = windows
                .iter()
                .filter(|(task, window)| {
                    *task == event.task_id && event.seq > window.after && event.seq <= window.until
                })
                .map(|w| **w)
                .collect();
            let Some(last) = targets.pop() else {
                continue;
            };
            for target in targets {
                if let Some(list) = out.get_mut(&target) {
                    list.push(event.clone());
                }
            }
            if let Some(list) = out.get_mut(&last) {
                list.push(event);
            }
        }
        Ok(out)
    }

    /// Every attempt of every step of several tasks at once, by task.
    pub async fn steps_of_many(
        &self,
        scope: TenantScope,
        ids: &[TaskId],
    ) -> Result<HashMap<TaskId, Vec<StepAttempt>>> {
        let rows = task_step::Entity::find_in(scope)
            .filter(task_step::Column::TaskId.is_in(ids.iter().map(|i| i.uuid())))
            .order_by_asc(task_step::Column::Id)
            .all(&self.db)
            .await?;
        Ok(group(ids, rows, |r| r.task_id.into(), StepAttempt::from))
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
