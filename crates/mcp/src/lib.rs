//! neuralcore over the Model Context Protocol: the application core's search, ask,
//! ingest and memory as MCP tools, its collections, documents and memories as
//! resources, and a prompt that loads a project's memory tiers — for Claude Desktop,
//! Cursor, VS Code and agent frameworks.
//!
//! One handler ([`NeuralcoreMcp`]) serves two transports with the official SDK
//! (`rmcp`, spec 2026-07-28):
//! - stdio ([`serve_stdio`], `neuralcore mcp`): the local data dir as its `default`
//!   tenant's administrator, what a desktop assistant launches;
//! - streamable HTTP ([`http_service`], `/mcp` on `neuralcore serve`): stateless, behind
//!   the server's API keys. The caller's [`Principal`] comes from the key the server
//!   checked (an extension of the HTTP request), never from a tool argument or the URL.
//!
//! A read-only key lists and may call only the read tools. A tool that fails answers a
//! tool error with a clear message (`isError`), never a dropped connection; an internal
//! error's detail (it may name a path of the server's disk) is logged, not sent.

mod args;

use std::sync::Arc;

use neuralcore_agents::{AskOptions, Cancel, LoopEvent};
use neuralcore_app::{new_run_id, App, AppError, Principal, Scope, SearchRequest, Tenant};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, Prompt, PromptArgument, PromptMessage, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ResourceTemplate, Role,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_router, ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Value};

pub use args::*;

/// Most chunks or memories a tool returns.
const MAX_K: usize = 100;
/// Longest `ask` budget an MCP call may ask for.
const MAX_DEADLINE_MS: u64 = 120_000;

/// The tools a read-only key may call (every other one changes something).
const READ_TOOLS: &[&str] = &[
    "search",
    "ask",
    "job_status",
    "memory_search",
    "memory_get",
    "memory_tiers",
    "memory_graph",
];

/// The MCP handler over one application core.
#[derive(Clone)]
pub struct NeuralcoreMcp {
    app: Arc<App>,
    /// Who calls over stdio; `None` over HTTP, where each request carries its caller.
    local: Option<Principal>,
    /// The server's admission of work (none over stdio).
    admit: Option<Admit>,
    tools: ToolRouter<NeuralcoreMcp>,
}

/// The HTTP server's admission of work: a future that gives a place (held while the
/// work runs) or, when the server is at capacity, the reason it refused one.
pub type Admit = Arc<
    dyn Fn() -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<AdmitPermit, String>> + Send>,
        > + Send
        + Sync,
>;

/// A place for work, given back when dropped.
pub type AdmitPermit = tokio::sync::OwnedSemaphorePermit;

/// What the HTTP server shares with its MCP endpoint.
#[derive(Clone)]
pub struct HttpLimits {
    /// No API keys (a loopback server): `Host` must be loopback and no browser `Origin`
    /// is accepted.
    pub keyless: bool,
    /// A place for a tool call's work among the server's other requests: the same
    /// admission as its REST routes (`--max-concurrency` places, at most `--max-queue`
    /// waiting, each for at most `--queue-timeout-ms`).
    pub admit: Admit,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
}

impl NeuralcoreMcp {
    /// The handler for the local data dir over stdio: the `default` tenant, every tool.
    pub fn local(app: Arc<App>) -> Self {
        NeuralcoreMcp {
            app,
            local: Some(Principal {
                tenant: Tenant::default_tenant(),
                scope: Scope::Admin,
                key: None,
            }),
            admit: None,
            tools: Self::tool_router(),
        }
    }

    /// The handler behind the HTTP server: each request's [`Principal`] is an extension
    /// of its HTTP request, put there by the server's authentication.
    pub fn remote(app: Arc<App>, limits: &HttpLimits) -> Self {
        NeuralcoreMcp {
            app,
            local: None,
            admit: Some(limits.admit.clone()),
            tools: Self::tool_router(),
        }
    }

    /// Whether the tool `name` is offered on this server (`ingest_url` only when URL
    /// ingest is on).
    fn offers(&self, name: &str) -> bool {
        name != "ingest_url" || self.app.ingest_urls_enabled()
    }

