//! Token sampling from one row of logits: greedy (temperature 0) or temperature + top-k + top-p
//! with a per-request seeded [`Rng`], so the same seed and prompt give the same tokens. Banned ids
//! (EOS while `min_tokens` is not reached) are removed before anything else. The draw consumes
//! exactly one random number per sampled token, whatever the filters keep.

use crate::rng::Rng;

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

/// How to pick a token from logits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplerParams {
    /// 0 = greedy.
    pub temperature: f32,
    /// 0 = no top-k filter.
    pub top_k: usize,
    /// 1 = no nucleus filter; in (0, 1].
    pub top_p: f32,
}

impl Default for SamplerParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
        }
    }
}

/// Picks one token. `banned` ids are never returned unless every id is banned.
pub fn sample(logits: &[f32], p: &SamplerParams, rng: &mut Rng, banned: &[u32]) -> u32 {
    let allowed = |i: usize| !banned.contains(&(i as u32));
    if p.temperature <= 0.0 || p.top_k == 1 {
        let mut best: Option<usize> = None;
        for (i, v) in logits.iter().enumerate() {
            if allowed(i) && best.is_none_or(|b| *v > logits[b]) {
                best = Some(i);
            }
        }
        // Keep the stream position identical to the sampled path so switching temperature on
        // a seeded request does not shift later draws.
        let _ = rng.next_f64();
        return best.map_or_else(|| argmax(logits), |b| b as u32);
    }
    let mut cand: Vec<(usize, f32)> = logits
        .iter()
        .enumerate()
        .filter(|(i, v)| allowed(*i) && v.is_finite())
        .map(|(i, v)| (i, *v / p.temperature))
        .collect();
    if cand.is_empty() {
        let _ = rng.next_f64();
        return argmax(logits);
    }
    // Descending by logit, ties to the lower id, so the order (and thus the draw) is stable.
    cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    if p.top_k > 0 && p.top_k < cand.len() {
        cand.truncate(p.top_k);
    }
    let max = cand[0].1;
    let mut probs: Vec<f64> = cand.iter().map(|c| f64::from(c.1 - max).exp()).collect();
    let sum: f64 = probs.iter().sum();
    probs.iter_mut().for_each(|x| *x /= sum);
    if p.top_p < 1.0 {
        let mut acc = 0.0;
        let mut keep = probs.len();
        for (i, q) in probs.iter().enumerate() {
            acc += q;
            if acc >= f64::from(p.top_p) {
                keep = i + 1;
                break;
            }
        }
        probs.truncate(keep);
        let s: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|x| *x /= s);
    }
    let u = rng.next_f64();
    let mut acc = 0.0;
    for (i, q) in probs.iter().enumerate() {
        acc += q;
        if u < acc {
            return cand[i].0 as u32;
        }
    }
    cand[probs.len() - 1].0 as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_prefers_first_of_ties() {
        assert_eq!(super::argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
    }

    fn logits() -> Vec<f32> {
        vec![0.5, 2.0, 1.0, -1.0, 1.9, 0.0]
    }

    #[test]
    fn greedy_and_degenerate_filters_pick_the_argmax() {
        let mut rng = Rng::new(1);
        let l = logits();
        let greedy = SamplerParams {
            temperature: 0.0,
            ..Default::default()
        };
        assert_eq!(sample(&l, &greedy, &mut rng, &[]), 1);
        assert_eq!(sample(&l, &greedy, &mut rng, &[1]), 4);
        let k1 = SamplerParams {
            top_k: 1,
            ..Default::default()
        };
        let p0 = SamplerParams {
            top_p: 1e-6,
            ..Default::default()
        };
        for _ in 0..50 {
            assert_eq!(sample(&l, &k1, &mut rng, &[]), 1);
            assert_eq!(sample(&l, &p0, &mut rng, &[]), 1);
        }
    }

    #[test]
    fn same_seed_same_tokens_and_banned_never_drawn() {
        let l = logits();
        let p = SamplerParams::default();
        let draw = |seed| {
            let mut rng = Rng::new(seed);
            (0..64)
                .map(|_| sample(&l, &p, &mut rng, &[4]))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        assert!(draw(9).iter().all(|&t| t != 4));
    }

    #[test]
    fn frequencies_follow_the_filtered_softmax() {
        let l = logits();
        let p = SamplerParams {
            temperature: 0.7,
            top_k: 3,
            top_p: 1.0,
        };
        // Expected: softmax over the 3 largest logits (ids 1, 4, 2) at temperature 0.7.
        let top = [(1usize, 2.0f64), (4, 1.9), (2, 1.0)];
        let z: f64 = top.iter().map(|(_, v)| (v / 0.7).exp()).sum();
        let mut rng = Rng::new(3);
        let n = 40_000;
        let mut counts = [0usize; 6];
        for _ in 0..n {
            counts[sample(&l, &p, &mut rng, &[]) as usize] += 1;
        }
        for (id, v) in top {
            let want = (v / 0.7).exp() / z;
            let got = counts[id] as f64 / n as f64;
            assert!((want - got).abs() < 0.01, "id {id}: want {want}, got {got}");
        }
        assert_eq!(counts[0] + counts[3] + counts[5], 0);
        // top_p keeps the smallest prefix whose mass reaches p: ids 1 and 4 here.
        let q = SamplerParams {
            temperature: 0.7,
            top_k: 0,
            top_p: 0.8,
        };
        let mut seen = [false; 6];
        for _ in 0..2000 {
            seen[sample(&l, &q, &mut rng, &[]) as usize] = true;
        }
        assert_eq!(seen, [false, true, false, false, true, false]);
    }
}
