//! Authentication: turning an `Authorization` header (or a WebSocket
//! `connection_init` payload) into a [`Principal`].
//!
//! - `Bearer <jwt>`: HS256 with a shared secret or RS256 with a public key;
//!   `exp`, `nbf`, `iat`, `iss` and `aud` are checked (times with the
//!   configured leeway: a token not yet valid, or issued in the future, is
//!   refused); claims `sub`, `tenant`, `roles`.
//! - `Bearer bsk_…` (or `X-Api-Key: bsk_…`): a partner API key.
//!
//! No header means anonymous (resolvers then refuse with `UNAUTHENTICATED`);
//! a malformed, expired, foreign or revoked credential is always an error,
//! never anonymous access.

use std::{collections::BTreeSet, fmt};

use brainstem_domain::{
    Actor, Domain, Error, Principal, Role, api_keys::SECRET_PREFIX, rate_limit::Rate,
};
use chrono::{DateTime, Utc};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation, decode_header};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

/// How bearer tokens are verified.
#[derive(Clone, Debug)]
pub struct AuthConfig {
    pub issuer: String,
    pub audience: String,
    /// HS256 shared secret.
    pub hs256_secret: Option<SecretString>,
    /// RS256 public key (PEM).
    pub rs256_public_key_pem: Option<String>,
    /// Allowed clock skew when checking `exp`, `nbf` and `iat`.
    pub leeway_secs: u64,
}

#[derive(Debug)]
pub struct AuthSetupError(pub String);

impl fmt::Display for AuthSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AuthSetupError {}

/// The claims Brainstem reads from and writes into tokens.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Claims {
    pub sub: String,
    /// Tenant id or slug; absent only for platform admins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default)]
    pub roles: Vec<String>,
    pub exp: i64,
    #[serde(default)]
    pub iat: i64,
    pub iss: String,
    pub aud: String,
}

/// A verified credential.
#[derive(Clone, Debug)]
pub struct Credential {
    pub principal: Principal,
    /// When a bearer token stops being valid; API keys do not expire.
    pub expires_at: Option<DateTime<Utc>>,
    /// An API key's own rate limit, overriding the configured default.
    pub rate_limit: Option<Rate>,
}

pub struct Authenticator {
    domain: Domain,
    hs256: Option<(DecodingKey, Validation)>,
    rs256: Option<(DecodingKey, Validation)>,
    leeway_secs: u64,
}

impl Authenticator {
    pub fn new(config: AuthConfig, domain: Domain) -> Result<Self, AuthSetupError> {
        let validation = |alg| {
            let mut v = Validation::new(alg);
            v.set_issuer(&[&config.issuer]);
            v.set_audience(&[&config.audience]);
            v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
            v.leeway = config.leeway_secs;
            v.validate_nbf = true;
            v
        };
        let hs256 = config.hs256_secret.as_ref().map(|secret| {
            (
                DecodingKey::from_secret(secret.expose_secret().as_bytes()),
                validation(Algorithm::HS256),
            )
        });
        let rs256 = match &config.rs256_public_key_pem {
            Some(pem) => Some((
                DecodingKey::from_rsa_pem(pem.as_bytes())
                    .map_err(|e| AuthSetupError(format!("invalid RS256 public key: {e}")))?,
                validation(Algorithm::RS256),
            )),
            None => None,
        };
        if hs256.is_none() && rs256.is_none() {
            return Err(AuthSetupError(
                "no token verification key: set jwt_secret or jwt_public_key".into(),
            ));
        }
        Ok(Self {
            domain,
            hs256,
            rs256,
            leeway_secs: config.leeway_secs,
        })
    }

    /// Authenticate an `Authorization` header value; `None` means anonymous.
    pub async fn authenticate_header(
        &self,
        header: Option<&str>,
    ) -> Result<Option<Credential>, Error> {
        let Some(header) = header else {
            return Ok(None);
        };
        let token = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .map(str::trim)
            .ok_or_else(|| {
                Error::Unauthenticated("the Authorization header must be `Bearer <token>`".into())
            })?;
        self.authenticate_token(token).await.map(Some)
    }

