//! The tenant's reviews as one list, of every task: a dashboard's queue of
//! decisions (`reviews(filter: {statuses: [PENDING]}, orderBy:
//! CREATED_AT_DESC)`), beside each task's own `Task.reviews`. A review
//! names its task (`taskId`, `task`), so the queue links to what waits.

use async_graphql::{Context, InputObject, Object, connection::Connection};
use brainstem_domain::tasks;

use super::{Review, ReviewStatus, task_scope};
use crate::{
    error::ResultExt,
    schema::{
        context::domain,
        page::{ListOrder, connection, ordered_page_request},
    },
};

/// Which reviews `reviews` lists.
#[derive(InputObject)]
pub struct ReviewFilter {
    /// Any of these statuses.
    pub statuses: Option<Vec<ReviewStatus>>,
}

#[derive(Default)]
pub struct ReviewQuery;

#[Object]
impl ReviewQuery {
    /// The caller's tenant's reviews, of every task, oldest first unless
    /// `orderBy`.
    #[allow(clippy::too_many_arguments)]
    async fn reviews(
        &self,
        ctx: &Context<'_>,
        filter: Option<ReviewFilter>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
        order_by: Option<ListOrder>,
    ) -> async_graphql::Result<Connection<String, Review>> {
        let request = ordered_page_request(first, after, last, before, order_by)?;
        let scope = task_scope(ctx)?;
        let statuses: Vec<tasks::ReviewStatus> = filter
            .and_then(|f| f.statuses)
            .unwrap_or_default()
            .into_iter()
            .map(Into::into)
            .collect();
        let page = domain(ctx)
            .tasks
            .review_page(scope, &statuses, request)
            .await
            .gql()?;
        Ok(connection(page, |r| r.id, Review))
    }
}
