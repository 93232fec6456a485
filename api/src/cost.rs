//! What an operation may cost, known before anything runs.
//!
//! A GraphQL document is small on the wire and can be huge once expanded:
//! ten fragments that each spread the previous one ten times select 10^10
//! fields. Every pass that walks the expanded document (async-graphql's
//! depth check, validation, execution) then takes time and memory
//! proportional to that expansion. This module bounds the expansion before
//! any of them runs, in two steps, each in time linear in the document:
//!
//! 1. [`scan`] reads the raw text as GraphQL tokens, without parsing: its
//!    size in bytes, its token count and its bracket nesting must stay under
//!    [`DocumentLimits`]. This protects the parser itself.
//! 2. [`measure`] walks the parsed document once, computing each fragment's
//!    expanded cost once (fragments form a DAG: memoised, and a spread cycle
//!    is refused rather than followed). Every field counts, `__typename` and
//!    introspection included; a field's sub-selection counts once per item it
//!    can return: its page size (`first`, `last` or `limit`, capped at
//!    [`MAX_PAGE_SIZE`]; [`DEFAULT_PAGE_SIZE`] for a connection asked
//!    without one), [`UNPAGED_LIST_ITEMS`] for any other list. It also counts
//!    aliases and the directives of each field.
//!
//! Invariants:
//! - The cost counts every selection of the expansion at least once (a page
//!   of 0 still counts as 1), so bounding it bounds the work of every later
//!   pass, whatever the variables say.
//! - The cost of a document is the sum over all of its operations: validation
//!   walks every operation, not only the one that runs.
//! - Neither step allocates in proportion to the expansion: the scan counts,
//!   the walk memoises one number per fragment.
//!
//! The schema extensions in [`crate::schema`] run [`scan`] before the
//! request is parsed (even before an automatic persisted query is stored)
//! and [`measure`] right after, before validation; the budget is tighter for
//! anonymous callers.

use std::collections::HashMap;

use async_graphql::{
    Name, Positioned, Value as ConstValue, Variables,
    parser::types::{
        ExecutableDocument, OperationDefinition, Selection, SelectionSet, VariableDefinition,
    },
    registry::{MetaField, MetaTypeName, Registry},
};
use brainstem_domain::page::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};

/// How many items a list with no page-size argument is assumed to hold.
pub const UNPAGED_LIST_ITEMS: u64 = 10;

/// The arguments that set how many items a list field returns.
const PAGE_ARGUMENTS: [&str; 3] = ["first", "last", "limit"];

/// Limits on one GraphQL document, checked before it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DocumentLimits {
    /// Longest document, in bytes.
    pub max_bytes: usize,
    /// Most lexical tokens (names, punctuation, values) in a document.
    pub max_tokens: usize,
    /// Deepest nesting of `{`, `(` and `[`.
    pub max_nesting: usize,
    /// Most aliased fields in a document (as written, not expanded).
    pub max_aliases: usize,
    /// Most directives on one field.
    pub max_directives_per_field: usize,
    /// Highest cost (fields once expanded, times page sizes) of an
    /// authenticated caller's document.
    pub max_cost: u64,
    /// The same, for an anonymous caller.
    pub max_cost_anonymous: u64,
}

impl Default for DocumentLimits {
    fn default() -> Self {
        Self {
            max_bytes: 64 * 1024,
            max_tokens: 10_000,
            max_nesting: 64,
            max_aliases: 100,
            max_directives_per_field: 5,
            max_cost: 100_000,
            max_cost_anonymous: 50_000,
        }
    }
}

/// Why a document is refused; the message is for the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal(pub String);

/// What [`scan`] found in a document's text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scan {
    pub tokens: usize,
    pub nesting: usize,
}

