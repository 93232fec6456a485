//! `memory.remember`, `memory.recall` and `graph.link` report what they
//! did, and every memory tool's arguments are checked at publish.

use serde_json::{Value, json};

use super::{contents, output, publish, read, recalled, run, subject};
use crate::{
    helpers::{TestApp, encode_id, uuid_of},
    memory::member,
    on_both_backends,
};

on_both_backends!(
    remember_recall_and_link_report_what_they_did,
    memory_tool_arguments_are_checked_at_publish,
    mentions_that_are_names_are_left_out_not_fatal,
);

/// `memory.remember` dedups, `memory.recall` ranks and filters and reports
/// its hits, `graph.link` upserts.
async fn remember_recall_and_link_report_what_they_did(app: TestApp) {
    app.create_tenant("acme").await;
    let carrier = subject(&app, "acme", "carrier", "Progressive").await;
    publish(
        &app,
        "acme",
        "notes",
        json!([
            {"id": "a", "tool": "memory.remember",
             "args": {"content": "Progressive wants loss runs by email", "category": "preference",
                      "tier": "MEMORY_BANK", "importance": 0.8}},
            {"id": "b", "tool": "memory.remember",
             "args": {"content": "Progressive disputed the March invoice", "category": "event"}},
            {"id": "c", "tool": "memory.remember",
             "args": {"content": "Office coffee machine is broken", "subject": null}}
        ]),
    )
    .await;
    let notes = run(&app, "acme", "notes", Some(&carrier)).await;
    assert_eq!(notes["status"], "COMPLETED", "{}", notes["error"]);
    let a = output(&notes, "a");
    assert_eq!(a["merged"], false);
    assert_eq!(a["tier"], "MEMORY_BANK");
    assert_eq!(a["subject_id"], carrier, "the task's subject by default");
    assert_eq!(output(&notes, "c")["subject_id"], Value::Null);
    // The same fact again merges into the same memory.
    let again = run(&app, "acme", "notes", Some(&carrier)).await;
    assert_eq!(output(&again, "a")["merged"], true);
    assert_eq!(output(&again, "a")["memory_id"], a["memory_id"]);
    assert!(
        again["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["role"] == "updated")
    );

    publish(
        &app,
        "acme",
        "ask",
        json!([
            {"id": "about", "tool": "memory.recall",
             "args": {"query": "how does Progressive want loss runs", "limit": 5}},
            {"id": "events", "tool": "memory.recall",
             "args": {"query": "Progressive invoice", "categories": ["event"]}},
            {"id": "anything", "tool": "memory.recall",
             "args": {"query": "coffee machine", "subject": null, "tiers": ["WORKING"], "limit": 1}}
        ]),
    )
    .await;
    let task = run(&app, "acme", "ask", Some(&carrier)).await;
    assert_eq!(task["status"], "COMPLETED", "{}", task["error"]);
    let about = output(&task, "about");
    assert_eq!(
        about["hits"][0]["content"],
        "Progressive wants loss runs by email"
    );
    assert!(
        !contents(&about["hits"]).contains(&"Office coffee machine is broken".to_owned()),
        "the subject filter holds"
    );
    let score = about["hits"][0]["score"].as_f64().unwrap();
    assert!(score > 0.0, "{score}");
    assert_eq!(
        contents(&output(&task, "events")["hits"]),
        ["Progressive disputed the March invoice"]
    );
    assert_eq!(
        contents(&output(&task, "anything")["hits"]),
        ["Office coffee machine is broken"]
    );
    // One MemoryRecalled per step, naming its hits in rank order.
    let r = recalled(&task);
    let steps: Vec<&str> = r.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(steps, ["about", "events", "anything"]);
    for (step, ids) in &r {
        let hits: Vec<String> = output(&task, step)["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(ids, &hits, "{step}");
    }
    // The event follows the step's completion in the same commit.
    let seqs: Vec<(String, Option<String>)> = task["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_owned(),
                e["stepId"].as_str().map(str::to_owned),
            )
        })
        .collect();
    let done = seqs
        .iter()
        .position(|k| k == &("STEP_COMPLETED".to_owned(), Some("about".to_owned())))
        .unwrap();
    assert_eq!(
        seqs[done + 1],
        ("MEMORY_RECALLED".to_owned(), Some("about".to_owned()))
    );

    // graph.link: `from` defaults to the subject; a second run updates.
    publish(
        &app,
        "acme",
        "link",
        json!([{"id": "l", "tool": "graph.link", "args": {
            "to": {"type": "broker", "name": "Jane Broker", "properties": {"email": "jane@example.com"}},
            "relation": "BROKERED_BY", "weight": 2}}]),
    )
    .await;
    let first = run(&app, "acme", "link", Some(&carrier)).await;
    assert_eq!(first["status"], "COMPLETED", "{}", first["error"]);
    let out = output(&first, "l");
    assert_eq!(out["from_id"], carrier);
    assert_eq!(out["relation_type"], "BROKERED_BY");
    assert_eq!(
        out["created"],
        json!({"from": false, "to": true, "relation": true})
    );
    let relinked = run(&app, "acme", "link", Some(&carrier)).await;
    let second = output(&relinked, "l");
    assert_eq!(second["to_id"], out["to_id"]);
    assert_eq!(second["relation_id"], out["relation_id"]);
    assert_eq!(
        second["created"],
        json!({"from": false, "to": false, "relation": false})
    );
    let res = app
        .graphql(
            Some(&member(&app, "acme")),
            "query($id: ID!) { neighborhood(entityId: $id) { neighbors { entity { name properties } } relations { type weight provenance } } }",
            json!({"id": crate::helpers::encode_id("KgEntity", &carrier)}),
        )
        .await;
    let n = &res.data()["neighborhood"];
    assert_eq!(n["neighbors"][0]["entity"]["name"], "Jane Broker");
    assert_eq!(
        n["neighbors"][0]["entity"]["properties"]["email"],
        "jane@example.com"
    );
    assert_eq!(n["relations"][0]["type"], "BROKERED_BY");
    assert_eq!(n["relations"][0]["weight"], 2.0);
    assert_eq!(
        n["relations"][0]["provenance"],
        format!("task:{}", uuid_of(relinked["id"].as_str().unwrap())),
        "the task that last linked them"
    );
}

