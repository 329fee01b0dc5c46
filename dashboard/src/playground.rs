//! The playground: sends a prompt as `request.create` over a fresh `amdahl.v1` WebSocket and
//! appends each `request.delta` to the answer until `request.done` (or `error`).

use amdahl_protocol::openai::Prompt;
use amdahl_protocol::ws::{ClientEvent, CreateRequest, ServerEvent, WsParams};
use leptos::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;
use web_sys::{CloseEvent, Event, MessageEvent, WebSocket};

use crate::format::ms;
use crate::telemetry::ws_url;

#[component]
pub fn Playground() -> impl IntoView {
    let prompt = RwSignal::new("17*23=".to_string());
    let max_tokens = RwSignal::new("16".to_string());
    let output = RwSignal::new(String::new());
    let status = RwSignal::new("idle".to_string());
    let busy = RwSignal::new(false);
    let sent = StoredValue::new(0u64);
    let send = move |_| {
        if busy.get_untracked() {
            return;
        }
        let n = max_tokens
            .get_untracked()
            .trim()
            .parse::<i64>()
            .unwrap_or(16);
        sent.update_value(|k| *k += 1);
        let req = ClientEvent::Create(Box::new(CreateRequest {
            id: format!("play-{}", sent.get_value()),
            prompt: Some(Prompt::Text(prompt.get_untracked())),
            params: WsParams {
                max_tokens: Some(n),
                temperature: Some(0.0),
                ..Default::default()
            },
            ..Default::default()
        }));
        let Ok(text) = serde_json::to_string(&req) else {
            return;
        };
        let Ok(ws) = WebSocket::new_with_str(&ws_url("/v1/ws"), "amdahl.v1") else {
            status.set("cannot open /v1/ws".into());
            return;
        };
        busy.set(true);
        output.set(String::new());
        status.set("connecting…".into());
        let w = ws.clone();
        let on_open = Closure::<dyn FnMut(Event)>::new(move |_: Event| {
            status.set("streaming…".into());
            let _ = w.send_with_str(&text);
        });
        ws.set_onopen(Some(on_open.as_ref().unchecked_ref()));
        on_open.forget();
        let w = ws.clone();
        let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |e: MessageEvent| {
            let Some(t) = e.data().as_string() else {
                return;
            };
            match serde_json::from_str::<ServerEvent>(&t) {
                Ok(ServerEvent::Delta { text, .. }) => output.update(|o| o.push_str(&text)),
                Ok(ServerEvent::Done {
                    finish_reason,
                    usage,
                    timings,
                    ..
                }) => {
                    status.set(format!(
                        "done: {finish_reason}, {} tokens, TTFT {}, {} total",
                        usage.completion_tokens,
                        ms(timings.ttft_ms),
                        ms(timings.e2e_ms)
                    ));
                    busy.set(false);
                    let _ = w.close();
                }
                Ok(ServerEvent::Error { error, .. }) => {
                    status.set(format!("error: {}", error.message));
                    busy.set(false);
                    let _ = w.close();
                }
                _ => {}
            }
        });
        ws.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        on_message.forget();
        let on_close = Closure::<dyn FnMut(CloseEvent)>::new(move |_: CloseEvent| {
            if busy.get_untracked() {
                status.set("connection closed".into());
                busy.set(false);
            }
        });
        ws.set_onclose(Some(on_close.as_ref().unchecked_ref()));
        on_close.forget();
    };
    view! {
        <div class="play">
            <textarea id="playground-prompt" rows="2"
                prop:value=move || prompt.get()
                on:input=move |ev| prompt.set(event_target_value(&ev))></textarea>
            <label>"max tokens "
                <input id="playground-max-tokens" type="number" min="1"
                    prop:value=move || max_tokens.get()
                    on:input=move |ev| max_tokens.set(event_target_value(&ev))/></label>
            <button id="playground-send" on:click=send prop:disabled=move || busy.get()>"Send"</button>
        </div>
        <pre id="playground-output">{move || output.get()}</pre>
        <p id="playground-status" class="muted">{move || status.get()}</p>
    }
}
