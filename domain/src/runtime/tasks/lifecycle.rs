//! What a client may do to a running task: cancel, retry, resume or reject
//! a review, complete a delegation. Each writes the change and its events in
//! one transaction, and only while no worker holds the task's lease (a
//! cancel sets a flag the worker honours).

use super::*;
use crate::kernel::db::BeginWrite;
use crate::kernel::row_security::{self, Bypass, as_platform};

impl Tasks {
    /// Cancel a task. An idle task (pending, in review, delegated) is
    /// cancelled at once; a running one before its next step.
    pub async fn cancel(&self, principal: &Principal, id: TaskId) -> Result<Task> {
        let scope = forbid_unless_writable(principal)?;
        let task = self.get(scope, id).await?;
        if task.status.is_terminal() {
            return Err(Error::InvalidTransition(format!(
                "task is already {}; only unfinished tasks can be cancelled",
                task.status
            )));
        }
        let idle = vec![
            TaskStatus::Pending,
            TaskStatus::NeedsReview,
            TaskStatus::AwaitingApproval,
            TaskStatus::Delegated,
        ];
        let txn = self.db.begin_write().await?;
        let done = mutate(
            &txn,
            self.announcing(),
            scope,
            id,
            &Guard::Unleased(idle),
            TaskChanges {
                status: Some(TaskStatus::Cancelled),
                completed_at: Some(Utc::now()),
                error: Some(Some(format!("cancelled by {}", principal.actor))),
                ..TaskChanges::default()
            },
            vec![
                NewEvent::status(TaskStatus::Cancelled, "cancelled")
                    .data(json!({"by": principal.actor.to_string()})),
            ],
        )
        .await?;
        if let Some((task, events)) = done {
            txn.commit().await?;
            self.sink.publish(&events);
            return Ok(task);
        }
        drop(txn);
        // Running: ask the worker to stop before its next step.
        task::Entity::update_many_in(scope)
            .col_expr(task::Column::CancelRequested, Expr::value(true))
            .filter(task::Column::Id.eq(id.uuid()))
            .exec(&self.db)
            .await?;
        self.get(scope, id).await
    }

    /// Run a failed task again from the step that failed; settled steps are
    /// not run again.
    pub async fn retry(&self, principal: &Principal, id: TaskId) -> Result<Task> {
        let scope = forbid_unless_writable(principal)?;
        let task = self.get(scope, id).await?;
        if task.status != TaskStatus::Failed {
            return Err(Error::InvalidTransition(format!(
                "task is {}; only FAILED tasks can be retried",
                task.status
            )));
        }
        // The failed step gets a fresh retry budget.
        let changes = super::bulk_retry::retry_changes(&task, false, None);
        let txn = self.db.begin_write().await?;
        let (task, events) = mutate(
            &txn,
            self.announcing(),
            scope,
            id,
            &Guard::Unleased(vec![TaskStatus::Failed]),
            changes,
            vec![
                NewEvent::status(TaskStatus::Pending, "retry requested")
                    .data(json!({"by": principal.actor.to_string()})),
            ],
        )
        .await?
        .ok_or_else(|| Error::Conflict("the task changed meanwhile; try again".into()))?;
        txn.commit().await?;
        self.sink.publish(&events);
        self.runnable();
        Ok(task)
    }

    /// Claim a pending review atomically: exactly one caller wins.
    pub(super) async fn claim_review(
        txn: &DatabaseTransaction,
        scope: TenantScope,
        task: TaskId,
        review_id: Uuid,
        decision: ReviewStatus,
        corrections: &Value,
        by: &str,
    ) -> Result<Review> {
        let claimed = review::Entity::update_many_in(scope)
            .col_expr(review::Column::Status, Expr::value(decision.as_str()))
            .col_expr(
                review::Column::Corrections,
                Expr::value(redact(corrections)),
            )
            .col_expr(review::Column::ResolvedBy, Expr::value(by))
            .col_expr(review::Column::ResolvedAt, Expr::value(Utc::now()))
            .filter(review::Column::Id.eq(review_id))
            .filter(review::Column::TaskId.eq(task.uuid()))
            .filter(review::Column::Status.eq(ReviewStatus::Pending.as_str()))
            .exec_with_returning(txn)
            .await?;
        match claimed.into_iter().next() {
            Some(r) => {
                let review = Review::try_from(r)?;
                metrics()
                    .review_wait
                    .observe(seconds_between(review.created_at, Utc::now()));
                Ok(review)
            }
            None => {
                let exists = review::Entity::find_by_id_in(scope, review_id)
                    .filter(review::Column::TaskId.eq(task.uuid()))
                    .one(txn)
                    .await?;
                Err(match exists {
                    None => Error::not_found("review"),
                    Some(_) => Error::Conflict("this review has already been resolved".into()),
                })
            }
        }
    }

