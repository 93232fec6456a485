//! `start_task` in a waiting mode (`ENQUEUE_AND_WAIT`, `ANSWER`): start the
//! task without waiting, then follow its `taskEvents` subscription until
//! it settles (done, or waiting for a person or an external system) or
//! the wait ends, telling the client each event as an MCP progress
//! notification when it sent a `progressToken`; then answer with the task
//! as it is, like `startTask`'s payload (`ok` when it completed).
//!
//! Invariants: the wait is `waitTimeoutMs` capped just below the request
//! timeout, as for `startTask` over GraphQL (`modes::wait_limit`); the
//! task goes on after the wait either way; a client that cancels the call
//! ends the wait, not the task. Every read goes through the schema as the
//! caller (the subscription replays stored events first, so an event
//! before the subscription is not missed).

use brainstem_domain::{row_security, tasks::TaskStatus};
use futures_util::StreamExt;
use rmcp::{
    RoleServer,
    model::{CallToolResult, JsonObject, ProgressNotificationParam},
    service::RequestContext,
};
use serde_json::{Value, json};

use super::{
    McpCaller, McpServer, tool_result,
    tools::{self, Prepared},
};
use crate::schema::tasks::modes;

/// The wait `startTask` applies when `waitTimeoutMs` is not given.
const DEFAULT_WAIT_MS: u64 = 30_000;

pub(super) async fn start_task(
    server: &McpServer,
    caller: &McpCaller,
    tool: &Prepared,
    mut arguments: JsonObject,
    context: &RequestContext<RoleServer>,
) -> CallToolResult {
    let waits = matches!(
        arguments.get("mode").and_then(Value::as_str),
        Some("ENQUEUE_AND_WAIT" | "ANSWER")
    );
    if !waits {
        return server.run(caller, tool, arguments).await;
    }
    let requested = arguments
        .get("waitTimeoutMs")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_WAIT_MS);
    // The mutation only starts the task; the wait is here, where events
    // can be reported while it lasts.
    arguments.insert("waitTimeoutMs".into(), json!(0));
    let started = server.run(caller, tool, arguments).await;
    if started.is_error == Some(true) {
        return started;
    }
    let Some(task_id) = started
        .structured_content
        .as_ref()
        .and_then(|v| v.pointer("/task/id"))
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return started;
    };
    let request_timeout = server.state.limits.request_timeout;
    let limit = modes::wait_limit(
        u32::try_from(requested).unwrap_or(u32::MAX),
        request_timeout,
    );
    follow(server, caller, &task_id, limit, context).await;
    let request = async_graphql::Request::new(format!(
        "query McpStartTaskResult($id: ID!) {{ task(id: $id) {{ {} }} }}",
        tools::TASK
    ))
    .variables(async_graphql::Variables::from_json(
        json!({ "id": task_id }),
    ));
    let read = tool_result(server.execute(caller, request).await, "task");
    if read.is_error == Some(true) {
        return read;
    }
    let task = read.structured_content.unwrap_or(Value::Null);
    let ok = task.get("status").and_then(Value::as_str) == Some("COMPLETED");
    CallToolResult::structured(json!({ "ok": ok, "task": task }))
}

/// Follow the task's events until it settles, `limit` passes or the
/// client cancels, reporting each as progress if the client asked.
async fn follow(
    server: &McpServer,
    caller: &McpCaller,
    task_id: &str,
    limit: std::time::Duration,
    context: &RequestContext<RoleServer>,
) {
    let token = context.meta.get_progress_token();
    let mut request = async_graphql::Request::new(
        "subscription McpTaskProgress($id: ID!) { taskEvents(taskId: $id, after: 0) \
         { seq kind status stepId tool summary } }",
    )
    .variables(async_graphql::Variables::from_json(
        json!({ "id": task_id }),
    ));
    request.data = crate::schema::caller_data(Some(caller.credential.clone()));
    if let Some(address) = caller.address {
        request.data.insert(crate::schema::ClientAddress(address));
    }
    let access = row_security::of_principal(&caller.credential.principal);
    let mut events =
        row_security::stream(access, server.state.schema.execute_stream(request)).boxed();
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let next = tokio::select! {
            next = tokio::time::timeout_at(deadline, events.next()) => next,
            () = context.ct.cancelled() => return,
        };
        let Ok(Some(response)) = next else {
            return; // the wait ended, or the stream did
        };
        if !response.errors.is_empty() {
            return;
        }
        let data = response.data.into_json().unwrap_or(Value::Null);
        let event = &data["taskEvents"];
        let kind = event["kind"].as_str().unwrap_or_default();
        if kind == "TOKEN_DELTA" {
            continue; // text as it streams, not progress
        }
        if let Some(token) = &token {
            let seq = event["seq"].as_f64().unwrap_or_default();
            let summary = event["summary"].as_str().unwrap_or_default();
            let message = match event["stepId"].as_str() {
                Some(step) => format!("{kind} {step}: {summary}"),
                None => format!("{kind}: {summary}"),
            };
            let progress = ProgressNotificationParam::new(token.clone(), seq).with_message(message);
            if context.peer.notify_progress(progress).await.is_err() {
                tracing::debug!("an MCP client went away during a task's wait");
            }
        }
        let settled = event["status"]
            .as_str()
            .and_then(|s| s.parse::<TaskStatus>().ok())
            .is_some_and(TaskStatus::is_settled);
        if kind == "STATUS_CHANGED" && settled {
            return;
        }
    }
}
