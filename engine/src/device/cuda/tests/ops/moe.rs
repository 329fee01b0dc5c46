//! The MoE pipeline (router → top-k → plan → grouped SwiGLU experts → weighted down projection →
//! combine with the shared expert) at V4-Flash widths (D 4096, I 2048) with NVFP4, MXFP4 and
//! BF16 experts, against `MoeBlock::forward`.

use super::super::{bf16_round, gpu, rel_l2, to_bf16_bits};
use super::{linear_of, randn};
use crate::config::{ModelConfig, ScoringFunc};
use crate::device::cuda::model::layer::moe_forward;
use crate::device::cuda::state::{Limits, StepBufs};
use crate::device::cuda::timer::StageTimer;
use crate::device::cuda::weights::GMoe;
use crate::model::deepseek_v4::synthetic::TinySpec;
use crate::ops::moe::{Expert, MoeBlock, Router, Selection};
use crate::profile::StageClock;
use crate::rng::Rng;
use crate::tensor::Mat;

fn block(rng: &mut Rng, fmt: &str, e: usize, d: usize, i: usize, k: usize, hash: bool) -> MoeBlock {
    let expert = |rng: &mut Rng, f: &str| Expert {
        w1: linear_of(f, &randn(rng, i * d, 0.02), i, d),
        w3: linear_of(f, &randn(rng, i * d, 0.02), i, d),
        w2: linear_of(f, &randn(rng, d * i, 0.02), d, i),
        limit: 10.0,
    };
    let selection = if hash {
        Selection::Hash {
            tid2eid: (0..64 * k).map(|j| ((j * 7 + j / k) % e) as u32).collect(),
            vocab: 64,
        }
    } else {
        Selection::TopK {
            bias: randn(rng, e, 0.1),
        }
    };
    MoeBlock {
        router: Router {
            weight: linear_of("bf16", &randn(rng, e * d, 0.02), e, d),
            selection,
            scoring: ScoringFunc::SqrtSoftplus,
            top_k: k,
            routed_scaling_factor: 1.5,
            norm_topk_prob: true,
        },
        experts: (0..e).map(|_| expert(rng, fmt)).collect(),
        shared: Some(expert(rng, "fp8b_e8m0")),
    }
}

#[test]
fn moe_matches_the_cpu_at_v4_widths() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(9);
    let (e, d, i, k) = (8usize, 4096usize, 2048usize, 3usize);
    let spec = TinySpec {
        hidden: d,
        moe_inter: i,
        experts: e,
        top_k: k,
        ..TinySpec::default()
    };
    let cfg = ModelConfig::from_json_str(&spec.config_json().to_string(), "test").unwrap();
    let lim = Limits {
        tokens: 64,
        seqs: 8,
        max_len: 64,
    };
    let bufs = StepBufs::new(&g, &cfg, lim, g.info.sms).unwrap();
    for (fmt, hash) in [("nvfp4", false), ("mxfp4", false), ("bf16", true)] {
        let mb = block(&mut rng, fmt, e, d, i, k, hash);
        let gm = GMoe::upload(&g, 0, &mb).unwrap();
        // FP4 experts at these widths are stored tiled (unless AMDAHL_FP4_TILES=0).
        let stored = gm.w1.fmt.name();
        if fmt.ends_with("fp4") && crate::device::cuda::weights::Fmt::Nvfp4.tiled().is_some() {
            assert_eq!(stored, format!("{fmt}t"));
        }
        // Every expert-kernel variant at decode sizes (streamed on sm_90+ with K split while one
        // token group holds the step: 1 and 5 tokens; the shared expert streams up to 8).
        use crate::device::cuda::launch::moe::MoeKernel::{Block, Stream, Warp};
        for (t, force) in [
            (1usize, None),
            // One token: fewer tiles than warps, so the warp kernels spread them over the blocks.
            (1, Some(Warp)),
            (1, Some(Block)),
            (1, Some(Stream)),
            (5, Some(Stream)),
            (16, Some(Stream)),
            (64, Some(Stream)),
            (16, None),
            (16, Some(Warp)),
            (16, Some(Block)),
            (64, None),
            (64, Some(Warp)),
            (64, Some(Block)),
        ] {
            crate::device::cuda::launch::moe::force_moe_kernel(force);
            let x = bf16_round(&randn(&mut rng, t * d, 1.0));
            let tokens: Vec<u32> = (0..t).map(|j| (j * 13 % 64) as u32).collect();
            let want = mb
                .forward(
                    &Mat::from_vec(t, d, x.clone()),
                    &tokens,
                    &mut StageClock::default(),
                )
                .unwrap();
            g.write(&bufs.u_f32, 0, &x).unwrap();
            g.write(&bufs.u_bf, 0, &to_bf16_bits(&x)).unwrap();
            let toks: Vec<i32> = tokens.iter().map(|&v| v as i32).collect();
            let tb = g.upload(&toks).unwrap();
            g.memset(&bufs.moe_out, 0xff).unwrap();
            let mut tm = StageTimer::new(false);
            moe_forward(&g, &gm, &bufs, tb.ptr(), t, false, &|_| Ok(()), &mut tm).unwrap();
            let got: Vec<f32> = g.read(&bufs.moe_out, 0, t * d).unwrap();
            // The same launches again give the same bits (every split sums in a fixed order),
            // also with the active experts' down projections prefetched into L2.
            moe_forward(&g, &gm, &bufs, tb.ptr(), t, true, &|_| Ok(()), &mut tm).unwrap();
            let again: Vec<f32> = g.read(&bufs.moe_out, 0, t * d).unwrap();
            assert!(
                got.iter()
                    .zip(&again)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "moe {fmt} t={t} forced={force:?}: a second run differs"
            );
            let err = rel_l2(&got, &want.data);
            crate::device::cuda::launch::moe::force_moe_kernel(None);
            println!(
                "moe {fmt} (stored {stored}) hash={hash} t={t} forced={force:?}: rel l2 {err:.2e}"
            );
            assert!(
                err <= super::TOL,
                "moe {fmt} t={t} forced={force:?}: {err:.3e}"
            );
            // The warp kernels on a grid of 4 blocks (32 warps) take their 1024 up and 2048
            // down tiles from the queue, many per warp; each tile is one warp's whole sum, so
            // the bits equal the full grid's, on both queue launches (the queue left at zero).
            if t == 64 && force == Some(Warp) {
                crate::device::cuda::launch::moe::force_moe_kernel(force);
                crate::device::cuda::launch::moe::force_warp_grid(Some(4));
                for round in 0..2 {
                    g.memset(&bufs.moe_out, 0xff).unwrap();
                    moe_forward(&g, &gm, &bufs, tb.ptr(), t, false, &|_| Ok(()), &mut tm).unwrap();
                    let queued: Vec<f32> = g.read(&bufs.moe_out, 0, t * d).unwrap();
                    assert!(
                        got.iter()
                            .zip(&queued)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "moe {fmt}: the tile queue on 4 blocks differs (round {round})"
                    );
                }
                crate::device::cuda::launch::moe::force_warp_grid(None);
                crate::device::cuda::launch::moe::force_moe_kernel(None);
                println!("moe {fmt} t=64 warp kernels on 4 blocks (tile queue): same bits");
            }
        }
    }
}