    /// The caller of a request.
    fn caller(&self, ctx: &RequestContext<RoleServer>) -> Result<Principal, McpError> {
        if let Some(p) = &self.local {
            return Ok(p.clone());
        }
        ctx.extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Principal>().cloned())
            .ok_or_else(|| McpError::invalid_request("not authenticated", None))
    }

    /// Run `f` on the blocking pool (the core is synchronous) once the server admits it:
    /// a place for work among its other requests (`Unavailable` when it is at capacity;
    /// no admission over stdio).
    async fn admitted<T, F>(&self, f: F) -> Result<T, AppError>
    where
        T: Send + 'static,
        F: FnOnce(&App) -> Result<T, AppError> + Send + 'static,
    {
        let permit = match &self.admit {
            None => None,
            Some(admit) => Some(admit().await.map_err(AppError::Unavailable)?),
        };
        let app = self.app.clone();
        // The place is held by the work itself: a call the client cancels (or whose
        // connection drops) stops waiting for it, but the place stays taken until the
        // work on the pool is done.
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            f(&app)
        })
        .await
        .unwrap_or_else(|e| Err(AppError::Internal(format!("the call failed: {e}"))))
    }

    /// [`Self::admitted`], its value turned into
    /// structured output (a JSON object, as MCP wants: a list is wrapped by its tool),
    /// or its error into a tool error.
    async fn run<T, F>(&self, f: F) -> CallToolResult
    where
        T: serde::Serialize + Send + 'static,
        F: FnOnce(&App) -> Result<T, AppError> + Send + 'static,
    {
        match self.admitted(f).await.and_then(|v| {
            serde_json::to_value(v).map_err(|e| AppError::Internal(format!("cannot encode: {e}")))
        }) {
            Ok(v) => CallToolResult::structured(v),
            Err(e) => tool_error(e),
        }
    }
}

/// A protocol error for a resource or prompt that failed: its kind, and for a server at
/// capacity why (an internal error's detail stays in the log).
fn resource_error(e: AppError) -> McpError {
    match e {
        AppError::Unavailable(m) => McpError::internal_error(format!("unavailable: {m}"), None),
        e => McpError::internal_error(e.kind(), None),
    }
}

/// A tool error the client's user (or LLM) reads: the category and what went wrong.
fn tool_error(e: AppError) -> CallToolResult {
    let text = match &e {
        AppError::Internal(m) => {
            format!(
                "internal error {} (the server's log has the detail)",
                AppError::log_internal(m)
            )
        }
        other => format!("{}: {other}", other.kind()),
    };
    CallToolResult::error(vec![ContentBlock::text(text)])
}

fn invalid(m: impl Into<String>) -> CallToolResult {
    tool_error(AppError::InvalidInput(m.into()))
}

/// A text argument that must hold something and not be too long.
fn check_text(what: &str, s: &str) -> Result<(), CallToolResult> {
    if s.trim().is_empty() {
        return Err(invalid(format!("the {what} is empty")));
    }
    neuralcore_app::check_text_len(what, s).map_err(tool_error)
}

/// A tool's argument as the core's own type: both spell the same fields and values
/// (the arguments exist for their JSON Schemas, which the core's types do not derive).
fn convert<A: serde::Serialize, T: serde::de::DeserializeOwned>(a: A) -> Result<T, CallToolResult> {
    serde_json::to_value(a)
        .and_then(serde_json::from_value)
        .map_err(|e| invalid(e.to_string()))
}

