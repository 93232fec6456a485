//! Connections: a tenant's credentials for an external system (a CRM, a mail
//! server, a partner's HTTP API). Each has a name unique in its tenant, a
//! kind, a config that is not secret, and an optional secret.
//!
//! The secret is encrypted at rest with the [`Keyring`] (AES-256-GCM, bound
//! to tenant and row) and never leaves this module except through
//! [`Connections::resolve`], which tools call to use it. [`Connection`], what
//! the API shows, only says whether there is a secret. Nothing here logs,
//! audits or prints a secret: [`SecretJson`] redacts itself in `Debug`.

use std::{fmt, sync::Arc};

use brainstem_entity::{ConnectionId, TenantId, TenantOwned, TenantScope, connection};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseConnection, QueryFilter, QueryOrder,
    QuerySelect,
};
use serde_json::{Value, json};

use crate::{
    Error, Principal, Result,
    kernel::{
        audit::{self, AuditEntry},
        crypto::{Keyring, Sealed, SecretJson},
        page::{self, Page, PageRequest},
        redact::{is_pii_key, redact},
    },
};

/// A connection as the API shows it: everything but the secret.
#[derive(Clone, Debug, PartialEq)]
pub struct Connection {
    pub id: ConnectionId,
    pub tenant: TenantId,
    pub name: String,
    pub kind: String,
    pub config: Value,
    pub has_secret: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<&connection::Model> for Connection {
    fn from(m: &connection::Model) -> Self {
        Self {
            id: m.id.into(),
            tenant: m.tenant_id.into(),
            name: m.name.clone(),
            kind: m.kind.clone(),
            config: m.config.clone(),
            has_secret: m.secret_ciphertext.is_some(),
            created_at: m.created_at,
            updated_at: m.updated_at,
        }
    }
}

/// A connection with its secret decrypted, for the tool that uses it.
/// `Debug` shows `[REDACTED]` for the secret.
#[derive(Clone, Debug)]
pub struct DecryptedConnection {
    pub id: ConnectionId,
    pub name: String,
    pub kind: String,
    pub config: Value,
    pub secret: Option<SecretJson>,
}

/// The most connections of one kind [`Connections::of_kind`] reads.
pub const MAX_OF_KIND: u64 = 50;

/// What `create` needs. Its `Debug` redacts the secret and, in the config,
/// anything under a secret-looking key (such a config is refused, but may
/// be printed first).
#[derive(Clone)]
pub struct NewConnection {
    pub name: String,
    pub kind: String,
    pub config: Value,
    pub secret: Option<SecretJson>,
}

/// What `update` changes; `None` fields stay as they are. `Debug` redacts
/// like [`NewConnection`]'s.
#[derive(Clone, Default)]
pub struct ConnectionChanges {
    pub name: Option<String>,
    pub config: Option<Value>,
    /// `Some(Some(s))` replaces (rotates) the secret, `Some(None)` removes it.
    pub secret: Option<Option<SecretJson>>,
}

impl fmt::Debug for NewConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewConnection")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("config", &redact(&self.config))
            .field("secret", &self.secret)
            .finish()
    }
}

impl fmt::Debug for ConnectionChanges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionChanges")
            .field("name", &self.name)
            .field("config", &self.config.as_ref().map(redact))
            .field("secret", &self.secret)
            .finish()
    }
}

#[derive(Clone)]
pub struct Connections {
    db: DatabaseConnection,
    keyring: Option<Arc<Keyring>>,
}

impl Connections {
    pub fn new(db: DatabaseConnection, keyring: Option<Arc<Keyring>>) -> Self {
        Self { db, keyring }
    }

    fn keyring(&self) -> Result<&Keyring> {
        self.keyring.as_deref().ok_or_else(|| {
            Error::internal(
                "no connection encryption key is configured (connection_encryption_key)",
            )
        })
    }

    /// Create a connection in the principal's tenant (needs `admin`).
    pub async fn create(&self, principal: &Principal, new: NewConnection) -> Result<Connection> {
        tracing::debug!(actor = %principal.actor, input = ?new, "creating a connection");
        let scope = principal.require_scope("admin")?;
        let name = parse_name(&new.name)?;
        let kind = parse_kind(&new.kind)?;
        check_config(&new.config)?;
        let id = ConnectionId::new();
        let sealed = match &new.secret {
            Some(secret) => Some(self.seal(scope, id, secret)?),
            None => None,
        };
        let now = Utc::now();
        let model = connection::ActiveModel {
            id: Set(id.uuid()),
            tenant_id: Set(scope.tenant_id().uuid()),
            name: Set(name.clone()),
            kind: Set(kind.clone()),
            config: Set(new.config),
            secret_ciphertext: Set(sealed.as_ref().map(|s| s.ciphertext.clone())),
            secret_key_id: Set(sealed.map(|s| s.key_id)),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&self.db)
        .await
        .map_err(|err| name_conflict(err, &name))?;
        audit::record(
            &self.db,
            AuditEntry {
                tenant: Some(scope.tenant_id()),
                actor: principal.actor.to_string(),
                action: "connection.create".into(),
                target: id.to_string(),
                data: json!({"name": name, "kind": kind, "has_secret": model.secret_ciphertext.is_some()}),
            },
        )
        .await?;
        tracing::info!(tenant = %scope.tenant_id(), connection = %id, row = ?model, "connection created");
        Ok(Connection::from(&model))
    }

