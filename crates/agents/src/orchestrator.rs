//! A minimal orchestrator: runs a sequence of roles over a run's Mind scope, asking the
//! loader which agents take each role (and, for a role no agent file takes, the
//! registry which tools fill it, run with their defaults). The control-loop issue builds
//! the real loop ("Consciousness") on this.

use std::sync::Arc;
use std::time::{Duration, Instant};

use neuralcore_engine::ScoredChunk;
use neuralcore_mind::{Mind, Scope};
use serde::Serialize;
use serde_json::json;

use crate::agent::{AgentContext, AgentReport};
use crate::loader::AgentLoader;
use crate::tool::{run_tool, Cancel, Deadline, Registry, Services, ToolResult};
use crate::tools::{ChunkList, STAGE_FUSED, STAGE_RERANKED, STAGE_RETRIEVE};

/// The roles of retrieval, in order.
pub const RETRIEVAL_ROLES: &[&str] = &["retrieve", "fuse", "rerank"];

/// What ran for one role.
#[derive(Debug, Clone, Serialize)]
pub struct RoleReport {
    /// The role.
    pub role: String,
    /// Agents that took it.
    pub agents: Vec<AgentReport>,
    /// Tools run directly because no agent takes the role.
    pub tools: Vec<ToolResult>,
}

/// What a run did.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// The run id (its Mind scope).
    pub run_id: String,
    /// Per role, in order.
    pub roles: Vec<RoleReport>,
    /// Wall time.
    pub elapsed_ms: f64,
}

/// Runs roles over the Mind. Cheap to clone: a request that needs services of its own
/// (a memory store, a stream sink) runs on a clone.
#[derive(Clone)]
pub struct Orchestrator {
    /// Tools.
    pub registry: Registry,
    /// Agents.
    pub loader: Arc<AgentLoader>,
    /// The blackboard.
    pub mind: Mind,
    /// Shared services.
    pub services: Services,
}

impl Orchestrator {
    /// Run `roles` for `query` over `collection` in the run scope `run_id`.
    pub fn run(
        &self,
        run_id: &str,
        query: &str,
        collection: &str,
        roles: &[&str],
        budget: Option<Duration>,
    ) -> Result<RunReport, crate::AgentError> {
        let start = Instant::now();
        let scope = self.mind.run(run_id)?;
        scope.write("input.query", json!(query), "orchestrator", None)?;
        scope.write("input.collection", json!(collection), "orchestrator", None)?;
        let cancel = Cancel::default();
        let clock = self.services.clock.clone();
        let deadline = budget.map(|b| Deadline::after(clock.clone(), clock.now(), b));
        let ctx = AgentContext {
            mind: &scope,
            services: &self.services,
            deadline,
            cancel: &cancel,
        };
        let out = roles.iter().map(|r| self.run_role(&ctx, r)).collect();
        Ok(RunReport {
            run_id: run_id.to_string(),
            roles: out,
            elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
        })
    }
}

impl Orchestrator {
    /// Run one role in `ctx`'s scope: the agents that take it (as their files say), or,
    /// when no agent file takes it, every registered tool that fills it, with defaults.
    pub fn run_role(&self, ctx: &AgentContext<'_>, role: &str) -> RoleReport {
        let agents = self.loader.for_role(role);
        let mut report = RoleReport {
            role: role.to_string(),
            agents: Vec::new(),
            tools: Vec::new(),
        };
        if agents.is_empty() {
            for t in self.registry.for_role(role) {
                report.tools.push(run_tool(
                    &*t,
                    ctx.mind,
                    &json!({}),
                    ctx.deadline.as_ref(),
                    ctx.cancel,
                    &self.services,
                    "orchestrator",
                ));
            }
        } else {
            for a in agents {
                report.agents.push(a.run(ctx));
            }
        }
        report
    }
}

impl RoleReport {
    /// Every tool result of the role, whoever ran it.
    pub fn results(&self) -> impl Iterator<Item = &ToolResult> {
        self.agents
            .iter()
            .flat_map(|a| a.results.iter())
            .chain(self.tools.iter())
    }
}

/// The most processed chunk list of a run: reranked, else fused, else the first
/// retrieval list; with the key it was read from.
pub fn final_chunks(
    scope: &Scope,
) -> Result<Option<(String, Vec<ScoredChunk>)>, crate::AgentError> {
    let mut best: Option<(usize, String, ChunkList)> = None;
    for e in scope.read_name("chunks")? {
        let Ok(l) = serde_json::from_value::<ChunkList>(e.value.clone()) else {
            continue;
        };
        let rank = match l.stage.as_str() {
            STAGE_RERANKED => 3,
            STAGE_FUSED => 2,
            STAGE_RETRIEVE => 1,
            _ => 0,
        };
        if best.as_ref().is_none_or(|b| rank > b.0) {
            best = Some((rank, e.key.clone(), l));
        }
    }
    match best {
        Some((_, key, l)) => Ok(Some((
            key,
            l.hits()
                .map_err(|e| crate::AgentError::Tool(e.to_string()))?,
        ))),
        None => Ok(None),
    }
}
