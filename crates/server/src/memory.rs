//! Memory routes: the caller's tenant's memories only (another tenant's id is 404).

use std::sync::Arc;

use axum::extract::{Path, Query, State as AxumState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use neuralcore_app::{
    GraphQuery, MemoryAdd, MemoryAdded, MemoryLinkReq, MemoryListQuery, MemorySearch,
    MemorySignalReq, MemoryWithRelations, Scope, TiersQuery,
};
use neuralcore_memory::graph::Neighbourhood;
use neuralcore_memory::{AuditEntry, MemHit, Memory, Relation};
use serde::Serialize;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::wire::ApiJson;
use crate::State;

type St = AxumState<Arc<State>>;

/// A memory in a path.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct MemoryPath {
    /// The memory's id (16 hex characters).
    #[param(pattern = "^[0-9a-f]{16}$")]
    id: String,
}

/// `GET /v1/memories`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MemoryList {
    /// The memories.
    pub memories: Vec<Memory>,
}

/// `POST /v1/memories/search`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MemoryHits {
    /// Best first.
    pub hits: Vec<MemHit>,
}

/// `GET /v1/memories/{id}/audit`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MemoryAudit {
    /// Oldest first.
    pub audit: Vec<AuditEntry>,
}

/// `GET /v1/memory/graph`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MemoryGraph {
    /// One per entity node found.
    pub entities: Vec<Neighbourhood>,
}

fn query<T>(q: Result<Query<T>, axum::extract::rejection::QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(v)| v)
        .map_err(|e| ApiError::invalid(e.body_text()))
}

/// `POST /v1/memories`: remember something (201).
#[utoipa::path(post, path = "/v1/memories", tag = "memory", request_body = MemoryAdd,
    responses((status = 201, description = "The memory, linked to the entities it names", body = MemoryAdded)))]
pub async fn add(
    AxumState(st): St,
    caller: Caller,
    ApiJson(req): ApiJson<MemoryAdd>,
) -> Result<Response, ApiError> {
    caller.require(Scope::Write)?;
    if neuralcore_app::blank(&req.text) {
        return Err(ApiError::invalid("the text is empty"));
    }
    let tenant = caller.tenant().clone();
    let added = st.blocking(move |app| app.memory_add(&tenant, req)).await?;
    Ok((StatusCode::CREATED, Json(added)).into_response())
}

/// `GET /v1/memories`.
#[utoipa::path(get, path = "/v1/memories", tag = "memory", params(MemoryListQuery),
    responses((status = 200, description = "The tenant's memories", body = MemoryList)))]
pub async fn list(
    AxumState(st): St,
    caller: Caller,
    q: Result<Query<MemoryListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<MemoryList>, ApiError> {
    let q = query(q)?;
    let tenant = caller.tenant().clone();
    let memories = st.blocking(move |app| app.memory_list(&tenant, &q)).await?;
    Ok(Json(MemoryList { memories }))
}

/// `POST /v1/memories/search`.
#[utoipa::path(post, path = "/v1/memories/search", tag = "memory", request_body = MemorySearch,
    responses((status = 200, description = "Memories by relevance and trust", body = MemoryHits)))]
pub async fn search(
    AxumState(st): St,
    caller: Caller,
    ApiJson(req): ApiJson<MemorySearch>,
) -> Result<Json<MemoryHits>, ApiError> {
    if req.query.chars().count() > neuralcore_app::MAX_TEXT_CHARS {
        return Err(ApiError::invalid("the query is too long"));
    }
    if req.k == Some(0) || req.k.is_some_and(|k| k > 1000) {
        return Err(ApiError::invalid("k must be 1 to 1000"));
    }
    let tenant = caller.tenant().clone();
    let hits = st
        .blocking(move |app| app.memory_search(&tenant, &req))
        .await?;
    Ok(Json(MemoryHits { hits }))
}

/// `GET /v1/memories/{id}`.
#[utoipa::path(get, path = "/v1/memories/{id}", tag = "memory", params(MemoryPath),
    responses((status = 200, description = "The memory and its relations", body = MemoryWithRelations)))]
pub async fn get(
    AxumState(st): St,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<MemoryWithRelations>, ApiError> {
    let tenant = caller.tenant().clone();
    Ok(Json(
        st.blocking(move |app| app.memory_get(&tenant, &id)).await?,
    ))
}

/// `POST /v1/memories/{id}/signal`: used, confirmed, ignored or corrected.
#[utoipa::path(post, path = "/v1/memories/{id}/signal", tag = "memory", params(MemoryPath),
    request_body = MemorySignalReq,
    responses((status = 200, description = "The memory with its new trust", body = Memory)))]
