//! Compatibility endpoints, so clients written for other servers work unchanged:
//!
//! - OpenAI's chat completions (`POST /v1/chat/completions`, `GET /v1/models`): the model
//!   name picks the collection (`neuralcore` → `default`, `neuralcore/<collection>`),
//!   the last user message is the question and the earlier turns its conversation; the
//!   reply is the cited answer (or the abstention) and `neuralcore` carries the full
//!   ask report. Errors are OpenAI's `{"error": {message, type, param, code}}`.
//! - ACAI's chat (`POST /api/chat`, `GET /`, `GET /health`) with the shapes of its
//!   FastAPI app.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State as AxumState;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream};
use neuralcore_app::{new_run_id, AppError, AskOptions, AskReport, Cancel, Scope};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::routes::CancelOnDrop;
use crate::wire::ApiJson;
use crate::State;

type St = AxumState<Arc<State>>;

/// The model name that asks the default collection; `neuralcore/<collection>` asks
/// another.
pub const MODEL: &str = "neuralcore";
/// Longest ACAI message, in characters.
pub const ACAI_MAX_CHARS: usize = 10_000;

/// An OpenAI-style error.
pub struct OpenAiError {
    status: StatusCode,
    message: String,
    kind: &'static str,
    code: Option<&'static str>,
}

impl OpenAiError {
    fn invalid(message: impl Into<String>) -> Self {
        OpenAiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            code: None,
        }
    }
}

impl From<ApiError> for OpenAiError {
    fn from(e: ApiError) -> Self {
        let kind = match e.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            400 | 413 | 415 => "invalid_request_error",
            _ => "server_error",
        };
        OpenAiError {
            status: e.status,
            message: e.detail,
            kind,
            code: None,
        }
    }
}

impl From<AppError> for OpenAiError {
    fn from(e: AppError) -> Self {
        ApiError::from(e).into()
    }
}

/// An OpenAI-style error body.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OpenAiErrorBody {
    /// The error.
    pub error: OpenAiErrorDetail,
}

/// What went wrong, as OpenAI's clients read it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OpenAiErrorDetail {
    /// For people.
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `not_found_error`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The parameter at fault (always null here).
    pub param: Option<String>,
    /// `model_not_found`, or null.
    pub code: Option<String>,
}

impl OpenAiError {
    fn body(&self) -> OpenAiErrorBody {
        OpenAiErrorBody {
            error: OpenAiErrorDetail {
                message: self.message.clone(),
                kind: self.kind.into(),
                param: None,
                code: self.code.map(str::to_string),
            },
        }
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

/// A chat message; `content` is a string or a list of parts (`{"type": "text", "text"}`).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// The text.
    #[serde(default)]
    pub content: Value,
}

impl ChatMessage {
    fn text(&self) -> Result<String, OpenAiError> {
        match &self.content {
            Value::String(s) => Ok(s.clone()),
            Value::Null => Ok(String::new()),
            Value::Array(parts) => {
                let mut out = Vec::new();
                for p in parts {
                    match (p.get("type").and_then(Value::as_str), p.get("text")) {
                        (Some("text"), Some(Value::String(t))) => out.push(t.as_str()),
                        _ => {
                            return Err(OpenAiError::invalid(
                                "only text content parts are supported",
                            ))
                        }
                    }
                }
                Ok(out.join("\n"))
            }
            _ => Err(OpenAiError::invalid(
                "message content must be a string or a list of text parts",
            )),
        }
    }
}

/// `POST /v1/chat/completions`. Fields OpenAI defines that do not apply here
/// (`temperature`, `max_tokens`, `n`, ...) are accepted and ignored.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct ChatRequest {
    /// `neuralcore` or `neuralcore/<collection>`.
    pub model: String,
    /// The conversation; the last one must be the user's.
    #[schema(min_items = 1)]
    pub messages: Vec<ChatMessage>,
    /// Stream chunks as server-sent events.
    #[serde(default)]
    pub stream: bool,
}

fn collection_of(model: &str) -> Result<String, OpenAiError> {
    let not_found = || {
        OpenAiError {
        status: StatusCode::NOT_FOUND,
        message: format!(
            "the model {model:?} does not exist: use \"{MODEL}\" or \"{MODEL}/<collection>\" (GET /v1/models lists them)"
        ),
        kind: "invalid_request_error",
        code: Some("model_not_found"),
    }
    };
    if model == MODEL {
        return Ok(neuralcore_core::DEFAULT_COLLECTION.into());
    }
    match model.strip_prefix("neuralcore/") {
        Some(c) if !c.is_empty() => Ok(c.to_string()),
        _ => Err(not_found()),
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `GET /v1/models`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ModelList {
    /// `list`.
    pub object: &'static str,
    /// The models.
    pub data: Vec<ModelCard>,
}

/// A model: `neuralcore` (the default collection) or `neuralcore/<collection>`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ModelCard {
    /// The name to pass as `model`.
    pub id: String,
    /// `model`.
    pub object: &'static str,
    /// 0.
    pub created: u64,
    /// `neuralcore`.
    pub owned_by: &'static str,
}

/// `GET /v1/models`: `neuralcore` and one `neuralcore/<collection>` per collection of the
/// caller's tenant.
#[utoipa::path(get, path = "/v1/models", tag = "openai",
    responses((status = 200, description = "The models (collections) the key can ask", body = ModelList)))]