    /// The tenant's connections, oldest first (needs `admin`).
    pub async fn list(
        &self,
        principal: &Principal,
        request: PageRequest,
    ) -> Result<Page<Connection>> {
        let scope = principal.require_scope("admin")?;
        let page = page::fetch(
            &self.db,
            connection::Entity::find_in(scope),
            connection::Column::Id,
            request,
        )
        .await?;
        Ok(page.map(|m| Connection::from(&m)))
    }

    /// One connection of the principal's tenant (needs `admin`).
    pub async fn get(&self, principal: &Principal, id: ConnectionId) -> Result<Connection> {
        let scope = principal.require_scope("admin")?;
        Ok(Connection::from(&self.row(scope, id).await?))
    }

    async fn row(&self, scope: TenantScope, id: ConnectionId) -> Result<connection::Model> {
        connection::Entity::find_by_id_in(scope, id.uuid())
            .one(&self.db)
            .await?
            .ok_or_else(|| Error::not_found("connection"))
    }

    /// Rename, reconfigure, or rotate or remove the secret (needs `admin`).
    pub async fn update(
        &self,
        principal: &Principal,
        id: ConnectionId,
        changes: ConnectionChanges,
    ) -> Result<Connection> {
        tracing::debug!(actor = %principal.actor, connection = %id, changes = ?changes, "updating a connection");
        let scope = principal.require_scope("admin")?;
        let row = self.row(scope, id).await?;
        let name = changes.name.as_deref().map(parse_name).transpose()?;
        if let Some(config) = &changes.config {
            check_config(config)?;
        }
        let sealed = match &changes.secret {
            Some(Some(secret)) => Some(Some(self.seal(scope, id, secret)?)),
            Some(None) => Some(None),
            None => None,
        };
        let mut active: connection::ActiveModel = row.clone().into();
        if let Some(name) = &name {
            active.name = Set(name.clone());
        }
        if let Some(config) = changes.config.clone() {
            active.config = Set(config);
        }
        if let Some(sealed) = &sealed {
            active.secret_ciphertext = Set(sealed.as_ref().map(|s| s.ciphertext.clone()));
            active.secret_key_id = Set(sealed.as_ref().map(|s| s.key_id.clone()));
        }
        active.updated_at = Set(Utc::now());
        let model = self
            .save_scoped(scope, active)
            .await
            .map_err(|err| name_conflict(err, name.as_deref().unwrap_or(&row.name)))?;
        audit::record(
            &self.db,
            AuditEntry {
                tenant: Some(scope.tenant_id()),
                actor: principal.actor.to_string(),
                action: "connection.update".into(),
                target: id.to_string(),
                data: json!({
                    "name": model.name,
                    "renamed": name.is_some(),
                    "config_changed": changes.config.is_some(),
                    "secret_rotated": matches!(sealed, Some(Some(_))),
                    "secret_removed": matches!(sealed, Some(None)),
                }),
            },
        )
        .await?;
        tracing::info!(tenant = %scope.tenant_id(), connection = %id, row = ?model, "connection updated");
        Ok(Connection::from(&model))
    }

    /// Delete a connection (needs `admin`).
    pub async fn delete(&self, principal: &Principal, id: ConnectionId) -> Result<Connection> {
        let scope = principal.require_scope("admin")?;
        let row = self.row(scope, id).await?;
        connection::Entity::delete_many_in(scope)
            .filter(connection::Column::Id.eq(id.uuid()))
            .exec(&self.db)
            .await?;
        audit::record(
            &self.db,
            AuditEntry {
                tenant: Some(scope.tenant_id()),
                actor: principal.actor.to_string(),
                action: "connection.delete".into(),
                target: id.to_string(),
                data: json!({"name": row.name, "kind": row.kind}),
            },
        )
        .await?;
        Ok(Connection::from(&row))
    }

