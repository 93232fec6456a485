//! Running one GraphQL operation: what happens around the schema's own
//! execution, the same on every transport (HTTP, WebSocket, the fan-out's
//! renders).
//!
//! In order: the document's text is scanned (size, tokens, nesting) before
//! anything parses it; an automatic persisted query is looked up or stored
//! and the caller's rate limits admit the operation, then a document sent
//! as text is parsed or found among those parsed lately
//! ([`super::admission`]);
//! the parsed document's expanded cost is measured against the caller's
//! budget ([`super::limits`]); the operation gets a DataLoader of its own
//! ([`super::loaders`]); a query or mutation runs under its time limit;
//! each response's fields are put in selection order ([`super::order`]);
//! every error gets an `extensions.code` ([`crate::error::ensure_codes`]).
//!
//! This runs here, around `Schema::execute`, and not as async-graphql
//! extensions: with any extension installed, async-graphql wraps every
//! field and list item in the extensions' `resolve` hooks (a boxed future
//! per extension per field, and a type lookup), which cost a nested list
//! page more than its resolvers did.
//!
//! Invariants:
//! - Nothing is parsed before the scan, and no resolver runs before the
//!   rate limit and the cost measure have admitted the operation.
//! - A refusal is a request error (no `data`, no path) with a code.
//! - Each operation has a loader of its own: batches never mix operations,
//!   and nothing cached outlives the operation.

use std::{sync::Arc, time::Duration};

use async_graphql::{
    Data, ObjectType, Request, Response, Schema, SchemaBuilder, SchemaEnv, ServerError,
    ServerResult, SubscriptionType,
    extensions::{
        Extension, ExtensionContext, ExtensionFactory, NextPrepareRequest,
        apollo_persisted_queries::LruCacheStorage,
    },
    parser::types::{DocumentOperations, ExecutableDocument, OperationType},
};
use brainstem_domain::{Domain, rate_limit::RateLimiter};
use futures_util::{
    FutureExt, StreamExt,
    future::BoxFuture,
    stream::{self, BoxStream},
};
use tokio::sync::OnceCell;

use super::{
    admission::{self, data},
    context::{Caller, RenderOne},
    limits, loaders, order,
    replica_reads::ReadRouting,
};
use crate::{cost::DocumentLimits, error::ensure_codes};

/// What runs around every operation of one schema.
pub struct Pipeline {
    /// A twin of the schema, with the one extension that hands out its
    /// type registry (see [`registry_of`]).
    twin: Box<dyn Fn() -> BoxFuture<'static, Option<SchemaEnv>> + Send + Sync>,
    registry: OnceCell<Option<SchemaEnv>>,
    document: DocumentLimits,
    /// Longest a query or mutation may run.
    request_timeout: Duration,
    /// How long the loader gathers keys before it queries.
    batch_delay: Duration,
    limiter: Arc<RateLimiter>,
    persisted_queries: LruCacheStorage,
    /// The documents parsed lately, by the SHA-256 of their text.
    recent_documents: LruCacheStorage,
    domain: Domain,
    /// Read replicas, when configured.
    reads: Option<ReadRouting>,
}

/// How many recently parsed documents a schema keeps (each of at most
/// `admission::RECENT_DOCUMENT_BYTES`).
const RECENT_DOCUMENTS: usize = 64;

/// An operation admitted to run.
struct Admitted {
    request: Request,
    /// Its parsed document, for the selection order.
    document: Arc<ExecutableDocument>,
    /// Its text, for error messages that name an argument.
    query: Arc<str>,
    kind: OperationType,
}

