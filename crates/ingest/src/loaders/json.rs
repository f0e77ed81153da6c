//! JSON and JSONL loaders.
//!
//! A JSON file is read whole: a top-level array gives one document per element
//! (`item N`), anything else one document. A JSONL file is streamed line by line, one
//! document per line (`line N`). Each value becomes a document the same way: a BEIR-style
//! object (`_id`, `title`, `text`, `metadata`) gives its `text`; any other value is
//! flattened to one `path: value` line per leaf.

use std::collections::BTreeMap;

use neuralcore_core::text::DocBuilder;
use serde_json::Value;

use super::{read_text, LineReader, LoadError, LoadReport, LoadedDoc, Loader, Sink, SourceInput};

/// Reads `.json` files.
pub struct JsonLoader;

/// Reads `.jsonl` and `.ndjson` files.
pub struct JsonlLoader;

impl Loader for JsonLoader {
    fn name(&self) -> &'static str {
        "json"
    }

    fn extensions(&self) -> &'static [&'static str] {
        &["json"]
    }

    fn load(&self, input: &SourceInput<'_>, sink: &mut Sink<'_>) -> Result<LoadReport, LoadError> {
        let mut report = LoadReport::default();
        let source = read_text(input.path, input.options.max_file_bytes, &mut report)?;
        let value: Value =
            serde_json::from_str(&source).map_err(|e| malformed(&e, e.line() as u64))?;
        drop(source);
        let mut produced = 0usize;
        match value {
            Value::Array(items) => {
                for (i, item) in items.into_iter().enumerate() {
                    let locator = format!("item {}", i + 1);
                    if let Some(doc) = value_to_doc(item, input.default_title, Some(locator)) {
                        sink(doc)?;
                        produced += 1;
                    }
                }
            }
            other => {
                if let Some(doc) = value_to_doc(other, input.default_title, None) {
                    sink(doc)?;
                    produced += 1;
                }
            }
        }
        if produced == 0 {
            return Err(LoadError::Empty);
        }
        Ok(report)
    }
}

impl Loader for JsonlLoader {
    fn name(&self) -> &'static str {
        "jsonl"
    }

    fn extensions(&self) -> &'static [&'static str] {
        &["jsonl", "ndjson"]
    }

    fn load(&self, input: &SourceInput<'_>, sink: &mut Sink<'_>) -> Result<LoadReport, LoadError> {
        let mut report = LoadReport::default();
        let mut reader = LineReader::open(input.path)?;
        let mut produced = 0usize;
        while let Some(line) = reader.next_line()? {
            if line.trim().is_empty() {
                continue;
            }
            let n = reader.line_no;
            let value: Value = serde_json::from_str(&line).map_err(|e| malformed(&e, n))?;
            if let Some(doc) = value_to_doc(value, input.default_title, Some(format!("line {n}"))) {
                sink(doc)?;
                produced += 1;
            }
        }
        reader.finish(&mut report)?;
        if produced == 0 {
            return Err(LoadError::Empty);
        }
        Ok(report)
    }
}

/// A serde_json error as a malformed record at `line`, with its column but without the
/// "at line L column C" suffix (the line is reported separately).
fn malformed(e: &serde_json::Error, line: u64) -> LoadError {
    let message = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let reason = match message.strip_suffix(&suffix) {
        Some(m) if e.column() > 0 => format!("{m} (column {})", e.column()),
        Some(m) => m.to_owned(),
        None => message,
    };
    LoadError::Malformed { line, reason }
}

/// Title for a record without one: the default title, plus the locator when the file
/// holds several records.
fn fallback_title(default_title: &str, locator: Option<&str>) -> String {
    match locator {
        Some(l) => format!("{default_title} {l}"),
        None => default_title.to_owned(),
    }
}

fn id_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Turn one JSON value into a document; `None` when it holds no text.
fn value_to_doc(value: Value, default_title: &str, locator: Option<String>) -> Option<LoadedDoc> {
    let doc = match value {
        Value::Object(map) if matches!(map.get("text"), Some(Value::String(_))) => {
            beir_doc(map, default_title, locator.as_deref())
        }
        other => flattened_doc(other, default_title, locator.as_deref()),
    }?;
    Some(LoadedDoc { locator, ..doc })
}