    /// Authenticate a bare token: an API key secret or a JWT.
    pub async fn authenticate_token(&self, token: &str) -> Result<Credential, Error> {
        if token.starts_with(SECRET_PREFIX) {
            let key = self.domain.api_keys.authenticate(token).await?;
            let mut roles = BTreeSet::new();
            roles.insert(Role::Service);
            return Ok(Credential {
                principal: Principal {
                    actor: Actor::ApiKey(key.id),
                    tenant: Some(key.tenant),
                    roles,
                    scopes: key.scopes,
                },
                expires_at: None,
                rate_limit: key.rate_limit,
            });
        }
        self.authenticate_jwt(token).await
    }

    async fn authenticate_jwt(&self, token: &str) -> Result<Credential, Error> {
        let bad = |why: &str| Error::Unauthenticated(format!("invalid bearer token: {why}"));
        let header = decode_header(token).map_err(|_| bad("malformed"))?;
        let (key, validation) = match header.alg {
            Algorithm::HS256 => self.hs256.as_ref(),
            Algorithm::RS256 => self.rs256.as_ref(),
            _ => None,
        }
        .ok_or_else(|| bad("unsupported signing algorithm"))?;
        let claims = jsonwebtoken::decode::<Claims>(token, key, validation)
            .map_err(|e| {
                use jsonwebtoken::errors::ErrorKind;
                match e.kind() {
                    ErrorKind::ExpiredSignature => bad("expired"),
                    ErrorKind::ImmatureSignature => bad("not yet valid (nbf)"),
                    ErrorKind::InvalidSignature => bad("signature does not verify"),
                    ErrorKind::InvalidIssuer => bad("wrong issuer"),
                    ErrorKind::InvalidAudience => bad("wrong audience"),
                    _ => bad("malformed"),
                }
            })?
            .claims;
        // jsonwebtoken leaves `iat` alone; a token minted in the future
        // comes from a wrong clock or a forger's, and is refused like `nbf`.
        let leeway = i64::try_from(self.leeway_secs).unwrap_or(i64::MAX);
        if claims.iat > Utc::now().timestamp().saturating_add(leeway) {
            return Err(bad("issued in the future (iat)"));
        }
        let roles = claims
            .roles
            .iter()
            .map(|r| r.parse::<Role>())
            .collect::<Result<BTreeSet<_>, _>>()
            .map_err(|_| bad("unknown role"))?;
        let tenant = match &claims.tenant {
            Some(claim) => Some(self.domain.tenants.resolve_claim(claim).await?.id),
            None if roles.contains(&Role::PlatformAdmin) => None,
            None => return Err(bad("no tenant claim")),
        };
        Ok(Credential {
            principal: Principal {
                actor: Actor::User(claims.sub),
                tenant,
                roles,
                scopes: BTreeSet::new(),
            },
            expires_at: DateTime::from_timestamp(claims.exp, 0),
            rate_limit: None,
        })
    }
}

impl Authenticator {
    /// Apply an `X-Acting-Tenant` value: a platform admin becomes an admin of
    /// the named tenant for this request (audited); anyone else is refused.
    pub async fn act_in_tenant(
        &self,
        credential: Option<Credential>,
        tenant: &str,
    ) -> Result<Option<Credential>, Error> {
        let Some(mut credential) = credential else {
            return Err(Error::forbidden(
                "only platform admins may name an acting tenant",
            ));
        };
        credential.principal = self
            .domain
            .act_in_tenant(&credential.principal, tenant)
            .await?;
        Ok(Some(credential))
    }
}

/// What a minted token says.
#[derive(Clone, Debug)]
pub struct TokenRequest<'a> {
    pub subject: &'a str,
    pub tenant: Option<&'a str>,
    pub roles: &'a [Role],
    pub ttl: chrono::Duration,
}

/// Sign an HS256 token, for `brainstem token` and tests.
pub fn mint_token(
    config: &AuthConfig,
    request: TokenRequest<'_>,
) -> Result<String, AuthSetupError> {
    let secret = config.hs256_secret.as_ref().ok_or_else(|| {
        AuthSetupError("minting tokens needs an HS256 secret (jwt_secret)".into())
    })?;
    let now = Utc::now();
    let claims = Claims {
        sub: request.subject.to_owned(),
        tenant: request.tenant.map(str::to_owned),
        roles: request
            .roles
            .iter()
            .map(|r| r.as_str().to_owned())
            .collect(),
        exp: (now + request.ttl).timestamp(),
        iat: now.timestamp(),
        iss: config.issuer.clone(),
        aud: config.audience.clone(),
    };
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret.expose_secret().as_bytes()),
    )
    .map_err(|e| AuthSetupError(format!("cannot sign token: {e}")))
}