impl Pipeline {
    /// `twin` is the schema's builder with nothing added: its registry is
    /// what documents are measured against.
    pub fn new<Q, M, S>(
        twin: impl Fn() -> SchemaBuilder<Q, M, S> + Send + Sync + 'static,
        document: DocumentLimits,
        request_timeout: Duration,
        batch_delay: Duration,
        limiter: Arc<RateLimiter>,
        persisted_queries: LruCacheStorage,
        domain: Domain,
    ) -> Self
    where
        Q: ObjectType + 'static,
        M: ObjectType + 'static,
        S: SubscriptionType + 'static,
    {
        Self {
            twin: Box::new(move || registry_of(twin().extension(HandOutRegistry).finish()).boxed()),
            registry: OnceCell::new(),
            document,
            request_timeout,
            batch_delay,
            limiter,
            persisted_queries,
            recent_documents: LruCacheStorage::new(RECENT_DOCUMENTS),
            domain,
            reads: None,
        }
    }

    /// Queries and subscriptions read from these replicas.
    pub fn reading_from(mut self, reads: ReadRouting) -> Self {
        self.reads = Some(reads);
        self
    }

    /// Runs a query or mutation (over HTTP): one response.
    pub async fn execute<Q, M, S>(&self, schema: &Schema<Q, M, S>, request: Request) -> Response
    where
        Q: ObjectType + 'static,
        M: ObjectType + 'static,
        S: SubscriptionType + 'static,
    {
        let admitted = match self.admit(request, None).await {
            Ok(admitted) => admitted,
            Err(error) => return refusal(error),
        };
        let name = admitted.request.operation_name.clone();
        let mut response = match tokio::time::timeout(
            self.request_timeout,
            schema.execute(admitted.request),
        )
        .await
        {
            Ok(response) => response,
            Err(_) => limits::timed_out(self.request_timeout, name.as_deref()),
        };
        self.mark_position(admitted.kind, &mut response).await;
        finish(
            response,
            &admitted.document,
            name.as_deref(),
            &admitted.query,
        )
    }

    /// Runs any operation (over WebSocket, or a fan-out render) with the
    /// connection's `session` data: one response for a query or mutation,
    /// one per event for a subscription.
    pub fn execute_stream<Q, M, S>(
        self: &Arc<Self>,
        schema: &Schema<Q, M, S>,
        request: Request,
        session: Option<Arc<Data>>,
    ) -> BoxStream<'static, Response>
    where
        Q: ObjectType + 'static,
        M: ObjectType + 'static,
        S: SubscriptionType + 'static,
    {
        let pipeline = self.clone();
        let schema = schema.clone();
        stream::once(async move {
            let admitted = match pipeline.admit(request, session.as_deref()).await {
                Ok(admitted) => admitted,
                Err(error) => return stream::once(async move { refusal(error) }).boxed(),
            };
            let Admitted {
                request,
                document,
                query,
                kind,
            } = admitted;
            let name = request.operation_name.clone();
            let results = match session {
                Some(session) => schema.execute_stream_with_session_data(request, session),
                None => schema.execute_stream(request),
            };
            if kind == OperationType::Subscription {
                let name = name.or_else(|| order::subscription_name(&document));
                return results
                    .map(move |response| finish(response, &document, name.as_deref(), &query))
                    .boxed();
            }
            let limit = pipeline.request_timeout;
            stream::once(async move {
                let mut results = results;
                let mut response = match tokio::time::timeout(limit, results.next()).await {
                    Ok(Some(response)) => response,
                    Ok(None) => Response::from_errors(vec![ServerError::new(
                        "the operation produced no result",
                        None,
                    )]),
                    Err(_) => limits::timed_out(limit, name.as_deref()),
                };
                pipeline.mark_position(kind, &mut response).await;
                finish(response, &document, name.as_deref(), &query)
            })
            .boxed()
        })
        .flatten()
        .boxed()
    }

