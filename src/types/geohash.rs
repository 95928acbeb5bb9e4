//! Geohash arithmetic for the GEO commands, as Redis computes it.
//!
//! This module owns the numbers behind GEO: a position is a longitude and a latitude, each
//! scaled to `step` bits over its range and interleaved (latitude bits at the even positions)
//! into a cell hash; at 26 bits per coordinate that hash, shifted to 52 bits, is the member's
//! sorted-set score. A search (by radius or by box) covers its shape with a centre cell and its
//! eight neighbours at a precision chosen from the search size, exactly as Redis's
//! `geohash_helper.c` chooses them, so that the candidates, the filtering and therefore the
//! results are the same as redis-server's; distances use Redis's haversine with its Earth
//! radius. Everything here is plain `f64` arithmetic in the order Redis's C code does it, since
//! a different order of operations could move a point across a search boundary.

/// Longitude bounds of the encoding.
pub(crate) const LONG_MIN: f64 = -180.0;
pub(crate) const LONG_MAX: f64 = 180.0;
/// Latitude bounds (Web Mercator's; the poles cannot be encoded).
pub(crate) const LAT_MIN: f64 = -85.05112878;
pub(crate) const LAT_MAX: f64 = 85.05112878;
/// Bits per coordinate of a stored position (Redis's GEO_STEP_MAX).
pub(crate) const STEP_MAX: u8 = 26;

/// Degrees to radians, with Redis's constant (M_PI / 180).
const D_R: f64 = std::f64::consts::PI / 180.0;
/// Redis's Earth radius (the quadratic mean radius of WGS-84), in meters.
const EARTH_RADIUS_M: f64 = 6372797.560856;
const MERCATOR_MAX: f64 = 20037726.37;

fn deg_rad(d: f64) -> f64 {
    d * D_R
}

fn rad_deg(r: f64) -> f64 {
    r / D_R
}

/// A cell: `step` bits per coordinate, interleaved into `bits`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cell {
    pub bits: u64,
    pub step: u8,
}

/// The bounds of a cell.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Area {
    pub lon_min: f64,
    pub lon_max: f64,
    pub lat_min: f64,
    pub lat_max: f64,
}

/// Spread the 32 bits of `v` to the even bit positions of a u64.
fn spread(v: u32) -> u64 {
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// The inverse of [`spread`]: the even bits of `x`, packed.
fn squash(x: u64) -> u32 {
    let mut x = x & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x >> 16)) & 0x0000_0000_FFFF_FFFF;
    x as u32
}

/// C's `(uint32_t)` of a double in [0, 2^32] on x86-64 (truncation; 2^32 itself only arises
/// at a range's upper bound and wraps to 0 there, as the C conversion through 64 bits does).
fn to_u32(d: f64) -> u32 {
    (d as u64) as u32
}

/// Encode a position over the given ranges; None outside Redis's GEO bounds or the ranges
/// (as `geohashEncode` refuses it).
pub(crate) fn encode_in(
    lon_range: (f64, f64),
    lat_range: (f64, f64),
    lon: f64,
    lat: f64,
    step: u8,
) -> Option<Cell> {
    if !(LONG_MIN..=LONG_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return None;
    }
    if lat < lat_range.0 || lat > lat_range.1 || lon < lon_range.0 || lon > lon_range.1 {
        return None;
    }
    let scale = (1u64 << step) as f64;
    let lat_offset = (lat - lat_range.0) / (lat_range.1 - lat_range.0) * scale;
    let lon_offset = (lon - lon_range.0) / (lon_range.1 - lon_range.0) * scale;
    Some(Cell {
        bits: spread(to_u32(lat_offset)) | (spread(to_u32(lon_offset)) << 1),
        step,
    })
}

/// Encode over the GEO ranges.
pub(crate) fn encode(lon: f64, lat: f64, step: u8) -> Option<Cell> {
    encode_in((LONG_MIN, LONG_MAX), (LAT_MIN, LAT_MAX), lon, lat, step)
}

/// The 52-bit score of a position already checked to be in range.
pub(crate) fn score_of(lon: f64, lat: f64) -> Option<u64> {
    encode(lon, lat, STEP_MAX).map(align52)
}

/// A cell's hash shifted to the 52-bit score scale.
pub(crate) fn align52(c: Cell) -> u64 {
    c.bits << (52 - u32::from(c.step) * 2)
}

