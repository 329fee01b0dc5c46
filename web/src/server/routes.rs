//! The small endpoints: `/v1/models`, `/tokenize`, `/detokenize` (vLLM shapes, used by bench
//! clients to align prompts), `/health` (200 when serving, 503 while draining or when the engine
//! is gone), `/metrics` (Prometheus text), and the OpenAI-shaped 404 for unknown paths.

use actix_web::{HttpRequest, HttpResponse, web};
use amdahl_protocol::openai::{
    DetokenizeRequest, DetokenizeResponse, ModelCard, ModelList, TokenizeRequest, TokenizeResponse,
};

use super::error::ApiError;
use super::openai::rejected;
use super::state::AppState;
use super::validate::{PromptSource, check_model, parse_json, read_body, tokenize};

pub async fn models(state: web::Data<AppState>) -> HttpResponse {
    let info = state.info();
    HttpResponse::Ok().json(ModelList {
        object: "list".into(),
        data: vec![ModelCard {
            id: info.name.clone(),
            object: "model".into(),
            created: state.started,
            owned_by: "amdahl".into(),
            root: info.name.clone(),
            parent: None,
            max_model_len: info.max_model_len as u64,
        }],
    })
}

pub async fn tokenize_route(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    async {
        let body = read_body(payload, state.limits.max_body_bytes).await?;
        let r: TokenizeRequest = parse_json(&req, &body)?;
        check_model(&state, r.model.as_deref())?;
        let source = match (r.prompt, r.messages) {
            (Some(p), None) => PromptSource::Text(p),
            (None, Some(m)) => PromptSource::Chat(m),
            _ => {
                return Err(ApiError::invalid(
                    "prompt",
                    "give exactly one of `prompt` or `messages`",
                ));
            }
        };
        let tokens = tokenize(&state, source, r.add_generation_prompt.unwrap_or(true)).await?;
        Ok(HttpResponse::Ok().json(TokenizeResponse {
            count: tokens.len() as u64,
            max_model_len: state.info().max_model_len as u64,
            tokens,
        }))
    }
    .await
    .map_err(|e| rejected(&state, e))
}

pub async fn detokenize_route(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    async {
        let body = read_body(payload, state.limits.max_body_bytes).await?;
        let r: DetokenizeRequest = parse_json(&req, &body)?;
        check_model(&state, r.model.as_deref())?;
        let vocab = state.info().vocab_size;
        let mut ids = Vec::with_capacity(r.tokens.len());
        for t in r.tokens {
            if t < 0 || t as usize >= vocab {
                return Err(ApiError::invalid(
                    "tokens",
                    format!("token id {t} is outside the vocabulary (size {vocab})"),
                ));
            }
            ids.push(t as u32);
        }
        let tok = state.tokenizer().clone();
        let prompt = web::block(move || tok.decode(&ids, false))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))??;
        Ok(HttpResponse::Ok().json(DetokenizeResponse { prompt }))
    }
    .await
    .map_err(|e| rejected(&state, e))
}

pub async fn health(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    if state.draining() {
        return Err(ApiError::Draining);
    }
    let st = state.engine.stats().await?;
    if st.dead {
        return Err(ApiError::EngineDead("the device worker failed".into()));
    }
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "status": "ok", "running": st.running, "waiting": st.waiting,
    })))
}

pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    // Asking for stats reaps requests whose clients left while the engine was idle, so the
    // gauges scraped next are current.
    let _ = state.engine.stats().await;
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(state.metrics().encode())
}

pub async fn not_found(req: HttpRequest) -> HttpResponse {
    use actix_web::ResponseError;
    ApiError::NoRoute(format!("{} {}", req.method(), req.path())).error_response()
}
