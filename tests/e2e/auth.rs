//! Bearer tokens and API keys: valid ones identify the caller, every bad one
//! is `UNAUTHENTICATED` and never anonymous access.

use brainstem_domain::Role;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;

use crate::{
    helpers::{Backend, TestApp},
    on_both_backends,
};

const VIEWER: &str = "{ viewer { subject credential roles tenant { name slug } } }";

on_both_backends!(
    viewer_returns_the_tenant_of_a_valid_token,
    no_credential_is_unauthenticated,
    token_signed_with_another_key_is_unauthenticated,
    expired_token_is_unauthenticated,
    token_not_yet_valid_or_issued_in_the_future_is_unauthenticated,
    token_with_wrong_audience_issuer_or_tenant_is_unauthenticated,
    revoked_api_key_is_unauthenticated,
    api_key_identifies_its_tenant,
);

async fn viewer_returns_the_tenant_of_a_valid_token(app: TestApp) {
    app.create_tenant("acme").await;
    let token = app.token(Some("acme"), &[Role::Member]);
    let res = app.graphql(Some(&token), VIEWER, json!({})).await;
    let viewer = &res.data()["viewer"];
    assert_eq!(viewer["tenant"]["slug"], "acme");
    assert_eq!(viewer["tenant"]["name"], "ACME");
    assert_eq!(viewer["subject"], "tester");
    assert_eq!(viewer["credential"], "TOKEN");
    assert_eq!(viewer["roles"], json!(["MEMBER"]));
}

async fn no_credential_is_unauthenticated(app: TestApp) {
    let res = app.graphql(None, VIEWER, json!({})).await;
    assert_eq!(res.error_code(), "UNAUTHENTICATED");
    assert!(res.body["data"].is_null(), "no data without a credential");
}

async fn token_signed_with_another_key_is_unauthenticated(app: TestApp) {
    app.create_tenant("acme").await;
    let mut other = app.auth.clone();
    other.hs256_secret = Some(secrecy::SecretString::from("some other secret"));
    let forged = brainstem_api::auth::mint_token(
        &other,
        brainstem_api::auth::TokenRequest {
            subject: "mallory",
            tenant: Some("acme"),
            roles: &[Role::TenantAdmin],
            ttl: chrono::Duration::hours(1),
        },
    )
    .unwrap();
    let res = app.graphql(Some(&forged), VIEWER, json!({})).await;
    assert_eq!(res.status, 401);
    assert_eq!(res.error_code(), "UNAUTHENTICATED");
    assert!(res.body.get("data").is_none());
}

async fn expired_token_is_unauthenticated(app: TestApp) {
    app.create_tenant("acme").await;
    let expired = app.token_for(
        "tester",
        Some("acme"),
        &[Role::TenantAdmin],
        chrono::Duration::hours(-1),
    );
    let res = app.graphql(Some(&expired), VIEWER, json!({})).await;
    assert_eq!(res.error_code(), "UNAUTHENTICATED");
    assert!(res.error_message().contains("expired"), "{}", res.body);
}

/// `nbf` and `iat` are checked like `exp` (the test server allows no clock
/// skew): a token valid only from later, or minted later, gets no rights.
async fn token_not_yet_valid_or_issued_in_the_future_is_unauthenticated(app: TestApp) {
    app.create_tenant("acme").await;
    let secret = app.auth.hs256_secret.clone().unwrap();
    let sign = |times: serde_json::Value| {
        let now = chrono::Utc::now().timestamp();
        let mut claims = json!({
            "sub": "tester", "tenant": "acme", "roles": ["TENANT_ADMIN"],
            "exp": now + 7200, "iat": now - 60, "iss": "brainstem", "aud": "brainstem"
        });
        for (claim, offset) in times.as_object().unwrap() {
            claims[claim] = json!(now + offset.as_i64().unwrap());
        }
        let key =
            EncodingKey::from_secret(secrecy::ExposeSecret::expose_secret(&secret).as_bytes());
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &key).unwrap()
    };
    let cases = [
        (json!({"nbf": 3600}), Some("not yet valid")),
        (json!({"iat": 3600}), Some("issued in the future")),
        (json!({"nbf": -60, "iat": -60}), None),
    ];
    for (times, refusal) in cases {
        let res = app
            .graphql(Some(&sign(times.clone())), VIEWER, json!({}))
            .await;
        match refusal {
            Some(why) => {
                assert_eq!(res.status, 401, "{times}: {}", res.body);
                assert_eq!(res.error_code(), "UNAUTHENTICATED", "{times}: {}", res.body);
                assert!(res.error_message().contains(why), "{times}: {}", res.body);
            }
            None => assert_eq!(res.data()["viewer"]["subject"], "tester", "{times}"),
        }
    }
}

