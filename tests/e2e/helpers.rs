//! `TestApp::spawn` starts the real application against a throwaway
//! database; helpers named after what they do talk to it like a client.
//!
//! PostgreSQL tests need `TEST_DATABASE_URL` (a superuser URL; `scripts/test`
//! provisions a server and sets it). The schema is migrated once into a
//! template database; each test gets `CREATE DATABASE … TEMPLATE …`.

#![allow(dead_code)]

use std::time::Duration;

use brainstem::{
    config::{Config, EmbeddingProvider, LlmProvider},
    startup::Application,
};
use brainstem_api::{
    AuthConfig,
    auth::{TokenRequest, mint_token},
};
use std::sync::Arc;

use brainstem_domain::{Domain, Role, executor::Executor, housekeeping::Housekeeping, tools::Tool};
use futures_util::{SinkExt, StreamExt};
use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection};
use secrecy::SecretString;
use serde_json::{Value, json};
use tokio::{net::TcpStream, sync::oneshot};
use tokio_tungstenite::{
    MaybeTlsStream, WebSocketStream,
    tungstenite::{Message, client::IntoClientRequest, http::HeaderValue},
};

/// Run each named `async fn(TestApp)` as two tests, `…::sqlite` and
/// `…::postgres`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    let app = $crate::helpers::TestApp::spawn($crate::helpers::Backend::Sqlite).await;
                    super::$name(app).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    let app = $crate::helpers::TestApp::spawn($crate::helpers::Backend::Postgres).await;
                    super::$name(app).await;
                }
            }
        )*
    };
}

/// Like [`on_both_backends!`], for tests that spawn the app themselves:
/// each named `async fn(Backend)` runs as `…::sqlite` and `…::postgres`.
#[macro_export]
macro_rules! for_both_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name($crate::helpers::Backend::Sqlite).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name($crate::helpers::Backend::Postgres).await;
                }
            }
        )*
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A plain HTTP client for tests. reqwest is built without a default TLS
/// provider, so the process's provider is installed first.
pub fn http_client() -> reqwest::Client {
    brainstem_domain::http_client::install_tls_provider();
    reqwest::Client::new()
}

/// Upper bound for any single wait on the server; a safety net, not a delay.
pub const WAIT: Duration = Duration::from_secs(20);