#[tool_router]
impl NeuralcoreMcp {
    #[tool(
        description = "Search a collection of documents. Returns the best-matching chunks, \
                       each with its text, score, document title, source and provenance (where in \
                       which file it is). Use it to find passages; use `ask` for a cited answer.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn search(
        &self,
        Parameters(a): Parameters<SearchArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.caller(&ctx)?;
        if let Err(e) = check_text("query", &a.query) {
            return Ok(e);
        }
        if a.k == Some(0) || a.k.is_some_and(|k| k > MAX_K) {
            return Ok(invalid(format!("k must be 1 to {MAX_K}")));
        }
        let mut req = SearchRequest::new(a.query, a.collection);
        req.k = a.k;
        req.mode = match convert(a.mode) {
            Ok(m) => m,
            Err(e) => return Ok(e),
        };
        Ok(self.run(move |app| app.search(&who.tenant, &req)).await)
    }

    #[tool(
        description = "Answer a question from a collection with citations. Runs neuralcore's \
                       retrieval loop: plan, retrieve, grade every chunk, verify doubtful ones, \
                       answer only from supported evidence, reflect and retry under a budget. \
                       Returns the answer with numbered citations (document, span, quote), or \
                       an abstention saying what is missing; `conflicts` lists sources that \
                       disagree. Progress notifications carry the loop's stages.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn ask(
        &self,
        Parameters(a): Parameters<AskArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.caller(&ctx)?;
        if let Err(e) = check_text("question", &a.question) {
            return Ok(e);
        }
        if a.memory && who.scope < Scope::Write {
            return Ok(tool_error(AppError::InvalidInput(
                "recalling memories signals them: this key may only read (ask without `memory`)"
                    .into(),
            )));
        }
        if a.max_iterations.is_some_and(|n| n == 0 || n > 10) {
            return Ok(invalid("max_iterations must be 1 to 10"));
        }
        let deadline = a
            .deadline_ms
            .filter(|&d| d > 0)
            .unwrap_or(self.app.config().control.deadline_ms);
        let deadline = if deadline == 0 {
            MAX_DEADLINE_MS
        } else {
            deadline.min(MAX_DEADLINE_MS)
        };
        let cancel = Cancel::default();
        // The loop's events become progress notifications when the client asked for them.
        let token = ctx.meta.get_progress_token();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let sink: Option<neuralcore_agents::EventSink> = token.is_some().then(|| {
            Arc::new(move |e: &LoopEvent| {
                if let Some(line) = e.render() {
                    let _ = tx.send(line);
                }
            }) as neuralcore_agents::EventSink
        });
        let opts = AskOptions {
            collection: a.collection,
            max_iterations: a.max_iterations,
            deadline_ms: Some(deadline),
            project: a.project,
            cancel: cancel.clone(),
            events: sink,
            ..Default::default()
        };
        let run_id = new_run_id("mcp");
        let (question, memory, tenant) = (a.question, a.memory, who.tenant);
        let call = self.run(move |app| app.ask(&tenant, &run_id, &question, &opts, memory));
        tokio::pin!(call);
        let mut step = 0u32;
        let peer = ctx.peer.clone();
        loop {
            tokio::select! {
                out = &mut call => return Ok(out),
                Some(line) = rx.recv() => {
                    if let Some(t) = &token {
                        step += 1;
                        let p = ProgressNotificationParam::new(t.clone(), f64::from(step))
                            .with_message(line);
                        let _ = peer.notify_progress(p).await;
                    }
                }
                _ = ctx.ct.cancelled() => {
                    // The client cancelled: the loop stops at its next stage.
                    cancel.cancel();
                    return Ok(invalid("cancelled by the client"));
                }
            }
        }
    }

    #[tool(
        description = "Add a text to a collection (created when missing). Ingestion runs as a \
                       background job: returns the job with its id; poll `job_status` until its \
                       state is `indexed` before searching for the text.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn ingest_text(
        &self,
        Parameters(a): Parameters<IngestTextArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.caller(&ctx)?;
        let doc = neuralcore_app::TextDocument {
            name: a.name,
            title: a.title,
            text: a.text,
            metadata: a.metadata,
        };
        let collection = a.collection;
        Ok(self
            .run(move |app| {
                let upload = doc.into_upload(1)?;
                app.jobs()?.submit(&who.tenant, &collection, vec![upload])
            })
            .await)
    }

    #[tool(
        description = "Add a web page to a collection (created when missing): the page is \
                       fetched now and cleaned to text, then ingested as a background job. \
                       Returns the job; poll `job_status` until it is `indexed`. Only offered \
                       when the server enables URL ingest; pages on private or local addresses \
                       are refused.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = true
        )
    )]
    async fn ingest_url(
        &self,
        Parameters(a): Parameters<IngestUrlArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.caller(&ctx)?;
        let doc = neuralcore_app::UrlDocument {
            url: a.url,
            name: a.name,
            metadata: a.metadata,
        };
        let collection = a.collection;
        Ok(self
            .run(move |app| app.ingest_url(&who.tenant, &collection, doc))
            .await)
    }

    #[tool(
        description = "The state of an ingest job (queued, parsing, chunking, embedding, then \
                       indexed, failed or cancelled) with its counts and each file's errors.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn job_status(
        &self,
        Parameters(a): Parameters<JobArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.caller(&ctx)?;
        Ok(self
            .run(move |app| app.jobs()?.get(&who.tenant, &a.job))
            .await)
    }

    #[tool(
        description = "Remember something: store one self-contained statement (a fact, decision, \
                       rule, preference, procedure or episode) in long-term memory, linked to the \
                       entities it names. Returns the memory with its id and trust.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn memory_add(
        &self,
        Parameters(a): Parameters<MemoryAddArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.caller(&ctx)?;
        let req = match convert(a) {
            Ok(r) => r,
            Err(e) => return Ok(e),
        };
        Ok(self.run(move |app| app.memory_add(&who.tenant, req)).await)
    }

    #[tool(
        description = "Recall memories relevant to a query, best first, weighted by trust and \
                       recency. Superseded memories are left out unless asked for.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_search(
        &self,
        Parameters(a): Parameters<MemorySearchArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.caller(&ctx)?;
        if let Err(e) = check_text("query", &a.query) {
            return Ok(e);
        }
        if a.k == Some(0) || a.k.is_some_and(|k| k > MAX_K) {
            return Ok(invalid(format!("k must be 1 to {MAX_K}")));
        }
        let req = match convert(a) {
            Ok(r) => r,
            Err(e) => return Ok(e),
        };
        Ok(self
            .run(move |app| {
                app.memory_search(&who.tenant, &req)
                    .map(|hits| json!({ "hits": hits }))
            })
            .await)
    }

    #[tool(
        description = "One memory by id, with its trust, status and its relations to other \
                       memories and entities.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_get(
        &self,
        Parameters(a): Parameters<MemoryIdArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.caller(&ctx)?;
        Ok(self
            .run(move |app| app.memory_get(&who.tenant, &a.id))
            .await)
    }

    #[tool(
        description = "Tell the memory how a memory fared: `used` (it helped), `confirmed` (a user \
                       said it is right), `ignored` (retrieved but not useful) or `corrected` (a \
                       user said it is wrong). Its trust moves accordingly; returns the memory.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn memory_signal(
        &self,
        Parameters(a): Parameters<MemorySignalArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.caller(&ctx)?;
        let signal = match convert(a.signal) {
            Ok(s) => s,
            Err(e) => return Ok(e),
        };
        Ok(self
            .run(move |app| app.memory_signal(&who.tenant, &a.id, signal, a.query.as_deref()))
            .await)
    }

    #[tool(
        description = "Mark a past answer (by the `run_id` its `ask` returned) good or bad, as \
                       a user judged it: its cited passages are kept as training pairs for the \
                       evaluator (`neuralcore feedback export`), its cited memories are confirmed \
                       or corrected about the question. Returns the mark.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn answer_mark(
        &self,
        Parameters(a): Parameters<AnswerMarkArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.caller(&ctx)?;
        let verdict = match convert(a.verdict) {
            Ok(v) => v,
            Err(e) => return Ok(e),
        };
        let req = neuralcore_app::MarkRequest {
            verdict,
            citations: a.citations,
            note: a.note,
        };
        Ok(self
            .run(move |app| app.mark_run(&who.tenant, &a.run_id, &req))
            .await)
    }

    #[tool(
        description = "Link two memories: SUPERSEDES (the first replaces the second, which stops \
                       being recalled), PARTIAL_UPDATE, RELATED_TO, CONTRADICTS (answers state the \
                       disagreement) or DERIVED_FROM.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn memory_link(
        &self,
        Parameters(a): Parameters<MemoryLinkArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.caller(&ctx)?;
        let kind = match convert(a.kind) {
            Ok(k) => k,
            Err(e) => return Ok(e),
        };
        Ok(self
            .run(move |app| app.memory_link(&who.tenant, &a.from, kind, &a.to))
            .await)
    }

    #[tool(
        description = "Forget a memory: it is archived (no longer recalled) and can be restored \
                       from the CLI or the HTTP API. Returns the memory.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = false
        )
    )]
    async fn memory_forget(
        &self,
        Parameters(a): Parameters<MemoryIdArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.caller(&ctx)?;
        Ok(self
            .run(move |app| app.memory_forget(&who.tenant, &a.id))
            .await)
    }

    #[tool(
        description = "The memory context to load at the start of a session: L0 (a short \
                       summary), L1 (the rules, decisions and preferences that always apply) and \
                       L2 (memories relevant to the session's query), each with its token count; \
                       `text` is ready to put in a prompt.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_tiers(
        &self,
        Parameters(a): Parameters<TiersArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.caller(&ctx)?;
        let q = match convert(a) {
            Ok(q) => q,
            Err(e) => return Ok(e),
        };
        Ok(self
            .run(move |app| {
                let t = app.memory_tiers(&who.tenant, &q)?;
                let text = t.render();
                let mut v = serde_json::to_value(t)
                    .map_err(|e| AppError::Internal(format!("cannot encode: {e}")))?;
                v["text"] = text.into();
                Ok(v)
            })
            .await)
    }

    #[tool(
        description = "The knowledge graph around an entity (a person, project, library, …): \
                       the memories that mention it and how they relate (superseded and \
                       contradicting ones marked).",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_graph(
        &self,
        Parameters(a): Parameters<GraphArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.caller(&ctx)?;
        let q = match convert(a) {
            Ok(q) => q,
            Err(e) => return Ok(e),
        };
        Ok(self
            .run(move |app| {
                app.memory_graph(&who.tenant, &q)
                    .map(|n| json!({ "entities": n }))
            })
            .await)
    }
}

