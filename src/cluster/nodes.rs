//! The node table and the cluster's state machine, as Redis 7.0 runs it.
//!
//! [`ClusterState`] holds what a node knows of the cluster: every node (itself among them)
//! with its flags, address, epochs, slots, ping/pong times and the failure reports other
//! masters sent about it; which node serves each slot, the slots this node is migrating or
//! importing; the current epoch and the last vote. It reacts to what happens as Redis's
//! cluster.c does: a bus message ([`ClusterState::process`]: handshakes, gossip, PFAIL and
//! FAIL, slot ownership by config epoch, UPDATE, PUBLISH), the cron tick (reconnecting links,
//! pinging, flagging silent nodes PFAIL) and the CLUSTER commands. It owns no socket: it
//! queues encoded messages on its links' channels and lists the outbound links the bus must
//! connect ([`ClusterState::take_connects`]); `bus` does the I/O. Work Redis defers to
//! beforeSleep (saving nodes.conf, recomputing the state) is flagged in `todo` and done by
//! [`ClusterState::after_event`] once the event is handled.

use super::codec::{self, Body, Gossip, Header, Name, SlotBitmap, NAME_LEN, SLOT_BYTES};
use crate::keyspace::slots::SLOTS;
use hashbrown::HashMap;
use rand::Rng;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub type NodeId = u32;
pub type LinkId = u64;

pub const F_MASTER: u16 = 1;
pub const F_SLAVE: u16 = 2;
pub const F_PFAIL: u16 = 4;
pub const F_FAIL: u16 = 8;
pub const F_MYSELF: u16 = 16;
pub const F_HANDSHAKE: u16 = 32;
pub const F_NOADDR: u16 = 64;
pub const F_MEET: u16 = 128;
pub const F_MIGRATE_TO: u16 = 256;
pub const F_NOFAILOVER: u16 = 512;

/// DEBUG DROP-CLUSTER-PACKET-FILTER: bus messages of this type are counted and dropped
/// (-1: none).
pub static DROP_FILTER: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

const TODO_UPDATE_STATE: u32 = 1;
const TODO_SAVE_CONFIG: u32 = 2;
const TODO_FSYNC_CONFIG: u32 = 4;

/// How long a forgotten node may not be re-added from gossip (seconds).
const BLACKLIST_TTL: i64 = 60;
const FAIL_REPORT_VALIDITY_MULT: i64 = 2;
const FAIL_UNDO_TIME_MULT: i64 = 2;
const MAX_REJOIN_DELAY: i64 = 5000;
const MIN_REJOIN_DELAY: i64 = 500;
const WRITABLE_DELAY: i64 = 2000;
/// How long a manual failover may take before it is abandoned (ms), and the master's write
/// pause meanwhile is at most this times two (Redis's CLUSTER_MF_TIMEOUT, _PAUSE_MULT).
pub const MF_TIMEOUT: i64 = 5000;
/// How long a master stays orphaned before a replica migrates to it (ms).
const MIGRATION_DELAY: i64 = 5000;
/// Why a replica cannot fail over yet (Redis's CLUSTER_CANT_FAILOVER_*), logged once per
/// reason every ten seconds.
const CANT_FAILOVER_DATA_AGE: u8 = 1;
const CANT_FAILOVER_WAITING_DELAY: u8 = 2;
const CANT_FAILOVER_EXPIRED: u8 = 3;
const CANT_FAILOVER_WAITING_VOTES: u8 = 4;
const CANT_FAILOVER_RELOG_MS: i64 = 10_000;

/// A node as this node knows it.
pub struct Node {
    pub name: Name,
    pub ctime: i64,
    pub flags: u16,
    pub config_epoch: u64,
    pub slots: Box<SlotBitmap>,
    pub numslots: usize,
    pub replicas: Vec<NodeId>,
    pub slaveof: Option<NodeId>,
    pub ping_sent: i64,
    pub pong_received: i64,
    pub data_received: i64,
    pub fail_time: i64,
    pub repl_offset: u64,
    pub ip: String,
    pub hostname: String,
    pub port: u16,
    pub pport: u16,
    pub cport: u16,
    pub link: Option<LinkId>,
    pub inbound_link: Option<LinkId>,
    /// Masters that reported this node failing, with when they last did.
    pub fail_reports: Vec<(NodeId, i64)>,
    last_in_ping_gossip: u64,
    /// When this node (a master) last had one of its replicas get my vote.
    voted_time: i64,
    /// Since when this master has been orphaned (slots, no working replica, and it had one):
    /// 0 while it is not (Redis's orphaned_time, kept by replica migration).
    orphaned_time: i64,
}

impl Node {
    fn new(name: Name, flags: u16, now: i64) -> Node {
        Node {
            name,
            ctime: now,
            flags,
            config_epoch: 0,
            slots: Box::new([0; SLOT_BYTES]),
            numslots: 0,
            replicas: Vec::new(),
            slaveof: None,
            ping_sent: 0,
            pong_received: 0,
            data_received: 0,
            fail_time: 0,
            repl_offset: 0,
            ip: String::new(),
            hostname: String::new(),
            port: 0,
            pport: 0,
            cport: 0,
            link: None,
            inbound_link: None,
            fail_reports: Vec::new(),
            last_in_ping_gossip: 0,
            voted_time: 0,
            orphaned_time: 0,
        }
    }

    pub fn is_master(&self) -> bool {
        self.flags & F_MASTER != 0
    }
    pub fn is_replica(&self) -> bool {
        self.flags & F_SLAVE != 0
    }
    pub fn in_handshake(&self) -> bool {
        self.flags & F_HANDSHAKE != 0
    }
    pub fn failed(&self) -> bool {
        self.flags & F_FAIL != 0
    }
    pub fn timed_out(&self) -> bool {
        self.flags & F_PFAIL != 0
    }
    pub fn has_slot(&self, slot: usize) -> bool {
        bit(&self.slots, slot)
    }
    pub fn name_str(&self) -> &str {
        std::str::from_utf8(&self.name).unwrap_or("")
    }
}

pub fn bit(map: &SlotBitmap, slot: usize) -> bool {
    map[slot / 8] & (1 << (slot & 7)) != 0
}
fn set_bit(map: &mut SlotBitmap, slot: usize) {
    map[slot / 8] |= 1 << (slot & 7);
}
fn clear_bit(map: &mut SlotBitmap, slot: usize) {
    map[slot / 8] &= !(1 << (slot & 7));
}

/// A random node name: 40 lowercase hex characters.
pub fn random_name() -> Name {
    let mut rng = rand::thread_rng();
    let mut n = [0u8; NAME_LEN];
    for c in n.iter_mut() {
        *c = b"0123456789abcdef"[rng.gen_range(0..16)];
    }
    n
}

/// Redis's verifyClusterNodeId: 40 characters of [a-z0-9].
pub fn valid_name(s: &[u8]) -> bool {
    s.len() == NAME_LEN
        && s.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
}

/// One bus connection as the state sees it (the socket is the bus's task).
pub struct Link {
    pub node: Option<NodeId>,
    pub inbound: bool,
    pub ctime: i64,
    /// Encoded messages for the link's writer.
    pub out: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
    /// Bytes queued and not yet written (`cluster-link-sendbuf-limit`, CLUSTER LINKS).
    pub queued: Arc<AtomicUsize>,
    /// Woken when the state frees the link: the bus's tasks then close the socket.
    pub closed: Arc<tokio::sync::Notify>,
    /// The socket's local and remote IPs (empty until an outbound link connects).
    pub local_ip: String,
    pub peer_ip: String,
}

/// The receiving end of a link's message queue (its writer reads it).
pub type Outbox = tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>;

impl Link {
    pub fn new(node: Option<NodeId>, now: i64) -> (Link, Outbox) {
        let (out, rx) = tokio::sync::mpsc::unbounded_channel();
        (
            Link {
                node,
                inbound: node.is_none(),
                ctime: now,
                out,
                queued: Arc::new(AtomicUsize::new(0)),
                closed: Arc::new(tokio::sync::Notify::new()),
                local_ip: String::new(),
                peer_ip: String::new(),
            },
            rx,
        )
    }
}

/// The directives the state machine reads, taken from the configuration at each event.
#[derive(Clone, Default)]
pub struct Settings {
    pub node_timeout: i64,
    pub require_full_coverage: bool,
    pub announce_ip: String,
    pub announce_hostname: String,
    /// The ports this node announces: clients, plaintext (TLS only: 0), bus.
    pub port: u16,
    pub pport: u16,
    pub cport: u16,
    /// tls-cluster: announced ports are TLS ports, plain clients get the plaintext ones.
    pub tls_cluster: bool,
    /// 0 ip, 1 hostname, 2 unknown-endpoint.
    pub endpoint: u8,
    pub sendbuf_limit: u64,
    /// This node's replication offset (PING headers).
    pub repl_offset: u64,
    /// How long ago this replica last heard from its master, in ms (Redis's data age).
    pub repl_data_age: i64,
    pub repl_ping_period: i64,
    pub replica_no_failover: bool,
    pub replica_validity_factor: i64,
    /// cluster-migration-barrier: the working replicas a master keeps before one of them
    /// may migrate to an orphaned master.
    pub migration_barrier: i64,
    /// cluster-allow-replica-migration.
    pub allow_replica_migration: bool,
}

/// A PUBLISH received from the bus, delivered once the state's lock is released.
pub struct Delivery {
    pub channel: Vec<u8>,
    pub message: Vec<u8>,
    pub shard: bool,
}

