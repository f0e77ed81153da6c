//! CSV / TSV loader: one document per data row, streamed with the `csv` crate.
//!
//! The header row names the columns. A row's text is its text columns (every column but
//! the id column when none are configured) as `column: value` lines; the other columns
//! become metadata. `.tsv` files are tab-separated and unquoted (a `"` is an ordinary
//! character, as in IANA TSV).

use std::collections::BTreeMap;
use std::io::Read;

use ::csv::{ByteRecord, ErrorKind, ReaderBuilder};
use neuralcore_core::text::DocBuilder;

use super::{LoadError, LoadReport, LoadedDoc, Loader, Sink, SourceInput, SNIFF_BYTES};

/// Reads `.csv` and `.tsv` files.
pub struct CsvLoader;

impl Loader for CsvLoader {
    fn name(&self) -> &'static str {
        "csv"
    }

    fn extensions(&self) -> &'static [&'static str] {
        &["csv", "tsv"]
    }

    fn load(&self, input: &SourceInput<'_>, sink: &mut Sink<'_>) -> Result<LoadReport, LoadError> {
        let mut report = LoadReport::default();
        let options = input.options;
        sniff(input.path)?;

        let tsv = input
            .path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("tsv"));
        let delimiter = if tsv {
            b'\t'
        } else {
            let c = options.csv_delimiter;
            if !c.is_ascii() || matches!(c, '\n' | '\r' | '"') {
                return Err(LoadError::Parse(format!(
                    "CSV delimiter {c:?} is not usable (one ASCII character other than a quote or line break)"
                )));
            }
            c as u8
        };

        let mut reader = ReaderBuilder::new()
            .has_headers(true)
            .flexible(false)
            .delimiter(delimiter)
            .quoting(!tsv)
            .from_path(input.path)
            .map_err(|e| LoadError::Io(e.to_string()))?;

        let header = reader.byte_headers().map_err(csv_error)?.clone();
        if header.is_empty() || header.iter().all(|f| f.iter().all(u8::is_ascii_whitespace)) {
            return Err(LoadError::Empty);
        }
        let names = header
            .iter()
            .enumerate()
            .map(|(i, f)| match std::str::from_utf8(f) {
                Ok(s) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
                Ok(_) => Ok(format!("column {}", i + 1)),
                Err(_) => Err(LoadError::Malformed {
                    line: header.position().map_or(1, |p| p.line()),
                    reason: format!("invalid UTF-8 in the name of column {}", i + 1),
                }),
            })
            .collect::<Result<Vec<String>, LoadError>>()?;

        let columns = Columns::resolve(&names, input)?;
        let mut record = ByteRecord::new();
        let mut row = 0u64;
        let mut produced = 0u64;
        let mut textless = 0u64;
        while reader.read_byte_record(&mut record).map_err(csv_error)? {
            row += 1;
            let line = record.position().map_or(row + 1, |p| p.line());
            let values = record
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    std::str::from_utf8(f).map_err(|_| LoadError::Malformed {
                        line,
                        reason: format!("invalid UTF-8 in column `{}`", names[i]),
                    })
                })
                .collect::<Result<Vec<&str>, LoadError>>()?;

            let mut b = DocBuilder::new();
            for &i in &columns.text {
                let value = values[i].trim();
                if !value.is_empty() {
                    b.push_text(&format!("{}: {value}", names[i]));
                }
            }
            if b.is_empty() {
                textless += 1;
                continue;
            }
            let (text, sections) = b.finish();

            let non_empty = |i: Option<usize>| {
                i.map(|i| values[i].split_whitespace().collect::<Vec<_>>().join(" "))
                    .filter(|v| !v.is_empty())
            };
            let title = non_empty(columns.title)
                .unwrap_or_else(|| format!("{} row {row}", input.default_title));
            let external_id = non_empty(columns.id);
            let metadata = (0..names.len())
                .filter(|i| !columns.text.contains(i) && !values[*i].trim().is_empty())
                .map(|i| {
                    (
                        names[i].clone(),
                        serde_json::Value::String(values[i].trim().to_owned()),
                    )
                })
                .collect::<BTreeMap<_, _>>();

            sink(LoadedDoc {
                title,
                text,
                sections,
                metadata,
                external_id,
                locator: Some(format!("row {row}")),
            })?;
            produced += 1;
        }
        if textless > 0 {
            report.warnings.push(format!(
                "{textless} row{} without text skipped",
                if textless == 1 { "" } else { "s" }
            ));
        }
        if produced == 0 {
            return Err(LoadError::Empty);
        }
        Ok(report)
    }
}

