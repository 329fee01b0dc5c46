//! Every format: quantize → load keeps the planned modules packed in the planned format with
//! exactly the quantizer's values; the quantized model's logits equal those of its dequantized
//! f32 twin; and the distance to the unquantized model is measured (docs/quantization.md).

use super::*;
use crate::checkpoint::Dtype;
use crate::model::deepseek_v4::quantize::{DenseDtype, Target, dequantize_dir, dequantize_dir_as};
use crate::ops::linear::WeightData;
use crate::quant::{Format, Fp8Block, Mxfp4, Nvfp4, QuantWeight};

const FORMATS: [QuantizeFormat; 5] = [
    QuantizeFormat::Fp8,
    QuantizeFormat::Fp8V3,
    QuantizeFormat::DeepseekFp4,
    QuantizeFormat::Mxfp4,
    QuantizeFormat::Nvfp4,
];

fn expected_format(t: Target) -> Format {
    match t {
        Target::Fp8Block { e8m0: true } => Format::Fp8BlockE8m0,
        Target::Fp8Block { e8m0: false } => Format::Fp8BlockF32,
        Target::Fp8Tensor => Format::Fp8Tensor,
        Target::Nvfp4 => Format::Nvfp4,
        Target::Mxfp4Native | Target::Mxfp4Fused => Format::Mxfp4,
    }
}

#[test]
fn every_format_round_trips_through_the_loader() {
    let root = tempfile::tempdir().unwrap();
    let dense_dir = root.path().join("dense");
    spec().write(&dense_dir, 21).unwrap();
    let dense = DeepseekV4::load(&dense_dir).unwrap();
    let dense_ck = Checkpoint::open(&dense_dir).unwrap();
    for format in FORMATS {
        for experts_only in [false, true] {
            let out = root.path().join(format!("{format:?}-{experts_only}"));
            quantize(&dense_dir, &out, format, experts_only);
            let mut m = DeepseekV4::load(&out).unwrap();
            let plan = Plan::for_format(&dense.cfg, format, experts_only);
            assert!(!plan.targets.is_empty());
            let mut seen = 0;
            m.weights.for_each_linear(&mut |name, lin| {
                let want = plan.targets.get(name).copied();
                let got = lin.data.format();
                match want {
                    None => assert!(
                        matches!(lin.data, WeightData::F32(_)),
                        "{format:?}: {name} should stay dense, is {got}"
                    ),
                    Some(t) => {
                        seen += 1;
                        assert_eq!(got, expected_format(t), "{format:?}: {name}");
                        let WeightData::Quant(q) = &lin.data else {
                            panic!("{name} is not packed");
                        };
                        // Packed: at most ~1 byte per weight (FP8) or ~0.5 (FP4) plus scales.
                        let per = q.bytes() as f64 / (lin.out_features * lin.in_features) as f64;
                        assert!(per <= 1.1, "{name}: {per} bytes per weight");
                    }
                }
            });
            // wo_a's groups are visited once per group.
            assert!(seen >= plan.targets.len(), "{format:?}");
            // The loaded values are exactly the quantizer's, for one module of each role.
            for module in [
                "layers.1.attn.wq_b",
                "layers.2.ffn.experts.5.w2",
                "layers.0.ffn.shared_experts.w3",
            ] {
                let Some(&t) = plan.targets.get(module) else {
                    continue;
                };
                let w = dense_ck.get(&format!("{module}.weight")).unwrap();
                let (r, c) = (w.shape[0], w.shape[1]);
                let x = w.to_f32().unwrap();
                let direct = match t {
                    Target::Fp8Block { e8m0 } => {
                        QuantWeight::Fp8Block(Fp8Block::quantize(module, &x, r, c, e8m0).unwrap())
                    }
                    Target::Nvfp4 => {
                        QuantWeight::Nvfp4(Nvfp4::quantize(module, &x, r, c, None).unwrap())
                    }
                    _ => QuantWeight::Mxfp4(Mxfp4::quantize(module, &x, r, c).unwrap()),
                };
                let mut loaded = None;
                m.weights.for_each_linear(&mut |name, lin| {
                    if name == module {
                        loaded = Some((0..r).flat_map(|i| lin.row(i)).collect::<Vec<f32>>());
                    }
                });
                assert_eq!(loaded.unwrap(), direct.dequantize(), "{format:?}: {module}");
            }
        }
    }
}

