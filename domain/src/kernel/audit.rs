//! The audit log: append-only rows, each with the SHA-256 of its canonical
//! JSON form (object keys sorted at every depth), so any change to a stored
//! row can be detected by [`AuditLog::verify`].
//!
//! A tenant's rows go to `audit_log`; a platform admin's actions on no
//! tenant go to `platform_audit_log` (one table per owner, so the tenant's
//! is keyed by tenant like every tenant table). Both hash alike.
//!
//! It is also where cross-tenant power comes from: a [`PlatformScope`] can
//! only be obtained through [`AuditLog::open_platform_scope`], which checks
//! the role and writes an audit row first.

use brainstem_entity::{AuditId, TenantId, TenantScope, audit_log, platform_audit_log};
use chrono::{DateTime, SecondsFormat, Utc};
use sea_orm::{ActiveValue::Set, ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::{
    Principal, Result,
    kernel::{
        origin,
        page::{self, Page, PageRequest},
        redact::redact,
        row_security,
    },
};

/// Proof that a platform admin opened a cross-tenant operation and that it
/// was audited. Functions that read or write across tenants take one.
#[derive(Debug)]
pub struct PlatformScope {
    actor: String,
    audit_id: AuditId,
}

impl PlatformScope {
    pub fn actor(&self) -> &str {
        &self.actor
    }

    /// The audit row that records this use.
    pub fn audit_id(&self) -> AuditId {
        self.audit_id
    }
}

/// One thing to record.
#[derive(Clone, Debug)]
pub struct AuditEntry {
    pub tenant: Option<TenantId>,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub data: Value,
}

impl AuditEntry {
    /// An entry of `tenant`'s log: `actor` did `action` to `target`.
    pub fn in_tenant(
        tenant: TenantId,
        actor: impl Into<String>,
        action: impl Into<String>,
        target: impl Into<String>,
        data: Value,
    ) -> Self {
        Self {
            tenant: Some(tenant),
            actor: actor.into(),
            action: action.into(),
            target: target.into(),
            data,
        }
    }
}

/// A stored audit row.
#[derive(Clone, Debug)]
pub struct AuditRecord {
    pub id: AuditId,
    pub tenant: Option<TenantId>,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub data: Value,
    pub hash: String,
    pub created_at: DateTime<Utc>,
    /// The request that did it, if it came from one.
    pub request_id: Option<String>,
    /// The trace it belongs to (a request's, or its task's).
    pub trace_id: Option<String>,
}

impl From<audit_log::Model> for AuditRecord {
    fn from(m: audit_log::Model) -> Self {
        Self {
            id: m.id.into(),
            tenant: Some(m.tenant_id.into()),
            actor: m.actor,
            action: m.action,
            target: m.target,
            data: m.data,
            hash: m.hash,
            created_at: m.created_at,
            request_id: m.request_id,
            trace_id: m.trace_id,
        }
    }
}

impl From<platform_audit_log::Model> for AuditRecord {
    fn from(m: platform_audit_log::Model) -> Self {
        Self {
            id: m.id.into(),
            tenant: None,
            actor: m.actor,
            action: m.action,
            target: m.target,
            data: m.data,
            hash: m.hash,
            created_at: m.created_at,
            request_id: m.request_id,
            trace_id: m.trace_id,
        }
    }
}

/// Which rows `search` returns; every field narrows the result.
#[derive(Clone, Debug, Default)]
pub struct AuditFilter {
    /// Actions that start with this, e.g. `api_key.`.
    pub action_prefix: Option<String>,
    /// Exactly this actor, e.g. `user:alice`.
    pub actor: Option<String>,
    /// Rows created at or after this instant.
    pub since: Option<DateTime<Utc>>,
    /// Rows created before this instant.
    pub until: Option<DateTime<Utc>>,
}

#[derive(Clone)]
pub struct AuditLog {
    db: DatabaseConnection,
}

impl AuditLog {
    pub fn new(db: DatabaseConnection) -> Self {
        Self { db }
    }

    /// Append one row. Its `data` is redacted before it is hashed and stored.
    /// A tenant's row is written as that tenant, whoever asks; a platform
    /// row goes to the platform's table, which has no row security.
    pub async fn record(&self, entry: AuditEntry) -> Result<AuditRecord> {
        match entry.tenant {
            Some(tenant) => row_security::as_tenant(tenant, record(&self.db, entry)).await,
            None => record(&self.db, entry).await,
        }
    }

    /// Check a platform admin's role, record the use, and hand out the scope.
    pub async fn open_platform_scope(
        &self,
        principal: &Principal,
        action: &str,
        target: &str,
        tenant: Option<TenantId>,
    ) -> Result<PlatformScope> {
        principal.require_platform_admin()?;
        let actor = principal.actor.to_string();
        let row = self
            .record(AuditEntry {
                tenant,
                actor: actor.clone(),
                action: action.to_owned(),
                target: target.to_owned(),
                data: json!({"scope": "platform"}),
            })
            .await?;
        Ok(PlatformScope {
            actor,
            audit_id: row.id,
        })
    }

    /// A tenant's own audit rows, oldest first.
    pub async fn list(
        &self,
        scope: TenantScope,
        request: PageRequest,
    ) -> Result<Page<AuditRecord>> {
        let select = audit_log::Entity::find()
            .filter(audit_log::Column::TenantId.eq(scope.tenant_id().uuid()));
        let page = page::fetch(&self.db, select, audit_log::Column::Id, request).await?;
        Ok(page.map(AuditRecord::from))
    }

    /// A tenant's own audit rows that match `filter`, oldest first.
    pub async fn search(
        &self,
        scope: TenantScope,
        filter: &AuditFilter,
        request: PageRequest,
    ) -> Result<Page<AuditRecord>> {
        let mut select = audit_log::Entity::find()
            .filter(audit_log::Column::TenantId.eq(scope.tenant_id().uuid()));
        if let Some(prefix) = filter.action_prefix.as_deref().filter(|p| !p.is_empty()) {
            // Escape LIKE's wildcards so `api_key.` matches only that prefix.
            let escaped = prefix
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_");
            select = select.filter(
                audit_log::Column::Action
                    .like(sea_orm::sea_query::LikeExpr::new(format!("{escaped}%")).escape('\\')),
            );
        }
        if let Some(actor) = &filter.actor {
            select = select.filter(audit_log::Column::Actor.eq(actor.clone()));
        }
        if let Some(since) = filter.since {
            select = select.filter(audit_log::Column::CreatedAt.gte(since));
        }
        if let Some(until) = filter.until {
            select = select.filter(audit_log::Column::CreatedAt.lt(until));
        }
        let page = page::fetch(&self.db, select, audit_log::Column::Id, request).await?;
        Ok(page.map(AuditRecord::from))
    }

    /// One audit row of the scope's tenant.
    pub async fn get(&self, scope: TenantScope, id: AuditId) -> Result<AuditRecord> {
        audit_log::Entity::find_by_id(id.uuid())
            .filter(audit_log::Column::TenantId.eq(scope.tenant_id().uuid()))
            .one(&self.db)
            .await?
            .map(AuditRecord::from)
            .ok_or_else(|| crate::Error::not_found("audit entry"))
    }

    /// Whether a stored row still matches its hash.
    pub fn verify(record: &AuditRecord) -> bool {
        hash_of(record) == record.hash
    }
}

/// Append a row on any connection (also inside a caller's transaction).
pub async fn record<C: sea_orm::ConnectionTrait>(db: &C, entry: AuditEntry) -> Result<AuditRecord> {
    let (record, row) = prepare(entry);
    db.execute_raw(row.insert(db.get_database_backend()))
        .await?;
    Ok(record)
}

/// A row to append: a tenant's, or the platform's.
pub enum AuditRow {
    Tenant(audit_log::ActiveModel),
    Platform(platform_audit_log::ActiveModel),
}

impl AuditRow {
    /// The `INSERT` that appends it.
    pub fn insert(self, backend: sea_orm::DbBackend) -> sea_orm::Statement {
        use sea_orm::QueryTrait;
        match self {
            Self::Tenant(row) => audit_log::Entity::insert(row).build(backend),
            Self::Platform(row) => platform_audit_log::Entity::insert(row).build(backend),
        }
    }
}

/// The row `entry` becomes (redacted, hashed), for a caller that sends it
/// with other statements in one round trip.
pub fn prepare(entry: AuditEntry) -> (AuditRecord, AuditRow) {
    let origin = origin::current();
    let mut record = AuditRecord {
        id: AuditId::new(),
        tenant: entry.tenant,
        actor: entry.actor,
        action: entry.action,
        target: entry.target,
        data: redact(&entry.data),
        hash: String::new(),
        // Stored timestamps keep microseconds on both backends; hash what is stored.
        created_at: truncate_to_micros(Utc::now()),
        request_id: origin.request_id,
        trace_id: origin.trace_id,
    };
    record.hash = hash_of(&record);
    let row = match record.tenant {
        Some(tenant) => AuditRow::Tenant(audit_log::ActiveModel {
            id: Set(record.id.uuid()),
            tenant_id: Set(tenant.uuid()),
            actor: Set(record.actor.clone()),
            action: Set(record.action.clone()),
            target: Set(record.target.clone()),
            data: Set(record.data.clone()),
            hash: Set(record.hash.clone()),
            created_at: Set(record.created_at),
            request_id: Set(record.request_id.clone()),
            trace_id: Set(record.trace_id.clone()),
        }),
        None => AuditRow::Platform(platform_audit_log::ActiveModel {
            id: Set(record.id.uuid()),
            actor: Set(record.actor.clone()),
            action: Set(record.action.clone()),
            target: Set(record.target.clone()),
            data: Set(record.data.clone()),
            hash: Set(record.hash.clone()),
            created_at: Set(record.created_at),
            request_id: Set(record.request_id.clone()),
            trace_id: Set(record.trace_id.clone()),
        }),
    };
    (record, row)
}

fn truncate_to_micros(t: DateTime<Utc>) -> DateTime<Utc> {
    let micros = t.timestamp_micros();
    DateTime::from_timestamp_micros(micros).unwrap_or(t)
}

fn hash_of(record: &AuditRecord) -> String {
    let mut body = json!({
        "id": record.id.to_string(),
        "tenant": record.tenant.map(|t| t.to_string()),
        "actor": record.actor,
        "action": record.action,
        "target": record.target,
        "data": record.data,
        "created_at": record.created_at.to_rfc3339_opts(SecondsFormat::Micros, true),
    });
    // Only when set: rows written before the ids existed still verify.
    for (key, id) in [
        ("request_id", &record.request_id),
        ("trace_id", &record.trace_id),
    ] {
        if let Some(id) = id {
            body[key] = json!(id);
        }
    }
    sha256_hex(canonical_json(&body).as_bytes())
}

/// The audit hash of a payload (the specifications' `hashForAudit`):
/// PII redacted at every depth, canonical JSON, SHA-256 in lowercase hex.
pub fn hash_for_audit(payload: &Value) -> String {
    sha256_hex(canonical_json(&redact(payload)).as_bytes())
}

/// Hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// JSON text with object keys sorted at every depth and no insignificant
/// whitespace, so equal values always hash alike.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(key) {
                    write_canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let a: Value =
            serde_json::from_str(r#"{"b":1,"a":{"z":[{"y":2,"x":1}],"c":null}}"#).unwrap();
        let b: Value =
            serde_json::from_str(r#"{"a":{"c":null,"z":[{"x":1,"y":2}]},"b":1}"#).unwrap();
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"c":null,"z":[{"x":1,"y":2}]},"b":1}"#
        );
        assert_eq!(canonical_json(&a), canonical_json(&b));
    }

    /// The specifications' worked example, with the hash computed by two
    /// other implementations.
    #[test]
    fn audit_hash_matches_the_golden_vector() {
        let payload =
            json!({"query": "weather in Kigali", "userEmail": "user@example.com", "count": 5});
        assert_eq!(
            canonical_json(&redact(&payload)),
            r#"{"count":5,"query":"weather in Kigali","userEmail":"[REDACTED]"}"#
        );
        assert_eq!(
            hash_for_audit(&payload),
            "0f07ad881d1364c6cfa2727dd0595b0f506bf884079bf95c25ebe8a0dfe1064e"
        );
        // Nested data reaches the hash (the source's replacer-array defect
        // dropped it).
        let a = json!({"query": "q", "opts": {"api_key": "x", "limit": 3}});
        let b = json!({"query": "q", "opts": {"api_key": "y", "limit": 4}});
        assert_ne!(hash_for_audit(&a), hash_for_audit(&b));
        assert_eq!(
            hash_for_audit(&a),
            hash_for_audit(&json!({"opts": {"limit": 3, "api_key": "z"}, "query": "q"}))
        );
    }

    #[test]
    fn hash_detects_any_change() {
        let mut record = AuditRecord {
            id: AuditId::new(),
            tenant: None,
            actor: "user:a".into(),
            action: "tenant.create".into(),
            target: "demo".into(),
            data: json!({"k": 1}),
            hash: String::new(),
            created_at: truncate_to_micros(Utc::now()),
            request_id: None,
            trace_id: None,
        };
        record.hash = hash_of(&record);
        let without_ids = record.hash.clone();
        assert!(AuditLog::verify(&record));
        record.data = json!({"k": 2});
        assert!(!AuditLog::verify(&record));
        record.data = json!({"k": 1});
        // The ids count once set, and a row without them hashes as before.
        record.trace_id = Some("abc".into());
        assert!(!AuditLog::verify(&record));
        record.hash = hash_of(&record);
        assert_ne!(record.hash, without_ids);
        record.request_id = Some("req".into());
        assert!(!AuditLog::verify(&record));
    }
}
