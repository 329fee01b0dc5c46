//! mHC at V4-Flash width (4 streams × 4096) and the sampler over a 129,280-token vocabulary.

use super::super::{gpu, rel_l2};
use super::randn;
use crate::device::cuda::launch::{self as k, SampleArgs};
use crate::ops::mhc::{HyperConnection, HyperHead};
use crate::ops::norm::rms_norm_rows;
use crate::rng::Rng;
use crate::tensor::Mat;

/// 13 tokens: hc_post takes them one or 4 to a block (the last block 1), hc_post_rows 8 (the
/// last block 5).
#[test]
fn hyper_connections_match_the_cpu_at_v4_width() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(4);
    let (hc, d, t) = (4usize, 4096usize, 13usize);
    let mix = (2 + hc) * hc;
    let site = HyperConnection {
        fn_w: randn(&mut rng, mix * hc * d, 0.01),
        base: randn(&mut rng, mix, 0.5),
        scale: vec![0.7, 1.3, 2.0],
        hc,
        sinkhorn_iters: 20,
        hc_eps: 1e-6,
        norm_eps: 1e-6,
    };
    let norm_w = randn(&mut rng, d, 1.0);
    let x = randn(&mut rng, t * hc * d, 1.0);
    let y = randn(&mut rng, t * d, 1.0);
    let (cmix, mut u) = site.pre(&Mat::from_vec(t, hc * d, x.clone()));
    rms_norm_rows(&mut u.data, &norm_w, 1e-6);
    let mut xp = Mat::from_vec(t, hc * d, x.clone());
    site.post(&cmix, &mut xp, &Mat::from_vec(t, d, y.clone()));

    let gh = crate::device::cuda::weights::GHc::upload(&g, &site).unwrap();
    let yb = g.upload(&y).unwrap();
    let nb = g.upload(&norm_w).unwrap();
    let mixb = super::poisoned(&g, t * (hc + hc * hc) * 4);
    let parts = super::poisoned(
        &g,
        t * amdahl_kernels::mhc::MIX_PARTS * amdahl_kernels::mhc::MIX_STRIDE * 4,
    );
    let uf = super::poisoned(&g, t * d * 4);
    let ub = super::poisoned(&g, t * d * 2);
    let (cmix2, mut u2) = site.pre(&xp);
    rms_norm_rows(&mut u2.data, &norm_w, 1e-6);
    // The device's post and comb of every token against the CPU's mixers `want`.
    let check_mix = |want: &crate::ops::mhc::HcMix, what: &str| {
        let got: Vec<f32> = g.read(&mixb, 0, t * (hc + hc * hc)).unwrap();
        for ti in 0..t {
            let gm = &got[ti * 20..(ti + 1) * 20];
            let e1 = rel_l2(&gm[..4], &want.post[ti * 4..(ti + 1) * 4]);
            let e2 = rel_l2(&gm[4..], &want.comb[ti * 16..(ti + 1) * 16]);
            assert!(
                e1 <= 1e-4 && e2 <= 1e-4,
                "{what}, token {ti}: post {e1:.2e}, comb {e2:.2e}"
            );
        }
    };
    // hc_post with one token per block, then with blocks sharing tokens (4, 4, 4 and 1).
    let mut got_x = Vec::new();
    let xb = g.upload(&x).unwrap();
    // The pre-mix of xb from partials already in `partial` (`ready` per token), or 0: its own.
    let pre = |partial: u64, ready: usize| {
        k::hc_pre(
            &g,
            xb.ptr(),
            (gh.fn_w.ptr(), gh.base.ptr(), gh.scale.ptr()),
            hc,
            d,
            1e-6,
            1e-6,
            nb.ptr(),
            mixb.ptr(),
            partial,
            ready,
            uf.ptr(),
            ub.ptr(),
            t,
        )
        .unwrap();
        k::hc_sinkhorn(&g, mixb.ptr(), hc, 20, 1e-6, t).unwrap();
    };
    use k::PostMix::{Rows, Shared, Token};
    for mode in [Token, Shared, Rows] {
        g.write(&xb, 0, &x).unwrap();
        pre(parts.ptr(), 0);
        let got_u: Vec<f32> = g.read(&uf, 0, t * d).unwrap();
        let e = rel_l2(&got_u, &u.data);
        println!("hc_pre + norm: rel l2 {e:.2e}");
        assert!(e <= 1e-4, "hc_pre: {e:.3e}");
        check_mix(&cmix, "pre-mix");
        // The post-mix also leaves the next site's mixing partials (here the same site's
        // weights); the pre-mix from them must match the CPU pre-mix of the updated streams.
        let poison_parts = super::poisoned(
            &g,
            t * amdahl_kernels::mhc::MIX_PARTS * amdahl_kernels::mhc::MIX_STRIDE * 4,
        );
        k::force_post_mix(Some(mode));
        let ready = k::post_parts(t, d);
        let posted = k::hc_post(
            &g,
            xb.ptr(),
            yb.ptr(),
            mixb.ptr(),
            hc,
            d,
            t,
            Some((gh.fn_w.ptr(), poison_parts.ptr())),
        );
        k::force_post_mix(None);
        let blocks = posted.unwrap();
        // 4096 columns: 128 parts of 32 (one token per block, or 4: 4, 4, 4, 1) or 32 of 128
        // (8 tokens per block: 8, 5).
        let (want_ready, want_blocks) = match mode {
            Token => (128, 128 * t as u64),
            Shared => (128, 128 * 4),
            Rows => (32, 32 * 2),
        };
        assert_eq!(ready, want_ready, "{mode:?} partials per token");
        assert_eq!(blocks, want_blocks, "hc_post blocks, {mode:?}");
        got_x = g.read(&xb, 0, t * hc * d).unwrap();
        let e = rel_l2(&got_x, &xp.data);
        println!("hc_post ({mode:?}): rel l2 {e:.2e}");
        assert!(e <= 1e-4, "hc_post ({mode:?}): {e:.3e}");
        pre(poison_parts.ptr(), ready);
        let got_ub: Vec<u16> = g.read(&ub, 0, t * d).unwrap();
        let got_u2: Vec<f32> = got_ub
            .iter()
            .map(|&b| f32::from_bits((b as u32) << 16))
            .collect();
        let e = rel_l2(&got_u2, &u2.data);
        println!("hc_post partials → hc_pre (bf16 out, {mode:?}): rel l2 {e:.2e}");
        assert!(e <= 4e-3, "hc_pre from post partials, bf16: {e:.3e}");
        let got_u2f: Vec<f32> = g.read(&uf, 0, t * d).unwrap();
        let e = rel_l2(&got_u2f, &u2.data);
        println!("hc_post partials → hc_pre (f32 out, {mode:?}): rel l2 {e:.2e}");
        assert!(e <= 1e-4, "hc_pre from post partials: {e:.3e}");
        check_mix(&cmix2, "pre-mix from post partials");
    }

    // The last layer's post-mix (no next site), each kernel: X' alone. The mix buffer holds
    // the second site's mixers now: put the first site's back.
    for mode in [Token, Shared, Rows] {
        let xs = g.upload(&x).unwrap();
        let mix1: Vec<f32> = (0..t)
            .flat_map(|ti| {
                let mut m = cmix.post[ti * 4..(ti + 1) * 4].to_vec();
                m.extend_from_slice(&cmix.comb[ti * 16..(ti + 1) * 16]);
                m
            })
            .collect();
        let mb1 = g.upload(&mix1).unwrap();
        k::force_post_mix(Some(mode));
        let posted = k::hc_post(&g, xs.ptr(), yb.ptr(), mb1.ptr(), hc, d, t, None);
        k::force_post_mix(None);
        posted.unwrap();
        let got: Vec<f32> = g.read(&xs, 0, t * hc * d).unwrap();
        let e = rel_l2(&got, &xp.data);
        println!("hc_post without partials ({mode:?}): rel l2 {e:.2e}");
        assert!(e <= 1e-4, "hc_post without partials ({mode:?}): {e:.3e}");
    }

    // The hyper-head collapse of selected rows, then the output norm, as bf16.
    let head = HyperHead {
        fn_w: randn(&mut rng, hc * hc * d, 0.01),
        base: randn(&mut rng, hc, 0.5),
        scale: 0.8,
        hc,
        hc_eps: 1e-6,
        norm_eps: 1e-6,
    };
    let sel: Vec<i32> = vec![3, 0, 12];
    let rows: Vec<usize> = sel.iter().map(|&r| r as usize).collect();
    let xm = Mat::from_vec(t, hc * d, got_x.clone());
    let mut want = head.collapse(&xm.gather_rows(&rows));
    rms_norm_rows(&mut want.data, &norm_w, 1e-6);
    let fw = g.upload(&head.fn_w).unwrap();
    let bw = g.upload(&head.base).unwrap();
    let selb = g.upload(&sel).unwrap();
    let out = super::poisoned(&g, sel.len() * d * 2);
    k::hc_head(
        &g,
        xb.ptr(),
        selb.ptr(),
        (fw.ptr(), bw.ptr(), 0.8),
        hc,
        d,
        1e-6,
        1e-6,
        nb.ptr(),
        parts.ptr(),
        out.ptr(),
        sel.len(),
    )
    .unwrap();
    let raw: Vec<u16> = g.read(&out, 0, sel.len() * d).unwrap();
    let got: Vec<f32> = raw
        .iter()
        .map(|&b| half::bf16::from_bits(b).to_f32())
        .collect();
    let e = rel_l2(&got, &want.data);
    println!("hc_head: rel l2 {e:.2e}");
    assert!(e <= 1e-2, "hc_head: {e:.3e}");
}

