//! Mutation root. Every mutation takes one `input` object and returns a
//! payload object.

use async_graphql::{Context, ID, InputObject, Object, SimpleObject};
use brainstem_domain::ApiKeyId;

use super::{
    domain,
    ids::{self, NodeType},
    principal,
    types::{ApiKey, Tenant},
};
use crate::error::ResultExt;

#[derive(Default)]
pub struct CoreMutation;

#[derive(InputObject)]
pub struct CreateApiKeyInput {
    /// A label, 1–100 characters.
    pub name: String,
    /// At least one of `tasks:read`, `tasks:write`, `memory:read`,
    /// `memory:write`, `admin`.
    pub scopes: Vec<String>,
}

#[derive(SimpleObject)]
pub struct CreateApiKeyPayload {
    pub api_key: ApiKey,
    /// The secret. It is shown this once and cannot be retrieved again.
    pub secret: String,
}

#[derive(InputObject)]
pub struct RevokeApiKeyInput {
    pub id: ID,
}

#[derive(SimpleObject)]
pub struct RevokeApiKeyPayload {
    pub api_key: ApiKey,
}

#[derive(InputObject)]
pub struct CreateTenantInput {
    /// URL-safe unique name: 2–63 characters of a-z, 0-9 and `-`.
    pub slug: String,
    pub name: String,
}

#[derive(SimpleObject)]
pub struct CreateTenantPayload {
    pub tenant: Tenant,
}

#[Object]
impl CoreMutation {
    /// Create an API key in the caller's tenant (tenant admins).
    async fn create_api_key(
        &self,
        ctx: &Context<'_>,
        input: CreateApiKeyInput,
    ) -> async_graphql::Result<CreateApiKeyPayload> {
        let principal = principal(ctx)?;
        let created = domain(ctx)
            .api_keys
            .create(principal, &input.name, &input.scopes)
            .await
            .gql()?;
        Ok(CreateApiKeyPayload {
            api_key: ApiKey(created.key),
            secret: created.secret,
        })
    }

    /// Revoke an API key of the caller's tenant; it stops working at once.
    async fn revoke_api_key(
        &self,
        ctx: &Context<'_>,
        input: RevokeApiKeyInput,
    ) -> async_graphql::Result<RevokeApiKeyPayload> {
        let principal = principal(ctx)?;
        let id = ids::decode_as(&input.id, NodeType::ApiKey).gql()?;
        let key = domain(ctx)
            .api_keys
            .revoke(principal, ApiKeyId::from(id))
            .await
            .gql()?;
        Ok(RevokeApiKeyPayload {
            api_key: ApiKey(key),
        })
    }

    /// Create a tenant (platform admins; audited).
    async fn create_tenant(
        &self,
        ctx: &Context<'_>,
        input: CreateTenantInput,
    ) -> async_graphql::Result<CreateTenantPayload> {
        let principal = principal(ctx)?;
        let domain = domain(ctx);
        let scope = domain
            .audit
            .open_platform_scope(principal, "tenant.create", &input.slug, None)
            .await
            .gql()?;
        let tenant = domain
            .tenants
            .create(&scope, &input.slug, &input.name)
            .await
            .gql()?;
        Ok(CreateTenantPayload {
            tenant: Tenant(tenant),
        })
    }
}
