//! One client connection: reading, pipelining, replying, and the client's state.
//!
//! The loop reads whatever the socket has into the query buffer, executes every complete
//! request in it in order, renders each reply into one output buffer, and writes that buffer
//! with a single write: a pipeline of N commands costs one read and one write. A protocol
//! error gets Redis's error reply and closes the connection. A blocking command parks the
//! client (the rest of its pipeline waits, as in Redis) until it is served, times out, is
//! unblocked, or the client goes away.

use crate::clock::unix_ms;
use crate::commands::{dispatch_with, Outcome};
use crate::keyspace::Guards;
use crate::keyspace::WatchFlag;
use crate::net::ClientSocket;
use crate::protocol::{parse_request_resuming, ParseLimits, Parsed, Partial, Reply, Resp};
use crate::server::Server;
use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// What other clients can see of a connection (CLIENT LIST, CLIENT KILL, INFO clients).
pub struct ClientInfo {
    pub id: u64,
    pub addr: String,
    pub laddr: String,
    pub name: Mutex<Option<Bytes>>,
    pub lib_name: Mutex<Option<String>>,
    pub db: AtomicUsize,
    pub created_ms: i64,
    pub last_active_ms: AtomicI64,
    pub last_cmd: Mutex<&'static str>,
    pub resp: AtomicU8,
    pub multi: AtomicBool,
    pub blocked: AtomicBool,
    pub no_evict: AtomicBool,
    pub killed: AtomicBool,
    pub kill: Notify,
    pub qbuf: AtomicUsize,
    /// Push messages (Pub/Sub, keyspace events) waiting to be written to this client.
    pub(crate) push: crate::pubsub::Mailbox,
    /// The ACL user the connection runs as (a copy of [`Client::user`], set through
    /// [`Client::set_user`]): CLIENT LIST's `user=`, and ACL DELUSER / SETUSER find the
    /// clients to disconnect by it.
    pub(crate) user: Mutex<Option<crate::acl::UserRef>>,
}

impl ClientInfo {
    /// A connection's record: `id`, peer and local addresses, created at `now_ms`.
    pub fn new(id: u64, addr: String, laddr: String, now_ms: i64) -> ClientInfo {
        ClientInfo {
            id,
            addr,
            laddr,
            name: Mutex::new(None),
            lib_name: Mutex::new(None),
            db: AtomicUsize::new(0),
            created_ms: now_ms,
            last_active_ms: AtomicI64::new(now_ms),
            last_cmd: Mutex::new("NULL"),
            resp: AtomicU8::new(2),
            multi: AtomicBool::new(false),
            blocked: AtomicBool::new(false),
            no_evict: AtomicBool::new(false),
            killed: AtomicBool::new(false),
            kill: Notify::new(),
            qbuf: AtomicUsize::new(0),
            push: Default::default(),
            user: Mutex::new(None),
        }
    }

    /// The name of the connection's ACL user (`default` before one is set).
    pub(crate) fn user_name(&self) -> String {
        self.user
            .lock()
            .as_ref()
            .map(|u| String::from_utf8_lossy(&u.read().name).into_owned())
            .unwrap_or_else(|| "default".to_string())
    }

    pub fn set_last_cmd(&self, name: &'static str, now_ms: i64) {
        *self.last_cmd.lock() = name;
        self.last_active_ms.store(now_ms, Ordering::Relaxed);
    }

    pub fn kill(&self) {
        self.killed.store(true, Ordering::SeqCst);
        self.kill.notify_one();
    }

