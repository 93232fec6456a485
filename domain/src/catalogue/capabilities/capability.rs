//! The capability record: what a capability allows ([`Limits`]), the
//! partner tools it registers ([`PartnerToolDef`]), the catalogue entry
//! ([`Capability`], its current version), and the catalogue's reads
//! (`list`, `get`, `get_by_key`, batch loads, plan versions).
//!
//! Capability tables are platform tables: these reads take no tenant scope,
//! and anyone signed in may read the catalogue. A capability plan is stored
//! once per version and never changed; [`plan_of`] reads one back as a
//! [`Plan`] naming its capability.

use std::collections::{BTreeSet, HashMap, HashSet};

use brainstem_entity::{CapabilityId, capability, capability_plan, capability_tool};
use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde_json::{Value, json};

use super::{Capabilities, DEFAULT_TOOL_TIMEOUT_MS, catalogue_row};
use crate::{
    Error, Result,
    catalogue::plans::{Plan, RetryPolicy},
    kernel::page::{self, Page, PageRequest},
};

/// What a capability allows a subscriber; `None` is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Tasks a tenant may start per calendar month (UTC) on this
    /// capability's plans.
    pub max_tasks_per_month: Option<u32>,
}

impl Limits {
    pub(super) fn to_json(self) -> Value {
        match self.max_tasks_per_month {
            Some(n) => json!({"max_tasks_per_month": n}),
            None => json!({}),
        }
    }

    pub(super) fn from_json(value: &Value) -> Self {
        Self {
            max_tasks_per_month: value
                .get("max_tasks_per_month")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok()),
        }
    }
}

/// A partner HTTP tool: an endpoint the executor calls with `POST`, signed
/// with the capability's secret (see [`partner`](super::partner)).
#[derive(Clone, Debug, PartialEq)]
pub struct PartnerToolDef {
    /// `partner.<name>`, unique across the catalogue.
    pub key: String,
    pub description: String,
    pub url: String,
    /// JSON Schema of the arguments (checked at publish and before a call).
    pub input_schema: Value,
    /// JSON Schema the response must match, if any.
    pub output_schema: Option<Value>,
    pub timeout_ms: u64,
    /// How calls to it are retried, set by its capability; `None` keeps
    /// [`RetryPolicy::OUTGOING_CALLS`]. A plan step's own `retry` wins.
    pub retry: Option<RetryPolicy>,
}

impl From<capability_tool::Model> for PartnerToolDef {
    fn from(m: capability_tool::Model) -> Self {
        Self {
            key: m.key,
            description: m.description,
            url: m.url,
            input_schema: m.input_schema,
            output_schema: m.output_schema,
            timeout_ms: u64::try_from(m.timeout_ms).unwrap_or(DEFAULT_TOOL_TIMEOUT_MS),
            retry: m.retry.and_then(|r| serde_json::from_value(r).ok()),
        }
    }
}

/// A capability of the catalogue (its current version).
#[derive(Clone, Debug, PartialEq)]
pub struct Capability {
    pub id: CapabilityId,
    pub key: String,
    pub name: String,
    pub description: String,
    pub version: i32,
    pub limits: Limits,
    pub published_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// When it was archived: it starts no new task and takes no new
    /// subscription.
    pub archived_at: Option<DateTime<Utc>>,
}

impl From<&capability::Model> for Capability {
    fn from(m: &capability::Model) -> Self {
        Self {
            id: m.id.into(),
            key: m.key.clone(),
            name: m.name.clone(),
            description: m.description.clone(),
            version: m.version,
            limits: Limits::from_json(&m.limits),
            published_by: m.published_by.clone(),
            created_at: m.created_at,
            updated_at: m.updated_at,
            archived_at: m.archived_at,
        }
    }
}

impl Capabilities {
    /// The catalogue, oldest first. Anyone signed in may read it.
    pub async fn list(&self, request: PageRequest) -> Result<Page<Capability>> {
        let select = capability::Entity::find();
        let page = page::fetch(&self.db, select, capability::Column::Id, request).await?;
        Ok(page.map(|m| Capability::from(&m)))
    }

    pub async fn get_by_key(&self, key: &str) -> Result<Capability> {
        catalogue_row(&self.db, key)
            .await?
            .map(|m| Capability::from(&m))
            .ok_or_else(|| Error::not_found(format!("capability `{key}`")))
    }

