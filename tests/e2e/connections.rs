//! Connections: a tenant's credentials for external systems. Secrets are
//! encrypted at rest, appear in no response and no log line (checked on the
//! real binary's stderr at trace level), are confined to their tenant, and
//! survive a key rotation.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    sync::mpsc,
};

use brainstem_api::{
    AuthConfig,
    auth::{TokenRequest, mint_token},
};
use brainstem_domain::{
    Domain, Role, TenantScope,
    crypto::{EncryptionKey, Keyring},
};
use secrecy::SecretString;
use serde_json::{Value, json};

use crate::{
    for_both_backends,
    helpers::{self, Backend, TestApp},
    on_both_backends,
};

on_both_backends!(
    connections_are_managed_without_ever_showing_the_secret,
    another_tenants_connection_is_not_found,
    only_admins_manage_connections_and_input_is_checked,
);

for_both_backends!(secrets_survive_key_rotation, secrets_never_reach_the_logs,);

const FIELDS: &str = "id name kind config hasSecret createdAt updatedAt";

fn create_mutation() -> String {
    format!(
        "mutation($input: CreateConnectionInput!) {{ createConnection(input: $input) {{ connection {{ {FIELDS} }} }} }}"
    )
}

fn update_mutation() -> String {
    format!(
        "mutation($input: UpdateConnectionInput!) {{ updateConnection(input: $input) {{ connection {{ {FIELDS} }} }} }}"
    )
}

const DELETE: &str =
    "mutation($id: ID!) { deleteConnection(input: {id: $id}) { connection { id name } } }";
const LIST: &str =
    "{ connections(first: 50) { edges { node { id name kind config hasSecret } } } }";
const NODE: &str = "query($id: ID!) { node(id: $id) { id ... on Connection { name hasSecret } } }";

async fn create(app: &TestApp, token: &str, input: Value) -> helpers::Gql {
    app.graphql(Some(token), &create_mutation(), json!({"input": input}))
        .await
}

async fn tenant_scope(domain: &Domain, slug: &str) -> TenantScope {
    TenantScope::new(domain.tenants.resolve_claim(slug).await.unwrap().id)
}

