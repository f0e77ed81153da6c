//! `nc-bench`: micro-benchmarks of neuralcore's keyword index, for comparison with
//! bm25s (see `bench/bm25s_bench.py` and `bench/run.sh`).
//!
//! ```text
//! nc-bench index --corpus corpus.jsonl [--reps 5]
//! nc-bench query --corpus corpus.jsonl --queries queries.jsonl [--reps 5] [--k 10]
//!                [--qrels qrels/test.tsv]
//! ```
//!
//! Both accept `--stopwords-file FILE` (one word per line, replaces the default
//! stop-word list), `--min-token-len N`, `--stemmer LANG|none` and `--no-fold` (keep
//! accents, as bm25s does), to align the
//! analyzer with another tokenizer; `query` also takes `--k1`, `--b` and `--title-weight` (default:
//! `Bm25Params::default()`). Results are JSON lines on stdout, with the analyzer and
//! BM25 settings used and `--variant LABEL` (default `default`); reading the JSON
//! files is not timed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use neuralcore_core::DocKey;
use neuralcore_index::{AnalyzerConfig, Bm25Params, IndexChunk, KeywordIndex, Stopwords};
use serde::Deserialize;
use serde_json::json;

mod agents;
mod ask;
mod cache;
mod embed_query;
mod http;
mod kernels;
mod load;
mod mcp;
mod memory;
mod million;
mod mind;
mod paraphrase;
mod replay;
mod replica;
mod vectors;
mod workload;

type Result<T> = std::result::Result<T, String>;

/// The same allocator as the `neuralcore` binary, so timings match it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "usage:
  nc-bench embed --corpus FILE --model-dir DIR [-n 2000] [--reps N] [--isa all|LIST]
  nc-bench embed-query --queries FILE --model-dir DIR [-n 300] [--warm 20] [--isa all|LIST]
                       [--query-weights f32,bf16,int8] [--split on,off]
  nc-bench isas   (the instruction sets this CPU runs, widest first)
  nc-bench kernels [--isa all|LIST] [--tokens 1,8,16,24,32,64,256] [--weights f32,bf16,int8] [--threads N]
  nc-bench vectors --data-dir DIR --queries FILE [--collection C] [--model-dir DIR]
                   [--m 16] [--ef-construction 200] [--ef 16,32,...] [--k 10] [--dump PREFIX]
  nc-bench agents-reload [-n 20] [--every-ms 100]
  nc-bench memory [--locomo FILE] [--model DIR] [--total 6000] [--pairs 1000] [--backend memory|redb|postgres] [--pg-url URL]
  nc-bench ask --data-dir DIR --queries FILE [--collection C] [--model-dir DIR] [-n 300] [--warm 20] [--trace-endpoint URL]
  nc-bench http --data-dir DIR --queries FILE [--collection C] [--model-dir DIR] [-n 300]
                [--clients 50] [--secs 60] [--ask-every 5]
  nc-bench load --data-dir DIR --queries FILE [--collection C] [-n 300] [--clients 50]
                [--secs 60] [--warmup-secs 0] [--rate RPS] [--mix 6,2,1,1] [--sample-secs 10]
                [--bin NEURALCORE]
                [--server-model-dir DIR] [--serve-args ARGS]
  nc-bench mcp --data-dir DIR --queries FILE [--collection C] [--model-dir DIR] [-n 300]
  nc-bench cache --data-dir DIR --queries FILE [--collection C] [--model-dir DIR] [-n 300]
      [--asks 30] [--redis URL] [--pg URL] [--llm URL --llm-model NAME]
  nc-bench replica --data-dir DIR --queries FILE --corpus FILE --pg URL [--collection C]
      [--model-dir DIR] [-n 300]
  nc-bench million --data-dir DIR --queries FILE [--pg URL] [--collection C] [--model-dir DIR]
      [-n 300] [--vectors 1000000] [--noise 0.02] [--mix 0.3] [--seed 19] [--ef 64,128,256]
      [--only local|pgvector]
  nc-bench paraphrase --squad FILE --model-dir DIR
  nc-bench cache-replay --data-dir DIR --queries FILE --squad FILE [--collection C] [--model-dir DIR]
      [-n 300] [--llm URL --llm-model NAME]
  nc-bench index --corpus FILE [--reps N] [ANALYZER]
  nc-bench query --corpus FILE --queries FILE [--reps N] [--k K] [--qrels FILE] [ANALYZER]
