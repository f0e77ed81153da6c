//! The knowledge graph's entities: a rule-based extractor (projects, files, agents,
//! skills, people, concepts) and the MENTIONS relations that tie memories to them.
//! Node ids: `ent:<kind>:<name in lower case>`.

use serde::{Deserialize, Serialize};

use crate::error::MemResult;
use crate::store::MemoryStore;
use crate::types::{Memory, RelKind};

/// What an entity is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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
    "was", "has", "had", "prefers", "decided", "works", "lives",
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

/// Link a memory to the entities it mentions (MENTIONS relations); returns them.
pub fn link_mentions(
    store: &MemoryStore,
    m: &Memory,
    by: &str,
    now_ms: u64,
) -> MemResult<Vec<Entity>> {
    let mut ents = extract(&m.text);
    if let Some(s) = m.metadata.get("speaker").and_then(|v| v.as_str()) {
        ents.push(Entity {
            kind: EntityKind::Person,
            name: s.to_string(),
        });
    }
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
