//! CLUSTER, READONLY, READWRITE and ASKING.
//!
//! In cluster mode (`cluster-enabled yes`) they act on `crate::cluster`'s state with Redis
//! 7.0's replies and error texts. Without it, as Redis without cluster support, the
//! subcommand and its arity are checked as for any container, then the answer is that
//! cluster support is disabled; COMMAND INFO, COMMAND LIST and COMMAND DOCS list the same
//! subcommands Redis lists either way. CLUSTER FAILOVER runs a manual failover
//! (`ClusterState::start_manual_failover`).

use super::flags::*;
use super::{CmdResult, Ctx, Keys, Spec};
use crate::cluster::nodes::{ClusterState, F_HANDSHAKE, F_MYSELF};
use crate::cluster::{codec, routing, Cluster};
use crate::cmdspec::{arity_ok, wrong_arity};
use crate::keyspace::slots::{key_hash_slot, SLOTS};
use crate::protocol::Reply;
use bytes::Bytes;

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    Spec::new("cluster", -2, 0, Keys::None, cluster, "cluster"),
    Spec::new("readonly", 1, FAST | LOADING | STALE, Keys::None, readonly, "cluster"),
    Spec::new("readwrite", 1, FAST | LOADING | STALE, Keys::None, readwrite, "cluster"),
    Spec::new("asking", 1, FAST, Keys::None, asking, "cluster"),
];

/// Redis's CLUSTER subcommands.
pub(crate) const SUBCOMMANDS: &[&str] = &[
    "addslots",
    "addslotsrange",
    "bumpepoch",
    "count-failure-reports",
    "countkeysinslot",
    "delslots",
    "delslotsrange",
    "failover",
    "flushslots",
    "forget",
    "getkeysinslot",
    "help",
    "info",
    "keyslot",
    "links",
    "meet",
    "myid",
    "nodes",
    "replicas",
    "replicate",
    "reset",
    "saveconfig",
    "set-config-epoch",
    "setslot",
    "shards",
    "slaves",
    "slots",
];

const DISABLED: &str = "ERR This instance has cluster support disabled";

fn cluster_of<'a>(ctx: &Ctx<'_, 'a>) -> Result<&'a Cluster, Reply> {
    crate::cluster::get(ctx.srv).ok_or_else(|| Reply::error(DISABLED))
}

fn readonly(ctx: &mut Ctx, _a: &[Bytes]) -> CmdResult {
    cluster_of(ctx)?;
    ctx.client.cluster.readonly = true;
    Ok(Reply::Ok)
}

fn readwrite(ctx: &mut Ctx, _a: &[Bytes]) -> CmdResult {
    cluster_of(ctx)?;
    ctx.client.cluster.readonly = false;
    Ok(Reply::Ok)
}

fn asking(ctx: &mut Ctx, _a: &[Bytes]) -> CmdResult {
    cluster_of(ctx)?;
    ctx.client.cluster.asking = true;
    ctx.client.cluster.asking_fresh = true;
    Ok(Reply::Ok)
}

