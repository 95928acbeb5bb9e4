//! Access control lists, as Redis 7.0: users, their passwords, and what each may run.
//!
//! A user has flags (on/off, nopass), a list of SHA-256 password hashes, and selectors: the
//! root selector (rules given outside parentheses) plus any `(...)` selectors. A selector
//! holds a bitmap of allowed commands indexed by the ids of Redis's command table
//! ([`crate::command_table::COMMANDS`], generated from Redis's command JSON so categories,
//! subcommands and key specs are Redis's own), allowed first arguments (`+select|0`), key
//! patterns with read/write permissions (`~`, `%R~`, `%W~`, `allkeys`) and channel patterns
//! (`&`, `allchannels`). A command is allowed when any selector allows the command, every key
//! it names (with the access its key spec declares) and every channel it publishes or
//! subscribes to.
//!
//! [`crate::commands::acl::check`] is what the dispatcher, EXEC and scripts call before running
//! a command (it and the other checks that take a client or the server live there); a denial
//! is recorded in the ACL LOG. Rules are applied to a copy of the user and committed only if
//! all are valid (ACL SETUSER is all or nothing). `requirepass` sets the default user's
//! password. Password comparisons hash the candidate and compare digests in constant time.

use crate::cmdspec::{Begin, Find};
use crate::command_table::{CATEGORIES, COMMANDS};
use crate::config::dir;
use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

const WORDS: usize = 8;
pub(crate) const READ: u8 = 1;
const WRITE: u8 = 2;

/// Id of a command row by full name.
fn command_id(name: &str) -> Option<usize> {
    static IDS: OnceLock<hashbrown::HashMap<&'static str, usize>> = OnceLock::new();
    IDS.get_or_init(|| {
        COMMANDS
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name, i))
            .collect()
    })
    .get(name)
    .copied()
}

fn category_bit(name: &str) -> Option<u32> {
    CATEGORIES
        .iter()
        .position(|c| c.eq_ignore_ascii_case(name))
        .map(|i| 1 << i)
}

/// Why an ACL check failed; the order is Redis's (a later kind is the more relevant error).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(crate) enum Denied {
    Command,
    Key,
    Channel,
    Auth,
}

#[derive(Clone)]
pub(crate) struct Selector {
    /// Every command, including ones the table does not know (SELECTOR_FLAG_ALLCOMMANDS).
    allcommands: bool,
    /// Set by +@all and cleared by -@all only: "can run future commands" (how the rules are
    /// described back).
    future: bool,
    bits: [u64; WORDS],
    first_args: BTreeMap<usize, Vec<String>>,
    pub(crate) allkeys: bool,
    pub(crate) patterns: Vec<(Vec<u8>, u8)>,
    allchannels: bool,
    channels: Vec<Vec<u8>>,
}

impl Selector {
    fn new(allchannels: bool) -> Selector {
        Selector {
            allcommands: false,
            future: false,
            bits: [0; WORDS],
            first_args: BTreeMap::new(),
            allkeys: false,
            patterns: Vec::new(),
            allchannels,
            channels: Vec::new(),
        }
    }

    fn bit(&self, id: usize) -> bool {
        self.bits[id / 64] & (1 << (id % 64)) != 0
    }

    fn set_bit(&mut self, id: usize, on: bool) {
        if on {
            self.bits[id / 64] |= 1 << (id % 64);
        } else {
            self.bits[id / 64] &= !(1 << (id % 64));
            self.allcommands = false;
        }
    }

    /// Allow or deny a command (a container with all its subcommands).
    fn change(&mut self, id: usize, on: bool) {
        self.set_bit(id, on);
        self.first_args.remove(&id);
        for sub in id + 1..=id + COMMANDS[id].subcommands {
            self.set_bit(sub, on);
        }
    }

    fn change_category(&mut self, cat: u32, on: bool) {
        for (id, c) in COMMANDS.iter().enumerate() {
            if c.categories & cat != 0 {
                self.change(id, on);
            }
        }
    }

    fn count_category(&self, cat: u32) -> (usize, usize) {
        let mut on = 0;
        let mut off = 0;
        for (id, c) in COMMANDS.iter().enumerate() {
            if c.categories & cat != 0 {
                if self.bit(id) {
                    on += 1;
                } else {
                    off += 1;
                }
            }
        }
        (on, off)
    }