async fn connections_are_managed_without_ever_showing_the_secret(app: TestApp) {
    app.create_tenant("acme").await;
    let admin = app.admin_token("acme");
    let secret = format!("s3cret-{}", uuid::Uuid::now_v7());
    let res = create(
        &app,
        &admin,
        json!({"name": "crm", "kind": "http", "config": {"baseUrl": "https://crm.example"}, "secret": {"apiKey": secret}}),
    )
    .await;
    let created = res.data()["createConnection"]["connection"].clone();
    assert_eq!(created["name"], "crm");
    assert_eq!(created["kind"], "http");
    assert_eq!(created["config"], json!({"baseUrl": "https://crm.example"}));
    assert_eq!(created["hasSecret"], true);
    let id = created["id"].as_str().unwrap().to_owned();
    let mut responses = vec![res.body.to_string()];

    // Listed and fetched by id, without the secret.
    let res = app.graphql(Some(&admin), LIST, json!({})).await;
    assert_eq!(
        res.data()["connections"]["edges"][0]["node"]["id"],
        id.as_str()
    );
    responses.push(res.body.to_string());
    let res = app.graphql(Some(&admin), NODE, json!({"id": id})).await;
    assert_eq!(res.data()["node"]["name"], "crm");
    responses.push(res.body.to_string());

    // Stored only encrypted, with a key id.
    let rows = sea_orm::ConnectionTrait::query_all_raw(
        &app.outside_db().await,
        sea_orm::Statement::from_string(
            app.domain.db.get_database_backend(),
            "SELECT secret_ciphertext, secret_key_id, config FROM connections",
        ),
    )
    .await
    .unwrap();
    let ciphertext: String = rows[0].try_get("", "secret_ciphertext").unwrap();
    let key_id: String = rows[0].try_get("", "secret_key_id").unwrap();
    assert!(!ciphertext.contains(&secret) && ciphertext.len() > 40);
    assert_eq!(key_id.len(), 16);

    // Tools get it decrypted, by name.
    let scope = tenant_scope(&app.domain, "acme").await;
    let resolved = helpers::in_tenant(scope, app.domain.connections.resolve(scope, "crm"))
        .await
        .unwrap();
    assert_eq!(
        resolved.secret.as_ref().unwrap().expose(),
        &json!({"apiKey": secret})
    );
    assert_eq!(resolved.config, json!({"baseUrl": "https://crm.example"}));
    assert!(!format!("{resolved:?}").contains(&secret));

    // Rotate the secret and rename.
    let rotated = format!("r0tated-{}", uuid::Uuid::now_v7());
    let res = app
        .graphql(
            Some(&admin),
            &update_mutation(),
            json!({"input": {"id": id, "name": "crm-prod", "secret": {"apiKey": rotated}}}),
        )
        .await;
    let updated = &res.data()["updateConnection"]["connection"];
    assert_eq!(updated["name"], "crm-prod");
    assert_eq!(updated["hasSecret"], true);
    assert_eq!(updated["config"], json!({"baseUrl": "https://crm.example"}));
    responses.push(res.body.to_string());
    let resolved = helpers::in_tenant(scope, app.domain.connections.resolve(scope, "crm-prod"))
        .await
        .unwrap();
    assert_eq!(
        resolved.secret.unwrap().expose()["apiKey"],
        rotated.as_str()
    );
    assert!(
        helpers::in_tenant(scope, app.domain.connections.resolve(scope, "crm"))
            .await
            .is_err()
    );

    // Change only the config: the secret stays.
    let res = app
        .graphql(
            Some(&admin),
            &update_mutation(),
            json!({"input": {"id": id, "config": {"baseUrl": "https://b.example"}}}),
        )
        .await;
    assert_eq!(
        res.data()["updateConnection"]["connection"]["hasSecret"],
        true
    );
    let resolved = helpers::in_tenant(scope, app.domain.connections.resolve(scope, "crm-prod"))
        .await
        .unwrap();
    assert_eq!(
        resolved.secret.unwrap().expose()["apiKey"],
        rotated.as_str()
    );

    // Remove the secret.
    let res = app
        .graphql(
            Some(&admin),
            &update_mutation(),
            json!({"input": {"id": id, "secret": null}}),
        )
        .await;
    assert_eq!(
        res.data()["updateConnection"]["connection"]["hasSecret"],
        false
    );
    let resolved = helpers::in_tenant(scope, app.domain.connections.resolve(scope, "crm-prod"))
        .await
        .unwrap();
    assert!(resolved.secret.is_none());

    // The audit log records the changes, never the secret.
    let res = app
        .graphql(
            Some(&admin),
            "{ auditLog(filter: {actionPrefix: \"connection.\"}) { edges { node { action data } } } }",
            json!({}),
        )
        .await;
    let audit = res.data()["auditLog"]["edges"].to_string();
    assert!(
        audit.contains("connection.create") && audit.contains("secret_rotated"),
        "{audit}"
    );
    responses.push(res.body.to_string());

    // Delete.
    let res = app.graphql(Some(&admin), DELETE, json!({"id": id})).await;
    assert_eq!(
        res.data()["deleteConnection"]["connection"]["name"],
        "crm-prod"
    );
    let res = app.graphql(Some(&admin), LIST, json!({})).await;
    assert_eq!(res.data()["connections"]["edges"], json!([]));
    let res = app.graphql(Some(&admin), NODE, json!({"id": id})).await;
    assert_eq!(res.error_code(), "NOT_FOUND");

    for body in responses {
        assert!(
            !body.contains(&secret),
            "a response showed the secret: {body}"
        );
        assert!(
            !body.contains(&rotated),
            "a response showed the secret: {body}"
        );
    }
}

