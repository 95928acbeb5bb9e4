//! The Redis version Podium reports (HELLO, INFO, RDB aux fields, scripting's
//! `redis.REDIS_VERSION`). Its own module at the bottom of the layering so that persistence and
//! scripting can name it without reaching up into the command families.

/// The Redis version Podium reports (clients feature-detect on it).
pub const REDIS_VERSION: &str = "7.0.15";
