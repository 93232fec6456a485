//! Memory import jobs: a JSON Lines file of memories (one memory per line,
//! [`import_line`](super::import_line)) stored once and imported in the
//! background ([`import_job_run`](super::import_job_run)), with its
//! progress kept in the database.
//!
//! Invariants:
//! - **Refused before any work.** A file over [`ImportFileLimits`] (bytes
//!   or non-blank lines), or with no line at all, is a validation error
//!   and nothing is stored.
//! - **Stored whole or not at all.** The job row and every non-blank line
//!   (numbered as in the file, from 1) are written in one transaction. A
//!   line that is not UTF-8 is stored `FAILED` there and then; every other
//!   line is pending until the runner handles it.
//! - **Counters never drift.** `created`, `merged`, `skipped` and `failed`
//!   on the job row change only in the transaction that records the
//!   outcomes of the lines they count; `processed` is their sum and never
//!   exceeds `total`.
//! - **Tenant-scoped.** Every read and write takes the caller's scope; a
//!   job of another tenant is not found.

use std::time::Duration;

use brainstem_entity::{TenantId, TenantOwned, TenantScope, memory_import_job, memory_import_line};
use chrono::{DateTime, Utc};
use futures_util::{Stream, stream};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect,
};
use tokio::sync::broadcast;
use uuid::Uuid;

use super::Memories;
use crate::{
    Error, Result,
    kernel::{db::BeginWrite, job_lease},
};

/// The largest file an import job takes, by default: 64 MiB.
pub const DEFAULT_IMPORT_MAX_BYTES: usize = 64 * 1024 * 1024;
/// The most non-blank lines an import job takes, by default.
pub const DEFAULT_IMPORT_MAX_LINES: usize = 1_000_000;
/// The most failed lines one read of a job's errors returns.
pub const MAX_IMPORT_ERRORS_PAGE: u64 = 100;
/// How often a watcher of a job reads it again when no change was
/// announced in its own process (a runner in another process announces
/// nothing here).
pub const IMPORT_JOB_WATCH_EVERY: Duration = Duration::from_millis(250);
/// Lines inserted per statement when a job is created (under both
/// backends' limits on bound parameters).
const INSERT_CHUNK: usize = 500;

/// How large a file an import job takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImportFileLimits {
    pub max_bytes: usize,
    pub max_lines: usize,
}

impl Default for ImportFileLimits {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_IMPORT_MAX_BYTES,
            max_lines: DEFAULT_IMPORT_MAX_LINES,
        }
    }
}

/// Where an import job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImportJobStatus {
    /// Lines remain (or the last ones are being handled).
    Running,
    /// Every line has its outcome.
    Completed,
}

impl ImportJobStatus {
    fn parse(s: &str) -> Result<Self> {
        match s {
            job_lease::RUNNING => Ok(Self::Running),
            job_lease::COMPLETED => Ok(Self::Completed),
            other => Err(Error::internal(format!(
                "unknown memory import job status {other}"
            ))),
        }
    }
}

/// A memory import job and its progress.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportJob {
    pub id: Uuid,
    pub tenant: TenantId,
    pub file_name: Option<String>,
    pub status: ImportJobStatus,
    /// Non-blank lines in the file.
    pub total: u64,
    /// Lines handled so far: `created + merged + skipped + failed`.
    pub processed: u64,
    pub created: u64,
    pub merged: u64,
    pub skipped: u64,
    pub failed: u64,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl ImportJob {
    fn of(row: memory_import_job::Model) -> Result<Self> {
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        let (created, merged, skipped, failed) =
            (n(row.created), n(row.merged), n(row.skipped), n(row.failed));
        Ok(Self {
            id: row.id,
            tenant: row.tenant_id.into(),
            file_name: row.file_name,
            status: ImportJobStatus::parse(&row.status)?,
            total: n(row.total),
            processed: created + merged + skipped + failed,
            created,
            merged,
            skipped,
            failed,
            created_by: row.created_by,
            created_at: row.created_at,
            updated_at: row.updated_at,
            finished_at: row.finished_at,
        })
    }
}

/// A line of a job that failed, and why.
#[derive(Debug)]
pub struct ImportLineError {
    /// Its number in the file, from 1.
    pub line: u64,
    pub error: Error,
}

/// Announces, within one process, that a job's progress changed (its
/// runner recorded a batch or completed it), so that watchers read it at
/// once rather than at their next interval.
#[derive(Clone, Debug)]
pub(crate) struct ImportProgress(broadcast::Sender<Uuid>);

impl Default for ImportProgress {
    fn default() -> Self {
        Self(broadcast::channel(256).0)
    }
}

impl ImportProgress {
    pub(crate) fn announce(&self, job: Uuid) {
        // Nobody listening is fine.
        let _ = self.0.send(job);
    }
}

impl Memories {
    /// The limits this service's import jobs take files under.
    pub fn import_file_limits(&self) -> ImportFileLimits {
        self.config.import_file
    }

