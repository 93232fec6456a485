//! Schedules: a plan started on a cron expression in a time zone, once per
//! due time however many replicas look, paused, resumed and deleted by
//! tenant admins.

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};

use crate::{helpers::TestApp, on_both_backends};

on_both_backends!(
    a_schedule_runs_once_per_due_time_whatever_the_replicas,
    schedules_are_checked_paused_resumed_and_kept_per_tenant,
);

const FIELDS: &str =
    "name planKey cron timeZone paused nextRunAt upcoming(count: 3) lastRunAt lastTaskId createdBy";

async fn create(app: &TestApp, token: &str, input: Value) -> crate::helpers::Gql {
    app.graphql(
        Some(token),
        &format!("mutation($input: CreateScheduleInput!) {{ createSchedule(input: $input) {{ schedule {{ {FIELDS} }} }} }}"),
        json!({"input": input}),
    )
    .await
}

async fn schedules(app: &TestApp, tenant: &str) -> Vec<Value> {
    app.graphql(
        Some(&app.admin_token(tenant)),
        &format!("{{ schedules {{ {FIELDS} }} }}"),
        json!({}),
    )
    .await
    .data()["schedules"]
        .as_array()
        .unwrap()
        .clone()
}

async fn tasks(app: &TestApp, tenant: &str) -> Vec<Value> {
    app.graphql(
        Some(&app.admin_token(tenant)),
        "{ tasks(first: 20) { edges { node { id channel status createdBy plan { key } } } } }",
        json!({}),
    )
    .await
    .data()["tasks"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"].clone())
        .collect()
}

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str().unwrap().parse().unwrap()
}

async fn a_schedule_runs_once_per_due_time_whatever_the_replicas(app: TestApp) {
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({"key": "report", "intent": "t.report", "steps": [
            {"id": "run", "tool": "set_state", "args": {"ran": true}}
        ]}),
    )
    .await
    .data();
    let created = create(
        &app,
        &app.admin_token("acme"),
        json!({"name": "every-five", "planKey": "report", "cron": "*/5 * * * *"}),
    )
    .await;
    let schedule = created.data()["createSchedule"]["schedule"].clone();
    assert_eq!(schedule["timeZone"], "UTC");
    let due = time(&schedule["nextRunAt"]);
    assert_eq!(due.timestamp() % 300, 0, "on a five-minute boundary");
    assert!(due > Utc::now() - Duration::seconds(1) && due <= Utc::now() + Duration::minutes(5));
    let upcoming: Vec<DateTime<Utc>> = schedule["upcoming"]
        .as_array()
        .unwrap()
        .iter()
        .map(time)
        .collect();
    assert_eq!(
        upcoming,
        [due, due + Duration::minutes(5), due + Duration::minutes(10)]
    );

    // Nothing is due before its time.
    assert_eq!(
        app.domain
            .schedules
            .run_due(due - Duration::seconds(1))
            .await
            .unwrap(),
        0
    );

    // Two replicas (two services, each with its own pool, on one database)
    // look at the same moment, past the due time: one run.
    let other = brainstem::startup::open_domain(
        &app.config,
        brainstem::startup::registry(Vec::new()).unwrap(),
    )
    .await
    .unwrap();
    let at = due + Duration::seconds(1);
    let (a, b) = tokio::join!(
        app.domain.schedules.run_due(at),
        other.schedules.run_due(at)
    );
    assert_eq!(a.unwrap() + b.unwrap(), 1);
    assert_eq!(app.domain.schedules.run_due(at).await.unwrap(), 0);
    let started = tasks(&app, "acme").await;
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0]["channel"], "SYSTEM");
    assert_eq!(started[0]["createdBy"], "schedule:every-five");
    let after = &schedules(&app, "acme").await[0];
    assert_eq!(time(&after["lastRunAt"]), due);
    assert_eq!(after["lastTaskId"], started[0]["id"]);
    assert_eq!(time(&after["nextRunAt"]), due + Duration::minutes(5));

    // Every replica down for an hour: one run for the missed due times,
    // then the cron again from then.
    let late = due + Duration::minutes(61);
    assert_eq!(other.schedules.run_due(late).await.unwrap(), 1);
    assert_eq!(app.domain.schedules.run_due(late).await.unwrap(), 0);
    assert_eq!(tasks(&app, "acme").await.len(), 2);
    let after = &schedules(&app, "acme").await[0];
    assert_eq!(time(&after["nextRunAt"]), due + Duration::minutes(65));

    app.run_tasks().await;
    let done = tasks(&app, "acme").await;
    assert!(
        done.iter()
            .all(|t| t["status"] == "COMPLETED" && t["plan"]["key"] == "report"),
        "{done:?}"
    );
}

