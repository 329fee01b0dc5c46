//! amdahl's live dashboard: a Leptos client-side app compiled to wasm and served by `amdahl
//! serve` at `/`. It subscribes to `/v1/ws/telemetry` (snapshots at ~5 Hz, amdahl-protocol
//! `telemetry`) and draws, with plain SVG, where each device's step time goes per stage, the
//! achieved bandwidth against the measured peak, kernel blocks against SMs, the serving numbers
//! (tok/s, TTFT and inter-token latency percentiles, queue, cache, batch size) and the
//! bottleneck report in words; a playground streams a prompt's answer over `/v1/ws`
//! (`amdahl.v1`). Build: tools/build_dashboard.sh.

mod app;
mod charts;
mod format;
mod panels;
mod playground;
mod telemetry;

use wasm_bindgen::prelude::wasm_bindgen;

/// Runs once the wasm module is instantiated.
#[wasm_bindgen(start)]
pub fn start() {
    leptos::mount::mount_to_body(app::App);
}
