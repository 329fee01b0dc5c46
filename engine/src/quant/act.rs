//! The reference's FP8 activations (model-spec §5.4): before an FP8 linear, each token's
//! activations are quantized in groups of 128 columns to E4M3 with a power-of-two scale,
//! `s = 2^ceil(log2(max(amax, 1e-4) / 448))`, `q = e4m3(x / s)`, and the GEMM sums
//! `Σ_kb (Σ_k q_x · q_w) · s_x · s_w` in f32. DeepSeek's inference code and transformers'
//! FP8 linears (DeepGEMM, Triton) both compute this; amdahl's default keeps the activations in
//! bf16 (more precise, and what every kernel but the FP8 warpgroup-MMA linear computes).
//!
//! `AMDAHL_FP8_ACT=1` turns the mode on: the CPU linear then quantizes its input this way for
//! FP8 weights, and the GPU runs FP8 linears of up to 64 tokens on `linear_wg` (sm_90), which
//! quantizes the same way; every other GPU kernel that multiplies FP8 weights reads
//! activations `act_quant_rows` rounded so (launch/linear_wg.rs `fp8_rows`). Opt-in: slower
//! than the default so far, and far from the bf16 twin on the tiny test models (docs/PERF.md).

use std::sync::atomic::{AtomicU8, Ordering};

use super::e4m3;

/// Columns per activation group.
pub const GROUP: usize = 128;

/// Forced on (1) or off (0), or unset (`u8::MAX`: the environment).
static MODE: AtomicU8 = AtomicU8::new(u8::MAX);

/// Whether FP8 linears quantize their activations (`AMDAHL_FP8_ACT=1`, or [`force_fp8_act`]).
pub fn fp8_act() -> bool {
    match MODE.load(Ordering::Relaxed) {
        0 => false,
        1 => true,
        _ => {
            static ENV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
            *ENV.get_or_init(|| std::env::var("AMDAHL_FP8_ACT").as_deref() == Ok("1"))
        }
    }
}

/// Forces the mode on or off (`None`: the environment again). Process-wide: tests that set it
/// hold [`MODE_LOCK`].
pub fn force_fp8_act(on: Option<bool>) {
    MODE.store(on.map_or(u8::MAX, u8::from), Ordering::Relaxed);
}

/// Serializes the tests that force the mode.
pub static MODE_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The power-of-two scale of a group whose largest magnitude is `amax`: the exponent of
/// `max(amax, 1e-4) / 448` (an f32 division, as the kernel's) rounded up.
pub fn group_scale(amax: f32) -> f32 {
    let b = (amax.max(1e-4) / 448.0).to_bits();
    let ex = (b >> 23) + u32::from(b & 0x7f_ffff != 0);
    f32::from_bits(ex << 23)
}

/// Quantizes `x` in place, group by group of [`GROUP`] columns (the last may be shorter), to
/// the values the FP8 GEMM multiplies: `e4m3(x / s) · s`.
pub fn quantize_groups(x: &mut [f32]) {
    for g in x.chunks_mut(GROUP) {
        let amax = g.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let s = group_scale(amax);
        for v in g {
            *v = e4m3::decode(e4m3::encode(*v / s)) * s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_are_the_next_power_of_two_above_amax_over_448() {
        assert_eq!(group_scale(448.0), 1.0);
        assert_eq!(group_scale(449.0), 2.0);
        assert_eq!(group_scale(224.0), 0.5);
        assert_eq!(group_scale(300.0), 1.0);
        // Tiny groups use the 1e-4 floor: 1e-4 / 448 ≈ 2.23e-7 → 2^-22.
        assert_eq!(group_scale(0.0), 2f32.powi(-22));
        for a in [1e-3f32, 0.37, 1.0, 5.5, 1000.0, 3.0e4] {
            let s = group_scale(a);
            assert!(a / s <= 448.0 && a / s > 224.0, "amax {a}: scale {s}");
        }
    }

    #[test]
    fn groups_quantize_to_e4m3_times_their_own_scale() {
        // Two groups of 128 and a tail of 5: the second 100 times larger than the first.
        let mut x: Vec<f32> = (0..261)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * if i >= 128 { 1.0 } else { 0.01 })
            .collect();
        let orig = x.clone();
        quantize_groups(&mut x);
        for (gi, (q, o)) in x.chunks(GROUP).zip(orig.chunks(GROUP)).enumerate() {
            let s = group_scale(o.iter().fold(0.0f32, |m, v| m.max(v.abs())));
            for (a, b) in q.iter().zip(o) {
                // Exactly a code times the scale, within e4m3's half step (2^-4 relative).
                let code = e4m3::encode(a / s);
                assert_eq!(e4m3::decode(code) * s, *a, "group {gi}");
                assert!(
                    (a - b).abs() <= b.abs() / 16.0 + s * 2f32.powi(-10),
                    "group {gi}: {b} → {a}"
                );
            }
        }
        // The group's largest magnitude keeps 3 mantissa bits: 50 → 48 or 52 at scale 1/8.
        assert!(x[128..256].iter().any(|v| v.abs() >= 48.0));
        assert_ne!(x, orig);
    }
}