#[test]
fn gpt_oss_blocks_are_fused_per_layer() {
    let root = tempfile::tempdir().unwrap();
    let dense = root.path().join("dense");
    let s = spec();
    s.write(&dense, 4).unwrap();
    let out = root.path().join("mx");
    quantize(&dense, &out, QuantizeFormat::Mxfp4, false);
    let bytes = std::fs::read(out.join("model.safetensors")).unwrap();
    let (hdr, _) =
        crate::checkpoint::safetensors::parse_header(&out.join("model.safetensors"), &bytes)
            .unwrap();
    let b = &hdr["layers.0.ffn.experts.gate_up_proj_blocks"];
    assert_eq!(
        (b.dtype, b.shape.clone()),
        (
            Dtype::U8,
            vec![s.experts, 2 * s.moe_inter, s.hidden / 32, 16]
        )
    );
    let sc = &hdr["layers.0.ffn.experts.down_proj_scales"];
    assert_eq!(
        (sc.dtype, sc.shape.clone()),
        (Dtype::U8, vec![s.experts, s.hidden, s.moe_inter / 32])
    );
    assert!(!hdr.contains_key("layers.0.ffn.experts.0.w1.weight"));
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["quantization_config"]["quant_method"], "mxfp4");
}

#[test]
fn quantized_logits_equal_the_dequantized_twin_and_distances_are_measured() {
    let root = tempfile::tempdir().unwrap();
    let dense_dir = root.path().join("dense");
    let s = spec();
    s.write(&dense_dir, 5).unwrap();
    let ids = tokens(s.vocab, 40, 17);
    let reference = logits(&DeepseekV4::load(&dense_dir).unwrap(), &ids);
    let mut rel = std::collections::BTreeMap::new();
    for format in FORMATS {
        for experts_only in [false, true] {
            let tag = format!("{format:?}-{experts_only}");
            let q_dir = root.path().join(&tag);
            let twin_dir = root.path().join(format!("{tag}-twin"));
            quantize(&dense_dir, &q_dir, format, experts_only);
            dequantize_dir(&q_dir, &twin_dir, 1 << 20).unwrap();
            let q = logits(&DeepseekV4::load(&q_dir).unwrap(), &ids);
            let twin = logits(&DeepseekV4::load(&twin_dir).unwrap(), &ids);
            // Same weights, same f32 arithmetic: identical up to f32 rounding (in practice 0).
            let same = distance(&q, &twin);
            assert!(same.rel_max <= 1e-6, "{tag}: twin differs by {same:?}");
            // The bf16 twin: exact where every scale is a power of two (E8M0), so the
            // dequantized values fit bf16; NVFP4 (E4M3 × f32 scales) and FP8 with f32 block
            // scales are rounded once more, which moves the logits far less than quantizing.
            let bf16_dir = root.path().join(format!("{tag}-bf16"));
            dequantize_dir_as(&q_dir, &bf16_dir, 1 << 20, DenseDtype::Bf16).unwrap();
            let bf16 = logits(&DeepseekV4::load(&bf16_dir).unwrap(), &ids);
            let to_bf16 = distance(&q, &bf16);
            let exact = matches!(
                format,
                QuantizeFormat::Fp8 | QuantizeFormat::DeepseekFp4 | QuantizeFormat::Mxfp4
            );
            eprintln!(
                "bf16 twin      {tag:<18} rel_l2 {:.3e}  rel_max {:.3e}  top1 {:.3}",
                to_bf16.rel_l2, to_bf16.rel_max, to_bf16.top1
            );
            let d = distance(&q, &reference);
            eprintln!(
                "logit distance {tag:<18} rel_l2 {:.3e}  rel_max {:.3e}  top1 {:.3}",
                d.rel_l2, d.rel_max, d.top1
            );
            assert!(d.rel_l2 > 0.0, "{tag}: quantization changed nothing");
            if exact {
                assert!(
                    to_bf16.rel_max <= 1e-6,
                    "{tag}: bf16 twin differs by {to_bf16:?}"
                );
            } else {
                assert!(
                    to_bf16.rel_max > 0.0,
                    "{tag}: expected bf16 rounding to show"
                );
                assert!(
                    to_bf16.rel_l2 < d.rel_l2 / 4.0,
                    "{tag}: bf16 rounding {to_bf16:?} vs quantization {d:?}"
                );
            }
            assert!(d.rel_l2 < 0.5, "{tag}: {d:?}");
            rel.insert(tag, d.rel_l2);
        }
    }
    // FP8 (3 mantissa bits) must be closer to the dense model than any FP4 format (1 bit).
    for fp4 in ["DeepseekFp4-false", "Mxfp4-false", "Nvfp4-false"] {
        assert!(rel["Fp8-false"] < rel[fp4], "{rel:?}");
        assert!(rel["Fp8V3-false"] < rel[fp4], "{rel:?}");
    }
    // Quantizing less moves the model less.
    assert!(rel["Nvfp4-true"] < rel["Nvfp4-false"], "{rel:?}");
}

