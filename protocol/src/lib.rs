//! Wire types shared by the server, its clients and the dashboard. Pure serde; compiles to wasm.
