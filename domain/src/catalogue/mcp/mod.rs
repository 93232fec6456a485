//! MCP servers as tools: a tenant connection of kind `mcp` (config `url`,
//! optional `timeout_ms`; secret `{"token": …}`, sent as `Authorization:
//! Bearer …`, or `{"authorization": …}`, sent as it is; or OAuth client
//! credentials, config `oauth` and secret `{"client_secret": …}`, see
//! [`oauth`]) lends its server's tools to the tenant's plans as
//! `mcp:<connection>/<tool>`.
//!
//! **Resolution.** Like partner tools, `mcp:` keys are not in the registry:
//! the integrity check and the executor resolve them against the tenant's
//! connections ([`mcp_tools`]) when a plan is published and when a step
//! runs. Connections are the tenant's own rows, read through its scope, so
//! another tenant naming the same key finds no tool. The startup check of
//! stored plans ([`unchecked`]) accepts a well-formed key without reading
//! connections (a connection may be deleted later; the step then fails).
//!
//! **Listing.** A connection's tool list (`tools/list`) is kept per
//! process ([`lists`]): read again when the server announces a change
//! (`notifications/tools/list_changed`), past `mcp_tool_list_ttl_secs`,
//! or on demand (`mcpTools(connection:, refresh: true)`).
//!
//! **Agents.** An agent step that names no tools is offered, besides the
//! tenant's other tools, the tools of every connection of kind `mcp`
//! ([`offered`]) under their servers' descriptions and schemas; a server
//! that cannot be listed is left out of that iteration's menu, not a
//! failure of the step. A call is a step like any other, resolved against
//! the connection when it runs (guardrails, timeouts and retries apply).
//!
//! **The call** ([`client`]) goes through the outbound client with the
//! step's idempotency key; the step's timeout (`timeoutSecs`, else the
//! connection's `timeout_ms`, else 30 s) and retry policy (the partner
//! tools' default: 3 attempts for timeouts, connection failures, 429 and
//! 5xx) are the executor's, as for any tool. The remote server checks the
//! arguments against its own schema; here they need only be an object.

pub mod client;
pub mod lists;
pub mod oauth;

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use brainstem_entity::{TenantId, TenantOwned, TenantScope, connection};
use sea_orm::{ColumnTrait, DatabaseConnection, QueryFilter};
use serde_json::{Value, json};

pub use lists::{ListSettings, ToolLists};
pub use oauth::Tokens;

/// What a process keeps of its tenants' MCP servers: their tool lists
/// and their OAuth tokens. Cheap to clone; every clone shares them.
#[derive(Clone, Default)]
pub struct McpClients {
    pub lists: ToolLists,
    pub tokens: Tokens,
}

impl McpClients {
    /// At most `settings.capacity` lists and as many tokens.
    pub fn new(settings: ListSettings) -> Self {
        Self {
            lists: ToolLists::new(settings),
            tokens: Tokens::new(settings.capacity),
        }
    }
}

use crate::{
    Error, Result,
    catalogue::{
        connections::{Connections, DecryptedConnection},
        plans::RetryPolicy,
        tool::{Tool, ToolContext, ToolError, ToolOutput},
    },
    kernel::outbound::Outbound,
};

/// The prefix of an MCP tool's key: `mcp:<connection>/<tool>`.
pub const MCP_PREFIX: &str = "mcp:";

/// The kind of connection that lends MCP tools.
pub const KIND: &str = "mcp";

/// How long a call may take when neither the step nor the connection
/// says.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The connection and tool an `mcp:` key names.
pub fn parse_key(key: &str) -> Option<(&str, &str)> {
    let (connection, tool) = key.strip_prefix(MCP_PREFIX)?.split_once('/')?;
    (!connection.is_empty() && !tool.is_empty()).then_some((connection, tool))
}

