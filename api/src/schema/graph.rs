//! The knowledge graph on the wire: entities, typed relations between them,
//! neighbourhoods, and `upsertEntity`/`relate`. Reads need `memory:read`,
//! writes `memory:write`, like the memories that mention the entities.
//! Relations are bi-temporal facts (`domain::graph::facts`): every read of
//! them takes an optional `asOf` (valid time, as known now); without it,
//! the current facts. An entity read with `asOf` hands it down to its
//! `relations`.
//! Entity lookups of one request are batched per tenant ([`EntityLoader`]).

use std::collections::HashMap;

use async_graphql::{
    Context, ID, InputObject, Json, Object, SimpleObject,
    connection::Connection,
    dataloader::{DataLoader, Loader},
};
use brainstem_domain::{
    Domain, EntityId, RelationId, TenantScope,
    graph::{
        self, Entity as DomainEntity, EntityFilter as DomainEntityFilter, Moment, NewEntity,
        NewRelation, Relation as DomainRelation, RelationTypeInfo,
    },
};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    context::{domain, principal, require_scope},
    ids::{self, NodeType, encode},
    page::{ListOrder, connection, ordered_page_request},
};
use crate::error::ResultExt;

const READ: &str = "memory:read";
const WRITE: &str = "memory:write";

fn read_scope(ctx: &Context<'_>) -> async_graphql::Result<TenantScope> {
    require_scope(ctx, READ)
}

fn write_scope(ctx: &Context<'_>) -> async_graphql::Result<TenantScope> {
    require_scope(ctx, WRITE)
}

pub(super) fn entity_id(id: &ID) -> async_graphql::Result<EntityId> {
    ids::decode_as(id, NodeType::KgEntity)
        .map(EntityId::from)
        .gql()
}

/// Batches entity lookups of one request (a list of memories with their
/// subjects, relations with their ends). Keys carry the tenant scope, so a
/// batch never mixes tenants; nothing is cached across requests.
pub struct EntityLoader(pub Domain);

impl Loader<(TenantScope, EntityId)> for EntityLoader {
    type Value = DomainEntity;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[(TenantScope, EntityId)],
    ) -> Result<HashMap<(TenantScope, EntityId), DomainEntity>, async_graphql::Error> {
        let mut by_scope: HashMap<TenantScope, Vec<EntityId>> = HashMap::new();
        for (scope, id) in keys {
            by_scope.entry(*scope).or_default().push(*id);
        }
        let mut out = HashMap::new();
        for (scope, ids) in by_scope {
            for (id, entity) in self.0.graph.get_many(scope, &ids).await.gql()? {
                out.insert((scope, id), entity);
            }
        }
        Ok(out)
    }
}

/// The entity loader this area puts in the schema's data.
pub(super) fn entity_loader(domain: &Domain) -> DataLoader<EntityLoader> {
    DataLoader::new(
        EntityLoader(domain.clone()),
        brainstem_domain::row_security::spawn,
    )
}

pub(super) async fn load_entity(
    ctx: &Context<'_>,
    scope: TenantScope,
    id: EntityId,
) -> async_graphql::Result<DomainEntity> {
    ctx.data::<DataLoader<EntityLoader>>()?
        .load_one((scope, id))
        .await?
        .ok_or(brainstem_domain::Error::not_found("entity"))
        .gql()
}

/// A knowledge-graph entity: a customer, a carrier, a product…
/// The second field is the `asOf` it was read with, if any.
#[derive(Clone, Debug)]
pub struct KgEntity(pub DomainEntity, pub Option<DateTime<Utc>>);

impl From<DomainEntity> for KgEntity {
    fn from(e: DomainEntity) -> Self {
        Self(e, None)
    }
}

