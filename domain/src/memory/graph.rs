//! The knowledge graph: a tenant's entities (a customer, a carrier, a
//! product…) and typed, weighted relations between them.
//!
//! - Entities are unique per (tenant, type, canonical key). The key defaults
//!   to the name, lowercased with whitespace collapsed; [`Graph::upsert_entity`]
//!   updates the entity with that key if it exists.
//! - Relations are bi-temporal facts ([`facts`]): when they were true
//!   (`valid_from`, `valid_to`) and when Brainstem learned and retired them
//!   (`recorded_at`, `expired_at`). Among current (not expired) rows a
//!   relation is unique per (tenant, type, from, to); older versions stay.
//!   Types in [`SYMMETRIC_RELATION_TYPES`] have no direction: they are
//!   stored once, with the smaller id as `from`, so `A KNOWS B` and
//!   `B KNOWS A` are one row.
//! - [`Graph::neighborhood`] walks current relations (not superseded, no
//!   `valid_to` in the past) breadth-first to depth ≤ [`MAX_DEPTH`];
//!   [`Graph::neighborhood_at`] walks them as of a [`Moment`].
//!
//! - A deleted entity is in the bin (`deleted_at`): out of every read
//!   (lookups, lists, neighbourhoods, the entities memories mention) and
//!   of every walk (relations to it are not followed) until restored;
//!   [`Graph::purge_deleted`] removes it for good, with its relations and
//!   mentions, after the restore window. Upserting its type and key brings
//!   it back.
//!
//! Every function takes a [`TenantScope`]; an id of another tenant is
//! `NotFound`, exactly like an id that does not exist.

mod facts;

use crate::kernel::db::BeginWrite;
use std::collections::{BTreeMap, HashMap, HashSet};

use brainstem_entity::{EntityId, RelationId, TenantOwned, TenantScope, kg_entity, kg_relation};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait,
    ActiveValue::Set,
    ColumnTrait, Condition, DatabaseConnection, QueryFilter, QueryOrder,
    sea_query::{Expr, ExprTrait},
};
use serde_json::Value as Json;

pub use facts::{Moment, RecordedFact, RelationTypeInfo};

use crate::{
    Error, Result,
    kernel::{
        audit::{self, AuditEntry},
        page::{self, Page, PageRequest},
    },
};

/// Deepest neighbourhood a query may ask for.
pub const MAX_DEPTH: u32 = 3;

/// Relation types without direction.
pub const SYMMETRIC_RELATION_TYPES: &[&str] = &[
    "RELATED_TO",
    "SAME_AS",
    "KNOWS",
    "PARTNER_OF",
    "SIBLING_OF",
    "WORKS_WITH",
    "CONNECTED_TO",
];

#[derive(Clone, Debug, PartialEq)]
pub struct Entity {
    pub id: EntityId,
    pub entity_type: String,
    pub name: String,
    pub key: String,
    pub properties: Json,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// When it went to the bin.
    pub deleted_at: Option<DateTime<Utc>>,
}

