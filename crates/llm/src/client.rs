//! [`LlmClient`]: the HTTP side (attempts, retries, backoff, streaming).

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ureq::http::{HeaderMap, HeaderValue, Uri};

use crate::error::truncate;
use crate::sse::SseParser;
use crate::wire;
use crate::{estimate_tokens, ChatRequest, ChatResponse, LlmConfig, LlmError, Usage};

/// The most a response body (streamed or not) may hold before the response is rejected.
pub const MAX_BODY_BYTES: u64 = 8 * 1024 * 1024;
/// How much of an error response's body is read (what is kept is shorter still).
const MAX_ERROR_BODY_BYTES: u64 = 64 * 1024;
/// How much of an error body an [`LlmError::Http`] keeps.
const ERROR_BODY_KEEP: usize = 1024;
/// Slice of a backoff sleep between two looks at the cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(25);

/// A blocking client for one OpenAI-compatible `chat/completions` endpoint.
///
/// Cheap to clone (the connection pool is shared) and `Send + Sync`: one client can serve
/// every thread. `Debug` never prints the API key.
#[derive(Clone)]
pub struct LlmClient {
    cfg: LlmConfig,
    endpoint: String,
    /// `Bearer <key>`, when there is a key.
    auth: Option<HeaderValue>,
    agent: ureq::Agent,
    /// Where completions are cached ([`LlmClient::with_cache`]).
    cache: Option<Arc<dyn CompletionCache>>,
    /// Cache completions sampled at a temperature above 0 too.
    cache_sampled: bool,
    /// The partition completions are cached in ([`LlmClient::scoped`]); none: not cached.
    scope: Option<String>,
    /// No request runs past this ([`LlmClient::until`]).
    until: Option<Instant>,
}

/// A store of completions for [`LlmClient::with_cache`]: what the client asked (the
/// request body it sends, streaming turned off, and the endpoint) maps to what it got.
/// `scope` partitions entries (one tenant's never serve another); a store must keep the
/// partitions apart. Failures are the store's to absorb: a `get` that fails is a miss.
pub trait CompletionCache: Send + Sync {
    /// The response stored for `request` in `scope`, if any.
    fn get(&self, scope: &str, request: &[u8]) -> Option<Vec<u8>>;
    /// Store `response` for `request` in `scope`.
    fn put(&self, scope: &str, request: &[u8], response: &[u8]);
}

/// Why one attempt failed, and what the server said about waiting.
struct Failure {
    err: LlmError,
    retry_after: Option<Duration>,
}

impl From<LlmError> for Failure {
    fn from(err: LlmError) -> Self {
        Failure {
            err,
            retry_after: None,
        }
    }
}

/// What a successful attempt produced (before usage estimation and cost).
struct Outcome {
    text: String,
    usage: Option<Usage>,
    model: Option<String>,
    finish_reason: Option<String>,
    ttft_ms: Option<f64>,
}

