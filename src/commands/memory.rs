//! MEMORY (USAGE, STATS, DOCTOR, MALLOC-STATS, PURGE, HELP) and the memory figures INFO's
//! memory section shares with it.
//!
//! Every figure is measured, none estimated from a model of Redis: `total.allocated` is the
//! counting allocator's total (`crate::alloc`), `allocator.*` are jemalloc's own statistics
//! (`stats.allocated/active/resident`, refreshed on each read), the RSS is the kernel's.
//! The overhead Redis subtracts from the total to get `dataset.bytes` is, here: the memory in
//! use at startup, every client's buffers (query buffer with its free room, arguments, pending
//! output), the AOF buffer, the EVAL script cache and the FUNCTION libraries (their text), and
//! each database's own tables (each shard's bucketed table, the keys' records with their
//! entries, as Redis counts its dictEntry structs, and the TTL list), the replication backlog
//! and the replicas'
//! output (`clients.slaves`, left out of what `maxmemory` compares, as in Redis). Figures that
//! are zero because Podium has no such thing are reported as the zero they are:
//! `cluster.links` and `overhead.hashtable.slot-to-keys` (no cluster mode). Left out, since Podium cannot measure them: the Lua VMs' own heaps
//! (each worker thread has one; INFO's `used_memory_lua`/`used_memory_vm_*`) and the
//! fixed-size client structures Redis adds per connection.
//!
//! MEMORY DOCTOR applies Redis's checks (almost empty under 5 MB; a peak over 1.5x the
//! current use; RSS, allocator and process overheads over their ratios and 10 MB; client
//! buffers over 200 KB each on average; over 1,000 cached scripts) to these figures and
//! words its own report. MEMORY PURGE asks jemalloc to return every arena's dirty pages.

use super::{CmdResult, Ctx, Keys};
use crate::protocol::Reply;
use crate::state::Server;
use bytes::Bytes;

/// One database's own tables (only databases with keys are listed, as Redis lists them).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DbTables {
    pub(crate) db: usize,
    pub(crate) keys: usize,
    pub(crate) main: usize,
    pub(crate) expires: usize,
}

/// Redis's `redisMemOverhead`, from Podium's measurements.
#[derive(Clone, Debug, Default)]
pub(crate) struct Overhead {
    pub(crate) peak_allocated: usize,
    pub(crate) total_allocated: usize,
    pub(crate) startup_allocated: usize,
    pub(crate) clients_normal: usize,
    /// Replicas' output (mem_clients_slaves).
    pub(crate) clients_slaves: usize,
    pub(crate) repl_backlog: usize,
    pub(crate) clients: usize,
    pub(crate) aof_buffer: usize,
    /// The replicas' buffers left out of `maxmemory`'s count, read with `total_allocated`
    /// (see `Replication::used_memory_and_replica_buffers`).
    pub(crate) replica_buffers: usize,
    pub(crate) lua_caches: usize,
    pub(crate) cached_scripts: usize,
    pub(crate) functions_caches: usize,
    pub(crate) dbs: Vec<DbTables>,
    pub(crate) overhead_total: usize,
    pub(crate) total_keys: usize,
    pub(crate) bytes_per_key: usize,
    pub(crate) dataset: usize,
    pub(crate) dataset_perc: f64,
    pub(crate) peak_perc: f64,
    pub(crate) allocator: crate::alloc::AllocatorStats,
    pub(crate) rss: usize,
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

impl Overhead {
    /// Gather the figures; `dbs` are the per-database table figures (see [`tables_from`]).
    pub(crate) fn measure(srv: &Server, dbs: Vec<DbTables>) -> Overhead {
        let (total, replica_buffers) = srv.repl.used_memory_and_replica_buffers();
        let peak = crate::alloc::sample_peak().max(total);
        let startup = crate::alloc::startup_memory();
        let (clients, clients_normal, clients_slaves) = {
            let list = srv.clients.lock();
            let (mut normal, mut replicas) = (0, 0);
            for c in list.values() {
                // A killed client is gone as far as the figures go (Redis frees it at once);
                // its memory is in mem_not_counted_for_evict until its connection frees it.
                if c.killed.load(std::sync::atomic::Ordering::Relaxed) {
                    continue;
                }
                if c.repl_role.load(std::sync::atomic::Ordering::Relaxed)
                    == crate::client::ROLE_REPLICA
                {
                    // Its share of the replication buffer is counted with the buffer below.
                    replicas += c.memory_bytes() - c.stream_ref_bytes();
                } else {
                    normal += c.memory_bytes();
                }
            }
            (list.len(), normal, replicas)
        };
        let (repl_backlog, replicas_share) = srv.repl.buffer_shares();
        let clients_slaves = clients_slaves + replicas_share;
        let aof_buffer = srv.aof.buffer_bytes();
        let (cached_scripts, lua_caches) = srv.scripts.cache_usage();
        let functions_caches = srv.scripts.functions_bytes();
        let tables: usize = dbs.iter().map(|d| d.main + d.expires).sum();
        let overhead_total = startup
            + clients_normal
            + clients_slaves
            + repl_backlog
            + aof_buffer
            + lua_caches
            + functions_caches
            + tables;
        let total_keys = dbs.iter().map(|d| d.keys).sum();
        let net = if total > startup { total - startup } else { 1 };
        let dataset = total.saturating_sub(overhead_total);
        Overhead {
            peak_allocated: peak,
            total_allocated: total,
            startup_allocated: startup,
            clients_normal,
            clients_slaves,
            repl_backlog,
            clients,
            aof_buffer,
            replica_buffers,
            lua_caches,
            cached_scripts,
            functions_caches,
            dbs,
            overhead_total,
            total_keys,
            bytes_per_key: net.checked_div(total_keys).unwrap_or(0),
            dataset,
            dataset_perc: dataset as f64 * 100.0 / net as f64,
            peak_perc: ratio(total * 100, peak),
            allocator: crate::alloc::allocator_stats(),
            rss: crate::alloc::rss_bytes(),
        }
    }