    /// Apply one rule; Err is Redis's reason text.
    fn apply(&mut self, op: &[u8], pubsub_all: bool) -> Result<(), &'static str> {
        let lower = String::from_utf8_lossy(op).to_ascii_lowercase();
        match lower.as_str() {
            "allkeys" | "~*" => {
                self.allkeys = true;
                self.patterns.clear();
                return Ok(());
            }
            "resetkeys" => {
                self.allkeys = false;
                self.patterns.clear();
                return Ok(());
            }
            "allchannels" | "&*" => {
                self.allchannels = true;
                self.channels.clear();
                return Ok(());
            }
            "resetchannels" => {
                self.allchannels = false;
                self.channels.clear();
                return Ok(());
            }
            "allcommands" | "+@all" => {
                self.bits = [u64::MAX; WORDS];
                self.allcommands = true;
                self.future = true;
                self.first_args.clear();
                return Ok(());
            }
            "nocommands" | "-@all" => {
                self.bits = [0; WORDS];
                self.allcommands = false;
                self.future = false;
                self.first_args.clear();
                return Ok(());
            }
            _ => {}
        }
        let _ = pubsub_all;
        match op.first() {
            Some(b'~') | Some(b'%') => {
                if self.allkeys {
                    return Err(ERR_KEYS_AFTER_ALL);
                }
                let mut flags = 0;
                let mut offset = 1;
                if op[0] == b'%' {
                    let mut closed = false;
                    while offset < op.len() {
                        match op[offset].to_ascii_uppercase() {
                            b'R' if flags & READ == 0 => flags |= READ,
                            b'W' if flags & WRITE == 0 => flags |= WRITE,
                            b'~' => {
                                offset += 1;
                                closed = true;
                                break;
                            }
                            _ => return Err(ERR_SYNTAX),
                        }
                        offset += 1;
                    }
                    // Redis accepts a `%RW` without `~` as an empty pattern; so do we.
                    let _ = closed;
                } else {
                    flags = READ | WRITE;
                }
                let pat = &op[offset..];
                if has_spaces(pat) {
                    return Err(ERR_SYNTAX);
                }
                match self.patterns.iter_mut().find(|(p, _)| p == pat) {
                    Some((_, f)) => *f |= flags,
                    None => self.patterns.push((pat.to_vec(), flags)),
                }
                self.allkeys = false;
                Ok(())
            }
            Some(b'&') => {
                if self.allchannels {
                    return Err(ERR_CHANNELS_AFTER_ALL);
                }
                let pat = &op[1..];
                if has_spaces(pat) {
                    return Err(ERR_SYNTAX);
                }
                if !self.channels.iter().any(|p| p == pat) {
                    self.channels.push(pat.to_vec());
                }
                self.allchannels = false;
                Ok(())
            }
            Some(b'+') if op.get(1) != Some(&b'@') => {
                let name = &lower[1..];
                match name.rfind('|') {
                    None => {
                        let id = command_id(name).ok_or(ERR_UNKNOWN)?;
                        self.change(id, true);
                    }
                    Some(bar) => {
                        let (cmd, sub) = (&name[..bar], &name[bar + 1..]);
                        let id = command_id(cmd).ok_or(ERR_UNKNOWN)?;
                        if COMMANDS[id].parent.is_some() {
                            return Err(ERR_FIRSTARG_OF_SUB);
                        }
                        if sub.is_empty() {
                            return Err(ERR_SYNTAX);
                        }
                        if COMMANDS[id].subcommands > 0 {
                            let sid = command_id(name).ok_or(ERR_UNKNOWN)?;
                            self.change(sid, true);
                        } else {
                            tracing::warn!("Deprecation warning: Allowing a first arg of an otherwise blocked command is a misuse of ACL and may get disabled in the future (offender: +{name})");
                            let list = self.first_args.entry(id).or_default();
                            if !list.iter().any(|a| a.eq_ignore_ascii_case(sub)) {
                                list.push(sub.to_string());
                            }
                        }
                    }
                }
                Ok(())
            }
            Some(b'-') if op.get(1) != Some(&b'@') => {
                let id = command_id(&lower[1..]).ok_or(ERR_UNKNOWN)?;
                self.change(id, false);
                Ok(())
            }
            Some(b'+') | Some(b'-') => {
                let cat = category_bit(&lower[2..]).ok_or(ERR_UNKNOWN)?;
                self.change_category(cat, op[0] == b'+');
                Ok(())
            }
            _ => Err(ERR_SYNTAX),
        }
    }

    /// The command rules as ACL SETUSER would recreate them (Redis's
    /// ACLDescribeSelectorCommandRules: start from +@all or -@all, apply the best-fitting
    /// categories, then single commands).
    fn describe_commands(&self) -> String {
        let mut rules = String::new();
        let additive = !self.future;
        let mut fake = Selector::new(false);
        if additive {
            rules.push_str("-@all ");
            let _ = fake.apply(b"-@all", false);
        } else {
            rules.push_str("+@all ");
            let _ = fake.apply(b"+@all", false);
        }
        let mut temp = self.clone();
        let mut applied = [false; 32];
        loop {
            let mut best = None;
            let mut mindiff = usize::MAX;
            let mut maxsame = 0;
            for (j, _) in CATEGORIES.iter().enumerate() {
                if applied[j] {
                    continue;
                }
                let (on, off) = temp.count_category(1 << j);
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < mindiff || (diff == mindiff && same > maxsame)) {
                    best = Some(j);
                    mindiff = diff;
                    maxsame = same;
                }
            }
            let Some(j) = best else { break };
            fake.change_category(1 << j, additive);
            temp.change_category(1 << j, !additive);
            rules.push_str(if additive { "+@" } else { "-@" });
            rules.push_str(CATEGORIES[j]);
            rules.push(' ');
            applied[j] = true;
        }
        for (id, c) in COMMANDS.iter().enumerate() {
            let user = self.bit(id);
            if user != fake.bit(id) {
                rules.push(if user { '+' } else { '-' });
                rules.push_str(c.name);
                rules.push(' ');
                fake.change(id, user);
            }
            if !user {
                if let Some(args) = self.first_args.get(&id) {
                    for a in args {
                        rules.push('+');
                        rules.push_str(c.name);
                        rules.push('|');
                        rules.push_str(a);
                        rules.push(' ');
                    }
                }
            }
        }
        rules.pop();
        rules
    }

    fn describe_keys(&self) -> String {
        if self.allkeys {
            return "~*".into();
        }
        let parts: Vec<String> = self.patterns.iter().map(pattern_text).collect();
        parts.join(" ")
    }

    fn describe_channels(&self) -> String {
        if self.allchannels {
            return "&*".into();
        }
        let parts: Vec<String> = self
            .channels
            .iter()
            .map(|c| format!("&{}", String::from_utf8_lossy(c)))
            .collect();
        parts.join(" ")
    }

    /// The selector as ACL LIST shows it.
    fn describe(&self) -> String {
        let mut s = String::new();
        if self.allkeys {
            s.push_str("~* ");
        } else {
            for p in &self.patterns {
                s.push_str(&pattern_text(p));
                s.push(' ');
            }
        }
        if self.allchannels {
            s.push_str("&* ");
        } else {
            s.push_str("resetchannels ");
            for c in &self.channels {
                s.push('&');
                s.push_str(&String::from_utf8_lossy(c));
                s.push(' ');
            }
        }
        s.push_str(&self.describe_commands());
        s
    }

    /// Whether this selector allows the command; on a key or channel denial, the argument
    /// position that failed.
    pub(crate) fn check(
        &self,
        id: usize,
        args: &[Bytes],
        keys: &[KeyRef],
    ) -> Result<(), (Denied, usize)> {
        let cmd = &COMMANDS[id];
        if !self.allcommands && !cmd.no_auth && !self.bit(id) {
            let idx = if cmd.parent.is_some() { 2 } else { 1 };
            let allowed = args.len() >= 2
                && self.first_args.get(&id).is_some_and(|list| {
                    args.get(idx)
                        .is_some_and(|a| list.iter().any(|f| a.eq_ignore_ascii_case(f.as_bytes())))
                });
            if !allowed {
                return Err((Denied::Command, 0));
            }
        }
        if !self.allkeys {
            for k in keys {
                let need = if k.read { READ } else { 0 } | if k.write { WRITE } else { 0 };
                let ok = self.patterns.iter().any(|(p, f)| {
                    f & need == need && crate::util::numtext::glob_match(p, &args[k.pos], false)
                });
                if !ok {
                    return Err((Denied::Key, k.pos));
                }
            }
        }
        if !self.allchannels {
            for (pos, is_pattern) in channels_of(cmd.name, args) {
                let ch = &args[pos];
                let ok = self.channels.iter().any(|p| {
                    if is_pattern {
                        p[..] == ch[..]
                    } else {
                        crate::util::numtext::glob_match(p, ch, false)
                    }
                });
                if !ok {
                    return Err((Denied::Channel, pos));
                }
            }
        }
        Ok(())
    }
}

