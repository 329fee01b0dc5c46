//! Wire types shared by the server, its clients and the dashboard. Pure serde; compiles to wasm.
//! `openai` holds the OpenAI-compatible HTTP shapes (requests, responses, SSE chunks, errors),
//! `ws` the `amdahl.v1` WebSocket events (docs/serving.md §2.2), `telemetry` the snapshots of
//! `/v1/ws/telemetry` and `/v1/profile`.

pub mod openai;
pub mod telemetry;
pub mod ws;
