//! `GET /v1/ws/telemetry`: a read-only WebSocket that pushes a telemetry snapshot about five
//! times a second (`{"type":"telemetry", ...}`, amdahl-protocol `telemetry`), and `GET
//! /v1/profile`: the same snapshot once, as JSON (the bottleneck report with its sentences).
//! The snapshots come from the engine's telemetry actor over a watch channel, so a slow reader
//! skips to the newest instead of queueing; the socket closes with 1001 at shutdown.

use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use actix_ws::{AggregatedMessage, CloseCode, CloseReason};
use amdahl_protocol::telemetry::TelemetryEvent;
use futures_util::StreamExt;

use super::error::ApiError;
use super::state::AppState;

/// A reader that accepts nothing for this long is dropped.
const STALL_LIMIT: Duration = Duration::from_secs(30);

pub async fn profile(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let snap = state.engine.snapshot().await?;
    Ok(HttpResponse::Ok().json(snap))
}

pub async fn telemetry_ws(
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, actix_web::Error> {
    if state.draining() {
        return Err(ApiError::Draining.into());
    }
    let mut rx = state
        .engine
        .subscribe_telemetry()
        .await
        .map_err(ApiError::from)?;
    let (res, mut session, stream) = actix_ws::handle(&req, body)?;
    let mut stream = stream.max_frame_size(64 << 10).aggregate_continuations();
    let mut shutdown = state.shutdown.clone();
    actix_web::rt::spawn(async move {
        let close = loop {
            let text = {
                let snap = rx.borrow_and_update().clone();
                serde_json::to_string(&TelemetryEvent::Snapshot(Box::new((*snap).clone())))
            };
            let Ok(text) = text else {
                break Some(CloseCode::Error);
            };
            match tokio::time::timeout(STALL_LIMIT, session.text(text)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => break None,
                Err(_) => break Some(CloseCode::Policy),
            }
            // Wait for the next snapshot, answering pings and noticing the client leave.
            let next = loop {
                tokio::select! {
                    r = rx.changed() => break if r.is_ok() { Ok(()) } else { Err(Some(CloseCode::Away)) },
                    r = shutdown.changed() => {
                        if r.is_err() || *shutdown.borrow() {
                            break Err(Some(CloseCode::Away));
                        }
                    }
                    msg = stream.next() => match msg {
                        None | Some(Err(_)) => break Err(None),
                        Some(Ok(AggregatedMessage::Close(_))) => break Err(Some(CloseCode::Normal)),
                        Some(Ok(AggregatedMessage::Ping(b))) => {
                            if session.pong(&b).await.is_err() {
                                break Err(None);
                            }
                        }
                        // The socket is read-only: anything else is ignored.
                        Some(Ok(_)) => {}
                    },
                }
            };
            if let Err(code) = next {
                break code;
            }
        };
        if let Some(code) = close {
            let _ = session
                .close(Some(CloseReason {
                    code,
                    description: None,
                }))
                .await;
        }
    });
    Ok(res)
}
