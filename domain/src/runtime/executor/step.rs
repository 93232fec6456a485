//! Running one step: start it, call its tool with no transaction open, and
//! commit its outcome (success, retry, failure, review, delegation, new
//! steps) with its events, folding in the start of the next step.

use super::*;

impl Executor {
    pub(super) async fn run_step(&self, task: Task, step: StepDef, slug: &str) -> Result<Next> {
        // The previous commit may already have started this step.
        let prestarted = task.status == TaskStatus::Executing
            && task.current_step_id.as_deref() == Some(step.id.as_str())
            && task.attempts_of(&step.id) > 0;
        let attempt = task.attempts_of(&step.id) + u32::from(!prestarted);
        let context = task.template_context(slug);
        if step.requires_review && !task.reviewed_step_ids.contains(&step.id) {
            let proposed =
                template::render(&step.args, &context).unwrap_or_else(|_| step.args.clone());
            return self
                .pause_for_review(
                    &task,
                    &step.id,
                    Some(&step.tool),
                    format!("step `{}` requires review before it runs", step.id),
                    None,
                    proposed,
                    TaskChanges::default(),
                )
                .await;
        }
        if let Some(condition) = &step.condition {
            match template::render(&Value::String(condition.clone()), &context) {
                Ok(v) if !template::is_truthy(&v) => return self.skip(task, &step).await,
                Ok(_) => {}
                Err(e) => {
                    return self
                        .step_failed(
                            task,
                            &step,
                            attempt,
                            ToolError::fatal(format!("condition: {e}")),
                            None,
                        )
                        .await;
                }
            }
        }
        // Registered tools, or partner tools of subscribed capabilities.
        let tool = match self
            .domain
            .plans
            .tool(task.scope(), &step.tool, Utc::now())
            .await
        {
            Ok(tool) => tool,
            Err(Error::NotFound(_)) => {
                return self
                    .fail(
                        &task,
                        format!("Tool '{}' not registered (step `{}`)", step.tool, step.id),
                        Some(&step),
                    )
                    .await;
            }
            Err(Error::Forbidden(message)) => {
                return self
                    .fail(&task, format!("step `{}`: {message}", step.id), Some(&step))
                    .await;
            }
            Err(other) => return Err(other),
        };
        // A step without a retry policy of its own takes its tool's.
        let step = if step.retry.is_none() {
            StepDef {
                retry: tool.retry(),
                ..step
            }
        } else {
            step
        };
        let args = match template::render(&step.args, &context) {
            Ok(Value::Object(map)) => Value::Object(
                map.into_iter()
                    .filter(|(k, _)| !k.starts_with('_'))
                    .collect(),
            ),
            Ok(_) => Value::Object(Map::new()),
            Err(e) => {
                return self
                    .step_failed(task, &step, attempt, ToolError::fatal(e), None)
                    .await;
            }
        };
        if let Err(e) = json_schema::validate(&tool.input_schema(), &args, Mode::Runtime) {
            return self
                .step_failed(
                    task,
                    &step,
                    attempt,
                    ToolError::fatal(format!("{e} (tool `{}`)", step.tool)),
                    Some(&args),
                )
                .await;
        }
        // The tenant's guardrails, last before the call: a BLOCK stops the
        // step, a WARN is recorded with its start.
        let facts = StepFacts {
            tool: &step.tool,
            step: &step.id,
            plan: task.plan_key.as_deref(),
            intent: task.intent.as_deref(),
            confidence: task.confidence,
            channel: task.channel.as_str(),
            mode: task.mode.as_str(),
            attempt,
            args: &args,
            payload: &task.payload,
            state: &task.state,
        };
        let matched = self.domain.guardrails.check(task.scope(), &facts).await?;
        if let Some(block) = matched.iter().find(|m| m.severity == Severity::Block) {
            let message = format!(
                "{}: guardrail `{}` blocks step `{}` (tool `{}`)",
                guardrails::BLOCKED,
                block.name,
                step.id,
                step.tool
            );
            return self
                .step_failed(task, &step, attempt, ToolError::fatal(message), Some(&args))
                .await;
        }
        let warnings: Vec<NewEvent> = matched
            .iter()
            .map(|m| {
                NewEvent::new(
                    EventKind::GuardrailMatched,
                    format!("guardrail `{}` matched step `{}`", m.name, step.id),
                )
                .step(&step.id, &step.tool)
                .data(json!({"guardrail": m.name, "severity": m.severity.as_str()}))
            })
            .collect();
        // Listening before the start commits: an interrupt sent meanwhile
        // is seen by the start (the cancel flag) or by the listener.
        let listening = self.listen(&task);
        // Commit the start: the step is now current.
        let mut attempts = task.attempts.clone();
        attempts.insert(step.id.clone(), json!(attempt));
        let started = if prestarted && warnings.is_empty() {
            Some(task)
        } else if prestarted {
            self.commit(&task, TaskChanges::default(), warnings, Extra::default())
                .await?
        } else {
            self.commit(
                &task,
                TaskChanges {
                    status: Some(TaskStatus::Executing),
                    current_step_id: Some(Some(step.id.clone())),
                    attempts: Some(attempts),
                    ..TaskChanges::default()
                },
                std::iter::once(started_event(&step, attempt))
                    .chain(warnings)
                    .collect(),
                Extra::default(),
            )
            .await?
        };
        let Some(task) = started else {
            return Ok(Next::Stop);
        };
        if task.cancel_requested {
            return self.cancel(&task).await.map(|_| Next::Stop);
        }
        // Execute, with no transaction open.
        let mut token_bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut token_bytes);
        let token = format!("bdt_{}", hex::encode(token_bytes));
        let ctx = ToolContext {
            tenant: task.tenant,
            tenant_slug: slug.to_owned(),
            task_id: task.id,
            step_id: step.id.clone(),
            attempt,
            idempotency_key: format!("{}:{}", task.id, step.id),
            trace_id: task.trace_id.clone(),
            subject_id: task.subject_id,
            input: context["input"].clone(),
            state: task.state.clone(),
            steps: context["steps"].clone(),
            delegation_token: token.clone(),
            callback_path: format!("/callbacks/tasks/{}", task.id),
            ports: self.ports.clone(),
            settings: self.settings.clone(),
            interrupt: listening
                .as_ref()
                .map(|l| Interrupt::new(l.requested.clone()))
                .unwrap_or_default(),
        };
        // The task's running time left bounds the step's own timeout.
        let left = self
            .config
            .task_timeout
            .saturating_sub(Duration::from_millis(task.running_ms.max(0) as u64));
        if left.is_zero() {
            let message = format!(
                "TIMEOUT: the task's steps ran for more than {} s",
                self.config.task_timeout.as_secs()
            );
            return self.fail(&task, message, Some(&step)).await;
        }
        let limit = step
            .timeout_secs
            .map(Duration::from_secs)
            .unwrap_or_else(|| tool.timeout())
            .min(left);
        let started = Utc::now();
        let span = tracing::info_span!("step", trace_id = %task.trace_id, task = %task.id, step = %step.id, tool = %step.tool, attempt);
        origin::adopt(&span, &task.trace_id, None);
        // The span (with the task's trace id) covers the tool call, so the
        // tool's own logs carry it.
        // Time the tool waits for admission (a local model's queue, a
        // model budget) extends its timeout and is not running time.
        let call = async {
            tracing::debug!(attempt, "step started");
            waiting::timeout(limit, tool.call(ctx, args.clone())).await
        };
        let (result, waited) = tracing::Instrument::instrument(call, span).await;
        let result = result.unwrap_or_else(|| {
            Err(ToolError::retryable(format!(
                "timed out after {}s",
                limit.as_secs()
            )))
        });
        let started = started + chrono::Duration::from_std(waited).unwrap_or_default();
        let finished = Utc::now().max(started);
        // The step's token deltas leave before its result is committed.
        self.domain.tasks.sink().flush().await;
        match result {
            Ok(out) => {
                self.step_succeeded(task, &step, attempt, args, out, token, started, finished)
                    .await
            }
            Err(e) => {
                let record = step_row(
                    &task,
                    &step,
                    attempt,
                    &args,
                    e.output.as_ref().unwrap_or(&Value::Null),
                    "",
                    Some(&e.message),
                    started,
                    finished,
                    Default::default(),
                );
                if listening.is_some_and(|l| *l.requested.borrow()) {
                    return self.interrupted(task, &step, attempt, &e, record).await;
                }
                self.step_failed_with_row(task, &step, attempt, e, record)
                    .await
            }
        }
    }

    pub(super) async fn skip(&self, task: Task, step: &StepDef) -> Result<Next> {
        let mut settled = task.settled_step_ids.clone();
        settled.push(step.id.clone());
        let mut outputs = task.step_outputs.clone();
        outputs.insert(step.id.clone(), Value::Null);
        let mut event =
            NewEvent::new(EventKind::StepSkipped, "condition not met").step(&step.id, &step.tool);
        event.status = Some("SKIPPED".into());
        let mut changes = TaskChanges {
            settled_step_ids: Some(settled),
            step_outputs: Some(outputs),
            current_step_id: Some(None),
            ..TaskChanges::default()
        };
        let mut events = vec![event];
        let done = fold_next(&task, &mut changes, &mut events);
        let updated = self
            .commit(&task, changes, events, Extra::default())
            .await?;
        Ok(next_after(done, updated))
    }

    /// A failure before the tool ran (bad template, bad args): recorded as
    /// an attempt of the step.
    pub(super) async fn step_failed(
        &self,
        task: Task,
        step: &StepDef,
        attempt: u32,
        error: ToolError,
        args: Option<&Value>,
    ) -> Result<Next> {
        let now = Utc::now();
        let record = step_row(
            &task,
            step,
            attempt,
            args.unwrap_or(&Value::Null),
            &Value::Null,
            "",
            Some(&error.message),
            now,
            now,
            Default::default(),
        );
        self.step_failed_with_row(task, step, attempt, error, record)
            .await
    }

    pub(super) async fn step_failed_with_row(
        &self,
        task: Task,
        step: &StepDef,
        attempt: u32,
        error: ToolError,
        record: task_step::ActiveModel,
    ) -> Result<Next> {
        let policy = step.retry.unwrap_or_default();
        let mut event = NewEvent::new(EventKind::StepFailed, format!("`{}` failed", step.tool))
            .step(&step.id, &step.tool)
            .error(error.message.clone());
        event.status = Some("FAILED".into());
        let mut attempts = task.attempts.clone();
        attempts.insert(step.id.clone(), json!(attempt));
        let extra = Extra {
            step: Some(record),
            ..Extra::default()
        };
        if error.retryable && attempt < policy.max_attempts {
            metrics()
                .step_retries
                .get_or_create(&ToolLabels {
                    tool: step.tool.clone(),
                })
                .inc();
            let delay = policy.backoff_ms(attempt + 1, rand::rng().random::<f64>());
            event =
                event.data(json!({"attempt": attempt, "will_retry": true, "retry_in_ms": delay}));
            self.commit(
                &task,
                TaskChanges {
                    status: Some(TaskStatus::Pending),
                    lease: Some(None),
                    attempts: Some(attempts),
                    run_after: Some(Utc::now() + chrono::Duration::milliseconds(delay as i64)),
                    ..TaskChanges::default()
                },
                vec![
                    event,
                    NewEvent::status(
                        TaskStatus::Pending,
                        format!("retrying `{}` in {delay} ms", step.id),
                    ),
                ],
                extra,
            )
            .await?;
            return Ok(Next::Stop);
        }
        if step.stop_on_failure {
            let message = if attempt > 1 {
                format!("{} (after {attempt} attempts)", error.message)
            } else {
                error.message.clone()
            };
            event = event.data(json!({"attempt": attempt, "will_retry": false}));
            self.commit(
                &task,
                TaskChanges {
                    status: Some(TaskStatus::Failed),
                    lease: Some(None),
                    attempts: Some(attempts),
                    error: Some(Some(message.clone())),
                    completed_at: Some(Utc::now()),
                    current_step_id: Some(Some(step.id.clone())),
                    ..TaskChanges::default()
                },
                vec![
                    event,
                    NewEvent::status(
                        TaskStatus::Failed,
                        format!("step `{}` failed: {message}", step.id),
                    )
                    .error(message),
                ],
                extra,
            )
            .await?;
            return Ok(Next::Stop);
        }
        // A failure that does not stop the task: settle the step and go on.
        let mut settled = task.settled_step_ids.clone();
        settled.push(step.id.clone());
        let mut outputs = task.step_outputs.clone();
        outputs.insert(step.id.clone(), Value::Null);
        event = event.data(json!({"attempt": attempt, "will_retry": false, "continued": true}));
        let mut changes = TaskChanges {
            attempts: Some(attempts),
            settled_step_ids: Some(settled),
            step_outputs: Some(outputs),
            current_step_id: Some(None),
            ..TaskChanges::default()
        };
        let mut events = vec![event];
        let done = fold_next(&task, &mut changes, &mut events);
        let updated = self.commit(&task, changes, events, extra).await?;
        Ok(next_after(done, updated))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn step_succeeded(
        &self,
        task: Task,
        step: &StepDef,
        attempt: u32,
        args: Value,
        out: ToolOutput,
        token: String,
        started: DateTime<Utc>,
        finished: DateTime<Utc>,
    ) -> Result<Next> {
        // Injected steps are checked like a published plan.
        if !out.new_steps.is_empty() {
            let existing: HashSet<String> = task.frozen_plan.iter().map(|s| s.id.clone()).collect();
            let plan_key = task.plan_key.clone().unwrap_or_default();
            let registry = match self
                .domain
                .plans
                .tools_for(Some(task.scope()), &out.new_steps, Utc::now())
                .await
            {
                Ok(registry) => registry,
                Err(Error::Forbidden(_)) => self.registry.clone(),
                Err(other) => return Err(other),
            };
            if let Err(errors) = plans::check_steps(&plan_key, &out.new_steps, &registry, &existing)
            {
                let error = ToolError::fatal(format!(
                    "the tool injected invalid steps: {}",
                    errors.join("; ")
                ));
                let record = step_row(
                    &task,
                    step,
                    attempt,
                    &args,
                    &out.output,
                    &out.summary,
                    Some(&error.message),
                    started,
                    finished,
                    out.usage,
                );
                return self
                    .step_failed_with_row(task, step, attempt, error, record)
                    .await;
            }
        }
        let usage = task.usage.plus(out.usage);
        let status_of_row = match out.control {
            Control::Delegate { .. } => "DELEGATED",
            _ => "COMPLETED",
        };
        let mut record = step_row(
            &task,
            step,
            attempt,
            &args,
            &out.output,
            &out.summary,
            None,
            started,
            finished,
            out.usage,
        );
        record.status = Set(status_of_row.to_owned());
        let duration_ms = (finished - started).num_milliseconds();

        if let Control::Delegate { external_ref } = &out.control {
            let mut event = NewEvent::new(EventKind::Delegated, out.summary.clone())
                .step(&step.id, &step.tool)
                .data(json!({"external_ref": external_ref, "attempt": attempt}));
            event.status = Some("DELEGATED".into());
            let delegation = delegation::ActiveModel {
                id: Set(Uuid::now_v7()),
                tenant_id: Set(task.tenant.uuid()),
                task_id: Set(task.id.uuid()),
                step_id: Set(step.id.clone()),
                token_hash: Set(sha256_hex(token.as_bytes())),
                external_ref: Set(external_ref.clone()),
                status: Set("PENDING".into()),
                result: Set(json!({})),
                error: Set(None),
                created_at: Set(Utc::now()),
                resolved_at: Set(None),
            };
            self.commit(
                &task,
                TaskChanges {
                    status: Some(TaskStatus::Delegated),
                    lease: Some(None),
                    usage: Some(usage),
                    ..TaskChanges::default()
                },
                vec![
                    event,
                    NewEvent::status(TaskStatus::Delegated, format!("waiting for {external_ref}")),
                ],
                Extra {
                    step: Some(record),
                    delegation: Some(delegation),
                    artifacts: out.artifacts,
                    artifact_step: Some((step.id.clone(), step.tool.clone())),
                    ..Extra::default()
                },
            )
            .await?;
            return Ok(Next::Stop);
        }

        let mut state = task.state.as_object().cloned().unwrap_or_default();
        for (k, v) in &out.state {
            state.insert(k.clone(), v.clone());
        }
        let mut outputs = task.step_outputs.clone();
        outputs.insert(step.id.clone(), out.output.clone());
        let mut settled = task.settled_step_ids.clone();
        settled.push(step.id.clone());
        let mut frozen = task.frozen_plan.clone();
        let injected: Vec<String> = out.new_steps.iter().map(|s| s.id.clone()).collect();
        frozen.extend(out.new_steps.iter().cloned());

        let mut data_keys: Vec<String> = out.state.keys().cloned().collect();
        if let Some(m) = out.output.as_object() {
            data_keys.extend(m.keys().filter(|k| !out.state.contains_key(*k)).cloned());
        }
        let mut completed = NewEvent::new(EventKind::StepCompleted, out.summary.clone())
            .step(&step.id, &step.tool)
            .data(json!({"attempt": attempt, "duration_ms": duration_ms, "usage": out.usage.to_json()}));
        completed.status = Some("COMPLETED".into());
        completed.data_keys = data_keys;
        let mut events = vec![completed];
        if !injected.is_empty() {
            events.push(
                NewEvent::new(
                    EventKind::StepsInjected,
                    format!("{} step(s) added: {}", injected.len(), out.summary),
                )
                .step(&step.id, &step.tool)
                .data(json!({"injected_steps": injected, "reasoning": out.summary})),
            );
        }
        if !out.recalled.is_empty() {
            let ids: Vec<String> = out.recalled.iter().map(|m| m.to_string()).collect();
            events.push(
                NewEvent::new(
                    EventKind::MemoryRecalled,
                    format!("{} memory(ies) used", ids.len()),
                )
                .step(&step.id, &step.tool)
                .data(json!({"memory_ids": ids})),
            );
        }
        let mut changes = TaskChanges {
            state: Some(Value::Object(state)),
            step_outputs: Some(outputs),
            settled_step_ids: Some(settled),
            frozen_plan: (!injected.is_empty()).then_some(frozen),
            usage: Some(usage),
            current_step_id: Some(None),
            result: out.result,
            ..TaskChanges::default()
        };
        let extra = Extra {
            step: Some(record),
            artifacts: out.artifacts,
            artifact_step: Some((step.id.clone(), step.tool.clone())),
            ..Extra::default()
        };
        if let Control::Review { reason, proposed } = out.control {
            // The step is done; the task waits for a human before the next.
            let review_id = Uuid::now_v7();
            changes.status = Some(TaskStatus::NeedsReview);
            changes.lease = Some(None);
            changes.current_step_id = Some(Some(step.id.clone()));
            let mut requested = NewEvent::new(EventKind::ReviewRequested, reason.clone())
                .step(&step.id, &step.tool)
                .data(json!({"review_id": review_id.to_string()}));
            requested.status = Some("PENDING".into());
            events.push(requested);
            events.push(NewEvent::status(TaskStatus::NeedsReview, reason.clone()));
            let review = review::ActiveModel {
                id: Set(review_id),
                tenant_id: Set(task.tenant.uuid()),
                task_id: Set(task.id.uuid()),
                // Approving it must not re-run this step's gate: use a
                // distinct id for the review of a tool's request.
                step_id: Set(format!("{}#review", step.id)),
                reason: Set(reason),
                confidence: Set(None),
                proposed: Set(redact(&proposed)),
                status: Set("PENDING".into()),
                corrections: Set(json!({})),
                resolved_by: Set(None),
                resolved_at: Set(None),
                created_at: Set(Utc::now()),
            };
            self.commit(
                &task,
                changes,
                events,
                Extra {
                    review: Some(review),
                    ..extra
                },
            )
            .await?;
            return Ok(Next::Stop);
        }
        let done = fold_next(&task, &mut changes, &mut events);
        let updated = self.commit(&task, changes, events, extra).await?;
        Ok(next_after(done, updated))
    }
}

