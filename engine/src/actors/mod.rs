//! The engine's actors (ARCHITECTURE.md "A request, end to end"): the coordinator owns admission,
//! the scheduler and every request's bookkeeping; one device worker per device owns the model and
//! the per-sequence caches on its own thread; the telemetry actor turns step and request reports
//! into Prometheus metrics. They talk only in messages.

pub mod coordinator;
pub mod telemetry;
pub mod worker;

use std::sync::Arc;

use actix::{Actor, Addr, Arbiter};

use crate::api::{DeviceSpec, EngineConfig, ModelInfo};
use crate::device::{CudaBackend, CudaOptions};
use crate::error::Result;
use crate::metrics::Metrics;
use crate::model::deepseek_v4::DeepseekV4;
use coordinator::Coordinator;
use telemetry::Telemetry;
use worker::{Backend, CpuBackend, DeviceWorker};

/// What [`start`] hands the engine handle.
pub(crate) struct Started {
    pub coord: Addr<Coordinator>,
    pub telemetry: Addr<Telemetry>,
    pub info: ModelInfo,
    pub metrics: Arc<Metrics>,
}

/// Loads the model and starts the three actors. Must run inside an actix `System`.
pub(crate) fn start(cfg: EngineConfig) -> Result<Started> {
    let model = DeepseekV4::load(&cfg.model_dir)?;
    let c = &model.cfg;
    let max_model_len = cfg
        .max_model_len
        .unwrap_or(c.max_position_embeddings)
        .min(c.max_position_embeddings)
        .max(2);
    let name = cfg.model_name.clone().unwrap_or_else(|| {
        cfg.model_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into())
    });
    let info = ModelInfo {
        name,
        max_model_len,
        vocab_size: c.vocab_size,
        eos_token_ids: c.eos_token_ids.clone(),
        device: match cfg.device {
            DeviceSpec::Cpu => "cpu".into(),
            DeviceSpec::Cuda(n) => format!("cuda:{n}"),
        },
    };
    let metrics = Arc::new(Metrics::new(max_model_len as u64)?);
    metrics
        .build_info
        .with_label_values(&[env!("CARGO_PKG_VERSION"), &info.name, &info.device])
        .set(1);
    let backend: Box<dyn Backend> = match cfg.device {
        DeviceSpec::Cpu => Box::new(CpuBackend::new(model)),
        DeviceSpec::Cuda(ordinal) => {
            let opts = CudaOptions {
                ordinal,
                max_batch: cfg.scheduler.max_seqs,
                max_len: max_model_len,
                max_step_tokens: cfg.scheduler.max_step_tokens,
                ..CudaOptions::default()
            };
            // The CPU copy of the weights is dropped once they are on the device.
            Box::new(CudaBackend::new(&model, opts)?)
        }
    };
    let profile_every = cfg
        .profile_every
        .unwrap_or_else(|| backend.default_profile_every())
        .max(1);
    let telemetry = Telemetry::new(metrics.clone(), info.name.clone(), profile_every).start();
    let arbiter = Arbiter::new();
    let t = telemetry.clone();
    let worker =
        DeviceWorker::start_in_arbiter(&arbiter.handle(), move |_| DeviceWorker::new(backend, t));
    let coord = Coordinator::new(
        cfg.scheduler,
        info.clone(),
        worker,
        arbiter,
        telemetry.clone(),
        profile_every,
    )
    .start();
    Ok(Started {
        coord,
        telemetry,
        info,
        metrics,
    })
}

#[cfg(test)]
mod tests;