/// Check `condition` every few milliseconds until it yields a value; fail
/// naming `what` was awaited if [`WAIT`] passes first. Every poll loop of
/// the suite goes through here (or has its own deadline).
pub async fn poll_until<T>(what: &str, mut condition: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(value) = condition().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up after {WAIT:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub struct TestApp {
    pub backend: Backend,
    pub address: String,
    pub config: Config,
    pub auth: AuthConfig,
    pub domain: Domain,
    /// The app's executor; tests drive it with `run_once` (the app runs
    /// no background workers unless the config asks for them).
    pub executor: Executor,
    /// The upkeep beside the executor; tests run its reaper themselves
    /// (it runs in the background only with the executor's slots).
    pub housekeeping: Housekeeping,
    pub http: reqwest::Client,
    _tempdir: Option<tempfile::TempDir>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

impl TestApp {
    pub async fn spawn(backend: Backend) -> Self {
        Self::spawn_with(backend, |_| {}).await
    }

    /// Spawn with a configuration adjusted by `tweak`.
    pub async fn spawn_with(backend: Backend, tweak: impl FnOnce(&mut Config)) -> Self {
        Self::spawn_full(backend, tweak, Vec::new()).await
    }

    /// Spawn with extra tools registered beside the built-in ones.
    pub async fn spawn_with_tools(backend: Backend, tools: Vec<Arc<dyn Tool>>) -> Self {
        Self::spawn_full(backend, |_| {}, tools).await
    }

    pub async fn spawn_full(
        backend: Backend,
        tweak: impl FnOnce(&mut Config),
        tools: Vec<Arc<dyn Tool>>,
    ) -> Self {
        let (database_url, tempdir) = match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}", dir.path().join("brainstem.db").display());
                (url, Some(dir))
            }
            Backend::Postgres => (fresh_postgres_database().await, None),
        };
        // PostgreSQL deployments must configure the key; SQLite generates one.
        let connection_encryption_key = (backend == Backend::Postgres).then(|| {
            SecretString::from(brainstem_domain::crypto::EncryptionKey::generate_base64())
        });
        let mut config = Config {
            bind: "127.0.0.1:0".into(),
            database_url,
            database_max_connections: 5,
            jwt_secret: Some(SecretString::from(uuid::Uuid::now_v7().to_string())),
            jwt_leeway_secs: 0,
            workers: 0,
            executor_slots: 0,
            // The fake servers tests stand up listen on loopback, on any
            // port; production refuses loopback unless the operator lists it.
            http_allowed_hosts: vec!["127.0.0.1:*".into()],
            http_allowed_private: vec!["127.0.0.1/32".into()],
            connection_encryption_key,
            log: "warn".into(),
            // Tests run memory maintenance themselves, at times they choose.
            memory_maintenance_interval_secs: 0,
            memory_reembed_interval_secs: 0,
            // The suite relies on the offline providers' determinism; the
            // local models are chosen explicitly (`local_models.rs`).
            llm_provider: LlmProvider::Offline,
            embedding_provider: EmbeddingProvider::Offline,
            ..Config::default()
        };
        tweak(&mut config);
        Self::launch(backend, config, tools, tempdir).await
    }

    /// Another app on this app's database, with the same configuration
    /// (keys, secrets): a second server process, with its own event bus,
    /// listener and executor.
    pub async fn spawn_beside(&self, tools: Vec<Arc<dyn Tool>>) -> Self {
        Self::launch(self.backend, self.config.clone(), tools, None).await
    }

    /// Stop this app and start another on the same database, with the same
    /// configuration (keys, secrets): a restart.
    pub async fn restart(self) -> Self {
        self.restart_with(|_| {}).await
    }

    /// [`Self::restart`] with the configuration adjusted by `tweak` (an
    /// operator changing a setting).
    pub async fn restart_with(mut self, tweak: impl FnOnce(&mut Config)) -> Self {
        let tempdir = self._tempdir.take();
        let (backend, mut config) = (self.backend, self.config.clone());
        tweak(&mut config);
        drop(self);
        Self::launch(backend, config, Vec::new(), tempdir).await
    }

    /// Another process on this app's database, with its configuration
    /// (keys, secrets) adjusted by `tweak`: a second replica.
    pub async fn another_process(&self, tweak: impl FnOnce(&mut Config)) -> Self {
        let mut config = self.config.clone();
        config.bind = "127.0.0.1:0".into();
        tweak(&mut config);
        Self::launch(self.backend, config, Vec::new(), None).await
    }

    async fn launch(
        backend: Backend,
        config: Config,
        tools: Vec<Arc<dyn Tool>>,
        tempdir: Option<tempfile::TempDir>,
    ) -> Self {
        brainstem::telemetry::init(&config);
        let app = Application::build_with_tools(&config, tools)
            .await
            .expect("application builds");
        let executor = app.executor().clone();
        let housekeeping = app.housekeeping().clone();
        let address = format!("127.0.0.1:{}", app.port());
        let domain = app.domain().clone();
        let auth = brainstem::startup::auth_config(&config, &domain)
            .await
            .unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(app.run_until(async {
            let _ = rx.await;
        }));
        TestApp {
            backend,
            address,
            config,
            auth,
            domain,
            executor,
            housekeeping,
            http: http_client(),
            _tempdir: tempdir,
            shutdown: Some(tx),
        }
    }

    /// `/metrics` as the server exposes it.
    pub async fn metrics_text(&self) -> String {
        self.http
            .get(self.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.address, path)
    }

    /// A bearer token for `tenant` (slug) with `roles`, valid for an hour.
    pub fn token(&self, tenant: Option<&str>, roles: &[Role]) -> String {
        self.token_for("tester", tenant, roles, chrono::Duration::hours(1))
    }

    pub fn token_for(
        &self,
        subject: &str,
        tenant: Option<&str>,
        roles: &[Role],
        ttl: chrono::Duration,
    ) -> String {
        mint_token(
            &self.auth,
            TokenRequest {
                subject,
                tenant,
                roles,
                ttl,
            },
        )
        .unwrap()
    }

    pub fn platform_admin_token(&self) -> String {
        self.token(None, &[Role::PlatformAdmin])
    }

    pub fn admin_token(&self, tenant: &str) -> String {
        self.token(Some(tenant), &[Role::TenantAdmin])
    }

    /// POST a GraphQL request as `application/json`.
    pub async fn graphql(&self, token: Option<&str>, query: &str, variables: Value) -> Gql {
        let mut request = self
            .http
            .post(self.url("/graphql"))
            .header("content-type", "application/json")
            .body(json!({"query": query, "variables": variables}).to_string());
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        Gql::from(request.send().await.unwrap()).await
    }

    /// POST a GraphQL request with extra headers; `token` may be an API key.
    pub async fn graphql_with(
        &self,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Value,
    ) -> (Gql, reqwest::header::HeaderMap) {
        let mut request = self
            .http
            .post(self.url("/graphql"))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        let headers = response.headers().clone();
        (Gql::from(response).await, headers)
    }

    /// Create a tenant as a platform admin; returns its global id.
    pub async fn create_tenant(&self, slug: &str) -> String {
        let res = self
            .graphql(
                Some(&self.platform_admin_token()),
                "mutation($input: CreateTenantInput!) { createTenant(input: $input) { tenant { id slug } } }",
                json!({"input": {"slug": slug, "name": slug.to_uppercase()}}),
            )
            .await;
        res.data()["createTenant"]["tenant"]["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Create an API key in `tenant` as its admin; returns (global id, secret).
    pub async fn create_api_key(&self, tenant: &str, scopes: &[&str]) -> (String, String) {
        let res = self
            .graphql(
                Some(&self.admin_token(tenant)),
                "mutation($input: CreateApiKeyInput!) { createApiKey(input: $input) { apiKey { id } secret } }",
                json!({"input": {"name": format!("{tenant} key"), "scopes": scopes}}),
            )
            .await;
        let payload = &res.data()["createApiKey"];
        (
            payload["apiKey"]["id"].as_str().unwrap().to_owned(),
            payload["secret"].as_str().unwrap().to_owned(),
        )
    }

    /// Open a WebSocket to `/graphql/ws` speaking `subprotocol`.
    pub async fn ws_connect(&self, subprotocol: &str) -> WsClient {
        let mut request = format!("ws://{}/graphql/ws", self.address)
            .into_client_request()
            .unwrap();
        request.headers_mut().insert(
            "sec-websocket-protocol",
            HeaderValue::from_str(subprotocol).unwrap(),
        );
        let (stream, response) =
            tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(request))
                .await
                .expect("websocket connect in time")
                .expect("websocket connects");
        assert_eq!(
            response
                .headers()
                .get("sec-websocket-protocol")
                .and_then(|v| v.to_str().ok()),
            Some(subprotocol),
            "the server must accept the subprotocol"
        );
        WsClient { stream }
    }
}

/// A GraphQL HTTP response.
#[derive(Debug)]
pub struct Gql {
    pub status: u16,
    pub content_type: String,
    pub body: Value,
}

impl Gql {
    pub async fn from(response: reqwest::Response) -> Self {
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("response is not JSON ({e}): {text}"));
        Gql {
            status,
            content_type,
            body,
        }
    }

    /// The data, asserting there were no errors.
    pub fn data(&self) -> &Value {
        assert!(
            self.body.get("errors").is_none(),
            "unexpected errors: {}",
            self.body
        );
        assert_eq!(self.status, 200, "{}", self.body);
        &self.body["data"]
    }

    /// The code of the first error, asserting there is one.
    pub fn error_code(&self) -> String {
        self.body["errors"][0]["extensions"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("expected a coded error, got {}", self.body))
            .to_owned()
    }

    pub fn error_message(&self) -> String {
        self.body["errors"][0]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// What the server sent on a WebSocket.
#[derive(Debug)]
pub enum WsEvent {
    Json(Value),
    Closed(Option<u16>),
}

pub struct WsClient {
    stream: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl WsClient {
    pub async fn send(&mut self, message: Value) {
        self.stream
            .send(Message::Text(message.to_string().into()))
            .await
            .unwrap();
    }

    /// Send a text frame as it is (not necessarily JSON).
    pub async fn send_text(&mut self, text: &str) {
        self.stream
            .send(Message::Text(text.to_owned().into()))
            .await
            .unwrap();
    }

    /// The next text message as the server wrote it.
    pub async fn next_text(&mut self) -> String {
        loop {
            let message = tokio::time::timeout(WAIT, self.stream.next())
                .await
                .expect("the server answers in time");
            match message {
                Some(Ok(Message::Text(text))) => return text.as_str().to_owned(),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                other => panic!("expected a text message, got {other:?}"),
            }
        }
    }

    /// The next text message or the close, skipping pings.
    pub async fn next_event(&mut self) -> WsEvent {
        self.next_event_within(WAIT).await
    }

    /// [`WsClient::next_event`], for a message that may take up to `wait`
    /// (a long job's next step on a slow backend).
    pub async fn next_event_within(&mut self, wait: Duration) -> WsEvent {
        loop {
            let message = tokio::time::timeout(wait, self.stream.next())
                .await
                .expect("the server answers in time");
            match message {
                None => return WsEvent::Closed(None),
                Some(Err(_)) => return WsEvent::Closed(None),
                Some(Ok(Message::Text(text))) => {
                    return WsEvent::Json(serde_json::from_str(text.as_str()).unwrap());
                }
                Some(Ok(Message::Close(frame))) => {
                    return WsEvent::Closed(frame.map(|f| u16::from(f.code)));
                }
                Some(Ok(_)) => continue,
            }
        }
    }

    /// Send `connection_init` with a bearer token (or none).
    pub async fn init(&mut self, token: Option<&str>) {
        let payload = match token {
            Some(t) => json!({"Authorization": format!("Bearer {t}")}),
            None => json!({}),
        };
        self.send(json!({"type": "connection_init", "payload": payload}))
            .await;
    }
}

/// The role the server connects as in PostgreSQL tests: it owns the schema
/// (it runs the migrations) but is no superuser, so row-level security binds
/// it (`FORCE ROW LEVEL SECURITY`), as in a deployment.
pub const APP_ROLE: &str = "brainstem_app";

/// Create a fresh PostgreSQL database from the migrated template; returns
/// its URL for [`APP_ROLE`]. (`superuser_url` gives the same database as the
/// superuser, which row-level security does not bind.)
pub async fn fresh_postgres_database() -> String {
    let base = std::env::var("TEST_DATABASE_URL").expect(
        "PostgreSQL tests need TEST_DATABASE_URL (a superuser URL); scripts/test provisions one",
    );
    let (server, _) = base
        .rsplit_once('/')
        .expect("TEST_DATABASE_URL ends in /<database>");
    let template = template_name();
    let admin = connect_single(&base).await;
    // One process migrates the template; the others wait on the lock.
    admin
        .execute_unprepared("SELECT pg_advisory_lock(727274)")
        .await
        .unwrap();
    admin
        .execute_unprepared(&format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN \
             CREATE ROLE {APP_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS; END IF; END $$"
        ))
        .await
        .unwrap();
    let exists = admin
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            format!("SELECT 1 FROM pg_database WHERE datname = '{template}'"),
        ))
        .await
        .unwrap()
        .is_some();
    if !exists {
        admin
            .execute_unprepared(&format!("CREATE DATABASE {template} OWNER {APP_ROLE}"))
            .await
            .unwrap();
        // What needs a superuser (README, PostgreSQL); the rest is the app
        // role's.
        let superuser = connect_single(&format!("{server}/{template}")).await;
        superuser
            .execute_unprepared(brainstem_domain::db::SUPERUSER_SETUP)
            .await
            .unwrap();
        superuser.close().await.unwrap();
        let conn = connect_single(&as_role(&format!("{server}/{template}"), APP_ROLE)).await;
        brainstem_domain::db::migrate(&conn).await.unwrap();
        conn.close().await.unwrap();
    }
    admin
        .execute_unprepared("SELECT pg_advisory_unlock(727274)")
        .await
        .unwrap();
    let name = format!("test_{}", uuid::Uuid::now_v7().simple());
    admin
        .execute_unprepared(&format!(
            "CREATE DATABASE {name} TEMPLATE {template} OWNER {APP_ROLE}"
        ))
        .await
        .unwrap();
    admin.close().await.unwrap();
    as_role(&format!("{server}/{name}"), APP_ROLE)
}

/// `url` with its user replaced by `role` (no password: the test server
/// trusts local connections).
pub fn as_role(url: &str, role: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{role}@{host}")
}

/// The same database as the superuser of `TEST_DATABASE_URL`.
pub fn superuser_url(url: &str) -> String {
    let base = std::env::var("TEST_DATABASE_URL").expect("TEST_DATABASE_URL");
    let (_, rest) = base.split_once("://").expect("a URL");
    let user = rest.split_once('@').map_or("postgres", |(user, _)| user);
    as_role(url, user)
}

pub async fn connect_single(url: &str) -> DatabaseConnection {
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .max_connections(1)
        .min_connections(1)
        .sqlx_logging(false);
    Database::connect(options).await.unwrap()
}

/// The template's name changes whenever the set of migrations does.
fn template_name() -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    brainstem_domain::db::migration_names().hash(&mut hasher);
    format!("brainstem_template_{:016x}", hasher.finish())
}