    /// The names and configs of the scope's tenant's connections of
    /// `kind`, by name, at most [`MAX_OF_KIND`] (no secret is opened).
    pub async fn of_kind(&self, scope: TenantScope, kind: &str) -> Result<Vec<(String, Value)>> {
        let rows = connection::Entity::find_in(scope)
            .filter(connection::Column::Kind.eq(kind))
            .order_by_asc(connection::Column::Name)
            .limit(MAX_OF_KIND)
            .all(&self.db)
            .await?;
        Ok(rows.into_iter().map(|r| (r.name, r.config)).collect())
    }

    /// The connection named `name` in the scope's tenant, with its secret
    /// decrypted: what a tool calls to reach the external system. A secret
    /// sealed with an old key is re-sealed with the current one on the way.
    pub async fn resolve(&self, scope: TenantScope, name: &str) -> Result<DecryptedConnection> {
        let row = connection::Entity::find_in(scope)
            .filter(connection::Column::Name.eq(name))
            .one(&self.db)
            .await?
            .ok_or_else(|| Error::not_found(format!("connection `{name}`")))?;
        let id = ConnectionId::from(row.id);
        let secret = self.open(scope, &row)?;
        if let (Some(secret), Some(key_id)) = (&secret, &row.secret_key_id)
            && key_id != self.keyring()?.current_key_id()
        {
            self.reseal(scope, id, secret).await?;
        }
        let resolved = DecryptedConnection {
            id,
            name: row.name,
            kind: row.kind,
            config: row.config,
            secret,
        };
        tracing::debug!(tenant = %scope.tenant_id(), connection = ?resolved, "connection resolved");
        Ok(resolved)
    }

    /// Re-seal every secret of the tenant that an old key sealed; returns
    /// how many. After this has run for every tenant, old keys can be
    /// dropped from the configuration.
    pub async fn reencrypt(&self, scope: TenantScope) -> Result<u64> {
        let current = self.keyring()?.current_key_id().to_owned();
        let stale = connection::Entity::find_in(scope)
            .filter(connection::Column::SecretKeyId.is_not_null())
            .filter(connection::Column::SecretKeyId.ne(current))
            .all(&self.db)
            .await?;
        let mut count = 0;
        for row in stale {
            if let Some(secret) = self.open(scope, &row)? {
                self.reseal(scope, row.id.into(), &secret).await?;
                count += 1;
            }
        }
        Ok(count)
    }

    async fn reseal(
        &self,
        scope: TenantScope,
        id: ConnectionId,
        secret: &SecretJson,
    ) -> Result<()> {
        let sealed = self.seal(scope, id, secret)?;
        connection::Entity::update_many_in(scope)
            .col_expr(
                connection::Column::SecretCiphertext,
                sea_orm::sea_query::Expr::value(sealed.ciphertext),
            )
            .col_expr(
                connection::Column::SecretKeyId,
                sea_orm::sea_query::Expr::value(sealed.key_id),
            )
            .filter(connection::Column::Id.eq(id.uuid()))
            .exec(&self.db)
            .await?;
        Ok(())
    }

    /// Save changes to a row of the scope's tenant, by a scoped update.
    async fn save_scoped(
        &self,
        scope: TenantScope,
        active: connection::ActiveModel,
    ) -> std::result::Result<connection::Model, sea_orm::DbErr> {
        let id = match &active.id {
            sea_orm::ActiveValue::Set(id) | sea_orm::ActiveValue::Unchanged(id) => *id,
            sea_orm::ActiveValue::NotSet => {
                return Err(sea_orm::DbErr::Custom("connection id missing".into()));
            }
        };
        connection::Entity::update_many_in(scope)
            .set(active)
            .filter(connection::Column::Id.eq(id))
            .exec(&self.db)
            .await?;
        connection::Entity::find_by_id_in(scope, id)
            .one(&self.db)
            .await?
            .ok_or_else(|| sea_orm::DbErr::RecordNotFound("connection".into()))
    }

    fn seal(&self, scope: TenantScope, id: ConnectionId, secret: &SecretJson) -> Result<Sealed> {
        check_secret(secret)?;
        let plaintext = serde_json::to_vec(secret.expose())
            .map_err(|e| Error::internal(format!("cannot encode a secret: {e}")))?;
        self.keyring()?.seal(
            &plaintext,
            associated_data(scope.tenant_id(), id).as_bytes(),
        )
    }

