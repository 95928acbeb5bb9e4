//! The LATENCY monitor's event series, held by [`crate::state::Server`]; recording and the
//! LATENCY command are [`crate::commands::latency`], above.

use parking_lot::Mutex;
use std::collections::BTreeMap;

/// Samples kept per event.
pub(crate) const SAMPLES: usize = 160;

#[derive(Default, Clone)]
pub(crate) struct Series {
    /// Ring of (unix second, ms); a zero second is an empty slot.
    pub(crate) samples: Vec<(i64, u64)>,
    pub(crate) next: usize,
    pub(crate) max: u64,
}

impl Series {
    pub(crate) fn add(&mut self, now: i64, ms: u64) {
        if self.samples.is_empty() {
            self.samples = vec![(0, 0); SAMPLES];
        }
        self.max = self.max.max(ms);
        let prev = (self.next + SAMPLES - 1) % SAMPLES;
        if self.samples[prev].0 == now {
            self.samples[prev].1 = self.samples[prev].1.max(ms);
            return;
        }
        self.samples[self.next] = (now, ms);
        self.next = (self.next + 1) % SAMPLES;
    }

    /// Samples oldest first.
    pub(crate) fn history(&self) -> Vec<(i64, u64)> {
        (0..self.samples.len())
            .map(|i| self.samples[(self.next + i) % self.samples.len()])
            .filter(|s| s.0 != 0)
            .collect()
    }

    pub(crate) fn latest(&self) -> (i64, u64) {
        let prev = (self.next + SAMPLES - 1) % SAMPLES;
        self.samples.get(prev).copied().unwrap_or((0, 0))
    }
}

/// The latency monitor's events.
#[derive(Default)]
pub struct Monitor {
    pub(crate) events: Mutex<BTreeMap<&'static str, Series>>,
}
