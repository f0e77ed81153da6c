//! Documents, sources and ingest jobs: uploads answer 202 with a job the tenant can
//! follow (`GET /v1/jobs/{id}`, or its events), cancel, and list.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{FromRequest, Multipart, Path, Request, State as AxumState};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream};
use neuralcore_app::{Job, Scope, TextDocument, Upload, UrlDocument};
use serde::Deserialize;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::wire::{
    ApiJson, ChunkPath, CollectionPath, DocumentPath, JobList, JobPath, SourceList, SseEventDoc,
};
use crate::State;

type St = AxumState<Arc<State>>;

/// `POST /v1/collections/{name}/documents` as JSON.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TextUpload {
    /// The texts.
    #[schema(min_items = 1, max_items = 1000)]
    pub documents: Vec<TextDocument>,
}

/// A multipart upload, as the OpenAPI document shows it: one or more file parts.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct FileUpload {
    /// A file (its part's `filename` is the source's name).
    #[schema(value_type = Vec<String>, format = Binary)]
    file: Vec<Vec<u8>>,
}

/// `POST /v1/collections/{name}/documents`: JSON texts (`{"documents": [{"text", "title",
/// "name", "metadata"}]}`) or `multipart/form-data` files → 202 with the queued job.
#[utoipa::path(post, path = "/v1/collections/{name}/documents", tag = "documents",
    params(CollectionPath),
    request_body(content((TextUpload = "application/json"), (FileUpload = "multipart/form-data"))),
    responses((status = 202, description = "Queued: the job (neuralcore.job/v1)", body = Job,
        headers(("location" = String, description = "/v1/jobs/{id}")))))]
pub async fn upload(
    AxumState(st): St,
    caller: Caller,
    Path(name): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    caller.require(Scope::Write)?;
    let ctype = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let files = if ctype.starts_with("multipart/form-data") {
        let mp = Multipart::from_request(request, &())
            .await
            .map_err(|e| ApiError::invalid(format!("the multipart body is malformed: {e}")))?;
        read_multipart(mp).await?
    } else {
        let ApiJson(body) = ApiJson::<TextUpload>::from_request(request, &()).await?;
        body.documents
            .into_iter()
            .enumerate()
            .map(|(i, d)| d.into_upload(i + 1))
            .collect::<Result<Vec<_>, _>>()?
    };
    let tenant = caller.tenant().clone();
    let jobs = st.jobs.clone();
    let job = st
        .blocking(move |_| jobs.submit(&tenant, &name, files))
        .await?;
    accepted(job)
}

/// `POST /v1/collections/{name}/urls`: fetch a web page now (public addresses only,
/// unless `[web]` allows more) and queue its cleaned text → 202 with the job. Off unless
/// `[web] ingest_urls = true`.
#[utoipa::path(post, path = "/v1/collections/{name}/urls", tag = "documents",
    params(CollectionPath),
    request_body = UrlDocument,
    responses((status = 202, description = "Fetched and queued: the job (neuralcore.job/v1)",
            body = Job, headers(("location" = String, description = "/v1/jobs/{id}"))),
        (status = 403, description = "URL ingest is off on this server, or the key may only read",
            body = crate::error::ProblemDoc, content_type = "application/problem+json"),
        (status = 502, description = "The page did not answer in time or failed on its side",
            body = crate::error::ProblemDoc, content_type = "application/problem+json")))]
pub async fn ingest_url(
    AxumState(st): St,
    caller: Caller,
    Path(name): Path<String>,
    ApiJson(doc): ApiJson<UrlDocument>,
) -> Result<Response, ApiError> {
    caller.require(Scope::Write)?;
    let tenant = caller.tenant().clone();
    let job = st
        .blocking(move |app| app.ingest_url(&tenant, &name, doc))
        .await?;
    accepted(job)
}

fn accepted(job: Job) -> Result<Response, ApiError> {
    let location = format!("/v1/jobs/{}", job.id);
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, location)],
        Json(job),
    )
        .into_response())
}

