//! Property tests: random sequences of signals, time jumps, sweeps, forgets and restores
//! applied through a [`MemoryStore`] must match a small model of the trust rules, written
//! here from the design rather than from the code:
//!
//! - trust is a value written at a time; read at a later time it has halved once per
//!   half-life since (decay smaller than 1e-9 is not written);
//! - a signal first writes the decay up to now, then adds its step, clamped to [0, 1];
//! - an active memory under the threshold is archived (by a signal or a sweep); an
//!   archived one is purged by a sweep (or a signal) once the grace period has passed;
//! - `forget` archives, `restore` reactivates at no less than the initial trust; a purged
//!   memory refuses both, and signals;
//! - every change is one audit entry.

use std::collections::BTreeMap;
use std::sync::Arc;

use neuralcore_memory::{
    trust, Filter, MemoryBackend, MemoryError, MemoryStore, NewMemory, RedbBackend, Signal, Status,
    TrustConfig,
};
use proptest::prelude::*;

const T0: u64 = 1_750_000_000_000;
const HOUR: u64 = 3_600_000;
const DAY_MS: f64 = 86_400_000.0;
/// Decay smaller than this is not written.
const EPS: f64 = 1e-9;
/// Memories per case.
const N: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    Signal(usize, Signal),
    Advance(u64),
    Sweep,
    Forget(usize),
    Restore(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let signal = prop::sample::select(Signal::ALL.to_vec());
    prop_oneof![
        6 => (0..N, signal).prop_map(|(i, s)| Op::Signal(i, s)),
        3 => prop_oneof![Just(0u64), 1u64..48, 48u64..24 * 60].prop_map(Op::Advance),
        2 => Just(Op::Sweep),
        1 => (0..N).prop_map(Op::Forget),
        1 => (0..N).prop_map(Op::Restore),
    ]
}

fn config() -> impl Strategy<Value = TrustConfig> {
    (
        prop::sample::select(vec![0.0, 1.0, 10.0, 90.0]),
        prop::sample::select(vec![0.0, 0.3, 0.45]),
        prop::sample::select(vec![0.0, 1.0, 5.0, 30.0]),
    )
        .prop_map(
            |(half_life_days, archive_below, purge_after_days)| TrustConfig {
                half_life_days,
                archive_below,
                purge_after_days,
                ..Default::default()
            },
        )
}

/// One memory as the model sees it.
#[derive(Debug, Clone)]
struct Model {
    trust: f64,
    /// When `trust` was written.
    at: u64,
    last_used: u64,
    status: Status,
    archived_at: Option<u64>,
    counts: BTreeMap<String, u64>,
    audit: usize,
}

impl Model {
    fn new(cfg: &TrustConfig, now: u64) -> Self {
        Model {
            trust: cfg.initial,
            at: now,
            last_used: now,
            status: Status::Active,
            archived_at: None,
            counts: BTreeMap::new(),
            audit: 1,
        }
    }

    fn trust_at(&self, now: u64, cfg: &TrustConfig) -> f64 {
        if cfg.half_life_days <= 0.0 {
            return self.trust;
        }
        let days = now.saturating_sub(self.at) as f64 / DAY_MS;
        (self.trust * 0.5f64.powf(days / cfg.half_life_days)).clamp(0.0, 1.0)
    }

    fn write_decay(&mut self, now: u64, cfg: &TrustConfig) {
        let t = self.trust_at(now, cfg);
        if (t - self.trust).abs() > EPS {
            self.trust = t;
            self.at = now;
            self.audit += 1;
        }
    }

    fn transition(&mut self, now: u64, cfg: &TrustConfig) {
        match self.status {
            Status::Active if self.trust < cfg.archive_below => {
                self.status = Status::Archived;
                self.archived_at = Some(now);
                self.audit += 1;
            }
            Status::Archived
                if cfg.purge_after_days > 0.0
                    && (now - self.archived_at.expect("archived_at")) as f64
                        >= cfg.purge_after_days * DAY_MS =>
            {
                self.status = Status::Purged;
                self.audit += 1;
            }
            _ => {}
        }
    }