pub(super) fn started_event(step: &StepDef, attempt: u32) -> NewEvent {
    NewEvent::new(EventKind::StepStarted, format!("running `{}`", step.tool))
        .step(&step.id, &step.tool)
        .data(json!({"attempt": attempt}))
}

/// Fold what comes next into a commit that settles a step: start the next
/// step, or complete the task, in the same transaction, so a plain step
/// costs one commit. Steps with a condition or an unreviewed gate are left
/// to the next pass. Returns whether the task is now complete.
pub(super) fn fold_next(
    task: &Task,
    changes: &mut TaskChanges,
    events: &mut Vec<NewEvent>,
) -> bool {
    let frozen = changes.frozen_plan.as_ref().unwrap_or(&task.frozen_plan);
    let settled = changes
        .settled_step_ids
        .as_ref()
        .unwrap_or(&task.settled_step_ids);
    let next = frozen
        .iter()
        .enumerate()
        .find(|(_, s)| !settled.contains(&s.id));
    match next {
        None => {
            changes.status = Some(TaskStatus::Completed);
            changes.lease = Some(None);
            changes.completed_at = Some(Utc::now());
            changes.current_step_id = Some(None);
            events.push(NewEvent::status(TaskStatus::Completed, "all steps settled"));
            true
        }
        Some((index, step))
            if index < task.max_steps as usize
                && step.condition.is_none()
                && (!step.requires_review || task.reviewed_step_ids.contains(&step.id)) =>
        {
            let mut attempts = changes
                .attempts
                .clone()
                .unwrap_or_else(|| task.attempts.clone());
            let attempt = attempts
                .get(&step.id)
                .and_then(Value::as_u64)
                .map_or(1, |n| n as u32 + 1);
            attempts.insert(step.id.clone(), json!(attempt));
            changes.attempts = Some(attempts);
            changes.status = Some(TaskStatus::Executing);
            changes.current_step_id = Some(Some(step.id.clone()));
            events.push(started_event(step, attempt));
            false
        }
        Some(_) => false,
    }
}

