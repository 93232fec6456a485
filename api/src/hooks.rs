//! `POST /hooks/{tenant}/{source}`: another system starts a task with a
//! signed delivery (see `brainstem_domain::hooks` for the signature, the
//! replay window and idempotency).
//!
//! Answers: `202 {"taskId", "duplicate"}` when a task started (or had
//! started for the same delivery); otherwise `{"error", "code"}` with `400`
//! (not a JSON object), `401` (unsigned, badly signed or outside the replay
//! window), `404` (no such hook), `413` (body over
//! `hooks::MAX_BODY_BYTES`, refused before it is read whole).

use axum::{
    body::Bytes,
    extract::{DefaultBodyLimit, Path, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::{MethodRouter, post},
};
use brainstem_domain::{
    Error,
    hooks::{self, Delivery},
};
use serde_json::json;

use crate::{ApiState, error::code_and_message};

/// The route, with its own body limit.
pub fn route() -> MethodRouter<ApiState> {
    post(receive).layer(DefaultBodyLimit::max(hooks::MAX_BODY_BYTES))
}

async fn receive(
    State(state): State<ApiState>,
    Path((tenant, source)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let delivery = Delivery {
        tenant: &tenant,
        source: &source,
        timestamp: header("x-brainstem-timestamp"),
        signature: header("x-brainstem-signature"),
        delivery_id: header("x-brainstem-delivery"),
        body: &body,
    };
    match state
        .domain
        .receive_hook(delivery, chrono::Utc::now())
        .await
    {
        Ok(accepted) => (
            StatusCode::ACCEPTED,
            axum::Json(json!({
                "taskId": accepted.task.to_string(),
                "duplicate": accepted.duplicate,
            })),
        )
            .into_response(),
        Err(err) => {
            let (code, message) = code_and_message(&err);
            let status = match err {
                Error::NotFound(_) => StatusCode::NOT_FOUND,
                Error::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
                Error::Validation(_) => StatusCode::BAD_REQUEST,
                Error::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            (status, axum::Json(json!({"error": message, "code": code}))).into_response()
        }
    }
}