    /// Approve the named pending review; `corrections` are merged into the
    /// task's state (a correction named `intent` also sets the intent).
    pub async fn resume(
        &self,
        principal: &Principal,
        id: TaskId,
        review_id: Uuid,
        corrections: Value,
    ) -> Result<Task> {
        self.resume_with_plan(principal, id, review_id, corrections, None)
            .await
    }

    /// Approve the named pending review, as [`Tasks::resume`]; a plan
    /// waiting for approval may be replaced by `plan`, checked like a
    /// published plan (its tools, their arguments, the tenant's
    /// subscriptions).
    pub async fn resume_with_plan(
        &self,
        principal: &Principal,
        id: TaskId,
        review_id: Uuid,
        corrections: Value,
        plan: Option<Vec<StepDef>>,
    ) -> Result<Task> {
        let scope = principal.require_reviewer()?;
        let corrections_map = match &corrections {
            Value::Null => Map::new(),
            Value::Object(m) => m.clone(),
            _ => return Err(Error::validation("corrections must be a JSON object")),
        };
        // Check existence first so another tenant's task is NOT_FOUND.
        let current = self.get(scope, id).await?;
        if !matches!(
            current.status,
            TaskStatus::NeedsReview | TaskStatus::AwaitingApproval
        ) {
            return Err(Error::Conflict(format!(
                "task is {}, not NEEDS_REVIEW or AWAITING_APPROVAL; there is nothing to resume",
                current.status
            )));
        }
        let edited = match plan {
            Some(_) if current.status != TaskStatus::AwaitingApproval => {
                return Err(Error::validation(
                    "a plan can be edited only when approving a plan (a task in AWAITING_APPROVAL)",
                ));
            }
            Some(steps) => {
                let registry = self
                    .plans
                    .tools_for(Some(scope), &steps, Utc::now())
                    .await?;
                let key = current.plan_key.clone().unwrap_or_default();
                crate::catalogue::plans::check_steps(&key, &steps, &registry, &Default::default())
                    .map_err(|errors| {
                        Error::Validation(format!(
                            "the edited plan failed its check with {} error(s): {}",
                            errors.len(),
                            errors.join("; ")
                        ))
                    })?;
                Some(steps)
            }
            None => None,
        };
        let by = principal.actor.to_string();
        let txn = self.db.begin_write().await?;
        let review = Self::claim_review(
            &txn,
            scope,
            id,
            review_id,
            ReviewStatus::Approved,
            &corrections,
            &by,
        )
        .await?;
        let task = get_task(&txn, scope, id).await?;
        let mut state = task.state.as_object().cloned().unwrap_or_default();
        for (k, v) in &corrections_map {
            state.insert(k.clone(), v.clone());
        }
        let mut changes = TaskChanges {
            status: Some(TaskStatus::Pending),
            state: Some(Value::Object(state)),
            run_after: Some(Utc::now()),
            ..TaskChanges::default()
        };
        if review.step_id == PLAN_REVIEW_STEP {
            if let Some(steps) = &edited {
                changes.frozen_plan = Some(steps.clone());
            }
        } else if review.step_id == INTENT_REVIEW_STEP {
            changes.intent_reviewed = Some(true);
            if let Some(intent) = corrections_map.get("intent").and_then(Value::as_str) {
                changes.intent = Some(Some(intent.to_owned()));
                changes.confidence = Some(1.0);
            }
        } else {
            let mut reviewed = task.reviewed_step_ids.clone();
            reviewed.push(review.step_id.clone());
            changes.reviewed_step_ids = Some(reviewed);
        }
        let keys: Vec<String> = corrections_map.keys().cloned().collect();
        let mut event = NewEvent::status(TaskStatus::Pending, "review approved").data(json!({
            "review_id": review_id.to_string(),
            "decision": "APPROVED",
            "by": by,
            "corrections_applied": keys,
            "plan_edited": edited.is_some(),
        }));
        event.data_keys = keys;
        let (task, events) = mutate(
            &txn,
            self.announcing(),
            scope,
            id,
            &Guard::Unleased(vec![TaskStatus::NeedsReview, TaskStatus::AwaitingApproval]),
            changes,
            vec![event],
        )
        .await?
        .ok_or_else(|| Error::Conflict("the task is no longer awaiting review".into()))?;
        audit::record(
            &txn,
            AuditEntry {
                tenant: Some(scope.tenant_id()),
                actor: by.clone(),
                action: "review.approve".into(),
                target: review_id.to_string(),
                data: json!({
                    "task": id.to_string(),
                    "step": review.step_id,
                    "corrections": corrections_map.keys().collect::<Vec<_>>(),
                    "plan_edited": edited.is_some(),
                }),
            },
        )
        .await?;
        txn.commit().await?;
        self.sink.publish(&events);
        self.runnable();
        Ok(task)
    }

