//! Tools, agents and the orchestrator over the Mind.
//!
//! - [`tool`]: the one contract every capability implements ([`Tool`], [`ToolSpec`],
//!   [`ToolContext`], [`ToolResult`]) and the [`Registry`] that discovers tools at run
//!   time: each tool registers itself in its own file ([`register_tool!`]).
//! - [`tools`]: the built-in tools (keyword search, vector search, fusion, reranking),
//!   each reading the query from the Mind and writing `<namespace>.chunks`.
//! - [`agent`]: agents defined in markdown (front matter + body), their parser and
//!   factory, and the [`Agent`] trait (plan → execute → validate → communicate).
//! - [`loader`]: discovers agent files in folders and hot-reloads them.
//! - [`orchestrator`]: runs a sequence of roles over a run's Mind scope.
//! - [`consciousness`]: the control loop (decide → plan → retrieve → grade → verify →
//!   refine → reflect, then generate → check) that answers questions.
//! - [`crag`], [`grader`]: the evidence model on the Mind and the CRAG evaluator.

pub mod agent;
pub mod conflict;
pub mod consciousness;
pub mod crag;
pub mod def;
pub mod events;
pub mod grader;
pub mod intent;
pub mod llm_judge;
pub mod loader;
pub mod orchestrator;
pub mod planner;
pub mod schema;
pub mod tool;
pub mod tools;
pub mod values;

#[doc(hidden)]
pub use inventory;

pub use agent::{parse, Agent, AgentContext, AgentDef, AgentFactory, AgentReport, DefError, ROLES};
pub use consciousness::{AskOptions, AskReport, CachedAnswer, SCHEMA};
pub use crag::{Evidence, Switches, Verdict};
pub use events::{EventSink, LoopEvent};
pub use loader::AgentLoader;
pub use orchestrator::{final_chunks, Orchestrator, RoleReport, RunReport, RETRIEVAL_ROLES};
pub use tool::{
    run_tool, Cancel, Clock, CostClass, Deadline, ManualClock, Output, Registry, Services,
    SystemClock, Tool, ToolContext, ToolError, ToolResult, ToolSpec, ToolStatus,
};
pub use tools::{ChunkList, ChunkRef};

/// Errors of the agent layer.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The Mind failed.
    #[error(transparent)]
    Mind(#[from] neuralcore_mind::MindError),
    /// A tool's output could not be used.
    #[error("{0}")]
    Tool(String),
    /// The caller's input cannot be used (an empty or oversized question).
    #[error("{0}")]
    Invalid(String),
    /// The caller cancelled the run.
    #[error("the run was cancelled")]
    Cancelled,
}
