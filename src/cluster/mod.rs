//! Redis Cluster mode (`cluster-enabled yes`): this node's part in a cluster of Podium and
//! redis-server 7.0 nodes.
//!
//! The files: `codec` (the bus's binary messages, byte for byte Redis 7.0's), `nodes` (the
//! node table and the state machine: handshakes, gossip, failure detection, epochs, slot
//! ownership), `nodes_conf` (nodes.conf, loaded at start and rewritten atomically), `bus`
//! (the sockets: the listener on port+10000, one reader and one writer task per link, the
//! cron) and `routing` (which node serves a command: MOVED, ASK, TRYAGAIN, CROSSSLOT,
//! CLUSTERDOWN, as Redis's getNodeByQuery decides). The commands (CLUSTER, READONLY,
//! READWRITE, ASKING) are `commands::cluster`; the keyspace indexes keys by slot
//! (`keyspace::slots`).
//!
//! One lock guards the state ([`Cluster::event`] takes it, runs what happened, then does
//! what Redis leaves to beforeSleep). Commands do not take it on their way: the slots this
//! node serves are mirrored in a lock-free [`SlotView`], so routing a command for a stable
//! slot of this node costs a few atomic loads. It is a leaf lock: nothing takes a shard
//! lock while holding it (key counts are read before, keys of lost slots deleted after), so
//! a CLUSTER command inside EXEC, which holds every shard, may take it.
//!
//! Replicas: CLUSTER REPLICATE, or a master losing its last slot to another master, makes
//! this node a replica in the state; after the event, replication is told to follow the
//! master's address (the state is the source of truth, replication follows it). A replica
//! of a failed master runs an election (FAILOVER_AUTH_REQUEST / ACK) and takes its slots,
//! and a spare replica migrates to a master left without one (`cluster-migration-barrier`).
//! CLUSTER FAILOVER runs the same election with the master up: the replica sends MFSTART,
//! the master pauses writes (after the event, then pings its final offset) and the replica
//! asks for votes (FORCEACK) once it has applied up to that offset; FORCE skips the master,
//! TAKEOVER the vote.

pub mod bus;
pub mod codec;
pub mod nodes;
pub mod nodes_conf;
pub mod routing;

use crate::config::dir;
use crate::keyspace::slots::{key_hash_slot, SLOTS};
use crate::state::Server;
use bytes::Bytes;
use nodes::{ClusterState, Settings};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

/// [`SlotView`] bits of a slot.
pub const VIEW_MINE: u8 = 1;
pub const VIEW_ASSIGNED: u8 = 2;
pub const VIEW_MIGRATING: u8 = 4;
pub const VIEW_IMPORTING: u8 = 8;

/// What routing needs to know of each slot without the state's lock.
pub struct SlotView {
    bits: Box<[AtomicU8]>,
    ok: AtomicBool,
}

impl SlotView {
    fn new() -> SlotView {
        SlotView {
            bits: (0..SLOTS).map(|_| AtomicU8::new(0)).collect(),
            ok: AtomicBool::new(false),
        }
    }

    fn refresh(&self, st: &ClusterState) {
        for j in 0..SLOTS {
            let mut b = 0;
            if let Some(owner) = st.slots[j] {
                b |= VIEW_ASSIGNED;
                if owner == st.myself {
                    b |= VIEW_MINE;
                }
            }
            if st.migrating[j].is_some() {
                b |= VIEW_MIGRATING;
            }
            if st.importing[j].is_some() {
                b |= VIEW_IMPORTING;
            }
            self.bits[j].store(b, Ordering::Relaxed);
        }
        self.ok.store(st.state_ok, Ordering::Release);
    }

    pub fn slot(&self, slot: u16) -> u8 {
        self.bits[slot as usize].load(Ordering::Relaxed)
    }

    pub fn state_ok(&self) -> bool {
        self.ok.load(Ordering::Acquire)
    }
}

/// Cluster mode's shared state.
pub struct Cluster {
    state: Mutex<ClusterState>,
    pub view: SlotView,
}

/// The cluster of a server in cluster mode.
pub fn get(srv: &Server) -> Option<&Cluster> {
    srv.cluster.get().and_then(|c| c.downcast_ref::<Cluster>())
}

/// Wall-clock milliseconds, as Redis's mstime().
pub fn now_ms() -> i64 {
    crate::clock::unix_ms()
}

