//! Relations as bi-temporal facts: recording them, closing the ones a new
//! fact contradicts, answering "as of" a time, and listing a fact's
//! history.
//!
//! Two clocks:
//! - *valid time*, `valid_from`..`valid_to` (open-ended when `None`): when
//!   the fact was true in the world;
//! - *record time*, `recorded_at`..`expired_at`: when Brainstem learned
//!   this version and when it retired it.
//!
//! Invariants:
//! - A row is never overwritten or deleted by a write here. Among current
//!   rows (`expired_at` null) there is at most one per (tenant, type,
//!   from, to) (the partial unique index of migration
//!   `m20261128_143000_bitemporal_facts`).
//! - Restating the current fact with the same validity changes nothing but
//!   its annotations (weight, properties, provenance: not facts of their
//!   own, updated in place as before). Restating it with another validity
//!   retires the current row (`expired_at`, `superseded_by`) and records a
//!   new one: the old row is then out of every valid-time answer, since
//!   Brainstem no longer believes it.
//! - For a type the tenant declared single-valued, a new fact about a
//!   subject (`from`) with another object closes the current fact it
//!   overlaps: its `valid_to` becomes the new fact's `valid_from` and it
//!   is retired (`expired_at`), but, unlike a superseded row, it still
//!   answers for the time it held. A fact learned late about an earlier
//!   time ends where the next known fact (current or closed) starts
//!   instead, and closes a known one it starts inside of. Other types keep several current objects per subject.
//! - Facts about one subject are written one at a time (on PostgreSQL the
//!   subject's entity row is locked; SQLite has one writer).
//! - [`Moment::AsOf`] answers in valid time as known now; [`Moment::Now`]
//!   is what every read without `asOf` answers (superseded rows out, and
//!   rows whose `valid_to` has passed), as before facts had history.

use brainstem_entity::{
    EntityId, RelationId, TenantOwned, TenantScope, kg_relation, kg_relation_type,
};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, DbBackend,
    QueryFilter, QueryOrder, QuerySelect, Statement,
};

use super::{
    Graph, NewRelation, Relation, SYMMETRIC_RELATION_TYPES, live_ends, properties, relation_type,
};
use crate::{Error, Result, kernel::db::BeginWrite};

/// Most versions a history or relation list returns.
pub const MAX_FACTS: u64 = 500;

/// Which state of the graph a read answers from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moment {
    /// The current facts at this instant: not superseded, not yet ended.
    Now(DateTime<Utc>),
    /// The facts that were true at this instant, as Brainstem knows now.
    AsOf(DateTime<Utc>),
}

impl Moment {
    /// `Now(now)` when `as_of` is absent.
    pub fn of(as_of: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Self {
        as_of.map_or(Self::Now(now), Self::AsOf)
    }

    /// The condition on `kg_relations` rows that hold at this moment.
    pub(super) fn condition(self) -> Condition {
        let believed = Condition::all().add(kg_relation::Column::SupersededBy.is_null());
        match self {
            Self::Now(now) => believed.add(
                Condition::any()
                    .add(kg_relation::Column::ValidTo.is_null())
                    .add(kg_relation::Column::ValidTo.gt(now)),
            ),
            Self::AsOf(at) => believed.add(kg_relation::Column::ValidFrom.lte(at)).add(
                Condition::any()
                    .add(kg_relation::Column::ValidTo.is_null())
                    .add(kg_relation::Column::ValidTo.gt(at)),
            ),
        }
    }
}

/// What a tenant declared about a relation type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelationTypeInfo {
    pub relation_type: String,
    /// At most one current object per subject.
    pub single_valued: bool,
    pub symmetric: bool,
}

/// What [`Graph::record_fact`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedFact {
    /// The current version of the fact.
    pub relation: Relation,
    /// Whether a row was written (a new fact or a new version).
    pub created: bool,
    /// The version it replaced, when restated with other terms.
    pub superseded: Option<Relation>,
    /// Facts of a single-valued type it contradicted and closed.
    pub closed: Vec<Relation>,
}

