//! The handlers. Each authenticates its caller ([`Caller`]), checks the key's scope,
//! and runs the application core on the blocking pool for the caller's tenant.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State as AxumState};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream};
use neuralcore_agents::LoopEvent;
use neuralcore_app::{
    check_text_len, new_run_id, AppError, AskOptions, Cancel, Scope, SearchRequest,
};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::wire::{
    ApiJson, AskRequest, CollectionList, CollectionPath, CreateCollection, Event, Health, Ready,
    ReadyChecks, SseEventDoc, StreamEvent, StreamOnly, EVENTS_SCHEMA,
};
use crate::State;

type St = AxumState<Arc<State>>;

/// Most results a search returns.
const MAX_K: usize = 1000;

/// `GET /healthz`: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "health", security(()),
    responses((status = 200, description = "The process answers", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok",
        version: env!("CARGO_PKG_VERSION"),
    })
}

/// `GET /readyz`: the store and the Mind answer; says whether the embedding model is
/// loaded (without it search is keyword-only, which is still ready).
#[utoipa::path(get, path = "/readyz", tag = "health", security(()),
    responses(
        (status = 200, description = "Ready", body = Ready),
        (status = 503, description = "The store or the Mind does not answer", body = Ready),
    ))]
pub async fn readyz(AxumState(st): St) -> Response {
    let checks = st
        .blocking(|app| {
            let store = app
                .engine()
                .collections()
                .map(|_| ())
                .map_err(AppError::from);
            let mind = app
                .mind()
                .global()
                .read("server.readyz")
                .map(|_| ())
                .map_err(AppError::from);
            let model = app.engine().embedder_status().map(|_| ());
            Ok((store, mind, model))
        })
        .await;
    let (store, mind, model) = match checks {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let ok = store.is_ok() && mind.is_ok();
    let show = |r: &Result<(), AppError>| match r {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("unavailable ({})", e.kind()),
    };
    let body = Ready {
        status: if ok { "ready" } else { "not ready" },
        checks: ReadyChecks {
            store: show(&store),
            mind: show(&mind),
            embedding_model: if model.is_ok() {
                "loaded"
            } else {
                "absent: keyword search only"
            }
            .into(),
        },
    };
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body)).into_response()
}

/// Any other path.
pub async fn not_found() -> ApiError {
    ApiError::not_found("no such route (see /v1 in docs/api.md)")
}

/// A known path with another method.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take that method",
    )
}

/// `GET /v1/collections`.
#[utoipa::path(get, path = "/v1/collections", tag = "collections",
    responses((status = 200, description = "The tenant's collections", body = CollectionList)))]
pub async fn list_collections(
    AxumState(st): St,
    caller: Caller,
) -> Result<Json<CollectionList>, ApiError> {
    let tenant = caller.tenant().clone();
    let collections = st.blocking(move |app| app.collections(&tenant)).await?;
    Ok(Json(CollectionList { collections }))
}

/// `POST /v1/collections`: create an empty collection (201; 200 when it exists).
#[utoipa::path(post, path = "/v1/collections", tag = "collections", request_body = CreateCollection,
    responses(
        (status = 201, description = "Created", body = neuralcore_core::CollectionInfo),
        (status = 200, description = "It existed", body = neuralcore_core::CollectionInfo),
    ))]
pub async fn create_collection(
    AxumState(st): St,
    caller: Caller,
    ApiJson(req): ApiJson<CreateCollection>,
) -> Result<Response, ApiError> {
    caller.require(Scope::Write)?;
    let tenant = caller.tenant().clone();
    let (existed, info) = st
        .blocking(move |app| {
            let existed = app.collection(&tenant, &req.name).is_ok();
            Ok((existed, app.create_collection(&tenant, &req.name)?))
        })
        .await?;
    let code = if existed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((code, Json(info)).into_response())
}

/// `GET /v1/collections/{name}`: counts of one collection.
#[utoipa::path(get, path = "/v1/collections/{name}", tag = "collections",
    params(CollectionPath),
    responses((status = 200, description = "The collection", body = neuralcore_core::CollectionInfo)))]
pub async fn get_collection(
    AxumState(st): St,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let tenant = caller.tenant().clone();
    let info = st
        .blocking(move |app| app.collection(&tenant, &name))
        .await?;
    Ok(Json(info).into_response())
}

/// `DELETE /v1/collections/{name}`: the collection and everything in it (204).
#[utoipa::path(delete, path = "/v1/collections/{name}", tag = "collections",
    params(CollectionPath),
    responses((status = 204, description = "Deleted with everything in it")))]
