//! Damaged checkpoints and impossible requests are refused with errors that name the module and
//! the expected and found shapes or values — never a panic.

use serde_json::Value;

use super::*;
use crate::checkpoint::Dtype;

/// Quantizes the tiny model, applies `damage` to its tensors, and returns the load error.
fn load_error(format: QuantizeFormat, damage: impl Fn(&mut Vec<OwnedTensor>)) -> String {
    let root = tempfile::tempdir().unwrap();
    let dense = root.path().join("dense");
    spec().write(&dense, 2).unwrap();
    let out = root.path().join("q");
    quantize(&dense, &out, format, false);
    let mut t = owned(&out);
    damage(&mut t);
    rewrite(&out, &t);
    DeepseekV4::load(&out).unwrap_err().to_string()
}

fn find<'a>(t: &'a mut [OwnedTensor], name: &str) -> &'a mut OwnedTensor {
    t.iter_mut().find(|x| x.name == name).unwrap()
}

#[test]
fn wrong_shaped_scales_name_module_expected_and_found() {
    let err = load_error(QuantizeFormat::Fp8, |t| {
        let s = find(t, "layers.0.attn.wq_a.scale");
        s.shape = vec![2, 1];
        s.data = vec![127, 127];
    });
    assert!(
        err.contains("layers.0.attn.wq_a") && err.contains("[2, 1]") && err.contains("[1, 1]"),
        "{err}"
    );
    // NVFP4 with per-32 scales ([8, 1] for a [8, 32] weight) instead of per-16 ([8, 2]).
    let err = load_error(QuantizeFormat::Nvfp4, |t| {
        let s = find(t, "layers.1.ffn.experts.2.w2.weight_scale");
        assert_eq!(s.shape, vec![32, 2]);
        s.shape = vec![32, 1];
        s.data.truncate(32);
    });
    assert!(
        err.contains("layers.1.ffn.experts.2.w2")
            && err.contains("[32, 1]")
            && err.contains("[32, 2]"),
        "{err}"
    );
    let err = load_error(QuantizeFormat::DeepseekFp4, |t| {
        let s = find(t, "layers.0.ffn.experts.0.w1.weight");
        s.shape = vec![32, 32];
        s.data = vec![0; 32 * 32];
    });
    assert!(
        err.contains("layers.0.ffn.experts.0.w1") && err.contains("[32, 16]"),
        "{err}"
    );
}

#[test]
fn bad_scale_values_and_missing_companions_are_refused() {
    let err = load_error(QuantizeFormat::DeepseekFp4, |t| {
        find(t, "layers.2.ffn.experts.7.w3.scale").data[5] = 0xff;
    });
    assert!(
        err.contains("layers.2.ffn.experts.7.w3") && err.contains("NaN"),
        "{err}"
    );
    let err = load_error(QuantizeFormat::Nvfp4, |t| {
        t.retain(|x| x.name != "layers.0.attn.wkv.input_scale");
    });
    assert!(
        err.contains("layers.0.attn.wkv") && err.contains("input_scale"),
        "{err}"
    );
    let err = load_error(QuantizeFormat::Nvfp4, |t| {
        t.retain(|x| x.name != "layers.0.attn.wkv.weight_scale_2");
    });
    assert!(err.contains("weight_scale_2"), "{err}");
    let err = load_error(QuantizeFormat::Nvfp4, |t| {
        find(t, "layers.0.attn.wkv.weight_scale_2").data = f32::INFINITY.to_le_bytes().to_vec();
    });
    assert!(
        err.contains("layers.0.attn.wkv") && err.contains("inf"),
        "{err}"
    );
    let err = load_error(QuantizeFormat::Fp8V3, |t| {
        find(t, "layers.0.attn.wo_b.weight_scale_inv").data = (-1.0f32).to_le_bytes().to_vec();
    });
    assert!(
        err.contains("layers.0.attn.wo_b") && err.contains("-1"),
        "{err}"
    );
    let err = load_error(QuantizeFormat::Fp8, |t| {
        t.retain(|x| x.name != "layers.0.attn.wq_a.scale");
    });
    assert!(
        err.contains("layers.0.attn.wq_a") && err.contains("without a scale"),
        "{err}"
    );
    let err = load_error(QuantizeFormat::Fp8, |t| {
        let s = find(t, "layers.0.attn.wq_a.scale");
        s.dtype = Dtype::I8;
    });
    assert!(err.contains("is I8, expected F8_E8M0 or F32"), "{err}");
    let err = load_error(QuantizeFormat::Fp8, |t| {
        let stray = OwnedTensor::f32("layers.0.ffn.gate.scale", &[1, 1], &[1.0]);
        t.push(stray);
    });
    assert!(
        err.contains("layers.0.ffn.gate") && err.contains("scale tensors belong"),
        "{err}"
    );
}

#[test]
fn weights_the_config_does_not_declare_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let dense = root.path().join("dense");
    spec().write(&dense, 2).unwrap();
    let out = root.path().join("q");
    quantize(&dense, &out, QuantizeFormat::Fp8, false);
    let path = out.join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    cfg.as_object_mut().unwrap().remove("quantization_config");
    std::fs::write(&path, cfg.to_string()).unwrap();
    let err = DeepseekV4::load(&out).unwrap_err().to_string();
    assert!(
        err.contains("layers.0.attn.wq_a")
            && err.contains("fp8-block(e8m0)")
            && err.contains("dense"),
        "{err}"
    );
}

#[test]
fn impossible_quantize_requests_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let dense = root.path().join("dense");
    // The default tiny model has 16-wide expert inputs: MXFP4 needs multiples of 32.
    TinySpec::default().write(&dense, 2).unwrap();
    let cfg = crate::config::ModelConfig::from_path(&dense).unwrap();
    let plan = Plan::for_format(&cfg, QuantizeFormat::Mxfp4, false);
    let err = quantize_dir(&dense, &root.path().join("a"), &plan, &opts())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("experts.0.w2") && err.contains("multiple of 32"),
        "{err}"
    );
    // A quantized checkpoint is not a valid input.
    let good = root.path().join("good");
    spec().write(&good, 2).unwrap();
    let q = root.path().join("q");
    quantize(&good, &q, QuantizeFormat::Fp8, false);
    let cfg = crate::config::ModelConfig::from_path(&q).unwrap();
    let plan = Plan::for_format(&cfg, QuantizeFormat::Nvfp4, false);
    let err = quantize_dir(&q, &root.path().join("b"), &plan, &opts())
        .unwrap_err()
        .to_string();
    assert!(err.contains("already quantized"), "{err}");
    // Output into a folder that already holds weights is refused.
    let err = quantize_dir(&good, &q, &plan, &opts())
        .unwrap_err()
        .to_string();
    assert!(err.contains("already holds"), "{err}");
}
