//! Tokens and cost a model call used, added up per step and per task.

use serde_json::{Value, json};

/// Model usage of a step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Cost in millionths of the billing currency unit.
    pub cost_micros: u64,
}

impl Usage {
    pub fn to_json(self) -> Value {
        json!({
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_micros": self.cost_micros,
        })
    }

    pub fn from_json(value: &Value) -> Self {
        let n = |k: &str| value.get(k).and_then(Value::as_u64).unwrap_or(0);
        Self {
            input_tokens: n("input_tokens"),
            output_tokens: n("output_tokens"),
            cost_micros: n("cost_micros"),
        }
    }

    pub fn plus(self, other: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens + other.input_tokens,
            output_tokens: self.output_tokens + other.output_tokens,
            cost_micros: self.cost_micros + other.cost_micros,
        }
    }
}
