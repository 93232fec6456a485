//! Step arguments and conditions are minijinja templates, rendered in its
//! sandbox (no I/O, no code execution, bounded fuel) and within a memory
//! budget: everything one step's templates create with an operator or a
//! filter, and everything they write, counts against [`MAX_RENDER_BYTES`],
//! checked before a value that could be larger is built ([`budget`]). To
//! make that possible templates are compiled from a rewritten syntax tree
//! ([`rewrite`]) through minijinja's `unstable_machinery` API, which is
//! why the crate's version is pinned exactly.
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

use std::{collections::BTreeMap, sync::LazyLock};

use minijinja::{
    AutoEscape, Environment, Error as JinjaError, UndefinedBehavior, Value as JinjaValue, filters,
    machinery::{self, CodeGenerator, Instructions},
    syntax::SyntaxConfig,
};
use serde_json::Value;

mod budget;
mod rewrite;

pub use budget::MAX_RENDER_BYTES;

/// Enough for any reasonable expression; stops runaway loops in templates.
const FUEL: u64 = 50_000;

/// Filters whose single call can make a value far larger than its
/// arguments (a width, a count, a format string): not offered.
const WITHHELD_FILTERS: [&str; 5] = ["indent", "batch", "slice", "format", "pprint"];

/// One environment for every render: its settings and filters never
/// change, and building it registers some forty filters.
static ENVIRONMENT: LazyLock<Environment<'static>> = LazyLock::new(environment);

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_fuel(Some(FUEL));
    env.set_formatter(budget::format);
    env.add_function(rewrite::ADD, budget::add);
    env.add_function(rewrite::MUL, budget::mul);
    env.add_function(rewrite::CONCAT, budget::concat);
    for name in WITHHELD_FILTERS {
        env.remove_filter(name);
    }
    budget::checked_filter(&mut env, "join", filters::join, budget::join_estimate);
    budget::checked_filter(
        &mut env,
        "replace",
        filters::replace,
        budget::replace_estimate,
    );
    macro_rules! counted {
        ($($name:literal => $f:path),* $(,)?) => {
            $(budget::counted_filter(&mut env, $name, $f);)*
        };
    }
    counted! {
        "safe" => filters::safe, "escape" => filters::escape, "e" => filters::escape,
        "lower" => filters::lower, "upper" => filters::upper, "title" => filters::title,
        "capitalize" => filters::capitalize, "length" => filters::length,
        "count" => filters::length, "dictsort" => filters::dictsort,
        "items" => filters::items, "reverse" => filters::reverse, "trim" => filters::trim,
        "split" => filters::split, "lines" => filters::lines,
        "default" => filters::default, "d" => filters::default, "round" => filters::round,
        "abs" => filters::abs, "int" => filters::int, "float" => filters::float,
        "attr" => filters::attr, "first" => filters::first, "last" => filters::last,
        "min" => filters::min, "max" => filters::max, "sort" => filters::sort,
        "list" => filters::list, "string" => filters::string, "bool" => filters::bool,
        "sum" => filters::sum, "select" => filters::select, "reject" => filters::reject,
        "selectattr" => filters::selectattr, "rejectattr" => filters::rejectattr,
        "map" => filters::map, "groupby" => filters::groupby, "unique" => filters::unique,
        "chain" => filters::chain, "zip" => filters::zip,
    }
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

type Blocks<'s> = BTreeMap<&'s str, Instructions<'s>>;

/// Compile a template with its operators budgeted (see [`rewrite`]).
fn compile_template(source: &str) -> Result<(Instructions<'_>, Blocks<'_>), JinjaError> {
    let ast = machinery::parse(source, "<template>", SyntaxConfig::default())?;
    let mut generator = CodeGenerator::new("<template>", source);
    generator.compile_stmt(&rewrite::stmt(&ast));
    Ok(generator.finish())
}

/// Compile one expression with its operators budgeted.
fn compile_expression(source: &str) -> Result<Instructions<'_>, JinjaError> {
    let ast = machinery::parse_expr(source)?;
    let mut generator = CodeGenerator::new("<expression>", source);
    generator.compile_expr(&rewrite::expr(&ast));
    Ok(generator.finish().0)
}

