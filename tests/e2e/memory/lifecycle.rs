//! A memory's life: outcomes move its score, the lifecycle rules promote,
//! archive and expire it, and the memory bank keeps its capacity.

use chrono::{Duration, Utc};
use serde_json::{Value, json};

use super::{approx, entity, get, hit_ids, member, outcome, remember, remember_id, search, time};
use crate::{helpers::TestApp, on_both_backends};

on_both_backends!(
    outcomes_move_scores_by_the_exact_deltas,
    promotion_and_archiving_follow_the_thresholds,
    tiers_expire_after_their_ttl,
    deleted_memories_wait_in_the_bin_then_go_and_a_subject_is_forgotten,
);

async fn outcomes_move_scores_by_the_exact_deltas(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let id = remember_id(&app, &t, json!({"content": "Call before noon"})).await;
    for (o, before, after, uses) in [
        ("WORKED", 0.5, 0.7, 1),
        ("FAILED", 0.7, 0.4, 2),
        ("PARTIAL", 0.4, 0.45, 3),
        ("UNKNOWN", 0.45, 0.45, 4),
    ] {
        let r = outcome(&app, &t, &id, o).await;
        approx(&r["scoreBefore"], before);
        approx(&r["scoreAfter"], after);
        approx(&r["memory"]["score"], after);
        assert_eq!(r["memory"]["uses"], uses);
    }
    // Clamped to 0..1.
    let up = remember_id(&app, &t, json!({"content": "Ship on Mondays"})).await;
    for expected in [0.7, 0.9, 1.0, 1.0] {
        approx(
            &outcome(&app, &t, &up, "WORKED").await["scoreAfter"],
            expected,
        );
    }
    let down = remember_id(&app, &t, json!({"content": "Fax the forms"})).await;
    for expected in [0.2, 0.0, 0.0] {
        approx(
            &outcome(&app, &t, &down, "FAILED").await["scoreAfter"],
            expected,
        );
    }
    // Authoritative tiers count uses but keep their score.
    let bank = remember_id(
        &app,
        &t,
        json!({"content": "Our name is Acme", "tier": "MEMORY_BANK"}),
    )
    .await;
    let r = outcome(&app, &t, &bank, "FAILED").await;
    approx(&r["scoreAfter"], 0.5);
    assert_eq!(r["memory"]["uses"], 1);
    // Every outcome is an event.
    let events = app
        .graphql(
            Some(&t),
            "query($id: ID!) { memory(id: $id) { events { kind outcome scoreBefore scoreAfter } } }",
            json!({"id": id}),
        )
        .await;
    let events = events.data()["memory"]["events"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(events.len(), 4);
    assert_eq!(events[1]["kind"], "OUTCOME");
    assert_eq!(events[1]["outcome"], "FAILED");
    approx(&events[1]["scoreBefore"], 0.7);
    approx(&events[1]["scoreAfter"], 0.4);
}

async fn promotion_and_archiving_follow_the_thresholds(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let promote = remember_id(&app, &t, json!({"content": "Use the blue form"})).await;
    let one_use = remember_id(&app, &t, json!({"content": "Use the red form"})).await;
    let low = remember_id(&app, &t, json!({"content": "Use the green form"})).await;
    let at_floor = remember_id(&app, &t, json!({"content": "Use the grey form"})).await;
    let sinking = remember_id(&app, &t, json!({"content": "Use the pink form"})).await;
    // 0.7 with 2 uses: exactly at the working→history threshold.
    outcome(&app, &t, &promote, "WORKED").await;
    outcome(&app, &t, &promote, "UNKNOWN").await;
    // 0.7 with 1 use: not enough uses.
    outcome(&app, &t, &one_use, "WORKED").await;
    // 0.6 with 2 uses: not enough score.
    outcome(&app, &t, &low, "PARTIAL").await;
    outcome(&app, &t, &low, "PARTIAL").await;
    // 0.2 stays; below 0.2 is archived.
    outcome(&app, &t, &at_floor, "FAILED").await;
    outcome(&app, &t, &sinking, "FAILED").await;
    outcome(&app, &t, &sinking, "FAILED").await;

    let now = Utc::now();
    let report = app.domain.memory.run_maintenance(now).await.unwrap();
    assert_eq!(report.promoted_to_history, 1);
    assert_eq!(report.promoted_to_patterns, 0);
    assert_eq!(report.archived, 1);
    let m = get(&app, &t, &promote).await;
    assert_eq!(m["tier"], "HISTORY");
    // The 30-day lifetime starts at promotion.
    // (PostgreSQL keeps microseconds, `now` has nanoseconds.)
    let lifetime = time(&m["expiresAt"]) - now;
    assert!(
        (lifetime - Duration::days(30))
            .num_microseconds()
            .unwrap()
            .abs()
            < 1,
        "{lifetime}"
    );
    assert_eq!(get(&app, &t, &one_use).await["tier"], "WORKING");
    assert_eq!(get(&app, &t, &low).await["tier"], "WORKING");
    assert_eq!(get(&app, &t, &at_floor).await["status"], "ACTIVE");
    assert_eq!(get(&app, &t, &sinking).await["status"], "ARCHIVED");

    // history→patterns needs 0.9 and 3 uses: 0.9 with 3 uses is exactly enough.
    outcome(&app, &t, &promote, "WORKED").await;
    let again = app.domain.memory.run_maintenance(now).await.unwrap();
    assert_eq!(again.promoted_to_patterns, 1);
    let m = get(&app, &t, &promote).await;
    assert_eq!(m["tier"], "PATTERNS");
    assert_eq!(m["expiresAt"], Value::Null, "patterns are permanent");
    // A run with nothing to do changes nothing.
    let idle = app.domain.memory.run_maintenance(now).await.unwrap();
    assert_eq!(idle, Default::default());
    let events = app
        .graphql(
            Some(&t),
            "query($id: ID!) { memory(id: $id) { events { kind tierBefore tierAfter } } }",
            json!({"id": promote}),
        )
        .await;
    let promotions: Vec<Value> = events.data()["memory"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "PROMOTED")
        .cloned()
        .collect();
    assert_eq!(
        promotions,
        vec![
            json!({"kind": "PROMOTED", "tierBefore": "WORKING", "tierAfter": "HISTORY"}),
            json!({"kind": "PROMOTED", "tierBefore": "HISTORY", "tierAfter": "PATTERNS"}),
        ]
    );
}

async fn tiers_expire_after_their_ttl(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let working = remember(&app, &t, json!({"content": "Working fact"})).await["memory"].clone();
    let history = remember(
        &app,
        &t,
        json!({"content": "History fact", "tier": "HISTORY"}),
    )
    .await["memory"]
        .clone();
    let bank = remember_id(
        &app,
        &t,
        json!({"content": "Bank fact", "tier": "MEMORY_BANK"}),
    )
    .await;
    let patterns = remember_id(
        &app,
        &t,
        json!({"content": "Pattern fact", "tier": "PATTERNS"}),
    )
    .await;
    let w_created = time(&working["createdAt"]);
    let h_created = time(&history["createdAt"]);
    assert_eq!(time(&working["expiresAt"]) - w_created, Duration::hours(24));
    assert_eq!(time(&history["expiresAt"]) - h_created, Duration::days(30));

    let memory = &app.domain.memory;
    let r = memory
        .run_maintenance(w_created + Duration::hours(24) - Duration::seconds(1))
        .await
        .unwrap();
    assert_eq!(r.expired, 0);
    let r = memory
        .run_maintenance(w_created + Duration::hours(24))
        .await
        .unwrap();
    assert_eq!(r.expired, 1);
    assert_eq!(
        get(&app, &t, working["id"].as_str().unwrap()).await["status"],
        "EXPIRED"
    );
    assert_eq!(
        get(&app, &t, history["id"].as_str().unwrap()).await["status"],
        "ACTIVE"
    );
    let r = memory
        .run_maintenance(h_created + Duration::days(30) - Duration::seconds(1))
        .await
        .unwrap();
    assert_eq!(r.expired, 0);
    let r = memory
        .run_maintenance(h_created + Duration::days(30))
        .await
        .unwrap();
    assert_eq!(r.expired, 1);
    assert_eq!(
        get(&app, &t, history["id"].as_str().unwrap()).await["status"],
        "EXPIRED"
    );
    memory
        .run_maintenance(h_created + Duration::days(3650))
        .await
        .unwrap();
    assert_eq!(get(&app, &t, &bank).await["status"], "ACTIVE");
    assert_eq!(get(&app, &t, &patterns).await["status"], "ACTIVE");
}

on_both_backends_with!(
    memory_bank_keeps_its_capacity,
    |c: &mut brainstem::config::Config| c.memory_bank_capacity = 3
);

async fn memory_bank_keeps_its_capacity(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let mut ids = Vec::new();
    for (i, importance) in [0.9, 0.1, 0.8, 0.2, 0.7].into_iter().enumerate() {
        ids.push(
            remember_id(
                &app,
                &t,
                json!({"content": format!("Bank fact number {i} about topic {}", ["alpha", "beta", "gamma", "delta", "epsilon"][i]), "tier": "MEMORY_BANK", "importance": importance}),
            )
            .await,
        );
    }
    let r = app.domain.memory.run_maintenance(Utc::now()).await.unwrap();
    assert_eq!(r.capped, 2);
    let statuses: Vec<String> =
        futures_util::future::join_all(ids.iter().map(|id| get(&app, &t, id)))
            .await
            .iter()
            .map(|m| m["status"].as_str().unwrap().to_owned())
            .collect();
    // The two least important are archived.
    assert_eq!(
        statuses,
        vec!["ACTIVE", "ARCHIVED", "ACTIVE", "ARCHIVED", "ACTIVE"]
    );
    assert_eq!(
        app.domain
            .memory
            .run_maintenance(Utc::now())
            .await
            .unwrap()
            .capped,
        0
    );
}

/// Deleting moves a memory to the bin (out of search and default lists,
/// listed as `DELETED`, restorable) until maintenance purges it 30 days
/// later; forgetting a subject removes its memories and the entity at
/// once, for tenant admins only, audited.
async fn deleted_memories_wait_in_the_bin_then_go_and_a_subject_is_forgotten(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let ann = entity(&app, &t, "person", "Ann").await;
    let cara = entity(&app, &t, "person", "Cara").await;
    let about_ann = remember_id(
        &app,
        &t,
        json!({"content": "Ann likes green tea", "subjectId": ann}),
    )
    .await;
    let truck = remember_id(&app, &t, json!({"content": "The red truck needs brakes"})).await;
    let met = remember_id(
        &app,
        &t,
        json!({"content": "Cara met Ann at the depot", "subjectId": cara, "mentionIds": [ann]}),
    )
    .await;
    let mutate = |name: &'static str, id: String| {
        let (app, t) = (&app, t.clone());
        async move {
            app.graphql(
                Some(&t),
                &format!("mutation($id: ID!) {{ {name}(input: {{id: $id}}) {{ memory {{ id status }} }} }}"),
                json!({"id": id}),
            )
            .await
        }
    };
    let listed = |status: &'static str| {
        let (app, t) = (&app, t.clone());
        async move {
            app.graphql(
                Some(&t),
                &format!(
                    "{{ memories(filter: {{status: {status}}}) {{ edges {{ node {{ id }} }} }} }}"
                ),
                json!({}),
            )
            .await
            .data()["memories"]["edges"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["node"]["id"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };

    let deleted = mutate("deleteMemory", truck.clone()).await;
    assert_eq!(
        deleted.data()["deleteMemory"]["memory"]["status"],
        "DELETED"
    );
    let found = hit_ids(&search(&app, &t, json!({"q": "red truck brakes"})).await);
    assert!(!found.contains(&truck), "{found:?}");
    assert_eq!(listed("DELETED").await, std::slice::from_ref(&truck));
    assert!(!listed("ACTIVE").await.contains(&truck));
    let restored = mutate("restoreMemory", truck.clone()).await;
    assert_eq!(
        restored.data()["restoreMemory"]["memory"]["status"],
        "ACTIVE"
    );
    let found = hit_ids(&search(&app, &t, json!({"q": "red truck brakes"})).await);
    assert_eq!(found.first(), Some(&truck), "{found:?}");
    // Only a deleted memory can be restored.
    assert_eq!(
        mutate("restoreMemory", truck.clone()).await.error_code(),
        "BAD_USER_INPUT"
    );

    // In the bin past its 30 days, maintenance purges it for good.
    mutate("deleteMemory", truck.clone()).await.data();
    let soon = app
        .domain
        .memory
        .run_maintenance(Utc::now() + Duration::days(29))
        .await
        .unwrap();
    assert_eq!(soon.purged, 0);
    assert_eq!(get(&app, &t, &truck).await["status"], "DELETED");
    let later = app
        .domain
        .memory
        .run_maintenance(Utc::now() + Duration::days(31))
        .await
        .unwrap();
    assert_eq!(later.purged, 1);
    let gone = app
        .graphql(
            Some(&t),
            "query($id: ID!) { memory(id: $id) { id } }",
            json!({"id": truck}),
        )
        .await;
    assert_eq!(gone.error_code(), "NOT_FOUND");

    // Forgetting Ann: members may not; an admin removes her memories and
    // her entity (Cara's memory stays, without the mention).
    let forget = "mutation($id: ID!) { forgetSubject(input: {entityId: $id}) { memoriesRemoved entityRemoved } }";
    let refused = app.graphql(Some(&t), forget, json!({"id": ann})).await;
    assert_eq!(refused.error_code(), "FORBIDDEN");
    let admin = app.admin_token("acme");
    let forgotten = app.graphql(Some(&admin), forget, json!({"id": ann})).await;
    assert_eq!(
        forgotten.data()["forgetSubject"],
        json!({"memoriesRemoved": 1, "entityRemoved": true})
    );
    let gone = app
        .graphql(
            Some(&t),
            "query($id: ID!) { memory(id: $id) { id } }",
            json!({"id": about_ann}),
        )
        .await;
    assert_eq!(gone.error_code(), "NOT_FOUND");
    let kept = app
        .graphql(
            Some(&t),
            "query($id: ID!) { memory(id: $id) { content mentions { id } } }",
            json!({"id": met}),
        )
        .await;
    assert_eq!(
        kept.data()["memory"]["content"],
        "Cara met Ann at the depot"
    );
    assert_eq!(kept.data()["memory"]["mentions"], json!([]));
    let again = app.graphql(Some(&admin), forget, json!({"id": ann})).await;
    assert_eq!(again.error_code(), "NOT_FOUND");
    let audit = app
        .graphql(
            Some(&admin),
            "{ auditLog(filter: {actionPrefix: \"memory.forget\"}) { edges { node { target data } } } }",
            json!({}),
        )
        .await;
    let rows = audit.data()["auditLog"]["edges"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["node"]["data"]["memories"], 1);
}
