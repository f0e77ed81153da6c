//! Reading the QA and memory data sets' JSON with errors that name the file and the
//! JSON location (shared by `qa` and `locomo`).

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::EvalError;

/// [`EvalError::MissingFile`] unless `path` is a file.
pub(crate) fn require_file(path: &Path) -> Result<(), EvalError> {
    if path.is_file() {
        Ok(())
    } else {
        Err(EvalError::MissingFile {
            path: path.to_path_buf(),
        })
    }
}

pub(crate) fn read_json(path: &Path) -> Result<Value, EvalError> {
    require_file(path)?;
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    serde_json::from_str(text).map_err(|e| {
        let message = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        EvalError::InvalidJson {
            path: path.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: message
                .strip_suffix(&suffix)
                .unwrap_or(&message)
                .to_string(),
        }
    })
}

pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Typed access to a parsed file, with errors naming the file and the JSON location.
pub(crate) struct Doc<'a> {
    pub(crate) path: &'a Path,
}

impl Doc<'_> {
    pub(crate) fn bad(&self, at: &str, message: impl Into<String>) -> EvalError {
        EvalError::BadShape {
            path: self.path.to_path_buf(),
            at: if at.is_empty() {
                "top level".to_string()
            } else {
                at.to_string()
            },
            message: message.into(),
        }
    }

    pub(crate) fn expected(&self, at: &str, what: &str, found: &Value) -> EvalError {
        self.bad(at, format!("expected {what}, found {}", json_kind(found)))
    }

    pub(crate) fn obj<'v>(
        &self,
        v: &'v Value,
        at: &str,
    ) -> Result<&'v Map<String, Value>, EvalError> {
        v.as_object()
            .ok_or_else(|| self.expected(at, "an object", v))
    }

    pub(crate) fn field<'v>(
        &self,
        o: &'v Map<String, Value>,
        key: &str,
        at: &str,
    ) -> Result<&'v Value, EvalError> {
        o.get(key)
            .ok_or_else(|| self.bad(at, format!("missing field `{key}`")))
    }

    pub(crate) fn str<'v>(&self, v: &'v Value, at: &str) -> Result<&'v str, EvalError> {
        v.as_str().ok_or_else(|| self.expected(at, "a string", v))
    }

    pub(crate) fn arr<'v>(&self, v: &'v Value, at: &str) -> Result<&'v [Value], EvalError> {
        v.as_array()
            .map(Vec::as_slice)
            .ok_or_else(|| self.expected(at, "an array", v))
    }
}

pub(crate) fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_string()
    } else {
        format!("{at}.{key}")
    }
}

/// Up to five items, comma-separated, with "..." if there are more.
/// Up to five items, comma-separated, with "..." if there are more.
pub(crate) fn sample(items: &[String]) -> String {
    let mut s = items.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > 5 {
        s.push_str(", ...");
    }
    s
}