ANALYZER: [--stopwords-file FILE] [--min-token-len N] [--stemmer LANG|none]
  [--no-fold] [--variant LABEL]
  query only: [--k1 X] [--b X] [--title-weight X] (default: Bm25Params::default())";

#[derive(Deserialize)]
struct CorpusDoc {
    #[serde(rename = "_id")]
    id: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    text: String,
}

#[derive(Deserialize)]
pub(crate) struct Query {
    #[serde(rename = "_id")]
    id: String,
    pub(crate) text: String,
}

struct Opts {
    corpus: Option<PathBuf>,
    queries: Option<PathBuf>,
    qrels: Option<PathBuf>,
    reps: usize,
    k: usize,
    stopwords_file: Option<PathBuf>,
    min_token_len: usize,
    no_fold: bool,
    stemmer: Option<String>,
    bm25: Bm25Params,
    variant: String,
}

fn parse_opts(args: &[String]) -> Result<Opts> {
    let mut o = Opts {
        corpus: None,
        queries: None,
        qrels: None,
        reps: 5,
        k: 10,
        stopwords_file: None,
        min_token_len: 1,
        no_fold: false,
        stemmer: None,
        bm25: Bm25Params::default(),
        variant: "default".into(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs a value"))
        };
        let num = |v: String| parse_num::<usize>(a, &v);
        match a.as_str() {
            "--corpus" => o.corpus = Some(val()?.into()),
            "--queries" => o.queries = Some(val()?.into()),
            "--qrels" => o.qrels = Some(val()?.into()),
            "--reps" => o.reps = num(val()?)?.max(1),
            "--k" => o.k = num(val()?)?.max(1),
            "--stopwords-file" => o.stopwords_file = Some(val()?.into()),
            "--min-token-len" => o.min_token_len = num(val()?)?.max(1),
            "--stemmer" => o.stemmer = Some(val()?),
            "--no-fold" => o.no_fold = true,
            "--k1" => o.bm25.k1 = parse_num(a, &val()?)?,
            "--b" => o.bm25.b = parse_num(a, &val()?)?,
            "--title-weight" => o.bm25.title_weight = parse_num(a, &val()?)?,
            "--variant" => o.variant = val()?,
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(o)
}

pub(crate) fn parse_num<T: std::str::FromStr>(arg: &str, v: &str) -> Result<T> {
    v.parse().map_err(|_| format!("{arg}: not a number: {v}"))
}

pub(crate) fn read_jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))
        })
        .collect()
}

/// BEIR qrels: query id → (corpus id → grade); the header line is skipped.
fn read_qrels(path: &Path) -> Result<HashMap<String, HashMap<String, i64>>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut out: HashMap<String, HashMap<String, i64>> = HashMap::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() < 3 {
            continue;
        }
        let grade: i64 = f[2].trim().parse().unwrap_or(0);
        out.entry(f[0].to_string())
            .or_default()
            .insert(f[1].to_string(), grade);
    }
    Ok(out)
}

