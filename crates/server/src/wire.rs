//! Request bodies and stream events of the HTTP API (`/v1`). Requests reject unknown
//! fields; every stream event carries the schema it belongs to
//! ([`EVENTS_SCHEMA`], documented in `docs/api.md`).

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use neuralcore_agents::Switches;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// The version of the ask stream's events.
pub const EVENTS_SCHEMA: &str = "neuralcore.events/v1";

/// A JSON body, with every way it can be wrong answered as a problem: not JSON, the
/// wrong types, unknown fields, too large, not `application/json`.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(JsonRejection::MissingJsonContentType(_)) => Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the body must be JSON (Content-Type: application/json)",
            )),
            Err(JsonRejection::BytesRejection(e))
                if e.status() == StatusCode::PAYLOAD_TOO_LARGE =>
            {
                Err(ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    "the body is larger than this server accepts",
                ))
            }
            Err(JsonRejection::JsonDataError(e)) => Err(ApiError::invalid(format!(
                "the body does not fit: {}",
                e.body_text()
            ))),
            Err(JsonRejection::JsonSyntaxError(e)) => Err(ApiError::invalid(format!(
                "the body is not valid JSON: {}",
                e.body_text()
            ))),
            Err(e) => Err(ApiError::invalid(e.body_text())),
        }
    }
}

/// `POST /v1/collections`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateCollection {
    /// The collection's name.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = "^[A-Za-z0-9_-][A-Za-z0-9_.-]*$"
    )]
    pub name: String,
}

/// `POST /v1/ask`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AskRequest {
    /// The question.
    #[schema(min_length = 1, max_length = 4096, pattern = "\\S")]
    pub question: String,
    /// The collection (default `default`).
    #[serde(default = "default_collection")]
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = "^[A-Za-z0-9_-][A-Za-z0-9_.-]*$"
    )]
    pub collection: String,
    /// A conversation to continue.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 31, pattern = "^[a-z0-9_-]+$")]
    pub session: Option<String>,
    /// Recall from the tenant's memories too.
    #[serde(default)]
    pub memory: bool,
    /// The memory project to recall from.
    #[serde(default)]
    pub project: Option<String>,
    /// Overrides `loop.max_iterations`.
    #[serde(default, deserialize_with = "neuralcore_app::de_opt_uint")]
    #[schema(maximum = 100)]
    pub max_iterations: Option<u32>,
    /// Overrides `loop.deadline_ms`, at most the server's request deadline.
    #[serde(default, deserialize_with = "neuralcore_app::de_opt_uint")]
    pub deadline_ms: Option<u64>,
    /// Ablations.
    #[serde(default)]
    pub switches: AskSwitches,
}

fn default_collection() -> String {
    neuralcore_core::DEFAULT_COLLECTION.into()
}

/// Stages to switch off.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AskSwitches {
    /// Answer without retrieval.
    #[serde(default)]
    pub no_retrieval: bool,
    /// Keep every retrieved chunk.
    #[serde(default)]
    pub no_grade: bool,
    /// Do not verify ambiguous chunks.
    #[serde(default)]
    pub no_verify: bool,
    /// Do not refine kept chunks into sentences.
    #[serde(default)]
    pub no_refine: bool,
    /// One iteration, no reflection.
    #[serde(default)]
    pub no_reflect: bool,
}

impl From<&AskSwitches> for Switches {
    fn from(s: &AskSwitches) -> Self {
        Switches {
            no_retrieval: s.no_retrieval,
            no_grade: s.no_grade,
            no_verify: s.no_verify,
            no_refine: s.no_refine,
            no_reflect: s.no_reflect,
            skip_expensive: false,
        }
    }
}

/// One event of an ask stream (`Accept: text/event-stream`): the SSE event name is
/// `kind`, the data this JSON.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct StreamEvent {
    /// [`EVENTS_SCHEMA`].
    pub schema: &'static str,
    /// Position in the stream, from 0.
    pub seq: u64,
    /// What happened, with its data.
    #[serde(flatten)]
    pub event: Event,
}

