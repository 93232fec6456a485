//! Forking a task: a new task that starts where another stood before one
//! of its steps, with edits, and runs on from there; a rerun is the fork of
//! a finished task without edits.
//!
//! What a fork of task T before step S gets:
//! - T's frozen plan, less the steps that S or a later step injected (they
//!   are injected again if the run repeats them; `StepsInjected` events say
//!   which step injected what);
//! - the steps before S, settled, with their outputs, attempts (rows
//!   copied, keeping the idempotency keys they ran under), artifacts and
//!   checkpoints: nothing before S runs again, so no effect repeats;
//! - the state as the step before S left it (its checkpoint; `{}` when S
//!   is the first step), and T's input, each with its edits merged in
//!   ([`merge_patch`], RFC 7386: objects merge key by key at every depth, a
//!   `null` removes a key, any other value replaces);
//! - T's plan version, intent, channel, subject, priority and step cap; no
//!   conversation (a fork is not a turn) and a trace of its own.
//!
//! An agent loop forks at an iteration: that iteration's step is S, so the
//! model's earlier turns and tool calls (the previous iterations' outputs
//! and their call steps) are kept and the loop calls the model again from
//! there.
//!
//! Invariants:
//! - Every step before S has settled in T; a fork never copies a step that
//!   might still change.
//! - The fork, its copied rows, its link (`task_forks`), its first events
//!   and a `TaskForked` event on T are one transaction. T must be free of
//!   a worker then (a lease holder alone appends to a running task's log):
//!   a task in the middle of a run is `CONFLICT`, forkable once it pauses,
//!   waits or finishes.
//! - The caller needs `tasks:read` and `tasks:write`; another tenant's task
//!   is `NOT_FOUND`.

use brainstem_entity::{task_checkpoint, task_fork};

use super::*;
use crate::{catalogue::plans::Plan, kernel::db::BeginWrite};

/// What `forkTask` asks for.
#[derive(Clone, Debug, Default)]
pub struct ForkRequest {
    pub task: TaskId,
    /// The first step the fork runs (or an agent loop's first step, with
    /// `iteration`).
    pub from_step: String,
    pub iteration: Option<u32>,
    /// A merge patch of the state (an object, or `null` for none).
    pub state_edits: Value,
    /// A merge patch of `{"text": …, "payload": …}`.
    pub input_edits: Value,
    /// Run on this version of the task's plan instead of its frozen plan.
    pub plan_version: Option<i32>,
}

/// A task started as a fork of another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkLink {
    pub fork: TaskId,
    pub source: TaskId,
    pub from_step: String,
    pub rerun: bool,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
}

impl From<task_fork::Model> for ForkLink {
    fn from(m: task_fork::Model) -> Self {
        Self {
            fork: m.task_id.into(),
            source: m.source_task_id.into(),
            from_step: m.from_step_id,
            rerun: m.rerun,
            created_by: m.created_by,
            created_at: m.created_at,
        }
    }
}

