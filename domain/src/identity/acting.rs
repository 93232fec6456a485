//! A platform admin acts inside a tenant only by naming it (the
//! `X-Acting-Tenant` header). Every such use opens an audited platform scope
//! first; the principal then works in that tenant with its admin's rights
//! for this one request (or WebSocket connection), and the tenant's own
//! audit log shows who came in.

use crate::{Error, Principal, Result, Role, identity::tenants::Tenants, kernel::audit::AuditLog};

/// The principal that `principal` becomes inside the tenant named by
/// `claim` (a slug or id). Only platform admins may do this; anyone else is
/// `FORBIDDEN`, and an unknown tenant is `NOT_FOUND`.
pub async fn act_in_tenant(
    tenants: &Tenants,
    audit: &AuditLog,
    principal: &Principal,
    claim: &str,
) -> Result<Principal> {
    principal
        .require_platform_admin()
        .map_err(|_| Error::forbidden("only platform admins may name an acting tenant"))?;
    let tenant = tenants
        .resolve_claim(claim.trim())
        .await
        .map_err(|err| match err {
            Error::Unauthenticated(_) => Error::not_found("tenant"),
            other => other,
        })?;
    audit
        .open_platform_scope(
            principal,
            "tenant.act",
            &tenant.id.to_string(),
            Some(tenant.id),
        )
        .await?;
    let mut acting = principal.clone();
    acting.tenant = Some(tenant.id);
    acting.roles.insert(Role::TenantAdmin);
    Ok(acting)
}
