//! Memory import jobs (`startMemoryImport`): a JSON Lines file uploaded as
//! a GraphQL multipart request over real HTTP and imported in the
//! background. A 5,000-line file with ten bad lines (exactly those fail,
//! with their line numbers; the rest are stored once, also when the file
//! is uploaded again), progress followed by a real WebSocket subscription
//! until the job completes, other tenants kept out, a runner stopped
//! midway taken up by the housekeeping sweep with every line imported
//! exactly once (a batch stored but not recorded included), and oversize
//! files, read-only keys and requests a browser could forge refused before
//! any work.

use brainstem::config::Config;
use brainstem_domain::{
    Role, TenantScope,
    memory::{
        IMPORT_JOB_LEASE, ImportItem, ImportJob, ImportJobStatus, NewMemory, Tier, derived_key,
        duplicate_scan::DuplicateScan,
    },
};
use chrono::Utc;
use futures_util::StreamExt;
use sea_orm::ConnectionTrait;
use serde_json::{Value, json};

use crate::{
    for_both_backends,
    helpers::{Backend, Gql, TestApp, WsEvent, encode_id, in_tenant, uuid_of},
    memory::entity,
    memory_import::{count, text},
};

for_both_backends!(
    five_thousand_lines_with_ten_bad_ones_are_imported_once,
    a_job_merges_near_duplicates_stored_before_it_and_in_earlier_batches,
    the_scan_follows_writes_made_while_it_is_kept,
    a_runner_stopped_midway_is_taken_up_and_imports_exactly_once,
    oversize_files_read_only_keys_and_forgeable_requests_are_refused,
);

const JOB: &str = "id status fileName total processed created merged skipped failed \
    errors(first: 20) { line code message } createdAt updatedAt finishedAt";

/// The longest a subscriber waits for the next batch.
const BATCH_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

const BOUNDARY: &str = "----brainstem-test-boundary-7MA4YWxkTrZu0gW";

