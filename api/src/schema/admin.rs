//! The tenant admin's area: the tenant's audit log, its connections to
//! external systems, and API keys' own rate limits. Everything here needs
//! `TENANT_ADMIN` (or an API key with the `admin` scope); a platform admin
//! gets there by naming the tenant in `X-Acting-Tenant`.
//!
//! Connection secrets go in through `createConnection`/`updateConnection`
//! and never come out: the `Connection` type only says `hasSecret`.

use async_graphql::{
    Context, ID, InputObject, Json, MaybeUndefined, Object, SimpleObject,
    connection::Connection as Relay,
};
use brainstem_domain::{
    ApiKeyId, AuditId, ConnectionId, Error, Principal,
    audit::{AuditFilter, AuditLog, AuditRecord},
    connections::{Connection as DomainConnection, ConnectionChanges, NewConnection},
    crypto::SecretJson,
    rate_limit::Rate,
};
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::{
    context::{domain, principal},
    identity::{ApiKey, RateLimit},
    ids::{self, NodeType, encode},
    page::{ListOrder, connection, ordered_page_request, page_request},
};
use crate::error::ResultExt;

#[derive(Default)]
pub struct AdminQuery;

#[derive(Default)]
pub struct AdminMutation;

/// A tenant's credentials for an external system. The secret is stored
/// encrypted and is never returned; `hasSecret` says whether there is one.
#[derive(Clone, Debug)]
pub struct Connection(pub DomainConnection);

#[Object]
impl Connection {
    pub async fn id(&self) -> ID {
        encode(NodeType::Connection, self.0.id.uuid())
    }

    /// Unique in the tenant; tools ask for a connection by this name.
    async fn name(&self) -> &str {
        &self.0.name
    }

    /// Which system it connects to, e.g. `http` or `salesforce`.
    async fn kind(&self) -> &str {
        &self.0.kind
    }

    /// Settings that are not secret.
    async fn config(&self) -> Json<Value> {
        Json(self.0.config.clone())
    }

    /// Whether a secret is stored (it is never shown).
    async fn has_secret(&self) -> bool {
        self.0.has_secret
    }

    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }

    async fn updated_at(&self) -> DateTime<Utc> {
        self.0.updated_at
    }
}

/// One row of the tenant's append-only audit log.
#[derive(Clone, Debug)]
pub struct AuditEntry(pub AuditRecord);

#[Object]
impl AuditEntry {
    pub async fn id(&self) -> ID {
        encode(NodeType::AuditEntry, self.0.id.uuid())
    }

    /// What was done, e.g. `api_key.create` or `tenant.act`.
    async fn action(&self) -> &str {
        &self.0.action
    }

    /// Who did it: `user:<sub>` or `api_key:<id>`.
    async fn actor(&self) -> &str {
        &self.0.actor
    }

    /// What it was done to (usually an id).
    async fn target(&self) -> &str {
        &self.0.target
    }

    /// Details, with personal and secret values redacted before storage.
    async fn data(&self) -> Json<Value> {
        Json(self.0.data.clone())
    }

    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }

    /// The request that did it (its `X-Request-Id`), if it came from one.
    async fn request_id(&self) -> Option<&str> {
        self.0.request_id.as_deref()
    }

    /// The trace it belongs to: the request's, or that of the task whose
    /// work it is (`Task.traceId`).
    async fn trace_id(&self) -> Option<&str> {
        self.0.trace_id.as_deref()
    }

    /// The stored SHA-256 (hex) of the row's canonical JSON.
    async fn hash(&self) -> &str {
        &self.0.hash
    }

    /// Whether the row still matches its stored hash (recomputed now).
    async fn verified(&self) -> bool {
        AuditLog::verify(&self.0)
    }
}

/// Narrows `auditLog`; every field given must match.
#[derive(InputObject, Default)]
pub struct AuditLogFilter {
    /// Actions starting with this, e.g. `api_key.` or `connection.`.
    pub action_prefix: Option<String>,
    /// Exactly this actor, e.g. `user:alice`.
    pub actor: Option<String>,
    /// Rows created at or after this instant.
    pub since: Option<DateTime<Utc>>,
    /// Rows created before this instant.
    pub until: Option<DateTime<Utc>>,
}

