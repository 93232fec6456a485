//! Step arguments and conditions are minijinja templates, rendered in its
//! sandbox (no I/O, no code execution, bounded fuel).
//!
//! - A string that is exactly one `{{ expression }}` evaluates to a typed
//!   JSON value: `"{{ state.count }}"` gives `3`, not `"3"`; an undefined
//!   value gives `null`.
//! - Any other string containing `{{` or `{%` renders to a string.
//! - Objects and arrays are rendered recursively; other values pass through.
//!
//! The context has `input` (`text`, `payload`), `state`, `steps`
//! (`steps.<id>.output`), `tenant` (`id`, `slug`) and `task` (`id`,
//! `trace_id`); all of it is also available under `context.` for plans
//! written that way.
//!
//! Truthiness (for `condition`): `null`, `false`, `0`, `""`, `[]` and `{}`
//! are false; a rendered string is false when, trimmed, it is empty, `false`,
//! `0`, `none` or `null` (case-insensitive).

use minijinja::{Environment, UndefinedBehavior, Value as JinjaValue};
use serde_json::Value;

/// Enough for any reasonable expression; stops runaway loops in templates.
const FUEL: u64 = 50_000;

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_fuel(Some(FUEL));
    env
}

/// Whether a string is a template at all.
pub fn is_template(s: &str) -> bool {
    s.contains("{{") || s.contains("{%")
}

/// The expression of a string that is exactly one `{{ … }}`.
fn single_expression(s: &str) -> Option<&str> {
    let inner = s.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    if inner.contains("{{") || inner.contains("}}") || inner.contains("{%") {
        return None;
    }
    Some(inner.trim())
}

/// Check that every template inside `value` compiles; the error names the
/// offending template.
pub fn check(value: &Value) -> Result<(), String> {
    let env = environment();
    let mut result = Ok(());
    visit_strings(value, &mut |s| {
        if result.is_err() || !is_template(s) {
            return;
        }
        let compiled = match single_expression(s) {
            Some(expr) => env.compile_expression(expr).map(|_| ()),
            None => env.template_from_str(s).map(|_| ()),
        };
        if let Err(err) = compiled {
            result = Err(format!("template `{s}` does not compile: {err}"));
        }
    });
    result
}

fn visit_strings(value: &Value, f: &mut impl FnMut(&str)) {
    match value {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter().for_each(|v| visit_strings(v, f)),
        Value::Object(map) => map.values().for_each(|v| visit_strings(v, f)),
        _ => {}
    }
}

/// Render every template inside `value` against `context`.
pub fn render(value: &Value, context: &Value) -> Result<Value, String> {
    let env = environment();
    let ctx = JinjaValue::from(minijinja::value::Serde(context));
    render_with(&env, value, &ctx)
}

fn render_with(env: &Environment<'_>, value: &Value, ctx: &JinjaValue) -> Result<Value, String> {
    match value {
        Value::String(s) if is_template(s) => match single_expression(s) {
            Some(expr) => {
                let compiled = env
                    .compile_expression(expr)
                    .map_err(|e| format!("template `{s}`: {e}"))?;
                let out = compiled
                    .eval(ctx.clone())
                    .map_err(|e| format!("template `{s}`: {e}"))?;
                if out.is_undefined() || out.is_none() {
                    Ok(Value::Null)
                } else {
                    serde_json::to_value(&out).map_err(|e| format!("template `{s}`: {e}"))
                }
            }
            None => env
                .render_str(s, ctx.clone())
                .map(Value::String)
                .map_err(|e| format!("template `{s}`: {e}")),
        },
        Value::Array(items) => items
            .iter()
            .map(|v| render_with(env, v, ctx))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| render_with(env, v, ctx).map(|v| (k.clone(), v)))
            .collect::<Result<serde_json::Map<_, _>, _>>()
            .map(Value::Object),
        other => Ok(other.clone()),
    }
}

/// The truthiness rule for conditions (see the module docs).
pub fn is_truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => {
            let t = s.trim().to_ascii_lowercase();
            !(t.is_empty() || t == "false" || t == "0" || t == "none" || t == "null")
        }
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ctx() -> Value {
        json!({
            "state": {"count": 3, "drivers": [{"name": "Ada"}], "flag": false},
            "steps": {"fetch": {"output": {"ids": [1, 2]}}},
            "input": {"text": "hello"},
        })
    }

    #[test]
    fn a_single_expression_keeps_its_json_type() {
        let out = render(
            &json!({
                "n": "{{ state.count }}",
                "driver": "{{ state.drivers[0] }}",
                "ids": "{{ steps.fetch.output.ids }}",
                "flag": "{{ state.flag }}",
                "missing": "{{ state.nope }}",
                "literal": 7
            }),
            &ctx(),
        )
        .unwrap();
        assert_eq!(out["n"], json!(3));
        assert_eq!(out["driver"], json!({"name": "Ada"}));
        assert_eq!(out["ids"], json!([1, 2]));
        assert_eq!(out["flag"], json!(false));
        assert_eq!(out["missing"], Value::Null);
        assert_eq!(out["literal"], json!(7));
    }

    #[test]
    fn mixed_text_renders_to_a_string() {
        let out = render(
            &json!("{{ input.text | upper }} x{{ state.count }}"),
            &ctx(),
        )
        .unwrap();
        assert_eq!(out, json!("HELLO x3"));
    }

    #[test]
    fn broken_templates_are_reported() {
        assert!(check(&json!({"a": "{{ state. }}"})).is_err());
        assert!(check(&json!({"a": ["{% if %}"]})).is_err());
        assert!(check(&json!({"a": "{{ state.count + 1 }}", "b": "plain"})).is_ok());
    }

    #[test]
    fn truthiness_follows_the_documented_rule() {
        for falsy in [
            json!(null),
            json!(false),
            json!(0),
            json!(""),
            json!(" False "),
            json!([]),
            json!({}),
        ] {
            assert!(!is_truthy(&falsy), "{falsy}");
        }
        for truthy in [
            json!(true),
            json!(1),
            json!("yes"),
            json!([0]),
            json!({"a": 1}),
        ] {
            assert!(is_truthy(&truthy), "{truthy}");
        }
    }
}
