//! Domain errors on the wire. This is the only place that sets
//! `extensions.code`; internal causes are logged here and never echoed.

use async_graphql::{ErrorExtensions, ServerError};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use brainstem_domain::Error;

pub const UNAUTHENTICATED: &str = "UNAUTHENTICATED";
pub const FORBIDDEN: &str = "FORBIDDEN";
pub const NOT_FOUND: &str = "NOT_FOUND";
pub const BAD_USER_INPUT: &str = "BAD_USER_INPUT";
pub const CONFLICT: &str = "CONFLICT";
pub const RATE_LIMITED: &str = "RATE_LIMITED";
/// The server could not do this now (the store is busy): nothing was
/// written, and the same request may be retried after `retryAfter` seconds.
pub const UNAVAILABLE: &str = "UNAVAILABLE";
/// A request body over the server's limit (`413`).
pub const PAYLOAD_TOO_LARGE: &str = "PAYLOAD_TOO_LARGE";
/// A request body that did not arrive in time (`408`).
pub const REQUEST_TIMEOUT: &str = "REQUEST_TIMEOUT";
/// How long a client should wait before retrying an `UNAVAILABLE` request.
pub const UNAVAILABLE_RETRY_AFTER_SECS: u64 = 1;
pub const INTERNAL: &str = "INTERNAL";
/// A query or mutation ran past its time limit and was stopped.
pub const TIMEOUT: &str = "TIMEOUT";
/// A response over HTTP would have been larger than its limit.
pub const RESPONSE_TOO_LARGE: &str = "RESPONSE_TOO_LARGE";

/// The message of async-graphql's persisted-query miss, which clients match.
pub const PERSISTED_QUERY_NOT_FOUND: &str = "PersistedQueryNotFound";

