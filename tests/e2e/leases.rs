//! Leases under a long step: a step that runs past its worker's lease keeps
//! the task, because the worker heartbeats the lease while the tool runs.
//! The reaper and the other workers leave the task alone, and the step runs
//! once and commits.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use brainstem_domain::{
    TaskId, TenantScope,
    tools::{Tool, ToolContext, ToolError, ToolOutput},
};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio::sync::{Notify, Semaphore};

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp, WAIT, in_tenant, uuid_of},
};

/// The lease the test's workers take, in seconds: short, so that the step
/// outlives it soon; long enough that a heartbeat every third of it is never
/// late on a busy machine.
const LEASE_SECS: u64 = 2;

/// What the held tool saw: when each call started.
struct Held {
    calls: Mutex<Vec<DateTime<Utc>>>,
    started: Notify,
    gate: Semaphore,
}

impl Default for Held {
    fn default() -> Self {
        Self {
            calls: Mutex::default(),
            started: Notify::new(),
            gate: Semaphore::new(0),
        }
    }
}

/// `test.hold`: runs until the test opens its gate.
struct Hold(Arc<Held>);

#[async_trait]
impl Tool for Hold {
    fn key(&self) -> &str {
        "test.hold"
    }
    fn description(&self) -> &str {
        "runs until the test lets it finish"
    }
    async fn call(&self, _ctx: ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        self.0.calls.lock().unwrap().push(Utc::now());
        self.0.started.notify_waiters();
        let permit = self
            .0
            .gate
            .acquire()
            .await
            .map_err(|_| ToolError::fatal("gate closed"))?;
        permit.forget();
        Ok(ToolOutput::with_output(json!({"held": true}), "let go"))
    }
}

for_both_backends!(a_step_that_outlives_its_lease_keeps_it_and_runs_once);

async fn a_step_that_outlives_its_lease_keeps_it_and_runs_once(backend: Backend) {
    let held = Arc::new(Held::default());
    // Two workers and the reaper (every lease) run in the background.
    let app = TestApp::spawn_full(
        backend,
        |c| {
            c.workers = 2;
            c.executor_lease_secs = LEASE_SECS;
            c.executor_poll_ms = 50;
        },
        vec![Arc::new(Hold(held.clone()))],
    )
    .await;
    app.create_tenant("acme").await;
    let scope = TenantScope::new(app.domain.tenants.resolve_claim("acme").await.unwrap().id);
    app.publish_plan(
        "acme",
        json!({"key": "long", "intent": "t.long", "steps": [{"id": "long", "tool": "test.hold"}]}),
    )
    .await
    .data();
    let id = app.start_task("acme", json!({"planKey": "long"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let task_id = TaskId::from(uuid::Uuid::parse_str(&uuid_of(&id)).unwrap());

    // A worker claims the task and its step starts.
    let started_at = loop {
        let started = held.started.notified();
        if let Some(at) = held.calls.lock().unwrap().first() {
            break *at;
        }
        tokio::time::timeout(WAIT, started)
            .await
            .expect("a worker starts the step");
    };

    // The claim's lease ended at most a lease after the step started. Wait
    // (on the stored lease, with a deadline) until a heartbeat has pushed the
    // lease past two leases after the start: that heartbeat ran after the
    // first lease had lapsed, so the step has outlived it.
    let lease = chrono::Duration::seconds(LEASE_SECS as i64);
    let outlived = started_at + lease * 2;
    let deadline = tokio::time::Instant::now() + WAIT;
    let task = loop {
        let task = in_tenant(scope, app.domain.tasks.get(scope, task_id))
            .await
            .unwrap();
        if task.lease_expires_at.is_some_and(|until| until > outlived) {
            break task;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the heartbeat did not keep the lease: it ends {:?} (owner {:?}); the step started {started_at}",
            task.lease_expires_at,
            task.lease_owner,
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(Utc::now() > started_at + lease, "past the first lease");
    assert_eq!(
        task.lease_owner.as_deref(),
        Some(app.executor.config().worker_id.as_str())
    );
    assert_eq!(held.calls.lock().unwrap().len(), 1, "the step runs once");
    // Neither the reaper nor another worker takes the task.
    assert_eq!(
        app.housekeeping.reap_expired(Utc::now()).await.unwrap(),
        0,
        "a heartbeaten lease is not reaped"
    );
    assert!(
        app.executor.claim(Utc::now()).await.unwrap().is_none(),
        "a heartbeaten task is not claimable"
    );

    // The step finishes and commits, under the lease it kept.
    held.gate.add_permits(1);
    let deadline = tokio::time::Instant::now() + WAIT;
    let task = loop {
        let task = app.task("acme", &id).await;
        if task["status"] == "COMPLETED" {
            break task;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task did not complete: {task}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(held.calls.lock().unwrap().len(), 1, "the step ran once");
    let steps = task["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "one attempt: {steps:?}");
    assert_eq!(steps[0]["status"], "COMPLETED");
    let events = task["events"].as_array().unwrap();
    assert!(
        !events
            .iter()
            .any(|e| e["data"]["reason"] == "lease_expired"),
        "the task was never reaped: {events:?}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e["kind"] == "STEP_STARTED")
            .count(),
        1,
        "{events:?}"
    );
}
