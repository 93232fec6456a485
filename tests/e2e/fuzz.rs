//! `/graphql` under random requests: documents built from the schema's
//! names and GraphQL's syntax (then garbled), random variables, operation
//! names, credentials (none, valid, expired, forged, malformed), methods and
//! bodies. Whatever arrives, the server answers: never a 5xx (a panic would
//! be one: the panic layer answers 500), always a JSON body whose errors each
//! carry a known `extensions.code` other than `INTERNAL` (random input is
//! the caller's doing; `INTERNAL` would mean a bug or a misfiled error),
//! always within the request timeout.
//!
//! The cases come from `proptest` with a fixed seed, so a run is repeatable
//! and a failure is shrunk to a small request before it is reported.

use std::time::{Duration, Instant};

use brainstem_domain::Role;
use proptest::{
    prelude::*,
    test_runner::{Config as ProptestConfig, RngAlgorithm, TestRng, TestRunner},
};
use serde_json::{Value, json};

use crate::for_both_backends;
use crate::helpers::{Backend, TestApp};

for_both_backends!(random_requests_are_answered_cleanly);

/// Requests per backend.
const CASES: u32 = 400;

/// The codes random input may meet (README, *Errors*), all but `INTERNAL`.
const CODES: [&str; 8] = [
    "UNAUTHENTICATED",
    "FORBIDDEN",
    "NOT_FOUND",
    "BAD_USER_INPUT",
    "CONFLICT",
    "RATE_LIMITED",
    "TIMEOUT",
    "RESPONSE_TOO_LARGE",
];

/// Names a document may use: fields, arguments, types of the schema, and
/// some it does not have.
const NAMES: &[&str] = &[
    "__typename",
    "__schema",
    "__type",
    "types",
    "fields",
    "name",
    "kind",
    "ofType",
    "viewer",
    "tenant",
    "tasks",
    "task",
    "node",
    "nodes",
    "edges",
    "id",
    "status",
    "steps",
    "events",
    "plan",
    "key",
    "version",
    "apiKeys",
    "memories",
    "searchMemories",
    "entities",
    "neighborhood",
    "capabilities",
    "auditLog",
    "connections",
    "startTask",
    "cancelTask",
    "remember",
    "createTenant",
    "taskEvents",
    "first",
    "last",
    "after",
    "filter",
    "input",
    "limit",
    "depth",
    "query",
    "Query",
    "Mutation",
    "Task",
    "nope",
];

/// A credential to send, or not.
#[derive(Clone, Debug)]
enum Credential {
    None,
    Admin,
    Member,
    PlatformAdmin,
    Expired,
    /// A token signed with another key.
    Forged,
    /// Any text in the `Authorization` header.
    Raw(String),
}

#[derive(Clone, Debug)]
enum Method {
    Post,
    Get,
    /// A POST whose body is this text, as it is.
    PostRaw(String),
}

#[derive(Clone, Debug)]
struct Case {
    method: Method,
    document: String,
    variables: Value,
    operation_name: Option<String>,
    credential: Credential,
    accept: Option<&'static str>,
}

fn name() -> impl Strategy<Value = String> {
    prop::sample::select(NAMES).prop_map(str::to_owned)
}

/// Text with the characters that trip lexers up.
fn text() -> impl Strategy<Value = String> {
    let chars = prop::sample::select(vec![
        'a', 'Z', '0', '9', ' ', '"', '\\', '{', '}', '(', ')', '[', ']', ':', '$', '@', '.', '#',
        '\n', 'é', '∑', '\u{0}', '\u{feff}', '!', '=', '|', '&', ',', 'u',
    ]);
    prop::collection::vec(chars, 0..24).prop_map(|c| c.into_iter().collect())
}

/// An argument value, as GraphQL text.
fn value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        prop::sample::select(vec!["0", "-1", "5", "100", "99999999999", "1e400", "1.5"])
            .prop_map(str::to_owned),
        text().prop_map(|t| format!("{t:?}")),
        prop::sample::select(vec![
            "true",
            "false",
            "null",
            "COMPLETED",
            "\"\"\"block\"\"\""
        ])
        .prop_map(str::to_owned),
        prop::sample::select(vec!["$a", "$b", "$c", "$d", "$undefined"]).prop_map(str::to_owned),
        name(),
    ];
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(|v| format!("[{}]", v.join(", "))),
            prop::collection::vec((name(), inner), 0..3).prop_map(|fields| {
                let fields: Vec<String> = fields.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                format!("{{{}}}", fields.join(", "))
            }),
        ]
    })
}