/// Counts the tokens and bracket nesting of `text` per GraphQL's lexical
/// grammar (whitespace, commas and comments are ignored; strings and block
/// strings are one token each), refusing it as soon as a limit is passed.
pub fn scan(text: &str, limits: &DocumentLimits) -> Result<Scan, Refusal> {
    if text.len() > limits.max_bytes {
        return Err(Refusal(format!(
            "query too large: {} bytes, limit {}",
            text.len(),
            limits.max_bytes
        )));
    }
    let bytes = text.as_bytes();
    let mut found = Scan::default();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let token_start = i;
        match bytes[i] {
            b' ' | b'\t' | b'\n' | b'\r' | b',' => {
                i += 1;
                continue;
            }
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' && bytes[i] != b'\r' {
                    i += 1;
                }
                continue;
            }
            b'{' | b'(' | b'[' => {
                depth += 1;
                found.nesting = found.nesting.max(depth);
                if depth > limits.max_nesting {
                    return Err(Refusal(format!(
                        "query nested too deeply: more than {} levels of brackets",
                        limits.max_nesting
                    )));
                }
                i += 1;
            }
            b'}' | b')' | b']' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'"' if bytes[i..].starts_with(b"\"\"\"") => {
                i += 3;
                loop {
                    match bytes.get(i) {
                        None => break,
                        Some(b'\\') if bytes[i + 1..].starts_with(b"\"\"\"") => i += 4,
                        Some(b'"') if bytes[i..].starts_with(b"\"\"\"") => {
                            i += 3;
                            break;
                        }
                        Some(_) => i += 1,
                    }
                }
            }
            b'"' => {
                i += 1;
                loop {
                    match bytes.get(i) {
                        None | Some(b'\n') | Some(b'\r') => break,
                        Some(b'\\') => i += 2,
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(_) => i += 1,
                    }
                }
            }
            b'.' if bytes[i..].starts_with(b"...") => i += 3,
            c if c == b'_' || c == b'-' || c.is_ascii_alphanumeric() || c == b'.' => {
                // A name or a number (with its sign, fraction and exponent).
                i += 1;
                while i < bytes.len()
                    && (bytes[i] == b'_' || bytes[i] == b'.' || bytes[i].is_ascii_alphanumeric())
                {
                    i += 1;
                }
            }
            _ => {
                // Punctuation, or a character the parser will reject: one
                // token either way. Step over a whole UTF-8 character.
                i += 1;
                while i < bytes.len() && (bytes[i] & 0b1100_0000) == 0b1000_0000 {
                    i += 1;
                }
            }
        }
        debug_assert!(i > token_start);
        found.tokens += 1;
        if found.tokens > limits.max_tokens {
            return Err(Refusal(format!(
                "query too long: more than {} tokens",
                limits.max_tokens
            )));
        }
    }
    Ok(found)
}

/// The expanded cost of a parsed document, or why it is refused.
///
/// `budget` is the caller's limit (see [`DocumentLimits::max_cost`]); the
/// walk stops counting as soon as the cost is known to be over it only if
/// that is cheaper: it never is, since each fragment is measured once, so
/// the full cost is always reported.
pub fn measure(
    doc: &ExecutableDocument,
    registry: &Registry,
    variables: &Variables,
    limits: &DocumentLimits,
) -> Result<u64, Refusal> {
    let mut walk = Walk {
        doc,
        registry,
        variables,
        limits,
        defaults: &[],
        fragments: HashMap::new(),
        aliases: 0,
    };
    let mut total: u64 = 0;
    for (_, operation) in doc.operations.iter() {
        let root = root_type(registry, &operation.node);
        walk.defaults = &operation.node.variable_definitions;
        // Memoised fragment costs depend on the operation's variable
        // defaults: start afresh for each operation.
        walk.fragments.clear();
        let cost = walk.selection_set(&operation.node.selection_set, root)?;
        total = total.saturating_add(cost);
    }
    Ok(total)
}

/// The budget check: `cost` against the caller's limit.
pub fn check_budget(cost: u64, limits: &DocumentLimits, anonymous: bool) -> Result<(), Refusal> {
    let limit = if anonymous {
        limits.max_cost_anonymous
    } else {
        limits.max_cost
    };
    if cost <= limit {
        return Ok(());
    }
    let who = if anonymous {
        " for anonymous callers (authenticate for a higher one)"
    } else {
        ""
    };
    Err(Refusal(format!(
        "query too costly: {cost} fields, limit {limit}{who}"
    )))
}

fn root_type<'r>(registry: &'r Registry, operation: &OperationDefinition) -> Option<&'r str> {
    use async_graphql::parser::types::OperationType;
    match operation.ty {
        OperationType::Query => Some(registry.query_type.as_str()),
        OperationType::Mutation => registry.mutation_type.as_deref(),
        OperationType::Subscription => registry.subscription_type.as_deref(),
    }
}

/// A fragment's memoised cost, or the mark of one being measured (a spread
/// that reaches it again is a cycle).
#[derive(Clone, Copy)]
enum Memo {
    InProgress,
    Cost(u64),
}

struct Walk<'a> {
    doc: &'a ExecutableDocument,
    registry: &'a Registry,
    variables: &'a Variables,
    limits: &'a DocumentLimits,
    defaults: &'a [Positioned<VariableDefinition>],
    fragments: HashMap<&'a Name, Memo>,
    aliases: usize,
}

