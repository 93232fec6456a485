//! The one client for outbound calls a tenant's work can steer: the
//! `http_request` and `delegate` tools, partner HTTP tools and outbound
//! webhooks. (The model and embedding endpoints the operator configures
//! use [`super::http_client::client`] instead: the operator chose them,
//! and they are often on loopback.)
//!
//! Invariants, each enforced here and nowhere else:
//! - A request is built only through [`Outbound::request`], which checks
//!   the URL against the allow-list (host *and* port, see [`policy`]) and,
//!   for an IP literal, the address rules.
//! - Every name is resolved by [`resolver::Guarded`], which drops the
//!   addresses that are not public unless the operator listed them
//!   (`http_allowed_private`); the connector connects only to what it
//!   returns, so the check is on the address actually connected and a name
//!   that rebinds to a loopback address between two lookups is refused.
//! - Redirects are followed only within the same origin (scheme, host and
//!   port), at most [`MAX_REDIRECTS`] times, each hop checked again. A
//!   redirect to another origin is an error, never followed: a body
//!   (re-sent on 307/308), a signature or a callback token never reaches a
//!   host the request was not addressed to.
//! - No proxy from the environment: the address rules apply to the target,
//!   not to whatever proxy a variable names.
//! - An answer is read up to `http_max_response_bytes` ([`Outbound::read`]),
//!   streaming, and refused past it.
//! - A header a plan supplies is refused when it controls the connection
//!   (`Host`, hop-by-hop headers, framing): see [`plan_header`].

pub mod policy;
mod resolver;

use std::{fmt, sync::Arc, time::Duration};

use reqwest::{
    Method, RequestBuilder, Response, Url,
    header::{HeaderName, HeaderValue},
};

pub use self::policy::Policy;

/// Redirects followed within one origin before the call fails.
pub const MAX_REDIRECTS: usize = 5;

/// The default cap on an answer's body (`http_max_response_bytes`).
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 4 * 1024 * 1024;

/// Headers a plan may not set: they address or frame the connection
/// rather than describe the request.
const CONNECTION_HEADERS: &[&str] = &[
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "expect",
];

/// What the operator configures.
#[derive(Clone, Debug)]
pub struct OutboundSettings {
    /// `http_allowed_hosts`: see [`policy`] for the entry forms.
    pub allowed_hosts: Vec<String>,
    /// `http_allowed_private`: CIDR ranges of non-public addresses that
    /// may be connected (none by default).
    pub allowed_private: Vec<String>,
    /// `http_max_response_bytes`.
    pub max_response_bytes: u64,
    pub connect_timeout: Duration,
}

