//! The AgentLoader: every `*.md` in one or more folders becomes an agent; disabled ones
//! are checked but not run. [`AgentLoader::reload`] picks up added, changed and deleted
//! files; [`AgentLoader::watch`] does so in the background (polling file metadata every
//! 100 ms, so a change is live well within half a second, with no platform-specific
//! watcher). A broken edit is rejected with an error and the previous version of that
//! agent stays active.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::agent::{parse, Agent, AgentDef, AgentFactory, DefError};
use crate::tool::Registry;

/// What was read from one file last time.
#[derive(Clone)]
struct FileState {
    /// Its text (agent files are small: comparing text catches every edit, even two
    /// within one file-system timestamp tick).
    text: String,
    /// The definition in force from this file (the last good one).
    def: Option<AgentDef>,
    /// Why the current text was rejected, if it was.
    error: Option<DefError>,
}

#[derive(Default)]
struct State {
    files: BTreeMap<PathBuf, FileState>,
    agents: BTreeMap<String, Arc<dyn Agent>>,
    errors: Vec<DefError>,
    generation: u64,
}

/// Loads agents from folders and keeps them current.
pub struct AgentLoader {
    dirs: Vec<PathBuf>,
    factory: AgentFactory,
    state: RwLock<State>,
    stop: Arc<AtomicBool>,
}

/// Every `*.md` directly inside `dirs` (sorted, so duplicate-name errors are stable).
fn scan(dirs: &[PathBuf]) -> (Vec<PathBuf>, Vec<DefError>) {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for d in dirs {
        match std::fs::read_dir(d) {
            Ok(rd) => {
                for e in rd.flatten() {
                    let p = e.path();
                    if p.extension().is_some_and(|x| x == "md") && p.is_file() {
                        files.push(p);
                    }
                }
            }
            Err(e) => errors.push(DefError {
                path: d.clone(),
                line: None,
                message: format!("cannot read the agents folder: {e}"),
            }),
        }
    }
    files.sort();
    (files, errors)
}

impl AgentLoader {
    /// Load every agent in `dirs`. Files with errors are left out and listed by
    /// [`AgentLoader::errors`].
    pub fn new(dirs: Vec<PathBuf>, registry: Registry) -> Self {
        let loader = AgentLoader {
            dirs,
            factory: AgentFactory::new(registry.clone()),
            state: RwLock::new(State::default()),
            stop: Arc::new(AtomicBool::new(false)),
        };
        loader.reload_with(&registry);
        loader
    }

    /// Re-read changed files; returns true when the set of agents changed.
    pub fn reload(&self) -> bool {
        let registry = self.factory_registry();
        self.reload_with(&registry)
    }

    fn factory_registry(&self) -> Registry {
        self.factory.registry().clone()
    }

    fn reload_with(&self, registry: &Registry) -> bool {
        let (paths, mut errors) = scan(&self.dirs);
        let old = self.state.read().expect("agent state lock").files.clone();
        let mut files: BTreeMap<PathBuf, FileState> = BTreeMap::new();
        let mut changed = old.len() != paths.len() || old.keys().zip(&paths).any(|(a, b)| a != b);
        for p in &paths {
            let text = match std::fs::read_to_string(p) {
                Ok(t) => t,
                Err(e) => {
                    errors.push(DefError {
                        path: p.clone(),
                        line: None,
                        message: format!("cannot read: {e}"),
                    });
                    if let Some(prev) = old.get(p) {
                        files.insert(p.clone(), prev.clone());
                    }
                    continue;
                }
            };
            let prev = old.get(p);
            if let Some(prev) = prev.filter(|f| f.text == text) {
                errors.extend(prev.error.clone());
                files.insert(p.clone(), prev.clone());
                continue;
            }
            changed = true;
            let (def, error) = match parse(p, &text, registry) {
                Ok(d) => (Some(d), None),
                Err(e) => {
                    let kept = prev.and_then(|f| f.def.clone());
                    if kept.is_some() {
                        tracing::warn!("{e}; keeping the previous version of this agent");
                    } else {
                        tracing::warn!("{e}");
                    }
                    errors.push(e.clone());
                    // The previous good version stays in force.
                    (kept, Some(e))
                }
            };
            files.insert(p.clone(), FileState { text, def, error });
        }
        // Names must be unique across files: the first file (in path order) wins.
        let mut agents: BTreeMap<String, Arc<dyn Agent>> = BTreeMap::new();
        let mut owner: BTreeMap<String, PathBuf> = BTreeMap::new();
        for (p, f) in &files {
            let Some(def) = &f.def else { continue };
            if let Some(first) = owner.get(&def.name) {
                errors.push(DefError {
                    path: p.clone(),
                    line: None,
                    message: format!(
                        "duplicate agent name {:?} (also defined in {})",
                        def.name,
                        first.display()
                    ),
                });
                continue;
            }
            owner.insert(def.name.clone(), p.clone());
            if !def.enabled {
                continue;
            }
            match self.factory.build(def.clone()) {
                Ok(a) => {
                    agents.insert(def.name.clone(), a);
                }
                Err(e) => errors.push(e),
            }
        }
        let mut st = self.state.write().expect("agent state lock");
        st.files = files;
        st.agents = agents;
        st.errors = errors;
        if changed {
            st.generation += 1;
        }
        changed
    }

    /// Enabled agents, by name.
    pub fn agents(&self) -> Vec<Arc<dyn Agent>> {
        self.state
            .read()
            .expect("agent state lock")
            .agents
            .values()
            .cloned()
            .collect()
    }

    /// Every definition read, enabled or not (for `agents list`).
    pub fn definitions(&self) -> Vec<AgentDef> {
        self.state
            .read()
            .expect("agent state lock")
            .files
            .values()
            .filter_map(|f| f.def.clone())
            .collect()
    }

    /// Enabled agents that take `role`.
    pub fn for_role(&self, role: &str) -> Vec<Arc<dyn Agent>> {
        self.agents()
            .into_iter()
            .filter(|a| a.def().role == role)
            .collect()
    }

    /// The errors of the last (re)load.
    pub fn errors(&self) -> Vec<DefError> {
        self.state.read().expect("agent state lock").errors.clone()
    }

    /// Bumped whenever a reload changed something.
    pub fn generation(&self) -> u64 {
        self.state.read().expect("agent state lock").generation
    }

    /// Reload in the background every `every` until the loader is dropped.
    pub fn watch(self: &Arc<Self>, every: Duration) {
        let weak = Arc::downgrade(self);
        let stop = self.stop.clone();
        std::thread::Builder::new()
            .name("agent-watch".into())
            .spawn(move || loop {
                std::thread::sleep(every);
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                match weak.upgrade() {
                    Some(l) => {
                        l.reload();
                    }
                    None => return,
                }
            })
            .expect("spawn the agent watcher");
    }
}

impl Drop for AgentLoader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}
