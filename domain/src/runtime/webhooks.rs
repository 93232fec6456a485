//! Outbound webhooks: a tenant's endpoints that receive its task events
//! (completed, failed, needs review, cancelled) as signed HTTP POSTs.
//!
//! Tenant admins register an endpoint (a URL on an allowed host and the
//! events it wants); the server makes its signing secret, shows it once
//! and keeps it sealed like connection secrets. A task change that reports
//! one of those events writes one delivery per subscribed endpoint into
//! the outbox ([`outbox`]), inside the statement that commits the change.
//! Workers send due deliveries ([`Webhooks::deliver_due`]) on their own
//! beat, apart from the executor, and retry failures with exponential
//! backoff until [`WebhookConfig::max_attempts`].
//!
//! A delivery is `POST <url>` with the JSON body stored in the row and the
//! headers `X-Brainstem-Event`, `X-Brainstem-Delivery` (the delivery's id,
//! the same on every attempt: receivers deduplicate on it),
//! `X-Brainstem-Timestamp` (Unix seconds), `X-Brainstem-Signature:
//! sha256=<hex HMAC-SHA256 of "{timestamp}.{body}">` and the task's
//! `traceparent`. A 2xx answer delivers it; anything else, or no answer
//! within the timeout, is a failed attempt.
//!
//! Invariants:
//! - A committed event has its deliveries and a rolled-back one has none:
//!   the outbox rows are written by the statement that appends the event.
//! - Nothing is lost across a restart: a delivery stays `PENDING` in the
//!   database until an attempt succeeds or the attempts run out
//!   (`FAILED`). A worker takes a delivery by moving its `next_attempt_at`
//!   past the attempt with a compare-and-set, so two workers never send the
//!   same attempt, and one that dies mid-attempt leaves it due again later
//!   (at least once; receivers deduplicate on `X-Brainstem-Delivery`).
//! - Sending never holds up the executor: the executor only inserts rows.
//! - Every attempt goes through the outbound client
//!   ([`crate::kernel::outbound`]): an endpoint's host and port must be in
//!   `http_allowed_hosts` when it is registered and at every attempt, its
//!   address must be public (or listed in `http_allowed_private`), a
//!   redirect to another origin fails the attempt (the signed event is
//!   never re-posted elsewhere), and an error answer is read only as far
//!   as the last error keeps.

use std::{sync::Arc, time::Duration};

use brainstem_entity::{TenantOwned, TenantScope, webhook_delivery, webhook_endpoint};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use sea_orm::{
    ActiveModelTrait,
    ActiveValue::Set,
    ColumnTrait, DatabaseBackend, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Statement,
    sea_query::{Expr, ExprTrait, Query},
};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    Error, Principal, Result, TaskId,
    catalogue::capabilities::partner::{SIGNATURE_HEADER, TIMESTAMP_HEADER, signature},
    kernel::{
        audit::{self, AuditEntry},
        crypto::{self, Keyring, Sealed},
        metrics::{OutcomeLabels, metrics},
        origin,
        outbound::Outbound,
        page,
        row_security::{self, Bypass, as_platform},
    },
    runtime::tasks::{EventKind, Task, TaskEvent, TaskStatus},
};

pub const EVENT_HEADER: &str = "X-Brainstem-Event";
pub const DELIVERY_HEADER: &str = "X-Brainstem-Delivery";

/// Due deliveries one beat sends at most (the rest wait for the next).
const DUE_BATCH: u64 = 64;
/// Deliveries sent at once by one beat.
const CONCURRENCY: usize = 8;
/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// How much of an answer's body the last error keeps.
const ERROR_CHARS: usize = 300;

const PENDING: &str = "PENDING";
const DELIVERED: &str = "DELIVERED";
const FAILED: &str = "FAILED";

/// The task events an endpoint can receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WebhookEvent {
    TaskCompleted,
    TaskFailed,
    TaskNeedsReview,
    TaskCancelled,
}

