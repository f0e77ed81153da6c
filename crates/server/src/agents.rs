//! The agents and tools the loop runs with: what a client can see of them (names, roles,
//! tools, parameters; an agent's file by its name only, never the server's folders).

use std::sync::Arc;

use axum::extract::State as AxumState;
use axum::Json;
use serde::Serialize;
use serde_json::Value;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::State;

type St = AxumState<Arc<State>>;

/// `GET /v1/tools`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ToolList {
    /// Every registered tool: name, namespace, roles, cost, what it reads and writes,
    /// its parameters' JSON schema, and a description.
    #[schema(value_type = Vec<Object>)]
    pub tools: Vec<Value>,
}

/// `GET /v1/agents`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AgentList {
    /// Whether every agent file loaded.
    pub ok: bool,
    /// The loaded agents: name, role, enabled, tools, parameters, reads, writes,
    /// description, and `file` (its name, not its folder).
    #[schema(value_type = Vec<Object>)]
    pub agents: Vec<Value>,
    /// Files that did not load, and why (the loop runs without them).
    pub errors: Vec<AgentFileError>,
}

/// An agent file that did not load.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AgentFileError {
    /// The file's name.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

fn file_name(p: &std::path::Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// `GET /v1/tools`: the tools every agent can use.
#[utoipa::path(get, path = "/v1/tools", tag = "agents",
    responses((status = 200, description = "The registered tools", body = ToolList)))]
pub async fn tools(AxumState(st): St, _caller: Caller) -> Result<Json<ToolList>, ApiError> {
    let tools = st
        .app
        .orchestrator()
        .registry
        .all()
        .map(|t| serde_json::to_value(t.spec()).unwrap_or(Value::Null))
        .collect();
    Ok(Json(ToolList { tools }))
}

/// `GET /v1/agents`: the agents the loop runs with (reloaded when their files change), and
/// the files that did not load (`agents check`).
#[utoipa::path(get, path = "/v1/agents", tag = "agents",
    responses((status = 200, description = "The agents and the files that did not load", body = AgentList)))]
pub async fn agents(AxumState(st): St, _caller: Caller) -> Result<Json<AgentList>, ApiError> {
    let loader = st.app.orchestrator().loader.clone();
    let (defs, errors) = tokio::task::spawn_blocking(move || {
        loader.reload();
        (loader.definitions(), loader.errors())
    })
    .await
    .map_err(|e| ApiError::from(neuralcore_app::AppError::Internal(e.to_string())))?;
    // Messages may name other agent files by their full path: by their names only.
    let mut paths: Vec<std::path::PathBuf> = defs.iter().map(|d| d.path.clone()).collect();
    paths.extend(errors.iter().map(|e| e.path.clone()));
    paths.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    let scrub = |m: &str| {
        let mut m = m.to_string();
        for p in &paths {
            m = m.replace(&*p.to_string_lossy(), &file_name(p));
        }
        m
    };
    let agents = defs
        .iter()
        .map(|d| {
            let file = file_name(&d.path);
            let mut v = serde_json::to_value(d).unwrap_or(Value::Null);
            if let Some(o) = v.as_object_mut() {
                o.remove("path");
                o.remove("body");
                o.insert("file".into(), Value::String(file));
            }
            v
        })
        .collect();
    let errors: Vec<AgentFileError> = errors
        .into_iter()
        .map(|e| AgentFileError {
            file: file_name(&e.path),
            line: e.line,
            message: scrub(&e.message),
        })
        .collect();
    Ok(Json(AgentList {
        ok: errors.is_empty(),
        agents,
        errors,
    }))
}