    /// Reject the named pending review: the task is cancelled with the reason.
    pub async fn reject(
        &self,
        principal: &Principal,
        id: TaskId,
        review_id: Uuid,
        reason: &str,
    ) -> Result<Task> {
        let scope = principal.require_reviewer()?;
        let current = self.get(scope, id).await?;
        if !matches!(
            current.status,
            TaskStatus::NeedsReview | TaskStatus::AwaitingApproval
        ) {
            return Err(Error::Conflict(format!(
                "task is {}, not NEEDS_REVIEW or AWAITING_APPROVAL; there is nothing to reject",
                current.status
            )));
        }
        let by = principal.actor.to_string();
        let txn = self.db.begin_write().await?;
        let review = Self::claim_review(
            &txn,
            scope,
            id,
            review_id,
            ReviewStatus::Rejected,
            &json!({"reason": reason}),
            &by,
        )
        .await?;
        audit::record(
            &txn,
            AuditEntry {
                tenant: Some(scope.tenant_id()),
                actor: by.clone(),
                action: "review.reject".into(),
                target: review_id.to_string(),
                data: json!({"task": id.to_string(), "step": review.step_id, "reason": reason}),
            },
        )
        .await?;
        let message = format!("rejected in review: {reason}");
        let (task, events) = mutate(
            &txn,
            self.announcing(),
            scope,
            id,
            &Guard::Unleased(vec![TaskStatus::NeedsReview, TaskStatus::AwaitingApproval]),
            TaskChanges {
                status: Some(TaskStatus::Cancelled),
                error: Some(Some(message.clone())),
                completed_at: Some(Utc::now()),
                ..TaskChanges::default()
            },
            vec![
                NewEvent::status(TaskStatus::Cancelled, message).data(json!({
                    "review_id": review_id.to_string(),
                    "decision": "REJECTED",
                    "by": by,
                })),
            ],
        )
        .await?
        .ok_or_else(|| Error::Conflict("the task is no longer awaiting review".into()))?;
        txn.commit().await?;
        self.sink.publish(&events);
        Ok(task)
    }