impl WebhookEvent {
    pub const ALL: [WebhookEvent; 4] = [
        Self::TaskCompleted,
        Self::TaskFailed,
        Self::TaskNeedsReview,
        Self::TaskCancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::TaskCompleted => "task.completed",
            Self::TaskFailed => "task.failed",
            Self::TaskNeedsReview => "task.needs_review",
            Self::TaskCancelled => "task.cancelled",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == s)
    }

    /// The event a task's move to `status` reports, if any.
    fn of_status(status: &str) -> Option<Self> {
        match status.parse::<TaskStatus>().ok()? {
            TaskStatus::Completed => Some(Self::TaskCompleted),
            TaskStatus::Failed => Some(Self::TaskFailed),
            TaskStatus::NeedsReview => Some(Self::TaskNeedsReview),
            TaskStatus::Cancelled => Some(Self::TaskCancelled),
            _ => None,
        }
    }
}

/// An endpoint as admins see it (never its secret).
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub id: Uuid,
    pub name: String,
    pub url: String,
    pub events: Vec<WebhookEvent>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
}

impl From<webhook_endpoint::Model> for Endpoint {
    fn from(m: webhook_endpoint::Model) -> Self {
        Self {
            id: m.id,
            events: m
                .events
                .split_whitespace()
                .filter_map(WebhookEvent::parse)
                .collect(),
            name: m.name,
            url: m.url,
            created_by: m.created_by,
            created_at: m.created_at,
        }
    }
}

/// What an admin registers.
#[derive(Clone, Debug)]
pub struct NewEndpoint {
    pub name: String,
    pub url: String,
    pub events: Vec<WebhookEvent>,
}

/// A delivery and where its attempts stand.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub id: Uuid,
    pub endpoint_id: Uuid,
    pub task: TaskId,
    pub seq: i64,
    pub event: String,
    pub payload: Value,
    /// `PENDING`, `DELIVERED` or `FAILED`.
    pub status: String,
    pub attempts: i32,
    /// When the next attempt is due (while pending).
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

impl From<webhook_delivery::Model> for Delivery {
    fn from(m: webhook_delivery::Model) -> Self {
        Self {
            id: m.id,
            endpoint_id: m.endpoint_id,
            task: m.task_id.into(),
            seq: m.seq,
            event: m.event,
            payload: m.payload,
            next_attempt_at: (m.status == PENDING).then_some(m.next_attempt_at),
            status: m.status,
            attempts: m.attempts,
            last_attempt_at: m.last_attempt_at,
            last_status_code: m.last_status_code,
            last_error: m.last_error,
            delivered_at: m.delivered_at,
            created_at: m.created_at,
        }
    }
}

/// How deliveries are sent.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// The wait after the first failed attempt; it doubles with each.
    pub retry_base: Duration,
    /// Attempts before a delivery is `FAILED`.
    pub max_attempts: i32,
    /// How long an attempt waits for an answer.
    pub timeout: Duration,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            retry_base: Duration::from_secs(10),
            max_attempts: 8,
            timeout: Duration::from_secs(10),
        }
    }
}

impl WebhookConfig {
    /// The wait before attempt `attempts + 1`, after `attempts` failed.
    fn backoff(&self, attempts: i32) -> Duration {
        let doublings = attempts.saturating_sub(1).clamp(0, 20) as u32;
        self.retry_base
            .saturating_mul(2u32.saturating_pow(doublings))
            .min(MAX_BACKOFF)
    }
}

#[derive(Clone)]
pub struct Webhooks {
    db: DatabaseConnection,
    keyring: Option<Arc<Keyring>>,
    config: Arc<WebhookConfig>,
    outbound: Outbound,
}

impl Webhooks {
    pub fn new(db: DatabaseConnection) -> Self {
        Self {
            db,
            keyring: None,
            config: Arc::default(),
            outbound: Outbound::default(),
        }
    }

    /// Send deliveries through `outbound` (which also checks endpoints
    /// when they are registered).
    pub fn with_outbound(mut self, outbound: Outbound) -> Self {
        self.outbound = outbound;
        self
    }

    /// `url` parsed, if deliveries may be sent to it.
    fn allows(&self, url: &str) -> Result<reqwest::Url> {
        self.outbound
            .check(url)
            .map_err(|f| Error::validation(f.message))
    }

    pub fn with_keyring(mut self, keyring: Arc<Keyring>) -> Self {
        self.keyring = Some(keyring);
        self
    }

