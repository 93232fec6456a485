//! Planning a claimed task: detect its intent (unless given), apply the
//! confidence gate, pick and freeze the plan among those the tenant may
//! run, or pause for review.

use super::*;

impl Executor {
    /// Detect the intent (unless given), apply the confidence gate, freeze
    /// the plan.
    pub(super) async fn plan(&self, task: Task, held: Option<DatabaseTransaction>) -> Result<Next> {
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
                        (intent::detect(&task.input, &plans), Usage::default())
                    }
                    intent::Detector::Llm => {
                        intent::detect_with_model(&self.settings.llm, &task.input, &plans).await
                    }
                };
                (d.intent, d.confidence, d.reasoning, usage)
            }
        };
        // The detection's model call, if any, counts toward the task.
        let usage = (model_usage != Usage::default()).then(|| task.usage.plus(model_usage));
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
            None if intent == FALLBACK_INTENT => {
                ((Default::default(), FALLBACK_INTENT.to_owned(), 0), vec![])
            }
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
        let mut changes = TaskChanges {
            status: Some(TaskStatus::Executing),
            intent: Some(Some(intent)),
            confidence: Some(confidence),
            plan: Some(plan_ref),
            frozen_plan: Some(steps),
            started_at: Some(task.started_at.unwrap_or_else(Utc::now)),
            usage,
            ..TaskChanges::default()
        };
        let mut events = vec![NewEvent::status(TaskStatus::Executing, "planned").data(data)];
        let stop = fold_next(task, &mut changes, &mut events);
        Ok(Decision {
            changes,
            events,
            extra: Extra::default(),
            stop,
        })
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
