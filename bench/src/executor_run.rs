//! What the executor benchmarks share: the platform over a migrated
//! database with a no-op tool, a fresh tenant with an admin to act as, and
//! completion times read from the event bus.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Instant,
};

use async_trait::async_trait;
use brainstem_domain::{
    Actor, Domain, Principal, Role, TaskId, db,
    events::{EventBus, NOTIFY_LINGER},
    tasks::EventKind,
    tools::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, WithBuiltins},
};
use serde_json::json;
use tokio::sync::Notify;

/// The platform over the database at `url` (migrated; a pool of `pool`),
/// with the built-in tools and [`Noop`], and completions watched from its
/// bus. On PostgreSQL the bus also listens, as a server's does.
pub async fn bench_domain(url: &str, pool: u32) -> anyhow::Result<(Domain, Arc<Completions>)> {
    let conn = db::connect(url, pool).await?;
    db::migrate(&conn).await?;
    let registry = ToolRegistry::builder()
        .with_builtins()?
        .register(Arc::new(Noop))?
        .build();
    let completions = Arc::new(Completions::default());
    let bus = EventBus::new();
    if url.starts_with("postgres") {
        // No connection here holds a credential: revocations go unheard.
        bus.connect_postgres(
            conn.clone(),
            url.to_owned(),
            NOTIFY_LINGER,
            Default::default(),
        );
    }
    completions.watch(&bus);
    Ok((Domain::new(conn, registry, bus), completions))
}

/// `bench.noop`: does nothing, at once.
pub struct Noop;

#[async_trait]
impl Tool for Noop {
    fn key(&self) -> &str {
        "bench.noop"
    }
    fn description(&self) -> &str {
        "does nothing"
    }
    async fn call(
        &self,
        _ctx: ToolContext,
        _args: serde_json::Value,
    ) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::with_output(json!({"ok": true}), "nothing"))
    }
}

/// A new tenant (a random slug) and a tenant admin of it.
pub async fn bench_tenant(domain: &Domain) -> anyhow::Result<Principal> {
    let root = Principal {
        actor: Actor::User("bench".into()),
        tenant: None,
        roles: [Role::PlatformAdmin].into(),
        scopes: Default::default(),
    };
    let slug = format!("bench-{}", &uuid::Uuid::now_v7().simple().to_string()[20..]);
    let scope = domain
        .audit
        .open_platform_scope(&root, "tenant.create", &slug, None)
        .await?;
    let tenant = domain.tenants.create(&scope, &slug, "Bench").await?;
    Ok(Principal {
        actor: Actor::User("bench".into()),
        tenant: Some(tenant.id),
        roles: [Role::TenantAdmin].into(),
        scopes: Default::default(),
    })
}

/// When each task finished (COMPLETED or FAILED), from the event bus.
#[derive(Default)]
pub struct Completions {
    done: Mutex<HashMap<TaskId, Instant>>,
    notify: Notify,
}

impl Completions {
    /// Follow `bus` from now on.
    pub fn watch(self: &Arc<Self>, bus: &EventBus) {
        let mut rx = bus.subscribe();
        let me = self.clone();
        tokio::spawn(async move {
            while let Ok(e) = rx.recv().await {
                if e.kind == EventKind::StatusChanged
                    && matches!(e.status.as_deref(), Some("COMPLETED" | "FAILED"))
                {
                    if let Ok(mut done) = me.done.lock() {
                        done.insert(e.task_id, Instant::now());
                    }
                    me.notify.notify_waiters();
                }
            }
        });
    }

    /// When `id` finished (waiting for it).
    pub async fn wait(&self, id: TaskId) -> Instant {
        loop {
            let notified = self.notify.notified();
            if let Some(at) = self.done.lock().ok().and_then(|mut d| d.remove(&id)) {
                return at;
            }
            notified.await;
        }
    }
}