impl<'a> Walk<'a> {
    /// The cost of a selection set whose parent type is `parent` (`None`
    /// when unknown: validation will report it; fields still count).
    fn selection_set(
        &mut self,
        set: &'a Positioned<SelectionSet>,
        parent: Option<&'a str>,
    ) -> Result<u64, Refusal> {
        let mut cost: u64 = 0;
        for selection in &set.node.items {
            let part = match &selection.node {
                Selection::Field(field) => {
                    let field = &field.node;
                    if field.alias.is_some() {
                        self.aliases += 1;
                        if self.aliases > self.limits.max_aliases {
                            return Err(Refusal(format!(
                                "query has too many aliases: more than {}",
                                self.limits.max_aliases
                            )));
                        }
                    }
                    if field.directives.len() > self.limits.max_directives_per_field {
                        return Err(Refusal(format!(
                            "field `{}` has {} directives, limit {}",
                            field.name.node,
                            field.directives.len(),
                            self.limits.max_directives_per_field
                        )));
                    }
                    let meta = parent.and_then(|p| self.field(p, &field.name.node));
                    if field.selection_set.node.items.is_empty() {
                        1
                    } else {
                        let items = self.items(field, meta, parent);
                        let child = meta.map(|m| MetaTypeName::concrete_typename(&m.ty));
                        let inner = self.selection_set(&field.selection_set, child)?;
                        1u64.saturating_add(items.saturating_mul(inner))
                    }
                }
                Selection::FragmentSpread(spread) => {
                    self.fragment(&spread.node.fragment_name.node)?
                }
                Selection::InlineFragment(inline) => {
                    let inline = &inline.node;
                    let on = match &inline.type_condition {
                        Some(condition) => Some(condition.node.on.node.as_str()),
                        None => parent,
                    };
                    self.selection_set(&inline.selection_set, on)?
                }
            };
            cost = cost.saturating_add(part);
        }
        Ok(cost)
    }

    fn fragment(&mut self, name: &'a Name) -> Result<u64, Refusal> {
        match self.fragments.get(name) {
            Some(Memo::Cost(cost)) => return Ok(*cost),
            Some(Memo::InProgress) => {
                return Err(Refusal(format!("fragment `{name}` spreads itself")));
            }
            None => {}
        }
        // An unknown fragment costs nothing here; validation reports it.
        let Some(definition) = self.doc.fragments.get(name) else {
            return Ok(0);
        };
        self.fragments.insert(name, Memo::InProgress);
        let on = definition.node.type_condition.node.on.node.as_str();
        let cost = self.selection_set(&definition.node.selection_set, Some(on))?;
        self.fragments.insert(name, Memo::Cost(cost));
        Ok(cost)
    }

    /// The definition of `parent.name`, if known.
    fn field(&self, parent: &str, name: &str) -> Option<&'a MetaField> {
        self.registry.types.get(parent)?.field_by_name(name)
    }

    /// How many times a field's sub-selection runs: once per item.
    fn items(
        &self,
        field: &async_graphql::parser::types::Field,
        meta: Option<&MetaField>,
        parent: Option<&str>,
    ) -> u64 {
        let asked = field
            .arguments
            .iter()
            .filter(|(name, _)| PAGE_ARGUMENTS.contains(&name.node.as_str()))
            .find_map(|(_, value)| {
                let value = value
                    .node
                    .clone()
                    .into_const_with(|name| self.variable(&name).ok_or(()));
                integer(&value.ok()?)
            });
        // A page argument left out may have a default in the schema.
        let default = || {
            let meta = meta?;
            PAGE_ARGUMENTS
                .iter()
                .filter(|name| !field.arguments.iter().any(|(n, _)| n.node == **name))
                .find_map(|name| meta.args.get(*name)?.default_value.as_deref()?.parse().ok())
        };
        let ty = meta.map(|m| m.ty.as_str());
        let is_list = ty.is_some_and(|t| MetaTypeName::create(t).is_list());
        let is_connection =
            ty.is_some_and(|t| MetaTypeName::concrete_typename(t).ends_with("Connection"));
        let items = match asked.or_else(default) {
            Some(n) => n.min(MAX_PAGE_SIZE),
            None if is_connection => DEFAULT_PAGE_SIZE,
            // A connection's `edges` and `nodes` lists are its page, which
            // the connection field has counted already.
            None if is_list && !is_page_of(parent) => UNPAGED_LIST_ITEMS,
            None => 1,
        };
        items.max(1)
    }

    fn variable(&self, name: &Name) -> Option<ConstValue> {
        variable_value(self.variables, self.defaults, name)
    }
}

