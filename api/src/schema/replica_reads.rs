//! Which database an operation reads from, when read replicas are
//! configured (`database_read_urls`; `brainstem_domain::replicas`).
//!
//! - A **mutation** runs on the primary, its own follow-up reads included,
//!   and its response carries the primary's position after it:
//!   `extensions.commitPosition` (every transport) and the
//!   `Brainstem-Commit-Position` header (HTTP).
//! - A **query** reads from a replica. One that names a position (request
//!   `extensions.readAfter`, or the `Brainstem-Read-After` header over HTTP)
//!   reads from a replica that has replayed it, waiting up to
//!   `replica_wait_ms` for one, else from the primary: a client that sends
//!   back its last write's position reads its writes.
//! - A **subscription** reads its replay and catch-ups from a replica that
//!   has replayed the primary's position at the moment it subscribed (and
//!   the client's `readAfter`), so its replay misses nothing committed
//!   before; a catch-up the replica cannot serve yet reads the primary
//!   (`Tasks::events_through`).
//!
//! Only the services a read uses move to the replica
//! (`Domain::reading_from`); the rest of the operation's domain, and so
//! anything that writes (the audit of a platform admin's read), stays on the
//! primary.

use std::sync::Arc;

use async_graphql::{Request, Response, ServerResult, Value, parser::types::OperationType};
use brainstem_domain::{
    Domain,
    replicas::{Lsn, Replicas},
};

use crate::error::to_server_error;

/// The request extension naming the position a read must see.
pub const READ_AFTER: &str = "readAfter";
/// The HTTP header of [`READ_AFTER`].
pub const READ_AFTER_HEADER: &str = "brainstem-read-after";
/// The response extension naming the primary's position after a write.
pub const COMMIT_POSITION: &str = "commitPosition";
/// The HTTP header of [`COMMIT_POSITION`].
pub const COMMIT_POSITION_HEADER: &str = "brainstem-commit-position";

/// The replicas, and the domain reading from each (same order).
pub struct ReadRouting {
    replicas: Arc<Replicas>,
    domains: Vec<Domain>,
}

impl ReadRouting {
    pub fn new(replicas: Arc<Replicas>, primary: &Domain) -> Self {
        let domains = replicas
            .connections()
            .map(|db| primary.reading_from(db.clone()))
            .collect();
        Self { replicas, domains }
    }

    /// The domain an operation of `kind` reads from, when not the
    /// primary's.
    pub async fn domain_for(
        &self,
        kind: OperationType,
        request: &Request,
    ) -> ServerResult<Option<Domain>> {
        let asked = read_after(request)?;
        let after = match kind {
            OperationType::Mutation => return Ok(None),
            OperationType::Query => asked,
            OperationType::Subscription => match self.replicas.position().await {
                Ok(now) => Some(asked.map_or(now, |asked| asked.max(now))),
                Err(err) => {
                    tracing::warn!(%err, "a subscription reads from the primary");
                    return Ok(None);
                }
            },
        };
        Ok(self
            .replicas
            .choose(after)
            .await
            .and_then(|i| self.domains.get(i).cloned()))
    }

    /// Add the primary's position to a mutation's response.
    pub async fn mark_position(&self, response: &mut Response) {
        match self.replicas.position().await {
            Ok(position) => {
                let text = position.to_string();
                if let Ok(header) = text.parse() {
                    response.http_headers.insert(COMMIT_POSITION_HEADER, header);
                }
                response
                    .extensions
                    .insert(COMMIT_POSITION.to_owned(), Value::String(text));
            }
            Err(err) => tracing::warn!(%err, "a mutation's response has no commit position"),
        }
    }
}

/// The position the request says it must read after, if any.
fn read_after(request: &Request) -> ServerResult<Option<Lsn>> {
    match request.extensions.get(READ_AFTER) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => text.parse().map(Some).map_err(to_server_error),
        Some(_) => Err(to_server_error(brainstem_domain::Error::validation(
            format!("`extensions.{READ_AFTER}` must be a commit position string"),
        ))),
    }
}

/// Put a read-after position given out of band (an HTTP header) into the
/// request, unless it names one itself.
pub fn set_read_after(request: &mut Request, position: &str) {
    request
        .extensions
        .entry(READ_AFTER.to_owned())
        .or_insert_with(|| Value::String(position.to_owned()));
}