impl TestApp {
    /// The database as its operator sees it, from outside the application:
    /// on PostgreSQL the superuser, whom row-level security does not bind;
    /// on SQLite the application's own pool.
    pub async fn outside_db(&self) -> DatabaseConnection {
        match self.backend {
            Backend::Postgres => connect_single(&superuser_url(&self.config.database_url)).await,
            Backend::Sqlite => self.domain.db.clone(),
        }
    }
}

/// Run `work` as the application does for `scope`'s tenant (on PostgreSQL,
/// row-level security then shows that tenant's rows only).
pub async fn in_tenant<F: std::future::Future>(
    scope: brainstem_domain::TenantScope,
    work: F,
) -> F::Output {
    brainstem_domain::row_security::as_tenant(scope.tenant_id(), work).await
}

/// Fields of a task the executor tests look at.
pub const TASK_FIELDS: &str = "id status intent confidence error settledStepIds currentStepId state maxSteps \
    plan { key version } frozenPlan { id tool } \
    pendingReview { id stepId reason confidence proposed } \
    steps { stepId attempt status error idempotencyKey } \
    events(first: 1000) { seq kind stepId tool status summary error dataKeys data }";

impl TestApp {
    /// Publish a plan in `tenant` as its admin; returns the payload's plan.
    pub async fn publish_plan(&self, tenant: &str, plan: Value) -> Gql {
        self.graphql(
            Some(&self.admin_token(tenant)),
            "mutation($input: PublishPlanInput!) { publishPlan(input: $input) { plan { id key version intent } } }",
            json!({"input": plan}),
        )
        .await
    }