fn arguments() -> impl Strategy<Value = String> {
    prop::collection::vec((name(), value()), 0..3).prop_map(|args| {
        if args.is_empty() {
            String::new()
        } else {
            let args: Vec<String> = args.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            format!("({})", args.join(", "))
        }
    })
}

/// A selection set, as GraphQL text.
fn selection_set() -> impl Strategy<Value = String> {
    let leaf = (
        prop::option::of(name()),
        name(),
        arguments(),
        prop::option::of(value()),
    )
        .prop_map(|(alias, field, args, skip)| {
            let alias = alias.map(|a| format!("{a}: ")).unwrap_or_default();
            let directive = skip.map(|v| format!(" @skip(if: {v})")).unwrap_or_default();
            format!("{alias}{field}{args}{directive}")
        });
    let selections = leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            (
                name(),
                arguments(),
                prop::collection::vec(inner.clone(), 1..4)
            )
                .prop_map(|(field, args, items)| format!(
                    "{field}{args} {{ {} }}",
                    items.join(" ")
                )),
            prop::sample::select(vec!["...F0", "...F1", "...Missing"]).prop_map(str::to_owned),
            (name(), prop::collection::vec(inner, 1..3))
                .prop_map(|(on, items)| format!("... on {on} {{ {} }}", items.join(" "))),
        ]
    });
    prop::collection::vec(selections, 1..4).prop_map(|items| format!("{{ {} }}", items.join(" ")))
}

/// A document: operations and fragments, maybe garbled.
fn document() -> impl Strategy<Value = String> {
    let operation = (
        prop::sample::select(vec![
            "",
            "query",
            "query Q",
            "mutation M",
            "subscription S",
            "query A",
        ]),
        prop::sample::select(vec![
            "",
            "($a: Int)",
            "($a: Int, $b: String!)",
            "($c: TaskFilter, $d: DateTime)",
            "($a: [Int!]! = [1])",
            "($b: Nope)",
        ]),
        selection_set(),
    )
        .prop_map(|(head, vars, set)| {
            if head.is_empty() {
                set
            } else {
                format!("{head}{vars} {set}")
            }
        });
    let fragment = (
        prop::sample::select(vec!["F0", "F1"]),
        name(),
        selection_set(),
    )
        .prop_map(|(f, on, set)| format!("fragment {f} on {on} {set}"));
    let built = prop_oneof![
        (
            prop::collection::vec(operation, 1..3),
            prop::collection::vec(fragment, 0..3),
        )
            .prop_map(|(ops, frags)| format!("{} {}", ops.join(" "), frags.join(" "))),
        templated(),
    ];
    // Garble: cut it somewhere, or put stray text in.
    (built, any::<u8>(), any::<prop::sample::Index>(), text()).prop_map(
        |(doc, garble, at, stray)| {
            let cut = (0..=doc.len())
                .filter(|i| doc.is_char_boundary(*i))
                .nth(at.index(doc.len() + 1))
                .unwrap_or(doc.len());
            match garble % 8 {
                0 => doc[..cut].to_owned(),
                1 => format!("{}{stray}{}", &doc[..cut], &doc[cut..]),
                2 => stray,
                _ => doc,
            }
        },
    )
}

/// Real operations of the schema, with a random value (`V`) where an
/// argument goes: these pass validation as often as not and reach
/// execution and coercion, where a wrong value is the caller's mistake.
const TEMPLATES: &[&str] = &[
    "{ tasks(first: V) { nodes { id status } } }",
    "query($a: Int) { connections(first: $a) { nodes { id } } }",
    "query($a: Int, $b: String!) { apiKeys(first: $a, after: $b) { nodes { id } } }",
    "{ memories(filter: V) { nodes { id } } }",
    "query($c: MemoryFilter) { memories(filter: $c) { nodes { id } } }",
    "query($d: DateTime) { auditLog(filter: { since: $d }) { nodes { id } } }",
    "{ auditLog(filter: { since: V, until: V }) { nodes { id } } }",
    "{ task(id: V) { id status } }",
    "{ node(id: V) { id } }",
    "{ searchMemories(query: V, limit: V) { hits { memory { id } } } }",
    "{ neighborhood(entityId: V, depth: V) { neighbors { entity { id } } } }",
    "query($c: TaskFilter, $a: Int) { tasks(filter: $c, first: $a) { nodes { id } } }",
    "mutation { startTask(input: V) { task { id } } }",
    "mutation($b: String!) { startTask(input: { input: $b, maxSteps: V }) { task { id } } }",
];

