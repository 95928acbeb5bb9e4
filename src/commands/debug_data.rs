//! DEBUG DIGEST, DIGEST-VALUE, POPULATE, RELOAD and LOADAOF, the dataset subcommands of DEBUG,
//! and LOG,
//! which the persistence tests use to mark their steps in the server's log.
//!
//! Redis's tests compare datasets by digest (before and after DEBUG RELOAD, a restart, an AOF
//! rewrite) and fill databases with DEBUG POPULATE. The digests here are Redis 7.0's, computed
//! from the logical content only, so the same data gives the same 40 hex digits on Podium and
//! on redis-server whatever the encodings (`tests/debug_digest.rs` checks it against a real
//! redis-server):
//! - `mix(d, bytes)` is `d = SHA1(d xor SHA1(bytes))` (order matters), `xor(d, bytes)` is
//!   `d ^= SHA1(bytes)` (order does not);
//! - a key's digest mixes the key, Redis's type number (4 bytes, big-endian), then the value:
//!   a string is mixed; list elements are mixed in order; set members are xored; each sorted-set
//!   member and each hash field gets its own digest (member then score as `%.17g`, field then
//!   value) which is xored in; a key with a TTL gets "!!expire!!" xored in (its presence, not
//!   its time);
//! - DEBUG DIGEST starts from 20 zero bytes and, for each non-empty database in order, mixes
//!   the database number (4 bytes, big-endian) and xors in every key's digest (hashed again,
//!   like any element).
//!
//! Like Redis, both read keys as stored, logically expired ones included. DEBUG POPULATE adds
//! `count` string keys `<prefix>:<n>` (prefix `key`) holding `value:<n>`, cut or zero-padded to
//! `size` bytes when a size is given, skipping names that exist; it is not propagated to the AOF
//! and does not count as changes (as in Redis). RELOAD is [`super::persist::debug_reload`],
//! LOADAOF [`crate::persistence::debug_loadaof`].

use super::Ctx;
use crate::config::dir;
use crate::keyspace::Entry;
use crate::protocol::Reply;
use crate::types::Value;
use bytes::Bytes;

/// Runs the subcommand if it is one of this module's (`sub` lower-cased); None otherwise.
pub(crate) fn dispatch(ctx: &mut Ctx, sub: &str, a: &[Bytes]) -> Option<Reply> {
    Some(match (sub, a.len()) {
        ("digest", 2) => digest(ctx),
        ("digest-value", _) => digest_value(ctx, &a[2..]),
        ("populate", 3..=5) => populate(ctx, a),
        ("object", 3) => debug_object(ctx, &a[2]),
        // The save and the load lock every shard themselves; inside EXEC (or a script) the
        // command already holds them, and taking them again would deadlock.
        ("reload" | "loadaof", _) if !ctx.g.is_empty() => Reply::Error(format!(
            "ERR DEBUG {} cannot run inside MULTI/EXEC in Podium (it locks every key itself)",
            sub.to_ascii_uppercase()
        )),
        ("reload", _) => super::persist::debug_reload(ctx.srv, &a[2..]),
        ("loadaof", 2) => match crate::persistence::debug_loadaof(ctx.srv) {
            Ok(()) => Reply::Ok,
            Err(e) => Reply::Error(format!("ERR Error loading the AOF: {e}")),
        },
        // Redis's tests mark their steps in the server's log with it.
        ("log", 3) => {
            tracing::warn!("DEBUG LOG: {}", String::from_utf8_lossy(&a[2]));
            Reply::Ok
        }
        _ => return None,
    })
}

/// The lines DEBUG HELP prints for these subcommands.
pub(crate) const HELP: &[&str] = &[
    "OBJECT <key>",
    "    Show low level info about the key and associated value.",
    "LOADAOF",
    "    Flush the AOF buffers on disk and reload the AOF in memory.",
    "LOG <message>",
    "    Write <message> to the server log.",
    "DIGEST",
    "    Output a hex signature representing the current DB content.",
    "DIGEST-VALUE <key> [<key> ...]",
    "    Output a hex signature of the values of all the specified keys.",
    "POPULATE <count> [<prefix>] [<size>]",
    "    Create <count> string keys named key:<num>. If <prefix> is specified then",
    "    it is used instead of the 'key' prefix. These are not propagated to",
    "    replicas. Cluster slots are not respected so keys not belonging to the",
    "    current node can be created in cluster mode.",
];