impl LlmClient {
    /// A client for `cfg`.
    ///
    /// Fails with [`LlmError::NotConfigured`] when `base_url` is empty, and with
    /// [`LlmError::InvalidConfig`] when it is not an `http(s)://host[:port][/path]` URL,
    /// a timeout is zero, the temperature is not finite, or the API key cannot be sent as
    /// a header. A trailing `/` or `/chat/completions` on `base_url` is tolerated. Nothing
    /// is sent over the network here.
    pub fn new(cfg: LlmConfig) -> Result<Self, LlmError> {
        if !cfg.is_configured() {
            return Err(LlmError::NotConfigured);
        }
        let endpoint = endpoint_of(&cfg.base_url)?;
        if cfg.timeout_ms == 0 || cfg.connect_timeout_ms == 0 {
            return Err(LlmError::InvalidConfig(
                "timeout_ms and connect_timeout_ms must be > 0".to_owned(),
            ));
        }
        if !cfg.temperature.is_finite() {
            return Err(LlmError::InvalidConfig(format!(
                "temperature {} is not finite",
                cfg.temperature
            )));
        }
        let key = cfg.api_key.clone().or_else(|| {
            (!cfg.api_key_env.is_empty())
                .then(|| std::env::var(&cfg.api_key_env).ok())
                .flatten()
        });
        let auth = match key.as_deref().map(str::trim).filter(|k| !k.is_empty()) {
            None => None,
            Some(k) => Some(HeaderValue::from_str(&format!("Bearer {k}")).map_err(|_| {
                LlmError::InvalidConfig("the API key holds characters a header cannot".to_owned())
            })?),
        };
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // A POST must not silently turn into a GET: a 3xx is reported as it is.
            .max_redirects(0)
            .max_redirects_will_error(false)
            .timeout_global(Some(Duration::from_millis(cfg.timeout_ms)))
            .timeout_connect(Some(Duration::from_millis(cfg.connect_timeout_ms)))
            .user_agent(concat!("neuralcore-llm/", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(Self {
            agent: ureq::Agent::new_with_config(config),
            endpoint,
            auth,
            cfg,
            cache: None,
            cache_sampled: false,
            scope: None,
            until: None,
        })
    }

    /// The same client, caching completions in `cache`: requests at temperature 0 (and,
    /// when `sampled`, any temperature) of a [scoped](Self::scoped) client are answered
    /// from it when it holds the same request, and stored in it when it does not. A
    /// cached response says so (`cached`).
    pub fn with_cache(mut self, cache: Arc<dyn CompletionCache>, sampled: bool) -> Self {
        self.cache = Some(cache);
        self.cache_sampled = sampled;
        self
    }

    /// A copy whose completions are cached under `scope` (a tenant): only scoped clients
    /// use the cache, so no call shares entries with another scope's by accident.
    pub fn scoped(&self, scope: &str) -> Self {
        Self {
            scope: Some(scope.to_owned()),
            ..self.clone()
        }
    }

    /// This client with every request ending by `until` (an ask's deadline): each
    /// attempt's timeout is cut to the time left, no retry starts (nor backoff sleeps)
    /// past it, and a request started after it fails at once with [`LlmError::Timeout`].
    /// A server that never answers then costs the caller no more than its deadline.
    pub fn until(&self, until: Instant) -> Self {
        Self {
            until: Some(until),
            ..self.clone()
        }
    }

    /// Time left before [`LlmClient::until`] (`None`: no limit), or the timeout error when
    /// none is.
    fn left(&self) -> Result<Option<Duration>, LlmError> {
        let Some(until) = self.until else {
            return Ok(None);
        };
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(LlmError::Timeout(format!(
                "{}: the caller's deadline passed",
                self.endpoint
            )));
        }
        Ok(Some(left))
    }

    /// The cache, the scope and the request's cache key, when this request is cached.
    fn cache_for(&self, req: &ChatRequest) -> Option<(&dyn CompletionCache, &str, Vec<u8>)> {
        let cache = self.cache.as_deref()?;
        let scope = self.scope.as_deref()?;
        let temperature = req.temperature.unwrap_or(self.cfg.temperature);
        if temperature != 0.0 && !self.cache_sampled {
            return None;
        }
        let mut key = self.endpoint.as_bytes().to_vec();
        key.push(0);
        key.extend(wire::request_body(&self.cfg, req, false));
        Some((cache, scope, key))
    }

    /// The configuration this client was built from.
    pub fn config(&self) -> &LlmConfig {
        &self.cfg
    }

    /// The URL requests are sent to (`{base_url}/chat/completions`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends `req` and returns the whole answer. Streams (and collects the text) when the
    /// config says `stream`, so the server's per-token pacing does not matter to the caller.
    pub fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.chat_with_cancel(req, &AtomicBool::new(false))
    }

    /// [`chat`](Self::chat), giving up with [`LlmError::Cancelled`] once `cancel` is set.
    ///
    /// The flag is checked before each attempt, during backoff waits and between stream
    /// reads; a request waiting for the server's first byte ends only at its timeout.
    pub fn chat_with_cancel(
        &self,
        req: &ChatRequest,
        cancel: &AtomicBool,
    ) -> Result<ChatResponse, LlmError> {
        self.run(req, self.cfg.stream, cancel, &mut |_| {})
    }