/// The tools' argument schemas are enforced when a plan is published (and
/// again, rendered, when a step runs).
async fn memory_tool_arguments_are_checked_at_publish(app: TestApp) {
    app.create_tenant("acme").await;
    for (step, expected) in [
        (
            json!({"id": "r", "tool": "memory.recall", "args": {"limit": 3}}),
            "args.query is required",
        ),
        (
            json!({"id": "r", "tool": "memory.remember", "args": {"content": "x", "tier": "FOREVER"}}),
            "args.tier must be one of",
        ),
        (
            json!({"id": "r", "tool": "memory.remember", "args": {"content": "x", "importance": 2}}),
            "args.importance must be at most 1",
        ),
        (
            json!({"id": "r", "tool": "graph.link", "args": {"to": {"name": "x", "colour": "red"}, "relation": "KNOWS"}}),
            "args.to.colour is not a known argument",
        ),
        (
            json!({"id": "r", "tool": "memory.assess_and_plan", "args": {"max_open_tasks": -1}}),
            "args.max_open_tasks must be at least 0",
        ),
        (
            json!({"id": "r", "tool": "memory.assess_and_plan", "args": {"steps": [{"tool": "set_state"}]}}),
            "args.steps[0].id is required",
        ),
        (
            json!({"id": "r", "tool": "memory.dossier", "args": {"recent_tasks": 500}}),
            "args.recent_tasks must be at most 50",
        ),
    ] {
        let res = app
            .publish_plan(
                "acme",
                json!({"key": "bad", "intent": "test.bad", "steps": [step]}),
            )
            .await;
        assert_eq!(res.error_code(), "BAD_USER_INPUT", "{}", res.body);
        let message = res.error_message();
        assert!(message.contains(expected), "{expected}: {message}");
        assert!(message.contains("step `r`"), "{message}");
    }
    // Templates stand in for values at publish time, and are checked again
    // when rendered: a rendered limit out of range fails the step.
    publish(
        &app,
        "acme",
        "templated",
        json!([{"id": "r", "tool": "memory.recall",
                "args": {"query": "x", "limit": "{{ input.payload.limit }}", "subject": null}}]),
    )
    .await;
    let id = app
        .start_task(
            "acme",
            json!({"planKey": "templated", "payload": {"limit": 500}}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = read(&app, "acme", &id).await;
    assert_eq!(task["status"], "FAILED");
    assert!(
        task["error"]
            .as_str()
            .unwrap()
            .contains("args.limit must be at most 50"),
        "{}",
        task["error"]
    );
}

/// A model writes names where `mentions` takes entity ids: the fact is
/// stored with the mentions that are ids, and the names are reported back.
async fn mentions_that_are_names_are_left_out_not_fatal(app: TestApp) {
    app.create_tenant("acme").await;
    let carrier = subject(&app, "acme", "carrier", "Progressive").await;
    publish(
        &app,
        "acme",
        "note",
        json!([{"id": "a", "tool": "memory.remember",
                "args": {"content": "The Oslo office's wifi password is fjord-77",
                         "subject": null, "mentions": [carrier, "Oslo"]}}]),
    )
    .await;
    let task = run(&app, "acme", "note", None).await;
    assert_eq!(task["status"], "COMPLETED", "{}", task["error"]);
    let a = output(&task, "a");
    assert_eq!(a["ignored_mentions"], json!(["Oslo"]));
    let memory = app
        .graphql(
            Some(&member(&app, "acme")),
            "query($id: ID!) { memory(id: $id) { content mentions { id } } }",
            json!({"id": encode_id("Memory", a["memory_id"].as_str().unwrap())}),
        )
        .await;
    let memory = memory.data()["memory"].clone();
    assert_eq!(
        memory["content"],
        "The Oslo office's wifi password is fjord-77"
    );
    let mentions: Vec<String> = memory["mentions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| uuid_of(m["id"].as_str().unwrap()))
        .collect();
    assert_eq!(mentions, [carrier]);
}
