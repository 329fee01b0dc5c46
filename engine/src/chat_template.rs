//! The model folder's chat template (`tokenizer_config.json` `chat_template`, or
//! `chat_template.jinja`), rendered with minijinja. The template sees `messages`,
//! `add_generation_prompt`, `bos_token` and `eos_token` like transformers' `apply_chat_template`,
//! plus `raise_exception`. Rendering errors are the caller's fault (a 400), not the server's.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::error::{EngineError, Result};

/// A compiled chat template.
#[derive(Debug)]
pub struct ChatTemplate {
    env: minijinja::Environment<'static>,
    bos: String,
    eos: String,
}

/// One message as the template sees it.
#[derive(Debug, Clone, Serialize)]
pub struct TemplateMessage {
    pub role: String,
    pub content: String,
}

fn token_string(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => o
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    }
}

impl ChatTemplate {
    /// Loads the template from a model folder; `Ok(None)` when the folder has none.
    pub fn from_model_dir(dir: &Path) -> Result<Option<Self>> {
        let cfg_path = dir.join("tokenizer_config.json");
        let cfg: Value = match std::fs::read_to_string(&cfg_path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| {
                EngineError::config("tokenizer_config.json", "(json)", e.to_string())
            })?,
            Err(_) => Value::Null,
        };
        let jinja = dir.join("chat_template.jinja");
        let source = match cfg.get("chat_template") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                .or_else(|| list.first())
                .and_then(|t| t.get("template"))
                .and_then(Value::as_str)
                .map(str::to_string),
            _ => None,
        };
        let source = match source {
            Some(s) => s,
            None if jinja.exists() => {
                std::fs::read_to_string(&jinja).map_err(|e| EngineError::io(&jinja, e))?
            }
            None => return Ok(None),
        };
        Self::new(
            source,
            token_string(cfg.get("bos_token")),
            token_string(cfg.get("eos_token")),
        )
        .map(Some)
    }

    pub fn new(source: String, bos: String, eos: String) -> Result<Self> {
        let mut env = minijinja::Environment::new();
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    msg,
                ))
            },
        );
        env.add_template_owned("chat", source)
            .map_err(|e| EngineError::config("chat_template", "chat_template", e.to_string()))?;
        Ok(Self { env, bos, eos })
    }

    /// Renders the conversation to the prompt text.
    pub fn render(
        &self,
        messages: &[TemplateMessage],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let t = self
            .env
            .get_template("chat")
            .map_err(|e| EngineError::InvalidInput(format!("chat template: {e}")))?;
        t.render(minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos,
            eos_token => &self.eos,
        })
        .map_err(|e| EngineError::InvalidInput(format!("chat template: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_test_model_template_and_raises() {
        let dir = tempfile::tempdir().unwrap();
        crate::testkit::write_tokenizer(dir.path(), 300).unwrap();
        let t = ChatTemplate::from_model_dir(dir.path()).unwrap().unwrap();
        let msgs = [
            TemplateMessage {
                role: "system".into(),
                content: "be brief".into(),
            },
            TemplateMessage {
                role: "user".into(),
                content: "hi".into(),
            },
        ];
        let s = t.render(&msgs, true).unwrap();
        assert_eq!(
            s,
            "<|bos|><|system|>be brief<|end|><|user|>hi<|end|><|assistant|>"
        );
        let bad = ChatTemplate::new(
            "{{ raise_exception('no') }}".into(),
            String::new(),
            String::new(),
        )
        .unwrap();
        assert!(bad.render(&msgs, true).is_err());
        assert!(
            ChatTemplate::from_model_dir(tempfile::tempdir().unwrap().path())
                .unwrap()
                .is_none()
        );
    }

    /// The other two places a template may be: `chat_template.jinja` beside a
    /// tokenizer_config.json without one, and a named list in tokenizer_config.json (the
    /// `default` entry wins), which also takes precedence over the file.
    #[test]
    fn a_jinja_file_or_a_named_list_is_read() {
        let msgs = [TemplateMessage {
            role: "user".into(),
            content: "hi".into(),
        }];
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("tokenizer_config.json");
        std::fs::write(
            &cfg,
            r#"{"bos_token": {"content": "<s>"}, "eos_token": "</s>"}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("chat_template.jinja"),
            "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}\
             {% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}",
        )
        .unwrap();
        let t = ChatTemplate::from_model_dir(dir.path()).unwrap().unwrap();
        assert_eq!(t.render(&msgs, true).unwrap(), "<s>[user]hi</s>[assistant]");
        assert_eq!(t.render(&msgs, false).unwrap(), "<s>[user]hi</s>");

        let listed = serde_json::json!({"chat_template": [
            {"name": "tool_use", "template": "tools"},
            {"name": "default", "template": "n={{ messages | length }}"},
        ]});
        std::fs::write(&cfg, listed.to_string()).unwrap();
        let t = ChatTemplate::from_model_dir(dir.path()).unwrap().unwrap();
        assert_eq!(t.render(&msgs, true).unwrap(), "n=1");
    }
}
