//! Tenancy by construction.
//!
//! A [`TenantScope`] names the tenant a piece of work runs for. Every
//! tenant-owned entity implements [`TenantOwned`], whose query builders all
//! take a scope and add `tenant_id = ?` themselves, so a service cannot forget
//! the filter. Code outside this crate is expected to use only these builders
//! for tenant-owned tables (checked by the architecture test).

use sea_orm::{
    ColumnTrait, DeleteMany, EntityTrait, QueryFilter, Select, UpdateMany, sea_query::IntoCondition,
};
use uuid::Uuid;

use crate::TenantId;

/// The tenant that a read or write is confined to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TenantScope(TenantId);

impl TenantScope {
    pub fn new(tenant: TenantId) -> Self {
        Self(tenant)
    }

    pub fn tenant_id(self) -> TenantId {
        self.0
    }
}

/// An entity whose rows belong to exactly one tenant.
pub trait TenantOwned: EntityTrait {
    /// The `tenant_id` column.
    fn tenant_column() -> Self::Column;
    /// The primary key column (a UUID).
    fn id_column() -> Self::Column;

    /// All rows of the scope's tenant.
    fn find_in(scope: TenantScope) -> Select<Self> {
        Self::find().filter(Self::tenant_column().eq(scope.tenant_id().uuid()))
    }

    /// One row by id, only if it belongs to the scope's tenant.
    fn find_by_id_in(scope: TenantScope, id: Uuid) -> Select<Self> {
        Self::find_in(scope).filter(Self::id_column().eq(id))
    }

    /// An update confined to the scope's tenant; add further filters to it.
    fn update_many_in(scope: TenantScope) -> UpdateMany<Self> {
        Self::update_many().filter(Self::tenant_column().eq(scope.tenant_id().uuid()))
    }

    /// A delete confined to the scope's tenant; add further filters to it.
    fn delete_many_in(scope: TenantScope) -> DeleteMany<Self> {
        Self::delete_many().filter(Self::tenant_column().eq(scope.tenant_id().uuid()))
    }

    /// The condition `tenant_id = scope` for hand-built queries.
    fn tenant_condition(scope: TenantScope) -> sea_orm::Condition {
        Self::tenant_column()
            .eq(scope.tenant_id().uuid())
            .into_condition()
    }
}
