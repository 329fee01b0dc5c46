//! amdahl's front end as a library: the CLI commands, the HTTP/WebSocket server, the benchmark
//! client and the embedded default model. The `amdahl` binary is a thin `main` over [`cli`];
//! integration tests start servers through [`server`].

pub mod bench;
pub mod cli;
pub mod default_model;
pub mod server;
