//! The syntax of an agent file: YAML front matter between two `---` lines, then a
//! markdown body. [`parse_syntax`] checks what needs no tool registry (the front matter's
//! shape, the name, the role, that there are tools); [`crate::agent::parse`] then checks
//! the tools and their parameters. This file uses nothing of the crate (only std, serde,
//! serde_yaml and thiserror), so the fuzz target `agent_def` compiles it alone, without
//! the engine behind the registry.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Roles an agent can take: the stages of the control loop.
pub const ROLES: &[&str] = &[
    "decide", "plan", "retrieve", "fuse", "rerank", "grade", "verify", "refine", "generate",
    "check", "reflect", "recall",
];

/// A definition file that cannot be used, with where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct DefError {
    /// The file.
    pub path: PathBuf,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

/// The front matter, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FrontMatter {
    pub name: String,
    #[serde(default = "yes")]
    pub enabled: bool,
    pub role: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub parameters: BTreeMap<String, serde_yaml::Value>,
    #[serde(default)]
    pub reads: Vec<String>,
    #[serde(default)]
    pub writes: Vec<String>,
}

fn yes() -> bool {
    true
}

/// A file whose syntax is right: its front matter's text (for line numbers), the front
/// matter and the body.
#[derive(Debug)]
pub(crate) struct Draft {
    pub front: String,
    pub fm: FrontMatter,
    pub body: String,
}

/// 1-based line of the first front-matter line starting with `prefix` (after spaces
/// and a list dash), counting the opening `---` as line 1.
pub(crate) fn line_of(front: &str, prefix: &str) -> Option<usize> {
    front.lines().enumerate().find_map(|(i, l)| {
        let t = l.trim_start().trim_start_matches("- ").trim_start();
        t.starts_with(prefix).then_some(i + 2)
    })
}

/// Split an agent file's text into front matter and body and check the front matter's
/// shape, name, role and tool list.
pub(crate) fn parse_syntax(path: &Path, text: &str) -> Result<Draft, DefError> {
    let err = |line: Option<usize>, message: String| DefError {
        path: path.to_path_buf(),
        line,
        message,
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return Err(err(
            Some(1),
            "an agent file starts with YAML front matter between two `---` lines".into(),
        ));
    };
    let (front, body) = match rest.find("\n---") {
        Some(i) => {
            let after = &rest[i + 4..];
            let body = after
                .strip_prefix("\r\n")
                .or_else(|| after.strip_prefix('\n'))
                .unwrap_or(after);
            (&rest[..i + 1], body)
        }
        None => {
            return Err(err(
                None,
                "the front matter is not closed by a `---` line".into(),
            ))
        }
    };
    let fm: FrontMatter = serde_yaml::from_str(front).map_err(|e| {
        let line = e.location().map(|l| l.line() + 1);
        err(line, format!("bad front matter: {e}"))
    })?;
    let valid_name = |s: &str| {
        !s.is_empty()
            && s.len() <= 64
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    };
    if !valid_name(&fm.name) {
        return Err(err(
            line_of(front, "name:"),
            format!(
                "name {:?} must be 1–64 characters of a-z, 0-9, '-' and '_'",
                fm.name
            ),
        ));
    }
    if !ROLES.contains(&fm.role.as_str()) {
        return Err(err(
            line_of(front, "role:"),
            format!("unknown role {:?} (roles: {})", fm.role, ROLES.join(", ")),
        ));
    }
    if fm.tools.is_empty() {
        return Err(err(
            line_of(front, "tools:").or(line_of(front, "role:")),
            "an agent needs at least one tool (`tools: [name, ...]`)".into(),
        ));
    }
    Ok(Draft {
        front: front.to_string(),
        fm,
        body: body.to_string(),
    })
}
