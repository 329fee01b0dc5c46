//! `amdahl info`'s numbers checked against measurement (cache growth of a real sequence state,
//! bytes of the files) and against model-spec §3.4's V4-Flash figure.

use super::*;
use crate::model::deepseek_v4::quantize::{Plan, QuantizeFormat, QuantizeOptions, quantize_dir};
use crate::model::deepseek_v4::synthetic::TinySpec;
use crate::model::deepseek_v4::{DeepseekV4, LogitRows, SeqInput};
use crate::profile::StageClock;

#[test]
fn cpu_cache_accounting_matches_the_measured_state() {
    let spec = TinySpec::default(); // sliding, CSA ratio 4, HCA ratio 8; window 8
    let dir = tempfile::tempdir().unwrap();
    spec.write(dir.path(), 3).unwrap();
    let m = DeepseekV4::load(dir.path()).unwrap();
    let kv = kv_bytes(&m.cfg);
    let mut st = m.new_state();
    let mut bytes_at = Vec::new();
    let ids: Vec<u32> = (0..48).map(|i| (i * 7 % spec.vocab) as u32).collect();
    for chunk in ids.chunks(8) {
        let mut batch = [SeqInput {
            tokens: chunk,
            state: &mut st,
            logits: LogitRows::None,
        }];
        m.forward(&mut batch, &mut StageClock::default()).unwrap();
        bytes_at.push((batch[0].state.pos, batch[0].state.bytes()));
    }
    // Past the first windows, each 8 tokens (a multiple of every ratio) add exactly 8 × per_token.
    for w in bytes_at[2..].windows(2) {
        let grew = (w[1].1 - w[0].1) as f64;
        assert_eq!(
            grew,
            kv.cpu.per_token * (w[1].0 - w[0].0) as f64,
            "{bytes_at:?}"
        );
    }
    for &(pos, b) in &bytes_at {
        assert!(
            b as f64 <= kv.cpu.fixed + kv.cpu.per_token * pos as f64,
            "{pos}: {b}"
        );
    }
}

#[test]
fn flashmla_accounting_reproduces_v4_flash() {
    let mut ratios = vec![0, 0];
    for l in 2..43 {
        ratios.push(if l % 2 == 0 { 4 } else { 128 });
    }
    ratios.push(0); // MTP entry
    let cfg = serde_json::json!({
        "model_type": "deepseek_v4", "num_hidden_layers": 43, "compress_ratios": ratios,
        "qk_rope_head_dim": 64, "head_dim": 512, "index_head_dim": 128, "sliding_window": 128,
    });
    let c = ModelConfig::from_json_str(&cfg.to_string(), "flash").unwrap();
    let kv = kv_bytes(&c);
    assert_eq!(kv.flashmla_row, 584);
    // 21 CSA × (584 + 68) / 4 + 20 HCA × 584 / 128 (model-spec §3.4: ≈ 3.5 KB/token).
    assert_eq!(
        kv.flashmla.per_token,
        21.0 * 652.0 / 4.0 + 20.0 * 584.0 / 128.0
    );
    assert_eq!(kv.flashmla.fixed, 43.0 * 128.0 * 584.0);
    assert_eq!(
        kv.cpu.per_token,
        21.0 * (2048.0 + 512.0) / 4.0 + 20.0 * 2048.0 / 128.0
    );
}

#[test]
fn survey_of_a_deepseek_fp4_checkpoint() {
    let root = tempfile::tempdir().unwrap();
    let dense = root.path().join("dense");
    let spec = TinySpec {
        q_lora: 32,
        moe_inter: 32,
        ..TinySpec::default()
    };
    spec.write(&dense, 1).unwrap();
    let cfg = ModelConfig::from_path(&dense).unwrap();
    let out = root.path().join("q");
    let plan = Plan::for_format(&cfg, QuantizeFormat::DeepseekFp4, false);
    quantize_dir(&dense, &out, &plan, &QuantizeOptions::default()).unwrap();
    let d = survey(&dense).unwrap();
    let q = survey(&out).unwrap();
    assert_eq!(d.params, q.params);
    let ck = Checkpoint::open(&out).unwrap();
    assert_eq!(
        q.total_bytes,
        ck.bytes_by_dtype().values().sum::<usize>() as u64
    );
    assert!(q.total_bytes < d.total_bytes);
    assert!(q.bytes_by_format.contains_key("linear mxfp4"));
    assert!(q.bytes_by_format.contains_key("linear fp8-block(e8m0)"));
    assert_eq!(q.expert_formats, BTreeSet::from([Format::Mxfp4]));
    let experts = &q.layers[1].parts["experts"];
    assert_eq!(experts[&Format::Mxfp4], 3 * spec.experts);
    assert_eq!(q.layers[1].parts["router"][&Format::F32], 1);
    // Dense tiny model: every parameter is stored once as f32.
    assert_eq!(
        d.params * 4,
        d.total_bytes - 8 * spec.vocab as u64 * spec.top_k as u64
    );
    assert!(d.active_params < d.params);
    let cpu = q.backends(Device::Cpu);
    assert!(
        cpu.iter()
            .all(|(b, r)| r.is_ok() == (*b == MoeBackend::Cpu)),
        "{cpu:?}"
    );
    let h200 = q.backends(Device::Cuda { major: 9, minor: 0 });
    let ok: Vec<MoeBackend> = h200
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(b, _)| *b)
        .collect();
    assert_eq!(ok, vec![MoeBackend::Dequant]);
}
