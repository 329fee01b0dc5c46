//! Quantized weight formats (model-spec §5): element and scale encodings (FP4 E2M1, FP8 E4M3FN,
//! E8M0), the packed weights built from them (DeepSeek FP8 block-scaled and ModelOpt FP8
//! per-tensor, ModelOpt NVFP4, MXFP4 / DeepSeek FP4), quantization configs and their per-module
//! resolution, and loading a linear module in whichever format the checkpoint stores. Every
//! format here has a CPU reference dequantizer; quantizers use the scale rounding the spec gives.

pub mod act;
pub mod config;
pub mod e2m1;
pub mod e4m3;
pub mod e8m0;
pub mod fp4_tiles;
pub mod fp8;
pub mod load;
pub mod mxfp4;
pub mod nvfp4;
pub mod resolve;
pub mod store;
pub mod weight;

pub use config::{Algo, Base, ModelOpt, QuantConfig};
pub use fp8::{BlockScales, Fp8Block, Fp8Tensor};
pub use mxfp4::Mxfp4;
pub use nvfp4::Nvfp4;
pub use resolve::{Expect, Role};
pub use weight::{Format, Kind, QuantWeight};

#[cfg(test)]
mod tests;

/// PTX `prmt.b32` in its default mode, as the kernels' decodes use it (CUDA's `__byte_perm` is
/// the same for selectors without bit 3): selector nibble n picks byte (n & 7) of {b, a}; with
/// bit 3 set, the picked byte's sign replicated over the byte. The CPU mirrors of the kernels'
/// bit-level decodes (fp4_tiles.rs, e4m3.rs) run on it.
#[cfg(test)]
pub(crate) fn prmt(a: u32, b: u32, sel: u32) -> u32 {
    let src = (a as u64) | ((b as u64) << 32);
    (0..4).fold(0u32, |acc, i| {
        let s = (sel >> (4 * i)) & 0xf;
        let byte = ((src >> (8 * (s & 7))) & 0xff) as u32;
        let v = if s & 8 == 0 {
            byte
        } else if byte & 0x80 != 0 {
            0xff
        } else {
            0
        };
        acc | (v << (8 * i))
    })
}