    /// Scan, persisted query, rate limit, cost, loader: the operation ready
    /// to run, or why it may not.
    async fn admit(&self, mut request: Request, session: Option<&Data>) -> ServerResult<Admitted> {
        limits::scan(&request.query, &self.document)?;
        let persisted = admission::persisted_query(&self.persisted_queries, &mut request).await?;
        admission::rate_limit(&self.limiter, &request, session)?;
        if !persisted {
            admission::parse_recent(&self.recent_documents, &mut request).await?;
        }
        let render = data::<RenderOne>(&request, session).is_some();
        let anonymous = data::<Caller>(&request, session).is_none_or(|c| c.0.is_none());
        let document = Arc::new(request.parsed_query()?.clone());
        // A fan-out render was measured when its subscriber subscribed.
        if !render {
            let registry = self
                .registry
                .get_or_init(|| (self.twin)())
                .await
                .as_ref()
                .ok_or_else(|| ServerError::new("the schema's registry is unavailable", None))?;
            limits::measure(
                &document,
                &registry.registry,
                &request.variables,
                &self.document,
                anonymous,
            )?;
        }
        let kind = operation_type(&document, request.operation_name.as_deref())
            .unwrap_or(OperationType::Query);
        let query: Arc<str> = request.query.as_str().into();
        let replica = match &self.reads {
            Some(reads) if !render => reads.domain_for(kind, &request).await?,
            _ => None,
        };
        let request = match replica {
            Some(domain) => request
                .data(loaders::Loaders::new(domain.clone(), self.batch_delay))
                .data(domain),
            None => request.data(loaders::Loaders::new(self.domain.clone(), self.batch_delay)),
        };
        Ok(Admitted {
            request,
            document,
            query,
            kind,
        })
    }
}

impl Pipeline {
    /// A mutation's response names the primary's position after it, when
    /// replicas serve reads.
    async fn mark_position(&self, kind: OperationType, response: &mut Response) {
        if let (Some(reads), OperationType::Mutation) = (&self.reads, kind) {
            reads.mark_position(response).await;
        }
    }
}

/// A request error: the response of an operation that did not run.
fn refusal(error: ServerError) -> Response {
    let mut response = Response::from_errors(vec![error]);
    ensure_codes(&mut response.errors, None);
    response
}

/// The response as clients get it: in selection order, every error coded.
fn finish(
    mut response: Response,
    document: &ExecutableDocument,
    operation_name: Option<&str>,
    query: &str,
) -> Response {
    order::in_selection_order(&mut response.data, document, operation_name);
    ensure_codes(&mut response.errors, Some(query));
    response
}

/// The type of the operation `name` selects, if the document has it.
fn operation_type(document: &ExecutableDocument, name: Option<&str>) -> Option<OperationType> {
    match (&document.operations, name) {
        (DocumentOperations::Single(op), _) => Some(op.node.ty),
        (DocumentOperations::Multiple(ops), Some(name)) => ops.get(name).map(|op| op.node.ty),
        (DocumentOperations::Multiple(ops), None) if ops.len() == 1 => {
            ops.values().next().map(|op| op.node.ty)
        }
        (DocumentOperations::Multiple(_), None) => None,
    }
}

/// The registry of `schema`, which must carry [`HandOutRegistry`]: the one
/// public way to reach a schema's types before execution is an extension's
/// context, so a twin schema runs one trivial request to hand it out.
async fn registry_of<Q, M, S>(schema: Schema<Q, M, S>) -> Option<SchemaEnv>
where
    Q: ObjectType + 'static,
    M: ObjectType + 'static,
    S: SubscriptionType + 'static,
{
    let slot = Arc::new(std::sync::Mutex::new(None));
    schema
        .execute(Request::new("{ __typename }").data(Slot(slot.clone())))
        .await;
    slot.lock().ok()?.take()
}

/// Where [`HandOutRegistry`] puts the schema's environment.
struct Slot(Arc<std::sync::Mutex<Option<SchemaEnv>>>);

/// Puts the schema's environment in the request's [`Slot`] and stops the
/// request.
struct HandOutRegistry;

impl ExtensionFactory for HandOutRegistry {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(HandOutRegistry)
    }
}

#[async_graphql::async_trait::async_trait]
impl Extension for HandOutRegistry {
    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        request: Request,
        _next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        if let Some(Slot(slot)) = data::<Slot>(&request, None)
            && let Ok(mut slot) = slot.lock()
        {
            *slot = Some(ctx.schema_env.clone());
        }
        Err(ServerError::new("the registry was handed out", None))
    }
}
