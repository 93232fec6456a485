//! File uploads: `POST /graphql` as `multipart/form-data`, read by the
//! GraphQL multipart request specification (fields `operations`, `map`,
//! then the files), into a request whose `Upload` variables hold the files.
//! One file per request; it is read into memory.
//!
//! Invariants (what an upload may not weaken, and what `http` checks
//! before the body is read):
//! - **No cross-site request.** A browser sends `multipart/form-data`
//!   without a preflight, so such a request must carry a header no simple
//!   request can ([`PREFLIGHT_HEADERS`], as Apollo requires); the server
//!   authenticates by header only (`Authorization` or `X-Api-Key`, never a
//!   cookie), and an upload must present a credential.
//! - **Bounded.** The file is at most the limit it is read under (a larger
//!   one is `BAD_USER_INPUT` when reading passes it), `operations` at most
//!   [`MAX_OPERATIONS_BYTES`], `map` at most [`MAX_MAP_BYTES`], and the
//!   whole body at most [`request_limit`]; the edge refuses a larger
//!   declared body with `413` before the route runs.
//! - After reading, the request runs the pipeline every request runs
//!   (document limits, admission and rate limits, the cost pass, the
//!   caller's scopes): an upload is an ordinary operation with a file.

use std::collections::HashMap;

use async_graphql::UploadValue;
use axum::{
    body::{Body, Bytes},
    http::{HeaderMap, header},
};
use brainstem_domain::Error;

/// Headers of which one (with any value) must come with a multipart
/// request: a browser sends neither without a CORS preflight.
pub const PREFLIGHT_HEADERS: [&str; 2] = ["apollo-require-preflight", "x-apollo-operation-name"];
/// Largest `operations` field: the document and its variables.
pub const MAX_OPERATIONS_BYTES: usize = 1024 * 1024;
/// Largest `map` field.
pub const MAX_MAP_BYTES: usize = 64 * 1024;
/// Room for the multipart framing (boundaries and part headers).
const FRAMING_BYTES: usize = 64 * 1024;

/// The largest multipart body whose file is at most `max_file_bytes`.
pub fn request_limit(max_file_bytes: usize) -> usize {
    max_file_bytes
        .saturating_add(MAX_OPERATIONS_BYTES)
        .saturating_add(MAX_MAP_BYTES)
        .saturating_add(FRAMING_BYTES)
}

/// Whether a request's body is `multipart/form-data`.
pub fn is_multipart(headers: &HeaderMap) -> bool {
    content_type(headers).is_some_and(|ct| {
        ct.trim_start()
            .to_ascii_lowercase()
            .starts_with("multipart/form-data")
    })
}

/// Whether the request carries a header that forces a browser's preflight.
pub fn has_preflight_header(headers: &HeaderMap) -> bool {
    PREFLIGHT_HEADERS.iter().any(|name| {
        headers
            .get(*name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| !v.trim().is_empty())
    })
}

fn content_type(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
}

/// Read a multipart body into a GraphQL request whose file, at most
/// `max_file_bytes`, is in the variable the `map` names.
pub async fn read(
    headers: &HeaderMap,
    body: Body,
    max_file_bytes: usize,
) -> Result<async_graphql::Request, Error> {
    let boundary = content_type(headers)
        .and_then(|ct| multer::parse_boundary(ct).ok())
        .ok_or_else(|| Error::validation("a multipart request needs a boundary"))?;
    let limits = multer::SizeLimit::new()
        .whole_stream(request_limit(max_file_bytes) as u64)
        .per_field(max_file_bytes as u64)
        .for_field("operations", MAX_OPERATIONS_BYTES as u64)
        .for_field("map", MAX_MAP_BYTES as u64);
    let mut multipart = multer::Multipart::with_constraints(
        body.into_data_stream(),
        boundary,
        multer::Constraints::new().size_limit(limits),
    );
    let mut request: Option<async_graphql::Request> = None;
    let mut map: Option<HashMap<String, Vec<String>>> = None;
    let mut file: Option<(String, UploadValue)> = None;
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|e| malformed(e, max_file_bytes))?
    {
        let name = field.name().unwrap_or_default().to_owned();
        match name.as_str() {
            "operations" => {
                let bytes = field
                    .bytes()
                    .await
                    .map_err(|e| malformed(e, max_file_bytes))?;
                request = Some(serde_json::from_slice(&bytes).map_err(|e| {
                    Error::validation(format!(
                        "`operations` is not one GraphQL request in JSON: {e}"
                    ))
                })?);
            }
            "map" => {
                let bytes = field
                    .bytes()
                    .await
                    .map_err(|e| malformed(e, max_file_bytes))?;
                map = Some(serde_json::from_slice(&bytes).map_err(|e| {
                    Error::validation(format!(
                        "`map` must map each file's field name to its variable paths: {e}"
                    ))
                })?);
            }
            _ => {
                if request.is_none() || map.is_none() {
                    return Err(Error::validation(
                        "send `operations`, then `map`, then the file",
                    ));
                }
                if file.is_some() {
                    return Err(Error::validation("a request takes one file"));
                }
                let filename = field.file_name().unwrap_or_default().to_owned();
                let content_type = field.content_type().map(ToString::to_string);
                let content: Bytes = field
                    .bytes()
                    .await
                    .map_err(|e| malformed(e, max_file_bytes))?;
                file = Some((
                    name,
                    UploadValue {
                        filename,
                        content_type,
                        content,
                    },
                ));
            }
        }
    }
    let (Some(mut request), Some(map)) = (request, map) else {
        return Err(Error::validation(
            "a multipart request needs the fields `operations` and `map`",
        ));
    };
    if let Some((name, upload)) = file {
        let paths = map.get(&name).filter(|p| p.len() == 1).ok_or_else(|| {
            Error::validation(format!(
                "`map` must name one variable path for the file `{name}`"
            ))
        })?;
        let path = &paths[0];
        if !path.starts_with("variables.") {
            return Err(Error::validation(format!(
                "a file goes in a variable, not `{path}`"
            )));
        }
        request.set_upload(path, upload);
    } else if !map.is_empty() {
        return Err(Error::validation("`map` names a file the request lacks"));
    }
    Ok(request)
}

/// A multipart body that could not be read, as the caller's error.
fn malformed(err: multer::Error, max_file_bytes: usize) -> Error {
    match err {
        multer::Error::FieldSizeExceeded { field_name, .. }
            if !matches!(field_name.as_deref(), Some("operations" | "map")) =>
        {
            Error::validation(format!(
                "the file is over the limit of {max_file_bytes} bytes"
            ))
        }
        other => Error::validation(format!("the multipart body cannot be read: {other}")),
    }
}
