//! Memory import jobs on the wire: `startMemoryImport(file:)` uploads a
//! JSON Lines file (one `ImportMemoryItem` per line, a multipart request,
//! see `crate::upload`) that is imported in the background, and
//! `memoryImportJob`/`memoryImportJobs` (and the subscription of the same
//! name, in `schema::subscription`) follow its progress. Starting one
//! needs `memory:write`, as `importMemories` does; reading needs
//! `memory:read`. See `brainstem_domain::memory::import_job` for the
//! guarantees.

use async_graphql::{Context, Enum, ID, Object, SimpleObject, Upload};
use brainstem_domain::{
    Error,
    memory::{self as dm, MAX_IMPORT_ERRORS_PAGE},
};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{read_scope, write_scope};
use crate::{
    error::{ResultExt, code_and_message},
    schema::{
        context::{domain, principal},
        ids::{NodeType, decode_as, encode},
    },
};

/// Where a memory import job is.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryImportJobStatus {
    /// Lines remain to be imported.
    Running,
    /// Every line was created, merged, skipped or failed.
    Completed,
}

/// A line of an import file that failed, and why.
#[derive(SimpleObject)]
pub struct MemoryImportLineError {
    /// The line's number in the file, from 1.
    pub line: u64,
    /// `BAD_USER_INPUT`, `NOT_FOUND`, … as `importMemories` reports the
    /// same item.
    pub code: String,
    pub message: String,
}

/// A JSON Lines file of memories being imported, and its progress.
pub struct MemoryImportJob(pub(crate) dm::ImportJob);

#[Object]
impl MemoryImportJob {
    /// Opaque global id.
    pub async fn id(&self) -> ID {
        encode(NodeType::MemoryImportJob, self.0.id)
    }

    async fn status(&self) -> MemoryImportJobStatus {
        match self.0.status {
            dm::ImportJobStatus::Running => MemoryImportJobStatus::Running,
            dm::ImportJobStatus::Completed => MemoryImportJobStatus::Completed,
        }
    }

    /// The uploaded file's name, as the client sent it.
    async fn file_name(&self) -> Option<&str> {
        self.0.file_name.as_deref()
    }

    /// Lines with content in the file (blank lines are not counted).
    async fn total(&self) -> u64 {
        self.0.total
    }

    /// Lines handled so far: `created + merged + skipped + failed`.
    async fn processed(&self) -> u64 {
        self.0.processed
    }

    /// Lines stored as new memories.
    async fn created(&self) -> u64 {
        self.0.created
    }

    /// Lines merged into a near-duplicate, as `remember` merges.
    async fn merged(&self) -> u64 {
        self.0.merged
    }

    /// Lines whose key was imported before: nothing stored.
    async fn skipped(&self) -> u64 {
        self.0.skipped
    }

    /// Lines refused (see `errors`).
    async fn failed(&self) -> u64 {
        self.0.failed
    }

    /// The first failed lines, in line order (`first`: 1 to 100).
    async fn errors(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: i32,
    ) -> async_graphql::Result<Vec<MemoryImportLineError>> {
        if self.0.failed == 0 {
            return Ok(Vec::new());
        }
        let first = u64::try_from(first)
            .ok()
            .filter(|f| (1..=MAX_IMPORT_ERRORS_PAGE).contains(f))
            .ok_or_else(|| {
                Error::validation(format!(
                    "first must be between 1 and {MAX_IMPORT_ERRORS_PAGE}"
                ))
            })
            .gql()?;
        let errors = domain(ctx)
            .memory
            .import_job_errors(read_scope(ctx)?, self.0.id, first)
            .await
            .gql()?;
        Ok(errors
            .into_iter()
            .map(|e| {
                let (code, message) = code_and_message(&e.error);
                MemoryImportLineError {
                    line: e.line,
                    code: code.to_owned(),
                    message,
                }
            })
            .collect())
    }

    async fn created_by(&self) -> &str {
        &self.0.created_by
    }

    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }

    /// When progress was last recorded.
    async fn updated_at(&self) -> DateTime<Utc> {
        self.0.updated_at
    }

    /// When the last line was handled.
    async fn finished_at(&self) -> Option<DateTime<Utc>> {
        self.0.finished_at
    }
}

/// An import job by its global id, for `node(id:)`.
pub(crate) async fn import_job_node(
    ctx: &Context<'_>,
    id: Uuid,
) -> async_graphql::Result<MemoryImportJob> {
    let job = domain(ctx)
        .memory
        .import_job(read_scope(ctx)?, id)
        .await
        .gql()?;
    Ok(MemoryImportJob(job))
}

/// The job a global id names, for the subscription.
pub(crate) fn import_job_id(id: &ID) -> async_graphql::Result<Uuid> {
    decode_as(id, NodeType::MemoryImportJob).gql()
}

#[derive(Default)]
pub struct MemoryImportJobQuery;

#[Object]
impl MemoryImportJobQuery {
    /// One of the caller's tenant's memory import jobs; another tenant's is
    /// `NOT_FOUND`.
    async fn memory_import_job(
        &self,
        ctx: &Context<'_>,
        id: ID,
    ) -> async_graphql::Result<MemoryImportJob> {
        import_job_node(ctx, import_job_id(&id)?).await
    }

    /// The caller's tenant's memory import jobs, newest first (`first`: 1
    /// to 100).
    async fn memory_import_jobs(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: i32,
    ) -> async_graphql::Result<Vec<MemoryImportJob>> {
        let first = u64::try_from(first).unwrap_or(0);
        let jobs = domain(ctx)
            .memory
            .import_jobs(read_scope(ctx)?, first)
            .await
            .gql()?;
        Ok(jobs.into_iter().map(MemoryImportJob).collect())
    }
}

#[derive(Default)]
pub struct MemoryImportJobMutation;

#[Object]
impl MemoryImportJobMutation {
    /// Upload a JSON Lines file of memories, one `ImportMemoryItem` per
    /// line in JSON (camelCase fields), and import it in the background in
    /// batches of up to 1,000 (see README, *Importing memories*). Send it
    /// as a GraphQL multipart request with the header
    /// `Apollo-Require-Preflight: true`. A file over the server's limits
    /// (64 MiB and 1,000,000 lines by default) is refused with
    /// `BAD_USER_INPUT` before any work. A bad line is that line's failure,
    /// never the job's. Follow the job with `memoryImportJob`, as a query
    /// or a subscription.
    async fn start_memory_import(
        &self,
        ctx: &Context<'_>,
        file: Upload,
    ) -> async_graphql::Result<MemoryImportJob> {
        let scope = write_scope(ctx)?;
        let created_by = principal(ctx)?.actor.to_string();
        let upload = file
            .value(ctx)
            .map_err(|_| Error::validation("`file` must be a file sent in a multipart request"))
            .gql()?;
        let job = domain(ctx)
            .memory
            .start_import_job(
                scope,
                created_by,
                Some(upload.filename).filter(|n| !n.is_empty()),
                &upload.content,
            )
            .await
            .gql()?;
        Ok(MemoryImportJob(job))
    }
}