fn templated() -> impl Strategy<Value = String> {
    (
        prop::sample::select(TEMPLATES),
        prop::collection::vec(value(), 2),
    )
        .prop_map(|(template, values)| {
            let mut parts = template.split('V');
            let mut out = parts.next().unwrap_or_default().to_owned();
            for (i, part) in parts.enumerate() {
                out.push_str(&values[i % values.len()]);
                out.push_str(part);
            }
            out
        })
}

/// Variables: usually an object with the names documents use.
fn variables() -> impl Strategy<Value = Value> {
    let scalar = prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(Value::from),
        Just(json!(99_999_999_999u64)),
        Just(json!(1.5)),
        Just(json!("x")),
        Just(json!("2026-13-45T99:00:00Z")),
        Just(json!("2026-11-24T10:00:00Z")),
        Just(json!({"input": "hello", "maxSteps": 99_999_999_999u64})),
        Just(json!(true)),
        Just(json!({"statuses": ["COMPLETED"]})),
        Just(json!({"statuses": "nope"})),
        Just(json!([1, 2, 3])),
    ];
    prop_oneof![
        4 => prop::collection::btree_map(
            prop::sample::select(vec!["a", "b", "c", "d", "e"]),
            scalar.clone(),
            0..4
        )
        .prop_map(|m| json!(m)),
        1 => scalar,
    ]
}

