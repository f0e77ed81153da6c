//! `neuralcore memory add|graph|get|search|list|signal|link|forget|restore|sweep|audit|tiers`.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use neuralcore_engine::Engine;
use neuralcore_memory::graph::{self, Entity, EntityKind};
use neuralcore_memory::{
    now_ms, AuditEntry, Filter, Kind, MemHit, MemScope, Memory, MemorySearchOptions,
    MemorySearcher, MemoryStore, NewMemory, RelKind, Relation, Signal, Status,
};

/// Memory subcommands.
#[derive(Subcommand, Debug)]
pub enum MemoryCommand {
    /// Remember something (trust starts at memory.initial).
    Add {
        /// The text.
        text: String,
        /// fact, decision, rule, preference, procedure or episode.
        #[arg(long, default_value = "fact")]
        kind: String,
        /// Project it belongs to.
        #[arg(long, default_value = "")]
        project: String,
        /// Session it belongs to.
        #[arg(long, default_value = "")]
        session: String,
        /// Agent it belongs to.
        #[arg(long, default_value = "")]
        agent: String,
        /// Where it came from.
        #[arg(long, default_value = "user")]
        source: String,
        /// When what it says happened.
        #[arg(long)]
        occurred_at: Option<String>,
    },
    /// An entity of the knowledge graph: the memories that mention it and the entities
    /// they also mention (one hop).
    Graph {
        /// The entity's name, e.g. "Alice", or its node id (`ent:person:alice`).
        entity: String,
        /// Its kind: project, file, agent, skill, person or concept (default: every
        /// kind with that name).
        #[arg(long)]
        kind: Option<String>,
    },
    /// One memory: text, trust (decay included), status, counts, relations.
    Get {
        /// Its id.
        id: String,
    },
    /// Search active memories (BM25 + vectors, weighted by trust; superseded hidden).
    Search {
        /// The query.
        query: String,
        /// Results.
        #[arg(short, default_value_t = 10)]
        k: usize,
        /// Only this project.
        #[arg(long, default_value = "")]
        project: String,
        /// Only this session.
        #[arg(long, default_value = "")]
        session: String,
        /// Show superseded memories too (below their successors).
        #[arg(long)]
        include_superseded: bool,
    },
    /// List memories.
    List {
        /// active, archived, purged or all.
        #[arg(long, default_value = "active")]
        status: String,
        /// Only this project.
        #[arg(long, default_value = "")]
        project: String,
        /// Only this session.
        #[arg(long, default_value = "")]
        session: String,
        /// Only this kind.
        #[arg(long)]
        kind: Option<String>,
    },
    /// Send a trust signal: used, confirmed, ignored or corrected.
    Signal {
        /// The memory.
        id: String,
        /// The signal.
        signal: String,
        /// Who sends it (recorded in the audit log).
        #[arg(long, default_value = "user")]
        by: String,
        /// The question the memory answered (used, confirmed) or failed (ignored,
        /// corrected); `neuralcore feedback export` makes a training pair of it.
        #[arg(long, value_name = "QUESTION")]
        query: Option<String>,
    },
    /// Relate two nodes: FROM KIND TO, KIND one of SUPERSEDES, PARTIAL_UPDATE,
    /// RELATED_TO, CONTRADICTS, DERIVED_FROM, MENTIONS, PART_OF.
    Link {
        /// Source (a memory id, or ent:/doc:/chunk: node).
        from: String,
        /// Relation.
        kind: String,
        /// Target.
        to: String,
    },
    /// Archive a memory (left out of search; `restore` brings it back until purged).
    Forget {
        /// The memory.
        id: String,
    },
    /// Bring an archived memory back.
    Restore {
        /// The memory.
        id: String,
    },
    /// Write decay, archive low-trust memories and purge old archived ones now.
    Sweep,
    /// Why a memory has its trust: every change, by whom, when.
    Audit {
        /// The memory.
        id: String,
    },
    /// What a session would load: L0 summary, L1 key decisions and rules, L2 search.
    Tiers {
        /// The session.
        #[arg(long, default_value = "")]
        session: String,
        /// The project (L0 and L1 draw on it).
        #[arg(long, default_value = "")]
        project: String,
        /// A query for L2 (full search).
        #[arg(long)]
        query: Option<String>,
    },
}

