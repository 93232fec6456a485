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
//! - [`parse_recent`]: once admitted, a document sent as text is parsed,
//!   or taken from an LRU of the documents parsed lately.
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
/// the parsed document (and no text, when it was looked up). Whether the
/// request was one.
pub async fn persisted_query(
    storage: &LruCacheStorage,
    request: &mut Request,
) -> ServerResult<bool> {
    let Some(value) = request.extensions.remove("persistedQuery") else {
        return Ok(false);
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
        return Ok(true);
    }
    let hash = sha256_of(&request.query);
    if persisted.sha256_hash != hash {
        return Err(ServerError::new("provided sha does not match query", None));
    }
    let document = async_graphql::parser::parse_query(&request.query)?;
    storage.set(hash, document.clone()).await;
    request.set_parsed_query(document);
    Ok(true)
}

/// Parses the request's text once per recent document: a document whose
/// text was parsed lately is taken from `recent` (by the SHA-256 of its
/// text) rather than parsed again. Dashboards send the same few documents
/// over and over; parsing one took as long as a tenth of answering a page
/// of tasks (BENCHMARKS.md, *Read path*, run 9). Only short documents
/// (at most [`RECENT_DOCUMENT_BYTES`]) are kept, so what the cache can
/// hold stays small whatever callers send; a document that fails to parse
/// is not kept.
pub async fn parse_recent(recent: &LruCacheStorage, request: &mut Request) -> ServerResult<()> {
    if request.query.len() > RECENT_DOCUMENT_BYTES {
        let document = async_graphql::parser::parse_query(&request.query)?;
        request.set_parsed_query(document);
        return Ok(());
    }
    let hash = sha256_of(&request.query);
    let document = match recent.get(hash.clone()).await {
        Some(document) => document,
        None => {
            let document = async_graphql::parser::parse_query(&request.query)?;
            recent.set(hash, document.clone()).await;
            document
        }
    };
    request.set_parsed_query(document);
    Ok(())
}

/// The longest document text [`parse_recent`] keeps.
pub const RECENT_DOCUMENT_BYTES: usize = 2048;

/// The hex SHA-256 of a document's text (a persisted query's key).
fn sha256_of(text: &str) -> String {
    format!("{:x}", Sha256::digest(text.as_bytes()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_document_is_parsed_once_and_a_broken_one_is_not_kept() {
        let recent = LruCacheStorage::new(2);
        let text = "{ tasks { edges { node { id } } } }";
        let mut first = Request::new(text);
        parse_recent(&recent, &mut first).await.unwrap();
        let kept = recent.get(sha256_of(text)).await.expect("kept");
        assert_eq!(
            format!("{:?}", first.parsed_query().unwrap()),
            format!("{kept:?}")
        );
        let mut again = Request::new(text);
        parse_recent(&recent, &mut again).await.unwrap();
        assert_eq!(
            format!("{:?}", again.parsed_query().unwrap()),
            format!("{kept:?}")
        );

        let broken = "{ tasks { ";
        let error = parse_recent(&recent, &mut Request::new(broken))
            .await
            .unwrap_err();
        assert!(error.message.contains("expected"), "{}", error.message);
        assert!(recent.get(sha256_of(broken)).await.is_none());

        let long = format!(
            "{{ {} }}",
            "__typename ".repeat(RECENT_DOCUMENT_BYTES / 11 + 1)
        );
        let mut request = Request::new(long.clone());
        parse_recent(&recent, &mut request).await.unwrap();
        assert!(request.parsed_query().is_ok());
        assert!(
            recent.get(sha256_of(&long)).await.is_none(),
            "a long one is not kept"
        );
    }
}
