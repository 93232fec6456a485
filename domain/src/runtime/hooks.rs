//! Inbound hooks: other systems start tasks by POSTing to
//! `/hooks/{tenant}/{source}`.
//!
//! A hook is one of the tenant's connections (so its signing secret is
//! sealed like every connection secret, and admins keep it with the
//! connection mutations): its name is the `source`, its kind `webhook` (a
//! JSON body, channel `WEBHOOK`) or `inbound_email` (the JSON that common
//! inbound-email services post, channel `EMAIL`), its secret
//! `{"signing_secret": "…"}` and its config may name the `plan_key` (or
//! `intent`) its tasks run.
//!
//! A delivery carries `X-Brainstem-Timestamp` (Unix seconds) and
//! `X-Brainstem-Signature: sha256=<hex>`, the HMAC-SHA256 of
//! `"{timestamp}.{body}"` under the signing secret.
//!
//! Invariants:
//! - Nothing starts unless the signature verifies (in constant time) and
//!   the timestamp is within [`REPLAY_WINDOW_SECS`] of now; a body over
//!   [`MAX_BODY_BYTES`] or that is not a JSON object starts nothing either.
//! - Only what the signature covers decides which deliveries are the same:
//!   a delivery starts one task however often it arrives, keyed by the
//!   email's message id (inside the signed body) or else the SHA-256 of the
//!   body's canonical JSON. An unsigned header (`X-Brainstem-Delivery`)
//!   never does, so a replay with a new one is still a duplicate; a sender
//!   that means two deliveries of equal content puts an id in the body.
//! - A tenant or source that does not exist, a connection that is not a
//!   hook and a signature that does not verify answer alike, after the same
//!   work (a connection lookup and an HMAC), so a caller learns nothing of
//!   which tenants and hooks exist. The checks that need no tenant (the
//!   headers' form, the replay window) come first and say what is wrong.
//! - A delivery counts against its tenant's rate only once its signature
//!   verifies: unsigned floods never spend a tenant's budget (the API
//!   limits them by address as failed authentications).

use chrono::{DateTime, Utc};
use hmac::Mac;
use serde_json::{Map, Value, json};

use crate::{
    Actor, Domain, Error, Principal, Result, Role, TaskId, TenantId, TenantScope,
    catalogue::{capabilities::partner::signing_mac, connections::DecryptedConnection},
    kernel::{
        audit::{canonical_json, sha256_hex},
        rate_limit::RateLimiter,
        row_security,
    },
    runtime::tasks::{Channel, NewTask},
};

/// The largest body a hook accepts.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// How far a delivery's timestamp may be from now, either way.
pub const REPLAY_WINDOW_SECS: i64 = 300;

/// The connection kind of a JSON webhook.
pub const WEBHOOK: &str = "webhook";
/// The connection kind of an inbound-email hook.
pub const INBOUND_EMAIL: &str = "inbound_email";

/// One delivery, as received.
#[derive(Clone, Copy, Debug)]
pub struct Delivery<'a> {
    /// The tenant's slug or id.
    pub tenant: &'a str,
    /// The hook's name.
    pub source: &'a str,
    pub timestamp: Option<&'a str>,
    pub signature: Option<&'a str>,
    pub body: &'a [u8],
}

/// What a delivery started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub task: TaskId,
    /// The delivery had arrived before: this is the task it started then.
    pub duplicate: bool,
}

impl Domain {
    /// Check a hook delivery and start its task (or find the one it
    /// started before). A verified delivery is charged to its tenant's
    /// rate in `limiter` before anything starts.
    pub async fn receive_hook(
        &self,
        delivery: Delivery<'_>,
        now: DateTime<Utc>,
        limiter: &RateLimiter,
    ) -> Result<Accepted> {
        if delivery.body.len() > MAX_BODY_BYTES {
            return Err(Error::validation(format!(
                "the body is over {MAX_BODY_BYTES} bytes"
            )));
        }
        let (timestamp, signature) = signed_headers(delivery, now)?;
        let found = self.find_hook(delivery.tenant, delivery.source).await;
        let secret = found.as_ref().and_then(|(_, hook, _)| {
            hook.secret
                .as_ref()
                .and_then(|s| s.expose()["signing_secret"].as_str().map(str::to_owned))
        });
        // A decoy key when there is no hook: the same work, the same answer.
        let verified = signing_mac(
            secret.as_deref().unwrap_or(DECOY_SECRET),
            timestamp,
            delivery.body,
        )
        .is_some_and(|mac| mac.verify_slice(&signature).is_ok());
        let (Some((tenant, hook, channel)), Some(_), true) = (found, secret, verified) else {
            return Err(not_signed());
        };
        let principal = Principal {
            actor: Actor::Hook(hook.name.clone()),
            tenant: Some(tenant),
            roles: [Role::Service].into(),
            scopes: ["tasks:write".to_owned()].into(),
        };
        limiter.check(&principal, None, std::time::Instant::now())?;
        row_security::as_tenant(
            tenant,
            self.start_hook_task(&principal, &hook, channel, delivery.body),
        )
        .await
    }