impl Default for OutboundSettings {
    /// Nothing allowed.
    fn default() -> Self {
        Self {
            allowed_hosts: Vec::new(),
            allowed_private: Vec::new(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// A call the policy refuses, carried through reqwest's error chain (from
/// the resolver and the redirect policy) so that it can be told from a
/// network failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal(String);

impl Refusal {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

/// Why an outbound call failed, and whether trying again may help (a
/// refusal or an oversized answer never does; a timeout or a connection
/// failure may).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallFailure {
    pub message: String,
    pub retryable: bool,
    pub timed_out: bool,
}

impl CallFailure {
    fn refused(refusal: Refusal) -> Self {
        Self {
            message: refusal.0,
            retryable: false,
            timed_out: false,
        }
    }

    /// A failure of the transport: the policy's refusal when there is one
    /// in the chain, else the error and its causes.
    pub fn of(err: &reqwest::Error) -> Self {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
        let mut causes = Vec::new();
        while let Some(e) = source {
            if let Some(refusal) = e.downcast_ref::<Refusal>() {
                return Self::refused(refusal.clone());
            }
            let text = e.to_string();
            if !causes.iter().any(|c: &String| c.contains(&text)) {
                causes.push(text);
            }
            source = e.source();
        }
        Self {
            message: causes.join(": "),
            retryable: true,
            timed_out: err.is_timeout(),
        }
    }
}

impl fmt::Display for CallFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The outbound client and its policy. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Outbound {
    /// `None` when it could not be built (see [`Outbound::build`]).
    client: Option<reqwest::Client>,
    policy: Arc<Policy>,
    max_response_bytes: u64,
}

impl Default for Outbound {
    /// Allows nothing.
    fn default() -> Self {
        Self::build(Policy::default(), &OutboundSettings::default())
    }
}

impl Outbound {
    /// The client for `settings`; an error names a bad allow-list entry.
    pub fn new(settings: &OutboundSettings) -> crate::Result<Self> {
        let policy = Policy::new(&settings.allowed_hosts, &settings.allowed_private)
            .map_err(crate::Error::validation)?;
        Ok(Self::build(policy, settings))
    }

    fn build(policy: Policy, settings: &OutboundSettings) -> Self {
        super::http_client::install_tls_provider();
        let policy = Arc::new(policy);
        let hops = Arc::clone(&policy);
        let client = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .no_proxy()
            .dns_resolver(resolver::Guarded::new(Arc::clone(&policy)))
            .redirect(reqwest::redirect::Policy::custom(
                move |attempt| match redirect_allowed(&hops, attempt.url(), attempt.previous()) {
                    Ok(()) => attempt.follow(),
                    Err(refusal) => attempt.error(refusal),
                },
            ))
            .build()
            .inspect_err(|err| {
                // Only an unusable TLS setup fails here. No client without
                // the guards stands in: every call is then refused.
                tracing::error!(%err, "cannot build the outbound HTTP client");
            })
            .ok();
        Self {
            client,
            policy,
            max_response_bytes: settings.max_response_bytes,
        }
    }

    /// A request to `url`, if the policy allows it. The caller adds
    /// headers and a body, then sends it.
    pub fn request(&self, method: Method, url: &str) -> Result<RequestBuilder, CallFailure> {
        let url = self.check(url)?;
        let client = self.client.as_ref().ok_or_else(|| {
            CallFailure::refused(Refusal::new("the outbound HTTP client could not be built"))
        })?;
        Ok(client.request(method, url))
    }

    /// `url` parsed, if the policy allows calling it.
    pub fn check(&self, url: &str) -> Result<Url, CallFailure> {
        let parsed = Url::parse(url.trim()).map_err(|e| {
            CallFailure::refused(Refusal::new(format!("`{url}` is not a URL: {e}")))
        })?;
        self.policy.check(&parsed).map_err(CallFailure::refused)?;
        Ok(parsed)
    }

    /// Send `request` (built by [`Outbound::request`]).
    pub async fn send(&self, request: RequestBuilder) -> Result<Response, CallFailure> {
        request.send().await.map_err(|e| CallFailure::of(&e))
    }

    /// The whole body of `response`, read as it streams in and refused
    /// once it passes `http_max_response_bytes`.
    pub async fn read(&self, mut response: Response) -> Result<Vec<u8>, CallFailure> {
        let cap = self.max_response_bytes;
        let too_large = || {
            CallFailure::refused(Refusal::new(format!(
                "the answer is larger than http_max_response_bytes ({cap} bytes)"
            )))
        };
        if response.content_length().is_some_and(|n| n > cap) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| CallFailure::of(&e))? {
            if (body.len() + chunk.len()) as u64 > cap {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// At most `limit` bytes from the start of `response`'s body (for an
    /// error message); the rest is never read.
    pub async fn read_prefix(mut response: Response, limit: usize) -> Vec<u8> {
        let mut body = Vec::new();
        while body.len() < limit {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                _ => break,
            }
        }
        body.truncate(limit);
        body
    }
}

/// A header from a plan, parsed; refused when it controls the connection
/// (`Host`, hop-by-hop headers, framing) or is not a valid header.
pub fn plan_header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), CallFailure> {
    let refuse = |why: String| CallFailure::refused(Refusal::new(why));
    let parsed = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| refuse(format!("`{name}` is not a valid header name")))?;
    if CONNECTION_HEADERS.contains(&parsed.as_str()) {
        return Err(refuse(format!(
            "the header `{name}` is set by the client, not by a plan"
        )));
    }
    let value = HeaderValue::from_str(value)
        .map_err(|_| refuse(format!("the value of header `{name}` is not valid")))?;
    Ok((parsed, value))
}

/// A redirect from the last of `previous` to `next` is followed only
/// within one origin, a bounded number of times, and when the policy
/// still allows `next`.
fn redirect_allowed(policy: &Policy, next: &Url, previous: &[Url]) -> Result<(), Refusal> {
    if previous.len() > MAX_REDIRECTS {
        return Err(Refusal::new(format!("more than {MAX_REDIRECTS} redirects")));
    }
    let from = previous.last();
    if from.is_none_or(|from| from.origin() != next.origin()) {
        return Err(Refusal::new(format!(
            "a redirect to another origin ({}) is not followed",
            next.origin().ascii_serialization()
        )));
    }
    policy.check(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_stay_within_one_origin() {
        let policy = Policy::new(&["*".into(), "a.example:*".into()], &[]).unwrap();
        let url = |s: &str| Url::parse(s).unwrap();
        let from = [url("https://a.example/x")];
        assert!(redirect_allowed(&policy, &url("https://a.example/y"), &from).is_ok());
        for other in [
            "https://b.example/y",
            "http://a.example/y",
            "https://a.example:8443/y",
        ] {
            assert!(
                redirect_allowed(&policy, &url(other), &from).is_err(),
                "{other}"
            );
        }
        let many = vec![url("https://a.example/x"); MAX_REDIRECTS + 1];
        assert!(redirect_allowed(&policy, &url("https://a.example/y"), &many).is_err());
    }

    #[test]
    fn plans_cannot_set_connection_headers() {
        for name in ["Host", "host", "Connection", "Transfer-Encoding", "TE"] {
            assert!(plan_header(name, "x").is_err(), "{name}");
        }
        assert!(plan_header("X-Custom", "x").is_ok());
        assert!(plan_header("Bad Name", "x").is_err());
        assert!(plan_header("X-Custom", "a\nb").is_err());
    }
}
