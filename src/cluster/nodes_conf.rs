//! nodes.conf: the node table on disk, in Redis's format, so a node restarts into the
//! cluster it left and a file written by redis-server loads here (and the reverse).
//!
//! The file is CLUSTER NODES' output without the nodes still in handshake, followed by
//! `vars currentEpoch N lastVoteEpoch N`. Each line: name, `ip:port@cport[,hostname]`,
//! flags, master (or `-`), ping sent, pong received, config epoch, link state, then slots
//! and slot ranges, and for this node its open slots as `[slot->-name]` (migrating) or
//! `[slot-<-name]` (importing). A save writes a temporary file beside it, fsyncs it when
//! asked and renames it over the old one, so a crash leaves one whole file or the other.
//! The file is locked (flock) while the node runs, as Redis locks it, so two nodes cannot
//! share one.

use super::nodes::{
    ClusterState, F_FAIL, F_HANDSHAKE, F_MASTER, F_MYSELF, F_NOADDR, F_NOFAILOVER, F_PFAIL, F_SLAVE,
};
use crate::keyspace::slots::SLOTS;
use std::io::Write;
use std::os::unix::io::AsRawFd;

/// Redis's words for a file it cannot parse (it exits).
pub const CORRUPTED: &str = "Unrecoverable error: corrupted cluster config file.";