/// The reference of the device sampler: keep values >= the k-th largest (top-k), then the
/// smallest high set with mass >= p (top-p), draw by id order.
fn reference_sample(l: &[f32], temp: f32, top_k: usize, top_p: f32, u: f32, banned: &[u32]) -> u32 {
    let ok = |i: usize| !banned.contains(&(i as u32));
    let v: Vec<f64> = l.iter().map(|&x| f64::from(x / temp)).collect();
    let mut allowed: Vec<f64> = (0..v.len()).filter(|&i| ok(i)).map(|i| v[i]).collect();
    allowed.sort_by(|a, b| b.total_cmp(a));
    let mut floor = f64::NEG_INFINITY;
    if top_k > 0 && top_k < allowed.len() {
        floor = allowed[top_k - 1];
    }
    let vmax = allowed[0];
    let kept: Vec<f64> = allowed.iter().copied().filter(|&x| x >= floor).collect();
    let z: f64 = kept.iter().map(|x| (x - vmax).exp()).sum();
    if top_p < 1.0 {
        let mut acc = 0.0;
        for &x in &kept {
            acc += (x - vmax).exp();
            if acc >= f64::from(top_p) * z {
                floor = x;
                break;
            }
        }
    }
    let mass = |i: usize| {
        if ok(i) && v[i] >= floor {
            (v[i] - vmax).exp()
        } else {
            0.0
        }
    };
    let total: f64 = (0..v.len()).map(mass).sum();
    let target = f64::from(u) * total;
    let mut acc = 0.0;
    for i in 0..v.len() {
        acc += mass(i);
        if mass(i) > 0.0 && acc > target {
            return i as u32;
        }
    }
    (0..v.len()).rev().find(|&i| mass(i) > 0.0).unwrap_or(0) as u32
}