async fn another_tenants_connection_is_not_found(app: TestApp) {
    app.create_tenant("acme").await;
    app.create_tenant("other").await;
    let res = create(
        &app,
        &app.admin_token("acme"),
        json!({"name": "crm", "kind": "http", "secret": {"token": "acme-only"}}),
    )
    .await;
    let id = res.data()["createConnection"]["connection"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, other_key) = app.create_api_key("other", &["admin"]).await;
    for credential in [app.admin_token("other"), other_key] {
        let res = app
            .graphql(Some(&credential), NODE, json!({"id": id}))
            .await;
        assert_eq!(res.error_code(), "NOT_FOUND", "{}", res.body);
        let res = app
            .graphql(
                Some(&credential),
                &update_mutation(),
                json!({"input": {"id": id, "secret": {"token": "hijack"}}}),
            )
            .await;
        assert_eq!(res.error_code(), "NOT_FOUND", "{}", res.body);
        let res = app
            .graphql(Some(&credential), DELETE, json!({"id": id}))
            .await;
        assert_eq!(res.error_code(), "NOT_FOUND", "{}", res.body);
        let res = app.graphql(Some(&credential), LIST, json!({})).await;
        assert_eq!(res.data()["connections"]["edges"], json!([]));
    }
    // The same name is free in another tenant, and resolves separately.
    let res = create(
        &app,
        &app.admin_token("other"),
        json!({"name": "crm", "kind": "http", "secret": {"token": "other-only"}}),
    )
    .await;
    assert_eq!(res.data()["createConnection"]["connection"]["name"], "crm");
    let acme = tenant_scope(&app.domain, "acme").await;
    let other = tenant_scope(&app.domain, "other").await;
    let a = helpers::in_tenant(acme, app.domain.connections.resolve(acme, "crm"))
        .await
        .unwrap();
    let b = helpers::in_tenant(other, app.domain.connections.resolve(other, "crm"))
        .await
        .unwrap();
    assert_eq!(a.secret.unwrap().expose()["token"], "acme-only");
    assert_eq!(b.secret.unwrap().expose()["token"], "other-only");

    // A ciphertext copied into another tenant's row does not decrypt there.
    let sql = "UPDATE connections SET secret_ciphertext = (SELECT c.secret_ciphertext FROM connections c JOIN tenants t ON t.id = c.tenant_id WHERE t.slug = 'acme') WHERE tenant_id = (SELECT id FROM tenants WHERE slug = 'other')";
    sea_orm::ConnectionTrait::execute_unprepared(&app.outside_db().await, sql)
        .await
        .unwrap();
    assert!(
        helpers::in_tenant(other, app.domain.connections.resolve(other, "crm"))
            .await
            .is_err()
    );
}

async fn only_admins_manage_connections_and_input_is_checked(app: TestApp) {
    app.create_tenant("acme").await;
    let (_, reader) = app
        .create_api_key("acme", &["tasks:read", "memory:write"])
        .await;
    let (_, admin_key) = app.create_api_key("acme", &["admin"]).await;
    let input = json!({"name": "mail", "kind": "smtp", "config": {"host": "mx"}, "secret": {"password": "p"}});
    for credential in [app.token(Some("acme"), &[Role::Member]), reader] {
        let res = create(&app, &credential, input.clone()).await;
        assert_eq!(res.error_code(), "FORBIDDEN", "{}", res.body);
        let res = app.graphql(Some(&credential), LIST, json!({})).await;
        assert_eq!(res.error_code(), "FORBIDDEN", "{}", res.body);
    }
    let res = app.graphql(None, LIST, json!({})).await;
    assert_eq!(res.error_code(), "UNAUTHENTICATED");
    // An API key with `admin` may.
    let res = create(&app, &admin_key, input.clone()).await;
    assert_eq!(
        res.data()["createConnection"]["connection"]["hasSecret"],
        true
    );
    // Names are unique per tenant.
    let res = create(&app, &admin_key, input).await;
    assert_eq!(res.error_code(), "CONFLICT", "{}", res.body);
    // Bad input, including a config that holds something secret-looking.
    for bad in [
        json!({"name": "a b", "kind": "http"}),
        json!({"name": "x", "kind": "HTTP"}),
        json!({"name": "x", "kind": "http", "config": [1]}),
        json!({"name": "x", "kind": "http", "secret": "plain"}),
        json!({"name": "x", "kind": "http", "config": {"auth": {"password": "oops"}}}),
    ] {
        let res = create(&app, &app.admin_token("acme"), bad.clone()).await;
        assert_eq!(res.error_code(), "BAD_USER_INPUT", "{bad}: {}", res.body);
        assert!(!res.body.to_string().contains("oops"));
    }
    // A connection without a secret is fine.
    let res = create(
        &app,
        &app.admin_token("acme"),
        json!({"name": "public-api", "kind": "http"}),
    )
    .await;
    assert_eq!(
        res.data()["createConnection"]["connection"]["hasSecret"],
        false
    );
    assert_eq!(
        res.data()["createConnection"]["connection"]["config"],
        json!({})
    );
}