fn pattern_text((pat, flags): &(Vec<u8>, u8)) -> String {
    let prefix = match *flags {
        f if f == READ | WRITE => "~",
        READ => "%R~",
        _ => "%W~",
    };
    format!("{prefix}{}", String::from_utf8_lossy(pat))
}

fn has_spaces(s: &[u8]) -> bool {
    s.iter().any(|&c| c.is_ascii_whitespace() || c == 0)
}

const ERR_UNKNOWN: &str = "Unknown command or category name in ACL";
const ERR_SYNTAX: &str = "Syntax error";
const ERR_KEYS_AFTER_ALL: &str = "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns";
const ERR_CHANNELS_AFTER_ALL: &str = "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels";
const ERR_NO_SUCH_PASSWORD: &str =
    "The password you are trying to remove from the user does not exist";
const ERR_BAD_HASH: &str = "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters";
const ERR_FIRSTARG_OF_SUB: &str = "Allowing first-arg of a subcommand is not supported";

/// A key a command names: its argument position and the access its key spec declares.
#[derive(Clone, Copy)]
pub(crate) struct KeyRef {
    pub pos: usize,
    pub read: bool,
    pub write: bool,
    /// The key spec's flags as COMMAND GETKEYSANDFLAGS names them (for SET and BITFIELD, whose
    /// spec says `variable_flags`, the ones these arguments give).
    pub flags: &'static [&'static str],
}

/// Channels a command publishes or subscribes to: (argument position, is a pattern).
fn channels_of(name: &str, args: &[Bytes]) -> Vec<(usize, bool)> {
    match name {
        "publish" | "spublish" => (args.len() > 1).then_some((1, false)).into_iter().collect(),
        "subscribe" | "ssubscribe" => (1..args.len()).map(|i| (i, false)).collect(),
        "psubscribe" => (1..args.len()).map(|i| (i, true)).collect(),
        _ => Vec::new(),
    }
}

/// The keys of a command as its key specs find them (Redis's getKeysUsingKeySpecs). A spec
/// Redis cannot evaluate from the arguments alone ("unknown") takes `fallback`'s positions
/// (Podium's own key finder) not already covered.
pub(crate) fn keys_of(id: usize, args: &[Bytes], fallback: &dyn Fn() -> Vec<usize>) -> Vec<KeyRef> {
    let by_specs = keys_by_specs(id, args, fallback);
    // A spec marked incomplete (MIGRATE's KEYS) means the specs alone may name arguments that
    // are not keys (MIGRATE's empty key before KEYS): Redis then asks the command's own key
    // finder, each key keeping its spec's access.
    if !COMMANDS[id]
        .keys
        .iter()
        .any(|k| k.flags.contains(&"incomplete"))
    {
        return by_specs;
    }
    let positions = fallback();
    if positions.is_empty() {
        return by_specs;
    }
    positions
        .into_iter()
        .filter_map(|pos| {
            let found = by_specs.iter().find(|k| k.pos == pos);
            found
                .or_else(|| by_specs.first())
                .map(|k| KeyRef { pos, ..*k })
        })
        .collect()
}

/// The keys of a command as its key specs alone place them (see [`keys_of`]).
fn keys_by_specs(id: usize, args: &[Bytes], fallback: &dyn Fn() -> Vec<usize>) -> Vec<KeyRef> {
    let cmd = &COMMANDS[id];
    // The access of the last spec Redis cannot evaluate from the arguments ("unknown"): the
    // keys only Podium's own finder gives (SORT's STORE key) are that spec's.
    let mut unknown: Option<(bool, bool, &'static [&'static str])> = None;
    let argc = args.len() as i64;
    let mut out: Vec<KeyRef> = Vec::new();
    for spec in cmd.keys {
        if spec.not_key {
            continue;
        }
        let (mut read, mut write) = (spec.read, spec.write);
        let mut flags = spec.flags;
        // SET and BITFIELD declare variable flags: SET reads only with GET, BITFIELD writes
        // only with SET/INCRBY.
        if cmd.name == "set" {
            read = args.iter().skip(3).any(|a| a.eq_ignore_ascii_case(b"get"));
            flags = if read {
                &["RW", "access", "update"]
            } else {
                &["OW", "update"]
            };
        } else if cmd.name == "bitfield" {
            write = args
                .iter()
                .skip(2)
                .any(|a| a.eq_ignore_ascii_case(b"set") || a.eq_ignore_ascii_case(b"incrby"));
            flags = if write {
                &["RW", "access", "update"]
            } else {
                &["RO", "access"]
            };
        }
        let first = match spec.begin {
            Begin::Index(i) => i64::from(i),
            Begin::Keyword(kw, start) => {
                let found = if start >= 0 {
                    (i64::from(start)..argc).find(|&i| args[i as usize].eq_ignore_ascii_case(kw))
                } else {
                    (1..=argc + i64::from(start))
                        .rev()
                        .find(|&i| args[i as usize].eq_ignore_ascii_case(kw))
                };
                match found {
                    Some(i) => i + 1,
                    None => continue,
                }
            }
            Begin::Unknown => {
                unknown = Some((read, write, flags));
                continue;
            }
        };
        if first >= argc {
            continue;
        }
        let (first, last, step) = match spec.find {
            Find::Range(lastkey, step, limit) => {
                let last = if lastkey >= 0 {
                    first + i64::from(lastkey)
                } else if limit == 0 {
                    argc + i64::from(lastkey)
                } else {
                    first + ((argc - first) / i64::from(limit) + i64::from(lastkey))
                };
                (first, last, i64::from(step.max(1)))
            }
            Find::Keynum(idx, firstkey, step) => {
                let at = first + i64::from(idx);
                let Some(n) = args
                    .get(at as usize)
                    .and_then(|a| std::str::from_utf8(a).ok())
                    .and_then(|s| s.parse::<i64>().ok())
                else {
                    continue;
                };
                if n <= 0 {
                    continue;
                }
                let start = first + i64::from(firstkey);
                let step = i64::from(step.max(1));
                let last = start.saturating_add((n - 1).saturating_mul(step));
                // More keys than arguments: a syntax error the command reports, no keys.
                if last >= argc {
                    continue;
                }
                (start, last, step)
            }
            Find::Unknown => {
                unknown = Some((read, write, flags));
                continue;
            }
        };
        let mut i = first;
        while i <= last && i < argc {
            out.push(KeyRef {
                pos: i as usize,
                read,
                write,
                flags,
            });
            i += step;
        }
    }
    if let Some((read, write, flags)) = unknown {
        for pos in fallback() {
            if !out.iter().any(|k| k.pos == pos) {
                out.push(KeyRef {
                    pos,
                    read,
                    write,
                    flags,
                });
            }
        }
    }
    out
}