/// Load `path` into `st`. Ok(false) when there is no file, or it is empty (a new node).
pub fn load(st: &mut ClusterState, path: &std::path::Path, now: i64) -> Result<bool, String> {
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => {
            return Err(format!(
                "Loading the cluster node config from {}: {e}",
                path.display()
            ))
        }
    };
    if text.is_empty() {
        return Ok(false);
    }
    let text = String::from_utf8_lossy(&text);
    st.clear_nodes();
    let mut myself = None;
    for line in text.lines() {
        let argv: Vec<&str> = line.split_whitespace().collect();
        if argv.is_empty() {
            continue;
        }
        if argv[0].eq_ignore_ascii_case("vars") {
            if argv.len().is_multiple_of(2) {
                return Err(CORRUPTED.into());
            }
            for pair in argv[1..].chunks(2) {
                let value = pair[1].parse::<u64>().unwrap_or(0);
                if pair[0].eq_ignore_ascii_case("currentEpoch") {
                    st.current_epoch = value;
                } else if pair[0].eq_ignore_ascii_case("lastVoteEpoch") {
                    st.last_vote_epoch = value;
                } else {
                    tracing::warn!("Skipping unknown cluster config variable '{}'", pair[0]);
                }
            }
            continue;
        }
        if argv.len() < 8 || !super::nodes::valid_name(argv[0].as_bytes()) {
            return Err(CORRUPTED.into());
        }
        let id = st.lookup_or_create(argv[0].as_bytes(), now);
        // ip:port[@cport][,hostname]
        let (addr, hostname) = match argv[1].split_once(',') {
            Some((a, h)) => (a, h.to_string()),
            None => (argv[1], String::new()),
        };
        let Some((ip, ports)) = addr.rsplit_once(':') else {
            return Err(CORRUPTED.into());
        };
        let (port, cport) = match ports.split_once('@') {
            Some((p, c)) => (atoi(p), Some(atoi(c))),
            None => (atoi(ports), None),
        };
        let mut flags = 0;
        let mut fail_time = 0;
        for f in argv[2].split(',') {
            flags |= match f.to_ascii_lowercase().as_str() {
                "myself" => {
                    if myself.is_some() {
                        return Err(CORRUPTED.into());
                    }
                    myself = Some(id);
                    F_MYSELF
                }
                "master" => F_MASTER,
                "slave" => F_SLAVE,
                "fail?" => F_PFAIL,
                "fail" => {
                    fail_time = now;
                    F_FAIL
                }
                "handshake" => F_HANDSHAKE,
                "noaddr" => F_NOADDR,
                "nofailover" => F_NOFAILOVER,
                "noflags" => 0,
                _ => return Err("Unknown flag in redis cluster config file".into()),
            };
        }
        let master = if argv[3].starts_with('-') {
            None
        } else {
            if !super::nodes::valid_name(argv[3].as_bytes()) {
                return Err(CORRUPTED.into());
            }
            Some(st.lookup_or_create(argv[3].as_bytes(), now))
        };
        {
            let n = st.nodes.get_mut(&id).ok_or(CORRUPTED)?;
            n.hostname = hostname;
            n.ip = ip.to_string();
            n.port = port as u16;
            n.cport = cport.unwrap_or(port + 10000) as u16;
            n.flags |= flags;
            if fail_time != 0 {
                n.fail_time = fail_time;
            }
            if atoi(argv[4]) != 0 {
                n.ping_sent = now;
            }
            if atoi(argv[5]) != 0 {
                n.pong_received = now;
            }
            n.slaveof = master;
            n.config_epoch = if n.flags & F_SLAVE != 0 && master.is_some() {
                0
            } else {
                argv[6].parse().unwrap_or(0)
            };
        }
        if let Some(m) = master {
            st.add_replica(m, id);
        }
        for spec in &argv[8..] {
            if let Some(open) = spec.strip_prefix('[') {
                // [slot->-name] or [slot-<-name]
                let Some((slot, rest)) = open.split_once('-') else {
                    return Err(CORRUPTED.into());
                };
                let slot = atoi(slot);
                if !(0..SLOTS as i64).contains(&slot) || rest.len() < 2 {
                    return Err(CORRUPTED.into());
                }
                let migrating = rest.starts_with('>');
                let name = rest[2..].trim_end_matches(']');
                if !super::nodes::valid_name(name.as_bytes()) {
                    return Err(CORRUPTED.into());
                }
                let other = st.lookup_or_create(name.as_bytes(), now);
                if migrating {
                    st.migrating[slot as usize] = Some(other);
                } else {
                    st.importing[slot as usize] = Some(other);
                }
                continue;
            }
            let (start, stop) = match spec.split_once('-') {
                Some((a, b)) => (atoi(a), atoi(b)),
                None => (atoi(spec), atoi(spec)),
            };
            let range = 0..SLOTS as i64;
            if !range.contains(&start) || !range.contains(&stop) {
                return Err(CORRUPTED.into());
            }
            for j in start..=stop {
                st.add_slot(id, j as usize);
            }
        }
    }
    let Some(me) = myself else {
        return Err(CORRUPTED.into());
    };
    st.set_myself(me);
    tracing::info!("Node configuration loaded, I'm {}", st.me().name_str());
    let max = st.nodes.values().map(|n| n.config_epoch).max().unwrap_or(0);
    if max > st.current_epoch {
        st.current_epoch = max;
    }
    Ok(true)
}

