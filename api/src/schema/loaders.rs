//! DataLoader batching for every relation a list fans out to.
//!
//! One [`Loaders`] value implements [`Loader`] once per relation (async-graphql
//! keeps a batch per key type). Resolvers of a list's items ask for their
//! related rows by key; the loads of one tick are gathered and answered by
//! one domain call, so listing N objects costs the same number of
//! statements as listing one.
//!
//! The loader is shared by the schema and has no cache: keys of tenant data
//! carry the caller's [`TenantScope`], a batch is answered per scope, and
//! nothing outlives the batch, so no tenant can see another's rows and no
//! request sees stale ones.

use std::collections::HashMap;

use async_graphql::dataloader::{DataLoader, Loader};
use brainstem_domain::{
    CapabilityId, Domain,
    capabilities::{Capability, PartnerToolDef},
    plans::Plan,
};

use crate::error::ResultExt;

/// The loader every resolver uses (see [`loader`]).
pub type BrainstemLoader = DataLoader<Loaders>;

pub struct Loaders {
    domain: Domain,
}

impl Loaders {
    pub fn new(domain: Domain) -> BrainstemLoader {
        DataLoader::new(Self { domain }, tokio::spawn)
    }
}

/// The schema's loader.
pub fn loader<'a>(ctx: &'a async_graphql::Context<'_>) -> &'a BrainstemLoader {
    // The schema is always built with the loader (see `schema::build`).
    ctx.data_unchecked::<BrainstemLoader>()
}

/// A capability by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CapabilityKey(pub CapabilityId);

impl Loader<CapabilityKey> for Loaders {
    type Value = Capability;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[CapabilityKey],
    ) -> Result<HashMap<CapabilityKey, Capability>, Self::Error> {
        let ids: Vec<CapabilityId> = keys.iter().map(|k| k.0).collect();
        let found = self.domain.capabilities.get_many(&ids).await.gql()?;
        Ok(found
            .into_iter()
            .map(|c| (CapabilityKey(c.id), c))
            .collect())
    }
}

/// The plans of one capability version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CapabilityPlansKey(pub CapabilityId, pub i32);

impl Loader<CapabilityPlansKey> for Loaders {
    type Value = Vec<Plan>;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[CapabilityPlansKey],
    ) -> Result<HashMap<CapabilityPlansKey, Vec<Plan>>, Self::Error> {
        let versions: Vec<(CapabilityId, i32)> = keys.iter().map(|k| (k.0, k.1)).collect();
        let mut found = self
            .domain
            .capabilities
            .plans_of_many(&versions)
            .await
            .gql()?;
        Ok(keys
            .iter()
            .map(|k| (*k, found.remove(&(k.0, k.1)).unwrap_or_default()))
            .collect())
    }
}

/// The partner tools of one capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CapabilityToolsKey(pub CapabilityId);

impl Loader<CapabilityToolsKey> for Loaders {
    type Value = Vec<PartnerToolDef>;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[CapabilityToolsKey],
    ) -> Result<HashMap<CapabilityToolsKey, Vec<PartnerToolDef>>, Self::Error> {
        let ids: Vec<CapabilityId> = keys.iter().map(|k| k.0).collect();
        let mut found = self.domain.capabilities.tools_of_many(&ids).await.gql()?;
        Ok(keys
            .iter()
            .map(|k| (*k, found.remove(&k.0).unwrap_or_default()))
            .collect())
    }
}
