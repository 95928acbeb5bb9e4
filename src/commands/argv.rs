//! Reading a command's arguments the way Redis 7.0 reads them.
//!
//! Redis parses with C strings and a handful of shared helpers (`getLongLongFromObject`,
//! `getTimeoutFromObjectOrReply`, `parseScanCursorOrReply`, `strcasecmp` on option names), so
//! every command of a kind accepts the same texts and answers the same errors. This module
//! owns Podium's one copy of each: [`ArgReader`], a cursor over the arguments with typed reads
//! (integer, float, blocking timeout, scan cursor, keyword), and the parsers behind it. A
//! handler reads its options with it instead of re-implementing number or keyword rules.
//!
//! Redis sees each argument as a NUL-terminated string, so an option name or a cursor ends at
//! the first NUL byte (`"nx\0junk"` is `NX`); [`c_str`] (in `util`, since the shared error
//! texts read arguments that way too) gives that view. Numbers parsed with
//! length-aware helpers (`string2ll`, `string2ld`) keep the whole argument, as in Redis.

use super::errors::{INVALID_CURSOR, NOT_INT, SYNTAX, TIMEOUT_NEGATIVE, TIMEOUT_NOT_FLOAT};
use crate::protocol::Reply;
use crate::util::c_str;
use crate::util::numtext::{glob_match, parse_i64, LongDouble};
use bytes::Bytes;

/// `strcasecmp(arg, word) == 0`: an option name as Redis compares it.
pub(crate) fn is_keyword(a: &[u8], word: &str) -> bool {
    c_str(a).eq_ignore_ascii_case(word.as_bytes())
}

/// A blocking command's timeout in seconds (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP,
/// BZPOPMIN, BZPOPMAX, BZMPOP), as Redis 7.0's `getTimeoutFromObjectOrReply`: a `long double`
/// (so hex floats, `inf` and values past `double`'s range are read), multiplied by 1000 and
/// rounded up to whole milliseconds. Returns the wait in milliseconds from `now_ms`, 0 meaning
/// forever. A tiny positive timeout (`0.0001`) is 1 ms; a small negative one (`-0.0001`) rounds
/// up to 0 and waits forever, as in Redis. Redis adds the timeout to the clock without a check,
/// so a deadline past the end of the clock wraps and is never reached: that also waits forever.
pub(crate) fn block_timeout_ms(a: &[u8], now_ms: i64) -> Result<u64, Reply> {
    let seconds = LongDouble::parse(a).ok_or_else(|| Reply::error(TIMEOUT_NOT_FLOAT))?;
    let ms = seconds.seconds_to_ms_ceil();
    if ms < 0 {
        return Err(Reply::error(TIMEOUT_NEGATIVE));
    }
    if now_ms > 0 && ms > i64::MAX - now_ms {
        return Ok(0);
    }
    Ok(ms as u64)
}

/// A SCAN/HSCAN/SSCAN/ZSCAN cursor, as Redis's `parseScanCursorOrReply`: `strtoul` in base
/// 10 over the C string, with no leading blank and nothing after the number. A sign is
/// accepted and a negative value wraps (`-1` is 2^64-1); the empty string is cursor 0.
pub(crate) fn scan_cursor(a: &[u8]) -> Result<u64, Reply> {
    let bad = || Reply::error(INVALID_CURSOR);
    let s = c_str(a);
    if s.is_empty() {
        return Ok(0);
    }
    let (neg, digits) = match s[0] {
        b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r' => return Err(bad()),
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    // No digits: strtoul leaves its end pointer at the start, which is not the end.
    if digits.is_empty() {
        return Err(bad());
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return Err(bad());
        }
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(c - b'0')))
            .ok_or_else(bad)?;
    }
    Ok(if neg { v.wrapping_neg() } else { v })
}

/// Redis's `getRangeLongFromObjectOrReply`: an integer in `min..=max`. With `msg`, both a
/// non-integer and an out-of-range value answer `ERR msg`; without, they answer "not an
/// integer" and "value is out of range, value must between MIN and MAX" (sic).
pub(crate) fn range_long(a: &[u8], min: i64, max: i64, msg: Option<&str>) -> Result<i64, Reply> {
    let fail = |fallback: String| Reply::error(msg.map_or(fallback, |m| format!("ERR {m}")));
    let v = parse_i64(a).ok_or_else(|| fail(NOT_INT.to_string()))?;
    if v < min || v > max {
        return Err(fail(format!(
            "ERR value is out of range, value must between {min} and {max}"
        )));
    }
    Ok(v)
}

/// Redis's `getPositiveLongFromObjectOrReply`: an integer >= 0; both a non-integer and a
/// negative value answer `msg` (default "value is out of range, must be positive").
pub(crate) fn positive_long(a: &[u8], msg: Option<&str>) -> Result<i64, Reply> {
    range_long(
        a,
        0,
        i64::MAX,
        Some(msg.unwrap_or("value is out of range, must be positive")),
    )
}

