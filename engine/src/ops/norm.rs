//! RMS normalization. Weighted: `w · x / sqrt(mean(x²) + eps)`; unweighted (q heads, mHC input):
//! the same without `w`. Computed in f32 as transformers' DeepSeek-V4 does.

/// `1 / sqrt(mean(x²) + eps)`.
#[inline]
pub fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let ss: f32 = crate::tensor::dot(x, x);
    1.0 / (ss / x.len() as f32 + eps).sqrt()
}

/// In-place weighted RMSNorm of one vector.
pub fn rms_norm(x: &mut [f32], weight: &[f32], eps: f32) {
    debug_assert_eq!(x.len(), weight.len());
    let r = rms_scale(x, eps);
    for (v, w) in x.iter_mut().zip(weight) {
        *v = *w * (*v * r);
    }
}

/// In-place unweighted RMSNorm of one vector.
pub fn rms_norm_unweighted(x: &mut [f32], eps: f32) {
    let r = rms_scale(x, eps);
    for v in x.iter_mut() {
        *v *= r;
    }
}

/// Weighted RMSNorm of every row of `x` (width = `weight.len()`).
pub fn rms_norm_rows(x: &mut [f32], weight: &[f32], eps: f32) {
    for row in x.chunks_exact_mut(weight.len()) {
        rms_norm(row, weight, eps);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalized_rows_have_unit_rms() {
        let mut x = vec![3.0, -4.0, 12.0, 0.5];
        rms_norm_unweighted(&mut x, 0.0);
        let ms: f32 = x.iter().map(|v| v * v).sum::<f32>() / 4.0;
        assert!((ms - 1.0).abs() < 1e-6);
        let mut y = vec![1.0, 1.0];
        rms_norm(&mut y, &[2.0, -1.0], 0.0);
        assert_eq!(y, vec![2.0, -1.0]);
    }
}