    /// The hook `source` of the tenant named `tenant`, with its channel;
    /// `None` when either is unknown or the connection is not a hook. An
    /// unknown tenant still costs the connection lookup (in no tenant).
    async fn find_hook(
        &self,
        tenant: &str,
        source: &str,
    ) -> Option<(TenantId, DecryptedConnection, Channel)> {
        let (tenant, known) = match self.tenants.resolve_claim(tenant).await {
            Ok(found) => (found.id, true),
            Err(_) => (TenantId::from(uuid::Uuid::nil()), false),
        };
        let hook = row_security::as_tenant(
            tenant,
            self.connections.resolve(TenantScope::new(tenant), source),
        )
        .await
        .ok()
        .filter(|_| known)?;
        let channel = match hook.kind.as_str() {
            WEBHOOK => Channel::Webhook,
            INBOUND_EMAIL => Channel::Email,
            _ => return None,
        };
        Some((tenant, hook, channel))
    }

    /// Start the task of a verified delivery of `hook` (or find the one an
    /// equal delivery started).
    async fn start_hook_task(
        &self,
        principal: &Principal,
        hook: &DecryptedConnection,
        channel: Channel,
        body: &[u8],
    ) -> Result<Accepted> {
        let body: Map<String, Value> = match serde_json::from_slice(body) {
            Ok(Value::Object(body)) => body,
            _ => return Err(Error::validation("the body must be a JSON object")),
        };
        let text = |key: &str| {
            hook.config
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let (input, payload, message_id) = match channel {
            Channel::Email => email(&body),
            _ => (
                body.get("input")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                Value::Object(body.clone()),
                None,
            ),
        };
        // Only signed content keys the delivery (see the module's header).
        let key = message_id
            .unwrap_or_else(|| sha256_hex(canonical_json(&Value::Object(body)).as_bytes()));
        let started_at = Utc::now();
        let task = self
            .tasks
            .start(
                principal,
                NewTask {
                    input,
                    payload,
                    plan_key: text("plan_key"),
                    intent: text("intent"),
                    channel: Some(channel),
                    idempotency_key: Some(format!("hook:{}:{key}", hook.name)),
                    ..NewTask::default()
                },
            )
            .await?;
        Ok(Accepted {
            task: task.id,
            duplicate: task.created_at < started_at,
        })
    }
}

/// The key a delivery with no hook is checked against, so that it costs
/// what a real check costs.
const DECOY_SECRET: &str = "brainstem-no-such-hook";

/// The one answer for a delivery that no hook signed: an unknown tenant or
/// source, a connection that is not a hook, a wrong signature.
fn not_signed() -> Error {
    Error::Unauthenticated("hook delivery refused: the signature does not verify".into())
}

/// The delivery's timestamp, within the replay window, and its signature's
/// bytes: the checks that need no tenant.
fn signed_headers(delivery: Delivery<'_>, now: DateTime<Utc>) -> Result<(i64, Vec<u8>)> {
    let refused = |why: &str| Error::Unauthenticated(format!("hook delivery refused: {why}"));
    let timestamp: i64 = delivery
        .timestamp
        .and_then(|t| t.trim().parse().ok())
        .ok_or_else(|| refused("X-Brainstem-Timestamp (Unix seconds) is missing"))?;
    if (now.timestamp() - timestamp).abs() > REPLAY_WINDOW_SECS {
        return Err(refused(&format!(
            "the timestamp is more than {REPLAY_WINDOW_SECS} s from now (a replay, or a wrong clock)"
        )));
    }
    let signature = delivery
        .signature
        .and_then(|s| s.trim().strip_prefix("sha256="))
        .and_then(|hex| hex::decode(hex).ok())
        .ok_or_else(|| refused("X-Brainstem-Signature must be `sha256=<hex>`"))?;
    Ok((timestamp, signature))
}

/// The delivery is signed with `secret` and recent.
#[cfg(test)]
fn verify(secret: &str, delivery: Delivery<'_>, now: DateTime<Utc>) -> Result<()> {
    let (timestamp, signature) = signed_headers(delivery, now)?;
    signing_mac(secret, timestamp, delivery.body)
        .ok_or_else(|| Error::internal("unusable hook secret"))?
        .verify_slice(&signature)
        .map_err(|_| not_signed())
}

/// The signature header value for `body` sent at `timestamp`, as partner
/// calls are signed (for senders and tests).
pub use crate::catalogue::capabilities::partner::signature as sign;

/// An inbound email as posted by common services (SendGrid, Mailgun,
/// Postmark and the like name the same things differently): the task's
/// input (subject, then text), its payload and the message id.
fn email(body: &Map<String, Value>) -> (String, Value, Option<String>) {
    let field = |names: &[&str]| {
        names.iter().find_map(|name| {
            body.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .and_then(|(_, v)| v.as_str())
                .map(str::to_owned)
        })
    };
    let from = field(&["from", "sender", "From"]);
    let to = field(&["to", "recipient", "To"]);
    let subject = field(&["subject"]).unwrap_or_default();
    let text =
        field(&["text", "TextBody", "body-plain", "plain", "stripped-text"]).unwrap_or_default();
    let message_id = field(&["MessageID", "Message-Id", "message-id", "message_id"])
        .map(|id| id.trim_matches(|c| c == '<' || c == '>').to_owned())
        .filter(|id| !id.is_empty() && id.len() <= 200);
    let input = format!("{subject}\n\n{text}").trim().to_owned();
    let payload = json!({"email": {
        "from": from, "to": to, "subject": subject, "text": text, "message_id": message_id,
    }});
    (input, payload, message_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery<'a>(timestamp: &'a str, signature: &'a str, body: &'a [u8]) -> Delivery<'a> {
        Delivery {
            tenant: "acme",
            source: "crm",
            timestamp: Some(timestamp),
            signature: Some(signature),
            body,
        }
    }

