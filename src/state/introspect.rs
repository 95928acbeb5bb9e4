//! Figures INFO reports beyond the core counters: error replies by kind (the Errorstats
//! section) and the Cluster section of a server that is not in cluster mode.

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
            Reply::Error(text) => self.count(text),
            // A pre-encoded error line (unknown command with non-UTF-8 bytes): `-ERR ...`.
            Reply::Raw(line) if reply.is_error() => {
                self.count(&String::from_utf8_lossy(&line[1..]))
            }
            Reply::Array(items) => {
                for r in items {
                    if let Reply::Error(text) = r {
                        self.count(text);
                    }
                }
            }
            _ => {}
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

#[cfg(test)]
mod tests {
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
