//! RESP wire format: parsing client requests and encoding replies.
//!
//! Requests arrive either as RESP multibulk arrays (`*N\r\n$len\r\narg\r\n...`, what every client
//! library sends) or as inline commands (a line of space-separated words, what a person types in
//! telnet). [`parse_request`] takes one complete request off the front of the connection's read
//! buffer, or reports that more bytes are needed, or reports a protocol error with the exact
//! text Redis 7.0 sends before it closes the connection. Replies are built as [`Reply`] values by
//! the commands and rendered for the connection's protocol version (RESP2 or RESP3) by
//! [`Reply::encode`].
//!
//! Why not the `redis-protocol` crate for requests: Redis's request grammar differs from a
//! general RESP frame decoder (inline commands with quoting rules, the 64 KiB limits on header
//! lines, `*-1`/`*0` being skipped, exact error texts, `proto-max-bulk-len`), and the hot path
//! wants to split arguments out of the read buffer without copying.

pub mod reply;

pub use reply::{Reply, Resp};

use bytes::{Bytes, BytesMut};

/// Longest header or inline line Redis accepts before the terminating newline arrives.
pub const INLINE_MAX: usize = 64 * 1024;

/// Limits that apply while parsing a request.
#[derive(Clone, Copy, Debug)]
pub struct ParseLimits {
    /// `proto-max-bulk-len`: largest single argument.
    pub max_bulk_len: i64,
    /// False until the client authenticated when `requirepass` is set: Redis then refuses
    /// big headers to keep unauthenticated clients from making it allocate.
    pub authenticated: bool,
}

impl Default for ParseLimits {
    fn default() -> Self {
        ParseLimits {
            max_bulk_len: 512 * 1024 * 1024,
            authenticated: true,
        }
    }
}

/// Outcome of trying to take one request off the buffer.
#[derive(Debug, PartialEq)]
pub enum Parsed {
    /// A complete request with at least one argument.
    Command(Vec<Bytes>),
    /// Bytes were consumed but they held no command (empty line, `*0`, `*-1`).
    Empty,
    /// The buffer holds only part of a request.
    Incomplete,
}

/// A protocol violation: the text after `-ERR ` that Redis replies before closing.
#[derive(Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while let Some(off) = buf[i..].iter().position(|&b| b == b'\r') {
        let pos = i + off;
        if pos + 1 >= buf.len() {
            return None;
        }
        if buf[pos + 1] == b'\n' {
            return Some(pos);
        }
        i = pos + 1;
    }
    None
}

/// A header number of one or two digits ending in CRLF at `data[at..]`, the usual bulk
/// length and argument count: (value, position of the CR). None for anything else, which
/// [`find_crlf`] and [`parse_header_int`] then judge (so they give every error). Saves the
/// scan and the general conversion on each argument of a short request.
#[inline]
fn small_header(data: &[u8], at: usize) -> Option<(i64, usize)> {
    let d0 = data.get(at)?.wrapping_sub(b'0');
    if d0 > 9 {
        return None;
    }
    match data.get(at + 1..at + 3)? {
        [b'\r', b'\n'] => Some((i64::from(d0), at + 1)),
        [d1, b'\r'] if d0 != 0 && d1.is_ascii_digit() && data.get(at + 3) == Some(&b'\n') => {
            Some((i64::from(d0 * 10 + (d1 - b'0')), at + 2))
        }
        _ => None,
    }
}

/// Parse a decimal header number as Redis's `string2ll` would (no sign other than '-', no spaces).
fn parse_header_int(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let (neg, digits) = if s[0] == b'-' {
        (true, &s[1..])
    } else {
        (false, s)
    };
    if digits.is_empty() || (digits.len() > 1 && digits[0] == b'0') {
        return None;
    }
    let mut v: i64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(i64::from(c - b'0'))?;
    }
    Some(if neg { -v } else { v })
}

/// How far a multibulk request at the front of the buffer was parsed before its end arrived,
/// so the next attempt resumes there: a request arriving in many small reads costs time in
/// proportion to its size, not to its size times the number of reads.
#[derive(Default, Debug)]
pub struct Partial {
    /// Arguments announced by the header; 0 when nothing is in progress.
    count: usize,
    /// Where the next argument's `$` header starts.
    pos: usize,
    /// Positions of the arguments already complete.
    spans: Vec<(usize, usize)>,
}

