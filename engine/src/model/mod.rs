//! Model definitions. Each model is a folder owning its config mapping, weight names and layers;
//! shared blocks come from `ops`.

pub mod deepseek_v4;