/// DEBUG OBJECT: Redis's line, with Podium's figures: where the value lives, its one owner
/// (values are never shared), its encoding, the size of its RDB serialization (compressed if
/// `rdbcompression` is on), the entry's access field (LRU clock or LFU data) and idle seconds.
/// A list adds Redis's quicklist fields as they describe Podium's list, one block of elements:
/// one node holding them all, never compressed, its element bytes, and the
/// `list-max-listpack-size` setting (which Podium's list does not use; see the README).
fn debug_object(ctx: &mut Ctx, key: &[u8]) -> Reply {
    let lzf = ctx.srv.config.flag(dir::RDBCOMPRESSION);
    let listpack_max = ctx.srv.config.text(dir::LIST_MAX_LISTPACK_SIZE);
    let mut db = ctx.db();
    let Some(e) = db.peek_stored(key) else {
        return Reply::error("ERR no such key");
    };
    let mut serialized = Vec::new();
    crate::persistence::rdb::put_object(&mut serialized, &e.value, lzf);
    let extra = match &e.value {
        Value::List(l) => {
            let count = l.len();
            let bytes: usize = l.iter().map(<[u8]>::len).sum();
            format!(
                " ql_nodes:1 ql_avg_node:{count}.00 ql_listpack_max:{listpack_max} ql_compressed:0 ql_uncompressed_size:{bytes}"
            )
        }
        _ => String::new(),
    };
    Reply::StatusOwned(format!(
        "Value at:{:p} refcount:1 encoding:{} serializedlength:{} lru:{} lru_seconds_idle:{}{}",
        &e.value as *const Value,
        e.value.encoding_name(),
        serialized.len(),
        e.access(),
        crate::evict::idle_ms(e) / 1000,
        extra
    ))
}

type Digest = [u8; 20];

fn sha1(bytes: &[u8]) -> Digest {
    sha1_smol::Sha1::from(bytes).digest().bytes()
}

/// `d ^= SHA1(bytes)`: adds an element whose position does not matter.
fn xor_in(d: &mut Digest, bytes: &[u8]) {
    for (x, h) in d.iter_mut().zip(sha1(bytes)) {
        *x ^= h;
    }
}

/// `d = SHA1(d ^ SHA1(bytes))`: adds an element whose position matters.
fn mix_in(d: &mut Digest, bytes: &[u8]) {
    xor_in(d, bytes);
    *d = sha1(&d[..]);
}

fn hex(d: &Digest) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Redis's type numbers (OBJ_STRING ... OBJ_HASH), which the digest mixes in.
fn type_number(v: &Value) -> u32 {
    match v {
        Value::Str(_) => 0,
        Value::List(_) => 1,
        Value::Set(_) => 2,
        Value::ZSet(_) => 3,
        Value::Hash(_) => 4,
        Value::Stream(_) => 6,
    }
}

/// Mixes the value and TTL of `entry` into `d` (Redis's xorObjectDigest).
fn mix_entry(d: &mut Digest, entry: &Entry) {
    mix_in(d, &type_number(&entry.value).to_be_bytes());
    match &entry.value {
        Value::Str(s) => mix_in(d, s.as_bytes()),
        Value::List(l) => {
            for item in l.iter() {
                mix_in(d, item);
            }
        }
        Value::Set(s) => {
            for m in s.iter() {
                xor_in(d, &m);
            }
        }
        Value::ZSet(z) => {
            let mut score_text = Vec::with_capacity(24);
            for (member, score) in z.iter() {
                let mut element = [0u8; 20];
                mix_in(&mut element, member);
                score_text.clear();
                crate::util::numtext::format_f64(score, &mut score_text);
                mix_in(&mut element, &score_text);
                xor_in(d, &element);
            }
        }
        Value::Hash(h) => {
            for (field, value) in h.iter() {
                let mut element = [0u8; 20];
                mix_in(&mut element, field);
                mix_in(&mut element, value);
                xor_in(d, &element);
            }
        }
        Value::Stream(s) => {
            use crate::types::stream::StreamId;
            s.for_each(StreamId::MIN, StreamId::MAX, false, |e| {
                mix_in(d, format!("{}.{}", e.id.ms, e.id.seq).as_bytes());
                for item in e.items() {
                    mix_in(d, item);
                }
                true
            });
        }
    }
    if entry.has_expire() {
        xor_in(d, b"!!expire!!");
    }
}

fn digest(ctx: &mut Ctx) -> Reply {
    ctx.g.lock_all();
    let mut total = [0u8; 20];
    for db in 0..ctx.srv.keyspace.num_dbs() {
        let mut handle = ctx.g.db(db);
        if handle.is_empty() {
            continue;
        }
        mix_in(&mut total, &(db as u32).to_be_bytes());
        handle.for_each_shard(|_, shard| {
            for (key, entry, _) in shard.keys() {
                let mut d = [0u8; 20];
                mix_in(&mut d, key);
                mix_entry(&mut d, &entry);
                xor_in(&mut total, &d);
            }
        });
    }
    Reply::StatusOwned(hex(&total))
}

