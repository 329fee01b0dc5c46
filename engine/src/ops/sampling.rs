//! Token sampling from logits: greedy now; temperature / top-k / top-p with seeded RNG arrive
//! with serving.

/// Index of the largest logit (ties to the lower index, like torch.argmax).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in logits.iter().enumerate() {
        if *v > logits[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    #[test]
    fn argmax_prefers_first_of_ties() {
        assert_eq!(super::argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
    }
}
