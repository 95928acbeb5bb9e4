//! The cluster bus's wire format: Redis 7.0's binary message, byte for byte.
//!
//! Every message starts with a 2,256-byte header: the signature "RCmb", the total length,
//! the protocol version (1), the sender's client port, the message type, a count (gossip
//! entries), the sender's current and config epochs and replication offset, its name (40 hex
//! characters), the bitmap of the slots its shard serves, its master's name (zeros for a
//! master), its announced IP (46 bytes, NUL padded), the number of ping extensions, 30
//! reserved bytes, its plaintext and bus ports, its node flags, the cluster state as it sees
//! it and three message-flag bytes. Integers are big-endian. After the header comes the body
//! of the type: gossip entries (104 bytes each) and extensions for PING/PONG/MEET, a node
//! name for FAIL, channel and message for PUBLISH, an epoch, name and slot bitmap for UPDATE.
//! Redis 7.0's only ping extension is the hostname (type 0): an 8-byte header (length, type,
//! padding) and the NUL-terminated name padded to a multiple of 8.
//!
//! [`Header`] and [`Body`] are the decoded forms; [`encode`] writes them and [`decode`] checks
//! a received message's length against its type as Redis does before reading anything else.

use crate::keyspace::slots::SLOTS;

pub const NAME_LEN: usize = 40;
pub const IP_LEN: usize = 46;
pub const SLOT_BYTES: usize = SLOTS / 8;
/// The header's size (Redis's CLUSTERMSG_MIN_LEN): where a message's body starts.
pub const HEADER_LEN: usize = 2256;
pub const GOSSIP_LEN: usize = 104;
pub const PROTO_VER: u16 = 1;

pub const PING: u16 = 0;
pub const PONG: u16 = 1;
pub const MEET: u16 = 2;
pub const FAIL: u16 = 3;
pub const PUBLISH: u16 = 4;
pub const FAILOVER_AUTH_REQUEST: u16 = 5;
pub const FAILOVER_AUTH_ACK: u16 = 6;
pub const UPDATE: u16 = 7;
pub const MFSTART: u16 = 8;
pub const MODULE: u16 = 9;
pub const PUBLISHSHARD: u16 = 10;
/// Number of message types (the statistics' size).
pub const TYPES: usize = 11;

/// mflags[0]: the message carries ping extensions.
pub const MFLAG_EXT_DATA: u8 = 4;
/// mflags[0]: a master paused for a manual failover; its offset is final.
pub const MFLAG_PAUSED: u8 = 1;
/// mflags[0]: a manual failover's vote request, which masters answer though the master
/// is up.
pub const MFLAG_FORCEACK: u8 = 2;

const EXT_HOSTNAME: u16 = 0;

pub type Name = [u8; NAME_LEN];
pub type SlotBitmap = [u8; SLOT_BYTES];

/// The name of message type `t`, as CLUSTER INFO's statistics spell it.
pub fn type_name(t: usize) -> &'static str {
    match t as u16 {
        PING => "ping",
        PONG => "pong",
        MEET => "meet",
        FAIL => "fail",
        PUBLISH => "publish",
        PUBLISHSHARD => "publishshard",
        FAILOVER_AUTH_REQUEST => "auth-req",
        FAILOVER_AUTH_ACK => "auth-ack",
        UPDATE => "update",
        MFSTART => "mfstart",
        MODULE => "module",
        _ => "unknown",
    }
}

/// A message's header, decoded.
#[derive(Clone)]
pub struct Header {
    pub kind: u16,
    pub port: u16,
    pub current_epoch: u64,
    pub config_epoch: u64,
    pub offset: u64,
    pub sender: Name,
    pub myslots: Box<SlotBitmap>,
    /// All zeros for a master.
    pub slaveof: Name,
    /// The sender's announced IP, empty when it announces none.
    pub myip: String,
    pub pport: u16,
    pub cport: u16,
    pub flags: u16,
    pub state: u8,
    pub mflags: [u8; 3],
}

/// One gossip entry of a PING, PONG or MEET.
#[derive(Clone, Debug, PartialEq)]
pub struct Gossip {
    pub name: Name,
    /// Seconds (Unix time) of the last ping sent / pong received, as the sender saw them.
    pub ping_sent: u32,
    pub pong_received: u32,
    pub ip: String,
    pub port: u16,
    pub cport: u16,
    pub flags: u16,
    pub pport: u16,
}

