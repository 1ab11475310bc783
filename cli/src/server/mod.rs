//! `llmgov mock-server`: the provider model served over HTTP on loopback,
//! so that clients and the language bindings can be tested against real
//! rate-limit answers (statuses, headers, error bodies, streams) without a
//! provider account. The config format and endpoints are in cli/README.md.

mod config;
mod endpoint;
mod handler;
mod reply;
mod request;

use std::future::IntoFuture;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::post;
use axum::Router;

pub use config::{MockConfig, OutputTokens, ServerSettings};

use crate::error::CliError;
use endpoint::App;

/// How long streams still open may finish after a shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Request bodies up to this size are read; long prompts are the point of
/// token limits, so the default of 2 MiB is too small.
const BODY_LIMIT: usize = 64 << 20;

/// Serves the providers of the config at `config` on `host:port` (port 0
/// picks a free one) until SIGINT or SIGTERM. Prints one line,
/// `llmgov mock-server listening on http://ADDR`, once it accepts
/// connections.
pub fn serve(config: &Path, host: &str, port: u16) -> Result<(), CliError> {
    let config = MockConfig::load(config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(run(&config, host, port))
}

/// The routes of the mock server over `app`'s providers.
fn router(app: App) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(handler::openai))
        .route("/v1/messages", post(handler::anthropic))
        .fallback(handler::fallback)
        .method_not_allowed_fallback(handler::method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(Arc::new(app))
}

async fn run(config: &MockConfig, host: &str, port: u16) -> Result<(), CliError> {
    let app = App::new(config)?;
    let listener = tokio::net::TcpListener::bind((host, port))
        .await
        .map_err(|e| CliError::field("--host/--port", format!("{host}:{port}"), format!("cannot listen: {e}")))?;
    let addr = listener.local_addr()?;
    let signal = shutdown_signal()?;
    // Exactly one line on stdout: the tests and the bindings wait for it
    // to learn the port.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "llmgov mock-server listening on http://{addr}")?;
    stdout.flush()?;
    drop(stdout);

    let (stopping, mut stopped) = tokio::sync::watch::channel(false);
    let server = axum::serve(listener, router(app)).with_graceful_shutdown(async move {
        signal.await;
        // Fails only if the grace timer below is gone, i.e. we are done.
        let _ = stopping.send(true);
    });
    // A client that keeps a stream open must not keep the server alive.
    let grace = async move {
        let _ = stopped.wait_for(|stop| *stop).await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        result = server.into_future() => result?,
        () = grace => eprintln!("llmgov mock-server: closing connections still open after {SHUTDOWN_GRACE:?}"),
    }
    Ok(())
}

/// Resolves on SIGINT (Ctrl-C) or, on Unix, SIGTERM. The handlers are
/// installed by this call, not when the future is first polled, so that a
/// signal sent as soon as the address is printed is not fatal.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, CliError> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        Ok(async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            // Without a handler we could never be interrupted; wait forever
            // rather than stop at once.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}
