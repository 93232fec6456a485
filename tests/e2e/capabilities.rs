//! The capability catalogue and subscriptions, end to end: platform admins
//! publish, tenant admins subscribe, and a capability's plans run only for
//! tenants whose subscription is on (ACTIVE, or a TRIAL before its end).

use brainstem_domain::{TenantId, TenantScope, page::PageRequest};
use chrono::{Duration, Utc};
use serde_json::{Value, json};

use crate::{
    helpers::{Gql, TestApp, uuid_of},
    on_both_backends,
};

on_both_backends!(
    a_capability_plan_needs_a_subscription,
    trial_expiry_switches_a_capability_off,
    subscriptions_are_isolated_between_tenants,
    publishing_is_for_platform_admins_and_checked,
    a_capability_quota_stops_tasks_for_the_month,
    an_archived_capability_starts_nothing_new,
);

pub const CAPABILITY_FIELDS: &str = "id key name description version limits { maxTasksPerMonth } \
    intents requiredTools plans { key version intent capabilityKey } \
    tools { key url timeoutMs inputSchema outputSchema }";

const SUBSCRIPTION_FIELDS: &str =
    "id status active trialEndsAt cancelledAt capability { key name }";

/// The capability most tests use: one plan for the `fleet.quote` intent.
pub fn quotes_capability() -> Value {
    json!({
        "key": "fleet.quotes",
        "name": "Fleet Quotes",
        "description": "Quotes for fleets",
        "plans": [{
            "key": "fleet.quote_request",
            "intent": "fleet.quote",
            "patterns": ["\\bquote\\b"],
            "steps": [{"id": "mark", "tool": "set_state", "args": {"quoted": true, "who": "{{ input.payload.name }}"}}],
        }],
        "limits": {"maxTasksPerMonth": 1000},
    })
}

pub async fn publish_capability(app: &TestApp, input: Value) -> Gql {
    app.graphql(
        Some(&app.platform_admin_token()),
        &format!(
            "mutation($input: PublishCapabilityInput!) {{ publishCapability(input: $input) {{ signingSecret capability {{ {CAPABILITY_FIELDS} }} }} }}"
        ),
        json!({"input": input}),
    )
    .await
}

pub async fn subscribe(app: &TestApp, tenant: &str, key: &str, trial_days: Option<u32>) -> Gql {
    app.graphql(
        Some(&app.admin_token(tenant)),
        &format!(
            "mutation($input: SubscribeCapabilityInput!) {{ subscribeCapability(input: $input) {{ subscription {{ {SUBSCRIPTION_FIELDS} }} }} }}"
        ),
        json!({"input": {"capabilityKey": key, "trialDays": trial_days}}),
    )
    .await
}

async fn cancel(app: &TestApp, tenant: &str, key: &str) -> Gql {
    app.graphql(
        Some(&app.admin_token(tenant)),
        &format!(
            "mutation($input: CancelSubscriptionInput!) {{ cancelSubscription(input: $input) {{ subscription {{ {SUBSCRIPTION_FIELDS} }} }} }}"
        ),
        json!({"input": {"capabilityKey": key}}),
    )
    .await
}

