//! This server as a replica: the task that connects to the master, performs the handshake,
//! loads the master's image and applies its stream (Redis's replication.c, replica half).
//!
//! One task runs per REPLICAOF (its generation, see `state::replica_link`); it reconnects
//! every second after a failure, first trying to continue the history it has (`PSYNC
//! <replid> <offset+1>`). The stream's commands run through the dispatcher as the master's
//! client (allowed to write on a read-only replica, its replies dropped); each command's
//! bytes are then relayed unchanged to our own replicas, so offsets agree along a chain.

use crate::client::{Client, ClientInfo, ROLE_MASTER};
use crate::config::dir;
use crate::protocol::Reply;
use crate::state::replica_link::LinkState;
use crate::state::Server;
use bytes::{Bytes, BytesMut};
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Register the task starter with the server (at startup).
pub fn install(srv: &Arc<Server>) {
    let weak = Arc::downgrade(srv);
    srv.master_link.set_starter(Box::new(move |generation| {
        if let Some(srv) = weak.upgrade() {
            tokio::spawn(run(srv, generation));
        }
    }));
}

async fn run(srv: Arc<Server>, generation: u64) {
    // The previous generation's task ends first (it stops before its next request).
    let _slot = srv.master_link.task_slot.lock().await;
    if !srv.master_link.current(generation) {
        return;
    }
    srv.repl.start_following();
    while srv.master_link.current(generation) {
        let target = srv
            .master_link
            .info
            .lock()
            .as_ref()
            .map(|l| (l.host.clone(), l.port));
        let Some((host, port)) = target else {
            return;
        };
        if let Err(e) = link_once(&srv, generation, &host, port).await {
            if srv.master_link.current(generation) {
                tracing::warn!("{e}");
            }
        }
        srv.master_link.set_state(generation, LinkState::Connect);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = srv.master_link.moved_on(generation) => {}
        }
        // Redis reconnects from its cron, which a DEBUG SLEEP holds up with everything else:
        // a replica that killed its link and then slept stays away for the whole sleep (the
        // psync suites let the master's backlog expire that way).
        crate::commands::debug::resumed().await;
    }
}

/// The connection to the master: TCP, or TLS over it (`tls-replication yes`).
enum MasterStream {
    Plain(TcpStream),
    Tls(Box<tokio_openssl::SslStream<TcpStream>>),
}

impl MasterStream {
    fn tcp(&self) -> &TcpStream {
        match self {
            MasterStream::Plain(s) => s,
            MasterStream::Tls(s) => s.get_ref(),
        }
    }
}

impl tokio::io::AsyncRead for MasterStream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            MasterStream::Plain(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            MasterStream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for MasterStream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            MasterStream::Plain(s) => std::pin::Pin::new(s).poll_write(cx, data),
            MasterStream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write(cx, data),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            MasterStream::Plain(s) => std::pin::Pin::new(s).poll_flush(cx),
            MasterStream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            MasterStream::Plain(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            MasterStream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Start TLS on a connection to the master, with the client context (crate::tls): the
/// master's certificate must chain to the CA.
async fn start_tls(srv: &Server, tcp: TcpStream) -> Result<MasterStream, String> {
    let ssl = srv
        .tls
        .connecting()
        .map_err(|e| format!("Failed to create TLS connection: {e}"))?;
    let mut s = tokio_openssl::SslStream::new(ssl, tcp)
        .map_err(|e| format!("Failed to create TLS connection: {e}"))?;
    std::pin::Pin::new(&mut s)
        .connect()
        .await
        .map_err(|e| format!("Error condition on socket for SYNC: {e}"))?;
    Ok(MasterStream::Tls(Box::new(s)))
}

/// The connection to the master with what has been read and not yet used.
struct Link {
    sock: MasterStream,
    buf: BytesMut,
    timeout: Duration,
    /// The link task's server and generation: a REPLICAOF ends a wait on the socket.
    srv: Arc<Server>,
    generation: u64,
}

impl Link {
    async fn fill(&mut self) -> Result<(), String> {
        let link = &self.srv.master_link;
        tokio::select! {
            r = tokio::time::timeout(self.timeout, self.sock.read_buf(&mut self.buf)) => match r {
                Err(_) => Err("Timeout connecting to the MASTER...".into()),
                Ok(Ok(0)) => Err("Master closed the connection".into()),
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(format!("Error reading from MASTER: {e}")),
            },
            _ = link.moved_on(self.generation) => Err("replication was stopped".into()),
        }
    }

    /// One line (without CRLF); empty lines (the master's keepalives) are skipped when
    /// `skip_empty`.
    async fn line(&mut self, skip_empty: bool) -> Result<String, String> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let raw = self.buf.split_to(i + 1);
                let text = String::from_utf8_lossy(&raw[..i])
                    .trim_end_matches('\r')
                    .to_string();
                if text.is_empty() && skip_empty {
                    continue;
                }
                return Ok(text);
            }
            self.fill().await?;
        }
    }

    async fn send(&mut self, argv: &[&[u8]]) -> Result<(), String> {
        let mut out = Vec::new();
        crate::protocol::encode_command(&mut out, argv);
        self.sock
            .write_all(&out)
            .await
            .map_err(|e| format!("Error writing to MASTER: {e}"))
    }

    async fn command(&mut self, argv: &[&[u8]]) -> Result<String, String> {
        self.send(argv).await?;
        self.line(true).await
    }
}

