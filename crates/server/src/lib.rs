//! neuralcore as a service: the versioned HTTP API over the application core
//! ([`neuralcore_app::App`]), as `neuralcore serve` runs it.
//!
//! - Every route under `/v1` names its caller by API key (`Authorization: Bearer` or
//!   `X-API-Key`) and works on that key's tenant only; another tenant's ids answer 404.
//!   A data dir without keys gives a server that binds to loopback only and treats every
//!   caller as the default tenant's administrator ([`check_bind`]).
//! - The engine is synchronous: handlers run its work on tokio's blocking pool, at most
//!   [`ServeOptions::max_concurrency`] at a time, so slow asks never starve `/healthz`.
//! - Errors are `application/problem+json` ([`error`]); limits: body size, a deadline
//!   per request, concurrency, a per-key rate limit; shutdown drains requests in flight.
//!
//! The routes and their shapes are in `docs/api.md`.

mod agents;
pub mod auth;
pub mod compat;
mod console;
mod documents;
pub mod error;
mod memory;
pub mod metrics;
pub mod openapi;
mod routes;
mod runs;
pub mod wire;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::Router;
use neuralcore_app::{App, AppError, Jobs, KeyStore};
use tokio::sync::Semaphore;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::ApiError;

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Where to listen.
    pub addr: SocketAddr,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Blocking requests (search, ask, writes) run at once; more wait for a place.
    pub max_concurrency: usize,
    /// Requests that may wait for a place at once; one more is refused at once with a
    /// 503 and `Retry-After` (shed, not queued until the client's own timeout).
    pub max_queue: usize,
    /// Longest a request waits for a place before a 503 (capped at `request_timeout`).
    pub queue_timeout: Duration,
    /// Longest a request may take (an ask's loop deadline is capped at it).
    pub request_timeout: Duration,
    /// Requests a minute per API key (0: no limit).
    pub rate_per_minute: u32,
    /// Largest upload (`POST /v1/collections/{name}/documents`), in bytes.
    pub max_upload_bytes: usize,
    /// Run ingest jobs in this process (the default). Off, uploads are only queued: on
    /// the shared PostgreSQL queue, `neuralcore worker` processes run them.
    pub run_jobs: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_body_bytes: 2 * 1024 * 1024,
            max_concurrency: 8,
            max_queue: 64,
            queue_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            rate_per_minute: 600,
            max_upload_bytes: 64 * 1024 * 1024,
            run_jobs: true,
        }
    }
}

/// What handlers share.
pub struct State {
    pub(crate) app: Arc<App>,
    pub(crate) jobs: Arc<Jobs>,
    /// The key store when the server requires keys; `None` for a loopback server
    /// without any.
    pub(crate) keys: Option<Arc<KeyStore>>,
    pub(crate) pool: Arc<Semaphore>,
    /// Requests waiting for a place in `pool`.
    waiting: Arc<std::sync::atomic::AtomicUsize>,
    pub(crate) opts: ServeOptions,
    pub(crate) limiter: auth::RateLimiter,
    pub(crate) metrics: metrics::Metrics,
}

impl State {
    /// The state of a server over `app`: keys are required when the store has any.
    pub fn new(app: App, keys: KeyStore, opts: ServeOptions) -> Result<State, AppError> {
        let required = keys.has_active_keys()?;
        Ok(State {
            jobs: app.jobs()?,
            app: Arc::new(app),
            keys: required.then(|| Arc::new(keys)),
            pool: Arc::new(Semaphore::new(opts.max_concurrency.max(1))),
            waiting: Arc::default(),
            limiter: auth::RateLimiter::new(opts.rate_per_minute),
            metrics: metrics::Metrics::default(),
            opts,
        })
    }

    /// The application it serves.
    pub fn app(&self) -> &Arc<App> {
        &self.app
    }

    /// Whether requests need an API key.
    pub fn requires_keys(&self) -> bool {
        self.keys.is_some()
    }

