//! The `amdahl` binary: a thin CLI over the engine and the HTTP server.
fn main() {}
