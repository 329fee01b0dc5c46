//! Attention of one query head over its candidate rows (model-spec §3.3 "Sparse attention with
//! sink"): K = V = the shared row; `o = Σ_s e^{z_s−M} kv_s / (Σ_s e^{z_s−M} + e^{sink−M})` with
//! `z_s = scale · q·kv_s`. The sink only enlarges the denominator. No rows ⇒ zero output.

use crate::tensor::{axpy, dot};

/// Writes the attention output of `q` over `rows` into `out` (same width as `q`).
pub fn attend(q: &[f32], rows: &[&[f32]], sink: f32, scale: f32, out: &mut [f32]) {
    out.iter_mut().for_each(|o| *o = 0.0);
    if rows.is_empty() {
        return;
    }
    let z: Vec<f32> = rows.iter().map(|r| scale * dot(q, r)).collect();
    let m = z.iter().cloned().fold(sink, f32::max);
    let mut den = (sink - m).exp();
    for (r, zi) in rows.iter().zip(&z) {
        let e = (zi - m).exp();
        den += e;
        axpy(out, e, r);
    }
    let inv = 1.0 / den;
    out.iter_mut().for_each(|o| *o *= inv);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sink_shrinks_the_weights_and_minus_infinity_sink_is_plain_softmax() {
        let q = [1.0, 0.0];
        let r0 = [2.0, 1.0];
        let r1 = [0.0, 3.0];
        let rows: Vec<&[f32]> = vec![&r0, &r1];
        let mut plain = [0.0; 2];
        attend(&q, &rows, f32::NEG_INFINITY, 1.0, &mut plain);
        let (e0, e1) = (2.0f32.exp(), 0.0f32.exp());
        let expect = [(e0 * 2.0) / (e0 + e1), (e0 * 1.0 + e1 * 3.0) / (e0 + e1)];
        for (a, b) in plain.iter().zip(expect) {
            assert!((a - b).abs() < 1e-6);
        }
        let mut sunk = [0.0; 2];
        attend(&q, &rows, 1.0, 1.0, &mut sunk);
        let den = e0 + e1 + 1.0f32.exp();
        assert!((sunk[0] - e0 * 2.0 / den).abs() < 1e-6);
        let mut none = [9.0; 2];
        attend(&q, &[], 0.0, 1.0, &mut none);
        assert_eq!(none, [0.0, 0.0]);
    }
}