fn err(text: impl Into<String>) -> Reply {
    Reply::error(format!("ERR {}", text.into()))
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A slot argument (Redis's getSlotOrReply).
fn slot_arg(a: &[u8]) -> Result<usize, Reply> {
    crate::util::numtext::parse_i64(a)
        .filter(|s| (0..SLOTS as i64).contains(s))
        .map(|s| s as usize)
        .ok_or_else(|| err("Invalid or out of range slot"))
}

fn cluster(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let on_tls = ctx.client.cluster.on_tls;
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    let full = format!("cluster|{sub}");
    match crate::acl::view::command_row(&full) {
        None => {
            return Err(Reply::error(format!(
                "ERR unknown subcommand '{}'. Try CLUSTER HELP.",
                String::from_utf8_lossy(&a[1])
            )))
        }
        Some(row) if !arity_ok(row.arity, a.len()) => return Err(wrong_arity(&full)),
        Some(_) => {}
    }
    let cl = cluster_of(ctx)?;
    let srv = ctx.srv;
    let n = a.len();
    let syntax = || {
        Reply::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLUSTER HELP.",
            String::from_utf8_lossy(&a[1])
        ))
    };
    match (sub.as_str(), n) {
        ("help", 2) => Ok(help()),
        ("meet", 4 | 5) => {
            let port = super::args::int(&a[3])
                .map_err(|_| err(format!("Invalid TCP base port specified: {}", lossy(&a[3]))))?;
            let cport = match a.get(4) {
                Some(c) => super::args::int(c)
                    .map_err(|_| err(format!("Invalid TCP bus port specified: {}", lossy(c))))?,
                None => port + 10000,
            };
            let ip = lossy(&a[2]);
            let r = cl.event(srv, |st, _| {
                st.start_handshake(&ip, port, cport, crate::cluster::now_ms())
            });
            match r {
                Err(true) => Err(err(format!(
                    "Invalid node address specified: {ip}:{}",
                    lossy(&a[3])
                ))),
                _ => Ok(Reply::Ok),
            }
        }
        ("nodes", 2) => {
            let text = cl.read(|st| st.describe_all(0, st.use_pport(on_tls)));
            Ok(Reply::Verbatim("txt", Bytes::from(text)))
        }
        ("myid", 2) => Ok(Reply::Bulk(Bytes::copy_from_slice(
            &cl.read(|st| st.me().name),
        ))),
        ("slots", 2) => {
            let mine = crate::state::replica_link::gossip_offset(srv);
            Ok(cl.read(|st| slots_reply(st, mine, st.use_pport(on_tls))))
        }
        ("shards", 2) => {
            let mine = crate::state::replica_link::gossip_offset(srv);
            Ok(cl.read(|st| shards_reply(st, mine)))
        }
        ("flushslots", 2) => {
            if !ctx.db_at(0).is_empty() {
                return Err(err("DB must be empty to perform CLUSTER FLUSHSLOTS."));
            }
            cl.event(srv, |st, _| {
                let me = st.myself;
                st.del_node_slots(me);
                st.want_update_state();
                st.want_save(false);
            });
            Ok(Reply::Ok)
        }
        ("addslots" | "delslots", 3..) => {
            let del = sub == "delslots";
            let slots = a[2..]
                .iter()
                .map(|s| slot_arg(s))
                .collect::<Result<Vec<_>, _>>()?;
            let ranges: Vec<(usize, usize)> = slots.iter().map(|&s| (s, s)).collect();
            update_slots(ctx, cl, &ranges, del)
        }
        ("addslotsrange" | "delslotsrange", 4..) => {
            if n % 2 == 1 {
                return Err(wrong_arity(&full));
            }
            let del = sub == "delslotsrange";
            let mut ranges = Vec::new();
            for pair in a[2..].chunks(2) {
                let (start, end) = (slot_arg(&pair[0])?, slot_arg(&pair[1])?);
                if start > end {
                    return Err(err(format!(
                        "start slot number {start} is greater than end slot number {end}"
                    )));
                }
                ranges.push((start, end));
            }
            update_slots(ctx, cl, &ranges, del)
        }
        ("setslot", 4..) => setslot(ctx, cl, a),
        ("bumpepoch", 2) => {
            let (bumped, epoch) = cl.event(srv, |st, _| {
                let b = st.bump_epoch_without_consensus();
                (b, st.me().config_epoch)
            });
            Ok(Reply::StatusOwned(format!(
                "{} {epoch}",
                if bumped { "BUMPED" } else { "STILL" }
            )))
        }
        ("info", 2) => Ok(Reply::Verbatim("txt", Bytes::from(cl.read(info_text)))),
        ("saveconfig", 2) => match cl.read(|st| crate::cluster::nodes_conf::save(st, true)) {
            Ok(()) => Ok(Reply::Ok),
            Err(e) => Err(err(format!("error saving the cluster node config: {e}"))),
        },
        ("keyslot", 3) => Ok(Reply::Int(key_hash_slot(&a[2]) as i64)),
        ("countkeysinslot", 3) => {
            let slot = super::args::int(&a[2])?;
            if !(0..SLOTS as i64).contains(&slot) {
                return Err(err("Invalid slot"));
            }
            Ok(Reply::Int(keys_in_slot(ctx, slot as u16) as i64))
        }
        ("getkeysinslot", 4) => {
            let slot = super::args::int(&a[2])?;
            let max = super::args::int(&a[3])?;
            if !(0..SLOTS as i64).contains(&slot) || max < 0 {
                return Err(err("Invalid slot or number of keys"));
            }
            let shard = srv.keyspace.shard_of_slot(slot as u16);
            let keys = ctx
                .g
                .shard_mut(0, shard)
                .keys_in_slot(slot as u16, max as usize);
            Ok(Reply::Array(keys.into_iter().map(Reply::Bulk).collect()))
        }
        ("forget", 3) => {
            let r = cl.event(srv, |st, _| {
                let Some(id) = st.lookup(&a[2]) else {
                    return Err(err(format!("Unknown node {}", lossy(&a[2]))));
                };
                if id == st.myself {
                    return Err(err("I tried hard but I can't forget myself..."));
                }
                if st.me().is_replica() && st.me().slaveof == Some(id) {
                    return Err(err("Can't forget my master!"));
                }
                st.blacklist_add(id, crate::cluster::now_ms() / 1000);
                st.del_node(id);
                st.want_update_state();
                st.want_save(false);
                Ok(())
            });
            r.map(|()| Reply::Ok)
        }
        ("replicate", 3) => {
            let db0_empty = ctx.db_at(0).is_empty();
            cl.event(srv, |st, _| {
                let id = match st.lookup(&a[2]) {
                    None => return Err(err(format!("Unknown node {}", lossy(&a[2])))),
                    Some(id) if id == st.myself => return Err(err("Can't replicate myself")),
                    Some(id) if st.node(id).is_replica() => {
                        return Err(err("I can only replicate a master, not a replica."))
                    }
                    Some(id) => id,
                };
                if st.me().is_master() && (st.me().numslots != 0 || !db0_empty) {
                    return Err(err(
                        "To set a master the node must be empty and without assigned slots.",
                    ));
                }
                st.set_my_master(id);
                Ok(Reply::Ok)
            })
        }
        ("slaves" | "replicas", 3) => cl.read(|st| {
            let Some(id) = st.lookup(&a[2]) else {
                return Err(err(format!("Unknown node {}", lossy(&a[2]))));
            };
            if st.node(id).is_replica() {
                return Err(err("The specified node is not a master"));
            }
            let ranges = st.slot_ranges();
            Ok(Reply::Array(
                st.node(id)
                    .replicas
                    .iter()
                    .map(|r| {
                        Reply::Bulk(Bytes::from(st.describe(*r, &ranges, st.use_pport(on_tls))))
                    })
                    .collect(),
            ))
        }),
        ("count-failure-reports", 3) => cl.event(srv, |st, _| match st.lookup(&a[2]) {
            None => Err(err(format!("Unknown node {}", lossy(&a[2])))),
            Some(id) => Ok(Reply::Int(
                st.failure_reports(id, crate::cluster::now_ms()) as i64
            )),
        }),
        ("failover", 2 | 3) => {
            if let Some(opt) = a.get(2) {
                if !opt.eq_ignore_ascii_case(b"force") && !opt.eq_ignore_ascii_case(b"takeover") {
                    return Err(Reply::error(super::errors::SYNTAX));
                }
            }
            let (force, takeover) = match a.get(2) {
                Some(o) if o.eq_ignore_ascii_case(b"force") => (true, false),
                Some(_) => (true, true),
                None => (false, false),
            };
            cl.event(srv, |st, _| {
                st.start_manual_failover(force, takeover, crate::cluster::now_ms())
                    .map(|()| Reply::Ok)
                    .map_err(Reply::error)
            })
        }
        ("set-config-epoch", 3) => {
            let epoch = super::args::int(&a[2])?;
            cl.event(srv, |st, _| {
                if epoch < 0 {
                    Err(err(format!("Invalid config epoch specified: {epoch}")))
                } else if st.nodes.len() > 1 {
                    Err(err("The user can assign a config epoch only when the node does not know any other node."))
                } else if st.me().config_epoch != 0 {
                    Err(err("Node config epoch is already non-zero"))
                } else {
                    let me = st.myself;
                    st.nodes.get_mut(&me).expect("myself").config_epoch = epoch as u64;
                    tracing::warn!("configEpoch set to {epoch} via CLUSTER SET-CONFIG-EPOCH");
                    if st.current_epoch < epoch as u64 {
                        st.current_epoch = epoch as u64;
                    }
                    st.want_update_state();
                    st.want_save(false);
                    Ok(Reply::Ok)
                }
            })
        }
        ("reset", 2 | 3) => {
            let hard = match a.get(2) {
                None => false,
                Some(w) if w.eq_ignore_ascii_case(b"hard") => true,
                Some(w) if w.eq_ignore_ascii_case(b"soft") => false,
                Some(_) => return Err(Reply::error(super::errors::SYNTAX)),
            };
            let db = ctx.client.db;
            if cl.read(|st| st.me().is_master()) && !ctx.db_at(db).is_empty() {
                return Err(err(
                    "CLUSTER RESET can't be called with master nodes containing keys",
                ));
            }
            let was_replica = cl.event(srv, |st, _| {
                let r = st.me().is_replica();
                st.reset(hard);
                r
            });
            // A replica that resets turns into an empty master, as Redis's clusterReset.
            if was_replica {
                for db in 0..srv.keyspace.num_dbs() {
                    super::server::empty_db(ctx, db, false);
                }
            }
            Ok(Reply::Ok)
        }
        ("links", 2) => Ok(cl.read(links_reply)),
        _ => Err(syntax()),
    }
}

