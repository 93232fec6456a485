//! Rules-first intent detection: each plan declares regular-expression
//! patterns for its intent; the input text is matched against all of them.
//! No model is needed. Each plan version's patterns are compiled once and
//! cached ([`PatternCache`]); publishing bounds their number and size.
//!
//! Confidence, as numbers:
//! - **high** (0.95): exactly one intent matches;
//! - **medium** (0.6): several intents match; the one with the most
//!   matching patterns (then the highest plan priority) wins;
//! - **low** (0.3): nothing matches; the fallback `general_instruction`;
//! - **none** (0.0): there is no text to classify.
//!
//! With the default threshold of 0.8 only a unique match runs unattended.
//!
//! **LLM detection** (`intent_detector = "llm"`, B.10's optional planner):
//! [`detect_with_model`] asks the configured model to pick one of the
//! tenant's plan intents and answer `{"intent": …, "confidence": …}`. On a
//! timeout, a model error, or an answer that is not such JSON naming a
//! candidate with a confidence in 0..=1, the rules decide, and the
//! reasoning says why.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::{
    catalogue::{
        patterns::PatternCache,
        plans::{FALLBACK_INTENT, Plan},
    },
    models::{
        llm::{Message, ModelClient},
        usage::Usage,
    },
};

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

/// Classify `text` against the patterns of `plans`, compiled through
/// `patterns`.
pub fn detect(text: &str, plans: &[Plan], patterns: &PatternCache) -> Detection {
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
        let hits = patterns.get(plan).hits(text);
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

/// Which detector the executor uses when a task names no intent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Detector {
    /// Patterns only; no model.
    #[default]
    Rules,
    /// The model, with the rules as the fallback.
    Llm,
}

/// The most characters of the input the model is shown.
const MAX_INPUT_CHARS: usize = 4000;

/// Ask the model to classify `text` among the intents of `plans`; the rules
/// decide when the model cannot. Returns the detection and the model's
/// usage (zero when no call completed).
pub async fn detect_with_model(
    client: &ModelClient,
    text: &str,
    plans: &[Plan],
    patterns: &PatternCache,
) -> (Detection, Usage) {
    // Nothing to classify, or nothing to choose from: no call.
    if text.trim().is_empty() || plans.is_empty() {
        return (detect(text, plans, patterns), Usage::default());
    }
    let mut candidates: BTreeMap<&str, &str> = BTreeMap::new();
    for plan in plans {
        let entry = candidates.entry(&plan.intent).or_insert("");
        if entry.is_empty() {
            *entry = &plan.description;
        }
    }
    candidates
        .entry(FALLBACK_INTENT)
        .or_insert("anything no other intent fits");
    let list: String = candidates
        .iter()
        .map(|(intent, description)| {
            if description.is_empty() {
                format!("- {intent}\n")
            } else {
                format!("- {intent}: {description}\n")
            }
        })
        .collect();
    let shown: String = text.chars().take(MAX_INPUT_CHARS).collect();
    let request = client.request(
        vec![
            Message::system(format!(
                "You route requests to intents. Answer with one JSON object and nothing else: \
                 {{\"intent\": \"<one of the listed intents>\", \"confidence\": <a number from 0 to 1>}}. \
                 Use \"{FALLBACK_INTENT}\" when no listed intent fits."
            )),
            Message::user(format!("Intents:\n{list}\nRequest:\n{shown}")),
        ],
        None,
        Some(100),
        Some(0.0),
    );
    let timeout = client.settings().intent_timeout;
    let answer = tokio::time::timeout(timeout, client.complete(request)).await;
    let (why, usage) = match answer {
        Err(_) => (
            format!("the model did not answer within {} s", timeout.as_secs()),
            Usage::default(),
        ),
        Ok(Err(err)) => (format!("the model failed ({err})"), Usage::default()),
        Ok(Ok(done)) => {
            let usage = done.step_usage();
            match parse_answer(&done.text, |i| candidates.contains_key(i)) {
                Ok((intent, confidence)) => {
                    let detection = Detection {
                        reasoning: format!("the model `{}` chose `{intent}`", done.model),
                        intent,
                        confidence,
                    };
                    return (detection, usage);
                }
                Err(why) => (format!("the model's answer was unusable ({why})"), usage),
            }
        }
    };
    tracing::info!(%why, "LLM intent detection fell back to the rules");
    let mut detection = detect(text, plans, patterns);
    detection.reasoning = format!("{why}; rules: {}", detection.reasoning);
    (detection, usage)
}

