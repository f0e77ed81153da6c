//! The OpenAI chat-completions wire format: building the request body and reading
//! responses and stream chunks leniently (unknown fields ignored, nothing panics).

use serde::Serialize;
use serde_json::Value;

use crate::error::{snippet, truncate};
use crate::{ChatMessage, ChatRequest, LlmConfig, LlmError, Usage};

#[derive(Serialize)]
struct WireRequest<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    model: &'a str,
    messages: &'a [ChatMessage],
    temperature: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    stream: bool,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// The JSON body of a request.
pub(crate) fn request_body(cfg: &LlmConfig, req: &ChatRequest, stream: bool) -> Vec<u8> {
    let max_tokens = req.max_tokens.unwrap_or(cfg.max_tokens);
    let body = WireRequest {
        model: &cfg.model,
        messages: &req.messages,
        temperature: req.temperature.unwrap_or(cfg.temperature),
        max_tokens: (max_tokens > 0).then_some(max_tokens),
        stream,
        stop: &req.stop,
        stream_options: stream.then_some(StreamOptions {
            include_usage: true,
        }),
    };
    // Serializing plain structs of strings and numbers cannot fail; a non-finite
    // temperature becomes `null`, which the server rejects with a 400.
    serde_json::to_vec(&body).unwrap_or_default()
}

/// What one non-streamed response says.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Completion {
    pub(crate) text: String,
    pub(crate) usage: Option<Usage>,
    pub(crate) model: Option<String>,
    pub(crate) finish_reason: Option<String>,
}

/// Reads a non-streamed chat-completion body.
pub(crate) fn parse_completion(body: &[u8]) -> Result<Completion, LlmError> {
    let v = parse_json(body)?;
    if let Some(err) = embedded_error(&v) {
        return Err(err);
    }
    let choices = choices_of(&v, body)?;
    let choice = choices
        .first()
        .ok_or_else(|| LlmError::Malformed(format!("empty `choices` in {}", snippet(body))))?;
    let text = choice
        .get("message")
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            LlmError::Malformed(format!(
                "no `choices[0].message.content` in {}",
                snippet(body)
            ))
        })?;
    Ok(Completion {
        text: text.to_owned(),
        usage: usage_of(&v),
        model: model_of(&v),
        finish_reason: finish_reason_of(choice),
    })
}

/// What one stream chunk says.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Chunk {
    /// The chunk had a non-empty `choices` array.
    pub(crate) has_choice: bool,
    pub(crate) delta: Option<String>,
    pub(crate) usage: Option<Usage>,
    pub(crate) model: Option<String>,
    pub(crate) finish_reason: Option<String>,
}

/// Reads one `data:` payload of a stream (not `[DONE]`).
pub(crate) fn parse_chunk(data: &str) -> Result<Chunk, LlmError> {
    let v = parse_json(data.as_bytes())?;
    if let Some(err) = embedded_error(&v) {
        return Err(err);
    }
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first());
    Ok(Chunk {
        has_choice: choice.is_some(),
        delta: choice
            .and_then(|c| c.get("delta"))
            .and_then(|d| d.get("content"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        usage: usage_of(&v),
        model: model_of(&v),
        finish_reason: choice.and_then(finish_reason_of),
    })
}

fn parse_json(body: &[u8]) -> Result<Value, LlmError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(LlmError::Malformed("empty body".to_owned()));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(LlmError::Malformed(format!(
            "not a JSON object: {}",
            snippet(body)
        ))),
        Err(e) => Err(LlmError::Malformed(format!(
            "not JSON ({e}): {}",
            snippet(body)
        ))),
    }
}

fn choices_of<'a>(v: &'a Value, body: &[u8]) -> Result<&'a Vec<Value>, LlmError> {
    v.get("choices")
        .and_then(Value::as_array)
        .ok_or_else(|| LlmError::Malformed(format!("no `choices` array in {}", snippet(body))))
}

/// An `{"error": ...}` object in a 200 body or a stream chunk (vLLM, llama.cpp and OpenAI
/// send these mid-stream). Its numeric `code` becomes the status when it is one, else 500.
fn embedded_error(v: &Value) -> Option<LlmError> {
    let err = v.get("error").filter(|e| !e.is_null())?;
    let status = err
        .get("code")
        .and_then(Value::as_u64)
        .filter(|c| (400..=599).contains(c))
        .map_or(500, |c| c as u16);
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| err.to_string());
    Some(LlmError::Http {
        status,
        body: truncate(&message, 1024),
    })
}

