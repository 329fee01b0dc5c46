//! A minimal row-major f32 matrix for the CPU reference path. Activations are f32 on the CPU;
//! weights keep their stored format (see `ops::linear`).

/// Row-major `rows × cols` f32 matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Mat {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f32>,
}

impl Mat {
    pub fn zeros(rows: usize, cols: usize) -> Self {
        Self {
            rows,
            cols,
            data: vec![0.0; rows * cols],
        }
    }

    /// Wraps `data`; its length must be `rows * cols`.
    pub fn from_vec(rows: usize, cols: usize, data: Vec<f32>) -> Self {
        debug_assert_eq!(data.len(), rows * cols);
        Self { rows, cols, data }
    }

    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    pub fn row_mut(&mut self, r: usize) -> &mut [f32] {
        &mut self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// Copies the given rows into a new matrix.
    pub fn gather_rows(&self, rows: &[usize]) -> Mat {
        let mut out = Mat::zeros(rows.len(), self.cols);
        for (i, &r) in rows.iter().enumerate() {
            out.row_mut(i).copy_from_slice(self.row(r));
        }
        out
    }

    /// Rows `start..end` as a new matrix.
    pub fn slice_rows(&self, start: usize, end: usize) -> Mat {
        Mat::from_vec(
            end - start,
            self.cols,
            self.data[start * self.cols..end * self.cols].to_vec(),
        )
    }

    /// Stacks matrices with equal column counts.
    pub fn vstack(parts: &[Mat]) -> Mat {
        let cols = parts.first().map_or(0, |m| m.cols);
        let rows = parts.iter().map(|m| m.rows).sum();
        let mut data = Vec::with_capacity(rows * cols);
        for p in parts {
            debug_assert_eq!(p.cols, cols);
            data.extend_from_slice(&p.data);
        }
        Mat { rows, cols, data }
    }
}

/// Dot product with several accumulators so the compiler vectorizes it.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0.0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        let (x, y) = (&a[c * 8..c * 8 + 8], &b[c * 8..c * 8 + 8]);
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = 0.0;
    for i in chunks * 8..a.len() {
        s += a[i] * b[i];
    }
    let pair = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    s + (pair[0] + pair[2]) + (pair[1] + pair[3])
}

/// `y += a * x`.
#[inline]
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    debug_assert_eq!(x.len(), y.len());
    for (y, x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_naive_sum() {
        let a: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..37).map(|i| (i as f32 * 0.11).cos()).collect();
        let naive: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
        assert!((dot(&a, &b) as f64 - naive).abs() < 1e-5);
    }

    #[test]
    fn row_helpers_round_trip() {
        let m = Mat::from_vec(3, 2, vec![1., 2., 3., 4., 5., 6.]);
        assert_eq!(m.gather_rows(&[2, 0]).data, vec![5., 6., 1., 2.]);
        assert_eq!(m.slice_rows(1, 3).data, vec![3., 4., 5., 6.]);
        assert_eq!(
            Mat::vstack(&[m.slice_rows(0, 1), m.slice_rows(2, 3)]).data,
            vec![1., 2., 5., 6.]
        );
    }
}
