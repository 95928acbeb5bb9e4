//! GEOADD: members placed by longitude and latitude in a sorted set.
//!
//! This file owns the geohash encoding Redis stores geo members with: the longitude and
//! latitude, each scaled to 26 bits over its range (longitude -180..180, latitude within
//! Web Mercator's -85.05112878..85.05112878), interleaved into a 52-bit integer (latitude bits
//! at the even positions) that becomes the member's score. GEOADD is ZADD over those scores,
//! as in Redis: it takes ZADD's NX, XX and CH, raises ZADD's keyspace event, and is logged to
//! the AOF as the ZADD it amounts to. The rest of the GEO family (GEOPOS, GEODIST, GEOSEARCH
//! ...) is not implemented yet and answers as an unknown command.

use super::args::{eq, float};
use super::flags::*;
use super::{Ctx, Keys, Spec};
use crate::protocol::Reply;
use bytes::Bytes;

pub static COMMANDS: &[Spec] = &[Spec::new(
    "geoadd",
    -5,
    WRITE | DENYOOM,
    Keys::Range(1, 1, 1),
    geoadd,
    "geo",
)];

const LONG_MIN: f64 = -180.0;
const LONG_MAX: f64 = 180.0;
const LAT_MIN: f64 = -85.05112878;
const LAT_MAX: f64 = 85.05112878;
/// Bits per coordinate (Redis's GEO_STEP_MAX).
const STEP: u32 = 26;

/// Spread the low 32 bits of `v` to the even bit positions of a u64.
fn spread(v: u32) -> u64 {
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// The 52-bit geohash score of a position already checked to be in range.
fn score(longitude: f64, latitude: f64) -> u64 {
    let scale = f64::from(1u32 << STEP);
    let lat = (latitude - LAT_MIN) / (LAT_MAX - LAT_MIN) * scale;
    let long = (longitude - LONG_MIN) / (LONG_MAX - LONG_MIN) * scale;
    // Truncation to an unsigned 32-bit integer, as Redis converts the offsets.
    spread(lat as u32) | (spread(long as u32) << 1)
}

/// GEOADD key [NX|XX] [CH] longitude latitude member [longitude latitude member ...]
fn geoadd(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
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
        return Reply::error(super::args::SYNTAX);
    }
    let mut zadd: Vec<Bytes> = Vec::with_capacity(first + (a.len() - first) / 3 * 2);
    zadd.push(Bytes::from_static(b"zadd"));
    zadd.extend_from_slice(&a[1..first]);
    for triple in a[first..].chunks(3) {
        let longitude = crate::try_reply!(float(&triple[0]));
        let latitude = crate::try_reply!(float(&triple[1]));
        if !(LONG_MIN..=LONG_MAX).contains(&longitude) || !(LAT_MIN..=LAT_MAX).contains(&latitude) {
            return Reply::error(format!(
                "ERR invalid longitude,latitude pair {longitude:.6},{latitude:.6}"
            ));
        }
        zadd.push(Bytes::from(score(longitude, latitude).to_string()));
        zadd.push(triple[2].clone());
    }
    let reply = super::zset::zadd(ctx, &zadd);
    if ctx.dirty > 0 {
        ctx.propagate_as(vec![zadd]);
    }
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_redis_geohashes() {
        // Figures from redis-server 7.0.15 (GEOADD then ZRANGE ... WITHSCORES).
        assert_eq!(score(13.361389, 38.115556), 3479099956230698);
        assert_eq!(score(15.087269, 37.502669), 3479447370796909);
        assert_eq!(score(0.0, 0.0), 3377699720527872);
        assert_eq!(score(-180.0, -85.05112878), 0);
        assert_eq!(score(180.0, 85.05112878), 13510798882111488);
    }
}