/// A user: flags, password hashes, and selectors (the root one first).
#[derive(Clone)]
pub struct User {
    pub(crate) name: Vec<u8>,
    pub(crate) enabled: bool,
    pub(crate) nopass: bool,
    /// Set by ACL SETUSER `sanitize-payload`/`skip-sanitize-payload`: with
    /// `sanitize-dump-payload clients`, RESTORE from a user who skips gets the shallow check.
    sanitize: Option<bool>,
    passwords: Vec<[u8; 32]>,
    pub(crate) selectors: Vec<Selector>,
    /// Deleted or replaced by ACL DELUSER / ACL LOAD: clients using it are disconnected.
    pub(crate) deleted: Arc<AtomicBool>,
}

impl User {
    /// ACL's `skip-sanitize-payload`.
    pub(crate) fn skips_sanitize_payload(&self) -> bool {
        self.sanitize == Some(false)
    }

    fn new(name: &[u8], pubsub_all: bool) -> User {
        User {
            name: name.to_vec(),
            enabled: false,
            nopass: false,
            sanitize: None,
            passwords: Vec::new(),
            selectors: vec![Selector::new(pubsub_all)],
            deleted: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Apply one ACL SETUSER rule; Err is Redis's reason.
    fn apply(&mut self, op: &[u8], pubsub_all: bool) -> Result<(), &'static str> {
        if op.is_empty() {
            return Ok(());
        }
        let lower = String::from_utf8_lossy(op).to_ascii_lowercase();
        match lower.as_str() {
            "on" => self.enabled = true,
            "off" => self.enabled = false,
            "skip-sanitize-payload" => self.sanitize = Some(false),
            "sanitize-payload" => self.sanitize = Some(true),
            "nopass" => {
                self.nopass = true;
                self.passwords.clear();
            }
            "resetpass" => {
                self.nopass = false;
                self.passwords.clear();
            }
            "clearselectors" => self.selectors.truncate(1),
            "reset" => {
                self.apply(b"resetpass", pubsub_all)?;
                self.apply(b"resetkeys", pubsub_all)?;
                self.apply(b"resetchannels", pubsub_all)?;
                if pubsub_all {
                    self.apply(b"allchannels", pubsub_all)?;
                }
                self.enabled = false;
                self.sanitize = Some(true);
                self.selectors.truncate(1);
                self.apply(b"-@all", pubsub_all)?;
            }
            _ => match op[0] {
                b'>' | b'<' | b'#' | b'!' => {
                    let hash = if op[0] == b'>' || op[0] == b'<' {
                        sha256(&op[1..])
                    } else {
                        parse_hash(&op[1..]).ok_or(ERR_BAD_HASH)?
                    };
                    if op[0] == b'>' || op[0] == b'#' {
                        if !self.passwords.contains(&hash) {
                            self.passwords.push(hash);
                        }
                        self.nopass = false;
                    } else {
                        let before = self.passwords.len();
                        self.passwords.retain(|h| *h != hash);
                        if self.passwords.len() == before {
                            return Err(ERR_NO_SUCH_PASSWORD);
                        }
                    }
                }
                b'(' if op.ends_with(b")") => {
                    let mut sel = Selector::new(pubsub_all);
                    let inner = &op[1..op.len() - 1];
                    let words = crate::protocol::split_args(inner).ok_or(ERR_SYNTAX)?;
                    for w in words {
                        sel.apply(&w, pubsub_all)?;
                    }
                    self.selectors.push(sel);
                }
                _ => self.selectors[0].apply(op, pubsub_all)?,
            },
        }
        Ok(())
    }

    /// True when nothing is restricted (the fast path of [`check`]).
    pub(crate) fn unrestricted(&self) -> bool {
        self.selectors
            .iter()
            .any(|s| s.allcommands && s.allkeys && s.allchannels)
    }

    fn flags(&self) -> Vec<&'static str> {
        let mut f = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            f.push("nopass");
        }
        match self.sanitize {
            Some(false) => f.push("skip-sanitize-payload"),
            Some(true) => f.push("sanitize-payload"),
            None => {}
        }
        f
    }

    /// The user as ACL LIST shows it (without the leading `user <name> `).
    fn describe(&self) -> String {
        let mut s = String::new();
        for f in self.flags() {
            s.push_str(f);
            s.push(' ');
        }
        for h in &self.passwords {
            s.push('#');
            s.push_str(&hex(h));
            s.push(' ');
        }
        for (i, sel) in self.selectors.iter().enumerate() {
            if i == 0 {
                s.push_str(&sel.describe());
            } else {
                s.push_str(&format!(" ({})", sel.describe()));
            }
        }
        s
    }

    /// Check a command against every selector: Ok if one allows it, else the most relevant
    /// denial (Redis's choice: a key/channel over a command, the later argument first).
    pub(crate) fn check(
        &self,
        id: usize,
        args: &[Bytes],
        keys: &[KeyRef],
    ) -> Result<(), (Denied, usize)> {
        let mut relevant = (Denied::Command, 0);
        for s in &self.selectors {
            match s.check(id, args, keys) {
                Ok(()) => return Ok(()),
                Err((d, pos)) => {
                    if d > relevant.0 || (d == relevant.0 && pos > relevant.1) {
                        relevant = (d, pos);
                    }
                }
            }
        }
        Err(relevant)
    }

    fn password_ok(&self, pass: &[u8]) -> bool {
        if self.nopass {
            return true;
        }
        let candidate = sha256(pass);
        // Every stored hash is compared, each in constant time.
        let mut ok = false;
        for h in &self.passwords {
            ok |= constant_time_eq(h, &candidate);
        }
        ok
    }
}