/// Column indices a file's rows are read with.
#[derive(Debug)]
struct Columns {
    text: Vec<usize>,
    title: Option<usize>,
    id: Option<usize>,
}

impl Columns {
    fn resolve(names: &[String], input: &SourceInput<'_>) -> Result<Self, LoadError> {
        let options = input.options;
        let find = |wanted: &str| {
            names
                .iter()
                .position(|n| n == wanted)
                .or_else(|| names.iter().position(|n| n.eq_ignore_ascii_case(wanted)))
        };
        let require = |what: &str, wanted: &str| {
            find(wanted).ok_or_else(|| {
                LoadError::Parse(format!(
                    "{what} column `{wanted}` is not in the header (columns: {})",
                    names.join(", ")
                ))
            })
        };
        let id = match &options.csv_id_column {
            Some(c) => Some(require("id", c)?),
            None => find("id").or_else(|| find("_id")),
        };
        let title = match &options.csv_title_column {
            Some(c) => Some(require("title", c)?),
            None => find("title"),
        };
        let text = if options.csv_text_columns.is_empty() {
            (0..names.len()).filter(|i| Some(*i) != id).collect()
        } else {
            options
                .csv_text_columns
                .iter()
                .map(|c| require("text", c))
                .collect::<Result<Vec<_>, _>>()?
        };
        Ok(Columns { text, title, id })
    }
}