/// A message's body, by type.
pub enum Body {
    Ping {
        gossip: Vec<Gossip>,
        /// The hostname extension's value, if the sender sent one.
        hostname: Option<String>,
    },
    Fail {
        about: Name,
    },
    Publish {
        channel: Vec<u8>,
        message: Vec<u8>,
    },
    Update {
        config_epoch: u64,
        name: Name,
        slots: Box<SlotBitmap>,
    },
    /// FAILOVER_AUTH_REQUEST, FAILOVER_AUTH_ACK and MFSTART carry only the header.
    Empty,
    /// A type Podium does not act on (MODULE), or unknown.
    Other,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(w)
}

/// A NUL-padded text field.
fn text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn put_text(out: &mut [u8], s: &str) {
    // Keep a terminating NUL, as Redis copies at most len-1 bytes.
    let n = s.len().min(out.len() - 1);
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// The total length a message announces in its first 8 bytes, if the signature is right.
pub fn announced_len(first8: &[u8; 8]) -> Option<u32> {
    (&first8[..4] == b"RCmb").then(|| be32(first8, 4))
}

/// Decode a whole message (`buf` is exactly the announced length). None when Redis would drop
/// it: a wrong version or a length that does not match its type.
pub fn decode(buf: &[u8]) -> Option<(Header, Body)> {
    if buf.len() < HEADER_LEN || be16(buf, 8) != PROTO_VER {
        return None;
    }
    let totlen = buf.len();
    let kind = be16(buf, 12);
    let count = be16(buf, 14) as usize;
    let extensions = be16(buf, 2214) as usize;
    let mut h = Header {
        kind,
        port: be16(buf, 10),
        current_epoch: be64(buf, 16),
        config_epoch: be64(buf, 24),
        offset: be64(buf, 32),
        sender: [0; NAME_LEN],
        myslots: Box::new([0; SLOT_BYTES]),
        slaveof: [0; NAME_LEN],
        myip: text(&buf[2168..2168 + IP_LEN]),
        pport: be16(buf, 2246),
        cport: be16(buf, 2248),
        flags: be16(buf, 2250),
        state: buf[2252],
        mflags: [buf[2253], buf[2254], buf[2255]],
    };
    h.sender.copy_from_slice(&buf[40..80]);
    h.myslots.copy_from_slice(&buf[80..80 + SLOT_BYTES]);
    h.slaveof.copy_from_slice(&buf[2128..2168]);
    let body = &buf[HEADER_LEN..];
    let body = match kind {
        PING | PONG | MEET => {
            let mut explen = HEADER_LEN + GOSSIP_LEN * count;
            if explen > totlen {
                return None;
            }
            let mut hostname = None;
            if h.mflags[0] & MFLAG_EXT_DATA != 0 {
                let mut at = explen;
                for _ in 0..extensions {
                    if at + 8 > totlen {
                        return None;
                    }
                    let len = be32(buf, at) as usize;
                    if !len.is_multiple_of(8) || len < 8 || totlen - explen < len {
                        return None;
                    }
                    if be16(buf, at + 4) == EXT_HOSTNAME {
                        hostname = Some(text(&buf[at + 8..at + len]));
                    }
                    explen += len;
                    at += len;
                }
            }
            if explen != totlen {
                return None;
            }
            let gossip = (0..count)
                .map(|i| {
                    let g = &body[i * GOSSIP_LEN..(i + 1) * GOSSIP_LEN];
                    let mut name = [0; NAME_LEN];
                    name.copy_from_slice(&g[..NAME_LEN]);
                    Gossip {
                        name,
                        ping_sent: be32(g, 40),
                        pong_received: be32(g, 44),
                        ip: text(&g[48..48 + IP_LEN]),
                        port: be16(g, 94),
                        cport: be16(g, 96),
                        flags: be16(g, 98),
                        pport: be16(g, 100),
                    }
                })
                .collect();
            Body::Ping { gossip, hostname }
        }
        FAIL => {
            if totlen != HEADER_LEN + NAME_LEN {
                return None;
            }
            let mut about = [0; NAME_LEN];
            about.copy_from_slice(&body[..NAME_LEN]);
            Body::Fail { about }
        }
        PUBLISH | PUBLISHSHARD => {
            if totlen < HEADER_LEN + 8 {
                return None;
            }
            let clen = be32(body, 0) as usize;
            let mlen = be32(body, 4) as usize;
            if (HEADER_LEN + 8).checked_add(clen)?.checked_add(mlen)? != totlen {
                return None;
            }
            Body::Publish {
                channel: body[8..8 + clen].to_vec(),
                message: body[8 + clen..8 + clen + mlen].to_vec(),
            }
        }
        FAILOVER_AUTH_REQUEST | FAILOVER_AUTH_ACK | MFSTART => {
            if totlen != HEADER_LEN {
                return None;
            }
            Body::Empty
        }
        UPDATE => {
            if totlen != HEADER_LEN + 8 + NAME_LEN + SLOT_BYTES {
                return None;
            }
            let mut name = [0; NAME_LEN];
            name.copy_from_slice(&body[8..8 + NAME_LEN]);
            let mut slots = Box::new([0u8; SLOT_BYTES]);
            slots.copy_from_slice(&body[8 + NAME_LEN..8 + NAME_LEN + SLOT_BYTES]);
            Body::Update {
                config_epoch: be64(body, 0),
                name,
                slots,
            }
        }
        MODULE => {
            if totlen < HEADER_LEN + 16 || HEADER_LEN + 13 + be32(body, 8) as usize != totlen {
                return None;
            }
            Body::Other
        }
        _ => Body::Other,
    };
    Some((h, body))
}

/// Encode a message of `h.kind` with `body`.
pub fn encode(h: &Header, body: &Body) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_LEN];
    out[..4].copy_from_slice(b"RCmb");
    out[8..10].copy_from_slice(&PROTO_VER.to_be_bytes());
    out[10..12].copy_from_slice(&h.port.to_be_bytes());
    out[12..14].copy_from_slice(&h.kind.to_be_bytes());
    out[16..24].copy_from_slice(&h.current_epoch.to_be_bytes());
    out[24..32].copy_from_slice(&h.config_epoch.to_be_bytes());
    out[32..40].copy_from_slice(&h.offset.to_be_bytes());
    out[40..80].copy_from_slice(&h.sender);
    out[80..80 + SLOT_BYTES].copy_from_slice(&h.myslots[..]);
    out[2128..2168].copy_from_slice(&h.slaveof);
    put_text(&mut out[2168..2168 + IP_LEN], &h.myip);
    out[2246..2248].copy_from_slice(&h.pport.to_be_bytes());
    out[2248..2250].copy_from_slice(&h.cport.to_be_bytes());
    out[2250..2252].copy_from_slice(&h.flags.to_be_bytes());
    out[2252] = h.state;
    out[2253..2256].copy_from_slice(&h.mflags);
    let mut count = 0u16;
    let mut extensions = 0u16;
    match body {
        Body::Ping { gossip, hostname } => {
            count = gossip.len() as u16;
            for g in gossip {
                let mut e = [0u8; GOSSIP_LEN];
                e[..NAME_LEN].copy_from_slice(&g.name);
                e[40..44].copy_from_slice(&g.ping_sent.to_be_bytes());
                e[44..48].copy_from_slice(&g.pong_received.to_be_bytes());
                put_text(&mut e[48..48 + IP_LEN], &g.ip);
                e[94..96].copy_from_slice(&g.port.to_be_bytes());
                e[96..98].copy_from_slice(&g.cport.to_be_bytes());
                e[98..100].copy_from_slice(&g.flags.to_be_bytes());
                e[100..102].copy_from_slice(&g.pport.to_be_bytes());
                out.extend_from_slice(&e);
            }
            if let Some(name) = hostname.as_ref().filter(|n| !n.is_empty()) {
                let padded = (name.len() + 1).div_ceil(8) * 8;
                let len = 8 + padded;
                out.extend_from_slice(&(len as u32).to_be_bytes());
                out.extend_from_slice(&EXT_HOSTNAME.to_be_bytes());
                out.extend_from_slice(&[0, 0]);
                out.extend_from_slice(name.as_bytes());
                out.resize(out.len() + padded - name.len(), 0);
                extensions = 1;
                out[2253] |= MFLAG_EXT_DATA;
            }
        }
        Body::Fail { about } => out.extend_from_slice(about),
        Body::Publish { channel, message } => {
            out.extend_from_slice(&(channel.len() as u32).to_be_bytes());
            out.extend_from_slice(&(message.len() as u32).to_be_bytes());
            out.extend_from_slice(channel);
            out.extend_from_slice(message);
        }
        Body::Update {
            config_epoch,
            name,
            slots,
        } => {
            out.extend_from_slice(&config_epoch.to_be_bytes());
            out.extend_from_slice(name);
            out.extend_from_slice(&slots[..]);
        }
        Body::Empty | Body::Other => {}
    }
    out[14..16].copy_from_slice(&count.to_be_bytes());
    out[2214..2216].copy_from_slice(&extensions.to_be_bytes());
    let total = out.len() as u32;
    out[4..8].copy_from_slice(&total.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: u16) -> Header {
        let mut slots = Box::new([0u8; SLOT_BYTES]);
        slots[0] = 0b101;
        Header {
            kind,
            port: 30001,
            current_epoch: 7,
            config_epoch: 3,
            offset: 1234,
            sender: [b'a'; NAME_LEN],
            myslots: slots,
            slaveof: [0; NAME_LEN],
            myip: "127.0.0.1".into(),
            pport: 0,
            cport: 40001,
            flags: 1,
            state: 0,
            mflags: [0; 3],
        }
    }

    #[test]
    fn fields_sit_at_redis_offsets() {
        let m = encode(&header(PING), &Body::Empty);
        assert_eq!(m.len(), HEADER_LEN);
        assert_eq!(&m[..4], b"RCmb");
        assert_eq!(be32(&m, 4), HEADER_LEN as u32);
        assert_eq!(be16(&m, 8), 1);
        assert_eq!(be16(&m, 10), 30001);
        assert_eq!(be64(&m, 16), 7);
        assert_eq!(be64(&m, 24), 3);
        assert_eq!(be64(&m, 32), 1234);
        assert_eq!(m[40], b'a');
        assert_eq!(m[80], 0b101);
        assert_eq!(&m[2168..2177], b"127.0.0.1");
        assert_eq!(be16(&m, 2248), 40001);
        assert_eq!(be16(&m, 2250), 1);
    }

    #[test]
    fn ping_with_gossip_and_hostname_round_trips() {
        let g = Gossip {
            name: [b'b'; NAME_LEN],
            ping_sent: 1,
            pong_received: 2,
            ip: "10.0.0.1".into(),
            port: 7000,
            cport: 17000,
            flags: 2,
            pport: 0,
        };
        let m = encode(
            &header(PONG),
            &Body::Ping {
                gossip: vec![g.clone()],
                hostname: Some("host-1.com".into()),
            },
        );
        // 11 bytes with the NUL, padded to 16, plus the extension's 8-byte header.
        assert_eq!(m.len(), HEADER_LEN + GOSSIP_LEN + 24);
        let (h, body) = decode(&m).unwrap();
        assert_eq!(h.kind, PONG);
        assert_eq!(h.mflags[0] & MFLAG_EXT_DATA, MFLAG_EXT_DATA);
        match body {
            Body::Ping { gossip, hostname } => {
                assert_eq!(gossip, vec![g]);
                assert_eq!(hostname.as_deref(), Some("host-1.com"));
            }
            _ => panic!("not a ping body"),
        }
    }

    #[test]
    fn a_length_that_does_not_match_the_type_is_dropped() {
        let mut m = encode(&header(FAIL), &Body::Fail { about: [b'c'; 40] });
        assert!(decode(&m).is_some());
        m.push(0);
        assert!(decode(&m).is_none());
        let mut p = encode(
            &header(PUBLISH),
            &Body::Publish {
                channel: b"ch".to_vec(),
                message: b"hello".to_vec(),
            },
        );
        assert!(matches!(decode(&p), Some((_, Body::Publish { .. }))));
        // A channel length past the end.
        p[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode(&p).is_none());
        let mut ping = encode(&header(PING), &Body::Empty);
        ping[14..16].copy_from_slice(&5u16.to_be_bytes());
        assert!(decode(&ping).is_none());
    }
}