/// A connection's user: shared with the user table so ACL SETUSER applies at once.
pub type UserRef = Arc<RwLock<User>>;

/// Counts changes made to users in place (ACL SETUSER, ACL LOAD, `requirepass`), so that a
/// client can remember that its user is unrestricted without taking the user's lock on every
/// command to ask again (two atomic operations per request):
/// what it remembered holds while this count has not moved.
static USERS_CHANGED: AtomicU64 = AtomicU64::new(1);

/// The current count of in-place user changes (see [`USERS_CHANGED`]).
pub(crate) fn users_changed() -> u64 {
    USERS_CHANGED.load(Ordering::Acquire)
}

/// A user was changed in place: what clients remembered of users is stale.
fn note_users_changed() {
    USERS_CHANGED.fetch_add(1, Ordering::Release);
}

fn sha256(data: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(data).into()
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    diff == 0
}

fn hex(h: &[u8]) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

/// A `#hash` argument: exactly 64 lowercase hex characters.
fn parse_hash(s: &[u8]) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        let hexdigit = |c: u8| if c <= b'9' { c - b'0' } else { c - b'a' + 10 };
        *o = hexdigit(s[2 * i]) << 4 | hexdigit(s[2 * i + 1]);
    }
    Some(out)
}

/// One ACL LOG entry.
struct LogEntry {
    count: u64,
    reason: Denied,
    context: &'static str,
    object: Vec<u8>,
    username: Vec<u8>,
    created_ms: i64,
    client_info: String,
}

/// The server's users and the ACL LOG.
pub struct Acl {
    users: RwLock<BTreeMap<Vec<u8>, UserRef>>,
    log: Mutex<VecDeque<LogEntry>>,
}

impl Acl {
    /// The default user (`+@all ~* &* on nopass`), with `requirepass` as its password.
    pub fn new(config: &crate::config::Config) -> Acl {
        let mut default = User::new(b"default", true);
        for op in ["+@all", "~*", "&*", "on", "nopass"] {
            let _ = default.apply(op.as_bytes(), true);
        }
        let acl = Acl {
            users: RwLock::new(BTreeMap::new()),
            log: Mutex::new(VecDeque::new()),
        };
        acl.users
            .write()
            .insert(b"default".to_vec(), Arc::new(RwLock::new(default)));
        acl.set_requirepass(&config.text(dir::REQUIREPASS));
        acl
    }

    pub fn default_user(&self) -> UserRef {
        self.get(b"default")
            .unwrap_or_else(|| Arc::new(RwLock::new(User::new(b"default", true))))
    }

    pub(crate) fn get(&self, name: &[u8]) -> Option<UserRef> {
        self.users.read().get(name).cloned()
    }

    /// `requirepass`: the default user's only password, or nopass when empty.
    pub(crate) fn set_requirepass(&self, pass: &str) {
        let u = self.default_user();
        let mut u = u.write();
        let _ = u.apply(b"resetpass", true);
        if pass.is_empty() {
            let _ = u.apply(b"nopass", true);
        } else {
            let mut op = b">".to_vec();
            op.extend_from_slice(pass.as_bytes());
            let _ = u.apply(&op, true);
        }
        note_users_changed();
    }

    /// ACL SETUSER: all rules or none. Err is the full error text (without "ERR "). Ok holds
    /// the channel patterns the user keeps when the change took channel permissions away
    /// from an existing user (its subscribers must then be checked, see
    /// [`disconnect_revoked_subscribers`]), None otherwise.
    pub(crate) fn set_user(
        &self,
        name: &[u8],
        rules: &[Bytes],
        pubsub_all: bool,
    ) -> Result<Option<Vec<Vec<u8>>>, String> {
        let merged = merge_selector_args(rules)?;
        let existing = self.get(name);
        let mut staged = match &existing {
            Some(u) => u.read().clone(),
            None => User::new(name, pubsub_all),
        };
        for op in &merged {
            staged.apply(op, pubsub_all).map_err(|e| {
                format!(
                    "Error in ACL SETUSER modifier '{}': {e}",
                    String::from_utf8_lossy(op)
                )
            })?;
        }
        match existing {
            Some(u) => {
                let mut u = u.write();
                let revoked = channels_revoked(&u, &staged);
                let deleted = u.deleted.clone();
                *u = staged;
                u.deleted = deleted;
                note_users_changed();
                Ok(revoked)
            }
            None => {
                self.users
                    .write()
                    .insert(name.to_vec(), Arc::new(RwLock::new(staged)));
                Ok(None)
            }
        }
    }

    /// ACL DELUSER of existing users: the count removed. Their clients are disconnected.
    pub(crate) fn delete(&self, names: &[Bytes]) -> usize {
        let mut users = self.users.write();
        let mut n = 0;
        for name in names {
            if let Some(u) = users.remove(&name[..]) {
                u.read().deleted.store(true, Ordering::SeqCst);
                note_users_changed();
                n += 1;
            }
        }
        n
    }

    pub(crate) fn names(&self) -> Vec<Vec<u8>> {
        self.users.read().keys().cloned().collect()
    }

    /// ACL LIST lines.
    pub(crate) fn list(&self) -> Vec<String> {
        self.users
            .read()
            .iter()
            .map(|(name, u)| {
                format!(
                    "user {} {}",
                    String::from_utf8_lossy(name),
                    u.read().describe()
                )
            })
            .collect()
    }

