//! The built-in tools that call out over HTTP: `http_request` and
//! `delegate`. Both go through the outbound client
//! ([`crate::kernel::outbound`]), which owns the allow-list, the address
//! rules, redirects and the answer's size cap.
//!
//! **Credentials from connections.** A plan does not carry a secret in
//! clear: `http_request`'s `headers_from_connection` names, per header, a
//! tenant connection whose sealed secret becomes the header's value
//! (`{"Authorization": {"connection": "crm", "field": "token", "prefix":
//! "Bearer "}}`, or just `{"X-Api-Key": "crm"}` when the secret is one
//! string). A connection lends its secret only to the hosts its config
//! lists in `allowed_hosts` (entries in the `http_allowed_hosts` form),
//! so a call steered to another allowed host carries no credential.
//!
//! Invariant: a value injected from a connection never reaches what is
//! stored. The step's arguments hold only the reference, and the tool
//! removes every injected value, and the value of every plan header whose
//! name looks like a credential ([`redact::is_credential_header`]), from
//! its output, its state changes and its error messages before returning
//! them ([`redact::scrub`]), should the server echo them back.

use std::time::Duration;

use async_trait::async_trait;
use brainstem_entity::TenantScope;
use reqwest::Method;
use serde_json::{Value, json};

use super::{Control, Tool, ToolContext, ToolError, ToolOutput};
use crate::kernel::{
    origin,
    outbound::{self, policy},
    redact,
};

/// Send a request; 5xx, 429, timeouts and connection errors are retryable,
/// other non-2xx answers and refusals are not.
async fn send(
    ctx: &ToolContext,
    method: Method,
    url: &str,
    body: Option<&Value>,
    headers: &[(String, String)],
) -> Result<(u16, Value), ToolError> {
    let outbound = &ctx.settings.outbound;
    let mut request = outbound
        .request(method, url)?
        .header("Idempotency-Key", &ctx.idempotency_key)
        .header("X-Brainstem-Trace-Id", &ctx.trace_id);
    if let Some(parent) = origin::traceparent(&ctx.trace_id) {
        request = request.header("traceparent", parent);
    }
    for (name, value) in headers {
        let (name, value) = outbound::plan_header(name, value)?;
        request = request.header(name, value);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = outbound.send(request).await?;
    let status = response.status().as_u16();
    let bytes = outbound.read(response).await?;
    let text = String::from_utf8_lossy(&bytes);
    let body = serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.into_owned()));
    match status {
        200..=299 => Ok((status, body)),
        500..=599 | 429 => Err(ToolError::retryable(format!(
            "the server answered {status}"
        ))),
        _ => Err(ToolError::fatal(format!("the server answered {status}"))),
    }
}

/// The plan's own headers: string values only.
fn plain_headers(args: &Value) -> Vec<(String, String)> {
    args.get("headers")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(name, value)| Some((name.clone(), value.as_str()?.to_owned())))
        .collect()
}

/// The headers `headers_from_connection` asks for, with their values
/// taken from the tenant's connections, and the secret values injected.
async fn connection_headers(
    ctx: &ToolContext,
    args: &Value,
    url: &str,
) -> Result<(Vec<(String, String)>, Vec<String>), ToolError> {
    let Some(wanted) = args
        .get("headers_from_connection")
        .and_then(Value::as_object)
    else {
        return Ok((Vec::new(), Vec::new()));
    };
    let connections = &ctx.ports.connections;
    let scope = TenantScope::new(ctx.tenant);
    let parsed_url = ctx.settings.outbound.check(url)?;
    let mut headers = Vec::new();
    let mut secrets = Vec::new();
    for (header, source) in wanted {
        let (name, field, prefix) = match source {
            Value::String(name) => (name.as_str(), None, ""),
            Value::Object(o) => (
                o.get("connection").and_then(Value::as_str).unwrap_or(""),
                o.get("field").and_then(Value::as_str),
                o.get("prefix").and_then(Value::as_str).unwrap_or(""),
            ),
            _ => ("", None, ""),
        };
        if name.is_empty() {
            return Err(ToolError::fatal(format!(
                "headers_from_connection.{header}: name a connection (`\"crm\"` or \
                 `{{\"connection\": \"crm\", \"field\": …, \"prefix\": …}}`)"
            )));
        }
        let connection = connections
            .resolve(scope, name)
            .await
            .map_err(|e| ToolError::fatal(format!("headers_from_connection.{header}: {e}")))?;
        // A secret goes only where its connection says: text steering an
        // agent's call to another allowed host must not carry it along.
        let hosts = super::string_list(&connection.config, "allowed_hosts");
        let lent = policy::Policy::new(&hosts, &[])
            .map(|p| p.lists(&parsed_url))
            .unwrap_or(false);
        if !lent {
            return Err(ToolError::fatal(format!(
                "connection `{name}` does not lend its secret to {} (its config's \
                 allowed_hosts)",
                parsed_url.origin().ascii_serialization()
            )));
        }
        let secret = connection.secret.as_ref().map(|s| s.expose());
        let value = match (secret, field) {
            (Some(Value::Object(o)), Some(field)) => o.get(field).and_then(Value::as_str),
            (Some(Value::String(s)), None) => Some(s.as_str()),
            (Some(Value::Object(o)), None) if o.len() == 1 => {
                o.values().next().and_then(Value::as_str)
            }
            _ => None,
        }
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            ToolError::fatal(format!(
                "connection `{name}` has no text secret{}",
                field.map(|f| format!(" field `{f}`")).unwrap_or_default()
            ))
        })?;
        secrets.push(value.to_owned());
        headers.push((header.clone(), format!("{prefix}{value}")));
    }
    Ok((headers, secrets))
}

