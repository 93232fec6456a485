//! The tool lists of tenants' MCP servers, kept by this process so that
//! an agent step (which offers every connection's tools at each
//! iteration) and the catalogue do not ask each server every time.
//!
//! Invariants:
//! - A list is kept per tenant and connection name, with a fingerprint of
//!   the connection it was read through (its id, URL, config and
//!   credential): a changed or re-created connection reads afresh.
//! - A list is dropped when its server announces a change: after a
//!   listing, when the server said it announces them and kept a session,
//!   a watcher listens on that session's stream for
//!   `notifications/tools/list_changed` ([`client::watch`]). A list is
//!   also read afresh past `ttl` (a server that announces nothing, or a
//!   change announced before the watcher listened), and on demand
//!   (`refresh`).
//! - At most `capacity` lists are kept; the oldest read is dropped first.
//!   A watcher lives no longer than its list: replacing, dropping or
//!   expiring a list stops it, so at most `capacity` watchers run.

use std::{
    collections::HashMap,
    hash::{DefaultHasher, Hash, Hasher},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use brainstem_entity::TenantId;
use tokio::task::AbortHandle;

use super::{RemoteTool, client};
use crate::kernel::outbound::Outbound;

/// How many lists a process keeps, and for how long.
#[derive(Clone, Copy, Debug)]
pub struct ListSettings {
    pub capacity: usize,
    pub ttl: Duration,
}

impl Default for ListSettings {
    fn default() -> Self {
        Self {
            capacity: 256,
            ttl: Duration::from_secs(300),
        }
    }
}

/// A connection's list, by tenant and connection name.
type Key = (TenantId, String);

struct Entry {
    fingerprint: u64,
    tools: Arc<[RemoteTool]>,
    read_at: Instant,
    generation: u64,
    watcher: Option<AbortHandle>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Some(watcher) = self.watcher.take() {
            watcher.abort();
        }
    }
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Key, Entry>,
    generations: u64,
}

/// The lists, shared by every clone.
#[derive(Clone, Default)]
pub struct ToolLists {
    inner: Arc<Mutex<Inner>>,
    settings: ListSettings,
}

/// What a list was read through: a change to any part reads it afresh.
pub(super) fn fingerprint(
    connection_id: &str,
    url: &str,
    config: &serde_json::Value,
    authorization: Option<&str>,
) -> u64 {
    let mut hasher = DefaultHasher::new();
    (connection_id, url, config.to_string(), authorization).hash(&mut hasher);
    hasher.finish()
}

impl ToolLists {
    pub fn new(settings: ListSettings) -> Self {
        Self {
            inner: Arc::default(),
            settings,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves a map that is still whole.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The list of `key` read through `fingerprint`, if kept and fresh.
    pub(super) fn get(&self, key: &Key, fingerprint: u64) -> Option<Arc<[RemoteTool]>> {
        let inner = self.lock();
        let entry = inner.entries.get(key)?;
        (entry.fingerprint == fingerprint && entry.read_at.elapsed() < self.settings.ttl)
            .then(|| entry.tools.clone())
    }

    /// Keep `tools` as `key`'s list (dropping the oldest list when full);
    /// the generation a watcher of it names.
    fn put(&self, key: Key, fingerprint: u64, tools: Arc<[RemoteTool]>) -> u64 {
        let mut inner = self.lock();
        inner.generations += 1;
        let generation = inner.generations;
        if !inner.entries.contains_key(&key) && inner.entries.len() >= self.settings.capacity {
            let oldest = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.read_at)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                inner.entries.remove(&oldest);
            }
        }
        inner.entries.insert(
            key,
            Entry {
                fingerprint,
                tools,
                read_at: Instant::now(),
                generation,
                watcher: None,
            },
        );
        generation
    }

    /// Drop `key`'s list if it is still the one of `generation`.
    fn drop_generation(&self, key: &Key, generation: u64) {
        let mut inner = self.lock();
        if inner.entries.get(key).map(|e| e.generation) == Some(generation) {
            inner.entries.remove(key);
        }
    }

