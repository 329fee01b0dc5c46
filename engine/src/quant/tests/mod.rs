//! Tests of the quantized formats: bit-exact encodings, error bounds, configs, loading.

mod bounds;
mod config;
mod vectors;
