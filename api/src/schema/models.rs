//! `languageModel`: which language model answers by default on this
//! server, so a client (the console) can say who wrote an answer before it
//! asks. Each answer also names its own model (`TaskResult.model`).

use async_graphql::{Context, Object, SimpleObject};

use super::context::{domain, principal};

/// The language model agent steps call unless a step names another.
#[derive(SimpleObject)]
pub struct LanguageModel {
    /// `offline` (built in, canned; no real model), `local` (on this
    /// machine) or `openai` (an OpenAI-compatible endpoint).
    pub provider: String,
    /// The model's name.
    pub model: String,
}

#[derive(Default)]
pub struct ModelQuery;

#[Object]
impl ModelQuery {
    /// Which language model answers by default. Any signed-in caller.
    async fn language_model(&self, ctx: &Context<'_>) -> async_graphql::Result<LanguageModel> {
        principal(ctx)?;
        let answering = &domain(ctx).answering_model;
        Ok(LanguageModel {
            provider: answering.provider.clone(),
            model: answering.model.clone(),
        })
    }
}
