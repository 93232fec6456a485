//! Plans and their steps: injected steps and the step cap, long plans,
//! plan integrity errors, the event trail of every step, and conditions,
//! templates and review gates.

use serde_json::{Value, json};

use super::{app, kinds, settled, steps};
use crate::{
    for_both_backends,
    helpers::{Backend, uuid_of},
};

for_both_backends!(
    injected_steps_are_validated_run_and_recorded,
    step_cap_stops_endless_injection,
    long_plan_under_its_cap_completes,
    plan_integrity_errors_name_plan_step_and_tool,
    the_start_up_check_names_every_broken_stored_plan,
    an_archived_plan_starts_nothing_while_started_tasks_finish,
    every_step_leaves_events_in_sequence,
    conditions_templates_and_review_gates,
);

async fn injected_steps_are_validated_run_and_recorded(backend: Backend) {
    let (app, journal) = app(backend).await;
    let plan = steps(&[
        ("prep", "set_state", json!({"value": "VIN-1"})),
        ("assess", "test.inject", json!({})),
    ]);
    app.publish_plan(
        "acme",
        json!({"key": "dyn", "intent": "t.dyn", "steps": plan}),
    )
    .await
    .data();
    let id = app.start_task("acme", json!({"planKey": "dyn"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "COMPLETED");
    let ids: Vec<&str> = task["frozenPlan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["prep", "assess", "dyn_review_vins", "dyn_notify"]);
    let injected = task["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "STEPS_INJECTED")
        .unwrap()
        .clone();
    assert_eq!(
        injected["data"]["injected_steps"],
        json!(["dyn_review_vins", "dyn_notify"])
    );
    assert_eq!(injected["stepId"], "assess");
    // The injected step ran, with its template rendered from state.
    assert_eq!(
        journal.effects(&format!("{}:dyn_review_vins", uuid_of(&id))),
        1
    );
    assert_eq!(task["state"]["notified"], true);

    // An injection that names an unknown tool fails the step, naming it.
    let plan = steps(&[("assess", "test.inject", json!({"bad": true}))]);
    app.publish_plan(
        "acme",
        json!({"key": "dyn-bad", "intent": "t.dynbad", "steps": plan}),
    )
    .await
    .data();
    let id = app.start_task("acme", json!({"planKey": "dyn-bad"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "FAILED");
    assert!(
        task["error"]
            .as_str()
            .unwrap()
            .contains("tool `no_such_tool` is not registered"),
        "{}",
        task["error"]
    );
}

async fn step_cap_stops_endless_injection(backend: Backend) {
    let (app, _) = app(backend).await;
    let plan = steps(&[("assess", "test.inject", json!({"forever": true}))]);
    app.publish_plan(
        "acme",
        json!({"key": "loop", "intent": "t.loop", "steps": plan}),
    )
    .await
    .data();
    let id = app
        .start_task("acme", json!({"planKey": "loop", "maxSteps": 10}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "FAILED");
    assert!(
        task["error"]
            .as_str()
            .unwrap()
            .contains("Max execution steps exceeded (max_steps = 10)"),
        "{}",
        task["error"]
    );
    let executed = kinds(&task)
        .iter()
        .filter(|(k, _)| k == "STEP_COMPLETED")
        .count();
    assert_eq!(executed, 10, "stopped at the cap");
}

async fn long_plan_under_its_cap_completes(backend: Backend) {
    let (app, _) = app(backend).await;
    let list: Vec<Value> = (0..75)
        .map(|i| json!({"id": format!("s{i}"), "tool": "set_state", "args": {"last": i}}))
        .collect();
    app.publish_plan(
        "acme",
        json!({"key": "long", "intent": "t.long", "steps": list}),
    )
    .await
    .data();
    let id = app
        .start_task("acme", json!({"planKey": "long", "maxSteps": 100}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "COMPLETED");
    assert_eq!(settled(&task).len(), 75);
    assert_eq!(task["state"]["last"], 74);
}

async fn plan_integrity_errors_name_plan_step_and_tool(backend: Backend) {
    let (app, _) = app(backend).await;
    let cases = [
        (
            steps(&[("a", "no.such.tool", json!({}))]),
            "plan `p` step `a`: tool `no.such.tool` is not registered",
        ),
        (
            steps(&[("a", "set_state", json!({})), ("a", "set_state", json!({}))]),
            "plan `p` step `a`: duplicate step id",
        ),
        (
            steps(&[("a", "set_state", json!({"x": "{{ state. }}"}))]),
            "plan `p` step `a` (tool `set_state`): template",
        ),
        (
            steps(&[("a", "http_request", json!({"method": "GET"}))]),
            "plan `p` step `a`: args.url is required (tool `http_request`)",
        ),
    ];
    for (plan, expected) in cases {
        let res = app
            .publish_plan("acme", json!({"key": "p", "intent": "t.p", "steps": plan}))
            .await;
        assert_eq!(res.error_code(), "BAD_USER_INPUT");
        assert!(
            res.error_message().contains(expected),
            "{} should contain {expected}",
            res.error_message()
        );
    }
    // Nothing was stored.
    let res = app
        .graphql(
            Some(&app.admin_token("acme")),
            "{ plan(key: \"p\") { version } }",
            json!({}),
        )
        .await;
    assert_eq!(res.error_code(), "NOT_FOUND");
    // Valid publishes create versions.
    for version in 1..=2 {
        let res = app.publish_plan("acme", json!({"key": "p", "intent": "t.p", "steps": steps(&[("a", "set_state", json!({}))])})).await;
        assert_eq!(res.data()["publishPlan"]["plan"]["version"], version);
    }
    let res = app
        .graphql(
            Some(&app.admin_token("acme")),
            "{ plan(key: \"p\") { version versions { version } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        res.data()["plan"]["versions"],
        json!([{"version": 2}, {"version": 1}])
    );
}

async fn every_step_leaves_events_in_sequence(backend: Backend) {
    let (app, _) = app(backend).await;
    let list: Vec<(String, &str, Value)> = (1..=10)
        .map(|i| (format!("s{i}"), "test.effect", json!({})))
        .collect();
    let plan = Value::Array(
        list.iter()
            .map(|(id, tool, args)| json!({"id": id, "tool": tool, "args": args}))
            .collect(),
    );
    app.publish_plan(
        "acme",
        json!({"key": "ten", "intent": "t.ten", "steps": plan}),
    )
    .await
    .data();
    let id = app.start_task("acme", json!({"planKey": "ten"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    let events = task["events"].as_array().unwrap();
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=events.len() as i64).collect::<Vec<_>>(),
        "gapless sequence"
    );
    for i in 1..=10 {
        let step = format!("s{i}");
        let of_step: Vec<&Value> = events
            .iter()
            .filter(|e| e["stepId"] == step.as_str())
            .collect();
        assert_eq!(of_step.len(), 2, "started + completed for {step}");
        assert_eq!(of_step[0]["kind"], "STEP_STARTED");
        assert_eq!(of_step[1]["kind"], "STEP_COMPLETED");
        assert!(of_step.iter().all(|e| e["tool"] == "test.effect"));
        assert_eq!(
            of_step[1]["dataKeys"],
            json!([format!("done_{step}"), "done"])
        );
    }
    assert_eq!(events.last().unwrap()["status"], "COMPLETED");
}

async fn conditions_templates_and_review_gates(backend: Backend) {
    let (app, _) = app(backend).await;
    let mut plan = steps(&[
        (
            "init",
            "set_state",
            json!({"count": 2, "flag": false, "who": "{{ input.payload.name }}"}),
        ),
        ("skipped", "set_state", json!({"ran_skipped": true})),
        (
            "typed",
            "set_state",
            json!({"double": "{{ state.count * 2 }}", "greeting": "hi {{ state.who }}"}),
        ),
        (
            "gated",
            "set_state",
            json!({"approved_amount": "{{ state.amount }}"}),
        ),
    ]);
    plan[1]["condition"] = json!("{{ state.flag }}");
    plan[3]["requiresReview"] = json!(true);
    app.publish_plan(
        "acme",
        json!({"key": "cond", "intent": "t.cond", "steps": plan}),
    )
    .await
    .data();
    let id = app
        .start_task(
            "acme",
            json!({"planKey": "cond", "payload": {"name": "Ada", "ssn": "123-45-6789"}}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "NEEDS_REVIEW");
    assert_eq!(
        task["state"]["double"], 4,
        "a single expression keeps its type"
    );
    assert_eq!(task["state"]["greeting"], "hi Ada");
    assert!(task["state"].get("ran_skipped").is_none());
    assert!(kinds(&task).contains(&("STEP_SKIPPED".into(), Some("skipped".into()))));
    assert_eq!(task["pendingReview"]["stepId"], "gated");
    let res = app
        .graphql(
            Some(&app.admin_token("acme")),
            "mutation($t: ID!, $r: ID!) { resumeTask(input: {taskId: $t, reviewId: $r, corrections: {amount: 120}}) { task { status } } }",
            json!({"t": id, "r": task["pendingReview"]["id"]}),
        )
        .await;
    res.data();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "COMPLETED");
    assert_eq!(task["state"]["approved_amount"], 120);
    // PII in the input never reaches the event log.
    assert!(!task["events"].to_string().contains("123-45-6789"));
}

/// `Plans::check_all`, the start-up integrity check, reads every tenant's
/// latest plan versions: a stored plan that names a tool this build does
/// not have (written by another build, or edited in the database) is
/// reported with its tenant's plan and step, and only the latest version
/// counts.
async fn the_start_up_check_names_every_broken_stored_plan(backend: Backend) {
    let (app, _) = app(backend).await;
    app.create_tenant("globex").await;
    for tenant in ["acme", "globex"] {
        app.publish_plan(
            tenant,
            json!({"key": "mark", "intent": "t.mark", "steps": steps(&[("one", "set_state", json!({"x": 1}))])}),
        )
        .await
        .data();
    }
    app.domain.plans.check_all().await.unwrap();

    // Another build's tool, in globex's stored plan.
    let outside = app.outside_db().await;
    sea_orm::ConnectionTrait::execute_unprepared(
        &outside,
        "UPDATE plans SET steps = '[{\"id\": \"one\", \"tool\": \"gone.tool\", \"args\": {}}]' \
         WHERE tenant_id = (SELECT id FROM tenants WHERE slug = 'globex')",
    )
    .await
    .unwrap();
    let err = app.domain.plans.check_all().await.unwrap_err().to_string();
    assert!(err.contains("1 error(s)"), "{err}");
    assert!(
        err.contains("plan `mark` step `one`: tool `gone.tool` is not registered"),
        "{err}"
    );

    // A newer, valid version is what runs now: the check passes again.
    app.publish_plan(
        "globex",
        json!({"key": "mark", "intent": "t.mark", "steps": steps(&[("one", "set_state", json!({"x": 2}))])}),
    )
    .await
    .data();
    app.domain.plans.check_all().await.unwrap();
}

/// Archiving a plan (every version of its key): new tasks naming it are
/// refused with the reason, intent detection no longer picks it, tasks
/// already started finish on their frozen version; restoring it, or
/// publishing a new version, makes it current again. Audited.
async fn an_archived_plan_starts_nothing_while_started_tasks_finish(backend: Backend) {
    let (app, _) = app(backend).await;
    let admin = app.admin_token("acme");
    app.publish_plan(
        "acme",
        json!({"key": "report", "intent": "t.report", "patterns": ["monthly report"],
               "steps": steps(&[("one", "set_state", json!({"done": true}))])}),
    )
    .await
    .data();
    let started = app.start_task("acme", json!({"planKey": "report"})).await;
    let started_id = started["id"].as_str().unwrap().to_owned();

    let archive = |name: &'static str| {
        let app = &app;
        let admin = admin.clone();
        async move {
            app.graphql(
                Some(&admin),
                &format!("mutation {{ {name}(input: {{key: \"report\"}}) {{ plan {{ key version archivedAt }} }} }}"),
                json!({}),
            )
            .await
        }
    };
    let archived = archive("archivePlan").await;
    assert!(archived.data()["archivePlan"]["plan"]["archivedAt"].is_string());

    // New starts are refused, with the reason.
    let refused = app
        .graphql(
            Some(&admin),
            "mutation { startTask(input: {planKey: \"report\"}) { task { id } } }",
            json!({}),
        )
        .await;
    assert_eq!(refused.error_code(), "BAD_USER_INPUT");
    assert!(
        refused
            .error_message()
            .contains("plan `report` is archived"),
        "{}",
        refused.error_message()
    );
    // Intent detection does not choose it.
    let detected = app
        .start_task("acme", json!({"input": "the monthly report please"}))
        .await;
    let detected_id = detected["id"].as_str().unwrap().to_owned();

    // The task started before the archive finishes on its version.
    app.run_tasks().await;
    let finished = app.task("acme", &started_id).await;
    assert_eq!(finished["status"], "COMPLETED", "{finished}");
    assert_eq!(finished["state"]["done"], true);
    let other = app.task("acme", &detected_id).await;
    assert_ne!(other["plan"]["key"], "report", "{other}");

    // Restored, it starts tasks again; archived and republished, too.
    let restored = archive("restorePlan").await;
    assert_eq!(
        restored.data()["restorePlan"]["plan"]["archivedAt"],
        Value::Null
    );
    assert!(app.start_task("acme", json!({"planKey": "report"})).await["id"].is_string());
    archive("archivePlan").await.data();
    let republished = app
        .publish_plan(
            "acme",
            json!({"key": "report", "intent": "t.report", "steps": steps(&[("one", "set_state", json!({"done": 2}))])}),
        )
        .await;
    assert_eq!(republished.data()["publishPlan"]["plan"]["version"], 2);
    assert!(app.start_task("acme", json!({"planKey": "report"})).await["id"].is_string());

    // Unknown keys and other tenants' plans are not found.
    let missing = app
        .graphql(
            Some(&admin),
            "mutation { archivePlan(input: {key: \"nope\"}) { plan { key } } }",
            json!({}),
        )
        .await;
    assert_eq!(missing.error_code(), "NOT_FOUND");
    app.create_tenant("globex").await;
    let theirs = app
        .graphql(
            Some(&app.admin_token("globex")),
            "mutation { archivePlan(input: {key: \"report\"}) { plan { key } } }",
            json!({}),
        )
        .await;
    assert_eq!(theirs.error_code(), "NOT_FOUND");

    let actions = app.audit_actions("acme", "plan.").await;
    assert_eq!(
        actions,
        [
            "plan.publish",
            "plan.archive",
            "plan.restore",
            "plan.archive",
            "plan.publish"
        ]
    );
}