    /// Run `f` on the blocking pool once a place is free ([`State::place`]: a 503 when
    /// the queue is full or none frees in time).
    /// [`State::blocking`] for short work (a search). On an idle server it runs on this
    /// worker thread, which hands its other tasks to the runtime meanwhile
    /// (`block_in_place`): no hop to a pool thread and back, a lower latency. Under load
    /// it goes to the pool like the rest (handing workers over costs throughput). Not
    /// for work a dropped connection must cancel: the task is not polled until it is done.
    pub(crate) async fn short<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&App) -> Result<T, AppError> + Send + 'static,
    {
        if self.pool.available_permits() < self.opts.max_concurrency.max(1) {
            return self.blocking(f).await;
        }
        let _permit = self.place().await?;
        tokio::task::block_in_place(|| f(&self.app)).map_err(ApiError::from)
    }

    /// A place to do work: at once when one is free; else a wait among at most
    /// `max_queue` others, for at most `queue_timeout`; else a 503 with `Retry-After`.
    async fn place(&self) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
        use std::sync::atomic::Ordering;
        if let Ok(p) = self.pool.clone().try_acquire_owned() {
            return Ok(p);
        }
        /// Leaves the queue however the wait ends (a place, a timeout, a client gone).
        struct Waiting(Arc<std::sync::atomic::AtomicUsize>);
        impl Drop for Waiting {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.opts.max_queue {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            self.metrics.shed();
            return Err(ApiError::busy(
                "the server is at capacity and its queue is full; try again",
                1,
            ));
        }
        let _waiting = Waiting(self.waiting.clone());
        let wait = self.opts.queue_timeout.min(self.opts.request_timeout);
        tokio::time::timeout(wait, self.pool.clone().acquire_owned())
            .await
            .map_err(|_| {
                self.metrics.shed();
                ApiError::busy("the server is busy; try again", 2)
            })?
            .map_err(|_| ApiError::busy("the server is shutting down", 5))
    }

    pub(crate) async fn blocking<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&App) -> Result<T, AppError> + Send + 'static,
    {
        let permit = self.place().await?;
        let app = self.app.clone();
        // The request's span goes along, so the work's spans are its children.
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            span.in_scope(|| f(&app))
        })
        .await
        .map_err(|e| ApiError::from(AppError::Internal(format!("a request's task failed: {e}"))))?
        .map_err(ApiError::from)
    }
}

/// Whether `addr` may be bound: any address with keys, loopback only without.
pub fn check_bind(addr: &SocketAddr, requires_keys: bool) -> Result<(), String> {
    if requires_keys || addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(format!(
            "refusing to listen on {addr} without API keys: anyone who can reach it could read \
             and change every collection. Create a key first (neuralcore keys create --scope admin), \
             or listen on 127.0.0.1"
        ))
    }
}

/// The documented routes: each is registered together with its OpenAPI operation (one
/// `#[utoipa::path]` per handler), so the document lists every route the server has.
fn api(max_upload_bytes: usize) -> OpenApiRouter<Arc<State>> {
    // Uploads have a body limit of their own (the rest keep `max_body_bytes`).
    let uploads = OpenApiRouter::new()
        .routes(routes!(documents::upload))
        .layer(DefaultBodyLimit::max(max_upload_bytes));
    OpenApiRouter::with_openapi(openapi::base())
        .routes(routes!(compat::acai_root))
        .routes(routes!(compat::acai_health))
        .routes(routes!(compat::acai_chat))
        .routes(routes!(compat::models))
        .routes(routes!(compat::chat_completions))
        .routes(routes!(routes::healthz))
        .routes(routes!(routes::readyz))
        .routes(routes!(routes::list_collections, routes::create_collection))
        .routes(routes!(routes::get_collection, routes::delete_collection))
        .merge(uploads)
        .routes(routes!(documents::ingest_url))
        .routes(routes!(documents::get_document))
        .routes(routes!(documents::get_chunk))
        .routes(routes!(documents::list_sources))
        .routes(routes!(documents::get_source, documents::delete_source))
        .routes(routes!(documents::list_jobs))
        .routes(routes!(documents::get_job))
        .routes(routes!(documents::cancel_job))
        .routes(routes!(documents::job_events))
        .routes(routes!(routes::search))
        .routes(routes!(routes::ask))
        .routes(routes!(runs::list))
        .routes(routes!(runs::get))
        .routes(routes!(runs::mark))
        .routes(routes!(runs::marks))
        .routes(routes!(memory::add, memory::list))
        .routes(routes!(memory::search))
        .routes(routes!(memory::get))
        .routes(routes!(memory::signal))
        .routes(routes!(memory::link))
        .routes(routes!(memory::forget))
        .routes(routes!(memory::restore))
        .routes(routes!(memory::audit))
        .routes(routes!(memory::tiers))
        .routes(routes!(memory::graph))
        .routes(routes!(memory::feedback))
        .routes(routes!(agents::agents))
        .routes(routes!(agents::tools))
        .routes(routes!(metrics::metrics))
        .routes(routes!(metrics::backup))
        .routes(routes!(openapi::openapi_json))
        .routes(routes!(openapi::docs_page))
}

