//! `memory.assess_and_plan`: read the subject's dossier and inject steps: a
//! chase step when the subject has too much pending work, else a human
//! review when a memory warns about the subject, then the rest of the work.
//!
//! Deterministic: the same dossier gives the same steps. Text taken from
//! memories is made [`literal`] before it goes into injected arguments, so a
//! memory can never inject a template.

use async_trait::async_trait;
use chrono::Utc;
use serde_json::{Map, Value, json};

use super::{failed, plural, required_subject, scope, strings};
use crate::{
    catalogue::plans::StepDef,
    memory::Memory,
    tools::{Tool, ToolContext, ToolError, ToolOutput},
};

/// Pending work above which `memory.assess_and_plan` chases (the seed's
/// "more than 2 pending requests").
pub const DEFAULT_MAX_OPEN_TASKS: u64 = 2;
/// Categories whose memories warn about their subject by default.
pub const DEFAULT_WARN_CATEGORIES: &[&str] = &["warning"];

/// `memory.assess_and_plan`: decide the next steps from the subject's
/// dossier (the seed's "Domain Brain" with memory), deterministically.
///
/// 1. **Hard state first.** When the subject has more open tasks than
///    `max_open_tasks` (default 2), inject `<step id>.chase` (the `chase`
///    step: `{tool, args}`, default `set_state {"chase_mode": true}`) and
///    stop there: the work is chased, not duplicated.
/// 2. **Memory warnings.** Otherwise, when a current fact about the subject
///    *warns*, inject `<step id>.review` (`request_review`, listing the
///    warnings), so a human looks before the task goes on. A fact warns when
///    its category is one of `warn_categories` (default `["warning"]`) or
///    its text contains one of `warn_terms` (case-insensitive; none by
///    default), e.g. `["VIN"]` for the seed's "bad VINs" rule.
/// 3. **The work.** Then (not in chase mode) the `steps` given, if any: the
///    rest of the plan. Injected steps are appended to the task's plan, so
///    steps placed here run after the review; steps written after this one
///    in the plan would run before it. Templates inside `steps` are
///    rendered when this step runs, like all of its arguments.
///
/// The reasoning is the step's summary (and the `StepsInjected` event's
/// `data.reasoning`); the decision is also saved in state as `assessment`
/// (`chase`, `open_tasks`, `warning_ids`) for later steps' conditions. The
/// warning memories are reported as recalled. Injected step ids carry the
/// assessing step's id, so two assessments in one plan never collide.
pub struct AssessAndPlan;