/// Same instant at the databases' precision (microseconds).
fn same_instant(a: DateTime<Utc>, b: DateTime<Utc>) -> bool {
    a.timestamp_micros() == b.timestamp_micros()
}

impl Graph {
    /// Declare whether a relation type is single-valued for the tenant
    /// (symmetric types cannot be: they have no subject).
    pub async fn define_relation_type(
        &self,
        scope: TenantScope,
        raw: &str,
        single_valued: bool,
    ) -> Result<RelationTypeInfo> {
        let ty = relation_type(raw)?;
        let symmetric = SYMMETRIC_RELATION_TYPES.contains(&ty.as_str());
        if symmetric && single_valued {
            return Err(Error::validation(
                "a symmetric relation type cannot be single-valued",
            ));
        }
        let now = Utc::now();
        let existing = kg_relation_type::Entity::find_in(scope)
            .filter(kg_relation_type::Column::RelationType.eq(ty.as_str()))
            .one(&self.db)
            .await?;
        match existing {
            Some(row) => {
                let mut model: kg_relation_type::ActiveModel = row.into();
                model.single_valued = Set(single_valued);
                model.updated_at = Set(now);
                model.update(&self.db).await?;
            }
            None => {
                kg_relation_type::ActiveModel {
                    id: Set(uuid::Uuid::now_v7()),
                    tenant_id: Set(scope.tenant_id().uuid()),
                    relation_type: Set(ty.clone()),
                    single_valued: Set(single_valued),
                    created_at: Set(now),
                    updated_at: Set(now),
                }
                .insert(&self.db)
                .await?;
            }
        }
        Ok(RelationTypeInfo {
            relation_type: ty,
            single_valued,
            symmetric,
        })
    }

    /// The relation types the tenant declared, by name.
    pub async fn relation_types(&self, scope: TenantScope) -> Result<Vec<RelationTypeInfo>> {
        Ok(kg_relation_type::Entity::find_in(scope)
            .order_by_asc(kg_relation_type::Column::RelationType)
            .all(&self.db)
            .await?
            .into_iter()
            .map(|m| RelationTypeInfo {
                symmetric: SYMMETRIC_RELATION_TYPES.contains(&m.relation_type.as_str()),
                relation_type: m.relation_type,
                single_valued: m.single_valued,
            })
            .collect())
    }

    async fn is_single_valued<C: ConnectionTrait>(
        db: &C,
        scope: TenantScope,
        ty: &str,
    ) -> Result<bool> {
        Ok(kg_relation_type::Entity::find_in(scope)
            .filter(kg_relation_type::Column::RelationType.eq(ty))
            .one(db)
            .await?
            .is_some_and(|m| m.single_valued))
    }

    /// Record a fact: see [`Self::record_fact`]. Returns the current version
    /// and whether a row was written.
    pub async fn relate(&self, scope: TenantScope, input: NewRelation) -> Result<(Relation, bool)> {
        let recorded = self.record_fact(scope, input).await?;
        Ok((recorded.relation, recorded.created))
    }