/// The OpenAPI document of every route (what `GET /openapi.json` serves).
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    let (_, mut doc) = api(ServeOptions::default().max_upload_bytes).split_for_parts();
    openapi::finish(&mut doc);
    doc
}

/// The routes over `state`.
pub fn router(state: Arc<State>) -> Router {
    let max_body = state.opts.max_body_bytes;
    let (routes, mut doc) = api(state.opts.max_upload_bytes).split_for_parts();
    openapi::finish(&mut doc);
    let doc = Arc::new(doc);
    // MCP over streamable HTTP: the same keys (the caller goes into the request for the
    // MCP handler to read) and the same places for work.
    let mcp = Router::new()
        .route_service(
            "/mcp",
            neuralcore_mcp::http_service(
                state.app.clone(),
                neuralcore_mcp::HttpLimits {
                    keyless: !state.requires_keys(),
                    admit: {
                        let state = state.clone();
                        Arc::new(move || {
                            let state = state.clone();
                            Box::pin(async move { state.place().await.map_err(|e| e.detail) })
                        })
                    },
                    max_body_bytes: max_body,
                },
            ),
        )
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::mcp_caller,
        ));
    routes
        .merge(mcp)
        .layer(axum::Extension(doc))
        // The web console (`crates/server/console/`): `/console/…`, and `/` for browsers.
        .merge(console::routes())
        .layer(axum::middleware::from_fn(console::root_page))
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .with_state(state)
}

/// Serve `state` on its address until Ctrl-C or SIGTERM, then stop taking connections
/// and let the requests in flight finish. `ready` gets the bound address (port 0 picks
/// one).
pub async fn serve(
    state: Arc<State>,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), std::io::Error> {
    let addr = state.opts.addr;
    check_bind(&addr, state.requires_keys())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::PermissionDenied, e))?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    // No Nagle: a response's head and body go out at once, not 40 ms apart.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    // Say who owns the data dir, for other commands on it (removed on a clean stop).
    let info = neuralcore_app::ServerInfo {
        url: format!("http://{bound}"),
        pid: std::process::id(),
    };
    let server_file = neuralcore_app::server_file(state.app.data_dir());
    if let Ok(text) = serde_json::to_string(&info) {
        if let Err(e) = std::fs::write(&server_file, text) {
            tracing::warn!("cannot write {}: {e}", server_file.display());
        }
    }
    // Jobs queued before (or interrupted by) the last stop resume now.
    if state.opts.run_jobs {
        state.jobs.start_worker(Arc::downgrade(&state.app));
    }
    ready(bound);
    let jobs = state.jobs.clone();
    let stopping = jobs.clone();
    let served = axum::serve(listener, router(state))
        .with_graceful_shutdown(async move {
            shutdown_signal().await;
            // The job worker stops after its current file while requests drain (job
            // event streams end then too).
            stopping.begin_shutdown();
        })
        .await;
    // The running job stops after its file and stays queued for the next start.
    tokio::task::spawn_blocking(move || jobs.shutdown(Duration::from_secs(30)))
        .await
        .ok();
    let _ = std::fs::remove_file(&server_file);
    served
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down: finishing the requests in flight");
}
