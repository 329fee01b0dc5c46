//! Incremental detokenization with stop strings, run at the edge (HTTP/WS handlers), never in the
//! step loop. Each pushed token yields the text that is now final: a token that ends inside a
//! UTF-8 code point (byte-level vocabularies) yields nothing until the code point completes, and
//! text that could be the start of a stop string is held back until it is known not to be one.
//! Decoding uses a small window of earlier tokens as context, so tokenizers whose decoders depend
//! on neighbours (leading-space markers) give the same text as decoding everything at once.

use std::sync::Arc;

use crate::error::Result;
use crate::tokenizer::Tokenizer;

/// A matched stop string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopMatch(pub String);

/// Text that became final after a push, and whether a stop string ended the output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextDelta {
    pub text: String,
    pub stop: Option<StopMatch>,
}

/// Turns a stream of token ids into UTF-8-complete text deltas.
#[derive(Debug)]
pub struct TextStream {
    tok: Arc<Tokenizer>,
    ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
    skip_special: bool,
    stops: Vec<String>,
    include_stop: bool,
    held: String,
    stopped: bool,
}

const REPLACEMENT: char = '\u{FFFD}';

impl TextStream {
    /// `stops` that are empty are ignored.
    pub fn new(
        tok: Arc<Tokenizer>,
        stops: Vec<String>,
        include_stop: bool,
        skip_special: bool,
    ) -> Self {
        Self {
            tok,
            ids: Vec::new(),
            prefix_offset: 0,
            read_offset: 0,
            skip_special,
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            include_stop,
            held: String::new(),
            stopped: false,
        }
    }

    /// Whether a stop string ended the output (later pushes yield nothing).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Adds one token.
    pub fn push(&mut self, id: u32) -> Result<TextDelta> {
        if self.stopped {
            return Ok(TextDelta::default());
        }
        self.ids.push(id);
        let before = self.tok.decode(
            &self.ids[self.prefix_offset..self.read_offset],
            self.skip_special,
        )?;
        let after = self
            .tok
            .decode(&self.ids[self.prefix_offset..], self.skip_special)?;
        if after.len() <= before.len() || after.ends_with(REPLACEMENT) {
            return Ok(TextDelta::default());
        }
        let Some(new) = after.get(before.len()..) else {
            return Ok(TextDelta::default());
        };
        let new = new.to_string();
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        Ok(self.filter_stops(new, false))
    }

    /// Flushes everything still held (an incomplete code point decodes lossily).
    pub fn finish(&mut self) -> Result<TextDelta> {
        if self.stopped {
            return Ok(TextDelta::default());
        }
        let before = self.tok.decode(
            &self.ids[self.prefix_offset..self.read_offset],
            self.skip_special,
        )?;
        let after = self
            .tok
            .decode(&self.ids[self.prefix_offset..], self.skip_special)?;
        let rest = after.get(before.len()..).unwrap_or("").to_string();
        self.prefix_offset = self.ids.len();
        self.read_offset = self.ids.len();
        Ok(self.filter_stops(rest, true))
    }

    fn filter_stops(&mut self, new: String, last: bool) -> TextDelta {
        self.held.push_str(&new);
        if self.stops.is_empty() {
            return TextDelta {
                text: std::mem::take(&mut self.held),
                stop: None,
            };
        }
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|(at, s)| (*at, std::cmp::Reverse(s.len())));
        if let Some((at, s)) = first {
            let end = if self.include_stop { at + s.len() } else { at };
            let stop = StopMatch(s.clone());
            let text = self.held[..end].to_string();
            self.held.clear();
            self.stopped = true;
            return TextDelta {
                text,
                stop: Some(stop),
            };
        }
        let hold = if last { 0 } else { self.partial_stop_len() };
        let cut = self.held.len() - hold;
        let rest = self.held.split_off(cut);
        TextDelta {
            text: std::mem::replace(&mut self.held, rest),
            stop: None,
        }
    }

    /// Length of the longest tail of `held` that is a proper prefix of some stop string.
    fn partial_stop_len(&self) -> usize {
        let mut hold = 0;
        for s in &self.stops {
            for (k, _) in s.char_indices().skip(1) {
                if k > hold && self.held.ends_with(&s[..k]) {
                    hold = k;
                }
            }
        }
        hold
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit;

    fn tok() -> Arc<Tokenizer> {
        let dir = tempfile::tempdir().unwrap();
        testkit::write_tokenizer(dir.path(), 300).unwrap();
        Arc::new(Tokenizer::from_model_dir(dir.path()).unwrap().unwrap())
    }

    fn run(ts: &mut TextStream, ids: &[u32]) -> (Vec<String>, Option<StopMatch>) {
        let mut out = Vec::new();
        for &id in ids {
            let d = ts.push(id).unwrap();
            if !d.text.is_empty() {
                out.push(d.text);
            }
            if d.stop.is_some() {
                return (out, d.stop);
            }
        }
        let d = ts.finish().unwrap();
        if !d.text.is_empty() {
            out.push(d.text);
        }
        (out, d.stop)
    }

    #[test]
    fn deltas_never_split_a_code_point_and_join_to_the_full_decode() {
        let t = tok();
        let text = "aé€😀b";
        let ids = t.encode(text, false).unwrap();
        assert_eq!(ids.len(), text.len(), "byte-level: one token per byte");
        let mut ts = TextStream::new(t.clone(), vec![], false, true);
        let (parts, stop) = run(&mut ts, &ids);
        assert_eq!(parts, vec!["a", "é", "€", "😀", "b"]);
        assert_eq!(parts.concat(), t.decode(&ids, true).unwrap());
        assert!(stop.is_none());
    }

    #[test]
    fn stop_strings_cut_the_text_even_across_tokens() {
        let t = tok();
        let ids = t.encode("hello END world", false).unwrap();
        let mut ts = TextStream::new(t.clone(), vec!["END".into()], false, true);
        let (parts, stop) = run(&mut ts, &ids);
        assert_eq!(parts.concat(), "hello ");
        assert_eq!(stop, Some(StopMatch("END".into())));
        // Nothing that could start the stop string was emitted early.
        assert!(parts.iter().all(|p| !p.contains('E')));
        let mut ts = TextStream::new(t.clone(), vec!["END".into()], true, true);
        assert_eq!(run(&mut ts, &ids).0.concat(), "hello END");
        // A held partial match that never completes is released.
        let ids = t.encode("xEN", false).unwrap();
        let mut ts = TextStream::new(t.clone(), vec!["END".into()], false, true);
        let (parts, stop) = run(&mut ts, &ids);
        assert_eq!(parts, vec!["x", "EN"]);
        assert!(stop.is_none());
    }

    #[test]
    fn special_tokens_are_skipped_and_a_cut_code_point_flushes_lossily() {
        let t = tok();
        let eos = t.token_to_id(testkit::EOS).unwrap();
        let mut ids = t.encode("ok", false).unwrap();
        ids.push(eos);
        let mut ts = TextStream::new(t.clone(), vec![], false, true);
        assert_eq!(run(&mut ts, &ids).0.concat(), "ok");
        let euro = t.encode("€", false).unwrap();
        let mut ts = TextStream::new(t.clone(), vec![], false, true);
        let (parts, _) = run(&mut ts, &euro[..2]);
        assert_eq!(parts, vec!["\u{FFFD}"]);
    }
}