pub struct ClusterState {
    pub myself: NodeId,
    pub nodes: HashMap<NodeId, Node>,
    by_name: HashMap<Name, NodeId>,
    next_node: NodeId,
    pub current_epoch: u64,
    pub last_vote_epoch: u64,
    pub state_ok: bool,
    /// Masters serving at least one slot.
    pub size: usize,
    pub slots: Vec<Option<NodeId>>,
    pub migrating: Vec<Option<NodeId>>,
    pub importing: Vec<Option<NodeId>>,
    owner_not_claiming: Box<SlotBitmap>,
    /// Forgotten nodes: name -> Unix seconds until which gossip may not re-add them.
    blacklist: HashMap<Name, i64>,
    pub stats_sent: [u64; codec::TYPES],
    pub stats_received: [u64; codec::TYPES],
    stats_pfail_nodes: usize,
    pub links_limit_exceeded: u64,
    pub links: HashMap<LinkId, Link>,
    next_link: LinkId,
    /// Outbound links created and not yet handed to the bus to connect, with the receiving
    /// end of their message queue.
    connects: Vec<(LinkId, Outbox)>,
    todo: u32,
    first_call_time: i64,
    among_minority_time: i64,
    pings_sent: u64,
    cron_iteration: u64,
    pub settings: Settings,
    pub config_path: std::path::PathBuf,
    /// Slot ownership changed since the routing view was last refreshed.
    pub slots_dirty: bool,
    /// Slots this node served and lost to a newer configuration: their keys are deleted
    /// once the lock is released (the state's lock is never held while a shard's is taken).
    pub lost_slots: Vec<u16>,
    /// Slots my shard stopped serving in this event: their shard channels are dropped.
    pub channel_slots_lost: Vec<u16>,
    /// The master address replication was last told to follow (None: not following).
    /// [`crate::cluster::Cluster::event`] compares it with [`ClusterState::replication_target`]
    /// after each event and tells replication when they differ.
    pub replication_told: Option<(String, u16)>,
    /// The replica's election (Redis's failover_auth_*): when it may start, the votes
    /// counted, whether the request went out, this replica's rank and the election's epoch.
    pub failover_auth_time: i64,
    pub failover_auth_count: usize,
    pub failover_auth_sent: bool,
    pub failover_auth_rank: usize,
    pub failover_auth_epoch: u64,
    /// The last reason logged for not failing over, and when (to log each once a while).
    cant_failover: (u8, i64),
    /// A manual failover in progress (Redis's mf_*): when it is abandoned (0: none); on
    /// the master, the replica it pauses for; on the replica, whether its election may
    /// start, and the master's final offset once the master reported itself paused.
    pub mf_end: i64,
    mf_replica: Option<NodeId>,
    mf_can_start: bool,
    mf_master_offset: Option<u64>,
    /// The master's write pause for a manual failover to switch on or off once the state's
    /// lock is released, and the link to ping once it is on (the ping carries the offset the
    /// replica waits for, which must be read with writes held).
    pub mf_pause: Option<bool>,
    pub mf_ping: Option<LinkId>,
}

impl ClusterState {
    /// A state with only a new node, myself, a master (no nodes.conf yet).
    pub fn new(config_path: std::path::PathBuf, settings: Settings, now: i64) -> ClusterState {
        let mut st = ClusterState {
            myself: 0,
            nodes: HashMap::new(),
            by_name: HashMap::new(),
            next_node: 0,
            current_epoch: 0,
            last_vote_epoch: 0,
            state_ok: false,
            size: 1,
            slots: vec![None; SLOTS],
            migrating: vec![None; SLOTS],
            importing: vec![None; SLOTS],
            owner_not_claiming: Box::new([0; SLOT_BYTES]),
            blacklist: HashMap::new(),
            stats_sent: [0; codec::TYPES],
            stats_received: [0; codec::TYPES],
            stats_pfail_nodes: 0,
            links_limit_exceeded: 0,
            links: HashMap::new(),
            next_link: 1,
            connects: Vec::new(),
            todo: 0,
            first_call_time: 0,
            among_minority_time: 0,
            pings_sent: 0,
            cron_iteration: 0,
            settings,
            config_path,
            slots_dirty: true,
            lost_slots: Vec::new(),
            channel_slots_lost: Vec::new(),
            replication_told: None,
            failover_auth_time: 0,
            failover_auth_count: 0,
            failover_auth_sent: false,
            failover_auth_rank: 0,
            failover_auth_epoch: 0,
            cant_failover: (0, 0),
            mf_end: 0,
            mf_replica: None,
            mf_can_start: false,
            mf_master_offset: None,
            mf_pause: None,
            mf_ping: None,
        };
        st.myself = st.add_node(Node::new(random_name(), F_MYSELF | F_MASTER, now));
        st
    }

    /// Forget every node (nodes.conf is about to be loaded).
    pub(crate) fn clear_nodes(&mut self) {
        self.nodes.clear();
        self.by_name.clear();
    }