#[Object]
impl AdminQuery {
    /// The tenant's audit log, oldest first unless `orderBy` (needs
    /// `admin`).
    #[allow(clippy::too_many_arguments)]
    async fn audit_log(
        &self,
        ctx: &Context<'_>,
        filter: Option<AuditLogFilter>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
        order_by: Option<ListOrder>,
    ) -> async_graphql::Result<Relay<String, AuditEntry>> {
        let scope = principal(ctx)?.require_scope("admin").gql()?;
        let filter = filter.unwrap_or_default();
        let filter = AuditFilter {
            action_prefix: filter.action_prefix,
            actor: filter.actor,
            since: filter.since,
            until: filter.until,
        };
        let page = domain(ctx)
            .audit
            .search(
                scope,
                &filter,
                ordered_page_request(first, after, last, before, order_by)?,
            )
            .await
            .gql()?;
        Ok(connection(page, |r| r.id.uuid(), AuditEntry))
    }

    /// The tenant's connections to external systems, oldest first (needs
    /// `admin`). Secrets are never shown.
    async fn connections(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
    ) -> async_graphql::Result<Relay<String, Connection>> {
        let page = domain(ctx)
            .connections
            .list(principal(ctx)?, page_request(first, after, last, before)?)
            .await
            .gql()?;
        Ok(connection(page, |c| c.id.uuid(), Connection))
    }

    /// The tools the MCP server of a connection of kind `mcp` offers
    /// (needs `admin`). A plan step names one by its `key`. The list is
    /// kept until the server announces a change or it expires
    /// (`mcp_tool_list_ttl_secs`); `refresh` asks the server now.
    async fn mcp_tools(
        &self,
        ctx: &Context<'_>,
        connection: String,
        #[graphql(default = false)] refresh: bool,
    ) -> async_graphql::Result<Vec<McpTool>> {
        let tools = domain(ctx)
            .mcp_tools_of(principal(ctx)?, &connection, refresh)
            .await
            .gql()?;
        Ok(tools
            .iter()
            .map(|t| McpTool {
                key: t.key.clone(),
                name: t.name.clone(),
                description: t.description.clone(),
                input_schema: Json(t.input_schema.clone()),
            })
            .collect())
    }
}

/// A tool of a tenant's MCP server, as the server describes it.
#[derive(SimpleObject)]
pub struct McpTool {
    /// `mcp:<connection>/<tool>`: what a plan step names.
    pub key: String,
    pub name: String,
    pub description: String,
    /// The JSON Schema of its arguments, as the server gives it.
    pub input_schema: Json<Value>,
}

pub(super) async fn connection_node(
    ctx: &Context<'_>,
    principal: &Principal,
    id: Uuid,
) -> async_graphql::Result<Connection> {
    let found = domain(ctx)
        .connections
        .get(principal, ConnectionId::from(id))
        .await
        .gql()?;
    Ok(Connection(found))
}

pub(super) async fn audit_entry_node(
    ctx: &Context<'_>,
    principal: &Principal,
    id: Uuid,
) -> async_graphql::Result<AuditEntry> {
    let scope = principal.require_scope("admin").gql()?;
    let record = domain(ctx)
        .audit
        .get(scope, AuditId::from(id))
        .await
        .gql()?;
    Ok(AuditEntry(record))
}

#[derive(InputObject)]
pub struct CreateConnectionInput {
    /// Unique in the tenant: 1–100 characters of letters, digits, `.`, `_`, `-`.
    pub name: String,
    /// Which system: 1–50 characters of a-z, 0-9, `.`, `_`, `-`.
    pub kind: String,
    /// Settings that are not secret (a JSON object). Fields that look secret
    /// (`password`, `token`, `apiKey`, …) are refused here: put them in
    /// `secret`.
    pub config: Option<Json<Value>>,
    /// The credentials (a JSON object). Stored encrypted; never returned.
    pub secret: Option<Json<Value>>,
}