async fn secrets_survive_key_rotation(backend: Backend) {
    let old_key = EncryptionKey::generate_base64();
    let app = TestApp::spawn_with(backend, |c| {
        c.connection_encryption_key = Some(SecretString::from(old_key.clone()));
    })
    .await;
    app.create_tenant("acme").await;
    for name in ["crm", "mail"] {
        create(
            &app,
            &app.admin_token("acme"),
            json!({"name": name, "kind": "http", "secret": {"token": "t0"}}),
        )
        .await
        .data();
    }
    let scope = tenant_scope(&app.domain, "acme").await;
    let old = EncryptionKey::from_base64(&old_key).unwrap();
    let new = EncryptionKey::from_base64(&EncryptionKey::generate_base64()).unwrap();
    let key_id = || async {
        let rows = sea_orm::ConnectionTrait::query_all_raw(
            &app.outside_db().await,
            sea_orm::Statement::from_string(
                app.domain.db.get_database_backend(),
                "SELECT secret_key_id FROM connections ORDER BY name",
            ),
        )
        .await
        .unwrap();
        rows.iter()
            .map(|r| r.try_get::<String>("", "secret_key_id").unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(key_id().await, [old.id(), old.id()]);

    // A new current key with the old one kept: still readable, and re-sealed
    // with the new key when used ...
    let rotated = app
        .domain
        .clone()
        .with_connection_keys(Keyring::new(new.clone(), vec![old.clone()]));
    let c = helpers::in_tenant(scope, rotated.connections.resolve(scope, "crm"))
        .await
        .unwrap();
    assert_eq!(c.secret.unwrap().expose()["token"], "t0");
    assert_eq!(key_id().await, [new.id(), old.id()]);
    // ... or by `reencrypt_connections` (`brainstem reencrypt-connections`),
    // which does the rest in every tenant, as an audited platform operation.
    let platform_admin = brainstem_domain::Principal {
        actor: brainstem_domain::Actor::User("ops".into()),
        tenant: None,
        roles: [Role::PlatformAdmin].into(),
        scopes: Default::default(),
    };
    let platform = rotated
        .audit
        .open_platform_scope(&platform_admin, "connection.reencrypt", "connections", None)
        .await
        .unwrap();
    assert_eq!(
        rotated
            .reencrypt_secrets(&platform)
            .await
            .unwrap()
            .connections,
        1
    );
    assert_eq!(key_id().await, [new.id(), new.id()]);
    assert_eq!(
        helpers::in_tenant(scope, rotated.connections.reencrypt(scope))
            .await
            .unwrap(),
        0
    );

    // Now the old key can go.
    let only_new = app
        .domain
        .clone()
        .with_connection_keys(Keyring::new(new, vec![]));
    let c = helpers::in_tenant(scope, only_new.connections.resolve(scope, "crm"))
        .await
        .unwrap();
    assert_eq!(c.secret.unwrap().expose()["token"], "t0");
    // And the old key alone no longer opens it.
    let only_old = app
        .domain
        .clone()
        .with_connection_keys(Keyring::new(old, vec![]));
    assert!(
        helpers::in_tenant(scope, only_old.connections.resolve(scope, "mail"))
            .await
            .is_err()
    );
}

/// Runs the real binary with every log at `trace`, drives connections with
/// secrets through create, update, list and errors, and reads every line it
/// wrote.
async fn secrets_never_reach_the_logs(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let database_url = match backend {
        Backend::Sqlite => format!("sqlite://{}", dir.path().join("b.db").display()),
        Backend::Postgres => helpers::fresh_postgres_database().await,
    };
    let jwt_secret = uuid::Uuid::now_v7().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_brainstem"))
        .arg("serve")
        .current_dir(dir.path())
        .env("BRAINSTEM_BIND", "127.0.0.1:0")
        .env("BRAINSTEM_DATABASE_URL", &database_url)
        // The offline providers: no models fetched at start.
        .env("BRAINSTEM_LLM_PROVIDER", "offline")
        .env("BRAINSTEM_EMBEDDING_PROVIDER", "offline")
        .env("BRAINSTEM_JWT_SECRET", &jwt_secret)
        .env(
            "BRAINSTEM_CONNECTION_ENCRYPTION_KEY",
            EncryptionKey::generate_base64(),
        )
        .env("RUST_LOG", "trace")
        .env("BRAINSTEM_LOG_FORMAT", "json")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (address_tx, address_rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut log = String::new();
        for line in BufReader::new(stderr).lines() {
            let line = line.unwrap();
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let addr: String = rest.chars().take_while(|c| *c != ' ').collect();
                let _ = address_tx.send(addr);
            }
            log.push_str(&line);
            log.push('\n');
        }
        log
    });
    let out_reader = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap());
    let address = tokio::task::spawn_blocking(move || {
        address_rx
            .recv_timeout(helpers::WAIT)
            .expect("the server starts")
    })
    .await
    .unwrap();
    let url = format!("http://{address}/graphql");
    let auth = AuthConfig {
        issuer: "brainstem".into(),
        audience: "brainstem".into(),
        hs256_secret: Some(SecretString::from(jwt_secret)),
        rs256_public_key_pem: None,
        leeway_secs: 0,
    };
    let token = |tenant: Option<&str>, role: Role| {
        mint_token(
            &auth,
            TokenRequest {
                subject: "ops",
                tenant,
                roles: &[role],
                ttl: chrono::Duration::hours(1),
            },
        )
        .unwrap()
    };
    let http = crate::helpers::http_client();
    let post = |token: String, query: String, variables: Value| {
        let http = http.clone();
        let url = url.clone();
        async move {
            let res = http
                .post(url)
                .header("content-type", "application/json")
                .header("authorization", format!("Bearer {token}"))
                .body(json!({"query": query, "variables": variables}).to_string())
                .send()
                .await
                .unwrap();
            res.text().await.unwrap()
        }
    };
    post(
        token(None, Role::PlatformAdmin),
        "mutation { createTenant(input: {slug: \"acme\", name: \"Acme\"}) { tenant { id } } }"
            .into(),
        json!({}),
    )
    .await;
    let admin = token(Some("acme"), Role::TenantAdmin);
    let secrets: Vec<String> = (0..4)
        .map(|i| format!("leak{i}-{}", uuid::Uuid::now_v7().simple()))
        .collect();
    let mut bodies = Vec::new();
    // Create, with the secret in variables and inline in the query text.
    bodies.push(
        post(
            admin.clone(),
            create_mutation(),
            json!({"input": {"name": "crm", "kind": "http", "secret": {"password": secrets[0]}}}),
        )
        .await,
    );
    let inline = format!(
        "mutation {{ createConnection(input: {{name: \"mail\", kind: \"smtp\", secret: {{password: \"{}\"}}}}) {{ connection {{ id }} }} }}",
        secrets[1]
    );
    bodies.push(post(admin.clone(), inline, json!({})).await);
    let id = serde_json::from_str::<Value>(&bodies[0]).unwrap()["data"]["createConnection"]
        ["connection"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Rotate it.
    bodies.push(
        post(
            admin.clone(),
            update_mutation(),
            json!({"input": {"id": id, "secret": {"password": secrets[2]}}}),
        )
        .await,
    );
    // Errors that carry a secret in their input: a duplicate name, a bad
    // config, and a member who may not.
    bodies.push(
        post(
            admin.clone(),
            create_mutation(),
            json!({"input": {"name": "crm", "kind": "http", "secret": {"password": secrets[3]}}}),
        )
        .await,
    );
    bodies.push(
        post(
            admin.clone(),
            create_mutation(),
            json!({"input": {"name": "x", "kind": "http", "config": {"token": secrets[3]}}}),
        )
        .await,
    );
    bodies.push(
        post(
            token(Some("acme"), Role::Member),
            create_mutation(),
            json!({"input": {"name": "y", "kind": "http", "secret": {"password": secrets[3]}}}),
        )
        .await,
    );
    bodies.push(post(admin.clone(), LIST.into(), json!({})).await);
    assert!(bodies[0].contains("\"hasSecret\":true"), "{}", bodies[0]);
    assert!(bodies[3].contains("CONFLICT"), "{}", bodies[3]);
    assert!(bodies[4].contains("BAD_USER_INPUT"), "{}", bodies[4]);
    assert!(bodies[5].contains("FORBIDDEN"), "{}", bodies[5]);
    assert!(bodies[6].contains("\"mail\""), "{}", bodies[6]);

    child.kill().unwrap();
    child.wait().unwrap();
    let log = reader.join().unwrap();
    let out = out_reader.join().unwrap();
    // The capture is real: trace-level lines of the requests are there.
    assert!(
        log.contains("TRACE") || log.contains("\"level\":\"TRACE\""),
        "no trace lines"
    );
    assert!(log.contains("/graphql"), "request spans are logged");
    assert!(log.lines().count() > 20, "{log}");
    // ... and so are the connection operations themselves, with their inputs
    // printed through the redacting `Debug`.
    assert!(log.contains("connection created"), "{log}");
    assert!(log.contains("connection updated"), "{log}");
    assert!(log.contains("[REDACTED]"), "{log}");
    for secret in &secrets {
        for body in &bodies {
            assert!(
                !body.contains(secret.as_str()),
                "a response showed a secret: {body}"
            );
        }
        assert!(!log.contains(secret.as_str()), "the log shows a secret");
        assert!(!out.contains(secret.as_str()), "stdout shows a secret");
    }
}