/// Take one request off the front of `buf`.
pub fn parse_request(buf: &mut BytesMut, limits: &ParseLimits) -> Result<Parsed, ProtocolError> {
    parse_request_resuming(buf, limits, &mut Partial::default())
}

/// [`parse_request`] that resumes a multibulk request where `partial` left it (the buffer's
/// front must not have changed since) and records its progress when it is still incomplete.
pub fn parse_request_resuming(
    buf: &mut BytesMut,
    limits: &ParseLimits,
    partial: &mut Partial,
) -> Result<Parsed, ProtocolError> {
    if buf.is_empty() {
        return Ok(Parsed::Incomplete);
    }
    let r = if buf[0] == b'*' {
        parse_multibulk(buf, limits, partial)
    } else {
        parse_inline(buf)
    };
    if !matches!(r, Ok(Parsed::Incomplete)) {
        *partial = Partial::default();
    }
    r
}

fn parse_multibulk(
    buf: &mut BytesMut,
    limits: &ParseLimits,
    partial: &mut Partial,
) -> Result<Parsed, ProtocolError> {
    let data = &buf[..];
    if partial.count > 0 {
        return parse_arguments(buf, limits, partial);
    }
    let (count, eol) = match small_header(data, 1) {
        Some(found) => found,
        None => {
            let Some(eol) = find_crlf(data, 1) else {
                if data.len() > INLINE_MAX {
                    return Err(ProtocolError(
                        "Protocol error: too big mbulk count string".into(),
                    ));
                }
                return Ok(Parsed::Incomplete);
            };
            match parse_header_int(&data[1..eol]) {
                Some(n) if n <= i64::from(i32::MAX) => (n, eol),
                _ => {
                    return Err(ProtocolError(
                        "Protocol error: invalid multibulk length".into(),
                    ))
                }
            }
        }
    };
    if !limits.authenticated && count > 10 {
        return Err(ProtocolError(
            "Protocol error: unauthenticated multibulk length".into(),
        ));
    }
    let pos = eol + 2;
    if count <= 0 {
        let _ = buf.split_to(pos);
        return Ok(Parsed::Empty);
    }
    let count = count as usize;
    if count > 8 {
        // Long requests keep their progress (short ones are parsed again: cheaper than saving).
        *partial = Partial {
            count,
            pos,
            spans: Vec::with_capacity(count.min(1024)),
        };
        return parse_arguments(buf, limits, partial);
    }
    let mut pos = pos;
    // Record argument positions first; only split the buffer once the whole request is there.
    // Short commands (the common case) keep their positions on the stack.
    let mut inline_spans = [(0usize, 0usize); 8];
    for span in inline_spans.iter_mut().take(count) {
        let Some((start, end)) = bulk_at(data, pos, limits)? else {
            return Ok(Parsed::Incomplete);
        };
        *span = (start, end);
        pos = end + 2;
    }
    let frame = buf.split_to(pos).freeze();
    Ok(Parsed::Command(arguments_of(frame, &inline_spans[..count])))
}

/// The arguments at `spans` of a request's `frame`. The last one is the frame itself, narrowed:
/// every argument holds a reference to the read buffer (an atomic increment to make, an
/// atomic decrement to drop; `perf` put these at 4.5% of a pipelined GET), and a frame dropped
/// after slicing was one pair more per request: three pairs for a GET, now two.
fn arguments_of(mut frame: Bytes, spans: &[(usize, usize)]) -> Vec<Bytes> {
    let Some((&(last_start, last_end), rest)) = spans.split_last() else {
        return Vec::new();
    };
    let mut args = Vec::with_capacity(spans.len());
    args.extend(rest.iter().map(|&(s, e)| frame.slice(s..e)));
    frame.truncate(last_end);
    bytes::Buf::advance(&mut frame, last_start);
    args.push(frame);
    args
}