    /// Check credentials; Ok with the user to switch to.
    pub(crate) fn authenticate(&self, name: &[u8], pass: &[u8]) -> Option<UserRef> {
        let u = self.get(name)?;
        let ok = {
            let g = u.read();
            g.enabled && g.password_ok(pass)
        };
        ok.then_some(u)
    }

    /// Replace every user with `defs` (ACL LOAD, startup): each a `user <name> rules...`
    /// line's words after `user`. Err names the first problem; nothing changes then.
    pub(crate) fn replace_all(&self, defs: &[Vec<Bytes>], requirepass: &str) -> Result<(), String> {
        let fresh = Acl {
            users: RwLock::new(BTreeMap::new()),
            log: Mutex::new(VecDeque::new()),
        };
        let mut default = User::new(b"default", true);
        for op in ["+@all", "~*", "&*", "on", "nopass"] {
            let _ = default.apply(op.as_bytes(), true);
        }
        fresh
            .users
            .write()
            .insert(b"default".to_vec(), Arc::new(RwLock::new(default)));
        fresh.set_requirepass(requirepass);
        let mut seen: Vec<&[u8]> = Vec::new();
        for def in defs {
            let Some((name, rules)) = def.split_first() else {
                continue;
            };
            if has_spaces(name) {
                return Err("Usernames can't contain spaces or null characters".into());
            }
            if seen.contains(&&name[..]) {
                return Err(format!(
                    "Duplicate user '{}' found",
                    String::from_utf8_lossy(name)
                ));
            }
            seen.push(name);
            if name[..] == b"default"[..] {
                // A definition of the default user starts from scratch.
                fresh.set_user(name, &[Bytes::from_static(b"reset")], false)?;
            }
            fresh
                .set_user(name, rules, false)
                .map(|_| ())
                .map_err(|e| format!("{e}. User '{}'", String::from_utf8_lossy(name)))?;
        }
        let mut new_users = std::mem::take(&mut *fresh.users.write());
        let mut users = self.users.write();
        for (name, old) in users.iter() {
            if name[..] == b"default"[..] {
                // The default user keeps its identity (its clients stay connected) and takes
                // the new definition.
                if let Some(new_default) = new_users.get(name) {
                    let definition = new_default.read().clone();
                    let mut d = old.write();
                    let deleted = d.deleted.clone();
                    *d = definition;
                    d.deleted = deleted;
                    note_users_changed();
                }
                new_users.insert(name.clone(), old.clone());
            } else {
                // Every other user is replaced: its clients are disconnected, as Redis.
                old.read().deleted.store(true, Ordering::SeqCst);
            }
        }
        *users = new_users;
        note_users_changed();
        Ok(())
    }

    /// Record a denial in the ACL LOG (merging with a recent identical entry, as Redis).
    pub(crate) fn log_denial(
        &self,
        max_len: usize,
        reason: Denied,
        context: &'static str,
        object: &[u8],
        username: &[u8],
        client_info: String,
    ) {
        let now = crate::clock::unix_ms();
        let mut log = self.log.lock();
        let found = log.iter().take(10).position(|e| {
            e.reason == reason
                && e.context == context
                && (now - e.created_ms).abs() <= 60_000
                && e.object == object
                && e.username == username
        });
        if let Some(i) = found {
            if let Some(mut e) = log.remove(i) {
                e.count += 1;
                e.created_ms = now;
                e.client_info = client_info;
                log.push_front(e);
            }
            return;
        }
        log.push_front(LogEntry {
            count: 1,
            reason,
            context,
            object: object.to_vec(),
            username: username.to_vec(),
            created_ms: now,
            client_info,
        });
        while log.len() > max_len {
            log.pop_back();
        }
    }
}

/// Join `(` ... `)` arguments split by the client into one selector argument.
fn merge_selector_args(rules: &[Bytes]) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    let mut open: Option<(usize, Vec<u8>)> = None;
    for (i, op) in rules.iter().enumerate() {
        if let Some((_, sel)) = open.as_mut() {
            sel.push(b' ');
            sel.extend_from_slice(op);
            if op.ends_with(b")") {
                if let Some((_, sel)) = open.take() {
                    out.push(sel);
                }
            }
            continue;
        }
        if op.first() == Some(&b'(') && !op.ends_with(b")") {
            open = Some((i, op.to_vec()));
            continue;
        }
        out.push(op.to_vec());
    }
    if let Some((i, _)) = open {
        return Err(format!(
            "Unmatched parenthesis in acl selector starting at '{}'.",
            String::from_utf8_lossy(&rules[i])
        ));
    }
    Ok(out)
}

/// The ACL id of what `args` runs (`config|get` for a container with a known subcommand).
/// None when Redis's table lacks it (then ACL does not restrict it).
pub(crate) fn resolve(name: &str, args: &[Bytes]) -> Option<usize> {
    let id = command_id(name)?;
    if COMMANDS[id].subcommands > 0 && args.len() >= 2 {
        let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        return command_id(&format!("{name}|{sub}"));
    }
    Some(id)
}

/// Redis's arity check for a subcommand (`acl|getuser` takes exactly 3 arguments): the
/// wrong-arity error naming it, when `args` names a known subcommand with the wrong count.
pub(crate) fn subcommand_arity_error(name: &str, args: &[Bytes]) -> Option<crate::protocol::Reply> {
    let id = resolve(name, args)?;
    let cmd = &COMMANDS[id];
    cmd.parent?;
    (!crate::cmdspec::arity_ok(cmd.arity, args.len()))
        .then(|| crate::cmdspec::wrong_arity(cmd.name))
}

/// Full name of an ACL id (`config|get`).
pub(crate) fn full_name(id: usize) -> &'static str {
    COMMANDS[id].name
}

/// Redis's -NOPERM reply for a denial at the top level or inside MULTI.
pub(crate) fn noperm(denied: Denied, id: usize) -> crate::protocol::Reply {
    crate::protocol::Reply::Error(match denied {
        Denied::Command => format!(
            "NOPERM this user has no permissions to run the '{}' command",
            full_name(id)
        ),
        Denied::Key => {
            "NOPERM this user has no permissions to access one of the keys used as arguments".into()
        }
        _ => "NOPERM this user has no permissions to access one of the channels used as arguments"
            .into(),
    })
}

