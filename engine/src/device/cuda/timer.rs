//! Stage timing on the device: an event is recorded at every stage boundary of a step (an
//! external record when the step is being captured into a graph, so replays give timestamps),
//! and read back after the step has finished; the host never waits inside a step. Launch sizes
//! are summed per stage for the occupancy facts (blocks launched against the SM count).

use crate::error::Result;
use crate::profile::occupancy::Occupancy;
use crate::profile::{Stage, StageClock};

use super::gpu::{Event, Gpu};

/// One step's marks: the stage each segment belongs to, in order, and the events between them.
#[derive(Debug, Default)]
pub struct StageTimer {
    events: Vec<Event>,
    /// Stage of segment i (between events i and i+1).
    stages: Vec<Stage>,
    used: usize,
    /// Blocks launched per stage and the largest single launch.
    pub blocks: [u64; 8],
    pub max_blocks: [u64; 8],
    pub launches: [u64; 8],
    /// Every launch of the step: (stage, blocks).
    log: Vec<(Stage, u64)>,
    current: Option<Stage>,
    /// Record events (false: only count launches).
    pub timing: bool,
}

fn idx(s: Stage) -> usize {
    Stage::ALL.iter().position(|x| *x == s).unwrap_or(7)
}

impl StageTimer {
    pub fn new(timing: bool) -> Self {
        Self {
            timing,
            ..Default::default()
        }
    }

    /// Starts a new step (events are reused).
    pub fn reset(&mut self) {
        self.stages.clear();
        self.used = 0;
        self.blocks = [0; 8];
        self.max_blocks = [0; 8];
        self.launches = [0; 8];
        self.log.clear();
        self.current = None;
    }

    /// Opens a segment of `stage` (closing the previous one).
    pub fn mark(&mut self, gpu: &Gpu, stage: Stage, capturing: bool) -> Result<()> {
        if self.current == Some(stage) {
            return Ok(());
        }
        self.current = Some(stage);
        if !self.timing {
            return Ok(());
        }
        self.record(gpu, capturing)?;
        self.stages.push(stage);
        Ok(())
    }

    fn record(&mut self, gpu: &Gpu, capturing: bool) -> Result<()> {
        if self.used == self.events.len() {
            self.events.push(gpu.event()?);
        }
        gpu.record(&self.events[self.used], capturing)?;
        self.used += 1;
        Ok(())
    }

    /// Closes the last segment.
    pub fn finish(&mut self, gpu: &Gpu, capturing: bool) -> Result<()> {
        self.current = None;
        if self.timing && !self.stages.is_empty() {
            self.record(gpu, capturing)?;
        }
        Ok(())
    }

    /// Counts a launch of `blocks` blocks in the current stage.
    pub fn count(&mut self, blocks: u64) {
        self.log
            .push((self.current.unwrap_or(Stage::Other), blocks));
        let i = idx(self.current.unwrap_or(Stage::Other));
        self.blocks[i] += blocks;
        self.max_blocks[i] = self.max_blocks[i].max(blocks);
        self.launches[i] += 1;
    }

    /// The step's launch facts against a device of `sms` multiprocessors.
    pub fn occupancy(&self, sms: u32) -> Occupancy {
        let mut o = Occupancy::new(sms);
        for &(s, b) in &self.log {
            o.launch(s, b);
        }
        o
    }

    /// Events recorded in the step.
    pub fn marks(&self) -> usize {
        self.used
    }

    /// Charges each segment's device time to its stage (after the step completed).
    pub fn charge(&self, clock: &mut StageClock) -> Result<()> {
        if !self.timing || self.used < 2 {
            return Ok(());
        }
        self.events[self.used - 1].synchronize()?;
        for (i, st) in self.stages.iter().enumerate() {
            let ms = self.events[i].elapsed_ms(&self.events[i + 1])?;
            clock.add(
                *st,
                std::time::Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3),
            );
        }
        Ok(())
    }

    /// Device time from the first to the last event, seconds.
    pub fn total_seconds(&self) -> Result<f64> {
        if !self.timing || self.used < 2 {
            return Ok(0.0);
        }
        Ok(f64::from(self.events[0].elapsed_ms(&self.events[self.used - 1])?) / 1e3)
    }
}
