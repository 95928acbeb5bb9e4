//! Which keys an EVAL script can reach, judged from its text before it runs: the lock scope.
//!
//! A script that only ever passes its declared keys (`KEYS[...]`) where its commands take keys
//! can lock just the shards of those keys, which the dispatcher has locked already: scripts on
//! different keys then run in parallel on different worker threads, and a script does not pay
//! for locking a whole database. The judgement is conservative and works on the text alone:
//! the script must stay in one database ([`super::stays_in_one_db`]); every `redis.call` /
//! `redis.pcall` names its command with a string literal, the command takes its keys at fixed
//! positions (or none), and the argument at each key position is written `KEYS[...]`; `KEYS`
//! is never used other than indexed and read (no assignment into it, no aliasing, no passing
//! it to a function), and the script has no long strings or block comments (which the scanner
//! does not follow). Anything else locks the caller's whole database (or every database), as
//! before. At run time `redis.call` still checks that each key it is given lies in a locked
//! shard (see `api::script_refusal`), so a misjudgement is an error, never a race.

use crate::commands::{lookup, Keys};

/// True when `code` (an EVAL script without its shebang line) only reaches keys it declares.
pub(crate) fn touches_only_declared_keys(code: &[u8]) -> bool {
    if !super::stays_in_one_db(code) {
        return false;
    }
    if code.windows(2).any(|w| w == b"[[" || w == b"[=") {
        return false;
    }
    let mut s = Scanner { code, i: 0 };
    while let Some(token) = s.next_token() {
        match token {
            Token::Ident(start, end) => {
                let after_dot = start > 0 && matches!(code[start - 1], b'.' | b':');
                let name = &code[start..end];
                if after_dot {
                    continue;
                }
                if name == b"KEYS" && !keys_read_here(&mut s) {
                    return false;
                }
                if name == b"redis" && !call_uses_declared_keys(&mut s) {
                    return false;
                }
            }
            Token::Other(_) => {}
        }
    }
    true
}

#[derive(Clone, Copy)]
enum Token {
    /// An identifier: its start and end.
    Ident(usize, usize),
    /// One byte of punctuation (strings, numbers and comments are skipped).
    Other(u8),
}

struct Scanner<'a> {
    code: &'a [u8],
    i: usize,
}

impl Scanner<'_> {
    /// The next identifier or punctuation byte, skipping blanks, strings, numbers and line
    /// comments.
    fn next_token(&mut self) -> Option<Token> {
        let code = self.code;
        loop {
            let b = *code.get(self.i)?;
            if b.is_ascii_whitespace() {
                self.i += 1;
            } else if b == b'-' && code.get(self.i + 1) == Some(&b'-') {
                while self.i < code.len() && code[self.i] != b'\n' {
                    self.i += 1;
                }
            } else if b == b'\'' || b == b'"' {
                self.i += 1;
                while self.i < code.len() && code[self.i] != b {
                    self.i += if code[self.i] == b'\\' { 2 } else { 1 };
                }
                self.i += 1;
                return Some(Token::Other(b'"'));
            } else if b.is_ascii_alphabetic() || b == b'_' {
                let start = self.i;
                while self.i < code.len()
                    && (code[self.i].is_ascii_alphanumeric() || code[self.i] == b'_')
                {
                    self.i += 1;
                }
                return Some(Token::Ident(start, self.i));
            } else if b.is_ascii_digit() {
                while self.i < code.len()
                    && (code[self.i].is_ascii_alphanumeric() || code[self.i] == b'.')
                {
                    self.i += 1;
                }
                return Some(Token::Other(b'0'));
            } else {
                self.i += 1;
                return Some(Token::Other(b));
            }
        }
    }

    fn peek(&mut self) -> Option<Token> {
        let at = self.i;
        let t = self.next_token();
        self.i = at;
        t
    }

    /// After an opening bracket: skip to just past its matching closing one.
    fn skip_balanced(&mut self, open: u8, close: u8) -> bool {
        let mut depth = 1;
        while let Some(t) = self.next_token() {
            match t {
                Token::Other(b) if b == open => depth += 1,
                Token::Other(b) if b == close => {
                    depth -= 1;
                    if depth == 0 {
                        return true;
                    }
                }
                _ => {}
            }
        }
        false
    }
}

/// Just after the identifier `KEYS`: it is indexed (`KEYS[...]`), and what follows is neither
/// an assignment (`=`, not `==`) nor a comma at statement level (a multiple assignment's
/// target list). `#KEYS` (its length) is a read too.
fn keys_read_here(s: &mut Scanner) -> bool {
    let before = s.code[..s.i - 4]
        .iter()
        .rev()
        .find(|b| !b.is_ascii_whitespace());
    if before == Some(&b'#') {
        return true;
    }
    if !matches!(s.next_token(), Some(Token::Other(b'['))) || !s.skip_balanced(b'[', b']') {
        return false;
    }
    match s.peek() {
        Some(Token::Other(b'=')) => {
            let at = s.i;
            s.next_token();
            let equality = matches!(s.peek(), Some(Token::Other(b'=')));
            s.i = at;
            equality
        }
        // `KEYS[1], x = ...` assigns; inside a call or a table constructor a comma only
        // separates values. Telling the two apart needs the statement's structure, so a comma
        // outside any bracket is refused.
        Some(Token::Other(b',')) => bracket_depth(&s.code[..s.i]) > 0,
        _ => true,
    }
}

