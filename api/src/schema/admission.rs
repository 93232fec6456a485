//! What admits an operation before it is parsed: automatic persisted
//! queries and the caller's rate limits.
//!
//! - [`persisted_query`]: a request that names a document by its SHA-256
//!   (`extensions.persistedQuery`, version 1) gets it from the in-memory
//!   LRU of parsed documents, or fails with `PersistedQueryNotFound` (the
//!   exact message clients look for before they resend the text); a
//!   request that sends the text with its hash stores the parsed document.
//! - [`rate_limit`]: an authenticated caller's key and tenant, an anonymous
//!   caller's address. It runs after the persisted-query lookup, so a
//!   client's `PersistedQueryNotFound` round trip costs it nothing.
//!
//! The caller and address come from the request's data (HTTP) or the
//! connection's (WebSocket session data): see [`data`].

use std::{any::TypeId, time::Instant};

use async_graphql::{
    Data, Request, ServerError, ServerResult,
    extensions::apollo_persisted_queries::{CacheStorage, LruCacheStorage},
};
use brainstem_domain::rate_limit::RateLimiter;
use sha2::{Digest, Sha256};

use super::context::{Caller, CallerRateLimit, ClientAddress};
use crate::error::{PERSISTED_QUERY_NOT_FOUND, to_server_error};

/// Request data of type `T`, else the connection's.
pub fn data<'a, T: 'static + Send + Sync>(
    request: &'a Request,
    session: Option<&'a Data>,
) -> Option<&'a T> {
    let id = TypeId::of::<T>();
    request
        .data
        .get(&id)
        .or_else(|| session.and_then(|s| s.get(&id)))
        .and_then(|d| d.downcast_ref::<T>())
}

/// Resolves an automatic persisted query in place: the request then holds
/// the parsed document (and no text, when it was looked up).
pub async fn persisted_query(storage: &LruCacheStorage, request: &mut Request) -> ServerResult<()> {
    let Some(value) = request.extensions.remove("persistedQuery") else {
        return Ok(());
    };
    #[derive(serde::Deserialize)]
    struct PersistedQuery {
        version: i32,
        #[serde(rename = "sha256Hash")]
        sha256_hash: String,
    }
    let persisted: PersistedQuery = async_graphql::from_value(value).map_err(|_| {
        ServerError::new("Invalid \"PersistedQuery\" extension configuration.", None)
    })?;
    if persisted.version != 1 {
        return Err(ServerError::new(
            format!(
                "Only the \"PersistedQuery\" extension of version \"1\" is supported, and the \
                 current version is \"{}\".",
                persisted.version
            ),
            None,
        ));
    }
    if request.query.is_empty() {
        let document = storage
            .get(persisted.sha256_hash)
            .await
            .ok_or_else(|| ServerError::new(PERSISTED_QUERY_NOT_FOUND, None))?;
        request.set_parsed_query(document);
        return Ok(());
    }
    let hash = format!("{:x}", Sha256::digest(request.query.as_bytes()));
    if persisted.sha256_hash != hash {
        return Err(ServerError::new("provided sha does not match query", None));
    }
    let document = async_graphql::parser::parse_query(&request.query)?;
    storage.set(hash, document.clone()).await;
    request.set_parsed_query(document);
    Ok(())
}

/// Admits the operation through the caller's rate limits.
pub fn rate_limit(
    limiter: &RateLimiter,
    request: &Request,
    session: Option<&Data>,
) -> ServerResult<()> {
    let now = Instant::now();
    match data::<Caller>(request, session).and_then(|c| c.0.as_ref()) {
        Some(principal) => {
            let key_rate = data::<CallerRateLimit>(request, session).and_then(|r| r.0);
            limiter
                .check(principal, key_rate, now)
                .map_err(to_server_error)
        }
        None => match data::<ClientAddress>(request, session) {
            Some(address) => limiter
                .check_anonymous(address.0, now)
                .map_err(to_server_error),
            None => Ok(()),
        },
    }
}
