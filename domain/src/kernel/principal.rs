//! Who is calling, and in which tenant.
//!
//! The API layer turns a verified credential into a [`Principal`]; services
//! take the principal (or the [`TenantScope`] derived from it) and never look
//! at raw credentials.

use std::{collections::BTreeSet, fmt, str::FromStr};

use brainstem_entity::{ApiKeyId, TenantId, TenantScope};

use crate::{Error, Result};

/// A role a principal may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Operates the platform; may act in any tenant by naming it.
    PlatformAdmin,
    /// Administers one tenant: credentials, plans, subscriptions.
    TenantAdmin,
    /// A person using one tenant.
    Member,
    /// A person who decides reviews (and approves plans) in one tenant.
    Reviewer,
    /// A partner or API client of one tenant.
    Service,
}

impl Role {
    pub const ALL: [Role; 5] = [
        Role::PlatformAdmin,
        Role::TenantAdmin,
        Role::Member,
        Role::Reviewer,
        Role::Service,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::PlatformAdmin => "PLATFORM_ADMIN",
            Role::TenantAdmin => "TENANT_ADMIN",
            Role::Member => "MEMBER",
            Role::Reviewer => "REVIEWER",
            Role::Service => "SERVICE",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                Error::validation(format!(
                    "unknown role `{s}`; expected one of PLATFORM_ADMIN, TENANT_ADMIN, MEMBER, REVIEWER, SERVICE"
                ))
            })
    }
}

/// What kind of credential the principal presented.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Actor {
    /// A bearer token's subject (`sub` claim).
    User(String),
    /// A partner API key.
    ApiKey(ApiKeyId),
    /// An inbound hook (a delivery to `/hooks/{tenant}/{source}`), by name.
    Hook(String),
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actor::User(sub) => write!(f, "user:{sub}"),
            Actor::ApiKey(id) => write!(f, "api_key:{id}"),
            Actor::Hook(name) => write!(f, "hook:{name}"),
        }
    }
}

/// An authenticated caller.
#[derive(Clone, Debug)]
pub struct Principal {
    pub actor: Actor,
    /// The tenant the caller belongs to; a platform admin may have none.
    pub tenant: Option<TenantId>,
    pub roles: BTreeSet<Role>,
    /// API-key scopes (`tasks:read`, `admin`, …); empty for bearer tokens,
    /// whose rights come from their roles.
    pub scopes: BTreeSet<String>,
}

impl Principal {
    pub fn has_role(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }

    pub fn is_platform_admin(&self) -> bool {
        self.has_role(Role::PlatformAdmin)
    }

    /// The tenant this principal works in.
    pub fn tenant_scope(&self) -> Result<TenantScope> {
        self.tenant
            .map(TenantScope::new)
            .ok_or_else(|| Error::forbidden("this credential belongs to no tenant"))
    }

    /// May this principal administer its tenant (credentials, settings)?
    /// Tenant admins may, and so may API keys holding the `admin` scope.
    pub fn require_tenant_admin(&self) -> Result<TenantScope> {
        let scope = self.tenant_scope()?;
        let allowed = self.has_role(Role::TenantAdmin)
            || (matches!(self.actor, Actor::ApiKey(_)) && self.scopes.contains("admin"));
        if allowed {
            Ok(scope)
        } else {
            Err(Error::forbidden(
                "this needs the TENANT_ADMIN role or an API key with the `admin` scope",
            ))
        }
    }

    /// May this principal use an area of the API? API keys need the scope
    /// itself (or `admin`, which includes every scope); bearer tokens get
    /// every scope but `admin` from any tenant role, and `admin` from
    /// `TENANT_ADMIN`. Returns the tenant to work in.
    pub fn require_scope(&self, scope: &str) -> Result<TenantScope> {
        let tenant = self.tenant_scope()?;
        let allowed = match self.actor {
            // A hook holds exactly the scopes it was given (`tasks:write`).
            Actor::ApiKey(_) | Actor::Hook(_) => {
                self.scopes.contains(scope) || self.scopes.contains("admin")
            }
            Actor::User(_) if scope == "admin" => self.has_role(Role::TenantAdmin),
            Actor::User(_) => !self.roles.is_empty(),
        };
        if allowed {
            Ok(tenant)
        } else {
            Err(Error::forbidden(format!("this needs the `{scope}` scope")))
        }
    }

    /// May this principal decide reviews (approve, reject, approve a
    /// plan)? `TENANT_ADMIN` and `REVIEWER` may, and API keys with the
    /// `reviews:write` (or `admin`) scope.
    pub fn require_reviewer(&self) -> Result<TenantScope> {
        let tenant = self.tenant_scope()?;
        let allowed = match self.actor {
            Actor::ApiKey(_) => {
                self.scopes.contains("reviews:write") || self.scopes.contains("admin")
            }
            Actor::User(_) => self.has_role(Role::TenantAdmin) || self.has_role(Role::Reviewer),
            Actor::Hook(_) => false,
        };
        if allowed {
            Ok(tenant)
        } else {
            Err(Error::forbidden(
                "deciding a review needs the REVIEWER or TENANT_ADMIN role, or an API key with the `reviews:write` scope",
            ))
        }
    }

    pub fn require_platform_admin(&self) -> Result<()> {
        if self.is_platform_admin() {
            Ok(())
        } else {
            Err(Error::forbidden("this needs the PLATFORM_ADMIN role"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(roles: &[Role], tenant: bool) -> Principal {
        Principal {
            actor: Actor::User("u".into()),
            tenant: tenant.then(TenantId::new),
            roles: roles.iter().copied().collect(),
            scopes: BTreeSet::new(),
        }
    }

    #[test]
    fn api_keys_need_their_scope_and_tokens_their_role() {
        let mut key = principal(&[Role::Service], true);
        key.actor = Actor::ApiKey(ApiKeyId::new());
        key.scopes = ["tasks:read".to_owned()].into();
        assert!(key.require_scope("tasks:read").is_ok());
        assert!(key.require_scope("tasks:write").is_err());
        key.scopes.insert("admin".into());
        assert!(key.require_scope("memory:write").is_ok());
        let member = principal(&[Role::Member], true);
        assert!(member.require_scope("tasks:write").is_ok());
        assert!(member.require_scope("admin").is_err());
    }

    #[test]
    fn roles_parse_case_insensitively_and_reject_unknown_names() {
        assert_eq!("tenant_admin".parse::<Role>().unwrap(), Role::TenantAdmin);
        assert!("ROOT".parse::<Role>().is_err());
    }

    #[test]
    fn tenant_admin_rights_need_role_and_tenant() {
        assert!(
            principal(&[Role::TenantAdmin], true)
                .require_tenant_admin()
                .is_ok()
        );
        assert!(
            principal(&[Role::Member], true)
                .require_tenant_admin()
                .is_err()
        );
        assert!(
            principal(&[Role::TenantAdmin], false)
                .require_tenant_admin()
                .is_err()
        );
    }
}
