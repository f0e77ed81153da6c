//! What the benchmarks over a data dir share: `--data-dir DIR --queries FILE
//! [--collection C] [--model-dir DIR] [-n N]`, the data dir's config with the model
//! folder applied, and the first queries' texts of a BEIR `queries.jsonl`.

use std::path::PathBuf;

use neuralcore_engine::Config;

/// A benchmark's data dir, config, collection and queries, with the arguments of its
/// own left for it.
pub(crate) struct Workload {
    pub data_dir: PathBuf,
    pub config: Config,
    pub collection: String,
    /// `-n` (default 300).
    pub n: usize,
    queries: PathBuf,
    /// The benchmark's own `--name value` pairs, in order.
    pub rest: Vec<(String, String)>,
}

impl Workload {
    /// Read the shared arguments of `args`; the others go to [`Workload::rest`].
    pub fn parse(args: &[String]) -> Result<Workload, String> {
        let mut data_dir: Option<PathBuf> = None;
        let mut queries: Option<PathBuf> = None;
        let mut collection = String::from("default");
        let mut model_dir: Option<String> = None;
        let mut n = 300usize;
        let mut rest = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
            match a.as_str() {
                "--data-dir" => data_dir = Some(v.into()),
                "--queries" => queries = Some(v.into()),
                "--collection" => collection = v.clone(),
                "--model-dir" => model_dir = Some(v.clone()),
                "-n" => n = v.parse().map_err(|e| format!("-n: {e}"))?,
                _ => rest.push((a.clone(), v.clone())),
            }
        }
        let data_dir = data_dir.ok_or("--data-dir is required")?;
        let queries = queries.ok_or("--queries is required (BEIR queries.jsonl)")?;
        let mut config = Config::load(Some(&data_dir.join("neuralcore.toml")), std::env::vars())
            .map_err(|e| e.to_string())?;
        if let Some(m) = model_dir {
            config.embedding.model_dir = m;
        }
        Ok(Workload {
            data_dir,
            config,
            collection,
            n,
            queries,
            rest,
        })
    }

    /// The data dir's config for the cache benchmarks: the hot tier in process over the
    /// embedded cold tier, the answer cache on, and the LLM at `llm` (URL, model) if any.
    pub fn cache_config(&self, llm: Option<(&str, &str)>) -> Config {
        let mut config = self.config.clone();
        config.cache.hot = neuralcore_engine::HotTierKind::Memory;
        config.cache.cold = neuralcore_engine::ColdTierKind::Embedded;
        config.cache.answer = true;
        if let Some((url, model)) = llm {
            config.llm.base_url = url.to_string();
            config.llm.model = model.to_string();
        }
        config
    }

    /// The texts of the first `count` queries (at least one).
    pub fn queries(&self, count: usize) -> Result<Vec<String>, String> {
        let texts: Vec<String> = std::fs::read_to_string(&self.queries)
            .map_err(|e| format!("{}: {e}", self.queries.display()))?
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v["text"].as_str().map(str::to_string))
            .take(count)
            .collect();
        if texts.is_empty() {
            return Err("no queries".into());
        }
        Ok(texts)
    }
}

/// The application core over `data_dir` with `config` and a Mind in memory, with the
/// keyword and vector indexes of `collections` loaded (so no timed call loads them).
pub(crate) fn open_app(
    data_dir: &std::path::Path,
    config: Config,
    collections: &[&str],
) -> Result<neuralcore_app::App, String> {
    let app = neuralcore_app::App::open(
        data_dir,
        config,
        neuralcore_app::OpenOptions {
            mind: Some(neuralcore_mind::Mind::memory()),
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    for c in collections {
        app.engine().keyword_index(c).map_err(|e| e.to_string())?;
        app.engine().vector_index(c).map_err(|e| e.to_string())?;
    }
    Ok(app)
}

/// `value` of `--name` parsed, for a benchmark's own arguments.
pub(crate) fn parse_arg<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    value.parse().map_err(|e| format!("{name}: {e}"))
}
