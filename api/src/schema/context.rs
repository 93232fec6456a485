//! What a resolver reads from the request's context: the caller the
//! transport authenticated, its token's expiry and key's rate limit, the
//! client's address, the domain, and, for the fan-out, the one event to
//! render. Every area reaches the caller through [`principal`] and the
//! domain through [`domain`]; nothing here decides access beyond "signed
//! in or not" and "has this scope".

use std::sync::Arc;

use brainstem_domain::{Domain, Principal, TenantScope, rate_limit::Rate};

use crate::error::ResultExt;

/// The caller of one request or WebSocket connection, put in the context by
/// the transport. `None` is anonymous.
#[derive(Clone, Debug)]
pub struct Caller(pub Option<Principal>);

/// When the caller's bearer token expires, if it does.
#[derive(Clone, Copy, Debug)]
pub struct CallerExpiry(pub Option<chrono::DateTime<chrono::Utc>>);

/// The caller's API key's own rate limit, if it has one.
#[derive(Clone, Copy, Debug)]
pub struct CallerRateLimit(pub Option<Rate>);

/// How long a query or mutation may run (the schema's limit), for a
/// resolver that waits to stay inside it.
#[derive(Clone, Copy, Debug)]
pub struct RequestTimeout(pub std::time::Duration);

/// The address the request came from, when the transport knows it: what
/// anonymous callers are rate-limited by.
#[derive(Clone, Copy, Debug)]
pub struct ClientAddress(pub std::net::IpAddr);

/// The context data for an authenticated (or anonymous) caller.
pub fn caller_data(credential: Option<crate::auth::Credential>) -> async_graphql::Data {
    let mut data = async_graphql::Data::default();
    let expiry = credential.as_ref().and_then(|c| c.expires_at);
    data.insert(CallerRateLimit(
        credential.as_ref().and_then(|c| c.rate_limit),
    ));
    data.insert(CallerExpiry(expiry));
    data.insert(Caller(credential.map(|c| c.principal)));
    data
}

/// The principal, or `UNAUTHENTICATED`.
pub fn principal<'a>(ctx: &'a async_graphql::Context<'_>) -> async_graphql::Result<&'a Principal> {
    ctx.data_opt::<Caller>()
        .and_then(|c| c.0.as_ref())
        .ok_or(brainstem_domain::Error::Unauthenticated(
            "authentication required: send `Authorization: Bearer <token>`".into(),
        ))
        .gql()
}

/// The caller's tenant, if the caller holds `scope` there (API keys need the
/// scope itself; bearer tokens have every scope of their tenant role).
pub fn require_scope(
    ctx: &async_graphql::Context<'_>,
    scope: &str,
) -> async_graphql::Result<TenantScope> {
    principal(ctx)?.require_scope(scope).gql()
}

pub fn domain<'a>(ctx: &'a async_graphql::Context<'_>) -> &'a Domain {
    // The schema is always built with a Domain (see `build`), so this is present.
    ctx.data_unchecked::<Domain>()
}

/// Put in a rendering request's data: the `taskEvents` resolver then yields
/// this one event and nothing else (see `crate::fanout`).
pub struct RenderOne(pub Arc<brainstem_domain::tasks::TaskEvent>);
