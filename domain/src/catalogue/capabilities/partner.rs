//! Partner HTTP tools: endpoints a capability registers, called by the
//! executor like any other tool.
//!
//! **Resolution.** The [`ToolRegistry`](crate::catalogue::tool::ToolRegistry) is built
//! once at startup and knows only built-in (and embedded) tools. Keys that
//! start with `partner.` fall back to the catalogue: the integrity check and
//! the executor look them up (with [`super::partner_tools`]) when a plan is
//! checked and when a step runs, so a publish takes effect at once on every
//! replica, and a tenant uses them only while it subscribes to their
//! capability.
//!
//! **The call.** `POST <url>` with a JSON body
//!
//! ```json
//! {"tool": "partner.rates", "capability": "acme.quotes",
//!  "tenant": {"id": "…", "slug": "acme"}, "task_id": "…", "step_id": "rate",
//!  "attempt": 1, "idempotency_key": "<task id>:<step id>", "args": {…}}
//! ```
//!
//! and the headers `X-Brainstem-Timestamp` (Unix seconds),
//! `X-Brainstem-Signature: sha256=<hex>` (HMAC-SHA256 with the capability's
//! signing secret over `<timestamp>.<body>`), `Idempotency-Key` and
//! `X-Brainstem-Trace-Id` (with the same trace in a W3C `traceparent`). A
//! partner checks the signature and refuses stale timestamps.
//!
//! The call goes through the outbound client
//! ([`crate::kernel::outbound`]): the tool's URL must be on
//! `http_allowed_hosts` (host and port) and resolve to an allowed address,
//! a redirect to another origin is refused, and the answer is capped at
//! `http_max_response_bytes`. A refusal fails the step for good.
//!
//! **The answer.** A 2xx JSON body is the step's output (checked against the
//! tool's output schema when it has one). A timeout, a connection failure,
//! 429 or 5xx is a retryable failure (the step's retry policy applies); any
//! other status, or a body that is not JSON, fails the step for good.

use std::time::Duration;

use async_trait::async_trait;
use brainstem_entity::CapabilityId;
use chrono::Utc;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use super::PartnerToolDef;
use crate::{
    catalogue::tool::{Tool, ToolContext, ToolError, ToolOutput},
    kernel::{
        json_schema::{self, Mode},
        origin,
        outbound::CallFailure,
    },
};

pub const TIMESTAMP_HEADER: &str = "X-Brainstem-Timestamp";
pub const SIGNATURE_HEADER: &str = "X-Brainstem-Signature";

/// `sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`, keyed by `secret`.
pub fn signature(secret: &str, timestamp: i64, body: &[u8]) -> String {
    signing_mac(secret, timestamp, body)
        .map(|mac| format!("sha256={}", hex::encode(mac.finalize().into_bytes())))
        .unwrap_or_default()
}

/// The HMAC-SHA256 of `"<timestamp>.<body>"` keyed by `secret`, which
/// partner calls and inbound hooks (`runtime::hooks`) are signed with;
/// `None` never happens in practice (HMAC takes a key of any length).
pub fn signing_mac(secret: &str, timestamp: i64, body: &[u8]) -> Option<Hmac<Sha256>> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).ok()?;
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Some(mac)
}

/// A partner tool of the catalogue.
pub struct PartnerTool {
    def: PartnerToolDef,
    /// `None` while a definition is only being checked.
    owner: Option<(CapabilityId, String)>,
}

impl PartnerTool {
    pub fn new(def: PartnerToolDef, capability: CapabilityId, capability_key: String) -> Self {
        Self {
            def,
            owner: Some((capability, capability_key)),
        }
    }

    /// A definition being published: enough for the integrity check of the
    /// plans published with it, never called.
    pub(crate) fn unsigned(def: PartnerToolDef) -> Self {
        Self { def, owner: None }
    }

    fn limit(&self) -> Duration {
        Duration::from_millis(self.def.timeout_ms)
    }
}

#[async_trait]
impl Tool for PartnerTool {
    fn key(&self) -> &str {
        &self.def.key
    }

    fn description(&self) -> &str {
        &self.def.description
    }

    fn input_schema(&self) -> Value {
        self.def.input_schema.clone()
    }