/// A GraphQL multipart request body uploading `file` as `$file` of
/// `startMemoryImport`.
fn multipart(file: &[u8]) -> Vec<u8> {
    let operations = json!({
        "query": format!("mutation($file: Upload!) {{ startMemoryImport(file: $file) {{ {JOB} }} }}"),
        "variables": {"file": null},
    });
    let mut body = Vec::new();
    let mut part = |headers: &str, content: &[u8]| {
        body.extend_from_slice(format!("--{BOUNDARY}\r\n{headers}\r\n\r\n").as_bytes());
        body.extend_from_slice(content);
        body.extend_from_slice(b"\r\n");
    };
    part(
        "Content-Disposition: form-data; name=\"operations\"",
        operations.to_string().as_bytes(),
    );
    part(
        "Content-Disposition: form-data; name=\"map\"",
        br#"{"0": ["variables.file"]}"#,
    );
    part(
        "Content-Disposition: form-data; name=\"0\"; filename=\"crm.jsonl\"\r\nContent-Type: application/jsonl",
        file,
    );
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

/// Upload `file` with `token` (and the preflight header unless `forgeable`).
async fn upload_as(app: &TestApp, token: Option<&str>, file: &[u8], forgeable: bool) -> Gql {
    let mut request = app
        .http
        .post(app.url("/graphql"))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(multipart(file));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if !forgeable {
        request = request.header("apollo-require-preflight", "true");
    }
    Gql::from(request.send().await.unwrap()).await
}

/// Upload `file`; the job as the mutation answered it.
async fn upload(app: &TestApp, token: &str, file: &[u8]) -> Value {
    upload_as(app, Some(token), file, false).await.data()["startMemoryImport"].clone()
}

async fn job(app: &TestApp, token: &str, id: &str) -> Gql {
    app.graphql(
        Some(token),
        &format!("query($id: ID!) {{ memoryImportJob(id: $id) {{ {JOB} }} }}"),
        json!({"id": id}),
    )
    .await
}

async fn jobs(app: &TestApp, token: &str) -> Vec<Value> {
    let res = app
        .graphql(Some(token), "{ memoryImportJobs { id status } }", json!({}))
        .await;
    res.data()["memoryImportJobs"].as_array().unwrap().clone()
}

/// Follow job `id` over a WebSocket until the server completes the
/// subscription: every job it sent, in order.
async fn follow(app: &TestApp, token: &str, id: &str) -> Vec<Value> {
    let mut ws = app.ws_connect("graphql-transport-ws").await;
    ws.init(Some(token)).await;
    assert!(matches!(ws.next_event().await, WsEvent::Json(m) if m["type"] == "connection_ack"));
    ws.send(json!({"id": "1", "type": "subscribe", "payload": {
        "query": "subscription($id: ID!) { memoryImportJob(id: $id) { id status total processed created merged skipped failed } }",
        "variables": {"id": id},
    }}))
    .await;
    let mut seen = Vec::new();
    loop {
        // A batch of 1,000 lines takes a while on SQLite in a debug build
        // (near-duplicates are searched exactly, in Rust).
        match ws.next_event_within(BATCH_WAIT).await {
            WsEvent::Json(m) if m["type"] == "next" => {
                assert!(m["payload"].get("errors").is_none(), "{m}");
                seen.push(m["payload"]["data"]["memoryImportJob"].clone());
            }
            WsEvent::Json(m) if m["type"] == "complete" => return seen,
            other => panic!("expected next or complete, got {other:?}"),
        }
    }
}

/// The progress a subscription saw: never going back, ending completed.
fn assert_progress(seen: &[Value], total: u64) {
    assert!(!seen.is_empty());
    let processed: Vec<u64> = seen
        .iter()
        .map(|j| j["processed"].as_u64().unwrap())
        .collect();
    assert!(
        processed.windows(2).all(|w| w[0] <= w[1]),
        "progress went back: {processed:?}"
    );
    let last = seen.last().unwrap();
    assert_eq!(last["status"], "COMPLETED", "{last}");
    assert_eq!(last["processed"], total, "{last}");
    assert!(
        seen[..seen.len() - 1]
            .iter()
            .all(|j| j["status"] == "RUNNING"),
        "only the last is completed: {seen:?}"
    );
}

async fn five_thousand_lines_with_ten_bad_ones_are_imported_once(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let acme = app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    let t = app.token(Some("acme"), &[Role::Member]);
    let customer = entity(&app, &t, "customer", "Northwind").await;
    let unknown = encode_id("KgEntity", "0193a0e0-0000-7000-8000-00000000abcd");

    // Ten bad lines (numbered from 1 as in the file), each bad in its own way.
    let bad: Vec<(usize, String, &str, &str)> = vec![
        (
            1,
            r#"{"content": "unfinished"#.into(),
            "BAD_USER_INPUT",
            "line 1 is not a memory",
        ),
        (
            8,
            json!({"content": ""}).to_string(),
            "BAD_USER_INPUT",
            "content",
        ),
        (
            999,
            json!({"content": "fine", "importance": 2}).to_string(),
            "BAD_USER_INPUT",
            "importance",
        ),
        (
            1000,
            json!({"content": "fine", "subjectId": unknown}).to_string(),
            "NOT_FOUND",
            "not found",
        ),
        (
            1001,
            "[1, 2, 3]".into(),
            "BAD_USER_INPUT",
            "line 1001 is not a memory",
        ),
        (
            2500,
            json!({"content": "fine", "colour": "red"}).to_string(),
            "BAD_USER_INPUT",
            "unknown field `colour`",
        ),
        (
            3001,
            json!({"content": "fine", "tier": "HOT"}).to_string(),
            "BAD_USER_INPUT",
            "`tier` must be one of",
        ),
        (
            3999,
            json!({"content": "fine", "mentionIds": ["not-an-id"]}).to_string(),
            "BAD_USER_INPUT",
            "not a valid id",
        ),
        (
            4000,
            json!({"content": "fine", "confidence": -0.1}).to_string(),
            "BAD_USER_INPUT",
            "confidence",
        ),
        (
            5000,
            json!({"content": "fine", "key": ""}).to_string(),
            "BAD_USER_INPUT",
            "key",
        ),
    ];
    let lines: Vec<String> = (1..=5000usize)
        .map(|n| match bad.iter().find(|(at, ..)| *at == n) {
            Some((_, line, ..)) => line.clone(),
            None => {
                let mut item = json!({"key": format!("crm-{n}"), "content": text(n as u64)});
                if n % 97 == 0 {
                    item["mentionIds"] = json!([customer]);
                    item["tier"] = json!("MEMORY_BANK");
                }
                item.to_string()
            }
        })
        .collect();
    let file = (lines.join("\n") + "\n").into_bytes();

    for (run, created, skipped) in [("first", 4990, 0), ("again", 0, 4990)] {
        let started = upload(&app, &t, &file).await;
        assert_eq!(started["fileName"], "crm.jsonl");
        assert_eq!(started["total"], 5000, "{run}: {started}");
        let id = started["id"].as_str().unwrap().to_owned();

        let seen = follow(&app, &t, &id).await;
        assert_progress(&seen, 5000);
        let done = job(&app, &t, &id).await;
        let done = &done.data()["memoryImportJob"];
        assert_eq!(done["status"], "COMPLETED", "{run}: {done}");
        assert_eq!(
            [
                &done["created"],
                &done["merged"],
                &done["skipped"],
                &done["failed"]
            ],
            [&json!(created), &json!(0), &json!(skipped), &json!(10)],
            "{run}: {done}"
        );
        assert!(done["finishedAt"].is_string());
        let errors = done["errors"].as_array().unwrap();
        let lines: Vec<u64> = errors.iter().map(|e| e["line"].as_u64().unwrap()).collect();
        let expected: Vec<u64> = bad.iter().map(|(at, ..)| *at as u64).collect();
        assert_eq!(
            lines, expected,
            "{run}: exactly the ten bad lines, in order"
        );
        for (e, (at, _, code, needle)) in errors.iter().zip(&bad) {
            assert_eq!(e["code"], *code, "{run}: line {at}: {e}");
            let message = e["message"].as_str().unwrap();
            assert!(message.contains(needle), "{run}: line {at}: {message}");
        }
        assert_eq!(count(&app, "memories", &acme).await, 4990, "{run}");
        assert_eq!(
            count(&app, "memory_import_keys", &acme).await,
            4990,
            "{run}"
        );
        assert_eq!(count(&app, "memory_versions", &acme).await, 0, "{run}");
        assert_eq!(count(&app, "memory_mentions", &acme).await, 51, "{run}");
    }
    let listed = jobs(&app, &t).await;
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|j| j["status"] == "COMPLETED"));

    // Another tenant finds neither the job nor its progress.
    let id = listed[0]["id"].as_str().unwrap().to_owned();
    let g = app.token(Some("globex"), &[Role::Member]);
    assert_eq!(job(&app, &g, &id).await.error_code(), "NOT_FOUND");
    let node = app
        .graphql(
            Some(&g),
            "query($id: ID!) { node(id: $id) { id } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(node.error_code(), "NOT_FOUND");
    assert!(jobs(&app, &g).await.is_empty());
    let mut ws = app.ws_connect("graphql-transport-ws").await;
    ws.init(Some(&g)).await;
    assert!(matches!(ws.next_event().await, WsEvent::Json(m) if m["type"] == "connection_ack"));
    ws.send(json!({"id": "1", "type": "subscribe", "payload": {
        "query": "subscription($id: ID!) { memoryImportJob(id: $id) { processed } }",
        "variables": {"id": id},
    }}))
    .await;
    // Refused before anything streams: an `error`, or a `next` carrying
    // only the error.
    match ws.next_event().await {
        WsEvent::Json(m) if m["type"] == "error" => {
            assert_eq!(m["payload"][0]["extensions"]["code"], "NOT_FOUND", "{m}");
        }
        WsEvent::Json(m) if m["type"] == "next" => {
            assert_eq!(
                m["payload"]["errors"][0]["extensions"]["code"], "NOT_FOUND",
                "{m}"
            );
            assert!(!m.to_string().contains("processed\":"), "{m}");
        }
        other => panic!("expected an error, got {other:?}"),
    }
}

