//! LATENCY: the latency monitor (events over `latency-monitor-threshold`) and the per-command
//! latency histograms (LATENCY HISTOGRAM, INFO latencystats).
//!
//! The monitor keeps, per event name ("command", "fast-command", "expire-cycle"), the last 160
//! samples as (Unix second, milliseconds), one per second (a second's worst), and the all-time
//! maximum, as Redis's latency.c does. The histograms count each command's durations in
//! power-of-two buckets of nanoseconds starting at 1024 ns, which is the bucketing Redis's
//! LATENCY HISTOGRAM reports, so the replies have Redis's shape and bucket labels.

use super::flags::*;
use super::{table, Cmd, CmdResult, Ctx, Keys, Spec};
use crate::config::dir;
use crate::protocol::Reply;
pub use crate::state::latency::Monitor;
use crate::state::latency::Series;
use crate::state::Server;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

pub static COMMANDS: &[Spec] = &[Spec::new(
    "latency",
    -2,
    ADMIN | NOSCRIPT | LOADING | STALE,
    Keys::None,
    latency,
    "server",
)];

impl Monitor {
    /// Record `ms` for `event` if the monitor is on and it reaches the threshold.
    #[inline]
    pub fn add_if_needed(&self, srv: &Server, event: &'static str, ms: u64) {
        let threshold = srv.config.hot.latency_threshold_ms.load(Ordering::Relaxed);
        if threshold > 0 && ms >= threshold as u64 {
            self.add_event(event, ms);
        }
    }

    /// Record `ms` for `event` now (a command at or over the threshold).
    #[cold]
    fn add_event(&self, event: &'static str, ms: u64) {
        let now = crate::clock::unix_ms() / 1000;
        self.events.lock().entry(event).or_default().add(now, ms);
    }
}

/// Buckets of a command's latency histogram: bucket 0 is below 1024 ns, bucket i holds
/// [1024·2^(i-1), 1024·2^i) ns; the last one takes everything from ~1 s up (Redis's ceiling).
const BUCKETS: usize = 21;

/// One command's durations.
pub struct Histogram {
    /// Added to by every call: per-thread counters (see `crate::util::counter`).
    buckets: [crate::util::counter::Counter; BUCKETS],
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| crate::util::counter::Counter::new()),
        }
    }
}

impl Histogram {
    pub fn record_ns(&self, ns: u64) {
        let i = if ns < 1024 {
            0
        } else {
            ((64 - ns.leading_zeros()) as usize - 10).min(BUCKETS - 1)
        };
        self.buckets[i].add(1);
    }

    pub fn reset(&self) {
        for b in &self.buckets {
            b.reset();
        }
    }

    fn counts(&self) -> [u64; BUCKETS] {
        std::array::from_fn(|i| self.buckets[i].get())
    }

    /// The upper bound of bucket `i` in microseconds, as Redis labels it.
    fn label_us(i: usize) -> u64 {
        ((1024u64 << i) - 1) / 1000
    }

    /// (bucket label in µs, cumulative count) for the buckets that hold samples.
    pub fn cdf(&self) -> Vec<(u64, u64)> {
        let mut total = 0;
        let mut out = Vec::new();
        for (i, c) in self.counts().iter().enumerate() {
            if *c > 0 {
                total += c;
                out.push((Self::label_us(i), total));
            }
        }
        out
    }

    /// The `p`th percentile in microseconds (a bucket's upper bound), or None without samples.
    pub fn percentile_us(&self, p: f64) -> Option<f64> {
        let counts = self.counts();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((p / 100.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(((1024u64 << i) - 1) as f64 / 1000.0);
            }
        }
        None
    }
}

