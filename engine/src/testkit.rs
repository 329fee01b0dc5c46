//! Complete synthetic model folders: random DeepSeek-V4 weights ([`TinySpec`]) plus a byte-level
//! tokenizer (one token per byte, no merges, so any text round-trips and single tokens can end
//! inside a UTF-8 code point) and a chat template. Tests and the embedded default model use
//! these; nothing here downloads anything.

use std::path::Path;

use serde_json::{Value, json};

use crate::error::{EngineError, Result};
use crate::model::deepseek_v4::synthetic::TinySpec;

pub const BOS: &str = "<|bos|>";
/// End of a turn and of generation (id 1, the synthetic config's `eos_token_id`).
pub const EOS: &str = "<|end|>";
const SPECIALS: [&str; 5] = [BOS, EOS, "<|system|>", "<|user|>", "<|assistant|>"];

/// The chat template written next to the tokenizer.
pub const CHAT_TEMPLATE: &str = "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}";

/// Smallest vocabulary the byte-level tokenizer needs.
pub const MIN_VOCAB: usize = SPECIALS.len() + 256;

/// GPT-2's reversible byte → printable char map used by byte-level BPE.
fn byte_chars() -> Vec<char> {
    let mut printable: Vec<u32> = (33..=126).chain(161..=172).chain(174..=255).collect();
    let mut map = vec!['\0'; 256];
    for &b in &printable {
        map[b as usize] = char::from_u32(b).unwrap_or('?');
    }
    let mut extra = 0;
    for b in 0..256u32 {
        if !printable.contains(&b) {
            map[b as usize] = char::from_u32(256 + extra).unwrap_or('?');
            extra += 1;
            printable.push(b);
        }
    }
    map
}

/// The tokenizer.json of a byte-level vocabulary of exactly `vocab` ids: the specials, 256 bytes,
/// then reserved special tokens.
pub fn tokenizer_json(vocab: usize) -> Result<Value> {
    if vocab < MIN_VOCAB {
        return Err(EngineError::InvalidInput(format!(
            "a byte-level tokenizer needs a vocabulary of at least {MIN_VOCAB}, got {vocab}"
        )));
    }
    let mut model_vocab = serde_json::Map::new();
    let mut added = Vec::new();
    let special = |id: usize, content: String| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
               "rstrip": false, "normalized": false, "special": true})
    };
    for (i, s) in SPECIALS.iter().enumerate() {
        model_vocab.insert(s.to_string(), json!(i));
        added.push(special(i, s.to_string()));
    }
    for (b, c) in byte_chars().into_iter().enumerate() {
        model_vocab.insert(c.to_string(), json!(SPECIALS.len() + b));
    }
    for id in MIN_VOCAB..vocab {
        let s = format!("<|reserved_{}|>", id - MIN_VOCAB);
        model_vocab.insert(s.clone(), json!(id));
        added.push(special(id, s));
    }
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false,
                            "trim_offsets": false, "use_regex": false});
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": byte_level,
        "post_processor": null,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null,
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": model_vocab, "merges": []},
    }))
}

fn write_json(path: &Path, v: &Value) -> Result<()> {
    let text =
        serde_json::to_string_pretty(v).map_err(|e| EngineError::InvalidInput(e.to_string()))?;
    std::fs::write(path, text).map_err(|e| EngineError::io(path, e))
}

/// Writes tokenizer.json and tokenizer_config.json (with the chat template) into `dir`.
pub fn write_tokenizer(dir: &Path, vocab: usize) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| EngineError::io(dir, e))?;
    write_json(&dir.join("tokenizer.json"), &tokenizer_json(vocab)?)?;
    write_json(
        &dir.join("tokenizer_config.json"),
        &json!({"bos_token": BOS, "eos_token": EOS, "chat_template": CHAT_TEMPLATE,
                "model_max_length": 4096}),
    )
}

/// The shape used for serving tests and the default model: the default tiny layer mix with a
/// byte-level vocabulary.
pub fn serving_spec() -> TinySpec {
    TinySpec {
        vocab: MIN_VOCAB + 3,
        ..TinySpec::default()
    }
}

/// Writes a complete servable model folder: config.json, model.safetensors, tokenizer files.
pub fn write_model_dir(dir: &Path, spec: &TinySpec, seed: u64) -> Result<()> {
    spec.write(dir, seed)?;
    write_tokenizer(dir, spec.vocab)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::Tokenizer;

    #[test]
    fn byte_tokenizer_round_trips_and_has_the_model_vocab() {
        let dir = tempfile::tempdir().unwrap();
        let spec = serving_spec();
        write_tokenizer(dir.path(), spec.vocab).unwrap();
        let t = Tokenizer::from_model_dir(dir.path()).unwrap().unwrap();
        assert_eq!(t.vocab_size(), spec.vocab);
        assert_eq!(t.token_to_id(BOS), Some(0));
        assert_eq!(t.token_to_id(EOS), Some(1));
        let text = "Hi there, 1+1=2 ✓ ünïcödé\n\t";
        let ids = t.encode(text, false).unwrap();
        assert_eq!(ids.len(), text.len());
        assert_eq!(t.decode(&ids, true).unwrap(), text);
        let ids = t.encode("<|user|>hi<|end|>", false).unwrap();
        assert_eq!(
            ids,
            vec![
                3,
                SPECIALS.len() as u32 + b'h' as u32,
                SPECIALS.len() as u32 + b'i' as u32,
                1
            ]
        );
        assert!(tokenizer_json(10).is_err());
    }
}