/// The options of the SCAN family: `MATCH pattern`, `COUNT n`, and for SCAN itself
/// `TYPE name`, any number of times in any order (the last one wins).
pub(crate) struct ScanOptions {
    /// None when absent or `*` (which matches everything).
    pub pattern: Option<Bytes>,
    pub count: usize,
    /// Lowercase type name (SCAN only).
    pub type_name: Option<String>,
}

impl ScanOptions {
    /// True when `s` passes the MATCH pattern (byte-wise glob, case-sensitive).
    pub(crate) fn matches(&self, s: &[u8]) -> bool {
        self.pattern
            .as_ref()
            .is_none_or(|p| glob_match(p, s, false))
    }
}

/// The SCAN family's reply: `[next cursor as a bulk string, [elements]]`.
pub(crate) fn scan_reply(cursor: u64, items: Vec<Reply>) -> Reply {
    Reply::Array(vec![
        Reply::Bulk(Bytes::from(cursor.to_string())),
        Reply::Array(items),
    ])
}

/// A cursor over a command's arguments.
pub(crate) struct ArgReader<'a> {
    args: &'a [Bytes],
    pos: usize,
}

impl<'a> ArgReader<'a> {
    /// Reads `args` from position `start` (args[0] is the command name).
    pub(crate) fn new(args: &'a [Bytes], start: usize) -> ArgReader<'a> {
        ArgReader {
            args,
            pos: start.min(args.len()),
        }
    }

    /// Arguments not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.args.len() - self.pos
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The next argument, consumed.
    pub(crate) fn next_arg(&mut self) -> Option<&'a Bytes> {
        let a = self.args.get(self.pos)?;
        self.pos += 1;
        Some(a)
    }

    /// Consumes the next argument if it is the option `word` (compared as Redis does).
    pub(crate) fn keyword(&mut self, word: &str) -> bool {
        match self.args.get(self.pos) {
            Some(a) if is_keyword(a, word) => {
                self.pos += 1;
                true
            }
            _ => false,
        }
    }