pub async fn delete_collection(
    AxumState(st): St,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    caller.require(Scope::Write)?;
    let tenant = caller.tenant().clone();
    st.blocking(move |app| app.drop_collection(&tenant, &name))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/search`.
#[utoipa::path(post, path = "/v1/search", tag = "search", request_body = SearchRequest,
    responses((status = 200, description = "Hits with provenance (neuralcore.search/v1)", body = neuralcore_app::SearchResponse)))]
pub async fn search(
    AxumState(st): St,
    caller: Caller,
    ApiJson(req): ApiJson<SearchRequest>,
) -> Result<Response, ApiError> {
    check_text_len("query", &req.query)?;
    if req.k == Some(0) || req.k.is_some_and(|k| k > MAX_K) {
        return Err(ApiError::invalid(format!("k must be 1 to {MAX_K}")));
    }
    let tenant = caller.tenant().clone();
    let res = st.short(move |app| app.search(&tenant, &req)).await?;
    Ok(Json(res).into_response())
}

/// Cancels the run it guards when dropped: a handler future or stream the server drops
/// because its client went away stops the loop at its next stage.
pub(crate) struct CancelOnDrop(pub(crate) Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// `POST /v1/ask`: the ask report as JSON, or with `Accept: text/event-stream` the
/// loop's events as server-sent events ending in `done`.
#[utoipa::path(post, path = "/v1/ask", tag = "ask", request_body = AskRequest,
    responses((status = 200, description = "The ask report (neuralcore.ask/v1), or with `Accept: text/event-stream` the loop's events (neuralcore.events/v1), one JSON object per `data:` line",
        content((neuralcore_agents::AskReport = "application/json"), (SseEventDoc = "text/event-stream")))))]
pub async fn ask(
    AxumState(st): St,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(req): ApiJson<AskRequest>,
) -> Result<Response, ApiError> {
    if neuralcore_app::blank(&req.question) {
        return Err(ApiError::invalid("the question is empty"));
    }
    check_text_len("question", &req.question)?;
    if req.max_iterations.is_some_and(|n| n > 100) {
        return Err(ApiError::invalid("max_iterations must be at most 100"));
    }
    // The document gives it as an int64 (what JSON clients can send exactly).
    if req.deadline_ms.is_some_and(|d| d > i64::MAX as u64) {
        return Err(ApiError::invalid(format!(
            "deadline_ms must be at most {}",
            i64::MAX
        )));
    }
    if let Some(sess) = &req.session {
        let ok = (1..=31).contains(&sess.len())
            && sess
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !ok {
            return Err(ApiError::invalid(
                "session must be 1 to 31 characters of a-z, 0-9, _ and -",
            ));
        }
    }
    if req.memory {
        // Recall signals the memories it uses: a change to the tenant's memories.
        caller.require(Scope::Write)?;
    }
    let cap_ms = st.opts.request_timeout.as_millis() as u64;
    let deadline = req
        .deadline_ms
        .filter(|&d| d > 0)
        .unwrap_or(st.app.config().control.deadline_ms)
        .min(cap_ms);
    let cancel = Cancel::default();
    let opts = AskOptions {
        collection: req.collection.clone(),
        switches: (&req.switches).into(),
        max_iterations: req.max_iterations,
        deadline_ms: Some(if deadline == 0 { cap_ms } else { deadline }),
        session: req.session.clone(),
        project: req.project.clone(),
        cancel: cancel.clone(),
        ..Default::default()
    };
    let tenant = caller.tenant().clone();
    let run_id = new_run_id("api");
    let wants_stream = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    let question = req.question;
    let memory = req.memory;
    if !wants_stream {
        let _guard = CancelOnDrop(cancel);
        let run = run_id.clone();
        let report = st
            .blocking(move |app| app.ask(&tenant, &run, &question, &opts, memory))
            .await?;
        st.metrics.ask(&report);
        return Ok(Json(report).into_response());
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(256);
    // Accepted goes out before the loop starts.
    let _ = tx.try_send(Event::Stream(StreamOnly::Accepted {
        run_id: run_id.clone(),
    }));
    let events = tx.clone();
    // On the blocking pool: wait for room rather than drop an event; a client that
    // went away closes the channel and the send just fails. The loop's own `error`
    // is left out: the stream's `error` below says it with the problem's type.
    let sink: neuralcore_agents::EventSink = Arc::new(move |e: &LoopEvent| {
        if !matches!(e, LoopEvent::Error { .. }) {
            let _ = events.blocking_send(Event::Loop(e.clone()));
        }
    });
    let opts = AskOptions {
        events: Some(sink),
        ..opts
    };
    let worker = st.clone();
    tokio::spawn(async move {
        let result = worker
            .blocking(move |app| app.ask(&tenant, &run_id, &question, &opts, memory))
            .await;
        let last = match result {
            Ok(report) => {
                worker.metrics.ask(&report);
                StreamOnly::Report {
                    report: Box::new(report),
                }
            }
            Err(e) => StreamOnly::Error {
                kind: crate::error::problem_type(e.kind),
                detail: e.detail,
            },
        };
        let _ = tx.send(Event::Stream(last)).await;
        let _ = tx.send(Event::Stream(StreamOnly::Done)).await;
    });
    Ok(Sse::new(event_stream(rx, CancelOnDrop(cancel)))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

/// The events of `rx` as SSE, numbered; dropping the stream (the client went away)
/// drops `guard`, which cancels the run.
fn event_stream(
    rx: tokio::sync::mpsc::Receiver<Event>,
    guard: CancelOnDrop,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    stream::unfold((rx, guard, 0u64), |(mut rx, guard, seq)| async move {
        let event = rx.recv().await?;
        let name = event.name();
        let data = serde_json::to_string(&StreamEvent {
            schema: EVENTS_SCHEMA,
            seq,
            event,
        })
        .unwrap_or_default();
        let sse = SseEvent::default().event(name).data(data);
        Some((Ok(sse), (rx, guard, seq + 1)))
    })
}