    /// The request's own timeout fires first, with a clearer message; the
    /// executor's is a backstop a second later.
    fn retry(&self) -> Option<crate::catalogue::plans::RetryPolicy> {
        Some(
            self.def
                .retry
                .unwrap_or(crate::catalogue::plans::RetryPolicy::OUTGOING_CALLS),
        )
    }
    fn timeout(&self) -> Duration {
        self.limit() + Duration::from_secs(1)
    }

    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let key = &self.def.key;
        let Some((capability, capability_key)) = &self.owner else {
            return Err(ToolError::fatal(format!(
                "partner tool `{key}` is not published yet"
            )));
        };
        let secret = ctx
            .ports
            .capabilities
            .signing_secret(*capability)
            .await
            .map_err(|e| {
                tracing::error!(tool = %key, error = %e, "cannot open a capability's signing secret");
                ToolError::retryable(format!(
                    "the signing secret of capability `{capability_key}` is unavailable"
                ))
            })?;
        let body = json!({
            "tool": key,
            "capability": capability_key,
            "tenant": {"id": ctx.tenant.to_string(), "slug": ctx.tenant_slug},
            "task_id": ctx.task_id.to_string(),
            "step_id": ctx.step_id,
            "attempt": ctx.attempt,
            "idempotency_key": ctx.idempotency_key,
            "args": args,
        });
        let body = serde_json::to_vec(&body)
            .map_err(|e| ToolError::fatal(format!("cannot encode the request: {e}")))?;
        let timestamp = Utc::now().timestamp();
        let outbound = &ctx.settings.outbound;
        let mut request = outbound
            .request(reqwest::Method::POST, &self.def.url)?
            .timeout(self.limit())
            .header("Content-Type", "application/json")
            .header(TIMESTAMP_HEADER, timestamp.to_string())
            .header(SIGNATURE_HEADER, signature(&secret, timestamp, &body))
            .header("Idempotency-Key", &ctx.idempotency_key)
            .header("X-Brainstem-Trace-Id", &ctx.trace_id);
        if let Some(parent) = origin::traceparent(&ctx.trace_id) {
            request = request.header("traceparent", parent);
        }
        let timed_out = |f: CallFailure| {
            if f.timed_out {
                ToolError::retryable(format!(
                    "`{key}` timed out after {} ms",
                    self.def.timeout_ms
                ))
            } else if f.retryable {
                ToolError::retryable(format!("`{key}` could not be reached: {f}"))
            } else {
                ToolError::fatal(format!("`{key}`: {f}"))
            }
        };
        let response = outbound.send(request.body(body)).await.map_err(timed_out)?;
        let status = response.status().as_u16();
        let text = outbound.read(response).await.map_err(timed_out)?;
        let text = String::from_utf8_lossy(&text);
        match status {
            200..=299 => {}
            429 | 500..=599 => {
                return Err(ToolError::retryable(format!("`{key}` answered {status}")));
            }
            _ => return Err(ToolError::fatal(format!("`{key}` answered {status}"))),
        }
        let output: Value = serde_json::from_str(&text).map_err(|_| {
            ToolError::fatal(format!(
                "`{key}` answered {status} with a body that is not JSON"
            ))
        })?;
        if let Some(schema) = &self.def.output_schema {
            json_schema::validate(schema, &output, Mode::Runtime).map_err(|e| {
                ToolError::fatal(format!(
                    "the answer of `{key}` does not match its output schema: {}",
                    e.replacen("args", "output", 1)
                ))
            })?;
        }
        Ok(ToolOutput::with_output(
            output,
            format!("`{key}` answered {status}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_over_timestamp_dot_body() {
        let mut mac = Hmac::<Sha256>::new_from_slice(b"bcs_secret").unwrap();
        mac.update(b"1700000000.{\"a\":1}");
        let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        assert_eq!(
            signature("bcs_secret", 1_700_000_000, b"{\"a\":1}"),
            expected
        );
        assert_ne!(
            signature("bcs_other", 1_700_000_000, b"{\"a\":1}"),
            expected
        );
        assert_ne!(
            signature("bcs_secret", 1_700_000_001, b"{\"a\":1}"),
            expected
        );
    }
}
