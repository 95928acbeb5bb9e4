//! Which node serves a command, as Redis's getNodeByQuery decides, and the redirection a
//! client gets when it is not this one.
//!
//! Every key of the command (of every queued command, for EXEC) must hash to one slot, else
//! -CROSSSLOT. An unassigned slot is -CLUSTERDOWN Hash slot not served; a down cluster
//! refuses with -CLUSTERDOWN unless reads (or sharded Pub/Sub) are allowed then. A slot this
//! node is migrating sends a client whose keys are all gone to the target (-ASK), and one
//! whose keys are partly here to -TRYAGAIN; a slot this node is importing serves a client
//! that sent ASKING (or a command that implies it, RESTORE-ASKING). Otherwise a slot of
//! another node gets -MOVED with that node's preferred endpoint. The common case, a slot
//! this node serves and is not moving, is decided from the lock-free view alone.

use super::nodes::NodeId;
use super::{get, VIEW_ASSIGNED, VIEW_IMPORTING, VIEW_MIGRATING, VIEW_MINE};
use crate::keyspace::slots::key_hash_slot;
use crate::protocol::Reply;
use crate::state::Server;

/// What routing needs to know about a request.
pub struct Query<'a> {
    /// Every key of the request, in order (channels for sharded Pub/Sub).
    pub keys: Vec<&'a [u8]>,
    /// The command itself writes (for EXEC: EXEC's own flags, as Redis reads them there).
    pub command_writes: bool,
    /// The command or any queued command writes.
    pub any_write: bool,
    /// SSUBSCRIBE, SUNSUBSCRIBE or SPUBLISH.
    pub pubsub_shard: bool,
    /// MIGRATE (served for a moving slot whatever its keys).
    pub migrate: bool,
    /// The client sent ASKING, or the command implies it.
    pub asking: bool,
    /// The client sent READONLY.
    pub readonly: bool,
    /// The client's connection is TLS (which port a redirect names: see
    /// `ClusterState::use_pport`).
    pub on_tls: bool,
}

enum Redirect {
    CrossSlot,
    TryAgain,
    Down,
    DownReadOnly,
    Unbound,
    Moved(u16, NodeId),
    Ask(u16, NodeId),
}

/// None when this node serves the request; else the error reply redirecting the client.
pub fn redirect(srv: &Server, q: &Query) -> Option<Reply> {
    let cluster = get(srv)?;
    let on_tls = q.on_tls;
    let first = q.keys.first()?;
    let slot = key_hash_slot(first);
    let mut multiple_keys = false;
    for k in &q.keys[1..] {
        if k != first {
            if key_hash_slot(k) != slot {
                return Some(reply(srv, on_tls, Redirect::CrossSlot));
            }
            multiple_keys = true;
        }
    }
    let bits = cluster.view.slot(slot);
    // The fast path: my slot, not moving, cluster up.
    if bits & VIEW_MINE != 0
        && bits & (VIEW_MIGRATING | VIEW_IMPORTING) == 0
        && cluster.view.state_ok()
    {
        return None;
    }
    if bits & VIEW_ASSIGNED == 0 {
        return Some(reply(srv, on_tls, Redirect::Unbound));
    }
    let (owner, myself, migrating_to, importing, my_master) = cluster.read(|st| {
        let me = st.me();
        (
            st.slots[slot as usize],
            st.myself,
            st.migrating[slot as usize],
            st.importing[slot as usize].is_some(),
            if me.is_replica() { me.slaveof } else { None },
        )
    });
    let Some(owner) = owner else {
        return Some(reply(srv, on_tls, Redirect::Unbound));
    };
    let migrating = owner == myself && migrating_to.is_some();
    let importing = !migrating && importing;
    let (mut missing, mut existing) = (0, 0);
    if (migrating || importing) && !q.pubsub_shard {
        let now = crate::clock::unix_ms();
        for k in &q.keys {
            let shard = srv.keyspace.dbs[0].shards[srv.keyspace.shard_of(k)].lock();
            let live = shard.raw_get(k).is_some() && !shard.is_expired(k, now);
            if live {
                existing += 1;
            } else {
                missing += 1;
            }
        }
    }
    if !cluster.view.state_ok() {
        let ok_down = if q.pubsub_shard {
            srv.config
                .flag(crate::config::dir::CLUSTER_ALLOW_PUBSUBSHARD_WHEN_DOWN)
        } else {
            srv.config
                .flag(crate::config::dir::CLUSTER_ALLOW_READS_WHEN_DOWN)
        };
        if !ok_down {
            return Some(reply(srv, on_tls, Redirect::Down));
        }
        if !q.pubsub_shard && q.command_writes {
            return Some(reply(srv, on_tls, Redirect::DownReadOnly));
        }
    }
    if (migrating || importing) && q.migrate {
        return None;
    }
    if migrating && missing > 0 {
        if existing > 0 {
            return Some(reply(srv, on_tls, Redirect::TryAgain));
        }
        let to = migrating_to.expect("a migrating slot has a target");
        return Some(reply(srv, on_tls, Redirect::Ask(slot, to)));
    }
    if importing && q.asking {
        if multiple_keys && missing > 0 {
            return Some(reply(srv, on_tls, Redirect::TryAgain));
        }
        return None;
    }
    if (q.readonly || q.pubsub_shard) && !q.any_write && my_master == Some(owner) {
        return None;
    }
    if owner != myself {
        return Some(reply(srv, on_tls, Redirect::Moved(slot, owner)));
    }
    None
}