/// The keys of database 0 in `slot`, through the command's own locks.
fn keys_in_slot(ctx: &mut Ctx, slot: u16) -> usize {
    let shard = ctx.srv.keyspace.shard_of_slot(slot);
    ctx.g.shard_mut(0, shard).count_in_slot(slot)
}

fn help() -> Reply {
    const LINES: &[&str] = &[
        "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "ADDSLOTS <slot> [<slot> ...]",
        "    Assign slots to current node.",
        "ADDSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
        "    Assign slots which are between <start-slot> and <end-slot> to current node.",
        "BUMPEPOCH",
        "    Advance the cluster config epoch.",
        "COUNT-FAILURE-REPORTS <node-id>",
        "    Return number of failure reports for <node-id>.",
        "COUNTKEYSINSLOT <slot>",
        "    Return the number of keys in <slot>.",
        "DELSLOTS <slot> [<slot> ...]",
        "    Delete slots information from current node.",
        "DELSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
        "    Delete slots information which are between <start-slot> and <end-slot> from current node.",
        "FAILOVER [FORCE|TAKEOVER]",
        "    Promote current replica node to being a master.",
        "FORGET <node-id>",
        "    Remove a node from the cluster.",
        "GETKEYSINSLOT <slot> <count>",
        "    Return key names stored by current node in a slot.",
        "FLUSHSLOTS",
        "    Delete current node own slots information.",
        "INFO",
        "    Return information about the cluster.",
        "KEYSLOT <key>",
        "    Return the hash slot for <key>.",
        "MEET <ip> <port> [<bus-port>]",
        "    Connect nodes into a working cluster.",
        "MYID",
        "    Return the node id.",
        "NODES",
        "    Return cluster configuration seen by node. Output format:",
        "    <id> <ip:port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
        "REPLICATE <node-id>",
        "    Configure current node as replica to <node-id>.",
        "RESET [HARD|SOFT]",
        "    Reset current node (default: soft).",
        "SET-CONFIG-EPOCH <epoch>",
        "    Set config epoch of current node.",
        "SETSLOT <slot> (IMPORTING <node-id>|MIGRATING <node-id>|STABLE|NODE <node-id>)",
        "    Set slot state.",
        "REPLICAS <node-id>",
        "    Return <node-id> replicas.",
        "SAVECONFIG",
        "    Force saving cluster configuration on disk.",
        "SLOTS",
        "    Return information about slots range mappings. Each range is made of:",
        "    start, end, master and replicas IP addresses, ports and ids",
        "SHARDS",
        "    Return information about slot range mappings and the nodes associated with them.",
        "LINKS",
        "    Return information about all network links between this node and its peers.",
        "    Output format is an array where each array element is a map containing attributes of a link",
        "HELP",
        "    Prints this help.",
    ];
    Reply::Array(LINES.iter().map(|l| Reply::Status(l)).collect())
}