async fn link_once(
    srv: &Arc<Server>,
    generation: u64,
    host: &str,
    port: u16,
) -> Result<(), String> {
    let link = &srv.master_link;
    link.set_state(generation, LinkState::Connecting);
    tracing::info!("Connecting to MASTER {host}:{port}");
    let timeout = Duration::from_secs(srv.config.int(dir::REPL_TIMEOUT).max(1) as u64);
    let source = srv.config.text(dir::BIND_SOURCE_ADDR);
    // A REPLICAOF (or REPLICAOF NO ONE) ends the connect at once, as Redis's
    // replicationSetMaster cancels a handshake in progress: a master that died with its host
    // (no RST: a container killed, a machine gone) would otherwise hold the next generation's
    // task back until the connect timed out (Sentinel's reconfiguration of the other replicas
    // waited 9 s so in the compose scenario).
    let sock = tokio::select! {
        r = tokio::time::timeout(timeout, connect(host, port, &source)) => match r {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(format!("Error condition on socket for SYNC: {e}")),
            Err(_) => return Err("Timeout connecting to the MASTER...".into()),
        },
        _ = link.moved_on(generation) => return Err("replication was stopped".into()),
    };
    let _ = sock.set_nodelay(!srv.config.flag(dir::REPL_DISABLE_TCP_NODELAY));
    let sock = if srv.config.flag(dir::TLS_REPLICATION) {
        tokio::select! {
            r = tokio::time::timeout(timeout, start_tls(srv, sock)) => match r {
                Ok(r) => r?,
                Err(_) => return Err("Timeout connecting to the MASTER...".into()),
            },
            _ = link.moved_on(generation) => return Err("replication was stopped".into()),
        }
    } else {
        MasterStream::Plain(sock)
    };
    tracing::info!("MASTER <-> REPLICA sync started");
    link.set_state(generation, LinkState::Handshake);
    let mut m = Link {
        sock,
        buf: BytesMut::with_capacity(16 * 1024),
        timeout,
        srv: srv.clone(),
        generation,
    };
    let pong = m.command(&[b"PING"]).await?;
    if pong.starts_with('-')
        && !pong.starts_with("-NOAUTH")
        && !pong.starts_with("-NOPERM")
        && !pong.starts_with("-ERR operation not permitted")
    {
        return Err(format!("Error reply to PING from master: '{pong}'"));
    }
    tracing::info!("Master replied to PING, replication can continue...");
    let auth = srv.config.text(dir::MASTERAUTH);
    if !auth.is_empty() {
        let user = srv.config.text(dir::MASTERUSER);
        let reply = if user.is_empty() {
            m.command(&[b"AUTH", auth.as_bytes()]).await?
        } else {
            m.command(&[b"AUTH", user.as_bytes(), auth.as_bytes()])
                .await?
        };
        if reply.starts_with('-') {
            return Err(format!("Unable to AUTH to MASTER: {reply}"));
        }
    }
    // A replica that reaches its master over TLS is reached over TLS too: it announces its
    // TLS port, as Redis does.
    let announce_port = match srv.config.int(dir::REPLICA_ANNOUNCE_PORT) {
        0 if srv.config.flag(dir::TLS_REPLICATION) => srv.config.int(dir::TLS_PORT),
        0 => srv.port.load(Ordering::Relaxed),
        p => p,
    };
    let reply = m
        .command(&[
            b"REPLCONF",
            b"listening-port",
            announce_port.to_string().as_bytes(),
        ])
        .await?;
    if reply.starts_with('-') {
        tracing::info!(
            "(Non critical) Master does not understand REPLCONF listening-port: {reply}"
        );
    }
    let ip = srv.config.text(dir::REPLICA_ANNOUNCE_IP);
    if !ip.is_empty() {
        let reply = m
            .command(&[b"REPLCONF", b"ip-address", ip.as_bytes()])
            .await?;
        if reply.starts_with('-') {
            tracing::info!(
                "(Non critical) Master does not understand REPLCONF ip-address: {reply}"
            );
        }
    }
    let reply = m
        .command(&[b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"])
        .await?;
    if reply.starts_with('-') {
        tracing::info!("(Non critical) Master does not understand REPLCONF capa: {reply}");
    }
    // PSYNC: continue our history if we have one.
    let (replid, next) = match srv.repl.history() {
        Some((id, off)) => {
            tracing::info!(
                "Trying a partial resynchronization (request {id}:{}).",
                off + 1
            );
            (id, (off + 1).to_string())
        }
        None => {
            tracing::info!("Partial resynchronization not possible (no cached master)");
            ("?".to_string(), "-1".to_string())
        }
    };
    // A master handing its role over (state::failover) asks the target to take it.
    let failing_over = srv.failover.state() == crate::state::failover::IN_PROGRESS;
    let mut psync: Vec<&[u8]> = vec![&b"PSYNC"[..], replid.as_bytes(), next.as_bytes()];
    if failing_over {
        psync.push(b"FAILOVER");
    }
    if let Err(e) = m.send(&psync).await {
        crate::state::failover::abort(srv, "Write error to failover target");
        return Err(e);
    }
    let reply = m.line(true).await;
    let accepted =
        matches!(&reply, Ok(r) if r.starts_with("+FULLRESYNC") || r.starts_with("+CONTINUE"));
    if failing_over && !crate::state::failover::psync_answered(srv, accepted) {
        // Aborted: this server is a master again and this link's generation is over.
        return Ok(());
    }
    let reply = reply?;
    if let Some(rest) = reply.strip_prefix("+FULLRESYNC") {
        let mut words = rest.split_whitespace();
        let (Some(id), Some(off)) = (
            words.next(),
            words.next().and_then(|o| o.parse::<u64>().ok()),
        ) else {
            return Err(format!(
                "Master replied with wrong +FULLRESYNC syntax: {reply}"
            ));
        };
        tracing::info!("Full resync from master: {id}:{off}");
        receive_image(srv, generation, &mut m, id).await?;
        let backlog = srv.config.int(dir::REPL_BACKLOG_SIZE).max(1) as usize;
        srv.repl.adopt_history(id, off, backlog);
        link.processed.store(off as i64, Ordering::Relaxed);
        // The master's stream after a full synchronization starts with SELECT.
        link.stream_db.store(0, Ordering::Relaxed);
        tracing::info!("MASTER <-> REPLICA sync: Finished with success");
    } else if let Some(rest) = reply.strip_prefix("+CONTINUE") {
        tracing::info!("Successful partial resynchronization with master.");
        if let Some(id) = rest.split_whitespace().next() {
            if id != replid {
                tracing::warn!("Master replication ID changed to {id}");
                srv.repl.switch_id(id);
            }
        }
        if let Some((_, off)) = srv.repl.history() {
            link.processed.store(off as i64, Ordering::Relaxed);
        }
        tracing::info!("MASTER <-> REPLICA sync: Master accepted a Partial Resynchronization.");
    } else if reply.starts_with("-NOMASTERLINK") || reply.starts_with("-LOADING") {
        return Err(format!(
            "Master is currently unable to PSYNC but should be in the future: {reply}"
        ));
    } else {
        return Err(format!("Unexpected reply to PSYNC from master: {reply}"));
    }
    if !link.current(generation) {
        return Ok(());
    }
    stream(srv, generation, m).await
}

/// Connect to the master, from `source` (`bind-source-addr`) when it is set.
async fn connect(host: &str, port: u16, source: &str) -> std::io::Result<TcpStream> {
    if source.is_empty() {
        return TcpStream::connect((host, port)).await;
    }
    let mut last = std::io::Error::other("no address for the master");
    for addr in tokio::net::lookup_host((host, port)).await? {
        let local: std::net::IpAddr = source
            .parse()
            .map_err(|_| std::io::Error::other(format!("bad bind-source-addr '{source}'")))?;
        let sock = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        if local.is_ipv4() != addr.is_ipv4() {
            continue;
        }
        sock.bind(std::net::SocketAddr::new(local, 0))?;
        match sock.connect(addr).await {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Receive the image (`$<len>` or `$EOF:<mark>`) into a file, then load it.
async fn receive_image(
    srv: &Arc<Server>,
    generation: u64,
    m: &mut Link,
    master_replid: &str,
) -> Result<(), String> {
    let link = &srv.master_link;
    link.set_state(generation, LinkState::Transfer);
    let header = m.line(true).await?;
    if header.starts_with('-') {
        return Err(format!(
            "MASTER aborted replication with an error: {header}"
        ));
    }
    let Some(spec) = header.strip_prefix('$') else {
        return Err(format!(
            "Bad protocol from MASTER, the first byte is not '$' (we received '{header}'), are you sure the host and port are right?"
        ));
    };
    let eof_mark: Option<Vec<u8>> = spec
        .strip_prefix("EOF:")
        .map(|mark| mark.as_bytes().to_vec());
    let diskless = use_diskless_load(srv);
    let to = if diskless { "to parser" } else { "to disk" };
    let size: i64 = match &eof_mark {
        Some(_) => {
            tracing::info!(
                "MASTER <-> REPLICA sync: receiving streamed RDB from master with EOF {to}"
            );
            -1
        }
        None => {
            let n = spec
                .parse::<i64>()
                .map_err(|_| format!("Bad bulk length from MASTER: '{header}'"))?;
            tracing::info!("MASTER <-> REPLICA sync: receiving {n} bytes from master {to}");
            n
        }
    };
    let now = crate::clock::unix_ms();
    if let Some(i) = link.info.lock().as_mut() {
        i.transfer_size = size;
        i.transfer_read = 0;
        i.transfer_start_ms = now;
        i.last_io_ms = now;
    }
    if diskless {
        load_from_socket(srv, generation, m, size, eof_mark, master_replid).await?;
        return after_load(srv);
    }
    let target = crate::persistence::snapshot::rdb_path(srv);
    // In `dir` itself, not beside the target: with `dbfilename ""` the target's parent is the
    // directory above `dir`.
    let tmp = std::path::Path::new(&srv.config.text(dir::DIR)).join(format!(
        "temp-{}.{}.rdb",
        now / 1000,
        std::process::id()
    ));
    // Read back too: the diskless form's end is found by reading the file's last bytes.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| {
            format!("Opening the temp file needed for MASTER <-> REPLICA synchronization: {e}")
        })?;
    let result = async {
        let mut read: u64 = 0;
        loop {
            if !link.current(generation) {
                return Err("replication was stopped".to_string());
            }
            if m.buf.is_empty() {
                m.fill().await?;
            }
            let take = match size {
                n if n >= 0 => m.buf.len().min((n as u64 - read) as usize),
                _ => m.buf.len(),
            };
            let chunk = m.buf.split_to(take);
            file.write_all(&chunk)
                .map_err(|e| format!("Write error saving the DB to disk: {e}"))?;
            read += take as u64;
            if let Some(i) = link.info.lock().as_mut() {
                i.transfer_read = read;
                i.last_io_ms = crate::clock::unix_ms();
            }
            match (&eof_mark, size) {
                (None, n) if read == n as u64 => return Ok(()),
                // The mark ends the payload: check the file's last bytes.
                (Some(mark), _)
                    if read >= mark.len() as u64 && ends_with_mark(&mut file, mark)? =>
                {
                    let len = read - mark.len() as u64;
                    file.set_len(len)
                        .map_err(|e| format!("Write error saving the DB to disk: {e}"))?;
                    return Ok(());
                }
                _ => {}
            }
        }
    }
    .await;
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let _ = file.sync_all();
    drop(file);
    std::fs::rename(&tmp, &target).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!(
            "Failed trying to rename the temp DB into {}: {e}",
            target.display()
        )
    })?;
    tracing::info!("MASTER <-> REPLICA sync: Flushing old data");
    tracing::info!("MASTER <-> REPLICA sync: Loading DB in memory");
    let loaded = {
        let srv2 = srv.clone();
        tokio::task::spawn_blocking(move || {
            let inner = &srv2.aof.inner;
            inner.loading.store(true, Ordering::SeqCst);
            let r = crate::persistence::snapshot::reload(&srv2, true, false);
            inner.loading.store(false, Ordering::SeqCst);
            r
        })
        .await
        .map_err(|e| format!("loading the image failed: {e}"))?
    };
    if let Err(e) = loaded {
        return Err(format!(
            "Failed trying to load the MASTER synchronization DB from disk: {e}"
        ));
    }
    after_load(srv)
}

/// After the master's image replaced the data set (from disk or from the socket).
fn after_load(srv: &Arc<Server>) -> Result<(), String> {
    // Keys this replica's clients wrote are gone with the old data set.
    srv.keyspace.replica_ttl_keys.lock().clear();
    // The AOF must hold the new data set: as Redis's restartAOFAfterSYNC, turn it off (a
    // rewrite of the old data set is stopped) and on again, which rewrites what was loaded.
    if srv.aof.is_enabled() {
        let _ = crate::persistence::set_appendonly(srv, false, false);
        if let Err(e) = crate::persistence::set_appendonly(srv, true, false) {
            // Retried from the cron until a rewrite starts, as Redis retries it.
            tracing::warn!("Failed enabling the AOF after successful master synchronization! Trying it again: {e}");
            crate::persistence::retry_appendonly(srv);
        }
    }
    Ok(())
}

/// `repl-diskless-load`: load the image from the socket (swapdb, or on-empty-db while every
/// database is empty) rather than from a file written first (Redis's useDisklessLoad).
fn use_diskless_load(srv: &Server) -> bool {
    match srv.config.text(dir::REPL_DISKLESS_LOAD).as_str() {
        "swapdb" => true,
        "on-empty-db" => srv
            .keyspace
            .dbs
            .iter()
            .all(|d| d.shards.iter().all(|s| s.lock().is_empty())),
        _ => false,
    }
}

/// Marks the load in progress (INFO loading, or async_loading while the old data set is
/// served) until dropped.
struct LoadingFlag<'a> {
    flag: &'a std::sync::atomic::AtomicBool,
}