pub async fn signal(
    AxumState(st): St,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<MemorySignalReq>,
) -> Result<Json<Memory>, ApiError> {
    caller.require(Scope::Write)?;
    let tenant = caller.tenant().clone();
    Ok(Json(
        st.blocking(move |app| app.memory_signal(&tenant, &id, req.signal, req.query.as_deref()))
            .await?,
    ))
}

/// `GET /v1/feedback`: the tenant's trust signals about questions as labelled training
/// pairs (what `neuralcore feedback export` writes, for `train evaluator --pairs`).
#[utoipa::path(get, path = "/v1/feedback", tag = "memory",
    responses((status = 200, description = "One pair per (question, memory) signalled about it", body = neuralcore_memory::Feedback)))]
pub async fn feedback(
    AxumState(st): St,
    caller: Caller,
) -> Result<Json<neuralcore_memory::Feedback>, ApiError> {
    let tenant = caller.tenant().clone();
    Ok(Json(st.blocking(move |app| app.feedback(&tenant)).await?))
}

/// `POST /v1/memories/{id}/links`: link to another of the tenant's memories.
#[utoipa::path(post, path = "/v1/memories/{id}/links", tag = "memory", params(MemoryPath),
    request_body = MemoryLinkReq,
    responses((status = 200, description = "The relation", body = Relation)))]
pub async fn link(
    AxumState(st): St,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<MemoryLinkReq>,
) -> Result<Json<Relation>, ApiError> {
    caller.require(Scope::Write)?;
    let tenant = caller.tenant().clone();
    Ok(Json(
        st.blocking(move |app| app.memory_link(&tenant, &id, req.kind, &req.to))
            .await?,
    ))
}

/// `POST /v1/memories/{id}/forget`: archive it (restorable until it is purged).
#[utoipa::path(post, path = "/v1/memories/{id}/forget", tag = "memory", params(MemoryPath),
    responses((status = 200, description = "The memory, archived", body = Memory)))]
pub async fn forget(
    AxumState(st): St,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Memory>, ApiError> {
    caller.require(Scope::Write)?;
    let tenant = caller.tenant().clone();
    Ok(Json(
        st.blocking(move |app| app.memory_forget(&tenant, &id))
            .await?,
    ))
}

/// `POST /v1/memories/{id}/restore`.
#[utoipa::path(post, path = "/v1/memories/{id}/restore", tag = "memory", params(MemoryPath),
    responses((status = 200, description = "The memory, active again", body = Memory)))]
pub async fn restore(
    AxumState(st): St,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Memory>, ApiError> {
    caller.require(Scope::Write)?;
    let tenant = caller.tenant().clone();
    Ok(Json(
        st.blocking(move |app| app.memory_restore(&tenant, &id))
            .await?,
    ))
}

/// `GET /v1/memories/{id}/audit`: its trust history.
#[utoipa::path(get, path = "/v1/memories/{id}/audit", tag = "memory", params(MemoryPath),
    responses((status = 200, description = "Every change of its trust", body = MemoryAudit)))]
pub async fn audit(
    AxumState(st): St,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<MemoryAudit>, ApiError> {
    let tenant = caller.tenant().clone();
    let audit = st
        .blocking(move |app| app.memory_audit(&tenant, &id))
        .await?;
    Ok(Json(MemoryAudit { audit }))
}

/// `GET /v1/memory/tiers`: the L0/L1/L2 context for a session's start.
#[utoipa::path(get, path = "/v1/memory/tiers", tag = "memory", params(TiersQuery),
    responses((status = 200, description = "The tiers", body = neuralcore_memory::tiers::Tiers)))]
pub async fn tiers(
    AxumState(st): St,
    caller: Caller,
    q: Result<Query<TiersQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<neuralcore_memory::tiers::Tiers>, ApiError> {
    let q = query(q)?;
    let tenant = caller.tenant().clone();
    Ok(Json(
        st.blocking(move |app| app.memory_tiers(&tenant, &q))
            .await?,
    ))
}

/// `GET /v1/memory/graph?entity=…`: the memories naming an entity, and its neighbours.
#[utoipa::path(get, path = "/v1/memory/graph", tag = "memory", params(GraphQuery),
    responses((status = 200, description = "Each entity node found", body = MemoryGraph)))]
pub async fn graph(
    AxumState(st): St,
    caller: Caller,
    q: Result<Query<GraphQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<MemoryGraph>, ApiError> {
    let q = query(q)?;
    let tenant = caller.tenant().clone();
    let entities = st
        .blocking(move |app| app.memory_graph(&tenant, &q))
        .await?;
    Ok(Json(MemoryGraph { entities }))
}
