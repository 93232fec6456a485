//! [`ModelClient`]: a provider with its timeouts, retries, breaker and
//! prices, and the [`Generation`] a call streams until its [`Completion`].
//!
//! **Failure policy.** A call gets `call_timeout` (60 s) in all and
//! `stream_timeout` (30 s) between chunks. Timeouts, connection errors,
//! 429 and 5xx answers are retried inside the client (3 attempts, 1 s then
//! 2 s, doubling up to 30 s, with jitter) — but only until the first delta
//! has arrived: after that a retry would repeat text subscribers already
//! saw, so the error goes up and the *step* fails, retryably. Every failure
//! of the provider counts toward its breaker; an open breaker fails calls at
//! once, retryably, until its cool-down has passed.
//!
//! When the provider reports no usage, [`Generation::finish`] estimates it
//! (prompt estimate in, [`estimate_tokens`] of the text out) and says so.

use std::{fmt, sync::Arc, time::Duration};

use futures_util::StreamExt;
use rand::Rng;
use tokio::time::Instant;

use super::{
    Breaker, BreakerConfig, BreakerState, Budgets, Chunk, ChunkStream, CompletionRequest,
    ErrorKind, FinishReason, LanguageModel, LlmError, Message, Pace, Prices, TokenUsage, ToolCall,
    ToolCallDelta, estimate_tokens, offline,
};
use crate::{
    kernel::metrics::{ModelLabels, ModelOutcomeLabels, TokenLabels, metrics},
    models::usage::Usage,
};

/// Retries inside the client (A.10): `max_attempts` in all, the first retry
/// after `initial_delay`, doubling up to `max_delay`, with "equal jitter".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallRetry {
    pub max_attempts: u32,
    pub initial_delay: Duration,
    pub max_delay: Duration,
}

impl Default for CallRetry {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_delay: Duration::from_millis(1000),
            max_delay: Duration::from_millis(30_000),
        }
    }
}

impl CallRetry {
    /// Delay after failed attempt `attempt` (1-based): half fixed, half
    /// random, so that many callers do not retry in step.
    pub fn delay(&self, attempt: u32, random: f64) -> Duration {
        let exp = attempt.saturating_sub(1).min(30);
        let base = self
            .initial_delay
            .saturating_mul(1u32 << exp)
            .min(self.max_delay);
        base / 2 + base.div_f64(2.0).mul_f64(random.clamp(0.0, 1.0))
    }
}

/// How a [`ModelClient`] behaves.
#[derive(Clone, Debug)]
pub struct LlmSettings {
    /// The model used when a step names none.
    pub default_model: String,
    /// `max_tokens` when a step sets none (A.21: 4000).
    pub max_tokens: u32,
    /// Temperature when a step sets none (A.21: 0.7).
    pub temperature: f32,
    /// The most one call may take (A.18: 60 s).
    pub call_timeout: Duration,
    /// The longest wait for the next chunk (A.18: 30 s).
    pub stream_timeout: Duration,
    pub retry: CallRetry,
    pub breaker: BreakerConfig,
    pub prices: Prices,
    pub budgets: Budgets,
    /// How long LLM intent detection may take before the rules decide.
    pub intent_timeout: Duration,
    /// The model's context window in tokens: prompts are fitted into it
    /// (see [`super::prompt::TokenBudget`]).
    pub context_window: u64,
}

impl Default for LlmSettings {
    fn default() -> Self {
        Self {
            default_model: offline::MODEL.to_owned(),
            max_tokens: 4000,
            temperature: 0.7,
            call_timeout: Duration::from_secs(60),
            stream_timeout: Duration::from_secs(30),
            retry: CallRetry::default(),
            breaker: BreakerConfig::default(),
            prices: Prices::default(),
            budgets: Budgets::default(),
            intent_timeout: Duration::from_secs(10),
            context_window: 128_000,
        }
    }
}

/// A provider with its timeouts, retries, breaker and prices. Built once
/// at startup; cheap to clone (clones share the breaker).
#[derive(Clone)]
pub struct ModelClient {
    inner: Arc<Inner>,
}

struct Inner {
    model: Arc<dyn LanguageModel>,
    settings: LlmSettings,
    breaker: Breaker,
    /// Per-minute budgets a call waits for before it is sent.
    pace: Arc<Pace>,
}

impl fmt::Debug for ModelClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelClient")
            .field("provider", &self.inner.model.provider())
            .field("default_model", &self.inner.settings.default_model)
            .finish_non_exhaustive()
    }
}