/// The client port the bus is derived from: the TLS port with `tls-cluster yes`, as in Redis.
fn base_port(srv: &Server) -> u16 {
    if srv.config.flag(dir::TLS_CLUSTER) {
        srv.config.int(dir::TLS_PORT) as u16
    } else {
        srv.config.int(dir::PORT) as u16
    }
}

/// The ports this node announces, as Redis's deriveAnnouncedPorts: the client port (the TLS
/// one with `tls-cluster yes`), the plaintext port plain clients of a TLS cluster are sent to
/// (0 without tls-cluster), and the bus port.
fn announced_ports(srv: &Server) -> (u16, u16, u16) {
    let tls = srv.config.flag(dir::TLS_CLUSTER);
    let mut port = base_port(srv);
    let mut pport = if tls {
        srv.config.int(dir::PORT) as u16
    } else {
        0
    };
    let mut bus = bus_port(srv);
    let announce_port = srv.config.int(dir::CLUSTER_ANNOUNCE_PORT) as u16;
    let announce_tls_port = srv.config.int(dir::CLUSTER_ANNOUNCE_TLS_PORT) as u16;
    if tls && announce_tls_port != 0 {
        port = announce_tls_port;
        pport = announce_port;
    } else if announce_port != 0 {
        port = announce_port;
    }
    let announce_bus = srv.config.int(dir::CLUSTER_ANNOUNCE_BUS_PORT) as u16;
    if announce_bus != 0 {
        bus = announce_bus;
    }
    (port, pport, bus)
}

/// The bus port this node listens on: `cluster-port`, else the client port (the TLS one with
/// tls-cluster) plus 10,000.
pub fn bus_port(srv: &Server) -> u16 {
    match srv.config.int(dir::CLUSTER_PORT) as u16 {
        0 => base_port(srv).wrapping_add(10000),
        p => p,
    }
}

fn settings(srv: &Server) -> Settings {
    let (port, pport, cport) = announced_ports(srv);
    Settings {
        node_timeout: srv.config.int(dir::CLUSTER_NODE_TIMEOUT),
        require_full_coverage: srv.config.flag(dir::CLUSTER_REQUIRE_FULL_COVERAGE),
        announce_ip: srv.config.text(dir::CLUSTER_ANNOUNCE_IP),
        announce_hostname: srv.config.text(dir::CLUSTER_ANNOUNCE_HOSTNAME),
        port,
        pport,
        cport,
        tls_cluster: srv.config.flag(dir::TLS_CLUSTER),
        endpoint: match srv
            .config
            .text(dir::CLUSTER_PREFERRED_ENDPOINT_TYPE)
            .as_str()
        {
            "hostname" => 1,
            "unknown-endpoint" => 2,
            _ => 0,
        },
        sendbuf_limit: srv.config.int(dir::CLUSTER_LINK_SENDBUF_LIMIT).max(0) as u64,
        repl_offset: crate::state::replica_link::gossip_offset(srv),
        repl_data_age: crate::state::replica_link::data_age_ms(srv),
        repl_ping_period: srv.config.int(dir::REPL_PING_REPLICA_PERIOD),
        replica_no_failover: srv.config.flag(dir::CLUSTER_REPLICA_NO_FAILOVER),
        replica_validity_factor: srv.config.int(dir::CLUSTER_REPLICA_VALIDITY_FACTOR),
        migration_barrier: srv.config.int(dir::CLUSTER_MIGRATION_BARRIER),
        allow_replica_migration: srv.config.flag(dir::CLUSTER_ALLOW_REPLICA_MIGRATION),
    }
}

/// The event after a manual failover's pause took hold (a plain function: an event is
/// generic over its closure, and one started from inside another must not be).
fn send_manual_failover_ping(st: &mut ClusterState, _: &mut Vec<nodes::Delivery>) {
    st.send_manual_failover_ping(now_ms());
}