impl<'a> LoadingFlag<'a> {
    fn raise(flag: &'a std::sync::atomic::AtomicBool) -> LoadingFlag<'a> {
        flag.store(true, Ordering::SeqCst);
        LoadingFlag { flag }
    }
}

impl Drop for LoadingFlag<'_> {
    fn drop(&mut self) {
        self.flag.store(false, Ordering::SeqCst);
    }
}

/// Diskless load (Redis's readSyncBulkPayload with a diskless load): the payload goes from the
/// socket to the RDB reader as it arrives (`persistence::stream_load`). With `swapdb` the keys
/// go to databases of their own and replace the live ones only once the image loaded in full,
/// so a failed transfer leaves the old data set as it was; when the master continues the
/// history this replica already has (the same replication ID), the old data set is served
/// meanwhile (async loading), else clients get -LOADING. With `on-empty-db` the (empty)
/// databases are loaded directly, and emptied again on a failure.
async fn load_from_socket(
    srv: &Arc<Server>,
    generation: u64,
    m: &mut Link,
    size: i64,
    eof_mark: Option<Vec<u8>>,
    master_replid: &str,
) -> Result<(), String> {
    use crate::persistence::stream_load::{self, Input, Target};
    let swapdb = srv.config.text(dir::REPL_DISKLESS_LOAD) == "swapdb";
    // A BGSAVE of ours would only write the data set being replaced.
    if crate::persistence::child::bgsave_running(srv) {
        let s = srv.clone();
        let _ =
            tokio::task::spawn_blocking(move || crate::persistence::child::kill_bgsave(&s)).await;
    }
    let async_loading = swapdb && srv.repl.replid() == master_replid;
    let target = if swapdb {
        Target::Temp(stream_load::temp_dbs(srv))
    } else {
        // Our replicas followed the data set now dropped (replicationAttachToNewMaster).
        srv.repl.disconnect_replicas();
        tracing::info!("MASTER <-> REPLICA sync: Flushing old data");
        let s = srv.clone();
        let _ =
            tokio::task::spawn_blocking(move || crate::persistence::snapshot::empty_all(&s)).await;
        Target::Live
    };
    tracing::info!("MASTER <-> REPLICA sync: Loading DB in memory");
    let inner = &srv.aof.inner;
    // Raised first and lowered last, so no request is held for a load from the socket.
    let _from_socket = (!async_loading).then(|| LoadingFlag::raise(&inner.loading_from_socket));
    let _loading = LoadingFlag::raise(if async_loading {
        &inner.async_loading
    } else {
        &inner.loading
    });
    crate::persistence::snapshot::start_load_progress(srv, size.max(0) as u64);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Input>(4);
    let s = srv.clone();
    let loader = tokio::task::spawn_blocking(move || {
        let r = stream_load::load(&s, &mut rx, target, "the MASTER's RDB");
        // Whatever is left (the old data set after a swap, a failed load's keys) is freed
        // here, off the async workers.
        r.and_then(|mut loaded| {
            let codes = std::mem::take(&mut loaded.functions);
            (crate::persistence::upcalls().restore_libraries)(
                &s,
                codes,
                crate::persistence::LibraryPolicy::Flush,
            )
            .map_err(|e| e.trim_start_matches("ERR ").to_string())?;
            if let Some(temp) = loaded.temp.take() {
                tracing::info!("MASTER <-> REPLICA sync: Swapping active DB with loaded DB");
                let old = stream_load::swap_in(&s, temp);
                tracing::info!("MASTER <-> REPLICA sync: Discarding old DB in background");
                drop(old);
            }
            Ok(loaded)
        })
    });
    let fed = feed_loader(srv, generation, m, size, eof_mark.as_deref(), tx).await;
    let loaded = loader
        .await
        .map_err(|e| format!("loading the image failed: {e}"))?;
    let loaded = match (loaded, fed) {
        (Ok(l), _) => l,
        (Err(e), _) => {
            if swapdb {
                tracing::info!("MASTER <-> REPLICA sync: Discarding temporary DB in background");
            } else {
                let s = srv.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    crate::persistence::snapshot::empty_all(&s)
                })
                .await;
            }
            return Err(format!(
                "Failed trying to load the MASTER synchronization DB from socket: {e}"
            ));
        }
    };
    // As Redis: the data set changed without a save.
    srv.stats.dirty.add(1);
    crate::persistence::snapshot::record_load(
        srv,
        loaded.keys,
        loaded.expired,
        loaded.empty_skipped,
    );
    Ok(())
}