    /// Sends `req` with `"stream": true` and calls `on_delta` with each piece of text as it
    /// arrives; the response's `text` is all pieces concatenated.
    ///
    /// A failed attempt is retried only if nothing reached `on_delta` yet, so the caller
    /// never sees text twice. If the server answers with a plain JSON completion instead of
    /// an event stream, its text is delivered as one delta.
    pub fn chat_stream(
        &self,
        req: &ChatRequest,
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<ChatResponse, LlmError> {
        self.chat_stream_with_cancel(req, &AtomicBool::new(false), on_delta)
    }

    /// [`chat_stream`](Self::chat_stream) with a cancel flag (see
    /// [`chat_with_cancel`](Self::chat_with_cancel)).
    pub fn chat_stream_with_cancel(
        &self,
        req: &ChatRequest,
        cancel: &AtomicBool,
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<ChatResponse, LlmError> {
        self.run(req, true, cancel, on_delta)
    }

    /// [`retry`](Self::retry) in a span of its own: an OpenTelemetry client span with
    /// the GenAI semantic conventions (and OpenInference's names, which Phoenix reads).
    fn run(
        &self,
        req: &ChatRequest,
        stream: bool,
        cancel: &AtomicBool,
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<ChatResponse, LlmError> {
        use tracing::field::Empty;
        let span = tracing::info_span!(
            "llm.chat",
            otel.name = %format!("chat {}", self.cfg.model),
            otel.kind = "client",
            otel.status_code = Empty,
            otel.status_message = Empty,
            openinference.span.kind = "LLM",
            gen_ai.system = "openai",
            gen_ai.operation.name = "chat",
            gen_ai.request.model = %self.cfg.model,
            gen_ai.request.max_tokens = req.max_tokens,
            gen_ai.request.temperature = req.temperature.map(f64::from),
            gen_ai.response.model = Empty,
            gen_ai.response.finish_reasons = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            llm.model_name = %self.cfg.model,
            llm.token_count.prompt = Empty,
            llm.token_count.completion = Empty,
            neuralcore.llm.cost_usd = Empty,
            neuralcore.llm.cached = Empty,
            neuralcore.llm.attempts = Empty,
            neuralcore.llm.stream = stream,
        );
        let _entered = span.enter();
        let r = self.retry(req, stream, cancel, on_delta);
        match &r {
            Ok(resp) => {
                span.record("gen_ai.response.model", resp.model.as_str());
                if let Some(f) = &resp.finish_reason {
                    span.record("gen_ai.response.finish_reasons", f.as_str());
                }
                span.record("gen_ai.usage.input_tokens", resp.usage.prompt_tokens);
                span.record("gen_ai.usage.output_tokens", resp.usage.completion_tokens);
                span.record("llm.token_count.prompt", resp.usage.prompt_tokens);
                span.record("llm.token_count.completion", resp.usage.completion_tokens);
                if let Some(c) = resp.cost_usd {
                    span.record("neuralcore.llm.cost_usd", c);
                }
                span.record("neuralcore.llm.cached", resp.cached);
                span.record("neuralcore.llm.attempts", resp.attempts);
                span.record("otel.status_code", "ok");
            }
            Err(e) => {
                span.record("otel.status_code", "error");
                span.record("otel.status_message", e.to_string().as_str());
            }
        }
        r
    }

    /// The retry loop around [`attempt`](Self::attempt).
    fn retry(
        &self,
        req: &ChatRequest,
        stream: bool,
        cancel: &AtomicBool,
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<ChatResponse, LlmError> {
        let started = Instant::now();
        let cached = self.cache_for(req);
        if let Some((cache, scope, key)) = &cached {
            if let Some(mut r) = cache
                .get(scope, key)
                .and_then(|b| serde_json::from_slice::<ChatResponse>(&b).ok())
            {
                r.cached = true;
                r.attempts = 0;
                r.latency_ms = ms(started.elapsed());
                r.ttft_ms = None;
                r.usage = Usage::default();
                r.usage_estimated = false;
                r.cost_usd = r.cost_usd.map(|_| 0.0);
                tracing::debug!(endpoint = %self.endpoint, "llm completion from cache");
                if !r.text.is_empty() {
                    on_delta(&r.text);
                }
                return Ok(r);
            }
        }
        let body = wire::request_body(&self.cfg, req, stream);
        let max_attempts = self.cfg.max_retries.saturating_add(1);
        let mut attempt = 0u32;
        loop {
            if cancel.load(Ordering::Relaxed) {
                return Err(LlmError::Cancelled);
            }
            self.left()?;
            attempt += 1;
            let mut delivered = false;
            tracing::debug!(attempt, stream, endpoint = %self.endpoint, "llm request");
            let failure = match self.attempt(&body, stream, cancel, on_delta, &mut delivered) {
                Ok(out) => {
                    let r = self.finish(req, out, attempt, started);
                    if let Some((cache, scope, key)) = &cached {
                        if let Ok(bytes) = serde_json::to_vec(&r) {
                            cache.put(scope, key, &bytes);
                        }
                    }
                    return Ok(r);
                }
                Err(f) => f,
            };
            let err = failure.err;
            if delivered || !err.is_retryable() || attempt >= max_attempts {
                tracing::debug!(attempt, delivered, error = %err, "llm request failed");
                return Err(err);
            }
            let delay = self.delay(attempt, failure.retry_after);
            if self.left()?.is_some_and(|left| left <= delay) {
                tracing::debug!(attempt, error = %err, "llm request failed; no time left to retry");
                return Err(err);
            }
            tracing::warn!(
                attempt,
                max_attempts,
                delay_ms = delay.as_millis() as u64,
                error = %err,
                "llm request failed; retrying"
            );
            sleep_cancellable(delay, cancel)?;
        }
    }

    /// One HTTP exchange.
    fn attempt(
        &self,
        body: &[u8],
        stream: bool,
        cancel: &AtomicBool,
        on_delta: &mut dyn FnMut(&str),
        delivered: &mut bool,
    ) -> Result<Outcome, Failure> {
        let start = Instant::now();
        let accept = if stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        let mut rb = self
            .agent
            .post(&self.endpoint)
            .header("Content-Type", "application/json")
            .header("Accept", accept);
        if let Some(left) = self.left()? {
            let whole = Duration::from_millis(self.cfg.timeout_ms).min(left);
            rb = rb.config().timeout_global(Some(whole)).build();
        }
        if let Some(auth) = &self.auth {
            rb = rb.header("Authorization", auth.clone());
        }
        // W3C trace context: the server's spans (if it traces) join this ask's trace.
        if let Some(tp) = neuralcore_telemetry::traceparent() {
            rb = rb.header("traceparent", tp);
        }
        let resp = rb.send(body).map_err(|e| self.map_ureq(e))?;
        let status = resp.status().as_u16();
        let retry_after = retry_after(resp.headers());
        let is_sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        let mut resp_body = resp.into_body();

        if !(200..300).contains(&status) {
            // Best effort: an error body that fails half-way is still worth showing.
            let mut bytes = Vec::new();
            let _ = resp_body
                .as_reader()
                .take(MAX_ERROR_BODY_BYTES)
                .read_to_end(&mut bytes);
            let text = String::from_utf8_lossy(&bytes);
            return Err(Failure {
                err: LlmError::Http {
                    status,
                    body: truncate(text.trim(), ERROR_BODY_KEEP),
                },
                retry_after: retry_after.filter(|_| matches!(status, 429 | 503)),
            });
        }

        if stream && is_sse {
            return self.read_stream(resp_body, start, cancel, on_delta, delivered);
        }
        let bytes = resp_body
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_vec()
            .map_err(|e| self.map_ureq(e))?;
        let c = wire::parse_completion(&bytes)?;
        let mut ttft_ms = None;
        if stream && !c.text.is_empty() {
            // The server ignored `"stream": true` and sent a plain completion.
            ttft_ms = Some(ms(start.elapsed()));
            *delivered = true;
            on_delta(&c.text);
        }
        Ok(Outcome {
            text: c.text,
            usage: c.usage,
            model: c.model,
            finish_reason: c.finish_reason,
            ttft_ms,
        })
    }

    /// Reads a server-sent-event stream of chat-completion chunks until `[DONE]` or EOF.
    fn read_stream(
        &self,
        body: ureq::Body,
        start: Instant,
        cancel: &AtomicBool,
        on_delta: &mut dyn FnMut(&str),
        delivered: &mut bool,
    ) -> Result<Outcome, Failure> {
        let mut reader = body.into_with_config().limit(MAX_BODY_BYTES).reader();
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        let mut out = Outcome {
            text: String::new(),
            usage: None,
            model: None,
            finish_reason: None,
            ttft_ms: None,
        };
        let (mut saw_choice, mut done) = (false, false);
        while !done {
            if cancel.load(Ordering::Relaxed) {
                return Err(LlmError::Cancelled.into());
            }
            let n = match reader.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.map_ureq(ureq::Error::from(e))),
            };
            if n == 0 {
                parser.finish(&mut events);
            } else {
                parser.feed(&buf[..n], &mut events);
            }
            for ev in events.drain(..) {
                if done {
                    break;
                }
                let data = ev.data.trim();
                if data == "[DONE]" {
                    done = true;
                    continue;
                }
                if ev.event == "error" {
                    return Err(LlmError::Http {
                        status: 500,
                        body: truncate(data, ERROR_BODY_KEEP),
                    }
                    .into());
                }
                let chunk = wire::parse_chunk(data)?;
                saw_choice |= chunk.has_choice;
                if let Some(delta) = chunk.delta.filter(|d| !d.is_empty()) {
                    out.ttft_ms.get_or_insert_with(|| ms(start.elapsed()));
                    *delivered = true;
                    on_delta(&delta);
                    out.text.push_str(&delta);
                }
                out.usage = chunk.usage.or(out.usage);
                out.model = chunk.model.or(out.model);
                out.finish_reason = chunk.finish_reason.or(out.finish_reason);
            }
            if n == 0 {
                break;
            }
        }
        if !saw_choice {
            return Err(LlmError::Malformed(format!(
                "event stream ended ({}) without any choice",
                if done { "[DONE]" } else { "EOF" }
            ))
            .into());
        }
        if !done && out.finish_reason.is_none() {
            tracing::warn!("llm stream ended without [DONE] or finish_reason; text may be cut");
        }
        Ok(out)
    }

    /// Fills in attempts, latency, usage (estimated if the server sent none) and cost.
    fn finish(
        &self,
        req: &ChatRequest,
        out: Outcome,
        attempts: u32,
        started: Instant,
    ) -> ChatResponse {
        let usage_estimated = out.usage.is_none();
        let usage = out.usage.unwrap_or_else(|| Usage {
            prompt_tokens: req
                .messages
                .iter()
                .map(|m| estimate_tokens(&m.content))
                .sum(),
            completion_tokens: estimate_tokens(&out.text),
        });
        let latency_ms = ms(started.elapsed());
        tracing::debug!(
            attempts,
            latency_ms,
            prompt_tokens = usage.prompt_tokens,
            completion_tokens = usage.completion_tokens,
            usage_estimated,
            "llm request done"
        );
        ChatResponse {
            text: out.text,
            usage,
            usage_estimated,
            model: out.model.unwrap_or_else(|| self.cfg.model.clone()),
            finish_reason: out.finish_reason,
            attempts,
            latency_ms,
            ttft_ms: out.ttft_ms,
            cost_usd: self
                .cfg
                .cost_usd(usage.prompt_tokens, usage.completion_tokens),
            cached: false,
        }
    }

    /// The wait before attempt `attempt + 1`: the server's `Retry-After` if it sent one,
    /// else `backoff_ms * 2^(attempt-1)` with "equal jitter" (half fixed, half random);
    /// both capped at `max_backoff_ms`.
    fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let cap = Duration::from_millis(self.cfg.max_backoff_ms);
        if let Some(d) = retry_after {
            return d.min(cap);
        }
        let exp = self
            .cfg
            .backoff_ms
            .saturating_mul(1u64 << attempt.saturating_sub(1).min(30))
            .min(self.cfg.max_backoff_ms);
        Duration::from_millis(exp / 2 + random_below(exp / 2 + 1))
    }

    fn map_ureq(&self, e: ureq::Error) -> Failure {
        use ureq::Error as E;
        let err = match e {
            E::Timeout(ureq::Timeout::Connect) => LlmError::Timeout(format!(
                "no connection to {} within {} ms",
                self.endpoint, self.cfg.connect_timeout_ms
            )),
            E::Timeout(t) => LlmError::Timeout(format!(
                "no complete response from {} within {} ms ({t})",
                self.endpoint, self.cfg.timeout_ms
            )),
            E::Io(io) => match io.kind() {
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
                    LlmError::Timeout(format!("{}: {io}", self.endpoint))
                }
                _ => LlmError::Unavailable(format!("{}: {io}", self.endpoint)),
            },
            E::HostNotFound | E::ConnectionFailed | E::BodyStalled => {
                LlmError::Unavailable(format!("{}: {e}", self.endpoint))
            }
            E::Protocol(p) => LlmError::Malformed(format!("invalid HTTP response: {p}")),
            E::BodyExceedsLimit(_) => {
                LlmError::Malformed(format!("response body larger than {MAX_BODY_BYTES} bytes"))
            }
            E::LargeResponseHeader(..) | E::Json(_) => LlmError::Malformed(e.to_string()),
            other => LlmError::Transport(other.to_string()),
        };
        err.into()
    }
}