fn usage_of(v: &Value) -> Option<Usage> {
    let u = v.get("usage")?;
    Some(Usage {
        prompt_tokens: u.get("prompt_tokens")?.as_u64()?,
        completion_tokens: u.get("completion_tokens")?.as_u64()?,
    })
}

fn model_of(v: &Value) -> Option<String> {
    v.get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .map(str::to_owned)
}

fn finish_reason_of(choice: &Value) -> Option<String> {
    choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_body_fields() {
        let cfg = LlmConfig {
            model: "m".into(),
            temperature: 0.5,
            max_tokens: 64,
            ..LlmConfig::default()
        };
        let req = ChatRequest::user("hi");
        let v: Value = serde_json::from_slice(&request_body(&cfg, &req, false)).unwrap();
        assert_eq!(v["model"], "m");
        assert_eq!(v["messages"][0]["role"], "user");
        assert_eq!(v["messages"][0]["content"], "hi");
        assert_eq!(v["temperature"], 0.5);
        assert_eq!(v["max_tokens"], 64);
        assert_eq!(v["stream"], false);
        assert!(v.get("stop").is_none() && v.get("stream_options").is_none());

        let req = ChatRequest {
            stop: vec!["\n".into()],
            ..req.with_max_tokens(0).with_temperature(1.0)
        };
        let cfg = LlmConfig {
            model: String::new(),
            ..cfg
        };
        let v: Value = serde_json::from_slice(&request_body(&cfg, &req, true)).unwrap();
        assert!(v.get("model").is_none() && v.get("max_tokens").is_none());
        assert_eq!(v["temperature"], 1.0);
        assert_eq!(v["stop"][0], "\n");
        assert_eq!(v["stream"], true);
        assert_eq!(v["stream_options"]["include_usage"], true);
    }

    #[test]
    fn completion_is_read() {
        let body = br#"{"model":"x","choices":[{"message":{"role":"assistant","content":"Paris"},
            "finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1}}"#;
        let c = parse_completion(body).unwrap();
        assert_eq!(c.text, "Paris");
        assert_eq!(c.model.as_deref(), Some("x"));
        assert_eq!(c.finish_reason.as_deref(), Some("stop"));
        assert_eq!(
            c.usage,
            Some(Usage {
                prompt_tokens: 9,
                completion_tokens: 1
            })
        );
    }

    #[test]
    fn malformed_completions_say_why() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "empty body"),
            (b"<html>oops</html>", "not JSON"),
            (b"[1]", "not a JSON object"),
            (b"{}", "no `choices`"),
            (br#"{"choices":{}}"#, "no `choices`"),
            (br#"{"choices":[]}"#, "empty `choices`"),
            (
                br#"{"choices":[{"message":{"content":null}}]}"#,
                "message.content",
            ),
            (br#"{"choices":[{"text":"x"}]}"#, "message.content"),
        ];
        for (body, want) in cases {
            match parse_completion(body) {
                Err(LlmError::Malformed(m)) => assert!(m.contains(want), "{m} vs {want}"),
                other => panic!("{body:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn embedded_errors_become_http_errors() {
        let e = parse_completion(br#"{"error":{"code":503,"message":"loading"}}"#).unwrap_err();
        assert_eq!(
            e,
            LlmError::Http {
                status: 503,
                body: "loading".into()
            }
        );
        let e = parse_chunk(r#"{"error":{"code":"bad","message":"boom"}}"#).unwrap_err();
        assert!(matches!(e, LlmError::Http { status: 500, .. }), "{e:?}");
        // `"error": null` is not an error.
        let c = parse_chunk(r#"{"error":null,"choices":[{"delta":{"content":"a"}}]}"#).unwrap();
        assert_eq!(c.delta.as_deref(), Some("a"));
    }

    #[test]
    fn chunks_are_read() {
        let c = parse_chunk(r#"{"choices":[{"delta":{"role":"assistant"}}]}"#).unwrap();
        assert!(c.has_choice && c.delta.is_none());
        let c = parse_chunk(r#"{"choices":[{"delta":{"content":"Pa"},"finish_reason":null}]}"#)
            .unwrap();
        assert_eq!(c.delta.as_deref(), Some("Pa"));
        assert_eq!(c.finish_reason, None);
        let c = parse_chunk(
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2},"model":"m"}"#,
        )
        .unwrap();
        assert!(!c.has_choice);
        assert_eq!(c.usage.map(|u| u.total()), Some(5));
        assert!(matches!(parse_chunk("nope"), Err(LlmError::Malformed(_))));
    }
}