fn analyzer(o: &Opts) -> Result<AnalyzerConfig> {
    let mut cfg = AnalyzerConfig {
        min_token_len: o.min_token_len,
        fold_accents: !o.no_fold,
        ..AnalyzerConfig::default()
    };
    if let Some(p) = &o.stopwords_file {
        let words = std::fs::read_to_string(p)
            .map_err(|e| format!("cannot read {}: {e}", p.display()))?
            .lines()
            .map(str::trim)
            .filter(|w| !w.is_empty())
            .map(String::from)
            .collect();
        cfg.stopwords = Stopwords::List(words);
    }
    if let Some(s) = &o.stemmer {
        cfg.stemmer = s.clone();
    }
    Ok(cfg)
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn build(cfg: &AnalyzerConfig, docs: &[CorpusDoc]) -> Result<KeywordIndex> {
    let idx = KeywordIndex::in_memory(cfg).map_err(|e| e.to_string())?;
    let chunks = docs.iter().enumerate().map(|(i, d)| IndexChunk {
        doc: i as DocKey,
        ordinal: 0,
        title: &d.title,
        body: &d.text,
    });
    idx.apply(&[], chunks, 1).map_err(|e| e.to_string())?;
    Ok(idx)
}

fn bench_index(o: &Opts) -> Result<()> {
    let corpus = o.corpus.as_ref().ok_or("index needs --corpus")?;
    let docs: Vec<CorpusDoc> = read_jsonl(corpus)?;
    let cfg = analyzer(o)?;
    let mut secs = Vec::with_capacity(o.reps);
    let mut chunks = 0;
    for _ in 0..o.reps {
        let t = Instant::now();
        let idx = build(&cfg, &docs)?;
        secs.push(t.elapsed().as_secs_f64());
        chunks = idx.num_chunks();
        drop(idx);
    }
    if chunks != docs.len() as u64 {
        return Err(format!("indexed {chunks} chunks for {} docs", docs.len()));
    }
    let med = median(&secs);
    let line = json!({
        "bench": "index", "impl": "neuralcore", "variant": o.variant, "analyzer_config": cfg,
        "docs": docs.len(), "reps": o.reps, "secs": secs,
        "median_secs": med, "docs_per_s": docs.len() as f64 / med,
    });
    println!("{line}");
    Ok(())
}

/// nDCG@k with linear gains (as pytrec_eval / BEIR compute it).
fn ndcg_at(ranked: &[&str], rels: &HashMap<String, i64>, k: usize) -> f64 {
    let dcg: f64 = ranked
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, id)| *rels.get(*id).unwrap_or(&0) as f64 / (i as f64 + 2.0).log2())
        .sum();
    let mut ideal: Vec<i64> = rels.values().copied().filter(|g| *g > 0).collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let idcg: f64 = ideal
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, g)| *g as f64 / (i as f64 + 2.0).log2())
        .sum();
    if idcg > 0.0 {
        dcg / idcg
    } else {
        0.0
    }
}

fn bench_query(o: &Opts) -> Result<()> {
    let corpus = o.corpus.as_ref().ok_or("query needs --corpus")?;
    let qpath = o.queries.as_ref().ok_or("query needs --queries")?;
    let docs: Vec<CorpusDoc> = read_jsonl(corpus)?;
    let queries: Vec<Query> = read_jsonl(qpath)?;
    let cfg = analyzer(o)?;
    let idx = build(&cfg, &docs)?;
    let params = o.bm25;
    // One untimed pass (warms caches), which also yields the rankings for nDCG.
    let mut ranked: Vec<Vec<DocKey>> = Vec::with_capacity(queries.len());
    for q in &queries {
        let hits = idx
            .search(&q.text, o.k, &params)
            .map_err(|e| e.to_string())?;
        ranked.push(hits.iter().map(|h| h.doc).collect());
    }
    let mut secs = Vec::with_capacity(o.reps);
    let mut total_hits = 0usize;
    for _ in 0..o.reps {
        total_hits = 0;
        let t = Instant::now();
        for q in &queries {
            let hits = idx
                .search(&q.text, o.k, &params)
                .map_err(|e| e.to_string())?;
            total_hits += hits.len();
        }
        secs.push(t.elapsed().as_secs_f64());
    }
    let med = median(&secs);
    let mut line = json!({
        "bench": "query", "impl": "neuralcore", "variant": o.variant, "analyzer_config": cfg,
        "bm25": params,
        "docs": docs.len(), "queries": queries.len(), "k": o.k, "reps": o.reps,
        "threads": 1, "secs": secs, "median_secs": med,
        "queries_per_s": queries.len() as f64 / med, "hits": total_hits,
    });
    if let Some(p) = &o.qrels {
        let qrels = read_qrels(p)?;
        let mut sum = 0.0;
        let mut n = 0usize;
        for (q, r) in queries.iter().zip(&ranked) {
            if let Some(rels) = qrels.get(&q.id) {
                let ids: Vec<&str> = r.iter().map(|d| docs[*d as usize].id.as_str()).collect();
                sum += ndcg_at(&ids, rels, 10);
                n += 1;
            }
        }
        line["ndcg@10"] = json!(if n > 0 { sum / n as f64 } else { 0.0 });
        line["judged_queries"] = json!(n);
    }
    println!("{line}");
    Ok(())
}

