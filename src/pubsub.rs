//! Pub/Sub: who listens to which channel, and getting a message to each listener.
//!
//! [`PubSub`] is the server-wide registry: exact channels, glob patterns and shard channels,
//! each mapping to the clients subscribed to it. A client's own view of its subscriptions
//! ([`Subscriptions`]) lives in its connection state, so unsubscribing everything when it goes
//! away needs no search.
//!
//! Delivery never writes to a socket from the publisher: every connection has a [`Mailbox`]
//! (inside its `ClientInfo`), a queue of already-encoded push messages plus a `Notify` that
//! wakes the connection task even while it waits for input. PUBLISH encodes a message once per
//! protocol version, appends a shared copy to each subscriber's queue and returns, so a
//! publisher to many subscribers is never held up by a slow one. The queue is accounted in
//! bytes (queued plus handed to the socket and not yet written) and judged against
//! `client-output-buffer-limit pubsub` as Redis does: past the hard limit, or past the soft
//! limit for longer than its seconds, the subscriber is disconnected and its queue dropped.
//! Messages to one subscriber keep publish order (one queue, drained in order).

use crate::client::ClientInfo;
use crate::client::{Kind, Subscriptions};
use crate::config::ObufLimit;
use crate::protocol::{Reply, Resp};
use crate::util::numtext::glob_match;
use bytes::Bytes;
use hashbrown::HashMap;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Subscribers of one channel or pattern, by client id.
type Subscribers = HashMap<u64, Arc<ClientInfo>>;

/// The server-wide subscription registry.
#[derive(Default)]
pub(crate) struct PubSub {
    channels: RwLock<HashMap<Bytes, Subscribers>>,
    patterns: RwLock<HashMap<Bytes, Subscribers>>,
    shard_channels: RwLock<HashMap<Bytes, Subscribers>>,
    /// Clients in MONITOR mode, and their number (checked before building a line).
    monitors: RwLock<Subscribers>,
    monitor_count: AtomicUsize,
}

impl Kind {
    fn subscribe_word(self) -> &'static [u8] {
        match self {
            Kind::Channel => b"subscribe",
            Kind::Pattern => b"psubscribe",
            Kind::Shard => b"ssubscribe",
        }
    }

    fn unsubscribe_word(self) -> &'static [u8] {
        match self {
            Kind::Channel => b"unsubscribe",
            Kind::Pattern => b"punsubscribe",
            Kind::Shard => b"sunsubscribe",
        }
    }
}

/// A message encoded for each protocol on first need (RESP2 array, RESP3 push).
struct Encoded {
    items: Vec<Reply>,
    v2: Option<Bytes>,
    v3: Option<Bytes>,
}

impl Encoded {
    fn new(items: Vec<Reply>) -> Encoded {
        Encoded {
            items,
            v2: None,
            v3: None,
        }
    }

    fn get(&mut self, resp3: bool) -> Bytes {
        let (slot, resp) = if resp3 {
            (&mut self.v3, Resp::V3)
        } else {
            (&mut self.v2, Resp::V2)
        };
        slot.get_or_insert_with(|| {
            let mut out = Vec::new();
            Reply::Push(self.items.clone()).encode(resp, &mut out);
            Bytes::from(out)
        })
        .clone()
    }
}

fn bulk(b: &[u8]) -> Reply {
    Reply::Bulk(Bytes::copy_from_slice(b))
}

impl PubSub {
    fn map(&self, kind: Kind) -> &RwLock<HashMap<Bytes, Subscribers>> {
        match kind {
            Kind::Channel => &self.channels,
            Kind::Pattern => &self.patterns,
            Kind::Shard => &self.shard_channels,
        }
    }

