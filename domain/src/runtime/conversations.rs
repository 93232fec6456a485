//! Conversations: a tenant's threads of tasks. A conversation belongs to
//! the subject (the signed-in user or API key) that started it; a task
//! started with its id is its next turn, and an agent step of that task
//! sees the earlier turns (each task's input and its result's answer).
//!
//! Invariants:
//! - Every read and write is scoped to the caller's tenant, and only the
//!   conversation's own subject reads it or adds to it: another subject,
//!   like another tenant, gets `NOT_FOUND`.
//! - A turn is appended when its task is stored (`tasks.conversation_id`),
//!   and the conversation's `updated_at` moves in the same transaction.
//! - A conversation's `multitask` setting says what a turn sent while
//!   another is unfinished does (double texting; see
//!   `runtime::tasks::turns`).

use std::{collections::HashMap, sync::Arc};

use brainstem_entity::{ConversationId, TaskId, TenantOwned, TenantScope, conversation};
use chrono::{DateTime, Utc};
use futures_util::Stream;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseConnection, QueryFilter,
    sea_query::Expr,
};
use tokio::sync::{broadcast, mpsc};
use uuid::Uuid;

use crate::{
    Error, Result,
    kernel::{
        page::{self, Page, PageRequest},
        principal::Principal,
        row_security,
    },
    runtime::{
        events::EventBus,
        tasks::{Multitask, TaskEvent, Tasks},
    },
};

/// The longest title a conversation takes, in characters.
pub const MAX_TITLE: usize = 200;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conversation {
    pub id: ConversationId,
    pub scope: TenantScope,
    /// Who started it and may add to it.
    pub subject: String,
    pub title: String,
    /// What a turn sent while another is unfinished does, unless
    /// `startTask` says (see [`crate::runtime::tasks::Multitask`]).
    pub multitask: Multitask,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<conversation::Model> for Conversation {
    type Error = Error;

    fn try_from(m: conversation::Model) -> Result<Self> {
        Ok(Self {
            id: m.id.into(),
            scope: TenantScope::new(m.tenant_id.into()),
            subject: m.subject,
            title: m.title,
            multitask: m.multitask.parse()?,
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }
}

#[derive(Clone)]
pub struct Conversations {
    db: DatabaseConnection,
}

/// The caller's tenant and who it is, for a conversation's reads.
fn caller(principal: &Principal, scope_needed: &str) -> Result<(TenantScope, String)> {
    let scope = principal.require_scope(scope_needed)?;
    Ok((scope, principal.actor.to_string()))
}

impl Conversations {
    pub fn new(db: DatabaseConnection) -> Self {
        Self { db }
    }

    /// Start a conversation of the caller's, with its double-texting
    /// strategy (default `ENQUEUE`).
    pub async fn create(
        &self,
        principal: &Principal,
        title: &str,
        multitask: Option<Multitask>,
    ) -> Result<Conversation> {
        let (scope, subject) = caller(principal, "tasks:write")?;
        let title = title.trim();
        if title.chars().count() > MAX_TITLE {
            return Err(Error::validation(format!(
                "a title has at most {MAX_TITLE} characters"
            )));
        }
        let now = Utc::now();
        let row = conversation::ActiveModel {
            id: Set(Uuid::now_v7()),
            tenant_id: Set(scope.tenant_id().uuid()),
            subject: Set(subject),
            title: Set(title.to_owned()),
            multitask: Set(multitask.unwrap_or_default().as_str().to_owned()),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&self.db)
        .await?;
        row.try_into()
    }

    /// Change the double-texting strategy of one of the caller's
    /// conversations (for the turns started from now on).
    pub async fn set_multitask(
        &self,
        principal: &Principal,
        id: ConversationId,
        multitask: Multitask,
    ) -> Result<Conversation> {
        let (scope, subject) = caller(principal, "tasks:write")?;
        self.owned(scope, &subject, id).await?;
        conversation::Entity::update_many_in(scope)
            .col_expr(
                conversation::Column::Multitask,
                Expr::value(multitask.as_str()),
            )
            .col_expr(conversation::Column::UpdatedAt, Expr::value(Utc::now()))
            .filter(conversation::Column::Id.eq(id.uuid()))
            .exec(&self.db)
            .await?;
        self.owned(scope, &subject, id).await
    }

    /// One of the caller's conversations.
    pub async fn get(&self, principal: &Principal, id: ConversationId) -> Result<Conversation> {
        let (scope, subject) = caller(principal, "tasks:read")?;
        self.owned(scope, &subject, id).await
    }

    /// The conversation `id` of `subject` in `scope`; `NOT_FOUND` for
    /// anyone else's.
    pub async fn owned(
        &self,
        scope: TenantScope,
        subject: &str,
        id: ConversationId,
    ) -> Result<Conversation> {
        conversation::Entity::find_by_id_in(scope, id.uuid())
            .one(&self.db)
            .await?
            .filter(|c| c.subject == subject)
            .ok_or_else(|| Error::not_found(format!("conversation {id}")))?
            .try_into()
    }

    /// The caller's conversations, in the request's order.
    pub async fn list(
        &self,
        principal: &Principal,
        request: PageRequest,
    ) -> Result<Page<Conversation>> {
        let (scope, subject) = caller(principal, "tasks:read")?;
        let select =
            conversation::Entity::find_in(scope).filter(conversation::Column::Subject.eq(subject));
        let page = page::fetch(&self.db, select, conversation::Column::Id, request).await?;
        page.try_map(Conversation::try_from)
    }
}

/// The live events of every turn of `conversation` (checked to be the
/// caller's before this is called), including turns started after the
/// subscription began. Live only: replay a turn's stored events with its
/// own `taskEvents(after:)`.
pub fn conversation_events(
    tasks: Tasks,
    bus: Arc<EventBus>,
    scope: TenantScope,
    conversation: ConversationId,
) -> impl Stream<Item = Arc<TaskEvent>> + Send + 'static {
    let mut live = bus.subscribe();
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(async move {
        // Which of the tenant's tasks are turns of it, as seen so far.
        let mut turns: HashMap<TaskId, bool> = HashMap::new();
        loop {
            match live.recv().await {
                Ok(event) if event.tenant == scope.tenant_id() => {
                    let is_turn = match turns.get(&event.task_id) {
                        Some(known) => *known,
                        None => {
                            let task = tasks.get(scope, event.task_id);
                            let found = row_security::as_tenant(scope.tenant_id(), task)
                                .await
                                .is_ok_and(|t| t.conversation == Some(conversation));
                            turns.insert(event.task_id, found);
                            found
                        }
                    };
                    if is_turn && tx.send(event).await.is_err() {
                        return;
                    }
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) })
}