/// C's atoi: the leading decimal digits (after an optional sign), 0 when none.
fn atoi(s: &str) -> i64 {
    let s = s.trim_start();
    let (neg, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let end = digits
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    let v = digits[..end].parse::<i64>().unwrap_or(0);
    if neg {
        -v
    } else {
        v
    }
}

/// The file's content: the node lines (without handshakes) and the `vars` line.
pub fn render(st: &ClusterState) -> String {
    let mut text = st.describe_all(F_HANDSHAKE, false);
    text.push_str(&format!(
        "vars currentEpoch {} lastVoteEpoch {}\n",
        st.current_epoch, st.last_vote_epoch
    ));
    text
}

/// Write nodes.conf atomically: a temporary file, fsynced when `fsync`, renamed over it.
pub fn save(st: &ClusterState, fsync: bool) -> Result<(), String> {
    let path = &st.config_path;
    let tmp = path.with_file_name(format!(
        "{}.tmp-{}",
        path.file_name()
            .map(|f| f.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(render(st).as_bytes())?;
        if fsync {
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        if fsync {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::File::open(dir)?.sync_all()?;
            }
        }
        Ok(())
    };
    let r = write().map_err(|e| e.to_string());
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    } else {
        // The rename replaced the file the lock was on: lock the new one.
        relock(path);
    }
    r
}

/// The open, flocked nodes.conf (kept open for the life of the process).
static LOCK: parking_lot::Mutex<Option<std::fs::File>> = parking_lot::const_mutex(None);

fn flock(file: &std::fs::File) -> std::io::Result<()> {
    // SAFETY: flock on a descriptor this File owns and keeps open for the call.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == -1 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Lock nodes.conf (creating it empty if missing) for this process, as Redis does: a second
/// node pointed at the same file stops with Redis's message.
pub fn lock(path: &std::path::Path) -> Result<(), String> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| {
            format!(
                "Can't open {} in order to acquire a lock: {e}",
                path.display()
            )
        })?;
    match flock(&file) {
        Ok(()) => {
            *LOCK.lock() = Some(file);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Err(format!(
            "Sorry, the cluster configuration file {} is already used by a different Redis Cluster node. Please make sure that different nodes use different cluster configuration files.",
            path.display()
        )),
        Err(e) => Err(format!("Impossible to lock {}: {e}", path.display())),
    }
}

fn relock(path: &std::path::Path) {
    if let Ok(file) = std::fs::OpenOptions::new().write(true).open(path) {
        if flock(&file).is_ok() {
            *LOCK.lock() = Some(file);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::nodes::Settings;

    const FILE: &str = "\
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@40001 myself,master - 0 1700000000000 1 connected 0-5460 [5461-<-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@40002,host-2.com master - 0 1700000000000 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@40003 slave 67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 0 1700000000000 2 connected
vars currentEpoch 6 lastVoteEpoch 0
";

    fn state() -> ClusterState {
        ClusterState::new("/nonexistent".into(), Settings::default(), 0)
    }

    #[test]
    fn a_redis_file_loads_and_renders_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nodes.conf");
        std::fs::write(&path, FILE).unwrap();
        let mut st = state();
        assert!(load(&mut st, &path, 5).unwrap());
        assert_eq!(
            st.me().name_str(),
            "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca"
        );
        assert_eq!(st.current_epoch, 6);
        assert_eq!(st.nodes.len(), 3);
        let other = st
            .lookup(b"67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1")
            .unwrap();
        assert_eq!(st.node(other).hostname, "host-2.com");
        assert_eq!(st.node(other).replicas.len(), 1);
        assert_eq!(st.importing[5461], Some(other));
        assert_eq!(st.slots[0], Some(st.myself));
        assert_eq!(st.slots[10922], Some(other));
        let text = render(&st);
        let mine = text
            .lines()
            .find(|l| l.contains("myself"))
            .unwrap()
            .to_string();
        // Pong times are reloaded as "now".
        assert_eq!(
            mine,
            "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@40001 myself,master - 0 5 1 connected 0-5460 [5461-<-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]"
        );
        assert!(text.ends_with("vars currentEpoch 6 lastVoteEpoch 0\n"));
    }

    #[test]
    fn damaged_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nodes.conf");
        for bad in [
            "tooshort 1 2\n",
            "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:1@2 master - 0 0 1 connected 0-99999\n",
            "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:1@2 master - 0 0 1 connected\n",
            "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:1@2 myself,bogus - 0 0 1 connected\n",
            "vars currentEpoch\n",
        ] {
            std::fs::write(&path, bad).unwrap();
            assert!(load(&mut state(), &path, 0).is_err(), "{bad}");
        }
        std::fs::write(&path, "").unwrap();
        assert!(!load(&mut state(), &path, 0).unwrap());
    }

    #[test]
    fn save_replaces_the_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nodes.conf");
        std::fs::write(&path, "x".repeat(10_000)).unwrap();
        let mut st = state();
        st.config_path = path.clone();
        save(&st, true).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, render(&st));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