#[Object]
impl KgEntity {
    pub(crate) async fn id(&self) -> ID {
        encode(NodeType::KgEntity, self.0.id.uuid())
    }
    /// Lowercase type, e.g. `motor_carrier`.
    #[graphql(name = "type")]
    async fn entity_type(&self) -> &str {
        &self.0.entity_type
    }
    async fn name(&self) -> &str {
        &self.0.name
    }
    /// Canonical key, unique per tenant and type.
    async fn key(&self) -> &str {
        &self.0.key
    }
    async fn properties(&self) -> Json<serde_json::Value> {
        Json(self.0.properties.clone())
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
    async fn updated_at(&self) -> DateTime<Utc> {
        self.0.updated_at
    }

    /// When it went to the bin (`deleteEntity`); `null` while live.
    async fn deleted_at(&self) -> Option<DateTime<Utc>> {
        self.0.deleted_at
    }

    /// Its relations (as the subject, or either end of a symmetric type),
    /// optionally of one type: the facts that held at `asOf` (defaulting
    /// to the `asOf` the entity was read with), else the current ones.
    /// Oldest first, at most 500.
    async fn relations(
        &self,
        ctx: &Context<'_>,
        #[graphql(name = "type")] relation_type: Option<String>,
        as_of: Option<DateTime<Utc>>,
    ) -> async_graphql::Result<Vec<KgRelation>> {
        relations_of(ctx, self.0.id, relation_type, Some(as_of.or(self.1))).await
    }
}

/// `Some(asOf)`: the facts holding then (now when `asOf` is `None`);
/// `None`: every version.
async fn relations_of(
    ctx: &Context<'_>,
    subject: EntityId,
    relation_type: Option<String>,
    at: Option<Option<DateTime<Utc>>>,
) -> async_graphql::Result<Vec<KgRelation>> {
    let scope = read_scope(ctx)?;
    let rows = domain(ctx)
        .graph
        .relations_of(
            scope,
            subject,
            relation_type.as_deref(),
            at.map(|a| Moment::of(a, Utc::now())),
        )
        .await
        .gql()?;
    Ok(rows.into_iter().map(KgRelation).collect())
}

/// A typed, weighted edge between two entities.
#[derive(Clone, Debug)]
pub struct KgRelation(pub DomainRelation);

#[Object]
impl KgRelation {
    pub(crate) async fn id(&self) -> ID {
        encode(NodeType::KgRelation, self.0.id.uuid())
    }
    /// Uppercase type, e.g. `SUPPLIES` or `KNOWS`.
    #[graphql(name = "type")]
    async fn relation_type(&self) -> &str {
        &self.0.relation_type
    }
    async fn from(&self, ctx: &Context<'_>) -> async_graphql::Result<KgEntity> {
        let scope = read_scope(ctx)?;
        Ok(KgEntity::from(
            domain(ctx).graph.get(scope, self.0.from).await.gql()?,
        ))
    }
    async fn to(&self, ctx: &Context<'_>) -> async_graphql::Result<KgEntity> {
        let scope = read_scope(ctx)?;
        Ok(KgEntity::from(
            domain(ctx).graph.get(scope, self.0.to).await.gql()?,
        ))
    }
    async fn from_id(&self) -> ID {
        encode(NodeType::KgEntity, self.0.from.uuid())
    }
    async fn to_id(&self) -> ID {
        encode(NodeType::KgEntity, self.0.to.uuid())
    }
    /// Symmetric types have no direction and are stored once.
    async fn symmetric(&self) -> bool {
        self.0.symmetric
    }
    async fn weight(&self) -> f64 {
        self.0.weight
    }
    async fn properties(&self) -> Json<serde_json::Value> {
        Json(self.0.properties.clone())
    }
    async fn valid_from(&self) -> DateTime<Utc> {
        self.0.valid_from
    }
    async fn valid_to(&self) -> Option<DateTime<Utc>> {
        self.0.valid_to
    }
    async fn provenance(&self) -> Option<&str> {
        self.0.provenance.as_deref()
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
    /// When Brainstem learned this version of the fact.
    async fn recorded_at(&self) -> DateTime<Utc> {
        self.0.recorded_at
    }
    /// When Brainstem retired this version: a contradicting fact of a
    /// single-valued type closed it (it still answers `asOf` for the time
    /// it held), or a restatement with another validity replaced it
    /// (`supersededById`). `null` while current.
    async fn expired_at(&self) -> Option<DateTime<Utc>> {
        self.0.expired_at
    }
    /// The version that replaced this one.
    async fn superseded_by_id(&self) -> Option<ID> {
        self.0
            .superseded_by
            .map(|id| encode(NodeType::KgRelation, id.uuid()))
    }
}

/// What a tenant declared about a relation type.
#[derive(SimpleObject)]
pub struct RelationType {
    /// Uppercase type, e.g. `EMPLOYED_BY`.
    #[graphql(name = "type")]
    pub relation_type: String,
    /// At most one current object per subject: a new fact closes the one
    /// it contradicts.
    pub single_valued: bool,
    pub symmetric: bool,
}

impl From<RelationTypeInfo> for RelationType {
    fn from(t: RelationTypeInfo) -> Self {
        Self {
            relation_type: t.relation_type,
            single_valued: t.single_valued,
            symmetric: t.symmetric,
        }
    }
}

/// An entity reached from the centre, and how many hops away.
#[derive(SimpleObject)]
pub struct Neighbor {
    pub entity: KgEntity,
    pub distance: i32,
}

#[derive(SimpleObject)]
pub struct Neighborhood {
    pub center: KgEntity,
    /// Nearest first.
    pub neighbors: Vec<Neighbor>,
    pub relations: Vec<KgRelation>,
}

impl From<graph::Neighborhood> for Neighborhood {
    fn from(n: graph::Neighborhood) -> Self {
        Self::at(n, None)
    }
}

impl Neighborhood {
    /// Its entities read with `as_of`.
    pub fn at(n: graph::Neighborhood, as_of: Option<DateTime<Utc>>) -> Self {
        Self {
            center: KgEntity(n.center, as_of),
            neighbors: n
                .neighbors
                .into_iter()
                .map(|x| Neighbor {
                    entity: KgEntity(x.entity, as_of),
                    distance: x.distance as i32,
                })
                .collect(),
            relations: n.relations.into_iter().map(KgRelation).collect(),
        }
    }
}

#[derive(InputObject, Default)]
pub struct EntityFilter {
    #[graphql(name = "type")]
    pub entity_type: Option<String>,
    /// Case-insensitive part of the name.
    pub name_contains: Option<String>,
    /// `true`: the bin (deleted entities, restorable until purged) instead
    /// of the live ones.
    #[graphql(default)]
    pub deleted: bool,
}

#[derive(Default)]
pub struct GraphQuery;

#[Object]
impl GraphQuery {
    /// One knowledge-graph entity of the caller's tenant. With `asOf`, its
    /// `relations` answer as of that time. An entity has no validity of
    /// its own: its name and properties are the current ones.
    async fn entity(
        &self,
        ctx: &Context<'_>,
        id: ID,
        as_of: Option<DateTime<Utc>>,
    ) -> async_graphql::Result<KgEntity> {
        let scope = read_scope(ctx)?;
        let id = entity_id(&id)?;
        Ok(KgEntity(
            domain(ctx).graph.get(scope, id).await.gql()?,
            as_of,
        ))
    }