impl Cluster {
    /// Run `f` on the state as one event: then recompute what Redis recomputes before
    /// sleeping, refresh the routing view, connect new links and deliver PUBLISH messages.
    pub fn event<R>(
        &self,
        srv: &Server,
        f: impl FnOnce(&mut ClusterState, &mut Vec<nodes::Delivery>) -> R,
    ) -> R {
        let mut deliveries = Vec::new();
        let mut st = self.state.lock();
        let prev_ip = std::mem::replace(&mut st.settings, settings(srv)).announce_ip;
        // What CONFIG SET changed of my announced identity shows in my own entry at once (CLUSTER
        // NODES, nodes.conf) and reaches the peers with the next ping, as Redis's
        // clusterUpdateMyselfAnnouncedPorts / clusterUpdateMyselfIp / ...Hostname.
        let me = st.myself;
        let (port, pport, cport) = (st.settings.port, st.settings.pport, st.settings.cport);
        let ip = st.settings.announce_ip.clone();
        let hostname = st.settings.announce_hostname.clone();
        let n = st.nodes.get_mut(&me).expect("myself");
        let mut changed = false;
        if (n.port, n.pport, n.cport) != (port, pport, cport) {
            (n.port, n.pport, n.cport) = (port, pport, cport);
            changed = true;
        }
        if ip != prev_ip {
            // A cleared cluster-announce-ip leaves my address to be learned again from the
            // next peer that reaches me (Redis's autodetection).
            n.ip = ip;
            changed = true;
        }
        if n.hostname != hostname {
            n.hostname = hostname;
        }
        if changed {
            st.want_save(false);
        }
        // A replica that may not fail over says so in its flags (Redis's
        // clusterUpdateMyselfFlags).
        let me = st.myself;
        let no_failover = st.settings.replica_no_failover;
        let n = st.nodes.get_mut(&me).expect("myself");
        if (n.flags & nodes::F_NOFAILOVER != 0) != no_failover {
            n.flags ^= nodes::F_NOFAILOVER;
            st.want_save(false);
        }
        let r = f(&mut st, &mut deliveries);
        let now = now_ms();
        let fatal = st
            .after_event(now)
            .and_then(|fsync| nodes_conf::save(&st, fsync).err());
        if st.slots_dirty || st.state_ok != self.view.state_ok() {
            self.view.refresh(&st);
            st.slots_dirty = false;
        }
        let connects = st.take_connects();
        let lost = std::mem::take(&mut st.lost_slots);
        let channels_lost = std::mem::take(&mut st.channel_slots_lost);
        let target = st.replication_target();
        let follow = (target != st.replication_told).then(|| {
            st.replication_told.clone_from(&target);
            target
        });
        let mf_pause = st.mf_pause.take();
        let mf_ping = st.mf_ping.is_some();
        drop(st);
        if let Some(on) = mf_pause {
            // A manual failover's write pause (Redis's PAUSE_DURING_FAILOVER); once it holds,
            // the replica is told the offset writes stopped at.
            srv.pause.during_failover(on);
            if on && mf_ping {
                self.event(srv, send_manual_failover_ping);
            }
        }
        match follow {
            Some(Some((host, port))) => {
                tracing::info!("Connecting to MASTER {host}:{port}");
                crate::state::replica_link::set_master(srv, host, port);
            }
            Some(None) => crate::state::replica_link::unset_master(srv),
            None => {}
        }
        for slot in lost {
            // As Redis's delKeysInSlot: each key's deletion reaches the replicas and the AOF
            // (UNLINK under lazyfree-lazy-server-del), and clients tracking or watching it.
            let lazy = crate::keyspace::lazyfree::SERVER_DEL.load(Ordering::Relaxed);
            let verb: &'static [u8] = if lazy { b"UNLINK" } else { b"DEL" };
            srv.keyspace.delete_keys_in_slot(0, slot, |key| {
                srv.tracking
                    .invalidate(srv, std::slice::from_ref(&key), 0, None, true);
                srv.propagate(0, vec![Bytes::from_static(verb), key]);
            });
        }
        if !channels_lost.is_empty() {
            let mut lost_bits = vec![false; SLOTS];
            for &slot in &channels_lost {
                lost_bits[slot as usize] = true;
            }
            srv.pubsub.drop_shard_channels(
                |channel| lost_bits[key_hash_slot(channel) as usize],
                srv.config.hot.obuf.pubsub(),
                now,
            );
        }
        if let Some(e) = fatal {
            // Redis exits when it cannot update nodes.conf.
            tracing::warn!("Fatal: can't update cluster config file. ({e})");
            std::process::exit(1);
        }
        if !connects.is_empty() {
            if let Some(arc) = srv.arc() {
                for (link, outbox) in connects {
                    bus::connect(arc.clone(), link, outbox);
                }
            }
        }
        if !deliveries.is_empty() {
            let limit = srv.config.hot.obuf.pubsub();
            for d in deliveries {
                srv.pubsub
                    .publish(&d.channel, &d.message, d.shard, limit, now);
            }
        }
        r
    }

    /// Read the state without an event (replies that change nothing).
    pub fn read<R>(&self, f: impl FnOnce(&ClusterState) -> R) -> R {
        f(&self.state.lock())
    }
}