/// A job of one `{"content": …}` line per text, created for `scope` as
/// an upload would create it (without the HTTP round trip).
async fn create_job(app: &TestApp, scope: TenantScope, texts: Vec<String>) -> ImportJob {
    let file: String = texts
        .into_iter()
        .map(|t| json!({"content": t}).to_string() + "\n")
        .collect();
    let memory = &app.domain.memory;
    in_tenant(
        scope,
        memory.create_import_job(scope, "test".into(), None, file.as_bytes()),
    )
    .await
    .unwrap()
}

/// Run job `id` as `owner`, stopping after `budget` lines when given; how
/// many lines it recorded.
async fn run_job(
    app: &TestApp,
    scope: TenantScope,
    id: uuid::Uuid,
    owner: &str,
    budget: Option<u64>,
) -> u64 {
    let memory = &app.domain.memory;
    in_tenant(scope, memory.run_import_job(scope, id, owner, None, budget))
        .await
        .unwrap()
}

/// Remember `content` in `scope` through the domain; the memory's id.
async fn remember(
    app: &TestApp,
    scope: TenantScope,
    content: String,
) -> brainstem_domain::MemoryId {
    let input = NewMemory {
        content,
        ..NewMemory::default()
    };
    in_tenant(scope, app.domain.memory.remember(scope, input))
        .await
        .unwrap()
        .memory
        .id
}