    #[test]
    fn only_a_recent_delivery_signed_with_the_secret_verifies() {
        let now = Utc::now();
        let body = br#"{"input":"hi"}"#;
        let ts = now.timestamp().to_string();
        let good = sign("s3cret", now.timestamp(), body);
        assert!(verify("s3cret", delivery(&ts, &good, body), now).is_ok());
        // Another secret, another body, a stale or future timestamp.
        assert!(verify("other", delivery(&ts, &good, body), now).is_err());
        assert!(verify("s3cret", delivery(&ts, &good, br#"{"input":"ho"}"#), now).is_err());
        let old = (now.timestamp() - REPLAY_WINDOW_SECS - 1).to_string();
        let signed_old = sign("s3cret", now.timestamp() - REPLAY_WINDOW_SECS - 1, body);
        let err = verify("s3cret", delivery(&old, &signed_old, body), now).unwrap_err();
        assert!(err.to_string().contains("replay"), "{err}");
        let future = (now.timestamp() + REPLAY_WINDOW_SECS + 1).to_string();
        assert!(verify("s3cret", delivery(&future, &good, body), now).is_err());
        // Malformed headers.
        assert!(verify("s3cret", delivery(&ts, "md5=00", body), now).is_err());
        assert!(verify("s3cret", delivery("soon", &good, body), now).is_err());
    }

    #[test]
    fn emails_from_different_services_read_alike() {
        let postmark = json!({"From": "ann@example.com", "To": "ops@acme.test",
            "Subject": "Truck 7", "TextBody": "Brakes squeal.", "MessageID": "<m-1@example.com>"});
        let mailgun = json!({"sender": "ann@example.com", "recipient": "ops@acme.test",
            "subject": "Truck 7", "body-plain": "Brakes squeal.", "Message-Id": "<m-1@example.com>"});
        let read = |v: Value| email(v.as_object().unwrap());
        let (input, payload, id) = read(postmark);
        assert_eq!(input, "Truck 7\n\nBrakes squeal.");
        assert_eq!(payload["email"]["from"], "ann@example.com");
        assert_eq!(id.as_deref(), Some("m-1@example.com"));
        assert_eq!(read(mailgun), (input, payload, id));
    }
}