/// A BEIR-style record: `text` is the text, `title` the title, `_id` the id, and every
/// other field (the entries of a `metadata` object spread out) metadata.
fn beir_doc(
    mut map: serde_json::Map<String, Value>,
    default_title: &str,
    locator: Option<&str>,
) -> Option<LoadedDoc> {
    let Some(Value::String(text)) = map.remove("text") else {
        return None;
    };
    let title = match map.remove("title") {
        Some(Value::String(t)) if !t.trim().is_empty() => {
            Some(t.split_whitespace().collect::<Vec<_>>().join(" "))
        }
        Some(Value::String(_)) | Some(Value::Null) | None => None,
        Some(other) => {
            // A non-string title is kept as metadata rather than lost.
            map.insert("title".to_owned(), other);
            None
        }
    };
    let external_id = match map.remove("_id") {
        Some(v) => match id_string(&v) {
            Some(id) => Some(id),
            None => {
                map.insert("_id".to_owned(), v);
                None
            }
        },
        None => None,
    };

    let mut b = DocBuilder::new();
    b.push_text(&text);
    if b.is_empty() {
        // Some corpora hold records with a title but an empty text: index the title.
        match &title {
            Some(t) => b.push_line(t),
            None => return None,
        }
    }
    let (text, sections) = b.finish();

    let mut metadata = BTreeMap::new();
    let mut nested = None;
    for (k, v) in map {
        if k == "metadata" && v.is_object() {
            nested = Some(v);
        } else {
            metadata.insert(k, v);
        }
    }
    if let Some(Value::Object(inner)) = nested {
        for (k, v) in inner {
            metadata.entry(k).or_insert(v);
        }
    }

    Some(LoadedDoc {
        title: title.unwrap_or_else(|| fallback_title(default_title, locator)),
        text,
        sections,
        metadata,
        external_id,
        locator: None,
    })
}

/// Any other value: one `path: value` line per non-empty leaf.
fn flattened_doc(value: Value, default_title: &str, locator: Option<&str>) -> Option<LoadedDoc> {
    let mut b = DocBuilder::new();
    flatten(&value, &mut String::new(), &mut b);
    if b.is_empty() {
        return None;
    }
    let (text, sections) = b.finish();
    let (title, external_id) = match &value {
        Value::Object(map) => {
            let title = ["title", "name"].iter().find_map(|k| match map.get(*k) {
                Some(Value::String(s)) if !s.trim().is_empty() => {
                    Some(s.split_whitespace().collect::<Vec<_>>().join(" "))
                }
                _ => None,
            });
            (title, map.get("_id").and_then(id_string))
        }
        _ => (None, None),
    };
    Some(LoadedDoc {
        title: title.unwrap_or_else(|| fallback_title(default_title, locator)),
        text,
        sections,
        metadata: BTreeMap::new(),
        external_id,
        locator: None,
    })
}

