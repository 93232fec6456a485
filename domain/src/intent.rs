//! Rules-first intent detection: each plan declares regular-expression
//! patterns for its intent; the input text is matched against all of them.
//! No model is needed.
//!
//! Confidence, as numbers:
//! - **high** (0.95): exactly one intent matches;
//! - **medium** (0.6): several intents match; the one with the most
//!   matching patterns (then the highest plan priority) wins;
//! - **low** (0.3): nothing matches; the fallback `general_instruction`;
//! - **none** (0.0): there is no text to classify.
//!
//! With the default threshold of 0.8 only a unique match runs unattended.

use regex::Regex;

use crate::plans::{FALLBACK_INTENT, Plan};

pub const HIGH: f64 = 0.95;
pub const MEDIUM: f64 = 0.6;
pub const LOW: f64 = 0.3;
pub const NONE: f64 = 0.0;

#[derive(Clone, Debug, PartialEq)]
pub struct Detection {
    pub intent: String,
    pub confidence: f64,
    pub reasoning: String,
}

/// Classify `text` against the patterns of `plans`.
pub fn detect(text: &str, plans: &[Plan]) -> Detection {
    if text.trim().is_empty() {
        return Detection {
            intent: FALLBACK_INTENT.to_owned(),
            confidence: NONE,
            reasoning: "no input text".into(),
        };
    }
    // (intent, matching patterns, priority)
    let mut scores: Vec<(&str, usize, i32)> = Vec::new();
    for plan in plans {
        let hits = plan
            .patterns
            .iter()
            .filter(|p| {
                Regex::new(&format!("(?i){p}"))
                    .map(|re| re.is_match(text))
                    .unwrap_or(false)
            })
            .count();
        if hits == 0 {
            continue;
        }
        match scores.iter_mut().find(|(i, _, _)| *i == plan.intent) {
            Some(entry) => {
                entry.1 = entry.1.max(hits);
                entry.2 = entry.2.max(plan.priority);
            }
            None => scores.push((&plan.intent, hits, plan.priority)),
        }
    }
    scores.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(b.0)));
    match scores.as_slice() {
        [] => Detection {
            intent: FALLBACK_INTENT.to_owned(),
            confidence: LOW,
            reasoning: "no pattern matched".into(),
        },
        [(intent, hits, _)] => Detection {
            intent: (*intent).to_owned(),
            confidence: HIGH,
            reasoning: format!("{hits} pattern(s) of `{intent}` matched, no other intent did"),
        },
        [(intent, hits, _), rest @ ..] => Detection {
            intent: (*intent).to_owned(),
            confidence: MEDIUM,
            reasoning: format!(
                "{hits} pattern(s) of `{intent}` matched, but so did {} other intent(s)",
                rest.len()
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;

    fn plan(intent: &str, patterns: &[&str], priority: i32) -> Plan {
        Plan {
            id: Default::default(),
            key: format!("{intent}.plan"),
            version: 1,
            intent: intent.into(),
            description: String::new(),
            priority,
            patterns: patterns.iter().map(|s| s.to_string()).collect(),
            steps: vec![],
            created_by: "t".into(),
            created_at: Utc::now(),
            capability: None,
        }
    }

    #[test]
    fn unique_match_is_high_ambiguous_is_medium_nothing_is_low() {
        let plans = [
            plan("insurance.loss_run_request", &["loss run", "dec page"], 100),
            plan("fleet.new_driver", &["driver", "cdl"], 100),
        ];
        let d = detect(
            "Please process the attached dec page for a loss run",
            &plans,
        );
        assert_eq!(
            (d.intent.as_str(), d.confidence),
            ("insurance.loss_run_request", HIGH)
        );
        let d = detect("new driver with CDL and a loss run", &plans);
        assert_eq!(
            (d.intent.as_str(), d.confidence),
            ("fleet.new_driver", MEDIUM)
        );
        let d = detect("hello there", &plans);
        assert_eq!((d.intent.as_str(), d.confidence), (FALLBACK_INTENT, LOW));
        assert_eq!(detect("  ", &plans).confidence, NONE);
    }
}