pub fn show(m: &Memory) {
    println!(
        "{}  trust {:.3}  {}  {}{}",
        m.id,
        m.trust,
        m.status.as_str(),
        m.kind.as_str(),
        if m.scope.project.is_empty() {
            String::new()
        } else {
            format!("  project {}", m.scope.project)
        }
    );
    if !m.text.is_empty() {
        println!("    {}", m.text.chars().take(300).collect::<String>());
    }
}

/// A memory kind, or an error naming the known ones.
pub fn parse_kind(kind: &str) -> Result<Kind> {
    Kind::parse(kind).with_context(|| {
        format!("unknown kind {kind:?} (fact, decision, rule, preference, procedure, episode)")
    })
}

/// An entity kind, or an error naming the known ones.
pub fn parse_entity_kind(k: &str) -> Result<EntityKind> {
    EntityKind::parse(k).with_context(|| {
        format!("unknown entity kind {k:?} (project, file, agent, skill, person, concept)")
    })
}

/// A trust signal, or an error naming the known ones.
pub fn parse_signal(signal: &str) -> Result<Signal> {
    Signal::parse(signal)
        .with_context(|| format!("unknown signal {signal:?} (used, confirmed, ignored, corrected)"))
}

/// A relation kind, or an error naming the known ones.
pub fn parse_relation(kind: &str) -> Result<RelKind> {
    RelKind::parse(kind).with_context(|| {
        format!(
            "unknown relation {kind:?} ({})",
            RelKind::ALL.map(|k| k.as_str()).join(", ")
        )
    })
}

/// `memory get`: the memory, its use counts and its relations.
pub fn show_with_relations(m: &Memory, rels: &[Relation]) {
    show(m);
    for (k, v) in &m.use_counts {
        println!("    {k}: {v}");
    }
    for r in rels {
        println!("    {} {} {}", r.from, r.kind.as_str(), r.to);
    }
}

/// `memory search`: ranked hits with their flags.
pub fn show_hits(hits: &[MemHit]) {
    if hits.is_empty() {
        println!("no memories match");
    }
    for (i, h) in hits.iter().enumerate() {
        print!("{:>2}. score {:.3}  ", i + 1, h.score);
        show(&h.memory);
        for f in &h.flags {
            println!("    ! {f}");
        }
    }
}

/// `memory list`: the memories and their count.
pub fn show_list(ms: &[Memory]) {
    for m in ms {
        show(m);
    }
    println!("{} memories", ms.len());
}

/// `memory audit`: one line per trust or status change.
pub fn show_audit(a: &[AuditEntry]) {
    for e in a {
        println!(
            "{}  {:<9} {:.3} → {:.3} ({:+.3})  by {}  {}",
            e.at_ms,
            e.event,
            e.trust_before,
            e.trust_after,
            e.delta(),
            e.by,
            e.note
        );
    }
}

/// `memory graph`: the entities the memories of a node also mention.
pub fn show_related(related: &[(String, usize)]) {
    if !related.is_empty() {
        let rel: Vec<String> = related.iter().map(|(n, c)| format!("{n} ({c})")).collect();
        println!("  related: {}", rel.join(", "));
    }
}