pub(super) fn next_after(done: bool, updated: Option<Task>) -> Next {
    match updated {
        Some(t) if !done => Next::Continue(Box::new(t)),
        _ => Next::Stop,
    }
}

/// The record of one step attempt (every attempt has one), which also
/// counts it in `step_duration_seconds`.
#[allow(clippy::too_many_arguments)]
pub(super) fn step_row(
    task: &Task,
    step: &StepDef,
    attempt: u32,
    args: &Value,
    output: &Value,
    summary: &str,
    error: Option<&str>,
    started: DateTime<Utc>,
    finished: DateTime<Utc>,
    usage: crate::models::usage::Usage,
) -> task_step::ActiveModel {
    metrics()
        .step_duration
        .get_or_create(&StepLabels {
            tool: step.tool.clone(),
            outcome: if error.is_some() {
                "failed"
            } else {
                "completed"
            },
        })
        .observe(seconds_between(started, finished));
    task_step::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(task.tenant.uuid()),
        task_id: Set(task.id.uuid()),
        step_id: Set(step.id.clone()),
        tool: Set(step.tool.clone()),
        attempt: Set(i32::try_from(attempt).unwrap_or(i32::MAX)),
        status: Set(if error.is_some() {
            "FAILED"
        } else {
            "COMPLETED"
        }
        .to_owned()),
        args: Set(redact(args)),
        output: Set(redact(output)),
        summary: Set(summary.to_owned()),
        error: Set(error.map(str::to_owned)),
        idempotency_key: Set(format!("{}:{}", task.id, step.id)),
        usage: Set(usage.to_json()),
        started_at: Set(started),
        finished_at: Set(finished),
        duration_ms: Set((finished - started).num_milliseconds()),
    }
}

impl From<Error> for ToolError {
    fn from(e: Error) -> Self {
        match e {
            // The store was busy: running the step again may succeed.
            Error::Unavailable(_) => ToolError::retryable(e.to_string()),
            e => ToolError::fatal(e.to_string()),
        }
    }
}