/// Check that every template inside `value` compiles; the error names the
/// offending template.
pub fn check(value: &Value) -> Result<(), String> {
    let mut result = Ok(());
    visit_strings(value, &mut |s| {
        if result.is_err() || !is_template(s) {
            return;
        }
        let compiled = match single_expression(s) {
            Some(expr) => compile_expression(expr).map(|_| ()),
            None => compile_template(s).map(|_| ()),
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

/// Render every template inside `value` against `context`. Together they
/// may create at most [`MAX_RENDER_BYTES`]; past that the render fails
/// with an error saying so.
pub fn render(value: &Value, context: &Value) -> Result<Value, String> {
    let _budget = budget::Scope::enter(MAX_RENDER_BYTES);
    let ctx = JinjaValue::from(minijinja::value::Serde(context));
    render_with(&ENVIRONMENT, value, &ctx)
}

/// Evaluate one expression to its value.
fn eval_expression(
    env: &Environment<'_>,
    expr: &str,
    ctx: &JinjaValue,
) -> Result<Value, JinjaError> {
    let instructions = compile_expression(expr)?;
    let mut sink = String::new();
    let (out, _) = machinery::eval(
        env,
        &instructions,
        ctx.clone(),
        &BTreeMap::new(),
        &mut machinery::make_string_output(&mut sink),
        AutoEscape::None,
    )?;
    match out {
        Some(out) if !(out.is_undefined() || out.is_none()) => {
            budget::charge_json(&out)?;
            serde_json::to_value(&out)
                .map_err(|e| JinjaError::new(minijinja::ErrorKind::BadSerialization, e.to_string()))
        }
        _ => Ok(Value::Null),
    }
}

/// Render one template to text.
fn render_template(
    env: &Environment<'_>,
    source: &str,
    ctx: &JinjaValue,
) -> Result<String, JinjaError> {
    let (instructions, blocks) = compile_template(source)?;
    let mut text = String::new();
    machinery::eval(
        env,
        &instructions,
        ctx.clone(),
        &blocks,
        &mut machinery::make_string_output(&mut text),
        AutoEscape::None,
    )?;
    Ok(text)
}

fn render_with(env: &Environment<'_>, value: &Value, ctx: &JinjaValue) -> Result<Value, String> {
    match value {
        Value::String(s) if is_template(s) => match single_expression(s) {
            Some(expr) => eval_expression(env, expr, ctx),
            None => render_template(env, s, ctx).map(Value::String),
        }
        .map_err(|e| format!("template `{s}`: {e}")),
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

    fn over_budget(template: &str) -> String {
        let err = render(&json!({"a": template}), &ctx()).expect_err(template);
        assert!(err.contains("template memory limit"), "{template}: {err}");
        err
    }

    #[test]
    fn operators_that_multiply_a_value_are_refused_before_building_it() {
        // The exploit: one expression asking for 400 MB.
        over_budget("{{ 'x' * 100000000 ~ 'x' * 100000000 ~ 'x' * 100000000 ~ 'x' * 100000000 }}");
        over_budget("{{ 'x' * 400000000 }}");
        over_budget("{{ [1, 2, 3] * 100000000 }}");
        over_budget("{{ '' * 100000000000 }}");
        over_budget("{{ input.text * 10000000 }}");
        // Doubling a value held in a variable.
        let doubling: String = std::iter::once("{% set a = 'xxxxxxxxxxxxxxxx' %}")
            .chain(std::iter::repeat_n("{% set a = a ~ a %}", 40))
            .chain(std::iter::once("{{ a | length }}"))
            .collect();
        over_budget(&doubling);
        let adding: String = std::iter::once("{% set a = ['xxxxxxxxxxxxxxxx'] %}")
            .chain(std::iter::repeat_n("{% set a = a + a %}", 40))
            .chain(std::iter::once("{{ a | list | length }}"))
            .collect();
        over_budget(&adding);
    }

    #[test]
    fn filters_and_output_count_against_the_budget() {
        over_budget(
            "{{ (['xxxxxxxxxx'] * 100000) | join('yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy') }}",
        );
        over_budget(&format!(
            "{{{{ '{}' | replace('', '{}') }}}}",
            "x".repeat(5000),
            "y".repeat(5000)
        ));
        // Literal text repeated by a loop is output like any other.
        over_budget(&format!(
            "{{% for i in range(40000) %}}{}{{% endfor %}}",
            "z".repeat(1000)
        ));
        // A namespace accumulating copies made by filters.
        over_budget(
            "{% set ns = namespace(l=[]) %}{% for i in range(10000) %}{% set ns.l = ns.l + [(input.text * 1000) | upper] %}{% endfor %}{{ ns.l | length }}",
        );
        let err = render(&json!("{{ 'x' | indent(1000000000) }}"), &ctx()).unwrap_err();
        assert!(err.contains("indent"), "{err}");
    }

    #[test]
    fn each_render_has_its_own_budget_and_ordinary_templates_fit() {
        for _ in 0..3 {
            let out = render(
                &json!({
                    "big": "{{ ('x' * 4000000) | length }}",
                    "sum": "{{ state.count + 1 }}",
                    "product": "{{ state.count * 2 }}",
                    "joined": "{{ ['a', 'b'] | join(', ') }} and {{ input.text ~ '!' }}",
                    "list": "{{ steps.fetch.output.ids + [3] }}",
                    "loop": "{% for d in state.drivers %}{{ d.name }};{% endfor %}",
                }),
                &ctx(),
            )
            .unwrap();
            assert_eq!(out["big"], json!(4000000));
            assert_eq!(out["sum"], json!(4));
            assert_eq!(out["product"], json!(6));
            assert_eq!(out["joined"], json!("a, b and hello!"));
            assert_eq!(out["list"], json!([1, 2, 3]));
            assert_eq!(out["loop"], json!("Ada;"));
        }
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
