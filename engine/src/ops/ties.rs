//! Decision margins of a forward pass's discrete choices (the router's top-k experts, the
//! indexer's top-k entries), for tests that compare two implementations of the same model. A
//! choice whose k-th and (k+1)-th keys nearly tie can flip under rounding differences, and one
//! flipped choice moves that position's logits by far more than the rounding itself. Recording
//! is off unless the calling thread runs inside [`recording`]; the ops record from the thread
//! that called the forward pass.

use std::cell::RefCell;

thread_local! {
    static LOG: RefCell<Option<Vec<f32>>> = const { RefCell::new(None) };
}

/// Whether this thread is recording margins.
pub fn enabled() -> bool {
    LOG.with(|l| l.borrow().is_some())
}

/// Notes a choice made for row `row` of the forward call with relative margin `margin`; each
/// row keeps its smallest margin over all layers.
pub fn record(row: usize, margin: f32) {
    LOG.with(|l| {
        if let Some(v) = l.borrow_mut().as_mut() {
            if v.len() <= row {
                v.resize(row + 1, f32::INFINITY);
            }
            v[row] = v[row].min(margin);
        }
    });
}

/// The relative margin of a top-k choice from its keys sorted best first: the gap between the
/// last kept and the first dropped key over the largest key's magnitude (infinite when nothing
/// is dropped).
pub fn margin(sorted: &[f32], k: usize) -> f32 {
    if k == 0 || sorted.len() <= k {
        return f32::INFINITY;
    }
    (sorted[k - 1] - sorted[k]) / sorted[0].abs().max(f32::MIN_POSITIVE)
}

/// Runs `f` with recording on; returns its result and each row's smallest margin (rows with
/// no choice: infinity).
pub fn recording<R>(f: impl FnOnce() -> R) -> (R, Vec<f32>) {
    LOG.with(|l| *l.borrow_mut() = Some(Vec::new()));
    let r = f();
    let v = LOG.with(|l| l.borrow_mut().take()).unwrap_or_default();
    (r, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_the_smallest_margin_per_row_only_while_recording() {
        record(0, 0.5);
        assert!(!enabled());
        let ((), m) = recording(|| {
            assert!(enabled());
            record(2, 0.5);
            record(2, 0.25);
            record(0, 1.0);
        });
        assert_eq!(m, vec![1.0, f32::INFINITY, 0.25]);
        assert!(!enabled());
        assert_eq!(margin(&[4.0, 2.0, 1.0], 2), 0.25);
        assert_eq!(margin(&[4.0, 2.0], 2), f32::INFINITY);
    }
}
