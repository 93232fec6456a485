//! OAuth 2.0 client credentials (RFC 6749 §4.4) for connections of kind
//! `mcp`: config `oauth: {token_url, client_id, scope?}`, secret
//! `{"client_secret": …}` (sealed like every connection secret). The
//! access token is asked for at the token URL through the outbound client
//! (the allow-list and address rules apply to it as to the MCP server),
//! with the client's id and secret as HTTP Basic credentials, and sent to
//! the server as `Authorization: Bearer …`.
//!
//! Invariants:
//! - A token is kept per tenant and connection, with a fingerprint of the
//!   credentials it was issued for (a changed client, secret, scope or
//!   token URL asks again), until shortly before it expires (`expires_in`,
//!   less a margin of a tenth of its life, at most 30 s); one issued
//!   without `expires_in` is kept until the server refuses it.
//! - A server that answers `401` gets one more try with a new token
//!   ([`Tokens::forget`], then [`Tokens::bearer`]); a second `401` fails
//!   the call.
//! - At most `capacity` tokens are kept (the one nearest its end is
//!   dropped first). Tokens and the secret are never logged.

use std::{
    collections::HashMap,
    hash::{DefaultHasher, Hash, Hasher},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use brainstem_entity::TenantId;
use reqwest::Method;
use serde_json::Value;

use crate::{
    Error, Result,
    catalogue::tool::ToolError,
    kernel::{crypto::SecretJson, outbound::Outbound},
};

/// The most a token's kept life is shortened by, so that it is not sent
/// as it expires.
const MAX_MARGIN: Duration = Duration::from_secs(30);

/// How a connection gets its tokens.
#[derive(Clone)]
pub struct ClientCredentials {
    pub token_url: String,
    pub client_id: String,
    client_secret: String,
    pub scope: Option<String>,
}

impl std::fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("token_url", &self.token_url)
            .field("client_id", &self.client_id)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl ClientCredentials {
    /// The credentials of a connection whose config has `oauth`; `None`
    /// when it has none. A config without `token_url` or `client_id`, or a
    /// secret without `client_secret`, is refused.
    pub fn of(name: &str, config: &Value, secret: Option<&SecretJson>) -> Result<Option<Self>> {
        let Some(oauth) = config.get("oauth") else {
            return Ok(None);
        };
        let field = |key: &str| {
            oauth
                .get(key)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        let missing =
            |what: &str| Error::validation(format!("connection `{name}`: OAuth needs {what}"));
        let token_url = field("token_url").ok_or_else(|| missing("`oauth.token_url`"))?;
        let client_id = field("client_id").ok_or_else(|| missing("`oauth.client_id`"))?;
        let client_secret = secret
            .and_then(|s| s.expose().get("client_secret"))
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| missing("`client_secret` in the connection's secret"))?;
        Ok(Some(Self {
            token_url,
            client_id,
            client_secret,
            scope: field("scope"),
        }))
    }

    pub(super) fn fingerprint(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        (
            &self.token_url,
            &self.client_id,
            &self.client_secret,
            &self.scope,
        )
            .hash(&mut hasher);
        hasher.finish()
    }
}

/// A token, by tenant and connection name.
type Key = (TenantId, String);

struct Held {
    fingerprint: u64,
    token: String,
    /// When it stops being sent; `None`: until refused.
    until: Option<Instant>,
}

impl Held {
    fn fresh(&self) -> bool {
        self.until.is_none_or(|until| Instant::now() < until)
    }
}

/// The access tokens of tenants' MCP connections, shared by every clone.
#[derive(Clone)]
pub struct Tokens {
    inner: Arc<Mutex<HashMap<Key, Held>>>,
    capacity: usize,
}

impl Default for Tokens {
    fn default() -> Self {
        Self::new(super::ListSettings::default().capacity)
    }
}

impl Tokens {
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Arc::default(),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Held>> {
        // A panic while holding the lock leaves a map that is still whole.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The `Authorization` value for `key`: its kept token while fresh,
    /// else a new one from the token URL.
    pub async fn bearer(
        &self,
        outbound: &Outbound,
        key: &Key,
        credentials: &ClientCredentials,
    ) -> std::result::Result<String, ToolError> {
        let fingerprint = credentials.fingerprint();
        let kept = self
            .lock()
            .get(key)
            .filter(|h| h.fingerprint == fingerprint && h.fresh())
            .map(|h| h.token.clone());
        let token = match kept {
            Some(token) => token,
            None => {
                let (token, lifetime) = fetch(outbound, credentials).await?;
                // A lifetime too long to add to now is kept until refused.
                let until = lifetime.and_then(|life| {
                    Instant::now().checked_add(life - (life / 10).min(MAX_MARGIN))
                });
                self.keep(
                    key.clone(),
                    Held {
                        fingerprint,
                        token: token.clone(),
                        until,
                    },
                );
                token
            }
        };
        Ok(format!("Bearer {token}"))
    }

    fn keep(&self, key: Key, held: Held) {
        let mut inner = self.lock();
        if !inner.contains_key(&key) && inner.len() >= self.capacity {
            let nearest_end = inner
                .iter()
                // A token kept until refused is dropped last.
                .min_by_key(|(_, h)| (h.until.is_none(), h.until))
                .map(|(k, _)| k.clone());
            if let Some(nearest_end) = nearest_end {
                inner.remove(&nearest_end);
            }
        }
        inner.insert(key, held);
    }

    /// Drop `key`'s token (the server refused it).
    pub fn forget(&self, key: &Key) {
        self.lock().remove(key);
    }
}

/// Ask the token URL for a token: the token and how long it lives, when
/// the answer says.
async fn fetch(
    outbound: &Outbound,
    credentials: &ClientCredentials,
) -> std::result::Result<(String, Option<Duration>), ToolError> {
    let mut body = String::from("grant_type=client_credentials");
    if let Some(scope) = &credentials.scope {
        body.push_str("&scope=");
        body.push_str(&form_encode(scope));
    }
    let request = outbound
        .request(Method::POST, &credentials.token_url)?
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("Accept", "application/json")
        // RFC 6749 §2.3.1: the id and secret are form-encoded first.
        .basic_auth(
            form_encode(&credentials.client_id),
            Some(form_encode(&credentials.client_secret)),
        )
        .body(body);
    let failed = |what: String| ToolError::retryable(format!("the OAuth token URL {what}"));
    let response = outbound
        .send(request)
        .await
        .map_err(|f| failed(format!("did not answer: {f}")))?;
    let status = response.status().as_u16();
    let bytes = outbound
        .read(response)
        .await
        .map_err(|f| failed(format!("answer could not be read: {f}")))?;
    let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if !(200..300).contains(&status) {
        let error = answer
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("no error code");
        let message = format!("the OAuth token URL refused the client ({status}: {error})");
        return Err(if status == 429 || status >= 500 {
            ToolError::retryable(message)
        } else {
            ToolError::fatal(message)
        });
    }
    let token = answer
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ToolError::fatal("the OAuth token URL's answer has no `access_token`"))?;
    let kind = answer
        .get("token_type")
        .and_then(Value::as_str)
        .unwrap_or("Bearer");
    if !kind.eq_ignore_ascii_case("bearer") {
        return Err(ToolError::fatal(format!(
            "the OAuth token URL issued a `{kind}` token; only Bearer tokens are sent"
        )));
    }
    let lifetime = answer
        .get("expires_in")
        .and_then(Value::as_u64)
        .map(Duration::from_secs);
    Ok((token.to_owned(), lifetime))
}

/// `application/x-www-form-urlencoded` encoding of one value.
fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(byte as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn values_are_form_encoded() {
        assert_eq!(form_encode("ledger.read write"), "ledger.read+write");
        assert_eq!(form_encode("a:b/c%é"), "a%3Ab%2Fc%25%C3%A9");
    }

    #[test]
    fn credentials_come_from_the_config_and_the_sealed_secret() {
        let config = json!({"url": "https://x/mcp",
            "oauth": {"token_url": "https://x/token", "client_id": "bs", "scope": "read"}});
        let secret = SecretJson::new(json!({"client_secret": "shh"}));
        let creds = ClientCredentials::of("ledger", &config, Some(&secret))
            .unwrap()
            .unwrap();
        assert_eq!(creds.client_id, "bs");
        assert!(!format!("{creds:?}").contains("shh"));
        assert!(
            ClientCredentials::of("ledger", &json!({"url": "u"}), None)
                .unwrap()
                .is_none()
        );
        let refused = ClientCredentials::of("ledger", &config, None).unwrap_err();
        assert!(refused.to_string().contains("client_secret"), "{refused}");
    }

    #[test]
    fn a_token_nearest_its_end_is_dropped_first() {
        let tokens = Tokens::new(2);
        let tenant = TenantId::new();
        let held = |token: &str, secs: Option<u64>| Held {
            fingerprint: 1,
            token: token.into(),
            until: secs.map(|s| Instant::now() + Duration::from_secs(s)),
        };
        tokens.keep((tenant, "a".into()), held("a", Some(10)));
        tokens.keep((tenant, "b".into()), held("b", None));
        tokens.keep((tenant, "c".into()), held("c", Some(100)));
        let kept: Vec<String> = {
            let mut v: Vec<String> = tokens.lock().values().map(|h| h.token.clone()).collect();
            v.sort();
            v
        };
        assert_eq!(kept, ["b", "c"]);
        assert!(!held("x", Some(0)).fresh());
        assert!(held("x", None).fresh());
    }
}
