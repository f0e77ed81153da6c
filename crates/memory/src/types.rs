//! Memory records, signals, the audit log and relations.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What a memory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Something true about the world or the project.
    Fact,
    /// A choice that was made, and why.
    Decision,
    /// A rule to follow.
    Rule,
    /// Someone's preference.
    Preference,
    /// How to do something.
    Procedure,
    /// Something that happened (a conversation turn, an event).
    Episode,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 6] = [
        Kind::Fact,
        Kind::Decision,
        Kind::Rule,
        Kind::Preference,
        Kind::Procedure,
        Kind::Episode,
    ];

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Fact => "fact",
            Kind::Decision => "decision",
            Kind::Rule => "rule",
            Kind::Preference => "preference",
            Kind::Procedure => "procedure",
            Kind::Episode => "episode",
        }
    }

    /// Parse a name.
    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Where a memory is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Searched and loaded.
    Active,
    /// Left out of search (trust fell below the archive threshold, or forgotten); can
    /// be restored until purged.
    Archived,
    /// Gone: its text is erased; only its id and audit log remain.
    Purged,
}

impl Status {
    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Archived => "archived",
            Status::Purged => "purged",
        }
    }

    /// Parse a name.
    pub fn parse(s: &str) -> Option<Status> {
        [Status::Active, Status::Archived, Status::Purged]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// Who a memory belongs to. Empty parts are unset (`tenant` defaults to `default`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct MemScope {
    /// Tenant.
    pub tenant: String,
    /// Project.
    pub project: String,
    /// Agent.
    pub agent: String,
    /// Session.
    pub session: String,
}

/// A stored memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Memory {
    /// Id: 16 hex digits.
    pub id: String,
    /// The text.
    pub text: String,
    /// Kind.
    pub kind: Kind,
    /// Scope.
    pub scope: MemScope,
    /// Where it came from (a file, a URL, `user`, `session:<id>`, a run id).
    pub source: String,
    /// Created, ms since the Unix epoch.
    pub created_at_ms: u64,
    /// Last used (a signal other than `ignored`, or creation), ms since the epoch: decay
    /// runs from here.
    pub last_used_at_ms: u64,
    /// Signals received, by name (`used`, `confirmed`, `ignored`, `corrected`).
    pub use_counts: BTreeMap<String, u64>,
    /// Trust in [0, 1] as last written (see `trust_at_ms`); read it through
    /// [`crate::trust::effective`] to include decay since then.
    pub trust: f64,
    /// When `trust` was last written, ms since the epoch.
    pub trust_at_ms: u64,
    /// Status.
    pub status: Status,
    /// When it was archived (purge runs from here).
    pub archived_at_ms: Option<u64>,
    /// When what it says happened, if known (a session date), free text or RFC 3339.
    pub occurred_at: Option<String>,
    /// Anything else (speaker, turn id, ...).
    pub metadata: BTreeMap<String, serde_json::Value>,
    /// Its sentence embedding, if computed.
    pub embedding: Option<Vec<f32>>,
}

impl Memory {
    /// Its JSON with the embedding left out (`null`), for stores that keep vectors in a
    /// column or table of their own; reading it back gives `embedding: None`.
    pub fn json_without_embedding(&self) -> serde_json::Result<String> {
        if self.embedding.is_none() {
            return serde_json::to_string(self);
        }
        serde_json::to_string(&Memory {
            embedding: None,
            ..self.clone()
        })
    }
}

/// A trust signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Signal {
    /// Its evidence was cited in an answer.
    Used,
    /// A user confirmed it.
    Confirmed,
    /// Retrieved but graded INCORRECT, or not cited.
    Ignored,
    /// A user corrected it.
    Corrected,
}

