//! Figures INFO reports beyond the core counters: error replies by kind (the Errorstats
//! section) and the instantaneous rates of the Stats section.

use crate::protocol::Reply;
use parking_lot::Mutex;
use std::collections::BTreeMap;

/// Error kinds Redis tracks before it stops adding new ones (a flood of made-up prefixes
/// cannot grow the table without bound).
const MAX_KINDS: usize = 128;

/// Error replies counted by their first word (`ERR`, `WRONGTYPE`, `NOAUTH` ...).
#[derive(Default)]
pub struct ErrorStats {
    counts: Mutex<BTreeMap<String, u64>>,
}

/// The kind of an error text as Redis names it: the word before the first space within the
/// first 32 bytes, or ERR when there is none.
fn kind(text: &str) -> &str {
    let head = &text.as_bytes()[..text.len().min(32)];
    match head.iter().position(|&b| b == b' ') {
        Some(n) if n > 0 => &text[..n],
        _ => "ERR",
    }
}

impl ErrorStats {
    /// Count `reply` if it is an error (and the errors of a transaction's replies).
    pub fn count_reply(&self, reply: &Reply) {
        match reply {
            Reply::Array(items) => {
                for r in items {
                    if let Reply::Error(text) = r {
                        self.count(text);
                    }
                }
            }
            r => {
                if let Some(text) = r.error_text() {
                    self.count(&text);
                }
            }
        }
    }

    fn count(&self, text: &str) {
        let k = kind(text);
        let mut m = self.counts.lock();
        if let Some(n) = m.get_mut(k) {
            *n += 1;
        } else if m.len() < MAX_KINDS {
            m.insert(k.to_string(), 1);
        }
    }

    /// INFO errorstats lines: (`errorstat_<KIND>`, `count=<n>`).
    pub fn info_lines(&self) -> Vec<(String, String)> {
        self.counts
            .lock()
            .iter()
            .map(|(k, n)| (format!("errorstat_{k}"), format!("count={n}")))
            .collect()
    }

    pub fn reset(&self) {
        self.counts.lock().clear();
    }
}

/// Rates sampled at most this often (Redis samples every 100 ms).
const SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_millis(100);
/// Samples averaged (Redis's STATS_METRIC_SAMPLES).
const SAMPLES: usize = 16;

/// INFO's `instantaneous_ops_per_sec`, `instantaneous_input_kbps` and
/// `instantaneous_output_kbps`: per-second rates of three counters (commands, bytes read,
/// bytes written), each the mean of the last 16 rates the cron sampled, as Redis computes them.
#[derive(Default)]
pub struct InstantMetrics {
    inner: Mutex<InstantInner>,
}

#[derive(Default)]
struct InstantInner {
    last: Option<(std::time::Instant, [u64; 3])>,
    rates: [[u64; SAMPLES]; 3],
    next: usize,
}

impl InstantMetrics {
    /// Record the counters' readings at `now` (ignored until 100 ms after the last sample).
    pub fn sample(&self, now: std::time::Instant, readings: [u64; 3]) {
        let mut m = self.inner.lock();
        match m.last {
            Some((at, _)) if now.duration_since(at) < SAMPLE_EVERY => {}
            Some((at, before)) => {
                let ms = now.duration_since(at).as_millis().max(1) as u64;
                let i = m.next;
                for (k, (r, b)) in readings.iter().zip(before).enumerate() {
                    m.rates[k][i] = r.saturating_sub(b) * 1000 / ms;
                }
                m.next = (i + 1) % SAMPLES;
                m.last = Some((now, readings));
            }
            None => m.last = Some((now, readings)),
        }
    }

    /// (ops per second, input bytes per second, output bytes per second).
    pub fn rates(&self) -> (u64, u64, u64) {
        let m = self.inner.lock();
        let mean = |k: usize| m.rates[k].iter().sum::<u64>() / SAMPLES as u64;
        (mean(0), mean(1), mean(2))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rates_are_means_of_the_last_sixteen_samples() {
        let m = super::InstantMetrics::default();
        let t0 = std::time::Instant::now();
        m.sample(t0, [0, 0, 0]);
        // 100 commands and 1000 bytes in each of two 100 ms periods: 1000 ops/s, 10000 B/s,
        // for 2 of the 16 samples.
        m.sample(t0 + super::SAMPLE_EVERY, [100, 1000, 0]);
        m.sample(t0 + super::SAMPLE_EVERY / 2 * 3, [150, 1500, 0]); // too soon: ignored
        m.sample(t0 + super::SAMPLE_EVERY * 2, [200, 2000, 0]);
        assert_eq!(m.rates(), (2000 / 16, 20000 / 16, 0));
    }

    use super::*;

    #[test]
    fn kinds_are_the_first_word() {
        assert_eq!(kind("ERR unknown command"), "ERR");
        assert_eq!(kind("WRONGTYPE Operation against a key"), "WRONGTYPE");
        assert_eq!(kind("NOSPACEHEREATALLFORTHIRTYTWOBYTESORMORE x"), "ERR");
        let s = ErrorStats::default();
        s.count_reply(&Reply::error("ERR x"));
        s.count_reply(&Reply::Array(vec![Reply::Ok, Reply::error("WRONGTYPE y")]));
        s.count_reply(&Reply::Ok);
        assert_eq!(
            s.info_lines(),
            vec![
                ("errorstat_ERR".to_string(), "count=1".to_string()),
                ("errorstat_WRONGTYPE".to_string(), "count=1".to_string())
            ]
        );
    }
}