impl fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmClient")
            .field("endpoint", &self.endpoint)
            .field("has_api_key", &self.auth.is_some())
            .field("cfg", &self.cfg)
            .field("cached", &self.cache.is_some())
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// `{base_url}/chat/completions`, after checking that `base_url` is an http(s) URL.
fn endpoint_of(base_url: &str) -> Result<String, LlmError> {
    let invalid = |why: &str| LlmError::InvalidConfig(format!("base_url {base_url:?}: {why}"));
    let base = base_url.trim().trim_end_matches('/');
    let base = base.strip_suffix("/chat/completions").unwrap_or(base);
    let uri: Uri = base.parse().map_err(|_| invalid("not a URL"))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        _ => return Err(invalid("must start with http:// or https://")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(invalid("has no host"));
    }
    if uri.query().is_some() {
        return Err(invalid("must not have a query string"));
    }
    Ok(format!("{base}/chat/completions"))
}

/// A `Retry-After` given in seconds (an HTTP date is ignored: the backoff applies).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let secs: f64 = headers
        .get("retry-after")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
}

/// Sleeps `d`, waking every [`CANCEL_POLL`] to look at `cancel`.
fn sleep_cancellable(d: Duration, cancel: &AtomicBool) -> Result<(), LlmError> {
    let end = Instant::now() + d;
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Err(LlmError::Cancelled);
        }
        let now = Instant::now();
        if now >= end {
            return Ok(());
        }
        std::thread::sleep((end - now).min(CANCEL_POLL));
    }
}