    /// One CLIENT LIST line.
    pub fn describe(&self) -> String {
        let now = unix_ms();
        let name = self
            .name
            .lock()
            .as_ref()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_default();
        let mut flags = String::new();
        if self.multi.load(Ordering::Relaxed) {
            flags.push('x');
        }
        if self.blocked.load(Ordering::Relaxed) {
            flags.push('b');
        }
        if self.no_evict.load(Ordering::Relaxed) {
            flags.push('e');
        }
        if self.push.monitor.load(Ordering::Relaxed) {
            flags.push('O');
        }
        let subs = self
            .push
            .counts
            .each_ref()
            .map(|c| c.load(Ordering::Relaxed));
        if subs.iter().any(|&n| n > 0) {
            flags.push('P');
        }
        if flags.is_empty() {
            flags.push('N');
        }
        format!(
            "id={} addr={} laddr={} fd=8 name={} age={} idle={} flags={} db={} sub={} psub={} ssub={} multi={} qbuf={} qbuf-free=0 argv-mem=0 multi-mem=0 rbs=16384 rbp=0 obl=0 oll=0 omem={} tot-mem=0 events=r cmd={} user={} redir=-1 resp={}",
            self.id,
            self.addr,
            self.laddr,
            name,
            (now - self.created_ms) / 1000,
            (now - self.last_active_ms.load(Ordering::Relaxed)) / 1000,
            flags,
            self.db.load(Ordering::Relaxed),
            subs[0],
            subs[1],
            subs[2],
            if self.multi.load(Ordering::Relaxed) { 0 } else { -1 },
            self.qbuf.load(Ordering::Relaxed),
            self.push.used(),
            self.last_cmd.lock(),
            self.user_name(),
            self.resp.load(Ordering::Relaxed),
        )
    }
}

/// CLIENT REPLY mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    Off,
    /// Skip the reply to the next command only.
    Skip,
    /// Set by CLIENT REPLY SKIP: applies from the command after it.
    SkipNext,
}

/// A connection's private state, handed to every command it runs.
pub struct Client {
    pub id: u64,
    pub db: usize,
    pub resp: Resp,
    pub authenticated: bool,
    pub info: Arc<ClientInfo>,
    /// Commands queued since MULTI; None outside a transaction.
    pub multi: Option<Vec<Vec<Bytes>>>,
    /// An error while queueing: EXEC will answer EXECABORT.
    pub multi_abort: bool,
    /// Keys under WATCH and the flag their modification sets.
    pub watched: Vec<(usize, Bytes)>,
    pub watch_flag: WatchFlag,
    /// A WATCHed key had already expired when watched (it then counts as changed only if it
    /// comes back), or was volatile: (db, key, expire_at at WATCH time).
    pub watched_expiry: Vec<(usize, Bytes, i64)>,
    pub reply_mode: ReplyMode,
    pub block_timeout_ms: u64,
    pub block_timeout_reply: Option<Reply>,
    /// Channels, patterns and shard channels this client is subscribed to.
    pub(crate) subs: crate::pubsub::Subscriptions,
    /// The reply being produced is a push (subscribe confirmations): it is written whatever
    /// CLIENT REPLY says, as in Redis.
    pub(crate) push_reply: bool,
    /// Set while a script's `redis.call` runs a command (MONITOR shows it as `lua`).
    pub(crate) in_script: bool,
    /// CLIENT CACHING was given for the next command (tracking OPTIN/OPTOUT).
    pub(crate) tracking_caching: bool,
    /// The keys the running script declared: what a read inside it makes a tracking client
    /// remember (as Redis, which tracks the script's keys, not the inner command's).
    pub(crate) script_keys: Vec<Bytes>,
    /// Invalidations caused by this client's own command: written after its reply.
    pub(crate) after_reply: Vec<u8>,
    /// The ACL user the connection runs as; None (internal clients: AOF loading) may run
    /// anything.
    pub user: Option<crate::acl::UserRef>,
    /// How long the last command this client ran took, in microseconds (SLOWLOG, LATENCY).
    pub last_duration_us: u64,
}

impl Client {
    pub fn new(id: u64, info: Arc<ClientInfo>) -> Client {
        Client {
            id,
            db: 0,
            resp: Resp::V2,
            authenticated: false,
            info,
            multi: None,
            multi_abort: false,
            watched: Vec::new(),
            watch_flag: Arc::new(AtomicBool::new(false)),
            watched_expiry: Vec::new(),
            reply_mode: ReplyMode::On,
            block_timeout_ms: 0,
            block_timeout_reply: None,
            subs: Default::default(),
            push_reply: false,
            in_script: false,
            tracking_caching: false,
            script_keys: Vec::new(),
            after_reply: Vec::new(),
            user: None,
            last_duration_us: 0,
        }
    }

    /// Run as ACL user `user` from now on.
    pub fn set_user(&mut self, user: crate::acl::UserRef) {
        *self.info.user.lock() = Some(user.clone());
        self.user = Some(user);
    }

