//! Request middleware: bearer-token auth (every path but `/health`, `/metrics` and the dashboard's
//! static page and assets, including the WebSocket upgrades) and HTTP metrics per route pattern
//! and status.

use std::time::Instant;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{Error, ResponseError, web};

use super::error::ApiError;
use super::state::AppState;

const OPEN_PATHS: [&str; 2] = ["/health", "/metrics"];

pub async fn auth(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    let state = req.app_data::<web::Data<AppState>>().cloned();
    if let Some(key) = state.as_ref().and_then(|s| s.api_key.clone())
        && !OPEN_PATHS.contains(&req.path())
        && req.path() != "/"
        && !req.path().starts_with("/dashboard/")
    {
        let ok = req
            .headers()
            .get(actix_web::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| constant_time_eq(given.trim().as_bytes(), key.as_bytes()));
        if !ok {
            if let Some(s) = &state {
                s.metrics()
                    .requests_rejected_total
                    .with_label_values(&["unauthorized"])
                    .inc();
            }
            let resp = ApiError::Unauthorized.error_response();
            return Ok(req.into_response(resp));
        }
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}

/// Compares without an early exit, so response time does not leak how much of a key matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub async fn http_metrics(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    let t0 = Instant::now();
    let state = req.app_data::<web::Data<AppState>>().cloned();
    let res = next.call(req).await?.map_into_boxed_body();
    if let Some(s) = state {
        let handler = res
            .request()
            .match_pattern()
            .unwrap_or_else(|| "unmatched".into());
        let m = s.metrics();
        m.http_requests_total
            .with_label_values(&[&handler, res.status().as_str()])
            .inc();
        m.http_request_duration_seconds
            .with_label_values(&[&handler])
            .observe(t0.elapsed().as_secs_f64());
    }
    Ok(res)
}