/// Whether a command on `key` (a write when `writes`) must be routed again under its keys'
/// locks ([`recheck_migrating`]), from the lock-free view: its slot is migrating from here,
/// or a write's slot is no longer served here and is not being imported (false outside
/// cluster mode).
pub fn needs_recheck(srv: &Server, key: &[u8], writes: bool) -> bool {
    get(srv).is_some_and(|cluster| {
        let bits = cluster.view.slot(key_hash_slot(key));
        if bits & VIEW_MINE != 0 {
            bits & VIEW_MIGRATING != 0
        } else {
            writes && bits & VIEW_IMPORTING == 0
        }
    })
}

/// [`redirect`]'s rule for a slot this node is migrating, applied again once the command
/// holds its keys' locks (`present` reads a key under them): None when every key is still
/// here. The first check reads each key under its shard's lock and lets go, so a MIGRATE
/// could move a key between that check and the command's run, and a write would then create
/// the key again here, in a slot that is leaving (its increments lost when the slot's last
/// keys are dropped). Likewise the slot itself may have left meanwhile (CLUSTER SETSLOT
/// NODE after its last key moved): a write then gets -MOVED rather than creating the key
/// here. Redis decides and runs in one step, with nothing between. `on_tls` as in [`Query`].
pub fn recheck_migrating(
    srv: &Server,
    keys: &[&[u8]],
    writes: bool,
    on_tls: bool,
    mut present: impl FnMut(&[u8]) -> bool,
) -> Option<Reply> {
    let cluster = get(srv)?;
    let first = keys.first()?;
    if !needs_recheck(srv, first, writes) {
        return None;
    }
    let slot = key_hash_slot(first);
    if cluster.view.slot(slot) & VIEW_MINE == 0 {
        let owner = cluster.read(|st| st.slots[slot as usize])?;
        return Some(reply(srv, on_tls, Redirect::Moved(slot, owner)));
    }
    let to = cluster.read(|st| {
        (st.slots[slot as usize] == Some(st.myself))
            .then_some(st.migrating[slot as usize])
            .flatten()
    })?;
    let (mut missing, mut existing) = (0, 0);
    for k in keys {
        if present(k) {
            existing += 1;
        } else {
            missing += 1;
        }
    }
    if missing == 0 {
        return None;
    }
    Some(reply(
        srv,
        on_tls,
        if existing > 0 {
            Redirect::TryAgain
        } else {
            Redirect::Ask(slot, to)
        },
    ))
}