/// Commands with subcommands: Redis keeps their figures per subcommand (`config|set`).
const CONTAINERS: &[(&str, &[&str])] = &[
    ("cluster", super::cluster::SUBCOMMANDS),
    ("config", &["get", "set", "resetstat", "rewrite", "help"]),
    (
        "client",
        &[
            "id",
            "getname",
            "setname",
            "info",
            "list",
            "kill",
            "no-evict",
            "reply",
            "unblock",
            "pause",
            "unpause",
            "tracking",
            "caching",
            "getredir",
            "trackinginfo",
            "help",
        ],
    ),
    (
        "command",
        &[
            "count",
            "docs",
            "getkeys",
            "getkeysandflags",
            "info",
            "list",
            "help",
        ],
    ),
    (
        "memory",
        &["usage", "stats", "doctor", "malloc-stats", "purge", "help"],
    ),
    (
        "object",
        &["encoding", "freq", "idletime", "refcount", "help"],
    ),
    ("slowlog", &["get", "len", "reset", "help"]),
    (
        "xgroup",
        &[
            "create",
            "setid",
            "destroy",
            "createconsumer",
            "delconsumer",
            "help",
        ],
    ),
    ("xinfo", &["consumers", "groups", "stream", "help"]),
    (
        "latency",
        &[
            "latest",
            "history",
            "reset",
            "graph",
            "doctor",
            "histogram",
            "help",
        ],
    ),
    ("script", &["load", "exists", "flush", "kill", "help"]),
    (
        "function",
        &[
            "load", "delete", "flush", "kill", "list", "stats", "dump", "restore", "help",
        ],
    ),
    (
        "acl",
        &[
            "cat", "deluser", "dryrun", "genpass", "getuser", "list", "load", "log", "save",
            "setuser", "users", "whoami", "help",
        ],
    ),
    (
        "pubsub",
        &[
            "channels",
            "numpat",
            "numsub",
            "shardchannels",
            "shardnumsub",
            "help",
        ],
    ),
];

/// The subcommands Podium runs of container `name` (none for another command).
pub(crate) fn subcommands_of(name: &str) -> &'static [&'static str] {
    CONTAINERS
        .iter()
        .find(|(c, _)| *c == name)
        .map_or(&[], |(_, subs)| subs)
}

/// Whether `name` is a command with subcommands (its keys, if any, belong to those).
pub(crate) fn is_container(name: &str) -> bool {
    CONTAINERS.iter().any(|(c, _)| *c == name)
}

/// Per-command histograms, by command name (`name|sub` for subcommands).
pub fn histograms() -> &'static std::collections::HashMap<String, Histogram> {
    static H: std::sync::OnceLock<std::collections::HashMap<String, Histogram>> =
        std::sync::OnceLock::new();
    H.get_or_init(|| {
        let mut m: std::collections::HashMap<String, Histogram> = table()
            .keys()
            .filter(|k| !CONTAINERS.iter().any(|(c, _)| c == *k))
            .map(|k| (k.to_string(), Histogram::default()))
            .collect();
        for (c, subs) in CONTAINERS {
            for s in *subs {
                m.insert(format!("{c}|{s}"), Histogram::default());
            }
        }
        m
    })
}

/// The name CLIENT LIST shows for a command: `container|subcommand` for a known subcommand
/// of a container command (`client|list`), else the command's name.
#[inline]
pub(crate) fn full_name(spec: &Cmd, args: &[Bytes]) -> &'static str {
    if spec.subs.is_empty() {
        return spec.name;
    }
    container_full_name(spec, args)
}

/// [`full_name`] for a container command.
fn container_full_name(spec: &Cmd, args: &[Bytes]) -> &'static str {
    if let Some(sub) = args.get(1) {
        let sub = String::from_utf8_lossy(sub).to_ascii_lowercase();
        if let Some((name, _)) = histograms().get_key_value(&format!("{}|{sub}", spec.name)) {
            return name.as_str();
        }
    }
    spec.name
}

