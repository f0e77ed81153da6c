//! The knowledge graph's entities: a rule-based extractor (projects, files, agents,
//! skills, people, concepts) and the MENTIONS relations that tie memories to them.
//! Node ids: `ent:<kind>:<name in lower case>`.

use serde::{Deserialize, Serialize};

use crate::error::MemResult;
use crate::store::MemoryStore;
use crate::types::{Memory, RelKind};

/// What an entity is.
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
#[serde(rename_all = "lowercase")]
pub enum EntityKind {
    /// A project or repository.
    Project,
    /// A file.
    File,
    /// An agent.
    Agent,
    /// A skill.
    Skill,
    /// A person.
    Person,
    /// Anything else with a name.
    Concept,
}

impl EntityKind {
    /// Every kind.
    pub const ALL: [EntityKind; 6] = [
        EntityKind::Project,
        EntityKind::File,
        EntityKind::Agent,
        EntityKind::Skill,
        EntityKind::Person,
        EntityKind::Concept,
    ];

    /// The kind named `name` (case-insensitive; `repository`/`repo` are projects,
    /// `people` persons).
    pub fn parse(name: &str) -> Option<EntityKind> {
        let n = name.trim().to_lowercase();
        let n = match n.as_str() {
            "repo" | "repository" => "project",
            "people" | "persons" => "person",
            other => other.trim_end_matches('s'),
        };
        EntityKind::ALL.into_iter().find(|k| k.as_str() == n)
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            EntityKind::Project => "project",
            EntityKind::File => "file",
            EntityKind::Agent => "agent",
            EntityKind::Skill => "skill",
            EntityKind::Person => "person",
            EntityKind::Concept => "concept",
        }
    }
}

/// An entity found in a text.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
pub struct Entity {
    /// Kind.
    pub kind: EntityKind,
    /// Name as written.
    pub name: String,
}

impl Entity {
    /// Its graph node id.
    pub fn node(&self) -> String {
        format!("ent:{}:{}", self.kind.as_str(), self.name.to_lowercase())
    }
}

const FILE_EXT: &[&str] = &[
    "rs", "py", "md", "toml", "json", "ts", "js", "go", "java", "c", "h", "cpp", "txt", "yaml",
    "yml", "sh", "sql", "html", "css", "csv", "pdf",
];
const TITLES: &[&str] = &["mr", "mrs", "ms", "dr", "prof", "sir"];
const PERSON_VERBS: &[&str] = &[
    "said", "says", "told", "asked", "wrote", "thinks", "likes", "loves", "wants", "went", "is",
    "was", "has", "had", "prefers", "decided", "works", "lives", "moved", "uses", "used", "built",
    "fixed", "added", "thinks", "believes", "knows", "met", "visited",
];
/// Capitalised words that start sentences or questions and name nothing.
const COMMON: &[&str] = &[
    "The", "A", "An", "This", "That", "These", "Those", "It", "I", "We", "You", "He", "She",
    "They", "What", "When", "Where", "Who", "Why", "How", "Which", "Did", "Does", "Do", "Is",
    "Are", "Was", "Were", "Yes", "No", "Hey", "Hi", "Hello", "Thanks", "Thank", "Wow", "Oh", "My",
    "Our", "Your", "His", "Her", "Their", "In", "On", "At", "For", "And", "But", "Or", "So", "If",
    "Also", "Just", "Not", "Use", "Always", "Never",
];

fn clean(w: &str) -> &str {
    w.trim_matches(|c: char| !c.is_alphanumeric() && c != '.' && c != '/' && c != '_' && c != '-')
        .trim_end_matches(['.', '-'])
}

fn add(out: &mut Vec<Entity>, kind: EntityKind, name: &str) {
    let name = name.trim().trim_matches(|c: char| !c.is_alphanumeric());
    if name.chars().count() < 2 || name.len() > 80 {
        return;
    }
    let e = Entity {
        kind,
        name: name.to_string(),
    };
    if !out
        .iter()
        .any(|x| x.kind == e.kind && x.name.eq_ignore_ascii_case(&e.name))
    {
        out.push(e);
    }
}