/// ADDSLOTS, DELSLOTS and their RANGE forms: every slot is checked before any changes.
fn update_slots(ctx: &mut Ctx, cl: &Cluster, ranges: &[(usize, usize)], del: bool) -> CmdResult {
    cl.event(ctx.srv, |st, _| {
        let mut seen = vec![false; SLOTS];
        for &(start, end) in ranges {
            for (slot, seen) in seen.iter_mut().enumerate().take(end + 1).skip(start) {
                if del && st.slots[slot].is_none() {
                    return Err(err(format!("Slot {slot} is already unassigned")));
                } else if !del && st.slots[slot].is_some() {
                    return Err(err(format!("Slot {slot} is already busy")));
                }
                if std::mem::replace(seen, true) {
                    return Err(err(format!("Slot {slot} specified multiple times")));
                }
            }
        }
        let me = st.myself;
        for (slot, _) in seen.iter().enumerate().filter(|(_, s)| **s) {
            st.importing[slot] = None;
            if del {
                st.del_slot(slot);
            } else {
                st.add_slot(me, slot);
            }
        }
        st.want_update_state();
        st.want_save(false);
        Ok(Reply::Ok)
    })
}

fn setslot(ctx: &mut Ctx, cl: &Cluster, a: &[Bytes]) -> CmdResult {
    let srv = ctx.srv;
    if cl.read(|st| st.me().is_replica()) {
        return Err(err("Please use SETSLOT only with masters."));
    }
    let slot = slot_arg(&a[2])?;
    let action = a[3].to_ascii_lowercase();
    // Counted before the state's lock is taken (it is a leaf lock).
    let keys = keys_in_slot(ctx, slot as u16);
    cl.event(srv, |st, _| {
        let node_arg = |st: &ClusterState, unknown: &str| -> Result<u32, Reply> {
            let id = st
                .lookup(&a[4])
                .ok_or_else(|| err(format!("{unknown} {}", lossy(&a[4]))))?;
            if st.node(id).is_replica() {
                return Err(err("Target node is not a master"));
            }
            Ok(id)
        };
        match (action.as_slice(), a.len()) {
            (b"migrating", 5) => {
                if st.slots[slot] != Some(st.myself) {
                    return Err(err(format!("I'm not the owner of hash slot {slot}")));
                }
                let n = node_arg(st, "I don't know about node")?;
                st.migrating[slot] = Some(n);
            }
            (b"importing", 5) => {
                if st.slots[slot] == Some(st.myself) {
                    return Err(err(format!("I'm already the owner of hash slot {slot}")));
                }
                let n = node_arg(st, "I don't know about node")?;
                st.importing[slot] = Some(n);
            }
            (b"stable", 4) => {
                st.importing[slot] = None;
                st.migrating[slot] = None;
            }
            (b"node", 5) => {
                let n = node_arg(st, "Unknown node")?;
                let me = st.myself;
                if st.slots[slot] == Some(me) && n != me && keys != 0 {
                    return Err(err(format!("Can't assign hashslot {slot} to a different node while I still hold keys for this hash slot.")));
                }
                if keys == 0 && st.migrating[slot].is_some() {
                    st.migrating[slot] = None;
                }
                let slot_was_mine = st.slots[slot] == Some(me);
                st.del_slot(slot);
                st.add_slot(n, slot);
                // A master that gave away its last slot becomes a replica of the receiver
                // (cluster-allow-replica-migration yes), as Redis 7.0 does it.
                if slot_was_mine
                    && n != me
                    && st.me().numslots == 0
                    && st.settings.allow_replica_migration
                {
                    tracing::warn!(
                        "Configuration change detected. Reconfiguring myself as a replica of {}",
                        st.node(n).name_str()
                    );
                    st.set_my_master(n);
                    st.want_save(true);
                }
                if n == me && st.importing[slot].is_some() {
                    if st.bump_epoch_without_consensus() {
                        tracing::warn!("configEpoch updated after importing slot {slot}");
                    }
                    st.importing[slot] = None;
                    st.broadcast_pong(false, crate::cluster::now_ms());
                }
            }
            _ => {
                return Err(err(
                    "Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP",
                ))
            }
        }
        st.slots_dirty = true;
        st.want_save(false);
        st.want_update_state();
        Ok(Reply::Ok)
    })
}

