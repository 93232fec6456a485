//! Where a piece of work comes from: the request id and the trace id that
//! audit rows carry, and that tasks started by a request inherit.
//!
//! The HTTP layer names them per request ([`within`]): the request id is
//! the client's `X-Request-Id` when it is a plain token (else a new one),
//! the trace id that of the client's W3C `traceparent` when it sends one
//! (else a new one). A task started in the request takes the request's trace
//! id, and the executor runs the task's steps within its trace id, so every
//! audit row of the task's work, whoever writes it, names the same trace.
//!
//! Invariants:
//! - Ids are plain ASCII tokens (letters, digits, `-`, `_`, `.`; at most
//!   [`MAX_ID_LEN`]): a client's value that is not one is replaced, never
//!   stored.
//! - Work that names no origin writes audit rows without ids.
//!
//! **Exported traces.** When the process exports traces (OpenTelemetry,
//! `otlp_endpoint`), its telemetry installs a [`TraceLink`]: the spans of
//! a request, of a task's steps and of model calls then join the trace
//! whose id they carry ([`adopt`]), and an outgoing call's `traceparent`
//! names the span that makes it. Without one, spans only carry the trace
//! id in their fields, and an outgoing call names a new parent id.

use std::{future::Future, sync::OnceLock};

use uuid::Uuid;

tokio::task_local! {
    static ORIGIN: Origin;
}

/// The longest request or trace id kept.
pub const MAX_ID_LEN: usize = 64;

/// The ids of the request (or task) a piece of work is done for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    pub request_id: Option<String>,
    pub trace_id: Option<String>,
}

impl Origin {
    /// The origin of an HTTP request: the client's `X-Request-Id` and
    /// `traceparent` values where usable, new ids where not.
    pub fn of_request(request_id: Option<&str>, traceparent: Option<&str>) -> Self {
        Self {
            request_id: Some(
                request_id
                    .filter(|id| is_plain(id))
                    .map_or_else(new_id, str::to_owned),
            ),
            trace_id: Some(traceparent.and_then(trace_of).unwrap_or_else(new_id)),
        }
    }

    /// The origin of a task's steps: its trace.
    pub fn of_trace(trace_id: &str) -> Self {
        Self {
            request_id: None,
            trace_id: is_plain(trace_id).then(|| trace_id.to_owned()),
        }
    }
}

/// Run `work` within `origin`.
pub async fn within<F: Future>(origin: Origin, work: F) -> F::Output {
    ORIGIN.scope(origin, work).await
}

/// The current work's origin (empty when it named none).
pub fn current() -> Origin {
    ORIGIN.try_with(Origin::clone).unwrap_or_default()
}

/// The W3C `traceparent` an outgoing call carries for `trace_id`, when
/// `trace_id` is a W3C trace id (32 hex digits, as every trace id
/// Brainstem makes or accepts is): its parent is the current span when
/// traces are exported, else a new id each call; sampled.
pub fn traceparent(trace_id: &str) -> Option<String> {
    let w3c = trace_id.len() == 32
        && trace_id.bytes().all(|b| b.is_ascii_hexdigit())
        && trace_id.bytes().any(|b| b != b'0');
    w3c.then(|| {
        let parent = TRACE_LINK
            .get()
            .and_then(|link| link.current_span_id())
            .unwrap_or_else(|| format!("{:016x}", rand::random::<u64>().max(1)));
        format!("00-{}-{parent}-01", trace_id.to_ascii_lowercase())
    })
}

/// The parent span id (16 hex digits) of a W3C `traceparent`, when it is
/// well formed.
pub fn parent_span_of(traceparent: &str) -> Option<String> {
    trace_of(traceparent)?;
    traceparent
        .trim()
        .split('-')
        .nth(2)
        .map(str::to_ascii_lowercase)
}

/// How spans join their trace in an exporter; installed once by a process
/// that exports traces.
pub trait TraceLink: Send + Sync + 'static {
    /// Make `span` (new, not yet entered) part of the trace `trace_id`,
    /// under the remote span `parent` (16 hex digits) when one is known.
    fn adopt(&self, span: &tracing::Span, trace_id: &str, parent: Option<&str>);
    /// The exported id (16 hex digits) of the current span, if it has one.
    fn current_span_id(&self) -> Option<String>;
}

static TRACE_LINK: OnceLock<Box<dyn TraceLink>> = OnceLock::new();

/// Install the process's trace link (the first one stays).
pub fn install_trace_link(link: Box<dyn TraceLink>) {
    let _ = TRACE_LINK.set(link);
}

/// Make `span` part of the trace `trace_id` (under `parent`) when traces
/// are exported; nothing otherwise.
pub fn adopt(span: &tracing::Span, trace_id: &str, parent: Option<&str>) {
    if let Some(link) = TRACE_LINK.get() {
        link.adopt(span, trace_id, parent);
    }
}

/// A new id: a UUIDv7 in 32 hex digits (also a valid W3C trace id).
pub fn new_id() -> String {
    Uuid::now_v7().simple().to_string()
}

fn is_plain(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The trace id of a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`),
/// unless it is malformed or all zeros.
fn trace_of(traceparent: &str) -> Option<String> {
    let mut parts = traceparent.trim().split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(version, 2)
        && version != "ff"
        && hex(trace, 32)
        && hex(parent, 16)
        && hex(flags, 2)
        && trace.bytes().any(|b| b != b'0'))
    .then(|| trace.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_ids_are_kept_only_when_plain() {
        let origin = Origin::of_request(
            Some("req-42.a_b"),
            Some("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"),
        );
        assert_eq!(origin.request_id.as_deref(), Some("req-42.a_b"));
        assert_eq!(
            origin.trace_id.as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        let replaced = Origin::of_request(
            Some("bad id\n"),
            Some("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
        );
        let request = replaced.request_id.unwrap();
        let trace = replaced.trace_id.unwrap();
        assert_ne!(request, "bad id\n");
        assert_eq!((request.len(), trace.len()), (32, 32));
        assert!(
            Origin::of_request(Some(&"x".repeat(65)), None)
                .request_id
                .unwrap()
                .len()
                == 32
        );
        assert_eq!(trace_of("01-abc-def-00"), None);
    }

    #[test]
    fn a_traceparent_carries_the_trace_and_a_new_parent() {
        let trace = new_id();
        let a = traceparent(&trace).unwrap();
        let b = traceparent(&trace).unwrap();
        assert_eq!(trace_of(&a).as_deref(), Some(trace.as_str()));
        assert_ne!(a, b, "a new parent id per call");
        assert!(
            a.starts_with("00-") && a.ends_with("-01") && a.len() == 55,
            "{a}"
        );
        assert_eq!(traceparent("not-a-trace"), None);
        assert_eq!(traceparent(&"0".repeat(32)), None);
    }

    #[tokio::test]
    async fn work_sees_the_origin_it_runs_within() {
        assert_eq!(current(), Origin::default());
        let seen = within(Origin::of_trace("abc"), async { current() }).await;
        assert_eq!(seen.trace_id.as_deref(), Some("abc"));
        assert_eq!(seen.request_id, None);
    }
}