pub async fn models(
    AxumState(st): St,
    caller: Result<Caller, ApiError>,
) -> Result<Json<ModelList>, OpenAiError> {
    let caller = caller?;
    let tenant = caller.tenant().clone();
    let cols = st.blocking(move |app| app.collections(&tenant)).await?;
    let model = |id: String| ModelCard {
        id,
        object: "model",
        created: 0,
        owned_by: "neuralcore",
    };
    let mut data = vec![model(MODEL.into())];
    data.extend(
        cols.into_iter()
            .map(|c| model(format!("{MODEL}/{}", c.name))),
    );
    Ok(Json(ModelList {
        object: "list",
        data,
    }))
}

/// `POST /v1/chat/completions` without `stream`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ChatCompletion {
    /// `chatcmpl-<run id>`.
    pub id: String,
    /// `chat.completion`.
    pub object: &'static str,
    /// Seconds since 1970.
    pub created: u64,
    /// The model asked.
    pub model: String,
    /// One choice.
    pub choices: Vec<ChatChoice>,
    /// Tokens of the question and of the reply.
    pub usage: Usage,
    /// The full ask report (`neuralcore.ask/v1`).
    pub neuralcore: AskReport,
}

/// The reply.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ChatChoice {
    /// 0.
    pub index: u32,
    /// The cited answer or the abstention.
    pub message: AssistantMessage,
    /// `stop`.
    pub finish_reason: &'static str,
    /// Always null.
    pub logprobs: Option<String>,
}

/// The assistant's message.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AssistantMessage {
    /// `assistant`.
    pub role: &'static str,
    /// The text.
    pub content: String,
}

/// Token counts (neuralcore's own tokenizer's).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Usage {
    /// Of the question.
    pub prompt_tokens: usize,
    /// Of the reply.
    pub completion_tokens: usize,
    /// Both.
    pub total_tokens: usize,
}

/// The question and the earlier turns of an OpenAI message list.
fn conversation(messages: &[ChatMessage]) -> Result<(String, Vec<(String, String)>), OpenAiError> {
    let last = messages
        .last()
        .ok_or_else(|| OpenAiError::invalid("messages is empty"))?;
    if last.role != "user" {
        return Err(OpenAiError::invalid("the last message must be the user's"));
    }
    let question = last.text()?;
    if neuralcore_app::blank(&question) {
        return Err(OpenAiError::invalid("the last user message is empty"));
    }
    if question.len() > neuralcore_agents::consciousness::MAX_QUESTION_BYTES {
        return Err(OpenAiError::invalid(format!(
            "the question is {} bytes; the longest accepted is {}",
            question.len(),
            neuralcore_agents::consciousness::MAX_QUESTION_BYTES
        )));
    }
    let mut history: Vec<(String, String)> = Vec::new();
    for m in &messages[..messages.len() - 1] {
        let text = m.text()?;
        match m.role.as_str() {
            "user" => history.push((text, String::new())),
            "assistant" => match history.last_mut() {
                Some((_, a)) if a.is_empty() => *a = text,
                _ => history.push((String::new(), text)),
            },
            // System, developer and tool messages do not steer retrieval.
            _ => {}
        }
    }
    Ok((question, history))
}

/// The answer a person reads: the text with its numbered sources, or the abstention.
pub fn cited_answer(r: &AskReport) -> String {
    let mut out = r.answer.clone();
    if !r.abstained && !r.citations.is_empty() {
        out.push_str("\n\nSources:");
        for c in &r.citations {
            let title = if c.title.is_empty() {
                "untitled"
            } else {
                &c.title
            };
            out.push_str(&format!("\n[{}] {title}", c.n));
            if let Some(s) = &c.source {
                out.push_str(&format!(" — {s}"));
            }
            if let Some(l) = &c.locator {
                out.push_str(&format!(" ({l})"));
            }
        }
    }
    out
}

fn usage(question: &str, content: &str) -> Usage {
    let p = neuralcore_core::text::count_tokens(question);
    let c = neuralcore_core::text::count_tokens(content);
    Usage {
        prompt_tokens: p,
        completion_tokens: c,
        total_tokens: p + c,
    }
}

