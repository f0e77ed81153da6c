//! The per-collection vector index: HNSW (Malkov & Yashunin, 2016) over L2-normalized
//! vectors scored by dot product (cosine similarity), with exact search for small
//! collections, tombstone deletes with compaction, and a crash-safe snapshot file.
//!
//! The document store is the source of truth (vectors live in its embedding cache,
//! committed with their chunks); this index is derived from it like the keyword index:
//! its snapshot carries the store generation it reflects, and the engine replays the
//! store's last batch or rebuilds when it is behind.
//!
//! The graph is deterministic: a node's level is drawn from a hash of its chunk key, and
//! insertion order is the caller's, so the same batches give the same graph.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::RwLock;

pub use neuralcore_core::dot;
use neuralcore_core::DocKey;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Errors of the vector index.
#[derive(Debug, thiserror::Error)]
pub enum VectorError {
    /// A vector does not have the index's dimension, or is not finite.
    #[error("invalid vector: {0}")]
    Invalid(String),
    /// File system failure.
    #[error("vector index I/O error on {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

pub use neuralcore_core::settings::HnswParams;

/// One ranked chunk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VectorHit {
    /// Document key.
    pub doc: DocKey,
    /// Chunk ordinal.
    pub ordinal: u32,
    /// Cosine similarity to the query.
    pub score: f32,
}

/// Counts for `collections` and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct VectorStats {
    /// Vectors that can be found.
    pub live: usize,
    /// Deleted vectors still in the graph (until compaction).
    pub deleted: usize,
    /// Dimension.
    pub dim: usize,
    /// Store generation the index reflects.
    pub generation: u64,
}

/// A persistent HNSW index of one collection for one embedding model.
pub struct VectorIndex {
    path: Option<PathBuf>,
    graph: RwLock<Graph>,
    /// One writer at a time: [`VectorIndex::apply`] builds the next graph (and writes
    /// its snapshot) under this lock alone, so searches go on over the current graph and
    /// wait only for the swap — a compaction rebuilds the whole graph, seconds on a
    /// collection of some thousands of chunks.
    /// It also holds whether the snapshot on disk is behind the graph (after
    /// [`VectorIndex::apply_unsaved`]).
    writer: std::sync::Mutex<bool>,
}

#[derive(Clone)]
struct Graph {
    model: String,
    dim: usize,
    generation: u64,
    params: HnswParams,
    /// Node `i`'s vector is `vectors[i * dim..(i + 1) * dim]`.
    vectors: Vec<f32>,
    keys: Vec<(DocKey, u32)>,
    /// `links[i][l]`: neighbours of node `i` on layer `l` (0..=level of `i`).
    links: Vec<Vec<Vec<u32>>>,
    deleted: Vec<bool>,
    n_deleted: usize,
    /// Live node of each chunk.
    live: HashMap<(DocKey, u32), u32>,
    entry: Option<u32>,
    max_level: usize,
}

/// A candidate: similarity and node, ordered by similarity (ties by node id).
#[derive(Clone, Copy, PartialEq)]
struct Cand(f32, u32);

impl Eq for Cand {}
impl PartialOrd for Cand {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Cand {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .total_cmp(&other.0)
            .then_with(|| other.1.cmp(&self.1))
    }
}

/// Scale `v` to unit length; an all-zero vector stays zero.
pub fn normalize(v: &mut [f32]) {
    let n = dot(v, v).sqrt();
    if n > 0.0 {
        for x in v.iter_mut() {
            *x /= n;
        }
    }
}