    /// Apply `op` to this memory; `false` when the store must refuse it.
    fn apply(&mut self, op: &Op, now: u64, cfg: &TrustConfig) -> bool {
        match op {
            Op::Signal(_, s) => {
                if self.status == Status::Purged {
                    return false;
                }
                self.write_decay(now, cfg);
                self.trust = (self.trust + cfg.step(*s)).clamp(0.0, 1.0);
                self.at = now;
                *self.counts.entry(s.as_str().to_string()).or_default() += 1;
                if *s != Signal::Ignored {
                    self.last_used = now;
                }
                self.audit += 1;
                // A signal may archive; only a sweep purges.
                if self.status == Status::Active {
                    self.transition(now, cfg);
                }
            }
            Op::Forget(_) => match self.status {
                Status::Purged => return false,
                Status::Archived => {}
                Status::Active => {
                    self.status = Status::Archived;
                    self.archived_at = Some(now);
                    self.audit += 1;
                }
            },
            Op::Restore(_) => match self.status {
                Status::Purged => return false,
                Status::Active => {}
                Status::Archived => {
                    self.write_decay(now, cfg);
                    self.trust = self.trust.max(cfg.initial.max(cfg.archive_below));
                    self.at = now;
                    self.last_used = now;
                    self.status = Status::Active;
                    self.archived_at = None;
                    self.audit += 1;
                }
            },
            Op::Sweep => {
                if self.status != Status::Purged {
                    self.write_decay(now, cfg);
                    self.transition(now, cfg);
                }
            }
            Op::Advance(_) => {}
        }
        true
    }
}

fn run(backend: Arc<dyn MemoryBackend>, cfg: TrustConfig, ops: &[Op]) -> Result<(), TestCaseError> {
    let store = MemoryStore::new(backend, cfg.clone()).unwrap();
    let mut now = T0;
    let mut ids = Vec::new();
    let mut models = Vec::new();
    for i in 0..N {
        let new = NewMemory {
            text: format!("memory {i}"),
            embedding: Some(vec![i as f32, 0.5]),
            ..Default::default()
        };
        ids.push(store.add(new, "prop", now).unwrap().id);
        models.push(Model::new(&cfg, now));
    }
    for (step, op) in ops.iter().enumerate() {
        let ctx = format!("step {step}: {op:?} at +{} h", (now - T0) / HOUR);
        match op {
            Op::Advance(h) => now += h * HOUR,
            Op::Sweep => {
                store.sweep("sweep", now).unwrap();
                for m in &mut models {
                    m.apply(op, now, &cfg);
                }
            }
            Op::Signal(i, _) | Op::Forget(i) | Op::Restore(i) => {
                let ok = models[*i].apply(op, now, &cfg);
                let r = match op {
                    Op::Signal(_, s) => store.signal(&ids[*i], *s, "prop", now),
                    Op::Forget(_) => store.forget(&ids[*i], "prop", now),
                    _ => store.restore(&ids[*i], "prop", now),
                };
                if ok {
                    prop_assert!(r.is_ok(), "{ctx}: {r:?}");
                } else {
                    prop_assert!(matches!(r, Err(MemoryError::Invalid(_))), "{ctx}: {r:?}");
                }
            }
        }
        for (id, model) in ids.iter().zip(&models) {
            check(&store, id, model, now, &cfg, &ctx)?;
        }
        if matches!(op, Op::Sweep) {
            check_swept(&store, now, &cfg, &ctx)?;
        }
    }
    Ok(())
}