    /// Record the relation of this type between two entities: a new fact,
    /// a restatement (its annotations updated, if any differ) or a new
    /// version of the current one (another validity);
    /// for a single-valued type, close the current facts it contradicts.
    pub async fn record_fact(
        &self,
        scope: TenantScope,
        input: NewRelation,
    ) -> Result<RecordedFact> {
        let ty = relation_type(&input.relation_type)?;
        // Both ends must be the scope's tenant's: NotFound otherwise.
        self.get(scope, input.from).await?;
        self.get(scope, input.to).await?;
        if input.from == input.to {
            return Err(Error::validation("a relation needs two different entities"));
        }
        if let Some(w) = input.weight
            && (!w.is_finite() || w < 0.0)
        {
            return Err(Error::validation("weight must be a non-negative number"));
        }
        if let (Some(from), Some(to)) = (input.valid_from, input.valid_to)
            && to < from
        {
            return Err(Error::validation("validTo must not be before validFrom"));
        }
        let props = properties(input.properties.clone())?;
        let symmetric = SYMMETRIC_RELATION_TYPES.contains(&ty.as_str());
        let (from, to) = if symmetric && input.to < input.from {
            (input.to, input.from)
        } else {
            (input.from, input.to)
        };
        let now = Utc::now();
        let txn = self.db.begin_write().await?;
        if txn.get_database_backend() == DbBackend::Postgres {
            // Facts about one subject are decided one at a time.
            txn.execute_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT id FROM kg_entities WHERE tenant_id = $1 AND id = $2 FOR UPDATE",
                [scope.tenant_id().uuid().into(), from.uuid().into()],
            ))
            .await?;
        }
        let current = kg_relation::Entity::find_in(scope)
            .filter(kg_relation::Column::RelationType.eq(ty.as_str()))
            .filter(kg_relation::Column::FromId.eq(from.uuid()))
            .filter(kg_relation::Column::ToId.eq(to.uuid()))
            .filter(kg_relation::Column::ExpiredAt.is_null())
            .one(&txn)
            .await?;
        if let Some(cur) = &current {
            let same_validity = input
                .valid_from
                .is_none_or(|v| same_instant(v, cur.valid_from))
                && match (input.valid_to, cur.valid_to) {
                    (None, None) => true,
                    (Some(a), Some(b)) => same_instant(a, b),
                    _ => false,
                };
            if same_validity {
                return Self::annotate(
                    txn,
                    cur.clone(),
                    input.weight,
                    props,
                    input.provenance,
                    now,
                )
                .await;
            }
        }
        let valid_from = input
            .valid_from
            .or(current.as_ref().map(|c| c.valid_from))
            .unwrap_or(now);
        let mut valid_to = input.valid_to;
        let mut closed = Vec::new();
        if !symmetric && Self::is_single_valued(&txn, scope, &ty).await? {
            let others = kg_relation::Entity::find_in(scope)
                .filter(kg_relation::Column::RelationType.eq(ty.as_str()))
                .filter(kg_relation::Column::FromId.eq(from.uuid()))
                .filter(kg_relation::Column::ToId.ne(to.uuid()))
                // Every believed version, the closed ones included: a fact
                // learned late must end where the next known one begins.
                .filter(kg_relation::Column::SupersededBy.is_null())
                .filter(live_ends(scope))
                .order_by_asc(kg_relation::Column::ValidFrom)
                .limit(MAX_FACTS)
                .all(&txn)
                .await?;
            for other in others {
                let overlaps = other.valid_to.is_none_or(|t| t > valid_from)
                    && valid_to.is_none_or(|t| other.valid_from < t);
                if !overlaps {
                    continue;
                }
                if other.valid_from <= valid_from {
                    let retired = other.expired_at.unwrap_or(now);
                    let mut model: kg_relation::ActiveModel = other.into();
                    model.valid_to = Set(Some(valid_from));
                    model.expired_at = Set(Some(retired));
                    model.updated_at = Set(now);
                    closed.push(Relation::from(model.update(&txn).await?));
                } else {
                    // Learned late: it held until the current fact began.
                    valid_to = Some(valid_to.map_or(other.valid_from, |t| t.min(other.valid_from)));
                }
            }
        }
        let id = RelationId::new();
        let superseded = match current.clone() {
            Some(cur) => {
                let mut model: kg_relation::ActiveModel = cur.into();
                model.expired_at = Set(Some(now));
                model.superseded_by = Set(Some(id.uuid()));
                model.updated_at = Set(now);
                Some(Relation::from(model.update(&txn).await?))
            }
            None => None,
        };
        let inherited = current.as_ref();
        let inserted = kg_relation::ActiveModel {
            id: Set(id.uuid()),
            tenant_id: Set(scope.tenant_id().uuid()),
            relation_type: Set(ty.clone()),
            from_id: Set(from.uuid()),
            to_id: Set(to.uuid()),
            symmetric: Set(symmetric),
            weight: Set(input.weight.or(inherited.map(|c| c.weight)).unwrap_or(1.0)),
            properties: Set(props
                .or(inherited.map(|c| c.properties.clone()))
                .unwrap_or_else(|| serde_json::json!({}))),
            valid_from: Set(valid_from),
            valid_to: Set(valid_to),
            provenance: Set(input
                .provenance
                .or(inherited.and_then(|c| c.provenance.clone()))),
            created_at: Set(inherited.map_or(now, |c| c.created_at)),
            updated_at: Set(now),
            recorded_at: Set(now),
            expired_at: Set(None),
            superseded_by: Set(None),
        }
        .insert(&txn)
        .await?;
        txn.commit().await?;
        Ok(RecordedFact {
            relation: inserted.into(),
            created: true,
            superseded,
            closed,
        })
    }

    /// The current fact restated with its validity: its annotations
    /// (weight, properties, provenance) are updated in place when they
    /// differ; nothing changes when they do not.
    async fn annotate(
        txn: crate::kernel::db::WriteTransaction,
        current: kg_relation::Model,
        weight: Option<f64>,
        props: Option<serde_json::Value>,
        provenance: Option<String>,
        now: DateTime<Utc>,
    ) -> Result<RecordedFact> {
        let changed = weight.is_some_and(|w| w != current.weight)
            || props.as_ref().is_some_and(|p| *p != current.properties)
            || provenance
                .as_ref()
                .is_some_and(|p| current.provenance.as_ref() != Some(p));
        let relation = if changed {
            let mut model: kg_relation::ActiveModel = current.into();
            if let Some(w) = weight {
                model.weight = Set(w);
            }
            if let Some(p) = props {
                model.properties = Set(p);
            }
            if provenance.is_some() {
                model.provenance = Set(provenance);
            }
            model.updated_at = Set(now);
            let updated = model.update(&txn).await?;
            txn.commit().await?;
            updated
        } else {
            txn.rollback().await?;
            current
        };
        Ok(RecordedFact {
            relation: relation.into(),
            created: false,
            superseded: None,
            closed: Vec::new(),
        })
    }

    /// The relations of `subject` (as `from`, or either end of a symmetric
    /// type), optionally of one type, oldest first: every version ever
    /// recorded when `at` is `None` (the history), else those holding at
    /// `at`. At most [`MAX_FACTS`].
    pub async fn relations_of(
        &self,
        scope: TenantScope,
        subject: EntityId,
        relation_type: Option<&str>,
        at: Option<Moment>,
    ) -> Result<Vec<Relation>> {
        self.get(scope, subject).await?;
        let mut select = kg_relation::Entity::find_in(scope)
            .filter(
                Condition::any()
                    .add(kg_relation::Column::FromId.eq(subject.uuid()))
                    .add(
                        Condition::all()
                            .add(kg_relation::Column::Symmetric.eq(true))
                            .add(kg_relation::Column::ToId.eq(subject.uuid())),
                    ),
            )
            .filter(live_ends(scope));
        if let Some(raw) = relation_type {
            select =
                select.filter(kg_relation::Column::RelationType.eq(super::relation_type(raw)?));
        }
        if let Some(at) = at {
            select = select.filter(at.condition());
        }
        Ok(select
            .order_by_asc(kg_relation::Column::ValidFrom)
            .order_by_asc(kg_relation::Column::RecordedAt)
            .order_by_asc(kg_relation::Column::Id)
            .limit(MAX_FACTS)
            .all(&self.db)
            .await?
            .into_iter()
            .map(Relation::from)
            .collect())
    }
}