    /// The callback of a delegated step, authenticated by the task's
    /// single-use token alone. A wrong, reused or foreign token is refused
    /// the same way as an unknown task (`NOT_FOUND`), so it reveals nothing.
    pub async fn complete_delegation(
        &self,
        task_id: TaskId,
        token: &str,
        outcome: DelegationOutcome,
    ) -> Result<Task> {
        let refused = || Error::not_found("delegated task or token");
        let hash = sha256_hex(token.as_bytes());
        // The token authenticates the callback: its delegation row is found
        // across tenants, then the transaction sees only that row's tenant.
        let txn = as_platform(Bypass::Authentication, self.db.begin_write()).await?;
        // unscoped: the token names its tenant; the task id must match it.
        let claimed = delegation::Entity::update_many()
            .col_expr(
                delegation::Column::Status,
                Expr::value(if outcome.success {
                    "COMPLETED"
                } else {
                    "FAILED"
                }),
            )
            .col_expr(
                delegation::Column::Result,
                Expr::value(redact(&outcome.data)),
            )
            .col_expr(
                delegation::Column::Error,
                Expr::value(outcome.error.clone()),
            )
            .col_expr(delegation::Column::ResolvedAt, Expr::value(Utc::now()))
            .filter(delegation::Column::TokenHash.eq(hash))
            .filter(delegation::Column::TaskId.eq(task_id.uuid()))
            .filter(delegation::Column::Status.eq("PENDING"))
            .exec_with_returning(&txn)
            .await?;
        let Some(delegation) = claimed.into_iter().next() else {
            return Err(refused());
        };
        let scope = TenantScope::new(delegation.tenant_id.into());
        row_security::narrow(&txn, scope.tenant_id()).await?;
        let task = get_task(&txn, scope, task_id).await?;
        let step = task
            .frozen_plan
            .iter()
            .find(|s| s.id == delegation.step_id)
            .cloned()
            .ok_or_else(|| Error::internal("delegated step is not in the plan"))?;
        let mut state = task.state.as_object().cloned().unwrap_or_default();
        let mut outputs = task.step_outputs.clone();
        let mut settled = task.settled_step_ids.clone();
        let mut events = vec![NewEvent::default()];
        let (status, error, completed_at);
        if outcome.success {
            if let Value::Object(data) = &outcome.data {
                for (k, v) in data {
                    state.insert(k.clone(), v.clone());
                }
            }
            outputs.insert(step.id.clone(), outcome.data.clone());
            settled.push(step.id.clone());
            let mut e = NewEvent::new(EventKind::StepCompleted, "the delegated work completed")
                .step(&step.id, &step.tool)
                .data(json!({"external_ref": delegation.external_ref}));
            e.status = Some("COMPLETED".into());
            e.data_keys = outcome
                .data
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            events[0] = e;
            (status, error, completed_at) = (TaskStatus::Pending, None, None);
            events.push(NewEvent::status(
                TaskStatus::Pending,
                "delegation completed; continuing",
            ));
        } else {
            let message = outcome
                .error
                .clone()
                .unwrap_or_else(|| "the delegated work failed".to_owned());
            let mut e = NewEvent::new(EventKind::StepFailed, "the delegated work failed")
                .step(&step.id, &step.tool)
                .error(message.clone())
                .data(json!({"external_ref": delegation.external_ref}));
            e.status = Some("FAILED".into());
            events[0] = e;
            if step.stop_on_failure {
                (status, error, completed_at) =
                    (TaskStatus::Failed, Some(message.clone()), Some(Utc::now()));
                events.push(NewEvent::status(TaskStatus::Failed, message));
            } else {
                settled.push(step.id.clone());
                (status, error, completed_at) = (TaskStatus::Pending, None, None);
                events.push(NewEvent::status(
                    TaskStatus::Pending,
                    "delegation failed; continuing",
                ));
            }
        }
        let (task, events) = mutate(
            &txn,
            self.announcing(),
            scope,
            task_id,
            &Guard::Unleased(vec![TaskStatus::Delegated]),
            TaskChanges {
                status: Some(status),
                state: Some(Value::Object(state)),
                step_outputs: Some(outputs),
                settled_step_ids: Some(settled),
                error: Some(error),
                completed_at,
                current_step_id: Some(if status == TaskStatus::Failed {
                    Some(step.id.clone())
                } else {
                    None
                }),
                run_after: Some(Utc::now()),
                ..TaskChanges::default()
            },
            events,
        )
        .await?
        .ok_or_else(refused)?;
        txn.commit().await?;
        self.sink.publish(&events);
        self.runnable();
        Ok(task)
    }
}
