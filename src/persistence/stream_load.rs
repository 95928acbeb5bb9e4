//! Loading an RDB image while it arrives from a master, with no file in between (a replica's
//! diskless load, Redis's `repl-diskless-load on-empty-db` and `swapdb`).
//!
//! The replication link reads the socket and hands the payload over in chunks ([`Input`]);
//! [`load`], on a blocking thread, reads one record at a time as soon as its bytes are there
//! and inserts each key at once, so a slow load (`key-load-delay`) slows the reading of the
//! socket, and so the master's transfer, as Redis's loader does. A record cut by the end of
//! what arrived so far is read again once more bytes came (twice as many, at least, so a big
//! value is not re-read for every chunk); what was read is dropped from the buffer, its
//! CRC-64 carried on. The image is checked as a file is: its checksum at the end, any record
//! that does not decode; a connection that ends early is a short read, logged as Redis logs
//! it ("Internal error in RDB ... Unexpected EOF reading RDB file").
//!
//! The keys go either to the live databases ([`Target::Live`], emptied by the caller first) or
//! to databases of the loader's own ([`Target::Temp`]) that the caller swaps in once the load
//! succeeded ([`swap_in`]); the old data set then stays, and on a failure it is as it was.

use super::rdb;
use super::rdb_encoding::Reader;
use super::snapshot::{self, Parsed, RecordReader};
use crate::config::dir;
use crate::keyspace::Shard;
use crate::state::Server;
use bytes::Bytes;
use std::sync::atomic::Ordering;

/// What the link hands the loader.
pub(crate) enum Input {
    /// The next bytes of the payload.
    Bytes(Bytes),
    /// The payload ended (its announced length was read, or its EOF mark came).
    End,
}

/// Databases of the loader's own: `[db][shard]`, shaped as the live ones.
pub(crate) type TempDbs = Vec<Vec<Shard>>;

/// Where loaded keys go.
pub(crate) enum Target {
    /// Straight into the live databases (locked one key at a time).
    Live,
    /// Into the loader's own databases, swapped in by the caller afterwards.
    Temp(TempDbs),
}

/// Empty databases shaped as the live ones.
pub(crate) fn temp_dbs(srv: &Server) -> TempDbs {
    srv.keyspace
        .dbs
        .iter()
        .map(|d| d.shards.iter().map(|_| Shard::default()).collect())
        .collect()
}

/// A load that went through.
pub(crate) struct Loaded {
    pub keys: u64,
    pub expired: u64,
    pub empty_skipped: u64,
    /// The FUNCTION libraries' codes, in image order (the caller installs them).
    pub functions: Vec<Bytes>,
    /// The loaded databases, for [`Target::Temp`].
    pub temp: Option<TempDbs>,
}

/// Why a load failed: the message for "Failed trying to load the MASTER synchronization DB
/// from socket: ...". The lines Redis logs before it are logged here.
pub(crate) type LoadError = String;

/// Bytes of read records kept before the buffer is compacted.
const COMPACT_AT: usize = 1 << 20;
/// The least a cut record waits for before it is read again.
const RETRY_GROWTH: usize = 64 * 1024;

/// Load the image that `input` delivers into `target`. `name` names it in messages.
pub(crate) fn load(
    srv: &Server,
    input: &mut tokio::sync::mpsc::Receiver<Input>,
    target: Target,
    name: &str,
) -> Result<Loaded, LoadError> {
    // The watchdog (`watchdog-period`) watches this thread as Redis's watches its main thread,
    // which a load from the socket blocks.
    let _watched = crate::watchdog::busy();
    let limits = snapshot::limits(srv);
    let mut temp = match target {
        Target::Live => None,
        Target::Temp(t) => Some(t),
    };
    let mut records = RecordReader::new(name, &limits, srv.keyspace.num_dbs(), None);
    let mut out = Parsed::empty();
    let st = &srv.aof.inner.snap;
    // buf[..pos] is read; buf[0] is byte `records.base` of the image.
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut pos = 0usize;
    let mut crc = 0u64;
    let mut input_ended = false;
    let mut version: Option<u16> = None;
    let mut ended_at_eof_op = false;
    // A record cut short is read again only once the buffer holds this much.
    let mut retry_len = 0usize;
    let mut loaded = 0u64;
    let mut delay = srv.config.int(dir::KEY_LOAD_DELAY);
    loop {
        let progressed = match version {
            None if buf.len() >= 9 => {
                version = Some(snapshot::header_version(&buf, name)?);
                pos = 9;
                true
            }
            None => false,
            Some(_) if !ended_at_eof_op && (buf.len() >= retry_len || input_ended) => {
                let mut r = Reader { buf: &buf, pos };
                match records.record(&mut r, &mut out) {
                    Ok(at_eof) => {
                        pos = r.pos;
                        retry_len = 0;
                        for k in out.keys.drain(..) {
                            if loaded.is_multiple_of(1024) {
                                delay = srv.config.int(dir::KEY_LOAD_DELAY);
                            }
                            crate::util::debug_delay(delay);
                            insert(srv, temp.as_mut(), k, name)?;
                            loaded += 1;
                        }
                        if at_eof {
                            ended_at_eof_op = true;
                            crc = rdb::crc64(crc, &buf[..pos]);
                        }
                        st.load_done_bytes
                            .store((records.base + pos) as u64, Ordering::Relaxed);
                        true
                    }
                    Err(e) if input_ended => {
                        if let Some(line) = e.log_line {
                            tracing::warn!("{line}");
                        } else {
                            short_read_line(records.base + pos);
                        }
                        return Err(e.msg);
                    }
                    Err(_) => {
                        retry_len = buf.len() + RETRY_GROWTH.max(buf.len() - pos);
                        false
                    }
                }
            }
            Some(v) if ended_at_eof_op => {
                // The checksum (images of version 5 on), then the payload must end.
                if v >= 5 && buf.len() - pos < 8 {
                    false
                } else {
                    if v >= 5 {
                        let mut stored = [0u8; 8];
                        stored.copy_from_slice(&buf[pos..pos + 8]);
                        let stored = u64::from_le_bytes(stored);
                        if stored != 0 && stored != crc {
                            tracing::warn!("Wrong RDB checksum expected: ({stored:x}) got ({crc:x}). Aborting now.");
                            return Err(format!(
                                "Wrong RDB checksum in {name} expected: ({stored:x}) but got ({crc:x}): RDB CRC error"
                            ));
                        }
                    }
                    // What follows the image up to the payload's end is not data: wait for
                    // the end the link found, so the stream starts after it.
                    while !input_ended {
                        match input.blocking_recv() {
                            Some(Input::Bytes(_)) => {}
                            Some(Input::End) => input_ended = true,
                            None => return Err("connection lost after the image was read".into()),
                        }
                    }
                    st.load_done_bytes.store(
                        st.load_total_bytes.load(Ordering::Relaxed),
                        Ordering::Relaxed,
                    );
                    return Ok(Loaded {
                        keys: loaded,
                        expired: out.expired,
                        empty_skipped: out.empty_keys_skipped,
                        functions: std::mem::take(&mut out.functions),
                        temp,
                    });
                }
            }
            Some(_) => false,
        };
        if progressed {
            continue;
        }
        if input_ended {
            short_read_line(records.base + buf.len());
            return Err(format!(
                "{name}: the payload ended at offset {} inside the image",
                records.base + buf.len()
            ));
        }
        match input.blocking_recv() {
            Some(Input::Bytes(b)) => {
                if pos >= COMPACT_AT && !ended_at_eof_op {
                    crc = rdb::crc64(crc, &buf[..pos]);
                    buf.drain(..pos);
                    records.base += pos;
                    retry_len = retry_len.saturating_sub(pos);
                    pos = 0;
                }
                buf.extend_from_slice(&b);
            }
            Some(Input::End) => input_ended = true,
            None => {
                short_read_line(records.base + buf.len());
                return Err(format!(
                    "{name}: the connection ended at offset {} inside the image",
                    records.base + buf.len()
                ));
            }
        }
    }
}