/// Every file part of a multipart body (parts without a file name are refused).
async fn read_multipart(mut mp: Multipart) -> Result<Vec<Upload>, ApiError> {
    let mut files = Vec::new();
    while let Some(field) = mp.next_field().await.map_err(multipart_error)? {
        let Some(name) = field.file_name().map(str::to_string) else {
            return Err(ApiError::invalid(format!(
                "part {:?} has no file name: send files as `filename=` parts",
                field.name().unwrap_or("")
            )));
        };
        // Checked before the bytes are read: a bad name costs nothing.
        neuralcore_app::jobs::check_upload_name(&name)?;
        let bytes = field.bytes().await.map_err(multipart_error)?;
        files.push(Upload {
            name,
            bytes: bytes.to_vec(),
        });
    }
    Ok(files)
}

fn multipart_error(e: axum::extract::multipart::MultipartError) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "the upload is larger than this server accepts",
        )
    } else {
        ApiError::invalid(format!(
            "the multipart body is malformed: {}",
            e.body_text()
        ))
    }
}

/// `GET /v1/collections/{name}/sources`.
#[utoipa::path(get, path = "/v1/collections/{name}/sources", tag = "documents",
    params(CollectionPath),
    responses((status = 200, description = "The collection's sources", body = SourceList)))]
pub async fn list_sources(
    AxumState(st): St,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<SourceList>, ApiError> {
    let tenant = caller.tenant().clone();
    let sources = st.blocking(move |app| app.sources(&tenant, &name)).await?;
    Ok(Json(SourceList { sources }))
}

/// A source in a path (percent-encode it: `upload%3Anotes.md`, a path's `/` as `%2F`).
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct SourcePath {
    /// The source's id as `sources` lists it.
    #[param(min_length = 1)]
    source: String,
}

/// `GET /v1/collections/{name}/sources/{source}`: one source.
#[utoipa::path(get, path = "/v1/collections/{name}/sources/{source}", tag = "documents",
    params(CollectionPath, SourcePath),
    responses((status = 200, description = "The source and its documents", body = neuralcore_app::SourceInfo)))]
pub async fn get_source(
    AxumState(st): St,
    caller: Caller,
    Path((name, source)): Path<(String, String)>,
) -> Result<Json<neuralcore_app::SourceInfo>, ApiError> {
    let tenant = caller.tenant().clone();
    let info = st
        .blocking(move |app| {
            app.sources(&tenant, &name)?
                .into_iter()
                .find(|s| s.id == source)
                .ok_or_else(|| {
                    neuralcore_app::AppError::NotFound(format!(
                        "no source {source:?} in collection {name:?}"
                    ))
                })
        })
        .await?;
    Ok(Json(info))
}

/// `DELETE /v1/collections/{name}/sources/{source}`: a source and the documents only it
/// held.
#[utoipa::path(delete, path = "/v1/collections/{name}/sources/{source}", tag = "documents",
    params(CollectionPath, SourcePath),
    responses((status = 200, description = "What was removed", body = neuralcore_engine::RemoveSummary)))]
pub async fn delete_source(
    AxumState(st): St,
    caller: Caller,
    Path((name, source)): Path<(String, String)>,
) -> Result<Json<neuralcore_engine::RemoveSummary>, ApiError> {
    caller.require(Scope::Write)?;
    let tenant = caller.tenant().clone();
    let summary = st
        .blocking(move |app| app.remove_source(&tenant, &name, &source))
        .await?;
    Ok(Json(summary))
}

/// `GET /v1/collections/{name}/documents/{id}`.
#[utoipa::path(get, path = "/v1/collections/{name}/documents/{id}", tag = "documents",
    params(CollectionPath, DocumentPath),
    responses((status = 200, description = "The document with its provenance", body = neuralcore_app::DocumentInfo)))]
pub async fn get_document(
    AxumState(st): St,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let tenant = caller.tenant().clone();
    let doc = st
        .blocking(move |app| app.document(&tenant, &name, &id))
        .await?;
    Ok(Json(doc).into_response())
}

/// `GET /v1/collections/{name}/documents/{id}/chunks/{ordinal}`.
#[utoipa::path(get, path = "/v1/collections/{name}/documents/{id}/chunks/{ordinal}", tag = "documents",
    params(CollectionPath, DocumentPath, ChunkPath),
    responses((status = 200, description = "The chunk with its span and provenance", body = neuralcore_app::ChunkInfo)))]
