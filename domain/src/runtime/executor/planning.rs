//! Planning a claimed task: detect its intent (unless given), apply the
//! confidence gate, pick and freeze the plan among those the tenant may
//! run, or pause for review. Then, by the task's mode: run it (`ENQUEUE`,
//! `ENQUEUE_AND_WAIT`), wait for a person to approve the plan (`PLAN`:
//! `AWAITING_APPROVAL`, with a review at `PLAN_REVIEW_STEP`), or answer
//! without running a step (`ANSWER`: one model call, no tools; the plan is
//! kept to show what would run).
//!
//! Confidence `NONE` (nothing to detect an intent from) ends the task in
//! every mode with an answer: help text naming what the tenant's plans do.

use super::*;

impl Executor {
    /// Detect the intent (unless given), apply the confidence gate, freeze
    /// the plan.
    pub(super) async fn plan(&self, task: Task, held: Option<WriteTransaction>) -> Result<Next> {
        let decision = match &held {
            Some(txn) => self.decide_plan(&task, txn).await?,
            None => self.decide_plan(&task, &self.domain.db).await?,
        };
        self.settle(held, &task, decision).await
    }

    /// Planning's reads (the named plan through `db`) and choices; nothing
    /// is written.
    pub(super) async fn decide_plan<C: ConnectionTrait>(
        &self,
        task: &Task,
        db: &C,
    ) -> Result<Decision> {
        let scope = task.scope();
        let now = Utc::now();
        // The tenant's own plans and those of the capabilities it
        // subscribes to now; nothing else is a candidate. Not needed when
        // the task named both its intent and its plan.
        let plans = if task.intent.is_none() || task.plan_id.is_none() {
            self.domain.plans.available(scope, now).await?
        } else {
            Vec::new()
        };
        let (intent, confidence, reasoning, model_usage) = match &task.intent {
            Some(i) => (
                i.clone(),
                task.confidence,
                "intent given".to_owned(),
                Default::default(),
            ),
            None => {
                let (d, usage) = match self.config.intent_detector {
                    intent::Detector::Rules => {
                        let patterns = self.domain.plans.patterns();
                        (
                            intent::detect(&task.input, &plans, patterns),
                            Usage::default(),
                        )
                    }
                    intent::Detector::Llm => {
                        let patterns = self.domain.plans.patterns();
                        intent::detect_with_model(&self.settings.llm, &task.input, &plans, patterns)
                            .await
                    }
                };
                (d.intent, d.confidence, d.reasoning, usage)
            }
        };
        // The detection's model call, if any, counts toward the task.
        let usage = (model_usage != Usage::default()).then(|| task.usage.plus(model_usage));
        if task.intent.is_none() && confidence <= intent::NONE {
            return Ok(answered(
                task,
                &help_text(&plans),
                "",
                Usage::default(),
                TaskChanges {
                    intent: Some(Some(intent)),
                    confidence: Some(confidence),
                    usage,
                    ..TaskChanges::default()
                },
            ));
        }
        if confidence < task.confidence_threshold && !task.intent_reviewed {
            let reason = format!(
                "Intent detection confidence {:.0}% below threshold {:.0}%",
                confidence * 100.0,
                task.confidence_threshold * 100.0
            );
            let proposed =
                json!({"intent": intent, "confidence": confidence, "reasoning": reasoning});
            return Ok(review(
                task,
                INTENT_REVIEW_STEP,
                None,
                reason,
                Some(confidence),
                proposed,
                TaskChanges {
                    intent: Some(Some(intent.clone())),
                    confidence: Some(confidence),
                    usage,
                    ..TaskChanges::default()
                },
            ));
        }
        let chosen = match task.plan_id {
            // A capability plan named at start needs the subscription still.
            Some(id) => match self.plan_for_task(db, scope, id, now).await {
                Ok(plan) => Some(plan),
                Err(e @ (Error::Forbidden(_) | Error::NotFound(_))) => {
                    return Ok(failure(e.to_string(), None));
                }
                Err(other) => return Err(other),
            },
            None => plans
                .iter()
                .filter(|p| p.intent == intent)
                .max_by_key(|p| (p.priority, p.created_at))
                .cloned(),
        };
        // A plan named at start was counted against its capability's quota
        // then; a detected one is counted now.
        if task.plan_id.is_none()
            && let Some(plan) = &chosen
        {
            match capabilities::check_quota(&self.domain.db, scope, plan, now).await {
                Ok(()) => {}
                Err(e @ Error::RateLimited { .. }) => {
                    return Ok(failure(e.to_string(), None));
                }
                Err(other) => return Err(other),
            }
        }
        let (plan_ref, steps) = match chosen {
            Some(p) => ((p.id, p.key.clone(), p.version), p.steps.clone()),
            // No plan of the tenant handles it: the model answers, with
            // the tenant's tools at hand.
            None if intent == FALLBACK_INTENT => (
                (Default::default(), FALLBACK_INTENT.to_owned(), 0),
                vec![default_agent_step()],
            ),
            None => {
                return Ok(failure(
                    format!("no plan handles the intent `{intent}`"),
                    None,
                ));
            }
        };
        let data = json!({
            "intent": intent,
            "confidence": confidence,
            "reasoning": reasoning,
            "plan": plan_ref.1,
            "version": plan_ref.2,
        });
        if task.started_at.is_none() {
            metrics()
                .tasks_started
                .get_or_create(&TaskLabels {
                    plan: plan_ref.1.clone(),
                    channel: task.channel.as_str().to_owned(),
                })
                .inc();
        }
        let mut changes = TaskChanges {
            status: Some(TaskStatus::Executing),
            intent: Some(Some(intent)),
            confidence: Some(confidence),
            plan: Some(plan_ref),
            frozen_plan: Some(steps.clone()),
            started_at: Some(task.started_at.unwrap_or_else(Utc::now)),
            usage,
            ..TaskChanges::default()
        };
        match task.mode {
            TaskMode::Plan => return Ok(awaiting_approval(task, &steps, confidence, changes)),
            TaskMode::Answer => {
                changes.status = None;
                return self.dry_run(task, &steps, changes).await;
            }
            TaskMode::Enqueue | TaskMode::EnqueueAndWait => {}
        }
        let mut events = vec![NewEvent::status(TaskStatus::Executing, "planned").data(data)];
        let stop = fold_next(task, &mut changes, &mut events);
        Ok(Decision {
            changes,
            events,
            extra: Extra::default(),
            stop,
        })
    }

