//! The GEO family: members placed by longitude and latitude in a sorted set.
//!
//! A geo set is a plain sorted set whose scores are 52-bit geohashes (`types::geohash` owns the
//! arithmetic). GEOADD is ZADD over those scores, as in Redis: it takes ZADD's NX, XX and CH,
//! raises ZADD's keyspace event, and is logged to the AOF as the ZADD it amounts to. GEOPOS,
//! GEOHASH and GEODIST decode members' scores. The searches (GEORADIUS, GEORADIUSBYMEMBER, their
//! _RO forms, GEOSEARCH and GEOSEARCHSTORE) share one routine that parses the options in Redis's
//! order (so the same bad request gets the same error), covers the shape with Redis's nine
//! cells, reads each cell's members with one score-range lookup on the sorted set, keeps those
//! inside the shape, sorts by distance when asked, and replies or stores (STORE/STOREDIST, with
//! the `georadiusstore`/`geosearchstore` event; the command itself is what the AOF logs).

use super::args::{eq, float, int, SYNTAX};
use super::flags::*;
use super::{CmdResult, Ctx, Keys, Spec};
use crate::protocol::{Reply, Resp};
use crate::types::geohash::{self, Shape, ShapeKind};
use crate::types::zset::{ScoreBound, ScoreRange, ZSet};
use crate::types::{Value, WRONGTYPE};
use crate::util::numtext::LongDouble;
use bytes::Bytes;

const G: &str = "geo";

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    Spec::new("geoadd", -5, WRITE | DENYOOM, Keys::Range(1, 1, 1), geoadd, G),
    Spec::new("geodist", -4, READONLY, Keys::Range(1, 1, 1), geodist, G),
    Spec::new("geohash", -2, READONLY, Keys::Range(1, 1, 1), geohash_cmd, G),
    Spec::new("geopos", -2, READONLY, Keys::Range(1, 1, 1), geopos, G),
    Spec::new("georadius", -6, WRITE | DENYOOM | MOVABLE_KEYS, Keys::Custom(radius_keys), georadius, G),
    Spec::new("georadius_ro", -6, READONLY, Keys::Range(1, 1, 1), georadius_ro, G),
    Spec::new("georadiusbymember", -5, WRITE | DENYOOM | MOVABLE_KEYS, Keys::Custom(radius_keys), georadiusbymember, G),
    Spec::new("georadiusbymember_ro", -5, READONLY, Keys::Range(1, 1, 1), georadiusbymember_ro, G),
    Spec::new("geosearch", -7, READONLY, Keys::Range(1, 1, 1), geosearch, G),
    Spec::new("geosearchstore", -8, WRITE | DENYOOM, Keys::Range(1, 2, 1), geosearchstore, G),
];

/// GEORADIUS[BYMEMBER]'s keys: the source, and the last STORE/STOREDIST key (Redis's
/// `georadiusGetKeys`, which scans from argument 5).
fn radius_keys(args: &[Bytes]) -> Vec<usize> {
    let mut keys = vec![1];
    if let Some(store) = store_key_index(args) {
        keys.push(store);
    }
    keys
}

fn store_key_index(args: &[Bytes]) -> Option<usize> {
    let mut found = None;
    let mut i = 5;
    while i < args.len() {
        if (eq(&args[i], "store") || eq(&args[i], "storedist")) && i + 1 < args.len() {
            found = Some(i + 1);
            i += 1;
        }
        i += 1;
    }
    found
}

fn as_zset(v: Option<&mut Value>) -> Result<Option<&mut ZSet>, Reply> {
    match v {
        None => Ok(None),
        Some(Value::ZSet(z)) => Ok(Some(z)),
        Some(_) => Err(Reply::error(WRONGTYPE)),
    }
}

/// GEOADD key [NX|XX] [CH] longitude latitude member [longitude latitude member ...]
fn geoadd(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let (mut nx, mut xx) = (false, false);
    let mut first = 2;
    while first < a.len() {
        if eq(&a[first], "nx") {
            nx = true;
        } else if eq(&a[first], "xx") {
            xx = true;
        } else if !eq(&a[first], "ch") {
            break;
        }
        first += 1;
    }
    if !(a.len() - first).is_multiple_of(3) || (nx && xx) {
        return Err(Reply::error(SYNTAX));
    }
    let mut zadd: Vec<Bytes> = Vec::with_capacity(first + (a.len() - first) / 3 * 2);
    zadd.push(Bytes::from_static(b"zadd"));
    zadd.extend_from_slice(&a[1..first]);
    for triple in a[first..].chunks(3) {
        let (lon, lat) = lon_lat(&triple[0], &triple[1])?;
        let score = geohash::score_of(lon, lat).unwrap_or(0);
        zadd.push(Bytes::from(score.to_string()));
        zadd.push(triple[2].clone());
    }
    let reply = super::zset::zadd(ctx, &zadd);
    if ctx.dirty > 0 {
        ctx.propagate_as(vec![zadd]);
    }
    reply
}

