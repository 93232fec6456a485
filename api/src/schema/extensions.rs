//! The schema's own extensions besides the document limits: error codes on
//! every response, one DataLoader per operation, and the rate limits that
//! admit an operation before it is parsed.

use std::{
    sync::{Arc, OnceLock},
    time::Instant,
};

use async_graphql::{
    Request, Response, ServerResult,
    extensions::{Extension, ExtensionContext, ExtensionFactory, NextPrepareRequest, NextRequest},
};
use brainstem_domain::{Domain, rate_limit::RateLimiter};

use super::{
    context::{Caller, CallerRateLimit, ClientAddress},
    limits, loaders,
};
use crate::error::{ensure_codes, to_server_error};

/// Gives every error in every response an `extensions.code`. It keeps the
/// request's document text (after the persisted-query lookup fills it in)
/// so that a type error found while resolving can name its argument.
#[derive(Default)]
pub(super) struct ErrorCodes {
    query: OnceLock<String>,
}

impl ExtensionFactory for ErrorCodes {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(ErrorCodes::default())
    }
}

#[async_graphql::async_trait::async_trait]
impl Extension for ErrorCodes {
    async fn request(&self, ctx: &ExtensionContext<'_>, next: NextRequest<'_>) -> Response {
        let mut response = next.run(ctx).await;
        ensure_codes(&mut response.errors, self.query.get().map(String::as_str));
        response
    }

    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        let request = next.run(ctx, request).await?;
        let _ = self.query.set(request.query.clone());
        Ok(request)
    }
}

/// Gives each operation a DataLoader of its own. Batches then gather one
/// operation's keys only: a loader shared by concurrent operations would
/// merge their keys into ever larger batches that each waits for.
pub(super) struct RequestLoader {
    pub(super) domain: Domain,
    pub(super) delay: std::time::Duration,
}

impl ExtensionFactory for RequestLoader {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(RequestLoader {
            domain: self.domain.clone(),
            delay: self.delay,
        })
    }
}

#[async_graphql::async_trait::async_trait]
impl Extension for RequestLoader {
    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        let loader = loaders::Loaders::new(self.domain.clone(), self.delay);
        next.run(ctx, request.data(loader)).await
    }
}

/// Admits each operation through the caller's rate limits before it is
/// parsed (only its text's size and tokens are checked before): an
/// authenticated caller's key and tenant, an anonymous caller's address. It
/// runs after the persisted-query lookup, so a client's
/// `PersistedQueryNotFound` round trip costs it nothing.
pub(super) struct RateLimit(pub(super) Arc<RateLimiter>);

impl ExtensionFactory for RateLimit {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(RateLimit(self.0.clone()))
    }
}

#[async_graphql::async_trait::async_trait]
impl Extension for RateLimit {
    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        let now = Instant::now();
        match limits::data::<Caller>(ctx, &request).and_then(|c| c.0.as_ref()) {
            Some(principal) => {
                let key_rate = limits::data::<CallerRateLimit>(ctx, &request).and_then(|r| r.0);
                self.0
                    .check(principal, key_rate, now)
                    .map_err(to_server_error)?;
            }
            None => {
                if let Some(address) = limits::data::<ClientAddress>(ctx, &request) {
                    self.0
                        .check_anonymous(address.0, now)
                        .map_err(to_server_error)?;
                }
            }
        }
        next.run(ctx, request).await
    }
}