    /// `ANSWER`: one model call on the task's input, no tools and no step
    /// run; `steps` (what would run) stay on the task.
    async fn dry_run(
        &self,
        task: &Task,
        steps: &[StepDef],
        changes: TaskChanges,
    ) -> Result<Decision> {
        let client = &self.settings.llm;
        let mut messages = prompt::first_messages(None, &task.input);
        if !steps.is_empty() {
            let tools: Vec<&str> = steps.iter().map(|s| s.tool.as_str()).collect();
            messages.insert(
                1,
                Message::system(format!(
                    "Answer the request directly. Nothing is run now; the plan that would run uses: {}.",
                    tools.join(", ")
                )),
            );
        }
        let request = client.request(messages, None, None, None);
        let scope = task.scope();
        let refused = budget::check(
            &self.domain.db,
            client.settings().budgets,
            scope,
            async { Ok(task.usage) },
            None,
            request.estimated_max_tokens(),
        )
        .await?;
        if let Err(message) = refused {
            return Ok(failure(message, None));
        }
        match client.complete(request).await {
            Ok(done) => {
                let usage = done.step_usage();
                let mut changes = changes;
                changes.usage = Some(changes.usage.unwrap_or(task.usage).plus(usage));
                Ok(answered(task, &done.text, &done.model, usage, changes))
            }
            Err(e) => Ok(failure(
                format!("the dry run's model call failed: {e}"),
                None,
            )),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn pause_for_review(
        &self,
        task: &Task,
        step_id: &str,
        tool: Option<&str>,
        reason: String,
        confidence: Option<f64>,
        proposed: Value,
        changes: TaskChanges,
    ) -> Result<Next> {
        let decision = review(task, step_id, tool, reason, confidence, proposed, changes);
        self.settle(None, task, decision).await
    }
}

/// `PLAN`: the plan is frozen and the task waits in `AWAITING_APPROVAL`
/// for `resumeTask` (approve, maybe with an edited plan) or a rejection.
fn awaiting_approval(
    task: &Task,
    steps: &[StepDef],
    confidence: f64,
    changes: TaskChanges,
) -> Decision {
    let reason = format!("the plan ({} step(s)) waits for approval", steps.len());
    let proposed = json!({"steps": steps});
    let mut decision = review(
        task,
        PLAN_REVIEW_STEP,
        None,
        reason.clone(),
        Some(confidence),
        proposed,
        changes,
    );
    decision.changes.status = Some(TaskStatus::AwaitingApproval);
    decision.changes.current_step_id = Some(None);
    if let Some(event) = decision.events.last_mut() {
        *event = NewEvent::status(TaskStatus::AwaitingApproval, reason);
    }
    decision
}

/// The task ends with an answer and runs no step: its result is
/// `content`, from `model` (none for help text), with `usage`.
fn answered(
    task: &Task,
    content: &str,
    model: &str,
    usage: Usage,
    mut changes: TaskChanges,
) -> Decision {
    changes.status = Some(TaskStatus::Completed);
    changes.lease = Some(None);
    changes.completed_at = Some(Utc::now());
    changes.started_at = Some(task.started_at.unwrap_or_else(Utc::now));
    changes.result = Some(json!({
        "content": content,
        "model": model,
        "token_usage": {"input": usage.input_tokens, "output": usage.output_tokens},
        "finish_reason": "COMPLETE",
        "memory_suggestions": [],
        "tool_calls": 0,
        "iterations": u32::from(!model.is_empty()),
    }));
    Decision {
        changes,
        events: vec![NewEvent::status(
            TaskStatus::Completed,
            "answered; no step ran",
        )],
        extra: Extra::default(),
        stop: true,
    }
}

/// The plan of a task whose intent no plan handles: one agent step over
/// the task's input, with every tool the tenant may run.
fn default_agent_step() -> StepDef {
    StepDef {
        id: "answer".into(),
        tool: "agent".into(),
        args: json!({}),
        condition: None,
        stop_on_failure: true,
        retry: None,
        requires_review: false,
        timeout_secs: None,
    }
}

/// What a task with nothing to go on is told: what the tenant's plans do.
fn help_text(plans: &[plans::Plan]) -> String {
    let mut lines: Vec<String> = plans
        .iter()
        .map(|p| {
            if p.description.is_empty() {
                format!("- {}", p.intent)
            } else {
                format!("- {}: {}", p.intent, p.description)
            }
        })
        .collect();
    lines.sort();
    lines.dedup();
    if lines.is_empty() {
        return "I could not tell what you want done, and no plans are set up yet. Describe the task in a sentence.".into();
    }
    format!(
        "I could not tell what you want done. Describe the task in a sentence; I can help with:\n{}",
        lines.join("\n")
    )
}
