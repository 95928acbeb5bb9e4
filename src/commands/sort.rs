//! SORT and SORT_RO: sort the elements of a list, set or sorted set, optionally by the values
//! of other keys, and return them (or fields of other keys) or store them as a list.
//!
//! `SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC] [ALPHA]
//! [STORE destination]`
//!
//! Semantics follow Redis 7.0's `sort.c`:
//! - Numeric order (the default) reads each element, or its BY value, as a double the way
//!   strtod does (leading blanks allowed, an empty string is 0); anything else, or NaN, fails
//!   the whole command with "One or more scores can't be converted into double". Equal scores
//!   are ordered by the elements' bytes, so the result is deterministic. A BY key that does not
//!   exist counts as 0.
//! - ALPHA compares bytes; with BY, a missing BY value sorts first.
//! - A pattern's first `*` is replaced by the element; `key->field` reads a hash field; `#` is
//!   the element itself. A BY pattern without `*` means "don't sort": the elements come in the
//!   container's order (reversed by DESC for a list or sorted set), except that a set is still
//!   sorted (ALPHA) when the result is stored, so that a replay of the AOF stores the same list.
//! - LIMIT selects after sorting; STORE writes the result as a list (missing GET values as
//!   empty strings), deletes the destination when the result is empty, and replies the count.
//!
//! Patterns can name any key of the database, so both commands lock the whole database.

use super::args::{eq, int, SYNTAX};
use super::flags::*;
use super::{CmdResult, Ctx, Keys, Spec};
use crate::protocol::Reply;
use crate::types::list::List;
use crate::types::{Value, WRONGTYPE};
use crate::util::numtext::parse_f64;
use bytes::Bytes;
use std::cmp::Ordering;

pub static COMMANDS: &[Spec] = &[
    Spec::new(
        "sort",
        -2,
        WRITE | DENYOOM,
        Keys::DbNamed(sort_keys),
        sort,
        "generic",
    ),
    Spec::new(
        "sort_ro",
        -2,
        READONLY,
        Keys::DbNamed(sort_keys),
        sort,
        "generic",
    ),
];

/// The key sorted and, for SORT, the destination of its last STORE (as Redis's sortGetKeys,
/// which skips the other options with their arguments).
fn sort_keys(a: &[Bytes]) -> Vec<usize> {
    let mut keys = vec![1];
    let mut store = None;
    let mut i = 2;
    while i < a.len() {
        let skip = if eq(&a[i], "limit") {
            2
        } else if eq(&a[i], "get") || eq(&a[i], "by") {
            1
        } else if eq(&a[i], "store") {
            store = Some(i + 1);
            1
        } else {
            0
        };
        i += skip + 1;
    }
    if !eq(&a[0], "sort_ro") {
        keys.extend(store.filter(|&s| s < a.len()));
    }
    keys
}

/// The parsed options.
struct Options<'a> {
    by: Option<&'a [u8]>,
    dont_sort: bool,
    limit: Option<(i64, i64)>,
    gets: Vec<&'a [u8]>,
    desc: bool,
    alpha: bool,
    store: Option<&'a Bytes>,
}

