//! The tools `/mcp` offers, each one a named GraphQL operation (as Apollo's
//! MCP server does): the root field it runs, the fields it selects, the
//! access it needs and its annotations. The input schema and the
//! operation's variables come from the SDL ([`super::json_schema`]), so a
//! tool takes exactly what the GraphQL field takes.
//!
//! Invariants: a tool is listed to, and callable by, only a caller that
//! holds its [`Access`] (the resolvers check the same again); every call
//! runs through the schema's pipeline, so scopes, tenant scoping, row
//! security, rate limits and audit are the GraphQL API's own.

use std::{borrow::Cow, collections::BTreeMap, fmt, sync::Arc};

use brainstem_domain::Principal;
use rmcp::model::{JsonObject, MetaObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use super::json_schema::{Arguments, Root, Sdl};

/// What a caller needs to see and call a tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// An area's scope (`tasks:read`, `memory:write`, …): API keys need
    /// it, bearer tokens get it from their tenant role.
    Scope(&'static str),
    /// The right to decide reviews (`REVIEWER`, `TENANT_ADMIN`, or an API
    /// key with `reviews:write`).
    Reviewer,
}

impl Access {
    pub fn allows(self, principal: &Principal) -> bool {
        match self {
            Access::Scope(scope) => principal.require_scope(scope).is_ok(),
            Access::Reviewer => principal.require_reviewer().is_ok(),
        }
    }
}

/// What a tool does to the tenant's data, as MCP's hints say it.
#[derive(Clone, Copy, Debug)]
pub struct Effects {
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
    /// Whether it may reach systems outside Brainstem (a task's tools may).
    pub open_world: bool,
}

const READ_ONLY: Effects = Effects {
    read_only: true,
    destructive: false,
    idempotent: true,
    open_world: false,
};

/// One tool, declared.
pub struct Spec {
    pub name: &'static str,
    pub title: &'static str,
    pub root: Root,
    pub field: &'static str,
    /// The selection set on the field's value.
    pub selection: &'static str,
    pub access: Access,
    pub effects: Effects,
}

/// The task's fields every task tool answers with.
pub const TASK: &str = "id status mode intent confidence error input channel conversationId \
    plan { key version } currentStepId settledStepIds state \
    result { content model finishReason memorySuggestions toolCalls iterations tokenUsage { input output } } \
    pendingReview { id stepId reason confidence proposed } \
    usage { inputTokens outputTokens costMicros } createdAt updatedAt completedAt";

const PAGE: &str = "pageInfo { hasNextPage hasPreviousPage startCursor endCursor }";

pub const MEMORY: &str = "id tier category content score importance confidence status validFrom validTo \
    subject { id type name key } createdAt";

pub const START_TASK: &str = "start_task";

/// Every tool. Annotations are set from what the operation does:
/// `start_task` creates a task (repeating it creates another, unless an
/// `idempotencyKey` is given) that may call external systems;
/// `answer_review` may reject (cancel) a task and a repeat is refused
/// with `CONFLICT`; `add_memory` adds or merges into a near-duplicate,
/// keeping the old text as a version (nothing is lost).
pub static SPECS: &[Spec] = &[
    Spec {
        name: START_TASK,
        title: "Start a task",
        root: Root::Mutation,
        field: "startTask",
        selection: "ok task { TASK }",
        access: Access::Scope("tasks:write"),
        effects: Effects {
            read_only: false,
            destructive: false,
            idempotent: false,
            open_world: true,
        },
    },
    Spec {
        name: "get_task",
        title: "Get a task",
        root: Root::Query,
        field: "task",
        selection: "TASK events(first: 100) { seq kind stepId tool status summary error createdAt }",
        access: Access::Scope("tasks:read"),
        effects: READ_ONLY,
    },
    Spec {
        name: "answer_review",
        title: "Answer a pending review",
        root: Root::Mutation,
        field: "resumeTask",
        selection: "task { TASK }",
        access: Access::Reviewer,
        effects: Effects {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: true,
        },
    },
    Spec {
        name: "search_memories",
        title: "Search memories",
        root: Root::Query,
        field: "searchMemories",
        selection: "vectorUsed hits { finalScore memory { MEMORY } }",
        access: Access::Scope("memory:read"),
        effects: READ_ONLY,
    },
    Spec {
        name: "add_memory",
        title: "Add a memory",
        root: Root::Mutation,
        field: "remember",
        selection: "merged embedded memory { MEMORY }",
        access: Access::Scope("memory:write"),
        effects: Effects {
            read_only: false,
            destructive: false,
            idempotent: false,
            open_world: false,
        },
    },
    Spec {
        name: "read_dossier",
        title: "Read an entity's dossier",
        root: Root::Query,
        field: "dossier",
        selection: "subject { id type name key properties } openTasks \
            facts { MEMORY } insights { MEMORY } recentEvents { MEMORY } \
            recentTasks { id status intent input createdAt }",
        access: Access::Scope("memory:read"),
        effects: READ_ONLY,
    },
    Spec {
        name: "list_plans",
        title: "List plans",
        root: Root::Query,
        field: "plans",
        selection: "PAGE nodes { id key version intent description priority patterns capabilityKey \
            steps { id tool } }",
        access: Access::Scope("tasks:read"),
        effects: READ_ONLY,
    },
    Spec {
        name: "list_capabilities",
        title: "List the tenant's capabilities",
        root: Root::Query,
        field: "subscriptions",
        selection: "PAGE nodes { status active trialEndsAt \
            capability { key name description version intents plans { key version } } }",
        access: Access::Scope("tasks:read"),
        effects: READ_ONLY,
    },
];

/// A tool ready to list and run: its MCP description and its operation.
pub struct Prepared {
    pub spec: &'static Spec,
    pub tool: Tool,
    arguments: Arguments,
    selection: String,
}

/// A tool declared against a schema that cannot serve it (a field or
/// type the SDL lacks, or an SDL that does not parse): a programming
/// error, refused when the application is built.
#[derive(Debug)]
pub struct ToolDeclarationError {
    /// The tool, when one is at fault (not the SDL as a whole).
    pub tool: Option<&'static str>,
    pub reason: String,
}

impl fmt::Display for ToolDeclarationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.tool {
            Some(tool) => write!(
                f,
                "the MCP tool `{tool}` does not match the GraphQL schema: {}",
                self.reason
            ),
            None => write!(
                f,
                "the GraphQL schema cannot be read for the MCP tools: {}",
                self.reason
            ),
        }
    }
}