    pub fn select(&mut self, db: usize) {
        self.db = db;
        self.info.db.store(db, Ordering::Relaxed);
    }
}

/// Serve one TCP connection until it closes.
pub async fn handle(srv: Arc<Server>, sock: TcpStream, peer: SocketAddr) {
    let sock = match ClientSocket::new(sock) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!("dropping connection from {peer}: {e}");
            return;
        }
    };
    sock.set_keepalive(srv.config.get_i64("tcp-keepalive"));
    serve_socket(srv, sock, peer.to_string()).await
}

/// A client of the Unix socket at `path`; Redis shows its address as `path:0`.
pub async fn handle_unix(srv: Arc<Server>, sock: tokio::net::UnixStream, path: String) {
    let sock = match ClientSocket::new_unix(sock) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!("dropping connection on {path}: {e}");
            return;
        }
    };
    serve_socket(srv, sock, format!("{path}:0")).await
}

async fn serve_socket(srv: Arc<Server>, sock: ClientSocket, peer: String) {
    let id = srv.next_client_id();
    let laddr = sock.local_addr();
    let now = unix_ms();
    let info = Arc::new(ClientInfo::new(id, peer, laddr, now));
    let maxclients = srv.config.get_i64("maxclients").max(1) as usize;
    let admitted = {
        let mut clients = srv.clients.lock();
        if clients.len() >= maxclients {
            false
        } else {
            clients.insert(id, info.clone());
            true
        }
    };
    if !admitted {
        srv.stats
            .rejected_connections
            .fetch_add(1, Ordering::Relaxed);
        let _ = sock
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        return;
    }
    if crate::net::protected_mode_refuses(
        srv.config.get_bool("protected-mode"),
        crate::acl::default_user_nopass(&srv),
        &info.addr,
    ) {
        let _ = sock
            .write_all(crate::net::PROTECTED_MODE_DENIED.as_bytes())
            .await;
        srv.stats
            .rejected_connections
            .fetch_add(1, Ordering::Relaxed);
        srv.clients.lock().remove(&id);
        return;
    }
    srv.stats.connections.fetch_add(1, Ordering::Relaxed);
    let mut client = Client::new(id, info.clone());
    client.set_user(srv.acl.default_user());
    client.authenticated = crate::acl::starts_authenticated(&srv);
    if let Err(e) = serve_client(&srv, &sock, &mut client).await {
        tracing::debug!("client {id} closed: {e}");
    }
    crate::commands::tx::unwatch_all(&srv, &mut client);
    srv.pubsub.unsubscribe_all(&info, &mut client.subs);
    srv.pubsub.remove_monitor(&info);
    srv.tracking.disable(id);
    srv.clients.lock().remove(&id);
}

