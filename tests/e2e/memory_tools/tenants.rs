//! Tenants and the memory tools: two tenants' facts about "the same"
//! carrier never cross (scenario 18), and every tool refuses another
//! tenant's ids.

use serde_json::{Value, json};

use super::{
    contents, events, memory, output, plan_ids, publish, recalled, remember_steps, run, subject,
    written,
};
use crate::{helpers::TestApp, memory::member, on_both_backends};

on_both_backends!(
    tenants_facts_about_the_same_subject_never_cross,
    every_memory_tool_refuses_another_tenants_ids,
);

/// Scenario 18: two tenants link, remember and read facts about "the same"
/// carrier (each its own entity, same key) through the tools; neither ever
/// sees the other's.
async fn tenants_facts_about_the_same_subject_never_cross(app: TestApp) {
    let mut seen = Vec::new();
    for (tenant, fact) in [
        ("alpha", "This carrier is difficult"),
        ("beta", "Great relationship with this carrier"),
    ] {
        app.create_tenant(tenant).await;
        publish(
            &app,
            tenant,
            "link",
            json!([{"id": "link", "tool": "graph.link", "args": {
                "from": {"type": "carrier", "name": "Progressive"},
                "to": {"type": "broker", "name": "Jane Broker"},
                "relation": "works with"}}]),
        )
        .await;
        let linked = run(&app, tenant, "link", None).await;
        let carrier = output(&linked, "link")["from_id"]
            .as_str()
            .unwrap()
            .to_owned();
        publish(
            &app,
            tenant,
            "note",
            remember_steps(&[("n", fact, "insight")]),
        )
        .await;
        let memory = written(&run(&app, tenant, "note", Some(&carrier)).await, "n");
        seen.push((tenant, fact, carrier, memory));
    }
    assert_ne!(seen[0].2, seen[1].2, "each tenant has its own entity");
    for (tenant, fact, carrier, memory) in &seen {
        publish(
            &app,
            tenant,
            "look",
            json!([
                {"id": "dossier", "tool": "memory.dossier", "args": {}},
                {"id": "recall", "tool": "memory.recall",
                 "args": {"query": "carrier", "subject": null}}
            ]),
        )
        .await;
        let task = run(&app, tenant, "look", Some(carrier)).await;
        assert_eq!(task["status"], "COMPLETED", "{}", task["error"]);
        let d = output(&task, "dossier");
        assert_eq!(contents(&d["insights"]), [fact.to_string()], "{tenant}");
        assert_eq!(d["neighbors"][0]["name"], "Jane Broker");
        let hits = output(&task, "recall")["hits"].clone();
        assert_eq!(
            contents(&hits),
            [fact.to_string()],
            "{tenant}: whole-tenant search"
        );
        let own = std::slice::from_ref(memory);
        for (_, ids) in recalled(&task) {
            assert_eq!(ids, own, "{tenant} recalls only its own");
        }
    }
}

/// Every memory tool, handed another tenant's entity or memory id, fails
/// its step with `not found` and never returns or changes that data.
async fn every_memory_tool_refuses_another_tenants_ids(app: TestApp) {
    app.create_tenant("alpha").await;
    app.create_tenant("beta").await;
    let theirs = subject(&app, "beta", "carrier", "Progressive").await;
    let ours = subject(&app, "alpha", "carrier", "Progressive").await;
    publish(
        &app,
        "beta",
        "secret",
        remember_steps(&[("s", "Beta's secret about Progressive", "warning")]),
    )
    .await;
    let secret = written(&run(&app, "beta", "secret", Some(&theirs)).await, "s");

    let cases: Vec<(&str, Value, Option<&str>)> = vec![
        (
            "remember_about",
            json!({"tool": "memory.remember", "args": {"content": "x", "subject": theirs}}),
            None,
        ),
        (
            "remember_task_subject",
            json!({"tool": "memory.remember", "args": {"content": "x"}}),
            Some(&theirs),
        ),
        (
            "remember_mention",
            json!({"tool": "memory.remember", "args": {"content": "x", "mentions": [theirs]}}),
            Some(&ours),
        ),
        (
            "remember_supersede",
            json!({"tool": "memory.remember", "args": {"content": "x", "supersedes": secret}}),
            Some(&ours),
        ),
        (
            "recall",
            json!({"tool": "memory.recall", "args": {"query": "secret Progressive"}}),
            Some(&theirs),
        ),
        (
            "dossier",
            json!({"tool": "memory.dossier", "args": {"subject": theirs}}),
            Some(&ours),
        ),
        (
            "dossier_task_subject",
            json!({"tool": "memory.dossier", "args": {}}),
            Some(&theirs),
        ),
        (
            "link_from",
            json!({"tool": "graph.link", "args": {"from": {"id": theirs}, "to": {"id": ours}, "relation": "KNOWS"}}),
            None,
        ),
        (
            "link_default_from",
            json!({"tool": "graph.link", "args": {"to": {"type": "broker", "name": "Jane"}, "relation": "KNOWS"}}),
            Some(&theirs),
        ),
        (
            "assess",
            json!({"tool": "memory.assess_and_plan", "args": {"steps": [{"id": "w", "tool": "set_state", "args": {}}]}}),
            Some(&theirs),
        ),
    ];
    for (name, step, subject) in cases {
        let mut step = step;
        step["id"] = json!("probe");
        publish(&app, "alpha", name, json!([step])).await;
        let task = run(&app, "alpha", name, subject).await;
        assert_eq!(task["status"], "FAILED", "{name}");
        let error = task["error"].as_str().unwrap();
        assert!(error.contains("not found"), "{name}: {error}");
        assert!(!error.contains("secret"), "{name}: {error}");
        assert!(
            task["steps"]
                .as_array()
                .unwrap()
                .iter()
                .all(|s| s["status"] != "COMPLETED" && s["output"].is_null()),
            "{name}: {}",
            task["steps"]
        );
        assert!(recalled(&task).is_empty(), "{name}");
        assert!(events(&task, "STEPS_INJECTED").is_empty(), "{name}");
        assert_eq!(plan_ids(&task), ["probe"], "{name}");
    }
    // Nothing was written on either side.
    for tenant in ["alpha", "beta"] {
        let res = app
            .graphql(
                Some(&member(&app, tenant)),
                "{ memories(first: 50) { edges { node { content } } } }",
                json!({}),
            )
            .await;
        let n = res.data()["memories"]["edges"].as_array().unwrap().len();
        assert_eq!(n, usize::from(tenant == "beta"), "{tenant}");
    }
    let stored = memory(&app, "beta", &secret).await;
    assert_eq!(stored["validTo"], Value::Null, "not superseded");
    let res = app
        .graphql(
            Some(&member(&app, "beta")),
            "query($id: ID!) { neighborhood(entityId: $id) { neighbors { entity { name } } } }",
            json!({"id": crate::helpers::encode_id("KgEntity", &theirs)}),
        )
        .await;
    assert_eq!(res.data()["neighborhood"]["neighbors"], json!([]));
}