/// A variable's value, else its default in the operation that defines
/// `definitions`.
pub(crate) fn variable_value(
    variables: &Variables,
    definitions: &[Positioned<VariableDefinition>],
    name: &Name,
) -> Option<ConstValue> {
    variables.get(name).cloned().or_else(|| {
        definitions
            .iter()
            .find(|d| d.node.name.node == *name)
            .and_then(|d| d.node.default_value.as_ref())
            .map(|d| d.node.clone())
    })
}

/// A non-negative integer, or `None` for anything else (left to coercion
/// to refuse).
fn integer(value: &ConstValue) -> Option<u64> {
    match value {
        ConstValue::Number(n) => n.as_u64().or_else(|| n.as_i64().map(|_| 0)),
        _ => None,
    }
}

/// Whether a list field of `parent` is a page a connection field counted
/// (a connection's `edges` and `nodes`).
fn is_page_of(parent: Option<&str>) -> bool {
    parent.is_some_and(|p| p.ends_with("Connection"))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use async_graphql::{
        Request, ServerError, ServerResult,
        extensions::{Extension, ExtensionContext, ExtensionFactory, NextPrepareRequest},
    };

    use super::*;

    fn limits() -> DocumentLimits {
        DocumentLimits::default()
    }

    #[test]
    fn scan_counts_tokens_and_ignores_what_is_not_one() {
        let text = "# a comment { { {\nquery Q($n: Int = 5) { a(s: \"x { y\", b: \"\"\"z\\\"\"\" } \"\"\") { ...F } }";
        let found = scan(text, &limits()).unwrap();
        // query Q ( $ n : Int = 5 ) { a ( s : "…" b : """…""" ) { ... F } }
        // (the comma is not a token)
        assert_eq!(found.tokens, 25);
        assert_eq!(found.nesting, 2);
    }

    #[test]
    fn scan_refuses_size_tokens_and_nesting() {
        let small = DocumentLimits {
            max_bytes: 10,
            ..limits()
        };
        assert!(
            scan("{ __typename }", &small)
                .unwrap_err()
                .0
                .contains("14 bytes, limit 10")
        );
        let few = DocumentLimits {
            max_tokens: 3,
            ..limits()
        };
        assert!(
            scan("{ a b }", &few)
                .unwrap_err()
                .0
                .contains("more than 3 tokens")
        );
        assert_eq!(
            scan(
                "{ a b }",
                &DocumentLimits {
                    max_tokens: 4,
                    ..limits()
                }
            )
            .unwrap()
            .tokens,
            4
        );
        let deep = "[".repeat(65);
        assert!(scan(&deep, &limits()).unwrap_err().0.contains("64 levels"));
    }

    #[test]
    fn scan_survives_unterminated_strings_and_odd_characters() {
        for text in [
            "\"abc",
            "\"\"\"abc",
            "\"a\\",
            "é ü ∑",
            "\u{feff}{ a }",
            "\"\"\"\\",
        ] {
            assert!(scan(text, &limits()).is_ok(), "{text:?}");
        }
    }

    type Measured = Arc<Mutex<Option<Result<u64, Refusal>>>>;

    /// Measures each request against the schema's registry (which only an
    /// extension can reach), then stops it.
    struct Probe(Measured);

    impl ExtensionFactory for Probe {
        fn create(&self) -> Arc<dyn Extension> {
            Arc::new(Probe(self.0.clone()))
        }
    }

    #[async_graphql::async_trait::async_trait]
    impl Extension for Probe {
        async fn prepare_request(
            &self,
            ctx: &ExtensionContext<'_>,
            mut request: Request,
            _next: NextPrepareRequest<'_>,
        ) -> ServerResult<Request> {
            let variables = request.variables.clone();
            let doc = request.parsed_query()?;
            let cost = measure(doc, &ctx.schema_env.registry, &variables, &limits());
            *self.0.lock().unwrap() = Some(cost);
            Err(ServerError::new("measured", None))
        }
    }

    async fn cost_of(query: &str, variables: serde_json::Value) -> Result<u64, Refusal> {
        let measured = Measured::default();
        let schema = crate::schema::bare()
            .extension(Probe(measured.clone()))
            .finish();
        let request = Request::new(query).variables(Variables::from_json(variables));
        schema.execute(request).await;
        measured.lock().unwrap().take().unwrap()
    }

    /// `fragment F<k>` spreads `F<k-1>` ten times; F0 selects `__typename`.
    fn fan_out(levels: usize) -> String {
        let mut q = format!("query Q {{ ...F{levels} }} fragment F0 on Query {{ __typename }}");
        for k in 1..=levels {
            let spreads = format!("...F{} ", k - 1).repeat(10);
            q.push_str(&format!(" fragment F{k} on Query {{ {spreads}}}"));
        }
        q
    }

    #[tokio::test]
    async fn fragments_are_counted_expanded_without_expanding_them() {
        assert_eq!(
            cost_of(&fan_out(10), serde_json::json!({})).await.unwrap(),
            10_000_000_000
        );
        assert_eq!(
            cost_of(&fan_out(2), serde_json::json!({})).await.unwrap(),
            100
        );
    }

    #[tokio::test]
    async fn a_spread_cycle_is_refused() {
        let q = "{ ...A } fragment A on Query { ...B } fragment B on Query { __typename ...A }";
        assert!(
            cost_of(q, serde_json::json!({}))
                .await
                .unwrap_err()
                .0
                .contains("spreads itself")
        );
    }

    #[tokio::test]
    async fn pages_multiply_what_they_select() {
        // tasks(1) + 50 × (edges 1 + node 1 + id 1 + steps(1 + 10 × 2))
        let q = "{ tasks(first: 50) { edges { node { id steps { stepId status } } } } }";
        assert_eq!(
            cost_of(q, serde_json::json!({})).await.unwrap(),
            1 + 50 * (1 + 1 + 1 + 1 + 10 * 2)
        );
        // The page size may come from a variable or its default; with none
        // a connection counts its default page.
        let q = "query($n: Int = 7) { tasks(first: $n) { nodes { id } } }";
        assert_eq!(cost_of(q, serde_json::json!({})).await.unwrap(), 1 + 7 * 2);
        assert_eq!(
            cost_of(q, serde_json::json!({"n": 3})).await.unwrap(),
            1 + 3 * 2
        );
        let q = "{ tasks { nodes { id } } }";
        assert_eq!(
            cost_of(q, serde_json::json!({})).await.unwrap(),
            1 + DEFAULT_PAGE_SIZE * 2
        );
        // Asking past the maximum page counts the maximum (the resolver
        // refuses it); a page of 0 still counts its selection once.
        let q = "{ tasks(first: 99999999999) { nodes { id } } }";
        assert_eq!(
            cost_of(q, serde_json::json!({})).await.unwrap(),
            1 + MAX_PAGE_SIZE * 2
        );
        let q = "{ tasks(first: 0) { nodes { id } } }";
        assert_eq!(cost_of(q, serde_json::json!({})).await.unwrap(), 3);
    }

    #[tokio::test]
    async fn every_field_counts_and_every_operation_counts() {
        let q = "query A { __typename a: __typename } query B { __schema { types { name } } }";
        // A: 2; B: __schema 1 + (types 1 + 10 × name 1)
        assert_eq!(
            cost_of(q, serde_json::json!({})).await.unwrap(),
            2 + 1 + 1 + 10
        );
    }

    #[tokio::test]
    async fn aliases_and_directives_are_limited() {
        let many: String = (0..101).map(|i| format!("a{i}: __typename ")).collect();
        let err = cost_of(&format!("{{ {many} }}"), serde_json::json!({}))
            .await
            .unwrap_err();
        assert!(err.0.contains("too many aliases: more than 100"), "{err:?}");
        let q = "{ __typename @skip(if: false) @skip(if: false) @skip(if: false) @skip(if: false) @skip(if: false) @skip(if: false) }";
        let err = cost_of(q, serde_json::json!({})).await.unwrap_err();
        assert!(
            err.0.contains("`__typename` has 6 directives, limit 5"),
            "{err:?}"
        );
    }

    #[test]
    fn the_budget_is_tighter_for_anonymous_callers() {
        let l = limits();
        assert!(check_budget(l.max_cost, &l, false).is_ok());
        let err = check_budget(l.max_cost + 1, &l, false).unwrap_err();
        assert_eq!(
            err.0,
            format!(
                "query too costly: {} fields, limit {}",
                l.max_cost + 1,
                l.max_cost
            )
        );
        assert!(
            check_budget(l.max_cost_anonymous + 1, &l, true)
                .unwrap_err()
                .0
                .contains("anonymous")
        );
    }

    #[tokio::test]
    async fn the_introspection_query_fits_the_anonymous_budget() {
        let q = include_str!("../../tests/fixtures/introspection.graphql");
        let cost = cost_of(q, serde_json::json!({})).await.unwrap();
        assert!(
            cost <= limits().max_cost_anonymous,
            "introspection costs {cost}"
        );
    }
}
