//! The telemetry subscription: one WebSocket to `/v1/ws/telemetry`, each frame decoded into the
//! shared [`Live`] signals; a closed socket reconnects after a second (the server restarting
//! shows as "reconnecting", then "live" again).

use std::time::Duration;

use amdahl_protocol::telemetry::{Snapshot, TelemetryEvent};
use leptos::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;
use web_sys::{CloseEvent, MessageEvent, WebSocket};

/// How many tok/s samples the sparkline keeps (~24 s at 5 Hz).
const HISTORY: usize = 120;

/// What the panels read.
#[derive(Clone, Copy)]
pub struct Live {
    pub snap: RwSignal<Option<Snapshot>>,
    /// tok/s of recent snapshots, oldest first.
    pub tps: RwSignal<Vec<f64>>,
    pub status: RwSignal<&'static str>,
    pub received: RwSignal<u64>,
}

impl Live {
    pub fn new() -> Self {
        Self {
            snap: RwSignal::new(None),
            tps: RwSignal::new(Vec::new()),
            status: RwSignal::new("connecting"),
            received: RwSignal::new(0),
        }
    }
}

/// `ws://` or `wss://` URL of a path on the server that served this page.
pub fn ws_url(path: &str) -> String {
    let loc = window().location();
    let scheme = if loc.protocol().unwrap_or_default() == "https:" {
        "wss"
    } else {
        "ws"
    };
    format!("{scheme}://{}{path}", loc.host().unwrap_or_default())
}

/// Opens the telemetry socket. The handlers live as long as the page (each reconnect leaks two
/// small closures, which is the price of not keeping the socket in a signal).
pub fn connect(live: Live) {
    let Ok(ws) = WebSocket::new(&ws_url("/v1/ws/telemetry")) else {
        retry(live);
        return;
    };
    let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |e: MessageEvent| {
        let Some(text) = e.data().as_string() else {
            return;
        };
        let Ok(TelemetryEvent::Snapshot(s)) = serde_json::from_str::<TelemetryEvent>(&text) else {
            return;
        };
        live.status.set("live");
        live.tps.update(|h| {
            h.push(s.tokens_per_second);
            if h.len() > HISTORY {
                h.remove(0);
            }
        });
        live.received.update(|n| *n += 1);
        live.snap.set(Some(*s));
    });
    ws.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    on_message.forget();
    let on_close = Closure::<dyn FnMut(CloseEvent)>::new(move |_: CloseEvent| {
        live.status.set("reconnecting");
        retry(live);
    });
    ws.set_onclose(Some(on_close.as_ref().unchecked_ref()));
    on_close.forget();
}

fn retry(live: Live) {
    set_timeout(move || connect(live), Duration::from_secs(1));
}
