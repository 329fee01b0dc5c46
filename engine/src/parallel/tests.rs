//! N expert-parallel CPU workers (threads with an in-memory all-reduce) give the single worker's
//! logits, on every path: batched prefill, token-by-token decode and chunks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::model::deepseek_v4::synthetic::TinySpec;
use crate::model::deepseek_v4::{DeepseekV4, LogitRows, SeqInput};
use crate::profile::{Stage, StageClock};
use crate::rng::Rng;

/// Logits of every position of `ids`, fed in `chunks`, as rank `shard.rank` of `comm`.
fn run(
    m: &DeepseekV4,
    ids: &[Vec<u32>],
    chunks: &[usize],
    ep: Option<Ep<'_>>,
) -> (Vec<Vec<f32>>, StageClock) {
    let mut states: Vec<_> = ids.iter().map(|_| m.new_state()).collect();
    let mut out = vec![Vec::new(); ids.len()];
    let mut clock = StageClock::default();
    let mut at = 0;
    for &n in chunks {
        let mut batch: Vec<SeqInput<'_>> = states
            .iter_mut()
            .zip(ids)
            .map(|(st, s)| SeqInput {
                tokens: &s[at..at + n],
                state: st,
                logits: LogitRows::All,
            })
            .collect();
        let l = m.forward_ep(&mut batch, &mut clock, ep).unwrap();
        for (o, x) in out.iter_mut().zip(l) {
            o.extend_from_slice(&x.data);
        }
        at += n;
    }
    (out, clock)
}

#[test]
fn expert_parallel_workers_give_the_single_worker_logits() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TinySpec {
        experts: 8,
        top_k: 3,
        ..TinySpec::default()
    };
    spec.write(dir.path(), 17).unwrap();
    let single = DeepseekV4::load(dir.path()).unwrap();
    let mut rng = Rng::new(5);
    let ids: Vec<Vec<u32>> = (0..3)
        .map(|_| (0..30).map(|_| rng.below(spec.vocab) as u32).collect())
        .collect();
    for chunks in [vec![30], vec![5; 6], [vec![12], vec![1; 18]].concat()] {
        let (want, _) = run(&single, &ids, &chunks, None);
        for world in [1usize, 2, 4] {
            let comm = InMemoryComm::new(world);
            let results: Vec<(Vec<Vec<f32>>, StageClock)> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..world)
                    .map(|rank| {
                        let (comm, dir, ids, chunks) = (&comm, dir.path(), &ids, &chunks);
                        s.spawn(move || {
                            let mut m = DeepseekV4::load(dir).unwrap();
                            m.retain_experts(Shard::new(rank, world));
                            run(
                                &m,
                                ids,
                                chunks,
                                Some(Ep {
                                    shard: Shard::new(rank, world),
                                    comm,
                                }),
                            )
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for (rank, (got, clock)) in results.iter().enumerate() {
                // Every rank ends with the same logits (the all-reduce leaves one sum everywhere).
                assert_eq!(
                    got, &results[0].0,
                    "rank {rank} of {world} differs from rank 0"
                );
                for (a, b) in got.iter().zip(&want) {
                    let mx = b.iter().fold(0f32, |m, v| m.max(v.abs()));
                    let d = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
                    assert!(
                        d <= 1e-5 * mx,
                        "{world} workers, chunks {chunks:?}: max|Δ| {d} vs max {mx}"
                    );
                }
                if world > 1 {
                    assert!(clock.bytes(Stage::Comm) > 0, "comm bytes not charged");
                } else {
                    assert_eq!(clock.bytes(Stage::Comm), 0);
                }
            }
        }
    }
}

#[test]
fn shards_split_the_experts_and_one_rank_adds_the_shared_expert() {
    for world in [1usize, 2, 3, 4] {
        let owners: Vec<usize> = (0..16)
            .map(|e| (0..world).filter(|&r| Shard::new(r, world).owns(e)).count())
            .collect();
        assert!(owners.iter().all(|&n| n == 1), "{world}: {owners:?}");
        assert_eq!(
            (0..world)
                .filter(|&r| Shard::new(r, world).adds_shared())
                .count(),
            1
        );
    }
}

#[test]
fn in_memory_all_reduce_sums_in_rank_order_on_every_rank() {
    let world = 3;
    let comm = InMemoryComm::new(world);
    let out: Vec<Vec<f32>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..world)
            .map(|r| {
                let comm = &comm;
                s.spawn(move || {
                    let mut v = vec![r as f32 + 1.0, 10.0 * r as f32];
                    for _ in 0..3 {
                        let mut w = v.clone();
                        comm.all_reduce_sum(r, &mut w);
                        v = w;
                    }
                    v
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // (1+2+3)·3² = 54 and (0+10+20)·9 = 270 after three rounds.
    for v in &out {
        assert_eq!(v, &vec![54.0, 270.0]);
    }
}