fn endpoint_reply(st: &ClusterState, id: u32) -> Reply {
    match st.settings.endpoint {
        2 => Reply::Null,
        _ => Reply::Bulk(Bytes::from(routing::endpoint(st, id))),
    }
}

/// One node of CLUSTER SLOTS: endpoint, port, ID, and a map of the other names it has.
fn slot_node(st: &ClusterState, id: u32, use_pport: bool) -> Reply {
    let n = st.node(id);
    let mut extra = Vec::new();
    if st.settings.endpoint != 0 {
        extra.push((
            Reply::Bulk(Bytes::from_static(b"ip")),
            Reply::Bulk(Bytes::from(n.ip.clone())),
        ));
    }
    if st.settings.endpoint != 1 && !n.hostname.is_empty() {
        extra.push((
            Reply::Bulk(Bytes::from_static(b"hostname")),
            Reply::Bulk(Bytes::from(n.hostname.clone())),
        ));
    }
    Reply::Array(vec![
        endpoint_reply(st, id),
        Reply::Int(st.client_port(id, use_pport) as i64),
        Reply::Bulk(Bytes::copy_from_slice(&n.name)),
        Reply::Map(extra),
    ])
}

fn slots_reply(st: &ClusterState, my_offset: u64, use_pport: bool) -> Reply {
    let mut out = Vec::new();
    let mut j = 0;
    while j < SLOTS {
        let Some(owner) = st.slots[j] else {
            j += 1;
            continue;
        };
        let start = j;
        while j + 1 < SLOTS && st.slots[j + 1] == Some(owner) {
            j += 1;
        }
        let mut range = vec![
            Reply::Int(start as i64),
            Reply::Int(j as i64),
            slot_node(st, owner, use_pport),
        ];
        for r in &st.node(owner).replicas {
            let rn = st.node(*r);
            // A replica that has no data from its master yet (offset 0) is left out; this
            // node's own offset is the one it gossips.
            let offset = if rn.flags & F_MYSELF != 0 {
                my_offset
            } else {
                rn.repl_offset
            };
            if !rn.failed() && offset != 0 {
                range.push(slot_node(st, *r, use_pport));
            }
        }
        out.push(Reply::Array(range));
        j += 1;
    }
    Reply::Array(out)
}