    pub fn me(&self) -> &Node {
        &self.nodes[&self.myself]
    }
    fn me_mut(&mut self) -> &mut Node {
        self.nodes
            .get_mut(&self.myself)
            .expect("myself is in the table")
    }
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[&id]
    }
    fn node_mut(&mut self, id: NodeId) -> &mut Node {
        self.nodes.get_mut(&id).expect("a known node")
    }

    pub(crate) fn add_node(&mut self, node: Node) -> NodeId {
        let id = self.next_node;
        self.next_node += 1;
        self.by_name.insert(node.name, id);
        self.nodes.insert(id, node);
        id
    }

    /// A node by its name (which must be a valid node ID).
    pub fn lookup(&self, name: &[u8]) -> Option<NodeId> {
        if !valid_name(name) {
            return None;
        }
        let mut n = [0u8; NAME_LEN];
        n.copy_from_slice(name);
        self.by_name.get(&n).copied()
    }

    /// The node of `name` from nodes.conf, created (without flags) when not yet known.
    pub(crate) fn lookup_or_create(&mut self, name: &[u8], now: i64) -> NodeId {
        if let Some(id) = self.lookup(name) {
            return id;
        }
        let mut n = [0u8; NAME_LEN];
        n.copy_from_slice(name);
        self.add_node(Node::new(n, 0, now))
    }

    pub(crate) fn set_myself(&mut self, id: NodeId) {
        self.myself = id;
    }

    fn rename(&mut self, id: NodeId, new: Name) {
        let old = self.node(id).name;
        self.by_name.remove(&old);
        self.node_mut(id).name = new;
        self.by_name.insert(new, id);
    }

    fn flag(&mut self, todo: u32) {
        self.todo |= todo;
    }

    /// Ask for nodes.conf to be saved (and fsynced) once the event is handled.
    pub fn want_save(&mut self, fsync: bool) {
        self.todo |= TODO_SAVE_CONFIG | if fsync { TODO_FSYNC_CONFIG } else { 0 };
    }

    pub fn want_update_state(&mut self) {
        self.todo |= TODO_UPDATE_STATE;
    }

    /// Links to connect (the bus starts a task for each).
    pub fn take_connects(&mut self) -> Vec<(LinkId, Outbox)> {
        std::mem::take(&mut self.connects)
    }

    // ----- Slots -----

    pub fn add_slot(&mut self, id: NodeId, slot: usize) -> bool {
        if self.slots[slot].is_some() {
            return false;
        }
        self.set_slot_bit(id, slot);
        self.slots[slot] = Some(id);
        self.slots_dirty = true;
        true
    }

    pub fn del_slot(&mut self, slot: usize) -> bool {
        let Some(id) = self.slots[slot] else {
            return false;
        };
        // A slot my shard (I, or the master I replicate) no longer serves takes its shard
        // channels with it (Redis's clusterDelSlot).
        if id == self.myself || self.me().slaveof == Some(id) {
            self.channel_slots_lost.push(slot as u16);
        }
        let n = self.node_mut(id);
        if bit(&n.slots, slot) {
            clear_bit(&mut n.slots, slot);
            n.numslots -= 1;
        }
        self.slots[slot] = None;
        self.slots_dirty = true;
        true
    }

    fn set_slot_bit(&mut self, id: NodeId, slot: usize) {
        let masters_have_replicas = self
            .nodes
            .values()
            .filter(|n| !n.is_replica())
            .any(|n| !n.replicas.is_empty());
        let n = self.node_mut(id);
        if !bit(&n.slots, slot) {
            set_bit(&mut n.slots, slot);
            n.numslots += 1;
            if n.numslots == 1 && masters_have_replicas {
                n.flags |= F_MIGRATE_TO;
            }
        }
    }

    pub fn del_node_slots(&mut self, id: NodeId) -> usize {
        let mut deleted = 0;
        for j in 0..SLOTS {
            if self.node(id).has_slot(j) {
                self.del_slot(j);
                deleted += 1;
            }
        }
        deleted
    }

    pub fn close_all_slots(&mut self) {
        self.migrating.iter_mut().for_each(|s| *s = None);
        self.importing.iter_mut().for_each(|s| *s = None);
        self.slots_dirty = true;
    }

    fn slot_unclaimed(&self, slot: usize) -> bool {
        self.slots[slot].is_none() || bit(&self.owner_not_claiming, slot)
    }

    // ----- Nodes -----

    /// Remove a node and every reference to it (Redis's clusterDelNode).
    pub fn del_node(&mut self, id: NodeId) {
        for j in 0..SLOTS {
            if self.importing[j] == Some(id) {
                self.importing[j] = None;
            }
            if self.migrating[j] == Some(id) {
                self.migrating[j] = None;
            }
            if self.slots[j] == Some(id) {
                self.del_slot(j);
            }
        }
        for n in self.nodes.values_mut() {
            n.fail_reports.retain(|(by, _)| *by != id);
        }
        let replicas = std::mem::take(&mut self.node_mut(id).replicas);
        for r in replicas {
            if let Some(n) = self.nodes.get_mut(&r) {
                n.slaveof = None;
            }
        }
        if let Some(m) = self.node(id).slaveof {
            self.remove_replica(m, id);
        }
        let (link, inbound) = (self.node(id).link, self.node(id).inbound_link);
        for l in [link, inbound].into_iter().flatten() {
            self.free_link(l);
        }
        let name = self.node(id).name;
        self.by_name.remove(&name);
        self.nodes.remove(&id);
        self.slots_dirty = true;
    }

    fn remove_replica(&mut self, master: NodeId, replica: NodeId) {
        if let Some(m) = self.nodes.get_mut(&master) {
            m.replicas.retain(|r| *r != replica);
            if m.replicas.is_empty() {
                m.flags &= !F_MIGRATE_TO;
            }
        }
    }

    pub(crate) fn add_replica(&mut self, master: NodeId, replica: NodeId) {
        let m = self.node_mut(master);
        if !m.replicas.contains(&replica) {
            m.replicas.push(replica);
            m.flags |= F_MIGRATE_TO;
        }
    }

    fn set_node_as_master(&mut self, id: NodeId) {
        if self.node(id).is_master() {
            return;
        }
        if let Some(m) = self.node(id).slaveof {
            self.remove_replica(m, id);
            if id != self.myself {
                self.node_mut(id).flags |= F_MIGRATE_TO;
            }
        }
        let n = self.node_mut(id);
        n.flags &= !F_SLAVE;
        n.flags |= F_MASTER;
        n.slaveof = None;
        self.flag(TODO_SAVE_CONFIG | TODO_UPDATE_STATE);
    }

    /// Make this node a replica of `master` (Redis's clusterSetMaster): a master gives up
    /// its open slots (it has no assigned ones by now), a replica leaves its old master.
    /// Replication follows once the event ends ([`ClusterState::replication_target`]).
    pub fn set_my_master(&mut self, master: NodeId) {
        self.reset_manual_failover();
        let me = self.myself;
        if self.me().is_master() {
            let n = self.me_mut();
            n.flags &= !(F_MASTER | F_MIGRATE_TO);
            n.flags |= F_SLAVE;
            self.close_all_slots();
        } else if let Some(old) = self.me().slaveof {
            self.remove_replica(old, me);
        }
        self.me_mut().slaveof = Some(master);
        self.add_replica(master, me);
        self.flag(TODO_SAVE_CONFIG | TODO_UPDATE_STATE);
    }

    /// The address replication should follow: my master's, once it is known (Redis's cron
    /// starts replication when the master has an address).
    pub fn replication_target(&self) -> Option<(String, u16)> {
        let me = self.me();
        if !me.is_replica() {
            return None;
        }
        let m = self.node(me.slaveof?);
        (!m.ip.is_empty() && m.port != 0).then(|| (m.ip.clone(), m.port))
    }

    /// How many replicas of my master that may fail over have a larger offset than mine
    /// (Redis's clusterGetSlaveRank): each makes my election wait one more second.
    fn replica_rank(&self) -> usize {
        let Some(m) = self.me().slaveof else {
            return 0;
        };
        let mine = self.settings.repl_offset;
        self.node(m)
            .replicas
            .iter()
            .filter(|&&r| r != self.myself)
            .map(|&r| self.node(r))
            .filter(|n| n.flags & F_NOFAILOVER == 0 && n.repl_offset > mine)
            .count()
    }

    /// Log why this replica cannot fail over, each reason once in a while and not in the
    /// first moments after its master failed (Redis's clusterLogCantFailover).
    fn log_cant_failover(&mut self, reason: u8, now: i64) {
        if reason == self.cant_failover.0 && now - self.cant_failover.1 < CANT_FAILOVER_RELOG_MS {
            return;
        }
        self.cant_failover.0 = reason;
        if let Some(m) = self.me().slaveof {
            let m = self.node(m);
            if m.failed() && now - m.fail_time < self.settings.node_timeout + 5000 {
                return;
            }
        }
        let msg = match reason {
            CANT_FAILOVER_DATA_AGE => "Disconnected from master for longer than allowed. Please check the 'cluster-replica-validity-factor' configuration option.",
            CANT_FAILOVER_WAITING_DELAY => "Waiting the delay before I can start a new failover.",
            CANT_FAILOVER_EXPIRED => "Failover attempt expired.",
            _ => "Waiting for votes, but majority still not reached.",
        };
        self.cant_failover.1 = now;
        tracing::warn!("Currently unable to failover: {msg}");
    }

    /// A replica of a failed master runs an election for its slots (Redis's
    /// clusterHandleSlaveFailover): after a delay growing with its rank it bumps the
    /// current epoch and asks the masters for votes; with a majority it takes the slots.
    pub fn handle_replica_failover(&mut self, now: i64) {
        let auth_age = now - self.failover_auth_time;
        let needed = self.size / 2 + 1;
        let timeout = self.settings.node_timeout;
        let auth_timeout = (timeout * 2).max(2000);
        let auth_retry = auth_timeout * 2;
        let me = self.me();
        let master = match me.slaveof {
            Some(m) if me.is_replica() => m,
            _ => {
                self.cant_failover.0 = 0;
                return;
            }
        };
        // A manual failover (CLUSTER FAILOVER) runs the election with the master up.
        let manual = self.mf_end != 0 && self.mf_can_start;
        let mn = self.node(master);
        if (!manual && (!mn.failed() || self.settings.replica_no_failover)) || mn.numslots == 0 {
            self.cant_failover.0 = 0;
            return;
        }
        let mut data_age = self.settings.repl_data_age;
        if data_age > timeout {
            data_age -= timeout;
        }
        let factor = self.settings.replica_validity_factor;
        if factor != 0
            && data_age > self.settings.repl_ping_period * 1000 + timeout * factor
            && !manual
        {
            self.log_cant_failover(CANT_FAILOVER_DATA_AGE, now);
            return;
        }
        if auth_age > auth_retry {
            self.failover_auth_time = now + 500 + rand::thread_rng().gen_range(0..500);
            self.failover_auth_count = 0;
            self.failover_auth_sent = false;
            self.failover_auth_rank = self.replica_rank();
            self.failover_auth_time += self.failover_auth_rank as i64 * 1000;
            if self.mf_end != 0 {
                // A manual failover does not wait: its master is up and paused for it.
                self.failover_auth_time = now;
                self.failover_auth_rank = 0;
            }
            tracing::warn!(
                "Start of election delayed for {} milliseconds (rank #{}, offset {}).",
                self.failover_auth_time - now,
                self.failover_auth_rank,
                self.settings.repl_offset
            );
            self.broadcast_pong(true, now);
            return;
        }
        if !self.failover_auth_sent && self.mf_end == 0 {
            let rank = self.replica_rank();
            if rank > self.failover_auth_rank {
                let added = (rank - self.failover_auth_rank) as i64 * 1000;
                self.failover_auth_time += added;
                self.failover_auth_rank = rank;
                tracing::warn!(
                    "Replica rank updated to #{rank}, added {added} milliseconds of delay."
                );
            }
        }
        if now < self.failover_auth_time {
            self.log_cant_failover(CANT_FAILOVER_WAITING_DELAY, now);
            return;
        }
        if auth_age > auth_timeout {
            self.log_cant_failover(CANT_FAILOVER_EXPIRED, now);
            return;
        }
        if !self.failover_auth_sent {
            self.current_epoch += 1;
            self.failover_auth_epoch = self.current_epoch;
            tracing::warn!(
                "Starting a failover election for epoch {}.",
                self.current_epoch
            );
            let mut h = self.header(codec::FAILOVER_AUTH_REQUEST);
            if self.mf_end != 0 {
                // Masters vote for it though its master is not failing.
                h.mflags[0] |= codec::MFLAG_FORCEACK;
            }
            let msg = codec::encode(&h, &Body::Empty);
            self.broadcast(&msg, codec::FAILOVER_AUTH_REQUEST);
            self.failover_auth_sent = true;
            self.want_save(true);
            self.flag(TODO_UPDATE_STATE);
            return;
        }
        if self.failover_auth_count >= needed {
            tracing::warn!("Failover election won: I'm the new master.");
            if self.me().config_epoch < self.failover_auth_epoch {
                let epoch = self.failover_auth_epoch;
                self.me_mut().config_epoch = epoch;
                tracing::warn!("configEpoch set to {epoch} after successful failover");
            }
            self.replace_my_master(now);
        } else {
            self.log_cant_failover(CANT_FAILOVER_WAITING_VOTES, now);
        }
    }

    /// Replicas of `master` not flagged FAIL (Redis's clusterCountNonFailingSlaves).
    fn working_replicas(&self, master: NodeId) -> usize {
        self.node(master)
            .replicas
            .iter()
            .filter(|&&r| self.nodes.get(&r).is_some_and(|n| !n.failed()))
            .count()
    }

    /// Replica migration (Redis's clusterHandleSlaveMigration): with the cluster up, a
    /// replica whose master keeps more than `cluster-migration-barrier` working replicas
    /// without it, and that has the smallest name among the replicas of the masters with the
    /// most working replicas, becomes a replica of a master that has had slots and no working
    /// replica for `MIGRATION_DELAY` (time for the natural replicas of a master that just
    /// failed over to announce their switch).
    fn handle_replica_migration(&mut self, max_replicas: usize, now: i64) {
        if !self.state_ok {
            return;
        }
        let Some(my_master) = self.me().slaveof else {
            return;
        };
        let ok = self
            .node(my_master)
            .replicas
            .iter()
            .filter(|&&r| {
                self.nodes
                    .get(&r)
                    .is_some_and(|n| !n.failed() && !n.timed_out())
            })
            .count();
        if ok as i64 <= self.settings.migration_barrier {
            return;
        }
        let mut candidate = self.myself;
        let mut target = None;
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            let n = self.node(id);
            let ok = if n.is_master() {
                self.working_replicas(id)
            } else {
                0
            };
            let orphaned = n.is_master() && !n.failed() && n.flags & F_MIGRATE_TO != 0 && ok == 0;
            if orphaned {
                if target.is_none() && n.numslots > 0 {
                    target = Some(id);
                }
                let n = self.node_mut(id);
                if n.orphaned_time == 0 {
                    n.orphaned_time = now;
                }
            } else {
                self.node_mut(id).orphaned_time = 0;
            }
            if ok == max_replicas {
                for &r in &self.node(id).replicas {
                    if self.node(r).name < self.node(candidate).name {
                        candidate = r;
                    }
                }
            }
        }
        if let Some(t) = target {
            if candidate == self.myself
                && now - self.node(t).orphaned_time > MIGRATION_DELAY
                && !self.settings.replica_no_failover
            {
                tracing::info!("Migrating to orphaned master {}", self.node(t).name_str());
                self.set_my_master(t);
            }
        }
    }

    /// The election is won: this replica becomes a master with its old master's slots and
    /// tells everyone (Redis's clusterFailoverReplaceYourMaster). Replication stops
    /// following once the event ends.
    fn replace_my_master(&mut self, now: i64) {
        let me = self.myself;
        let Some(old) = self.me().slaveof else {
            return;
        };
        if self.me().is_master() {
            return;
        }
        self.set_node_as_master(me);
        for j in 0..SLOTS {
            if self.node(old).has_slot(j) {
                self.del_slot(j);
                self.add_slot(me, j);
            }
        }
        self.update_state(now);
        self.want_save(true);
        self.broadcast_pong(false, now);
        self.reset_manual_failover();
    }

    /// End any manual failover (Redis's resetManualFailover): a master that paused its
    /// writes for one lets them go.
    fn reset_manual_failover(&mut self) {
        if self.mf_replica.take().is_some() {
            self.mf_pause = Some(false);
            self.mf_ping = None;
        }
        self.mf_end = 0;
        self.mf_can_start = false;
        self.mf_master_offset = None;
    }

    /// CLUSTER FAILOVER on this replica (Redis's clusterCommand FAILOVER): TAKEOVER takes
    /// the master's slots at once with a new epoch and no vote; FORCE runs the election at
    /// once without the master's help; otherwise the master is asked (MFSTART) to pause its
    /// writes and report its final offset, and the election starts once this replica has
    /// applied up to it. Err: Redis's error text.
    pub fn start_manual_failover(
        &mut self,
        force: bool,
        takeover: bool,
        now: i64,
    ) -> Result<(), &'static str> {
        if self.me().is_master() {
            return Err("ERR You should send CLUSTER FAILOVER to a replica");
        }
        let Some(master) = self.me().slaveof else {
            return Err("ERR I'm a replica but my master is unknown to me");
        };
        let mn = self.node(master);
        if !force && (mn.failed() || mn.link.is_none()) {
            return Err("ERR Master is down or failed, please use CLUSTER FAILOVER FORCE");
        }
        self.reset_manual_failover();
        self.mf_end = now + MF_TIMEOUT;
        if takeover {
            // No consensus: a new epoch of our own, then the master's slots.
            tracing::warn!("Taking over the master (user request).");
            self.bump_epoch_without_consensus();
            self.replace_my_master(now);
        } else if force {
            tracing::warn!("Forced failover user request accepted.");
            self.mf_can_start = true;
        } else {
            tracing::warn!("Manual failover user request accepted.");
            if let Some(l) = self.node(master).link {
                let msg = codec::encode(&self.header(codec::MFSTART), &Body::Empty);
                self.send(l, &msg, codec::MFSTART);
            }
        }
        Ok(())
    }

    /// The replica's side, each cron after the timeout check (Redis's
    /// clusterHandleManualFailover): let the election start once the master's final offset
    /// is reached.
    fn handle_manual_failover(&mut self) {
        if self.mf_end == 0 || self.mf_can_start || !self.me().is_replica() {
            return;
        }
        if self.mf_master_offset == Some(self.settings.repl_offset) {
            self.mf_can_start = true;
            tracing::warn!("All master replication stream processed, manual failover can start.");
        }
    }

    /// After the master's pause is in force: the ping that gives the replica its final
    /// offset (this event's header carries the offset read with writes held).
    pub fn send_manual_failover_ping(&mut self, now: i64) {
        if let Some(l) = self.mf_ping.take() {
            if self.mf_end != 0 && self.links.contains_key(&l) {
                self.send_ping(l, codec::PING, now);
            }
        }
    }

    /// A master answers a replica's vote request if it may (Redis's
    /// clusterSendFailoverAuthIfNeeded): once per epoch, only for a replica of a failed
    /// master, not twice for one master within two node timeouts, and only when no slot
    /// the replica claims has a newer owner.
    fn vote_if_needed(&mut self, node: NodeId, h: &codec::Header, now: i64) {
        if self.me().is_replica() || self.me().numslots == 0 {
            return;
        }
        let name = self.node(node).name_str().to_string();
        if h.current_epoch < self.current_epoch {
            tracing::warn!(
                "Failover auth denied to {name}: reqEpoch ({}) < curEpoch({})",
                h.current_epoch,
                self.current_epoch
            );
            return;
        }
        if self.last_vote_epoch == self.current_epoch {
            tracing::warn!(
                "Failover auth denied to {name}: already voted for epoch {}",
                self.current_epoch
            );
            return;
        }
        let force = h.mflags[0] & codec::MFLAG_FORCEACK != 0;
        let n = self.node(node);
        let master = match n.slaveof {
            _ if n.is_master() => {
                tracing::warn!("Failover auth denied to {name}: it is a master node");
                return;
            }
            None => {
                tracing::warn!("Failover auth denied to {name}: I don't know its master");
                return;
            }
            Some(m) if !self.node(m).failed() && !force => {
                tracing::warn!("Failover auth denied to {name}: its master is up");
                return;
            }
            Some(m) => m,
        };
        let since = now - self.node(master).voted_time;
        let wait = self.settings.node_timeout * 2;
        if since < wait {
            tracing::warn!(
                "Failover auth denied to {name}: can't vote about this master before {} milliseconds",
                wait - since
            );
            return;
        }
        for j in (0..SLOTS).filter(|&j| bit(&h.myslots, j)) {
            let Some(owner) = self.slots[j] else {
                continue;
            };
            let epoch = self.node(owner).config_epoch;
            if self.slot_unclaimed(j) || epoch <= h.config_epoch {
                continue;
            }
            tracing::warn!(
                "Failover auth denied to {name}: slot {j} epoch ({epoch}) > reqEpoch ({})",
                h.config_epoch
            );
            return;
        }
        self.last_vote_epoch = self.current_epoch;
        self.node_mut(master).voted_time = now;
        self.want_save(true);
        if let Some(l) = self.node(node).link {
            let msg = codec::encode(&self.header(codec::FAILOVER_AUTH_ACK), &Body::Empty);
            self.send(l, &msg, codec::FAILOVER_AUTH_ACK);
        }
        tracing::warn!(
            "Failover auth granted to {name} for epoch {}",
            self.current_epoch
        );
    }

    fn max_epoch(&self) -> u64 {
        self.nodes
            .values()
            .map(|n| n.config_epoch)
            .max()
            .unwrap_or(0)
            .max(self.current_epoch)
    }

    /// Redis's clusterBumpConfigEpochWithoutConsensus: true when the epoch was bumped.
    pub fn bump_epoch_without_consensus(&mut self) -> bool {
        let max = self.max_epoch();
        let mine = self.me().config_epoch;
        if mine == 0 || mine != max {
            self.current_epoch += 1;
            let e = self.current_epoch;
            self.me_mut().config_epoch = e;
            self.want_save(true);
            tracing::warn!("New configEpoch set to {e}");
            true
        } else {
            false
        }
    }

    fn handle_config_epoch_collision(&mut self, sender: NodeId) {
        let (s, me) = (self.node(sender), self.me());
        if s.config_epoch != me.config_epoch || !s.is_master() || !me.is_master() {
            return;
        }
        // The node with the lexicographically smaller name bumps.
        if s.name <= me.name {
            return;
        }
        self.current_epoch += 1;
        let e = self.current_epoch;
        self.me_mut().config_epoch = e;
        self.want_save(true);
        tracing::debug!(
            "WARNING: configEpoch collision with node {}. configEpoch set to {e}",
            self.node(sender).name_str()
        );
    }

    fn blacklist_cleanup(&mut self, now_s: i64) {
        self.blacklist.retain(|_, until| *until >= now_s);
    }

    pub fn blacklist_add(&mut self, id: NodeId, now_s: i64) {
        self.blacklist_cleanup(now_s);
        let name = self.node(id).name;
        self.blacklist.insert(name, now_s + BLACKLIST_TTL);
    }

    fn blacklisted(&mut self, name: &Name, now_s: i64) -> bool {
        self.blacklist_cleanup(now_s);
        self.blacklist.contains_key(name)
    }

    fn add_failure_report(&mut self, failing: NodeId, sender: NodeId, now: i64) -> bool {
        let n = self.node_mut(failing);
        if let Some(r) = n.fail_reports.iter_mut().find(|(by, _)| *by == sender) {
            r.1 = now;
            return false;
        }
        n.fail_reports.push((sender, now));
        true
    }

    fn cleanup_failure_reports(&mut self, id: NodeId, now: i64) {
        let max = self.settings.node_timeout * FAIL_REPORT_VALIDITY_MULT;
        self.node_mut(id)
            .fail_reports
            .retain(|(_, at)| now - *at <= max);
    }

    fn del_failure_report(&mut self, id: NodeId, sender: NodeId, now: i64) -> bool {
        let n = self.node_mut(id);
        let before = n.fail_reports.len();
        n.fail_reports.retain(|(by, _)| *by != sender);
        if n.fail_reports.len() == before {
            return false;
        }
        self.cleanup_failure_reports(id, now);
        true
    }

    pub fn failure_reports(&mut self, id: NodeId, now: i64) -> usize {
        self.cleanup_failure_reports(id, now);
        self.node(id).fail_reports.len()
    }

    fn mark_failing_if_needed(&mut self, id: NodeId, now: i64) {
        let quorum = self.size / 2 + 1;
        let n = self.node(id);
        if !n.timed_out() || n.failed() {
            return;
        }
        let mut failures = self.failure_reports(id, now);
        if self.me().is_master() {
            failures += 1;
        }
        if failures < quorum {
            return;
        }
        tracing::info!(
            "Marking node {} as failing (quorum reached).",
            self.node(id).name_str()
        );
        let n = self.node_mut(id);
        n.flags &= !F_PFAIL;
        n.flags |= F_FAIL;
        n.fail_time = now;
        let name = n.name;
        self.send_fail(name);
        self.flag(TODO_UPDATE_STATE | TODO_SAVE_CONFIG);
    }

    fn clear_failure_if_needed(&mut self, id: NodeId, now: i64) {
        let timeout = self.settings.node_timeout;
        let n = self.node_mut(id);
        if n.is_replica() || n.numslots == 0 {
            tracing::info!(
                "Clear FAIL state for node {}: {} is reachable again.",
                n.name_str(),
                if n.is_replica() {
                    "replica"
                } else {
                    "master without slots"
                }
            );
            n.flags &= !F_FAIL;
            self.flag(TODO_UPDATE_STATE | TODO_SAVE_CONFIG);
            return;
        }
        if n.is_master() && n.numslots > 0 && now - n.fail_time > timeout * FAIL_UNDO_TIME_MULT {
            tracing::info!("Clear FAIL state for node {}: is reachable again and nobody is serving its slots after some time.", n.name_str());
            n.flags &= !F_FAIL;
            self.flag(TODO_UPDATE_STATE | TODO_SAVE_CONFIG);
        }
    }

    fn handshake_in_progress(&self, ip: &str, port: u16, cport: u16) -> bool {
        self.nodes.values().any(|n| {
            n.in_handshake() && n.ip.eq_ignore_ascii_case(ip) && n.port == port && n.cport == cport
        })
    }

    /// CLUSTER MEET: start a handshake with ip:port@cport. Err(true) for an invalid address,
    /// Err(false) when a handshake with it is already in progress.
    pub fn start_handshake(
        &mut self,
        ip: &str,
        port: i64,
        cport: i64,
        now: i64,
    ) -> Result<(), bool> {
        let norm = match ip.parse::<std::net::IpAddr>() {
            Ok(a) => a.to_string(),
            Err(_) => return Err(true),
        };
        if !(1..=65535).contains(&port) || !(1..=65535).contains(&cport) {
            return Err(true);
        }
        let (port, cport) = (port as u16, cport as u16);
        if self.handshake_in_progress(&norm, port, cport) {
            return Err(false);
        }
        let mut n = Node::new(random_name(), F_HANDSHAKE | F_MEET, now);
        n.ip = norm;
        n.port = port;
        n.cport = cport;
        self.add_node(n);
        Ok(())
    }

    // ----- Links -----

    pub fn new_link_id(&mut self) -> LinkId {
        let id = self.next_link;
        self.next_link += 1;
        id
    }

    /// Free a link (Redis's freeClusterLink): the node forgets it, its socket closes.
    pub fn free_link(&mut self, id: LinkId) {
        let Some(link) = self.links.remove(&id) else {
            return;
        };
        if let Some(n) = link.node.and_then(|n| self.nodes.get_mut(&n)) {
            if n.link == Some(id) {
                n.link = None;
            } else if n.inbound_link == Some(id) {
                n.inbound_link = None;
            }
        }
        link.closed.notify_one();
    }

    fn set_inbound_link(&mut self, node: NodeId, link: LinkId) {
        if let Some(old) = self.node(node).inbound_link {
            if old != link {
                self.free_link(old);
            }
        }
        self.node_mut(node).inbound_link = Some(link);
        if let Some(l) = self.links.get_mut(&link) {
            l.node = Some(node);
        }
    }

    fn send(&mut self, link: LinkId, msg: &[u8], kind: u16) {
        if let Some(l) = self.links.get(&link) {
            l.queued.fetch_add(msg.len(), Ordering::Relaxed);
            let _ = l.out.send(msg.to_vec());
            if (kind as usize) < codec::TYPES {
                self.stats_sent[kind as usize] += 1;
            }
        }
    }

    fn broadcast(&mut self, msg: &[u8], kind: u16) {
        let targets: Vec<LinkId> = self
            .nodes
            .values()
            .filter(|n| n.flags & (F_MYSELF | F_HANDSHAKE) == 0)
            .filter_map(|n| n.link)
            .collect();
        for l in targets {
            self.send(l, msg, kind);
        }
    }

    // ----- Messages -----

    /// The header of a message of `kind` from this node (Redis's clusterBuildMessageHdr).
    pub fn header(&self, kind: u16) -> Header {
        let me = self.me();
        let master = match me.slaveof {
            Some(m) if me.is_replica() => self.node(m),
            _ => me,
        };
        let mut slaveof = [0u8; NAME_LEN];
        if let Some(m) = me.slaveof {
            slaveof = self.node(m).name;
        }
        Header {
            kind,
            port: self.settings.port,
            current_epoch: self.current_epoch,
            config_epoch: master.config_epoch,
            offset: self.settings.repl_offset,
            sender: me.name,
            myslots: master.slots.clone(),
            slaveof,
            myip: self.settings.announce_ip.clone(),
            pport: self.settings.pport,
            cport: self.settings.cport,
            flags: me.flags,
            state: if self.state_ok { 0 } else { 1 },
            // A master paused for a manual failover says so: its offset is final.
            mflags: [
                if me.is_master() && self.mf_end != 0 {
                    codec::MFLAG_PAUSED
                } else {
                    0
                },
                0,
                0,
            ],
        }
    }

    fn gossip_entry(n: &Node) -> Gossip {
        Gossip {
            name: n.name,
            ping_sent: (n.ping_sent / 1000) as u32,
            pong_received: (n.pong_received / 1000) as u32,
            ip: n.ip.clone(),
            port: n.port,
            cport: n.cport,
            flags: n.flags,
            pport: n.pport,
        }
    }

    /// Send a PING, PONG or MEET with gossip about some random nodes and every PFAIL one.
    pub fn send_ping(&mut self, link: LinkId, kind: u16, now: i64) {
        self.pings_sent += 1;
        let round = self.pings_sent;
        let total = self.nodes.len();
        let mut freshnodes = total as i64 - 2;
        let wanted = ((total / 10).max(3) as i64).min(freshnodes).max(0) as usize;
        let Some(l) = self.links.get(&link) else {
            return;
        };
        if !l.inbound && kind == codec::PING {
            if let Some(n) = l.node.and_then(|n| self.nodes.get_mut(&n)) {
                n.ping_sent = now;
            }
        }
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        let mut rng = rand::thread_rng();
        let mut gossip = Vec::new();
        let mut iterations = wanted * 3;
        while freshnodes > 0 && gossip.len() < wanted && iterations > 0 {
            iterations -= 1;
            let id = ids[rng.gen_range(0..ids.len())];
            if id == self.myself {
                continue;
            }
            let n = self.node(id);
            if n.flags & F_PFAIL != 0 {
                continue;
            }
            if n.flags & (F_HANDSHAKE | F_NOADDR) != 0 || (n.link.is_none() && n.numslots == 0) {
                freshnodes -= 1;
                continue;
            }
            if n.last_in_ping_gossip == round {
                continue;
            }
            gossip.push(Self::gossip_entry(n));
            self.node_mut(id).last_in_ping_gossip = round;
            freshnodes -= 1;
        }
        let mut pfail = self.stats_pfail_nodes;
        for n in self.nodes.values() {
            if pfail == 0 {
                break;
            }
            if n.flags & (F_HANDSHAKE | F_NOADDR) != 0 || n.flags & F_PFAIL == 0 {
                continue;
            }
            gossip.push(Self::gossip_entry(n));
            pfail -= 1;
        }
        let h = self.header(kind);
        let hostname = Some(self.me().hostname.clone()).filter(|h| !h.is_empty());
        let msg = codec::encode(&h, &Body::Ping { gossip, hostname });
        self.send(link, &msg, kind);
    }

    /// PONG to every connected node (or only to the replicas of my shard).
    pub fn broadcast_pong(&mut self, local_replicas_only: bool, now: i64) {
        let me = self.myself;
        let my_master = self.me().slaveof;
        let targets: Vec<LinkId> = self
            .nodes
            .iter()
            .filter(|(id, n)| **id != me && !n.in_handshake())
            .filter(|(_, n)| {
                !local_replicas_only
                    || (n.is_replica()
                        && n.slaveof.is_some()
                        && (n.slaveof == Some(me) || n.slaveof == my_master))
            })
            .filter_map(|(_, n)| n.link)
            .collect();
        for l in targets {
            self.send_ping(l, codec::PONG, now);
        }
    }

    fn send_fail(&mut self, about: Name) {
        let msg = codec::encode(&self.header(codec::FAIL), &Body::Fail { about });
        self.broadcast(&msg, codec::FAIL);
    }

    fn send_update(&mut self, link: Option<LinkId>, about: NodeId) {
        let Some(link) = link else { return };
        let n = self.node(about);
        let mut slots = n.slots.clone();
        for (s, not) in slots.iter_mut().zip(self.owner_not_claiming.iter()) {
            *s &= !not;
        }
        let body = Body::Update {
            config_epoch: n.config_epoch,
            name: n.name,
            slots,
        };
        let msg = codec::encode(&self.header(codec::UPDATE), &body);
        self.send(link, &msg, codec::UPDATE);
    }

    /// PUBLISH to every node, or PUBLISHSHARD to the nodes of my shard.
    pub fn propagate_publish(&mut self, channel: &[u8], message: &[u8], shard: bool) {
        let kind = if shard {
            codec::PUBLISHSHARD
        } else {
            codec::PUBLISH
        };
        let body = Body::Publish {
            channel: channel.to_vec(),
            message: message.to_vec(),
        };
        let msg = codec::encode(&self.header(kind), &body);
        if !shard {
            self.broadcast(&msg, kind);
            return;
        }
        let me = self.me();
        let primary = if me.is_master() {
            Some(self.myself)
        } else {
            me.slaveof
        };
        let Some(primary) = primary else { return };
        let mut shard_nodes = vec![primary];
        shard_nodes.extend(self.node(primary).replicas.iter().copied());
        let targets: Vec<LinkId> = shard_nodes
            .iter()
            .map(|id| self.node(*id))
            .filter(|n| n.flags & (F_MYSELF | F_HANDSHAKE) == 0)
            .filter_map(|n| n.link)
            .collect();
        for l in targets {
            self.send(l, &msg, kind);
        }
    }

    // ----- Receiving -----

    /// The peer's address for a node: its announced IP, or the link's remote address.
    fn node_ip(&self, link: LinkId, announced: &str) -> String {
        if !announced.is_empty() {
            return announced.to_string();
        }
        self.links
            .get(&link)
            .map(|l| l.peer_ip.clone())
            .unwrap_or_default()
    }

    fn update_address_if_needed(&mut self, id: NodeId, link: LinkId, h: &Header) -> bool {
        if self.node(id).link == Some(link) {
            return false;
        }
        let ip = self.node_ip(link, &h.myip);
        let n = self.node(id);
        if n.port == h.port && n.cport == h.cport && n.pport == h.pport && n.ip == ip {
            return false;
        }
        let n = self.node_mut(id);
        n.ip = ip;
        n.port = h.port;
        n.pport = h.pport;
        n.cport = h.cport;
        n.flags &= !F_NOADDR;
        let old = n.link;
        tracing::warn!(
            "Address updated for node {}, now {}:{}",
            n.name_str(),
            n.ip,
            n.port
        );
        if let Some(l) = old {
            self.free_link(l);
        }
        true
    }

    fn process_gossip(&mut self, sender: Option<NodeId>, gossip: &[Gossip], now: i64) {
        let now_s = now / 1000;
        for g in gossip {
            match self.lookup(&g.name) {
                Some(id) => {
                    if let Some(s) = sender.filter(|s| self.node(*s).is_master()) {
                        if id != self.myself {
                            if g.flags & (F_FAIL | F_PFAIL) != 0 {
                                if self.add_failure_report(id, s, now) {
                                    tracing::debug!(
                                        "Node {} reported node {} as not reachable.",
                                        self.node(s).name_str(),
                                        self.node(id).name_str()
                                    );
                                }
                                self.mark_failing_if_needed(id, now);
                            } else if self.del_failure_report(id, s, now) {
                                tracing::debug!(
                                    "Node {} reported node {} is back online.",
                                    self.node(s).name_str(),
                                    self.node(id).name_str()
                                );
                            }
                        }
                    }
                    // Nobody pinged it recently: take the sender's pong time if newer.
                    if g.flags & (F_FAIL | F_PFAIL) == 0
                        && self.node(id).ping_sent == 0
                        && self.failure_reports(id, now) == 0
                    {
                        let pongtime = g.pong_received as i64 * 1000;
                        let n = self.node_mut(id);
                        if pongtime <= now + 500 && pongtime > n.pong_received {
                            n.pong_received = pongtime;
                        }
                    }
                    // A failing node seen at a new address by someone who reaches it.
                    let n = self.node(id);
                    if n.flags & (F_FAIL | F_PFAIL) != 0
                        && g.flags & F_NOADDR == 0
                        && g.flags & (F_FAIL | F_PFAIL) == 0
                        && (!n.ip.eq_ignore_ascii_case(&g.ip)
                            || n.port != g.port
                            || n.cport != g.cport)
                    {
                        if let Some(l) = n.link {
                            self.free_link(l);
                        }
                        let n = self.node_mut(id);
                        n.ip = g.ip.clone();
                        n.port = g.port;
                        n.pport = g.pport;
                        n.cport = g.cport;
                        n.flags &= !F_NOADDR;
                    }
                }
                None => {
                    if sender.is_some()
                        && g.flags & F_NOADDR == 0
                        && !self.blacklisted(&g.name, now_s)
                        && valid_name(&g.name)
                    {
                        let mut n = Node::new(g.name, g.flags, now);
                        n.ip = g.ip.clone();
                        n.port = g.port;
                        n.pport = g.pport;
                        n.cport = g.cport;
                        self.add_node(n);
                    }
                }
            }
        }
    }

    /// Slots a master claims with a newer config epoch than their owner's become its
    /// (Redis's clusterUpdateSlotsConfigWith).
    fn update_slots_config_with(&mut self, sender: NodeId, sender_epoch: u64, slots: &SlotBitmap) {
        if sender == self.myself {
            tracing::warn!("Discarding UPDATE message about myself.");
            return;
        }
        let me = self.me();
        let curmaster = if me.is_master() {
            Some(self.myself)
        } else {
            me.slaveof
        };
        let mut dirty_slots = Vec::new();
        let mut new_master = None;
        // The sender is my shard's new master when it took all of our slots and claims no
        // others (how a failover looks, as opposed to a resharding that emptied us).
        let (mut sender_slots, mut migrated_our_slots) = (0usize, 0usize);
        for j in 0..SLOTS {
            if bit(slots, j) {
                sender_slots += 1;
                if self.slots[j] == Some(sender) {
                    clear_bit(&mut self.owner_not_claiming, j);
                    continue;
                }
                if self.importing[j].is_some() {
                    continue;
                }
                let older = self.slots[j].is_some_and(|o| self.node(o).config_epoch < sender_epoch);
                if self.slot_unclaimed(j) || older {
                    if self.slots[j] == Some(self.myself) {
                        dirty_slots.push(j as u16);
                    }
                    if self.slots[j].is_some() && self.slots[j] == curmaster {
                        new_master = Some(sender);
                        migrated_our_slots += 1;
                    }
                    self.del_slot(j);
                    self.add_slot(sender, j);
                    clear_bit(&mut self.owner_not_claiming, j);
                    self.want_save(true);
                    self.flag(TODO_UPDATE_STATE);
                }
            } else if self.slots[j] == Some(sender) {
                set_bit(&mut self.owner_not_claiming, j);
            }
        }
        // My shard's slots went to the sender with a newer epoch: its master (me, or mine)
        // was failed over, or emptied by a resharding, so I follow the sender; after a
        // resharding only with cluster-allow-replica-migration yes (no keeps an emptied
        // master a master). A replica whose master turned replica follows its grandmaster.
        // Otherwise keys of the slots I lost go.
        let my_master_empty = curmaster.is_some_and(|m| self.node(m).numslots == 0);
        let follow = self.settings.allow_replica_migration || sender_slots == migrated_our_slots;
        if let (Some(nm), true) = (new_master, my_master_empty && follow) {
            tracing::warn!(
                "Configuration change detected. Reconfiguring myself as a replica of {}",
                self.node(nm).name_str()
            );
            self.set_my_master(nm);
            self.want_save(true);
        } else if let Some(grand) = self
            .me()
            .slaveof
            .and_then(|m| self.node(m).slaveof)
            .filter(|g| *g != self.myself)
        {
            tracing::warn!(
                "I'm a sub-replica! Reconfiguring myself as a replica of grandmaster {}",
                self.node(grand).name_str()
            );
            self.set_my_master(grand);
            self.want_save(true);
        } else {
            self.lost_slots.extend(dirty_slots);
        }
    }

    /// Handle one message received on `link`. Returns false when the link was freed (the
    /// bus then stops reading it). PUBLISH messages to deliver are pushed on `deliveries`.
    pub fn process(
        &mut self,
        link: LinkId,
        h: &Header,
        body: &Body,
        now: i64,
        deliveries: &mut Vec<Delivery>,
    ) -> bool {
        let kind = h.kind;
        if (kind as usize) < codec::TYPES {
            self.stats_received[kind as usize] += 1;
        }
        if i32::from(kind) == DROP_FILTER.load(Ordering::Relaxed) {
            tracing::warn!("Dropping packet that matches debug drop filter");
            return true;
        }
        let Some(l) = self.links.get(&link) else {
            return false;
        };
        let (link_node, inbound) = (l.node, l.inbound);
        // The sender: the link's node once the handshake is done, else looked up by name.
        let sender = match link_node.filter(|n| !self.node(*n).in_handshake()) {
            Some(n) => Some(n),
            None => {
                let s = self.lookup(&h.sender);
                if let (Some(s), None) = (s, link_node) {
                    self.set_inbound_link(s, link);
                }
                s
            }
        };
        if let Some(s) = sender {
            self.node_mut(s).data_received = now;
        }
        let mut sender_config_epoch = 0;
        if let Some(s) = sender.filter(|s| !self.node(*s).in_handshake()) {
            sender_config_epoch = h.config_epoch;
            if h.current_epoch > self.current_epoch {
                self.current_epoch = h.current_epoch;
            }
            let n = self.node_mut(s);
            if sender_config_epoch > n.config_epoch {
                n.config_epoch = sender_config_epoch;
                self.want_save(true);
            }
            self.node_mut(s).repl_offset = h.offset;
            // My master, paused for my manual failover, sent its final offset.
            if self.mf_end != 0
                && self.me().is_replica()
                && self.me().slaveof == Some(s)
                && h.mflags[0] & codec::MFLAG_PAUSED != 0
                && self.mf_master_offset.is_none()
            {
                self.mf_master_offset = Some(h.offset);
                tracing::warn!(
                    "Received replication offset for paused master manual failover: {}",
                    h.offset
                );
            }
        }
        let is_ping_like = matches!(kind, codec::PING | codec::PONG | codec::MEET);
        if kind == codec::PING || kind == codec::MEET {
            // Learn my own address from the socket a peer reached me on.
            if (kind == codec::MEET || self.me().ip.is_empty())
                && self.settings.announce_ip.is_empty()
            {
                let local = self.links[&link].local_ip.clone();
                if !local.is_empty() && local != self.me().ip {
                    self.me_mut().ip = local;
                    tracing::warn!("IP address for this node updated to {}", self.me().ip);
                    self.want_save(false);
                }
            }
            if sender.is_none() && kind == codec::MEET {
                let mut n = Node::new(random_name(), F_HANDSHAKE, now);
                n.ip = self.node_ip(link, &h.myip);
                n.port = h.port;
                n.pport = h.pport;
                n.cport = h.cport;
                self.add_node(n);
                self.want_save(false);
                if let Body::Ping { gossip, .. } = body {
                    self.process_gossip(None, gossip, now);
                }
            }
            self.send_ping(link, codec::PONG, now);
        }
        if is_ping_like {
            if !inbound {
                let Some(ln) = link_node else { return true };
                if self.node(ln).in_handshake() {
                    if let Some(s) = sender {
                        // A node we already know, met again at a new address.
                        if self.update_address_if_needed(s, link, h) {
                            self.flag(TODO_SAVE_CONFIG | TODO_UPDATE_STATE);
                        }
                        self.del_node(ln);
                        return false;
                    }
                    if !valid_name(&h.sender) {
                        self.free_link(link);
                        return false;
                    }
                    self.rename(ln, h.sender);
                    tracing::debug!(
                        "Handshake with node {} completed.",
                        self.node(ln).name_str()
                    );
                    let n = self.node_mut(ln);
                    n.flags &= !F_HANDSHAKE;
                    n.flags |= h.flags & (F_MASTER | F_SLAVE);
                    self.want_save(false);
                } else if self.node(ln).name != h.sender {
                    // The node at this address is another one now.
                    let n = self.node_mut(ln);
                    n.flags |= F_NOADDR;
                    n.ip.clear();
                    n.port = 0;
                    n.pport = 0;
                    n.cport = 0;
                    self.free_link(link);
                    self.want_save(false);
                    return false;
                }
            }
            if let Some(s) = sender {
                let n = self.node_mut(s);
                n.flags = (n.flags & !F_NOFAILOVER) | (h.flags & F_NOFAILOVER);
            }
            if let Some(s) = sender {
                if kind == codec::PING
                    && !self.node(s).in_handshake()
                    && self.update_address_if_needed(s, link, h)
                {
                    self.flag(TODO_SAVE_CONFIG | TODO_UPDATE_STATE);
                }
            }
            if !inbound && kind == codec::PONG {
                if let Some(ln) = link_node {
                    let n = self.node_mut(ln);
                    n.pong_received = now;
                    n.ping_sent = 0;
                    if n.timed_out() {
                        n.flags &= !F_PFAIL;
                        self.flag(TODO_SAVE_CONFIG | TODO_UPDATE_STATE);
                    } else if n.failed() {
                        self.clear_failure_if_needed(ln, now);
                    }
                }
            }
            // Role changes.
            if let Some(s) = sender {
                if h.slaveof == [0u8; NAME_LEN] {
                    self.set_node_as_master(s);
                } else {
                    let master = self.lookup(&h.slaveof);
                    if self.node(s).is_master() {
                        self.del_node_slots(s);
                        let n = self.node_mut(s);
                        n.flags &= !(F_MASTER | F_MIGRATE_TO);
                        n.flags |= F_SLAVE;
                        self.flag(TODO_SAVE_CONFIG | TODO_UPDATE_STATE);
                    }
                    if let Some(m) = master {
                        if self.node(s).slaveof != Some(m) {
                            if let Some(old) = self.node(s).slaveof {
                                self.remove_replica(old, s);
                            }
                            self.add_replica(m, s);
                            self.node_mut(s).slaveof = Some(m);
                            self.want_save(false);
                        }
                    }
                }
            }
            // Slots.
            let mut dirty_slots = false;
            if let Some(s) = sender {
                let sn = self.node(s);
                let sender_master = if sn.is_master() { Some(s) } else { sn.slaveof };
                if let Some(m) = sender_master {
                    dirty_slots = self.node(m).slots[..] != h.myslots[..];
                }
                if self.node(s).is_master() && dirty_slots {
                    self.update_slots_config_with(s, sender_config_epoch, &h.myslots);
                }
                if dirty_slots {
                    for j in 0..SLOTS {
                        if !bit(&h.myslots, j) {
                            continue;
                        }
                        if self.slots[j] == Some(s) || self.slot_unclaimed(j) {
                            continue;
                        }
                        let owner = self.slots[j].expect("claimed slot has an owner");
                        if self.node(owner).config_epoch > sender_config_epoch {
                            tracing::debug!(
                                "Node {} has old slots configuration, sending an UPDATE message about {}",
                                self.node(s).name_str(),
                                self.node(owner).name_str()
                            );
                            let l = self.node(s).link;
                            self.send_update(l, owner);
                            break;
                        }
                    }
                }
                if self.me().is_master()
                    && self.node(s).is_master()
                    && sender_config_epoch == self.me().config_epoch
                {
                    self.handle_config_epoch_collision(s);
                }
                if let Body::Ping { gossip, hostname } = body {
                    self.process_gossip(Some(s), gossip, now);
                    let n = self.node_mut(s);
                    match hostname {
                        Some(name) => n.hostname.clone_from(name),
                        None => n.hostname.clear(),
                    }
                }
            }
            return true;
        }
        match (kind, body) {
            (codec::FAIL, Body::Fail { about }) => {
                if sender.is_some() {
                    if let Some(f) = self.lookup(about) {
                        let n = self.node_mut(f);
                        if n.flags & (F_FAIL | F_MYSELF) == 0 {
                            tracing::info!(
                                "FAIL message received from {} about {}",
                                String::from_utf8_lossy(&h.sender),
                                n.name_str()
                            );
                            n.flags |= F_FAIL;
                            n.fail_time = now;
                            n.flags &= !F_PFAIL;
                            self.flag(TODO_SAVE_CONFIG | TODO_UPDATE_STATE);
                        }
                    }
                } else {
                    tracing::info!(
                        "Ignoring FAIL message from unknown node {} about {}",
                        String::from_utf8_lossy(&h.sender),
                        String::from_utf8_lossy(about)
                    );
                }
            }
            (codec::PUBLISH | codec::PUBLISHSHARD, Body::Publish { channel, message })
                if sender.is_some() =>
            {
                deliveries.push(Delivery {
                    channel: channel.clone(),
                    message: message.clone(),
                    shard: kind == codec::PUBLISHSHARD,
                });
            }
            (
                codec::UPDATE,
                Body::Update {
                    config_epoch,
                    name,
                    slots,
                },
            ) => {
                if sender.is_none() {
                    return true;
                }
                let Some(n) = self.lookup(name) else {
                    return true;
                };
                if self.node(n).config_epoch >= *config_epoch {
                    return true;
                }
                if self.node(n).is_replica() {
                    self.set_node_as_master(n);
                }
                self.node_mut(n).config_epoch = *config_epoch;
                self.want_save(true);
                self.update_slots_config_with(n, *config_epoch, slots);
            }
            (codec::FAILOVER_AUTH_REQUEST, _) => {
                if let Some(s) = sender {
                    self.vote_if_needed(s, h, now);
                }
            }
            (codec::FAILOVER_AUTH_ACK, _) => {
                if let Some(s) = sender {
                    let sn = self.node(s);
                    if sn.is_master()
                        && sn.numslots > 0
                        && h.current_epoch >= self.failover_auth_epoch
                    {
                        self.failover_auth_count += 1;
                        self.handle_replica_failover(now);
                    }
                }
            }
            (codec::MFSTART, _) => {
                // A replica of mine asks for a manual failover: writes pause (after this
                // event) and it gets a ping with the offset they stopped at.
                if let Some(s) = sender.filter(|&s| self.node(s).slaveof == Some(self.myself)) {
                    self.reset_manual_failover();
                    self.mf_end = now + MF_TIMEOUT;
                    self.mf_replica = Some(s);
                    self.mf_pause = Some(true);
                    self.mf_ping = Some(link);
                    tracing::warn!(
                        "Manual failover requested by replica {}.",
                        self.node(s).name_str()
                    );
                }
            }
            _ => {}
        }
        true
    }

    // ----- Cron and state -----

    /// Redis's clusterCron, run ten times a second.
    pub fn cron(&mut self, now: i64) {
        self.cron_iteration += 1;
        let hostname = self.settings.announce_hostname.clone();
        self.me_mut().hostname = hostname;
        let timeout = self.settings.node_timeout;
        let handshake_timeout = timeout.max(1000);
        self.stats_pfail_nodes = 0;
        let limit = self.settings.sendbuf_limit;
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for &id in &ids {
            let Some(n) = self.nodes.get(&id) else {
                continue;
            };
            if limit > 0 {
                for l in [n.link, n.inbound_link].into_iter().flatten() {
                    let queued = self
                        .links
                        .get(&l)
                        .map_or(0, |l| l.queued.load(Ordering::Relaxed));
                    if queued as u64 > limit {
                        tracing::warn!(
                            "Freeing cluster link({} node {}, used memory: {queued}) due to exceeding send buffer memory limit.",
                            if self.links[&l].inbound { "from" } else { "to" },
                            self.node(id).name_str()
                        );
                        self.free_link(l);
                        self.links_limit_exceeded += 1;
                    }
                }
            }
            let n = self.node(id);
            if n.flags & (F_MYSELF | F_NOADDR) != 0 {
                continue;
            }
            let pfail = n.flags & F_PFAIL != 0;
            if pfail {
                self.stats_pfail_nodes += 1;
            }
            let n = self.node(id);
            if n.in_handshake() && now - n.ctime > handshake_timeout {
                self.del_node(id);
                continue;
            }
            if n.link.is_none() {
                let lid = self.new_link_id();
                let (link, rx) = Link::new(Some(id), now);
                self.links.insert(lid, link);
                self.node_mut(id).link = Some(lid);
                self.connects.push((lid, rx));
            }
        }
        // Every second, ping one of five random nodes: the one whose pong is oldest.
        if self.cron_iteration.is_multiple_of(10) && !self.nodes.is_empty() {
            let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
            let mut rng = rand::thread_rng();
            let mut best: Option<(NodeId, i64)> = None;
            for _ in 0..5 {
                let id = ids[rng.gen_range(0..ids.len())];
                let n = self.node(id);
                if n.link.is_none() || n.ping_sent != 0 || n.flags & (F_MYSELF | F_HANDSHAKE) != 0 {
                    continue;
                }
                if best.is_none_or(|(_, p)| p > n.pong_received) {
                    best = Some((id, n.pong_received));
                }
            }
            if let Some((id, _)) = best {
                if let Some(l) = self.node(id).link {
                    self.send_ping(l, codec::PING, now);
                }
            }
        }
        let mut update_state = false;
        // For replica migration: masters left without a working replica, the most working
        // replicas any master has, and how many my own master has.
        let (mut orphaned_masters, mut max_replicas, mut my_masters_replicas) = (0, 0, 0);
        let my_master = self.me().slaveof.filter(|_| self.me().is_replica());
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            let Some(n) = self.nodes.get(&id) else {
                continue;
            };
            if n.flags & (F_MYSELF | F_NOADDR | F_HANDSHAKE) != 0 {
                continue;
            }
            if my_master.is_some() && n.is_master() && !n.failed() {
                let ok = self.working_replicas(id);
                if ok == 0 && n.numslots > 0 && n.flags & F_MIGRATE_TO != 0 {
                    orphaned_masters += 1;
                }
                max_replicas = max_replicas.max(ok);
                if my_master == Some(id) {
                    my_masters_replicas = ok;
                }
            }
            let n = self.node(id);
            let ping_delay = now - n.ping_sent;
            let data_delay = now - n.data_received;
            // A link that stays silent for half the timeout after a ping is reconnected.
            if let Some(l) = n.link {
                let ctime = self.links.get(&l).map_or(now, |l| l.ctime);
                if now - ctime > timeout
                    && n.ping_sent != 0
                    && ping_delay > timeout / 2
                    && data_delay > timeout / 2
                {
                    self.free_link(l);
                }
            }
            let n = self.node(id);
            if let Some(l) = n.link {
                if n.ping_sent == 0 && now - n.pong_received > timeout / 2 {
                    self.send_ping(l, codec::PING, now);
                    continue;
                }
            }
            let n = self.node(id);
            if n.ping_sent == 0 {
                continue;
            }
            let node_delay = ping_delay.min(data_delay);
            if node_delay > timeout && n.flags & (F_PFAIL | F_FAIL) == 0 {
                tracing::debug!("*** NODE {} possibly failing", n.name_str());
                self.node_mut(id).flags |= F_PFAIL;
                update_state = true;
            }
        }
        // A manual failover past its time is abandoned, on either side.
        if self.mf_end != 0 && self.mf_end < now {
            tracing::warn!("Manual failover timed out.");
            self.reset_manual_failover();
        }
        if self.me().is_replica() {
            self.handle_manual_failover();
            self.handle_replica_failover(now);
            // Only a replica of a master with the most working replicas, and only when some
            // master has two, may move to an orphaned master.
            if orphaned_masters > 0
                && max_replicas >= 2
                && my_masters_replicas == max_replicas
                && self.settings.allow_replica_migration
            {
                self.handle_replica_migration(max_replicas, now);
            }
        }
        if update_state || !self.state_ok {
            self.update_state(now);
        }
    }

    /// Redis's clusterUpdateState: ok when every slot is served by a reachable node (with
    /// full coverage required) and a majority of the masters with slots is reachable.
    pub fn update_state(&mut self, now: i64) {
        self.todo &= !TODO_UPDATE_STATE;
        if self.first_call_time == 0 {
            self.first_call_time = now;
        }
        if self.me().is_master() && !self.state_ok && now - self.first_call_time < WRITABLE_DELAY {
            return;
        }
        let mut ok = true;
        if self.settings.require_full_coverage {
            ok = self
                .slots
                .iter()
                .all(|s| s.is_some_and(|o| self.node(o).flags & F_FAIL == 0));
        }
        let mut reachable = 0;
        self.size = 0;
        for n in self.nodes.values() {
            if n.is_master() && n.numslots > 0 {
                self.size += 1;
                if n.flags & (F_FAIL | F_PFAIL) == 0 {
                    reachable += 1;
                }
            }
        }
        if reachable < self.size / 2 + 1 {
            ok = false;
            self.among_minority_time = now;
        }
        if ok != self.state_ok {
            let rejoin = self
                .settings
                .node_timeout
                .clamp(MIN_REJOIN_DELAY, MAX_REJOIN_DELAY);
            if ok && self.me().is_master() && now - self.among_minority_time < rejoin {
                return;
            }
            tracing::warn!("Cluster state changed: {}", if ok { "ok" } else { "fail" });
            self.state_ok = ok;
            self.slots_dirty = true;
        }
    }

    /// What Redis does before sleeping: recompute the state if asked. Returns Some(fsync)
    /// when nodes.conf must be saved (the caller saves it: `nodes_conf` sits above this).
    pub fn after_event(&mut self, now: i64) -> Option<bool> {
        let todo = std::mem::take(&mut self.todo);
        if todo & TODO_UPDATE_STATE != 0 {
            self.update_state(now);
        }
        (todo & TODO_SAVE_CONFIG != 0).then_some(todo & TODO_FSYNC_CONFIG != 0)
    }

    /// CLUSTER RESET: forget every other node, drop every slot; HARD also renames this node
    /// and zeroes the epochs.
    pub fn reset(&mut self, hard: bool) {
        if self.me().is_replica() {
            let me = self.myself;
            self.set_node_as_master(me);
        }
        self.close_all_slots();
        for j in 0..SLOTS {
            self.del_slot(j);
        }
        let others: Vec<NodeId> = self
            .nodes
            .keys()
            .copied()
            .filter(|id| *id != self.myself)
            .collect();
        for id in others {
            self.del_node(id);
        }
        if hard {
            self.current_epoch = 0;
            self.last_vote_epoch = 0;
            self.me_mut().config_epoch = 0;
            tracing::warn!("configEpoch set to 0 via CLUSTER RESET HARD");
            let me = self.myself;
            self.rename(me, random_name());
            tracing::info!("Node hard reset, now I'm {}", self.me().name_str());
        }
        self.want_save(true);
        self.flag(TODO_UPDATE_STATE);
    }

    /// The slot ranges each node serves, from the slot table (Redis's slot_info_pairs).
    pub fn slot_ranges(&self) -> HashMap<NodeId, Vec<(usize, usize)>> {
        let mut out: HashMap<NodeId, Vec<(usize, usize)>> = HashMap::new();
        let mut j = 0;
        while j < SLOTS {
            let Some(owner) = self.slots[j] else {
                j += 1;
                continue;
            };
            let start = j;
            while j + 1 < SLOTS && self.slots[j + 1] == Some(owner) {
                j += 1;
            }
            out.entry(owner).or_default().push((start, j));
            j += 1;
        }
        out
    }

    /// Whether a client is named the nodes' plaintext ports (Redis's use_pport): with
    /// `tls-cluster yes` the announced ports are TLS ones, which a client not on TLS
    /// (`on_tls` false) cannot use.
    pub fn use_pport(&self, on_tls: bool) -> bool {
        self.settings.tls_cluster && !on_tls
    }

    /// Node `n`'s client port: its plaintext one when `use_pport` and it announced one.
    pub fn client_port(&self, n: NodeId, use_pport: bool) -> u16 {
        let node = self.node(n);
        if use_pport && node.pport != 0 {
            node.pport
        } else {
            node.port
        }
    }

    /// A node's CLUSTER NODES line (without the newline); `use_pport` as in
    /// [`ClusterState::use_pport`] (false for nodes.conf).
    pub fn describe(
        &self,
        id: NodeId,
        ranges: &HashMap<NodeId, Vec<(usize, usize)>>,
        use_pport: bool,
    ) -> String {
        use std::fmt::Write;
        let n = self.node(id);
        let mut s = String::with_capacity(128);
        s.push_str(n.name_str());
        let port = self.client_port(id, use_pport);
        let _ = write!(s, " {}:{}@{}", n.ip, port, n.cport);
        if !n.hostname.is_empty() {
            let _ = write!(s, ",{}", n.hostname);
        }
        s.push(' ');
        s.push_str(&flag_names(n.flags));
        s.push(' ');
        match n.slaveof {
            Some(m) => s.push_str(self.node(m).name_str()),
            None => s.push('-'),
        }
        let epoch = match n.slaveof {
            Some(m) if n.is_replica() => self.node(m).config_epoch,
            _ => n.config_epoch,
        };
        let connected = n.link.is_some() || n.flags & F_MYSELF != 0;
        let _ = write!(
            s,
            " {} {} {} {}",
            n.ping_sent,
            n.pong_received,
            epoch,
            if connected {
                "connected"
            } else {
                "disconnected"
            }
        );
        match ranges.get(&id) {
            Some(r) => {
                for &(a, b) in r {
                    if a == b {
                        let _ = write!(s, " {a}");
                    } else {
                        let _ = write!(s, " {a}-{b}");
                    }
                }
            }
            None if n.numslots > 0 => {
                let mut j = 0;
                while j < SLOTS {
                    if !n.has_slot(j) {
                        j += 1;
                        continue;
                    }
                    let start = j;
                    while j + 1 < SLOTS && n.has_slot(j + 1) {
                        j += 1;
                    }
                    if start == j {
                        let _ = write!(s, " {start}");
                    } else {
                        let _ = write!(s, " {start}-{j}");
                    }
                    j += 1;
                }
            }
            None => {}
        }
        if n.flags & F_MYSELF != 0 {
            for j in 0..SLOTS {
                if let Some(to) = self.migrating[j] {
                    let _ = write!(s, " [{j}->-{}]", self.node(to).name_str());
                } else if let Some(from) = self.importing[j] {
                    let _ = write!(s, " [{j}-<-{}]", self.node(from).name_str());
                }
            }
        }
        s
    }

    /// CLUSTER NODES (and nodes.conf without the `vars` line): every node not flagged
    /// `filter`.
    pub fn describe_all(&self, filter: u16, use_pport: bool) -> String {
        let ranges = self.slot_ranges();
        let mut out = String::new();
        for (&id, n) in &self.nodes {
            if n.flags & filter != 0 {
                continue;
            }
            out.push_str(&self.describe(id, &ranges, use_pport));
            out.push('\n');
        }
        out
    }
}

