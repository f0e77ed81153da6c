//! Agents defined in markdown: YAML front matter (name, enabled, role, description,
//! tools, model, parameters, reads, writes) and a body (instructions, or a prompt
//! template with `{{slot}}`s).
//!
//! [`parse`] is the AgentMarkdownParser (errors carry the file and line): the syntax in
//! [`crate::def`], then the tools and their parameters against the [`Registry`];
//! [`AgentFactory`] turns a definition into a runnable [`Agent`] with tools from the
//! [`Registry`]; every agent is substitutable through the one [`Agent`] trait, whose
//! default `run` is plan → execute → validate → communicate.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Value};

use crate::def::{self, line_of, Draft};
pub use crate::def::{DefError, ROLES};
use crate::tool::{run_tool, Cancel, Registry, Services, Tool, ToolResult, ToolStatus};
use neuralcore_mind::Scope;

/// A checked agent definition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentDef {
    /// Unique name (`[a-z0-9_-]`, 1–64 characters).
    pub name: String,
    /// Disabled agents are loaded for checking but never run.
    pub enabled: bool,
    /// Its role in the loop.
    pub role: String,
    /// One line.
    pub description: String,
    /// Tools it runs, in order.
    pub tools: Vec<String>,
    /// Model it asks for (an LLM or reranker name), if any.
    pub model: Option<String>,
    /// Parameters: an entry named after one of its tools is that tool's parameters;
    /// the others (thresholds, budgets) are the agent's own.
    pub parameters: BTreeMap<String, Value>,
    /// Key patterns it reads.
    pub reads: Vec<String>,
    /// Keys it writes.
    pub writes: Vec<String>,
    /// The markdown body: instructions or a prompt template.
    pub body: String,
    /// The file it came from.
    pub path: PathBuf,
}

impl AgentDef {
    /// The `{{slot}}` names of the body, in order of first use.
    pub fn slots(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut rest = self.body.as_str();
        while let Some(i) = rest.find("{{") {
            let Some(j) = rest[i + 2..].find("}}") else {
                break;
            };
            let s = rest[i + 2..i + 2 + j].trim().to_string();
            if !s.is_empty() && !out.contains(&s) {
                out.push(s);
            }
            rest = &rest[i + 2 + j + 2..];
        }
        out
    }

    /// The body with every slot filled; a slot without a value is an error.
    pub fn render(&self, values: &BTreeMap<String, String>) -> Result<String, String> {
        let mut out = self.body.clone();
        for s in self.slots() {
            let v = values
                .get(&s)
                .ok_or_else(|| format!("agent {}: no value for slot {{{{{s}}}}}", self.name))?;
            out = out.replace(&format!("{{{{{s}}}}}", s = s), v);
            out = out.replace(&format!("{{{{ {s} }}}}"), v);
        }
        Ok(out)
    }
}

/// Parse and check one agent file's text. `registry` checks tool names and that each
/// tool can fill the agent's role.
pub fn parse(path: &Path, text: &str, registry: &Registry) -> Result<AgentDef, DefError> {
    let Draft { front, fm, body } = def::parse_syntax(path, text)?;
    let front = front.as_str();
    let err = |line: Option<usize>, message: String| DefError {
        path: path.to_path_buf(),
        line,
        message,
    };
    for t in &fm.tools {
        let line = line_of(front, t).or(line_of(front, "tools:"));
        let Some(tool) = registry.get(t) else {
            let names: Vec<&str> = registry.all().map(|t| t.spec().name).collect();
            return Err(err(
                line,
                format!("unknown tool {t:?} (tools: {})", names.join(", ")),
            ));
        };
        if !tool.spec().roles.contains(&fm.role.as_str()) {
            return Err(err(
                line,
                format!(
                    "tool {t:?} cannot fill the role {:?} (it fills: {})",
                    fm.role,
                    tool.spec().roles.join(", ")
                ),
            ));
        }
    }
    let mut parameters = BTreeMap::new();
    for (k, v) in fm.parameters {
        let v: Value = serde_json::to_value(&v).map_err(|e| {
            err(
                line_of(front, &format!("{k}:")),
                format!("parameter {k}: {e}"),
            )
        })?;
        if let Some(tool) = fm.tools.iter().find(|t| **t == k) {
            let spec = registry.get(tool).expect("checked above");
            crate::schema::validate(&(spec.spec().params)(), &v).map_err(|e| {
                err(
                    line_of(front, &format!("{k}:")),
                    format!("parameters of tool {k}: {e}"),
                )
            })?;
        }
        parameters.insert(k, v);
    }
    Ok(AgentDef {
        name: fm.name,
        enabled: fm.enabled,
        role: fm.role,
        description: fm.description,
        tools: fm.tools,
        model: fm.model,
        parameters,
        reads: fm.reads,
        writes: fm.writes,
        body,
        path: path.to_path_buf(),
    })
}

