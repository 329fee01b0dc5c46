//! The HTTP/WebSocket server (actix-web): OpenAI-compatible endpoints with SSE, the `amdahl.v1`
//! WebSocket, `/tokenize`, `/detokenize`, `/health`, `/metrics`, the telemetry socket
//! `/v1/ws/telemetry` and `/v1/profile`, and the dashboard at `/`. Handlers validate and tokenize
//! at the edge and talk to the engine only through `amdahl_engine::api`. Shutdown (SIGINT/SIGTERM
//! in `amdahl serve`, [`Server::shutdown`] in tests) stops admitting, lets in-flight requests
//! finish within a grace period, closes WebSockets with 1001, then stops the listener; whatever
//! is still running after the grace period is cancelled by dropping its stream.

pub mod dashboard;
pub mod error;
pub mod generation;
pub mod middleware;
pub mod openai;
pub mod routes;
pub mod state;
pub mod telemetry;
pub mod validate;
pub mod ws;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::middleware::from_fn;
use actix_web::{App, HttpServer, web};
use amdahl_engine::api::{ChatTemplate, EngineConfig, EngineHandle, Tokenizer};
use anyhow::{Context, anyhow};
use tokio::sync::watch;

pub use state::{AppState, Limits};

/// Everything `amdahl serve` configures.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub engine: EngineConfig,
    pub host: String,
    /// 0 picks a free port ([`Server::addr`] tells which).
    pub port: u16,
    pub api_key: Option<String>,
    pub limits: Limits,
    /// HTTP worker threads.
    pub workers: usize,
    /// How long shutdown waits for in-flight requests.
    pub shutdown_grace: Duration,
}

/// A running server.
pub struct Server {
    pub addr: SocketAddr,
    handle: actix_web::dev::ServerHandle,
    shutdown_tx: watch::Sender<bool>,
    engine: EngineHandle,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    grace: Duration,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

/// Loads the model, starts the engine and binds the listener. Call inside an actix `System`.
pub fn start(cfg: ServerConfig) -> anyhow::Result<Server> {
    let dir = cfg.engine.model_dir.clone();
    let tok = Tokenizer::from_model_dir(&dir)?
        .ok_or_else(|| anyhow!("{} has no tokenizer.json; serving needs one", dir.display()))?;
    let template = ChatTemplate::from_model_dir(&dir)?;
    if template.is_none() {
        tracing::warn!(
            "{} has no chat template: /v1/chat/completions will refuse",
            dir.display()
        );
    }
    let engine = EngineHandle::start(cfg.engine.clone())
        .with_context(|| format!("loading {}", dir.display()))?;
    if tok.vocab_size() > engine.info().vocab_size {
        tracing::warn!(
            "the tokenizer has {} ids but the model only {}: some prompts will be refused",
            tok.vocab_size(),
            engine.info().vocab_size
        );
    }
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let state = AppState {
        engine: engine.clone(),
        tok: Arc::new(tok),
        template: template.map(Arc::new),
        limits: cfg.limits,
        api_key: cfg.api_key.clone().filter(|k| !k.is_empty()),
        shutdown: shutdown_rx,
        started: state::unix_now(),
    };
    let data = web::Data::new(state);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .wrap(from_fn(middleware::auth))
            .wrap(from_fn(middleware::http_metrics))
            .route("/v1/models", web::get().to(routes::models))
            .route("/v1/completions", web::post().to(openai::completions))
            .route("/v1/chat/completions", web::post().to(openai::chat))
            .route("/tokenize", web::post().to(routes::tokenize_route))
            .route("/detokenize", web::post().to(routes::detokenize_route))
            .route("/health", web::get().to(routes::health))
            .route("/metrics", web::get().to(routes::metrics))
            .route("/v1/ws", web::get().to(ws::ws_route))
            .route("/v1/ws/telemetry", web::get().to(telemetry::telemetry_ws))
            .route("/v1/profile", web::get().to(telemetry::profile))
            .route("/", web::get().to(dashboard::index))
            .route("/dashboard/{file}", web::get().to(dashboard::asset))
            .default_service(web::to(routes::not_found))
    })
    .workers(cfg.workers.max(1))
    .disable_signals()
    .shutdown_timeout(2)
    .bind((cfg.host.as_str(), cfg.port))
    .with_context(|| format!("binding {}:{}", cfg.host, cfg.port))?;
    let addr = *server
        .addrs()
        .first()
        .ok_or_else(|| anyhow!("the listener has no address"))?;
    let server = server.run();
    let handle = server.handle();
    let task = actix_web::rt::spawn(server);
    Ok(Server {
        addr,
        handle,
        shutdown_tx,
        engine,
        task,
        grace: cfg.shutdown_grace,
    })
}

impl Server {
    pub fn engine(&self) -> &EngineHandle {
        &self.engine
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Graceful shutdown: refuse new work, let in-flight requests finish (up to the grace
    /// period), close WebSockets with 1001, stop the listener.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let _ = self.engine.drain().await;
        let _ = self.shutdown_tx.send(true);
        let deadline = Instant::now() + self.grace;
        while Instant::now() < deadline {
            match self.engine.stats().await {
                Ok(s) if s.running == 0 && s.waiting == 0 => break,
                Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                Err(_) => break,
            }
        }
        // Let WebSocket tasks send their close frames before connections are torn down.
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.handle.stop(true).await;
        self.task.await.map_err(|e| anyhow!("server task: {e}"))??;
        Ok(())
    }

    /// Serves until SIGINT or SIGTERM, then shuts down gracefully.
    pub async fn run_until_signal(self) -> anyhow::Result<()> {
        wait_for_signal().await?;
        tracing::info!("signal received: draining");
        eprintln!("shutting down: finishing in-flight requests");
        self.shutdown().await
    }
}

#[cfg(unix)]
async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

#[cfg(not(unix))]
async fn wait_for_signal() -> anyhow::Result<()> {
    tokio::signal::ctrl_c().await?;
    Ok(())
}