/// `full_key_access`: the client's ACL user may read every key (BY and GET patterns name keys
/// no ACL check saw, so Redis refuses them otherwise).
fn parse_options<'a>(
    a: &'a [Bytes],
    read_only: bool,
    full_key_access: bool,
) -> Result<Options<'a>, Reply> {
    let mut o = Options {
        by: None,
        dont_sort: false,
        limit: None,
        gets: Vec::new(),
        desc: false,
        alpha: false,
        store: None,
    };
    let mut i = 2;
    while i < a.len() {
        let left = a.len() - i - 1;
        if eq(&a[i], "asc") {
            o.desc = false;
        } else if eq(&a[i], "desc") {
            o.desc = true;
        } else if eq(&a[i], "alpha") {
            o.alpha = true;
        } else if eq(&a[i], "limit") && left >= 2 {
            let offset = int(&a[i + 1])?;
            let count = int(&a[i + 2])?;
            o.limit = Some((offset, count));
            i += 2;
        } else if eq(&a[i], "store") && left >= 1 && !read_only {
            o.store = Some(&a[i + 1]);
            i += 1;
        } else if eq(&a[i], "by") && left >= 1 {
            let p = &a[i + 1][..];
            // Without a `*` every element would read the same key: nothing to sort by.
            o.dont_sort = !p.contains(&b'*');
            if !o.dont_sort && !full_key_access {
                return Err(Reply::error(
                    "ERR BY option of SORT denied due to insufficient ACL permissions.",
                ));
            }
            o.by = Some(p);
            i += 1;
        } else if eq(&a[i], "get") && left >= 1 {
            if !full_key_access {
                return Err(Reply::error(
                    "ERR GET option of SORT denied due to insufficient ACL permissions.",
                ));
            }
            o.gets.push(&a[i + 1]);
            i += 1;
        } else {
            return Err(Reply::error(SYNTAX));
        }
        i += 1;
    }
    Ok(o)
}

/// What `pattern` names for `element`: the element itself for `#`, else the string value of
/// the key (or the hash field after `->`) with the first `*` replaced; None if there is no
/// `*`, the key is missing or of the other type, or the field is absent.
fn lookup_pattern(ctx: &mut Ctx, pattern: &[u8], element: &[u8]) -> Option<Vec<u8>> {
    if pattern == b"#" {
        return Some(element.to_vec());
    }
    let star = pattern.iter().position(|&c| c == b'*')?;
    // `->` after the `*` with something after it selects a hash field.
    let arrow = pattern[star + 1..]
        .windows(2)
        .position(|w| w == b"->")
        .map(|p| p + star + 1)
        .filter(|&p| p + 2 < pattern.len());
    let key_end = arrow.unwrap_or(pattern.len());
    let mut key = Vec::with_capacity(key_end + element.len());
    key.extend_from_slice(&pattern[..star]);
    key.extend_from_slice(element);
    key.extend_from_slice(&pattern[star + 1..key_end]);
    let mut db = ctx.db();
    match (db.read(&key)?, arrow) {
        (Value::Str(s), None) => Some(s.to_vec()),
        (Value::Hash(h), Some(p)) => h.get(&pattern[p + 2..]).map(|v| v.to_vec()),
        _ => None,
    }
}

/// A double as strtod reads it for SORT: None on garbage, NaN or a range error.
fn sort_score(s: &[u8]) -> Option<f64> {
    if s.is_empty() {
        return Some(0.0);
    }
    let start = s
        .iter()
        .position(|c| !matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))?;
    parse_f64(&s[start..])
}

/// One element being sorted and what it is compared by.
struct Item {
    element: Vec<u8>,
    score: f64,
    /// ALPHA with BY: the BY value (None sorts first).
    by_value: Option<Vec<u8>>,
}