    /// Call `f` for every subscription of every client: its kind, the channel or pattern,
    /// the subscriber (ACL SETUSER looks for subscriptions a user lost access to).
    pub(crate) fn for_each_subscription(&self, mut f: impl FnMut(Kind, &Bytes, &Arc<ClientInfo>)) {
        for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
            for (name, subscribers) in self.map(kind).read().iter() {
                for info in subscribers.values() {
                    f(kind, name, info);
                }
            }
        }
    }

    /// Subscribe `info` to `names`; the confirmations (one push each) are appended to `out`
    /// encoded for `resp`.
    pub(crate) fn subscribe(
        &self,
        info: &Arc<ClientInfo>,
        subs: &mut Subscriptions,
        kind: Kind,
        names: &[Bytes],
        resp: Resp,
        out: &mut Vec<u8>,
    ) {
        for name in names {
            // A copy: the argument is a slice of the connection's read buffer, and keeping it
            // for the subscription's life would keep that whole buffer allocated.
            let name = &Bytes::copy_from_slice(name);
            let added = match kind {
                Kind::Channel => subs.channels.insert(name.clone()),
                Kind::Shard => subs.shard.insert(name.clone()),
                Kind::Pattern => {
                    if subs.patterns.contains(name) {
                        false
                    } else {
                        subs.patterns.push(name.clone());
                        true
                    }
                }
            };
            if added {
                self.map(kind)
                    .write()
                    .entry(name.clone())
                    .or_default()
                    .insert(info.id, info.clone());
            }
            Reply::Push(vec![
                bulk(kind.subscribe_word()),
                Reply::Bulk(name.clone()),
                Reply::Int(subs.count_for(kind) as i64),
            ])
            .encode(resp, out);
        }
        update_counts(info, subs);
    }

    /// Unsubscribe from `names` (all of this kind when empty); confirmations appended to `out`
    /// (none when `out` is None: the client is going away).
    pub(crate) fn unsubscribe(
        &self,
        info: &ClientInfo,
        subs: &mut Subscriptions,
        kind: Kind,
        names: &[Bytes],
        resp: Resp,
        mut out: Option<&mut Vec<u8>>,
    ) {
        let all: Vec<Bytes>;
        let names = if names.is_empty() {
            all = match kind {
                Kind::Channel => subs.channels.iter().cloned().collect(),
                Kind::Shard => subs.shard.iter().cloned().collect(),
                Kind::Pattern => subs.patterns.clone(),
            };
            if all.is_empty() {
                // Always one confirmation, with a null name.
                if let Some(out) = out.as_deref_mut() {
                    Reply::Push(vec![
                        bulk(kind.unsubscribe_word()),
                        Reply::Null,
                        Reply::Int(subs.count_for(kind) as i64),
                    ])
                    .encode(resp, out);
                }
                return;
            }
            &all[..]
        } else {
            names
        };
        for name in names {
            let removed = match kind {
                Kind::Channel => subs.channels.remove(name),
                Kind::Shard => subs.shard.remove(name),
                Kind::Pattern => match subs.patterns.iter().position(|p| p == name) {
                    Some(i) => {
                        subs.patterns.remove(i);
                        true
                    }
                    None => false,
                },
            };
            if removed {
                let mut map = self.map(kind).write();
                if let Some(set) = map.get_mut(name) {
                    set.remove(&info.id);
                    if set.is_empty() {
                        map.remove(name);
                    }
                }
            }
            if let Some(out) = out.as_deref_mut() {
                Reply::Push(vec![
                    bulk(kind.unsubscribe_word()),
                    Reply::Bulk(name.clone()),
                    Reply::Int(subs.count_for(kind) as i64),
                ])
                .encode(resp, out);
            }
        }
        update_counts(info, subs);
    }

    /// Drop every subscription of a client that is going away (or RESET).
    pub(crate) fn unsubscribe_all(&self, info: &ClientInfo, subs: &mut Subscriptions) {
        for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
            if subs.count_of(kind) > 0 {
                self.unsubscribe(info, subs, kind, &[], Resp::V2, None);
            }
        }
    }

    /// Deliver `message` on `channel` (a shard channel when `shard`); returns the number of
    /// receivers (pattern matches count once per matching pattern, as in Redis).
    pub(crate) fn publish(
        &self,
        channel: &[u8],
        message: &[u8],
        shard: bool,
        limit: ObufLimit,
        now_ms: i64,
    ) -> usize {
        let mut receivers = 0;
        let map = if shard {
            &self.shard_channels
        } else {
            &self.channels
        };
        {
            let chans = map.read();
            if let Some(set) = chans.get(channel) {
                let word: &[u8] = if shard { b"smessage" } else { b"message" };
                let mut enc = Encoded::new(vec![bulk(word), bulk(channel), bulk(message)]);
                for info in set.values() {
                    deliver(info, &mut enc, limit, now_ms);
                    receivers += 1;
                }
            }
        }
        if shard {
            return receivers;
        }
        let pats = self.patterns.read();
        for (pat, set) in pats.iter() {
            if !glob_match(pat, channel, false) {
                continue;
            }
            let mut enc = Encoded::new(vec![
                bulk(b"pmessage"),
                Reply::Bulk(pat.clone()),
                bulk(channel),
                bulk(message),
            ]);
            for info in set.values() {
                deliver(info, &mut enc, limit, now_ms);
                receivers += 1;
            }
        }
        receivers
    }

    /// Drop every shard channel `in_lost_slot` says belongs to a slot this node's shard no
    /// longer serves (Redis's removeChannelsInSlot): each subscriber gets a sunsubscribe push
    /// with the shard subscriptions it has left, after the messages already queued for it,
    /// and its connection forgets the channel before its next command.
    pub(crate) fn drop_shard_channels(
        &self,
        in_lost_slot: impl Fn(&[u8]) -> bool,
        limit: ObufLimit,
        now_ms: i64,
    ) {
        let mut map = self.shard_channels.write();
        if map.is_empty() {
            return;
        }
        let lost: Vec<Bytes> = map.keys().filter(|c| in_lost_slot(c)).cloned().collect();
        for channel in lost {
            let Some(subscribers) = map.remove(&channel) else {
                continue;
            };
            for info in subscribers.values() {
                let left = &info.push.counts[2];
                let count = left.load(Ordering::Relaxed).saturating_sub(1);
                left.store(count, Ordering::Relaxed);
                info.note_dropped_shard_channel(channel.clone());
                let mut enc = Encoded::new(vec![
                    bulk(Kind::Shard.unsubscribe_word()),
                    Reply::Bulk(channel.clone()),
                    Reply::Int(count as i64),
                ]);
                deliver(info, &mut enc, limit, now_ms);
            }
        }
    }

    /// Forget the shard channels the server dropped from this client (see
    /// [`PubSub::drop_shard_channels`]); the registry no longer has them.
    pub(crate) fn forget_dropped(info: &ClientInfo, subs: &mut Subscriptions) {
        for channel in info.take_dropped_shard_channels() {
            subs.shard.remove(&channel);
        }
    }

    /// Channels (of `kind` Channel or Shard) with subscribers, matching `pattern` if given.
    pub(crate) fn active(&self, kind: Kind, pattern: Option<&[u8]>) -> Vec<Bytes> {
        self.map(kind)
            .read()
            .keys()
            .filter(|c| pattern.is_none_or(|p| glob_match(p, c, false)))
            .cloned()
            .collect()
    }

    /// Subscribers of one channel (exact subscriptions only).
    pub(crate) fn subscriber_count(&self, kind: Kind, channel: &[u8]) -> usize {
        self.map(kind).read().get(channel).map_or(0, |s| s.len())
    }

    /// Number of channels (or distinct patterns) with subscribers (INFO, PUBSUB NUMPAT).
    pub(crate) fn len(&self, kind: Kind) -> usize {
        self.map(kind).read().len()
    }
}

