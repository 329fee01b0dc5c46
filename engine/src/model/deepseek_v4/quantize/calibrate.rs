//! Activation calibration for static input scales (ModelOpt NVFP4 `input_scale` = amax/(6·448),
//! FP8 `input_scale` = amax/448): run the dense model over a seeded sequence of random token
//! ids and record, per linear module, the largest |input| its forward saw. No dataset and no
//! network: the scales are only as representative as random tokens are (the CPU path runs W4A16
//! and never reads them; GPU W4A4 kernels do).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use crate::error::{EngineError, Result};
use crate::ops::linear::AmaxObserver;
use crate::profile::StageClock;
use crate::quant::Role;
use crate::rng::Rng;

use super::super::{DeepseekV4, LogitRows, SeqInput};

/// Largest input magnitude per module in `modules`. Modules no calibration token reached (an
/// expert the router never picked) get the largest amax seen by modules of the same role.
pub fn input_amax(
    dir: &Path,
    modules: &BTreeSet<String>,
    tokens: usize,
    seed: u64,
) -> Result<BTreeMap<String, f32>> {
    if tokens == 0 {
        return Err(EngineError::InvalidInput(
            "calibration needs at least one token (static activation scales are required)".into(),
        ));
    }
    let mut model = DeepseekV4::load(dir)?;
    let mut observers: BTreeMap<String, Arc<AmaxObserver>> = BTreeMap::new();
    model.weights.for_each_linear(&mut |name, lin| {
        if modules.contains(name) {
            let o = observers.entry(name.to_string()).or_default().clone();
            lin.observer = Some(o);
        }
    });
    let mut rng = Rng::new(seed);
    let ids: Vec<u32> = (0..tokens)
        .map(|_| rng.below(model.cfg.vocab_size) as u32)
        .collect();
    let mut state = model.new_state();
    let mut batch = [SeqInput {
        tokens: &ids,
        state: &mut state,
        logits: LogitRows::None,
    }];
    model.forward(&mut batch, &mut StageClock::default())?;
    let mut amax: BTreeMap<String, f32> = observers
        .iter()
        .map(|(m, o)| (m.clone(), o.get()))
        .collect();
    let mut by_role: BTreeMap<Role, f32> = BTreeMap::new();
    for (m, &a) in &amax {
        let r = by_role.entry(Role::of(m)).or_default();
        *r = r.max(a);
    }
    for (m, a) in amax.iter_mut() {
        if *a == 0.0 {
            *a = by_role.get(&Role::of(m)).copied().unwrap_or(0.0);
        }
    }
    Ok(amax)
}