impl Default for ModelClient {
    /// The offline provider with default settings.
    fn default() -> Self {
        Self::new(Arc::new(offline::Offline), LlmSettings::default())
    }
}

impl ModelClient {
    pub fn new(model: Arc<dyn LanguageModel>, settings: LlmSettings) -> Self {
        Self {
            inner: Arc::new(Inner {
                model,
                breaker: Breaker::new(settings.breaker),
                settings,
                pace: Arc::default(),
            }),
        }
    }

    /// This client with `pace`'s per-minute budgets (`llm_rpm`, `llm_tpm`,
    /// and tenants' own).
    pub fn with_pace(self, pace: Arc<Pace>) -> Self {
        Self {
            inner: Arc::new(Inner {
                model: self.inner.model.clone(),
                settings: self.inner.settings.clone(),
                breaker: Breaker::new(self.inner.settings.breaker),
                pace,
            }),
        }
    }

    pub fn provider(&self) -> &str {
        self.inner.model.provider()
    }

    /// See [`LanguageModel::one_hop`].
    pub fn one_hop(&self) -> bool {
        self.inner.model.one_hop()
    }

    pub fn settings(&self) -> &LlmSettings {
        &self.inner.settings
    }

    pub fn breaker_state(&self) -> BreakerState {
        self.inner.breaker.state(Instant::now())
    }

    /// A request for `messages` with the defaults filled in.
    pub fn request(
        &self,
        messages: Vec<Message>,
        model: Option<&str>,
        max_tokens: Option<u32>,
        temperature: Option<f32>,
    ) -> CompletionRequest {
        let s = &self.inner.settings;
        CompletionRequest {
            messages,
            model: model.unwrap_or(&s.default_model).to_owned(),
            max_tokens: max_tokens.unwrap_or(s.max_tokens),
            temperature: temperature.unwrap_or(s.temperature),
            tools: Vec::new(),
        }
    }

    /// Start a call: admitted by the breaker, retried (A.10) until the
    /// provider has produced its first chunk.
    pub async fn start(&self, request: CompletionRequest) -> Result<Generation, LlmError> {
        let span =
            tracing::info_span!("model call", model = %request.model, provider = self.provider());
        tracing::Instrument::instrument(self.start_attempts(request), span).await
    }