/// A longitude and latitude argument pair, checked against the GEO bounds.
fn lon_lat(lon: &[u8], lat: &[u8]) -> Result<(f64, f64), Reply> {
    let lon = float(lon)?;
    let lat = float(lat)?;
    if !(geohash::LONG_MIN..=geohash::LONG_MAX).contains(&lon)
        || !(geohash::LAT_MIN..=geohash::LAT_MAX).contains(&lat)
    {
        return Err(Reply::error(format!(
            "ERR invalid longitude,latitude pair {lon:.6},{lat:.6}"
        )));
    }
    Ok((lon, lat))
}

/// Meters per unit.
fn unit(u: &[u8]) -> Result<f64, Reply> {
    if eq(u, "m") {
        Ok(1.0)
    } else if eq(u, "km") {
        Ok(1000.0)
    } else if eq(u, "ft") {
        Ok(0.3048)
    } else if eq(u, "mi") {
        Ok(1609.34)
    } else {
        Err(Reply::error(
            "ERR unsupported unit provided. please use M, KM, FT, MI",
        ))
    }
}

fn float_or(a: &[u8], msg: &str) -> Result<f64, Reply> {
    float(a).map_err(|_| Reply::error(msg))
}

/// `radius unit`: (meters per unit, radius).
fn radius_arg(a: &[Bytes]) -> Result<(f64, f64), Reply> {
    let r = float_or(&a[0], "ERR need numeric radius")?;
    if r < 0.0 {
        return Err(Reply::error("ERR radius cannot be negative"));
    }
    Ok((unit(&a[1])?, r))
}

/// `width height unit`: (meters per unit, width, height).
fn box_arg(a: &[Bytes]) -> Result<(f64, f64, f64), Reply> {
    let w = float_or(&a[0], "ERR need numeric width")?;
    let h = float_or(&a[1], "ERR need numeric height")?;
    if h < 0.0 || w < 0.0 {
        return Err(Reply::error("ERR height or width cannot be negative"));
    }
    Ok((unit(&a[2])?, w, h))
}

/// Redis's 4-decimal distance text (`fixedpoint_d2string(..., 4)`): rounded to the nearest
/// ten-thousandth (ties to even, as llrint does) and printed with exactly four decimals.
fn distance_text(d: f64) -> Bytes {
    if d == 0.0 {
        return Bytes::from_static(b"0.0000");
    }
    let scaled = (d * 10000.0).round_ties_even();
    let neg = scaled < 0.0;
    // llrint's result; distances are far below the i64 range.
    let v = scaled.abs() as u64;
    let sign = if neg { "-" } else { "" };
    Bytes::from(format!("{sign}{}.{:04}", v / 10000, v % 10000))
}

/// A coordinate as Redis prints it (`addReplyHumanLongDouble`): `%.17Lf` with trailing zeros
/// removed, a bulk string in RESP2 and a double in RESP3.
fn coordinate(v: f64, resp: Resp) -> Reply {
    let text = LongDouble::from_f64(v).format_human().unwrap_or_default();
    match resp {
        Resp::V2 => Reply::Bulk(Bytes::from(text)),
        Resp::V3 => {
            let mut raw = Vec::with_capacity(text.len() + 3);
            raw.push(b',');
            raw.extend_from_slice(&text);
            raw.extend_from_slice(b"\r\n");
            Reply::Raw(Bytes::from(raw))
        }
    }
}

fn position_reply(lon: f64, lat: f64, resp: Resp) -> Reply {
    Reply::Array(vec![coordinate(lon, resp), coordinate(lat, resp)])
}

/// GEOPOS key member...
fn geopos(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let resp = ctx.client.resp;
    let mut db = ctx.db();
    let z = as_zset(db.read(&a[1]))?;
    let out = a[2..]
        .iter()
        .map(|m| match z.as_ref().and_then(|z| z.score(m)) {
            Some(s) => {
                let (lon, lat) = geohash::position_of_score(s);
                position_reply(lon, lat, resp)
            }
            None => Reply::NullArray,
        })
        .collect();
    Ok(Reply::Array(out))
}