/// The bounds of a cell of the GEO ranges.
pub(crate) fn decode(c: Cell) -> Area {
    let lat_scale = LAT_MAX - LAT_MIN;
    let lon_scale = LONG_MAX - LONG_MIN;
    let ilat = squash(c.bits);
    let ilon = squash(c.bits >> 1);
    let div = (1u64 << c.step) as f64;
    Area {
        lat_min: LAT_MIN + (f64::from(ilat) * 1.0 / div) * lat_scale,
        lat_max: LAT_MIN + (f64::from(ilat.wrapping_add(1)) * 1.0 / div) * lat_scale,
        lon_min: LONG_MIN + (f64::from(ilon) * 1.0 / div) * lon_scale,
        lon_max: LONG_MIN + (f64::from(ilon.wrapping_add(1)) * 1.0 / div) * lon_scale,
    }
}

/// C's `(uint64_t)` of a double on x86-64 (what Redis does to a score before decoding it):
/// values below 2^63 go through the signed conversion (so negative scores wrap), larger ones
/// through the offset path, and NaN or out-of-range values give the "integer indefinite".
fn c_double_to_u64(d: f64) -> u64 {
    const TWO63: f64 = 9_223_372_036_854_775_808.0;
    let signed = |x: f64| -> u64 {
        if x.is_nan() || !(-TWO63..TWO63).contains(&x) {
            1u64 << 63
        } else {
            (x as i64) as u64
        }
    };
    if d.is_nan() || d < TWO63 {
        signed(d)
    } else {
        signed(d - TWO63) ^ (1u64 << 63)
    }
}