/// A job looks near-duplicates up in its own copy of the tenant's vectors
/// (`DuplicateScan`): it must find what the store would, in the memories
/// stored before the job and in the job's earlier batches, and leave out
/// archived ones.
async fn a_job_merges_near_duplicates_stored_before_it_and_in_earlier_batches(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let acme = app.create_tenant("acme").await;
    let scope = TenantScope::new(uuid_of(&acme).parse::<uuid::Uuid>().unwrap().into());
    let memory = &app.domain.memory;
    let stored = remember(&app, scope, text(1)).await;
    let archived = remember(&app, scope, text(2)).await;
    in_tenant(scope, memory.archive(scope, archived))
        .await
        .unwrap();
    // Another tier: never a duplicate of a working memory.
    in_tenant(
        scope,
        memory.remember(
            scope,
            NewMemory {
                content: text(3),
                tier: Some(Tier::MemoryBank),
                ..NewMemory::default()
            },
        ),
    )
    .await
    .unwrap();

    // 2,500 lines (three batches): line 1 repeats the stored memory, line 2
    // the archived one, line 3 the memory-bank one; line 1,500 (second
    // batch) repeats line 10 (first batch), line 2,400 (third) line 1,200
    // (second).
    let content = |line: u64| match line {
        1 => text(1),
        2 => text(2),
        3 => text(3),
        1500 => text(1010),
        2400 => text(2200),
        n => text(1000 + n),
    };
    let created = create_job(&app, scope, (1..=2500u64).map(content).collect()).await;
    run_job(&app, scope, created.id, "runner", None).await;
    let done = in_tenant(scope, memory.import_job(scope, created.id))
        .await
        .unwrap();
    assert_eq!(done.status, ImportJobStatus::Completed);
    assert_eq!(
        (done.created, done.merged, done.failed),
        (2497, 3, 0),
        "lines 1, 1,500 and 2,400 merge; the archived and other-tier texts do not: {done:?}"
    );
    assert_eq!(count(&app, "memories", &acme).await, 3 + 2497);
    assert_eq!(count(&app, "memory_versions", &acme).await, 3);
    let merged_into_stored = in_tenant(scope, memory.get(scope, stored)).await.unwrap();
    assert_eq!(
        merged_into_stored.version, 2,
        "line 1 merged into the stored memory"
    );
}