/// Write the leaves under `path` as lines. Nulls, empty strings and empty containers
/// give nothing. A bare scalar (empty path) is written without a label.
fn flatten(value: &Value, path: &mut String, b: &mut DocBuilder) {
    let leaf = |b: &mut DocBuilder, path: &str, text: &str| {
        if path.is_empty() {
            b.push_text(text);
        } else {
            // Continuation lines of a multi-line string follow the labelled first line.
            b.push_text(&format!("{path}: {text}"));
        }
    };
    match value {
        Value::Null => {}
        Value::Bool(x) => leaf(b, path, &x.to_string()),
        Value::Number(n) => leaf(b, path, &n.to_string()),
        Value::String(s) => {
            if !s.trim().is_empty() {
                leaf(b, path, s.trim());
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                flatten(item, path, b);
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
                flatten(v, path, b);
                path.truncate(len);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::LoaderOptions;
    use super::*;
    use serde_json::json;

    type Loaded = Result<(Vec<LoadedDoc>, LoadReport), LoadError>;

    fn run(loader: &dyn Loader, name: &str, bytes: &[u8], options: &LoaderOptions) -> Loaded {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let input = SourceInput {
            path: &path,
            default_title: "data",
            options,
        };
        let mut docs = Vec::new();
        let report = loader.load(&input, &mut |d| {
            docs.push(d);
            Ok(())
        })?;
        Ok((docs, report))
    }

    fn json(src: &str) -> Loaded {
        run(
            &JsonLoader,
            "data.json",
            src.as_bytes(),
            &LoaderOptions::default(),
        )
    }

    fn jsonl(src: &[u8]) -> Loaded {
        run(&JsonlLoader, "data.jsonl", src, &LoaderOptions::default())
    }

    #[test]
    fn json_array_of_beir_records() {
        let (docs, report) = json(
            r#"[
              {"_id": "d1", "title": "First", "text": "Hello\r\nworld.", "metadata": {"url": "http://x"}, "lang": "en"},
              {"_id": 42, "title": "", "text": "Second text."},
              {"_id": "d3", "text": "   "},
              {"_id": "d4", "title": "Only a title", "text": ""}
            ]"#,
        )
        .unwrap();
        assert!(report.warnings.is_empty());
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[0].title, "First");
        assert_eq!(docs[0].text, "Hello\nworld.");
        assert_eq!(docs[0].external_id.as_deref(), Some("d1"));
        assert_eq!(docs[0].locator.as_deref(), Some("item 1"));
        assert_eq!(docs[0].metadata.get("url"), Some(&json!("http://x")));
        assert_eq!(docs[0].metadata.get("lang"), Some(&json!("en")));
        assert!(!docs[0].metadata.contains_key("text"));
        assert!(!docs[0].metadata.contains_key("_id"));
        assert_eq!(docs[1].title, "data item 2");
        assert_eq!(docs[1].external_id.as_deref(), Some("42"));
        // Record 3 has no text and is skipped; record 4 falls back to its title.
        assert_eq!(docs[2].locator.as_deref(), Some("item 4"));
        assert_eq!(docs[2].text, "Only a title");
    }

    #[test]
    fn json_object_is_flattened_with_paths() {
        let (docs, _) = json(
            // Keys in sorted order: serde_json (without `preserve_order`) sorts them.
            r#"{"author": {"age": 36, "name": "Ada"}, "body": "line one\nline two", "draft": false,
                "empty": [], "name": "Report", "notes": null, "tags": ["x", "y"]}"#,
        )
        .unwrap();
        assert_eq!(docs.len(), 1);
        let d = &docs[0];
        assert_eq!(d.title, "Report");
        assert_eq!(d.locator, None);
        assert_eq!(
            d.text,
            "author.age: 36\nauthor.name: Ada\nbody: line one\nline two\ndraft: false\nname: Report\ntags[0]: x\ntags[1]: y"
        );
    }

    #[test]
    fn json_array_of_plain_values() {
        let (docs, _) =
            json(r#"["plain string", {"title": "T", "v": 1}, null, [], {"a": [[1, 2]]}]"#).unwrap();
        let summary: Vec<(&str, &str, &str)> = docs
            .iter()
            .map(|d| {
                (
                    d.title.as_str(),
                    d.text.as_str(),
                    d.locator.as_deref().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("data item 1", "plain string", "item 1"),
                ("T", "title: T\nv: 1", "item 2"),
                ("data item 5", "a[0][0]: 1\na[0][1]: 2", "item 5"),
            ]
        );
    }

    #[test]
    fn json_errors() {
        match json("{\n  \"a\": 1,\n  \"b\": ]\n}") {
            Err(LoadError::Malformed { line, reason }) => {
                assert_eq!(line, 3);
                assert!(
                    reason.contains("expected value") && reason.contains("(column 8)"),
                    "{reason}"
                );
                assert!(!reason.contains("at line"), "{reason}");
            }
            other => panic!("expected Malformed, got {other:?}"),
        }
        assert_eq!(json("[]").unwrap_err(), LoadError::Empty);
        assert_eq!(json("[null, {}, \"  \"]").unwrap_err(), LoadError::Empty);
        assert_eq!(json("").unwrap_err(), LoadError::Empty);
        assert_eq!(
            run(
                &JsonLoader,
                "a.json",
                b"{\"a\": \"\0\"}",
                &LoaderOptions::default()
            )
            .unwrap_err(),
            LoadError::Binary
        );
        let small = LoaderOptions {
            max_file_bytes: 8,
            ..LoaderOptions::default()
        };
        assert_eq!(
            run(
                &JsonLoader,
                "a.json",
                b"{\"text\": \"long enough\"}",
                &small
            )
            .unwrap_err(),
            LoadError::TooLarge { size: 23, limit: 8 }
        );
    }

    #[test]
    fn json_invalid_utf8_is_decoded_lossily() {
        let (docs, report) = run(
            &JsonLoader,
            "a.json",
            b"{\"text\": \"caf\xe9\"}",
            &LoaderOptions::default(),
        )
        .unwrap();
        assert_eq!(docs[0].text, "caf\u{fffd}");
        assert_eq!(docs[0].title, "data");
        assert_eq!(report.warnings.len(), 1);
        assert!(report.warnings[0].contains("invalid UTF-8"));
    }

    #[test]
    fn jsonl_streams_records() {
        let (docs, report) = jsonl(
            b"\xef\xbb\xbf{\"_id\": \"a\", \"title\": \"Alpha\", \"text\": \"First.\"}\r\n\
              \n\
              {\"_id\": \"b\", \"text\": \"Second.\", \"score\": 0.5}\n\
              {\"k\": {\"deep\": [true]}}\n\
              {}\n",
        )
        .unwrap();
        assert!(report.warnings.is_empty());
        assert_eq!(docs.len(), 3);
        assert_eq!(
            (docs[0].title.as_str(), docs[0].text.as_str()),
            ("Alpha", "First.")
        );
        assert_eq!(docs[0].locator.as_deref(), Some("line 1"));
        assert_eq!(docs[1].title, "data line 3");
        assert_eq!(docs[1].external_id.as_deref(), Some("b"));
        assert_eq!(docs[1].metadata.get("score"), Some(&json!(0.5)));
        assert_eq!(docs[2].text, "k.deep[0]: true");
        assert_eq!(docs[2].title, "data line 4");
    }

    #[test]
    fn jsonl_malformed_line_fails_the_file() {
        let err =
            jsonl(b"{\"text\": \"ok\"}\n\n{\"text\": oops}\n{\"text\": \"later\"}\n").unwrap_err();
        match err {
            LoadError::Malformed { line, reason } => {
                assert_eq!(line, 3);
                assert!(reason.contains("column 10"), "{reason}");
            }
            other => panic!("expected Malformed, got {other:?}"),
        }
        // A truncated last line too.
        assert!(matches!(
            jsonl(b"{\"text\": \"ok\"}\n{\"text\": \"cut"),
            Err(LoadError::Malformed { line: 2, .. })
        ));
    }

    #[test]
    fn jsonl_empty_binary_and_lossy() {
        assert_eq!(jsonl(b"").unwrap_err(), LoadError::Empty);
        assert_eq!(jsonl(b"\n  \n\n").unwrap_err(), LoadError::Empty);
        assert_eq!(jsonl(b"{}\n[]\nnull\n").unwrap_err(), LoadError::Empty);
        assert_eq!(
            jsonl(b"{\"text\": \"a\"}\n\0\0\0\n").unwrap_err(),
            LoadError::Binary
        );
        let (docs, report) = jsonl(b"{\"text\": \"ol\xe9\"}\n{\"text\": \"fine\"}\n").unwrap();
        assert_eq!(docs[0].text, "ol\u{fffd}");
        assert_eq!(docs[1].text, "fine");
        assert_eq!(
            report.warnings,
            vec!["invalid UTF-8 on 1 line: decoded lossily".to_string()]
        );
    }

    #[test]
    fn jsonl_has_no_size_limit() {
        let tiny = LoaderOptions {
            max_file_bytes: 4,
            ..LoaderOptions::default()
        };
        let (docs, _) = run(
            &JsonlLoader,
            "a.ndjson",
            b"{\"text\": \"streamed anyway\"}\n",
            &tiny,
        )
        .unwrap();
        assert_eq!(docs[0].text, "streamed anyway");
    }

    #[test]
    fn sink_errors_stop_loading() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        std::fs::write(&path, "{\"text\": \"a\"}\n{\"text\": \"b\"}\n").unwrap();
        let options = LoaderOptions::default();
        let input = SourceInput {
            path: &path,
            default_title: "a",
            options: &options,
        };
        let mut seen = 0;
        let err = JsonlLoader
            .load(&input, &mut |_| {
                seen += 1;
                Err(LoadError::Sink("full".into()))
            })
            .unwrap_err();
        assert_eq!(err, LoadError::Sink("full".into()));
        assert_eq!(seen, 1);
    }
}