/// Run a memory subcommand.
pub fn run(json: bool, engine: Engine, data_dir: &Path, what: MemoryCommand) -> Result<ExitCode> {
    let cfg = engine.config().clone();
    let store = neuralcore_app::open_memory_store(&cfg, data_dir)?;
    let now = now_ms();
    let print = |v: serde_json::Value| -> Result<()> {
        println!("{}", serde_json::to_string_pretty(&v)?);
        Ok(())
    };
    match what {
        MemoryCommand::Add {
            text,
            kind,
            project,
            session,
            agent,
            source,
            occurred_at,
        } => {
            let kind = parse_kind(&kind)?;
            let searcher = MemorySearcher::new(store.clone(), engine.embedder());
            let m = searcher.add(
                NewMemory {
                    text,
                    kind: Some(kind),
                    scope: MemScope {
                        tenant: cfg.mind.tenant.clone(),
                        project,
                        agent,
                        session,
                    },
                    source,
                    occurred_at,
                    ..Default::default()
                },
                "user",
                now,
            )?;
            // The knowledge graph: MENTIONS links to the entities it names.
            let (ents, by) = neuralcore_app::memory_entities(&cfg, &m);
            let ents = graph::link_entities(&store, &m, ents, "user", now)?;
            if json {
                let mut v = serde_json::to_value(strip(m))?;
                v["entities"] = serde_json::to_value(&ents)?;
                v["entities_by"] = serde_json::json!(by);
                print(v)?;
            } else {
                println!("{}", m.id);
                if !ents.is_empty() {
                    let names: Vec<String> = ents
                        .iter()
                        .map(|e| format!("{} ({})", e.name, e.kind.as_str()))
                        .collect();
                    eprintln!("mentions: {} [{by}]", names.join(", "));
                }
            }
        }
        MemoryCommand::Graph { entity, kind } => {
            let nodes: Vec<String> = if entity.starts_with("ent:") {
                vec![entity.to_lowercase()]
            } else {
                let kinds: Vec<EntityKind> = match &kind {
                    Some(k) => vec![parse_entity_kind(k)?],
                    None => EntityKind::ALL.to_vec(),
                };
                let Some(e) = graph::entity(EntityKind::Person, &entity) else {
                    bail!("{entity:?} is not an entity name (2 to 80 characters)");
                };
                kinds
                    .into_iter()
                    .map(|k| {
                        Entity {
                            kind: k,
                            ..e.clone()
                        }
                        .node()
                    })
                    .collect()
            };
            let mut found = Vec::new();
            for n in &nodes {
                let nb = graph::neighbourhood(&store, n)?;
                if !nb.memories.is_empty() {
                    found.push(nb);
                }
            }
            if json {
                print(serde_json::to_value(&found)?)?;
            } else if found.is_empty() {
                eprintln!("no memory mentions {entity}");
                return Ok(ExitCode::from(1));
            } else {
                for nb in &found {
                    println!("{}: {} memories", nb.node, nb.memories.len());
                    for id in &nb.memories {
                        // Trust as of now (decay included), as `memory get` shows it.
                        match store.get(id, now) {
                            Ok(m) => show(&m),
                            Err(neuralcore_memory::MemoryError::NotFound(_)) => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                    show_related(&nb.related);
                }
            }
        }
        MemoryCommand::Get { id } => {
            let m = store.get(&id, now)?;
            let rels = store.relations(&id)?;
            if json {
                print(serde_json::json!({"memory": strip(m), "relations": rels}))?;
            } else {
                show_with_relations(&m, &rels);
            }
        }
        MemoryCommand::Search {
            query,
            k,
            project,
            session,
            include_superseded,
        } => {
            let searcher = MemorySearcher::new(store, engine.embedder());
            let hits = searcher.search(
                &query,
                &MemorySearchOptions {
                    include_superseded,
                    ..cfg.memory.search_options(
                        k,
                        Filter {
                            project,
                            session,
                            ..Default::default()
                        },
                    )
                },
                now,
            )?;
            if json {
                let v: Vec<_> = hits
                    .into_iter()
                    .map(|h| {
                        serde_json::json!({"score": h.score, "relevance": h.relevance,
                            "flags": h.flags, "memory": strip(h.memory)})
                    })
                    .collect();
                print(serde_json::json!(v))?;
            } else {
                show_hits(&hits);
            }
        }
        MemoryCommand::List {
            status,
            project,
            session,
            kind,
        } => {
            let statuses = match status.as_str() {
                "all" => vec![Status::Active, Status::Archived, Status::Purged],
                s => vec![Status::parse(s).with_context(|| {
                    format!("unknown status {s:?} (active, archived, purged, all)")
                })?],
            };
            let kinds = match kind {
                Some(k) => vec![Kind::parse(&k).with_context(|| format!("unknown kind {k:?}"))?],
                None => Vec::new(),
            };
            let v = store.list(
                &Filter {
                    statuses,
                    project,
                    session,
                    kinds,
                    ..Default::default()
                },
                now,
            )?;
            if json {
                print(serde_json::json!(v
                    .into_iter()
                    .map(strip)
                    .collect::<Vec<_>>()))?;
            } else {
                show_list(&v);
            }
        }
        MemoryCommand::Signal {
            id,
            signal,
            by,
            query,
        } => {
            let s = parse_signal(&signal)?;
            let m = store.signal_about(&id, s, &by, query.as_deref(), now)?;
            if json {
                print(serde_json::to_value(strip(m))?)?;
            } else {
                show(&m);
            }
        }
        MemoryCommand::Link { from, kind, to } => {
            let k = parse_relation(&kind)?;
            let r = store.link(&from, k, &to, "user", now)?;
            if json {
                print(serde_json::to_value(r)?)?;
            } else {
                println!("{} {} {}", r.from, r.kind.as_str(), r.to);
            }
        }
        MemoryCommand::Forget { id } => {
            let m = store.forget(&id, "user", now)?;
            if json {
                print(serde_json::to_value(strip(m))?)?;
            } else {
                show(&m);
            }
        }
        MemoryCommand::Restore { id } => {
            let m = store.restore(&id, "user", now)?;
            if json {
                print(serde_json::to_value(strip(m))?)?;
            } else {
                show(&m);
            }
        }
        MemoryCommand::Sweep => {
            let r = store.sweep("sweep", now)?;
            if json {
                print(serde_json::to_value(r)?)?;
            } else {
                println!(
                    "{} memories: {} decayed, {} archived, {} purged",
                    r.seen, r.decayed, r.archived, r.purged
                );
            }
        }
        MemoryCommand::Audit { id } => {
            let a = store.audit(&id)?;
            if json {
                print(serde_json::to_value(a)?)?;
            } else {
                show_audit(&a);
            }
        }
        MemoryCommand::Tiers {
            session,
            project,
            query,
        } => {
            let searcher = MemorySearcher::new(store, engine.embedder());
            let t = neuralcore_memory::tiers::load(
                &searcher,
                &neuralcore_memory::tiers::TierRequest {
                    project,
                    session,
                    query,
                    l2: engine.config().memory.search_options(10, Filter::default()),
                    ..Default::default()
                },
                now,
            )?;
            if json {
                print(serde_json::to_value(&t)?)?;
            } else {
                print!("{}", t.render());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A memory without its embedding (for printing).
fn strip(mut m: Memory) -> Memory {
    m.embedding = None;
    m
}

/// What `eval locomo` was asked.
pub struct LocomoArgs {
    pub path: std::path::PathBuf,
    pub conversations: Option<String>,
    pub k: usize,
    pub per_question: Option<std::path::PathBuf>,
    pub fit: Option<String>,
    /// Rerank the memory system's first N with `rerank.model` (0: no such row).
    pub rerank: usize,
    /// Write training pairs of the evaluated conversations here.
    pub pairs_out: Option<std::path::PathBuf>,
    /// Hard negatives per question in those pairs.
    pub negatives: usize,
}

/// What a cross-encoder reads of a memory: who said it and when, the text, and the
/// turn it answers (the questions name speakers and ask when).
fn memory_passage(m: &neuralcore_memory::Memory) -> String {
    let meta = |k: &str| m.metadata.get(k).and_then(|v| v.as_str()).unwrap_or("");
    let mut p = String::new();
    if !meta("speaker").is_empty() {
        p.push_str(meta("speaker"));
        if let Some(d) = m.occurred_at.as_deref().filter(|d| !d.is_empty()) {
            p.push_str(&format!(" ({d})"));
        }
        p.push_str(": ");
    }
    p.push_str(&m.text);
    if !meta("context").is_empty() {
        p.push_str(&format!(" [replying to {}]", meta("context")));
    }
    p
}

/// Every turn of `set` as an episode memory: speaker, turn id, the turn it answers
/// (`context`) and the reply (`followup`) as metadata, scoped to its conversation
/// (project) and session.
fn turn_memories<'a>(
    turns: impl Iterator<Item = &'a neuralcore_eval::locomo::Turn>,
) -> Vec<NewMemory> {
    let turns: Vec<_> = turns.collect();
    let same = |a: &neuralcore_eval::locomo::Turn, b: &neuralcore_eval::locomo::Turn| {
        a.conversation == b.conversation && a.session == b.session
    };
    turns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut metadata = std::collections::BTreeMap::new();
            metadata.insert("speaker".to_string(), serde_json::json!(t.speaker));
            metadata.insert("dia_id".to_string(), serde_json::json!(t.dia_id));
            // The turn it answers, as context for search.
            if let Some(p) = i.checked_sub(1).map(|j| turns[j]).filter(|p| same(p, t)) {
                metadata.insert(
                    "context".to_string(),
                    serde_json::json!(format!("{}: {}", p.speaker, p.text)),
                );
            }
            if let Some(n) = turns.get(i + 1).filter(|n| same(n, t)) {
                metadata.insert(
                    "followup".to_string(),
                    serde_json::json!(format!("{}: {}", n.speaker, n.text)),
                );
            }
            NewMemory {
                text: t.text.clone(),
                kind: Some(Kind::Episode),
                scope: MemScope {
                    tenant: "locomo".into(),
                    project: t.conversation.clone(),
                    agent: String::new(),
                    session: format!("{}-s{}", t.conversation, t.session),
                },
                source: format!("locomo:{}", t.conversation),
                occurred_at: Some(t.session_date.clone()),
                metadata,
                embedding: None,
            }
        })
        .collect()
}

/// `eval locomo`: every turn of LoCoMo conversations becomes an episode memory (speaker,
/// session date); each QA item with evidence searches its conversation's memories; the
/// evidence turns' recall@10 is reported per category, side by side with the fused
/// ranking before reranking, plain BM25 and plain vector search over the same memories.
/// With `--fit`, the reranker is first fitted to the questions of those conversations.
pub fn eval_locomo(json: bool, quiet: bool, engine: &Engine, a: LocomoArgs) -> Result<()> {
    use std::io::Write;
    let range = match &a.conversations {
        Some(r) => Some(crate::qa::parse_range(r)?),
        None => None,
    };
    let path = crate::qa::json_file(&a.path)?;
    let set = neuralcore_eval::load_locomo(&path, range)?;
    let fit_set = match &a.fit {
        Some(r) => Some(neuralcore_eval::load_locomo(
            &path,
            Some(crate::qa::parse_range(r)?),
        )?),
        None => None,
    };
    let evaluated: std::collections::HashSet<&str> = set.conversations().into_iter().collect();
    if let Some(fs) = &fit_set {
        let both: Vec<&str> = fs
            .conversations()
            .into_iter()
            .filter(|c| evaluated.contains(c))
            .collect();
        if !both.is_empty() && !quiet {
            eprintln!(
                "note: fitting on conversations that are also evaluated ({}): those figures are not held out",
                both.join(", ")
            );
        }
    }
    let store = Arc::new(MemoryStore::new(
        Arc::new(neuralcore_memory::InMemoryBackend::new()),
        engine.config().memory.trust(),
    )?);
    let embedder = engine.embedder();
    if embedder.is_none() && !quiet {
        eprintln!("note: no embedding model: memory search is keyword-only and the vector row is left out (neuralcore models pull)");
    }
    let searcher = MemorySearcher::new(store, embedder);
    let now = now_ms();
    let t0 = std::time::Instant::now();
    // The evaluated conversations, then those only fitted on.
    let turns = set.turns.iter().chain(
        fit_set
            .iter()
            .flat_map(|fs| fs.turns.iter())
            .filter(|t| !evaluated.contains(t.conversation.as_str())),
    );
    let mut news = turn_memories(turns);
    let mems = searcher.add_many(&mut news, "eval", now)?;
    let dia: std::collections::HashMap<String, String> = mems
        .iter()
        .map(|m| {
            (
                m.id.clone(),
                m.metadata
                    .get("dia_id")
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    searcher.refresh()?;
    if !quiet && !json {
        eprintln!(
            "{} turns of {} conversations stored as memories in {:.1} s; encoder on {} (query weights {})",
            mems.len(),
            mems.iter()
                .map(|m| m.scope.project.as_str())
                .collect::<std::collections::HashSet<_>>()
                .len(),
            t0.elapsed().as_secs_f64(),
            neuralcore_models::isa(),
            engine.config().embedding.query_weights
        );
    }
    let mcfg = &engine.config().memory;
    let in_conversation = |opts: &MemorySearchOptions, conversation: &str| MemorySearchOptions {
        filter: Filter {
            project: conversation.to_string(),
            ..Default::default()
        },
        ..opts.clone()
    };
    let mut memory = mcfg.search_options(a.k, Filter::default());
    let mut fitted = None;
    if let Some(fs) = &fit_set {
        // Every fused candidate the reranker would see, labelled by the evidence.
        let mut samples = Vec::new();
        let mut questions = 0;
        let unranked = MemorySearchOptions {
            rerank: None,
            rerank_keyword: None,
            ..memory.clone()
        };
        // The features differ with and without a query vector: fit the model the
        // search will use.
        let keyword = searcher.embedder().is_none() || memory.alpha <= 0.0;
        let key = if keyword {
            "rerank_keyword_weights"
        } else {
            "rerank_weights"
        };
        for q in fs.questions.iter().filter(|q| !q.evidence.is_empty()) {
            questions += 1;
            let opts = in_conversation(&unranked, &q.conversation);
            for (m, x) in searcher.rerank_features(&q.question, &opts)? {
                let hit = dia.get(&m.id).is_some_and(|d| q.evidence.contains(d));
                samples.push((x, hit));
            }
        }
        let model = neuralcore_memory::MemoryRanker::fit(&samples, 1.0).with_context(|| {
            format!(
                "cannot fit the reranker on {} candidates of {questions} questions: it needs                  candidates that are evidence and candidates that are not (and a solvable fit)",
                samples.len()
            )
        })?;
        if !json {
            println!(
                "reranker fitted on {questions} questions ({} candidates) of conversations {}:",
                samples.len(),
                fs.conversations().join(", ")
            );
            println!(
                "{key} = [{}]",
                model
                    .to_vec()
                    .iter()
                    .map(|w| format!("{w:.4}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if keyword {
            memory.rerank_keyword = Some(model);
        } else {
            memory.rerank = Some(model);
        }
        fitted = Some(serde_json::json!({
            "key": key,
            "held_out": fs.conversations().iter().all(|c| !evaluated.contains(c)),
            "questions": questions,
            "candidates": samples.len(),
            "features": neuralcore_memory::rerank::FEATURE_NAMES,
            "rerank_weights": model.to_vec(),
        }));
    }
    // The plain baselines: no trust, no speaker rule, no reranking.
    let plain = |alpha: f32| MemorySearchOptions {
        alpha,
        trust_weight: 0.0,
        speaker_weight: 0.0,
        rerank: None,
        rerank_keyword: None,
        ..mcfg.search_options(a.k, Filter::default())
    };
    if let Some(p) = &a.pairs_out {
        // The memory system's best hits that are not evidence are the hard negatives.
        let mut text = String::new();
        let (mut pos, mut neg) = (0, 0);
        let deep = MemorySearchOptions {
            k: a.negatives + 10,
            ..memory.clone()
        };
        for q in set.questions.iter().filter(|q| !q.evidence.is_empty()) {
            let mut line = |passage: &str, label: f32, id: &str| -> Result<()> {
                let pair = neuralcore_core::pairs::Pair {
                    question: q.question.clone(),
                    passage: passage.to_string(),
                    label,
                    source: format!("locomo:{}:{id}", q.conversation),
                };
                text.push_str(&serde_json::to_string(&pair)?);
                text.push('\n');
                Ok(())
            };
            // In the order stored, so the pairs (and a model trained on them) repeat.
            for m in &mems {
                let d = &dia[&m.id];
                if m.scope.project == q.conversation && q.evidence.contains(d) {
                    line(&memory_passage(m), 1.0, d)?;
                    pos += 1;
                }
            }
            let hits =
                searcher.search(&q.question, &in_conversation(&deep, &q.conversation), now)?;
            for h in hits
                .iter()
                .filter(|h| {
                    dia.get(&h.memory.id)
                        .is_some_and(|d| !q.evidence.contains(d))
                })
                .take(a.negatives)
            {
                line(&memory_passage(&h.memory), 0.0, &dia[&h.memory.id])?;
                neg += 1;
            }
        }
        std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))?;
        if !quiet {
            eprintln!(
                "{} pairs ({pos} relevant, {neg} not) written to {}",
                pos + neg,
                p.display()
            );
        }
    }
    let mut systems: Vec<(&str, MemorySearchOptions)> = vec![("memory", memory.clone())];
    if memory.rerank.is_some() || memory.rerank_keyword.is_some() {
        systems.push((
            "fused",
            MemorySearchOptions {
                rerank: None,
                rerank_keyword: None,
                ..memory.clone()
            },
        ));
    }
    systems.push(("bm25", plain(0.0)));
    systems.push(("vector", plain(1.0)));
    let mut out = match &a.per_question {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot write {}", p.display()))?,
        )),
        None => None,
    };
    let reranker = if a.rerank > 0 {
        Some(engine.reranker_status().map_err(anyhow::Error::msg)?)
    } else {
        None
    };
    let rerank_label = format!("memory+rerank{}", a.rerank);
    if reranker.is_some() {
        systems.insert(
            1,
            (
                rerank_label.as_str(),
                MemorySearchOptions {
                    k: a.k.max(a.rerank),
                    ..memory.clone()
                },
            ),
        );
    }
    let blend = engine.config().rerank.blend as f32;
    let mut rows = Vec::new();
    for (label, opts) in systems {
        // Without a model, search is keyword-only: only the vector row has nothing.
        if opts.alpha >= 1.0 && searcher.embedder().is_none() {
            continue;
        }
        let mut runs = Vec::new();
        for (i, q) in set.questions.iter().enumerate() {
            let start = std::time::Instant::now();
            let mut hits =
                searcher.search(&q.question, &in_conversation(&opts, &q.conversation), now)?;
            if let (Some(r), true) = (&reranker, label == rerank_label) {
                let n = a.rerank.min(hits.len());
                let passages: Vec<String> = hits[..n]
                    .iter()
                    .map(|h| memory_passage(&h.memory))
                    .collect();
                let passages: Vec<&str> = passages.iter().map(String::as_str).collect();
                let first: Vec<f32> = hits[..n].iter().map(|h| h.score).collect();
                let scores = r.score(&q.question, &passages)?;
                if scores.len() != n {
                    anyhow::bail!("the reranker gave {} scores for {n} passages", scores.len());
                }
                let mixed = neuralcore_engine::blended(&first, &scores, blend);
                let mut order: Vec<usize> = (0..n).collect();
                // Stable: equal scores keep the memory system's order.
                order.sort_by(|&x, &y| mixed[y].total_cmp(&mixed[x]));
                let mut head: Vec<_> = order.iter().map(|&i| hits[i].clone()).collect();
                head.extend(hits.drain(n..));
                hits = head;
                hits.truncate(a.k);
            }
            let ms = start.elapsed().as_secs_f64() * 1e3;
            let ids: Vec<String> = hits
                .iter()
                .filter_map(|h| dia.get(&h.memory.id).cloned())
                .collect();
            if let Some(f) = out.as_mut() {
                writeln!(
                    f,
                    "{}",
                    serde_json::json!({"system": label, "question": q.question,
                        "category": q.category, "evidence": q.evidence, "retrieved": ids})
                )?;
            }
            runs.push((i, ids, ms));
        }
        rows.push((
            label.to_string(),
            neuralcore_eval::score_memory_retrieval(&set, &runs),
        ));
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "dataset": path.display().to_string(),
                "memories": mems.len(),
                "questions": set.questions.len(),
                "k": a.k,
                "fitted": fitted,
                "runs": rows.iter().map(|(l, r)| serde_json::json!({"system": l, "report": r})).collect::<Vec<_>>(),
            }))?
        );
    } else {
        println!(
            "LoCoMo ({}): {} memories, {} questions",
            path.display(),
            mems.len(),
            set.questions.len()
        );
        print!("{}", neuralcore_eval::render_memory_side_by_side(&rows));
    }
    Ok(())
}