fn sort(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let read_only = eq(&a[0], "sort_ro");
    let full_key_access = crate::commands::acl::full_read_access(
        ctx.client,
        if read_only { "sort_ro" } else { "sort" },
        a,
    );
    let mut o = parse_options(a, read_only, full_key_access)?;
    // Take the elements in the container's order (reversed by DESC for a list or sorted set
    // that is not sorted again).
    let in_script = ctx.client.in_script;
    let elements: Vec<Vec<u8>> = {
        let mut db = ctx.db();
        match db.read(&a[1]) {
            None => Vec::new(),
            Some(Value::List(l)) => {
                let mut v: Vec<Vec<u8>> = l.iter().map(<[u8]>::to_vec).collect();
                if o.dont_sort && o.desc {
                    v.reverse();
                }
                v
            }
            Some(Value::Set(s)) => {
                if o.dont_sort && (o.store.is_some() || in_script) {
                    // A set's order is arbitrary: sort it so that a replay stores the same list
                    // and a script sees the same order every time (Redis does both).
                    o.dont_sort = false;
                    o.alpha = true;
                    o.by = None;
                }
                s.iter().map(|m| m.to_vec()).collect()
            }
            Some(Value::ZSet(z)) => {
                let mut v: Vec<Vec<u8>> = z.iter().map(|(m, _)| m.to_vec()).collect();
                if o.dont_sort && o.desc {
                    v.reverse();
                }
                v
            }
            Some(_) => return Err(Reply::error(WRONGTYPE)),
        }
    };
    let mut items = Vec::with_capacity(elements.len());
    for element in elements {
        items.push(Item {
            element,
            score: 0.0,
            by_value: None,
        });
    }
    if !o.dont_sort {
        for it in items.iter_mut() {
            let by = match o.by {
                Some(p) => lookup_pattern(ctx, p, &it.element),
                None => None,
            };
            if o.alpha {
                it.by_value = by;
            } else {
                let text = match (&by, o.by) {
                    (Some(v), _) => &v[..],
                    // A missing BY key: score 0.
                    (None, Some(_)) => continue,
                    (None, None) => &it.element[..],
                };
                match sort_score(text) {
                    Some(v) if !v.is_nan() => it.score = v,
                    _ => {
                        return Err(Reply::error(
                            "ERR One or more scores can't be converted into double",
                        ))
                    }
                }
            }
        }
        let (alpha, by, desc) = (o.alpha, o.by.is_some(), o.desc);
        items.sort_by(|x, y| {
            let c = if !alpha {
                x.score
                    .partial_cmp(&y.score)
                    .unwrap_or(Ordering::Equal)
                    .then_with(|| x.element.cmp(&y.element))
            } else if by {
                match (&x.by_value, &y.by_value) {
                    (None, None) => Ordering::Equal,
                    (None, Some(_)) => Ordering::Less,
                    (Some(_), None) => Ordering::Greater,
                    (Some(p), Some(q)) => p.cmp(q),
                }
            } else {
                x.element.cmp(&y.element)
            };
            if desc {
                c.reverse()
            } else {
                c
            }
        });
    }
    // LIMIT, with Redis's clamping.
    let n = items.len() as i64;
    let (start, end) = match o.limit {
        None => (0, n - 1),
        Some((offset, count)) => {
            let mut start = offset.max(0);
            let mut end = if count < 0 {
                n - 1
            } else {
                start.saturating_add(count) - 1
            };
            if start >= n {
                start = n - 1;
                end = n - 2;
            }
            (start, end.min(n - 1))
        }
    };
    let selected: &[Item] = if end >= start && start >= 0 {
        &items[start as usize..=end as usize]
    } else {
        &[]
    };
    // The output: each element, or one value per GET pattern.
    let mut out: Vec<Option<Vec<u8>>> = Vec::new();
    for it in selected {
        if o.gets.is_empty() {
            out.push(Some(it.element.clone()));
        }
        for p in &o.gets {
            out.push(lookup_pattern(ctx, p, &it.element));
        }
    }
    match o.store {
        None => Ok(Reply::Array(
            out.into_iter()
                .map(|v| match v {
                    Some(v) => Reply::Bulk(Bytes::from(v)),
                    None => Reply::Null,
                })
                .collect(),
        )),
        Some(dest) => {
            let count = out.len();
            let mut db = ctx.db();
            if count > 0 {
                let mut l = List::new();
                for v in out {
                    l.push_back(&v.unwrap_or_default());
                }
                db.insert(dest, Value::List(l));
                db.modified(dest);
                db.notify(crate::notify::LIST, "sortstore", dest);
                ctx.dirty += count as u64;
            } else if db.remove(dest).is_some() {
                db.modified(dest);
                db.notify(crate::notify::GENERIC, "del", dest);
                ctx.dirty += 1;
            }
            Ok(Reply::Int(count as i64))
        }
    }
}
