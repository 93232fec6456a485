//! The tools an agent loop offers the model, and what becomes of each call
//! it makes: a step of the task, or a refusal answered at once.
//!
//! Names: OpenAI-compatible servers take tool names of letters, digits,
//! `_` and `-` (at most 64), so a key such as `memory.search` is offered as
//! `memory_search`; two keys that would share a name get `_2`, `_3`, ….
//!
//! Plans as tools: each plan the tenant may run that has no agent step of
//! its own (so a loop cannot start itself) is offered as `plan_<key>`,
//! taking `input` and `payload`; its calls run `plan.run` with the plan's
//! key fixed.
//!
//! A call becomes a step only when its tool is one offered, its arguments
//! are a JSON object whose keys are plain names and that passes the tool's
//! schema, and the loop is under `max_tool_calls`. The step's arguments are
//! template expressions that read the parsed arguments back from the
//! iteration's stored output, so nothing the model wrote is ever rendered
//! as a template.

use std::{collections::HashMap, sync::Arc};

use serde_json::{Map, Value, json};

use super::transcript::{Call, Limits, Refusal};
use crate::{
    catalogue::plans::{Plan, RetryPolicy, StepDef},
    kernel::json_schema::{self, Mode},
    models::llm::{ToolCall, ToolSpec},
    tools::Tool,
};

/// Tools never offered unless the step names them: the loop itself, a
/// second model call from inside the model's turn, and the generic plan
/// runner (plans are offered one by one instead).
const NOT_BY_DEFAULT: [&str; 3] = [super::KEY, "llm.generate", crate::tools::plan_run::KEY];

/// The longest tool name OpenAI-compatible servers take.
const MAX_NAME: usize = 64;

/// One tool as the model sees it.
struct Entry {
    /// The key a plan names it by (`http_request`, `plan.<key>`).
    key: String,
    name: String,
    tool: Arc<dyn Tool>,
    description: String,
    parameters: Value,
    /// Arguments the call always gets (a plan's key), beside the model's.
    fixed: Map<String, Value>,
}

/// The tools offered, by the name the model knows them by.
pub struct Menu {
    entries: Vec<Entry>,
    used: HashMap<String, usize>,
}

impl Menu {
    /// `tools` the tenant may run, narrowed to `allowed` when the step
    /// names its tools (the loop itself is never offered).
    pub fn new(tools: Vec<Arc<dyn Tool>>, allowed: Option<&[String]>) -> Self {
        let mut menu = Self {
            entries: Vec::new(),
            used: HashMap::new(),
        };
        for tool in tools.into_iter().filter(|t| match allowed {
            Some(keys) => t.key() != super::KEY && keys.iter().any(|k| k == t.key()),
            None => !NOT_BY_DEFAULT.contains(&t.key()),
        }) {
            let name = menu.name_for(tool.key());
            menu.entries.push(Entry {
                key: tool.key().to_owned(),
                name,
                description: tool.description().to_owned(),
                parameters: tool.input_schema(),
                tool,
                fixed: Map::new(),
            });
        }
        menu
    }

    /// Also offer `plans` (those with no agent step, and named `plan.<key>`
    /// in `allowed` if the step names its tools), run by `runner`.
    pub fn with_plans(
        mut self,
        plans: &[Plan],
        runner: Arc<dyn Tool>,
        allowed: Option<&[String]>,
    ) -> Self {
        for plan in plans {
            let key = format!("plan.{}", plan.key);
            let offered = allowed.is_none_or(|keys| keys.contains(&key));
            if !offered || plan.steps.iter().any(|s| s.tool == super::KEY) {
                continue;
            }
            let description = if plan.description.is_empty() {
                format!("Run the plan `{}` (intent `{}`).", plan.key, plan.intent)
            } else {
                plan.description.clone()
            };
            let name = self.name_for(&key);
            self.entries.push(Entry {
                key,
                name,
                tool: runner.clone(),
                description,
                parameters: json!({
                    "type": "object",
                    "required": ["input"],
                    "additionalProperties": false,
                    "properties": {
                        "input": {"type": "string", "description": "What the plan's task is to do."},
                        "payload": {"type": "object"}
                    }
                }),
                fixed: Map::from_iter([("plan".to_owned(), Value::String(plan.key.clone()))]),
            });
        }
        self
    }

    /// The menu with each tool in `descriptions` (by key) described as the
    /// step says instead of by its own words; the first key it names that
    /// the menu does not offer is the error.
    pub fn described(
        mut self,
        descriptions: &std::collections::BTreeMap<String, String>,
    ) -> Result<Self, String> {
        for (key, text) in descriptions {
            match self.entries.iter_mut().find(|e| &e.key == key) {
                Some(entry) => entry.description.clone_from(text),
                None => return Err(key.clone()),
            }
        }
        Ok(self)
    }

