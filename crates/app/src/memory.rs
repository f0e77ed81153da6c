//! Memories of a tenant, as every front end reads and changes them: each memory belongs
//! to the tenant that added it (`scope.tenant`); another tenant's id is not found, and
//! lists, searches, tiers and the graph see the caller's memories only.

use std::collections::BTreeMap;

use neuralcore_memory::graph::{self, Entity, EntityKind, Neighbourhood};
use neuralcore_memory::{
    Filter, Kind, MemHit, MemScope, Memory, MemorySearchOptions, MemorySearcher, NewMemory,
    RelKind, Relation, Signal, Status,
};
use serde::{Deserialize, Serialize};

use crate::{App, AppError, Tenant};
use neuralcore_memory::now_ms;

/// Longest memory text over the API, in characters (the store's 64 KiB in any UTF-8).
pub const MAX_MEMORY_CHARS: usize = neuralcore_memory::MAX_TEXT_BYTES / 4;

fn invalid(e: impl Into<String>) -> AppError {
    AppError::InvalidInput(e.into())
}

/// A memory to add.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryAdd {
    /// What to remember (at most 16,384 characters: 64 KiB of UTF-8 at most).
    #[schema(min_length = 1, max_length = 16384, pattern = "\\S")]
    pub text: String,
    /// fact, decision, rule, preference, procedure or episode (default: inferred).
    #[serde(default)]
    pub kind: Option<Kind>,
    /// The project it belongs to.
    #[serde(default)]
    pub project: String,
    /// The session it came from.
    #[serde(default)]
    pub session: String,
    /// The agent that wrote it.
    #[serde(default)]
    pub agent: String,
    /// Where it came from (a file, a URL, `user`).
    #[serde(default)]
    pub source: Option<String>,
    /// When what it says happened.
    #[serde(default)]
    pub occurred_at: Option<String>,
    /// Anything else.
    #[serde(default)]
    pub metadata: BTreeMap<String, serde_json::Value>,
}

/// A memory added, with the entities it was linked to.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct MemoryAdded {
    /// The memory.
    pub memory: Memory,
    /// The entities it names (MENTIONS links in the graph).
    pub entities: Vec<Entity>,
    /// Who named them: `llm`, or `rules` (with why not the LLM).
    pub entities_by: String,
}

/// A memory with its relations.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct MemoryWithRelations {
    /// The memory.
    pub memory: Memory,
    /// Its links to and from other memories and entities.
    pub relations: Vec<Relation>,
}

/// A memory search.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySearch {
    /// The query.
    #[schema(min_length = 1, max_length = 4096, pattern = "\\S")]
    pub query: String,
    /// Results (default 10).
    #[serde(default, deserialize_with = "crate::de_opt_uint")]
    #[schema(minimum = 1, maximum = 1000)]
    pub k: Option<usize>,
    /// Only this project.
    #[serde(default)]
    pub project: String,
    /// Only this session.
    #[serde(default)]
    pub session: String,
    /// Show memories a newer one superseded.
    #[serde(default)]
    pub include_superseded: bool,
}

/// Which memories to list.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct MemoryListQuery {
    /// active (default), archived, purged or all.
    #[serde(default)]
    #[param(pattern = "^(active|archived|purged|all)$")]
    pub status: Option<String>,
    /// Only this project.
    #[serde(default)]
    pub project: Option<String>,
    /// Only this session.
    #[serde(default)]
    pub session: Option<String>,
    /// Only this kind.
    #[serde(default)]
    pub kind: Option<Kind>,
}

/// A trust signal.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySignalReq {
    /// used, confirmed, ignored or corrected.
    pub signal: Signal,
    /// The question the memory answered (used, confirmed) or failed (ignored,
    /// corrected), kept in its audit entry; `neuralcore feedback export` makes a
    /// training pair of it. At most 16 KiB.
    #[serde(default)]
    pub query: Option<String>,
}