/// A remote MCP tool, reached through a tenant connection.
pub struct McpTool {
    key: String,
    connection: String,
    tool: String,
    description: String,
    /// The server's schema when the tool was listed (offered to a
    /// model); else any object, the server checking the arguments.
    input_schema: Value,
    timeout: Duration,
}

impl McpTool {
    fn new(key: &str, timeout: Duration) -> Option<Self> {
        let (connection, tool) = parse_key(key)?;
        Some(Self {
            key: key.to_owned(),
            connection: connection.to_owned(),
            tool: tool.to_owned(),
            description: format!(
                "the tool `{tool}` of the MCP server of connection `{connection}`"
            ),
            input_schema: json!({"type": "object"}),
            timeout,
        })
    }
}

/// The most MCP tools an agent step is offered without naming them, all
/// connections together (a model's menu has room for a bounded number).
pub const MAX_OFFERED: usize = 64;

/// The timeout of a connection of kind `mcp` (`timeout_ms`), else the
/// default.
fn timeout_of(config: &Value) -> Duration {
    config
        .get("timeout_ms")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_TIMEOUT, Duration::from_millis)
}

/// The MCP tools `keys` name that the scope's tenant has a connection of
/// kind `mcp` for; other keys are left out (unknown to the caller's
/// check). Without a scope (a platform check) there is no tenant whose
/// connections could lend them: none resolves.
pub(crate) async fn mcp_tools(
    db: &DatabaseConnection,
    scope: Option<TenantScope>,
    keys: &[String],
) -> Result<Vec<Arc<dyn Tool>>> {
    let Some(scope) = scope else {
        return Ok(Vec::new());
    };
    let named: Vec<(&String, &str)> = keys
        .iter()
        .filter_map(|k| parse_key(k).map(|(connection, _)| (k, connection)))
        .collect();
    if named.is_empty() {
        return Ok(Vec::new());
    }
    let rows = connection::Entity::find_in(scope)
        .filter(connection::Column::Kind.eq(KIND))
        .filter(connection::Column::Name.is_in(named.iter().map(|(_, c)| c.to_string())))
        .all(db)
        .await?;
    Ok(named
        .into_iter()
        .filter_map(|(key, name)| {
            let row = rows.iter().find(|r| r.name == name)?;
            McpTool::new(key, timeout_of(&row.config)).map(|t| Arc::new(t) as Arc<dyn Tool>)
        })
        .collect())
}

/// Every well-formed MCP key of `keys` as a tool, without reading any
/// connection: for the startup check of stored plans.
pub(crate) fn unchecked<'a>(keys: impl IntoIterator<Item = &'a str>) -> Vec<Arc<dyn Tool>> {
    keys.into_iter()
        .filter_map(|k| McpTool::new(k, DEFAULT_TIMEOUT))
        .map(|t| Arc::new(t) as Arc<dyn Tool>)
        .collect()
}

/// How a connection's server is reached as its tenant: a fixed
/// `Authorization` (or none), or a token from OAuth client credentials.
enum Auth {
    Header(Option<String>),
    Client(oauth::ClientCredentials),
}

/// A connection of kind `mcp`'s server, as its credential reaches it.
struct Server<'a> {
    outbound: &'a Outbound,
    tokens: &'a Tokens,
    key: (TenantId, String),
    url: String,
    auth: Auth,
}