impl std::error::Error for ToolDeclarationError {}

/// The tools, prepared once from the SDL.
pub struct Catalogue {
    tools: BTreeMap<&'static str, Prepared>,
}

impl Catalogue {
    /// Prepare every tool of [`SPECS`] against `sdl` (the schema's SDL).
    /// A tool naming a field the schema lacks is a programming error
    /// caught at start-up and by the tests.
    pub fn new(sdl: &str) -> Result<Self, ToolDeclarationError> {
        let sdl = Sdl::parse(sdl).map_err(|reason| ToolDeclarationError { tool: None, reason })?;
        let mut tools = BTreeMap::new();
        for spec in SPECS {
            let shape =
                sdl.field(spec.root, spec.field)
                    .map_err(|reason| ToolDeclarationError {
                        tool: Some(spec.name),
                        reason,
                    })?;
            let e = spec.effects;
            let annotations = ToolAnnotations::with_title(spec.title)
                .read_only(e.read_only)
                .destructive(e.destructive)
                .idempotent(e.idempotent)
                .open_world(e.open_world);
            let mut meta = MetaObject::new();
            meta.0.insert(
                "brainstem/graphql".into(),
                json!(format!("{}.{}", spec.root.type_name(), spec.field)),
            );
            let description = shape
                .description
                .clone()
                .unwrap_or_else(|| spec.title.to_owned());
            let tool = Tool::new(
                spec.name,
                Cow::Owned(description),
                Arc::new(shape.input_schema.clone()),
            )
            .with_title(spec.title)
            .with_annotations(annotations)
            .with_meta(meta);
            let selection = spec
                .selection
                .replace("TASK", TASK)
                .replace("MEMORY", MEMORY)
                .replace("PAGE", PAGE);
            tools.insert(
                spec.name,
                Prepared {
                    spec,
                    tool,
                    arguments: shape.arguments,
                    selection,
                },
            );
        }
        Ok(Self { tools })
    }

