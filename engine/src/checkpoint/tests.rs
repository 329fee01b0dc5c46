use super::*;

fn bf16_tensor(name: &str, shape: &[usize], values: &[f32]) -> OwnedTensor {
    OwnedTensor {
        name: name.to_string(),
        dtype: Dtype::BF16,
        shape: shape.to_vec(),
        data: values
            .iter()
            .flat_map(|v| bf16::from_f32(*v).to_bits().to_le_bytes())
            .collect(),
    }
}

fn write(dir: &Path, file: &str, tensors: &[OwnedTensor]) {
    self::safetensors::write_file(&dir.join(file), tensors, &BTreeMap::new()).unwrap();
}

#[test]
fn hf_names_and_fused_experts_are_reachable_by_official_names() {
    let dir = tempfile::tempdir().unwrap();
    // 2 experts, I = 2, D = 3: gate_up [2, 4, 3], down [2, 3, 2].
    let gate_up: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let down: Vec<f32> = (0..12).map(|i| 100.0 + i as f32).collect();
    write(
        dir.path(),
        "model.safetensors",
        &[
            OwnedTensor::f32(
                "model.layers.0.self_attn.q_a_proj.weight",
                &[2, 3],
                &[1., 2., 3., 4., 5., 6.],
            ),
            bf16_tensor(
                "model.layers.0.mlp.experts.gate_up_proj",
                &[2, 4, 3],
                &gate_up,
            ),
            bf16_tensor("model.layers.0.mlp.experts.down_proj", &[2, 3, 2], &down),
            OwnedTensor::i64("model.layers.0.mlp.gate.tid2eid", &[2, 2], &[0, 1, 1, 0]),
        ],
    );
    let ck = Checkpoint::open(dir.path()).unwrap();
    let t = ck.get_shaped("layers.0.attn.wq_a.weight", &[2, 3]).unwrap();
    assert_eq!(t.to_f32().unwrap(), vec![1., 2., 3., 4., 5., 6.]);
    let w1 = ck
        .get_shaped("layers.0.ffn.experts.1.w1.weight", &[2, 3])
        .unwrap();
    assert_eq!(
        w1.to_f32().unwrap(),
        (12..18).map(|i| i as f32).collect::<Vec<_>>()
    );
    let w3 = ck
        .get_shaped("layers.0.ffn.experts.1.w3.weight", &[2, 3])
        .unwrap();
    assert_eq!(
        w3.to_f32().unwrap(),
        (18..24).map(|i| i as f32).collect::<Vec<_>>()
    );
    let w2 = ck
        .get_shaped("layers.0.ffn.experts.0.w2.weight", &[3, 2])
        .unwrap();
    assert_eq!(
        w2.to_f32().unwrap(),
        (0..6).map(|i| 100.0 + i as f32).collect::<Vec<_>>()
    );
    assert_eq!(
        ck.get("layers.0.ffn.gate.tid2eid")
            .unwrap()
            .to_i64()
            .unwrap(),
        vec![0, 1, 1, 0]
    );
}

#[test]
fn missing_and_misshapen_tensors_are_named() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "model.safetensors",
        &[OwnedTensor::f32("norm.weight", &[4], &[1.; 4])],
    );
    let ck = Checkpoint::open(dir.path()).unwrap();
    match ck.get("head.weight") {
        Err(EngineError::MissingTensor { name, .. }) => assert_eq!(name, "head.weight"),
        other => panic!("unexpected {other:?}"),
    }
    match ck.get_shaped("norm.weight", &[8]) {
        Err(EngineError::ShapeMismatch {
            name,
            expected,
            found,
        }) => {
            assert_eq!(name, "norm.weight");
            assert_eq!(expected, vec![8]);
            assert_eq!(found, vec![4]);
        }
        other => panic!("unexpected {other:?}"),
    }
    let err = ck.get("norm.weight").unwrap().to_i64().unwrap_err();
    assert!(matches!(err, EngineError::UnsupportedDtype { .. }), "{err}");
}

#[test]
fn sharded_checkpoints_follow_the_index() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "a.safetensors",
        &[OwnedTensor::f32("embed.weight", &[1], &[1.])],
    );
    write(
        dir.path(),
        "b.safetensors",
        &[OwnedTensor::f32("head.weight", &[1], &[2.])],
    );
    // A stray file not named by the index must be ignored.
    write(
        dir.path(),
        "stray.safetensors",
        &[OwnedTensor::f32("junk", &[1], &[3.])],
    );
    let index = serde_json::json!({"weight_map": {"embed.weight": "a.safetensors", "head.weight": "b.safetensors"}});
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let ck = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(ck.names(), vec!["embed.weight", "head.weight"]);
    assert_eq!(ck.get("head.weight").unwrap().to_f32().unwrap(), vec![2.]);
}

#[test]
fn corrupt_files_and_clashing_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("model.safetensors"),
        b"\xff\xff\xff\xff\xff\xff\xff\x7fjunk",
    )
    .unwrap();
    assert!(matches!(
        Checkpoint::open(dir.path()),
        Err(EngineError::Checkpoint { .. })
    ));

    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "model.safetensors",
        &[
            OwnedTensor::f32("model.embed_tokens.weight", &[1], &[1.]),
            OwnedTensor::f32("embed.weight", &[1], &[1.]),
        ],
    );
    let err = Checkpoint::open(dir.path()).unwrap_err();
    assert!(
        err.to_string().contains("both map to `embed.weight`"),
        "{err}"
    );

    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        Checkpoint::open(empty.path()),
        Err(EngineError::Checkpoint { .. })
    ));
}