/// GEOHASH key member...
fn geohash_cmd(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let mut db = ctx.db();
    let z = as_zset(db.read(&a[1]))?;
    let out = a[2..]
        .iter()
        .map(|m| match z.as_ref().and_then(|z| z.score(m)) {
            Some(s) => Reply::Bulk(Bytes::copy_from_slice(&geohash::geohash_text(s))),
            None => Reply::Null,
        })
        .collect();
    Ok(Reply::Array(out))
}

/// GEODIST key member1 member2 [unit]
fn geodist(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let to_meters = match a.len() {
        4 => 1.0,
        5 => unit(&a[4])?,
        _ => return Err(Reply::error(SYNTAX)),
    };
    let mut db = ctx.db();
    let Some(z) = as_zset(db.read(&a[1]))? else {
        return Ok(Reply::Null);
    };
    let (Some(s1), Some(s2)) = (z.score(&a[2]), z.score(&a[3])) else {
        return Ok(Reply::Null);
    };
    let (lon1, lat1) = geohash::position_of_score(s1);
    let (lon2, lat2) = geohash::position_of_score(s2);
    Ok(Reply::Bulk(distance_text(
        geohash::distance(lon1, lat1, lon2, lat2) / to_meters,
    )))
}

/// Which search command runs (Redis's RADIUS_* / GEOSEARCH flags).
#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Radius { store_allowed: bool },
    RadiusByMember { store_allowed: bool },
    Search,
    SearchStore,
}

fn georadius(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    search(
        ctx,
        a,
        Variant::Radius {
            store_allowed: true,
        },
    )
}

fn georadius_ro(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    search(
        ctx,
        a,
        Variant::Radius {
            store_allowed: false,
        },
    )
}

fn georadiusbymember(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    search(
        ctx,
        a,
        Variant::RadiusByMember {
            store_allowed: true,
        },
    )
}

fn georadiusbymember_ro(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    search(
        ctx,
        a,
        Variant::RadiusByMember {
            store_allowed: false,
        },
    )
}

fn geosearch(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    search(ctx, a, Variant::Search)
}

fn geosearchstore(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    search(ctx, a, Variant::SearchStore)
}

#[derive(Clone, Copy, PartialEq)]
enum Sort {
    None,
    Asc,
    Desc,
}

/// One point found by a search.
struct Found {
    member: Bytes,
    dist: f64,
    score: f64,
    lon: f64,
    lat: f64,
}

/// What a search amounts to once its source has been read.
enum Outcome {
    Reply(Reply),
    /// Store these (member, score) pairs at argument `store_idx` (an empty list deletes it).
    Store {
        store_idx: usize,
        items: Vec<(Bytes, f64)>,
    },
}

/// The search options, parsed.
struct Options {
    withdist: bool,
    withhash: bool,
    withcoord: bool,
    sort: Sort,
    any: bool,
    count: usize,
    store_idx: Option<usize>,
    storedist: bool,
}

/// Redis's `georadiusGeneric`.
fn search(ctx: &mut Ctx, a: &[Bytes], variant: Variant) -> CmdResult {
    let resp = ctx.client.resp;
    let src = if variant == Variant::SearchStore {
        2
    } else {
        1
    };
    let outcome = {
        let mut db = ctx.db();
        let z = as_zset(db.read(&a[src]))?;
        run_search(a, variant, z.as_deref(), resp)?
    };
    match outcome {
        Outcome::Reply(r) => Ok(r),
        Outcome::Store { store_idx, items } => {
            // GEORADIUS's store key is locked through `radius_keys`, which finds it the same
            // way; GEOSEARCHSTORE's is argument 1.
            let locked = match variant {
                Variant::SearchStore => store_idx == 1,
                _ => store_key_index(a) == Some(store_idx),
            };
            if !locked {
                return Err(Reply::error(SYNTAX));
            }
            let event = if matches!(variant, Variant::Search | Variant::SearchStore) {
                "geosearchstore"
            } else {
                "georadiusstore"
            };
            let n = items.len() as u64;
            let reply = super::zset::store_result(
                ctx,
                &a[store_idx],
                items.iter().map(|(m, s)| (&m[..], *s)),
                event,
            );
            // Redis counts one change per stored member.
            if n > 1 {
                ctx.dirty += n - 1;
            }
            Ok(reply)
        }
    }
}

