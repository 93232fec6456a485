//! The lease holder's write in one statement: on PostgreSQL, a change of a
//! leased task, its events, the rows that go with them and the
//! notification announcing the events are one statement, which needs no
//! transaction of its own (a statement is atomic). One round trip, where
//! `BEGIN`, the task's `UPDATE`, the events' insert and `COMMIT` take four;
//! a step of a busy executor pays one database wait instead of four.
//!
//! It can be one statement because the lease holder knows the task's
//! event sequence: while a lease is held only its holder appends events
//! (see "Who may write" in [`super`]), so the next events are
//! `last_seq + 1`, … of the task it holds, and their notification and the
//! webhook deliveries that report them can be written before the update
//! runs. The update is guarded by the lease *and* by that `last_seq`, and
//! every insert and the notification read the update's row, so when the
//! guard fails nothing is written and nobody is told.
//!
//! Invariants:
//! - All or nothing: the update, the events, the rows riding with them and
//!   the notification are one statement.
//! - The events are numbered exactly as [`super::mutate_with`] numbers
//!   them (`last_seq + 1`, …), and only after the guard has held.
//! - A change that cannot be one statement (SQLite; events whose
//!   notification does not fit one payload or must be sent apart,
//!   [`Announce::Apart`]; a riding row that is not a plain insert) is
//!   handed back whole, for [`super::mutate_with`] in a transaction.

use sea_orm::{
    DbBackend, QueryTrait,
    sea_query::{PostgresQueryBuilder, Query},
};

use super::{
    log::{count_status, event_rows, shift_placeholders, task_update},
    *,
};

/// A leased task's change, prepared for how it can be written.
pub enum LeasedWrite {
    /// One statement, ready to run on a connection or in a transaction.
    One(OneStatement),
    /// The change as given, for [`mutate_with`] in a transaction.
    Many {
        changes: Box<TaskChanges>,
        events: Vec<NewEvent>,
        also: Vec<Statement>,
    },
}

/// The one statement of a leased change, with what it will have stored.
pub struct OneStatement {
    statement: Statement,
    stored: Vec<TaskEvent>,
    status: Option<TaskStatus>,
    now: DateTime<Utc>,
}

impl LeasedWrite {
    /// Prepare `owner`'s change of `task` (as `owner` last wrote or claimed
    /// it), with its `events` and the rows `also` (inserts built for
    /// PostgreSQL) that go with it, its events announced as `announce` says.
    pub fn prepare(
        backend: DbBackend,
        announce: Announce,
        task: &Task,
        owner: &str,
        changes: TaskChanges,
        events: Vec<NewEvent>,
        also: Vec<Statement>,
    ) -> Result<Self> {
        let many = |changes, events, also| {
            Ok(Self::Many {
                changes: Box::new(changes),
                events,
                also,
            })
        };
        if backend != DbBackend::Postgres || announce == Announce::Apart {
            return many(changes, events, also);
        }
        let now = Utc::now();
        let (models, stored) = event_rows(task, task.last_seq + 1, events.clone(), now)?;
        let payloads = crate::runtime::events::notification_payloads(backend, &stored);
        if payloads.len() > 1 {
            return many(changes, events, also);
        }
        // Deliveries to the tenant's webhooks report the task as this
        // change leaves it.
        let mut after = task.clone();
        changes.clone().apply_to(&mut after);
        after.last_seq += stored.len() as i64;
        let mut rows = Vec::with_capacity(also.len() + 2);
        if !models.is_empty() {
            let insert = task_event::Entity::insert_many(
                models
                    .into_iter()
                    .map(task_event::ActiveModel::from)
                    .collect::<Vec<_>>(),
            );
            rows.push(insert.build(backend));
        }
        rows.extend(also.iter().cloned());
        rows.extend(crate::runtime::webhooks::outbox(
            backend, &after, &stored, now,
        ));
        rows.extend(checkpoints::outbox(backend, &after, &stored, now));
        if !rows.iter().all(|s| insert_source(&s.sql).is_some()) {
            return many(changes, events, also);
        }
        let status = changes.status;
        let (update_sql, update_values) = task_update(
            task.scope(),
            task.id,
            &Guard::Lease(owner.to_owned()),
            changes,
            now,
            stored.len() as i64,
        )?
        .into_query()
        .and_where(task::Column::LastSeq.eq(task.last_seq))
        .returning(Query::returning().all())
        .build(PostgresQueryBuilder);
        let mut values: Vec<sea_orm::Value> = update_values.0;
        let mut sql = format!("WITH u AS ({update_sql})");
        for (i, row) in rows.into_iter().enumerate() {
            let Some((head, source)) = insert_source(&row.sql) else {
                continue; // every row is a plain insert (checked above)
            };
            let shifted = shift_placeholders(
                &format!("{head} SELECT * FROM ({source}) AS v WHERE EXISTS (SELECT FROM u)"),
                values.len(),
            );
            sql.push_str(&format!(", w{i} AS ({shifted})"));
            values.extend(row.values.map(|v| v.0).unwrap_or_default());
        }
        match payloads.into_iter().next() {
            Some(payload) => {
                let n = values.len();
                sql.push_str(&format!(
                    " SELECT u.*, pg_notify(${}, ${}) FROM u",
                    n + 1,
                    n + 2
                ));
                values.push(crate::runtime::events::CHANNEL.into());
                values.push(payload.into());
            }
            None => sql.push_str(" SELECT u.* FROM u"),
        }
        Ok(Self::One(OneStatement {
            statement: Statement::from_sql_and_values(backend, sql, values),
            stored,
            status,
            now,
        }))
    }
}

impl OneStatement {
    /// Run it on `db` (a pooled connection, or a transaction already
    /// open): the task as updated and the events stored, or `None` when
    /// the guard failed and nothing was written.
    pub async fn run<C: ConnectionTrait>(self, db: &C) -> Result<Option<(Task, Vec<TaskEvent>)>> {
        use sea_orm::FromQueryResult;
        // The statement's update is the scoped one of `task_update`.
        let Some(row) = db.query_one_raw(self.statement).await? else {
            return Ok(None);
        };
        let task = Task::try_from(task::Model::from_query_result(&row, "")?)?;
        if let Some(status) = self.status {
            count_status(&task, status, self.now);
        }
        Ok(Some((task, self.stored)))
    }
}

/// A plain `INSERT INTO "t" ("a", …) VALUES …` or `… SELECT …` split
/// after its column list: the head and the source of its rows. `None` for
/// anything else (a `RETURNING` or `ON CONFLICT` clause included).
fn insert_source(sql: &str) -> Option<(&str, &str)> {
    if !sql.starts_with("INSERT INTO ")
        || sql.contains(" RETURNING ")
        || sql.contains(" ON CONFLICT ")
    {
        return None;
    }
    let close = sql.find(") ")?;
    let (head, rest) = sql.split_at(close + 1);
    let source = rest.trim_start();
    (source.starts_with("VALUES ") || source.starts_with("SELECT ")).then_some((head, source))
}