#[test]
fn sampler_matches_its_reference_and_keeps_to_the_filters() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(12);
    let v = 129_280usize;
    let cases: Vec<(f32, usize, f32, f32, Vec<u32>)> = vec![
        (0.0, 0, 1.0, 0.5, vec![]),
        (0.0, 0, 1.0, 0.5, vec![0]), // greedy with the argmax banned
        (1.0, 0, 1.0, 0.3, vec![]),
        (0.7, 50, 1.0, 0.9, vec![]),
        (1.0, 0, 0.8, 0.1, vec![]),
        (1.3, 40, 0.5, 0.77, vec![5, 6]),
        (1.0, 1, 1.0, 0.2, vec![]),
    ];
    let r = cases.len();
    let mut logits = randn(&mut rng, r * v, 2.0);
    // Make row 1's argmax id 0, so banning it matters.
    logits[v] = 50.0;
    let lb = g.upload(&logits).unwrap();
    let mut banned = vec![-1i32; r * amdahl_kernels::sample::MAX_BANNED];
    for (i, c) in cases.iter().enumerate() {
        for (j, &b) in c.4.iter().enumerate() {
            banned[i * amdahl_kernels::sample::MAX_BANNED + j] = b as i32;
        }
    }
    let temps: Vec<f32> = cases.iter().map(|c| c.0).collect();
    let tks: Vec<i32> = cases.iter().map(|c| c.1 as i32).collect();
    let tps: Vec<f32> = cases.iter().map(|c| c.2).collect();
    let us: Vec<f32> = cases.iter().map(|c| c.3).collect();
    let bufs = [
        g.upload(&temps).unwrap(),
        g.upload(&tks).unwrap(),
        g.upload(&tps).unwrap(),
        g.upload(&us).unwrap(),
        g.upload(&banned).unwrap(),
    ];
    let out = super::poisoned(&g, r * 4);
    k::sample(
        &g,
        SampleArgs {
            logits: lb.ptr(),
            vocab: v,
            temperature: bufs[0].ptr(),
            top_k: bufs[1].ptr(),
            top_p: bufs[2].ptr(),
            u: bufs[3].ptr(),
            banned: bufs[4].ptr(),
            out: out.ptr(),
        },
        r,
    )
    .unwrap();
    let got: Vec<i32> = g.read(&out, 0, r).unwrap();
    for (i, c) in cases.iter().enumerate() {
        let row = &logits[i * v..(i + 1) * v];
        let want = if c.0 <= 0.0 || c.1 == 1 {
            (0..v)
                .filter(|&j| !c.4.contains(&(j as u32)))
                .max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a)))
                .unwrap() as u32
        } else {
            reference_sample(row, c.0, c.1, c.2, c.3, &c.4)
        };
        println!(
            "sample case {i} {:?}: gpu {} reference {want}",
            &c.0, got[i]
        );
        assert_eq!(got[i] as u32, want, "case {i}");
        assert!(!c.4.contains(&(got[i] as u32)), "case {i} drew a banned id");
    }
}