/// The store agrees with the model about one memory.
fn check(
    store: &MemoryStore,
    id: &str,
    model: &Model,
    now: u64,
    cfg: &TrustConfig,
    ctx: &str,
) -> Result<(), TestCaseError> {
    let m = store.get(id, now).unwrap();
    let want = model.trust_at(now, cfg);
    prop_assert!((0.0..=1.0).contains(&m.trust), "{ctx}: trust {}", m.trust);
    prop_assert!(
        (m.trust - want).abs() <= 1e-9,
        "{ctx}: trust {} want {want} ({model:?}, {m:?})",
        m.trust
    );
    prop_assert_eq!(m.status, model.status, "{}", ctx);
    prop_assert_eq!(m.archived_at_ms, model.archived_at, "{}", ctx);
    prop_assert_eq!(m.last_used_at_ms, model.last_used, "{}", ctx);
    prop_assert_eq!(&m.use_counts, &model.counts, "{}", ctx);
    if m.status == Status::Purged {
        prop_assert!(
            m.text.is_empty() && m.embedding.is_none(),
            "{ctx}: not erased"
        );
    } else {
        prop_assert!(!m.text.is_empty() && m.embedding.is_some(), "{ctx}: erased");
    }
    let log = store.audit(id).unwrap();
    prop_assert_eq!(log.len(), model.audit, "{}: {:?}", ctx, log);
    for w in log.windows(2) {
        prop_assert_eq!(w[1].trust_before, w[0].trust_after, "{}: audit chain", ctx);
        prop_assert!(w[1].at_ms >= w[0].at_ms);
    }
    for e in &log {
        prop_assert!((0.0..=1.0).contains(&e.trust_before) && (0.0..=1.0).contains(&e.trust_after));
    }
    // The stored trust is what the last audit entry says.
    let stored = store.backend().get(id).unwrap().unwrap();
    prop_assert_eq!(stored.trust, log.last().unwrap().trust_after, "{}", ctx);
    Ok(())
}

/// Right after a sweep: nothing active under the threshold; nothing purged before its
/// grace period was over, counted from its archiving.
fn check_swept(
    store: &MemoryStore,
    now: u64,
    cfg: &TrustConfig,
    ctx: &str,
) -> Result<(), TestCaseError> {
    let all = Filter {
        statuses: vec![Status::Active, Status::Archived, Status::Purged],
        ..Default::default()
    };
    for m in store.list(&all, now).unwrap() {
        match m.status {
            Status::Active => prop_assert!(
                m.trust >= cfg.archive_below,
                "{ctx}: active at {} < {}",
                m.trust,
                cfg.archive_below
            ),
            Status::Purged => {
                prop_assert!(
                    cfg.purge_after_days > 0.0,
                    "{ctx}: purged with no grace period"
                );
                let log = store.audit(&m.id).unwrap();
                let purged = log.iter().position(|e| e.event == "purge").unwrap();
                let archived = log[..purged]
                    .iter()
                    .rposition(|e| e.event == "archive" || e.event == "forget")
                    .expect("archived before purged");
                prop_assert!(
                    !log[archived..purged].iter().any(|e| e.event == "restore"),
                    "{ctx}: purged after a restore"
                );
                let grace = log[purged].at_ms - log[archived].at_ms;
                prop_assert!(
                    grace as f64 >= cfg.purge_after_days * DAY_MS,
                    "{ctx}: purged {grace} ms after archiving"
                );
            }
            Status::Archived => {}
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_model(cfg in config(), ops in prop::collection::vec(op(), 1..60)) {
        run(Arc::new(neuralcore_memory::InMemoryBackend::new()), cfg, &ops)?;
    }

    #[test]
    fn decay_is_a_halving_per_half_life(
        t in 0.0f64..=1.0,
        half_life_hours in 12u64..10_000,
        a in 0u64..1_000_000_000_000,
        b in 0u64..1_000_000_000_000,
    ) {
        let half_life = half_life_hours as f64 / 24.0;
        let cfg = TrustConfig { half_life_days: half_life, ..Default::default() };
        let d = |from: u64, to: u64| trust::decayed(t, from, from, to, &cfg);
        let (lo, hi) = (a.min(b), a.max(b));
        let once = d(0, hi);
        prop_assert!(once >= 0.0 && once <= t, "{once} from {t}");
        // Decaying to lo, writing, then on to hi is decaying to hi at once.
        let twice = trust::decayed(d(0, lo), lo, 0, hi, &cfg);
        prop_assert!((once - twice).abs() <= 1e-12, "{once} vs {twice}");
        let hl = half_life_hours * HOUR;
        prop_assert!((d(0, hl) - t / 2.0).abs() <= 1e-9);
    }
}

proptest! {
    // Every operation is a durable commit: fewer cases.
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn redb_store_matches_model(cfg in config(), ops in prop::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let backend = RedbBackend::open(&dir.path().join("m.redb")).unwrap();
        run(Arc::new(backend), cfg, &ops)?;
    }
}