/// What an ask stream reports: the loop's own events (the same ones `ask --trace`
/// prints), between the stream's `accepted` and its `report` (or `error`) and `done`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum Event {
    /// A step of the control loop (`observe`, `decision`, `plan`, `sub_query`,
    /// `retrieved`, `verdict`, `verification`, `refined`, `reflection`, `stage`,
    /// `failure`, `delta`, `stopped`, `answer`, `abstention`).
    Loop(neuralcore_agents::LoopEvent),
    /// The stream's own events.
    Stream(StreamOnly),
}

impl Event {
    /// The SSE event name: the event's `kind`.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Loop(e) => e.kind(),
            Event::Stream(StreamOnly::Accepted { .. }) => "accepted",
            Event::Stream(StreamOnly::Report { .. }) => "report",
            Event::Stream(StreamOnly::Error { .. }) => "error",
            Event::Stream(StreamOnly::Done) => "done",
        }
    }
}

/// The events an ask stream adds around the loop's.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StreamOnly {
    /// The request was accepted: the loop is starting.
    Accepted {
        /// The run id.
        run_id: String,
    },
    /// The full ask report (`neuralcore.ask/v1`).
    Report {
        /// The report.
        report: Box<neuralcore_agents::AskReport>,
    },
    /// The run failed; nothing follows but `done`.
    Error {
        /// The problem's `type`.
        #[serde(rename = "type")]
        kind: String,
        /// For people.
        detail: String,
    },
    /// The last event of every stream.
    Done,
}

/// `GET /healthz`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: &'static str,
    /// The server's version.
    pub version: &'static str,
}

/// `GET /readyz`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Ready {
    /// `ready` or `not ready`.
    pub status: &'static str,
    /// Each dependency.
    pub checks: ReadyChecks,
}

/// What `/readyz` checked.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReadyChecks {
    /// `ok` or `unavailable (<kind>)`.
    pub store: String,
    /// `ok` or `unavailable (<kind>)`.
    pub mind: String,
    /// `loaded`, or `absent: keyword search only`.
    pub embedding_model: String,
}

/// `GET /v1/collections`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CollectionList {
    /// The tenant's collections.
    pub collections: Vec<neuralcore_core::CollectionInfo>,
}

/// `GET /v1/collections/{name}/sources`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SourceList {
    /// The collection's sources.
    pub sources: Vec<neuralcore_app::SourceInfo>,
}

/// `GET /v1/jobs`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobList {
    /// The tenant's latest jobs, newest first.
    pub jobs: Vec<neuralcore_app::Job>,
}

/// A collection in a path.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct CollectionPath {
    /// The collection: 1–64 of `A-Z a-z 0-9 _ - .`, not starting with `.`.
    #[param(
        min_length = 1,
        max_length = 64,
        pattern = "^[A-Za-z0-9_-][A-Za-z0-9_.-]*$"
    )]
    name: String,
}

/// A document in a path.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct DocumentPath {
    /// The document's id (16 hex characters).
    #[param(pattern = "^[0-9a-f]{16}$")]
    id: String,
}

/// A chunk in a path.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct ChunkPath {
    /// The chunk's position in its document, from 0.
    #[param(minimum = 0, maximum = 4294967295_u64)]
    ordinal: u32,
}

/// A job in a path.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct JobPath {
    /// The job's id (`job_` and 24 hex characters).
    #[param(pattern = "^job_[0-9a-f]{24}$")]
    id: String,
}

/// One server-sent event, as the OpenAPI document shows a `text/event-stream` answer:
/// the event's name and its data, a JSON document.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SseEventDoc {
    /// The event's name.
    pub event: Option<String>,
    /// Its data (JSON).
    pub data: String,
    /// Its id, if any.
    pub id: Option<String>,
    /// Reconnection time, if any.
    pub retry: Option<u64>,
}

/// `POST /v1/admin/backup`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BackupRequest {
    /// The backup's name: it is written to `<data dir>/backups/<name>` on the server's
    /// machine (never elsewhere), which must not exist yet.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = "^[A-Za-z0-9_-][A-Za-z0-9_.-]*$"
    )]
    pub name: String,
}
