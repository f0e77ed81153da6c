//! Tiered loading for a session, within token budgets counted by the embedding model's
//! own tokenizer (a word-piece estimate without one):
//!
//! - L0: a global summary (~100 tokens) built from the highest-trust project memories;
//! - L1: key decisions and rules with trust ≥ 0.8 (~2K tokens), by trust then recency;
//! - L2: full search (hybrid, weighted by trust) for a query.

use serde::Serialize;

use crate::error::MemResult;
use crate::search::{MemHit, MemorySearchOptions, MemorySearcher};
use crate::types::{Filter, Kind, Memory, Status};

/// What to load.
#[derive(Debug, Clone)]
pub struct TierRequest {
    /// Only this tenant's memories (empty: any).
    pub tenant: String,
    /// Project (L0 and L1 draw on it; empty: any).
    pub project: String,
    /// Session (L2 searches it and the project's memories).
    pub session: String,
    /// A query for L2.
    pub query: Option<String>,
    /// L0 budget in tokens.
    pub l0_tokens: usize,
    /// L1 budget in tokens.
    pub l1_tokens: usize,
    /// L1 trust floor.
    pub l1_min_trust: f64,
    /// L2: results wanted and search weights (the filter's project is `project`).
    pub l2: MemorySearchOptions,
}

impl Default for TierRequest {
    fn default() -> Self {
        TierRequest {
            tenant: String::new(),
            project: String::new(),
            session: String::new(),
            query: None,
            l0_tokens: 100,
            l1_tokens: 2000,
            l1_min_trust: 0.8,
            l2: MemorySearchOptions::default(),
        }
    }
}

/// One loaded memory.
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Loaded {
    /// Id.
    pub id: String,
    /// Kind.
    pub kind: Kind,
    /// Trust as loaded.
    pub trust: f64,
    /// Text (cut to fit the budget when it is the last one of L0).
    pub text: String,
    /// Tokens it takes.
    pub tokens: usize,
}

/// What a session would load.
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Tiers {
    /// How tokens were counted (`model tokenizer` or `estimate`).
    pub counted_by: String,
    /// L0: the summary.
    pub l0: Vec<Loaded>,
    /// L0 tokens.
    pub l0_tokens: usize,
    /// L1: key decisions and rules.
    pub l1: Vec<Loaded>,
    /// L1 tokens.
    pub l1_tokens: usize,
    /// L2: search results (empty without a query).
    pub l2: Vec<Loaded>,
    /// L2 tokens.
    pub l2_tokens: usize,
}

impl Tiers {
    /// A plain-text rendering.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (name, tier, tokens) in [
            ("L0 summary", &self.l0, self.l0_tokens),
            (
                "L1 key decisions and rules (trust >= 0.8)",
                &self.l1,
                self.l1_tokens,
            ),
            ("L2 search", &self.l2, self.l2_tokens),
        ] {
            s.push_str(&format!(
                "{name}: {} memories, {tokens} tokens\n",
                tier.len()
            ));
            for l in tier {
                s.push_str(&format!(
                    "  {} {:<9} trust {:.2}  {}\n",
                    l.id,
                    l.kind.as_str(),
                    l.trust,
                    l.text
                ));
            }
        }
        s.push_str(&format!("(tokens counted by the {})\n", self.counted_by));
        s
    }
}

/// Load the tiers for a session.
pub fn load(s: &MemorySearcher, req: &TierRequest, now_ms: u64) -> MemResult<Tiers> {
    let count = |t: &str| -> usize {
        s.embedder()
            .and_then(|e| e.count_tokens(t))
            .unwrap_or_else(|| neuralcore_core::text::count_tokens(t))
    };
    let counted_by = if s.embedder().and_then(|e| e.count_tokens("x")).is_some() {
        "model tokenizer"
    } else {
        "estimate"
    };
    let project = Filter {
        statuses: vec![Status::Active],
        tenant: req.tenant.clone(),
        project: req.project.clone(),
        ..Default::default()
    };
    let hidden = s.superseded()?;
    let mut all = s.store().list(&project, now_ms)?;
    all.retain(|m| !hidden.contains(&m.id));
    // Highest trust first, then the most recently used.
    all.sort_by(|a, b| {
        b.trust
            .total_cmp(&a.trust)
            .then(b.last_used_at_ms.cmp(&a.last_used_at_ms))
    });
    let loaded = |m: &Memory, text: String, tokens: usize| Loaded {
        id: m.id.clone(),
        kind: m.kind,
        trust: m.trust,
        text,
        tokens,
    };
    // L0: the top of the trust order, cut at the budget.
    let mut l0 = Vec::new();
    let mut l0_tokens = 0;
    for m in all.iter().filter(|m| m.kind != Kind::Episode) {
        let t = count(&m.text);
        if l0_tokens + t <= req.l0_tokens {
            l0_tokens += t;
            l0.push(loaded(m, m.text.clone(), t));
        } else {
            // The last one, cut to what fits (by words).
            let room = req.l0_tokens.saturating_sub(l0_tokens);
            if room >= 8 {
                let mut cut = String::new();
                for w in m.text.split_whitespace() {
                    let next = if cut.is_empty() {
                        w.to_string()
                    } else {
                        format!("{cut} {w}")
                    };
                    if count(&next) + 1 > room {
                        break;
                    }
                    cut = next;
                }
                if !cut.is_empty() {
                    let t = count(&cut) + 1;
                    l0_tokens += t;
                    l0.push(loaded(m, format!("{cut}…"), t));
                }
            }
            break;
        }
    }
    // L1: decisions and rules above the trust floor.
    let mut l1 = Vec::new();
    let mut l1_tokens = 0;
    for m in all
        .iter()
        .filter(|m| matches!(m.kind, Kind::Decision | Kind::Rule) && m.trust >= req.l1_min_trust)
    {
        let t = count(&m.text);
        if l1_tokens + t > req.l1_tokens {
            break;
        }
        l1_tokens += t;
        l1.push(loaded(m, m.text.clone(), t));
    }
    // L2: search, this session's and the project's memories.
    let mut l2 = Vec::new();
    let mut l2_tokens = 0;
    if let Some(q) = &req.query {
        let hits: Vec<MemHit> = s.search(
            q,
            &MemorySearchOptions {
                filter: Filter {
                    tenant: req.tenant.clone(),
                    project: req.project.clone(),
                    ..Default::default()
                },
                ..req.l2.clone()
            },
            now_ms,
        )?;
        for h in hits {
            if !req.session.is_empty()
                && !h.memory.scope.session.is_empty()
                && h.memory.scope.session != req.session
            {
                continue;
            }
            let t = count(&h.memory.text);
            l2_tokens += t;
            l2.push(loaded(&h.memory, h.memory.text.clone(), t));
        }
    }
    Ok(Tiers {
        counted_by: counted_by.into(),
        l0,
        l0_tokens,
        l1,
        l1_tokens,
        l2,
        l2_tokens,
    })
}