    /// The relations of a subject (as `from`, or either end of a symmetric
    /// type), optionally of one type, oldest first, at most 500: those
    /// that held at `asOf` (valid time, as known now), else the current
    /// ones.
    async fn relations(
        &self,
        ctx: &Context<'_>,
        subject_id: ID,
        #[graphql(name = "type")] relation_type: Option<String>,
        as_of: Option<DateTime<Utc>>,
    ) -> async_graphql::Result<Vec<KgRelation>> {
        relations_of(ctx, entity_id(&subject_id)?, relation_type, Some(as_of)).await
    }

    /// Every version ever recorded of a subject's facts of one type
    /// (current, closed by a contradiction, or superseded by a
    /// restatement with another validity), by `validFrom` then `recordedAt`, at most 500.
    async fn relation_history(
        &self,
        ctx: &Context<'_>,
        subject_id: ID,
        #[graphql(name = "type")] relation_type: String,
    ) -> async_graphql::Result<Vec<KgRelation>> {
        relations_of(ctx, entity_id(&subject_id)?, Some(relation_type), None).await
    }

    /// The relation types the tenant declared (`defineRelationType`);
    /// a type not listed is multi-valued.
    async fn relation_types(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<RelationType>> {
        let scope = read_scope(ctx)?;
        let types = domain(ctx).graph.relation_types(scope).await.gql()?;
        Ok(types.into_iter().map(RelationType::from).collect())
    }

    /// Knowledge-graph entities of the caller's tenant, oldest first
    /// unless `orderBy`.
    #[allow(clippy::too_many_arguments)]
    async fn entities(
        &self,
        ctx: &Context<'_>,
        filter: Option<EntityFilter>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
        order_by: Option<ListOrder>,
    ) -> async_graphql::Result<Connection<String, KgEntity>> {
        let scope = read_scope(ctx)?;
        let filter = filter.unwrap_or_default();
        let page = domain(ctx)
            .graph
            .list(
                scope,
                DomainEntityFilter {
                    entity_type: filter.entity_type,
                    name_contains: filter.name_contains,
                    deleted: filter.deleted,
                },
                ordered_page_request(first, after, last, before, order_by)?,
            )
            .await
            .gql()?;
        Ok(connection(page, |e| e.id.uuid(), KgEntity::from))
    }

    /// Entities within `depth` (1–3) hops of an entity over current
    /// relations (those that held at `asOf`, when given), optionally of the
    /// given types only.
    async fn neighborhood(
        &self,
        ctx: &Context<'_>,
        entity_id: ID,
        #[graphql(default = 1)] depth: i32,
        relation_types: Option<Vec<String>>,
        as_of: Option<DateTime<Utc>>,
    ) -> async_graphql::Result<Neighborhood> {
        let scope = read_scope(ctx)?;
        let center = self::entity_id(&entity_id)?;
        let depth = u32::try_from(depth).unwrap_or(0);
        let n = domain(ctx)
            .graph
            .neighborhood_at(
                scope,
                center,
                depth,
                &relation_types.unwrap_or_default(),
                Moment::of(as_of, Utc::now()),
            )
            .await
            .gql()?;
        Ok(Neighborhood::at(n, as_of))
    }
}

#[derive(InputObject)]
pub struct UpsertEntityInput {
    #[graphql(name = "type")]
    pub entity_type: String,
    pub name: String,
    /// Canonical key within the type; defaults to the name, lowercased.
    pub key: Option<String>,
    /// A JSON object; replaces the stored properties when given.
    pub properties: Option<Json<serde_json::Value>>,
}

#[derive(InputObject)]
pub struct EntityIdInput {
    pub id: ID,
}

#[derive(SimpleObject)]
pub struct EntityPayload {
    pub entity: KgEntity,
}

#[derive(SimpleObject)]
pub struct UpsertEntityPayload {
    pub entity: KgEntity,
    pub created: bool,
}

#[derive(InputObject)]
pub struct RelateInput {
    #[graphql(name = "type")]
    pub relation_type: String,
    pub from_id: ID,
    pub to_id: ID,
    /// Defaults to 1 for a new fact, to the current weight when restated.
    pub weight: Option<f64>,
    /// Defaults to `{}` for a new fact, to the current ones when restated.
    pub properties: Option<Json<serde_json::Value>>,
    /// When it became true; defaults to now for a new fact, to the current
    /// one when restated.
    pub valid_from: Option<DateTime<Utc>>,
    /// When it stopped being true; `null`: open-ended.
    pub valid_to: Option<DateTime<Utc>>,
    /// Where the relation came from, e.g. `task:<id>` or a source name.
    pub provenance: Option<String>,
}

#[derive(SimpleObject)]
pub struct RelatePayload {
    /// The current version of the fact.
    pub relation: KgRelation,
    /// Whether a version was recorded (`false`: the current fact restated
    /// with its validity; only its weight, properties or provenance may
    /// have changed).
    pub created: bool,
    /// The version this one replaced, when restated with another validity.
    pub superseded: Option<KgRelation>,
    /// Facts of a single-valued type this one contradicted and closed.
    pub closed: Vec<KgRelation>,
}

#[derive(InputObject)]
pub struct DefineRelationTypeInput {
    #[graphql(name = "type")]
    pub relation_type: String,
    /// At most one current object per subject (symmetric types cannot be).
    pub single_valued: bool,
}

#[derive(SimpleObject)]
pub struct DefineRelationTypePayload {
    pub relation_type: RelationType,
}

#[derive(Default)]
pub struct GraphMutation;

#[Object]
impl GraphMutation {
    /// Create a knowledge-graph entity, or update the one with the same type
    /// and key.
    async fn upsert_entity(
        &self,
        ctx: &Context<'_>,
        input: UpsertEntityInput,
    ) -> async_graphql::Result<UpsertEntityPayload> {
        let scope = write_scope(ctx)?;
        let (entity, created) = domain(ctx)
            .graph
            .upsert_entity(
                scope,
                NewEntity {
                    entity_type: input.entity_type,
                    name: input.name,
                    key: input.key,
                    properties: input.properties.map(|j| j.0),
                },
            )
            .await
            .gql()?;
        Ok(UpsertEntityPayload {
            entity: KgEntity::from(entity),
            created,
        })
    }