/// The histogram a command's run counts in.
/// A command without subcommands finds it in its table record (by name it was a SipHash
/// per command); a container's depends on the subcommand.
fn histogram_for(spec: &Cmd, args: &[Bytes]) -> Option<&'static Histogram> {
    if spec.subs.is_empty() {
        return *spec
            .histogram
            .get_or_init(|| histograms().get(spec.spec.name));
    }
    let sub = String::from_utf8_lossy(args.get(1)?).to_ascii_lowercase();
    histograms().get(&format!("{}|{sub}", spec.name))
}

/// After a command ran: its histogram (when latency-tracking is on) and the monitor's
/// "command" / "fast-command" event.
#[inline]
pub fn after_command(srv: &Server, spec: &Cmd, args: &[Bytes], duration_us: u64) {
    if srv.config.hot.latency_tracking.load(Ordering::Relaxed) {
        if let Some(h) = histogram_for(spec, args) {
            h.record_ns(duration_us.saturating_mul(1000));
        }
    }
    let event = if spec.flags & FAST != 0 {
        "fast-command"
    } else {
        "command"
    };
    srv.latency.add_if_needed(srv, event, duration_us / 1000);
}

/// INFO latencystats lines: `latency_percentiles_usec_<cmd>:p50=...,p99=...`.
pub fn info_lines(srv: &Server) -> Vec<(String, String)> {
    if !srv.config.hot.latency_tracking.load(Ordering::Relaxed) {
        return Vec::new();
    }
    let percentiles: Vec<f64> = srv
        .config
        .text(dir::LATENCY_TRACKING_INFO_PERCENTILES)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    let mut names: Vec<&String> = histograms().keys().collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let h = &histograms()[name];
        if h.percentile_us(50.0).is_none() {
            continue;
        }
        let fields: Vec<String> = percentiles
            .iter()
            .map(|p| format!("p{}={:.3}", p, h.percentile_us(*p).unwrap_or(0.0)))
            .collect();
        out.push((format!("latency_percentiles_usec_{name}"), fields.join(",")));
    }
    out
}

fn histogram_reply(name: &str, h: &Histogram) -> (Reply, Reply) {
    let cdf = h.cdf();
    let calls = cdf.last().map(|c| c.1).unwrap_or(0);
    (
        Reply::bulk(name.as_bytes().to_vec()),
        Reply::Map(vec![
            (Reply::bulk_slice(b"calls"), Reply::Int(calls as i64)),
            (
                Reply::bulk_slice(b"histogram_usec"),
                Reply::Map(
                    cdf.into_iter()
                        .map(|(us, n)| (Reply::Int(us as i64), Reply::Int(n as i64)))
                        .collect(),
                ),
            ),
        ]),
    )
}

/// LATENCY DOCTOR's report: each event's figures in plain words.
fn doctor(events: &BTreeMap<&'static str, Series>, threshold: i64) -> String {
    if threshold == 0 {
        return "The latency monitor is off (latency-monitor-threshold is 0): no event is recorded. \
                Set it with CONFIG SET latency-monitor-threshold <milliseconds>.\n"
            .into();
    }
    let recorded: Vec<_> = events
        .iter()
        .filter(|(_, s)| !s.history().is_empty())
        .collect();
    if recorded.is_empty() {
        return format!(
            "No latency event of {threshold} ms or more was recorded since the last reset.\n"
        );
    }
    let mut s =
        format!("Latency events of {threshold} ms or more recorded since the last reset:\n\n");
    for (i, (name, series)) in recorded.iter().enumerate() {
        let h = series.history();
        let avg = h.iter().map(|x| x.1).sum::<u64>() / h.len() as u64;
        let span = h.last().map(|l| l.0).unwrap_or(0) - h.first().map(|f| f.0).unwrap_or(0);
        let _ = std::fmt::Write::write_fmt(
            &mut s,
            format_args!(
                "{}. {name}: {} latency spikes (average {avg} ms, worst {} ms) over {span} s.\n",
                i + 1,
                h.len(),
                series.max
            ),
        );
        let advice = match **name {
            "command" => "   Slow commands: see SLOWLOG GET for which ones; commands on big values (ZRANGE of a whole large sorted set, KEYS, SMEMBERS ...) cost time in proportion to their size.\n",
            "fast-command" => "   O(1) commands were slow: the machine may be overloaded or swapping.\n",
            "expire-cycle" => "   The active expiry cycle was slow: many keys, or big values, expiring at once.\n",
            _ => "",
        };
        s.push_str(advice);
    }
    s
}