/// A number in `0..n` (0 when `n` is 0), random enough for jitter.
fn random_below(n: u64) -> u64 {
    if n == 0 {
        return 0;
    }
    let mut h = RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    h.finish() % n
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_normalised_and_bad_urls_rejected() {
        for (base, want) in [
            (
                "http://127.0.0.1:8080/v1",
                "http://127.0.0.1:8080/v1/chat/completions",
            ),
            ("http://h/v1/", "http://h/v1/chat/completions"),
            (
                " https://api.x.com/v1/chat/completions ",
                "https://api.x.com/v1/chat/completions",
            ),
            (
                "http://localhost:11434",
                "http://localhost:11434/chat/completions",
            ),
        ] {
            assert_eq!(endpoint_of(base).unwrap(), want, "{base}");
        }
        for base in [
            "ftp://h/v1",
            "127.0.0.1:8080/v1",
            "http://",
            "not a url",
            "http://h/v1?x=1",
        ] {
            assert!(
                matches!(endpoint_of(base), Err(LlmError::InvalidConfig(_))),
                "{base}"
            );
        }
    }

    #[test]
    fn retry_after_seconds() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after", HeaderValue::from_static("0.5"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(500)));
        h.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("-1"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn backoff_grows_with_jitter_and_is_capped() {
        let client = LlmClient::new(LlmConfig {
            backoff_ms: 100,
            max_backoff_ms: 1000,
            ..LlmConfig::new("http://h/v1", "m")
        })
        .unwrap();
        for _ in 0..50 {
            let d1 = client.delay(1, None).as_millis();
            let d2 = client.delay(2, None).as_millis();
            let d9 = client.delay(9, None).as_millis();
            assert!((50..=100).contains(&d1), "{d1}");
            assert!((100..=200).contains(&d2), "{d2}");
            assert!((500..=1000).contains(&d9), "{d9}");
        }
        assert!(client.delay(40, None).as_millis() <= 1000);
        let ra = Some(Duration::from_secs(60));
        assert_eq!(client.delay(1, ra), Duration::from_millis(1000));
        assert_eq!(client.delay(1, Some(Duration::ZERO)), Duration::ZERO);
    }

    #[test]
    fn sleep_cancellable_returns_early() {
        let cancel = AtomicBool::new(true);
        let t = Instant::now();
        assert_eq!(
            sleep_cancellable(Duration::from_secs(5), &cancel),
            Err(LlmError::Cancelled)
        );
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn random_below_stays_in_range() {
        assert_eq!(random_below(0), 0);
        assert!((0..100).all(|_| random_below(3) < 3));
    }
}
