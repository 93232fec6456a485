//! Housekeeping beside the executor: its chores share one beat but run
//! apart, so a webhook endpoint that holds its answer never holds up the
//! lease reaper; it stops when told.

use std::{sync::Arc, time::Duration};

use axum::{Router, extract::State, http::StatusCode, routing::post};
use brainstem_domain::{
    housekeeping::{Housekeeping, HousekeepingConfig},
    webhooks::WebhookConfig,
};
use chrono::Utc;
use serde_json::json;
use tokio::sync::{Semaphore, mpsc, watch};

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp, WAIT, poll_until},
};

for_both_backends!(a_held_webhook_delivery_does_not_hold_up_the_reaper);

#[derive(Clone)]
struct Held {
    arrived: mpsc::UnboundedSender<()>,
    release: Arc<Semaphore>,
}

/// An endpoint on 127.0.0.1 whose `/hook` reports each request's arrival,
/// then answers 200 only once the test adds a permit. Its URL, the
/// arrivals, and the permits.
async fn held_endpoint() -> (String, mpsc::UnboundedReceiver<()>, Arc<Semaphore>) {
    let (arrived, arrivals) = mpsc::unbounded_channel();
    let release = Arc::new(Semaphore::new(0));
    async fn hook(State(held): State<Held>) -> StatusCode {
        let _ = held.arrived.send(());
        match held.release.acquire().await {
            Ok(permit) => {
                permit.forget();
                StatusCode::OK
            }
            Err(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
    let app = Router::new().route("/hook", post(hook)).with_state(Held {
        arrived,
        release: release.clone(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, arrivals, release)
}

/// The statuses of the tenant's webhook deliveries.
async fn delivery_statuses(app: &TestApp, tenant: &str) -> Vec<String> {
    let res = app
        .graphql(
            Some(&app.admin_token(tenant)),
            "{ webhookEndpoints { deliveries { status } } }",
            json!({}),
        )
        .await;
    res.data()["webhookEndpoints"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["deliveries"].as_array().unwrap().clone())
        .map(|d| d["status"].as_str().unwrap().to_owned())
        .collect()
}

async fn a_held_webhook_delivery_does_not_hold_up_the_reaper(backend: Backend) {
    // The app runs no background work (no slots); leases last a second.
    let app = TestApp::spawn_with(backend, |c| c.executor_lease_secs = 1).await;
    let (url, mut arrivals, release) = held_endpoint().await;
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({"key": "ok", "intent": "t.ok", "steps": [
            {"id": "keep", "tool": "set_state", "args": {"kept": true}}
        ]}),
    )
    .await
    .data();
    app.graphql(
        Some(&app.admin_token("acme")),
        "mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { \
         secret } }",
        json!({"input": {"name": "crm", "url": url, "events": ["TASK_COMPLETED"]}}),
    )
    .await
    .data();

    // A completed task: its delivery is due at once.
    app.start_task("acme", json!({"input": "go", "planKey": "ok"}))
        .await;
    app.run_tasks().await;
    // Another task, claimed by a worker that then dies: its lease ends
    // within a second.
    let orphan = app
        .start_task("acme", json!({"input": "go", "planKey": "ok"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(app.executor.claim(Utc::now()).await.unwrap().is_some());

    // Housekeeping on a fast beat, whose deliveries wait for an answer far
    // longer than the test does.
    let domain = app.domain.clone().with_webhook_config(WebhookConfig {
        timeout: Duration::from_secs(600),
        ..WebhookConfig::default()
    });
    let (stop, stopping) = watch::channel(false);
    let config = HousekeepingConfig {
        deliver_every: Duration::from_millis(20),
        reap_every: Duration::from_millis(20),
    };
    let running = Housekeeping::new(domain, config, stopping).spawn();
    tokio::time::timeout(WAIT, arrivals.recv())
        .await
        .expect("the due delivery is sent")
        .unwrap();

    // While the endpoint holds the delivery, the reaper returns the orphan.
    poll_until("the reaper returns the orphan to the queue", async || {
        let task = app.task("acme", &orphan).await;
        let last = task["events"].as_array().unwrap().last().cloned();
        let reaped = last.is_some_and(|e| e["data"]["reason"] == "lease_expired");
        (task["status"] == "PENDING" && reaped).then_some(())
    })
    .await;
    assert_eq!(delivery_statuses(&app, "acme").await, ["PENDING"]);

    // Answered, the delivery is recorded once; told to stop, housekeeping
    // ends.
    release.add_permits(1);
    poll_until("the held delivery is recorded as delivered", async || {
        (delivery_statuses(&app, "acme").await == ["DELIVERED"]).then_some(())
    })
    .await;
    stop.send(true).unwrap();
    tokio::time::timeout(WAIT, running)
        .await
        .expect("housekeeping stops when told")
        .unwrap();
}