/// The bulk argument whose `$` header is at `pos`: its (start, end) in `data`, or None while it
/// has not fully arrived (header, payload and its CRLF). Errors are Redis's protocol errors.
fn bulk_at(
    data: &[u8],
    pos: usize,
    limits: &ParseLimits,
) -> Result<Option<(usize, usize)>, ProtocolError> {
    if pos >= data.len() {
        return Ok(None);
    }
    if data[pos] != b'$' {
        return Err(ProtocolError(format!(
            "Protocol error: expected '$', got '{}'",
            data[pos] as char
        )));
    }
    let (len, eol) = match small_header(data, pos + 1) {
        Some((n, eol)) if n <= limits.max_bulk_len => (n as usize, eol),
        _ => {
            let Some(eol) = find_crlf(data, pos + 1) else {
                if data.len() - pos > INLINE_MAX {
                    return Err(ProtocolError(
                        "Protocol error: too big bulk count string".into(),
                    ));
                }
                return Ok(None);
            };
            match parse_header_int(&data[pos + 1..eol]) {
                Some(n) if n >= 0 && n <= limits.max_bulk_len => (n as usize, eol),
                _ => return Err(ProtocolError("Protocol error: invalid bulk length".into())),
            }
        }
    };
    if !limits.authenticated && len > 16384 {
        return Err(ProtocolError(
            "Protocol error: unauthenticated bulk length".into(),
        ));
    }
    let start = eol + 2;
    let end = start + len;
    if data.len() < end + 2 {
        return Ok(None);
    }
    Ok(Some((start, end)))
}

/// The arguments of a multibulk request of `partial.count` arguments, from `partial.pos` on.
fn parse_arguments(
    buf: &mut BytesMut,
    limits: &ParseLimits,
    partial: &mut Partial,
) -> Result<Parsed, ProtocolError> {
    let data = &buf[..];
    while partial.spans.len() < partial.count {
        let Some((start, end)) = bulk_at(data, partial.pos, limits)? else {
            return Ok(Parsed::Incomplete);
        };
        partial.spans.push((start, end));
        partial.pos = end + 2;
    }
    let frame = buf.split_to(partial.pos).freeze();
    let spans = std::mem::take(&mut partial.spans);
    *partial = Partial::default();
    Ok(Parsed::Command(arguments_of(frame, &spans)))
}

/// How far the parser has got into the incomplete request at the front of a buffer. Redis
/// moves each header and each complete argument out of its query buffer as it parses, so its
/// CLIENT LIST counts in `qbuf` only what is not parsed yet and in `argv-mem` the arguments
/// taken; Podium keeps a request whole in its buffer until it is complete, and reports it
/// the same way with this.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Bytes at the front that are parsed: headers and complete arguments.
    pub consumed: usize,
    /// Bytes of the complete arguments.
    pub argv_bytes: usize,
    /// How many arguments are complete.
    pub argc: usize,
    /// The argument being received, once its header is parsed: (where its data starts in the
    /// buffer, its length).
    pub bulk: Option<(usize, usize)>,
}

/// [`Progress`] of the request at the front of `data`, which the parser found incomplete
/// (`partial` is its saved progress, if it saved any). Only headers are read: an inline
/// request, or anything the parser would refuse, shows as nothing parsed.
pub fn progress(data: &[u8], partial: &Partial) -> Progress {
    let mut p = Progress::default();
    if data.first() != Some(&b'*') {
        return p;
    }
    let (count, mut pos) = if partial.count > 0 {
        p.argc = partial.spans.len();
        p.argv_bytes = partial.spans.iter().map(|(s, e)| e - s).sum();
        (partial.count, partial.pos)
    } else {
        let Some(eol) = find_crlf(data, 1) else {
            return p;
        };
        match parse_header_int(&data[1..eol]) {
            Some(n) if n > 0 => (n as usize, eol + 2),
            _ => return p,
        }
    };
    p.consumed = pos;
    while p.argc < count && pos < data.len() && data[pos] == b'$' {
        let Some(eol) = find_crlf(data, pos + 1) else {
            break;
        };
        let Some(len) = parse_header_int(&data[pos + 1..eol]).and_then(|n| usize::try_from(n).ok())
        else {
            break;
        };
        let start = eol + 2;
        if data.len() < start + len + 2 {
            p.consumed = start;
            p.bulk = Some((start, len));
            break;
        }
        p.argc += 1;
        p.argv_bytes += len;
        pos = start + len + 2;
        p.consumed = pos;
    }
    p
}

fn parse_inline(buf: &mut BytesMut) -> Result<Parsed, ProtocolError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > INLINE_MAX {
            return Err(ProtocolError(
                "Protocol error: too big inline request".into(),
            ));
        }
        return Ok(Parsed::Incomplete);
    };
    let line = buf.split_to(nl + 1).freeze();
    let mut end = nl;
    if end > 0 && line[end - 1] == b'\r' {
        end -= 1;
    }
    if !line[..end].iter().any(|&b| b == b'"' || b == b'\'') {
        // No quotes (PING, redis-benchmark's inline lines, a typed GET): the words are slices
        // of the line, as split_args would have copied them out.
        let args = split_unquoted(&line, end);
        return Ok(if args.is_empty() {
            Parsed::Empty
        } else {
            Parsed::Command(args)
        });
    }
    match split_args(&line[..end]) {
        Some(args) if args.is_empty() => Ok(Parsed::Empty),
        Some(args) => Ok(Parsed::Command(args.into_iter().map(Bytes::from).collect())),
        None => Err(ProtocolError(
            "Protocol error: unbalanced quotes in request".into(),
        )),
    }
}