impl<'a> Server<'a> {
    /// Where `connection` points and how it authenticates; refused for a
    /// connection of another kind, without `url`, or with incomplete
    /// OAuth credentials.
    fn of(
        connection: &DecryptedConnection,
        scope: TenantScope,
        outbound: &'a Outbound,
        tokens: &'a Tokens,
    ) -> Result<Self> {
        if connection.kind != KIND {
            return Err(Error::validation(format!(
                "connection `{}` is of kind `{}`, not `{KIND}`",
                connection.name, connection.kind
            )));
        }
        let url = connection
            .config
            .get("url")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                Error::validation(format!(
                    "connection `{}` has no `url` in its config",
                    connection.name
                ))
            })?;
        let auth = match oauth::ClientCredentials::of(
            &connection.name,
            &connection.config,
            connection.secret.as_ref(),
        )? {
            Some(credentials) => Auth::Client(credentials),
            None => {
                let secret = connection.secret.as_ref().map(|s| s.expose());
                Auth::Header(secret.and_then(|s| {
                    s.get("authorization")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .or_else(|| {
                            s.get("token")
                                .and_then(Value::as_str)
                                .map(|t| format!("Bearer {t}"))
                        })
                }))
            }
        };
        Ok(Self {
            outbound,
            tokens,
            key: (scope.tenant_id(), connection.name.clone()),
            url: url.to_owned(),
            auth,
        })
    }

    /// What stands for the credential in a kept list's fingerprint.
    fn credential_fingerprint(&self) -> Option<String> {
        match &self.auth {
            Auth::Header(header) => header.clone(),
            Auth::Client(credentials) => Some(format!("oauth:{}", credentials.fingerprint())),
        }
    }

    /// The endpoint to call now: the fixed header, or a bearer token.
    async fn endpoint(&self) -> std::result::Result<client::Endpoint<'_>, ToolError> {
        let authorization = match &self.auth {
            Auth::Header(header) => header.clone(),
            Auth::Client(credentials) => Some(
                self.tokens
                    .bearer(self.outbound, &self.key, credentials)
                    .await?,
            ),
        };
        Ok(client::Endpoint {
            url: &self.url,
            authorization,
        })
    }

    /// After a `401`: whether a new credential may pass (a new token is
    /// asked for at the next [`Server::endpoint`]).
    fn renew(&self) -> bool {
        match &self.auth {
            Auth::Header(_) => false,
            Auth::Client(_) => {
                self.tokens.forget(&self.key);
                true
            }
        }
    }
}

/// A tool a connection's MCP server lists, as a plan names it.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteTool {
    /// `mcp:<connection>/<tool>`.
    pub key: String,
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// The tools the MCP server of the scope's tenant's connection `name`
/// offers: the list kept by `lists` when fresh (see [`lists`]), else
/// asked now (`tools/list`, within the connection's timeout), as with
/// `refresh`. `NotFound` for another tenant's or no connection.
pub async fn list_remote(
    connections: &Connections,
    outbound: &Outbound,
    clients: &McpClients,
    scope: TenantScope,
    name: &str,
    refresh: bool,
) -> Result<Arc<[RemoteTool]>> {
    let lists = &clients.lists;
    let connection = connections.resolve(scope, name).await?;
    let server = Server::of(&connection, scope, outbound, &clients.tokens)?;
    let key = (scope.tenant_id(), name.to_owned());
    let fingerprint = lists::fingerprint(
        &connection.id.to_string(),
        &server.url,
        &connection.config,
        server.credential_fingerprint().as_deref(),
    );
    if refresh {
        lists.forget(&key);
    } else if let Some(kept) = lists.get(&key, fingerprint) {
        return Ok(kept);
    }
    let unavailable =
        |message: String| Error::Unavailable(format!("connection `{name}`: {message}"));
    let timeout = timeout_of(&connection.config);
    let listing = async {
        let mut renewed = false;
        loop {
            let endpoint = server.endpoint().await?;
            match client::list_tools(outbound, &endpoint).await {
                Err(client::ExchangeError::Unauthorized(_)) if !renewed && server.renew() => {
                    renewed = true;
                }
                other => {
                    break other
                        .map(|listed| (listed, endpoint.authorization))
                        .map_err(ToolError::from);
                }
            }
        }
    };
    let (listed, authorization) = tokio::time::timeout(timeout, listing)
        .await
        .map_err(|_| unavailable(format!("`tools/list` timed out after {timeout:?}")))?
        .map_err(|e| unavailable(e.message))?;
    let tools: Arc<[RemoteTool]> = listed
        .tools
        .iter()
        .filter_map(|t| {
            let tool = t.get("name")?.as_str()?;
            Some(RemoteTool {
                key: format!("{MCP_PREFIX}{name}/{tool}"),
                name: tool.to_owned(),
                description: t
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                input_schema: t
                    .get("inputSchema")
                    .cloned()
                    .unwrap_or(json!({"type": "object"})),
            })
        })
        .collect();
    let url = server.url.clone();
    let listen = listed
        .watch
        .map(|watch| (outbound.clone(), watch, url, authorization));
    lists.keep(key, fingerprint, tools.clone(), listen);
    Ok(tools)
}