/// `nc-bench embed --corpus FILE --model-dir DIR [-n 2000] [--reps 1] [--isa all|LIST]`: embedding
/// throughput of the candle sentence embedder on the first N texts (title + " " + text,
/// as `bench/embed/st_throughput.py` does), after one warm-up batch. Threads: candle's
/// default (all cores; `RAYON_NUM_THREADS` limits it).
fn bench_embed(args: &[String]) -> Result<()> {
    use neuralcore_core::{Embedder, TextKind};
    let mut corpus = None;
    let mut model_dir = None;
    let mut n = 2000usize;
    let mut reps = 1usize;
    let mut isa_spec = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        match a.as_str() {
            "--isa" => isa_spec = Some(v.clone()),
            "--corpus" => corpus = Some(PathBuf::from(v)),
            "--model-dir" => model_dir = Some(PathBuf::from(v)),
            "-n" => n = parse_num(a, v)?,
            "--reps" => reps = parse_num::<usize>(a, v)?.max(1),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let corpus = corpus.ok_or("embed needs --corpus")?;
    let model_dir = model_dir.ok_or("embed needs --model-dir")?;
    let docs: Vec<CorpusDoc> = read_jsonl(&corpus)?;
    let texts: Vec<String> = docs
        .iter()
        .take(n)
        .map(|d| {
            let (t, x) = (d.title.trim(), d.text.trim());
            if t.is_empty() {
                x.to_string()
            } else {
                format!("{t} {x}")
            }
        })
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut e = neuralcore_models::SentenceEmbedder::load(&model_dir, "bench")
        .map_err(|e| e.to_string())?;
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
    for isa in embed_query::isas(isa_spec.as_deref())? {
        e.set_isa(isa).map_err(|e| e.to_string())?;
        e.embed(&refs[..refs.len().min(32)], TextKind::Document)
            .map_err(|e| e.to_string())?;
        let mut secs = Vec::new();
        let mut cpu_secs = Vec::new();
        for _ in 0..reps {
            let (t, cpu) = (Instant::now(), process_cpu_secs());
            let v = e
                .embed(&refs, TextKind::Document)
                .map_err(|e| e.to_string())?;
            secs.push(t.elapsed().as_secs_f64());
            cpu_secs.push(process_cpu_secs() - cpu);
            assert_eq!(v.len(), refs.len());
        }
        let med = median(&secs);
        println!(
            "{}",
            json!({
                "bench": "embed", "impl": "neuralcore", "isa": isa.name(),
                "cpu_isa": neuralcore_models::detected().name(),
                "model": e.model_id(), "texts": refs.len(),
                "reps": reps, "secs": secs, "median_secs": med, "texts_per_s": refs.len() as f64 / med,
                "cpu_secs": cpu_secs,
                "threads": threads, "batch_size": 32,
            })
        );
    }
    Ok(())
}

/// User + system CPU time of this process so far (Linux `/proc/self/stat`, 100 Hz
/// ticks; 0 elsewhere). On a busy machine, CPU seconds per text are steadier than
/// wall-clock throughput.
fn process_cpu_secs() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the parenthesised command name; utime and stime are 14 and 15.
            let rest = &s[s.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
            Some(ticks / 100.0)
        })
        .unwrap_or(0.0)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let run = |f: fn(&Opts) -> Result<()>| parse_opts(&args[1..]).and_then(|o| f(&o));
    let res = match cmd.as_str() {
        "index" => run(bench_index),
        "query" => run(bench_query),
        "embed" => bench_embed(&args[1..]),
        "embed-query" => embed_query::bench_embed_query(&args[1..]),
        "kernels" => kernels::bench_kernels(&args[1..]),
        "isas" => {
            let names: Vec<&str> = neuralcore_models::Isa::supported()
                .into_iter()
                .map(|i| i.name())
                .collect();
            println!("{}", names.join(" "));
            Ok(())
        }
        "vectors" => vectors::bench_vectors(&args[1..]),
        "mind" => mind::bench_mind(&args[1..]),
        "agents-reload" => agents::bench_reload(&args[1..]),
        "ask" => ask::bench_ask(&args[1..]),
        "http" => http::bench_http(&args[1..]),
        "mcp" => mcp::bench_mcp(&args[1..]),
        "load" => load::bench_load(&args[1..]),
        "cache" => cache::bench_cache(&args[1..]),
        "memory" => memory::bench_memory(&args[1..]),
        "paraphrase" => paraphrase::bench_paraphrase(&args[1..]),
        "cache-replay" => replay::bench_replay(&args[1..]),
        "replica" => replica::bench_replica(&args[1..]),
        "million" => million::bench_million(&args[1..]),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown subcommand {other}\n{USAGE}")),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nc-bench: {e}");
            ExitCode::from(1)
        }
    }
}