/// How a script's refused call is explained (Redis's getAclErrorMessage).
pub(crate) fn script_denial_text(denied: Denied) -> &'static str {
    match denied {
        Denied::Command => "can't run this command or subcommand",
        Denied::Key => "can't access at least one of the keys mentioned in the command arguments",
        Denied::Channel => "can't publish to the channel mentioned in the command",
        Denied::Auth => "lacking the permissions for the command",
    }
}

/// When `new` takes channel permissions away from `old`, the channel patterns of every
/// selector of `new` (what a subscription must still match); None when no subscriber of the
/// user can have lost access: some selector of `new` allows every channel, or every pattern
/// of `old` is still listed in `new` (Redis's ACLKillPubsubClientsIfNeeded shortcuts).
fn channels_revoked(old: &User, new: &User) -> Option<Vec<Vec<u8>>> {
    if new.selectors.iter().any(|s| s.allchannels) {
        return None;
    }
    let upcoming: Vec<Vec<u8>> = new
        .selectors
        .iter()
        .flat_map(|s| s.channels.iter().cloned())
        .collect();
    let kept = old
        .selectors
        .iter()
        .all(|s| !s.allchannels && s.channels.iter().all(|c| upcoming.contains(c)));
    (!kept).then_some(upcoming)
}

/// Whether a subscription (`pattern`: a PSUBSCRIBE pattern, matched literally as Redis
/// does; otherwise a channel, matched against the glob patterns) is allowed by `upcoming`.
pub(crate) fn subscription_allowed(upcoming: &[Vec<u8>], name: &[u8], pattern: bool) -> bool {
    upcoming.iter().any(|p| {
        if pattern {
            p[..] == name[..]
        } else {
            crate::util::numtext::glob_match(p, name, false)
        }
    })
}

/// The ACL subsystem's replies that read the user table (ACL command, see commands::acl).
pub(crate) mod view {
    use super::*;
    use crate::protocol::Reply;

    fn selector_fields(s: &Selector) -> Vec<(Reply, Reply)> {
        vec![
            (
                Reply::bulk_slice(b"commands"),
                Reply::bulk(s.describe_commands().into_bytes()),
            ),
            (
                Reply::bulk_slice(b"keys"),
                Reply::bulk(s.describe_keys().into_bytes()),
            ),
            (
                Reply::bulk_slice(b"channels"),
                Reply::bulk(s.describe_channels().into_bytes()),
            ),
        ]
    }

    /// ACL GETUSER's map.
    pub(crate) fn getuser(u: &User) -> Reply {
        let mut fields = vec![
            (
                Reply::bulk_slice(b"flags"),
                Reply::Set(
                    u.flags()
                        .into_iter()
                        .map(|f| Reply::bulk(f.as_bytes().to_vec()))
                        .collect(),
                ),
            ),
            (
                Reply::bulk_slice(b"passwords"),
                Reply::Array(
                    u.passwords
                        .iter()
                        .map(|h| Reply::bulk(hex(h).into_bytes()))
                        .collect(),
                ),
            ),
        ];
        fields.extend(selector_fields(&u.selectors[0]));
        fields.push((
            Reply::bulk_slice(b"selectors"),
            Reply::Array(
                u.selectors[1..]
                    .iter()
                    .map(|s| Reply::Map(selector_fields(s)))
                    .collect(),
            ),
        ));
        Reply::Map(fields)
    }

    /// ACL LOG [count].
    pub(crate) fn log(acl: &Acl, count: usize) -> Reply {
        let now = crate::clock::unix_ms();
        let log = acl.log.lock();
        Reply::Array(
            log.iter()
                .take(count)
                .map(|e| {
                    let reason: &[u8] = match e.reason {
                        Denied::Command => b"command",
                        Denied::Key => b"key",
                        Denied::Channel => b"channel",
                        Denied::Auth => b"auth",
                    };
                    Reply::Map(vec![
                        (Reply::bulk_slice(b"count"), Reply::Int(e.count as i64)),
                        (Reply::bulk_slice(b"reason"), Reply::bulk_slice(reason)),
                        (
                            Reply::bulk_slice(b"context"),
                            Reply::bulk(e.context.as_bytes().to_vec()),
                        ),
                        (Reply::bulk_slice(b"object"), Reply::bulk(e.object.clone())),
                        (
                            Reply::bulk_slice(b"username"),
                            Reply::bulk(e.username.clone()),
                        ),
                        (
                            Reply::bulk_slice(b"age-seconds"),
                            Reply::Double((now - e.created_ms) as f64 / 1000.0),
                        ),
                        (
                            Reply::bulk_slice(b"client-info"),
                            Reply::bulk(e.client_info.clone().into_bytes()),
                        ),
                    ])
                })
                .collect(),
        )
    }

    pub(crate) fn reset_log(acl: &Acl) {
        acl.log.lock().clear();
    }