    /// The next argument, required: a syntax error when there is none.
    pub(crate) fn value(&mut self) -> Result<&'a Bytes, Reply> {
        self.next_arg().ok_or_else(|| Reply::error(SYNTAX))
    }

    /// A strict 64-bit integer (Redis's `string2ll`).
    pub(crate) fn int(&mut self) -> Result<i64, Reply> {
        parse_i64(self.value()?).ok_or_else(|| Reply::error(NOT_INT))
    }

    /// A scan cursor; see [`scan_cursor`].
    pub(crate) fn cursor(&mut self) -> Result<u64, Reply> {
        scan_cursor(self.value()?)
    }

    /// The rest of the arguments as SCAN-family options, in Redis's `scanGenericCommand`
    /// order: an option name needs its value after it, `COUNT` must be an integer (error
    /// "not an integer") of at least 1 (else a syntax error), `TYPE` only when `allow_type`.
    pub(crate) fn scan_options(&mut self, allow_type: bool) -> Result<ScanOptions, Reply> {
        let mut o = ScanOptions {
            pattern: None,
            count: 10,
            type_name: None,
        };
        while !self.is_empty() {
            if self.remaining() < 2 {
                return Err(Reply::error(SYNTAX));
            }
            if self.keyword("count") {
                let n = self.int()?;
                if n < 1 {
                    return Err(Reply::error(SYNTAX));
                }
                o.count = usize::try_from(n).unwrap_or(usize::MAX);
            } else if self.keyword("match") {
                let p = self.value()?;
                o.pattern = (&p[..] != b"*").then(|| p.clone());
            } else if allow_type && self.keyword("type") {
                let t = self.value()?;
                o.type_name = Some(String::from_utf8_lossy(c_str(t)).to_ascii_lowercase());
            } else {
                return Err(Reply::error(SYNTAX));
            }
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&[u8]]) -> Vec<Bytes> {
        v.iter().map(|a| Bytes::copy_from_slice(a)).collect()
    }

    fn err_text(r: Reply) -> String {
        match r {
            Reply::Error(e) => e,
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn timeouts_round_up_to_milliseconds() {
        let now = 1_700_000_000_000;
        assert_eq!(block_timeout_ms(b"0", now).ok(), Some(0));
        assert_eq!(block_timeout_ms(b"0.0001", now).ok(), Some(1));
        assert_eq!(block_timeout_ms(b"1e-400", now).ok(), Some(1));
        assert_eq!(block_timeout_ms(b"0.001", now).ok(), Some(1));
        assert_eq!(block_timeout_ms(b"1.5", now).ok(), Some(1500));
        assert_eq!(block_timeout_ms(b"0x10", now).ok(), Some(16000));
        // ceill(-0.1) is -0: wait forever, as Redis does.
        assert_eq!(block_timeout_ms(b"-0.0001", now).ok(), Some(0));
        assert_eq!(block_timeout_ms(b"-0", now).ok(), Some(0));
        // A deadline past the end of the clock is never reached.
        assert_eq!(block_timeout_ms(b"9223372036854775", now).ok(), Some(0));
        assert_eq!(block_timeout_ms(b"9e15", now).ok(), Some(9e18 as u64));
        for neg in [&b"-1"[..], b"-0.002", b"inf", b"-inf", b"1e30", b"1e400"] {
            let e = block_timeout_ms(neg, now).expect_err("negative");
            assert_eq!(err_text(e), TIMEOUT_NEGATIVE, "{neg:?}");
        }
        for bad in [&b"abc"[..], b"", b" 1", b"1 ", b"nan", b"1e-5000", b"1\x00"] {
            let e = block_timeout_ms(bad, now).expect_err("not a float");
            assert_eq!(err_text(e), TIMEOUT_NOT_FLOAT, "{bad:?}");
        }
    }

    #[test]
    fn cursors_follow_strtoul() {
        assert_eq!(scan_cursor(b"0").ok(), Some(0));
        assert_eq!(scan_cursor(b"").ok(), Some(0));
        assert_eq!(scan_cursor(b"-1").ok(), Some(u64::MAX));
        assert_eq!(scan_cursor(b"+7").ok(), Some(7));
        assert_eq!(scan_cursor(b"12\x00junk").ok(), Some(12));
        assert_eq!(scan_cursor(b"18446744073709551615").ok(), Some(u64::MAX));
        for bad in [
            &b"18446744073709551616"[..],
            b"abc",
            b" 1",
            b"1 ",
            b"-",
            b"+",
            b"0x10",
            b"\x00",
        ] {
            if bad == b"\x00" {
                // The C string is empty: cursor 0.
                assert_eq!(scan_cursor(bad).ok(), Some(0));
                continue;
            }
            assert!(scan_cursor(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn scan_options_in_redis_order() {
        let a = args(&[b"match", b"a*", b"COUNT", b"5", b"type", b"ZSet"]);
        let o = ArgReader::new(&a, 0).scan_options(true).expect("valid");
        assert_eq!(o.pattern.as_deref(), Some(&b"a*"[..]));
        assert_eq!(o.count, 5);
        assert_eq!(o.type_name.as_deref(), Some("zset"));
        let a = args(&[b"match", b"*"]);
        let o = ArgReader::new(&a, 0).scan_options(false).expect("valid");
        assert!(o.pattern.is_none());
        for (bad, text) in [
            (&[&b"count"[..]][..], SYNTAX),
            (&[&b"count"[..], b"x"][..], NOT_INT),
            (&[&b"count"[..], b"0"][..], SYNTAX),
            (&[&b"type"[..], b"zset"][..], SYNTAX),
            (&[&b"foo"[..], b"bar"][..], SYNTAX),
        ] {
            let a = args(bad);
            let e = ArgReader::new(&a, 0).scan_options(false);
            assert_eq!(err_text(e.err().expect("an error")), text);
        }
    }

    #[test]
    fn ranged_integers_answer_redis_texts() {
        assert_eq!(positive_long(b"5", None).ok(), Some(5));
        let e = positive_long(b"x", None).expect_err("not an integer");
        assert_eq!(err_text(e), "ERR value is out of range, must be positive");
        let e = positive_long(b"-1", Some("COUNT can't be negative")).expect_err("negative");
        assert_eq!(err_text(e), "ERR COUNT can't be negative");
        let e = range_long(b"x", 1, 10, None).expect_err("not an integer");
        assert_eq!(err_text(e), NOT_INT);
        let e = range_long(b"0", 1, 10, None).expect_err("out of range");
        assert_eq!(
            err_text(e),
            "ERR value is out of range, value must between 1 and 10"
        );
    }

    #[test]
    fn keywords_compare_as_c_strings() {
        assert!(is_keyword(b"nX", "nx"));
        assert!(is_keyword(b"nx\x00junk", "nx"));
        assert!(!is_keyword(b"nxx", "nx"));
        let a = args(&[b"cmd", b"LIMIT", b"3"]);
        let mut r = ArgReader::new(&a, 1);
        assert!(!r.keyword("count"));
        assert!(r.keyword("limit"));
        assert_eq!(r.int().ok(), Some(3));
        assert!(r.is_empty());
        assert_eq!(err_text(r.int().expect_err("none left")), SYNTAX);
    }
}