    /// The name `key` is offered under, unique in the menu.
    fn name_for(&mut self, key: &str) -> String {
        let base: String = key
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(MAX_NAME - 4)
            .collect();
        let n = self.used.entry(base.clone()).or_insert(0);
        *n += 1;
        if *n == 1 { base } else { format!("{base}_{n}") }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.entries
            .iter()
            .map(|e| ToolSpec {
                name: e.name.clone(),
                description: e.description.clone(),
                parameters: e.parameters.clone(),
            })
            .collect()
    }

    fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name == name)
    }

    fn names(&self) -> String {
        if self.entries.is_empty() {
            return "none".into();
        }
        self.entries
            .iter()
            .map(|e| e.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The calls of one turn, resolved: every call (run or refused, in the
/// model's order) and the steps that run them.
pub struct Resolved {
    pub calls: Vec<Call>,
    pub steps: Vec<StepDef>,
}

/// Resolve the model's `calls` of iteration `iteration` (whose step is
/// `iteration_step`), numbering call steps with `call_step(k)`, with `made`
/// calls run so far in the loop.
pub fn resolve(
    menu: &Menu,
    calls: &[ToolCall],
    iteration_step: &str,
    call_step: impl Fn(usize) -> String,
    made: &mut u32,
    limits: &Limits,
) -> Resolved {
    let mut resolved = Resolved {
        calls: Vec::with_capacity(calls.len()),
        steps: Vec::new(),
    };
    for (index, call) in calls.iter().enumerate() {
        let mut entry = Call {
            id: call.id.clone(),
            name: call.name.clone(),
            tool: None,
            step: None,
            args: Value::Null,
            refused: None,
        };
        let checked = check(menu, call, *made, limits);
        match checked {
            Err(refusal) => entry.refused = Some(refusal),
            Ok((offered, args)) => {
                *made += 1;
                let tool = &offered.tool;
                let step = call_step(index + 1);
                let timeout = tool
                    .timeout()
                    .as_secs()
                    .clamp(1, limits.tool_call_timeout_secs.max(1));
                let mut step_args = offered.fixed.clone();
                if let Value::Object(read) = reading_args(&args, iteration_step, index) {
                    step_args.extend(read);
                }
                resolved.steps.push(StepDef {
                    id: step.clone(),
                    tool: tool.key().to_owned(),
                    args: Value::Object(step_args),
                    condition: None,
                    stop_on_failure: false,
                    retry: Some(RetryPolicy::default()),
                    requires_review: false,
                    timeout_secs: Some(timeout),
                });
                entry.tool = Some(tool.key().to_owned());
                entry.step = Some(step);
                entry.args = Value::Object(args);
            }
        }
        resolved.calls.push(entry);
    }
    resolved
}

/// A call that may run: what was offered and the parsed arguments.
type Runnable<'m> = (&'m Entry, Map<String, Value>);

/// Whether a call may run, or why not.
fn check<'m>(
    menu: &'m Menu,
    call: &ToolCall,
    made: u32,
    limits: &Limits,
) -> Result<Runnable<'m>, Refusal> {
    let refuse = |code: &str, message: String| Refusal {
        code: code.into(),
        message,
    };
    let Some(offered) = menu.get(&call.name) else {
        return Err(refuse(
            "TOOL_NOT_FOUND",
            format!(
                "Tool '{}' is not available. Available tools: {}",
                call.name,
                menu.names()
            ),
        ));
    };
    let text = if call.arguments.trim().is_empty() {
        "{}"
    } else {
        call.arguments.as_str()
    };
    let args = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(args)) => args,
        Ok(_) => {
            return Err(refuse(
                "INVALID_ARGUMENTS",
                "the arguments must be a JSON object".into(),
            ));
        }
        Err(e) => {
            return Err(refuse(
                "INVALID_ARGUMENTS",
                format!("the arguments are not valid JSON: {e}"),
            ));
        }
    };
    if let Some(key) = args.keys().find(|k| !plain_name(k)) {
        return Err(refuse(
            "INVALID_ARGUMENTS",
            format!("argument `{key}` is not a plain name (letters, digits, `_`, `-`)"),
        ));
    }
    if let Err(e) = json_schema::validate(
        &offered.parameters,
        &Value::Object(args.clone()),
        Mode::Runtime,
    ) {
        return Err(refuse("INVALID_ARGUMENTS", e));
    }
    if made >= limits.max_tool_calls {
        return Err(refuse(
            "TOOL_LIMIT",
            format!(
                "the limit of {} tool calls for this task is reached; answer with what you have",
                limits.max_tool_calls
            ),
        ));
    }
    Ok((offered, args))
}

