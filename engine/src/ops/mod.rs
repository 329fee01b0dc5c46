//! Shared model blocks, one family per file or folder. Each op here is the CPU reference; the
//! CUDA path of the same family lives beside it in the device module and is tested against it.

pub mod attention;
pub mod linear;
pub mod mhc;
pub mod moe;
pub mod norm;
pub mod rope;
pub mod sampling;
pub mod ties;
