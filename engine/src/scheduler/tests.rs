//! Scheduler properties without a model: budgets, decode priority, chunking, slot accounting,
//! and a randomized simulation in which every sequence finishes with its tokens fed in order.

use super::*;
use crate::rng::Rng;

fn cfg(max_seqs: usize, max_step_tokens: usize, max_queue: usize) -> SchedulerConfig {
    SchedulerConfig {
        max_seqs,
        max_step_tokens,
        max_queue,
    }
}

/// Applies a plan as a model would: every chunk computed, sampled sequences get a token.
fn apply(s: &mut Scheduler, plan: &StepPlan) {
    for it in &plan.items {
        s.on_computed(it.seq, it.len);
        if it.sample {
            s.on_token(it.seq);
        }
    }
}

#[test]
fn prefill_is_chunked_under_the_budget_and_decodes_go_first() {
    let mut s = Scheduler::new(cfg(4, 8, 8));
    s.enqueue(1, 3).unwrap();
    let p = s.plan();
    assert_eq!(p.admitted, vec![1]);
    assert_eq!(p.items[0].len, 3);
    assert!(p.items[0].sample && !p.items[0].decode);
    apply(&mut s, &p);
    s.enqueue(2, 20).unwrap();
    // Seq 1 decodes (1 token), seq 2 gets the remaining 7 of the budget.
    let p = s.plan();
    assert_eq!(p.items.len(), 2);
    assert_eq!(
        (p.items[0].seq, p.items[0].len, p.items[0].decode),
        (1, 1, true)
    );
    assert_eq!(
        (p.items[1].seq, p.items[1].start, p.items[1].len),
        (2, 0, 7)
    );
    assert!(!p.items[1].sample);
    apply(&mut s, &p);
    let p = s.plan();
    assert_eq!(
        (p.items[1].seq, p.items[1].start, p.items[1].len),
        (2, 7, 7)
    );
    apply(&mut s, &p);
    let p = s.plan();
    assert_eq!(
        (p.items[1].seq, p.items[1].start, p.items[1].len),
        (2, 14, 6)
    );
    assert!(p.items[1].sample);
    assert_eq!(p.tokens(), 7);
}

#[test]
fn slots_bound_running_and_queue_bounds_waiting() {
    let mut s = Scheduler::new(cfg(2, 100, 2));
    assert_eq!(s.enqueue(1, 4), Ok(0));
    assert_eq!(s.enqueue(2, 4), Ok(1));
    assert_eq!(s.enqueue(3, 4), Err(Rejection::QueueFull));
    assert_eq!(s.enqueue(1, 4), Err(Rejection::Duplicate));
    assert_eq!(s.enqueue(9, 0), Err(Rejection::EmptyPrompt));
    let p = s.plan();
    assert_eq!(p.admitted, vec![1, 2]);
    assert_eq!((s.running(), s.waiting()), (2, 0));
    s.enqueue(3, 4).unwrap();
    s.enqueue(4, 4).unwrap();
    assert_eq!(s.enqueue(5, 4), Err(Rejection::QueueFull));
    apply(&mut s, &p);
    assert!(s.plan().admitted.is_empty(), "no free slot");
    assert!(s.remove(1), "seq 1 held a slot");
    assert!(!s.remove(4), "seq 4 was only queued");
    let p = s.plan();
    assert_eq!(p.admitted, vec![3]);
    assert_eq!((s.running(), s.waiting()), (2, 0));
    assert!((s.slot_usage() - 1.0).abs() < 1e-12);
    s.remove(2);
    s.remove(3);
    assert!(s.is_idle());
    assert_eq!(s.slot_usage(), 0.0);
}

#[test]
fn random_workload_feeds_every_token_once_in_order() {
    let mut rng = Rng::new(5);
    for trial in 0..20 {
        let c = cfg(1 + rng.below(6), 1 + rng.below(40), 100);
        let mut s = Scheduler::new(c);
        // seq -> (prompt_len, tokens to generate, fed so far, generated so far)
        let mut want: HashMap<SeqId, (usize, usize, usize, usize)> = HashMap::new();
        let mut next_id = 0;
        for _ in 0..400 {
            if want.len() < 12 && rng.below(3) == 0 {
                let (pl, gen_n) = (1 + rng.below(30), 1 + rng.below(10));
                s.enqueue(next_id, pl).unwrap();
                want.insert(next_id, (pl, gen_n, 0, 0));
                next_id += 1;
            }
            let plan = s.plan();
            assert!(plan.tokens() <= c.max_step_tokens, "trial {trial}: budget");
            assert!(s.running() <= c.max_seqs, "trial {trial}: slots");
            let mut seen = std::collections::HashSet::new();
            for it in &plan.items {
                assert!(seen.insert(it.seq), "a sequence appears once per step");
                let w = want.get_mut(&it.seq).unwrap();
                assert_eq!(it.start, w.2, "chunks are contiguous and in order");
                w.2 += it.len;
                s.on_computed(it.seq, it.len);
                assert_eq!(
                    it.sample,
                    w.2 == w.0 + w.3,
                    "sample exactly at the known end"
                );
                if it.sample {
                    w.3 += 1;
                    if w.3 == w.1 {
                        s.remove(it.seq);
                        want.remove(&it.seq);
                    } else {
                        s.on_token(it.seq);
                    }
                }
            }
            if !want.is_empty() && s.running() > 0 {
                assert!(!plan.items.is_empty() || c.max_step_tokens == 0);
            }
        }
        // Drain.
        for _ in 0..10_000 {
            if want.is_empty() {
                break;
            }
            let plan = s.plan();
            for it in &plan.items {
                let w = want.get_mut(&it.seq).unwrap();
                w.2 += it.len;
                s.on_computed(it.seq, it.len);
                if it.sample {
                    w.3 += 1;
                    if w.3 == w.1 {
                        s.remove(it.seq);
                        want.remove(&it.seq);
                    } else {
                        s.on_token(it.seq);
                    }
                }
            }
        }
        assert!(want.is_empty(), "trial {trial}: every sequence finished");
        assert!(s.is_idle());
        assert_eq!((s.running(), s.waiting()), (0, 0));
    }
}
