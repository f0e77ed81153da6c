//! The trust arithmetic, pure: signals move trust by fixed steps, clamped to [0, 1];
//! unused memories decay exponentially from their last use; low trust archives, and a
//! grace period after archiving purges.

use serde::{Deserialize, Serialize};

use crate::types::{Memory, Signal, Status};

/// `[memory]` trust settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrustConfig {
    /// Trust of a new memory.
    pub initial: f64,
    /// Step of `used`.
    pub used: f64,
    /// Step of `confirmed`.
    pub confirmed: f64,
    /// Step of `ignored` (negative).
    pub ignored: f64,
    /// Step of `corrected` (negative).
    pub corrected: f64,
    /// Half-life of trust for an unused memory, in days (0 = no decay).
    pub half_life_days: f64,
    /// Below this, a memory is archived.
    pub archive_below: f64,
    /// An archived memory is purged this many days after archiving (0 = never).
    pub purge_after_days: f64,
}

impl Default for TrustConfig {
    fn default() -> Self {
        TrustConfig {
            initial: 0.5,
            used: 0.05,
            confirmed: 0.10,
            ignored: -0.05,
            corrected: -0.10,
            half_life_days: 90.0,
            archive_below: 0.3,
            purge_after_days: 30.0,
        }
    }
}

const DAY_MS: f64 = 86_400_000.0;

impl TrustConfig {
    /// The step of a signal.
    pub fn step(&self, s: Signal) -> f64 {
        match s {
            Signal::Used => self.used,
            Signal::Confirmed => self.confirmed,
            Signal::Ignored => self.ignored,
            Signal::Corrected => self.corrected,
        }
    }

    /// Check the settings.
    pub fn validate(&self) -> Result<(), String> {
        let unit = |x: f64| x.is_finite() && (0.0..=1.0).contains(&x);
        if !unit(self.initial) || !unit(self.archive_below) {
            return Err("memory.initial and memory.archive_below must be in [0, 1]".into());
        }
        for (n, v) in [
            ("used", self.used),
            ("confirmed", self.confirmed),
            ("ignored", self.ignored),
            ("corrected", self.corrected),
        ] {
            if !v.is_finite() || v.abs() > 1.0 {
                return Err(format!("memory.{n} must be a step in [-1, 1], got {v}"));
            }
        }
        if !self.half_life_days.is_finite() || self.half_life_days < 0.0 {
            return Err("memory.half_life_days must be >= 0".into());
        }
        if !self.purge_after_days.is_finite() || self.purge_after_days < 0.0 {
            return Err("memory.purge_after_days must be >= 0".into());
        }
        Ok(())
    }
}

/// `x` clamped to [0, 1] (NaN → 0).
pub fn clamp(x: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, 1.0)
    }
}

/// Trust `trust`, written at `written_ms`, for a memory last used at `last_used_ms`,
/// seen at `now_ms`: halved every half-life of disuse counted from the later of the two
/// (decay already applied up to `written_ms` is not applied again).
pub fn decayed(
    trust: f64,
    written_ms: u64,
    last_used_ms: u64,
    now_ms: u64,
    cfg: &TrustConfig,
) -> f64 {
    if cfg.half_life_days <= 0.0 {
        return clamp(trust);
    }
    let from = written_ms.max(last_used_ms);
    let idle_days = now_ms.saturating_sub(from) as f64 / DAY_MS;
    clamp(trust * 0.5f64.powf(idle_days / cfg.half_life_days))
}

/// A memory's trust now, decay included.
pub fn effective(m: &Memory, now_ms: u64, cfg: &TrustConfig) -> f64 {
    decayed(m.trust, m.trust_at_ms, m.last_used_at_ms, now_ms, cfg)
}

/// Trust after a signal on trust `t` (decay already applied).
pub fn after_signal(t: f64, s: Signal, cfg: &TrustConfig) -> f64 {
    clamp(t + cfg.step(s))
}

/// The status a memory should have at `now_ms` with trust `t`: active memories under the
/// threshold are archived; archived ones past the grace period are purged. (Restoring
/// is only ever explicit.)
pub fn next_status(
    status: Status,
    t: f64,
    archived_at_ms: Option<u64>,
    now_ms: u64,
    cfg: &TrustConfig,
) -> Status {
    match status {
        Status::Active if t < cfg.archive_below => Status::Archived,
        Status::Archived
            if cfg.purge_after_days > 0.0
                && archived_at_ms.is_some_and(|a| {
                    now_ms.saturating_sub(a) as f64 >= cfg.purge_after_days * DAY_MS
                }) =>
        {
            Status::Purged
        }
        s => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_jump_keeps_trust_and_status_sane() {
        let c = TrustConfig::default();
        let day = DAY_MS as u64;
        let (written, used) = (100 * day, 90 * day);
        // Back, before the memory was written or used: no decay, never a rise or NaN.
        for now in [0, 50 * day, written - 1] {
            assert_eq!(decayed(0.8, written, used, now, &c), 0.8);
        }
        // Forward to the end of time: decays to 0, stays a number in [0, 1].
        for now in [written + 100_000 * day, u64::MAX] {
            let t = decayed(0.8, written, used, now, &c);
            assert!(t.is_finite() && (0.0..=1.0).contains(&t), "{t}");
        }
        // A jump back never purges an archived memory nor restores one.
        let archived = Some(written);
        assert_eq!(
            next_status(Status::Archived, 0.0, archived, written - day, &c),
            Status::Archived
        );
        assert_eq!(
            next_status(Status::Archived, 0.0, archived, 0, &c),
            Status::Archived
        );
    }

    #[test]
    fn steps_are_as_designed() {
        let c = TrustConfig::default();
        assert!((after_signal(0.5, Signal::Used, &c) - 0.55).abs() < 1e-12);
        assert!((after_signal(0.5, Signal::Confirmed, &c) - 0.60).abs() < 1e-12);
        assert!((after_signal(0.5, Signal::Ignored, &c) - 0.45).abs() < 1e-12);
        assert!((after_signal(0.5, Signal::Corrected, &c) - 0.40).abs() < 1e-12);
        assert_eq!(after_signal(0.97, Signal::Confirmed, &c), 1.0);
        assert_eq!(after_signal(0.02, Signal::Corrected, &c), 0.0);
    }

    #[test]
    fn decay_halves_per_half_life_from_last_use() {
        let c = TrustConfig {
            half_life_days: 10.0,
            ..Default::default()
        };
        let day = DAY_MS as u64;
        assert!((decayed(0.8, 0, 0, 10 * day, &c) - 0.4).abs() < 1e-12);
        // Written after the last use: decay counts from the write.
        assert!((decayed(0.8, 5 * day, 0, 15 * day, &c) - 0.4).abs() < 1e-12);
        assert_eq!(decayed(0.8, 0, 0, 0, &c), 0.8);
        let off = TrustConfig {
            half_life_days: 0.0,
            ..Default::default()
        };
        assert_eq!(decayed(0.8, 0, 0, 1000 * day, &off), 0.8);
    }

    #[test]
    fn archive_then_purge() {
        let c = TrustConfig::default();
        let day = DAY_MS as u64;
        assert_eq!(
            next_status(Status::Active, 0.29, None, 0, &c),
            Status::Archived
        );
        assert_eq!(
            next_status(Status::Active, 0.3, None, 0, &c),
            Status::Active
        );
        assert_eq!(
            next_status(Status::Archived, 0.1, Some(0), 29 * day, &c),
            Status::Archived
        );
        assert_eq!(
            next_status(Status::Archived, 0.1, Some(0), 30 * day, &c),
            Status::Purged
        );
    }
}