/// Entities in a text, by rules: file paths by extension; `project X`, `agent X`,
/// `skill X` / `skilled in X`; names after a title or before a person verb as people;
/// other runs of capitalised words, quoted and `backticked` terms as concepts.
pub fn extract(text: &str) -> Vec<Entity> {
    let mut out: Vec<Entity> = Vec::new();
    let words: Vec<&str> = text.split_whitespace().collect();
    let lower: Vec<String> = words.iter().map(|w| clean(w).to_lowercase()).collect();
    for (i, w) in words.iter().enumerate() {
        let c = clean(w);
        if let Some((stem, ext)) = c.rsplit_once('.') {
            if !stem.is_empty() && FILE_EXT.contains(&ext.to_lowercase().as_str()) {
                add(&mut out, EntityKind::File, c);
                continue;
            }
        }
        let next = words.get(i + 1).map(|n| clean(n)).unwrap_or("");
        match lower[i].as_str() {
            "project" | "repo" | "repository" if !next.is_empty() => {
                add(&mut out, EntityKind::Project, next)
            }
            "agent"
                if !next.is_empty() && next.chars().next().is_some_and(char::is_alphanumeric) =>
            {
                add(&mut out, EntityKind::Agent, next)
            }
            "skill" | "skills" => add(&mut out, EntityKind::Skill, next),
            _ => {}
        }
        if lower[i].ends_with("-agent") || lower[i].ends_with("_agent") {
            add(&mut out, EntityKind::Agent, c);
        }
        if (lower[i] == "in" && i > 0 && matches!(lower[i - 1].as_str(), "skilled" | "expert"))
            && !next.is_empty()
        {
            add(&mut out, EntityKind::Skill, next);
        }
    }
    // Quoted and backticked terms.
    for q in ['"', '`', '“'] {
        let close = if q == '“' { '”' } else { q };
        let mut rest = text;
        while let Some(a) = rest.find(q) {
            let after = &rest[a + q.len_utf8()..];
            let Some(b) = after.find(close) else { break };
            let term = &after[..b];
            if (1..=6).contains(&term.split_whitespace().count()) {
                add(&mut out, EntityKind::Concept, term);
            }
            rest = &after[b + close.len_utf8()..];
        }
    }
    // Runs of capitalised words.
    let mut i = 0;
    while i < words.len() {
        let c = clean(words[i]);
        let cap = |w: &str| w.chars().next().is_some_and(char::is_uppercase);
        if cap(c) && !COMMON.contains(&c) {
            let start = i;
            let mut run = vec![c];
            while i + 1 < words.len() && !words[i].ends_with([',', '.', ';', ':', '!', '?']) {
                let n = clean(words[i + 1]);
                if cap(n) && !COMMON.contains(&n) {
                    run.push(n);
                    i += 1;
                } else {
                    break;
                }
            }
            let name = run.join(" ");
            let titled = start > 0 && TITLES.contains(&lower[start - 1].trim_end_matches('.'));
            let verb_next = lower
                .get(i + 1)
                .is_some_and(|n| PERSON_VERBS.contains(&n.as_str()));
            let possessive = words[i].ends_with("'s") || words[i].ends_with("’s");
            let kind = if titled || (run.len() <= 3 && (verb_next || possessive)) {
                EntityKind::Person
            } else {
                EntityKind::Concept
            };
            let name = name.trim_end_matches("'s").trim_end_matches("’s");
            if !out.iter().any(|e| {
                matches!(
                    e.kind,
                    EntityKind::File | EntityKind::Project | EntityKind::Agent
                ) && e.name.eq_ignore_ascii_case(name)
            }) {
                add(&mut out, kind, name);
            }
        }
        i += 1;
    }
    out
}

/// The entities a memory names, by rules: [`extract`] over its text, and its speaker
/// (`speaker` metadata) as a person.
pub fn rule_entities(m: &Memory) -> Vec<Entity> {
    let mut ents = extract(&m.text);
    if let Some(s) = m.metadata.get("speaker").and_then(|v| v.as_str()) {
        ents.push(Entity {
            kind: EntityKind::Person,
            name: s.to_string(),
        });
    }
    ents
}