    pub async fn get(&self, id: CapabilityId) -> Result<Capability> {
        capability::Entity::find_by_id(id.uuid())
            .one(&self.db)
            .await?
            .map(|m| Capability::from(&m))
            .ok_or_else(|| Error::not_found("capability"))
    }

    /// Several capabilities at once (for batch loading); missing ids are absent.
    pub async fn get_many(&self, ids: &[CapabilityId]) -> Result<Vec<Capability>> {
        Ok(capability::Entity::find()
            .filter(capability::Column::Id.is_in(ids.iter().map(|i| i.uuid())))
            .all(&self.db)
            .await?
            .iter()
            .map(Capability::from)
            .collect())
    }

    /// The plans of several capability versions at once, by
    /// `(capability, version)`, each list ordered by key.
    pub async fn plans_of_many(
        &self,
        versions: &[(CapabilityId, i32)],
    ) -> Result<HashMap<(CapabilityId, i32), Vec<Plan>>> {
        let ids: BTreeSet<uuid::Uuid> = versions.iter().map(|(c, _)| c.uuid()).collect();
        let wanted: HashSet<(CapabilityId, i32)> = versions.iter().copied().collect();
        let keys = self
            .get_many(
                &ids.iter()
                    .map(|u| CapabilityId::from(*u))
                    .collect::<Vec<_>>(),
            )
            .await?;
        let key_of: HashMap<CapabilityId, String> =
            keys.into_iter().map(|c| (c.id, c.key)).collect();
        let rows = capability_plan::Entity::find()
            .filter(capability_plan::Column::CapabilityId.is_in(ids))
            .filter(
                capability_plan::Column::Version
                    .is_in(versions.iter().map(|(_, v)| *v).collect::<BTreeSet<_>>()),
            )
            .order_by_asc(capability_plan::Column::Key)
            .all(&self.db)
            .await?;
        let mut out: HashMap<(CapabilityId, i32), Vec<Plan>> = HashMap::new();
        for row in rows {
            let at = (CapabilityId::from(row.capability_id), row.version);
            if !wanted.contains(&at) {
                continue;
            }
            let key = key_of.get(&at.0).cloned().unwrap_or_default();
            out.entry(at).or_default().push(plan_of(row, &key)?);
        }
        Ok(out)
    }

    /// The partner tools of several capabilities at once, each list by key.
    pub async fn tools_of_many(
        &self,
        ids: &[CapabilityId],
    ) -> Result<HashMap<CapabilityId, Vec<PartnerToolDef>>> {
        let rows = capability_tool::Entity::find()
            .filter(capability_tool::Column::CapabilityId.is_in(ids.iter().map(|i| i.uuid())))
            .order_by_asc(capability_tool::Column::Key)
            .all(&self.db)
            .await?;
        let mut out: HashMap<CapabilityId, Vec<PartnerToolDef>> = HashMap::new();
        for row in rows {
            out.entry(row.capability_id.into())
                .or_default()
                .push(PartnerToolDef::from(row));
        }
        Ok(out)
    }

    /// Every version of a capability's plan, newest first.
    pub async fn plan_versions(&self, key: &str) -> Result<Vec<Plan>> {
        let rows = capability_plan::Entity::find()
            .filter(capability_plan::Column::Key.eq(key))
            .order_by_desc(capability_plan::Column::Version)
            .all(&self.db)
            .await?;
        let Some(first) = rows.first() else {
            return Err(Error::not_found(format!("plan `{key}`")));
        };
        let capability = self.get(first.capability_id.into()).await?;
        rows.into_iter()
            .map(|row| plan_of(row, &capability.key))
            .collect()
    }
}

pub(super) fn plan_of(row: capability_plan::Model, capability_key: &str) -> Result<Plan> {
    Ok(Plan {
        id: row.id.into(),
        steps: serde_json::from_value(row.steps).map_err(|e| {
            Error::internal(format!(
                "stored capability plan {} is unreadable: {e}",
                row.key
            ))
        })?,
        patterns: serde_json::from_value(row.patterns).unwrap_or_default(),
        key: row.key,
        version: row.version,
        intent: row.intent,
        description: row.description,
        priority: row.priority,
        created_by: row.created_by,
        created_at: row.created_at,
        capability: Some(capability_key.to_owned()),
        archived_at: None,
    })
}