/// The URI of the collection list.
const COLLECTIONS_URI: &str = "neuralcore://collections";

impl NeuralcoreMcp {
    /// What a resource URI names, read for `who`.
    fn read(app: &App, who: &Principal, uri: &str) -> Result<Value, AppError> {
        let not_found = || AppError::NotFound(format!("no resource {uri:?}"));
        let enc = |v: Result<Value, serde_json::Error>| {
            v.map_err(|e| AppError::Internal(format!("cannot encode: {e}")))
        };
        if uri == COLLECTIONS_URI {
            return enc(serde_json::to_value(app.collections(&who.tenant)?));
        }
        if let Some(id) = uri.strip_prefix("neuralcore://memories/") {
            return enc(serde_json::to_value(app.memory_get(&who.tenant, id)?));
        }
        let rest = uri
            .strip_prefix("neuralcore://collections/")
            .ok_or_else(not_found)?;
        match rest.split('/').collect::<Vec<_>>().as_slice() {
            [c] => {
                let info = app.collection(&who.tenant, c)?;
                let sources = app.sources(&who.tenant, c)?;
                enc(serde_json::to_value(
                    json!({"collection": info, "sources": sources}),
                ))
            }
            [c, "documents", id] => enc(serde_json::to_value(app.document(&who.tenant, c, id)?)),
            [c, "documents", id, "chunks", n] => {
                let n: u32 = n.parse().map_err(|_| not_found())?;
                enc(serde_json::to_value(app.chunk(&who.tenant, c, id, n)?))
            }
            _ => Err(not_found()),
        }
    }
}

