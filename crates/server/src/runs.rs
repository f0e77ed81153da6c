//! Recent runs: the tenant's past asks, newest first (`GET /v1/runs`), and one's report
//! with its whole trace (`GET /v1/runs/{run_id}`); a user's mark on one's answer (`POST
//! /v1/runs/{run_id}/mark`, kept for good as training data) and the marks made
//! (`GET /v1/marks`). Another tenant's run is 404, as an unknown one.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State as AxumState};
use axum::Json;
use neuralcore_agents::AskReport;
use neuralcore_app::{AnswerMark, MarkRequest, RunSummary, Scope, RUNS_DEFAULT_LIMIT};
use serde::{Deserialize, Serialize};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::wire::ApiJson;
use crate::State;

type St = AxumState<Arc<State>>;

/// `GET /v1/runs`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RunList {
    /// The tenant's runs of the last 7 days, newest first.
    pub runs: Vec<RunSummary>,
}

/// Which runs to list.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RunsQuery {
    /// How many, newest first: 1 to 200 (default 50).
    #[serde(default)]
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<usize>,
}

/// A run in a path.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct RunPath {
    /// The run id, as the list (or the ask's report, or its `accepted` event) gives it.
    #[param(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]{1,64}$")]
    run_id: String,
}

/// `GET /v1/runs?limit=N`: the tenant's recent asks, newest first.
#[utoipa::path(get, path = "/v1/runs", tag = "ask", params(RunsQuery),
    responses((status = 200, description = "The tenant's recent runs (neuralcore.run/v1), newest first", body = RunList)))]
pub async fn list(
    AxumState(st): St,
    caller: Caller,
    q: Result<Query<RunsQuery>, QueryRejection>,
) -> Result<Json<RunList>, ApiError> {
    caller.require(Scope::Read)?;
    let Query(q) = q.map_err(|e| ApiError::invalid(e.body_text()))?;
    let limit = q.limit.unwrap_or(RUNS_DEFAULT_LIMIT);
    let tenant = caller.tenant().clone();
    let runs = st.short(move |app| app.runs(&tenant, limit)).await?;
    Ok(Json(RunList { runs }))
}

/// `GET /v1/runs/{run_id}`: one of the tenant's recent runs, its ask report.
#[utoipa::path(get, path = "/v1/runs/{run_id}", tag = "ask", params(RunPath),
    responses((status = 200, description = "The run's ask report (neuralcore.ask/v1) with its trace", body = AskReport)))]
pub async fn get(
    AxumState(st): St,
    caller: Caller,
    Path(run_id): Path<String>,
) -> Result<Json<AskReport>, ApiError> {
    caller.require(Scope::Read)?;
    let tenant = caller.tenant().clone();
    Ok(Json(st.short(move |app| app.run(&tenant, &run_id)).await?))
}

/// `POST /v1/runs/{run_id}/mark`: the answer was good or bad. Its cited passages become
/// labelled training pairs (`GET /v1/feedback`, `neuralcore feedback export`), its cited
/// memories get `confirmed` or `corrected` about the question. A run marked again keeps
/// the latest mark.
#[utoipa::path(post, path = "/v1/runs/{run_id}/mark", tag = "ask", params(RunPath),
    request_body = MarkRequest,
    responses((status = 200, description = "The mark as kept (neuralcore.mark/v1)", body = AnswerMark)))]
pub async fn mark(
    AxumState(st): St,
    caller: Caller,
    Path(run_id): Path<String>,
    ApiJson(req): ApiJson<MarkRequest>,
) -> Result<Json<AnswerMark>, ApiError> {
    caller.require(Scope::Write)?;
    let tenant = caller.tenant().clone();
    Ok(Json(
        st.blocking(move |app| app.mark_run(&tenant, &run_id, &req))
            .await?,
    ))
}

/// `GET /v1/marks`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MarkList {
    /// The tenant's marks on answers, oldest first.
    pub marks: Vec<AnswerMark>,
}

/// `GET /v1/marks`: the tenant's marks on answers, oldest first.
#[utoipa::path(get, path = "/v1/marks", tag = "ask",
    responses((status = 200, description = "The tenant's marks on answers", body = MarkList)))]
pub async fn marks(AxumState(st): St, caller: Caller) -> Result<Json<MarkList>, ApiError> {
    caller.require(Scope::Read)?;
    let tenant = caller.tenant().clone();
    let marks = st.blocking(move |app| app.answer_marks(&tenant)).await?;
    Ok(Json(MarkList { marks }))
}