    fn open(&self, scope: TenantScope, row: &connection::Model) -> Result<Option<SecretJson>> {
        let (Some(ciphertext), Some(key_id)) = (&row.secret_ciphertext, &row.secret_key_id) else {
            return Ok(None);
        };
        let sealed = Sealed {
            key_id: key_id.clone(),
            ciphertext: ciphertext.clone(),
        };
        let plaintext = self.keyring()?.open(
            &sealed,
            associated_data(scope.tenant_id(), row.id.into()).as_bytes(),
        )?;
        let value = serde_json::from_slice(&plaintext)
            .map_err(|_| Error::internal("a decrypted secret is not JSON"))?;
        Ok(Some(SecretJson::new(value)))
    }
}

/// What a ciphertext is bound to: its tenant and its row.
fn associated_data(tenant: TenantId, id: ConnectionId) -> String {
    format!("brainstem.connection:{tenant}:{id}")
}

fn name_conflict(err: sea_orm::DbErr, name: &str) -> Error {
    match Error::from(err) {
        Error::Conflict(_) => Error::Conflict(format!("a connection named `{name}` exists")),
        other => other,
    }
}

/// A name tools refer to: 1–100 characters of letters, digits, `.`, `_`, `-`.
fn parse_name(raw: &str) -> Result<String> {
    let ok = (1..=100).contains(&raw.len())
        && raw
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(raw.to_owned())
    } else {
        Err(Error::validation(format!(
            "invalid connection name `{raw}`: use 1-100 characters a-z, A-Z, 0-9, `.`, `_` and `-`"
        )))
    }
}

/// A kind: 1–50 characters of lower-case letters, digits, `.`, `_`, `-`.
fn parse_kind(raw: &str) -> Result<String> {
    let ok = (1..=50).contains(&raw.len())
        && raw
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(raw.to_owned())
    } else {
        Err(Error::validation(format!(
            "invalid connection kind `{raw}`: use 1-50 characters a-z, 0-9, `.`, `_` and `-`"
        )))
    }
}

/// The config is shown to admins and written to no secret store, so it must
/// be an object and must not hold anything that looks secret.
fn check_config(config: &Value) -> Result<()> {
    if !config.is_object() {
        return Err(Error::validation(
            "a connection's config must be a JSON object",
        ));
    }
    match secret_looking_key(config) {
        Some(key) => Err(Error::validation(format!(
            "the config has a `{key}` field, which looks secret: put it in the secret instead"
        ))),
        None => Ok(()),
    }
}

fn secret_looking_key(value: &Value) -> Option<String> {
    match value {
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            if is_pii_key(k) {
                Some(k.clone())
            } else {
                secret_looking_key(v)
            }
        }),
        Value::Array(items) => items.iter().find_map(secret_looking_key),
        _ => None,
    }
}

fn check_secret(secret: &SecretJson) -> Result<()> {
    if secret.expose().is_object() {
        Ok(())
    } else {
        Err(Error::validation(
            "a connection's secret must be a JSON object",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_kinds_and_configs_are_checked() {
        assert!(parse_name("crm.prod-1").is_ok());
        for bad in ["", "a b", "ü", &"x".repeat(101)] {
            assert!(parse_name(bad).is_err(), "{bad:?}");
        }
        assert!(parse_kind("salesforce").is_ok());
        assert!(parse_kind("Salesforce").is_err());
        assert!(check_config(&json!({"base_url": "https://x"})).is_ok());
        assert!(check_config(&json!([1])).is_err());
        let err = check_config(&json!({"auth": {"api_key": "k"}})).unwrap_err();
        assert!(err.to_string().contains("api_key"), "{err}");
        assert!(!err.to_string().contains("\"k\""));
        assert!(check_secret(&SecretJson::new(json!("plain"))).is_err());
    }

    #[test]
    fn a_decrypted_connection_does_not_print_its_secret() {
        let c = DecryptedConnection {
            id: ConnectionId::new(),
            name: "crm".into(),
            kind: "http".into(),
            config: json!({}),
            secret: Some(SecretJson::new(json!({"token": "hunter2"}))),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
        let new = NewConnection {
            name: "crm".into(),
            kind: "http".into(),
            config: json!({"url": "u", "nested": {"password": "hunter3"}}),
            secret: Some(SecretJson::new(json!({"token": "hunter2"}))),
        };
        let printed = format!("{new:?}");
        assert!(
            !printed.contains("hunter2") && !printed.contains("hunter3"),
            "{printed}"
        );
        assert!(printed.contains("\"u\""), "{printed}");
        let changes = ConnectionChanges {
            config: Some(json!({"token": "hunter3"})),
            secret: Some(Some(SecretJson::new(json!({"k": "hunter2"})))),
            ..Default::default()
        };
        let printed = format!("{changes:?}");
        assert!(
            !printed.contains("hunter2") && !printed.contains("hunter3"),
            "{printed}"
        );
    }
}