    /// [`Self::start`]'s attempts.
    async fn start_attempts(&self, request: CompletionRequest) -> Result<Generation, LlmError> {
        let s = &self.inner.settings;
        // The per-minute budgets first, then a model with a queue of its
        // own; both waits are outside the call's timeouts, and the place
        // is kept until the call ends.
        self.inner.pace.admit(request.estimated_max_tokens()).await;
        let mut place = match self.inner.model.queue() {
            Some(queue) => Some(queue.enter().await.ok_or_else(|| {
                LlmError::new(ErrorKind::Unavailable, "the model's queue is closed")
            })?),
            None => None,
        };
        let mut attempt = 1;
        loop {
            let result = match self.inner.breaker.admit(Instant::now()) {
                Ok(()) => self.open(&request).await.map(|mut g| {
                    g.place = place.take();
                    g
                }),
                Err(wait) => Err(LlmError::new(
                    ErrorKind::CircuitOpen,
                    format!(
                        "`{}` failed repeatedly; calls are paused for another {} s",
                        self.provider(),
                        wait.as_secs().max(1)
                    ),
                )),
            };
            match result {
                Ok(generation) => return Ok(generation),
                Err(err) => {
                    if err.kind.is_provider_failure() {
                        self.inner.breaker.failure(Instant::now());
                    } else if err.kind == ErrorKind::Rejected {
                        // The provider answered: it is up.
                        self.inner.breaker.success();
                    }
                    if !err.kind.retried_in_client() || attempt >= s.retry.max_attempts {
                        count_call(&request.model, "error");
                        tracing::warn!(provider = self.provider(), attempt, %err, "model call failed");
                        return Err(err);
                    }
                    let delay = s.retry.delay(attempt, rand::rng().random::<f64>());
                    tracing::info!(provider = self.provider(), attempt, %err, ?delay, "retrying the model call");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
            }
        }
    }

    /// One attempt: send, and wait for the first chunk.
    async fn open(&self, request: &CompletionRequest) -> Result<Generation, LlmError> {
        let s = &self.inner.settings;
        let started = Instant::now();
        let deadline = started + s.call_timeout;
        let first_by = deadline.min(started + s.stream_timeout);
        let timed_out = || {
            LlmError::new(
                ErrorKind::Timeout,
                format!(
                    "`{}` sent nothing within {} s",
                    self.provider(),
                    first_by.duration_since(started).as_secs()
                ),
            )
        };
        let mut stream = tokio::time::timeout_at(first_by, self.inner.model.stream(request))
            .await
            .map_err(|_| timed_out())??;
        let first = tokio::time::timeout_at(first_by, stream.next())
            .await
            .map_err(|_| timed_out())?
            .transpose()?;
        metrics()
            .llm_time_to_first_token
            .get_or_create(&ModelLabels {
                model: request.model.clone(),
            })
            .observe(started.elapsed().as_secs_f64());
        Ok(Generation {
            client: self.clone(),
            model: request.model.clone(),
            prompt_estimate: request.estimated_prompt_tokens(),
            first,
            stream,
            deadline,
            last_chunk: Instant::now(),
            text: String::new(),
            tool_calls: Vec::new(),
            finish: None,
            usage: None,
            ended: false,
            place: None,
        })
    }

    /// Run a call to its end and return the whole text.
    pub async fn complete(&self, request: CompletionRequest) -> Result<Completion, LlmError> {
        let mut generation = self.start(request).await?;
        while generation.next_delta().await?.is_some() {}
        Ok(generation.finish())
    }
}

/// A call under way: the first chunk has arrived.
pub struct Generation {
    client: ModelClient,
    model: String,
    prompt_estimate: u64,
    first: Option<Chunk>,
    stream: ChunkStream,
    deadline: Instant,
    last_chunk: Instant,
    text: String,
    /// The tool calls so far, by their index in the turn.
    tool_calls: Vec<ToolCall>,
    finish: Option<FinishReason>,
    usage: Option<TokenUsage>,
    ended: bool,
    /// The call's place in its model's queue, if it has one.
    place: Option<super::QueuePlace>,
}

impl Generation {
    /// The next piece of text, or `None` at the end. Cancel-safe: dropping
    /// the future loses nothing, so it can race a timer in `select!`.
    pub async fn next_delta(&mut self) -> Result<Option<String>, LlmError> {
        if self.ended {
            return Ok(None);
        }
        loop {
            let item = match self.first.take() {
                Some(chunk) => Some(Ok(chunk)),
                None => {
                    let s = &self.client.inner.settings;
                    let by = self.deadline.min(self.last_chunk + s.stream_timeout);
                    match tokio::time::timeout_at(by, self.stream.next()).await {
                        Ok(item) => item,
                        Err(_) => {
                            let message = if by == self.deadline {
                                format!("the call took longer than {} s", s.call_timeout.as_secs())
                            } else {
                                format!("no chunk for {} s", s.stream_timeout.as_secs())
                            };
                            return Err(self.fail(LlmError::new(ErrorKind::Timeout, message)));
                        }
                    }
                }
            };
            self.last_chunk = Instant::now();
            match item {
                None => {
                    self.ended = true;
                    self.client.inner.breaker.success();
                    return Ok(None);
                }
                Some(Ok(Chunk::Delta(delta))) => {
                    self.text.push_str(&delta);
                    return Ok(Some(delta));
                }
                Some(Ok(Chunk::Usage(usage))) => self.usage = Some(usage),
                Some(Ok(Chunk::ToolCall(delta))) => self.add_tool_call(delta),
                Some(Ok(Chunk::Finish(reason))) => self.finish = Some(reason),
                Some(Err(err)) => return Err(self.fail(err)),
            }
        }
    }

    /// Fold a piece of a tool call into the call at its index. A piece
    /// for a later index than any so far starts a new call; ids and
    /// names are taken from the first piece that has them.
    fn add_tool_call(&mut self, delta: ToolCallDelta) {
        let position = if delta.index < self.tool_calls.len() {
            delta.index
        } else {
            self.tool_calls.push(ToolCall {
                id: String::new(),
                name: String::new(),
                arguments: String::new(),
            });
            self.tool_calls.len() - 1
        };
        let call = &mut self.tool_calls[position];
        if let Some(id) = delta.id.filter(|_| call.id.is_empty()) {
            call.id = id;
        }
        if let Some(name) = delta.name.filter(|_| call.name.is_empty()) {
            call.name = name;
        }
        call.arguments.push_str(&delta.arguments);
    }

    fn fail(&mut self, err: LlmError) -> LlmError {
        self.ended = true;
        count_call(&self.model, "error");
        if err.kind.is_provider_failure() {
            self.client.inner.breaker.failure(Instant::now());
        }
        err
    }

