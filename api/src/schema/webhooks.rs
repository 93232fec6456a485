//! Outbound webhooks on the wire: a tenant's endpoints for task events,
//! with their deliveries (tenant admins register and remove them; each
//! change is audited). See `brainstem_domain::webhooks`.

use async_graphql::{Context, Enum, ID, InputObject, Json, Object, SimpleObject};
use brainstem_domain::webhooks::{self, NewEndpoint};
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{
    context::{domain, principal},
    ids::{NodeType, encode},
};
use crate::error::ResultExt;

/// A task event an endpoint can receive.
#[derive(Enum, Clone, Copy, PartialEq, Eq)]
pub enum WebhookEvent {
    /// `task.completed`
    TaskCompleted,
    /// `task.failed`
    TaskFailed,
    /// `task.needs_review`: the task waits for a person.
    TaskNeedsReview,
    /// `task.cancelled`
    TaskCancelled,
}

impl From<WebhookEvent> for webhooks::WebhookEvent {
    fn from(e: WebhookEvent) -> Self {
        match e {
            WebhookEvent::TaskCompleted => Self::TaskCompleted,
            WebhookEvent::TaskFailed => Self::TaskFailed,
            WebhookEvent::TaskNeedsReview => Self::TaskNeedsReview,
            WebhookEvent::TaskCancelled => Self::TaskCancelled,
        }
    }
}

impl From<webhooks::WebhookEvent> for WebhookEvent {
    fn from(e: webhooks::WebhookEvent) -> Self {
        match e {
            webhooks::WebhookEvent::TaskCompleted => Self::TaskCompleted,
            webhooks::WebhookEvent::TaskFailed => Self::TaskFailed,
            webhooks::WebhookEvent::TaskNeedsReview => Self::TaskNeedsReview,
            webhooks::WebhookEvent::TaskCancelled => Self::TaskCancelled,
        }
    }
}

/// Where the tenant's task events are posted.
pub struct WebhookEndpoint(webhooks::Endpoint);

#[Object]
impl WebhookEndpoint {
    async fn name(&self) -> &str {
        &self.0.name
    }

    async fn url(&self) -> &str {
        &self.0.url
    }

    async fn events(&self) -> Vec<WebhookEvent> {
        self.0.events.iter().copied().map(Into::into).collect()
    }

    async fn created_by(&self) -> &str {
        &self.0.created_by
    }

    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }

    /// Its latest deliveries, newest first, with where their attempts
    /// stand.
    async fn deliveries(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20, validator(minimum = 1, maximum = 100))] first: u64,
    ) -> async_graphql::Result<Vec<WebhookDelivery>> {
        let scope = principal(ctx)?.require_scope("admin").gql()?;
        let list = domain(ctx)
            .webhooks
            .deliveries(scope, self.0.id, first)
            .await
            .gql()?;
        Ok(list.into_iter().map(WebhookDelivery).collect())
    }
}

/// One event for one endpoint.
pub struct WebhookDelivery(webhooks::Delivery);

#[Object]
impl WebhookDelivery {
    /// Sent as `X-Brainstem-Delivery`, the same on every attempt.
    async fn id(&self) -> String {
        self.0.id.to_string()
    }

    /// e.g. `task.completed`.
    async fn event(&self) -> &str {
        &self.0.event
    }

    async fn task_id(&self) -> ID {
        encode(NodeType::Task, self.0.task.uuid())
    }

    /// The body posted.
    async fn payload(&self) -> Json<Value> {
        Json(self.0.payload.clone())
    }

    /// `PENDING`, `DELIVERED` or `FAILED` (its attempts used up).
    async fn status(&self) -> &str {
        &self.0.status
    }

    async fn attempts(&self) -> i32 {
        self.0.attempts
    }

    /// When the next attempt is due (while `PENDING`).
    async fn next_attempt_at(&self) -> Option<DateTime<Utc>> {
        self.0.next_attempt_at
    }

    async fn last_attempt_at(&self) -> Option<DateTime<Utc>> {
        self.0.last_attempt_at
    }

    /// The HTTP status of the last answer, if one came.
    async fn last_status_code(&self) -> Option<i32> {
        self.0.last_status_code
    }

    /// Why the last attempt failed.
    async fn last_error(&self) -> Option<&str> {
        self.0.last_error.as_deref()
    }

    async fn delivered_at(&self) -> Option<DateTime<Utc>> {
        self.0.delivered_at
    }

    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
}

#[derive(Default)]
pub struct WebhookQuery;

#[Object]
impl WebhookQuery {
    /// The tenant's webhook endpoints, by name (tenant admins).
    async fn webhook_endpoints(
        &self,
        ctx: &Context<'_>,
    ) -> async_graphql::Result<Vec<WebhookEndpoint>> {
        let list = domain(ctx).webhooks.list(principal(ctx)?).await.gql()?;
        Ok(list.into_iter().map(WebhookEndpoint).collect())
    }
}

#[derive(InputObject)]
pub struct CreateWebhookEndpointInput {
    /// Unique in the tenant.
    pub name: String,
    /// `http` or `https`, on a host in `http_allowed_hosts`.
    pub url: String,
    pub events: Vec<WebhookEvent>,
}

#[derive(InputObject)]
pub struct WebhookEndpointNameInput {
    pub name: String,
}

#[derive(SimpleObject)]
pub struct CreateWebhookEndpointPayload {
    pub endpoint: WebhookEndpoint,
    /// The signing secret, shown this once: deliveries carry
    /// `X-Brainstem-Signature: sha256=<hex HMAC-SHA256 of
    /// "{X-Brainstem-Timestamp}.{body}">` under it.
    pub secret: String,
}

#[derive(SimpleObject)]
pub struct DeleteWebhookEndpointPayload {
    /// Whether there was an endpoint of that name.
    pub deleted: bool,
}

#[derive(Default)]
pub struct WebhookMutation;

#[Object]
impl WebhookMutation {
    /// Post the tenant's task `events` to `url` (tenant admins). Audited.
    async fn create_webhook_endpoint(
        &self,
        ctx: &Context<'_>,
        input: CreateWebhookEndpointInput,
    ) -> async_graphql::Result<CreateWebhookEndpointPayload> {
        let (endpoint, secret) = domain(ctx)
            .webhooks
            .create(
                principal(ctx)?,
                NewEndpoint {
                    name: input.name,
                    url: input.url,
                    events: input.events.into_iter().map(Into::into).collect(),
                },
                Utc::now(),
            )
            .await
            .gql()?;
        Ok(CreateWebhookEndpointPayload {
            endpoint: WebhookEndpoint(endpoint),
            secret,
        })
    }

    /// Remove an endpoint with its pending deliveries (tenant admins).
    /// Audited.
    async fn delete_webhook_endpoint(
        &self,
        ctx: &Context<'_>,
        input: WebhookEndpointNameInput,
    ) -> async_graphql::Result<DeleteWebhookEndpointPayload> {
        let deleted = domain(ctx)
            .webhooks
            .delete(principal(ctx)?, &input.name)
            .await
            .gql()?;
        Ok(DeleteWebhookEndpointPayload { deleted })
    }
}
