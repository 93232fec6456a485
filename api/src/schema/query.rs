//! Query root.

use async_graphql::{Context, ID, Object, connection::Connection};
use brainstem_domain::{ApiKeyId, Error, TenantId, page::PageRequest};

use super::{
    domain,
    ids::{self, NodeType},
    principal,
    types::{ApiKey, Node, Tenant, Viewer, connection},
};
use crate::error::ResultExt;

#[derive(Default)]
pub struct CoreQuery;

pub(crate) fn page_request(
    first: Option<i32>,
    after: Option<String>,
) -> async_graphql::Result<PageRequest> {
    let first = match first {
        Some(n) if n < 0 => {
            return Err(Error::validation("`first` must not be negative")).gql();
        }
        Some(n) => Some(n as u64),
        None => None,
    };
    let after = after.as_deref().map(ids::decode_cursor).transpose().gql()?;
    Ok(PageRequest { first, after })
}

#[Object]
impl CoreQuery {
    /// The caller: who they are and which tenant they act in.
    async fn viewer(&self, ctx: &Context<'_>) -> async_graphql::Result<Viewer> {
        let principal = principal(ctx)?;
        let tenant = match principal.tenant {
            Some(t) => Some(Tenant(
                domain(ctx)
                    .tenants
                    .get(brainstem_domain::TenantScope::new(t))
                    .await
                    .gql()?,
            )),
            None => None,
        };
        let (subject, credential) = Viewer::subject_of(&principal.actor);
        let expires_at = ctx
            .data_opt::<crate::schema::CallerExpiry>()
            .and_then(|e| e.0);
        Ok(Viewer {
            subject,
            credential,
            roles: principal.roles.iter().map(|r| (*r).into()).collect(),
            scopes: principal.scopes.iter().cloned().collect(),
            tenant,
            expires_at,
        })
    }

    /// Fetch any object by its global id. Objects of other tenants are
    /// reported as `NOT_FOUND`, exactly like objects that do not exist.
    async fn node(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<Node> {
        let principal = principal(ctx)?;
        let domain = domain(ctx);
        let (ty, uuid) = ids::decode(&id).gql()?;
        match ty {
            NodeType::Tenant => {
                let tenant_id = TenantId::from(uuid);
                if principal.tenant == Some(tenant_id) {
                    let scope = principal.tenant_scope().gql()?;
                    Ok(Node::Tenant(Tenant(domain.tenants.get(scope).await.gql()?)))
                } else if principal.is_platform_admin() {
                    let scope = domain
                        .audit
                        .open_platform_scope(
                            principal,
                            "tenant.read",
                            &uuid.to_string(),
                            Some(tenant_id),
                        )
                        .await
                        .gql()?;
                    Ok(Node::Tenant(Tenant(
                        domain.tenants.get_any(&scope, tenant_id).await.gql()?,
                    )))
                } else {
                    Err(Error::not_found("tenant")).gql()
                }
            }
            NodeType::ApiKey => {
                let scope = principal.require_tenant_admin().gql()?;
                let key = domain
                    .api_keys
                    .get(scope, ApiKeyId::from(uuid))
                    .await
                    .gql()?;
                Ok(Node::ApiKey(ApiKey(key)))
            }
            NodeType::Memory | NodeType::KgEntity | NodeType::KgRelation => {
                super::memory::node(ctx, ty, uuid).await
            }
            NodeType::Connection => super::admin::connection_node(ctx, principal, uuid).await,
            NodeType::AuditEntry => super::admin::audit_entry_node(ctx, principal, uuid).await,
            NodeType::Capability | NodeType::CapabilitySubscription => {
                super::capabilities::node(ctx, principal, ty, uuid).await
            }
            other => super::tasks::node(ctx, other, uuid)
                .await?
                .ok_or_else(|| Error::not_found("node"))
                .gql(),
        }
    }

    /// The API keys of the caller's tenant (tenant admins and API keys with
    /// the `admin` scope).
    async fn api_keys(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> async_graphql::Result<Connection<String, ApiKey>> {
        let principal = principal(ctx)?;
        let scope = principal.require_tenant_admin().gql()?;
        let page = domain(ctx)
            .api_keys
            .list(scope, page_request(first, after)?)
            .await
            .gql()?;
        Ok(connection(page, |k| k.id.uuid(), ApiKey))
    }

    /// Every tenant (platform admins; each use is audited).
    async fn tenants(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> async_graphql::Result<Connection<String, Tenant>> {
        let principal = principal(ctx)?;
        let domain = domain(ctx);
        let request = page_request(first, after)?;
        let scope = domain
            .audit
            .open_platform_scope(principal, "tenant.list", "tenants", None)
            .await
            .gql()?;
        let page = domain.tenants.list(&scope, request).await.gql()?;
        Ok(connection(page, |t| t.id.uuid(), Tenant))
    }
}
