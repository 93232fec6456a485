//! What a call costs: [`Prices`] by model name.
//!
//! Cost is `tokens × price per 1M tokens` from the configured price of the
//! model, in micros of the currency unit (so a price in units per million
//! tokens is exactly micros per token), computed in integers and rounded
//! once. A model without a price costs nothing; its tokens still count
//! toward budgets.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::TokenUsage;

/// A model's price, in currency units per million tokens (A.22).
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_million: f64,
    pub output_per_million: f64,
}

/// Prices by model name. A model without a price costs nothing (a local
/// model, say); its tokens still count toward budgets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Prices(BTreeMap<String, Price>);

impl Prices {
    /// Refuses negative or non-finite prices.
    pub fn new(prices: BTreeMap<String, Price>) -> Result<Self, String> {
        for (model, p) in &prices {
            for v in [p.input_per_million, p.output_per_million] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(format!(
                        "the price of `{model}` must be a number, 0 or more"
                    ));
                }
            }
        }
        Ok(Self(prices))
    }

    pub fn get(&self, model: &str) -> Option<Price> {
        self.0.get(model).copied()
    }

    /// Cost of `usage` on `model` in micros of the currency unit, rounded to
    /// the nearest micro. A price of P units per million tokens is P micros
    /// per token; prices are first turned into whole micros per million
    /// tokens so the sum is exact integer arithmetic.
    pub fn cost_micros(&self, model: &str, usage: TokenUsage) -> u64 {
        let Some(price) = self.get(model) else {
            return 0;
        };
        let per_million = |units: f64| (units * 1_000_000.0).round() as u128;
        let total = u128::from(usage.input_tokens) * per_million(price.input_per_million)
            + u128::from(usage.output_tokens) * per_million(price.output_per_million);
        u64::try_from((total + 500_000) / 1_000_000).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_is_tokens_times_price_per_million_in_micros() {
        let prices = Prices::new(BTreeMap::from([
            (
                "gpt-4o".to_owned(),
                Price {
                    input_per_million: 2.50,
                    output_per_million: 10.00,
                },
            ),
            (
                "deepseek-chat".to_owned(),
                Price {
                    input_per_million: 0.14,
                    output_per_million: 0.28,
                },
            ),
        ]))
        .unwrap();
        let usage = |i, o| TokenUsage {
            input_tokens: i,
            output_tokens: o,
            cached_input_tokens: 0,
        };
        // 1M input tokens of gpt-4o cost 2.50 units = 2,500,000 micros.
        assert_eq!(prices.cost_micros("gpt-4o", usage(1_000_000, 0)), 2_500_000);
        // 1,000 in + 500 out = 2,500 + 5,000 micros.
        assert_eq!(prices.cost_micros("gpt-4o", usage(1_000, 500)), 7_500);
        // 0.14 per million: 3 tokens are 0.42 micros, rounded to 0; 4 are
        // 0.56, rounded to 1; the sum is rounded once, not per side.
        assert_eq!(prices.cost_micros("deepseek-chat", usage(3, 0)), 0);
        assert_eq!(prices.cost_micros("deepseek-chat", usage(4, 0)), 1);
        assert_eq!(prices.cost_micros("deepseek-chat", usage(2, 1)), 1);
        // No price, no cost.
        assert_eq!(prices.cost_micros("llama3", usage(1_000, 1_000)), 0);
        assert!(
            Prices::new(BTreeMap::from([(
                "x".to_owned(),
                Price {
                    input_per_million: -1.0,
                    output_per_million: 0.0
                }
            )]))
            .is_err()
        );
    }
}