fn shards_reply(st: &ClusterState, my_offset: u64) -> Reply {
    let ranges = st.slot_ranges();
    let bulk = |s: &'static str| Reply::Bulk(Bytes::from_static(s.as_bytes()));
    let mut shards = Vec::new();
    for (&id, n) in &st.nodes {
        if !n.is_master() {
            continue;
        }
        let slots: Vec<Reply> = ranges
            .get(&id)
            .map(|r| {
                r.iter()
                    .flat_map(|&(a, b)| [Reply::Int(a as i64), Reply::Int(b as i64)])
                    .collect()
            })
            .unwrap_or_default();
        let mut members = vec![id];
        members.extend(n.replicas.iter().copied());
        let nodes: Vec<Reply> = members
            .iter()
            .map(|&m| {
                let node = st.node(m);
                let offset = if node.flags & F_MYSELF != 0 {
                    my_offset
                } else {
                    node.repl_offset
                };
                let mut map = vec![(bulk("id"), Reply::Bulk(Bytes::copy_from_slice(&node.name)))];
                // tls-cluster stands for "the announced port is the TLS one", as in Redis.
                let (port, tls_port) = if st.settings.tls_cluster {
                    (node.pport, node.port)
                } else {
                    (node.port, 0)
                };
                if port != 0 {
                    map.push((bulk("port"), Reply::Int(port as i64)));
                }
                if tls_port != 0 {
                    map.push((bulk("tls-port"), Reply::Int(tls_port as i64)));
                }
                map.push((bulk("ip"), Reply::Bulk(Bytes::from(node.ip.clone()))));
                map.push((
                    bulk("endpoint"),
                    Reply::Bulk(Bytes::from(routing::endpoint(st, m))),
                ));
                if !node.hostname.is_empty() {
                    map.push((
                        bulk("hostname"),
                        Reply::Bulk(Bytes::from(node.hostname.clone())),
                    ));
                }
                map.push((
                    bulk("role"),
                    bulk(if node.is_replica() {
                        "replica"
                    } else {
                        "master"
                    }),
                ));
                map.push((bulk("replication-offset"), Reply::Int(offset as i64)));
                let health = if node.failed() {
                    "fail"
                } else if node.is_replica() && offset == 0 {
                    "loading"
                } else {
                    "online"
                };
                map.push((bulk("health"), bulk(health)));
                Reply::Map(map)
            })
            .collect();
        shards.push(Reply::Map(vec![
            (bulk("slots"), Reply::Array(slots)),
            (bulk("nodes"), Reply::Array(nodes)),
        ]));
    }
    Reply::Array(shards)
}

