//! Test support: a device lost after a number of passes, so that what the engine and the
//! server do then is tested without a faulty GPU (`CpuConfig::lose_device_after`,
//! `CudaConfig::lose_device_after`; `inferd serve` takes it from
//! `INFERD_TEST_LOSE_DEVICE_AFTER`). Each backend decides how the loss shows: the CPU as a
//! library's error that does not say so, CUDA as a real fault.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::RuntimeError;

/// The variable's value: the passes a backend runs before its device is lost.
pub fn lose_device_after_from_env() -> Option<u64> {
    std::env::var("INFERD_TEST_LOSE_DEVICE_AFTER")
        .ok()
        .and_then(|v| v.parse().ok())
}

/// A device lost after `after` passes (none: never); counts passes only when armed.
#[derive(Debug, Default)]
pub struct SimulatedLoss {
    after: Option<u64>,
    passes: AtomicU64,
}

impl SimulatedLoss {
    pub fn new(after: Option<u64>) -> Self {
        SimulatedLoss {
            after,
            passes: AtomicU64::new(0),
        }
    }

    /// Counts a pass; whether it is one past the limit (the device is lost from it on).
    pub fn pass(&self) -> bool {
        self.after
            .is_some_and(|n| self.passes.fetch_add(1, Ordering::Relaxed) >= n)
    }

    /// Whether a pass past the limit was counted.
    pub fn lost(&self) -> bool {
        self.after
            .is_some_and(|n| self.passes.load(Ordering::Relaxed) > n)
    }

    /// The loss as an error.
    pub fn error(&self) -> RuntimeError {
        RuntimeError::DeviceLost(format!(
            "simulated after {} passes (INFERD_TEST_LOSE_DEVICE_AFTER)",
            self.after.unwrap_or(0)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::SimulatedLoss;

    #[test]
    fn lost_from_the_pass_past_the_limit_on() {
        let l = SimulatedLoss::new(Some(2));
        assert!(!l.pass() && !l.pass() && !l.lost());
        assert!(l.pass() && l.lost() && l.pass());
        let never = SimulatedLoss::new(None);
        assert!((0..10).all(|_| !never.pass()) && !never.lost());
    }
}
