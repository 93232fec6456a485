//! Validation of tool arguments against a tool's JSON Schema.
//!
//! A deliberately small subset of JSON Schema, enough for tool inputs:
//! `type` (string or list), `properties`, `required`,
//! `additionalProperties: false`, `items`, `enum`, `minimum`, `maximum`,
//! `minLength`, `maxLength`. Unknown keywords are ignored.
//!
//! When a plan is published its arguments may still be templates: a
//! template string satisfies any type (it is checked again, rendered, when
//! the step runs), and keys starting with `_` (comments) are ignored.

use serde_json::Value;

/// Where validation happens: at publish time templates stand in for values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Arguments as written in a plan.
    Plan,
    /// Arguments after rendering, just before the tool runs.
    Runtime,
}

/// Validate `value` against `schema`; the error names the offending path.
pub fn validate(schema: &Value, value: &Value, mode: Mode) -> Result<(), String> {
    check(schema, value, mode, "args")
}

fn type_matches(ty: &str, value: &Value) -> bool {
    match ty {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.as_f64().is_some_and(|f| f.fract() == 0.0),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => true,
    }
}

fn check(schema: &Value, value: &Value, mode: Mode, path: &str) -> Result<(), String> {
    if mode == Mode::Plan
        && let Value::String(s) = value
        && crate::kernel::template::is_template(s)
    {
        return Ok(());
    }
    let Some(schema) = schema.as_object() else {
        return Ok(());
    };
    if let Some(ty) = schema.get("type") {
        let types: Vec<&str> = match ty {
            Value::String(s) => vec![s.as_str()],
            Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        if !types.is_empty() && !types.iter().any(|t| type_matches(t, value)) {
            return Err(format!(
                "{path} must be of type {}, got {}",
                types.join(" or "),
                kind(value)
            ));
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        return Err(format!(
            "{path} must be one of {}",
            Value::Array(options.clone())
        ));
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            return Err(format!("{path} must be at least {min}"));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            return Err(format!("{path} must be at most {max}"));
        }
    }
    if let Some(s) = value.as_str() {
        let len = s.chars().count() as u64;
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && len < min
        {
            return Err(format!("{path} must have at least {min} characters"));
        }
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && len > max
        {
            return Err(format!("{path} must have at most {max} characters"));
        }
    }
    if let (Some(items), Some(values)) = (schema.get("items"), value.as_array()) {
        for (i, item) in values.iter().enumerate() {
            check(items, item, mode, &format!("{path}[{i}]"))?;
        }
    }
    if let Some(map) = value.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            for key in required.iter().filter_map(Value::as_str) {
                if !map.contains_key(key) {
                    return Err(format!("{path}.{key} is required"));
                }
            }
        }
        let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
        for (key, v) in map {
            if key.starts_with('_') {
                continue;
            }
            match properties.and_then(|p| p.get(key)) {
                Some(sub) => check(sub, v, mode, &format!("{path}.{key}"))?,
                None if closed => return Err(format!("{path}.{key} is not a known argument")),
                None => {}
            }
        }
    }
    Ok(())
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "required": ["url"],
            "additionalProperties": false,
            "properties": {
                "url": {"type": "string", "minLength": 1},
                "method": {"enum": ["GET", "POST"]},
                "retries": {"type": "integer", "minimum": 0, "maximum": 5},
                "tags": {"type": "array", "items": {"type": "string"}}
            }
        })
    }

    #[test]
    fn accepts_valid_and_names_what_is_wrong() {
        assert!(
            validate(
                &schema(),
                &json!({"url": "x", "method": "GET", "tags": ["a"]}),
                Mode::Runtime
            )
            .is_ok()
        );
        let cases = [
            (json!({}), "args.url is required"),
            (json!({"url": 3}), "args.url must be of type string"),
            (
                json!({"url": "x", "method": "PUT"}),
                "args.method must be one of",
            ),
            (json!({"url": "x", "retries": 9}), "at most 5"),
            (json!({"url": "x", "tags": [1]}), "args.tags[0]"),
            (
                json!({"url": "x", "nope": 1}),
                "args.nope is not a known argument",
            ),
        ];
        for (value, expected) in cases {
            let err = validate(&schema(), &value, Mode::Runtime).unwrap_err();
            assert!(err.contains(expected), "{err} should contain {expected}");
        }
    }

    #[test]
    fn templates_and_comments_pass_at_publish_time_only() {
        let args = json!({"url": "{{ state.url }}", "_comment": "why", "retries": "{{ state.n }}"});
        assert!(validate(&schema(), &args, Mode::Plan).is_ok());
        assert!(validate(&schema(), &args, Mode::Runtime).is_err());
    }
}