    /// Publish `tenant`'s plan `broken`: one call to a port nothing listens
    /// on, tried once, so a task of it fails at its only step.
    pub async fn publish_broken_plan(&self, tenant: &str) {
        self.publish_plan(
            tenant,
            json!({"key": "broken", "intent": "t.broken", "steps": [
                {"id": "call", "tool": "http_request",
                 "args": {"method": "POST", "url": "http://127.0.0.1:9/unreachable"},
                 "retry": {"maxAttempts": 1}}
            ]}),
        )
        .await
        .data();
    }

    /// Start a task in `tenant`; returns the task.
    pub async fn start_task(&self, tenant: &str, input: Value) -> Value {
        let res = self
            .graphql(
                Some(&self.admin_token(tenant)),
                &format!("mutation($input: StartTaskInput!) {{ startTask(input: $input) {{ task {{ {TASK_FIELDS} }} }} }}"),
                json!({"input": input}),
            )
            .await;
        res.data()["startTask"]["task"].clone()
    }

    /// Start a conversation titled `title` as the holder of `token`;
    /// returns its id.
    pub async fn start_conversation(&self, token: &str, title: &str) -> String {
        self.graphql(
            Some(token),
            "mutation($title: String!) { startConversation(input: {title: $title}) { conversation { id } } }",
            json!({"title": title}),
        )
        .await
        .data()["startConversation"]["conversation"]["id"]
            .as_str()
            .expect("a conversation's id")
            .to_owned()
    }