/// Read the payload from the master and hand it to the loader: `size` bytes, or (`eof_mark`)
/// up to the mark, which is held back until it is known not to be the end.
async fn feed_loader(
    srv: &Arc<Server>,
    generation: u64,
    m: &mut Link,
    size: i64,
    eof_mark: Option<&[u8]>,
    tx: tokio::sync::mpsc::Sender<crate::persistence::stream_load::Input>,
) -> Result<(), String> {
    use crate::persistence::stream_load::Input;
    let link = &srv.master_link;
    let mut read: u64 = 0;
    // The diskless form: the last bytes read, which may be the mark.
    let mut held: Vec<u8> = Vec::new();
    loop {
        if !link.current(generation) {
            return Err("replication was stopped".into());
        }
        if size >= 0 && read == size as u64 {
            let _ = tx.send(Input::End).await;
            return Ok(());
        }
        if m.buf.is_empty() {
            m.fill().await?;
        }
        let take = match size {
            n if n >= 0 => m.buf.len().min((n as u64 - read) as usize),
            _ => m.buf.len(),
        };
        let chunk = m.buf.split_to(take).freeze();
        read += take as u64;
        srv.stats.net_input_bytes.add(take as u64);
        if let Some(i) = link.info.lock().as_mut() {
            i.transfer_read = read;
            i.last_io_ms = crate::clock::unix_ms();
        }
        let out = match eof_mark {
            None => chunk,
            Some(mark) => {
                held.extend_from_slice(&chunk);
                if held.ends_with(mark) {
                    held.truncate(held.len() - mark.len());
                    let last = Bytes::from(std::mem::take(&mut held));
                    if tx.send(Input::Bytes(last)).await.is_ok() {
                        let _ = tx.send(Input::End).await;
                    }
                    return Ok(());
                }
                if held.len() <= mark.len() {
                    continue;
                }
                let keep = held.split_off(held.len() - mark.len());
                Bytes::from(std::mem::replace(&mut held, keep))
            }
        };
        if !out.is_empty() && tx.send(Input::Bytes(out)).await.is_err() {
            // The loader stopped (a damaged image): its error is the one reported.
            return Ok(());
        }
    }
}