/// `moe_route_plan` (one launch, the last block plans) leaves exactly what `moe_route` then
/// `moe_plan` leave, for top-k and hash routing, one block of tokens (no arrival count) and
/// several, and again on a second launch (its arrival counter back at zero).
#[test]
fn fused_route_plan_equals_route_then_plan() {
    use crate::device::cuda::launch::{self as k, PlanOut, RouteArgs};
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(31);
    let (e, kk) = (256usize, 6usize);
    let done = g.zeros(4).unwrap();
    for (t, hash) in [
        (1usize, false),
        (5, true),
        (16, false),
        (32, false),
        (33, false),
        (100, false),
        (40, true),
    ] {
        let logits = g.upload(&randn(&mut rng, t * e, 1.0)).unwrap();
        let bias = g.upload(&randn(&mut rng, e, 0.1)).unwrap();
        let tid2eid: Vec<i32> = (0..64 * kk)
            .map(|j| ((j * 7 + j / kk) % e) as i32)
            .collect();
        let tid2eid = g.upload(&tid2eid).unwrap();
        let toks: Vec<i32> = (0..t).map(|j| (j * 13 % 64) as i32).collect();
        let toks = g.upload(&toks).unwrap();
        // Two sets of outputs, poisoned: route + plan, then the fused launch.
        let sets: Vec<Vec<crate::device::cuda::gpu::DevBuf>> = (0..2)
            .map(|_| {
                [t * kk, t * kk, e + 1, t * kk, t * kk, t * kk, e + 1]
                    .iter()
                    .map(|&n| super::poisoned(&g, n * 4))
                    .collect()
            })
            .collect();
        let args = |s: &[crate::device::cuda::gpu::DevBuf]| {
            (
                RouteArgs {
                    logits: logits.ptr(),
                    experts: e,
                    scoring: 0,
                    bias: if hash { 0 } else { bias.ptr() },
                    tid2eid: if hash { tid2eid.ptr() } else { 0 },
                    tokens: toks.ptr(),
                    k: kk,
                    scaling: 1.5,
                    norm_topk: true,
                    ids: s[0].ptr(),
                    wts: s[1].ptr(),
                },
                PlanOut {
                    offsets: s[2].ptr(),
                    tok_of: s[3].ptr(),
                    wt_of: s[4].ptr(),
                    slot_of: s[5].ptr(),
                    act_list: s[6].ptr(),
                },
            )
        };
        let (r, p) = args(&sets[0]);
        k::moe_route(&g, r, t).unwrap();
        let (ids, wts) = (r.ids, r.wts);
        k::moe_plan(
            &g,
            ids,
            wts,
            t * kk,
            kk,
            e,
            p.offsets,
            p.tok_of,
            p.wt_of,
            p.slot_of,
            p.act_list,
        )
        .unwrap();
        let read = |s: &[crate::device::cuda::gpu::DevBuf]| -> Vec<Vec<u32>> {
            s.iter()
                .zip([t * kk, t * kk, e + 1, t * kk, t * kk, t * kk, e + 1])
                .map(|(b, n)| g.read::<u32>(b, 0, n).unwrap())
                .collect()
        };
        let want = read(&sets[0]);
        // act_list holds 1 + the active count entries; the rest stays poisoned in both.
        for round in 0..2 {
            let (r, p) = args(&sets[1]);
            k::moe_route_plan(&g, r, p, done.ptr(), t).unwrap();
            let got = read(&sets[1]);
            for (i, name) in [
                "ids", "wts", "offsets", "tok_of", "wt_of", "slot_of", "act_list",
            ]
            .iter()
            .enumerate()
            {
                assert_eq!(
                    got[i], want[i],
                    "{name}: t={t} hash={hash} round {round}: fused differs"
                );
            }
            assert_eq!(
                g.read::<u32>(&done, 0, 1).unwrap(),
                vec![0],
                "counter reset"
            );
        }
        println!("route + plan fused = separate: t={t} hash={hash}");
    }
}