    /// Keep `tools`, read through `endpoint` as `key`'s list, and, when
    /// the server announces changes on a session (`watch`), listen there
    /// until it does (the list is then dropped), the list is replaced or
    /// dropped, or it expires.
    pub(super) fn keep(
        &self,
        key: Key,
        fingerprint: u64,
        tools: Arc<[RemoteTool]>,
        listen: Option<(Outbound, client::Watch, String, Option<String>)>,
    ) {
        let generation = self.put(key.clone(), fingerprint, tools);
        let Some((outbound, watch, url, authorization)) = listen else {
            return;
        };
        let lists = self.clone();
        let ttl = self.settings.ttl;
        let watched = key.clone();
        let watcher = tokio::spawn(async move {
            let endpoint = client::Endpoint {
                url: &url,
                authorization,
            };
            let heard =
                tokio::time::timeout(ttl, client::watch(&outbound, &endpoint, &watch)).await;
            match heard {
                Ok(Ok(client::Heard::ListChanged)) => {
                    tracing::debug!(connection = %watched.1, "an MCP server's tool list changed");
                    lists.drop_generation(&watched, generation);
                }
                Ok(Ok(client::Heard::Closed)) | Err(_) => {}
                Ok(Err(err)) => {
                    tracing::debug!(connection = %watched.1, error = %err.message, "stopped listening to an MCP server");
                }
            }
            client::close(&outbound, &endpoint, &watch).await;
        });
        let mut inner = self.lock();
        match inner.entries.get_mut(&key) {
            Some(entry) if entry.generation == generation => {
                entry.watcher = Some(watcher.abort_handle());
            }
            // Replaced or dropped already: nothing to listen for.
            _ => watcher.abort(),
        }
    }

    /// Forget `key`'s list (a refresh on demand).
    pub(super) fn forget(&self, key: &Key) {
        self.lock().entries.remove(key);
    }

    /// How many lists are kept (for tests).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(name: &str) -> Arc<[RemoteTool]> {
        Arc::from(vec![RemoteTool {
            key: format!("mcp:c/{name}"),
            name: name.into(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
        }])
    }

    #[tokio::test]
    async fn lists_are_kept_per_fingerprint_bounded_and_expire() {
        let lists = ToolLists::new(ListSettings {
            capacity: 2,
            ttl: Duration::from_secs(60),
        });
        let tenant = TenantId::new();
        let key = |name: &str| (tenant, name.to_owned());
        lists.keep(key("a"), 1, tools("x"), None);
        assert_eq!(lists.get(&key("a"), 1).unwrap()[0].name, "x");
        assert!(lists.get(&key("a"), 2).is_none(), "another connection");
        assert!(lists.get(&(TenantId::new(), "a".into()), 1).is_none());
        lists.keep(key("b"), 1, tools("y"), None);
        lists.keep(key("c"), 1, tools("z"), None);
        assert_eq!(lists.len(), 2);
        assert!(lists.get(&key("a"), 1).is_none(), "the oldest is dropped");
        lists.forget(&key("b"));
        assert!(lists.get(&key("b"), 1).is_none());

        let expired = ToolLists::new(ListSettings {
            capacity: 2,
            ttl: Duration::ZERO,
        });
        expired.keep(key("a"), 1, tools("x"), None);
        assert!(expired.get(&key("a"), 1).is_none());
    }

    #[tokio::test]
    async fn only_the_watched_generation_is_dropped() {
        let lists = ToolLists::default();
        let key = (TenantId::new(), "a".to_owned());
        let first = lists.put(key.clone(), 1, tools("x"));
        let second = lists.put(key.clone(), 1, tools("y"));
        lists.drop_generation(&key, first);
        assert_eq!(lists.get(&key, 1).unwrap()[0].name, "y");
        lists.drop_generation(&key, second);
        assert!(lists.get(&key, 1).is_none());
    }
}
