//! Hand-written SQL for the parts SeaORM cannot express on both backends
//! (vectors, full-text search): a tiny builder that numbers placeholders the
//! way each backend wants, and the one filter every candidate query shares,
//! which always starts with the tenant.

use std::fmt::Write;

use brainstem_entity::TenantScope;
use chrono::{DateTime, Utc};
use sea_orm::{DbBackend, Statement, Value};
use uuid::Uuid;

pub(crate) struct Sql {
    backend: DbBackend,
    pub text: String,
    values: Vec<Value>,
}

impl Sql {
    pub fn new(backend: DbBackend) -> Self {
        Self {
            backend,
            text: String::new(),
            values: Vec::new(),
        }
    }

    pub fn push(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    /// Append a placeholder bound to `value`.
    pub fn bind(&mut self, value: impl Into<Value>) -> &mut Self {
        self.values.push(value.into());
        match self.backend {
            DbBackend::Postgres => {
                let _ = write!(self.text, "${}", self.values.len());
            }
            _ => self.text.push('?'),
        }
        self
    }

    /// `(?, ?, …)` for a non-empty list.
    pub fn bind_list<V: Into<Value> + Clone>(&mut self, values: &[V]) -> &mut Self {
        self.push("(");
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.bind(v.clone());
        }
        self.push(")")
    }

    pub fn statement(self) -> Statement {
        Statement::from_sql_and_values(self.backend, self.text, self.values)
    }
}

/// Which memories a candidate query may return.
#[derive(Clone, Debug, Default)]
pub struct CandidateFilter {
    /// Empty means every tier.
    pub tiers: Vec<String>,
    /// Empty means every category.
    pub categories: Vec<String>,
    /// Only memories about this entity or mentioning it.
    pub subject: Option<Uuid>,
    /// Only memories whose subject is exactly this (`Some(None)`: no subject).
    pub exact_subject: Option<Option<Uuid>>,
    /// Also return superseded (no longer valid) facts.
    pub include_historical: bool,
    /// "Now", for validity and expiry.
    pub now: Option<DateTime<Utc>>,
    /// Answer as the store stood at this instant instead of now: memories
    /// created after it are out; validity and expiry are judged at it; a
    /// memory deleted (sent to the bin) or expired since is back in.
    pub as_of: Option<DateTime<Utc>>,
    /// Only memories whose vector is of this embedder model (the vector
    /// leg and near-duplicate lookups: vectors of two models never meet).
    pub embedding_model: Option<String>,
}

/// Append ` AND …` conditions on the memories alias `m` (the caller writes
/// `WHERE m.tenant_id = …` first via [`tenant_condition`]).
pub(crate) fn push_filter(sql: &mut Sql, scope: TenantScope, filter: &CandidateFilter) {
    let now = match filter.as_of {
        None => {
            sql.push(" AND m.status = 'ACTIVE'");
            filter.now.unwrap_or_else(Utc::now)
        }
        Some(at) => {
            // A deleted memory's `updated_at` is when it went to the bin
            // (`forget`); an expired one's `expires_at` is judged below.
            sql.push(" AND m.created_at <= ")
                .bind(at)
                .push(" AND (m.status IN ('ACTIVE', 'EXPIRED') OR (m.status = 'DELETED' AND m.updated_at > ")
                .bind(at)
                .push("))");
            at
        }
    };
    if !filter.include_historical {
        sql.push(" AND (m.valid_to IS NULL OR m.valid_to > ")
            .bind(now)
            .push(")");
    }
    sql.push(" AND (m.expires_at IS NULL OR m.expires_at > ")
        .bind(now)
        .push(")");
    if !filter.tiers.is_empty() {
        sql.push(" AND m.tier IN ").bind_list(&filter.tiers);
    }
    if !filter.categories.is_empty() {
        sql.push(" AND m.category IN ")
            .bind_list(&filter.categories);
    }
    if let Some(subject) = filter.subject {
        sql.push(" AND (m.subject_id = ")
            .bind(subject)
            .push(" OR EXISTS (SELECT 1 FROM memory_mentions mm WHERE mm.tenant_id = ")
            .bind(scope.tenant_id().uuid())
            .push(" AND mm.memory_id = m.id AND mm.entity_id = ")
            .bind(subject)
            .push("))");
    }
    if let Some(model) = &filter.embedding_model {
        sql.push(" AND m.embedding_model = ").bind(model.clone());
    }
    match filter.exact_subject {
        None => {}
        Some(None) => {
            sql.push(" AND m.subject_id IS NULL");
        }
        Some(Some(subject)) => {
            sql.push(" AND m.subject_id = ").bind(subject);
        }
    }
}

/// `m.tenant_id = ?`: the first condition of every candidate query.
pub(crate) fn tenant_condition(sql: &mut Sql, scope: TenantScope) {
    sql.push("m.tenant_id = ").bind(scope.tenant_id().uuid());
}
