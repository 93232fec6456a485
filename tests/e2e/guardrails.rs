//! Guardrails: tenant admins keep them; the executor checks them before
//! each step and each tool call of an agent loop. A BLOCK stops the step
//! before its tool runs, a WARN is recorded and the step runs; each match
//! is counted; every change is audited.

use serde_json::{Value, json};

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp},
    on_both_backends,
};

on_both_backends!(
    a_block_stops_the_step_and_a_warn_is_recorded,
    guardrails_are_for_admins_checked_and_per_tenant,
);
for_both_backends!(an_agent_is_told_its_blocked_call_and_goes_on);

const FIELDS: &str = "name condition severity enabled activationCount updatedBy";

async fn save(app: &TestApp, token: &str, input: Value) -> crate::helpers::Gql {
    app.graphql(
        Some(token),
        &format!(
            "mutation($input: SaveGuardrailInput!) {{ saveGuardrail(input: $input) {{ guardrail {{ {FIELDS} }} }} }}"
        ),
        json!({"input": input}),
    )
    .await
}

async fn list(app: &TestApp, tenant: &str) -> Vec<Value> {
    app.graphql(
        Some(&app.admin_token(tenant)),
        &format!("{{ guardrails {{ {FIELDS} }} }}"),
        json!({}),
    )
    .await
    .data()["guardrails"]
        .as_array()
        .unwrap()
        .clone()
}

fn count_of(guardrails: &[Value], name: &str) -> i64 {
    guardrails
        .iter()
        .find(|g| g["name"] == name)
        .unwrap_or_else(|| panic!("no guardrail {name}: {guardrails:?}"))["activationCount"]
        .as_i64()
        .unwrap()
}