/// `POST /v1/chat/completions`.
#[utoipa::path(post, path = "/v1/chat/completions", tag = "openai", request_body = ChatRequest,
    responses((status = 200, description = "The cited answer as a chat completion; with `stream: true`, `chat.completion.chunk` server-sent events ending in `[DONE]`",
        content((ChatCompletion = "application/json"), (crate::wire::SseEventDoc = "text/event-stream")))))]
pub async fn chat_completions(
    AxumState(st): St,
    caller: Result<Caller, ApiError>,
    body: Result<ApiJson<ChatRequest>, ApiError>,
) -> Result<Response, OpenAiError> {
    let caller = caller?;
    let ApiJson(req) = body?;
    let collection = collection_of(&req.model)?;
    let (question, history) = conversation(&req.messages)?;
    let cancel = Cancel::default();
    let deadline = st
        .app
        .config()
        .control
        .deadline_ms
        .min(st.opts.request_timeout.as_millis() as u64);
    let opts = AskOptions {
        collection,
        deadline_ms: Some(if deadline == 0 {
            st.opts.request_timeout.as_millis() as u64
        } else {
            deadline
        }),
        cancel: cancel.clone(),
        ..Default::default()
    };
    let tenant = caller.tenant().clone();
    let run_id = new_run_id("chat");
    let id = format!("chatcmpl-{run_id}");
    let model = req.model.clone();
    let q = question.clone();
    let run = run_id.clone();
    let guard = CancelOnDrop(cancel);
    let pool = st.clone();
    let work = async move {
        let report = pool
            .blocking(move |app| app.ask_in_conversation(&tenant, &run, &q, &history, &opts, false))
            .await;
        if let Ok(r) = &report {
            pool.metrics.ask(r);
        }
        report
    };
    if !req.stream {
        let report = work.await?;
        drop(guard);
        let content = cited_answer(&report);
        return Ok(Json(ChatCompletion {
            id,
            object: "chat.completion",
            created: now_secs(),
            model,
            choices: vec![ChatChoice {
                index: 0,
                message: AssistantMessage {
                    role: "assistant",
                    content: content.clone(),
                },
                finish_reason: "stop",
                logprobs: None,
            }],
            usage: usage(&question, &content),
            neuralcore: report,
        })
        .into_response());
    }
    // Streamed: the role at once, then the checked answer when the loop has it (a draft
    // is never sent before it is checked), then the report, then [DONE].
    let (tx, rx) = tokio::sync::mpsc::channel::<Value>(8);
    let created = now_secs();
    let chunk = move |delta: Value, finish: Value, extra: Option<Value>| {
        let mut c = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": Value::Null}],
        });
        if let Some((k, v)) = extra
            .and_then(|e| e.as_object().cloned())
            .and_then(|o| o.into_iter().next())
        {
            c[k] = v;
        }
        c
    };
    let _ = tx.try_send(chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
        None,
    ));
    tokio::spawn(async move {
        match work.await {
            Ok(report) => {
                let content = cited_answer(&report);
                let u = usage(&question, &content);
                let _ = tx
                    .send(chunk(json!({"content": content}), Value::Null, None))
                    .await;
                let _ = tx
                    .send(chunk(json!({}), json!("stop"), Some(json!({"usage": u}))))
                    .await;
                let mut last = chunk(json!({}), Value::Null, None);
                last["choices"] = json!([]);
                last["neuralcore"] = json!(report);
                let _ = tx.send(last).await;
            }
            Err(e) => {
                let e = OpenAiError::from(e);
                let _ = tx.send(json!(e.body())).await;
            }
        }
    });
    Ok(Sse::new(openai_stream(rx, guard))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

fn openai_stream(
    rx: tokio::sync::mpsc::Receiver<Value>,
    guard: CancelOnDrop,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    stream::unfold((Some(rx), guard), |(rx, guard)| async move {
        let mut rx = rx?;
        match rx.recv().await {
            Some(v) => Some((
                Ok(SseEvent::default().data(v.to_string())),
                (Some(rx), guard),
            )),
            None => Some((Ok(SseEvent::default().data("[DONE]")), (None, guard))),
        }
    })
}

/// `POST /api/chat`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct AcaiRequest {
    /// 1 to 10,000 characters.
    #[schema(min_length = 1, max_length = 10000, pattern = "\\S")]
    pub message: String,
}

/// ACAI's chat answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AcaiResponse {
    /// true.
    pub success: bool,
    /// The cited answer or the abstention.
    pub response: String,
    /// The LLM's model, or `neuralcore-extractive` without one.
    pub model: String,
    /// `rag` when evidence was retrieved, else `direct`.
    pub mode: &'static str,
    /// The loop's plan.
    pub plan: AcaiPlan,
    /// What was retrieved.
    pub retrieval: AcaiRetrieval,
}