pub async fn get_chunk(
    AxumState(st): St,
    caller: Caller,
    Path((name, id, ordinal)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let ordinal: u32 = ordinal
        .parse()
        .map_err(|_| ApiError::invalid(format!("chunk {ordinal:?} is not a number")))?;
    let tenant = caller.tenant().clone();
    let chunk = st
        .blocking(move |app| app.chunk(&tenant, &name, &id, ordinal))
        .await?;
    Ok(Json(chunk).into_response())
}

/// `GET /v1/jobs`: the tenant's latest jobs.
#[utoipa::path(get, path = "/v1/jobs", tag = "jobs",
    responses((status = 200, description = "The tenant's latest 100 jobs, newest first", body = JobList)))]
pub async fn list_jobs(AxumState(st): St, caller: Caller) -> Result<Json<JobList>, ApiError> {
    let tenant = caller.tenant().clone();
    let jobs = st.jobs.clone();
    let list = st.blocking(move |_| jobs.list(&tenant, 100)).await?;
    Ok(Json(JobList { jobs: list }))
}

/// `GET /v1/jobs/{id}`.
#[utoipa::path(get, path = "/v1/jobs/{id}", tag = "jobs",
    params(JobPath),
    responses((status = 200, description = "The job", body = Job)))]
pub async fn get_job(
    AxumState(st): St,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Job>, ApiError> {
    let tenant = caller.tenant().clone();
    let jobs = st.jobs.clone();
    Ok(Json(st.blocking(move |_| jobs.get(&tenant, &id)).await?))
}

/// `POST /v1/jobs/{id}/cancel`: cancel (a finished job is returned as it is).
#[utoipa::path(post, path = "/v1/jobs/{id}/cancel", tag = "jobs",
    params(JobPath),
    responses((status = 200, description = "The job, cancelled or cancelling", body = Job)))]
pub async fn cancel_job(
    AxumState(st): St,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Job>, ApiError> {
    caller.require(Scope::Write)?;
    let tenant = caller.tenant().clone();
    let jobs = st.jobs.clone();
    Ok(Json(st.blocking(move |_| jobs.cancel(&tenant, &id)).await?))
}

/// `GET /v1/jobs/{id}/events`: the job as server-sent `job` events whenever it changes,
/// ending with `done` (the finished job) once it is over.
#[utoipa::path(get, path = "/v1/jobs/{id}/events", tag = "jobs",
    params(JobPath),
    responses((status = 200, description = "Server-sent `job` events (the job as JSON) whenever it changes, then `done` with the finished job",
        content_type = "text/event-stream", body = SseEventDoc)))]
pub async fn job_events(
    AxumState(st): St,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let tenant = caller.tenant().clone();
    let jobs = st.jobs.clone();
    // The first read answers 404 for another tenant's job before the stream starts.
    let first = {
        let (jobs, tenant, id) = (jobs.clone(), tenant.clone(), id.clone());
        st.blocking(move |_| jobs.get(&tenant, &id)).await?
    };
    Ok(Sse::new(job_stream(jobs, tenant, id, first))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

fn job_stream(
    jobs: Arc<neuralcore_app::Jobs>,
    tenant: neuralcore_app::Tenant,
    id: String,
    first: Job,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    // (a job read and not yet sent, the last one sent, whether `done` went out)
    stream::unfold(
        (Some(first), None::<Job>, false),
        move |(pending, last, finished)| {
            let (jobs, tenant, id) = (jobs.clone(), tenant.clone(), id.clone());
            async move {
                if finished {
                    return None;
                }
                let mut pending = pending;
                loop {
                    if let Some(job) = pending.take() {
                        if last.as_ref() != Some(&job) {
                            let data = serde_json::to_string(&job).unwrap_or_default();
                            let ev = SseEvent::default().event("job").data(data);
                            return Some((Ok(ev), (None, Some(job), false)));
                        }
                    }
                    if let Some(job) = last.as_ref().filter(|j| j.state.is_terminal()) {
                        let data = serde_json::to_string(job).unwrap_or_default();
                        let ev = SseEvent::default().event("done").data(data);
                        return Some((Ok(ev), (None, last, true)));
                    }
                    if jobs.is_shutting_down() {
                        // The server is stopping: the job goes back to the queue.
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let (j, t, i) = (jobs.clone(), tenant.clone(), id.clone());
                    match tokio::task::spawn_blocking(move || j.get(&t, &i)).await {
                        Ok(Ok(job)) => pending = Some(job),
                        _ => return None,
                    }
                }
            }
        },
    )
}