/// The level of a node, from a hash of its key: P(level ≥ l) = M^-l.
fn level_for(key: (DocKey, u32), m: usize) -> usize {
    let mut z = key.0 ^ (u64::from(key.1)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let u = ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let ml = 1.0 / (m.max(2) as f64).ln();
    ((-u.ln() * ml) as usize).min(16)
}

/// A visited set sized to the graph.
struct Visited(Vec<u64>);

impl Visited {
    fn new(n: usize) -> Self {
        Visited(vec![0; n.div_ceil(64)])
    }
    /// True when `i` was not visited before.
    #[inline]
    fn insert(&mut self, i: u32) -> bool {
        let (w, b) = ((i / 64) as usize, i % 64);
        let fresh = self.0[w] & (1 << b) == 0;
        self.0[w] |= 1 << b;
        fresh
    }
}

impl Graph {
    fn new(model: &str, dim: usize, params: HnswParams) -> Self {
        Graph {
            model: model.to_string(),
            dim,
            generation: 0,
            params,
            vectors: Vec::new(),
            keys: Vec::new(),
            links: Vec::new(),
            deleted: Vec::new(),
            n_deleted: 0,
            live: HashMap::new(),
            entry: None,
            max_level: 0,
        }
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    #[inline]
    fn vec(&self, i: u32) -> &[f32] {
        let i = i as usize;
        &self.vectors[i * self.dim..(i + 1) * self.dim]
    }

    fn max_links(&self, layer: usize) -> usize {
        if layer == 0 {
            self.params.m * 2
        } else {
            self.params.m
        }
    }

    /// Greedy walk towards `q` on one layer.
    fn greedy(&self, q: &[f32], mut ep: u32, layer: usize) -> u32 {
        let mut best = dot(q, self.vec(ep));
        loop {
            let mut changed = false;
            for &n in &self.links[ep as usize][layer] {
                let s = dot(q, self.vec(n));
                if s > best {
                    best = s;
                    ep = n;
                    changed = true;
                }
            }
            if !changed {
                return ep;
            }
        }
    }

    /// The `ef` nodes nearest to `q` on `layer` reachable from `eps`, best first. With
    /// `live_only`, deleted nodes are walked through but not returned.
    fn search_layer(
        &self,
        q: &[f32],
        eps: &[u32],
        ef: usize,
        layer: usize,
        live_only: bool,
    ) -> Vec<Cand> {
        let mut visited = Visited::new(self.len());
        let mut cands: BinaryHeap<Cand> = BinaryHeap::new();
        // Min-heap of results through Reverse.
        let mut res: BinaryHeap<std::cmp::Reverse<Cand>> = BinaryHeap::new();
        for &e in eps {
            if !visited.insert(e) {
                continue;
            }
            let c = Cand(dot(q, self.vec(e)), e);
            cands.push(c);
            if !(live_only && self.deleted[e as usize]) {
                res.push(std::cmp::Reverse(c));
            }
        }
        while let Some(c) = cands.pop() {
            if res.len() >= ef {
                if let Some(std::cmp::Reverse(worst)) = res.peek() {
                    if c.0 < worst.0 {
                        break;
                    }
                }
            }
            for &n in &self.links[c.1 as usize][layer] {
                if !visited.insert(n) {
                    continue;
                }
                let s = dot(q, self.vec(n));
                let worst = res.peek().map(|r| r.0 .0).unwrap_or(f32::NEG_INFINITY);
                if res.len() < ef || s > worst {
                    let cand = Cand(s, n);
                    cands.push(cand);
                    if !(live_only && self.deleted[n as usize]) {
                        res.push(std::cmp::Reverse(cand));
                        if res.len() > ef {
                            res.pop();
                        }
                    }
                }
            }
        }
        let mut out: Vec<Cand> = res.into_iter().map(|r| r.0).collect();
        out.sort_by(|a, b| b.cmp(a));
        out
    }

    /// Malkov's neighbour-selection heuristic: keep a candidate only when it is nearer
    /// to the new node than to every neighbour kept so far (spreads links out).
    fn select(&self, cands: &[Cand], m: usize) -> Vec<u32> {
        let mut kept: Vec<u32> = Vec::with_capacity(m);
        for c in cands {
            if kept.len() >= m {
                break;
            }
            let v = self.vec(c.1);
            if kept.iter().all(|&k| dot(v, self.vec(k)) < c.0) {
                kept.push(c.1);
            }
        }
        kept
    }

    fn insert(&mut self, key: (DocKey, u32), v: &[f32]) {
        if let Some(old) = self.live.remove(&key) {
            self.deleted[old as usize] = true;
            self.n_deleted += 1;
        }
        let id = self.keys.len() as u32;
        let level = level_for(key, self.params.m);
        self.vectors.extend_from_slice(v);
        self.keys.push(key);
        self.links.push(vec![Vec::new(); level + 1]);
        self.deleted.push(false);
        self.live.insert(key, id);
        let Some(entry) = self.entry else {
            self.entry = Some(id);
            self.max_level = level;
            return;
        };
        let q = self.vec(id).to_vec();
        let mut ep = entry;
        for layer in (level + 1..=self.max_level).rev() {
            ep = self.greedy(&q, ep, layer);
        }
        let mut eps = vec![ep];
        for layer in (0..=level.min(self.max_level)).rev() {
            let found = self.search_layer(&q, &eps, self.params.ef_construction, layer, false);
            let chosen = self.select(&found, self.max_links(layer));
            for &n in &chosen {
                self.link(n, id, layer);
            }
            self.links[id as usize][layer] = chosen;
            eps = found.iter().map(|c| c.1).collect();
        }
        if level > self.max_level {
            self.max_level = level;
            self.entry = Some(id);
        }
    }

    /// Add `to` to `from`'s links on `layer`, pruning with the heuristic when full.
    fn link(&mut self, from: u32, to: u32, layer: usize) {
        let max = self.max_links(layer);
        let list = &mut self.links[from as usize][layer];
        if list.len() < max {
            list.push(to);
            return;
        }
        let fv = self.vec(from);
        let mut cands: Vec<Cand> = self.links[from as usize][layer]
            .iter()
            .chain(std::iter::once(&to))
            .map(|&n| Cand(dot(fv, self.vec(n)), n))
            .collect();
        cands.sort_by(|a, b| b.cmp(a));
        let kept = self.select(&cands, max);
        self.links[from as usize][layer] = kept;
    }

    fn delete(&mut self, key: (DocKey, u32)) -> bool {
        match self.live.remove(&key) {
            Some(i) => {
                self.deleted[i as usize] = true;
                self.n_deleted += 1;
                true
            }
            None => false,
        }
    }

    /// Rebuild without the deleted nodes, inserting the live ones in node order.
    fn compact(&mut self) {
        let mut fresh = Graph::new(&self.model, self.dim, self.params);
        fresh.generation = self.generation;
        for i in 0..self.len() {
            if !self.deleted[i] {
                fresh.insert(self.keys[i], self.vec(i as u32));
            }
        }
        *self = fresh;
    }

    fn exact(&self, q: &[f32], k: usize) -> Vec<Cand> {
        let mut heap: BinaryHeap<std::cmp::Reverse<Cand>> = BinaryHeap::with_capacity(k + 1);
        for i in 0..self.len() {
            if self.deleted[i] {
                continue;
            }
            let c = Cand(dot(q, self.vec(i as u32)), i as u32);
            if heap.len() < k {
                heap.push(std::cmp::Reverse(c));
            } else if heap.peek().is_some_and(|w| c > w.0) {
                heap.pop();
                heap.push(std::cmp::Reverse(c));
            }
        }
        let mut out: Vec<Cand> = heap.into_iter().map(|r| r.0).collect();
        out.sort_by(|a, b| b.cmp(a));
        out
    }

    fn search(&self, q: &[f32], k: usize, exact: bool) -> Vec<Cand> {
        if k == 0 || self.live.is_empty() {
            return Vec::new();
        }
        if exact || self.live.len() < self.params.exact_below {
            return self.exact(q, k);
        }
        let Some(entry) = self.entry else {
            return Vec::new();
        };
        let mut ep = entry;
        for layer in (1..=self.max_level).rev() {
            ep = self.greedy(q, ep, layer);
        }
        let mut found = self.search_layer(q, &[ep], self.params.ef_search.max(k), 0, true);
        found.truncate(k);
        found
    }
}

const MAGIC: &[u8; 8] = b"NCHNSW01";

#[derive(Serialize, Deserialize)]
struct Header {
    model: String,
    dim: usize,
    generation: u64,
    params: HnswParams,
    nodes: usize,
    entry: Option<u32>,
    max_level: usize,
}

fn io_err(path: &Path, source: std::io::Error) -> VectorError {
    VectorError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl Graph {
    fn encode(&self) -> Vec<u8> {
        let header = Header {
            model: self.model.clone(),
            dim: self.dim,
            generation: self.generation,
            params: self.params,
            nodes: self.len(),
            entry: self.entry,
            max_level: self.max_level,
        };
        let h = serde_json::to_vec(&header).expect("serializable");
        let mut out = Vec::with_capacity(self.vectors.len() * 4 + self.len() * 200);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(h.len() as u32).to_le_bytes());
        out.extend_from_slice(&h);
        for i in 0..self.len() {
            let (d, o) = self.keys[i];
            out.extend_from_slice(&d.to_le_bytes());
            out.extend_from_slice(&o.to_le_bytes());
            out.push(self.deleted[i] as u8);
            out.push(self.links[i].len() as u8);
            for layer in &self.links[i] {
                out.extend_from_slice(&(layer.len() as u16).to_le_bytes());
                for n in layer {
                    out.extend_from_slice(&n.to_le_bytes());
                }
            }
            for x in self.vec(i as u32) {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        let sum = Sha256::digest(&out);
        out.extend_from_slice(&sum);
        out
    }

    /// Parse a snapshot; `None` when it is damaged in any way.
    fn decode(bytes: &[u8]) -> Option<Graph> {
        if bytes.len() < MAGIC.len() + 4 + 32 || &bytes[..8] != MAGIC {
            return None;
        }
        let (body, sum) = bytes.split_at(bytes.len() - 32);
        if Sha256::digest(body).as_slice() != sum {
            return None;
        }
        let mut r = Cursor { b: body, at: 8 };
        let hlen = r.u32()? as usize;
        let header: Header = serde_json::from_slice(r.take(hlen)?).ok()?;
        let mut g = Graph::new(&header.model, header.dim, header.params);
        g.generation = header.generation;
        g.entry = header.entry;
        g.max_level = header.max_level;
        for i in 0..header.nodes {
            let d = u64::from_le_bytes(r.take(8)?.try_into().ok()?);
            let o = r.u32()?;
            let deleted = r.take(1)?[0] != 0;
            let levels = r.take(1)?[0] as usize;
            let mut links = Vec::with_capacity(levels);
            for _ in 0..levels {
                let n = u16::from_le_bytes(r.take(2)?.try_into().ok()?) as usize;
                let mut l = Vec::with_capacity(n);
                for _ in 0..n {
                    let x = r.u32()?;
                    if x as usize >= header.nodes {
                        return None;
                    }
                    l.push(x);
                }
                links.push(l);
            }
            for _ in 0..header.dim {
                g.vectors
                    .push(f32::from_le_bytes(r.take(4)?.try_into().ok()?));
            }
            g.keys.push((d, o));
            g.links.push(links);
            g.deleted.push(deleted);
            if deleted {
                g.n_deleted += 1;
            } else {
                g.live.insert((d, o), i as u32);
            }
        }
        if r.at != body.len() || g.entry.is_some_and(|e| e as usize >= header.nodes) {
            return None;
        }
        Some(g)
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
}

impl VectorIndex {
    /// Open the snapshot at `path` (created on the first [`VectorIndex::apply`]). A
    /// missing or damaged snapshot, or one made with another model, dimension or
    /// parameters, opens empty at generation 0, so the engine rebuilds it.
    pub fn open(path: &Path, model: &str, dim: usize, params: HnswParams) -> Self {
        let mut graph = Graph::new(model, dim, params);
        match std::fs::File::open(path) {
            Ok(f) => {
                let mut bytes = Vec::new();
                let read = BufReader::new(f).read_to_end(&mut bytes);
                match read.ok().and_then(|_| Graph::decode(&bytes)) {
                    // The graph depends on M and ef_construction only: a snapshot saved
                    // with another ef_search or exact_below is the same graph.
                    Some(mut g)
                        if g.model == model
                            && g.dim == dim
                            && (g.params.m, g.params.ef_construction)
                                == (params.m, params.ef_construction) =>
                    {
                        g.params = params;
                        graph = g;
                    }
                    Some(_) => tracing::info!(
                        path = %path.display(),
                        "vector index made with other settings: rebuilding"
                    ),
                    None => tracing::warn!(
                        path = %path.display(),
                        "vector index snapshot damaged: rebuilding"
                    ),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(path = %path.display(), "cannot read vector index: {e}"),
        }
        VectorIndex {
            path: Some(path.to_path_buf()),
            graph: RwLock::new(graph),
            writer: Default::default(),
        }
    }

    /// An index that lives in memory only.
    pub fn in_memory(model: &str, dim: usize, params: HnswParams) -> Self {
        VectorIndex {
            path: None,
            graph: RwLock::new(Graph::new(model, dim, params)),
            writer: Default::default(),
        }
    }

    /// Store generation the index reflects.
    pub fn generation(&self) -> u64 {
        self.graph.read().expect("vector index lock").generation
    }

    /// Counts.
    pub fn stats(&self) -> VectorStats {
        let g = self.graph.read().expect("vector index lock");
        VectorStats {
            live: g.live.len(),
            deleted: g.n_deleted,
            dim: g.dim,
            generation: g.generation,
        }
    }

    /// The bytes the graph holds on the heap: vectors, keys, neighbour lists (with
    /// their allocations' headers) and the chunk map, as allocated (capacities), not
    /// counting the allocator's own slack.
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let g = self.graph.read().expect("vector index lock");
        let links: usize = g
            .links
            .iter()
            .map(|layers| {
                layers.capacity() * size_of::<Vec<u32>>()
                    + layers
                        .iter()
                        .map(|l| l.capacity() * size_of::<u32>())
                        .sum::<usize>()
            })
            .sum();
        g.vectors.capacity() * size_of::<f32>()
            + g.keys.capacity() * size_of::<(DocKey, u32)>()
            + g.links.capacity() * size_of::<Vec<Vec<u32>>>()
            + links
            + g.deleted.capacity()
            // hashbrown: a control byte and a slot per bucket, buckets ≥ 8/7 of entries.
            + g.live.capacity() * 8 / 7 * (size_of::<((DocKey, u32), u32)>() + 1)
    }

    /// Remove every chunk of the `removed` documents, add (or replace) the `added`
    /// chunk vectors, and record `generation`; then persist the snapshot (written to a
    /// temporary file and renamed over the old one, so a crash leaves the old or the new
    /// snapshot, never a torn one). On any error nothing changes.
    pub fn apply(
        &self,
        removed: &[DocKey],
        added: &[((DocKey, u32), Vec<f32>)],
        generation: u64,
    ) -> Result<(), VectorError> {
        self.apply_with(removed, added, generation, true, false)
    }

    /// Replace every vector by `added` at `generation` (a rebuild), persisted; searches
    /// meanwhile see the old graph whole, then the new one. On any error nothing
    /// changes.
    pub fn replace(
        &self,
        added: &[((DocKey, u32), Vec<f32>)],
        generation: u64,
    ) -> Result<(), VectorError> {
        self.apply_with(&[], added, generation, true, true)
    }

    /// [`VectorIndex::apply`] without writing the snapshot, which stays behind until
    /// [`VectorIndex::save`] or the next `apply`: for an ingest that commits many
    /// batches, where writing the whole graph after each would cost more than the
    /// batch. A crash meanwhile leaves the older snapshot, which the next open brings up
    /// to the store from the cached vectors (nothing is embedded again).
    pub fn apply_unsaved(
        &self,
        removed: &[DocKey],
        added: &[((DocKey, u32), Vec<f32>)],
        generation: u64,
    ) -> Result<(), VectorError> {
        self.apply_with(removed, added, generation, false, false)
    }

    /// Write the snapshot if [`VectorIndex::apply_unsaved`] left it behind.
    pub fn save(&self) -> Result<(), VectorError> {
        let mut behind = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if !*behind {
            return Ok(());
        }
        if let Some(path) = &self.path {
            let bytes = self.graph.read().expect("vector index lock").encode();
            save(path, &bytes)?;
        }
        *behind = false;
        Ok(())
    }

    fn apply_with(
        &self,
        removed: &[DocKey],
        added: &[((DocKey, u32), Vec<f32>)],
        generation: u64,
        persist: bool,
        fresh: bool,
    ) -> Result<(), VectorError> {
        // The writer lock guards no data: a panic in an earlier build left the graph as it
        // was, so a poisoned lock is taken as it is.
        let mut behind = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = {
            let g = self.graph.read().expect("vector index lock");
            if fresh {
                Graph::new(&g.model, g.dim, g.params)
            } else {
                g.clone()
            }
        };
        for (key, v) in added {
            if v.len() != next.dim {
                return Err(VectorError::Invalid(format!(
                    "chunk {:016x}#{} has {} dimensions, the index {}",
                    key.0,
                    key.1,
                    v.len(),
                    next.dim
                )));
            }
            if v.iter().any(|x| !x.is_finite()) {
                return Err(VectorError::Invalid(format!(
                    "chunk {:016x}#{} has a non-finite component",
                    key.0, key.1
                )));
            }
        }
        if !removed.is_empty() {
            let gone: std::collections::HashSet<DocKey> = removed.iter().copied().collect();
            let keys: Vec<(DocKey, u32)> = next
                .live
                .keys()
                .filter(|k| gone.contains(&k.0))
                .copied()
                .collect();
            for k in keys {
                next.delete(k);
            }
        }
        for (key, v) in added {
            let mut v = v.clone();
            normalize(&mut v);
            next.insert(*key, &v);
        }
        if next.n_deleted > 1024 && next.n_deleted * 4 > next.live.len() {
            next.compact();
        }
        next.generation = generation;
        if let Some(path) = &self.path {
            if persist {
                save(path, &next.encode())?;
                *behind = false;
            } else {
                *behind = true;
            }
        }
        let mut g = self.graph.write().expect("vector index lock");
        // `set_ef_search` may have run meanwhile; the graph has not changed (one writer).
        next.params.ef_search = g.params.ef_search;
        let old = std::mem::replace(&mut *g, next);
        drop(g);
        drop(old); // freed after searches may go on
        Ok(())
    }

    /// Drop every vector (keeping model and parameters) at generation 0.
    pub fn clear(&self) {
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut g = self.graph.write().expect("vector index lock");
        *g = Graph::new(&g.model, g.dim, g.params);
    }

    /// The `k` chunks most similar to `query` (normalized here). `exact` forces a full
    /// scan (for recall measurements).
    pub fn search(&self, query: &[f32], k: usize, exact: bool) -> Vec<VectorHit> {
        let g = self.graph.read().expect("vector index lock");
        if query.len() != g.dim {
            return Vec::new();
        }
        let mut q = query.to_vec();
        normalize(&mut q);
        g.search(&q, k, exact)
            .into_iter()
            .map(|c| {
                let (doc, ordinal) = g.keys[c.1 as usize];
                VectorHit {
                    doc,
                    ordinal,
                    score: c.0,
                }
            })
            .collect()
    }

    /// Change the search-time candidate list size (not persisted parameters' identity:
    /// the graph does not depend on it).
    pub fn set_ef_search(&self, ef: usize) {
        let mut g = self.graph.write().expect("vector index lock");
        g.params.ef_search = ef.max(1);
    }

    /// The dot product of a chunk's stored vector with `q` (its cosine, vectors being
    /// unit length), if the chunk has a live vector of `q`'s length.
    pub fn similarity(&self, doc: DocKey, ordinal: u32, q: &[f32]) -> Option<f32> {
        let g = self.graph.read().expect("vector index lock");
        let node = *g.live.get(&(doc, ordinal))? as usize;
        g.vectors
            .get(node * g.dim..(node + 1) * g.dim)
            .filter(|v| v.len() == q.len())
            .map(|v| dot(v, q))
    }

    /// Whether a chunk has a live vector.
    pub fn contains(&self, doc: DocKey, ordinal: u32) -> bool {
        self.graph
            .read()
            .expect("vector index lock")
            .live
            .contains_key(&(doc, ordinal))
    }
}

fn save(path: &Path, bytes: &[u8]) -> Result<(), VectorError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    }
    let tmp = path.with_extension("tmp");
    {
        let f = std::fs::File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
        let mut w = BufWriter::new(f);
        w.write_all(bytes).map_err(|e| io_err(&tmp, e))?;
        let f = w.into_inner().map_err(|e| io_err(&tmp, e.into_error()))?;
        f.sync_all().map_err(|e| io_err(&tmp, e))?;
    }
    std::fs::rename(&tmp, path).map_err(|e| io_err(path, e))?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random unit vectors in clusters (like real embeddings).
    fn vectors(n: usize, dim: usize, seed: u64) -> Vec<Vec<f32>> {
        let mut s = seed;
        let mut next = move || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f32 / (1u64 << 31) as f32) - 0.5
        };
        let centres: Vec<Vec<f32>> = (0..20)
            .map(|_| (0..dim).map(|_| next()).collect())
            .collect();
        (0..n)
            .map(|i| {
                let c = &centres[i % centres.len()];
                let mut v: Vec<f32> = c.iter().map(|x| x + 0.6 * next()).collect();
                normalize(&mut v);
                v
            })
            .collect()
    }

    fn params() -> HnswParams {
        HnswParams {
            exact_below: 0,
            ..HnswParams::default()
        }
    }

    fn recall(idx: &VectorIndex, queries: &[Vec<f32>], k: usize) -> f64 {
        let mut hit = 0;
        for q in queries {
            let exact: std::collections::HashSet<(DocKey, u32)> = idx
                .search(q, k, true)
                .iter()
                .map(|h| (h.doc, h.ordinal))
                .collect();
            hit += idx
                .search(q, k, false)
                .iter()
                .filter(|h| exact.contains(&(h.doc, h.ordinal)))
                .count();
        }
        hit as f64 / (queries.len() * k) as f64
    }

    #[test]
    fn hnsw_recall_matches_exact_search() {
        let vs = vectors(3000, 32, 7);
        let idx = VectorIndex::in_memory("m", 32, params());
        let added: Vec<_> = vs
            .iter()
            .enumerate()
            .map(|(i, v)| ((i as u64, 0u32), v.clone()))
            .collect();
        idx.apply(&[], &added, 1).unwrap();
        let r = recall(&idx, &vectors(100, 32, 99), 10);
        assert!(r >= 0.98, "recall@10 {r}");
        // A stored vector finds itself first.
        let hits = idx.search(&vs[42], 1, false);
        assert_eq!((hits[0].doc, hits[0].ordinal), (42, 0));
        assert!((hits[0].score - 1.0).abs() < 1e-5);
    }

    #[test]
    fn deletes_hide_vectors_and_compaction_keeps_the_rest() {
        let vs = vectors(3000, 16, 3);
        let idx = VectorIndex::in_memory("m", 16, params());
        let added: Vec<_> = vs
            .iter()
            .enumerate()
            .map(|(i, v)| ((i as u64 / 2, (i % 2) as u32), v.clone()))
            .collect();
        idx.apply(&[], &added, 1).unwrap();
        // Remove the first 700 documents (1400 chunks): enough to compact.
        let removed: Vec<DocKey> = (0..700).collect();
        idx.apply(&removed, &[], 2).unwrap();
        let s = idx.stats();
        assert_eq!(s.live, 1600);
        assert_eq!(s.deleted, 0, "compacted");
        for q in vectors(50, 16, 5) {
            for h in idx.search(&q, 20, false) {
                assert!(h.doc >= 700, "deleted doc {} returned", h.doc);
            }
        }
        assert!(!idx.contains(3, 0));
        assert!(idx.contains(800, 1));
        assert!(recall(&idx, &vectors(50, 16, 11), 10) >= 0.98);
        // A small delete leaves a tombstone that search skips.
        idx.apply(&[800], &[], 3).unwrap();
        assert_eq!(idx.stats().deleted, 2);
        assert!(idx.search(&vs[1600], 5, false).iter().all(|h| h.doc != 800));
    }

    #[test]
    fn replacing_a_chunk_keeps_one_live_vector() {
        let vs = vectors(10, 8, 1);
        let idx = VectorIndex::in_memory("m", 8, HnswParams::default());
        idx.apply(&[], &[((1, 0), vs[0].clone())], 1).unwrap();
        idx.apply(&[], &[((1, 0), vs[1].clone())], 2).unwrap();
        let s = idx.stats();
        assert_eq!((s.live, s.deleted), (1, 1));
        let h = idx.search(&vs[1], 5, false);
        assert_eq!(h.len(), 1);
        assert!((h[0].score - 1.0).abs() < 1e-5);
    }

    #[test]
    fn bad_vectors_are_rejected_and_change_nothing() {
        let idx = VectorIndex::in_memory("m", 4, HnswParams::default());
        let e = idx.apply(&[], &[((1, 0), vec![1.0, 2.0])], 1).unwrap_err();
        assert!(e.to_string().contains("2 dimensions"), "{e}");
        let e = idx
            .apply(&[], &[((1, 0), vec![1.0, f32::NAN, 0.0, 0.0])], 1)
            .unwrap_err();
        assert!(e.to_string().contains("non-finite"), "{e}");
        assert_eq!(
            idx.stats(),
            VectorStats {
                dim: 4,
                ..Default::default()
            }
        );
        // A wrong-sized query finds nothing instead of panicking.
        assert!(idx.search(&[1.0], 3, false).is_empty());
    }

    #[test]
    fn snapshot_round_trips_and_damage_means_rebuild() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.hnsw");
        let vs = vectors(500, 8, 2);
        let added: Vec<_> = vs
            .iter()
            .enumerate()
            .map(|(i, v)| ((i as u64, 0u32), v.clone()))
            .collect();
        let p = params();
        {
            let idx = VectorIndex::open(&path, "m", 8, p);
            idx.apply(&[5], &added, 7).unwrap();
            idx.apply(&[5], &[], 8).unwrap();
        }
        let idx = VectorIndex::open(&path, "m", 8, p);
        assert_eq!(idx.generation(), 8);
        assert_eq!(idx.stats().live, 499);
        let q = &vs[17];
        let again = VectorIndex::open(&path, "m", 8, p);
        assert_eq!(idx.search(q, 10, false), again.search(q, 10, false));
        // Another model, dimension or graph parameters: starts empty.
        assert_eq!(VectorIndex::open(&path, "other", 8, p).generation(), 0);
        assert_eq!(VectorIndex::open(&path, "m", 9, p).generation(), 0);
        let m = HnswParams { m: p.m + 1, ..p };
        assert_eq!(VectorIndex::open(&path, "m", 8, m).generation(), 0);
        let efc = HnswParams {
            ef_construction: p.ef_construction + 1,
            ..p
        };
        assert_eq!(VectorIndex::open(&path, "m", 8, efc).generation(), 0);
        // The search-time settings are not the graph's: a snapshot saved after
        // set_ef_search, or opened with another ef_search or exact_below, is kept and
        // searched with the settings it was opened with.
        idx.set_ef_search(p.ef_search + 50);
        idx.apply(&[], &[], 9).unwrap();
        let wide = HnswParams {
            ef_search: p.ef_search * 4,
            exact_below: 10_000,
            ..p
        };
        let reopened = VectorIndex::open(&path, "m", 8, wide);
        assert_eq!(reopened.generation(), 9);
        assert_eq!(reopened.search(q, 10, false), idx.search(q, 10, true));
        assert_eq!(VectorIndex::open(&path, "m", 8, p).generation(), 9);
        // A torn or flipped file: starts empty.
        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(VectorIndex::open(&path, "m", 8, p).generation(), 0);
        std::fs::write(&path, &bytes[..100]).unwrap();
        assert_eq!(VectorIndex::open(&path, "m", 8, p).stats().live, 0);
    }

    #[test]
    fn small_collections_are_searched_exactly() {
        let vs = vectors(100, 8, 4);
        let idx = VectorIndex::in_memory("m", 8, HnswParams::default());
        let added: Vec<_> = vs
            .iter()
            .enumerate()
            .map(|(i, v)| ((i as u64, 0u32), v.clone()))
            .collect();
        idx.apply(&[], &added, 1).unwrap();
        for q in vectors(10, 8, 8) {
            assert_eq!(idx.search(&q, 10, false), idx.search(&q, 10, true));
        }
    }
}
