//! Reply values and their RESP2/RESP3 encodings.
//!
//! Commands return a [`Reply`] without knowing the client's protocol; the connection renders
//! it with [`Reply::encode`]. Where RESP3 has a richer type (map, set, double, boolean, null,
//! verbatim string, push) RESP2 gets what Redis 7.0 sends in its place: flat arrays, bulk
//! strings, integers and `$-1`/`*-1`.

use crate::types::compact::CompactBytes;
use crate::util::numtext::{format_f64, format_i64};
use bytes::Bytes;

/// Protocol version spoken on a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resp {
    V2,
    V3,
}

/// A reply to one command.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// `+OK`
    Ok,
    /// A status line such as `+PONG` or `+QUEUED`.
    Status(&'static str),
    /// A status line built at run time (e.g. `TYPE`'s answer).
    StatusOwned(String),
    /// An error line; the text includes the code, e.g. `ERR syntax error`.
    Error(String),
    Int(i64),
    Bulk(Bytes),
    /// A short bulk string copied into the reply (see [`Reply::bulk_of`]).
    BulkShort(ShortBulk),
    /// RESP2 `$-1`, RESP3 `_`.
    Null,
    /// RESP2 `*-1`, RESP3 `_`.
    NullArray,
    Array(Vec<Reply>),
    /// RESP3 map; RESP2 flat array of alternating keys and values.
    Map(Vec<(Reply, Reply)>),
    /// RESP3 set; RESP2 array.
    Set(Vec<Reply>),
    /// RESP3 double; RESP2 bulk string formatted as `%.17g`.
    Double(f64),
    /// RESP3 boolean; RESP2 integer 1/0.
    Bool(bool),
    /// RESP3 verbatim string with a 3-letter format (`txt`); RESP2 bulk string.
    Verbatim(&'static str, Bytes),
    /// RESP3 push; RESP2 array.
    Push(Vec<Reply>),
    /// RESP3 big number (`(` and the digits); RESP2 bulk string of the same text.
    BigNumber(Bytes),
    /// A reply preceded by RESP3 attributes (`|`, then the pairs); RESP2 has no attributes,
    /// so only the reply itself is written.
    Attributed(Vec<(Reply, Reply)>, Box<Reply>),
    /// Member/score pairs as ZRANGE WITHSCORES replies them: RESP2 a flat array
    /// `member score member score`, RESP3 an array of `[member, double]` pairs.
    ScoredMembers(Vec<(Bytes, f64)>),
    /// Bytes already encoded; identical for both protocols.
    Raw(Bytes),
    /// Nothing is written (blocked clients, CLIENT REPLY OFF).
    NoReply,
}

/// Longest bulk string [`Reply::bulk_of`] copies inline.
pub const SHORT_BULK_MAX: usize = 38;

/// Up to [`SHORT_BULK_MAX`] bytes held inside the reply value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShortBulk {
    len: u8,
    buf: [u8; SHORT_BULK_MAX],
}

impl ShortBulk {
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }
}

impl Reply {
    /// A bulk reply of a stored value. Short values are copied into the reply instead of
    /// sharing the stored `Bytes`: cloning a `Bytes` writes its reference count (and the first
    /// clone of a vector-backed one allocates a shared header), a store into the stored value's
    /// cache line that GET of a large keyspace would otherwise pay for every time.
    #[inline]
    pub fn bulk_of(b: &CompactBytes) -> Reply {
        if b.len() <= SHORT_BULK_MAX {
            let mut buf = [0u8; SHORT_BULK_MAX];
            buf[..b.len()].copy_from_slice(b);
            Reply::BulkShort(ShortBulk {
                len: b.len() as u8,
                buf,
            })
        } else {
            Reply::Bulk(b.to_bytes())
        }
    }

    pub fn error(msg: impl Into<String>) -> Reply {
        Reply::Error(msg.into())
    }

    pub fn bulk(b: impl Into<Bytes>) -> Reply {
        Reply::Bulk(b.into())
    }

    pub fn bulk_slice(b: &[u8]) -> Reply {
        Reply::Bulk(Bytes::copy_from_slice(b))
    }