/// How many brackets (`(`, `{`, `[`) are open at the end of `code` (strings and comments
/// skipped).
fn bracket_depth(code: &[u8]) -> i32 {
    let mut s = Scanner { code, i: 0 };
    let mut depth = 0;
    while let Some(t) = s.next_token() {
        match t {
            Token::Other(b'(' | b'{' | b'[') => depth += 1,
            Token::Other(b')' | b'}' | b']') => depth -= 1,
            _ => {}
        }
    }
    depth
}

/// Just after the identifier `redis`: when this is `redis.call(` / `redis.pcall(`, its command
/// takes keys only at fixed positions and each of those arguments is written `KEYS[...]`.
fn call_uses_declared_keys(s: &mut Scanner) -> bool {
    let at = s.i;
    if !matches!(s.next_token(), Some(Token::Other(b'.'))) {
        s.i = at;
        return true;
    }
    let Some(Token::Ident(a, b)) = s.next_token() else {
        return false;
    };
    if !matches!(&s.code[a..b], b"call" | b"pcall") {
        return true;
    }
    if !matches!(s.next_token(), Some(Token::Other(b'('))) {
        return false;
    }
    // The argument texts, split at the commas outside any bracket.
    let mut args: Vec<(usize, usize)> = Vec::new();
    let mut start = s.i;
    let mut depth = 0;
    loop {
        let before = s.i;
        let Some(t) = s.next_token() else {
            return false;
        };
        match t {
            Token::Other(b'(' | b'{' | b'[') => depth += 1,
            Token::Other(b')') if depth == 0 => {
                args.push((start, before));
                break;
            }
            Token::Other(b')' | b'}' | b']') => depth -= 1,
            Token::Other(b',') if depth == 0 => {
                args.push((start, before));
                start = s.i;
            }
            _ => {}
        }
    }
    // Resume scanning inside the arguments (KEYS uses and nested calls are checked there too).
    s.i = args.first().map(|a| a.0).unwrap_or(s.i);
    let text = |(a, b): (usize, usize)| s.code[a..b].trim_ascii();
    let Some(&name_arg) = args.first() else {
        return false;
    };
    let name = text(name_arg);
    if name.len() < 2 {
        return false;
    }
    let Some(spec) = lookup(&name[1..name.len() - 1]) else {
        return false;
    };
    // A vararg expression would move the key positions.
    if args.iter().any(|&a| {
        let t = text(a);
        t.windows(3).any(|w| w == b"...") || t.windows(6).any(|w| w == b"unpack")
    }) {
        return false;
    }
    match spec.keys {
        Keys::None => true,
        Keys::Range(first, last, step) => {
            if first <= 0 {
                return true;
            }
            let n = args.len() as i32;
            let last = if last < 0 { n + last } else { last };
            let mut i = first;
            while i <= last && i < n {
                if !is_declared_key(text(args[i as usize])) {
                    return false;
                }
                i += step.max(1);
            }
            true
        }
        _ => false,
    }
}

/// `KEYS[...]` and nothing else.
fn is_declared_key(arg: &[u8]) -> bool {
    let Some(inside) = arg.strip_prefix(b"KEYS") else {
        return false;
    };
    let inside = inside.trim_ascii_start();
    if inside.first() != Some(&b'[') || inside.last() != Some(&b']') {
        return false;
    }
    let mut s = Scanner {
        code: &inside[1..],
        i: 0,
    };
    s.skip_balanced(b'[', b']') && s.i == inside.len() - 1
}

#[cfg(test)]
mod tests {
    use super::touches_only_declared_keys as only;

    #[test]
    fn scripts_that_touch_only_their_keys() {
        for code in [
            "local s = redis.call('zincrby', KEYS[1], ARGV[1], ARGV[2]) return redis.call('zrevrank', KEYS[1], ARGV[2])",
            "return redis.call('mset', KEYS[1], 'a', KEYS[2], 'b')",
            "redis.call('set', KEYS[1], 'x') -- redis.call('get', 'other')\nreturn 1",
            "for i = 1, #KEYS do redis.call('del', KEYS[i]) end",
            "if KEYS[1] == 'a' then return redis.call('get', KEYS[1]) end",
            "return redis.call('time')",
            "return {redis.call('get', KEYS[ 1 ]), KEYS[2]}",
            "local t = redis.call('get', KEYS[tonumber(ARGV[1])]) return t",
            "return 1",
        ] {
            assert!(only(code.as_bytes()), "{code}");
        }
    }

    #[test]
    fn scripts_that_may_reach_other_keys() {
        for code in [
            "return redis.call('get', 'k')",
            "return redis.call('get', ARGV[1])",
            "local k = KEYS[1] return redis.call('get', k)",
            "KEYS[1] = 'other' return redis.call('get', KEYS[1])",
            "KEYS[1], x = 'other', 1 return redis.call('get', KEYS[1])",
            "table.insert(KEYS, 'x') return redis.call('get', KEYS[2])",
            "local k = KEYS return redis.call('get', k[1])",
            "return redis.call('mset', KEYS[1], 'a', 'b', 'c')",
            "return redis.call('get', unpack(KEYS))",
            "return redis.call('zunionstore', KEYS[1], 1, KEYS[2])",
            "return redis.call('keys', '*')",
            "return redis.call('select', 1)",
            "return redis.call(ARGV[1], KEYS[1])",
            "return redis.call('get', KEYS[1] .. 'x')",
            "local s = [[redis.call('get', 'x')]] return redis.call('get', KEYS[1])",
            "return redis.call('get', KEYS[1]) --[[ x ]]",
            "rawset(KEYS, 1, 'x') return redis.call('get', KEYS[1])",
            "return redis.call('get', KEYS)",
        ] {
            assert!(!only(code.as_bytes()), "{code}");
        }
    }
}