/// The position (longitude, latitude) a sorted-set score stands for: the centre of its
/// 26-bit cell, clamped to the GEO bounds (Redis's `decodeGeohash`).
pub(crate) fn position_of_score(score: f64) -> (f64, f64) {
    let area = decode(Cell {
        bits: c_double_to_u64(score),
        step: STEP_MAX,
    });
    let lon = ((area.lon_min + area.lon_max) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let lat = ((area.lat_min + area.lat_max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (lon, lat)
}

/// The standard 11-character geohash text of a score (GEOHASH): the position re-encoded over
/// latitude -90..90, whose 52 bits give ten characters, the eleventh being '0'.
pub(crate) fn geohash_text(score: f64) -> [u8; 11] {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let (lon, lat) = position_of_score(score);
    let bits = encode_in((-180.0, 180.0), (-90.0, 90.0), lon, lat, STEP_MAX).map_or(0, |c| c.bits);
    let mut out = [b'0'; 11];
    for (i, slot) in out.iter_mut().enumerate().take(10) {
        *slot = ALPHABET[((bits >> (52 - (i + 1) * 5)) & 0x1f) as usize];
    }
    out
}

/// Bits of the interleaved hash that hold the longitude (x) and the latitude (y).
const X_BITS: u64 = 0xaaaa_aaaa_aaaa_aaaa;
const Y_BITS: u64 = 0x5555_5555_5555_5555;

/// Move the cell one step (`d` = -1, 0, 1) along the coordinate whose bits are `own` (the
/// other coordinate's bits, `other`, are kept): add or subtract one in that coordinate alone,
/// by filling the other coordinate's positions with ones so the carry runs through them.
fn move_along(c: &mut Cell, d: i8, own: u64, other: u64) {
    if d == 0 {
        return;
    }
    let shift = 64 - u32::from(c.step) * 2;
    let mut moved = c.bits & own;
    let kept = c.bits & other;
    let zz = other >> shift;
    if d > 0 {
        moved = moved.wrapping_add(zz + 1);
    } else {
        moved |= zz;
        moved = moved.wrapping_sub(zz + 1);
    }
    moved &= own >> shift;
    c.bits = moved | kept;
}

fn moved(c: Cell, dx: i8, dy: i8) -> Cell {
    let mut n = c;
    move_along(&mut n, dx, X_BITS, Y_BITS);
    move_along(&mut n, dy, Y_BITS, X_BITS);
    n
}

/// The shape of a search: a circle of `radius` or a `width` x `height` box, in the unit whose
/// size in meters is `conversion`, around (`lon`, `lat`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub lon: f64,
    pub lat: f64,
    pub conversion: f64,
    pub kind: ShapeKind,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum ShapeKind {
    Radius(f64),
    Box { width: f64, height: f64 },
}

/// The cells a search scans, in Redis's order: the centre, then north, south, east, west,
/// north-east, north-west, south-east, south-west; a neighbour the search cannot reach is None.
pub(crate) fn search_cells(shape: &Shape) -> [Option<Cell>; 9] {
    let (half_h, half_w) = match shape.kind {
        ShapeKind::Radius(r) => (r, r),
        ShapeKind::Box { width, height } => (height / 2.0, width / 2.0),
    };
    let height = shape.conversion * half_h;
    let width = shape.conversion * half_w;
    let (lon, lat) = (shape.lon, shape.lat);
    // The bounding box of the shape.
    let lat_delta = rad_deg(height / EARTH_RADIUS_M);
    let lon_delta_top = rad_deg(width / EARTH_RADIUS_M / deg_rad(lat + lat_delta).cos());
    let lon_delta_bottom = rad_deg(width / EARTH_RADIUS_M / deg_rad(lat - lat_delta).cos());
    let southern = lat < 0.0;
    let min_lon = if southern {
        lon - lon_delta_bottom
    } else {
        lon - lon_delta_top
    };
    let max_lon = if southern {
        lon + lon_delta_bottom
    } else {
        lon + lon_delta_top
    };
    let min_lat = lat - lat_delta;
    let max_lat = lat + lat_delta;

    let radius_m = match shape.kind {
        ShapeKind::Radius(r) => r,
        ShapeKind::Box { width, height } => {
            ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt()
        }
    } * shape.conversion;
    let mut steps = estimate_steps(radius_m, lat);

    // The centre was checked to be in range, so it encodes at any step.
    let centre_at = |steps: u8| {
        encode(lon, lat, steps).unwrap_or(Cell {
            bits: 0,
            step: steps,
        })
    };
    let mut centre = centre_at(steps);
    // When a side neighbour does not reach the bounding box's edge, one bit less.
    let north = decode(moved(centre, 0, 1));
    let south = decode(moved(centre, 0, -1));
    let east = decode(moved(centre, 1, 0));
    let west = decode(moved(centre, -1, 0));
    let decrease = north.lat_max < max_lat
        || south.lat_min > min_lat
        || east.lon_max < max_lon
        || west.lon_min > min_lon;
    if steps > 1 && decrease {
        steps -= 1;
        centre = centre_at(steps);
    }
    let area = decode(centre);
    let mut cells = [
        Some(centre),
        Some(moved(centre, 0, 1)),
        Some(moved(centre, 0, -1)),
        Some(moved(centre, 1, 0)),
        Some(moved(centre, -1, 0)),
        Some(moved(centre, 1, 1)),
        Some(moved(centre, -1, 1)),
        Some(moved(centre, 1, -1)),
        Some(moved(centre, -1, -1)),
    ];
    const N: usize = 1;
    const S: usize = 2;
    const E: usize = 3;
    const W: usize = 4;
    const NE: usize = 5;
    const NW: usize = 6;
    const SE: usize = 7;
    const SW: usize = 8;
    if steps >= 2 {
        if area.lat_min < min_lat {
            for i in [S, SW, SE] {
                cells[i] = None;
            }
        }
        if area.lat_max > max_lat {
            for i in [N, NE, NW] {
                cells[i] = None;
            }
        }
        if area.lon_min < min_lon {
            for i in [W, SW, NW] {
                cells[i] = None;
            }
        }
        if area.lon_max > max_lon {
            for i in [E, SE, NE] {
                cells[i] = None;
            }
        }
    }
    cells
}

/// The precision (bits per coordinate) whose cells are about the size of a search of
/// `range_m` meters at latitude `lat` (Redis's `geohashEstimateStepsByRadius`).
fn estimate_steps(mut range_m: f64, lat: f64) -> u8 {
    if range_m == 0.0 {
        return 26;
    }
    let mut step: i32 = 1;
    while range_m < MERCATOR_MAX {
        range_m *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u8
}

/// The sorted-set scores of the members inside a cell: `min` included, `max` excluded.
pub(crate) fn cell_score_range(c: Cell) -> (f64, f64) {
    let min = align52(c);
    let max = align52(Cell {
        bits: c.bits + 1,
        step: c.step,
    });
    (min as f64, max as f64)
}

fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_M * (deg_rad(lat2) - deg_rad(lat1)).abs()
}

/// Great-circle distance in meters (Redis's haversine).
pub(crate) fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let lon1r = deg_rad(lon1);
    let lon2r = deg_rad(lon2);
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let lat1r = deg_rad(lat1);
    let lat2r = deg_rad(lat2);
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_M * a.sqrt().asin()
}

/// The distance from the shape's centre to the point of `score`, and the point, if the point
/// is inside the shape.
pub(crate) fn within(shape: &Shape, score: f64) -> Option<(f64, f64, f64)> {
    let (lon, lat) = position_of_score(score);
    match shape.kind {
        ShapeKind::Radius(r) => {
            let d = distance(shape.lon, shape.lat, lon, lat);
            (d <= r * shape.conversion).then_some((d, lon, lat))
        }
        ShapeKind::Box { width, height } => {
            let (width_m, height_m) = (width * shape.conversion, height * shape.conversion);
            if lat_distance(lat, shape.lat) > height_m / 2.0 {
                return None;
            }
            if distance(lon, lat, shape.lon, lat) > width_m / 2.0 {
                return None;
            }
            Some((distance(shape.lon, shape.lat, lon, lat), lon, lat))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_redis_geohashes() {
        // Figures from redis-server 7.0.15 (GEOADD then ZRANGE ... WITHSCORES).
        assert_eq!(score_of(13.361389, 38.115556), Some(3479099956230698));
        assert_eq!(score_of(15.087269, 37.502669), Some(3479447370796909));
        assert_eq!(score_of(0.0, 0.0), Some(3377699720527872));
        assert_eq!(score_of(-180.0, -85.05112878), Some(0));
        assert_eq!(score_of(180.0, 85.05112878), Some(13510798882111488));
        assert_eq!(score_of(181.0, 0.0), None);
    }

    #[test]
    fn squash_inverts_spread() {
        for v in [0u32, 1, 0x3ff_ffff, 0xdead_beef, u32::MAX] {
            assert_eq!(squash(spread(v)), v);
            assert_eq!(squash(spread(v) << 1 >> 1), v);
        }
    }

    #[test]
    fn positions_and_hashes_match_redis() {
        // GEOPOS and GEOHASH of Palermo on redis-server 7.0.15.
        let (lon, lat) = position_of_score(3479099956230698.0);
        assert_eq!(format!("{lon:.17}"), "13.36138933897018433");
        assert_eq!(format!("{lat:.17}"), "38.11555639549629859");
        assert_eq!(&geohash_text(3479099956230698.0), b"sqc8b49rny0");
        // Scores no GEOADD writes (ZADD -1 and 1e30): GEOPOS/GEOHASH on redis-server 7.0.15.
        let human = |v: f64| {
            String::from_utf8(
                crate::util::numtext::LongDouble::from_f64(v)
                    .format_human()
                    .unwrap(),
            )
            .unwrap()
        };
        let (lon, lat) = position_of_score(-1.0);
        assert_eq!(
            (human(lon), human(lat)),
            ("180".into(), "85.0511287799999991".into())
        );
        let (lon, lat) = position_of_score(1e30);
        assert_eq!(
            (human(lon), human(lat)),
            (
                "-179.99999731779098511".into(),
                "-85.05112751263942528".into()
            )
        );
        assert_eq!(&geohash_text(-1.0), b"bp05b5048p0");
        assert_eq!(&geohash_text(1e30), b"00bh0hbj200");
    }

    #[test]
    fn distance_matches_redis() {
        // GEODIST Sicily Palermo Catania on redis-server 7.0.15: 166274.1516 m.
        let (a, b) = (
            position_of_score(3479099956230698.0),
            position_of_score(3479447370796909.0),
        );
        let d = distance(a.0, a.1, b.0, b.1);
        assert_eq!((d * 10000.0).round_ties_even(), 1662741516.0);
    }

    #[test]
    fn odd_scores_decode_like_c() {
        // Negative and huge scores wrap as C's conversion does; NaN cannot occur in a zset.
        assert_eq!(c_double_to_u64(-1.0), u64::MAX);
        assert_eq!(c_double_to_u64(1e30), 0);
        assert_eq!(c_double_to_u64(f64::NEG_INFINITY), 1 << 63);
        assert_eq!(c_double_to_u64(9_223_372_036_854_775_808.0), 1 << 63);
    }

    #[test]
    fn steps_follow_the_radius() {
        assert_eq!(estimate_steps(0.0, 0.0), 26);
        assert_eq!(estimate_steps(1000.0, 0.0), 14);
        assert_eq!(estimate_steps(1000.0, 70.0), 13);
        assert_eq!(estimate_steps(1000.0, -85.0), 12);
        assert_eq!(estimate_steps(1e9, 0.0), 1);
    }
}