/// `{"intent": …, "confidence": …}` somewhere in `answer` (models like to
/// wrap JSON in prose or code fences), naming an intent `known` accepts.
fn parse_answer(answer: &str, known: impl Fn(&str) -> bool) -> Result<(String, f64), String> {
    let json = match (answer.find('{'), answer.rfind('}')) {
        (Some(start), Some(end)) if start < end => &answer[start..=end],
        _ => return Err("no JSON object".into()),
    };
    let value: Value = serde_json::from_str(json).map_err(|e| format!("invalid JSON: {e}"))?;
    let intent = value
        .get("intent")
        .and_then(Value::as_str)
        .ok_or("no `intent` string")?;
    if !known(intent) {
        return Err(format!("`{intent}` is not one of the tenant's intents"));
    }
    let confidence = value
        .get("confidence")
        .and_then(Value::as_f64)
        .filter(|c| (0.0..=1.0).contains(c))
        .ok_or("no `confidence` between 0 and 1")?;
    Ok((intent.to_owned(), confidence))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use async_trait::async_trait;
    use chrono::Utc;
    use futures_util::stream;

    use crate::models::llm::{
        Chunk, ChunkStream, CompletionRequest, LanguageModel, LlmError, LlmSettings,
    };

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
            archived_at: None,
        }
    }

    #[test]
    fn unique_match_is_high_ambiguous_is_medium_nothing_is_low() {
        let plans = [
            plan("insurance.loss_run_request", &["loss run", "dec page"], 100),
            plan("fleet.new_driver", &["driver", "cdl"], 100),
        ];
        let cache = PatternCache::default();
        let d = detect(
            "Please process the attached dec page for a loss run",
            &plans,
            &cache,
        );
        assert_eq!(
            (d.intent.as_str(), d.confidence),
            ("insurance.loss_run_request", HIGH)
        );
        let d = detect("new driver with CDL and a loss run", &plans, &cache);
        assert_eq!(
            (d.intent.as_str(), d.confidence),
            ("fleet.new_driver", MEDIUM)
        );
        let d = detect("hello there", &plans, &cache);
        assert_eq!((d.intent.as_str(), d.confidence), (FALLBACK_INTENT, LOW));
        assert_eq!(detect("  ", &plans, &cache).confidence, NONE);
    }

    /// Answers every request with a fixed text.
    struct Says(&'static str);

    #[async_trait]
    impl LanguageModel for Says {
        fn provider(&self) -> &str {
            "says"
        }
        async fn stream(&self, _r: &CompletionRequest) -> Result<ChunkStream, LlmError> {
            Ok(Box::pin(stream::iter([Ok(Chunk::Delta(
                self.0.to_owned(),
            ))])))
        }
    }

    fn model_says(answer: &'static str) -> ModelClient {
        ModelClient::new(Arc::new(Says(answer)), LlmSettings::default())
    }

    #[tokio::test]
    async fn the_model_picks_among_the_tenants_intents() {
        let plans = [
            plan("insurance.loss_run_request", &["loss run"], 100),
            plan("fleet.new_driver", &["driver"], 100),
        ];
        let client = model_says(
            "Sure! ```json\n{\"intent\": \"fleet.new_driver\", \"confidence\": 0.9}\n```",
        );
        let (d, usage) = detect_with_model(
            &client,
            "we hired someone to drive",
            &plans,
            &PatternCache::default(),
        )
        .await;
        assert_eq!((d.intent.as_str(), d.confidence), ("fleet.new_driver", 0.9));
        assert!(usage.input_tokens > 0 && usage.output_tokens > 0);
    }

    #[tokio::test]
    async fn bad_model_answers_fall_back_to_the_rules() {
        let plans = [plan("insurance.loss_run_request", &["loss run"], 100)];
        for answer in [
            "I think it is a loss run",
            "{\"intent\": \"made.up\", \"confidence\": 0.99}",
            "{\"intent\": \"insurance.loss_run_request\", \"confidence\": 7}",
            "{\"intent\": \"insurance.loss_run_request\"",
        ] {
            let (d, _) = detect_with_model(
                &model_says(answer),
                "send the loss run",
                &plans,
                &PatternCache::default(),
            )
            .await;
            assert_eq!(
                (d.intent.as_str(), d.confidence),
                ("insurance.loss_run_request", HIGH),
                "{answer}"
            );
            assert!(d.reasoning.contains("unusable"), "{}", d.reasoning);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_model_falls_back_to_the_rules() {
        struct Silent;
        #[async_trait]
        impl LanguageModel for Silent {
            fn provider(&self) -> &str {
                "silent"
            }
            async fn stream(&self, _r: &CompletionRequest) -> Result<ChunkStream, LlmError> {
                Ok(Box::pin(stream::pending()))
            }
        }
        let client = ModelClient::new(Arc::new(Silent), LlmSettings::default());
        let plans = [plan("fleet.new_driver", &["driver"], 100)];
        let (d, usage) =
            detect_with_model(&client, "new driver", &plans, &PatternCache::default()).await;
        assert_eq!(
            (d.intent.as_str(), d.confidence),
            ("fleet.new_driver", HIGH)
        );
        assert!(
            d.reasoning.contains("did not answer within 10 s"),
            "{}",
            d.reasoning
        );
        assert_eq!(usage, Usage::default());
    }
}