    pub fn with_config(mut self, config: WebhookConfig) -> Self {
        self.config = Arc::new(config);
        self
    }

    fn keyring(&self) -> Result<&Keyring> {
        self.keyring.as_deref().ok_or_else(|| {
            Error::internal(
                "no connection encryption key is configured (connection_encryption_key)",
            )
        })
    }

    /// The tenant's endpoints, by name (tenant admins).
    pub async fn list(&self, principal: &Principal) -> Result<Vec<Endpoint>> {
        let scope = principal.require_scope("admin")?;
        Ok(webhook_endpoint::Entity::find_in(scope)
            .order_by_asc(webhook_endpoint::Column::Name)
            .all(&self.db)
            .await?
            .into_iter()
            .map(Endpoint::from)
            .collect())
    }

    /// Register an endpoint (tenant admins; audited as `webhook.create`).
    /// Returns it with its signing secret, which is not shown again.
    pub async fn create(
        &self,
        principal: &Principal,
        new: NewEndpoint,
        now: DateTime<Utc>,
    ) -> Result<(Endpoint, String)> {
        let scope = principal.require_scope("admin")?;
        let name = new.name.trim().to_owned();
        if name.is_empty() || name.len() > 100 {
            return Err(Error::validation("a webhook name has 1-100 characters"));
        }
        let url = self.allows(&new.url)?;
        let mut events = new.events;
        events.dedup();
        if events.is_empty() {
            return Err(Error::validation("a webhook needs at least one event"));
        }
        let id = Uuid::now_v7();
        let secret = crypto::random_secret("whsec_");
        let sealed = self
            .keyring()?
            .seal(secret.as_bytes(), &associated_data(scope, id))?;
        let by = principal.actor.to_string();
        let events_text = events
            .iter()
            .map(|e| e.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let model = webhook_endpoint::ActiveModel {
            id: Set(id),
            tenant_id: Set(scope.tenant_id().uuid()),
            name: Set(name.clone()),
            url: Set(url.to_string()),
            events: Set(events_text.clone()),
            secret_ciphertext: Set(sealed.ciphertext),
            secret_key_id: Set(sealed.key_id),
            created_by: Set(by.clone()),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&self.db)
        .await
        .map_err(|e| match Error::from(e) {
            Error::Conflict(_) => Error::Conflict(format!("a webhook named `{name}` exists")),
            other => other,
        })?;
        audit::record(
            &self.db,
            AuditEntry::in_tenant(
                scope.tenant_id(),
                &by,
                "webhook.create",
                &name,
                json!({"url": model.url, "events": events_text}),
            ),
        )
        .await?;
        Ok((model.into(), secret))
    }

    /// Remove an endpoint and its deliveries (tenant admins; audited).
    /// Returns whether there was one.
    pub async fn delete(&self, principal: &Principal, name: &str) -> Result<bool> {
        let scope = principal.require_scope("admin")?;
        let deleted = webhook_endpoint::Entity::delete_many_in(scope)
            .filter(webhook_endpoint::Column::Name.eq(name))
            .exec(&self.db)
            .await?
            .rows_affected
            > 0;
        if deleted {
            let by = principal.actor.to_string();
            audit::record(
                &self.db,
                AuditEntry::in_tenant(scope.tenant_id(), &by, "webhook.delete", name, json!({})),
            )
            .await?;
        }
        Ok(deleted)
    }

    /// An endpoint's latest deliveries, newest first.
    pub async fn deliveries(
        &self,
        scope: TenantScope,
        endpoint: Uuid,
        limit: u64,
    ) -> Result<Vec<Delivery>> {
        Ok(webhook_delivery::Entity::find_in(scope)
            .filter(webhook_delivery::Column::EndpointId.eq(endpoint))
            .order_by_desc(webhook_delivery::Column::CreatedAt)
            .order_by_desc(webhook_delivery::Column::Id)
            .limit(limit)
            .all(&self.db)
            .await?
            .into_iter()
            .map(Delivery::from)
            .collect())
    }

    /// Send every delivery due at `now`, from any tenant; returns how many
    /// this call delivered.
    pub async fn deliver_due(&self, now: DateTime<Utc>) -> Result<usize> {
        let due = as_platform(
            Bypass::Queue,
            // unscoped: the due deliveries of every tenant; each is then
            // taken and sent under its own tenant's scope.
            webhook_delivery::Entity::find()
                .filter(webhook_delivery::Column::Status.eq(PENDING))
                .filter(webhook_delivery::Column::NextAttemptAt.lte(now))
                .order_by_asc(webhook_delivery::Column::NextAttemptAt)
                .limit(DUE_BATCH)
                .all(&self.db),
        )
        .await?;
        let delivered = futures_util::stream::iter(due)
            .map(|row| {
                let tenant = row.tenant_id.into();
                row_security::as_tenant(tenant, self.attempt(row, now))
            })
            .buffer_unordered(CONCURRENCY)
            .filter_map(|outcome| async move {
                match outcome {
                    Ok(delivered) => delivered.then_some(()),
                    Err(err) => {
                        tracing::warn!(%err, "a webhook delivery could not be attempted");
                        None
                    }
                }
            })
            .count()
            .await;
        Ok(delivered)
    }

    /// Take `row` and send it once; whether it was delivered.
    async fn attempt(&self, row: webhook_delivery::Model, now: DateTime<Utc>) -> Result<bool> {
        use webhook_delivery::Column as C;
        let scope = TenantScope::new(row.tenant_id.into());
        let attempts = row.attempts + 1;
        // Taken for as long as an attempt can last, and some.
        let held = now
            + chrono::Duration::from_std(self.config.timeout * 3)
                .unwrap_or_else(|_| chrono::Duration::seconds(60));
        let taken = webhook_delivery::Entity::update_many_in(scope)
            .col_expr(C::NextAttemptAt, Expr::value(held))
            .col_expr(C::Attempts, Expr::value(attempts))
            .col_expr(C::LastAttemptAt, Expr::value(Some(now)))
            .filter(C::Id.eq(row.id))
            .filter(C::Status.eq(PENDING))
            .filter(C::NextAttemptAt.eq(row.next_attempt_at))
            .exec(&self.db)
            .await?;
        if taken.rows_affected != 1 {
            return Ok(false);
        }
        let outcome = self.send(scope, &row).await;
        let mut changes = webhook_delivery::Entity::update_many_in(scope).filter(C::Id.eq(row.id));
        let delivered = match outcome {
            Ok(code) => {
                changes = changes
                    .col_expr(C::Status, Expr::value(DELIVERED))
                    .col_expr(C::DeliveredAt, Expr::value(Some(now)))
                    .col_expr(C::LastStatusCode, Expr::value(Some(code)))
                    .col_expr(C::LastError, Expr::value(Option::<String>::None));
                count_attempt("delivered");
                true
            }
            Err(failure) => {
                tracing::info!(delivery = %row.id, attempts, error = %failure.message, "a webhook attempt failed");
                changes = if attempts >= self.config.max_attempts {
                    count_attempt("failed");
                    changes.col_expr(C::Status, Expr::value(FAILED))
                } else {
                    count_attempt("retry");
                    let wait = chrono::Duration::from_std(self.config.backoff(attempts))
                        .unwrap_or_else(|_| chrono::Duration::hours(1));
                    changes.col_expr(C::NextAttemptAt, Expr::value(now + wait))
                };
                changes = changes
                    .col_expr(C::LastStatusCode, Expr::value(failure.status))
                    .col_expr(C::LastError, Expr::value(Some(failure.message)));
                false
            }
        };
        changes.exec(&self.db).await?;
        Ok(delivered)
    }

    /// POST the delivery; the 2xx status, or why not.
    async fn send(
        &self,
        scope: TenantScope,
        row: &webhook_delivery::Model,
    ) -> std::result::Result<i32, Failure> {
        let endpoint = webhook_endpoint::Entity::find_by_id_in(scope, row.endpoint_id)
            .one(&self.db)
            .await
            .map_err(Failure::internal)?
            .ok_or_else(|| Failure::new(None, "the endpoint is gone"))?;
        let secret = self.open(scope, &endpoint).map_err(Failure::internal)?;
        let body = serde_json::to_vec(&row.payload).map_err(Failure::internal)?;
        let timestamp = Utc::now().timestamp();
        let mut request = self
            .outbound
            .request(reqwest::Method::POST, &endpoint.url)
            .map_err(|f| Failure::new(None, f.message))?
            .timeout(self.config.timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(EVENT_HEADER, &row.event)
            .header(DELIVERY_HEADER, row.id.to_string())
            .header(TIMESTAMP_HEADER, timestamp.to_string())
            .header(SIGNATURE_HEADER, signature(&secret, timestamp, &body));
        if let Some(parent) = row
            .payload
            .pointer("/task/traceId")
            .and_then(Value::as_str)
            .and_then(origin::traceparent)
        {
            request = request.header("traceparent", parent);
        }
        let response = self
            .outbound
            .send(request.body(body))
            .await
            .map_err(|f| Failure::new(None, format!("no answer: {f}")))?;
        let status = response.status();
        if status.is_success() {
            return Ok(i32::from(status.as_u16()));
        }
        // Enough for the characters kept, at up to four bytes each.
        let prefix = Outbound::read_prefix(response, ERROR_CHARS * 4).await;
        let text = String::from_utf8_lossy(&prefix);
        Err(Failure::new(
            Some(i32::from(status.as_u16())),
            format!(
                "HTTP {status}: {}",
                text.chars().take(ERROR_CHARS).collect::<String>()
            ),
        ))
    }

    fn open(&self, scope: TenantScope, endpoint: &webhook_endpoint::Model) -> Result<String> {
        let sealed = Sealed {
            key_id: endpoint.secret_key_id.clone(),
            ciphertext: endpoint.secret_ciphertext.clone(),
        };
        let plaintext = self
            .keyring()?
            .open(&sealed, &associated_data(scope, endpoint.id))?;
        String::from_utf8(plaintext).map_err(|_| Error::internal("a webhook secret is not text"))
    }

    /// Re-seal with the current key every endpoint secret of the tenant
    /// that an old key sealed; returns how many. (Deliveries open secrets
    /// without re-sealing them, so only this moves them to a new key.)
    pub async fn reencrypt(&self, scope: TenantScope) -> Result<u64> {
        let keyring = self.keyring()?;
        let stale = webhook_endpoint::Entity::find_in(scope)
            .filter(webhook_endpoint::Column::SecretKeyId.ne(keyring.current_key_id()))
            .all(&self.db)
            .await?;
        let mut count = 0;
        for endpoint in stale {
            let secret = self.open(scope, &endpoint)?;
            let sealed = keyring.seal(secret.as_bytes(), &associated_data(scope, endpoint.id))?;
            webhook_endpoint::Entity::update_many_in(scope)
                .col_expr(
                    webhook_endpoint::Column::SecretCiphertext,
                    Expr::value(sealed.ciphertext),
                )
                .col_expr(
                    webhook_endpoint::Column::SecretKeyId,
                    Expr::value(sealed.key_id),
                )
                .filter(webhook_endpoint::Column::Id.eq(endpoint.id))
                .exec(&self.db)
                .await?;
            count += 1;
        }
        Ok(count)
    }
}

/// Why an attempt failed.
struct Failure {
    status: Option<i32>,
    message: String,
}

impl Failure {
    fn new(status: Option<i32>, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    /// A failure of the server's own (its database, its keys): the cause
    /// is logged, and the tenant, who reads `lastError`, is told only that.
    fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::warn!(%cause, "a webhook delivery failed on the server's side");
        Self::new(None, "internal error (the cause is in the server's log)")
    }
}

fn count_attempt(outcome: &'static str) {
    metrics()
        .webhook_attempts
        .get_or_create(&OutcomeLabels { outcome })
        .inc();
}

/// What a sealed secret is bound to: its tenant and its endpoint.
fn associated_data(scope: TenantScope, id: Uuid) -> Vec<u8> {
    format!("brainstem.webhook:{}:{id}", scope.tenant_id()).into_bytes()
}

/// The outbox rows for `events` of `task` (just appended, not yet
/// committed): one delivery per endpoint of the task's tenant subscribed
/// to an event they report, as `INSERT … SELECT` statements for the
/// caller to run in the same transaction. Empty when no event reports one.
pub(crate) fn outbox(
    backend: DatabaseBackend,
    task: &Task,
    events: &[TaskEvent],
    now: DateTime<Utc>,
) -> Vec<Statement> {
    use webhook_delivery::Column as D;
    use webhook_endpoint::Column as E;
    let new_id = match backend {
        DatabaseBackend::Postgres => "gen_random_uuid()",
        _ => "randomblob(16)",
    };
    events
        .iter()
        .filter(|event| event.kind == EventKind::StatusChanged)
        .filter_map(|event| {
            let kind = WebhookEvent::of_status(event.status.as_deref()?)?;
            let payload = payload(kind, task, event);
            let select = Query::select()
                .expr(Expr::cust(new_id))
                .column(E::TenantId)
                .column(E::Id)
                .expr(Expr::val(task.id.uuid()))
                .expr(Expr::val(event.seq))
                .expr(Expr::val(kind.as_str()))
                .expr(Expr::val(payload))
                .expr(Expr::val(PENDING))
                .expr(Expr::val(0))
                .expr(Expr::val(now))
                .expr(Expr::val(now))
                .from(webhook_endpoint::Entity)
                .and_where(E::TenantId.eq(task.tenant.uuid()))
                .and_where(
                    Expr::cust("(' ' || \"events\" || ' ')").like(format!("% {} %", kind.as_str())),
                )
                .to_owned();
            let insert = Query::insert()
                .into_table(webhook_delivery::Entity)
                .columns([
                    D::Id,
                    D::TenantId,
                    D::EndpointId,
                    D::TaskId,
                    D::Seq,
                    D::Event,
                    D::Payload,
                    D::Status,
                    D::Attempts,
                    D::NextAttemptAt,
                    D::CreatedAt,
                ])
                .select_from(select)
                .ok()?
                .to_owned();
            Some(backend.build(&insert))
        })
        .collect()
}

/// The body posted for `event` of `task`.
fn payload(kind: WebhookEvent, task: &Task, event: &TaskEvent) -> Value {
    json!({
        "event": kind.as_str(),
        "eventId": format!("{}:{}", task.id, event.seq),
        "occurredAt": event.created_at,
        "task": {
            "id": page::global_id("Task", task.id.uuid()),
            "status": event.status,
            "summary": event.summary,
            "error": event.error,
            "planKey": task.plan_key,
            "planVersion": task.plan_version,
            "channel": task.channel.as_str(),
            "createdBy": task.created_by,
            "traceId": task.trace_id,
            "result": task.result,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_base_up_to_an_hour() {
        let config = WebhookConfig {
            retry_base: Duration::from_secs(10),
            ..WebhookConfig::default()
        };
        assert_eq!(config.backoff(1), Duration::from_secs(10));
        assert_eq!(config.backoff(2), Duration::from_secs(20));
        assert_eq!(config.backoff(4), Duration::from_secs(80));
        assert_eq!(config.backoff(30), MAX_BACKOFF);
    }

    #[test]
    fn urls_must_be_http_on_an_allowed_host() {
        let outbound = Outbound::new(&crate::kernel::outbound::OutboundSettings {
            allowed_hosts: vec!["hooks.example.com".into()],
            ..Default::default()
        })
        .unwrap();
        let hooks = Webhooks::new(sea_orm::DatabaseConnection::default()).with_outbound(outbound);
        assert!(hooks.allows("https://hooks.example.com/brainstem").is_ok());
        assert!(hooks.allows("https://hooks.example.com:8443/").is_err());
        assert!(hooks.allows("https://other.example.com/").is_err());
        assert!(hooks.allows("ftp://hooks.example.com/").is_err());
        assert!(hooks.allows("not a url").is_err());
    }

    #[test]
    fn only_terminal_and_review_statuses_are_events() {
        assert_eq!(
            WebhookEvent::of_status("COMPLETED"),
            Some(WebhookEvent::TaskCompleted)
        );
        assert_eq!(
            WebhookEvent::of_status("NEEDS_REVIEW"),
            Some(WebhookEvent::TaskNeedsReview)
        );
        assert_eq!(WebhookEvent::of_status("EXECUTING"), None);
        assert_eq!(
            WebhookEvent::parse("task.failed"),
            Some(WebhookEvent::TaskFailed)
        );
    }
}