    /// The tools `principal` may see, by name.
    pub fn visible_to<'a>(
        &'a self,
        principal: &'a Principal,
    ) -> impl Iterator<Item = &'a Prepared> {
        self.tools
            .values()
            .filter(|t| t.spec.access.allows(principal))
    }

    /// The tool named `name`, if `principal` may call it.
    pub fn callable(&self, name: &str, principal: &Principal) -> Option<&Prepared> {
        self.tools
            .get(name)
            .filter(|t| t.spec.access.allows(principal))
    }
}

impl Prepared {
    /// The GraphQL request for a call with `arguments`: a document naming
    /// only the arguments given (the others keep their GraphQL defaults),
    /// and the variables.
    pub fn request(&self, arguments: JsonObject) -> Result<async_graphql::Request, String> {
        let spec = self.spec;
        let (declared, passed, variables) = match &self.arguments {
            Arguments::Input { type_name } => (
                format!("($input: {type_name}!)"),
                "(input: $input)".to_owned(),
                json!({ "input": Value::Object(arguments) }),
            ),
            Arguments::Fields { types } => {
                let mut declared = Vec::new();
                let mut passed = Vec::new();
                for name in arguments.keys() {
                    let ty = types
                        .get(name)
                        .ok_or_else(|| format!("`{}` takes no argument `{name}`", spec.name))?;
                    declared.push(format!("${name}: {ty}"));
                    passed.push(format!("{name}: ${name}"));
                }
                let wrap = |parts: Vec<String>| {
                    if parts.is_empty() {
                        String::new()
                    } else {
                        format!("({})", parts.join(", "))
                    }
                };
                (wrap(declared), wrap(passed), Value::Object(arguments))
            }
        };
        let document = format!(
            "{} Mcp{}{declared} {{ {}{passed} {{ {} }} }}",
            spec.root.keyword(),
            pascal(spec.name),
            spec.field,
            self.selection,
        );
        let variables = async_graphql::Variables::from_json(variables);
        Ok(async_graphql::Request::new(document)
            .operation_name(format!("Mcp{}", pascal(spec.name)))
            .variables(variables))
    }
}

/// `start_task` → `StartTask`: the operation's name, for logs and audit.
fn pascal(snake: &str) -> String {
    snake
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_s_operation_parses() {
        let catalogue = Catalogue::new(&crate::schema::sdl()).unwrap();
        assert_eq!(catalogue.tools.len(), SPECS.len());
        for prepared in catalogue.tools.values() {
            let request = prepared.request(JsonObject::new()).unwrap();
            if let Err(e) = async_graphql::parser::parse_query(&request.query) {
                panic!("{}: {e}\n{}", prepared.spec.name, request.query);
            }
        }
    }

    #[test]
    fn a_tool_the_schema_cannot_serve_is_named_in_the_error() {
        let sdl = "type Query { viewer: Int } type Mutation { other: Int }";
        let err = Catalogue::new(sdl).err().expect("no field for the tools");
        assert_eq!(err.tool, Some(START_TASK));
        assert!(
            err.to_string()
                .starts_with("the MCP tool `start_task` does not match the GraphQL schema"),
            "{err}"
        );
        let err = Catalogue::new("type {").err().expect("not an SDL");
        assert_eq!(err.tool, None);
    }

    #[test]
    fn names_become_operation_names() {
        assert_eq!(pascal("start_task"), "StartTask");
        assert_eq!(pascal("list_capabilities"), "ListCapabilities");
    }
}