/// What an agent run gives the orchestrator.
#[derive(Debug, Clone, Serialize)]
pub struct AgentReport {
    /// Agent name.
    pub agent: String,
    /// Its role.
    pub role: String,
    /// One result per tool run.
    pub results: Vec<ToolResult>,
    /// Whether validation passed.
    pub ok: bool,
    /// Why not, or a summary.
    pub message: String,
}

/// What one step of a plan runs.
#[derive(Debug, Clone)]
pub struct Step {
    /// The tool.
    pub tool: Arc<dyn Tool>,
    /// Its parameters.
    pub params: Value,
}

impl std::fmt::Debug for dyn Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tool({})", self.spec().name)
    }
}

/// What an agent run may use.
pub struct AgentContext<'a> {
    /// The run's scope.
    pub mind: &'a Scope,
    /// Shared services.
    pub services: &'a Services,
    /// The run's deadline.
    pub deadline: Option<crate::tool::Deadline>,
    /// Cancellation.
    pub cancel: &'a Cancel,
}

/// A runnable agent. Every agent is substitutable through this trait.
pub trait Agent: Send + Sync {
    /// Its definition.
    fn def(&self) -> &AgentDef;
    /// Decide which tools to run with which parameters.
    fn plan(&self, ctx: &AgentContext<'_>) -> Vec<Step>;
    /// Run the plan.
    fn execute(&self, ctx: &AgentContext<'_>, plan: &[Step]) -> Vec<ToolResult> {
        plan.iter()
            .map(|s| {
                run_tool(
                    &*s.tool,
                    ctx.mind,
                    &s.params,
                    ctx.deadline.as_ref(),
                    ctx.cancel,
                    ctx.services,
                    &self.def().name,
                )
            })
            .collect()
    }
    /// Check the results: by default, no tool failed.
    fn validate(&self, results: &[ToolResult]) -> Result<String, String> {
        let failed: Vec<String> = results
            .iter()
            .filter(|r| matches!(r.status, ToolStatus::Failed { .. }))
            .map(|r| format!("{}: {}", r.tool, r.message))
            .collect();
        if failed.is_empty() {
            Ok(results
                .iter()
                .map(|r| format!("{}: {}", r.tool, r.message))
                .collect::<Vec<_>>()
                .join("; "))
        } else {
            Err(failed.join("; "))
        }
    }
    /// Tell the others: the report goes to `agents.<name>` on the Mind.
    fn communicate(&self, ctx: &AgentContext<'_>, report: &AgentReport) {
        let key = format!("agents.{}", self.def().name);
        let value = json!({"role": report.role, "ok": report.ok, "message": report.message,
            "tools": report.results});
        if let Err(e) = ctx.mind.write(&key, value, &self.def().name, None) {
            tracing::warn!(agent = %self.def().name, "cannot write its report: {e}");
        }
    }
    /// plan → execute → validate → communicate.
    fn run(&self, ctx: &AgentContext<'_>) -> AgentReport {
        let plan = self.plan(ctx);
        let results = self.execute(ctx, &plan);
        let (ok, message) = match self.validate(&results) {
            Ok(m) => (true, m),
            Err(m) => (false, m),
        };
        let report = AgentReport {
            agent: self.def().name.clone(),
            role: self.def().role.clone(),
            results,
            ok,
            message,
        };
        self.communicate(ctx, &report);
        report
    }
}

/// The standard agent: runs its tools in order with the parameters its file gives them.
pub struct ToolAgent {
    def: AgentDef,
    tools: Vec<Arc<dyn Tool>>,
}

impl Agent for ToolAgent {
    fn def(&self) -> &AgentDef {
        &self.def
    }

    fn plan(&self, _ctx: &AgentContext<'_>) -> Vec<Step> {
        self.tools
            .iter()
            .map(|t| Step {
                tool: t.clone(),
                params: self
                    .def
                    .parameters
                    .get(t.spec().name)
                    .cloned()
                    .unwrap_or_else(|| json!({})),
            })
            .collect()
    }
}

/// Builds runnable agents from definitions.
pub struct AgentFactory {
    registry: Registry,
}

impl AgentFactory {
    /// A factory over `registry`.
    pub fn new(registry: Registry) -> Self {
        AgentFactory { registry }
    }

    /// The registry tools come from.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// A runnable agent for `def` (its tools must exist: [`parse`] checked them).
    pub fn build(&self, def: AgentDef) -> Result<Arc<dyn Agent>, DefError> {
        let mut tools = Vec::new();
        for t in &def.tools {
            tools.push(self.registry.get(t).ok_or_else(|| DefError {
                path: def.path.clone(),
                line: None,
                message: format!("unknown tool {t:?}"),
            })?);
        }
        Ok(Arc::new(ToolAgent { def, tools }))
    }
}