    /// Move an entity to the bin: it leaves every read and walk (with its
    /// relations) until `restoreEntity`, and maintenance purges it with
    /// its relations and mentions after `memory_purge_after_days`.
    /// Audited.
    async fn delete_entity(
        &self,
        ctx: &Context<'_>,
        input: EntityIdInput,
    ) -> async_graphql::Result<EntityPayload> {
        let scope = write_scope(ctx)?;
        let id = entity_id(&input.id)?;
        let actor = principal(ctx)?.actor.to_string();
        let entity = domain(ctx)
            .graph
            .delete_entity(scope, &actor, id, Utc::now())
            .await
            .gql()?;
        Ok(EntityPayload {
            entity: KgEntity::from(entity),
        })
    }

    /// Bring a deleted entity back, with its relations (before it is
    /// purged). Audited.
    async fn restore_entity(
        &self,
        ctx: &Context<'_>,
        input: EntityIdInput,
    ) -> async_graphql::Result<EntityPayload> {
        let scope = write_scope(ctx)?;
        let id = entity_id(&input.id)?;
        let actor = principal(ctx)?.actor.to_string();
        let entity = domain(ctx)
            .graph
            .restore_entity(scope, &actor, id)
            .await
            .gql()?;
        Ok(EntityPayload {
            entity: KgEntity::from(entity),
        })
    }