/// Node flags as CLUSTER NODES writes them.
pub fn flag_names(flags: u16) -> String {
    const NAMES: [(u16, &str); 8] = [
        (F_MYSELF, "myself"),
        (F_MASTER, "master"),
        (F_SLAVE, "slave"),
        (F_PFAIL, "fail?"),
        (F_FAIL, "fail"),
        (F_HANDSHAKE, "handshake"),
        (F_NOADDR, "noaddr"),
        (F_NOFAILOVER, "nofailover"),
    ];
    let names: Vec<&str> = NAMES
        .iter()
        .filter(|(f, _)| flags & f != 0)
        .map(|(_, n)| *n)
        .collect();
    if names.is_empty() {
        "noflags".into()
    } else {
        names.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> ClusterState {
        let settings = Settings {
            node_timeout: 15000,
            require_full_coverage: true,
            port: 7000,
            cport: 17000,
            ..Settings::default()
        };
        ClusterState::new("/nonexistent/nodes.conf".into(), settings, 1000)
    }

    #[test]
    fn flags_are_written_in_redis_order() {
        assert_eq!(flag_names(F_MASTER | F_MYSELF), "myself,master");
        assert_eq!(flag_names(F_SLAVE | F_FAIL), "slave,fail");
        assert_eq!(flag_names(0), "noflags");
    }

    #[test]
    fn state_is_ok_only_with_every_slot_covered() {
        let mut st = state();
        st.update_state(1000);
        st.update_state(10_000);
        assert!(!st.state_ok);
        for j in 0..SLOTS {
            st.add_slot(st.myself, j);
        }
        st.update_state(20_000);
        assert!(st.state_ok);
        st.del_slot(5);
        st.update_state(30_000);
        assert!(!st.state_ok);
    }

    #[test]
    fn description_lists_slot_ranges_and_open_slots() {
        let mut st = state();
        st.me_mut().ip = "127.0.0.1".into();
        st.me_mut().port = 7000;
        st.me_mut().cport = 17000;
        for j in (0..=10).chain([12]) {
            st.add_slot(st.myself, j);
        }
        let other = st.add_node(Node::new([b'b'; NAME_LEN], F_MASTER, 0));
        st.migrating[3] = Some(other);
        let line = st.describe(st.myself, &st.slot_ranges(), false);
        let want_tail = format!(
            "127.0.0.1:7000@17000 myself,master - 0 0 0 connected 0-10 12 [3->-{}]",
            "b".repeat(40)
        );
        assert!(line.ends_with(&want_tail), "{line}");
        assert!(valid_name(&line.as_bytes()[..40]));
    }

    #[test]
    fn handshake_refuses_bad_addresses() {
        let mut st = state();
        assert_eq!(st.start_handshake("not-an-ip", 7000, 17000, 0), Err(true));
        assert_eq!(st.start_handshake("127.0.0.1", 0, 17000, 0), Err(true));
        assert_eq!(st.start_handshake("127.0.0.1", 7001, 17001, 0), Ok(()));
        assert_eq!(st.start_handshake("127.0.0.1", 7001, 17001, 0), Err(false));
        assert_eq!(st.nodes.len(), 2);
    }
}