/// An entity named `name` of `kind`, cleaned as the extractor cleans names; `None` when
/// nothing of a name is left (under two characters, or over 80 bytes).
pub fn entity(kind: EntityKind, name: &str) -> Option<Entity> {
    let mut out = Vec::new();
    add(&mut out, kind, name);
    out.pop()
}

/// Link a memory to the entities its rules find (MENTIONS relations); returns them.
pub fn link_mentions(
    store: &MemoryStore,
    m: &Memory,
    by: &str,
    now_ms: u64,
) -> MemResult<Vec<Entity>> {
    link_entities(store, m, rule_entities(m), by, now_ms)
}

/// Link a memory to `ents` (MENTIONS relations, one per entity node; a link that
/// exists already is kept); returns them, one per node.
pub fn link_entities(
    store: &MemoryStore,
    m: &Memory,
    mut ents: Vec<Entity>,
    by: &str,
    now_ms: u64,
) -> MemResult<Vec<Entity>> {
    ents.sort();
    ents.dedup_by(|a, b| a.node() == b.node());
    for e in &ents {
        match store.link(&m.id, RelKind::Mentions, &e.node(), by, now_ms) {
            Ok(_) | Err(crate::MemoryError::Conflict(_)) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(ents)
}

/// What the graph holds around an entity.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Neighbourhood {
    /// The entity's node id.
    pub node: String,
    /// The memories that mention it, oldest link first.
    pub memories: Vec<String>,
    /// Entities those memories also mention, with how many of them do, most first.
    pub related: Vec<(String, usize)>,
}

/// The memories mentioning `node` (an entity node id, `ent:<kind>:<name>`) and the
/// entities one hop away through them.
pub fn neighbourhood(store: &MemoryStore, node: &str) -> MemResult<Neighbourhood> {
    let mut out = Neighbourhood {
        node: node.to_string(),
        ..Default::default()
    };
    let mut rels: Vec<_> = store
        .relations(node)?
        .into_iter()
        .filter(|r| r.kind == RelKind::Mentions && r.to == node)
        .collect();
    rels.sort_by_key(|r| r.at_ms);
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    // (memory, MENTIONS, node) is unique: each memory comes once.
    let mems: Vec<&str> = rels.iter().map(|r| r.from.as_str()).collect();
    let theirs = store.backend().relations_many(&mems)?;
    for (r, others) in rels.iter().zip(theirs) {
        for o in others {
            if o.kind == RelKind::Mentions && o.from == r.from && o.to != node {
                *counts.entry(o.to).or_default() += 1;
            }
        }
        out.memories.push(r.from.clone());
    }
    let mut related: Vec<(String, usize)> = counts.into_iter().collect();
    related.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out.related = related;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(t: &str) -> Vec<(EntityKind, String)> {
        extract(t).into_iter().map(|e| (e.kind, e.name)).collect()
    }

    #[test]
    fn rules_find_each_kind() {
        let e =
            names("Alice said the retry logic in src/llm/client.rs belongs to project neuralcore.");
        assert!(e.contains(&(EntityKind::Person, "Alice".into())), "{e:?}");
        assert!(
            e.contains(&(EntityKind::File, "src/llm/client.rs".into())),
            "{e:?}"
        );
        assert!(
            e.contains(&(EntityKind::Project, "neuralcore".into())),
            "{e:?}"
        );
        let e =
            names("The grader-agent needs the skill rust; Dr. Bob Stone is skilled in tantivy.");
        assert!(
            e.contains(&(EntityKind::Agent, "grader-agent".into())),
            "{e:?}"
        );
        assert!(e.contains(&(EntityKind::Skill, "rust".into())), "{e:?}");
        assert!(e.contains(&(EntityKind::Skill, "tantivy".into())), "{e:?}");
        assert!(
            e.contains(&(EntityKind::Person, "Bob Stone".into())),
            "{e:?}"
        );
        let e = names("We moved to \"hybrid search\" after reading about Reciprocal Rank Fusion.");
        assert!(
            e.contains(&(EntityKind::Concept, "hybrid search".into())),
            "{e:?}"
        );
        assert!(
            e.contains(&(EntityKind::Concept, "Reciprocal Rank Fusion".into())),
            "{e:?}"
        );
        assert!(!e.iter().any(|x| x.1 == "We"), "{e:?}");
    }
}