/// What lands on disk, per format, for one attention projection (`wq_b`, [64, 32]) and one
/// routed expert (`w1`, [32, 32]): the names, dtypes and shapes of model-spec §5 and the
/// declaring config fields other engines read (ModelOpt's hf_quant_config.json for NVFP4,
/// DeepSeek's `quantization_config` / `expert_dtype`).
#[test]
fn on_disk_layout_follows_each_convention() {
    use crate::checkpoint::safetensors::parse_header;
    let root = tempfile::tempdir().unwrap();
    let dense = root.path().join("dense");
    spec().write(&dense, 9).unwrap();
    let json = |p: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let (attn, expert) = ("layers.1.attn.wq_b", "layers.1.ffn.experts.1.w1");
    type Layout = Vec<(String, Dtype, Vec<usize>)>;
    let cases: [(QuantizeFormat, Layout); 4] = [
        (
            QuantizeFormat::Nvfp4,
            vec![
                (format!("{attn}.weight"), Dtype::U8, vec![64, 16]),
                (format!("{attn}.weight_scale"), Dtype::F8E4M3, vec![64, 2]),
                (format!("{attn}.weight_scale_2"), Dtype::F32, vec![]),
                (format!("{attn}.input_scale"), Dtype::F32, vec![]),
                (format!("{expert}.weight"), Dtype::U8, vec![32, 16]),
                (format!("{expert}.weight_scale"), Dtype::F8E4M3, vec![32, 2]),
            ],
        ),
        (
            QuantizeFormat::Fp8,
            vec![
                (format!("{attn}.weight"), Dtype::F8E4M3, vec![64, 32]),
                (format!("{attn}.scale"), Dtype::F8E8M0, vec![1, 1]),
            ],
        ),
        (
            QuantizeFormat::Fp8V3,
            vec![
                (format!("{attn}.weight"), Dtype::F8E4M3, vec![64, 32]),
                (format!("{attn}.weight_scale_inv"), Dtype::F32, vec![1, 1]),
            ],
        ),
        (
            QuantizeFormat::DeepseekFp4,
            vec![
                (format!("{attn}.weight"), Dtype::F8E4M3, vec![64, 32]),
                (format!("{attn}.scale"), Dtype::F8E8M0, vec![1, 1]),
                (format!("{expert}.weight"), Dtype::I8, vec![32, 16]),
                (format!("{expert}.scale"), Dtype::F8E8M0, vec![32, 1]),
            ],
        ),
    ];
    for (format, layout) in cases {
        let out = root.path().join(format!("{format:?}"));
        quantize(&dense, &out, format, false);
        let file = out.join("model.safetensors");
        let bytes = std::fs::read(&file).unwrap();
        let (hdr, _) = parse_header(&file, &bytes).unwrap();
        for (name, dtype, shape) in &layout {
            let e = hdr
                .get(name)
                .unwrap_or_else(|| panic!("{format:?}: no {name}"));
            assert_eq!((e.dtype, &e.shape), (*dtype, shape), "{format:?}: {name}");
        }
        let cfg = json(&out.join("config.json"));
        let q = &cfg["quantization_config"];
        match format {
            QuantizeFormat::Nvfp4 => {
                let hf = json(&out.join("hf_quant_config.json"));
                let h = &hf["quantization"];
                assert_eq!(
                    (&h["quant_algo"], &h["group_size"]),
                    (&"NVFP4".into(), &16.into())
                );
                assert!(h["kv_cache_quant_algo"].is_null());
                let excluded = h["exclude_modules"].as_array().unwrap();
                assert!(excluded.contains(&"head".into()), "{h}");
                assert!(!excluded.contains(&attn.into()));
                assert_eq!(q["quant_method"], "modelopt");
                assert_eq!(q["quant_algo"], "NVFP4");
            }
            _ => {
                assert!(!out.join("hf_quant_config.json").exists());
                assert_eq!(
                    (&q["quant_method"], &q["fmt"], &q["weight_block_size"]),
                    (
                        &"fp8".into(),
                        &"e4m3".into(),
                        &serde_json::json!([128, 128])
                    )
                );
                let e8m0 = format != QuantizeFormat::Fp8V3;
                assert_eq!(q.get("scale_fmt").is_some(), e8m0, "{q}");
                if e8m0 {
                    assert_eq!(q["scale_fmt"], "ue8m0");
                }
                let fp4 = format == QuantizeFormat::DeepseekFp4;
                assert_eq!(cfg.get("expert_dtype").is_some(), fp4, "{cfg}");
                if fp4 {
                    assert_eq!(cfg["expert_dtype"], "fp4");
                }
            }
        }
    }
}