/// Redis's line for a load cut short (rdbReportReadError's).
fn short_read_line(offset: usize) {
    tracing::warn!(
        "Internal error in RDB reading offset {offset}, function at rdb.c:0 -> Unexpected EOF reading RDB file"
    );
}

/// Insert one key into the loader's databases, or into the live ones.
fn insert(
    srv: &Server,
    temp: Option<&mut TempDbs>,
    k: snapshot::LoadedKey,
    name: &str,
) -> Result<(), LoadError> {
    let idx = srv.keyspace.shard_of(&k.key);
    let mut live;
    let shard: &mut Shard = match temp {
        Some(t) => &mut t[k.db][idx],
        None => {
            live = srv.keyspace.dbs[k.db].shards[idx].lock();
            &mut live
        }
    };
    if shard.raw_get(&k.key).is_some() {
        return Err(format!(
            "{name} has the duplicated key '{}' in DB {}",
            String::from_utf8_lossy(&k.key),
            k.db
        ));
    }
    shard.insert(&k.key, k.value, false);
    if k.expire_at != crate::keyspace::NO_EXPIRE {
        shard.set_expire(&k.key, k.expire_at);
    }
    Ok(())
}

/// Put loaded databases in place of the live ones (every shard locked meanwhile); returns the
/// old data, for the caller to drop outside the locks. WATCHes on keys of either data set
/// fail, as after SWAPDB.
pub(crate) fn swap_in(srv: &Server, mut temp: TempDbs) -> TempDbs {
    let mut guards = super::child::lock_all(srv);
    for (db, shards) in guards.iter_mut().enumerate() {
        for (i, live) in shards.iter_mut().enumerate() {
            live.touch_all_watched();
            live.swap_data(&mut temp[db][i]);
            live.touch_all_watched();
        }
    }
    temp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chunking of a payload never changes what the record reader reads: the same image
    /// cut at every size parses to the same keys through the incremental path's retries.
    #[test]
    fn records_cut_anywhere_read_again_once_complete() {
        let limits = snapshot::tests::lim();
        let mut s = Shard::default();
        for i in 0..50 {
            let v = crate::types::Value::Str(crate::types::compact::CompactBytes::new(&vec![
                b'x';
                i * 97
            ]));
            s.insert(format!("k{i}").as_bytes(), v, false);
        }
        let opts = snapshot::SaveOpts {
            compress: false,
            checksum: true,
            key_delay: 0,
            aof_base: false,
            functions: vec![],
            history: None,
        };
        let (image, _) = snapshot::write_image(Vec::new(), &[vec![&s]], opts, 0).unwrap();
        for cut in [1usize, 7, 100, 4096] {
            let mut records = RecordReader::new("t", &limits, 16, None);
            let mut out = Parsed::empty();
            let mut have = 9 + cut.min(image.len() - 9);
            let mut pos = 9;
            let mut keys = 0;
            loop {
                let mut r = Reader {
                    buf: &image[..have],
                    pos,
                };
                match records.record(&mut r, &mut out) {
                    Ok(true) => break,
                    Ok(false) => {
                        pos = r.pos;
                        keys += out.keys.drain(..).count();
                    }
                    Err(e) => {
                        assert!(have < image.len(), "complete image failed: {}", e.msg);
                        have = (have + cut).min(image.len());
                    }
                }
            }
            assert_eq!(keys, 50, "cut {cut}");
        }
    }
}