fn info_text(st: &ClusterState) -> String {
    let (mut assigned, mut ok, mut pfail, mut fail) = (0, 0, 0, 0);
    for owner in st.slots.iter().flatten() {
        assigned += 1;
        let n = st.node(*owner);
        if n.failed() {
            fail += 1;
        } else if n.timed_out() {
            pfail += 1;
        } else {
            ok += 1;
        }
    }
    let me = st.me();
    let my_epoch = match me.slaveof {
        Some(m) if me.is_replica() => st.node(m).config_epoch,
        _ => me.config_epoch,
    };
    let mut s = format!(
        "cluster_state:{}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{ok}\r\ncluster_slots_pfail:{pfail}\r\ncluster_slots_fail:{fail}\r\ncluster_known_nodes:{}\r\ncluster_size:{}\r\ncluster_current_epoch:{}\r\ncluster_my_epoch:{my_epoch}\r\n",
        if st.state_ok { "ok" } else { "fail" },
        st.nodes.len(),
        st.size,
        st.current_epoch,
    );
    for (dir, stats) in [("sent", &st.stats_sent), ("received", &st.stats_received)] {
        let mut total = 0;
        for (t, &count) in stats.iter().enumerate() {
            if count == 0 {
                continue;
            }
            total += count;
            s.push_str(&format!(
                "cluster_stats_messages_{}_{dir}:{count}\r\n",
                codec::type_name(t)
            ));
        }
        s.push_str(&format!("cluster_stats_messages_{dir}:{total}\r\n"));
    }
    s.push_str(&format!(
        "total_cluster_links_buffer_limit_exceeded:{}\r\n",
        st.links_limit_exceeded
    ));
    s
}

fn links_reply(st: &ClusterState) -> Reply {
    let bulk = |s: &'static str| Reply::Bulk(Bytes::from_static(s.as_bytes()));
    let mut out = Vec::new();
    for n in st.nodes.values() {
        for l in [n.link, n.inbound_link].into_iter().flatten() {
            let Some(link) = st.links.get(&l) else {
                continue;
            };
            if n.flags & F_HANDSHAKE != 0 && link.inbound {
                continue;
            }
            let queued = link.queued.load(std::sync::atomic::Ordering::Relaxed) as i64;
            out.push(Reply::Map(vec![
                (
                    bulk("direction"),
                    bulk(if link.inbound { "from" } else { "to" }),
                ),
                (bulk("node"), Reply::Bulk(Bytes::copy_from_slice(&n.name))),
                (bulk("create-time"), Reply::Int(link.ctime)),
                (bulk("events"), bulk(if queued > 0 { "rw" } else { "r" })),
                (bulk("send-buffer-allocated"), Reply::Int(queued)),
                (bulk("send-buffer-used"), Reply::Int(queued)),
            ]));
        }
    }
    Reply::Array(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_subcommand_is_one_of_redis_rows() {
        let rows: Vec<&str> = crate::acl::view::subcommand_rows("cluster")
            .iter()
            .map(|r| r.name.trim_start_matches("cluster|"))
            .collect();
        assert_eq!(rows, super::SUBCOMMANDS);
    }
}