async fn serve_client(
    srv: &Server,
    sock: &ClientSocket,
    client: &mut Client,
) -> std::io::Result<()> {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut out: Vec<u8> = Vec::with_capacity(16 * 1024);
    // Requests parsed from the buffer and not yet run (see the loop below).
    let mut pending: std::collections::VecDeque<Vec<Bytes>> = std::collections::VecDeque::new();
    // Progress through a long request that has not fully arrived yet.
    let mut partial = Partial::default();
    let info = client.info.clone();
    let mut guards = Guards::new(&srv.keyspace);
    loop {
        // `timeout N` closes a client idle for N seconds (not one inside MULTI, as Redis).
        let idle_limit = srv.config.hot.timeout.load(Ordering::Relaxed);
        let idle = async {
            if idle_limit > 0 && client.multi.is_none() {
                tokio::time::sleep(Duration::from_secs(idle_limit as u64)).await
            } else {
                std::future::pending::<()>().await
            }
        };
        let n = tokio::select! {
            r = sock.read_buf(&mut buf) => r?,
            _ = info.kill.notified() => return Ok(()),
            _ = info.push.ready.notified() => {
                // Messages published to this client while it waited for input.
                info.push.drain_into(&mut out);
                flush(srv, sock, &info, &mut out).await?;
                continue;
            }
            _ = idle => {
                tracing::debug!("closing client {}: idle for {idle_limit} s", client.id);
                return Ok(());
            }
        };
        if n == 0 || info.killed.load(Ordering::Relaxed) {
            return Ok(());
        }
        srv.stats
            .net_input_bytes
            .fetch_add(n as u64, Ordering::Relaxed);
        let limit = srv
            .config
            .hot
            .query_buffer_limit
            .load(Ordering::Relaxed)
            .max(1024) as usize;
        if buf.len() > limit {
            tracing::warn!(
                "closing client {}: query buffer over client-query-buffer-limit",
                client.id
            );
            return Ok(());
        }
        let mut close = false;
        let mut proto_err = None;
        loop {
            if pending.is_empty() && proto_err.is_none() {
                // Parse every complete request of the read up front (one at a time before
                // AUTH: the parse limits depend on it), so a batch can be looked at as a whole
                // before it runs in order.
                let limits = ParseLimits {
                    max_bulk_len: srv.config.hot.proto_max_bulk_len.load(Ordering::Relaxed),
                    authenticated: client.authenticated,
                };
                loop {
                    match parse_request_resuming(&mut buf, &limits, &mut partial) {
                        Ok(Parsed::Command(args)) => {
                            pending.push_back(args);
                            if !client.authenticated || pending.len() >= MAX_BATCH {
                                break;
                            }
                        }
                        Ok(Parsed::Empty) => {}
                        Ok(Parsed::Incomplete) => break,
                        Err(e) => {
                            proto_err = Some(e);
                            break;
                        }
                    }
                }
                if pending.len() > 1 && client.multi.is_none() {
                    crate::commands::warm_batch(srv, client.db, pending.make_contiguous());
                }
            }
            let Some(args) = pending.pop_front() else {
                if let Some(e) = proto_err.take() {
                    Reply::Error(format!("ERR {}", e.0)).encode(client.resp, &mut out);
                    close = true;
                }
                break;
            };
            info.qbuf.store(buf.len(), Ordering::Relaxed);
            if crate::acl::user_revoked(client) {
                // Its user was deleted (ACL DELUSER / LOAD): Redis disconnects such clients.
                return Ok(());
            }
            if crate::net::is_cross_protocol(&args[0]) {
                // Replies still unsent are dropped with the connection, as Redis does.
                crate::net::warn_cross_protocol();
                return Ok(());
            }
            if srv.aof.loading() {
                if let Some(spec) = crate::commands::lookup(&args[0]) {
                    if spec.flags & crate::commands::flags::LOADING == 0 {
                        if client.multi.is_some() {
                            client.multi_abort = true;
                        }
                        let e = Reply::error("LOADING Redis is loading the dataset in memory");
                        emit(srv, client, &e, &mut out);
                        continue;
                    }
                }
            }
            let Outcome {
                reply,
                block,
                close: quit,
            } = dispatch_with(srv, client, args, &mut guards);
            let reply = match block {
                Some(b) => {
                    // Send what the pipeline produced so far, then wait.
                    flush(srv, sock, &info, &mut out).await?;
                    match wait_blocked(srv, sock, client, b, &mut buf).await? {
                        Some(r) => r,
                        None => return Ok(()),
                    }
                }
                None => reply,
            };
            // Messages this command published to its own client go before its reply.
            info.push.drain_into(&mut out);
            emit(srv, client, &reply, &mut out);
            if !client.after_reply.is_empty() {
                out.append(&mut client.after_reply);
            }
            if quit || info.killed.load(Ordering::Relaxed) {
                close = true;
                break;
            }
            if out.len() > 64 * 1024 {
                if over_hard_limit(srv, client, out.len()) {
                    return Ok(());
                }
                flush(srv, sock, &info, &mut out).await?;
            }
        }
        flush(srv, sock, &info, &mut out).await?;
        if close {
            sock.shutdown();
            return Ok(());
        }
        if buf.is_empty() && buf.capacity() > 256 * 1024 {
            buf = BytesMut::with_capacity(16 * 1024);
        }
    }
}

fn emit(srv: &Server, client: &mut Client, reply: &Reply, out: &mut Vec<u8>) {
    srv.errorstats.count_reply(reply);
    // Pushes (subscribe confirmations) are written even when replies are silenced.
    let pushed = std::mem::take(&mut client.push_reply);
    match client.reply_mode {
        ReplyMode::On => reply.encode(client.resp, out),
        ReplyMode::Off => {
            if pushed {
                reply.encode(client.resp, out)
            }
        }
        ReplyMode::Skip => {
            if pushed {
                reply.encode(client.resp, out)
            }
            client.reply_mode = ReplyMode::On
        }
        ReplyMode::SkipNext => {
            if pushed {
                reply.encode(client.resp, out)
            }
            client.reply_mode = ReplyMode::Skip
        }
    }
}