#[derive(SimpleObject)]
pub struct ConnectionPayload {
    pub connection: Connection,
}

#[derive(InputObject)]
pub struct UpdateConnectionInput {
    pub id: ID,
    pub name: Option<String>,
    pub config: Option<Json<Value>>,
    /// A new secret (rotation); `null` removes the secret; leave it out to
    /// keep the current one.
    pub secret: MaybeUndefined<Json<Value>>,
}

#[derive(InputObject)]
pub struct DeleteConnectionInput {
    pub id: ID,
}

#[derive(InputObject)]
pub struct SetApiKeyRateLimitInput {
    pub id: ID,
    /// The key's own rate; `null` returns it to the configured default.
    pub rate_limit: Option<RateLimit>,
}

#[derive(SimpleObject)]
pub struct SetApiKeyRateLimitPayload {
    pub api_key: ApiKey,
}

fn connection_id(id: &ID) -> async_graphql::Result<ConnectionId> {
    Ok(ConnectionId::from(
        ids::decode_as(id, NodeType::Connection).gql()?,
    ))
}

#[Object]
impl AdminMutation {
    /// Create a connection in the caller's tenant (needs `admin`).
    async fn create_connection(
        &self,
        ctx: &Context<'_>,
        input: CreateConnectionInput,
    ) -> async_graphql::Result<ConnectionPayload> {
        let created = domain(ctx)
            .connections
            .create(
                principal(ctx)?,
                NewConnection {
                    name: input.name,
                    kind: input.kind,
                    config: input
                        .config
                        .map_or_else(|| Value::Object(Default::default()), |j| j.0),
                    secret: input.secret.map(|j| SecretJson::new(j.0)),
                },
            )
            .await
            .gql()?;
        Ok(ConnectionPayload {
            connection: Connection(created),
        })
    }

    /// Rename or reconfigure a connection, or rotate or remove its secret
    /// (needs `admin`).
    async fn update_connection(
        &self,
        ctx: &Context<'_>,
        input: UpdateConnectionInput,
    ) -> async_graphql::Result<ConnectionPayload> {
        let id = connection_id(&input.id)?;
        let secret = match input.secret {
            MaybeUndefined::Undefined => None,
            MaybeUndefined::Null => Some(None),
            MaybeUndefined::Value(j) => Some(Some(SecretJson::new(j.0))),
        };
        let updated = domain(ctx)
            .connections
            .update(
                principal(ctx)?,
                id,
                ConnectionChanges {
                    name: input.name,
                    config: input.config.map(|j| j.0),
                    secret,
                },
            )
            .await
            .gql()?;
        Ok(ConnectionPayload {
            connection: Connection(updated),
        })
    }

    /// Delete a connection (needs `admin`). Returns what was deleted.
    async fn delete_connection(
        &self,
        ctx: &Context<'_>,
        input: DeleteConnectionInput,
    ) -> async_graphql::Result<ConnectionPayload> {
        let id = connection_id(&input.id)?;
        let deleted = domain(ctx)
            .connections
            .delete(principal(ctx)?, id)
            .await
            .gql()?;
        Ok(ConnectionPayload {
            connection: Connection(deleted),
        })
    }

    /// Give an API key its own rate limit, or return it to the default
    /// (tenant admins).
    async fn set_api_key_rate_limit(
        &self,
        ctx: &Context<'_>,
        input: SetApiKeyRateLimitInput,
    ) -> async_graphql::Result<SetApiKeyRateLimitPayload> {
        let id = ids::decode_as(&input.id, NodeType::ApiKey).gql()?;
        let rate = input.rate_limit.map(|r| Rate::new(r.per_second, r.burst));
        if rate.is_some_and(|r| !r.per_second.is_finite()) {
            return Err(Error::validation("perSecond must be a finite number")).gql();
        }
        let key = domain(ctx)
            .api_keys
            .set_rate_limit(principal(ctx)?, ApiKeyId::from(id), rate)
            .await
            .gql()?;
        Ok(SetApiKeyRateLimitPayload {
            api_key: ApiKey(key),
        })
    }
}
