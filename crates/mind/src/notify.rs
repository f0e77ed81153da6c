//! Change notification: the in-process hub used by the memory and redb backends, and the
//! [`Watch`] stream every backend hands out.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{MindError, MindResult};
use crate::raw::Layer;

/// What happened to a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeKind {
    /// Written (write, cas or batch) with this new version.
    Written(u64),
    /// Deleted.
    Deleted,
    /// The whole layer was dropped (`Mind::drop_run`); `key` is empty.
    Dropped,
}

/// One change seen by a [`Watch`]. Expiry produces no change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The layer changed: a run scope's watch sees its own layer and the global one.
    pub layer: Layer,
    /// The key (empty for `Dropped`).
    pub key: String,
    /// What happened.
    pub kind: ChangeKind,
}

/// A blocking stream of changes, in the order each layer applied them. Iterating blocks
/// for the next change; the stream ends (or yields an `Unavailable` error, then ends)
/// when the backend goes away. Dropping it unsubscribes.
pub struct Watch {
    rx: Receiver<MindResult<Change>>,
    stop: Arc<AtomicBool>,
}

impl Watch {
    pub(crate) fn new(rx: Receiver<MindResult<Change>>, stop: Arc<AtomicBool>) -> Watch {
        Watch { rx, stop }
    }

    /// The next change, waiting at most `timeout`; `None` on timeout or end of stream.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<MindResult<Change>> {
        self.rx.recv_timeout(timeout).ok()
    }

    /// The next change if one is waiting.
    pub fn try_recv(&self) -> Option<MindResult<Change>> {
        self.rx.try_recv().ok()
    }

    /// Every change waiting now, without blocking.
    pub fn drain(&self) -> Vec<MindResult<Change>> {
        std::iter::from_fn(|| self.try_recv()).collect()
    }
}

impl Iterator for Watch {
    type Item = MindResult<Change>;
    fn next(&mut self) -> Option<Self::Item> {
        self.rx.recv().ok()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watch")
    }
}

struct Subscriber {
    layers: Vec<Layer>,
    tx: Sender<MindResult<Change>>,
    stop: Arc<AtomicBool>,
}

/// Subscribers of one in-process backend. `publish` costs one atomic load when nobody
/// watches, keeping the write fast path fast.
#[derive(Default)]
pub(crate) struct Hub {
    count: AtomicUsize,
    subs: Mutex<Vec<Subscriber>>,
}

impl Hub {
    pub(crate) fn subscribe(&self, layers: &[Layer]) -> Watch {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let mut subs = self.subs.lock().unwrap_or_else(|e| e.into_inner());
        subs.push(Subscriber {
            layers: layers.to_vec(),
            tx,
            stop: stop.clone(),
        });
        self.count.store(subs.len(), Ordering::Release);
        Watch::new(rx, stop)
    }

    pub(crate) fn active(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    pub(crate) fn publish(&self, changes: impl IntoIterator<Item = Change>) {
        if !self.active() {
            return;
        }
        let mut subs = self.subs.lock().unwrap_or_else(|e| e.into_inner());
        for c in changes {
            subs.retain(|s| {
                if s.stop.load(Ordering::Relaxed) {
                    return false;
                }
                !s.layers.contains(&c.layer) || s.tx.send(Ok(c.clone())).is_ok()
            });
        }
        self.count.store(subs.len(), Ordering::Release);
    }
}

/// Maps a poisoned lock to a backend error rather than a panic.
pub(crate) fn poisoned<T>(_: T) -> MindError {
    MindError::Backend("a thread panicked while holding the mind lock".into())
}