    /// The text so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The model the call went to.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The result: text, usage (reported, or estimated when the provider
    /// reported none) and cost.
    pub fn finish(self) -> Completion {
        let (usage, usage_estimated) = match self.usage {
            Some(u) => (u, false),
            None => (
                TokenUsage {
                    input_tokens: self.prompt_estimate,
                    output_tokens: estimate_tokens(&self.text),
                    cached_input_tokens: 0,
                },
                true,
            ),
        };
        let cost_micros = self
            .client
            .inner
            .settings
            .prices
            .cost_micros(&self.model, usage);
        count_call(&self.model, "ok");
        let m = metrics();
        for (kind, tokens) in [
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cached_input", usage.cached_input_tokens),
        ] {
            m.llm_tokens
                .get_or_create(&TokenLabels {
                    model: self.model.clone(),
                    kind,
                })
                .inc_by(tokens);
        }
        m.llm_cost
            .get_or_create(&ModelLabels {
                model: self.model.clone(),
            })
            .inc_by(cost_micros as f64 / 1e6);
        let finish = match self.finish {
            Some(reason) => reason,
            None if self.tool_calls.is_empty() => FinishReason::Complete,
            None => FinishReason::ToolUse,
        };
        // A call without an id still needs one to be answered.
        let tool_calls = self
            .tool_calls
            .into_iter()
            .enumerate()
            .map(|(i, mut call)| {
                if call.id.is_empty() {
                    call.id = format!("call_{}", i + 1);
                }
                call
            })
            .collect();
        Completion {
            text: self.text,
            model: self.model,
            usage,
            usage_estimated,
            cost_micros,
            tool_calls,
            finish,
        }
    }
}

/// A finished call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    pub text: String,
    pub model: String,
    pub usage: TokenUsage,
    /// Whether `usage` is our estimate (the provider reported none).
    pub usage_estimated: bool,
    pub cost_micros: u64,
    /// The tools the model called, in order.
    pub tool_calls: Vec<ToolCall>,
    pub finish: FinishReason,
}

impl Completion {
    /// As a step's [`Usage`].
    pub fn step_usage(&self) -> Usage {
        Usage {
            input_tokens: self.usage.input_tokens,
            output_tokens: self.usage.output_tokens,
            cost_micros: self.cost_micros,
        }
    }
}

/// Count one model call's end in `llm_calls_total`.
fn count_call(model: &str, outcome: &'static str) {
    metrics()
        .llm_calls
        .get_or_create(&ModelOutcomeLabels {
            model: model.to_owned(),
            outcome,
        })
        .inc();
}

#[cfg(test)]
mod tests {
    use std::{
        collections::BTreeMap,
        sync::atomic::{AtomicU32, Ordering},
    };

    use async_trait::async_trait;
    use futures_util::stream;

    use super::*;
    use crate::models::llm::Price;

    #[test]
    fn retry_delays_double_up_to_the_cap_with_half_jitter() {
        let retry = CallRetry::default();
        assert_eq!(retry.delay(1, 1.0), Duration::from_millis(1000));
        assert_eq!(retry.delay(1, 0.0), Duration::from_millis(500));
        assert_eq!(retry.delay(2, 1.0), Duration::from_millis(2000));
        assert_eq!(retry.delay(10, 1.0), Duration::from_millis(30_000));
    }

    /// A model that fails `failures` times with `kind`, then streams
    /// `"hello world"` with a usage chunk.
    struct Flaky {
        failures: u32,
        kind: ErrorKind,
        calls: AtomicU32,
    }