/// The plan, in ACAI's terms.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AcaiPlan {
    /// factual, comparison, multi-hop, summary, procedural, chit-chat.
    pub task_type: String,
    /// low, medium, high.
    pub complexity: String,
    /// The loop's stages that ran, in order.
    pub steps: Vec<String>,
}

/// Retrieval, in ACAI's terms.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AcaiRetrieval {
    /// Whether the loop retrieved.
    pub used: bool,
    /// The cited passages.
    pub context: Vec<String>,
}

/// `GET /` (ACAI).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AcaiRoot {
    /// `neuralcore`.
    pub name: &'static str,
    /// The server's version.
    pub version: &'static str,
    /// `online`.
    pub status: &'static str,
}

/// `GET /health` (ACAI).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AcaiHealth {
    /// `healthy`.
    pub status: &'static str,
    /// `NEURALCORE_ENVIRONMENT`, default `production`.
    pub environment: String,
}

/// `POST /api/chat` (ACAI): `{success, response, model, mode, plan: {task_type,
/// complexity, steps}, retrieval: {used, context}}` over the default collection.
#[utoipa::path(post, path = "/api/chat", tag = "acai", request_body = AcaiRequest,
    responses((status = 200, description = "The answer with the plan and the retrieval", body = AcaiResponse)))]
pub async fn acai_chat(
    AxumState(st): St,
    caller: Caller,
    ApiJson(req): ApiJson<AcaiRequest>,
) -> Result<Json<AcaiResponse>, ApiError> {
    let n = req.message.chars().count();
    if n == 0 || n > ACAI_MAX_CHARS || neuralcore_app::blank(&req.message) {
        return Err(ApiError::invalid(format!(
            "message must be 1 to {ACAI_MAX_CHARS} characters (got {n})"
        )));
    }
    let cancel = Cancel::default();
    let _guard = CancelOnDrop(cancel.clone());
    let cap = st.opts.request_timeout.as_millis() as u64;
    let deadline = match st.app.config().control.deadline_ms {
        0 => cap,
        d => d.min(cap),
    };
    let opts = AskOptions {
        collection: neuralcore_core::DEFAULT_COLLECTION.into(),
        deadline_ms: Some(deadline),
        cancel,
        ..Default::default()
    };
    let tenant = caller.tenant().clone();
    let run_id = new_run_id("acai");
    let message = req.message;
    let may_create = caller.require(Scope::Write).is_ok();
    let report = st
        .blocking(move |app| {
            // An empty knowledge base is not an error here: the loop answers that it
            // has no evidence (a read-only key gets the not-found error instead).
            if may_create && app.collection(&tenant, &opts.collection).is_err() {
                app.create_collection(&tenant, &opts.collection)?;
            }
            app.ask(&tenant, &run_id, &message, &opts, false)
        })
        .await?;
    st.metrics.ask(&report);
    let first = report.iterations.first();
    let plan = first.and_then(|i| i.plan.as_ref());
    let used = first
        .and_then(|i| i.decision.as_ref())
        .is_none_or(|d| d.retrieve);
    let mut steps: Vec<String> = Vec::new();
    for it in &report.iterations {
        for s in &it.stages {
            if s.skipped.is_none() && !steps.contains(&s.stage) {
                steps.push(s.stage.clone());
            }
        }
    }
    let model = if st.app.config().llm.is_configured() {
        st.app.config().llm.model.clone()
    } else {
        "neuralcore-extractive".to_string()
    };
    Ok(Json(AcaiResponse {
        success: true,
        response: cited_answer(&report),
        model,
        mode: if used { "rag" } else { "direct" },
        plan: AcaiPlan {
            task_type: plan
                .map(|p| p.task.clone())
                .unwrap_or_else(|| "factual".into()),
            complexity: plan
                .map(|p| p.complexity.clone())
                .unwrap_or_else(|| "low".into()),
            steps,
        },
        retrieval: AcaiRetrieval {
            used,
            context: report.citations.iter().map(|c| c.text.clone()).collect(),
        },
    }))
}

/// `GET /` (ACAI).
#[utoipa::path(get, path = "/", tag = "acai", security(()),
    responses((status = 200, description = "The server is online", body = AcaiRoot)))]
pub async fn acai_root() -> Json<AcaiRoot> {
    Json(AcaiRoot {
        name: "neuralcore",
        version: env!("CARGO_PKG_VERSION"),
        status: "online",
    })
}

/// `GET /health` (ACAI).
#[utoipa::path(get, path = "/health", tag = "acai", security(()),
    responses((status = 200, description = "The server is healthy", body = AcaiHealth)))]
pub async fn acai_health() -> Json<AcaiHealth> {
    let environment =
        std::env::var("NEURALCORE_ENVIRONMENT").unwrap_or_else(|_| "production".into());
    Json(AcaiHealth {
        status: "healthy",
        environment,
    })
}