/// The tools of every connection of kind `mcp` of the scope's tenant, as
/// an agent step that names no tools offers them: with their servers'
/// descriptions and schemas, at most [`MAX_OFFERED`]. A connection whose
/// server cannot be listed now is left out (and logged).
pub async fn offered(
    connections: &Connections,
    outbound: &Outbound,
    clients: &McpClients,
    scope: TenantScope,
) -> Result<Vec<Arc<dyn Tool>>> {
    let mut offered: Vec<Arc<dyn Tool>> = Vec::new();
    for (name, config) in connections.of_kind(scope, KIND).await? {
        let listed = match list_remote(connections, outbound, clients, scope, &name, false).await {
            Ok(listed) => listed,
            Err(err) => {
                tracing::warn!(connection = %name, %err, "an MCP server's tools are not offered");
                continue;
            }
        };
        for remote in listed.iter() {
            if offered.len() >= MAX_OFFERED {
                return Ok(offered);
            }
            if let Some(mut tool) = McpTool::new(&remote.key, timeout_of(&config)) {
                if !remote.description.is_empty() {
                    tool.description = remote.description.clone();
                }
                tool.input_schema = remote.input_schema.clone();
                offered.push(Arc::new(tool));
            }
        }
    }
    Ok(offered)
}

#[async_trait]
impl Tool for McpTool {
    fn key(&self) -> &str {
        &self.key
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        self.input_schema.clone()
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn retry(&self) -> Option<RetryPolicy> {
        Some(RetryPolicy::OUTGOING_CALLS)
    }

    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let scope = TenantScope::new(ctx.tenant);
        let connection = ctx
            .ports
            .connections
            .resolve(scope, &self.connection)
            .await
            .map_err(|e| ToolError::fatal(format!("`{}`: {e}", self.key)))?;
        let outbound = &ctx.settings.outbound;
        let server = Server::of(&connection, scope, outbound, &ctx.ports.mcp.tokens)
            .map_err(|e| ToolError::fatal(e.to_string()))?;
        let mut renewed = false;
        let result = loop {
            let endpoint = server.endpoint().await?;
            let called = client::call_tool(
                outbound,
                &endpoint,
                &self.tool,
                args.clone(),
                &ctx.idempotency_key,
            )
            .await;
            match called {
                Err(client::ExchangeError::Unauthorized(_)) if !renewed && server.renew() => {
                    renewed = true;
                }
                other => break other?,
            }
        };
        // The structured result when the server gives one, else the
        // content blocks.
        let output = match result.get("structuredContent") {
            Some(structured) if !structured.is_null() => structured.clone(),
            _ => json!({"content": result.get("content").cloned().unwrap_or(Value::Null)}),
        };
        Ok(ToolOutput::with_output(
            output,
            format!("`{}` answered", self.key),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_a_connection_and_a_tool() {
        assert_eq!(parse_key("mcp:crm/lookup"), Some(("crm", "lookup")));
        assert_eq!(parse_key("mcp:crm/a/b"), Some(("crm", "a/b")));
        assert_eq!(parse_key("mcp:crm"), None);
        assert_eq!(parse_key("mcp:/lookup"), None);
        assert_eq!(parse_key("partner.x"), None);
    }
}
