//! Schedules on the wire: a tenant's plans started on a cron expression in
//! a time zone (tenant admins create, pause, resume and delete them; each
//! change is audited). See `brainstem_domain::schedules`.

use async_graphql::{Context, InputObject, Json, Object, SimpleObject};
use brainstem_domain::schedules::{self, NewSchedule};
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{
    context::{domain, principal},
    ids::{NodeType, encode},
};
use crate::error::ResultExt;

/// A plan started on a schedule.
pub struct Schedule(schedules::Schedule);

#[Object]
impl Schedule {
    async fn name(&self) -> &str {
        &self.0.name
    }

    /// The plan each run starts.
    async fn plan_key(&self) -> &str {
        &self.0.plan_key
    }

    /// Five fields (minute hour day-of-month month day-of-week), or six
    /// with seconds first.
    async fn cron(&self) -> &str {
        &self.0.cron
    }

    /// The IANA zone the cron is read in.
    async fn time_zone(&self) -> &str {
        &self.0.time_zone
    }

    async fn input(&self) -> &str {
        &self.0.input
    }

    async fn payload(&self) -> Json<Value> {
        Json(self.0.payload.clone())
    }

    async fn paused(&self) -> bool {
        self.0.paused
    }

    /// When the next run is due (`null` while paused).
    async fn next_run_at(&self) -> Option<DateTime<Utc>> {
        self.0.next_run_at
    }

    /// The next due times, from now (none while paused).
    async fn upcoming(
        &self,
        #[graphql(default = 5, validator(minimum = 1, maximum = 20))] count: usize,
    ) -> Vec<DateTime<Utc>> {
        self.0.upcoming(Utc::now(), count)
    }

    /// The due time of the last run started.
    async fn last_run_at(&self) -> Option<DateTime<Utc>> {
        self.0.last_run_at
    }

    /// The task the last run started.
    async fn last_task_id(&self) -> Option<async_graphql::ID> {
        self.0.last_task.map(|t| encode(NodeType::Task, t.uuid()))
    }

    async fn created_by(&self) -> &str {
        &self.0.created_by
    }
}

#[derive(Default)]
pub struct ScheduleQuery;

#[Object]
impl ScheduleQuery {
    /// The tenant's schedules, by name (tenant admins).
    async fn schedules(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<Schedule>> {
        let list = domain(ctx).schedules.list(principal(ctx)?).await.gql()?;
        Ok(list.into_iter().map(Schedule).collect())
    }
}

#[derive(InputObject)]
pub struct CreateScheduleInput {
    /// Unique in the tenant.
    pub name: String,
    pub plan_key: String,
    /// e.g. `0 9 * * MON-FRI` (nine on weekdays), `*/15 * * * *`.
    pub cron: String,
    #[graphql(default_with = "\"UTC\".to_owned()")]
    pub time_zone: String,
    #[graphql(default)]
    pub input: String,
    pub payload: Option<Json<Value>>,
}

#[derive(InputObject)]
pub struct ScheduleNameInput {
    pub name: String,
}

#[derive(SimpleObject)]
pub struct SchedulePayload {
    pub schedule: Schedule,
}

#[derive(SimpleObject)]
pub struct DeleteSchedulePayload {
    /// Whether there was a schedule of that name.
    pub deleted: bool,
}

#[derive(Default)]
pub struct ScheduleMutation;

#[Object]
impl ScheduleMutation {
    /// Start `planKey` whenever `cron` comes due in `timeZone` (tenant
    /// admins). Audited.
    async fn create_schedule(
        &self,
        ctx: &Context<'_>,
        input: CreateScheduleInput,
    ) -> async_graphql::Result<SchedulePayload> {
        let created = domain(ctx)
            .schedules
            .create(
                principal(ctx)?,
                NewSchedule {
                    name: input.name,
                    plan_key: input.plan_key,
                    cron: input.cron,
                    time_zone: input.time_zone,
                    input: input.input,
                    payload: input.payload.map_or(Value::Null, |p| p.0),
                },
                Utc::now(),
            )
            .await
            .gql()?;
        Ok(SchedulePayload {
            schedule: Schedule(created),
        })
    }

    /// Stop starting runs until resumed (tenant admins). Audited.
    async fn pause_schedule(
        &self,
        ctx: &Context<'_>,
        input: ScheduleNameInput,
    ) -> async_graphql::Result<SchedulePayload> {
        let paused = domain(ctx)
            .schedules
            .set_paused(principal(ctx)?, &input.name, true, Utc::now())
            .await
            .gql()?;
        Ok(SchedulePayload {
            schedule: Schedule(paused),
        })
    }

    /// Start runs again, from the next due time after now (tenant admins).
    /// Audited.
    async fn resume_schedule(
        &self,
        ctx: &Context<'_>,
        input: ScheduleNameInput,
    ) -> async_graphql::Result<SchedulePayload> {
        let resumed = domain(ctx)
            .schedules
            .set_paused(principal(ctx)?, &input.name, false, Utc::now())
            .await
            .gql()?;
        Ok(SchedulePayload {
            schedule: Schedule(resumed),
        })
    }

    /// Delete a schedule (tenant admins). Audited.
    async fn delete_schedule(
        &self,
        ctx: &Context<'_>,
        input: ScheduleNameInput,
    ) -> async_graphql::Result<DeleteSchedulePayload> {
        let deleted = domain(ctx)
            .schedules
            .delete(principal(ctx)?, &input.name)
            .await
            .gql()?;
        Ok(DeleteSchedulePayload { deleted })
    }
}