    /// Declare for the tenant whether a relation type is single-valued
    /// (e.g. `EMPLOYED_BY`): from then on a new fact of that type closes the
    /// current one about the same subject with another object. Facts
    /// already recorded are left as they are.
    async fn define_relation_type(
        &self,
        ctx: &Context<'_>,
        input: DefineRelationTypeInput,
    ) -> async_graphql::Result<DefineRelationTypePayload> {
        let scope = write_scope(ctx)?;
        let t = domain(ctx)
            .graph
            .define_relation_type(scope, &input.relation_type, input.single_valued)
            .await
            .gql()?;
        Ok(DefineRelationTypePayload {
            relation_type: t.into(),
        })
    }

    /// Record a fact: a relation of a type between two entities. The
    /// current fact restated with its validity changes nothing but its
    /// weight, properties or provenance; restated with another validity, a
    /// new version replaces the current one (kept in `relationHistory`); of
    /// a single-valued type, it closes the current fact it contradicts.
    async fn relate(
        &self,
        ctx: &Context<'_>,
        input: RelateInput,
    ) -> async_graphql::Result<RelatePayload> {
        let scope = write_scope(ctx)?;
        let recorded = domain(ctx)
            .graph
            .record_fact(
                scope,
                NewRelation {
                    relation_type: input.relation_type,
                    from: entity_id(&input.from_id)?,
                    to: entity_id(&input.to_id)?,
                    weight: input.weight,
                    properties: input.properties.map(|j| j.0),
                    valid_from: input.valid_from,
                    valid_to: input.valid_to,
                    provenance: input.provenance,
                },
            )
            .await
            .gql()?;
        Ok(RelatePayload {
            relation: KgRelation(recorded.relation),
            created: recorded.created,
            superseded: recorded.superseded.map(KgRelation),
            closed: recorded.closed.into_iter().map(KgRelation).collect(),
        })
    }
}

/// An entity of the caller's tenant.
pub(super) async fn entity_node(ctx: &Context<'_>, uuid: Uuid) -> async_graphql::Result<KgEntity> {
    let scope = read_scope(ctx)?;
    let entity = domain(ctx)
        .graph
        .get(scope, EntityId::from(uuid))
        .await
        .gql()?;
    Ok(KgEntity::from(entity))
}

/// A relation of the caller's tenant.
pub(super) async fn relation_node(
    ctx: &Context<'_>,
    uuid: Uuid,
) -> async_graphql::Result<KgRelation> {
    let scope = read_scope(ctx)?;
    let relation = domain(ctx)
        .graph
        .get_relation(scope, RelationId::from(uuid))
        .await
        .gql()?;
    Ok(KgRelation(relation))
}