fn credential() -> impl Strategy<Value = Credential> {
    prop_oneof![
        3 => Just(Credential::None),
        3 => Just(Credential::Admin),
        1 => Just(Credential::Member),
        1 => Just(Credential::PlatformAdmin),
        1 => Just(Credential::Expired),
        1 => Just(Credential::Forged),
        1 => prop::sample::select(vec![
            "Bearer", "Bearer ", "Basic YWxhZGRpbjpvcGVuc2VzYW1l", "Bearer bsk_nope",
            "Bearer a.b.c", "bearer x", "Bearer eyJhbGciOiJub25lIn0.e30.",
        ])
        .prop_map(|s| Credential::Raw(s.to_owned())),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let method = prop_oneof![
        6 => Just(Method::Post),
        3 => Just(Method::Get),
        1 => prop::sample::select(vec![
            "", "{", "null", "[]", "{\"query\": 1}", "{\"qeury\": \"{ __typename }\"}",
            "{\"query\": \"{ __typename }\", \"variables\": \"x\"}",
            "{\"query\": \"{ __typename }\", \"extensions\": {\"persistedQuery\": {\"version\": 2}}}",
        ])
        .prop_map(|s| Method::PostRaw(s.to_owned())),
    ];
    (
        method,
        document(),
        variables(),
        prop::option::of(prop::sample::select(vec!["Q", "M", "S", "A", "Nope"])),
        credential(),
        prop::option::of(prop::sample::select(vec![
            "application/json",
            "application/graphql-response+json",
            "*/*",
            "application/graphql-response+json, application/json;q=0.9",
        ])),
    )
        .prop_map(
            |(method, document, variables, operation_name, credential, accept)| Case {
                method,
                document,
                variables,
                operation_name: operation_name.map(str::to_owned),
                credential,
                accept,
            },
        )
}

/// The `Authorization` header for a case.
fn authorization(app: &TestApp, credential: &Credential) -> Option<String> {
    let bearer = |token: String| Some(format!("Bearer {token}"));
    match credential {
        Credential::None => None,
        Credential::Admin => bearer(app.admin_token("acme")),
        Credential::Member => bearer(app.token(Some("acme"), &[Role::Member])),
        Credential::PlatformAdmin => bearer(app.platform_admin_token()),
        Credential::Expired => bearer(app.token_for(
            "tester",
            Some("acme"),
            &[Role::TenantAdmin],
            chrono::Duration::hours(-2),
        )),
        Credential::Forged => {
            let mut other = app.auth.clone();
            other.hs256_secret = Some(secrecy::SecretString::from("another key".to_owned()));
            let token = brainstem_api::auth::mint_token(
                &other,
                brainstem_api::auth::TokenRequest {
                    subject: "forger",
                    tenant: Some("acme"),
                    roles: &[Role::PlatformAdmin],
                    ttl: chrono::Duration::hours(1),
                },
            )
            .unwrap();
            bearer(token)
        }
        Credential::Raw(header) => Some(header.clone()),
    }
}

/// Sends one case; returns the status and body text.
async fn send(app: &TestApp, case: &Case) -> (u16, String) {
    let mut request = match &case.method {
        Method::Post => {
            let mut body = json!({"query": case.document, "variables": case.variables});
            if let Some(name) = &case.operation_name {
                body["operationName"] = json!(name);
            }
            app.http
                .post(app.url("/graphql"))
                .header("content-type", "application/json")
                .body(body.to_string())
        }
        Method::PostRaw(body) => app
            .http
            .post(app.url("/graphql"))
            .header("content-type", "application/json")
            .body(body.clone()),
        Method::Get => {
            let mut query = vec![
                ("query", case.document.clone()),
                ("variables", case.variables.to_string()),
            ];
            if let Some(name) = &case.operation_name {
                query.push(("operationName", name.clone()));
            }
            app.http.get(app.url("/graphql")).query(&query)
        }
    };
    if let Some(header) = authorization(app, &case.credential) {
        request = request.header("authorization", header);
    }
    if let Some(accept) = case.accept {
        request = request.header("accept", accept);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// What must hold of every answer; `Err` says what did not.
fn check(status: u16, text: &str) -> Result<(), String> {
    if status >= 500 {
        return Err(format!("status {status}: {text}"));
    }
    let body: Value = serde_json::from_str(text)
        .map_err(|e| format!("status {status}, not JSON ({e}): {text}"))?;
    let errors = body.get("errors").and_then(Value::as_array);
    if status != 200 && errors.is_none_or(|e| e.is_empty()) {
        return Err(format!("status {status} without errors: {text}"));
    }
    for error in errors.into_iter().flatten() {
        let code = error["extensions"]["code"].as_str().unwrap_or_default();
        if !CODES.contains(&code) {
            return Err(format!("an error without a known code: {text}"));
        }
    }
    if errors.is_none() && body.get("data").is_none() {
        return Err(format!("neither data nor errors: {text}"));
    }
    Ok(())
}

async fn random_requests_are_answered_cleanly(backend: Backend) {
    let timeout = Duration::from_secs(5);
    let app = TestApp::spawn_with(backend, |c| {
        // Every case must get through to the document, not stop at the
        // limiter: limits have their own tests.
        c.rate_limit_per_key_rps = 0.0;
        c.rate_limit_per_tenant_rps = 0.0;
        c.rate_limit_anonymous_rps = 0.0;
        c.rate_limit_failed_auth_rps = 0.0;
        // The server's own limit is below the time each answer is allowed.
        c.graphql_request_timeout_ms = 4000;
    })
    .await;
    app.create_tenant("acme").await;
    let handle = tokio::runtime::Handle::current();
    let outcome = tokio::task::spawn_blocking(move || {
        let config = ProptestConfig {
            cases: CASES,
            failure_persistence: None,
            ..ProptestConfig::default()
        };
        let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
        let mut runner = TestRunner::new_with_rng(config, rng);
        runner
            .run(&case(), |case| {
                let started = Instant::now();
                let (status, text) = handle.block_on(send(&app, &case));
                let took = started.elapsed();
                prop_assert!(took < timeout, "took {took:?}");
                check(status, &text).map_err(TestCaseError::fail)?;
                Ok(())
            })
            .map_err(|failure| failure.to_string())
    })
    .await
    .unwrap();
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}

#[test]
fn the_check_fails_what_it_should() {
    assert!(check(200, r#"{"data": {"a": 1}}"#).is_ok());
    assert!(
        check(
            400,
            r#"{"errors": [{"message": "x", "extensions": {"code": "BAD_USER_INPUT"}}]}"#
        )
        .is_ok()
    );
    assert!(
        check(
            500,
            r#"{"errors": [{"message": "x", "extensions": {"code": "INTERNAL"}}]}"#
        )
        .is_err()
    );
    assert!(check(200, r#"{"errors": [{"message": "x"}]}"#).is_err());
    assert!(check(200, "not json").is_err());
    assert!(check(400, r#"{"data": null}"#).is_err());
    assert!(check(200, r#"{}"#).is_err());
}
