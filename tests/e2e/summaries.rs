//! A summary read (`Detail::Summary`, what a page that shows no JSON
//! reads) is the full read with the JSON columns left blank, field for
//! field: a page of tasks, nested pages of children, the tasks' steps and
//! their events. Summaries are decoded by position through the field enums
//! of `tasks/fields.rs`, and the full reads through the entities by name;
//! comparing the two pins every position to its field, on both backends.

use std::collections::HashMap;

use brainstem_domain::{
    TaskId, TenantScope,
    page::PageRequest,
    tasks::{Detail, EventWindow, StepAttempt, Task, TaskEvent, TaskFilter, TaskGroup},
};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp, in_tenant},
};

for_both_backends!(a_summary_is_the_full_read_without_its_json);

/// A full task as its summary reads it: the JSON columns blank (see
/// `Detail`), every other field as stored.
fn task_summary(task: &Task) -> String {
    let mut task = task.clone();
    task.payload = Value::Null;
    task.frozen_plan = Vec::new();
    task.settled_step_ids = Vec::new();
    task.reviewed_step_ids = Vec::new();
    task.attempts = Default::default();
    task.state = Value::Null;
    task.step_outputs = Default::default();
    task.usage = Default::default();
    task.result = None;
    format!("{task:?}")
}

fn step_summary(step: &StepAttempt) -> String {
    let mut step = step.clone();
    step.args = Value::Null;
    step.output = Value::Null;
    step.usage = Default::default();
    format!("{step:?}")
}

fn event_summary(event: &TaskEvent) -> String {
    let mut event = event.clone();
    event.data = Value::Null;
    event.data_keys = Vec::new();
    format!("{event:?}")
}

/// Each full item as its summary, against the summaries read.
fn assert_summaries<T: std::fmt::Debug>(
    full: &[T],
    summaries: &[T],
    summary: fn(&T) -> String,
    what: &str,
) {
    let expected: Vec<String> = full.iter().map(summary).collect();
    let read: Vec<String> = summaries.iter().map(|s| format!("{s:?}")).collect();
    assert_eq!(read, expected, "{what}");
}

async fn a_summary_is_the_full_read_without_its_json(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.create_tenant("acme").await;
    let step = |id: &str, tool: &str, args: Value| json!({"id": id, "tool": tool, "args": args});
    app.publish_plan(
        "acme",
        json!({"key": "three", "intent": "t.three", "steps": [
            step("a", "set_state", json!({"a": 1})),
            step("b", "set_state", json!({"b": 2})),
            step("c", "set_state", json!({"c": 3})),
        ]}),
    )
    .await
    .data();
    app.publish_plan(
        "acme",
        json!({"key": "parent", "intent": "t.parent", "steps": [
            step("one", "spawn_task", json!({"plan_key": "three", "input": "one"})),
            step("two", "spawn_task", json!({"plan_key": "three", "input": "two"})),
        ]}),
    )
    .await
    .data();
    for i in 0..2 {
        app.start_task(
            "acme",
            json!({"planKey": "parent", "input": format!("parent {i}"),
                   "payload": {"order": i}, "idempotencyKey": format!("p-{i}")}),
        )
        .await;
    }
    // A failed task: a failed step and events with an error.
    app.publish_broken_plan("acme").await;
    app.start_task("acme", json!({"planKey": "broken"})).await;
    app.run_tasks().await;

    let scope = TenantScope::new(app.domain.tenants.resolve_claim("acme").await.unwrap().id);
    let tasks = &app.domain.tasks;
    let request = PageRequest::forward(100, None);
    let read = |detail| async move {
        in_tenant(
            scope,
            tasks.list(scope, TaskFilter::default(), request, detail),
        )
        .await
        .unwrap()
        .items
    };
    let (full, summaries) = (read(Detail::Full).await, read(Detail::Summary).await);
    // Two parents, four children, the failed task.
    assert_eq!(full.len(), 7);
    assert_summaries(&full, &summaries, task_summary, "a page of tasks");
    // Fields the comparison must have seen set, so that a misplaced column
    // could not pass as two blanks.
    assert!(full.iter().any(|t| t.parent.is_some()));
    assert!(full.iter().any(|t| t.error.is_some()));
    assert!(full.iter().any(|t| t.idempotency_key.is_some()));
    assert!(full.iter().any(|t| t.completed_at.is_some()));
    assert!(full.iter().any(|t| t.payload != Value::Null));

    let parents: Vec<Uuid> = full
        .iter()
        .filter(|t| t.plan_key.as_deref() == Some("parent"))
        .map(|t| t.id.uuid())
        .collect();
    let children = |detail| {
        let parents = &parents;
        async move {
            in_tenant(
                scope,
                tasks.pages_by(scope, TaskGroup::Children, parents, request, detail),
            )
            .await
            .unwrap()
        }
    };
    let (full_children, summary_children) = (
        children(Detail::Full).await,
        children(Detail::Summary).await,
    );
    assert_eq!(parents.len(), 2);
    for parent in &parents {
        let full = &full_children[parent].items;
        assert_eq!(full.len(), 2);
        assert_summaries(
            full,
            &summary_children[parent].items,
            task_summary,
            "a parent's children",
        );
    }

    let ids: Vec<TaskId> = full.iter().map(|t| t.id).collect();
    let steps = |detail| {
        let ids = &ids;
        async move {
            in_tenant(scope, tasks.steps_of_many(scope, ids, detail))
                .await
                .unwrap()
        }
    };
    let (full_steps, summary_steps): (HashMap<_, _>, HashMap<_, _>) =
        (steps(Detail::Full).await, steps(Detail::Summary).await);
    for id in &ids {
        assert_summaries(
            &full_steps[id],
            &summary_steps[id],
            step_summary,
            "a task's steps",
        );
    }
    let all_steps: Vec<&StepAttempt> = full_steps.values().flatten().collect();
    assert_eq!(all_steps.len(), 2 * 2 + 4 * 3 + 1);
    assert!(all_steps.iter().any(|s| s.error.is_some()));
    assert!(all_steps.iter().any(|s| s.args != Value::Null));

    let windows: Vec<(TaskId, EventWindow)> = ids
        .iter()
        .map(|id| (*id, EventWindow::first(0, 1000)))
        .collect();
    let events = |detail| {
        let windows = &windows;
        async move {
            in_tenant(scope, tasks.events_of_many(scope, windows, detail))
                .await
                .unwrap()
        }
    };
    let (full_events, summary_events) = (events(Detail::Full).await, events(Detail::Summary).await);
    for window in &windows {
        let full = &full_events[window];
        assert!(!full.is_empty());
        assert_summaries(
            full,
            &summary_events[window],
            event_summary,
            "a task's events",
        );
    }
    let all_events: Vec<&TaskEvent> = full_events.values().flatten().collect();
    assert!(all_events.iter().any(|e| e.step_id.is_some()));
    assert!(all_events.iter().any(|e| e.tool.is_some()));
    assert!(all_events.iter().any(|e| e.status.is_some()));
    assert!(all_events.iter().any(|e| e.error.is_some()));
    assert!(all_events.iter().any(|e| !e.data_keys.is_empty()));
}
