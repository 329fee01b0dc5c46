//! `amdahl eval-arith`: exact-match accuracy of an arithmetic model (models/arith, trained by
//! tools/train_tiny) through our engine. Problems are drawn from the training distribution
//! (tools/train_tiny/arith.py: + and − of up to 3-digit numbers, × of up to 2-digit numbers,
//! the same op and digit-count weights) by our own seeded generator, which shares no stream with
//! the training data; each is prefixed by `--context` worked problems, so the window, the
//! compressors and the indexer are in play. Greedy decoding; a problem counts as right only if
//! the model emits exactly the answer and then the newline (its EOS).

use std::fmt::Write as _;
use std::path::PathBuf;

use amdahl_engine::model::deepseek_v4::{DeepseekV4, LogitRows, SeqInput};
use amdahl_engine::ops::sampling::argmax;
use amdahl_engine::profile::StageClock;
use amdahl_engine::rng::Rng;
use amdahl_engine::tokenizer::Tokenizer;
use anyhow::{Context, bail};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model folder (config.json + safetensors + tokenizer.json).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Number of problems.
    #[arg(long, default_value_t = 1000)]
    n: usize,
    /// Seed of the problem generator (any value: training used a different generator).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Worked problems before each question.
    #[arg(long, default_value_t = 4)]
    context: usize,
    /// Device to run on (only `cpu` exists in this build).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Sequences decoded together in one batch.
    #[arg(long, default_value_t = 64)]
    batch: usize,
}

/// The three operations, in the order of tools/train_tiny/arith.py `OPS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Add,
    Sub,
    Mul,
}

impl Op {
    const ALL: [Op; 3] = [Op::Add, Op::Sub, Op::Mul];
    /// Mixing weights of the training data.
    const WEIGHTS: [f64; 3] = [0.3, 0.3, 0.4];

    fn symbol(self) -> char {
        match self {
            Op::Add => '+',
            Op::Sub => '-',
            Op::Mul => '*',
        }
    }

    fn name(self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Sub => "sub",
            Op::Mul => "mul",
        }
    }

    /// Most digits an operand has.
    fn max_digits(self) -> u32 {
        if self == Op::Mul { 2 } else { 3 }
    }

    /// P(operand has d digits), d = 1..=max_digits.
    fn digit_weights(self) -> &'static [f64] {
        if self == Op::Mul {
            &[0.25, 0.75]
        } else {
            &[0.2, 0.3, 0.5]
        }
    }
}

/// One problem: `a op b=answer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub op: Op,
    pub a: i64,
    pub b: i64,
    /// Both operands have the operation's maximum digit count.
    pub full_width: bool,
}

impl Problem {
    pub fn answer(&self) -> i64 {
        match self.op {
            Op::Add => self.a + self.b,
            Op::Sub => self.a - self.b,
            Op::Mul => self.a * self.b,
        }
    }

    /// The question text, `17*23=`.
    pub fn question(&self) -> String {
        format!("{}{}{}=", self.a, self.op.symbol(), self.b)
    }
}

fn pick(rng: &mut Rng, weights: &[f64]) -> usize {
    let u = rng.next_f64() * weights.iter().sum::<f64>();
    let mut acc = 0.0;
    for (i, w) in weights.iter().enumerate() {
        acc += w;
        if u < acc {
            return i;
        }
    }
    weights.len() - 1
}

/// Draws an operand and reports whether it has the maximum digit count.
fn operand(rng: &mut Rng, op: Op) -> (i64, bool) {
    let digits = pick(rng, op.digit_weights()) as u32 + 1;
    let lo = if digits == 1 {
        0
    } else {
        10i64.pow(digits - 1)
    };
    let hi = 10i64.pow(digits);
    let v = lo + rng.below((hi - lo) as usize) as i64;
    (v, digits == op.max_digits())
}

/// The next problem of the stream.
pub fn draw(rng: &mut Rng) -> Problem {
    let op = Op::ALL[pick(rng, &Op::WEIGHTS)];
    let (a, fa) = operand(rng, op);
    let (b, fb) = operand(rng, op);
    Problem {
        op,
        a,
        b,
        full_width: fa && fb,
    }
}

/// Exact-match tallies: (right, total) overall and on full-width operands, per op.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    counts: [[(usize, usize); 2]; 3],
}