/// Who ran a command, as a MONITOR line names it.
pub(crate) enum MonitorSource<'a> {
    Client(&'a str),
    Lua,
}

impl PubSub {
    /// Put `info` in MONITOR mode. False if it already was.
    pub(crate) fn add_monitor(&self, info: &Arc<ClientInfo>) -> bool {
        if info.push.monitor.swap(true, Ordering::Relaxed) {
            return false;
        }
        self.monitors.write().insert(info.id, info.clone());
        self.monitor_count.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Leave MONITOR mode (RESET, disconnection).
    pub(crate) fn remove_monitor(&self, info: &ClientInfo) {
        if info.push.monitor.swap(false, Ordering::Relaxed)
            && self.monitors.write().remove(&info.id).is_some()
        {
            self.monitor_count.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// True when some client is in MONITOR mode.
    #[inline]
    pub(crate) fn has_monitors(&self) -> bool {
        self.monitor_count.load(Ordering::Relaxed) > 0
    }

    /// Send a command to every MONITOR client, in Redis's line format, with AUTH and HELLO
    /// credentials redacted.
    pub(crate) fn feed_monitors(
        &self,
        source: MonitorSource,
        db: usize,
        args: &[Bytes],
        limit: ObufLimit,
    ) {
        if !self.has_monitors() {
            return;
        }
        let line = Bytes::from(monitor_line(source, db, args, std::time::SystemTime::now()));
        let now_ms = crate::clock::unix_ms();
        for info in self.monitors.read().values() {
            if !info.push.push(line.clone(), limit, now_ms) {
                info.kill();
            }
            info.record_memory();
        }
    }
}

/// One MONITOR line: `+<sec>.<usec> [<db> <addr>] "arg" ...`.
fn monitor_line(
    source: MonitorSource,
    db: usize,
    args: &[Bytes],
    at: std::time::SystemTime,
) -> Vec<u8> {
    let t = at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut out = format!("+{}.{:06} ", t.as_secs(), t.subsec_micros()).into_bytes();
    match source {
        MonitorSource::Client(addr) => out.extend_from_slice(format!("[{db} {addr}] ").as_bytes()),
        MonitorSource::Lua => out.extend_from_slice(format!("[{db} lua] ").as_bytes()),
    }
    let redacted = crate::util::redact::secret_positions(args);
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        if redacted.contains(&i) {
            crate::util::sds_repr(b"(redacted)", &mut out);
        } else {
            crate::util::sds_repr(a, &mut out);
        }
    }
    out.extend_from_slice(b"\r\n");
    out
}

impl Subscriptions {
    fn count_of(&self, kind: Kind) -> usize {
        match kind {
            Kind::Channel => self.channels.len(),
            Kind::Pattern => self.patterns.len(),
            Kind::Shard => self.shard.len(),
        }
    }
}

fn update_counts(info: &ClientInfo, subs: &Subscriptions) {
    for (i, kind) in [Kind::Channel, Kind::Pattern, Kind::Shard]
        .into_iter()
        .enumerate()
    {
        info.push.counts[i].store(subs.count_of(kind), Ordering::Relaxed);
    }
}

fn deliver(info: &ClientInfo, enc: &mut Encoded, limit: ObufLimit, now_ms: i64) {
    let resp3 = info.resp.load(Ordering::Relaxed) == 3;
    if !info.push.push(enc.get(resp3), limit, now_ms) {
        tracing::warn!(
            "Client id={} addr={} scheduled to be closed ASAP for overcoming of output buffer limits.",
            info.id,
            info.addr
        );
        info.kill();
    }
    info.record_memory();
}

/// Redis's error for a command a RESP2 client in subscriber mode may not run, if `name` is
/// one of those.
pub(crate) fn subscriber_mode_refusal(name: &str) -> Option<String> {
    match name {
        "ping" | "subscribe" | "ssubscribe" | "unsubscribe" | "sunsubscribe" | "psubscribe"
        | "punsubscribe" | "quit" | "reset" => None,
        _ => Some(format!(
            "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Mailbox;

    fn limit(hard: u64, soft: u64, soft_secs: u64) -> ObufLimit {
        ObufLimit {
            hard,
            soft,
            soft_secs,
        }
    }

    #[test]
    fn mailbox_keeps_order_and_accounts_bytes() {
        let m = Mailbox::default();
        assert!(m.push(Bytes::from_static(b"one"), limit(0, 0, 0), 0));
        assert!(m.push(Bytes::from_static(b"two"), limit(0, 0, 0), 0));
        assert_eq!(m.used(), 6);
        let mut out = Vec::new();
        m.drain_into(&mut out);
        assert_eq!(out, b"onetwo");
        assert_eq!(m.used(), 6, "in flight until written");
        m.sent();
        assert_eq!(m.used(), 0);
        assert!(!m.has_pending());
    }

    #[test]
    fn hard_limit_overflows() {
        let m = Mailbox::default();
        assert!(m.push(Bytes::from(vec![0u8; 60]), limit(100, 0, 0), 0));
        assert!(!m.push(Bytes::from(vec![0u8; 60]), limit(100, 0, 0), 0));
        assert_eq!(m.used(), 0, "the queue is dropped");
        assert!(!m.push(Bytes::from_static(b"x"), limit(100, 0, 0), 0));
    }

    #[test]
    fn the_cron_sees_a_soft_limit_run_out_without_traffic() {
        let m = Mailbox::default();
        let l = limit(0, 100, 2);
        assert!(m.push(Bytes::from(vec![0u8; 150]), l, 1_000));
        assert!(!m.soft_limit_expired(l, 2_000));
        assert!(m.soft_limit_expired(l, 3_000));
    }

    #[test]
    fn soft_limit_needs_its_seconds() {
        let m = Mailbox::default();
        let l = limit(0, 10, 2);
        assert!(m.push(Bytes::from(vec![0u8; 20]), l, 1_000));
        assert!(m.push(Bytes::from_static(b"x"), l, 2_500));
        assert!(!m.push(Bytes::from_static(b"x"), l, 3_000));
        // Dropping under the soft limit resets its clock.
        let m = Mailbox::default();
        assert!(m.push(Bytes::from(vec![0u8; 20]), l, 1_000));
        let mut out = Vec::new();
        m.drain_into(&mut out);
        m.sent();
        assert!(m.push(Bytes::from_static(b"x"), l, 5_000));
        assert!(m.push(Bytes::from_static(b"y"), l, 5_500), "still accepted");
    }

    #[test]
    fn encoded_once_per_protocol() {
        let mut e = Encoded::new(vec![bulk(b"message"), bulk(b"c"), bulk(b"m")]);
        assert_eq!(
            &e.get(false)[..],
            b"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n"
        );
        assert_eq!(
            &e.get(true)[..],
            b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n"
        );
    }

    #[test]
    fn monitor_line_as_redis_writes_it() {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_700_000_000_123_456);
        let args = [
            Bytes::from_static(b"set"),
            Bytes::from_static(b"k\"\\"),
            Bytes::from_static(b"a b\n\x01\xff"),
        ];
        let line = monitor_line(MonitorSource::Client("127.0.0.1:5000"), 9, &args, at);
        assert_eq!(
            String::from_utf8(line).unwrap(),
            "+1700000000.123456 [9 127.0.0.1:5000] \"set\" \"k\\\"\\\\\" \"a b\\n\\x01\\xff\"\r\n"
        );
        let auth = [
            Bytes::from_static(b"AUTH"),
            Bytes::from_static(b"u"),
            Bytes::from_static(b"p"),
        ];
        let line = monitor_line(MonitorSource::Lua, 0, &auth, at);
        assert!(String::from_utf8(line)
            .unwrap()
            .ends_with("[0 lua] \"AUTH\" \"(redacted)\" \"(redacted)\"\r\n"));
        let hello = [
            Bytes::from_static(b"hello"),
            Bytes::from_static(b"2"),
            Bytes::from_static(b"AUTH"),
            Bytes::from_static(b"u"),
            Bytes::from_static(b"p"),
        ];
        assert_eq!(crate::util::redact::secret_positions(&hello), vec![3, 4]);
    }

    #[test]
    fn subscriber_mode_allows_only_redis_list() {
        assert!(subscriber_mode_refusal("ping").is_none());
        assert!(subscriber_mode_refusal("reset").is_none());
        assert_eq!(
            subscriber_mode_refusal("get").as_deref(),
            Some("ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")
        );
    }
}