    #[async_trait]
    impl LanguageModel for Flaky {
        fn provider(&self) -> &str {
            "flaky"
        }
        async fn stream(&self, _request: &CompletionRequest) -> Result<ChunkStream, LlmError> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            if n < self.failures {
                return Err(LlmError::new(self.kind, "boom"));
            }
            Ok(Box::pin(stream::iter([
                Ok(Chunk::Delta("hello ".into())),
                Ok(Chunk::Delta("world".into())),
                Ok(Chunk::Usage(TokenUsage {
                    input_tokens: 7,
                    output_tokens: 2,
                    cached_input_tokens: 0,
                })),
            ])))
        }
    }

    fn client(failures: u32, kind: ErrorKind) -> (ModelClient, Arc<Flaky>) {
        let model = Arc::new(Flaky {
            failures,
            kind,
            calls: AtomicU32::new(0),
        });
        let settings = LlmSettings {
            default_model: "m".into(),
            prices: Prices::new(BTreeMap::from([(
                "m".to_owned(),
                Price {
                    input_per_million: 1.0,
                    output_per_million: 2.0,
                },
            )]))
            .unwrap(),
            ..LlmSettings::default()
        };
        (ModelClient::new(model.clone(), settings), model)
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_before_the_first_delta() {
        let (client, model) = client(2, ErrorKind::Unavailable);
        let started = Instant::now();
        let done = client
            .complete(client.request(vec![Message::user("hi")], None, None, None))
            .await
            .unwrap();
        assert_eq!(model.calls.load(Ordering::SeqCst), 3);
        // Waited 0.5-1 s, then 1-2 s (paused clock: no real sleep).
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(1500) && waited <= Duration::from_millis(3000));
        assert_eq!(done.text, "hello world");
        assert_eq!(
            done.usage,
            TokenUsage {
                input_tokens: 7,
                output_tokens: 2,
                cached_input_tokens: 0,
            }
        );
        assert!(!done.usage_estimated);
        assert_eq!(done.cost_micros, 7 + 4);
        assert_eq!(client.breaker_state(), BreakerState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn exhausted_retries_fail_retryably_and_rejections_at_once() {
        let (client, model) = client(5, ErrorKind::Unavailable);
        let err = client
            .complete(client.request(vec![Message::user("hi")], None, None, None))
            .await
            .unwrap_err();
        assert_eq!(model.calls.load(Ordering::SeqCst), 3);
        assert!(err.retryable());
        assert!(err.to_string().starts_with("MODEL_ERROR: boom"));

        let (client, model) = client_rejecting();
        let err = client
            .complete(client.request(vec![Message::user("hi")], None, None, None))
            .await
            .unwrap_err();
        assert_eq!(model.calls.load(Ordering::SeqCst), 1);
        assert!(!err.retryable());
    }

    fn client_rejecting() -> (ModelClient, Arc<Flaky>) {
        client(1, ErrorKind::Rejected)
    }

    #[tokio::test(start_paused = true)]
    async fn repeated_failures_open_the_breaker_which_fails_fast() {
        let (client, model) = client(u32::MAX, ErrorKind::Connection);
        // Five failures (3 attempts + 2 attempts) open the breaker.
        let request = client.request(vec![Message::user("hi")], None, None, None);
        assert!(client.complete(request.clone()).await.is_err());
        assert_eq!(client.breaker_state(), BreakerState::Closed);
        let err = client.complete(request.clone()).await.unwrap_err();
        assert_eq!(model.calls.load(Ordering::SeqCst), 5);
        assert_eq!(err.kind, ErrorKind::CircuitOpen);
        assert!(matches!(client.breaker_state(), BreakerState::Open { .. }));
        // While open, calls do not reach the provider.
        let err = client.complete(request).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::CircuitOpen);
        assert!(err.retryable());
        assert_eq!(model.calls.load(Ordering::SeqCst), 5);
    }

    /// Yields a delta, then nothing for a long time.
    struct Stalling;

    #[async_trait]
    impl LanguageModel for Stalling {
        fn provider(&self) -> &str {
            "stalling"
        }
        async fn stream(&self, _request: &CompletionRequest) -> Result<ChunkStream, LlmError> {
            Ok(Box::pin(
                stream::iter([Ok(Chunk::Delta("partial".into()))]).chain(stream::pending()),
            ))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_stream_times_out_after_the_gap_and_is_not_retried() {
        let client = ModelClient::new(Arc::new(Stalling), LlmSettings::default());
        let started = Instant::now();
        let mut generation = client
            .start(client.request(vec![Message::user("hi")], None, None, None))
            .await
            .unwrap();
        assert_eq!(
            generation.next_delta().await.unwrap().as_deref(),
            Some("partial")
        );
        let err = generation.next_delta().await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Timeout);
        assert!(err.message.contains("no chunk for 30 s"), "{err}");
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        assert!(err.retryable());
        assert_eq!(generation.next_delta().await.unwrap(), None);
    }

    #[tokio::test]
    async fn usage_is_estimated_when_the_provider_reports_none() {
        struct NoUsage;
        #[async_trait]
        impl LanguageModel for NoUsage {
            fn provider(&self) -> &str {
                "no-usage"
            }
            async fn stream(&self, _r: &CompletionRequest) -> Result<ChunkStream, LlmError> {
                Ok(Box::pin(stream::iter([Ok(Chunk::Delta(
                    "12345678".into(),
                ))])))
            }
        }
        let client = ModelClient::new(Arc::new(NoUsage), LlmSettings::default());
        let done = client
            .complete(client.request(vec![Message::user("abcd")], None, None, None))
            .await
            .unwrap();
        assert!(done.usage_estimated);
        assert_eq!(
            done.usage,
            TokenUsage {
                input_tokens: 5,
                output_tokens: 2,
                cached_input_tokens: 0,
            }
        );
    }
}