impl ServerHandler for NeuralcoreMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_prompts()
                .build(),
        )
        .with_server_info(Implementation::new("neuralcore", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "neuralcore answers questions from the user's own documents with citations, and keeps \
             a trust-weighted long-term memory. Use `ask` for an answer with evidence (it abstains \
             when the documents do not support one: say so rather than guess), `search` for \
             passages, `memory_tiers` at the start of a session, `memory_add` to remember, and \
             `memory_signal` to say whether a memory helped.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let who = self.caller(&ctx)?;
        let tools: Vec<Tool> = self
            .tools
            .list_all()
            .into_iter()
            .filter(|t| who.scope >= Scope::Write || READ_TOOLS.contains(&t.name.as_ref()))
            .filter(|t| self.offers(&t.name))
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools
            .get(name)
            .filter(|t| self.offers(&t.name))
            .cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let who = self.caller(&ctx)?;
        let name = request.name.to_string();
        if !self.tools.has_route(&name) {
            return Err(McpError::invalid_params(
                format!("no tool {name:?}: tools/list names them"),
                None,
            ));
        }
        if who.scope < Scope::Write && !READ_TOOLS.contains(&name.as_str()) {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "forbidden: this key may only read; {name} needs a key with the write scope"
            ))])
            .into());
        }
        self.tools
            .call(ToolCallContext::new(self, request, ctx))
            .await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let who = self.caller(&ctx)?;
        let collections = self
            .admitted(move |app| app.collections(&who.tenant))
            .await
            .map_err(resource_error)?;
        let mut out = vec![Resource::new(COLLECTIONS_URI, "collections")
            .with_description("The collections, with their counts")
            .with_mime_type("application/json")];
        for c in collections {
            out.push(
                Resource::new(format!("{COLLECTIONS_URI}/{}", c.name), c.name.clone())
                    .with_description(format!(
                        "Collection {}: its counts and sources with provenance",
                        c.name
                    ))
                    .with_mime_type("application/json"),
            );
        }
        Ok(ListResourcesResult::with_all_items(out))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let json = "application/json";
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new("neuralcore://collections/{collection}", "collection")
                .with_description("A collection: its counts and sources with provenance")
                .with_mime_type(json),
            ResourceTemplate::new(
                "neuralcore://collections/{collection}/documents/{id}",
                "document",
            )
            .with_description("A document (id from a search hit or a citation) with its provenance")
            .with_mime_type(json),
            ResourceTemplate::new(
                "neuralcore://collections/{collection}/documents/{id}/chunks/{ordinal}",
                "chunk",
            )
            .with_description("One chunk of a document, with its text")
            .with_mime_type(json),
            ResourceTemplate::new("neuralcore://memories/{id}", "memory")
                .with_description("A memory with its trust and relations")
                .with_mime_type(json),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let who = self.caller(&ctx)?;
        let uri = request.uri.clone();
        let read = self.admitted(move |app| Self::read(app, &who, &uri)).await;
        match read {
            Ok(v) => Ok(ReadResourceResult::new(vec![ResourceContents::text(
                v.to_string(),
                request.uri,
            )])
            .into()),
            Err(AppError::NotFound(m)) => Err(McpError::resource_not_found(m, None)),
            Err(AppError::InvalidInput(m)) => Err(McpError::invalid_params(m, None)),
            Err(e) => Err(resource_error(e)),
        }
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let arg = |name: &str, what: &str| {
            let mut a = PromptArgument::new(name);
            a.description = Some(what.into());
            a.required = Some(false);
            a
        };
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            "memory_context",
            Some(
                "Load a project's memory (L0 summary, L1 standing rules and decisions, L2 \
                 memories relevant to the session) as context for this conversation",
            ),
            Some(vec![
                arg("project", "The project"),
                arg("session", "The session"),
                arg("query", "What the session is about (selects L2)"),
            ]),
        )]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        if request.name != "memory_context" {
            return Err(McpError::invalid_params(
                format!("no prompt {:?}: prompts/list names them", request.name),
                None,
            ));
        }
        let who = self.caller(&ctx)?;
        let args = request.arguments.unwrap_or_default();
        let get = |k: &str| args.get(k).and_then(|v| v.as_str()).map(str::to_string);
        let q: neuralcore_app::TiersQuery = serde_json::from_value(
            json!({"project": get("project"), "session": get("session"), "query": get("query")}),
        )
        .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
        let tiers = self
            .admitted(move |app| app.memory_tiers(&who.tenant, &q))
            .await
            .map_err(|e| match e {
                AppError::InvalidInput(m) => McpError::invalid_params(m, None),
                e => resource_error(e),
            })?;
        let text = format!(
            "Here is what you remember about this project (from neuralcore's memory; trust \
             higher-tier items first):\n\n{}",
            tiers.render()
        );
        Ok(
            GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
                .with_description("The project's memory tiers")
                .into(),
        )
    }
}