/// The scan a job keeps between batches sees what other writers did
/// meanwhile: a memory remembered after it was read is found, an archived
/// one is no longer, a merged one is compared with its new text.
async fn the_scan_follows_writes_made_while_it_is_kept(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let acme = app.create_tenant("acme").await;
    let scope = TenantScope::new(uuid_of(&acme).parse::<uuid::Uuid>().unwrap().into());
    let memory = &app.domain.memory;
    let vector =
        |n: u64| async move { memory.embedder().embed(&[text(n)]).await.unwrap().remove(0) };
    let first = remember(&app, scope, text(1)).await;
    let second = remember(&app, scope, text(2)).await;

    let mut scan = DuplicateScan::new(
        scope,
        memory.embedder().model(),
        memory.config().embedding_dimension,
        2,
    );
    assert!(scan.available());
    in_tenant(scope, scan.refresh(memory.index().as_ref()))
        .await
        .unwrap();
    assert_eq!(scan.len(), 2);
    let nearest = async |scan: &DuplicateScan, n: u64| {
        let v = vector(n).await;
        scan.nearest_each(Tier::Working, None, &[&v], Utc::now(), f32::NEG_INFINITY)
            .await
            .unwrap()[0]
    };
    assert_eq!(nearest(&scan, 1).await.map(|(id, _)| id), Some(first));

    // Meanwhile: a new memory, an archived one, and one merged into with a
    // text that now matches another.
    let third = remember(&app, scope, text(3)).await;
    in_tenant(scope, memory.archive(scope, first))
        .await
        .unwrap();
    let before_merge = nearest(&scan, 4).await;
    in_tenant(
        scope,
        memory.update(
            scope,
            second,
            brainstem_domain::memory::MemoryUpdate {
                content: Some(text(4)),
                ..Default::default()
            },
        ),
    )
    .await
    .unwrap();
    assert!(
        nearest(&scan, 3).await.is_none_or(|(id, _)| id != third),
        "not seen before the refresh"
    );

    in_tenant(scope, scan.refresh(memory.index().as_ref()))
        .await
        .unwrap();
    assert_eq!(scan.len(), 2, "the archived memory left, the new one came");
    let (found, similarity) = nearest(&scan, 3).await.unwrap();
    assert_eq!(found, third);
    assert!(similarity > 0.999);
    let (found, similarity) = nearest(&scan, 4).await.unwrap();
    assert_eq!(found, second, "compared with its new text");
    assert!(similarity > 0.999);
    assert!(
        before_merge.is_none_or(|(_, s)| s < 0.9),
        "before the refresh, nothing was like text 4: {before_merge:?}"
    );
    assert!(
        nearest(&scan, 1).await.is_none_or(|(id, _)| id != first),
        "the archived memory is no candidate"
    );
    // A tenant too big for the budget is not copied: the import asks the
    // store instead.
    let dimension = memory.config().embedding_dimension;
    let too_many =
        (brainstem_domain::memory::duplicate_scan::SCAN_BUDGET_BYTES / (dimension * 4) + 1) as u64;
    let mut big = DuplicateScan::new(scope, memory.embedder().model(), dimension, too_many);
    in_tenant(scope, big.refresh(memory.index().as_ref()))
        .await
        .unwrap();
    assert!(!big.available());
    assert!(big.is_empty(), "nothing read");
}