/// Start `plan` with `payload`, run the executor, read the task back.
async fn run(app: &TestApp, plan: &str, payload: Value) -> Value {
    let id = app
        .start_task("acme", json!({"planKey": plan, "payload": payload}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    app.task("acme", &id).await
}

async fn a_block_stops_the_step_and_a_warn_is_recorded(app: TestApp) {
    app.create_tenant("acme").await;
    let admin = app.admin_token("acme");
    for (key, amount) in [("small", 10), ("big", 5000)] {
        app.publish_plan(
            "acme",
            json!({"key": key, "intent": key, "steps": [
                {"id": "pay", "tool": "set_state", "args": {"amount": amount}}
            ]}),
        )
        .await
        .data();
    }
    let blocked = save(
        &app,
        &admin,
        json!({"name": "no-big-payouts", "severity": "BLOCK",
               "condition": {"tool": "set_state", "args.amount_gt": 1000}}),
    )
    .await;
    assert_eq!(
        blocked.data()["saveGuardrail"]["guardrail"]["activationCount"],
        0
    );
    save(
        &app,
        &admin,
        json!({"name": "high-stakes", "severity": "WARN",
               "condition": {"payload.stakes": "high"}}),
    )
    .await
    .data();

    // The big payout is blocked before its tool runs: nothing in the state.
    let big = run(&app, "big", json!({"stakes": "high"})).await;
    assert_eq!(big["status"], "FAILED", "{big}");
    let error = big["error"].as_str().unwrap();
    assert!(
        error.contains("GUARDRAIL_BLOCKED") && error.contains("no-big-payouts"),
        "{error}"
    );
    assert!(big["state"].get("amount").is_none(), "{big}");
    assert_eq!(big["steps"][0]["status"], "FAILED");

    // The small one runs; the WARN is an event of its step.
    let small = run(&app, "small", json!({"stakes": "high"})).await;
    assert_eq!(small["status"], "COMPLETED", "{small}");
    assert_eq!(small["state"]["amount"], 10);
    let matched: Vec<&Value> = small["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "GUARDRAIL_MATCHED")
        .collect();
    assert_eq!(matched.len(), 1, "{small}");
    assert_eq!(matched[0]["stepId"], "pay");
    assert_eq!(matched[0]["data"]["guardrail"], "high-stakes");
    // Low stakes: no warning.
    let calm = run(&app, "small", json!({"stakes": "low"})).await;
    assert_eq!(calm["status"], "COMPLETED");
    assert!(
        !calm["events"].to_string().contains("GUARDRAIL_MATCHED"),
        "{calm}"
    );

    // Switched off, the block no longer applies (at once in this process).
    save(
        &app,
        &admin,
        json!({"name": "no-big-payouts", "severity": "BLOCK", "enabled": false,
               "condition": {"tool": "set_state", "args.amount_gt": 1000}}),
    )
    .await
    .data();
    let again = run(&app, "big", json!({"stakes": "high"})).await;
    assert_eq!(again["status"], "COMPLETED", "{again}");
    assert_eq!(again["state"]["amount"], 5000);

    // Every match counted: the block once, the warning on both high-stakes
    // big runs and the small one.
    let guardrails = list(&app, "acme").await;
    assert_eq!(count_of(&guardrails, "no-big-payouts"), 1);
    assert_eq!(count_of(&guardrails, "high-stakes"), 3);

    // Deleted, it is gone; every change is in the audit log.
    let deleted = app
        .graphql(
            Some(&admin),
            "mutation { deleteGuardrail(input: {name: \"high-stakes\"}) { deleted } }",
            json!({}),
        )
        .await;
    assert_eq!(deleted.data()["deleteGuardrail"]["deleted"], true);
    assert_eq!(list(&app, "acme").await.len(), 1);
    let audit = app
        .graphql(
            Some(&admin),
            "{ auditLog(filter: {actionPrefix: \"guardrail.\"}) { edges { node { action target } } } }",
            json!({}),
        )
        .await;
    let actions: Vec<String> = audit.data()["auditLog"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["node"]["action"].as_str().unwrap(),
                e["node"]["target"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            "guardrail.save no-big-payouts",
            "guardrail.save high-stakes",
            "guardrail.save no-big-payouts",
            "guardrail.delete high-stakes",
        ]
    );
}

async fn guardrails_are_for_admins_checked_and_per_tenant(app: TestApp) {
    app.create_tenant("acme").await;
    app.create_tenant("other").await;
    let rule = json!({"name": "r", "severity": "WARN", "condition": {"tool": "set_state"}});
    let member = app.token(Some("acme"), &[brainstem_domain::Role::Member]);
    assert_eq!(
        save(&app, &member, rule.clone()).await.error_code(),
        "FORBIDDEN"
    );
    let listed = app
        .graphql(Some(&member), "{ guardrails { name } }", json!({}))
        .await;
    assert_eq!(listed.error_code(), "FORBIDDEN");

    let admin = app.admin_token("acme");
    for (condition, reason) in [
        (json!({"colour": "red"}), "unknown fact `colour`"),
        (json!({}), "at least one fact"),
        (json!({"confidence_lt": "low"}), "a number"),
        (json!(["tool"]), "JSON object"),
    ] {
        let refused = save(
            &app,
            &admin,
            json!({"name": "bad", "severity": "BLOCK", "condition": condition}),
        )
        .await;
        assert_eq!(refused.error_code(), "BAD_USER_INPUT");
        assert!(
            refused.error_message().contains(reason),
            "{}",
            refused.error_message()
        );
    }
    save(&app, &admin, rule).await.data();
    assert_eq!(list(&app, "acme").await.len(), 1);
    // Another tenant neither sees nor deletes it.
    assert!(list(&app, "other").await.is_empty());
    let deleted = app
        .graphql(
            Some(&app.admin_token("other")),
            "mutation { deleteGuardrail(input: {name: \"r\"}) { deleted } }",
            json!({}),
        )
        .await;
    assert_eq!(deleted.data()["deleteGuardrail"]["deleted"], false);
    assert_eq!(list(&app, "acme").await.len(), 1);
}

async fn an_agent_is_told_its_blocked_call_and_goes_on(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.create_tenant("acme").await;
    save(
        &app,
        &app.admin_token("acme"),
        json!({"name": "no-secrets", "severity": "BLOCK",
               "condition": {"tool": "set_state", "args.secret_contains": "s"}}),
    )
    .await
    .data();
    app.publish_plan(
        "acme",
        json!({"key": "assist", "intent": "test.assist",
               "steps": [{"id": "answer", "tool": "agent", "args": {"tools": ["set_state"]}}]}),
    )
    .await
    .data();
    let id = app
        .start_task(
            "acme",
            json!({"planKey": "assist",
                   "input": "call set_state {\"secret\": \"s3cr3t\"}\ncall set_state {\"colour\": \"teal\"}"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    // The allowed call ran, the blocked one did not.
    assert_eq!(task["state"]["colour"], "teal");
    assert!(task["state"].get("secret").is_none(), "{task}");
    let result = app
        .graphql(
            Some(&app.admin_token("acme")),
            "query($id: ID!) { task(id: $id) { result { content } } }",
            json!({"id": id}),
        )
        .await;
    let content = result.data()["task"]["result"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(content.contains("GUARDRAIL_BLOCKED"), "{content}");
    assert!(content.contains("\"colour\":\"teal\""), "{content}");
}