fn digest_value(ctx: &mut Ctx, keys: &[Bytes]) -> Reply {
    let db = ctx.client.db;
    ctx.g.lock_keys(db, keys.iter().map(|k| &k[..]));
    let ks = &ctx.srv.keyspace;
    let replies = keys
        .iter()
        .map(|key| {
            let mut d = [0u8; 20];
            // As Redis: no expiry check, a debug command reads logically expired keys too.
            if let Some(entry) = ctx.g.shard_mut(db, ks.shard_of(key)).raw_get(key) {
                mix_entry(&mut d, &entry);
            }
            Reply::StatusOwned(hex(&d))
        })
        .collect();
    Reply::Array(replies)
}

/// Redis's getPositiveLongFromObjectOrReply: one error for text and for negative numbers.
fn positive(arg: &[u8]) -> Result<u64, Reply> {
    match crate::util::numtext::parse_i64(arg) {
        Some(n) if n >= 0 => Ok(n as u64),
        _ => Err(Reply::error("ERR value is out of range, must be positive")),
    }
}

/// Redis formats key names into a 128-byte buffer with `%s:%lu`: the prefix ends at its first
/// NUL and the name at 127 bytes.
fn populate_key(prefix: &[u8], n: u64, out: &mut Vec<u8>) {
    out.clear();
    let end = prefix.iter().position(|&b| b == 0).unwrap_or(prefix.len());
    out.extend_from_slice(&prefix[..end]);
    out.push(b':');
    crate::util::numtext::format_i64(n as i64, out);
    out.truncate(127);
}

fn populate(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let count = match positive(&a[2]) {
        Ok(n) => n,
        Err(e) => return e,
    };
    let size = match a.get(4).map(|s| positive(s)) {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(e)) => return e,
    };
    // Redis would try to allocate any size; Podium holds a value to the size a client could
    // send in one argument.
    let max_bulk = u64::try_from(ctx.srv.config.int(dir::PROTO_MAX_BULK_LEN)).unwrap_or(512 << 20);
    if size.is_some_and(|s| s > max_bulk) {
        return Reply::error(
            "ERR DEBUG POPULATE value size is larger than proto-max-bulk-len, refused",
        );
    }
    let prefix: &[u8] = a.get(3).map_or(b"key", |p| &p[..]);
    let db = ctx.client.db;
    ctx.g.lock_db(db);
    let mut key = Vec::with_capacity(64);
    let mut value = Vec::with_capacity(32);
    for n in 0..count {
        populate_key(prefix, n, &mut key);
        let mut handle = ctx.g.db(db);
        if handle.exists(&key) {
            continue;
        }
        value.clear();
        value.extend_from_slice(b"value:");
        crate::util::numtext::format_i64(n as i64, &mut value);
        if let Some(size) = size {
            value.resize(size as usize, 0);
        }
        handle.insert(
            &key,
            Value::Str(crate::types::compact::CompactBytes::new(&value)),
        );
        handle.modified(&key);
    }
    Reply::Ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_depends_on_order_and_xor_does_not() {
        let (mut a, mut b) = ([0u8; 20], [0u8; 20]);
        mix_in(&mut a, b"x");
        mix_in(&mut a, b"y");
        mix_in(&mut b, b"y");
        mix_in(&mut b, b"x");
        assert_ne!(a, b);
        let (mut c, mut d) = ([0u8; 20], [0u8; 20]);
        xor_in(&mut c, b"x");
        xor_in(&mut c, b"y");
        xor_in(&mut d, b"y");
        xor_in(&mut d, b"x");
        assert_eq!(c, d);
    }

    #[test]
    fn populate_names_follow_redis_buffer_rules() {
        let mut k = Vec::new();
        populate_key(b"key", 7, &mut k);
        assert_eq!(k, b"key:7");
        populate_key(b"ab\0cd", 1, &mut k);
        assert_eq!(k, b"ab:1");
        populate_key(&[b'p'; 200], 1, &mut k);
        assert_eq!(k.len(), 127);
        assert!(k.iter().all(|&b| b == b'p'));
    }

    #[test]
    fn positive_checks_like_redis() {
        assert_eq!(positive(b"10").ok(), Some(10));
        assert!(positive(b"-1").is_err());
        assert!(positive(b"x").is_err());
    }
}