    /// Store a JSON Lines file as an import job of `scope`, created by
    /// `created_by`, and import it in the background (see the module
    /// header and [`Memories::run_import_job`]).
    pub async fn start_import_job(
        &self,
        scope: TenantScope,
        created_by: String,
        file_name: Option<String>,
        file: &[u8],
    ) -> Result<ImportJob> {
        let job = self
            .create_import_job(scope, created_by, file_name, file)
            .await?;
        self.spawn_import_job(scope, job.id, None);
        Ok(job)
    }

    /// Store a JSON Lines file as an import job without running it
    /// ([`Memories::start_import_job`] does both; tests drive the runner).
    pub async fn create_import_job(
        &self,
        scope: TenantScope,
        created_by: String,
        file_name: Option<String>,
        file: &[u8],
    ) -> Result<ImportJob> {
        let lines = split(file, self.config.import_file)?;
        let tenant = scope.tenant_id().uuid();
        let id = Uuid::now_v7();
        let now = Utc::now();
        let not_utf8 = lines.iter().filter(|(_, text)| text.is_err()).count();
        let txn = self.db.begin_write().await?;
        memory_import_job::ActiveModel {
            id: Set(id),
            tenant_id: Set(tenant),
            file_name: Set(file_name),
            status: Set(job_lease::RUNNING.to_owned()),
            total: Set(i64::try_from(lines.len()).map_err(Error::internal)?),
            created: Set(0),
            merged: Set(0),
            skipped: Set(0),
            failed: Set(i64::try_from(not_utf8).map_err(Error::internal)?),
            lease_owner: Set(None),
            lease_expires_at: Set(None),
            created_by: Set(created_by),
            created_at: Set(now),
            updated_at: Set(now),
            finished_at: Set(None),
        }
        .insert(&*txn)
        .await?;
        for chunk in lines.chunks(INSERT_CHUNK) {
            memory_import_line::Entity::insert_many(chunk.iter().map(|(line_no, text)| {
                let (raw, outcome, kind, message) = match text {
                    Ok(text) => ((*text).to_owned(), None, None, None),
                    Err(message) => (
                        String::new(),
                        Some(super::ImportStatus::Failed.as_str().to_owned()),
                        Some(Error::validation("").to_stored().0.to_owned()),
                        Some(message.clone()),
                    ),
                };
                memory_import_line::ActiveModel {
                    id: Set(Uuid::now_v7()),
                    tenant_id: Set(tenant),
                    job_id: Set(id),
                    line_no: Set(*line_no),
                    raw: Set(raw),
                    outcome: Set(outcome),
                    memory_id: Set(None),
                    error_kind: Set(kind),
                    error_message: Set(message),
                }
            }))
            .exec_without_returning(&*txn)
            .await?;
        }
        txn.commit().await?;
        self.import_job(scope, id).await
    }

    /// One of the scope's import jobs.
    pub async fn import_job(&self, scope: TenantScope, id: Uuid) -> Result<ImportJob> {
        let row = memory_import_job::Entity::find_by_id_in(scope, id)
            .one(&self.db)
            .await?
            .ok_or_else(|| Error::not_found(format!("memory import job {id}")))?;
        ImportJob::of(row)
    }

    /// The scope's import jobs, newest first, at most `first` (1 to 100).
    pub async fn import_jobs(&self, scope: TenantScope, first: u64) -> Result<Vec<ImportJob>> {
        if !(1..=100).contains(&first) {
            return Err(Error::validation("first must be between 1 and 100"));
        }
        memory_import_job::Entity::find_in(scope)
            .order_by_desc(memory_import_job::Column::CreatedAt)
            .order_by_desc(memory_import_job::Column::Id)
            .limit(first)
            .all(&self.db)
            .await?
            .into_iter()
            .map(ImportJob::of)
            .collect()
    }

    /// The first `first` failed lines of one of the scope's jobs (1 to
    /// [`MAX_IMPORT_ERRORS_PAGE`]), in line order.
    pub async fn import_job_errors(
        &self,
        scope: TenantScope,
        id: Uuid,
        first: u64,
    ) -> Result<Vec<ImportLineError>> {
        use memory_import_line::Column as L;
        if !(1..=MAX_IMPORT_ERRORS_PAGE).contains(&first) {
            return Err(Error::validation(format!(
                "first must be between 1 and {MAX_IMPORT_ERRORS_PAGE}"
            )));
        }
        let rows: Vec<(i64, Option<String>, Option<String>)> =
            memory_import_line::Entity::find_in(scope)
                .filter(L::JobId.eq(id))
                .filter(L::Outcome.eq(super::ImportStatus::Failed.as_str()))
                .order_by_asc(L::LineNo)
                .limit(first)
                .select_only()
                .column(L::LineNo)
                .column(L::ErrorKind)
                .column(L::ErrorMessage)
                .into_tuple()
                .all(&self.db)
                .await?;
        Ok(rows
            .into_iter()
            .map(|(line, kind, message)| ImportLineError {
                line: u64::try_from(line).unwrap_or(0),
                error: Error::stored(
                    kind.as_deref().unwrap_or_default(),
                    message.unwrap_or_default(),
                ),
            })
            .collect())
    }

