//! The `amdahl.v1` WebSocket protocol (docs/serving.md §2.2): JSON text frames tagged by `type`.
//! One socket multiplexes many requests by the client's `id`; every `request.create` ends in
//! exactly one terminal event (`error` before admission, or `request.done`).

use serde::{Deserialize, Serialize};

use crate::openai::{ChatMessage, ErrorDetail, Prompt, StopSpec, Usage};

/// The subprotocol name clients ask for in `Sec-WebSocket-Protocol`.
pub const SUBPROTOCOL: &str = "amdahl.v1";

/// Sampling parameters of a WebSocket request (same meaning as the HTTP fields).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WsParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_tokens: Option<i64>,
}

/// Stream options of a WebSocket request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WsStreamOptions {
    #[serde(default)]
    pub include_token_ids: bool,
    #[serde(default)]
    pub coalesce_ms: u64,
}

/// `request.create`: exactly one of `messages`, `prompt`, `input_ids`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CreateRequest {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<ChatMessage>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<Prompt>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_ids: Option<Vec<i64>>,
    #[serde(default)]
    pub params: WsParams,
    #[serde(default)]
    pub stream: WsStreamOptions,
}

/// Client → server events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ClientEvent {
    #[serde(rename = "request.create")]
    Create(Box<CreateRequest>),
    #[serde(rename = "request.cancel")]
    Cancel { id: String },
    #[serde(rename = "ping")]
    Ping {
        #[serde(default)]
        nonce: Option<String>,
    },
}

/// Limits announced in `session.created`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionLimits {
    pub max_inflight: u64,
    pub max_message_bytes: u64,
}

/// Server-side timings of one finished request, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    pub queue_ms: f64,
    pub prefill_ms: f64,
    pub ttft_ms: f64,
    pub decode_ms: f64,
    pub e2e_ms: f64,
    pub tpot_ms: f64,
}

/// Server → client events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ServerEvent {
    #[serde(rename = "session.created")]
    SessionCreated {
        session_id: String,
        protocol: String,
        model: String,
        max_model_len: u64,
        limits: SessionLimits,
    },
    #[serde(rename = "request.created")]
    RequestCreated {
        id: String,
        request_id: String,
        prompt_tokens: u64,
        queue_position: u64,
    },
    #[serde(rename = "request.delta")]
    Delta {
        id: String,
        seq: u64,
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token_ids: Option<Vec<u32>>,
    },
    #[serde(rename = "request.done")]
    Done {
        id: String,
        finish_reason: String,
        stop_reason: Option<serde_json::Value>,
        usage: Usage,
        timings: Timings,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<ErrorDetail>,
    },
    #[serde(rename = "error")]
    Error {
        #[serde(default)]
        id: Option<String>,
        error: WsError,
    },
    #[serde(rename = "pong")]
    Pong {
        #[serde(default)]
        nonce: Option<String>,
    },
}

/// The error object of a WebSocket `error` event: the HTTP error plus status and retry hint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WsError {
    #[serde(rename = "type")]
    pub kind: String,
    pub code: String,
    pub param: Option<String>,
    pub message: String,
    pub status: u16,
    pub retry_after_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_events_parse_from_the_documented_shapes() {
        let e: ClientEvent = serde_json::from_str(
            r#"{"type":"request.create","id":"c1","messages":[{"role":"user","content":"hi"}],
                "params":{"max_tokens":4,"seed":7},"stream":{"include_token_ids":true}}"#,
        )
        .unwrap();
        let ClientEvent::Create(c) = e else {
            panic!("not a create")
        };
        assert_eq!(c.id, "c1");
        assert_eq!(c.params.max_tokens, Some(4));
        assert!(c.stream.include_token_ids);
        let e: ClientEvent =
            serde_json::from_str(r#"{"type":"request.cancel","id":"c1"}"#).unwrap();
        assert_eq!(e, ClientEvent::Cancel { id: "c1".into() });
        assert!(serde_json::from_str::<ClientEvent>(r#"{"type":"nope"}"#).is_err());
    }

    #[test]
    fn server_events_carry_their_type_tag() {
        let v = serde_json::to_value(ServerEvent::Delta {
            id: "a".into(),
            seq: 3,
            text: "x".into(),
            token_ids: None,
        })
        .unwrap();
        assert_eq!(v["type"], "request.delta");
        assert_eq!(v["seq"], 3);
        assert!(v.get("token_ids").is_none());
    }
}