async fn token_with_wrong_audience_issuer_or_tenant_is_unauthenticated(app: TestApp) {
    app.create_tenant("acme").await;
    let mut wrong_aud = app.auth.clone();
    wrong_aud.audience = "someone-else".into();
    let mut wrong_iss = app.auth.clone();
    wrong_iss.issuer = "someone-else".into();
    let request = brainstem_api::auth::TokenRequest {
        subject: "tester",
        tenant: Some("acme"),
        roles: &[Role::Member],
        ttl: chrono::Duration::hours(1),
    };
    for config in [wrong_aud, wrong_iss] {
        let token = brainstem_api::auth::mint_token(&config, request.clone()).unwrap();
        let res = app.graphql(Some(&token), VIEWER, json!({})).await;
        assert_eq!(res.error_code(), "UNAUTHENTICATED", "{}", res.body);
    }
    let unknown_tenant = app.token(Some("nobody"), &[Role::Member]);
    let res = app.graphql(Some(&unknown_tenant), VIEWER, json!({})).await;
    assert_eq!(res.error_code(), "UNAUTHENTICATED");
    let no_tenant = app.token(None, &[Role::Member]);
    let res = app.graphql(Some(&no_tenant), VIEWER, json!({})).await;
    assert_eq!(res.error_code(), "UNAUTHENTICATED");
    let res = app.graphql(Some("not.a.jwt"), VIEWER, json!({})).await;
    assert_eq!(res.error_code(), "UNAUTHENTICATED");
    // A scheme other than Bearer is refused too.
    let res = crate::helpers::Gql::from(
        app.http
            .post(app.url("/graphql"))
            .header("content-type", "application/json")
            .header("authorization", "Basic dXNlcjpwYXNz")
            .body(json!({"query": VIEWER}).to_string())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(res.error_code(), "UNAUTHENTICATED");
}

async fn revoked_api_key_is_unauthenticated(app: TestApp) {
    app.create_tenant("acme").await;
    let (id, secret) = app.create_api_key("acme", &["tasks:read"]).await;
    let res = app.graphql(Some(&secret), VIEWER, json!({})).await;
    assert_eq!(res.data()["viewer"]["credential"], "API_KEY");
    let res = app
        .graphql(
            Some(&app.admin_token("acme")),
            "mutation($id: ID!) { revokeApiKey(input: {id: $id}) { apiKey { revoked } } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(res.data()["revokeApiKey"]["apiKey"]["revoked"], true);
    let res = app.graphql(Some(&secret), VIEWER, json!({})).await;
    assert_eq!(res.error_code(), "UNAUTHENTICATED");
    assert!(res.error_message().contains("revoked"));
    // A well-formed key that was never issued is refused the same way.
    let res = app
        .graphql(Some(&format!("bsk_{}", "0".repeat(64))), VIEWER, json!({}))
        .await;
    assert_eq!(res.error_code(), "UNAUTHENTICATED");
}

async fn api_key_identifies_its_tenant(app: TestApp) {
    app.create_tenant("acme").await;
    let (_, secret) = app
        .create_api_key("acme", &["tasks:read", "memory:read"])
        .await;
    // Both header forms work.
    let res = app.graphql(Some(&secret), VIEWER, json!({})).await;
    assert_eq!(res.data()["viewer"]["tenant"]["slug"], "acme");
    assert_eq!(res.data()["viewer"]["roles"], json!(["SERVICE"]));
    let res = crate::helpers::Gql::from(
        app.http
            .post(app.url("/graphql"))
            .header("content-type", "application/json")
            .header("x-api-key", &secret)
            .body(json!({"query": "{ viewer { scopes } }"}).to_string())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        res.data()["viewer"]["scopes"],
        json!(["memory:read", "tasks:read"])
    );
}

crate::for_both_backends!(rs256_tokens_verify_with_the_configured_public_key);

/// RS256 tokens verify against a configured public key.
async fn rs256_tokens_verify_with_the_configured_public_key(backend: Backend) {
    let public = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/rs256-test-public.pem"
    );
    let private = include_str!("../fixtures/rs256-test-private.pem");
    let app = TestApp::spawn_with(backend, |c| {
        c.jwt_secret = None;
        c.jwt_public_key = Some(public.to_owned());
    })
    .await;
    // The embedded store starts with `demo`; a PostgreSQL one starts empty.
    app.domain.tenants.ensure_demo().await.unwrap();
    app.domain.tenants.resolve_claim("demo").await.unwrap();
    let now = chrono::Utc::now().timestamp();
    let claims = json!({
        "sub": "idp-user-1", "tenant": "demo", "roles": ["TENANT_ADMIN"],
        "exp": now + 600, "iat": now, "iss": "brainstem", "aud": "brainstem"
    });
    let token = jsonwebtoken::encode(
        &Header::new(Algorithm::RS256),
        &claims,
        &EncodingKey::from_rsa_pem(private.as_bytes()).unwrap(),
    )
    .unwrap();
    let res = app.graphql(Some(&token), VIEWER, json!({})).await;
    assert_eq!(res.data()["viewer"]["subject"], "idp-user-1");
    assert_eq!(res.data()["viewer"]["tenant"]["slug"], "demo");
    // With only a public key configured, an HS256 token is refused.
    let hs = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(b"guess"),
    )
    .unwrap();
    let res = app.graphql(Some(&hs), VIEWER, json!({})).await;
    assert_eq!(res.error_code(), "UNAUTHENTICATED");
}
