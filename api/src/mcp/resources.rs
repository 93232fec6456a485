//! The resources `/mcp` offers: a task (its status and result) and a
//! memory, named `brainstem://tasks/{id}` and `brainstem://memories/{id}`
//! with Brainstem's global ids. They are listed as resource templates
//! (`resources/templates/list`); `resources/list` names no resource of its
//! own, since the tenant's tasks and memories are found with the tools.
//!
//! Invariants: a read is the GraphQL query of its template (`task(id:)`,
//! `memory(id:)`) run through the schema as the caller, like a tool call,
//! so scopes, tenant scoping, row security, rate limits and audit are the
//! GraphQL API's own; another tenant's id, or an id of another type, reads
//! as not found (`-32002`). A template is listed to, and readable by, only
//! a caller that holds its [`Access`].

use brainstem_domain::Principal;
use rmcp::{
    ErrorData,
    model::{CacheScope, ErrorCode, ReadResourceResult, ResourceContents, ResourceTemplate},
};
use serde_json::{Value, json};

use super::tools::{Access, MEMORY, TASK};
use crate::error;

/// The scheme of every Brainstem resource.
pub const SCHEME: &str = "brainstem://";

/// One kind of resource, declared.
pub struct Template {
    /// The URI's path before the id: `tasks` in `brainstem://tasks/{id}`.
    pub collection: &'static str,
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    /// The query field read with the id, and what it selects.
    pub field: &'static str,
    pub selection: &'static str,
    pub access: Access,
}

pub static TEMPLATES: &[Template] = &[
    Template {
        collection: "tasks",
        name: "task",
        title: "A task and its result",
        description: "A task of your tenant: its status, state, pending review, usage and \
            result (the model's answer when it has one), as `get_task` answers.",
        field: "task",
        selection: TASK,
        access: Access::Scope("tasks:read"),
    },
    Template {
        collection: "memories",
        name: "memory",
        title: "A memory",
        description: "A memory of your tenant: its content, tier, category, scores, \
            validity and subject.",
        field: "memory",
        selection: MEMORY,
        access: Access::Scope("memory:read"),
    },
];

impl Template {
    fn uri_template(&self) -> String {
        format!("{SCHEME}{}/{{id}}", self.collection)
    }

    /// As MCP lists it.
    pub fn listed(&self) -> ResourceTemplate {
        ResourceTemplate::new(self.uri_template(), self.name)
            .with_title(self.title)
            .with_description(self.description)
            .with_mime_type("application/json")
    }

    /// The GraphQL request reading the resource with global id `id`.
    pub fn request(&self, id: &str) -> async_graphql::Request {
        let operation = format!("McpRead{}", capitalized(self.name));
        let document = format!(
            "query {operation}($id: ID!) {{ {}(id: $id) {{ {} }} }}",
            self.field, self.selection
        );
        async_graphql::Request::new(document)
            .operation_name(operation)
            .variables(async_graphql::Variables::from_json(json!({ "id": id })))
    }
}

/// The templates `principal` may read.
pub fn visible_to(principal: &Principal) -> impl Iterator<Item = &'static Template> + '_ {
    TEMPLATES.iter().filter(|t| t.access.allows(principal))
}

/// The template and id `uri` names, if `principal` may read it. An id is
/// one path segment; anything else names no resource.
pub fn resolve<'u>(uri: &'u str, principal: &Principal) -> Option<(&'static Template, &'u str)> {
    let (collection, id) = uri.strip_prefix(SCHEME)?.split_once('/')?;
    if id.is_empty() || id.contains(['/', '?', '#']) {
        return None;
    }
    let template = visible_to(principal).find(|t| t.collection == collection)?;
    Some((template, id))
}

/// A resource that is not there, or not the caller's to read.
pub fn not_found(uri: &str) -> ErrorData {
    ErrorData::resource_not_found(
        format!("no resource `{uri}`"),
        Some(json!({"uri": uri, "code": error::NOT_FOUND})),
    )
}

/// The answer to a read of `uri` from its GraphQL response: the field's
/// value as JSON text, or the error its first GraphQL error implies.
/// The content is the caller's own, so it may be cached only by it.
pub fn read_result(
    uri: &str,
    field: &str,
    response: async_graphql::Response,
) -> Result<ReadResourceResult, ErrorData> {
    if let Some(first) = response.errors.first() {
        let code = error::code_of(first).unwrap_or(error::INTERNAL);
        return Err(match code {
            // A malformed id, or one of another type, names nothing.
            error::NOT_FOUND | error::BAD_USER_INPUT => not_found(uri),
            error::INTERNAL => ErrorData::internal_error("the resource could not be read", None),
            _ => ErrorData::new(
                ErrorCode::INVALID_REQUEST,
                first.message.clone(),
                Some(json!({"uri": uri, "code": code})),
            ),
        });
    }
    let data = response.data.into_json().unwrap_or(Value::Null);
    let value = data.get(field).cloned().unwrap_or(Value::Null);
    let contents =
        ResourceContents::text(value.to_string(), uri).with_mime_type("application/json");
    Ok(ReadResourceResult::new(vec![contents]).with_cache_scope(CacheScope::Private))
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_s_query_parses() {
        for template in TEMPLATES {
            let request = template.request("abc");
            if let Err(e) = async_graphql::parser::parse_query(&request.query) {
                panic!("{}: {e}\n{}", template.name, request.query);
            }
            assert!(template.uri_template().starts_with(SCHEME));
        }
    }

    #[test]
    fn a_uri_names_one_template_and_one_id() {
        let admin = Principal {
            actor: brainstem_domain::Actor::User("ada".into()),
            tenant: Some(brainstem_domain::TenantId::new()),
            roles: [brainstem_domain::Role::TenantAdmin].into(),
            scopes: Default::default(),
        };
        let (template, id) = resolve("brainstem://tasks/VGFzaz", &admin).unwrap();
        assert_eq!((template.name, id), ("task", "VGFzaz"));
        assert_eq!(
            resolve("brainstem://memories/x", &admin).map(|(t, _)| t.name),
            Some("memory")
        );
        for uri in [
            "brainstem://tasks/",
            "brainstem://tasks/a/b",
            "brainstem://plans/x",
            "file://tasks/x",
            "brainstem://tasks",
        ] {
            assert!(resolve(uri, &admin).is_none(), "{uri}");
        }
    }
}
