//! Every linear module of a DeepSeek-V4 model with its official name and `[out, in]` shape
//! (model-spec §3.2), derived from the config alone. `amdahl info` surveys a checkpoint with it
//! and `amdahl quantize` plans with it; a test checks it against what the loader loads.

use crate::config::{AttnKind, ModelConfig};
use crate::quant::Role;

/// One linear module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinearModule {
    /// Official name without `.weight`.
    pub name: String,
    pub out: usize,
    pub inp: usize,
    /// Decoder layer, `None` for the embedding and the head.
    pub layer: Option<usize>,
}

impl LinearModule {
    pub fn role(&self) -> Role {
        Role::of(&self.name)
    }

    pub fn params(&self) -> usize {
        self.out * self.inp
    }
}

/// All linear modules, embedding and head first, then layer by layer.
pub fn linear_modules(c: &ModelConfig) -> Vec<LinearModule> {
    let mut v = Vec::new();
    let mut add = |name: String, out: usize, inp: usize, layer: Option<usize>| {
        v.push(LinearModule {
            name,
            out,
            inp,
            layer,
        })
    };
    let d = c.hidden_size;
    add("embed".into(), c.vocab_size, d, None);
    add("head".into(), c.vocab_size, d, None);
    for (l, kind) in c.layer_kinds.iter().enumerate() {
        let a = format!("layers.{l}.attn");
        let (h, hd) = (c.num_heads, c.head_dim);
        let at = Some(l);
        add(format!("{a}.wq_a"), c.q_lora_rank, d, at);
        add(format!("{a}.wq_b"), h * hd, c.q_lora_rank, at);
        add(format!("{a}.wkv"), hd, d, at);
        add(
            format!("{a}.wo_a"),
            c.o_groups * c.o_lora_rank,
            h * hd / c.o_groups,
            at,
        );
        add(format!("{a}.wo_b"), d, c.o_groups * c.o_lora_rank, at);
        match kind {
            AttnKind::Sliding => {}
            AttnKind::Hca { .. } => {
                add(format!("{a}.compressor.wkv"), hd, d, at);
                add(format!("{a}.compressor.wgate"), hd, d, at);
            }
            AttnKind::Csa { .. } => {
                add(format!("{a}.compressor.wkv"), 2 * hd, d, at);
                add(format!("{a}.compressor.wgate"), 2 * hd, d, at);
                let (ih, id) = (c.index_n_heads, c.index_head_dim);
                add(format!("{a}.indexer.wq_b"), ih * id, c.q_lora_rank, at);
                add(format!("{a}.indexer.weights_proj"), ih, d, at);
                add(format!("{a}.indexer.compressor.wkv"), 2 * id, d, at);
                add(format!("{a}.indexer.compressor.wgate"), 2 * id, d, at);
            }
        }
        let f = format!("layers.{l}.ffn");
        add(format!("{f}.gate"), c.n_routed_experts, d, at);
        let inter = c.moe_intermediate_size;
        for e in 0..c.n_routed_experts {
            add(format!("{f}.experts.{e}.w1"), inter, d, at);
            add(format!("{f}.experts.{e}.w3"), inter, d, at);
            add(format!("{f}.experts.{e}.w2"), d, inter, at);
        }
        if c.n_shared_experts > 0 {
            let si = c.shared_intermediate_size();
            add(format!("{f}.shared_experts.w1"), si, d, at);
            add(format!("{f}.shared_experts.w3"), si, d, at);
            add(format!("{f}.shared_experts.w2"), d, si, at);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::deepseek_v4::DeepseekV4;
    use crate::model::deepseek_v4::synthetic::TinySpec;

    #[test]
    fn the_list_is_what_the_loader_loads() {
        let dir = tempfile::tempdir().unwrap();
        TinySpec::default().write(dir.path(), 1).unwrap();
        let mut m = DeepseekV4::load(dir.path()).unwrap();
        let mut loaded: Vec<(String, usize, usize)> = Vec::new();
        m.weights.for_each_linear(&mut |name, lin| {
            // wo_a is held as o_groups row blocks; merge them back.
            match loaded.last_mut() {
                Some(last) if last.0 == name => last.1 += lin.out_features,
                _ => loaded.push((name.to_string(), lin.out_features, lin.in_features)),
            }
        });
        let listed: Vec<(String, usize, usize)> = linear_modules(&m.cfg)
            .into_iter()
            .map(|x| (x.name, x.out, x.inp))
            .collect();
        assert_eq!(loaded, listed);
    }
}