/// Apply `patch` to `target` as a JSON merge patch (RFC 7386). The edits
/// of a fork are optional: give them only when present (a `null` patch
/// replaces the whole value with `null`).
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(fields) = target {
        for (key, value) in patch {
            if value.is_null() {
                fields.remove(key);
            } else {
                merge_patch(fields.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// An edit must be an object (a merge patch) or absent.
fn edits(name: &str, value: &Value) -> Result<()> {
    if value.is_null() || value.is_object() {
        Ok(())
    } else {
        Err(Error::validation(format!(
            "{name} must be a JSON object (a merge patch)"
        )))
    }
}

/// The fork's input: `{"text", "payload"}` with `patch` merged in.
fn edited_input(task: &Task, patch: &Value) -> Result<(String, Value)> {
    edits("inputEdits", patch)?;
    if let Some(key) = patch
        .as_object()
        .and_then(|m| m.keys().find(|k| *k != "text" && *k != "payload"))
    {
        return Err(Error::validation(format!(
            "inputEdits may change `text` and `payload`, not `{key}`"
        )));
    }
    let mut input = json!({"text": task.input, "payload": task.payload});
    if !patch.is_null() {
        merge_patch(&mut input, patch);
    }
    let text = input["text"]
        .as_str()
        .ok_or_else(|| Error::validation("inputEdits must leave `text` a string"))?
        .to_owned();
    let payload = match input["payload"].take() {
        Value::Null => json!({}),
        other => other,
    };
    Ok((text, payload))
}

/// The steps of `plan` a fork before step `index` keeps: all but those
/// injected by a step at or after it (`injected`: step → its injector).
fn kept_plan(plan: &[StepDef], index: usize, injected: &HashMap<String, String>) -> Vec<StepDef> {
    let before: Vec<&str> = plan[..index].iter().map(|s| s.id.as_str()).collect();
    plan.iter()
        .filter(|s| {
            injected
                .get(&s.id)
                .is_none_or(|by| before.contains(&by.as_str()))
        })
        .cloned()
        .collect()
}

/// The plan a fork before step `index` of `plan` runs on another version
/// `target` of it: the steps before the fork step as they ran (with the
/// steps they injected), then `target`'s steps from the fork step on.
/// Refused, saying why, when `target` is not compatible: it lacks the fork
/// step, its steps before it are not the plan's own (ids and tools, in
/// order), a step injected before the fork point had not run yet, or an
/// injected step's id is taken in `target`.
fn onto_version(
    plan: &[StepDef],
    index: usize,
    injected: &HashMap<String, String>,
    target: &Plan,
) -> Result<Vec<StepDef>> {
    let version = target.version;
    let from = &plan[index].id;
    if injected.contains_key(from) {
        return Err(Error::validation(format!(
            "step `{from}` was injected at run time: a fork onto plan version {version} starts at one of the plan's own steps"
        )));
    }
    let at = target
        .steps
        .iter()
        .position(|s| &s.id == from)
        .ok_or_else(|| Error::validation(format!("plan version {version} has no step `{from}`")))?;
    let shape = |steps: &[StepDef]| -> Vec<(String, String)> {
        steps
            .iter()
            .filter(|s| !injected.contains_key(&s.id))
            .map(|s| (s.id.clone(), s.tool.clone()))
            .collect()
    };
    let (ran, theirs) = (shape(&plan[..index]), shape(&target.steps[..at]));
    if ran != theirs {
        let show = |steps: &[(String, String)]| {
            steps
                .iter()
                .map(|(id, tool)| format!("{id} ({tool})"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(Error::validation(format!(
            "plan version {version} is not compatible: its steps before `{from}` are [{}], the task ran [{}]",
            show(&theirs),
            show(&ran)
        )));
    }
    if let Some(pending) = kept_plan(plan, index, injected)[index..]
        .iter()
        .find(|s| injected.contains_key(&s.id))
    {
        return Err(Error::validation(format!(
            "step `{}` was injected before `{from}` and has not run: it has no place in plan version {version}",
            pending.id
        )));
    }
    let mut steps = plan[..index].to_vec();
    for step in &target.steps[at..] {
        if steps.iter().any(|s| s.id == step.id) {
            return Err(Error::validation(format!(
                "plan version {version} has a step `{}`, an id the task gave an injected step",
                step.id
            )));
        }
        steps.push(step.clone());
    }
    Ok(steps)
}

impl Tasks {
    /// Start a fork of a task before one of its steps (see the module).
    pub async fn fork(&self, principal: &Principal, request: ForkRequest) -> Result<Task> {
        self.fork_as(principal, request, false).await
    }

    /// Run a finished task again from `from_step` (by default its failed
    /// step, or its first): a fork without edits. An unfinished task is
    /// `CONFLICT`.
    pub async fn rerun(
        &self,
        principal: &Principal,
        task: TaskId,
        from_step: Option<String>,
    ) -> Result<Task> {
        principal.require_scope("tasks:read")?;
        let scope = forbid_unless_writable(principal)?;
        let original = self.get(scope, task).await?;
        if !original.status.is_terminal() {
            return Err(Error::InvalidTransition(format!(
                "task is {}; only a finished task (COMPLETED, FAILED or CANCELLED) can be rerun",
                original.status
            )));
        }
        let from_step = match from_step {
            Some(step) => step,
            None => original
                .current_step_id
                .clone()
                .filter(|_| original.status == TaskStatus::Failed)
                .or_else(|| original.frozen_plan.first().map(|s| s.id.clone()))
                .ok_or_else(|| Error::validation("the task has no step to rerun"))?,
        };
        let request = ForkRequest {
            task,
            from_step,
            ..ForkRequest::default()
        };
        self.fork_as(principal, request, true).await
    }

    async fn fork_as(
        &self,
        principal: &Principal,
        request: ForkRequest,
        rerun: bool,
    ) -> Result<Task> {
        principal.require_scope("tasks:read")?;
        let scope = forbid_unless_writable(principal)?;
        let row = task::Entity::find_by_id_in(scope, request.task.uuid())
            .one(&self.db)
            .await?
            .ok_or_else(|| Error::not_found(format!("task {}", request.task)))?;
        let original = Task::try_from(row.clone())?;
        if original.mode == TaskMode::Answer {
            return Err(Error::validation(
                "a dry run (ANSWER) runs no step: there is nothing to fork",
            ));
        }
        if original.plan_key.is_none() || original.frozen_plan.is_empty() {
            return Err(Error::validation(format!(
                "task is {} and has no plan yet: there is nothing to fork",
                original.status
            )));
        }
        let plan = &original.frozen_plan;
        let from = checkpoints::resolve_step(plan, &request.from_step, request.iteration)?;
        let index = plan
            .iter()
            .position(|s| s.id == from)
            .ok_or_else(|| Error::internal("a resolved step is not in the plan"))?;
        let before: Vec<String> = plan[..index].iter().map(|s| s.id.clone()).collect();
        if let Some(open) = before
            .iter()
            .find(|s| !original.settled_step_ids.contains(s))
        {
            return Err(Error::validation(format!(
                "step `{open}` (before `{from}`) has not settled: a fork starts after settled steps only"
            )));
        }
        edits("stateEdits", &request.state_edits)?;
        let (text, payload) = edited_input(&original, &request.input_edits)?;
        let checkpoints: Vec<Checkpoint> = self
            .checkpoints(scope, original.id)
            .await?
            .into_iter()
            .filter(|c| before.contains(&c.step_id))
            .collect();
        let mut state = match before.last() {
            None => json!({}),
            Some(last) => checkpoints
                .iter()
                .rev()
                .find(|c| &c.step_id == last)
                .map(|c| c.state.clone())
                .ok_or_else(|| {
                    Error::validation(format!(
                        "step `{last}` has no checkpoint (it settled before checkpoints were kept): fork from an earlier step"
                    ))
                })?,
        };
        if !request.state_edits.is_null() {
            merge_patch(&mut state, &request.state_edits);
        }
        let injected = self.injected_steps(scope, original.id).await?;
        let now = Utc::now();
        let onto = match (request.plan_version, original.plan_key.as_deref()) {
            (Some(v), Some(key)) if Some(v) != original.plan_version => {
                Some(self.plans.version(scope, key, v, now).await?)
            }
            _ => None,
        };
        let frozen = match &onto {
            Some(target) => onto_version(plan, index, &injected, target)?,
            None => kept_plan(plan, index, &injected),
        };
        // A fork is a start of the plan: its capability must still be
        // subscribed, and its quota counts. (A plan the platform chose for
        // a task no plan handled has no stored version.)
        let stored = match (&onto, original.plan_id) {
            (Some(target), _) => Some(target.clone()),
            (None, Some(plan_id)) if original.plan_version.is_some_and(|v| v > 0) => Some(
                crate::catalogue::plans::Plans::for_task_in(&self.db, scope, plan_id, now).await?,
            ),
            _ => None,
        };
        if let Some(stored) = &stored {
            crate::catalogue::capabilities::check_quota(&self.db, scope, stored, now).await?;
        }
        let (plan_id, plan_version) = match &onto {
            Some(target) => (Some(target.id.uuid()), Some(target.version)),
            None => (row.plan_id, row.plan_version),
        };
        let pick = |m: &Map<String, Value>| -> Map<String, Value> {
            m.iter()
                .filter(|(k, _)| before.contains(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let by = principal.actor.to_string();
        let id = TaskId::new();
        let turn = original.conversation.is_some();
        let fork_row = task::Model {
            id: id.uuid(),
            parent_task_id: None,
            conversation_id: None,
            mode: TaskMode::Enqueue.as_str().to_owned(),
            status: TaskStatus::Pending.as_str().to_owned(),
            idempotency_key: None,
            input_text: text,
            payload,
            intent_reviewed: true,
            frozen_plan: log::json_of(&frozen)?,
            settled_step_ids: json!(before),
            reviewed_step_ids: json!(
                original
                    .reviewed_step_ids
                    .iter()
                    .filter(|s| before.contains(s))
                    .collect::<Vec<_>>()
            ),
            attempts: Value::Object(pick(&original.attempts)),
            current_step_id: None,
            state,
            step_outputs: Value::Object(pick(&original.step_outputs)),
            error_message: None,
            trace_id: origin::current().trace_id.unwrap_or_else(origin::new_id),
            lease_owner: None,
            lease_expires_at: None,
            run_after: now,
            cancel_requested: false,
            last_seq: 2,
            usage: Usage::default().to_json(),
            running_ms: 0,
            result: None,
            // A turn's key is its conversation's; a fork is not a turn.
            concurrency_key: if turn {
                None
            } else {
                row.concurrency_key.clone()
            },
            max_concurrent: if turn { None } else { row.max_concurrent },
            claimed_at: None,
            plan_id,
            plan_version,
            created_by: by.clone(),
            created_at: now,
            updated_at: now,
            started_at: Some(now),
            completed_at: None,
            ..row
        };
        let what = if rerun { "rerun" } else { "fork" };
        let link = json!({
            "task": original.id.to_string(),
            "fork": id.to_string(),
            "from_step": from,
            "rerun": rerun,
            "copied_steps": before,
            "plan_version": plan_version,
        });
        let mut forked_from = NewEvent::new(
            EventKind::ForkedFrom,
            format!("a {what} of task {} from step `{from}`", original.id),
        )
        .data(link.clone());
        forked_from.data_keys = request
            .state_edits
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        let txn = self.db.begin_write().await?;
        // The original's event first: it fails while a worker holds it.
        let (_, original_events) = mutate(
            &txn,
            self.announcing(),
            scope,
            original.id,
            &Guard::Unleased(TaskStatus::ALL.to_vec()),
            TaskChanges::default(),
            vec![
                NewEvent::new(
                    EventKind::TaskForked,
                    format!("{what} {id} starts from step `{from}`"),
                )
                .data(link.clone()),
            ],
        )
        .await?
        .ok_or_else(|| {
            Error::InvalidTransition(format!(
                "task {} is running a step now; fork it once it pauses, waits or finishes",
                original.id
            ))
        })?;
        let fork = Task::try_from(task::ActiveModel::from(fork_row).insert(&txn).await?)?;
        let fork_events = insert_events(
            &txn,
            self.announcing(),
            &fork,
            1,
            vec![
                NewEvent::status(TaskStatus::Pending, format!("task created ({what})")),
                forked_from,
            ],
            now,
            Vec::new(),
        )
        .await?;
        self.copy_settled(&txn, scope, &original, id, &before)
            .await?;
        task_fork::ActiveModel {
            id: Set(Uuid::now_v7()),
            tenant_id: Set(scope.tenant_id().uuid()),
            task_id: Set(id.uuid()),
            source_task_id: Set(original.id.uuid()),
            from_step_id: Set(from.clone()),
            rerun: Set(rerun),
            created_by: Set(by.clone()),
            created_at: Set(now),
        }
        .insert(&txn)
        .await?;
        audit::record(
            &txn,
            AuditEntry {
                tenant: Some(scope.tenant_id()),
                actor: by,
                action: format!("task.{what}"),
                target: id.to_string(),
                data: json!({
                    "task": original.id.to_string(),
                    "from_step": from,
                    "state_edits": request.state_edits.as_object().map(|m| m.keys().collect::<Vec<_>>()),
                    "input_edits": request.input_edits.as_object().map(|m| m.keys().collect::<Vec<_>>()),
                }),
            },
        )
        .await?;
        txn.commit().await?;
        self.sink.publish(&original_events);
        self.sink.publish(&fork_events);
        self.runnable();
        Ok(fork)
    }

    /// Copy the rows of `steps` (settled in `original`) to the fork `to`:
    /// their attempts, artifacts and checkpoints, in their order.
    async fn copy_settled(
        &self,
        txn: &DatabaseTransaction,
        scope: TenantScope,
        original: &Task,
        to: TaskId,
        steps: &[String],
    ) -> Result<()> {
        if steps.is_empty() {
            return Ok(());
        }
        let attempts = task_step::Entity::find_in(scope)
            .filter(task_step::Column::TaskId.eq(original.id.uuid()))
            .filter(task_step::Column::StepId.is_in(steps.iter().cloned()))
            .order_by_asc(task_step::Column::Id)
            .all(txn)
            .await?;
        if !attempts.is_empty() {
            task_step::Entity::insert_many(attempts.into_iter().map(|m| {
                task_step::ActiveModel::from(task_step::Model {
                    id: Uuid::now_v7(),
                    task_id: to.uuid(),
                    ..m
                })
            }))
            .exec_without_returning(txn)
            .await?;
        }
        let artifacts = artifact::Entity::find_in(scope)
            .filter(artifact::Column::TaskId.eq(original.id.uuid()))
            .filter(artifact::Column::StepId.is_in(steps.iter().cloned()))
            .order_by_asc(artifact::Column::Id)
            .all(txn)
            .await?;
        if !artifacts.is_empty() {
            artifact::Entity::insert_many(artifacts.into_iter().map(|m| {
                artifact::ActiveModel::from(artifact::Model {
                    id: Uuid::now_v7(),
                    task_id: to.uuid(),
                    ..m
                })
            }))
            .exec_without_returning(txn)
            .await?;
        }
        let checkpoints = task_checkpoint::Entity::find_in(scope)
            .filter(task_checkpoint::Column::TaskId.eq(original.id.uuid()))
            .filter(task_checkpoint::Column::StepId.is_in(steps.iter().cloned()))
            .order_by_asc(task_checkpoint::Column::Position)
            .all(txn)
            .await?;
        if !checkpoints.is_empty() {
            task_checkpoint::Entity::insert_many(checkpoints.into_iter().map(|m| {
                task_checkpoint::ActiveModel::from(task_checkpoint::Model {
                    id: Uuid::now_v7(),
                    task_id: to.uuid(),
                    ..m
                })
            }))
            .exec_without_returning(txn)
            .await?;
        }
        Ok(())
    }

    /// Which step injected each injected step of a task (from its
    /// `StepsInjected` events).
    async fn injected_steps(
        &self,
        scope: TenantScope,
        task: TaskId,
    ) -> Result<HashMap<String, String>> {
        let events = task_event::Entity::find_in(scope)
            .filter(task_event::Column::TaskId.eq(task.uuid()))
            .filter(task_event::Column::Kind.eq(EventKind::StepsInjected.as_str()))
            .all(&self.db)
            .await?;
        let mut by = HashMap::new();
        for event in events {
            let Some(injector) = event.step_id else {
                continue;
            };
            for step in strings(&event.data["injected_steps"]) {
                by.insert(step, injector.clone());
            }
        }
        Ok(by)
    }

    /// The link of each of `tasks` that is a fork to its original.
    pub async fn forked_from_many(
        &self,
        scope: TenantScope,
        tasks: &[TaskId],
    ) -> Result<HashMap<TaskId, ForkLink>> {
        Ok(task_fork::Entity::find_in(scope)
            .filter(task_fork::Column::TaskId.is_in(tasks.iter().map(|t| t.uuid())))
            .all(&self.db)
            .await?
            .into_iter()
            .map(|m| (TaskId::from(m.task_id), ForkLink::from(m)))
            .collect())
    }

    /// The forks of each of `tasks`, oldest first.
    pub async fn forks_of_many(
        &self,
        scope: TenantScope,
        tasks: &[TaskId],
    ) -> Result<HashMap<TaskId, Vec<ForkLink>>> {
        let rows = task_fork::Entity::find_in(scope)
            .filter(task_fork::Column::SourceTaskId.is_in(tasks.iter().map(|t| t.uuid())))
            .order_by_asc(task_fork::Column::Id)
            .all(&self.db)
            .await?;
        let mut by_task: HashMap<TaskId, Vec<ForkLink>> = HashMap::new();
        for row in rows {
            let link = ForkLink::from(row);
            by_task.entry(link.source).or_default().push(link);
        }
        Ok(by_task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merge_patch_merges_objects_deeply_and_null_removes() {
        let mut target = json!({"a": {"b": 1, "c": 2}, "d": [1, 2], "e": "x"});
        merge_patch(
            &mut target,
            &json!({"a": {"b": 10, "c": null, "n": {"m": 1}}, "d": [3], "e": null, "f": true}),
        );
        assert_eq!(
            target,
            json!({"a": {"b": 10, "n": {"m": 1}}, "d": [3], "f": true})
        );
        let mut scalar = json!(3);
        merge_patch(&mut scalar, &json!({"k": null, "v": 1}));
        assert_eq!(scalar, json!({"v": 1}), "an object patch makes an object");
    }

    fn step(id: &str) -> StepDef {
        serde_json::from_value(json!({"id": id, "tool": "set_state"})).unwrap()
    }

    #[test]
    fn a_fork_keeps_only_what_the_steps_before_it_injected() {
        let plan: Vec<StepDef> = ["a", "b", "c", "a1", "b1", "c1"].map(step).to_vec();
        let injected = HashMap::from([
            ("a1".to_owned(), "a".to_owned()),
            ("b1".to_owned(), "b".to_owned()),
            ("c1".to_owned(), "c".to_owned()),
        ]);
        let ids = |index| -> Vec<String> {
            kept_plan(&plan, index, &injected)
                .into_iter()
                .map(|s| s.id)
                .collect()
        };
        assert_eq!(ids(0), ["a", "b", "c"]);
        assert_eq!(ids(1), ["a", "b", "c", "a1"]);
        assert_eq!(ids(2), ["a", "b", "c", "a1", "b1"]);
        assert_eq!(ids(4), ["a", "b", "c", "a1", "b1", "c1"]);
    }

    fn version(steps: &[(&str, &str)]) -> Plan {
        Plan {
            id: uuid::Uuid::nil().into(),
            key: "p".into(),
            version: 2,
            intent: "i".into(),
            description: String::new(),
            priority: 0,
            patterns: Vec::new(),
            steps: steps
                .iter()
                .map(|(id, tool)| serde_json::from_value(json!({"id": id, "tool": tool})).unwrap())
                .collect(),
            created_by: "t".into(),
            created_at: Utc::now(),
            capability: None,
            archived_at: None,
        }
    }

    #[test]
    fn a_fork_onto_another_version_keeps_what_ran_and_takes_the_rest_from_it() {
        let plan: Vec<StepDef> = ["a", "a1", "b", "c"].map(step).to_vec();
        let injected = HashMap::from([("a1".to_owned(), "a".to_owned())]);
        let ids = |steps: Vec<StepDef>| steps.into_iter().map(|s| s.id).collect::<Vec<_>>();
        let newer = version(&[
            ("a", "set_state"),
            ("b", "set_state"),
            ("c2", "set_state"),
            ("c", "http_request"),
        ]);
        // From `b`: a and what it injected as they ran, then the version's.
        assert_eq!(
            ids(onto_version(&plan, 2, &injected, &newer).unwrap()),
            ["a", "a1", "b", "c2", "c"]
        );
        let refused = |plan: &[StepDef], index, target: &Plan| {
            onto_version(plan, index, &injected, target)
                .unwrap_err()
                .to_string()
        };
        // A version whose steps before the fork point differ: by id, by
        // tool, by order, or missing the fork step.
        for target in [
            version(&[("x", "set_state"), ("b", "set_state")]),
            version(&[("a", "http_request"), ("b", "set_state")]),
            version(&[("b", "set_state"), ("a", "set_state")]),
        ] {
            assert!(
                refused(&plan, 2, &target).contains("not compatible"),
                "{target:?}"
            );
        }
        assert!(refused(&plan, 2, &version(&[("a", "set_state")])).contains("has no step `b`"));
        // An injected step is no fork point onto another version, and its
        // id may not be taken there.
        assert!(refused(&plan, 1, &newer).contains("injected at run time"));
        let taken = version(&[("a", "set_state"), ("b", "set_state"), ("a1", "set_state")]);
        assert!(refused(&plan, 2, &taken).contains("`a1`"));
        // A step injected before the fork point that had not run yet.
        let late: Vec<StepDef> = ["a", "b", "a1"].map(step).to_vec();
        let two = version(&[("a", "set_state"), ("b", "set_state")]);
        assert!(refused(&late, 1, &two).contains("has not run"));
    }
}
