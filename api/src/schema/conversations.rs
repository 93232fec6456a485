//! Conversations on the wire: a subject's threads of tasks. Start one with
//! `startConversation`, then pass its id to `startTask(conversationId:)`
//! for each turn; an agent step of a turn sees the earlier turns. Only the
//! subject that started a conversation sees it (anyone else, in this
//! tenant or another, gets `NOT_FOUND`); its turns are tasks of the tenant
//! like any other. `conversationEvents` (in the subscriptions) streams the
//! events of all its turns.

use async_graphql::{Context, ID, InputObject, Object, SimpleObject, connection::Connection};
use brainstem_domain::{ConversationId, conversations, tasks::TaskGroup};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::tasks::Multitask;
use super::{
    context::{domain, principal},
    ids::{self, NodeType},
    page::{ListOrder, connection, ordered_page_request},
    tasks::{TaskPage, group_page, read_ahead_groups, task_scope},
};
use crate::error::ResultExt;

/// A thread of tasks (its turns), owned by the subject that started it.
#[derive(Clone)]
pub struct Conversation(pub conversations::Conversation);

#[Object]
impl Conversation {
    pub async fn id(&self) -> ID {
        ids::encode(NodeType::Conversation, self.0.id.uuid())
    }
    async fn title(&self) -> &str {
        &self.0.title
    }

    /// What a turn sent while another is unfinished does, unless
    /// `startTask` names a strategy.
    async fn multitask(&self) -> Multitask {
        self.0.multitask.into()
    }
    /// Who started it (`user:<id>` or `api_key:<id>`).
    async fn subject(&self) -> &str {
        &self.0.subject
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
    /// When its latest turn started.
    async fn updated_at(&self) -> DateTime<Utc> {
        self.0.updated_at
    }
    /// Its turns, oldest first unless `orderBy`.
    async fn turns(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
        order_by: Option<ListOrder>,
    ) -> async_graphql::Result<TaskPage> {
        let scope = task_scope(ctx)?;
        let request = ordered_page_request(first, after, last, before, order_by)?;
        group_page(ctx, scope, TaskGroup::Turns, self.0.id.uuid(), request).await
    }
}

pub(crate) fn conversation_id(id: &ID) -> async_graphql::Result<ConversationId> {
    ids::decode_as(id, NodeType::Conversation)
        .map(ConversationId::from)
        .gql()
}

/// One of the caller's conversations.
pub(crate) async fn conversation_node(
    ctx: &Context<'_>,
    uuid: Uuid,
) -> async_graphql::Result<Conversation> {
    let conversation = domain(ctx)
        .conversations
        .get(principal(ctx)?, uuid.into())
        .await
        .gql()?;
    Ok(Conversation(conversation))
}

#[derive(Default)]
pub struct ConversationQuery;

#[Object]
impl ConversationQuery {
    /// The caller's conversations, oldest first unless `orderBy`.
    async fn conversations(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
        order_by: Option<ListOrder>,
    ) -> async_graphql::Result<Connection<String, Conversation>> {
        let request = ordered_page_request(first, after, last, before, order_by)?;
        let page = domain(ctx)
            .conversations
            .list(principal(ctx)?, request)
            .await
            .gql()?;
        let node = ctx.look_ahead().field("edges").field("node");
        if node.field("turns").exists() {
            let ids: Vec<Uuid> = page.items.iter().map(|c| c.id.uuid()).collect();
            let scope = task_scope(ctx)?;
            // Boxed: a resolver's future stays small.
            Box::pin(read_ahead_groups(ctx, scope, TaskGroup::Turns, &node, &ids)).await?;
        }
        Ok(connection(page, |c| c.id.uuid(), Conversation))
    }

    async fn conversation(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<Conversation> {
        conversation_node(ctx, conversation_id(&id)?.uuid()).await
    }
}

#[derive(InputObject)]
pub struct StartConversationInput {
    /// At most 200 characters.
    #[graphql(default)]
    pub title: String,
    /// Double texting (default `ENQUEUE`).
    pub multitask: Option<Multitask>,
}

#[derive(InputObject)]
pub struct SetConversationMultitaskInput {
    pub id: ID,
    pub multitask: Multitask,
}

#[derive(SimpleObject)]
pub struct ConversationPayload {
    pub conversation: Conversation,
}

#[derive(Default)]
pub struct ConversationMutation;

#[Object]
impl ConversationMutation {
    /// Start a conversation of the caller's.
    async fn start_conversation(
        &self,
        ctx: &Context<'_>,
        input: StartConversationInput,
    ) -> async_graphql::Result<ConversationPayload> {
        let conversation = domain(ctx)
            .conversations
            .create(
                principal(ctx)?,
                &input.title,
                input.multitask.map(Into::into),
            )
            .await
            .gql()?;
        Ok(ConversationPayload {
            conversation: Conversation(conversation),
        })
    }

    /// Change what a turn of one of the caller's conversations sent while
    /// another is unfinished does (turns started from now on).
    async fn set_conversation_multitask(
        &self,
        ctx: &Context<'_>,
        input: SetConversationMultitaskInput,
    ) -> async_graphql::Result<ConversationPayload> {
        let conversation = domain(ctx)
            .conversations
            .set_multitask(
                principal(ctx)?,
                conversation_id(&input.id)?,
                input.multitask.into(),
            )
            .await
            .gql()?;
        Ok(ConversationPayload {
            conversation: Conversation(conversation),
        })
    }
}