/// LATENCY GRAPH: the event's samples as a bar chart, one column per sample, oldest left.
fn graph(name: &str, series: &Series) -> String {
    let h = series.history();
    let hi = h.iter().map(|x| x.1).max().unwrap_or(0);
    let lo = h.iter().map(|x| x.1).min().unwrap_or(0);
    let mut s = format!(
        "{name} - high {hi} ms, low {lo} ms (all time high {} ms)\n",
        series.max
    );
    s.push_str(&"-".repeat(80));
    s.push('\n');
    const ROWS: u64 = 4;
    for row in (1..=ROWS).rev() {
        let line: String = h
            .iter()
            .map(|x| {
                let level = if hi == 0 {
                    0
                } else {
                    (x.1 * ROWS).div_ceil(hi)
                };
                if level >= row {
                    '#'
                } else {
                    ' '
                }
            })
            .collect();
        s.push_str(line.trim_end());
        s.push('\n');
    }
    let now = crate::clock::unix_ms() / 1000;
    let ages: Vec<String> = h.iter().map(|x| format!("{}s", now - x.0)).collect();
    s.push_str(&format!("sample ages, oldest first: {}\n", ages.join(" ")));
    s
}

fn latency(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    let srv = ctx.srv;
    let mon = &srv.latency;
    match (sub.as_str(), a.len()) {
        ("latest", 2) => Ok(Reply::Array(
            mon.events
                .lock()
                .iter()
                .filter(|(_, s)| s.latest().0 != 0)
                .map(|(name, s)| {
                    let (t, ms) = s.latest();
                    Reply::Array(vec![
                        Reply::bulk(name.as_bytes().to_vec()),
                        Reply::Int(t),
                        Reply::Int(ms as i64),
                        Reply::Int(s.max as i64),
                    ])
                })
                .collect(),
        )),
        ("history", 3) => {
            let name = String::from_utf8_lossy(&a[2]);
            let events = mon.events.lock();
            Ok(Reply::Array(
                events
                    .get(name.as_ref())
                    .map(|s| s.history())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(t, ms)| Reply::Array(vec![Reply::Int(t), Reply::Int(ms as i64)]))
                    .collect(),
            ))
        }
        ("reset", _) => {
            let mut events = mon.events.lock();
            if a.len() == 2 {
                let n = events.len();
                events.clear();
                Ok(Reply::Int(n as i64))
            } else {
                let mut n = 0;
                for e in &a[2..] {
                    if events.remove(String::from_utf8_lossy(e).as_ref()).is_some() {
                        n += 1;
                    }
                }
                Ok(Reply::Int(n))
            }
        }
        ("graph", 3) => {
            let name = String::from_utf8_lossy(&a[2]).into_owned();
            let events = mon.events.lock();
            match events.get(name.as_str()) {
                Some(s) if !s.history().is_empty() => {
                    Ok(Reply::Verbatim("txt", Bytes::from(graph(&name, s))))
                }
                _ => Err(Reply::error(format!("ERR No samples available for event '{name}'"))),
            }
        }
        ("doctor", 2) => {
            let threshold = srv.config.hot.latency_threshold_ms.load(Ordering::Relaxed);
            Ok(Reply::Verbatim(
                "txt",
                Bytes::from(doctor(&mon.events.lock(), threshold)),
            ))
        }
        ("histogram", _) => {
            let mut out = Vec::new();
            let mut names: Vec<&String> = histograms().keys().collect();
            names.sort();
            let mut chosen: Vec<&String> = Vec::new();
            if a.len() == 2 {
                chosen = names;
            } else {
                // A command name selects it, or all its subcommands; `name|sub` one of them.
                for arg in &a[2..] {
                    let want = String::from_utf8_lossy(arg).to_ascii_lowercase();
                    for n in &names {
                        let hit = **n == want || n.split('|').next() == Some(want.as_str());
                        if hit && !chosen.contains(n) {
                            chosen.push(n);
                        }
                    }
                }
            }
            for name in chosen {
                let h = &histograms()[name];
                if !h.cdf().is_empty() {
                    out.push(histogram_reply(name, h));
                }
            }
            Ok(Reply::Map(out))
        }
        ("help", 2) => Ok(Reply::Array(
            [
                "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "DOCTOR",
                "    Return a human readable latency analysis report.",
                "GRAPH <event>",
                "    Return an ASCII latency graph for the <event> class.",
                "HISTORY <event>",
                "    Return time-latency samples for the <event> class.",
                "LATEST",
                "    Return the latest latency samples for all events.",
                "RESET [<event> ...]",
                "    Reset latency data of one or more <event> classes.",
                "    (default: reset all data for all event classes)",
                "HISTOGRAM [COMMAND ...]",
                "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
                "    If no commands are specified then all histograms are replied.",
                "HELP",
                "    Prints this help.",
            ]
            .iter()
            .map(|s| Reply::StatusOwned(s.to_string()))
            .collect(),
        )),
        ("latest" | "history" | "graph" | "doctor" | "help", _) => {
            Err(crate::cmdspec::wrong_arity(&format!("latency|{sub}")))
        }
        _ => Err(Reply::error(format!(
            "ERR unknown subcommand '{}'. Try LATENCY HELP.",
            String::from_utf8_lossy(&a[1])
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::latency::SAMPLES;

    #[test]
    fn series_keeps_one_sample_per_second_and_the_max() {
        let mut s = Series::default();
        s.add(100, 5);
        s.add(100, 9);
        s.add(100, 3);
        s.add(101, 4);
        assert_eq!(s.history(), vec![(100, 9), (101, 4)]);
        assert_eq!(s.latest(), (101, 4));
        assert_eq!(s.max, 9);
        for t in 0..200 {
            s.add(1000 + t, 1);
        }
        assert_eq!(s.history().len(), SAMPLES);
        assert_eq!(s.history()[0].0, 1040);
    }

    /// The dispatcher tells a container command by the subcommand list in its table record:
    /// that list must be non-empty exactly for the containers, and the names the dispatcher
    /// and CLIENT LIST use must follow from it.
    #[test]
    fn container_commands_are_those_with_subcommands() {
        for (name, cmd) in table().iter() {
            assert_eq!(
                !cmd.subs.is_empty(),
                is_container(cmd.spec.name),
                "{name}: subcommand list and container list disagree"
            );
        }
        let client = table().get("client").copied().expect("CLIENT");
        let list = [Bytes::from_static(b"client"), Bytes::from_static(b"LIST")];
        assert_eq!(full_name(client, &list), "client|list");
        let get = table().get("get").copied().expect("GET");
        let args = [Bytes::from_static(b"get"), Bytes::from_static(b"k")];
        assert_eq!(full_name(get, &args), "get");
        assert!(std::ptr::eq(
            histogram_for(get, &args).expect("GET's histogram"),
            &histograms()["get"]
        ));
    }

    #[test]
    fn histogram_buckets_have_redis_labels() {
        let h = Histogram::default();
        h.record_ns(10);
        h.record_ns(1500);
        h.record_ns(1600);
        h.record_ns(70_000);
        assert_eq!(h.cdf(), vec![(1, 1), (2, 3), (131, 4)]);
        assert_eq!(h.percentile_us(50.0), Some(2.047));
        assert_eq!(h.percentile_us(100.0), Some(131.071));
    }
}