/// A link from one memory.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryLinkReq {
    /// SUPERSEDES, PARTIAL_UPDATE, RELATED_TO, CONTRADICTS, DERIVED_FROM, ...
    pub kind: RelKind,
    /// The other memory's id.
    #[schema(pattern = "^[0-9a-f]{16}$")]
    pub to: String,
}

/// What the tiers are for.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TiersQuery {
    /// The session.
    #[serde(default)]
    pub session: Option<String>,
    /// The project.
    #[serde(default)]
    pub project: Option<String>,
    /// A query for L2.
    #[serde(default)]
    pub query: Option<String>,
}

/// An entity to look up in the graph.
#[derive(Debug, Clone, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct GraphQuery {
    /// An entity's name (2 to 80 characters) or node id (`ent:<kind>:<name>`).
    #[param(min_length = 2, max_length = 80)]
    pub entity: String,
    /// Only this kind of entity.
    #[serde(default)]
    pub kind: Option<EntityKind>,
}

/// The entities a new memory names: by the LLM when `[llm]` is configured, by rules
/// otherwise or when the LLM fails (the reason is kept in the label).
pub fn memory_entities(cfg: &neuralcore_engine::Config, m: &Memory) -> (Vec<Entity>, String) {
    if !cfg.llm.is_configured() {
        return (graph::rule_entities(m), "rules".into());
    }
    let by_llm = neuralcore_llm::LlmClient::new(cfg.llm.clone())
        .map_err(|e| e.to_string())
        .and_then(|c| neuralcore_agents::llm_judge::entities(&c, &m.text).0);
    match by_llm {
        Ok(mut ents) => {
            let speaker = m.metadata.get("speaker").and_then(|v| v.as_str());
            ents.extend(speaker.and_then(|s| graph::entity(EntityKind::Person, s)));
            (ents, "llm".into())
        }
        Err(e) => (graph::rule_entities(m), format!("rules (llm failed: {e})")),
    }
}

/// A memory as front ends show it: without its embedding.
fn shown(mut m: Memory) -> Memory {
    m.embedding = None;
    m
}

impl App {
    fn searcher(&self) -> Result<MemorySearcher, AppError> {
        Ok(MemorySearcher::new(
            self.memory_store()?,
            self.engine().embedder(),
        ))
    }

