//! Keyspace event classes (one bit per letter of `notify-keyspace-events`), their parsing and
//! printing, and the event record a command collects while it holds its shard locks. Kept in the
//! keyspace layer because the keyspace records events (expiry, new keys); publishing them is
//! `crate::notify`'s job, which re-exports these names.

pub(crate) const KEYSPACE: u32 = 1 << 0; // K
pub(crate) const KEYEVENT: u32 = 1 << 1; // E
pub(crate) const GENERIC: u32 = 1 << 2; // g
pub(crate) const STRING: u32 = 1 << 3; // $
pub(crate) const LIST: u32 = 1 << 4; // l
pub(crate) const SET: u32 = 1 << 5; // s
pub(crate) const HASH: u32 = 1 << 6; // h
pub(crate) const ZSET: u32 = 1 << 7; // z
pub(crate) const EXPIRED: u32 = 1 << 8; // x
pub(crate) const EVICTED: u32 = 1 << 9; // e
pub(crate) const STREAM: u32 = 1 << 10; // t
pub(crate) const KEY_MISS: u32 = 1 << 11; // m
pub(crate) const MODULE: u32 = 1 << 12; // d
pub(crate) const NEW: u32 = 1 << 13; // n
/// `A`: every class but key misses and new keys (as in Redis).
pub(crate) const ALL: u32 =
    GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// Parse `notify-keyspace-events` letters; None for a letter Redis does not know.
pub(crate) fn parse_flags(classes: &str) -> Option<u32> {
    let mut flags = 0;
    for c in classes.chars() {
        flags |= match c {
            'A' => ALL,
            'g' => GENERIC,
            '$' => STRING,
            'l' => LIST,
            's' => SET,
            'h' => HASH,
            'z' => ZSET,
            'x' => EXPIRED,
            'e' => EVICTED,
            'K' => KEYSPACE,
            'E' => KEYEVENT,
            't' => STREAM,
            'm' => KEY_MISS,
            'd' => MODULE,
            'n' => NEW,
            _ => return None,
        };
    }
    Some(flags)
}

/// The letters CONFIG GET shows for `flags`, in Redis's order (`A` stands for the whole set
/// it covers, and then hides `n` as Redis's does).
pub(crate) fn flags_to_string(flags: u32) -> String {
    let mut s = String::new();
    if flags & ALL == ALL {
        s.push('A');
    } else {
        for (bit, c) in [
            (GENERIC, 'g'),
            (STRING, '$'),
            (LIST, 'l'),
            (SET, 's'),
            (HASH, 'h'),
            (ZSET, 'z'),
            (EXPIRED, 'x'),
            (EVICTED, 'e'),
            (STREAM, 't'),
            (MODULE, 'd'),
            (NEW, 'n'),
        ] {
            if flags & bit != 0 {
                s.push(c);
            }
        }
    }
    for (bit, c) in [(KEYSPACE, 'K'), (KEYEVENT, 'E'), (KEY_MISS, 'm')] {
        if flags & bit != 0 {
            s.push(c);
        }
    }
    s
}

/// Check and normalise a `notify-keyspace-events` value (Redis's error text otherwise).
pub(crate) fn normalise(value: &str) -> Result<String, String> {
    parse_flags(value)
        .map(flags_to_string)
        .ok_or_else(|| "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.".to_string())
}

/// A recorded event: database, event name, key.
pub(crate) type Event = (usize, &'static str, bytes::Bytes);