/// Refuse binary files (NUL in the first bytes) and empty ones before parsing.
fn sniff(path: &std::path::Path) -> Result<(), LoadError> {
    let file = super::open_file(path)?;
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    file.take(SNIFF_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(|e| LoadError::Io(e.to_string()))?;
    if head.contains(&0) {
        return Err(LoadError::Binary);
    }
    if head.iter().all(u8::is_ascii_whitespace) && head.len() < SNIFF_BYTES {
        return Err(LoadError::Empty);
    }
    Ok(())
}

fn csv_error(e: ::csv::Error) -> LoadError {
    let line = e.position().map(|p| p.line());
    let message = e.to_string();
    match e.into_kind() {
        ErrorKind::Io(e) => LoadError::Io(e.to_string()),
        ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => LoadError::Malformed {
            line: line.unwrap_or(0),
            reason: format!(
                "row has {len} field{}, the header has {expected_len}",
                if len == 1 { "" } else { "s" }
            ),
        },
        ErrorKind::Utf8 { err, .. } => LoadError::Malformed {
            line: line.unwrap_or(0),
            reason: format!("invalid UTF-8 in field {}", err.field() + 1),
        },
        _ => LoadError::Parse(message),
    }
}

#[cfg(test)]
mod tests {
    use super::super::LoaderOptions;
    use super::*;
    use serde_json::json;

    type Loaded = Result<(Vec<LoadedDoc>, LoadReport), LoadError>;

    fn run(name: &str, bytes: &[u8], options: &LoaderOptions) -> Loaded {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let input = SourceInput {
            path: &path,
            default_title: "table",
            options,
        };
        let mut docs = Vec::new();
        let report = CsvLoader.load(&input, &mut |d| {
            docs.push(d);
            Ok(())
        })?;
        Ok((docs, report))
    }

    fn csv(src: &str) -> Loaded {
        run("t.csv", src.as_bytes(), &LoaderOptions::default())
    }

    #[test]
    fn rows_become_documents() {
        let (docs, report) = csv("\u{feff}id,Title,body,year\r\n\
             7,First post,\"Hello, world.\nSecond line.\",2020\r\n\
             8,,Just a body,\r\n")
        .unwrap();
        assert!(report.warnings.is_empty());
        assert_eq!(docs.len(), 2);
        let d = &docs[0];
        assert_eq!(d.title, "First post");
        assert_eq!(d.external_id.as_deref(), Some("7"));
        assert_eq!(d.locator.as_deref(), Some("row 1"));
        assert_eq!(
            d.text,
            "Title: First post\nbody: Hello, world.\nSecond line.\nyear: 2020"
        );
        // The id column is the id, not text; non-text columns are metadata.
        assert_eq!(d.metadata, BTreeMap::from([("id".to_string(), json!("7"))]));
        assert_eq!(docs[1].title, "table row 2");
        assert_eq!(docs[1].text, "body: Just a body");
        assert_eq!(docs[1].locator.as_deref(), Some("row 2"));
    }

    #[test]
    fn configured_columns_and_delimiter() {
        let options = LoaderOptions {
            csv_text_columns: vec!["abstract".into(), "Body".into()],
            csv_id_column: Some("doc".into()),
            csv_title_column: Some("headline".into()),
            csv_delimiter: ';',
            ..LoaderOptions::default()
        };
        let (docs, _) = run(
            "t.csv",
            b"doc;headline;abstract;body;lang\nD1;Big news;Short.;Long text;en\nD2;;;;fr\n",
            &options,
        )
        .unwrap();
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].text, "abstract: Short.\nbody: Long text");
        assert_eq!(docs[0].title, "Big news");
        assert_eq!(docs[0].external_id.as_deref(), Some("D1"));
        assert_eq!(
            docs[0].metadata,
            BTreeMap::from([
                ("doc".to_string(), json!("D1")),
                ("headline".to_string(), json!("Big news")),
                ("lang".to_string(), json!("en")),
            ])
        );
        let (_, report) = run(
            "t.csv",
            b"doc;headline;abstract;body;lang\nD1;Big news;Short.;Long text;en\nD2;;;;fr\n",
            &options,
        )
        .unwrap();
        assert_eq!(
            report.warnings,
            vec!["1 row without text skipped".to_string()]
        );
    }

    #[test]
    fn tsv_uses_tabs_without_quoting() {
        let (docs, _) = run(
            "t.tsv",
            b"_id\ttext\nq1\tsays \"hi\", twice\n",
            &LoaderOptions::default(),
        )
        .unwrap();
        assert_eq!(docs[0].text, "text: says \"hi\", twice");
        assert_eq!(docs[0].external_id.as_deref(), Some("q1"));
    }

    #[test]
    fn missing_named_column_is_a_parse_error() {
        for options in [
            LoaderOptions {
                csv_text_columns: vec!["nope".into()],
                ..LoaderOptions::default()
            },
            LoaderOptions {
                csv_id_column: Some("nope".into()),
                ..LoaderOptions::default()
            },
            LoaderOptions {
                csv_title_column: Some("nope".into()),
                ..LoaderOptions::default()
            },
        ] {
            match run("t.csv", b"a,b\n1,2\n", &options) {
                Err(LoadError::Parse(m)) => {
                    assert!(m.contains("`nope`") && m.contains("a, b"), "{m}")
                }
                other => panic!("expected Parse, got {other:?}"),
            }
        }
    }

    #[test]
    fn malformed_rows_fail_the_file() {
        assert_eq!(
            csv("a,b\n1,2\n3\n4,5\n").unwrap_err(),
            LoadError::Malformed {
                line: 3,
                reason: "row has 1 field, the header has 2".into()
            }
        );
        assert_eq!(
            csv("a,b\n1,2,3\n").unwrap_err(),
            LoadError::Malformed {
                line: 2,
                reason: "row has 3 fields, the header has 2".into()
            }
        );
        assert_eq!(
            run("t.csv", b"a,b\n1,2\nx,caf\xe9\n", &LoaderOptions::default()).unwrap_err(),
            LoadError::Malformed {
                line: 3,
                reason: "invalid UTF-8 in column `b`".into()
            }
        );
        assert!(matches!(
            run("t.csv", b"a,\xff\n1,2\n", &LoaderOptions::default()),
            Err(LoadError::Malformed { line: 1, .. })
        ));
    }

    #[test]
    fn empty_binary_and_bad_delimiter() {
        assert_eq!(csv("").unwrap_err(), LoadError::Empty);
        assert_eq!(csv("  \n\n").unwrap_err(), LoadError::Empty);
        assert_eq!(csv("id,text\n").unwrap_err(), LoadError::Empty);
        assert_eq!(csv("id,text\n1,\n2,  \n").unwrap_err(), LoadError::Empty);
        assert_eq!(
            run("t.csv", b"a,b\n\x00\x01,\x02\n", &LoaderOptions::default()).unwrap_err(),
            LoadError::Binary
        );
        let options = LoaderOptions {
            csv_delimiter: '→',
            ..LoaderOptions::default()
        };
        assert!(matches!(
            run("t.csv", b"a,b\n1,2\n", &options),
            Err(LoadError::Parse(_))
        ));
    }

    #[test]
    fn no_size_limit_for_streamed_csv() {
        let tiny = LoaderOptions {
            max_file_bytes: 4,
            ..LoaderOptions::default()
        };
        let mut src = String::from("id,text\n");
        for i in 0..1000 {
            src.push_str(&format!("{i},row number {i}\n"));
        }
        let (docs, _) = run("t.csv", src.as_bytes(), &tiny).unwrap();
        assert_eq!(docs.len(), 1000);
        assert_eq!(docs[999].text, "text: row number 999");
        assert_eq!(docs[999].external_id.as_deref(), Some("999"));
        assert_eq!(docs[999].locator.as_deref(), Some("row 1000"));
    }
}