/// Cluster mode's start, before the dataset loads: lock and load nodes.conf (or create
/// this node), bind the bus port. Err stops the server with the message.
pub fn init(srv: &Arc<Server>) -> Result<(), String> {
    if !srv.config.flag(dir::CLUSTER_ENABLED) {
        return Ok(());
    }
    if crate::config::directives::replicaof_target(&srv.config.text(dir::REPLICAOF)).is_some() {
        return Err("replicaof directive not allowed in cluster mode".into());
    }
    let port = base_port(srv);
    if srv.config.int(dir::CLUSTER_PORT) == 0 && port > 65535 - 10000 {
        return Err("Redis port number too high. Cluster communication port is 10,000 port numbers higher than your Redis port. Your Redis port number must be 55535 or less.".into());
    }
    let path = std::path::PathBuf::from(srv.config.text(dir::CLUSTER_CONFIG_FILE));
    nodes_conf::lock(&path)?;
    let now = now_ms();
    let mut st = ClusterState::new(path.clone(), settings(srv), now);
    let loaded = nodes_conf::load(&mut st, &path, now)?;
    if !loaded {
        tracing::info!("No cluster configuration found, I'm {}", st.me().name_str());
        st.settings = settings(srv);
        nodes_conf::save(&st, true)
            .map_err(|e| format!("Fatal: can't update cluster config file. ({e})"))?;
    }
    // A replica by nodes.conf loads its files as a replica does (expired keys kept).
    srv.cluster_replica_at_start
        .store(st.me().is_replica(), Ordering::SeqCst);
    // My own ports are always the configured ones.
    let (p, pp, cp) = announced_ports(srv);
    let me = st.myself;
    if let Some(n) = st.nodes.get_mut(&me) {
        n.port = p;
        n.pport = pp;
        n.cport = cp;
        let ip = srv.config.text(dir::CLUSTER_ANNOUNCE_IP);
        if !ip.is_empty() {
            n.ip = ip;
        }
    }
    let listeners = crate::listeners::bind(srv, &srv.config.text(dir::BIND), bus_port(srv))
        .inspect_err(|_| {
            tracing::warn!(
                "Failed listening on port {} (cluster), aborting.",
                bus_port(srv)
            );
        })?;
    let view = SlotView::new();
    view.refresh(&st);
    let cluster = Arc::new(Cluster {
        state: Mutex::new(st),
        view,
    });
    let _ = srv.cluster.set(cluster);
    bus::listen(srv, listeners)?;
    Ok(())
}

/// After the dataset loaded: keys of slots this node does not serve (Redis's
/// verifyClusterConfigWithData): an unassigned slot becomes this node's, another node's slot
/// becomes importing. Keys in databases other than 0 stop the server. Then the cron starts.
pub fn start(srv: &Arc<Server>) -> Result<(), String> {
    let Some(cluster) = get(srv) else {
        return Ok(());
    };
    for db in 1..srv.keyspace.num_dbs() {
        if srv.keyspace.db_sizes(db).0 > 0 {
            return Err(
                "You can't have keys in a DB different than DB 0 when in Cluster mode. Exiting."
                    .into(),
            );
        }
    }
    let with_keys: Vec<usize> = (0..SLOTS)
        .filter(|&j| srv.keyspace.count_keys_in_slot(0, j as u16) > 0)
        .collect();
    cluster.event(srv, |st, _| {
        if st.me().is_replica() {
            return;
        }
        let mut changed = false;
        for j in with_keys {
            if st.slots[j] == Some(st.myself) || st.importing[j].is_some() {
                continue;
            }
            changed = true;
            match st.slots[j] {
                None => {
                    tracing::warn!("I have keys for unassigned slot {j}. Taking responsibility for it.");
                    let me = st.myself;
                    st.add_slot(me, j);
                }
                Some(owner) => {
                    tracing::warn!("I have keys for slot {j}, but the slot is assigned to another node. Setting it to importing state.");
                    st.importing[j] = Some(owner);
                    st.slots_dirty = true;
                }
            }
        }
        if changed {
            st.want_save(true);
        }
    });
    bus::start_cron(srv);
    Ok(())
}

/// PUBLISH / SPUBLISH reach the other nodes over the bus.
pub fn propagate_publish(srv: &Server, channel: &[u8], message: &[u8], shard: bool) {
    if let Some(c) = get(srv) {
        c.event(srv, |st, _| st.propagate_publish(channel, message, shard));
    }
}