/// The file ends with `mark` (the diskless EOF mark).
fn ends_with_mark(file: &mut std::fs::File, mark: &[u8]) -> Result<bool, String> {
    use std::io::{Read, Seek, SeekFrom};
    let end = file
        .seek(SeekFrom::End(0))
        .map_err(|e| format!("Write error saving the DB to disk: {e}"))?;
    if end < mark.len() as u64 {
        return Ok(false);
    }
    let mut tail = vec![0u8; mark.len()];
    file.seek(SeekFrom::Start(end - mark.len() as u64))
        .and_then(|_| file.read_exact(&mut tail))
        .and_then(|_| file.seek(SeekFrom::End(0)).map(|_| ()))
        .map_err(|e| format!("Write error saving the DB to disk: {e}"))?;
    Ok(tail == mark)
}

/// A request cut from the stream: where its arguments are, and its length in bytes.
type Cut = (Vec<std::ops::Range<usize>>, usize);

/// One complete request at the front of `buf`. None when more bytes are needed.
fn next_request(buf: &[u8]) -> Result<Option<Cut>, String> {
    fn line_end(buf: &[u8], from: usize) -> Option<usize> {
        buf[from..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|p| from + p)
    }
    fn number(b: &[u8]) -> Result<i64, String> {
        std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| "Protocol error: invalid length".to_string())
    }
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != b'*' {
        // An inline request (a keepalive newline): one line.
        return Ok(line_end(buf, 0).map(|e| {
            let mut args = Vec::new();
            if e > 0 {
                args.push(0..e);
            }
            (args, e + 2)
        }));
    }
    let Some(e) = line_end(buf, 1) else {
        return Ok(None);
    };
    let count = number(&buf[1..e])?;
    let mut p = e + 2;
    let mut args = Vec::with_capacity(count.max(0) as usize);
    for _ in 0..count.max(0) {
        if p >= buf.len() {
            return Ok(None);
        }
        if buf[p] != b'$' {
            return Err("Protocol error: expected '$'".into());
        }
        let Some(e) = line_end(buf, p + 1) else {
            return Ok(None);
        };
        let len = number(&buf[p + 1..e])?;
        if len < 0 {
            return Err("Protocol error: invalid bulk length".into());
        }
        let start = e + 2;
        let end = start + len as usize;
        if end + 2 > buf.len() {
            return Ok(None);
        }
        args.push(start..end);
        p = end + 2;
    }
    Ok(Some((args, p)))
}

