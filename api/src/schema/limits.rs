//! The checks that apply [`crate::cost`] to every operation, on HTTP and
//! WebSocket alike, before anything walks the expanded document, and the
//! time limit of a query or mutation. `super::operation` runs them in order:
//!
//! - [`scan`] first, on the raw text: size, tokens, nesting. It comes
//!   before automatic persisted queries, which parse (and store) a document
//!   they are sent.
//! - [`measure`] after the persisted-query lookup and the rate limiter, on
//!   the parsed document (async-graphql then reuses the parse): a document
//!   over the caller's budget is refused before async-graphql's own checks
//!   and validation, which walk the expansion.
//! - [`timed_out`] is the answer to a query or mutation still running past
//!   its time limit: its execution is dropped (its resolvers stop at their
//!   next `await`). Subscriptions are long-lived by nature and are not
//!   bounded.
//!
//! A refusal is a request error (`BAD_USER_INPUT`, no path): no resolver
//! has run. A `taskEvents` payload rendered for the WebSocket fan-out
//! ([`super::context::RenderOne`]) was measured when its subscriber
//! subscribed, so it is not measured again.

use std::time::Duration;

use async_graphql::{
    Response, ServerError, ServerResult, Variables, parser::types::ExecutableDocument,
    registry::Registry,
};
use brainstem_domain::Error;

use crate::{
    cost::{self, DocumentLimits, Refusal},
    error::{TIMEOUT, to_server_error},
};

fn refused(refusal: Refusal) -> ServerError {
    to_server_error(Error::Validation(refusal.0))
}

/// Refuses a document whose text is over the size, token or nesting limit.
pub fn scan(query: &str, limits: &DocumentLimits) -> ServerResult<()> {
    cost::scan(query, limits).map(|_| ()).map_err(refused)
}

/// Refuses a document whose expanded cost is over the caller's budget
/// (`anonymous` callers have a smaller one).
pub fn measure(
    document: &ExecutableDocument,
    registry: &Registry,
    variables: &Variables,
    limits: &DocumentLimits,
    anonymous: bool,
) -> ServerResult<()> {
    let cost = cost::measure(document, registry, variables, limits).map_err(refused)?;
    cost::check_budget(cost, limits, anonymous).map_err(refused)
}

/// The answer to an operation dropped at its time limit: one `TIMEOUT`
/// error, logged.
pub fn timed_out(limit: Duration, operation_name: Option<&str>) -> Response {
    tracing::warn!(
        operation = operation_name.unwrap_or("(anonymous)"),
        limit_ms = limit.as_millis() as u64,
        "a GraphQL operation ran past its time limit and was dropped"
    );
    let mut error = ServerError::new(
        format!(
            "the operation ran longer than its time limit of {} ms and was stopped",
            limit.as_millis()
        ),
        None,
    );
    error
        .extensions
        .get_or_insert_with(Default::default)
        .set("code", TIMEOUT);
    Response::from_errors(vec![error])
}