    /// Read a task of `tenant`.
    pub async fn task(&self, tenant: &str, id: &str) -> Value {
        let res = self
            .graphql(
                Some(&self.admin_token(tenant)),
                &format!("query($id: ID!) {{ task(id: $id) {{ {TASK_FIELDS} }} }}"),
                json!({"id": id}),
            )
            .await;
        res.data()["task"].clone()
    }

    /// A task mutation taking `{ id }` (cancelTask, retryTask).
    pub async fn task_mutation(&self, tenant: &str, name: &str, id: &str) -> Gql {
        self.graphql(
            Some(&self.admin_token(tenant)),
            &format!(
                "mutation($id: ID!) {{ {name}(input: {{id: $id}}) {{ task {{ {TASK_FIELDS} }} }} }}"
            ),
            json!({"id": id}),
        )
        .await
    }

    /// The actions of `tenant`'s audit rows that start with `prefix`,
    /// oldest first (read as its admin).
    pub async fn audit_actions(&self, tenant: &str, prefix: &str) -> Vec<String> {
        self.graphql(
            Some(&self.admin_token(tenant)),
            "query($p: String!) { auditLog(filter: {actionPrefix: $p}) { edges { node { action } } } }",
            json!({"p": prefix}),
        )
        .await
        .data()["auditLog"]["edges"]
            .as_array()
            .expect("audit rows")
            .iter()
            .map(|e| e["node"]["action"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Drive the executor until nothing is runnable.
    pub async fn run_tasks(&self) -> usize {
        self.executor.run_until_idle().await.expect("executor runs")
    }
}

/// The raw UUID inside a global id.
pub fn uuid_of(global_id: &str) -> String {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(global_id)
        .expect("a global id");
    String::from_utf8(bytes)
        .unwrap()
        .split_once(':')
        .unwrap()
        .1
        .to_owned()
}

/// The global id of a raw UUID of type `ty` (`Memory`, `KgEntity`, …).
pub fn encode_id(ty: &str, uuid: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{ty}:{uuid}"))
}

impl TestApp {
    /// Another server on this app's database, with its configuration
    /// (keys, secrets): a second replica, as a deployment runs them.
    pub async fn replica(&self) -> TestApp {
        Self::launch(self.backend, self.config.clone(), Vec::new(), None).await
    }
}