impl Tally {
    fn add(&mut self, p: &Problem, right: bool) {
        let i = Op::ALL.iter().position(|o| *o == p.op).unwrap_or(0);
        let mut bump = |slot: usize| {
            let c = &mut self.counts[i][slot];
            c.0 += usize::from(right);
            c.1 += 1;
        };
        bump(0);
        if p.full_width {
            bump(1);
        }
    }

    fn report(&self) -> String {
        let cell = |(r, n): (usize, usize)| {
            if n == 0 {
                format!("{:>8} {:>11}", "-", "0")
            } else {
                format!("{:>7.2}% {:>5}/{:<5}", 100.0 * r as f64 / n as f64, r, n)
            }
        };
        let mut s = format!(
            "{:<4} {:>20} {:>20}\n",
            "op", "exact match", "full-width operands"
        );
        let mut all = [(0, 0); 2];
        for (i, op) in Op::ALL.iter().enumerate() {
            let c = self.counts[i];
            let _ = writeln!(s, "{:<4} {:>20} {:>20}", op.name(), cell(c[0]), cell(c[1]));
            for k in 0..2 {
                all[k] = (all[k].0 + c[k].0, all[k].1 + c[k].1);
            }
        }
        let _ = writeln!(s, "{:<4} {:>20} {:>20}", "all", cell(all[0]), cell(all[1]));
        s
    }
}