/// Whether a key a script touches is served here (Redis's scriptVerifyClusterState, for
/// the keys a script did not declare): the error text when it is not. A replica serves the
/// reads of a READONLY client (`readonly`) for its master's slots, as for any command.
pub fn script_key_refusal(
    srv: &Server,
    key: &[u8],
    writes: bool,
    readonly: bool,
) -> Option<&'static str> {
    let cluster = get(srv)?;
    let slot = key_hash_slot(key);
    let bits = cluster.view.slot(slot);
    if !cluster.view.state_ok() {
        if !srv
            .config
            .flag(crate::config::dir::CLUSTER_ALLOW_READS_WHEN_DOWN)
        {
            return Some("Script attempted to execute a command while the cluster is down");
        }
        if writes {
            return Some("Script attempted to execute a write command while the cluster is down and readonly");
        }
    }
    if bits & VIEW_MINE == 0 && bits & VIEW_IMPORTING == 0 {
        let replica_read = readonly
            && !writes
            && cluster.read(|st| {
                let me = st.me();
                me.is_replica() && me.slaveof.is_some() && me.slaveof == st.slots[slot as usize]
            });
        if !replica_read {
            return Some("Script attempted to access a non local key in a cluster node");
        }
    }
    None
}

/// Cluster mode's check of blocked clients (Redis's clusterRedirectBlockedClientIfNeeded, which
/// its client cron makes about once a second): a client blocked on keys whose slot this node
/// no longer serves, nor imports, is unblocked with a redirect to the owner (or "slot not
/// served"), and every blocked client with CLUSTERDOWN while the cluster is down, since the
/// write that would serve it may never come.
pub fn redirect_blocked_clients(srv: &Server) {
    let Some(cluster) = get(srv) else { return };
    if srv
        .keyspace
        .blocked_clients
        .load(std::sync::atomic::Ordering::Relaxed)
        == 0
    {
        return;
    }
    let down = !cluster.view.state_ok();
    srv.blocking.unblock_with(&srv.keyspace, |w| {
        let on_tls = w.on_tls;
        if down {
            return Some(reply(srv, on_tls, Redirect::Down));
        }
        // A blocking command's keys are all in one slot: the first one tells.
        let slot = key_hash_slot(w.keys.first()?);
        let bits = cluster.view.slot(slot);
        if bits & (VIEW_MINE | VIEW_IMPORTING) != 0 {
            return None;
        }
        let (owner, serves_as_replica) = cluster.read(|st| {
            let owner = st.slots[slot as usize];
            let me = st.me();
            (
                owner,
                me.is_replica() && owner.is_some() && me.slaveof == owner,
            )
        });
        if w.replica_read && serves_as_replica {
            return None;
        }
        Some(match owner {
            None => reply(srv, on_tls, Redirect::Unbound),
            Some(n) => reply(srv, on_tls, Redirect::Moved(slot, n)),
        })
    });
}

fn reply(srv: &Server, on_tls: bool, r: Redirect) -> Reply {
    let text = match r {
        Redirect::CrossSlot => "CROSSSLOT Keys in request don't hash to the same slot".to_string(),
        Redirect::TryAgain => "TRYAGAIN Multiple keys request during rehashing of slot".into(),
        Redirect::Down => "CLUSTERDOWN The cluster is down".into(),
        Redirect::DownReadOnly => {
            "CLUSTERDOWN The cluster is down and only accepts read commands".into()
        }
        Redirect::Unbound => "CLUSTERDOWN Hash slot not served".into(),
        Redirect::Moved(slot, n) | Redirect::Ask(slot, n) => {
            let word = if matches!(r, Redirect::Ask(..)) {
                "ASK"
            } else {
                "MOVED"
            };
            let (endpoint, port) = get(srv)
                .map(|c| c.read(|st| (endpoint(st, n), st.client_port(n, st.use_pport(on_tls)))))
                .unwrap_or_default();
            format!("{word} {slot} {endpoint}:{port}")
        }
    };
    Reply::error(text)
}

/// The name a node is given to clients (`cluster-preferred-endpoint-type`).
pub fn endpoint(st: &super::nodes::ClusterState, n: NodeId) -> String {
    let node = st.node(n);
    match st.settings.endpoint {
        1 if node.hostname.is_empty() => "?".into(),
        1 => node.hostname.clone(),
        2 => String::new(),
        _ => node.ip.clone(),
    }
}