/// Apply the master's stream until the link breaks or REPLICAOF changes.
async fn stream(srv: &Arc<Server>, generation: u64, mut m: Link) -> Result<(), String> {
    let link = &srv.master_link;
    let id = srv.next_client_id();
    let peer = m
        .sock
        .tcp()
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let laddr = m
        .sock
        .tcp()
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let info = Arc::new(ClientInfo::new(id, peer, laddr, crate::clock::unix_ms()));
    info.repl_role.store(ROLE_MASTER, Ordering::Relaxed);
    *info.shutdown_fd.lock() = Some(std::os::fd::AsRawFd::as_raw_fd(m.sock.tcp()));
    srv.clients.lock().insert(id, info.clone());
    let mut client = Client::new(id, info.clone());
    client.authenticated = true;
    client.repl.is_master = true;
    client.select(link.stream_db.load(Ordering::Relaxed));
    if let Some(i) = link.info.lock().as_mut() {
        i.client_id = Some(id);
        i.socket_fd = Some(std::os::fd::AsRawFd::as_raw_fd(m.sock.tcp()));
        i.last_io_ms = crate::clock::unix_ms();
    }
    link.set_state(generation, LinkState::Connected);
    let result = apply_stream(srv, generation, &mut m, &mut client).await;
    // The socket closes with `m` below: a kill from now on has nothing to shut down.
    *info.shutdown_fd.lock() = None;
    if let Some(i) = link.info.lock().as_mut() {
        i.client_id = None;
        i.socket_fd = None;
    }
    srv.clients.lock().remove(&id);
    client.info.connection_freed();
    if link.current(generation) {
        tracing::info!("Connection with master lost.");
    }
    result
}