impl Signal {
    /// Every signal.
    pub const ALL: [Signal; 4] = [
        Signal::Used,
        Signal::Confirmed,
        Signal::Ignored,
        Signal::Corrected,
    ];

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Used => "used",
            Signal::Confirmed => "confirmed",
            Signal::Ignored => "ignored",
            Signal::Corrected => "corrected",
        }
    }

    /// Parse a name.
    pub fn parse(s: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// One change to a memory's trust or status, with why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditEntry {
    /// The memory.
    pub memory: String,
    /// `create`, a signal name, `decay`, `archive`, `restore`, `forget`, `purge`.
    pub event: String,
    /// Trust before and after.
    pub trust_before: f64,
    /// See `trust_before`.
    pub trust_after: f64,
    /// Who (a user, an agent, `sweep`, a run id).
    pub by: String,
    /// When, ms since the epoch.
    pub at_ms: u64,
    /// A note (the reason, the status change).
    pub note: String,
    /// For a signal: the question it was about, when one was named (the loop names the
    /// question it answered; a user may). `neuralcore feedback export` makes training
    /// pairs of these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
}

impl AuditEntry {
    /// The trust change.
    pub fn delta(&self) -> f64 {
        self.trust_after - self.trust_before
    }
}

/// A typed relation between memories, documents, chunks or entities (node ids are
/// `mem:<id>`, `doc:<id>`, `chunk:<doc>#<n>`, `ent:<kind>:<name>`; a bare id is a
/// memory).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RelKind {
    /// `from` replaces `to`: `to` is hidden from search and never ranked above `from`.
    Supersedes,
    /// `from` updates part of `to`: both are returned, newest first.
    PartialUpdate,
    /// Related.
    RelatedTo,
    /// They disagree: both are marked; the lower-trust side is flagged.
    Contradicts,
    /// `from` was derived from `to`.
    DerivedFrom,
    /// `from` (a chunk, a memory) mentions the entity `to`.
    Mentions,
    /// `from` is part of `to` (a chunk of a document).
    PartOf,
}

impl RelKind {
    /// Every kind.
    pub const ALL: [RelKind; 7] = [
        RelKind::Supersedes,
        RelKind::PartialUpdate,
        RelKind::RelatedTo,
        RelKind::Contradicts,
        RelKind::DerivedFrom,
        RelKind::Mentions,
        RelKind::PartOf,
    ];

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            RelKind::Supersedes => "SUPERSEDES",
            RelKind::PartialUpdate => "PARTIAL_UPDATE",
            RelKind::RelatedTo => "RELATED_TO",
            RelKind::Contradicts => "CONTRADICTS",
            RelKind::DerivedFrom => "DERIVED_FROM",
            RelKind::Mentions => "MENTIONS",
            RelKind::PartOf => "PART_OF",
        }
    }

    /// Parse a name (any case, `-` or `_`).
    pub fn parse(s: &str) -> Option<RelKind> {
        let s = s.to_ascii_uppercase().replace('-', "_");
        RelKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// A relation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Relation {
    /// Source node.
    pub from: String,
    /// Kind.
    pub kind: RelKind,
    /// Target node.
    pub to: String,
    /// Who made it.
    pub by: String,
    /// When, ms since the epoch.
    pub at_ms: u64,
}

/// Which memories to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only these statuses (empty: active only).
    pub statuses: Vec<Status>,
    /// Only this tenant (empty: any).
    pub tenant: String,
    /// Only this project (empty: any).
    pub project: String,
    /// Only this session (empty: any).
    pub session: String,
    /// Only these kinds (empty: any).
    pub kinds: Vec<Kind>,
}

impl Filter {
    /// Whether `m` passes.
    pub fn matches(&self, m: &Memory) -> bool {
        let statuses: &[Status] = if self.statuses.is_empty() {
            &[Status::Active]
        } else {
            &self.statuses
        };
        statuses.contains(&m.status)
            && self.in_scope(m)
            && (self.kinds.is_empty() || self.kinds.contains(&m.kind))
    }

    /// Whether `m` is in the tenant, project and session asked for (status and kind
    /// aside).
    pub fn in_scope(&self, m: &Memory) -> bool {
        (self.tenant.is_empty() || self.tenant == m.scope.tenant)
            && (self.project.is_empty() || self.project == m.scope.project)
            && (self.session.is_empty() || self.session == m.scope.session)
    }
}
