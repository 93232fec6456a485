//! The schema extensions that apply [`crate::cost`] to every operation, on
//! HTTP and WebSocket alike, before anything walks the expanded document.
//!
//! - [`ScanDocument`] runs first, on the raw text: size, tokens, nesting.
//!   It sits before automatic persisted queries, which parse (and store) a
//!   document they are sent.
//! - [`MeasureDocument`] runs after the persisted-query lookup and the rate
//!   limiter: it parses the document (async-graphql then reuses the parse)
//!   and refuses it over the caller's budget, before async-graphql's own
//!   checks and validation, which walk the expansion.
//! - [`Deadline`] bounds how long a query or mutation runs: past its time
//!   limit the execution is dropped (its resolvers stop at their next
//!   `await`) and the answer is one `TIMEOUT` error. Subscriptions are
//!   long-lived by nature and are not bounded here.
//!
//! A refusal is a request error (`BAD_USER_INPUT`, no path): no resolver
//! has run. A `taskEvents` payload rendered for the WebSocket fan-out
//! ([`super::context::RenderOne`]) was measured when its subscriber
//! subscribed, so it is not measured again.

use std::{any::TypeId, sync::Arc, time::Duration};

use async_graphql::{
    Request, Response, ServerError, ServerResult,
    extensions::{Extension, ExtensionContext, ExtensionFactory, NextExecute, NextPrepareRequest},
};
use brainstem_domain::Error;

use super::context::{Caller, RenderOne};
use crate::{
    cost::{self, DocumentLimits, Refusal},
    error::{TIMEOUT, to_server_error},
};

fn refused(refusal: Refusal) -> async_graphql::ServerError {
    to_server_error(Error::Validation(refusal.0))
}

/// Refuses a document whose text is over the size, token or nesting limit.
pub struct ScanDocument(pub DocumentLimits);

impl ExtensionFactory for ScanDocument {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(ScanDocument(self.0))
    }
}

#[async_graphql::async_trait::async_trait]
impl Extension for ScanDocument {
    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        cost::scan(&request.query, &self.0).map_err(refused)?;
        next.run(ctx, request).await
    }
}

/// Refuses a document whose expanded cost is over the caller's budget.
pub struct MeasureDocument(pub DocumentLimits);

impl ExtensionFactory for MeasureDocument {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(MeasureDocument(self.0))
    }
}

/// Request data of type `T`, else the connection's (WebSocket session
/// data): what `ctx.data_opt` finds once the request has started, for the
/// `prepare_request` hook, which runs before.
pub(crate) fn data<'a, T: 'static + Send + Sync>(
    ctx: &'a ExtensionContext<'_>,
    request: &'a Request,
) -> Option<&'a T> {
    request
        .data
        .get(&TypeId::of::<T>())
        .and_then(|d| d.downcast_ref::<T>())
        .or_else(|| ctx.data_opt::<T>())
}

#[async_graphql::async_trait::async_trait]
impl Extension for MeasureDocument {
    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        mut request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        if data::<RenderOne>(ctx, &request).is_none() {
            let anonymous = data::<Caller>(ctx, &request).is_none_or(|c| c.0.is_none());
            let variables = request.variables.clone();
            let doc = request.parsed_query()?;
            let cost = cost::measure(doc, &ctx.schema_env.registry, &variables, &self.0)
                .map_err(refused)?;
            cost::check_budget(cost, &self.0, anonymous).map_err(refused)?;
        }
        next.run(ctx, request).await
    }
}

/// Drops a query or mutation still running after its time limit.
pub struct Deadline(pub Duration);

impl ExtensionFactory for Deadline {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(Deadline(self.0))
    }
}

#[async_graphql::async_trait::async_trait]
impl Extension for Deadline {
    async fn execute(
        &self,
        ctx: &ExtensionContext<'_>,
        operation_name: Option<&str>,
        next: NextExecute<'_>,
    ) -> Response {
        match tokio::time::timeout(self.0, next.run(ctx, operation_name)).await {
            Ok(response) => response,
            Err(_) => {
                tracing::warn!(
                    operation = operation_name.unwrap_or("(anonymous)"),
                    limit_ms = self.0.as_millis() as u64,
                    "a GraphQL operation ran past its time limit and was dropped"
                );
                let mut error = ServerError::new(
                    format!(
                        "the operation ran longer than its time limit of {} ms and was stopped",
                        self.0.as_millis()
                    ),
                    None,
                );
                error
                    .extensions
                    .get_or_insert_with(Default::default)
                    .set("code", TIMEOUT);
                Response::from_errors(vec![error])
            }
        }
    }
}
