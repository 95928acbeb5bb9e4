//! Keyspace notifications: `notify-keyspace-events` and the events commands publish.
//!
//! A command that changes a key calls [`keyspace_event`] with the event's class (one bit per
//! letter of `notify-keyspace-events`), its name as Redis spells it and the key. When the
//! class is enabled the event is published as ordinary Pub/Sub messages: on
//! `__keyspace@<db>__:<key>` with the event name as payload (class `K`), and on
//! `__keyevent@<db>__:<event>` with the key as payload (class `E`). A disabled class costs one
//! atomic load.

pub(crate) use crate::keyspace::events::*;
use crate::server::Server;
use std::sync::atomic::Ordering;

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