/// `http_request`: call an allow-listed HTTP endpoint. Sends the step's
/// idempotency key as `Idempotency-Key`, so the endpoint can ignore repeats.
pub struct HttpRequest;

#[async_trait]
impl Tool for HttpRequest {
    fn key(&self) -> &str {
        "http_request"
    }
    fn description(&self) -> &str {
        "Call an HTTP endpoint on an allow-listed host; the response body is the output."
    }
    fn retry(&self) -> Option<crate::catalogue::plans::RetryPolicy> {
        Some(crate::catalogue::plans::RetryPolicy::OUTGOING_CALLS)
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "required": ["url"],
            "additionalProperties": false,
            "properties": {
                "url": {"type": "string", "minLength": 1},
                "method": {"enum": ["GET", "POST", "PUT", "PATCH", "DELETE"]},
                "headers": {"type": "object"},
                "headers_from_connection": {"type": "object"},
                "body": {},
                "save_as": {"type": "string", "minLength": 1}
            }
        })
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let url = args["url"].as_str().unwrap_or_default();
        let method = match args.get("method").and_then(Value::as_str).unwrap_or("GET") {
            "POST" => Method::POST,
            "PUT" => Method::PUT,
            "PATCH" => Method::PATCH,
            "DELETE" => Method::DELETE,
            _ => Method::GET,
        };
        let (mut headers, mut secrets) = connection_headers(&ctx, &args, url).await?;
        let plain = plain_headers(&args);
        // The plan's own credentials are kept out of what is stored too,
        // should the server echo them.
        secrets.extend(
            plain
                .iter()
                .filter(|(name, _)| redact::is_credential_header(name))
                .map(|(_, value)| value.clone()),
        );
        headers.splice(0..0, plain);
        let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
        let (status, body) = send(&ctx, method.clone(), url, args.get("body"), &headers)
            .await
            .map_err(|e| ToolError {
                message: redact::scrub_text(&e.message, &secrets),
                ..e
            })?;
        let body = redact::scrub(&body, &secrets);
        let path = reqwest::Url::parse(url)
            .map(|u| u.path().to_owned())
            .unwrap_or_default();
        let mut output = ToolOutput::with_output(
            json!({"status": status, "body": body}),
            format!("{method} {path} answered {status}"),
        );
        if let Some(key) = args.get("save_as").and_then(Value::as_str) {
            output.state.insert(key.to_owned(), body);
        }
        Ok(output)
    }
}

/// `delegate`: hand the step to an external system. POSTs
/// `{task_id, step_id, callback_url, token, payload}` to an allow-listed URL;
/// the system later completes or fails the step through the callback.
pub struct Delegate;

#[async_trait]
impl Tool for Delegate {
    fn key(&self) -> &str {
        "delegate"
    }
    fn description(&self) -> &str {
        "Hand the step to an external system, which calls back to complete or fail it."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "required": ["url"],
            "properties": {"url": {"type": "string", "minLength": 1}, "payload": {}}
        })
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let url = args["url"].as_str().unwrap_or_default();
        let body = json!({
            "task_id": ctx.task_id.to_string(),
            "step_id": ctx.step_id,
            "callback_url": format!("{}{}", ctx.settings.public_url, ctx.callback_path),
            "token": ctx.delegation_token,
            "payload": args.get("payload").cloned().unwrap_or(Value::Null),
        });
        let (_, answer) = send(&ctx, Method::POST, url, Some(&body), &[]).await?;
        let parsed = ctx.settings.outbound.check(url)?;
        let external_ref = answer
            .get("id")
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string())
            })
            .unwrap_or_else(|| parsed.to_string());
        Ok(ToolOutput {
            output: json!({"external_ref": external_ref}),
            summary: format!("delegated to {}", parsed.host_str().unwrap_or_default()),
            control: Control::Delegate { external_ref },
            ..ToolOutput::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_string_headers_are_sent() {
        let args = json!({"headers": {"A": "1", "B": 2, "C": null}});
        assert_eq!(plain_headers(&args), vec![("A".into(), "1".into())]);
        assert!(plain_headers(&json!({})).is_empty());
    }
}