fn run_search(
    a: &[Bytes],
    variant: Variant,
    z: Option<&ZSet>,
    resp: Resp,
) -> Result<Outcome, Reply> {
    let member_pos = |z: &ZSet, m: &[u8]| {
        z.score(m)
            .map(geohash::position_of_score)
            .ok_or_else(|| Reply::error("ERR could not decode requested zset member"))
    };
    let mut center = (0.0, 0.0);
    let mut conversion = 0.0;
    let mut kind = ShapeKind::Radius(0.0);
    let mut o = Options {
        withdist: false,
        withhash: false,
        withcoord: false,
        sort: Sort::None,
        any: false,
        count: 0,
        store_idx: None,
        storedist: false,
    };
    let base = match variant {
        Variant::Radius { .. } => {
            center = lon_lat(&a[2], &a[3])?;
            let (c, r) = radius_arg(&a[4..6])?;
            (conversion, kind) = (c, ShapeKind::Radius(r));
            6
        }
        Variant::RadiusByMember { .. } => {
            if let Some(z) = z {
                center = member_pos(z, &a[2])?;
                let (c, r) = radius_arg(&a[3..5])?;
                (conversion, kind) = (c, ShapeKind::Radius(r));
            }
            5
        }
        Variant::Search => 2,
        Variant::SearchStore => {
            o.store_idx = Some(1);
            3
        }
    };
    let searching = matches!(variant, Variant::Search | Variant::SearchStore);
    let store_allowed = matches!(
        variant,
        Variant::Radius {
            store_allowed: true
        } | Variant::RadiusByMember {
            store_allowed: true
        }
    );
    let (mut frommember, mut fromloc, mut byradius, mut bybox) = (false, false, false, false);
    let n = a.len();
    let mut i = base;
    while i < n {
        let arg = &a[i][..];
        let has = |k: usize| i + k < n;
        if eq(arg, "withdist") {
            o.withdist = true;
        } else if eq(arg, "withhash") {
            o.withhash = true;
        } else if eq(arg, "withcoord") {
            o.withcoord = true;
        } else if eq(arg, "any") {
            o.any = true;
        } else if eq(arg, "asc") {
            o.sort = Sort::Asc;
        } else if eq(arg, "desc") {
            o.sort = Sort::Desc;
        } else if eq(arg, "count") && has(1) {
            let c = int(&a[i + 1])?;
            if c <= 0 {
                return Err(Reply::error("ERR COUNT must be > 0"));
            }
            o.count = c as usize;
            i += 1;
        } else if (eq(arg, "store") || eq(arg, "storedist")) && has(1) && store_allowed {
            o.store_idx = Some(i + 1);
            o.storedist = eq(arg, "storedist");
            i += 1;
        } else if eq(arg, "storedist") && variant == Variant::SearchStore {
            o.storedist = true;
        } else if eq(arg, "frommember") && has(1) && searching && !fromloc {
            if let Some(z) = z {
                center = member_pos(z, &a[i + 1])?;
            }
            frommember = true;
            i += 1;
        } else if eq(arg, "fromlonlat") && has(2) && searching && !frommember {
            center = lon_lat(&a[i + 1], &a[i + 2])?;
            fromloc = true;
            i += 2;
        } else if eq(arg, "byradius") && has(2) && searching && !bybox {
            let (c, r) = radius_arg(&a[i + 1..i + 3])?;
            (conversion, kind) = (c, ShapeKind::Radius(r));
            byradius = true;
            i += 2;
        } else if eq(arg, "bybox") && has(3) && searching && !byradius {
            let (c, width, height) = box_arg(&a[i + 1..i + 4])?;
            (conversion, kind) = (c, ShapeKind::Box { width, height });
            bybox = true;
            i += 3;
        } else {
            return Err(Reply::error(SYNTAX));
        }
        i += 1;
    }

    if o.store_idx.is_some() && (o.withdist || o.withhash || o.withcoord) {
        let what = if variant == Variant::SearchStore {
            "GEOSEARCHSTORE"
        } else {
            "STORE option in GEORADIUS"
        };
        return Err(Reply::error(format!(
            "ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        )));
    }
    let name = String::from_utf8_lossy(&a[0]);
    if searching && !(frommember || fromloc) {
        return Err(Reply::error(format!(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"
        )));
    }
    if searching && !(byradius || bybox) {
        return Err(Reply::error(format!(
            "ERR exactly one of BYRADIUS and BYBOX can be specified for {name}"
        )));
    }
    if o.any && o.count == 0 {
        return Err(Reply::error("ERR the ANY argument requires COUNT argument"));
    }

    let Some(z) = z else {
        return Ok(match o.store_idx {
            Some(store_idx) => Outcome::Store {
                store_idx,
                items: Vec::new(),
            },
            None => Outcome::Reply(Reply::Array(Vec::new())),
        });
    };
    if o.count != 0 && o.sort == Sort::None && !o.any {
        o.sort = Sort::Asc;
    }
    let shape = Shape {
        lon: center.0,
        lat: center.1,
        conversion,
        kind,
    };
    let mut found = scan(z, &shape, if o.any { o.count } else { 0 });
    if found.is_empty() && o.store_idx.is_none() {
        return Ok(Outcome::Reply(Reply::Array(Vec::new())));
    }
    match o.sort {
        Sort::None => {}
        Sort::Asc => found.sort_by(|x, y| x.dist.total_cmp(&y.dist)),
        Sort::Desc => found.sort_by(|x, y| y.dist.total_cmp(&x.dist)),
    }
    if o.count != 0 {
        found.truncate(o.count);
    }
    for f in &mut found {
        f.dist /= conversion;
    }
    if let Some(store_idx) = o.store_idx {
        let items = found
            .into_iter()
            .map(|f| (f.member, if o.storedist { f.dist } else { f.score }))
            .collect();
        return Ok(Outcome::Store { store_idx, items });
    }
    let extras = usize::from(o.withdist) + usize::from(o.withhash) + usize::from(o.withcoord);
    let out = found
        .into_iter()
        .map(|f| {
            if extras == 0 {
                return Reply::Bulk(f.member);
            }
            let mut row = Vec::with_capacity(extras + 1);
            row.push(Reply::Bulk(f.member));
            if o.withdist {
                row.push(Reply::Bulk(distance_text(f.dist)));
            }
            if o.withhash {
                row.push(Reply::Int(f.score as i64));
            }
            if o.withcoord {
                row.push(position_reply(f.lon, f.lat, resp));
            }
            Reply::Array(row)
        })
        .collect();
    Ok(Outcome::Reply(Reply::Array(out)))
}

/// The members inside `shape`, cell by cell in Redis's order; with `limit` (COUNT ... ANY),
/// stop once that many are found.
fn scan(z: &ZSet, shape: &Shape, limit: usize) -> Vec<Found> {
    let cells = geohash::search_cells(shape);
    let mut found = Vec::new();
    let mut last: usize = 0;
    for i in 0..cells.len() {
        let Some(cell) = cells[i] else { continue };
        // Huge searches can have neighbours equal to each other: skip a repeat of the cell
        // scanned just before (as Redis does, never comparing with the centre).
        if last != 0 && cells[last] == Some(cell) {
            continue;
        }
        if limit != 0 && found.len() >= limit {
            break;
        }
        let (min, max) = geohash::cell_score_range(cell);
        let range = ScoreRange {
            min: ScoreBound::Inclusive(min),
            max: ScoreBound::Exclusive(max),
        };
        let ranks = z.score_range_ranks(&range);
        // With a limit the cell is read in chunks, so a search that stops early does not walk
        // the rest of a crowded cell.
        let chunk = if limit != 0 { 64 } else { ranks.len().max(1) };
        let mut start = ranks.start;
        while start < ranks.end && !(limit != 0 && found.len() >= limit) {
            let end = (start + chunk).min(ranks.end);
            z.for_each_in_rank_range(start, end - 1, false, |m, s| {
                if limit != 0 && found.len() >= limit {
                    return;
                }
                if let Some((dist, lon, lat)) = geohash::within(shape, s) {
                    found.push(Found {
                        member: Bytes::copy_from_slice(m),
                        dist,
                        score: s,
                        lon,
                        lat,
                    });
                }
            });
            start = end;
        }
        last = i;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_print_with_four_decimals() {
        assert_eq!(&distance_text(0.0)[..], b"0.0000");
        assert_eq!(&distance_text(166274.15156960033)[..], b"166274.1516");
        assert_eq!(&distance_text(0.00004)[..], b"0.0000");
        assert_eq!(&distance_text(0.7750)[..], b"0.7750");
        assert_eq!(&distance_text(12.5)[..], b"12.5000");
    }

    #[test]
    fn radius_store_keys() {
        let args: Vec<Bytes> = [
            "georadius",
            "k",
            "1",
            "2",
            "3",
            "km",
            "store",
            "a",
            "storedist",
            "b",
        ]
        .iter()
        .map(|s| Bytes::from(s.to_string()))
        .collect();
        assert_eq!(radius_keys(&args), vec![1, 9]);
        assert_eq!(radius_keys(&args[..6]), vec![1]);
    }
}