async fn subscriptions(app: &TestApp, tenant: &str) -> Vec<Value> {
    let res = app
        .graphql(
            Some(&app.admin_token(tenant)),
            &format!(
                "{{ subscriptions(first: 50) {{ edges {{ node {{ {SUBSCRIPTION_FIELDS} }} }} }} }}"
            ),
            json!({}),
        )
        .await;
    res.data()["subscriptions"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"].clone())
        .collect()
}

/// `startTask` as the tenant's admin, returning the raw response.
async fn try_start(app: &TestApp, tenant: &str, input: Value) -> Gql {
    app.graphql(
        Some(&app.admin_token(tenant)),
        "mutation($input: StartTaskInput!) { startTask(input: $input) { task { id status } } }",
        json!({"input": input}),
    )
    .await
}

fn assert_forbidden_naming_capability(res: &Gql) {
    assert_eq!(res.error_code(), "FORBIDDEN", "{}", res.body);
    let message = res.error_message();
    assert!(
        message.contains("`fleet.quotes`") && message.contains("Fleet Quotes"),
        "the message names the capability: {message}"
    );
}

async fn tenant_scope(app: &TestApp, slug: &str) -> TenantScope {
    let id = app.create_tenant(slug).await;
    TenantScope::new(TenantId::from(
        uuid::Uuid::parse_str(&uuid_of(&id)).unwrap(),
    ))
}

async fn a_capability_plan_needs_a_subscription(app: TestApp) {
    app.create_tenant("acme").await;
    let published = publish_capability(&app, quotes_capability()).await;
    let secret = published.data()["publishCapability"]["signingSecret"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(secret.starts_with("bcs_"), "{secret}");
    let capability = &published.data()["publishCapability"]["capability"];
    assert_eq!(capability["version"], 1);
    assert_eq!(capability["intents"], json!(["fleet.quote"]));
    assert_eq!(capability["requiredTools"], json!(["set_state"]));
    assert_eq!(
        capability["plans"][0]["capabilityKey"], "fleet.quotes",
        "{capability}"
    );

    // Without a subscription: the plan, the intent and detection are off.
    let res = try_start(&app, "acme", json!({"planKey": "fleet.quote_request"})).await;
    assert_forbidden_naming_capability(&res);
    let res = try_start(&app, "acme", json!({"intent": "fleet.quote"})).await;
    assert_forbidden_naming_capability(&res);
    let detected = app
        .start_task(
            "acme",
            json!({"input": "a quote for my trucks", "confidenceThreshold": 0.0}),
        )
        .await;
    app.run_tasks().await;
    let detected = app.task("acme", detected["id"].as_str().unwrap()).await;
    assert_eq!(detected["intent"], "general_instruction", "{detected}");
    assert_eq!(detected["status"], "COMPLETED");

    // Subscribed: detection offers the capability's intent and runs its plan.
    let sub = subscribe(&app, "acme", "fleet.quotes", None).await;
    let sub = &sub.data()["subscribeCapability"]["subscription"];
    assert_eq!(sub["status"], "ACTIVE");
    assert_eq!(sub["capability"]["name"], "Fleet Quotes");
    let task = app
        .start_task(
            "acme",
            json!({"input": "a quote for my trucks", "payload": {"name": "Ann"}}),
        )
        .await;
    app.run_tasks().await;
    let task = app.task("acme", task["id"].as_str().unwrap()).await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    assert_eq!(task["intent"], "fleet.quote");
    assert_eq!(
        task["plan"],
        json!({"key": "fleet.quote_request", "version": 1})
    );
    assert_eq!(task["state"], json!({"quoted": true, "who": "Ann"}));
    let by_key = try_start(&app, "acme", json!({"planKey": "fleet.quote_request"})).await;
    let pending_id = by_key.data()["startTask"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Cancelled: off at once, also for a task started before but not run.
    let cancelled = cancel(&app, "acme", "fleet.quotes").await;
    let cancelled = &cancelled.data()["cancelSubscription"]["subscription"];
    assert_eq!(cancelled["status"], "CANCELLED");
    assert_eq!(cancelled["active"], false);
    assert!(cancelled["cancelledAt"].is_string());
    let res = try_start(&app, "acme", json!({"planKey": "fleet.quote_request"})).await;
    assert_forbidden_naming_capability(&res);
    app.run_tasks().await;
    let pending = app.task("acme", &pending_id).await;
    assert_eq!(pending["status"], "FAILED", "{pending}");
    assert!(
        pending["error"]
            .as_str()
            .unwrap()
            .contains("`fleet.quotes`"),
        "{pending}"
    );
    assert_eq!(
        cancel(&app, "acme", "fleet.quotes").await.error_code(),
        "CONFLICT"
    );

    // A tenant's own plan of the same key overrides the capability's.
    app.publish_plan(
        "acme",
        json!({"key": "fleet.quote_request", "intent": "own.quote",
               "steps": [{"id": "own", "tool": "set_state", "args": {"own": true}}]}),
    )
    .await
    .data();
    let own = app
        .start_task("acme", json!({"planKey": "fleet.quote_request"}))
        .await;
    app.run_tasks().await;
    let own = app.task("acme", own["id"].as_str().unwrap()).await;
    assert_eq!(own["state"], json!({"own": true}), "{own}");
}

async fn trial_expiry_switches_a_capability_off(app: TestApp) {
    let scope = tenant_scope(&app, "acme").await;
    publish_capability(&app, quotes_capability()).await.data();
    let before = Utc::now();
    let trial = subscribe(&app, "acme", "fleet.quotes", Some(7)).await;
    let trial = &trial.data()["subscribeCapability"]["subscription"];
    assert_eq!(trial["status"], "TRIAL");
    let ends: chrono::DateTime<Utc> = trial["trialEndsAt"].as_str().unwrap().parse().unwrap();
    assert!(ends >= before + Duration::days(7) && ends <= Utc::now() + Duration::days(7));
    let started = try_start(&app, "acme", json!({"planKey": "fleet.quote_request"})).await;
    assert!(started.data()["startTask"]["task"]["id"].is_string());

    // A second trial while one runs is refused.
    assert_eq!(
        subscribe(&app, "acme", "fleet.quotes", Some(7))
            .await
            .error_code(),
        "CONFLICT"
    );

    // Read with a clock past the end, the trial is expired already.
    let later = ends + Duration::seconds(1);
    let read = crate::helpers::in_tenant(
        scope,
        app.domain
            .capabilities
            .subscriptions(scope, PageRequest::default(), later),
    )
    .await
    .unwrap();
    assert_eq!(
        read.items[0].status,
        brainstem_domain::capabilities::SubscriptionStatus::Expired
    );
    // The maintenance pass leaves running trials alone and stores the end
    // of ended ones.
    assert_eq!(
        app.domain
            .capabilities
            .expire_trials(Utc::now())
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        app.domain.capabilities.expire_trials(later).await.unwrap(),
        1
    );
    let subs = subscriptions(&app, "acme").await;
    assert_eq!(subs[0]["status"], "EXPIRED");
    assert_eq!(subs[0]["active"], false);
    let res = try_start(&app, "acme", json!({"planKey": "fleet.quote_request"})).await;
    assert_forbidden_naming_capability(&res);

    // One trial per tenant and capability; subscribing for real works.
    let again = subscribe(&app, "acme", "fleet.quotes", Some(7)).await;
    assert_eq!(again.error_code(), "CONFLICT");
    assert!(again.error_message().contains("trial"), "{}", again.body);
    let active = subscribe(&app, "acme", "fleet.quotes", None).await;
    assert_eq!(
        active.data()["subscribeCapability"]["subscription"]["status"],
        "ACTIVE"
    );
    let started = try_start(&app, "acme", json!({"planKey": "fleet.quote_request"})).await;
    assert!(started.data()["startTask"]["task"]["id"].is_string());
}

async fn subscriptions_are_isolated_between_tenants(app: TestApp) {
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    publish_capability(&app, quotes_capability()).await.data();
    let sub = subscribe(&app, "acme", "fleet.quotes", None).await;
    let sub_id = sub.data()["subscribeCapability"]["subscription"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // acme's subscription is acme's alone.
    assert_eq!(subscriptions(&app, "acme").await.len(), 1);
    assert!(subscriptions(&app, "globex").await.is_empty());
    let res = try_start(&app, "globex", json!({"planKey": "fleet.quote_request"})).await;
    assert_forbidden_naming_capability(&res);
    let res = app
        .graphql(
            Some(&app.admin_token("globex")),
            "query($id: ID!) { node(id: $id) { id } }",
            json!({"id": sub_id}),
        )
        .await;
    assert_eq!(res.error_code(), "NOT_FOUND");
    let res = app
        .graphql(
            Some(&app.admin_token("acme")),
            "query($id: ID!) { node(id: $id) { ... on CapabilitySubscription { status } } }",
            json!({"id": sub_id}),
        )
        .await;
    assert_eq!(res.data()["node"]["status"], "ACTIVE");
    assert_eq!(
        cancel(&app, "globex", "fleet.quotes").await.error_code(),
        "NOT_FOUND"
    );
    assert_eq!(subscriptions(&app, "acme").await[0]["status"], "ACTIVE");

    // Only tenant admins subscribe.
    let member = app.token(Some("globex"), &[brainstem_domain::Role::Member]);
    let res = app
        .graphql(
            Some(&member),
            "mutation { subscribeCapability(input: {capabilityKey: \"fleet.quotes\"}) { subscription { id } } }",
            json!({}),
        )
        .await;
    assert_eq!(res.error_code(), "FORBIDDEN");
    assert_eq!(
        subscribe(&app, "globex", "no.such", None)
            .await
            .error_code(),
        "NOT_FOUND"
    );
}

async fn publishing_is_for_platform_admins_and_checked(app: TestApp) {
    app.create_tenant("acme").await;
    let res = app
        .graphql(
            Some(&app.admin_token("acme")),
            "mutation($input: PublishCapabilityInput!) { publishCapability(input: $input) { capability { key } } }",
            json!({"input": quotes_capability()}),
        )
        .await;
    assert_eq!(res.error_code(), "FORBIDDEN");

    let mut bad = quotes_capability();
    bad["plans"][0]["steps"][0]["tool"] = json!("no_such_tool");
    let res = publish_capability(&app, bad).await;
    assert_eq!(res.error_code(), "BAD_USER_INPUT");
    assert!(
        res.error_message().contains(
            "plan `fleet.quote_request` step `mark`: tool `no_such_tool` is not registered"
        ),
        "{}",
        res.error_message()
    );

    let first = publish_capability(&app, quotes_capability()).await;
    let first_secret = first.data()["publishCapability"]["signingSecret"].clone();
    let mut v2 = quotes_capability();
    v2["description"] = json!("Better quotes");
    let second = publish_capability(&app, v2.clone()).await;
    let second = &second.data()["publishCapability"];
    assert_eq!(second["capability"]["version"], 2);
    assert_eq!(second["capability"]["plans"][0]["version"], 2);
    assert!(second["signingSecret"].is_null(), "shown once");
    v2["rotateSecret"] = json!(true);
    let rotated = publish_capability(&app, v2).await;
    let rotated = rotated.data()["publishCapability"]["signingSecret"].clone();
    assert!(rotated.is_string() && rotated != first_secret);

    // A plan key belongs to one capability.
    let mut other = quotes_capability();
    other["key"] = json!("fleet.other");
    let res = publish_capability(&app, other).await;
    assert_eq!(res.error_code(), "CONFLICT");
    assert!(
        res.error_message().contains("`fleet.quotes`"),
        "{}",
        res.body
    );

    // Anyone signed in reads the catalogue.
    let res = app
        .graphql(
            Some(&app.admin_token("acme")),
            &format!("{{ capabilities(first: 10) {{ edges {{ node {{ {CAPABILITY_FIELDS} }} }} }} capability(key: \"fleet.quotes\") {{ description version }} }}"),
            json!({}),
        )
        .await;
    let data = res.data();
    assert_eq!(data["capabilities"]["edges"].as_array().unwrap().len(), 1);
    assert_eq!(
        data["capability"],
        json!({"description": "Better quotes", "version": 3})
    );
    let res = app
        .graphql(
            Some(&app.admin_token("acme")),
            "{ capability(key: \"nope\") { key } }",
            json!({}),
        )
        .await;
    assert_eq!(res.error_code(), "NOT_FOUND");
    let res = app
        .graphql(
            None,
            "{ capabilities { edges { node { key } } } }",
            json!({}),
        )
        .await;
    assert_eq!(res.error_code(), "UNAUTHENTICATED");
}

async fn a_capability_quota_stops_tasks_for_the_month(app: TestApp) {
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    let mut def = quotes_capability();
    def["limits"] = json!({"maxTasksPerMonth": 2});
    publish_capability(&app, def).await.data();
    for tenant in ["acme", "globex"] {
        subscribe(&app, tenant, "fleet.quotes", None).await.data();
    }
    // Named at start: counted at start.
    for key in ["q1", "q2"] {
        let res = try_start(
            &app,
            "acme",
            json!({"planKey": "fleet.quote_request", "idempotencyKey": key}),
        )
        .await;
        res.data();
    }
    let res = try_start(&app, "acme", json!({"planKey": "fleet.quote_request"})).await;
    assert_eq!(res.error_code(), "RATE_LIMITED", "{}", res.body);
    let message = res.error_message();
    assert!(
        message.contains("`fleet.quotes`") && message.contains("2 tasks per month"),
        "{message}"
    );
    let retry_after = res.body["errors"][0]["extensions"]["retryAfter"]
        .as_u64()
        .unwrap();
    assert!(
        retry_after > 0 && retry_after <= 31 * 24 * 3600,
        "{retry_after}"
    );
    // A repeat of a task already started is not a new task.
    let again = try_start(
        &app,
        "acme",
        json!({"planKey": "fleet.quote_request", "idempotencyKey": "q1"}),
    )
    .await;
    again.data();
    // Detected: counted when planning picks the plan.
    let detected = app
        .start_task("acme", json!({"input": "one more quote please"}))
        .await;
    app.run_tasks().await;
    let detected = app.task("acme", detected["id"].as_str().unwrap()).await;
    assert_eq!(detected["status"], "FAILED", "{detected}");
    assert!(
        detected["error"]
            .as_str()
            .unwrap()
            .contains("quota exceeded"),
        "{detected}"
    );
    // Each tenant has its own quota.
    let res = try_start(&app, "globex", json!({"planKey": "fleet.quote_request"})).await;
    res.data();
}

/// A platform admin archives a capability: its subscribers start no new
/// task on its plans (with the reason), intent detection skips them, it
/// takes no new subscription; a task already started finishes. Restoring
/// it makes it current again. Audited; platform admins only.
async fn an_archived_capability_starts_nothing_new(app: TestApp) {
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    publish_capability(&app, quotes_capability()).await.data();
    subscribe(&app, "acme", "fleet.quotes", None).await.data();
    let started = try_start(
        &app,
        "acme",
        json!({"planKey": "fleet.quote_request", "payload": {"name": "Ann"}}),
    )
    .await;
    let started_id = started.data()["startTask"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let archive = |name: &'static str, token: String| {
        let app = &app;
        async move {
            app.graphql(
                Some(&token),
                &format!("mutation {{ {name}(input: {{key: \"fleet.quotes\"}}) {{ capability {{ key archivedAt }} }} }}"),
                json!({}),
            )
            .await
        }
    };
    assert_eq!(
        archive("archiveCapability", app.admin_token("acme"))
            .await
            .error_code(),
        "FORBIDDEN"
    );
    let archived = archive("archiveCapability", app.platform_admin_token()).await;
    assert!(archived.data()["archiveCapability"]["capability"]["archivedAt"].is_string());

    let refused = try_start(&app, "acme", json!({"planKey": "fleet.quote_request"})).await;
    assert_eq!(refused.error_code(), "BAD_USER_INPUT");
    assert!(
        refused.error_message().contains("which is archived"),
        "{}",
        refused.error_message()
    );
    let detected = try_start(&app, "acme", json!({"input": "a quote for three trucks"})).await;
    let detected_id = detected.data()["startTask"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let new_subscriber = subscribe(&app, "globex", "fleet.quotes", None).await;
    assert_eq!(new_subscriber.error_code(), "BAD_USER_INPUT");
    assert!(new_subscriber.error_message().contains("archived"));

    app.run_tasks().await;
    let done = app.task("acme", &started_id).await;
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(done["state"]["quoted"], true);
    let other = app.task("acme", &detected_id).await;
    assert_ne!(other["plan"]["key"], "fleet.quote_request", "{other}");

    let restored = archive("restoreCapability", app.platform_admin_token()).await;
    assert_eq!(
        restored.data()["restoreCapability"]["capability"]["archivedAt"],
        Value::Null
    );
    let again = try_start(&app, "acme", json!({"planKey": "fleet.quote_request"})).await;
    assert!(again.data()["startTask"]["task"]["id"].is_string());
    subscribe(&app, "globex", "fleet.quotes", None).await.data();
}