async fn schedules_are_checked_paused_resumed_and_kept_per_tenant(app: TestApp) {
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    let admin = app.admin_token("acme");
    for (input, code, words) in [
        (
            json!({"name": "x", "planKey": "p", "cron": "every day"}),
            "BAD_USER_INPUT",
            "cron `every day`",
        ),
        (
            json!({"name": "x", "planKey": "p", "cron": "0 9 * * *", "timeZone": "Mars/Olympus"}),
            "BAD_USER_INPUT",
            "IANA zone",
        ),
        (
            json!({"name": "", "planKey": "p", "cron": "0 9 * * *"}),
            "BAD_USER_INPUT",
            "name",
        ),
    ] {
        let refused = create(&app, &admin, input).await;
        assert_eq!(refused.error_code(), code);
        assert!(
            refused.error_message().contains(words),
            "{}",
            refused.error_message()
        );
    }
    let member = app.token(Some("acme"), &[brainstem_domain::Role::Member]);
    let refused = create(
        &app,
        &member,
        json!({"name": "m", "planKey": "p", "cron": "0 9 * * *"}),
    )
    .await;
    assert_eq!(refused.error_code(), "FORBIDDEN");

    // Nine in the morning in Paris: 08:00 UTC in winter, 07:00 in summer.
    let created = create(
        &app,
        &admin,
        json!({"name": "morning", "planKey": "p", "cron": "0 9 * * *", "timeZone": "Europe/Paris"}),
    )
    .await;
    let next = time(&created.data()["createSchedule"]["schedule"]["nextRunAt"]);
    use chrono::Timelike;
    assert!(matches!(next.hour(), 7 | 8) && next.minute() == 0, "{next}");
    let again = create(
        &app,
        &admin,
        json!({"name": "morning", "planKey": "p", "cron": "0 10 * * *"}),
    )
    .await;
    assert_eq!(again.error_code(), "CONFLICT");

    // Paused: no next run, nothing starts; resumed: the next due time.
    let paused = app
        .graphql(Some(&admin), "mutation { pauseSchedule(input: {name: \"morning\"}) { schedule { paused nextRunAt upcoming } } }", json!({}))
        .await;
    let paused = &paused.data()["pauseSchedule"]["schedule"];
    assert_eq!(
        (paused["paused"].clone(), paused["nextRunAt"].clone()),
        (json!(true), Value::Null)
    );
    assert_eq!(paused["upcoming"], json!([]));
    assert_eq!(
        app.domain
            .schedules
            .run_due(Utc::now() + Duration::days(3))
            .await
            .unwrap(),
        0
    );
    let resumed = app
        .graphql(Some(&admin), "mutation { resumeSchedule(input: {name: \"morning\"}) { schedule { paused nextRunAt } } }", json!({}))
        .await;
    assert_eq!(
        resumed.data()["resumeSchedule"]["schedule"]["paused"],
        false
    );
    assert_eq!(
        time(&resumed.data()["resumeSchedule"]["schedule"]["nextRunAt"]),
        next
    );

    // Another tenant sees none and deletes none; the owner deletes it.
    assert!(schedules(&app, "globex").await.is_empty());
    let delete = "mutation { deleteSchedule(input: {name: \"morning\"}) { deleted } }";
    let theirs = app
        .graphql(Some(&app.admin_token("globex")), delete, json!({}))
        .await;
    assert_eq!(theirs.data()["deleteSchedule"]["deleted"], false);
    let ours = app.graphql(Some(&admin), delete, json!({})).await;
    assert_eq!(ours.data()["deleteSchedule"]["deleted"], true);
    assert!(schedules(&app, "acme").await.is_empty());
    let actions = app.audit_actions("acme", "schedule.").await;
    assert_eq!(
        actions,
        [
            "schedule.create",
            "schedule.pause",
            "schedule.resume",
            "schedule.delete"
        ]
    );
}