    fn allocator_frag(&self) -> (f64, i64) {
        let a = &self.allocator;
        (
            ratio(a.active, a.allocated),
            a.active as i64 - a.allocated as i64,
        )
    }
    fn allocator_rss(&self) -> (f64, i64) {
        let a = &self.allocator;
        (
            ratio(a.resident, a.active),
            a.resident as i64 - a.active as i64,
        )
    }
    fn rss_extra(&self) -> (f64, i64) {
        let a = &self.allocator;
        (
            ratio(self.rss, a.resident),
            self.rss as i64 - a.resident as i64,
        )
    }
    fn total_frag(&self) -> (f64, i64) {
        (
            ratio(self.rss, self.total_allocated),
            self.rss as i64 - self.total_allocated as i64,
        )
    }
}

/// Per-database table figures from a shard visitor (`visit` calls back with each shard).
pub(crate) fn tables_from(
    num_dbs: usize,
    visit: impl FnOnce(&mut dyn FnMut(usize, &crate::keyspace::Shard)),
) -> Vec<DbTables> {
    let mut all: Vec<DbTables> = (0..num_dbs)
        .map(|db| DbTables {
            db,
            ..Default::default()
        })
        .collect();
    visit(&mut |db, shard| {
        let (main, expires) = shard.table_bytes();
        let t = &mut all[db];
        t.keys += shard.len();
        t.main += main;
        t.expires += expires;
    });
    all.retain(|t| t.keys > 0);
    all
}

/// The figures, locking each shard in turn (INFO, which holds no shard lock). While a load
/// holds every shard the ones it holds are left out, so that INFO answers during the load
/// (see `Keyspace::db_sizes_without_waiting`).
pub(crate) fn measure_unlocked(srv: &Server) -> Overhead {
    let ks = &srv.keyspace;
    let loading = srv.aof.loading();
    let dbs = tables_from(ks.num_dbs(), |f| {
        for (d, db) in ks.dbs.iter().enumerate() {
            for s in db.shards.iter() {
                if loading {
                    if let Some(shard) = s.try_lock() {
                        f(d, &shard);
                    }
                } else {
                    f(d, &s.lock());
                }
            }
        }
    });
    Overhead::measure(srv, dbs)
}

/// INFO lines as (field, value).
pub(crate) type InfoFields = Vec<(&'static str, String)>;

/// INFO memory's fields that come from these figures, in Redis's order (`used_memory` and
/// the others before `maxmemory` first, then those after it).
pub(crate) fn info_fields(srv: &Server) -> (InfoFields, InfoFields) {
    let m = measure_unlocked(srv);
    let human = crate::util::human;
    let mut before = vec![
        ("used_memory", m.total_allocated.to_string()),
        ("used_memory_human", human(m.total_allocated)),
        ("used_memory_rss", m.rss.to_string()),
        ("used_memory_rss_human", human(m.rss)),
        ("used_memory_peak", m.peak_allocated.to_string()),
        ("used_memory_peak_human", human(m.peak_allocated)),
        ("used_memory_peak_perc", format!("{:.2}%", m.peak_perc)),
        ("used_memory_overhead", m.overhead_total.to_string()),
        ("used_memory_startup", m.startup_allocated.to_string()),
        ("used_memory_dataset", m.dataset.to_string()),
        (
            "used_memory_dataset_perc",
            format!("{:.2}%", m.dataset_perc),
        ),
        ("allocator_allocated", m.allocator.allocated.to_string()),
        ("allocator_active", m.allocator.active.to_string()),
        ("allocator_resident", m.allocator.resident.to_string()),
        ("used_memory_scripts_eval", m.lua_caches.to_string()),
    ];
    // number_of_cached_scripts, number_of_functions, number_of_libraries, in Redis's order.
    before.extend(srv.scripts.info_memory_fields());
    before.extend([
        ("used_memory_functions", m.functions_caches.to_string()),
        (
            "used_memory_scripts",
            (m.lua_caches + m.functions_caches).to_string(),
        ),
        (
            "used_memory_scripts_human",
            human(m.lua_caches + m.functions_caches),
        ),
    ]);
    let (af, afb) = m.allocator_frag();
    let (ar, arb) = m.allocator_rss();
    let (re, reb) = m.rss_extra();
    let (tf, tfb) = m.total_frag();
    let after = vec![
        ("allocator_frag_ratio", format!("{af:.2}")),
        ("allocator_frag_bytes", afb.to_string()),
        ("allocator_rss_ratio", format!("{ar:.2}")),
        ("allocator_rss_bytes", arb.to_string()),
        ("rss_overhead_ratio", format!("{re:.2}")),
        ("rss_overhead_bytes", reb.to_string()),
        ("mem_fragmentation_ratio", format!("{tf:.2}")),
        ("mem_fragmentation_bytes", tfb.to_string()),
        (
            "mem_not_counted_for_evict",
            (m.aof_buffer + m.replica_buffers + crate::client::killed_unfreed()).to_string(),
        ),
        ("mem_replication_backlog", m.repl_backlog.to_string()),
        // One buffer for the backlog and the replicas' pending stream, as in Redis 7.0.
        (
            "mem_total_replication_buffers",
            srv.repl.buffer_bytes().to_string(),
        ),
        ("mem_clients_slaves", m.clients_slaves.to_string()),
        ("mem_clients_normal", m.clients_normal.to_string()),
        ("mem_aof_buffer", m.aof_buffer.to_string()),
        ("mem_allocator", crate::alloc::allocator_name()),
    ];
    (before, after)
}

/// MEMORY's keys: USAGE names one.
pub(crate) fn memory_keys(a: &[Bytes]) -> Vec<usize> {
    if a.len() >= 3 && a[1].eq_ignore_ascii_case(b"usage") {
        vec![2]
    } else {
        vec![]
    }
}

/// The key-spec of MEMORY in the command table.
pub(crate) const MEMORY_KEYS: Keys = Keys::Custom(memory_keys);

const HELP: &[&str] = &[
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return memory problems reports.",
    "MALLOC-STATS",
    "    Return internal statistics report from the memory allocator.",
    "PURGE",
    "    Attempt to purge dirty pages for reclamation by the allocator.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
    "HELP",
    "    Print this help.",
];

pub(crate) fn memory(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    let arity_ok = match sub.as_str() {
        "usage" => a.len() >= 3,
        "stats" | "doctor" | "malloc-stats" | "purge" | "help" => a.len() == 2,
        _ => {
            return Err(Reply::error(format!(
                "ERR unknown subcommand '{}'. Try MEMORY HELP.",
                String::from_utf8_lossy(&a[1])
            )))
        }
    };
    if !arity_ok {
        return Err(crate::cmdspec::wrong_arity(&format!("memory|{sub}")));
    }
    match sub.as_str() {
        "help" => Ok(Reply::Array(
            HELP.iter()
                .map(|s| Reply::StatusOwned(s.to_string()))
                .collect(),
        )),
        "usage" => Ok(usage(ctx, a)),
        "stats" => Ok(stats(&measure_locked(ctx))),
        "doctor" => Ok(Reply::Verbatim(
            "txt",
            Bytes::from(doctor(&measure_locked(ctx))),
        )),
        "malloc-stats" => Ok(Reply::Verbatim(
            "txt",
            Bytes::from(crate::alloc::malloc_stats_text()),
        )),
        _ => match crate::alloc::purge() {
            Ok(()) => Ok(Reply::Ok),
            Err(_) => Err(Reply::error("ERR Error purging dirty pages")),
        },
    }
}

fn measure_locked(ctx: &mut Ctx) -> Overhead {
    let dbs = tables_from(ctx.srv.keyspace.num_dbs(), |f| {
        ctx.g.visit_all_shards(|d, s| f(d, s))
    });
    Overhead::measure(ctx.srv, dbs)
}

fn usage(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let mut i = 3;
    while i < a.len() {
        if a[i].eq_ignore_ascii_case(b"samples") && i + 1 < a.len() {
            match super::args::int(&a[i + 1]) {
                Ok(n) if n < 0 => return Reply::error(super::args::SYNTAX),
                Ok(_) => {}
                Err(e) => return e,
            }
            i += 2;
        } else {
            return Reply::error(super::args::SYNTAX);
        }
    }
    let key = a[2].clone();
    let mut h = ctx.db();
    let value_bytes = match h.read_uncounted(&key) {
        None => return Reply::Null,
        Some(v) => super::keys::value_heap_bytes(v),
    };
    // The key's record (its bytes and entry, the value's inline part among them), its share
    // of its shard's table, and its place in the list of keys with a TTL:
    // with what the value allocates besides, this is what the key costs in used_memory, which
    // is what Redis's MEMORY USAGE reports too.
    let key_bytes = h.shard(&key).key_bytes(&key).unwrap_or(0);
    let bytes = key_bytes + value_bytes;
    Reply::Int(bytes as i64)
}

fn stats(m: &Overhead) -> Reply {
    let int = |n: usize| Reply::Int(n as i64);
    let name = |s: &str| Reply::bulk_slice(s.as_bytes());
    let mut pairs = vec![
        (name("peak.allocated"), int(m.peak_allocated)),
        (name("total.allocated"), int(m.total_allocated)),
        (name("startup.allocated"), int(m.startup_allocated)),
        (name("replication.backlog"), int(m.repl_backlog)),
        (name("clients.slaves"), int(m.clients_slaves)),
        (name("clients.normal"), int(m.clients_normal)),
        (name("cluster.links"), int(0)),
        (name("aof.buffer"), int(m.aof_buffer)),
        (name("lua.caches"), int(m.lua_caches)),
        (name("functions.caches"), int(m.functions_caches)),
    ];
    for d in &m.dbs {
        pairs.push((
            name(&format!("db.{}", d.db)),
            Reply::Map(vec![
                (name("overhead.hashtable.main"), int(d.main)),
                (name("overhead.hashtable.expires"), int(d.expires)),
                (name("overhead.hashtable.slot-to-keys"), int(0)),
            ]),
        ));
    }
    let (af, afb) = m.allocator_frag();
    let (ar, arb) = m.allocator_rss();
    let (re, reb) = m.rss_extra();
    let (tf, tfb) = m.total_frag();
    // Redis sends these ratios as C floats widened to double: round the same way.
    let float = |x: f64| Reply::Double(x as f32 as f64);
    pairs.extend([
        (name("overhead.total"), int(m.overhead_total)),
        (name("keys.count"), int(m.total_keys)),
        (name("keys.bytes-per-key"), int(m.bytes_per_key)),
        (name("dataset.bytes"), int(m.dataset)),
        (name("dataset.percentage"), float(m.dataset_perc)),
        (name("peak.percentage"), float(m.peak_perc)),
        (name("allocator.allocated"), int(m.allocator.allocated)),
        (name("allocator.active"), int(m.allocator.active)),
        (name("allocator.resident"), int(m.allocator.resident)),
        (name("allocator-fragmentation.ratio"), float(af)),
        (name("allocator-fragmentation.bytes"), Reply::Int(afb)),
        (name("allocator-rss.ratio"), float(ar)),
        (name("allocator-rss.bytes"), Reply::Int(arb)),
        (name("rss-overhead.ratio"), float(re)),
        (name("rss-overhead.bytes"), Reply::Int(reb)),
        (name("fragmentation"), float(tf)),
        (name("fragmentation.bytes"), Reply::Int(tfb)),
    ]);
    Reply::Map(pairs)
}

/// MEMORY DOCTOR's report: Redis's checks, Podium's words.
pub(crate) fn doctor(m: &Overhead) -> String {
    const MB: usize = 1 << 20;
    if m.total_allocated < 5 * MB {
        return "The server holds less than 5 MB, too little for these checks to mean \
                anything. Load some data and ask again.\n"
            .to_string();
    }
    let mut findings: Vec<String> = Vec::new();
    if ratio(m.peak_allocated, m.total_allocated) > 1.5 {
        findings.push(format!(
            "Past peak: the server once held {} bytes, more than 1.5 times the {} it holds now. \
             Pages freed since then may still count in the RSS; MEMORY PURGE returns what the \
             allocator keeps unused.",
            m.peak_allocated, m.total_allocated
        ));
    }
    let (tf, tfb) = m.total_frag();
    if tf > 1.4 && tfb > 10 * MB as i64 {
        findings.push(format!(
            "Resident set much larger than the data: RSS is {tf:.2} times the bytes allocated \
             ({tfb} bytes more). A past peak (see above) or a workload that fragments the \
             heap can cause it; the allocator is {}.",
            crate::alloc::allocator_name()
        ));
    }
    let (af, afb) = m.allocator_frag();
    if af > 1.1 && afb > 10 * MB as i64 {
        findings.push(format!(
            "Allocator fragmentation: the allocator's active pages are {af:.2} times what is \
             allocated in them ({afb} bytes). Podium has no active defragmenter; the pages \
             come back as their blocks are freed."
        ));
    }
    let (ar, arb) = m.allocator_rss();
    if ar > 1.1 && arb > 10 * MB as i64 {
        findings.push(format!(
            "Allocator RSS overhead: the allocator keeps {arb} bytes resident beyond its \
             active pages ({ar:.2} times). MEMORY PURGE gives them back to the system."
        ));
    }
    let (re, reb) = m.rss_extra();
    if re > 1.1 && reb > 10 * MB as i64 {
        findings.push(format!(
            "Memory outside the allocator: the process is resident for {reb} bytes more than \
             the allocator holds ({re:.2} times): thread stacks, the Lua interpreters and \
             mapped files."
        ));
    }
    if m.clients > 0 && m.clients_normal / m.clients > 200 * 1024 {
        findings.push(format!(
            "Large client buffers: the {} clients hold {} bytes of buffers, over 200 KB each \
             on average. Subscribers that read slowly or clients with large pipelined replies \
             are the usual cause; CLIENT LIST shows each client's qbuf and omem.",
            m.clients, m.clients_normal
        ));
    }
    if m.cached_scripts > 1000 {
        findings.push(format!(
            "Many cached scripts: {} scripts are cached ({} bytes). Scripts built with their \
             values inline instead of passed as KEYS and ARGV each get cached; SCRIPT FLUSH \
             empties the cache.",
            m.cached_scripts, m.lua_caches
        ));
    }
    if findings.is_empty() {
        return "No memory problem found: the peak, the overheads, the client buffers and the \
                script cache are all within bounds.\n"
            .to_string();
    }
    let mut out = String::from("Memory report, what stands out:\n\n");
    for f in findings {
        out.push_str(" * ");
        out.push_str(&f);
        out.push_str("\n\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(total: usize, peak: usize) -> Overhead {
        Overhead {
            total_allocated: total,
            peak_allocated: peak,
            ..Default::default()
        }
    }

    #[test]
    fn doctor_checks_the_figures() {
        assert!(doctor(&figures(1 << 20, 1 << 20)).contains("less than 5 MB"));
        let calm = figures(100 << 20, 100 << 20);
        assert!(doctor(&calm).starts_with("No memory problem"));
        assert!(doctor(&figures(100 << 20, 200 << 20)).contains("Past peak"));
        let mut clients = calm.clone();
        clients.clients = 2;
        clients.clients_normal = 1 << 20;
        assert!(doctor(&clients).contains("Large client buffers"));
    }

    #[test]
    fn tables_list_only_databases_with_keys() {
        let empty = crate::keyspace::Shard::default();
        let mut one = crate::keyspace::Shard::default();
        one.insert(
            b"k",
            crate::types::Value::Str(crate::types::compact::CompactBytes::new(b"v")),
            false,
        );
        let t = tables_from(3, |f| {
            f(0, &empty);
            f(2, &one);
        });
        assert_eq!(t.len(), 1);
        assert_eq!((t[0].db, t[0].keys), (2, 1));
        assert!(t[0].main > 0);
    }
}