async fn a_runner_stopped_midway_is_taken_up_and_imports_exactly_once(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let acme = app.create_tenant("acme").await;
    let scope = TenantScope::new(uuid_of(&acme).parse::<uuid::Uuid>().unwrap().into());
    let memory = &app.domain.memory;
    // 3,000 lines without keys: each is imported under its derived key.
    let created = create_job(&app, scope, (1..=3000u64).map(text).collect()).await;
    assert_eq!(created.total, 3000);

    // A runner that stops after 1,500 lines, its lease still held ...
    let handled = run_job(&app, scope, created.id, "crashed", Some(1500)).await;
    assert_eq!(handled, 1500);
    // ... after it stored the next 200 lines' memories but before it
    // recorded them (a crash between the two commits).
    let stored: Vec<ImportItem> = (1501..=1700u64)
        .map(|n| ImportItem {
            key: Some(derived_key(created.id, n as i64)),
            memory: Ok(NewMemory {
                content: text(n),
                ..NewMemory::default()
            }),
        })
        .collect();
    in_tenant(scope, memory.import(scope, stored))
        .await
        .unwrap();
    let cut = in_tenant(scope, memory.import_job(scope, created.id))
        .await
        .unwrap();
    assert_eq!(cut.status, ImportJobStatus::Running);
    assert_eq!((cut.processed, cut.created), (1500, 1500));
    assert_eq!(count(&app, "memories", &acme).await, 1700);

    // While the lease holds, no one else runs the job.
    let other = run_job(&app, scope, created.id, "early", None).await;
    assert_eq!(other, 0);
    assert_eq!(
        memory.resume_import_jobs(Utc::now()).await.unwrap(),
        0,
        "a held lease is not taken up"
    );

    // Once it has expired, the housekeeping sweep takes the job up.
    let mut progress = in_tenant(scope, memory.watch_import_job(scope, created.id))
        .await
        .unwrap()
        .boxed();
    let later = Utc::now() + chrono::Duration::from_std(IMPORT_JOB_LEASE).unwrap();
    assert_eq!(memory.resume_import_jobs(later).await.unwrap(), 1);
    let mut last = None;
    while let Some(job) = in_tenant(scope, progress.next()).await {
        last = Some(job.unwrap());
    }
    let done = last.unwrap();
    assert_eq!(done.status, ImportJobStatus::Completed);
    assert_eq!(
        (
            done.processed,
            done.created,
            done.merged,
            done.skipped,
            done.failed
        ),
        (3000, 2800, 0, 200, 0),
        "the lines stored before the crash are reported skipped: {done:?}"
    );
    assert_eq!(count(&app, "memories", &acme).await, 3000, "each line once");
    assert_eq!(count(&app, "memory_import_keys", &acme).await, 3000);
    assert_eq!(count(&app, "memory_versions", &acme).await, 0);
}

async fn oversize_files_read_only_keys_and_forgeable_requests_are_refused(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c: &mut Config| {
        c.memory_import_max_bytes = 2_000;
        c.memory_import_max_lines = 10;
    })
    .await;
    app.create_tenant("acme").await;
    let t = app.token(Some("acme"), &[Role::Member]);
    let line = |n: u64| json!({"content": format!("fact {n}")}).to_string() + "\n";
    let ok: String = (1..=10).map(line).collect();

    // Over the byte limit (the file itself, and a body the edge refuses).
    let big = "x".repeat(2_001);
    let res = upload_as(&app, Some(&t), big.as_bytes(), false).await;
    assert_eq!(res.error_code(), "BAD_USER_INPUT", "{:?}", res.body);
    assert!(
        res.error_message().contains("2000 bytes"),
        "{}",
        res.error_message()
    );
    let huge = vec![b'x'; 3 * 1024 * 1024];
    let res = upload_as(&app, Some(&t), &huge, false).await;
    assert_eq!(res.status, 413);
    assert_eq!(res.error_code(), "PAYLOAD_TOO_LARGE");
    // Over the line limit.
    let res = upload_as(&app, Some(&t), (ok.clone() + &line(11)).as_bytes(), false).await;
    assert_eq!(res.error_code(), "BAD_USER_INPUT");
    assert!(
        res.error_message().contains("more than 10 lines"),
        "{}",
        res.error_message()
    );
    // A key that may only read.
    let (_, reader) = app.create_api_key("acme", &["memory:read"]).await;
    let res = upload_as(&app, Some(&reader), ok.as_bytes(), false).await;
    assert_eq!(res.error_code(), "FORBIDDEN", "{:?}", res.body);
    // What a browser on another site could send: no preflight header, or
    // no credential.
    let res = upload_as(&app, Some(&t), ok.as_bytes(), true).await;
    assert_eq!(res.status, 400);
    assert_eq!(res.error_code(), "BAD_USER_INPUT");
    assert!(res.error_message().contains("apollo-require-preflight"));
    let res = upload_as(&app, None, ok.as_bytes(), false).await;
    assert_eq!(res.status, 401);
    assert_eq!(res.error_code(), "UNAUTHENTICATED");
    // A file sent as a plain variable is no upload.
    let res = app
        .graphql(
            Some(&t),
            "mutation($file: Upload!) { startMemoryImport(file: $file) { id } }",
            json!({"file": ok}),
        )
        .await;
    assert_eq!(res.error_code(), "BAD_USER_INPUT", "{:?}", res.body);
    // None of it started a job; a file within the limits does.
    assert!(jobs(&app, &t).await.is_empty());
    let started = upload(&app, &t, ok.as_bytes()).await;
    assert_eq!(started["total"], 10);
    let seen = follow(&app, &t, started["id"].as_str().unwrap()).await;
    assert_progress(&seen, 10);
}