/// Greedy continuations of `prompts`, decoded together; each stops at an EOS id or after
/// `max_tokens` tokens (the EOS is kept).
pub fn greedy_batch(
    model: &DeepseekV4,
    prompts: &[Vec<u32>],
    max_tokens: usize,
) -> anyhow::Result<Vec<Vec<u32>>> {
    let mut states: Vec<_> = prompts.iter().map(|_| model.new_state()).collect();
    let mut outs: Vec<Vec<u32>> = vec![Vec::new(); prompts.len()];
    let mut next: Vec<Vec<u32>> = prompts.to_vec();
    let mut clock = StageClock::default();
    let eos = &model.cfg.eos_token_ids;
    loop {
        let live: Vec<usize> = (0..prompts.len())
            .filter(|&i| {
                outs[i].len() < max_tokens && !outs[i].last().is_some_and(|t| eos.contains(t))
            })
            .collect();
        if live.is_empty() {
            return Ok(outs);
        }
        let logits = {
            let mut batch: Vec<SeqInput<'_>> = states
                .iter_mut()
                .zip(&next)
                .enumerate()
                .filter(|(i, _)| live.contains(i))
                .map(|(_, (state, tokens))| SeqInput {
                    tokens,
                    state,
                    logits: LogitRows::Last,
                })
                .collect();
            model.forward(&mut batch, &mut clock)?
        };
        for (&i, l) in live.iter().zip(&logits) {
            let tok = argmax(l.row(0));
            outs[i].push(tok);
            next[i] = vec![tok];
        }
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if a.device != "cpu" {
        bail!(
            "--device {}: this build runs arithmetic evaluation on the CPU only (use --device cpu)",
            a.device
        );
    }
    if a.batch == 0 {
        bail!("--batch must be > 0");
    }
    let dir = super::model_dir(a.model)?;
    let tok = Tokenizer::from_model_dir(&dir)?
        .with_context(|| format!("{} has no tokenizer.json", dir.display()))?;
    let model = DeepseekV4::load(&dir).with_context(|| format!("loading {}", dir.display()))?;
    let started = std::time::Instant::now();

    let mut rng = Rng::new(a.seed);
    let mut items: Vec<(Problem, String)> = Vec::with_capacity(a.n);
    for _ in 0..a.n {
        let mut text = String::new();
        for _ in 0..a.context {
            let w = draw(&mut rng);
            let _ = writeln!(text, "{}{}", w.question(), w.answer());
        }
        let p = draw(&mut rng);
        text.push_str(&p.question());
        items.push((p, text));
    }
    let mut prompts: Vec<(Problem, String)> = vec![(
        Problem {
            op: Op::Mul,
            a: 17,
            b: 23,
            full_width: true,
        },
        "17*23=".to_string(),
    )];
    prompts.extend(items);
    // Longest answer: sign + 4 digits, then the newline.
    let max_tokens = 6;
    let mut tally = Tally::default();
    let mut probe = String::new();
    let mut examples_wrong = Vec::new();
    for (ci, chunk) in prompts.chunks(a.batch).enumerate() {
        let ids = chunk
            .iter()
            .map(|(_, text)| tok.encode(text, false))
            .collect::<Result<Vec<_>, _>>()?;
        let outs = greedy_batch(&model, &ids, max_tokens)?;
        for (j, ((p, text), out)) in chunk.iter().zip(&outs).enumerate() {
            let got = tok.decode(out, true)?;
            let want = format!("{}\n", p.answer());
            if ci == 0 && j == 0 {
                probe = format!("{:?} -> {:?}", text, got);
                continue;
            }
            let right = got == want;
            if !right && examples_wrong.len() < 5 {
                examples_wrong.push(format!("{}{:?} (want {})", p.question(), got, p.answer()));
            }
            tally.add(p, right);
        }
    }
    println!(
        "eval-arith: {} problems, seed {}, {} worked problems of context each, greedy, device cpu, \
         model {}",
        a.n,
        a.seed,
        a.context,
        dir.display()
    );
    print!("{}", tally.report());
    println!("probe (no context): {probe}");
    if !examples_wrong.is_empty() {
        println!("some misses: {}", examples_wrong.join(", "));
    }
    println!("took {:.1}s", started.elapsed().as_secs_f64());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_follow_the_training_distribution() {
        let mut rng = Rng::new(5);
        let ps: Vec<Problem> = (0..30_000).map(|_| draw(&mut rng)).collect();
        let share = |op: Op| ps.iter().filter(|p| p.op == op).count() as f64 / ps.len() as f64;
        for (op, w) in Op::ALL.iter().zip(Op::WEIGHTS) {
            assert!((share(*op) - w).abs() < 0.02, "{op:?} share {}", share(*op));
        }
        for p in &ps {
            let max = 10i64.pow(p.op.max_digits());
            assert!((0..max).contains(&p.a) && (0..max).contains(&p.b), "{p:?}");
            let full = |v: i64| v >= max / 10;
            assert_eq!(p.full_width, full(p.a) && full(p.b), "{p:?}");
        }
        assert!(ps.iter().any(|p| p.op == Op::Sub && p.answer() < 0));
        let full_mul = ps
            .iter()
            .filter(|p| p.op == Op::Mul && p.full_width)
            .count();
        let mul = ps.iter().filter(|p| p.op == Op::Mul).count();
        let share_full = full_mul as f64 / mul as f64;
        assert!((share_full - 0.75 * 0.75).abs() < 0.03, "{share_full}");
    }

    #[test]
    fn question_format_and_answers() {
        let p = Problem {
            op: Op::Sub,
            a: 5,
            b: 9,
            full_width: false,
        };
        assert_eq!(p.question(), "5-9=");
        assert_eq!(p.answer(), -4);
        let q = Problem {
            op: Op::Mul,
            a: 17,
            b: 23,
            full_width: true,
        };
        assert_eq!((q.question().as_str(), q.answer()), ("17*23=", 391));
    }

    /// The committed model answers through our engine (the same path `serve` uses).
    #[test]
    fn committed_model_answers() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/arith");
        let tok = Tokenizer::from_model_dir(&dir).unwrap().unwrap();
        let model = DeepseekV4::load(&dir).unwrap();
        let mut rng = Rng::new(99);
        let mut texts = vec!["17*23=".to_string()];
        let problems: Vec<Problem> = (0..24).map(|_| draw(&mut rng)).collect();
        texts.extend(problems.iter().map(Problem::question));
        let ids: Vec<Vec<u32>> = texts
            .iter()
            .map(|t| tok.encode(t, false).unwrap())
            .collect();
        let outs = greedy_batch(&model, &ids, 6).unwrap();
        assert_eq!(tok.decode(&outs[0], true).unwrap(), "391\n");
        let right = problems
            .iter()
            .zip(&outs[1..])
            .filter(|(p, o)| tok.decode(o, true).unwrap() == format!("{}\n", p.answer()))
            .count();
        assert!(right >= 22, "{right}/24 right");
    }
}