    /// ACL CAT <category>: every command and subcommand in it.
    pub(crate) fn category(name: &str) -> Option<Vec<&'static str>> {
        let bit = category_bit(name)?;
        Some(
            COMMANDS
                .iter()
                .filter(|c| c.categories & bit != 0)
                .map(|c| c.name)
                .collect(),
        )
    }

    /// The categories of a command (COMMAND INFO / DOCS).
    /// Redis's table row of a command or `container|sub` subcommand.
    pub(crate) fn command_row(name: &str) -> Option<&'static crate::cmdspec::AclCommand> {
        command_id(name).map(|id| &COMMANDS[id])
    }

    /// The rows of a container's subcommands.
    pub(crate) fn subcommand_rows(name: &str) -> &'static [crate::cmdspec::AclCommand] {
        match command_id(name) {
            Some(id) => &COMMANDS[id + 1..=id + COMMANDS[id].subcommands],
            None => &[],
        }
    }

    /// The key-spec flags of the keys at `positions` of `args` (a whole command, container
    /// and subcommand included), for COMMAND GETKEYSANDFLAGS. `name` is the row's name.
    pub(crate) fn key_flags(
        name: &str,
        args: &[Bytes],
        positions: &[usize],
    ) -> Vec<&'static [&'static str]> {
        let Some(id) = command_id(name) else {
            return vec![&[]; positions.len()];
        };
        let found = keys_of(id, args, &|| positions.to_vec());
        let first: &'static [&'static str] = COMMANDS[id]
            .keys
            .iter()
            .find(|k| !k.not_key)
            .map_or(&[], |k| k.flags);
        positions
            .iter()
            .map(|p| {
                found
                    .iter()
                    .find(|k| k.pos == *p)
                    .map_or(first, |k| k.flags)
            })
            .collect()
    }

    pub(crate) fn categories_of(name: &str) -> Vec<&'static str> {
        command_id(name)
            .map(|id| {
                CATEGORIES
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| COMMANDS[id].categories & (1 << i) != 0)
                    .map(|(_, c)| *c)
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(rules: &[&str]) -> User {
        let mut u = User::new(b"u", false);
        for r in rules {
            u.apply(r.as_bytes(), false).unwrap();
        }
        u
    }

    fn args(a: &[&str]) -> Vec<Bytes> {
        a.iter().map(|s| Bytes::from(s.to_string())).collect()
    }

    fn allowed(u: &User, a: &[&str]) -> Result<(), (Denied, usize)> {
        let a = args(a);
        let name = String::from_utf8_lossy(&a[0]).to_ascii_lowercase();
        let id = resolve(&name, &a).expect("known command");
        let keys = keys_of(id, &a, &Vec::new);
        u.check(id, &a, &keys)
    }

    #[test]
    fn table_fits_the_bitmap() {
        assert!(COMMANDS.len() < WORDS * 64);
        assert!(command_id("config|get").is_some());
        assert_eq!(COMMANDS[command_id("config").unwrap()].subcommands, {
            COMMANDS
                .iter()
                .filter(|c| c.name.starts_with("config|"))
                .count()
        });
    }

    #[test]
    fn commands_categories_and_subcommands() {
        let u = user(&["+@all", "-@dangerous", "+get", "~*"]);
        assert!(allowed(&u, &["get", "k"]).is_ok());
        assert_eq!(allowed(&u, &["flushall"]).unwrap_err().0, Denied::Command);
        let u = user(&["-@all", "+config|get", "~*"]);
        assert!(allowed(&u, &["config", "get", "x"]).is_ok());
        assert!(allowed(&u, &["config", "set", "x", "y"]).is_err());
        let u = user(&["-@all", "+select|0"]);
        assert!(allowed(&u, &["select", "0"]).is_ok());
        assert!(allowed(&u, &["select", "1"]).is_err());
        assert_eq!(u.selectors[0].describe_commands(), "-@all +select|0");
    }

    #[test]
    fn key_permissions_follow_key_specs() {
        let u = user(&["+@all", "%R~r*", "%W~w*", "~rw*"]);
        assert!(allowed(&u, &["get", "r1"]).is_ok());
        assert_eq!(allowed(&u, &["get", "w1"]).unwrap_err(), (Denied::Key, 1));
        assert!(allowed(&u, &["set", "w1", "v"]).is_ok());
        // SET ... GET also reads.
        assert!(allowed(&u, &["set", "w1", "v", "get"]).is_err());
        assert!(allowed(&u, &["set", "rw1", "v", "get"]).is_ok());
        // ZUNIONSTORE: destination written, sources (counted by numkeys) read.
        assert!(allowed(&u, &["zunionstore", "w", "2", "r1", "r2"]).is_ok());
        assert_eq!(
            allowed(&u, &["zunionstore", "w", "2", "r1", "w2"]).unwrap_err(),
            (Denied::Key, 4)
        );
    }

    #[test]
    fn describe_round_trips_single_categories() {
        for cat in CATEGORIES {
            let u = user(&["+@all", &format!("-@{cat}")]);
            assert_eq!(u.selectors[0].describe_commands(), format!("+@all -@{cat}"));
            let u = user(&["-@all", &format!("+@{cat}")]);
            assert_eq!(u.selectors[0].describe_commands(), format!("-@all +@{cat}"));
        }
        let u = user(&["+@all", "-client|kill"]);
        assert_eq!(u.selectors[0].describe_commands(), "+@all -client|kill");
    }

    #[test]
    fn passwords_and_errors() {
        let mut u = user(&[">secret", "on"]);
        assert!(u.password_ok(b"secret"));
        assert!(!u.password_ok(b"Secret"));
        assert_eq!(u.apply(b"<nope", false), Err(ERR_NO_SUCH_PASSWORD));
        assert_eq!(u.apply(b"#abc", false), Err(ERR_BAD_HASH));
        let h = hex(&sha256(b"other"));
        u.apply(format!("#{h}").as_bytes(), false).unwrap();
        assert!(u.password_ok(b"other"));
        assert_eq!(u.apply(b"+nosuchcommand", false), Err(ERR_UNKNOWN));
        assert_eq!(u.apply(b"+config|get|x", false), Err(ERR_FIRSTARG_OF_SUB));
        assert_eq!(u.apply(b"bogus", false), Err(ERR_SYNTAX));
        u.apply(b"~*", false).unwrap();
        assert_eq!(u.apply(b"~x", false), Err(ERR_KEYS_AFTER_ALL));
    }

    #[test]
    fn selectors_are_alternatives() {
        let mut u = user(&["-@all"]);
        u.apply(b"(+@write ~write::*)", false).unwrap();
        u.apply(b"(+@read ~read::*)", false).unwrap();
        assert!(allowed(&u, &["set", "write::a", "1"]).is_ok());
        assert!(allowed(&u, &["get", "read::a"]).is_ok());
        assert_eq!(
            allowed(&u, &["get", "write::a"]).unwrap_err().0,
            Denied::Key
        );
        assert_eq!(allowed(&u, &["ping"]).unwrap_err().0, Denied::Command);
    }

    #[test]
    fn channels() {
        let u = user(&["+@all", "~*", "resetchannels", "&news.*"]);
        assert!(allowed(&u, &["publish", "news.1", "x"]).is_ok());
        assert_eq!(
            allowed(&u, &["publish", "sport", "x"]).unwrap_err(),
            (Denied::Channel, 1)
        );
        // A PSUBSCRIBE pattern must equal an allowed pattern literally.
        assert!(allowed(&u, &["psubscribe", "news.*"]).is_ok());
        assert!(allowed(&u, &["psubscribe", "news.1*"]).is_err());
    }
}
