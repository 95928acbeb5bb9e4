//! Keyspace notifications: `notify-keyspace-events` and the events commands publish.
//!
//! A command that changes a key calls [`keyspace_event`] with the event's class (one bit per
//! letter of `notify-keyspace-events`), its name as Redis spells it and the key. When the
//! class is enabled the event is published as ordinary Pub/Sub messages: on
//! `__keyspace@<db>__:<key>` with the event name as payload (class `K`), and on
//! `__keyevent@<db>__:<event>` with the key as payload (class `E`). A disabled class costs one
//! atomic load.

use crate::server::Server;
use std::sync::atomic::Ordering;

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

/// Publish the events a command recorded, in order.
pub(crate) fn publish_all(srv: &Server, events: &mut Vec<Event>) {
    for (db, event, key) in events.drain(..) {
        publish_event(srv, event, &key, db);
    }
}

/// Publish event `event` of class `class` on `key` in database `db`, if enabled.
#[inline]
pub(crate) fn keyspace_event(srv: &Server, class: u32, event: &str, key: &[u8], db: usize) {
    if srv.config.hot.notify_flags.load(Ordering::Relaxed) & class != 0 {
        publish_event(srv, event, key, db);
    }
}

#[cold]
fn publish_event(srv: &Server, event: &str, key: &[u8], db: usize) {
    let flags = srv.config.hot.notify_flags.load(Ordering::Relaxed);
    let limit = srv.config.hot.obuf.pubsub();
    let now = crate::clock::unix_ms();
    if flags & KEYSPACE != 0 {
        let mut chan = format!("__keyspace@{db}__:").into_bytes();
        chan.extend_from_slice(key);
        srv.pubsub
            .publish(&chan, event.as_bytes(), false, limit, now);
    }
    if flags & KEYEVENT != 0 {
        let chan = format!("__keyevent@{db}__:{event}");
        srv.pubsub.publish(chan.as_bytes(), key, false, limit, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_round_trip_as_redis_prints_them() {
        let canon = |s: &str| normalise(s).unwrap();
        assert_eq!(canon("gKE"), "gKE");
        assert_eq!(canon("$lshzxeKE"), "$lshzxeKE");
        assert_eq!(canon("KA"), "AK");
        assert_eq!(canon("EA"), "AE");
        assert_eq!(canon("En"), "nE");
        assert_eq!(canon("AKEmn"), "AKEm");
        assert_eq!(canon(""), "");
        assert!(normalise("Kq").is_err());
        assert_eq!(parse_flags("A").unwrap() & (KEY_MISS | NEW), 0);
    }
}