async fn apply_stream(
    srv: &Arc<Server>,
    generation: u64,
    m: &mut Link,
    client: &mut Client,
) -> Result<(), String> {
    let r = apply_stream_until_done(srv, generation, m, client).await;
    srv.master_link.unapplied.store(0, Ordering::Relaxed);
    r
}

/// What became of one request of the master's stream.
enum Applied {
    /// Run and counted in the offset.
    Counted,
    /// Held back (CLIENT PAUSE): to run again later.
    Postponed(Vec<Bytes>),
    /// The master's client was killed before the request ran.
    Killed,
}

async fn apply_stream_until_done(
    srv: &Arc<Server>,
    generation: u64,
    m: &mut Link,
    client: &mut Client,
) -> Result<(), String> {
    let link = &srv.master_link;
    link.unapplied.store(m.buf.len() as i64, Ordering::Relaxed);
    let mut ack_tick = tokio::time::interval(Duration::from_secs(1));
    ack_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_io = tokio::time::Instant::now();
    // A request CLIENT PAUSE holds back (the master's writes wait under a WRITE pause, as in
    // Redis): the stream stops at it, while what follows is still read (read offset).
    let mut held: Option<(Bytes, Vec<Bytes>)> = None;
    let mut qb = crate::querybuf::QueryBuf::new();
    loop {
        // The request is held back because a script of this replica's clients runs past
        // `busy-reply-threshold`: the stream waits for it (it would be refused with -BUSY),
        // as Redis stops processing its master's input then.
        let mut busy_held = false;
        // Everything complete in the buffer, in order, unless a request is held back.
        loop {
            let (raw, args) = match held.take() {
                Some(h) => h,
                None => match next_request(&m.buf)? {
                    Some((ranges, len)) => {
                        let raw = m.buf.split_to(len).freeze();
                        let args: Vec<Bytes> = ranges.into_iter().map(|r| raw.slice(r)).collect();
                        (raw, args)
                    }
                    None => break,
                },
            };
            // Only the current link applies, counts and passes on requests (a newer one is
            // waiting for this task to end: `MasterLink::task_slot`).
            if !link.current(generation) {
                return Ok(());
            }
            if !args.is_empty()
                && srv
                    .scripts
                    .busy(srv.config.hot.busy_reply_threshold.load(Ordering::Relaxed))
            {
                held = Some((raw, args));
                busy_held = true;
                break;
            }
            // Run and count the request as one step under the apply gate, so that an image
            // taken meanwhile records the offset its data holds.
            let step = link.applying(|| {
                if !args.is_empty() {
                    let first = args[0].clone();
                    let outcome = crate::commands::dispatch(srv, client, args);
                    if outcome.close {
                        // The link was killed (CLIENT KILL TYPE MASTER) before the request
                        // ran: it is not applied, so it must not count in the offset nor
                        // reach our replicas, or the partial resynchronization that follows
                        // would skip it.
                        return Applied::Killed;
                    }
                    if outcome.reply.is_error() || matches!(outcome.reply, Reply::Array(_)) {
                        // Redis names a command by its table entry (`<unknown>` if none).
                        let name = crate::commands::lookup(&first).map_or_else(
                            || "<unknown>".to_string(),
                            |_| String::from_utf8_lossy(&first).to_ascii_lowercase(),
                        );
                        crate::commands::report_propagation_error(
                            srv,
                            crate::commands::PropagationSource::Master,
                            &name,
                            &outcome.reply,
                        );
                    }
                    if let Some(args) = outcome.postponed {
                        return Applied::Postponed(args);
                    }
                    if let Some(b) = outcome.block {
                        srv.blocking.cancel(&srv.keyspace, &b.waiter);
                    }
                }
                // The offset moves past the request once it ran (an ACK it asked for
                // reports the offset before it, as Redis's).
                srv.repl.feed_raw(&raw, srv.replica_obuf_limit());
                link.processed
                    .fetch_add(raw.len() as i64, Ordering::Relaxed);
                // What an RDB saved now records as the stream's database (and where the
                // next link continues).
                link.stream_db.store(client.db, Ordering::Relaxed);
                Applied::Counted
            });
            match step {
                Applied::Killed => return Err("Master's client was killed".into()),
                Applied::Postponed(args) => {
                    held = Some((raw, args));
                    break;
                }
                Applied::Counted => {}
            }
            if link.ack_now.swap(false, Ordering::AcqRel) {
                send_ack(srv, m).await?;
            }
            if client.info.killed.load(Ordering::Relaxed) {
                return Err("Master's client was killed".into());
            }
        }
        let pending = held.as_ref().map_or(0, |(raw, _)| raw.len()) + m.buf.len();
        link.unapplied.store(pending as i64, Ordering::Relaxed);
        // The link's buffer follows a client's query buffer rules: an argument of 32 KiB or
        // more arrives in a buffer of its exact size (a value kept from it keeps no more), a
        // block grown for a big request is let go once the request ran (Redis trims its
        // master's pending query buffer the same way), and CLIENT LIST shows it.
        let progress = crate::protocol::progress(&m.buf, &Default::default());
        match progress.bulk {
            Some((start, len)) if len >= crate::querybuf::BIG_ARG => {
                qb.for_big_argument(&mut m.buf, start + len + 2)
            }
            _ => {
                qb.after_requests(&mut m.buf);
                if m.buf.capacity() - m.buf.len() < 4096 {
                    m.buf.reserve(crate::querybuf::IOBUF_LEN);
                }
            }
        }
        client.info.qbuf.store(m.buf.len(), Ordering::Relaxed);
        client
            .info
            .qbuf_free
            .store(m.buf.capacity() - m.buf.len(), Ordering::Relaxed);
        client
            .info
            .qbuf_mem
            .store(m.buf.capacity(), Ordering::Relaxed);
        let len_before = m.buf.len();
        let wake = link.ack_wake.notified();
        let paused = held.is_some() && !busy_held;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(20)), if busy_held => {}
            woken = srv.pause.wait_change(&client.info.kill), if paused => {
                if !woken {
                    return Err("Master's client was killed".into());
                }
            }
            r = m.sock.read_buf(&mut m.buf) => {
                match r {
                    Ok(0) => return Err("Master closed the connection".into()),
                    Ok(n) => {
                        qb.after_read(&m.buf, len_before, n);
                        link.unapplied.fetch_add(n as i64, Ordering::Relaxed);
                        srv.stats.net_input_bytes.add(n as u64);
                        srv.stats.reads_processed.add(1);
                        last_io = tokio::time::Instant::now();
                        if let Some(i) = link.info.lock().as_mut() {
                            i.last_io_ms = crate::clock::unix_ms();
                        }
                    }
                    Err(e) => return Err(format!("Error reading from MASTER: {e}")),
                }
            }
            _ = ack_tick.tick() => {
                if last_io.elapsed() > m.timeout {
                    return Err("MASTER timeout: no data nor PING received...".into());
                }
                send_ack(srv, m).await?;
            }
            _ = wake => {
                if link.ack_now.swap(false, Ordering::AcqRel) {
                    send_ack(srv, m).await?;
                }
            }
            _ = client.info.kill.notified() => return Err("Master's client was killed".into()),
            _ = link.moved_on(generation) => return Ok(()),
        }
    }
}

async fn send_ack(srv: &Server, m: &mut Link) -> Result<(), String> {
    let off = srv.master_link.processed.load(Ordering::Relaxed).max(0);
    m.send(&[b"REPLCONF", b"ACK", off.to_string().as_bytes()])
        .await
}

#[cfg(test)]
mod tests {
    use super::next_request;

    #[test]
    fn requests_are_cut_at_their_exact_length() {
        let s = b"*1\r\n$4\r\nPING\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n9\r\n";
        let (args, n) = next_request(s).unwrap().unwrap();
        assert_eq!(n, 14);
        assert_eq!(&s[args[0].clone()], b"PING");
        let (args, n) = next_request(&s[14..]).unwrap().unwrap();
        assert_eq!(n, s.len() - 14);
        assert_eq!(args.len(), 2);
        // Every strict prefix asks for more.
        for cut in 0..14 {
            assert!(next_request(&s[..cut]).unwrap().is_none(), "{cut}");
        }
        assert!(next_request(b"*1\r\n+PING\r\n").is_err());
        assert_eq!(next_request(b"\r\n").unwrap().unwrap(), (vec![], 2));
    }
}
