//! Markdown. ATX (`# Title`) and setext (`Title\n===`) headings become the section path
//! of the text under them; headings inside fenced code blocks are ignored. YAML front
//! matter (between `---` lines at the top) becomes metadata; a `title` key there, else the
//! first level-1 heading, else the file stem, is the title.

use neuralcore_core::text::DocBuilder;

use super::{read_text, LoadError, LoadReport, LoadedDoc, Loader, Sink, SourceInput};

/// Reads `.md` and `.markdown` files.
pub struct MarkdownLoader;

impl Loader for MarkdownLoader {
    fn name(&self) -> &'static str {
        "markdown"
    }

    fn extensions(&self) -> &'static [&'static str] {
        &["md", "markdown", "mdx"]
    }

    fn load(&self, input: &SourceInput<'_>, sink: &mut Sink<'_>) -> Result<LoadReport, LoadError> {
        let mut report = LoadReport::default();
        let raw = read_text(input.path, input.options.max_file_bytes, &mut report)?;
        let doc = parse(&raw, input.default_title, &mut report)?;
        sink(doc)?;
        Ok(report)
    }
}

/// Split YAML front matter from the body: `Some((yaml, body))` when the text opens with a
/// `---` line closed by a later `---` or `...` line.
pub(crate) fn split_front_matter(raw: &str) -> Option<(&str, &str)> {
    let rest = raw.strip_prefix("---")?;
    let rest = rest
        .strip_prefix("\r\n")
        .or_else(|| rest.strip_prefix('\n'))?;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        let t = line.trim_end();
        if t == "---" || t == "..." {
            return Some((&rest[..offset], &rest[offset + line.len()..]));
        }
        offset += line.len();
    }
    None
}

fn parse(raw: &str, default_title: &str, report: &mut LoadReport) -> Result<LoadedDoc, LoadError> {
    let mut metadata = std::collections::BTreeMap::new();
    let body = match split_front_matter(raw) {
        Some((yaml, body)) => {
            match serde_yaml::from_str::<serde_json::Value>(yaml) {
                Ok(serde_json::Value::Object(map)) => metadata.extend(map),
                Ok(serde_json::Value::Null) => {}
                Ok(_) => report
                    .warnings
                    .push("front matter is not a mapping: ignored".into()),
                Err(e) => report
                    .warnings
                    .push(format!("front matter is not valid YAML ({e}): ignored")),
            }
            body
        }
        None => raw,
    };
    let mut b = DocBuilder::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut first_h1: Option<String> = None;
    let mut fence: Option<String> = None;
    let lines: Vec<&str> = body.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if let Some(f) = &fence {
            if trimmed.starts_with(f.as_str()) {
                fence = None;
            }
            b.push_line(line);
            i += 1;
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = Some(trimmed[..3].to_string());
            b.push_line(line);
            i += 1;
            continue;
        }
        let heading = atx_heading(line).or_else(|| {
            let next = lines.get(i + 1)?.trim();
            if line.trim().is_empty() || line.starts_with("    ") {
                return None;
            }
            if !next.is_empty() && next.chars().all(|c| c == '=') {
                Some((1, line.trim().to_string()))
            } else if next.len() >= 2 && next.chars().all(|c| c == '-') {
                Some((2, line.trim().to_string()))
            } else {
                None
            }
        });
        if let Some((level, title)) = heading {
            let setext = atx_heading(line).is_none();
            if level == 1 && first_h1.is_none() {
                first_h1 = Some(title.clone());
            }
            while stack.last().is_some_and(|(l, _)| *l >= level) {
                stack.pop();
            }
            stack.push((level, title));
            b.end_paragraph();
            b.mark_section(stack.iter().map(|(_, t)| t.clone()).collect());
            b.push_line(line);
            if setext {
                b.push_line(lines[i + 1]);
                i += 1;
            }
            i += 1;
            continue;
        }
        b.push_line(line);
        i += 1;
    }
    if b.is_empty() {
        return Err(LoadError::Empty);
    }
    let title = metadata
        .get("title")
        .and_then(|v| v.as_str())
        .map(str::to_owned)
        .or(first_h1)
        .unwrap_or_else(|| default_title.to_string());
    let (text, sections) = b.finish();
    Ok(LoadedDoc {
        title,
        text,
        sections,
        metadata,
        external_id: None,
        locator: None,
    })
}

/// `(level, text)` of an ATX heading line.
fn atx_heading(line: &str) -> Option<(usize, String)> {
    if line.starts_with("    ") {
        return None;
    }
    let t = line.trim_start();
    let level = t.chars().take_while(|c| *c == '#').count();
    if level == 0 || level > 6 {
        return None;
    }
    let rest = &t[level..];
    if !rest.is_empty() && !rest.starts_with([' ', '\t']) {
        return None;
    }
    let text = rest.trim().trim_end_matches('#').trim().to_string();
    if text.is_empty() {
        return None;
    }
    Some((level, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_become_section_paths() {
        let mut r = LoadReport::default();
        let md = "---\ntitle: Guide\ntags: [a, b]\n---\nIntro text.\n\n# Install\n\nRun it.\n\n## Linux\n\nUse apt.\n\n```\n# not a heading\n```\n\nSetup\n-----\n\nMore.\n";
        let d = parse(md, "stem", &mut r).unwrap();
        assert_eq!(d.title, "Guide");
        assert_eq!(d.metadata["tags"], serde_json::json!(["a", "b"]));
        let sec: Vec<(String, Vec<String>)> = d
            .sections
            .iter()
            .map(|s| {
                (
                    d.text.chars().skip(s.start).take(9).collect(),
                    s.path.clone(),
                )
            })
            .collect();
        assert_eq!(
            sec[0],
            ("# Install".to_string(), vec!["Install".to_string()])
        );
        assert_eq!(sec[1].1, vec!["Install".to_string(), "Linux".to_string()]);
        assert_eq!(sec[2].1, vec!["Install".to_string(), "Setup".to_string()]);
        assert_eq!(sec.len(), 3, "fenced '# not a heading' must not count");
        assert!(d.text.starts_with("Intro text."));
    }

    #[test]
    fn bad_front_matter_warns_and_title_falls_back() {
        let mut r = LoadReport::default();
        let d = parse("---\n: : bad: [\n---\n# Real Title\nbody\n", "stem", &mut r).unwrap();
        assert_eq!(d.title, "Real Title");
        assert!(r.warnings[0].contains("front matter"));
        let d = parse("just text", "stem", &mut r).unwrap();
        assert_eq!(d.title, "stem");
        assert!(matches!(
            parse("---\na: 1\n---\n\n", "s", &mut r),
            Err(LoadError::Empty)
        ));
    }
}
