//! Per-module resolution: which storage formats a [`QuantConfig`] allows for one linear module
//! (named officially, e.g. `layers.3.ffn.experts.7.w1`), and why. Config patterns may be spelled
//! officially or the transformers way (`model.layers.3.mlp.experts.7.gate_proj`, `lm_head`) and
//! may use fnmatch wildcards (`*`, `?`); a pattern matches a module if it matches any spelling.

use super::config::{Algo, Base, QuantConfig};
use super::weight::Kind;

/// What a module is, by its official name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    Embedding,
    Head,
    Router,
    /// Attention projections (wq_a, wq_b, wkv, wo_a, wo_b, indexer wq_b).
    Attention,
    /// Compressor projections (wkv, wgate) and the indexer's weights_proj.
    Compressor,
    RoutedExpert,
    SharedExpert,
    /// Anything else (MTP block projections, future modules).
    Other,
}

impl Role {
    pub fn of(module: &str) -> Role {
        if module == "embed" {
            Role::Embedding
        } else if module == "head" {
            Role::Head
        } else if module.ends_with(".ffn.gate") {
            Role::Router
        } else if module.contains(".ffn.experts.") {
            Role::RoutedExpert
        } else if module.contains(".ffn.shared_experts.") {
            Role::SharedExpert
        } else if module.contains(".compressor.") || module.ends_with(".weights_proj") {
            Role::Compressor
        } else if module.contains(".attn.") {
            Role::Attention
        } else {
            Role::Other
        }
    }
}

/// fnmatch-style match: `*` any run of characters (dots included), `?` one character.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// The transformers spelling of an official module name (the inverse of
/// `checkpoint::names::canonical_name` on module names).
pub fn hf_spelling(module: &str) -> String {
    match module {
        "embed" => return "model.embed_tokens".into(),
        "head" => return "lm_head".into(),
        _ => {}
    }
    const RULES: &[(&str, &str)] = &[
        (
            ".attn.indexer.compressor.",
            ".self_attn.compressor.indexer.",
        ),
        (
            ".attn.indexer.wq_b.",
            ".self_attn.compressor.indexer.q_b_proj.",
        ),
        (
            ".attn.indexer.weights_proj.",
            ".self_attn.compressor.indexer.scorer.weights_proj.",
        ),
        (".attn.", ".self_attn."),
        (".ffn.", ".mlp."),
        (".wgate.", ".gate_proj."),
        (".wkv.", ".kv_proj."),
        (".wq_a.", ".q_a_proj."),
        (".wq_b.", ".q_b_proj."),
        (".wo_a.", ".o_a_proj."),
        (".wo_b.", ".o_b_proj."),
        (".w1.", ".gate_proj."),
        (".w3.", ".up_proj."),
        (".w2.", ".down_proj."),
    ];
    let mut n = format!(".{module}.");
    for (from, to) in RULES {
        if n.contains(from) {
            n = n.replacen(from, to, 1);
        }
    }
    format!("model{}", &n[..n.len() - 1])
}

/// Whether a config pattern names this module, in any spelling.
pub fn pattern_matches(pattern: &str, module: &str) -> bool {
    let hf = hf_spelling(module);
    let bare = hf.strip_prefix("model.").unwrap_or(&hf);
    [module, &format!("model.{module}"), &hf, bare]
        .iter()
        .any(|s| glob(pattern, s))
}

fn first_match<'a>(patterns: &'a [String], module: &str) -> Option<&'a str> {
    patterns
        .iter()
        .find(|p| pattern_matches(p, module))
        .map(String::as_str)
}

/// The formats one module may be stored in, and the config rule that says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expect {
    pub allowed: Vec<Kind>,
    /// NVFP4 W4A4 modules must carry a static activation scale.
    pub input_scale_required: bool,
    pub why: String,
}

impl Expect {
    fn new(allowed: Vec<Kind>, why: impl Into<String>) -> Self {
        Self {
            allowed,
            input_scale_required: false,
            why: why.into(),
        }
    }

    fn algo(algo: Algo, why: String) -> Self {
        let kind = match algo {
            Algo::Nvfp4 | Algo::W4a16Nvfp4 => Kind::Nvfp4,
            Algo::Fp8 => Kind::Fp8Tensor,
        };
        Self {
            allowed: vec![kind],
            input_scale_required: algo == Algo::Nvfp4,
            why,
        }
    }
}

impl QuantConfig {
    /// The DeepSeek-style base rule (also what ModelOpt leaves unquantized).
    fn base_expect(&self, module: &str, role: Role) -> Expect {
        if self.expert_fp4 && role == Role::RoutedExpert {
            return Expect::new(vec![Kind::Mxfp4], "config.json expert_dtype `fp4`");
        }
        match &self.base {
            Base::Dense => Expect::new(vec![Kind::Dense], "no quantization config covers it"),
            Base::Fp8Block { exclude, .. } => match first_match(exclude, module) {
                Some(p) => Expect::new(
                    vec![Kind::Dense],
                    format!("quantization_config.modules_to_not_convert `{p}`"),
                ),
                None => Expect::new(
                    vec![Kind::Fp8Block, Kind::Dense],
                    "quantization_config quant_method `fp8`",
                ),
            },
        }
    }

    /// Resolves the formats allowed for `module` (official name).
    pub fn expect(&self, module: &str) -> Expect {
        let role = Role::of(module);
        if role == Role::Embedding {
            return Expect::new(vec![Kind::Dense], "embeddings are never quantized");
        }
        if let Some(mo) = &self.modelopt {
            let file = &mo.file;
            if let Some(p) = first_match(&mo.exclude, module) {
                let mut e = self.base_expect(module, role);
                e.why = format!("{file}: excluded by `{p}`; base rule: {}", e.why);
                return e;
            }
            // An entry naming the module exactly wins over wildcard entries (JSON objects carry
            // no order to break the tie otherwise).
            let is_glob = |p: &str| p.contains(['*', '?']);
            let hit = mo
                .layers
                .iter()
                .filter(|(p, _)| !is_glob(p))
                .chain(mo.layers.iter().filter(|(p, _)| is_glob(p)))
                .find(|(p, _)| pattern_matches(p, module));
            if let Some((p, algo)) = hit {
                return Expect::algo(
                    *algo,
                    format!("{file}: quantized_layers `{p}` = {}", algo.name()),
                );
            }
            match mo.algo {
                Some(algo) if role != Role::Router => {
                    return Expect::algo(algo, format!("{file}: quant_algo {}", algo.name()));
                }
                _ => {}
            }
        }
        if let Some(exclude) = &self.mxfp4 {
            if role == Role::RoutedExpert {
                return match first_match(exclude, module) {
                    Some(p) => Expect::new(
                        vec![Kind::Dense],
                        format!("quantization_config.modules_to_not_convert `{p}`"),
                    ),
                    None => Expect::new(
                        vec![Kind::Mxfp4],
                        "quantization_config quant_method `mxfp4`",
                    ),
                };
            }
            return Expect::new(
                vec![Kind::Dense],
                "quant_method `mxfp4` quantizes routed experts only",
            );
        }
        self.base_expect(module, role)
    }
}