    pub fn is_error(&self) -> bool {
        match self {
            Reply::Error(_) => true,
            // A pre-encoded error line (an error text that is not UTF-8).
            Reply::Raw(b) => b.first() == Some(&b'-'),
            _ => false,
        }
    }

    /// Append the wire form of this reply for protocol `resp` to `out`.
    pub fn encode(&self, resp: Resp, out: &mut Vec<u8>) {
        match self {
            Reply::Ok => out.extend_from_slice(b"+OK\r\n"),
            Reply::Status(s) => line(out, b'+', s.as_bytes()),
            Reply::StatusOwned(s) => line(out, b'+', s.as_bytes()),
            Reply::Error(e) => {
                // Error texts must stay on one line.
                out.push(b'-');
                out.extend(
                    e.bytes()
                        .map(|c| if c == b'\r' || c == b'\n' { b' ' } else { c }),
                );
                out.extend_from_slice(b"\r\n");
            }
            Reply::Int(i) => {
                out.push(b':');
                format_i64(*i, out);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Bulk(b) => bulk(out, b),
            Reply::BulkShort(b) => bulk(out, b.as_bytes()),
            Reply::Null => match resp {
                Resp::V2 => out.extend_from_slice(b"$-1\r\n"),
                Resp::V3 => out.extend_from_slice(b"_\r\n"),
            },
            Reply::NullArray => match resp {
                Resp::V2 => out.extend_from_slice(b"*-1\r\n"),
                Resp::V3 => out.extend_from_slice(b"_\r\n"),
            },
            Reply::Array(items) => {
                header(out, b'*', items.len());
                for r in items {
                    r.encode(resp, out);
                }
            }
            Reply::Set(items) => {
                header(out, if resp == Resp::V3 { b'~' } else { b'*' }, items.len());
                for r in items {
                    r.encode(resp, out);
                }
            }
            Reply::Push(items) => {
                header(out, if resp == Resp::V3 { b'>' } else { b'*' }, items.len());
                for r in items {
                    r.encode(resp, out);
                }
            }
            Reply::Map(pairs) => {
                match resp {
                    Resp::V3 => header(out, b'%', pairs.len()),
                    Resp::V2 => header(out, b'*', pairs.len() * 2),
                }
                for (k, v) in pairs {
                    k.encode(resp, out);
                    v.encode(resp, out);
                }
            }
            Reply::Double(d) => encode_double(*d, resp, out),
            Reply::Bool(b) => match resp {
                Resp::V3 => out.extend_from_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
                Resp::V2 => out.extend_from_slice(if *b { b":1\r\n" } else { b":0\r\n" }),
            },
            Reply::Verbatim(fmt, text) => match resp {
                Resp::V3 => {
                    header(out, b'=', text.len() + 4);
                    out.extend_from_slice(fmt.as_bytes());
                    out.push(b':');
                    out.extend_from_slice(text);
                    out.extend_from_slice(b"\r\n");
                }
                Resp::V2 => bulk(out, text),
            },
            Reply::ScoredMembers(items) => encode_scored(
                items.iter().map(|(m, s)| (&m[..], *s)),
                items.len(),
                resp,
                out,
            ),
            Reply::BigNumber(digits) => match resp {
                Resp::V3 => line(out, b'(', digits),
                Resp::V2 => bulk(out, digits),
            },
            Reply::Attributed(attributes, reply) => {
                if resp == Resp::V3 {
                    header(out, b'|', attributes.len());
                    for (k, v) in attributes {
                        k.encode(resp, out);
                        v.encode(resp, out);
                    }
                }
                reply.encode(resp, out);
            }
            Reply::Raw(b) => out.extend_from_slice(b),
            Reply::NoReply => {}
        }
    }

    /// Convenience for tests and one-off encodings.
    pub fn to_bytes(&self, resp: Resp) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(resp, &mut v);
        v
    }
}

fn line(out: &mut Vec<u8>, tag: u8, s: &[u8]) {
    out.push(tag);
    out.extend_from_slice(s);
    out.extend_from_slice(b"\r\n");
}

fn header(out: &mut Vec<u8>, tag: u8, n: usize) {
    out.push(tag);
    format_i64(n as i64, out);
    out.extend_from_slice(b"\r\n");
}