/// [`split_args`] for a line without quotes (`line[..end]`): the same words, as slices of
/// `line`. Whitespace (as `is_ascii_whitespace`) separates words; a space, tab, CR, LF or NUL
/// ends one and is consumed with it, so a NUL where a word would start makes an empty word,
/// as in `split_args`.
fn split_unquoted(line: &Bytes, end: usize) -> Vec<Bytes> {
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < end && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= end {
            return args;
        }
        let start = i;
        while i < end && !matches!(line[i], b' ' | b'\n' | b'\r' | b'\t' | 0) {
            i += 1;
        }
        args.push(line.slice(start..i));
        // The delimiter that ended the word goes with it.
        i += 1;
    }
}

fn hex_val(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Split a line into words the way redis-cli and inline commands do: whitespace separates,
/// "double quotes" allow escapes (\n \r \t \b \a \\ \" \xHH), 'single quotes' allow \'.
/// A closing quote must be followed by whitespace or the end. None on unbalanced quotes.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut args = Vec::new();
    let mut i = 0;
    let n = line.len();
    loop {
        while i < n && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= n {
            return Some(args);
        }
        let mut cur = Vec::new();
        let mut in_dq = false;
        let mut in_sq = false;
        loop {
            if in_dq {
                if i >= n {
                    return None;
                }
                let c = line[i];
                if c == b'\\' && i + 3 < n && line[i + 1] == b'x' {
                    if let (Some(h), Some(l)) = (hex_val(line[i + 2]), hex_val(line[i + 3])) {
                        cur.push(h * 16 + l);
                        i += 4;
                        continue;
                    }
                }
                if c == b'\\' && i + 1 < n {
                    let e = match line[i + 1] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    };
                    cur.push(e);
                    i += 2;
                    continue;
                }
                if c == b'"' {
                    if i + 1 < n && !line[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    i += 1;
                    break;
                }
                cur.push(c);
                i += 1;
            } else if in_sq {
                if i >= n {
                    return None;
                }
                let c = line[i];
                if c == b'\\' && i + 1 < n && line[i + 1] == b'\'' {
                    cur.push(b'\'');
                    i += 2;
                    continue;
                }
                if c == b'\'' {
                    if i + 1 < n && !line[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    i += 1;
                    break;
                }
                cur.push(c);
                i += 1;
            } else {
                if i >= n {
                    break;
                }
                match line[i] {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => {
                        i += 1;
                        break;
                    }
                    b'"' => in_dq = true,
                    b'\'' => in_sq = true,
                    c => cur.push(c),
                }
                i += 1;
            }
        }
        args.push(cur);
    }
}

/// Append the RESP encoding of `argv` to `out` (a request as clients send it: what the AOF and
/// the replication stream hold).
pub fn encode_command<A: AsRef<[u8]>>(out: &mut Vec<u8>, argv: &[A]) {
    out.push(b'*');
    push_num(out, argv.len());
    for a in argv {
        let a = a.as_ref();
        out.push(b'$');
        push_num(out, a.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

fn push_num(out: &mut Vec<u8>, n: usize) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    let mut n = n;
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&tmp[i..]);
    out.extend_from_slice(b"\r\n");
}

/// `SELECT db` as a request.
pub fn encode_select(out: &mut Vec<u8>, db: usize) {
    let d = db.to_string();
    encode_command(out, &[&b"SELECT"[..], d.as_bytes()]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every text of up to `max_len` bytes over `alphabet`, the empty one included.
    fn every_text(alphabet: &[u8], max_len: usize) -> Vec<Vec<u8>> {
        let mut texts: Vec<Vec<u8>> = vec![Vec::new()];
        let mut level = 0..1;
        for _ in 0..max_len {
            let longer: Vec<Vec<u8>> = texts[level.clone()]
                .iter()
                .flat_map(|t| {
                    alphabet.iter().map(move |&c| {
                        let mut n = t.clone();
                        n.push(c);
                        n
                    })
                })
                .collect();
            level = texts.len()..texts.len() + longer.len();
            texts.extend(longer);
        }
        texts
    }

    #[test]
    fn unquoted_inline_words_are_split_args_words() {
        // Every line of up to 5 bytes over an alphabet of the separators, a NUL, a form feed
        // and letters: the slices are split_args's words.
        let alphabet = [b' ', b'\t', b'\r', b'\n', 0u8, 0x0c, b'a', b'b'];
        for l in &every_text(&alphabet, 5) {
            let line = Bytes::copy_from_slice(l);
            let fast: Vec<Vec<u8>> = split_unquoted(&line, line.len())
                .iter()
                .map(|b| b.to_vec())
                .collect();
            assert_eq!(Some(fast), split_args(l), "{l:?}");
        }
    }

    /// The short-header path agrees with the general one wherever it answers: every text of
    /// up to four bytes from digits, a sign, CR, LF and a letter, at offset 0 and 1.
    #[test]
    fn small_headers_read_as_the_general_parser_reads_them() {
        let alphabet = [b'0', b'1', b'7', b'9', b'-', b'\r', b'\n', b'x'];
        let mut answered = 0;
        for t in &every_text(&alphabet, 4) {
            for prefix in [&b""[..], &b"$"[..]] {
                let data = [prefix, &t[..]].concat();
                let at = prefix.len();
                if let Some((v, eol)) = small_header(&data, at) {
                    answered += 1;
                    let general = find_crlf(&data, at).expect("a CRLF");
                    assert_eq!(eol, general, "{data:?}");
                    assert_eq!(parse_header_int(&data[at..eol]), Some(v), "{data:?}");
                }
            }
        }
        // "0".."9" and "10".."99" among the texts' first bytes (at both offsets).
        assert!(answered > 20, "{answered}");
    }

    fn parse(input: &[u8]) -> Result<Parsed, ProtocolError> {
        let mut b = BytesMut::from(input);
        parse_request(&mut b, &ParseLimits::default())
    }

    fn cmd(words: &[&str]) -> Parsed {
        Parsed::Command(
            words
                .iter()
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect(),
        )
    }

    #[test]
    fn multibulk_complete_and_partial() {
        assert_eq!(
            parse(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n").unwrap(),
            cmd(&["GET", "k"])
        );
        assert_eq!(
            parse(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r").unwrap(),
            Parsed::Incomplete
        );
        assert_eq!(parse(b"*2\r\n$3\r\nGET\r\n").unwrap(), Parsed::Incomplete);
        assert_eq!(parse(b"*2\r").unwrap(), Parsed::Incomplete);
    }

    #[test]
    fn multibulk_leaves_next_request_in_buffer() {
        let mut b = BytesMut::from(&b"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPI"[..]);
        let l = ParseLimits::default();
        assert_eq!(parse_request(&mut b, &l).unwrap(), cmd(&["PING"]));
        assert_eq!(&b[..], b"*1\r\n$4\r\nPI");
        assert_eq!(parse_request(&mut b, &l).unwrap(), Parsed::Incomplete);
    }

    #[test]
    fn multibulk_errors_match_redis() {
        let e = |i: &[u8]| parse(i).unwrap_err().0;
        assert_eq!(
            e(b"*3000000000\r\n"),
            "Protocol error: invalid multibulk length"
        );
        assert_eq!(e(b"*x\r\n"), "Protocol error: invalid multibulk length");
        assert_eq!(e(b"*1\r\nfoo\r\n"), "Protocol error: expected '$', got 'f'");
        assert_eq!(e(b"*1\r\n$-10\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(
            e(b"*1\r\n$blabla\r\n"),
            "Protocol error: invalid bulk length"
        );
        assert_eq!(
            e(b"*1\r\n$2000000000\r\n"),
            "Protocol error: invalid bulk length"
        );
        let mut big = b"*".to_vec();
        big.extend(std::iter::repeat_n(b'1', INLINE_MAX + 1));
        assert_eq!(e(&big), "Protocol error: too big mbulk count string");
    }

    #[test]
    fn empty_and_negative_counts_are_skipped() {
        assert_eq!(parse(b"*-10\r\n").unwrap(), Parsed::Empty);
        assert_eq!(parse(b"*0\r\n").unwrap(), Parsed::Empty);
        assert_eq!(parse(b"\r\n").unwrap(), Parsed::Empty);
    }

    #[test]
    fn inline_commands_and_quotes() {
        assert_eq!(parse(b"set a b\r\n").unwrap(), cmd(&["set", "a", "b"]));
        assert_eq!(
            parse(b"set \"a b\" 'c d'\n").unwrap(),
            cmd(&["set", "a b", "c d"])
        );
        assert_eq!(
            parse(b"echo \"\\x41\\n\"\n").unwrap(),
            cmd(&["echo", "A\n"])
        );
        assert_eq!(
            parse(b"set \"\"\"test-key\"\"\" v\r\n").unwrap_err().0,
            "Protocol error: unbalanced quotes in request"
        );
        assert_eq!(parse(b"set a").unwrap(), Parsed::Incomplete);
        let big = vec![b'A'; INLINE_MAX + 1];
        assert_eq!(
            parse(&big).unwrap_err().0,
            "Protocol error: too big inline request"
        );
    }

    #[test]
    fn unauthenticated_limits() {
        let l = ParseLimits {
            authenticated: false,
            ..ParseLimits::default()
        };
        let mut b = BytesMut::from(&b"*11\r\n"[..]);
        assert!(parse_request(&mut b, &l).is_err());
        let mut b = BytesMut::from(&b"*1\r\n$20000\r\n"[..]);
        assert_eq!(
            parse_request(&mut b, &l).unwrap_err().0,
            "Protocol error: unauthenticated bulk length"
        );
    }
}

#[cfg(test)]
mod resume_tests {
    use super::*;

    #[test]
    fn a_long_request_resumes_where_it_stopped() {
        let mut req = b"*12\r\n$4\r\nSADD\r\n$1\r\ns\r\n".to_vec();
        for i in 0..10 {
            req.extend_from_slice(format!("$2\r\nm{i}\r\n").as_bytes());
        }
        req.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
        let mut buf = BytesMut::new();
        let mut partial = Partial::default();
        let limits = ParseLimits::default();
        let mut got = Vec::new();
        for b in &req {
            buf.extend_from_slice(&[*b]);
            loop {
                match parse_request_resuming(&mut buf, &limits, &mut partial).unwrap() {
                    Parsed::Command(args) => got.push(args),
                    Parsed::Empty => {}
                    Parsed::Incomplete => break,
                }
            }
        }
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].len(), 12);
        assert_eq!(&got[0][11][..], b"m9");
        assert_eq!(&got[1][0][..], b"PING");
        assert!(buf.is_empty());
    }
    /// What Redis would have parsed out of an incomplete request: its headers and complete
    /// arguments, whether the parser saved its progress (more than 8 arguments) or not.
    #[test]
    fn progress_counts_what_redis_would_have_parsed() {
        let mut buf = BytesMut::from(&b"*3\r\n$3\r\nset\r\n$1\r\nk\r\n$1000\r\n"[..]);
        buf.extend_from_slice(&[b'v'; 500]);
        let limits = ParseLimits::default();
        let mut partial = Partial::default();
        assert_eq!(
            parse_request_resuming(&mut buf, &limits, &mut partial),
            Ok(Parsed::Incomplete)
        );
        let p = progress(&buf, &partial);
        assert_eq!(
            buf.len() - p.consumed,
            500,
            "qbuf: the argument's data so far"
        );
        assert_eq!((p.argc, p.argv_bytes), (2, 4));
        assert_eq!(p.bulk, Some((buf.len() - 500, 1000)));
        // A header not complete yet is not parsed.
        let p = progress(b"*3\r\n$3\r\nset\r\n$10", &partial);
        assert_eq!((p.consumed, p.argc, p.bulk), (13, 1, None));
        assert_eq!(progress(b"*3", &partial), Progress::default());
        assert_eq!(progress(b"GET k", &partial), Progress::default());
        // Saved progress of a long request is used.
        let mut long = BytesMut::new();
        long.extend_from_slice(b"*10\r\n");
        for _ in 0..9 {
            long.extend_from_slice(b"$2\r\nab\r\n");
        }
        long.extend_from_slice(b"$40000\r\nxyz");
        let mut partial = Partial::default();
        assert_eq!(
            parse_request_resuming(&mut long, &limits, &mut partial),
            Ok(Parsed::Incomplete)
        );
        let p = progress(&long, &partial);
        assert_eq!((p.argc, p.argv_bytes), (9, 18));
        assert_eq!(long.len() - p.consumed, 3);
        assert_eq!(p.bulk.map(|b| b.1), Some(40000));
    }
}