// PostgreSQL only: SQLite keeps no vector index.
mod a_tenant_vector_index_waits_for_the_job {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        let app = crate::helpers::TestApp::spawn_with(crate::helpers::Backend::Postgres, |c| {
            c.memory_tenant_index_rows = 500;
        })
        .await;
        super::a_tenant_vector_index_waits_for_the_job(app).await;
    }
}

/// While a tenant's import job runs, the maintenance job builds no HNSW
/// index for it (every imported vector would be inserted into a growing
/// graph); the runner builds it once the job is completed, after
/// refreshing the planner's statistics of the loaded tables (not after a
/// small tenant's job).
async fn a_tenant_vector_index_waits_for_the_job(app: TestApp) {
    let acme = app.create_tenant("acme").await;
    let tenant: uuid::Uuid = uuid_of(&acme).parse().unwrap();
    let scope = TenantScope::new(tenant.into());
    let memory = &app.domain.memory;
    // One number `n` that a statement outside the tenant's scope reads.
    let number = async |sql: &str, values: Vec<sea_orm::Value>| {
        let row = app
            .outside_db()
            .await
            .query_one_raw(sea_orm::Statement::from_sql_and_values(
                sea_orm::DbBackend::Postgres,
                sql,
                values,
            ))
            .await
            .unwrap()
            .unwrap();
        row.try_get::<i64>("", "n").unwrap()
    };
    let index_name = brainstem_domain::memory::vector::tenant_index_name(tenant);
    let indexed = async || {
        let sql = "SELECT count(*) AS n FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
                   WHERE c.relname = $1 AND i.indisvalid";
        number(sql, vec![index_name.clone().into()]).await == 1
    };
    // Manual ANALYZEs of `memories` (autovacuum's are counted apart).
    let analyzed = async || {
        let sql = "SELECT analyze_count AS n FROM pg_stat_user_tables WHERE relname = 'memories'";
        number(sql, Vec::new()).await
    };
    // A small tenant's job leaves the statistics alone: its searches are
    // exact, planned alike whatever they say.
    let small = app.create_tenant("small").await;
    let small = TenantScope::new(uuid_of(&small).parse::<uuid::Uuid>().unwrap().into());
    let before_small = analyzed().await;
    let job = create_job(&app, small, (1..=20u64).map(text).collect()).await;
    assert_eq!(run_job(&app, small, job.id, "runner", None).await, 20);
    assert_eq!(
        analyzed().await,
        before_small,
        "no ANALYZE after a job that leaves its tenant under tenant_index_rows"
    );

    let created = create_job(&app, scope, (1..=1500u64).map(text).collect()).await;
    // The first batch, the lease still held: the job is running.
    let handled = run_job(&app, scope, created.id, "runner", Some(1000)).await;
    assert_eq!(handled, 1000);
    assert_eq!(count(&app, "memory_embeddings", &acme).await, 1000);
    assert_eq!(
        memory.index().maintain().await.unwrap(),
        0,
        "no index for a tenant whose import runs"
    );
    assert!(!indexed().await);
    let analyzed_before = analyzed().await;

    run_job(&app, scope, created.id, "runner", None).await;
    let done = in_tenant(scope, memory.import_job(scope, created.id))
        .await
        .unwrap();
    assert_eq!(
        (done.status, done.created),
        (ImportJobStatus::Completed, 1500)
    );
    assert!(
        indexed().await,
        "built by the runner once the job completed"
    );
    assert!(
        analyzed().await > analyzed_before,
        "the planner's statistics refreshed after the load"
    );
}
