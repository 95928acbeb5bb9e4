//! Small shared helpers: Redis-exact number text conversions and glob matching.

pub mod numtext;
