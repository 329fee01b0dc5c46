//! Kernel launch facts per stage: how many blocks each launch put on a device with how many SMs.
//! A GPU backend calls [`Occupancy::launch`] from its launch configurations as it enqueues a
//! step's kernels (no device query, no synchronization); the CPU backend has no launches and
//! reports none. Merging steps gives the window's view: launches, blocks per launch (mean, min,
//! max) and how many launches left SMs idle (fewer blocks than SMs).

use super::Stage;

/// One stage's launches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageLaunches {
    pub launches: u64,
    pub blocks: u64,
    pub blocks_min: u64,
    pub blocks_max: u64,
    /// Launches with fewer blocks than the device has SMs.
    pub under_filled: u64,
}

/// Launch facts of one step (or of many, merged) on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occupancy {
    /// The device's streaming multiprocessors.
    pub sms: u32,
    stages: [StageLaunches; 8],
}

impl Occupancy {
    pub fn new(sms: u32) -> Self {
        Self {
            sms,
            stages: [StageLaunches::default(); 8],
        }
    }

    /// Records one kernel launch of `blocks` blocks (the grid's x·y·z) charged to `stage`.
    pub fn launch(&mut self, stage: Stage, blocks: u64) {
        let s = &mut self.stages[stage as usize];
        s.blocks_min = if s.launches == 0 {
            blocks
        } else {
            s.blocks_min.min(blocks)
        };
        s.blocks_max = s.blocks_max.max(blocks);
        s.launches += 1;
        s.blocks += blocks;
        if blocks < u64::from(self.sms) {
            s.under_filled += 1;
        }
    }

    pub fn stage(&self, stage: Stage) -> StageLaunches {
        self.stages[stage as usize]
    }

    /// Adds another step's launches (same device).
    pub fn merge(&mut self, other: &Occupancy) {
        self.sms = self.sms.max(other.sms);
        for (a, b) in self.stages.iter_mut().zip(&other.stages) {
            if b.launches == 0 {
                continue;
            }
            a.blocks_min = if a.launches == 0 {
                b.blocks_min
            } else {
                a.blocks_min.min(b.blocks_min)
            };
            a.blocks_max = a.blocks_max.max(b.blocks_max);
            a.launches += b.launches;
            a.blocks += b.blocks;
            a.under_filled += b.under_filled;
        }
    }

    /// Stages that launched anything, in label order.
    pub fn stages(&self) -> impl Iterator<Item = (Stage, StageLaunches)> + '_ {
        Stage::ALL
            .into_iter()
            .map(|s| (s, self.stage(s)))
            .filter(|(_, l)| l.launches > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launches_merge_into_min_max_and_under_filled() {
        let mut a = Occupancy::new(132);
        a.launch(Stage::Moe, 264);
        a.launch(Stage::Moe, 8);
        a.launch(Stage::Attention, 132);
        let mut b = Occupancy::new(132);
        b.launch(Stage::Moe, 500);
        a.merge(&b);
        let moe = a.stage(Stage::Moe);
        assert_eq!(
            moe,
            StageLaunches {
                launches: 3,
                blocks: 772,
                blocks_min: 8,
                blocks_max: 500,
                under_filled: 1,
            }
        );
        // Exactly one block per SM is not under-filled.
        assert_eq!(a.stage(Stage::Attention).under_filled, 0);
        let listed: Vec<Stage> = a.stages().map(|(s, _)| s).collect();
        assert_eq!(listed, vec![Stage::Attention, Stage::Moe]);
        // Merging into an empty record takes the other's minimum.
        let mut e = Occupancy::new(132);
        e.merge(&a);
        assert_eq!(e.stage(Stage::Moe).blocks_min, 8);
    }
}