/// The code and client-facing message for a domain error.
/// The HTTP status of a request refused before it runs (a transport's
/// own refusal: `/graphql` before execution, `/mcp` before MCP).
pub fn http_status(err: &Error) -> StatusCode {
    match err {
        Error::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        Error::Forbidden(_) => StatusCode::FORBIDDEN,
        Error::NotFound(_) => StatusCode::NOT_FOUND,
        Error::Validation(_) => StatusCode::BAD_REQUEST,
        Error::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
        Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The headers HTTP asks of a refusal with `status`: when to retry (a rate
/// limit's own wait, or a while when unavailable) and how to authenticate.
pub fn refusal_headers(err: &Error, status: StatusCode, headers: &mut HeaderMap) {
    if let Error::RateLimited {
        retry_after_secs, ..
    } = err
    {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
    }
    if status == StatusCode::SERVICE_UNAVAILABLE {
        headers.insert(
            header::RETRY_AFTER,
            HeaderValue::from(UNAVAILABLE_RETRY_AFTER_SECS),
        );
    }
    if status == StatusCode::UNAUTHORIZED {
        headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
}

pub fn code_and_message(err: &Error) -> (&'static str, String) {
    match err {
        Error::Unauthenticated(m) => (UNAUTHENTICATED, m.clone()),
        Error::Forbidden(m) => (FORBIDDEN, m.clone()),
        Error::NotFound(_) => (NOT_FOUND, err.to_string()),
        Error::Validation(m) => (BAD_USER_INPUT, m.clone()),
        Error::Conflict(m) | Error::InvalidTransition(m) => (CONFLICT, m.clone()),
        Error::RateLimited { message, .. } => (RATE_LIMITED, message.clone()),
        Error::Unavailable(cause) => {
            tracing::warn!(%cause, "unavailable");
            (
                UNAVAILABLE,
                "the server is busy: nothing was changed; retry shortly".to_owned(),
            )
        }
        Error::Internal(cause) => {
            tracing::error!(%cause, "internal error");
            (INTERNAL, "internal error".to_owned())
        }
    }
}

/// Convert a domain error into a GraphQL error with a code.
pub fn to_gql(err: Error) -> async_graphql::Error {
    let (code, message) = code_and_message(&err);
    let retry_after = match err {
        Error::RateLimited {
            retry_after_secs, ..
        } => Some(retry_after_secs),
        Error::Unavailable(_) => Some(UNAVAILABLE_RETRY_AFTER_SECS),
        _ => None,
    };
    async_graphql::Error::new(message).extend_with(|_, ext| {
        ext.set("code", code);
        if let Some(secs) = retry_after {
            ext.set("retryAfter", secs);
        }
    })
}

/// A domain error as a request-level GraphQL error (no path), for code that
/// runs before execution, such as schema extensions.
pub fn to_server_error(err: Error) -> ServerError {
    let (code, message) = code_and_message(&err);
    let mut out = ServerError::new(message, None);
    let ext = out.extensions.get_or_insert_with(Default::default);
    ext.set("code", code);
    match err {
        Error::RateLimited {
            retry_after_secs, ..
        } => ext.set("retryAfter", retry_after_secs),
        Error::Unavailable(_) => ext.set("retryAfter", UNAVAILABLE_RETRY_AFTER_SECS),
        _ => {}
    }
    out
}

/// The `extensions.retryAfter` of an `UNAVAILABLE` error anywhere in the
/// response (a request error or a field's): such a response is `503`.
pub fn unavailable_retry_after(errors: &[ServerError]) -> Option<u64> {
    errors.iter().find_map(|e| {
        let ext = e.extensions.as_ref()?;
        match (ext.get("code"), ext.get("retryAfter")) {
            (Some(async_graphql::Value::String(c)), Some(async_graphql::Value::Number(n)))
                if c == UNAVAILABLE =>
            {
                n.as_u64()
            }
            _ => None,
        }
    })
}

/// The `extensions.retryAfter` of a rate-limited request error, if the
/// response has one.
pub fn retry_after(errors: &[ServerError]) -> Option<u64> {
    errors.iter().find_map(|e| {
        let ext = e.extensions.as_ref()?;
        let is_limited =
            matches!(ext.get("code"), Some(async_graphql::Value::String(c)) if c == RATE_LIMITED);
        match ext.get("retryAfter") {
            Some(async_graphql::Value::Number(n)) if is_limited && e.path.is_empty() => n.as_u64(),
            _ => None,
        }
    })
}

/// The body of a refusal made outside GraphQL execution (the HTTP edge, the
/// connection cap): one error with `code`, shaped like a GraphQL response.
pub fn refusal_body(code: &str, message: &str) -> String {
    serde_json::json!({"errors": [{"message": message, "extensions": {"code": code}}]}).to_string()
}

/// `.gql()` on a domain result, for resolvers.
pub trait ResultExt<T> {
    fn gql(self) -> async_graphql::Result<T>;
}

impl<T> ResultExt<T> for Result<T, Error> {
    fn gql(self) -> async_graphql::Result<T> {
        self.map_err(to_gql)
    }
}

/// A GraphQL error with a code, for input the API layer itself rejects.
pub fn coded(code: &'static str, message: impl Into<String>) -> async_graphql::Error {
    async_graphql::Error::new(message.into()).extend_with(|_, ext| ext.set("code", code))
}

pub fn has_code(err: &ServerError) -> bool {
    err.extensions
        .as_ref()
        .is_some_and(|ext| ext.get("code").is_some())
}

/// The error's `extensions.code`, if it has one.
pub fn code_of(err: &ServerError) -> Option<&str> {
    match err.extensions.as_ref()?.get("code")? {
        async_graphql::Value::String(code) => Some(code),
        _ => None,
    }
}

/// Give every error a code. Errors before execution (parse, validation,
/// limits) have no path and are the client's: `BAD_USER_INPUT`. So is a
/// value that fails to coerce to its argument's type during execution, found
/// at an argument's position in `query` (see [`crate::coercion`]). Any other
/// error raised during execution without a code escaped the mapping above: it
/// is logged and masked as `INTERNAL`.
pub fn ensure_codes(errors: &mut [ServerError], query: Option<&str>) {
    for err in errors.iter_mut().filter(|e| !has_code(e)) {
        // Automatic persisted queries: the hash is not (or no longer) in the
        // cache. Clients look for this exact message and then resend the
        // query text, so it stays; the code says what it is.
        let code = if err.path.is_empty() && err.message == PERSISTED_QUERY_NOT_FOUND {
            NOT_FOUND
        } else if err.path.is_empty() {
            BAD_USER_INPUT
        } else if let Some(site) = argument_site(err, query) {
            err.message = format!("invalid value for {}: {}", site.describe(), err.message);
            BAD_USER_INPUT
        } else {
            tracing::error!(message = %err.message, path = ?err.path, "uncoded resolver error");
            err.message = "internal error".to_owned();
            INTERNAL
        };
        err.extensions
            .get_or_insert_with(Default::default)
            .set("code", code);
    }
}

fn argument_site(err: &ServerError, query: Option<&str>) -> Option<crate::coercion::ArgumentSite> {
    let pos = *err.locations.first()?;
    crate::coercion::argument_at(query?, pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_causes_are_never_echoed() {
        let (code, message) = code_and_message(&Error::Internal("password=hunter2".into()));
        assert_eq!(code, INTERNAL);
        assert!(!message.contains("hunter2"));
    }

    #[test]
    fn each_variant_has_its_code() {
        let cases = [
            (Error::Unauthenticated("x".into()), UNAUTHENTICATED),
            (Error::Forbidden("x".into()), FORBIDDEN),
            (Error::NotFound("x".into()), NOT_FOUND),
            (Error::Validation("x".into()), BAD_USER_INPUT),
            (Error::Conflict("x".into()), CONFLICT),
            (Error::InvalidTransition("x".into()), CONFLICT),
            (Error::Unavailable("database is locked".into()), UNAVAILABLE),
        ];
        for (err, code) in cases {
            assert_eq!(code_and_message(&err).0, code);
        }
    }
}