    /// One of the tenant's memories (any status); another tenant's is not found.
    fn own_memory(&self, tenant: &Tenant, id: &str, now: u64) -> Result<Memory, AppError> {
        let not_found = || AppError::NotFound(format!("no memory {id:?}"));
        let valid = id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit());
        if !valid {
            return Err(not_found());
        }
        match self.memory_store()?.get(id, now) {
            Ok(m) if m.scope.tenant == tenant.as_str() => Ok(m),
            Ok(_) | Err(neuralcore_memory::MemoryError::NotFound(_)) => Err(not_found()),
            Err(e) => Err(e.into()),
        }
    }

    /// Add a memory for the tenant and link it to the entities it names.
    pub fn memory_add(&self, tenant: &Tenant, req: MemoryAdd) -> Result<MemoryAdded, AppError> {
        let n = req.text.chars().count();
        if n > MAX_MEMORY_CHARS {
            return Err(invalid(format!(
                "the text is {n} characters; at most {MAX_MEMORY_CHARS}"
            )));
        }
        let now = now_ms();
        let store = self.memory_store()?;
        let m = self.searcher()?.add(
            NewMemory {
                text: req.text,
                kind: req.kind,
                scope: MemScope {
                    tenant: tenant.as_str().to_string(),
                    project: req.project,
                    agent: req.agent,
                    session: req.session,
                },
                source: req.source.unwrap_or_else(|| "api".into()),
                occurred_at: req.occurred_at,
                metadata: req.metadata,
                ..Default::default()
            },
            "api",
            now,
        )?;
        let (ents, mut by) = memory_entities(self.config(), &m);
        if by.starts_with("rules (llm failed") {
            // The LLM's error may name its endpoint: in the log, not the answer.
            tracing::warn!("memory {}: entities by the rules: {by}", m.id);
            by = "rules (the LLM failed; the server's log says why)".into();
        }
        let entities = graph::link_entities(&store, &m, ents, "api", now)?;
        Ok(MemoryAdded {
            memory: shown(m),
            entities,
            entities_by: by,
        })
    }

    /// One of the tenant's memories with its relations.
    pub fn memory_get(&self, tenant: &Tenant, id: &str) -> Result<MemoryWithRelations, AppError> {
        let m = self.own_memory(tenant, id, now_ms())?;
        let relations = self.memory_store()?.relations(id)?;
        Ok(MemoryWithRelations {
            memory: shown(m),
            relations,
        })
    }

    /// The tenant's memories.
    pub fn memory_list(
        &self,
        tenant: &Tenant,
        q: &MemoryListQuery,
    ) -> Result<Vec<Memory>, AppError> {
        let statuses = match q.status.as_deref().unwrap_or("active") {
            "all" => vec![Status::Active, Status::Archived, Status::Purged],
            s => vec![Status::parse(s).ok_or_else(|| {
                invalid(format!(
                    "unknown status {s:?} (active, archived, purged, all)"
                ))
            })?],
        };
        let list = self.memory_store()?.list(
            &Filter {
                statuses,
                tenant: tenant.as_str().to_string(),
                project: q.project.clone().unwrap_or_default(),
                session: q.session.clone().unwrap_or_default(),
                kinds: q.kind.into_iter().collect(),
            },
            now_ms(),
        )?;
        Ok(list.into_iter().map(shown).collect())
    }

    /// Search the tenant's memories.
    pub fn memory_search(
        &self,
        tenant: &Tenant,
        req: &MemorySearch,
    ) -> Result<Vec<MemHit>, AppError> {
        if crate::blank(&req.query) {
            return Err(invalid("the query is empty"));
        }
        let opts = MemorySearchOptions {
            include_superseded: req.include_superseded,
            ..self.config().memory.search_options(
                req.k.unwrap_or(10),
                Filter {
                    tenant: tenant.as_str().to_string(),
                    project: req.project.clone(),
                    session: req.session.clone(),
                    ..Default::default()
                },
            )
        };
        let hits =
            self.engine()
                .memory_search_cached(&self.searcher()?, &req.query, &opts, now_ms())?;
        Ok(hits
            .into_iter()
            .map(|mut h| {
                h.memory = shown(h.memory);
                h
            })
            .collect())
    }

    /// Send a trust signal to one of the tenant's memories, about the question `query`
    /// when one is named.
    pub fn memory_signal(
        &self,
        tenant: &Tenant,
        id: &str,
        signal: Signal,
        query: Option<&str>,
    ) -> Result<Memory, AppError> {
        let now = now_ms();
        self.own_memory(tenant, id, now)?;
        Ok(shown(
            self.memory_store()?
                .signal_about(id, signal, "api", query, now)?,
        ))
    }

    /// The tenant's feedback as labelled (question, passage, label) pairs: one per
    /// question a memory was signalled about (see [`neuralcore_memory::feedback`]),
    /// archived memories included, then one per (question, cited passage) of the
    /// answers the tenant marked good or bad ([`crate::marks`]).
    pub fn feedback(&self, tenant: &Tenant) -> Result<neuralcore_memory::Feedback, AppError> {
        let marks = self.answer_marks(tenant)?;
        let mut out = self.memory_feedback(tenant)?;
        out.marked_answers = marks.len();
        out.pairs.extend(crate::marks::pairs(&marks));
        Ok(out)
    }

    fn memory_feedback(&self, tenant: &Tenant) -> Result<neuralcore_memory::Feedback, AppError> {
        let filter = neuralcore_memory::Filter {
            statuses: vec![
                neuralcore_memory::Status::Active,
                neuralcore_memory::Status::Archived,
            ],
            tenant: tenant.as_str().to_string(),
            ..Default::default()
        };
        Ok(neuralcore_memory::feedback::pairs(
            &*self.memory_store()?,
            &filter,
            now_ms(),
        )?)
    }

    /// Link two of the tenant's memories.
    pub fn memory_link(
        &self,
        tenant: &Tenant,
        from: &str,
        kind: RelKind,
        to: &str,
    ) -> Result<Relation, AppError> {
        let now = now_ms();
        self.own_memory(tenant, from, now)?;
        self.own_memory(tenant, to, now)?;
        Ok(self.memory_store()?.link(from, kind, to, "api", now)?)
    }

    /// Forget (archive) one of the tenant's memories.
    pub fn memory_forget(&self, tenant: &Tenant, id: &str) -> Result<Memory, AppError> {
        let now = now_ms();
        self.own_memory(tenant, id, now)?;
        Ok(shown(self.memory_store()?.forget(id, "api", now)?))
    }

    /// Restore one of the tenant's forgotten memories.
    pub fn memory_restore(&self, tenant: &Tenant, id: &str) -> Result<Memory, AppError> {
        let now = now_ms();
        self.own_memory(tenant, id, now)?;
        Ok(shown(self.memory_store()?.restore(id, "api", now)?))
    }

    /// The trust history of one of the tenant's memories.
    pub fn memory_audit(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Vec<neuralcore_memory::AuditEntry>, AppError> {
        self.own_memory(tenant, id, now_ms())?;
        Ok(self.memory_store()?.audit(id)?)
    }

    /// The L0/L1/L2 context of the tenant's memories an agent loads at a session's start.
    pub fn memory_tiers(
        &self,
        tenant: &Tenant,
        q: &TiersQuery,
    ) -> Result<neuralcore_memory::tiers::Tiers, AppError> {
        Ok(neuralcore_memory::tiers::load(
            &self.searcher()?,
            &neuralcore_memory::tiers::TierRequest {
                tenant: tenant.as_str().to_string(),
                project: q.project.clone().unwrap_or_default(),
                session: q.session.clone().unwrap_or_default(),
                query: q.query.clone().filter(|s| !s.trim().is_empty()),
                l2: self.config().memory.search_options(10, Filter::default()),
                ..Default::default()
            },
            now_ms(),
        )?)
    }

    /// The tenant's memories that mention an entity, and the entities one hop away.
    pub fn memory_graph(
        &self,
        tenant: &Tenant,
        q: &GraphQuery,
    ) -> Result<Vec<Neighbourhood>, AppError> {
        let n = q.entity.chars().count();
        if !(2..=80).contains(&n) {
            return Err(invalid(format!(
                "an entity is named by 2 to 80 characters (got {n})"
            )));
        }
        let store = self.memory_store()?;
        let nodes: Vec<String> = if q.entity.starts_with("ent:") {
            vec![q.entity.to_lowercase()]
        } else {
            // A name no entity can have (too short once cleaned) names nothing.
            let Some(e) = graph::entity(EntityKind::Person, &q.entity) else {
                return Ok(Vec::new());
            };
            let kinds = match q.kind {
                Some(k) => vec![k],
                None => EntityKind::ALL.to_vec(),
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
        let now = now_ms();
        let mut out = Vec::new();
        for n in &nodes {
            let mut nb = graph::neighbourhood(&store, n)?;
            // Another tenant's memories (and what only they mention) are not shown.
            let mine: Vec<String> = nb
                .memories
                .iter()
                .filter(|id| self.own_memory(tenant, id, now).is_ok())
                .cloned()
                .collect();
            if mine.len() != nb.memories.len() {
                let mut related: BTreeMap<String, usize> = BTreeMap::new();
                for id in &mine {
                    for r in store.relations(id)? {
                        if r.kind == RelKind::Mentions && r.from == *id && r.to != *n {
                            *related.entry(r.to.clone()).or_insert(0) += 1;
                        }
                    }
                }
                let mut related: Vec<(String, usize)> = related.into_iter().collect();
                related.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                nb.related = related;
            }
            nb.memories = mine;
            if !nb.memories.is_empty() {
                out.push(nb);
            }
        }
        Ok(out)
    }
}