fn plain_name(key: &str) -> bool {
    !key.is_empty()
        && !key.starts_with('_')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The call step's arguments: each one read back from the iteration's
/// output (`calls[index].args`), typed, by a template expression.
fn reading_args(args: &Map<String, Value>, iteration_step: &str, index: usize) -> Value {
    Value::Object(
        args.keys()
            .map(|key| {
                (
                    key.clone(),
                    Value::String(format!(
                        "{{{{ steps['{iteration_step}'].output.calls[{index}].args['{key}'] }}}}"
                    )),
                )
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use serde_json::json;

    use super::*;
    use crate::tools::{ToolContext, ToolError, ToolOutput};

    struct Named(&'static str);

    #[async_trait]
    impl Tool for Named {
        fn key(&self) -> &str {
            self.0
        }
        fn description(&self) -> &str {
            "test"
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object", "required": ["q"], "properties": {"q": {"type": "string"}}})
        }
        async fn call(&self, _: ToolContext, _: Value) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::default())
        }
    }

    fn menu() -> Menu {
        Menu::new(
            vec![
                Arc::new(Named("memory.search")),
                Arc::new(Named("memory_search")),
                Arc::new(Named("agent")),
                Arc::new(Named("llm.generate")),
            ],
            None,
        )
    }

    const LIMITS: Limits = Limits {
        max_iterations: 5,
        max_tool_calls: 2,
        tool_call_timeout_secs: 30,
        loop_timeout_secs: 120,
        max_output_tokens: 100,
        temperature: 0.0,
    };

    fn call(name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: format!("c-{name}"),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn a_step_describes_a_tool_by_its_key_and_names_only_tools_it_offers() {
        let descriptions = std::collections::BTreeMap::from([(
            "memory_search".to_owned(),
            "Look up an order.".to_owned(),
        )]);
        let specs = menu().described(&descriptions).expect("offered").specs();
        let described: Vec<(&str, &str)> = specs
            .iter()
            .map(|s| (s.name.as_str(), s.description.as_str()))
            .collect();
        assert_eq!(
            described,
            [
                ("memory_search", "test"),
                ("memory_search_2", "Look up an order.")
            ],
            "by key, not by the name the model sees"
        );
        let unknown =
            std::collections::BTreeMap::from([("http_request".to_owned(), "x".to_owned())]);
        assert_eq!(
            menu().described(&unknown).err().as_deref(),
            Some("http_request")
        );
    }

    #[test]
    fn keys_become_names_without_clashes_and_the_loop_is_not_offered() {
        let names: Vec<String> = menu().specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["memory_search", "memory_search_2"]);
        let allowed = ["llm.generate".to_owned(), "agent".to_owned()];
        let named = Menu::new(
            vec![Arc::new(Named("llm.generate")), Arc::new(Named("agent"))],
            Some(&allowed),
        );
        let names: Vec<String> = named.specs().into_iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            ["llm_generate"],
            "named tools are offered, the loop never"
        );
    }

    #[test]
    fn valid_calls_become_steps_that_read_their_arguments_back() {
        let mut made = 0;
        let resolved = resolve(
            &menu(),
            &[call("memory_search", r#"{"q": "visits"}"#)],
            "answer",
            |k| format!("answer:1.{k}"),
            &mut made,
            &LIMITS,
        );
        assert_eq!(made, 1);
        assert_eq!(resolved.steps.len(), 1);
        let step = &resolved.steps[0];
        assert_eq!(step.id, "answer:1.1");
        assert_eq!(step.tool, "memory.search");
        assert!(!step.stop_on_failure);
        assert_eq!(
            step.args,
            json!({"q": "{{ steps['answer'].output.calls[0].args['q'] }}"})
        );
        assert_eq!(resolved.calls[0].args, json!({"q": "visits"}));
        let context =
            json!({"steps": {"answer": {"output": {"calls": [{"args": {"q": "visits"}}]}}}});
        assert_eq!(
            crate::kernel::template::render(&step.args, &context).unwrap(),
            json!({"q": "visits"})
        );
    }

    #[test]
    fn bad_calls_are_refused_with_a_code_and_the_limit_holds() {
        let mut made = 1;
        let resolved = resolve(
            &menu(),
            &[
                call("nope", "{}"),
                call("memory_search", "{not json"),
                call("memory_search", r#"{"q": 3}"#),
                call("memory_search", r#"{"q": "{{ state }}", "a b": 1}"#),
                call("memory_search", r#"{"q": "ok"}"#),
                call("memory_search", r#"{"q": "one too many"}"#),
            ],
            "answer:2",
            |k| format!("answer:2.{k}"),
            &mut made,
            &LIMITS,
        );
        let codes: Vec<Option<&str>> = resolved
            .calls
            .iter()
            .map(|c| c.refused.as_ref().map(|r| r.code.as_str()))
            .collect();
        assert_eq!(
            codes,
            [
                Some("TOOL_NOT_FOUND"),
                Some("INVALID_ARGUMENTS"),
                Some("INVALID_ARGUMENTS"),
                Some("INVALID_ARGUMENTS"),
                None,
                Some("TOOL_LIMIT")
            ]
        );
        assert_eq!(made, 2);
        assert_eq!(resolved.steps.len(), 1);
        assert_eq!(resolved.steps[0].id, "answer:2.5");
        assert!(
            resolved.calls[0]
                .refused
                .as_ref()
                .unwrap()
                .message
                .contains("memory_search")
        );
    }
}