#[async_trait]
impl Tool for AssessAndPlan {
    fn key(&self) -> &str {
        "memory.assess_and_plan"
    }
    fn description(&self) -> &str {
        "Read the subject's dossier and inject steps: a chase step when its open tasks exceed \
         `max_open_tasks`, else a human review when a memory warns about it."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "subject": {"type": "string"},
                "max_open_tasks": {"type": "integer", "minimum": 0},
                "warn_categories": {"type": "array", "items": {"type": "string", "minLength": 1}},
                "warn_terms": {"type": "array", "items": {"type": "string", "minLength": 1}},
                "chase": {
                    "type": "object",
                    "required": ["tool"],
                    "additionalProperties": false,
                    "properties": {
                        "tool": {"type": "string", "minLength": 1},
                        "args": {"type": "object"}
                    }
                },
                "steps": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["id", "tool"],
                        "properties": {
                            "id": {"type": "string", "minLength": 1},
                            "tool": {"type": "string", "minLength": 1},
                            "args": {"type": "object"}
                        }
                    }
                }
            }
        })
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let subject = required_subject(&ctx, &args)?;
        let work: Vec<StepDef> = match args.get("steps") {
            Some(steps) => serde_json::from_value(steps.clone())
                .map_err(|e| ToolError::fatal(format!("`steps` is not a list of steps: {e}")))?,
            None => Vec::new(),
        };
        let scope = scope(&ctx);
        let dossier = ctx
            .ports
            .memory
            .dossier(scope, subject, Utc::now())
            .await
            .map_err(failed)?;
        let open = ctx
            .ports
            .tasks
            .open_of_subject(scope, subject.uuid(), Some(ctx.task_id))
            .await
            .map_err(failed)?;
        let max_open = args
            .get("max_open_tasks")
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_MAX_OPEN_TASKS);

        if open > max_open {
            let chase = args.get("chase");
            let step = StepDef {
                id: format!("{}.chase", ctx.step_id),
                tool: chase
                    .and_then(|c| c.get("tool"))
                    .and_then(Value::as_str)
                    .unwrap_or("set_state")
                    .to_owned(),
                args: chase
                    .and_then(|c| c.get("args"))
                    .cloned()
                    .unwrap_or_else(|| json!({"chase_mode": true})),
                condition: None,
                stop_on_failure: true,
                retry: None,
                requires_review: false,
                timeout_secs: None,
            };
            let reasoning = format!(
                "Found {} on this subject (limit {max_open}): chasing them instead of starting new work.",
                plural(open as usize, "open task", "open tasks")
            );
            return Ok(assessment(reasoning, open, true, &[], vec![step]));
        }

        let categories: Vec<String> = {
            let given = strings(&args, "warn_categories");
            if args.get("warn_categories").is_some() {
                given
            } else {
                DEFAULT_WARN_CATEGORIES
                    .iter()
                    .map(|s| (*s).to_owned())
                    .collect()
            }
        }
        .into_iter()
        .map(|c| c.trim().to_lowercase())
        .collect();
        let terms: Vec<String> = strings(&args, "warn_terms")
            .into_iter()
            .map(|t| t.trim().to_lowercase())
            .filter(|t| !t.is_empty())
            .collect();
        let warnings: Vec<&Memory> = dossier
            .facts
            .iter()
            .filter(|m| {
                let text = m.content.to_lowercase();
                categories.contains(&m.category) || terms.iter().any(|t| text.contains(t))
            })
            .collect();
        if warnings.is_empty() {
            return Ok(assessment(
                format!(
                    "No memory warns about this subject, and {} is within the limit of {max_open}.",
                    plural(open as usize, "open task", "open tasks")
                ),
                open,
                false,
                &[],
                work,
            ));
        }
        let mut listed: Vec<String> = warnings
            .iter()
            .take(3)
            .map(|m| literal(&m.content.chars().take(200).collect::<String>()))
            .collect();
        if warnings.len() > 3 {
            listed.push(format!("and {} more", warnings.len() - 3));
        }
        let ids: Vec<String> = warnings.iter().map(|m| m.id.to_string()).collect();
        let step = StepDef {
            id: format!("{}.review", ctx.step_id),
            tool: "request_review".into(),
            args: json!({
                "reason": format!("Memory warning: {}", listed.join("; ")),
                "proposed": {"memory_ids": ids},
            }),
            condition: None,
            stop_on_failure: true,
            retry: None,
            requires_review: false,
            timeout_secs: None,
        };
        let reasoning = format!(
            "Memory warning: {} about this subject; a human reviews before the task goes on.",
            plural(warnings.len(), "memory warns", "memories warn")
        );
        let steps = std::iter::once(step).chain(work).collect();
        Ok(assessment(reasoning, open, false, &warnings, steps))
    }
}

fn assessment(
    reasoning: String,
    open: u64,
    chase: bool,
    warnings: &[&Memory],
    steps: Vec<StepDef>,
) -> ToolOutput {
    let warning_ids: Vec<String> = warnings.iter().map(|m| m.id.to_string()).collect();
    let mut state = Map::new();
    state.insert(
        "assessment".into(),
        json!({"chase": chase, "open_tasks": open, "warning_ids": warning_ids}),
    );
    ToolOutput {
        output: json!({
            "reasoning": reasoning,
            "chase": chase,
            "open_tasks": open,
            "warnings": warnings.iter().map(|m| json!({
                "id": m.id.to_string(),
                "category": m.category,
                "content": m.content,
            })).collect::<Vec<_>>(),
            "injected_steps": steps.iter().map(|s| s.id.clone()).collect::<Vec<_>>(),
        }),
        state,
        summary: reasoning,
        new_steps: steps,
        recalled: warnings.iter().map(|m| m.id).collect(),
        ..ToolOutput::default()
    }
}

/// Text that comes from memories, made safe to place in injected step
/// arguments: those are rendered as templates, and a memory must never be
/// able to inject one.
fn literal(text: &str) -> String {
    let mut s = text.to_owned();
    while s.contains("{{") || s.contains("{%") {
        s = s.replace("{{", "{ {").replace("{%", "{ %");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_text_never_becomes_a_template() {
        for text in ["{{ state.x }}", "{{{ x }}}", "{%% if %%}", "a {{{{ b"] {
            let safe = literal(text);
            assert!(
                !crate::kernel::template::is_template(&safe),
                "{text} → {safe}"
            );
        }
        assert_eq!(literal("plain text"), "plain text");
    }
}