    /// One of the scope's jobs as it progresses: as it is now, then each
    /// time its progress changes, ending after it completes. A change is
    /// seen at once when this process's runner announces it, else at the
    /// next read, every [`IMPORT_JOB_WATCH_EVERY`] (the runner may be
    /// another process). A job of another tenant is not found, before
    /// anything streams.
    pub async fn watch_import_job(
        &self,
        scope: TenantScope,
        id: Uuid,
    ) -> Result<impl Stream<Item = Result<ImportJob>> + Send + use<>> {
        let first = self.import_job(scope, id).await?;
        let changes = self.import_progress.0.subscribe();
        let memories = self.clone();
        struct Watch {
            memories: Memories,
            changes: broadcast::Receiver<Uuid>,
            last: Option<ImportJob>,
            pending: Option<ImportJob>,
            done: bool,
        }
        let state = Watch {
            memories,
            changes,
            last: None,
            pending: Some(first),
            done: false,
        };
        Ok(stream::unfold(state, move |mut w| async move {
            if w.done {
                return None;
            }
            loop {
                let job = match w.pending.take() {
                    Some(job) => job,
                    None => {
                        wait_for_change(&mut w.changes, id).await;
                        match w.memories.import_job(scope, id).await {
                            Ok(job) => job,
                            Err(err) => {
                                w.done = true;
                                return Some((Err(err), w));
                            }
                        }
                    }
                };
                let changed = w.last.as_ref().is_none_or(|last| {
                    (last.status, last.processed) != (job.status, job.processed)
                });
                if changed {
                    w.done = job.status == ImportJobStatus::Completed;
                    w.last = Some(job.clone());
                    return Some((Ok(job), w));
                }
            }
        }))
    }
}

/// Until job `id`'s change is announced in this process, or the interval
/// has passed.
async fn wait_for_change(changes: &mut broadcast::Receiver<Uuid>, id: Uuid) {
    let _ = tokio::time::timeout(IMPORT_JOB_WATCH_EVERY, async {
        loop {
            match changes.recv().await {
                Ok(job) if job == id => return,
                Ok(_) => {}
                // Missed announcements may include this job's.
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => {
                    std::future::pending::<()>().await;
                }
            }
        }
    })
    .await;
}

/// A line of a file: its number from 1, and its text, or why it cannot be
/// read (not UTF-8).
type Line<'a> = (i64, std::result::Result<&'a str, String>);

/// The non-blank lines of a file (`\n` or `\r\n` ends a line), numbered as
/// in the file; refused whole when over `limits` or empty.
fn split(file: &[u8], limits: ImportFileLimits) -> Result<Vec<Line<'_>>> {
    if file.len() > limits.max_bytes {
        return Err(Error::validation(format!(
            "the file is {} bytes, over the limit of {} bytes",
            file.len(),
            limits.max_bytes
        )));
    }
    let mut lines = Vec::new();
    for (i, raw) in file.split(|b| *b == b'\n').enumerate() {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if lines.len() == limits.max_lines {
            return Err(Error::validation(format!(
                "the file has more than {} lines with content",
                limits.max_lines
            )));
        }
        let line_no = i64::try_from(i + 1).map_err(Error::internal)?;
        let text =
            std::str::from_utf8(raw).map_err(|_| format!("line {line_no} is not UTF-8 text"));
        lines.push((line_no, text));
    }
    if lines.is_empty() {
        return Err(Error::validation("the file has no line with content"));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_bytes: usize, max_lines: usize) -> ImportFileLimits {
        ImportFileLimits {
            max_bytes,
            max_lines,
        }
    }

    #[test]
    fn lines_keep_their_numbers_in_the_file_and_blank_ones_are_left_out() {
        let file = b"{\"a\":1}\r\n\n  \n{\"b\":2}\n\xff\xfe\n{\"c\":3}";
        let lines = split(file, limits(1000, 10)).unwrap();
        let numbers: Vec<i64> = lines.iter().map(|(n, _)| *n).collect();
        assert_eq!(numbers, [1, 4, 5, 6]);
        assert_eq!(lines[0].1, Ok("{\"a\":1}"));
        assert_eq!(lines[2].1, Err("line 5 is not UTF-8 text".to_owned()));
        assert_eq!(lines[3].1, Ok("{\"c\":3}"));
    }

    #[test]
    fn a_file_over_a_limit_or_without_lines_is_refused() {
        let file = b"{}\n{}\n{}\n";
        assert!(split(file, limits(9, 10)).is_ok());
        let bytes = split(file, limits(8, 10)).unwrap_err();
        assert!(
            bytes.to_string().contains("over the limit of 8 bytes"),
            "{bytes}"
        );
        assert!(split(file, limits(100, 3)).is_ok());
        let lines = split(file, limits(100, 2)).unwrap_err();
        assert!(lines.to_string().contains("more than 2 lines"), "{lines}");
        assert!(split(b"\n \r\n", limits(100, 2)).is_err());
    }
}