/// Append a bulk string.
pub fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    header(out, b'$', b.len());
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// Append a double as Redis 7.0 does: RESP3 `,%.17g`, RESP2 a bulk string of the same text.
pub fn encode_double(d: f64, resp: Resp, out: &mut Vec<u8>) {
    match resp {
        Resp::V3 => {
            out.push(b',');
            format_f64(d, out);
            out.extend_from_slice(b"\r\n");
        }
        Resp::V2 => {
            // Format in place, then put the length header in front of the text.
            let start = out.len();
            format_f64(d, out);
            let len = out.len() - start;
            let mut header = [0u8; 8];
            header[0] = b'$';
            let mut n = 1;
            if len >= 10 {
                header[n] = b'0' + (len / 10) as u8;
                n += 1;
            }
            header[n] = b'0' + (len % 10) as u8;
            header[n + 1] = b'\r';
            header[n + 2] = b'\n';
            out.splice(start..start, header[..n + 3].iter().copied());
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// Append member/score pairs: RESP2 flat, RESP3 nested pairs.
pub fn encode_scored<'a>(
    items: impl Iterator<Item = (&'a [u8], f64)>,
    n: usize,
    resp: Resp,
    out: &mut Vec<u8>,
) {
    match resp {
        Resp::V2 => header(out, b'*', n * 2),
        Resp::V3 => header(out, b'*', n),
    }
    for (m, s) in items {
        if resp == Resp::V3 {
            out.extend_from_slice(b"*2\r\n");
        }
        bulk(out, m);
        encode_double(s, resp, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(r: Reply) -> (String, String) {
        (
            String::from_utf8(r.to_bytes(Resp::V2)).unwrap(),
            String::from_utf8(r.to_bytes(Resp::V3)).unwrap(),
        )
    }

    #[test]
    fn scalars() {
        assert_eq!(both(Reply::Ok).0, "+OK\r\n");
        assert_eq!(both(Reply::Int(-3)).0, ":-3\r\n");
        assert_eq!(both(Reply::Null), ("$-1\r\n".into(), "_\r\n".into()));
        assert_eq!(both(Reply::NullArray), ("*-1\r\n".into(), "_\r\n".into()));
        assert_eq!(both(Reply::Bool(true)), (":1\r\n".into(), "#t\r\n".into()));
        assert_eq!(
            both(Reply::Double(1.5)),
            ("$3\r\n1.5\r\n".into(), ",1.5\r\n".into())
        );
        assert_eq!(both(Reply::Double(f64::INFINITY)).1, ",inf\r\n");
        assert_eq!(both(Reply::error("ERR x\r\ny")).0, "-ERR x  y\r\n");
    }

    #[test]
    fn aggregates() {
        let m = Reply::Map(vec![(Reply::bulk_slice(b"a"), Reply::Int(1))]);
        assert_eq!(
            both(m),
            (
                "*2\r\n$1\r\na\r\n:1\r\n".into(),
                "%1\r\n$1\r\na\r\n:1\r\n".into()
            )
        );
        let s = Reply::ScoredMembers(vec![(Bytes::from_static(b"m"), 2.0)]);
        assert_eq!(
            both(s),
            (
                "*2\r\n$1\r\nm\r\n$1\r\n2\r\n".into(),
                "*1\r\n*2\r\n$1\r\nm\r\n,2\r\n".into()
            )
        );
        let v = Reply::Verbatim("txt", Bytes::from_static(b"hi"));
        assert_eq!(both(v), ("$2\r\nhi\r\n".into(), "=6\r\ntxt:hi\r\n".into()));
        let big = Reply::BigNumber(Bytes::from_static(b"12345678901234567890"));
        assert_eq!(
            both(big),
            (
                "$20\r\n12345678901234567890\r\n".into(),
                "(12345678901234567890\r\n".into()
            )
        );
        let attributed = Reply::Attributed(
            vec![(Reply::bulk_slice(b"k"), Reply::Int(9))],
            Box::new(Reply::bulk_slice(b"v")),
        );
        assert_eq!(
            both(attributed),
            (
                "$1\r\nv\r\n".into(),
                "|1\r\n$1\r\nk\r\n:9\r\n$1\r\nv\r\n".into()
            )
        );
    }
}