/// Most requests parsed ahead of running them (a pipelined read holds at most this many at
/// once; the rest stay in the read buffer).
const MAX_BATCH: usize = 256;

/// `client-output-buffer-limit` (normal class): true, after logging, if `pending` reply bytes
/// exceed the hard limit; the connection is then closed without them, as Redis closes it.
fn over_hard_limit(srv: &Server, client: &Client, pending: usize) -> bool {
    let limit = normal_obuf_limit(srv);
    if limit.hard > 0 && pending as u64 > limit.hard {
        tracing::warn!(
            "Client id={} addr={} closed for overcoming of output buffer limits.",
            client.id,
            client.info.addr
        );
        return true;
    }
    false
}

fn normal_obuf_limit(srv: &Server) -> crate::directives::ObufLimit {
    let v = srv
        .config
        .get("client-output-buffer-limit")
        .unwrap_or_default();
    crate::directives::parse_obuf_limits(&v)[0]
}

async fn flush(
    srv: &Server,
    sock: &ClientSocket,
    info: &ClientInfo,
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    // Under appendfsync always, nothing is acknowledged before it is on disk.
    srv.aof.wait_durable(srv.aof.last_seq()).await;
    // Over the soft limit, the reader gets soft_seconds to take the data; a client that stays
    // over it longer is closed (client-output-buffer-limit, normal class).
    let soft = if out.len() > 64 * 1024 {
        normal_obuf_limit(srv)
    } else {
        crate::directives::ObufLimit::default()
    };
    let write = async {
        if soft.soft > 0 && out.len() as u64 > soft.soft {
            let grace = Duration::from_secs(soft.soft_seconds.max(1));
            match tokio::time::timeout(grace, sock.write_all(out)).await {
                Ok(r) => r,
                Err(_) => {
                    tracing::warn!("Client closed for overcoming of output buffer soft limit.");
                    Err(std::io::Error::other("output buffer soft limit"))
                }
            }
        } else {
            sock.write_all(out).await
        }
    };
    // A client killed while its write is stuck (a subscriber over its output buffer limit
    // that stopped reading) is dropped rather than waited for.
    tokio::select! {
        r = write => r?,
        _ = info.kill.notified() => {
            return Err(std::io::Error::other("client killed while writing"));
        }
    }
    info.push.sent();
    srv.stats
        .net_output_bytes
        .fetch_add(out.len() as u64, Ordering::Relaxed);
    out.clear();
    Ok(())
}

/// Wait for a blocked command's outcome. None if the client went away or was killed.
async fn wait_blocked(
    srv: &Server,
    sock: &ClientSocket,
    client: &mut Client,
    blocked: crate::blocking::Blocked,
    buf: &mut BytesMut,
) -> std::io::Result<Option<Reply>> {
    let info = client.info.clone();
    info.blocked.store(true, Ordering::Relaxed);
    let crate::blocking::Blocked { waiter, mut rx } = blocked;
    let timeout = client.block_timeout_ms;
    let deadline =
        (timeout > 0).then(|| tokio::time::Instant::now() + Duration::from_millis(timeout));
    let on_timeout = client
        .block_timeout_reply
        .take()
        .unwrap_or(Reply::NullArray);
    let result = loop {
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            r = &mut rx => break r.ok(),
            _ = sleep => {
                if srv.blocking.cancel(&srv.keyspace, &waiter) {
                    break Some(on_timeout);
                }
                break (&mut rx).await.ok();
            }
            _ = info.kill.notified() => {
                if srv.blocking.cancel(&srv.keyspace, &waiter) {
                    break None;
                }
                break None;
            }
            r = sock.read_buf(buf) => {
                // Commands pipelined behind the blocking one wait in the buffer; EOF ends it.
                if r.map(|n| n == 0).unwrap_or(true) {
                    srv.blocking.cancel(&srv.keyspace, &waiter);
                    break None;
                }
            }
        }
    };
    info.blocked.store(false, Ordering::Relaxed);
    Ok(result)
}