/// Serve `app` over stdin and stdout until the client closes them (what
/// `neuralcore mcp` runs). Logs go to stderr: stdout carries the protocol only.
pub async fn serve_stdio(app: Arc<App>) -> Result<(), std::io::Error> {
    serve_io(app, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serve `app` as the local tenant over any byte stream pair (newline-delimited
/// JSON-RPC, as over stdio) until the client closes it.
pub async fn serve_io<R, W>(app: Arc<App>, read: R, write: W) -> Result<(), std::io::Error>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    use rmcp::ServiceExt;
    let running = NeuralcoreMcp::local(app)
        .serve((read, write))
        .await
        .map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}

/// The streamable HTTP service (stateless, JSON responses) over `app`, to mount at
/// `/mcp` behind the server's authentication, which puts each request's [`Principal`]
/// in its extensions. A server without keys (loopback only) also refuses requests
/// whose `Host` is not a loopback name (DNS rebinding) or that carry a browser `Origin`
/// (a web page the user visits must not reach the local data); with keys, the key
/// decides.
pub fn http_service(
    app: Arc<App>,
    limits: HttpLimits,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    NeuralcoreMcp,
    rmcp::transport::streamable_http_server::session::never::NeverSessionManager,
> {
    use rmcp::transport::streamable_http_server::{
        session::never::NeverSessionManager, StreamableHttpServerConfig, StreamableHttpService,
    };
    let mut config = StreamableHttpServerConfig::default();
    config.legacy_session_mode = false;
    config.json_response = true;
    config.max_request_body_bytes = limits.max_body_bytes;
    let config = if limits.keyless {
        config.enforce_origin_validation()
    } else {
        config.disable_allowed_hosts()
    };
    StreamableHttpService::new(
        move || Ok(NeuralcoreMcp::remote(app.clone(), &limits)),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}