impl From<kg_entity::Model> for Entity {
    fn from(m: kg_entity::Model) -> Self {
        Self {
            id: m.id.into(),
            entity_type: m.entity_type,
            name: m.name,
            key: m.key,
            properties: m.properties,
            created_at: m.created_at,
            updated_at: m.updated_at,
            deleted_at: m.deleted_at,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Relation {
    pub id: RelationId,
    pub relation_type: String,
    pub from: EntityId,
    pub to: EntityId,
    pub symmetric: bool,
    pub weight: f64,
    pub properties: Json,
    pub valid_from: DateTime<Utc>,
    pub valid_to: Option<DateTime<Utc>>,
    pub provenance: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// When Brainstem learned this version.
    pub recorded_at: DateTime<Utc>,
    /// When Brainstem retired it (closed by a contradicting fact, or
    /// replaced by a restatement with another validity: then
    /// `superseded_by`).
    pub expired_at: Option<DateTime<Utc>>,
    pub superseded_by: Option<RelationId>,
}

impl From<kg_relation::Model> for Relation {
    fn from(m: kg_relation::Model) -> Self {
        Self {
            id: m.id.into(),
            relation_type: m.relation_type,
            from: m.from_id.into(),
            to: m.to_id.into(),
            symmetric: m.symmetric,
            weight: m.weight,
            properties: m.properties,
            valid_from: m.valid_from,
            valid_to: m.valid_to,
            provenance: m.provenance,
            created_at: m.created_at,
            updated_at: m.updated_at,
            recorded_at: m.recorded_at,
            expired_at: m.expired_at,
            superseded_by: m.superseded_by.map(RelationId::from),
        }
    }
}

/// Input of [`Graph::upsert_entity`].
#[derive(Clone, Debug, Default)]
pub struct NewEntity {
    pub entity_type: String,
    pub name: String,
    /// Defaults to the canonical form of the name.
    pub key: Option<String>,
    /// A JSON object; replaces the stored properties when given.
    pub properties: Option<Json>,
}

/// Input of [`Graph::relate`].
#[derive(Clone, Debug, Default)]
pub struct NewRelation {
    pub relation_type: String,
    pub from: EntityId,
    pub to: EntityId,
    /// Defaults to 1.0 for a new fact, to the current weight when the fact
    /// is restated.
    pub weight: Option<f64>,
    pub properties: Option<Json>,
    /// Defaults to now for a new fact, to the current one when restated.
    pub valid_from: Option<DateTime<Utc>>,
    /// `None`: open-ended.
    pub valid_to: Option<DateTime<Utc>>,
    pub provenance: Option<String>,
}

/// Filter of [`Graph::list`].
#[derive(Clone, Debug, Default)]
pub struct EntityFilter {
    pub entity_type: Option<String>,
    /// Case-insensitive substring of the name.
    pub name_contains: Option<String>,
    /// List the bin (deleted entities) instead of the live ones.
    pub deleted: bool,
}

/// An entity reached by a walk, and how many hops away it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Neighbor {
    pub entity: Entity,
    pub distance: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Neighborhood {
    pub center: Entity,
    /// Every entity within the depth, the centre excluded, nearest first.
    pub neighbors: Vec<Neighbor>,
    /// The relations walked.
    pub relations: Vec<Relation>,
}

/// Lowercase, trimmed, inner whitespace collapsed.
pub fn canonical_key(raw: &str) -> String {
    raw.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

fn entity_type(raw: &str) -> Result<String> {
    let t = raw.trim().to_lowercase();
    if t.is_empty() || t.len() > 64 {
        return Err(Error::validation("entity type must have 1-64 characters"));
    }
    Ok(t)
}

/// `works with` → `WORKS_WITH`.
pub fn relation_type(raw: &str) -> Result<String> {
    let t = raw
        .split(|c: char| c.is_whitespace() || c == '-')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("_")
        .to_uppercase();
    if t.is_empty() || t.len() > 64 || !t.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return Err(Error::validation(
            "relation type must have 1-64 letters, digits or underscores",
        ));
    }
    Ok(t)
}

fn properties(value: Option<Json>) -> Result<Option<Json>> {
    match value {
        None => Ok(None),
        Some(v @ Json::Object(_)) => Ok(Some(v)),
        Some(_) => Err(Error::validation("properties must be a JSON object")),
    }
}

#[derive(Clone)]
pub struct Graph {
    db: DatabaseConnection,
}

impl Graph {
    pub fn new(db: DatabaseConnection) -> Self {
        Self { db }
    }

    /// Create the entity, or update the one with the same type and key.
    /// Returns it and whether it was created.
    pub async fn upsert_entity(
        &self,
        scope: TenantScope,
        input: NewEntity,
    ) -> Result<(Entity, bool)> {
        let ty = entity_type(&input.entity_type)?;
        let name = input.name.trim().to_owned();
        if name.is_empty() || name.len() > 200 {
            return Err(Error::validation("entity name must have 1-200 characters"));
        }
        let key = canonical_key(input.key.as_deref().unwrap_or(&name));
        if key.is_empty() || key.len() > 200 {
            return Err(Error::validation("entity key must have 1-200 characters"));
        }
        let props = properties(input.properties)?;
        let now = Utc::now();
        // Two attempts: a concurrent insert of the same key turns into an update.
        for _ in 0..2 {
            if let Some(existing) = self.find_by_key(scope, &ty, &key).await? {
                let mut model: kg_entity::ActiveModel = existing.into();
                model.deleted_at = Set(None);
                model.name = Set(name.clone());
                if let Some(p) = &props {
                    model.properties = Set(p.clone());
                }
                model.updated_at = Set(now);
                let updated = model.update(&self.db).await?;
                return Ok((updated.into(), false));
            }
            let inserted = kg_entity::ActiveModel {
                id: Set(EntityId::new().uuid()),
                tenant_id: Set(scope.tenant_id().uuid()),
                entity_type: Set(ty.clone()),
                name: Set(name.clone()),
                key: Set(key.clone()),
                properties: Set(props.clone().unwrap_or_else(|| serde_json::json!({}))),
                created_at: Set(now),
                updated_at: Set(now),
                deleted_at: Set(None),
            }
            .insert(&self.db)
            .await
            .map_err(Error::from);
            match inserted {
                Ok(m) => return Ok((m.into(), true)),
                Err(Error::Conflict(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::Conflict(
            "the entity changed concurrently; retry".into(),
        ))
    }

    async fn find_by_key(
        &self,
        scope: TenantScope,
        ty: &str,
        key: &str,
    ) -> Result<Option<kg_entity::Model>> {
        Ok(kg_entity::Entity::find_in(scope)
            .filter(kg_entity::Column::EntityType.eq(ty))
            .filter(kg_entity::Column::Key.eq(key))
            .one(&self.db)
            .await?)
    }

    pub async fn get(&self, scope: TenantScope, id: EntityId) -> Result<Entity> {
        kg_entity::Entity::find_by_id_in(scope, id.uuid())
            .filter(kg_entity::Column::DeletedAt.is_null())
            .one(&self.db)
            .await?
            .map(Entity::from)
            .ok_or_else(|| Error::not_found("entity"))
    }

    pub async fn get_relation(&self, scope: TenantScope, id: RelationId) -> Result<Relation> {
        kg_relation::Entity::find_by_id_in(scope, id.uuid())
            .filter(live_ends(scope))
            .one(&self.db)
            .await?
            .map(Relation::from)
            .ok_or_else(|| Error::not_found("relation"))
    }

    /// Several entities of the scope's tenant by id (missing ones left out).
    pub async fn get_many(
        &self,
        scope: TenantScope,
        ids: &[EntityId],
    ) -> Result<HashMap<EntityId, Entity>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let rows = kg_entity::Entity::find_in(scope)
            .filter(kg_entity::Column::Id.is_in(ids.iter().map(|i| i.uuid())))
            .filter(kg_entity::Column::DeletedAt.is_null())
            .all(&self.db)
            .await?;
        Ok(rows
            .into_iter()
            .map(|m| (EntityId::from(m.id), m.into()))
            .collect())
    }

    pub async fn list(
        &self,
        scope: TenantScope,
        filter: EntityFilter,
        request: PageRequest,
    ) -> Result<Page<Entity>> {
        let mut select = kg_entity::Entity::find_in(scope).filter(if filter.deleted {
            kg_entity::Column::DeletedAt.is_not_null()
        } else {
            kg_entity::Column::DeletedAt.is_null()
        });
        if let Some(t) = &filter.entity_type {
            select = select.filter(kg_entity::Column::EntityType.eq(entity_type(t)?));
        }
        if let Some(text) = filter
            .name_contains
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
        {
            // LIKE wildcards in the input are dropped, not interpreted.
            let pattern = format!("%{}%", text.to_lowercase().replace(['\\', '%', '_'], ""));
            select = select.filter(
                Expr::expr(sea_orm::sea_query::Func::lower(Expr::col(
                    kg_entity::Column::Name,
                )))
                .like(pattern),
            );
        }
        let page = page::fetch(&self.db, select, kg_entity::Column::Id, request).await?;
        Ok(page.map(Entity::from))
    }

    /// Entities within `depth` hops of `center` over current relations of
    /// the given types (all types when empty).
    pub async fn neighborhood(
        &self,
        scope: TenantScope,
        center: EntityId,
        depth: u32,
        relation_types: &[String],
        now: DateTime<Utc>,
    ) -> Result<Neighborhood> {
        self.neighborhood_at(scope, center, depth, relation_types, Moment::Now(now))
            .await
    }

    /// [`Self::neighborhood`] over the relations that held at `at`.
    pub async fn neighborhood_at(
        &self,
        scope: TenantScope,
        center: EntityId,
        depth: u32,
        relation_types: &[String],
        at: Moment,
    ) -> Result<Neighborhood> {
        if !(1..=MAX_DEPTH).contains(&depth) {
            return Err(Error::validation(format!("depth must be 1..={MAX_DEPTH}")));
        }
        let types = relation_types
            .iter()
            .map(|t| relation_type(t))
            .collect::<Result<Vec<_>>>()?;
        let center_entity = self.get(scope, center).await?;
        let mut distance: BTreeMap<EntityId, u32> = BTreeMap::new();
        distance.insert(center, 0);
        let mut frontier = vec![center];
        let mut seen_relations: HashSet<RelationId> = HashSet::new();
        let mut relations = Vec::new();
        for hop in 1..=depth {
            if frontier.is_empty() {
                break;
            }
            let ids: Vec<uuid::Uuid> = frontier.iter().map(|e| e.uuid()).collect();
            let mut select = kg_relation::Entity::find_in(scope)
                .filter(
                    Condition::any()
                        .add(kg_relation::Column::FromId.is_in(ids.clone()))
                        .add(kg_relation::Column::ToId.is_in(ids)),
                )
                .filter(at.condition())
                .filter(live_ends(scope))
                .order_by_asc(kg_relation::Column::Id);
            if !types.is_empty() {
                select = select.filter(kg_relation::Column::RelationType.is_in(types.clone()));
            }
            let mut next = Vec::new();
            for row in select.all(&self.db).await? {
                let rel = Relation::from(row);
                for end in [rel.from, rel.to] {
                    if let std::collections::btree_map::Entry::Vacant(v) = distance.entry(end) {
                        v.insert(hop);
                        next.push(end);
                    }
                }
                if seen_relations.insert(rel.id) {
                    relations.push(rel);
                }
            }
            frontier = next;
        }
        let ids: Vec<EntityId> = distance
            .keys()
            .copied()
            .filter(|id| *id != center)
            .collect();
        let entities = self.get_many(scope, &ids).await?;
        let mut neighbors: Vec<Neighbor> = ids
            .into_iter()
            .filter_map(|id| {
                entities.get(&id).map(|e| Neighbor {
                    entity: e.clone(),
                    distance: distance.get(&id).copied().unwrap_or(0),
                })
            })
            .collect();
        neighbors.sort_by(|a, b| {
            a.distance
                .cmp(&b.distance)
                .then(a.entity.id.cmp(&b.entity.id))
        });
        Ok(Neighborhood {
            center: center_entity,
            neighbors,
            relations,
        })
    }

    /// Move an entity to the bin (deleting twice keeps the first time);
    /// audited as `actor`'s.
    pub async fn delete_entity(
        &self,
        scope: TenantScope,
        actor: &str,
        id: EntityId,
        now: DateTime<Utc>,
    ) -> Result<Entity> {
        self.set_binned(scope, actor, id, Some(now)).await
    }

    /// Bring an entity back from the bin, with its relations; audited as
    /// `actor`'s.
    pub async fn restore_entity(
        &self,
        scope: TenantScope,
        actor: &str,
        id: EntityId,
    ) -> Result<Entity> {
        self.set_binned(scope, actor, id, None).await
    }

    /// Put an entity in the bin since `deleted_at`, or take it out
    /// (`None`), with its audit row, in one transaction.
    async fn set_binned(
        &self,
        scope: TenantScope,
        actor: &str,
        id: EntityId,
        deleted_at: Option<DateTime<Utc>>,
    ) -> Result<Entity> {
        let row = self.row(scope, id).await?;
        let action = match (row.deleted_at.is_some(), deleted_at.is_some()) {
            (true, true) => return Ok(row.into()),
            (false, false) => {
                return Err(Error::validation("only a deleted entity can be restored"));
            }
            (false, true) => "entity.delete",
            (true, false) => "entity.restore",
        };
        let txn = self.db.begin_write().await?;
        let mut model: kg_entity::ActiveModel = row.into();
        model.deleted_at = Set(deleted_at);
        let entity = Entity::from(model.update(&txn).await?);
        audit::record(
            &txn,
            AuditEntry::in_tenant(
                scope.tenant_id(),
                actor,
                action,
                entity.id.to_string(),
                serde_json::json!({"type": entity.entity_type, "key": entity.key}),
            ),
        )
        .await?;
        txn.commit().await?;
        Ok(entity)
    }

    /// Delete for good the tenant's entities binned before `before`, with
    /// their relations and mentions (by cascade); returns how many (run by
    /// maintenance).
    pub(crate) async fn purge_deleted<C: sea_orm::ConnectionTrait>(
        db: &C,
        scope: TenantScope,
        before: DateTime<Utc>,
    ) -> Result<u64> {
        Ok(kg_entity::Entity::delete_many_in(scope)
            .filter(kg_entity::Column::DeletedAt.lt(before))
            .exec(db)
            .await?
            .rows_affected)
    }

    /// The entity's row, live or binned.
    async fn row(&self, scope: TenantScope, id: EntityId) -> Result<kg_entity::Model> {
        kg_entity::Entity::find_by_id_in(scope, id.uuid())
            .one(&self.db)
            .await?
            .ok_or_else(|| Error::not_found("entity"))
    }
}

/// Relations whose two ends are live (not in the bin).
fn live_ends(scope: TenantScope) -> Condition {
    use sea_orm::sea_query::Query;
    let binned = Query::select()
        .column(kg_entity::Column::Id)
        .from(kg_entity::Entity)
        .and_where(kg_entity::Column::TenantId.eq(scope.tenant_id().uuid()))
        .and_where(kg_entity::Column::DeletedAt.is_not_null())
        .to_owned();
    Condition::all()
        .add(kg_relation::Column::FromId.not_in_subquery(binned.clone()))
        .add(kg_relation::Column::ToId.not_in_subquery(binned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_types_are_canonical() {
        assert_eq!(
            canonical_key("  Progressive   Insurance "),
            "progressive insurance"
        );
        assert_eq!(relation_type("works with").unwrap(), "WORKS_WITH");
        assert_eq!(relation_type("supplies-to").unwrap(), "SUPPLIES_TO");
        assert!(relation_type("a;drop").is_err());
        assert!(entity_type("  ").is_err());
    }
}
