//! The network edge: listening sockets (`bind`), who may connect (`protected-mode`), the
//! cross-protocol guard, and a client socket that costs one `read` per readiness event.
//!
//! `bind` takes Redis 7.0's forms: `*` (every IPv4 address), `::*` (every IPv6 address), plain
//! addresses, and a leading `-` for an address that may be missing (skipped when the system
//! does not have it). IPv6 sockets are IPv6-only, so `* -::*` (the default) binds both
//! families on one port. With `protected-mode yes` and no password for the default user, a
//! client not on 127.0.0.1 or ::1 gets Redis's `-DENIED` text and is closed.
//!
//! tokio's `TcpStream` keeps a socket marked readable until a read returns `WouldBlock`, so a
//! request/response loop pays a third syscall per request (read, write, read→EAGAIN). Here a
//! read that comes back shorter than the space offered means the kernel buffer is drained:
//! readiness is cleared through the `AsyncFd` guard (which only clears the event it saw, so a
//! later arrival is never lost), and the next wait goes straight to the reactor. Redis's event
//! loop does the same with level-triggered epoll.
//!
//! A client arrives over TCP or over the Unix socket (`unixsocket`); both are plain stream
//! descriptors here, read and written with the same calls.

use bytes::BytesMut;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use tokio::io::unix::AsyncFd;

/// Redis's reply to a client refused by protected mode (sent as is, then the connection
/// closes).
pub(crate) const PROTECTED_MODE_DENIED: &str = "-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";

/// True when `name` (a request's first word) is `POST` or `Host:`: an HTTP request sent to the
/// server, as a browser tricked by a web page would (cross-protocol scripting). The
/// connection is closed before the request, or anything after it, runs.
pub(crate) fn is_cross_protocol(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"post") || name.eq_ignore_ascii_case(b"host:")
}

/// Log the cross-protocol warning, at most once a minute (as Redis).
pub(crate) fn warn_cross_protocol() {
    static LAST_LOGGED: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
    let now = crate::clock::unix_ms() / 1000;
    let last = LAST_LOGGED.load(std::sync::atomic::Ordering::Relaxed);
    if (now - last).abs() > 60
        && LAST_LOGGED
            .compare_exchange(
                last,
                now,
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
            )
            .is_ok()
    {
        tracing::warn!("Possible SECURITY ATTACK detected. It looks like somebody is sending POST or Host: commands to Redis. This is likely due to an attacker attempting to use Cross Protocol Scripting to compromise your Redis instance. Connection aborted.");
    }
}

/// Whether protected mode refuses a client connecting from `peer`: `protected-mode yes`, no
/// password for the default user (`default_user_nopass`), and a peer that is not local.
pub(crate) fn protected_mode_refuses(
    protected_mode: bool,
    default_user_nopass: bool,
    peer: &str,
) -> bool {
    protected_mode && default_user_nopass && !is_local_peer(peer)
}

/// Listening sockets for every address of a `bind` value on `port`. Err is the text to exit
/// with (an address that cannot be bound and is not optional).
pub(crate) fn bind_listeners(
    bind: &str,
    port: u16,
    backlog: i32,
) -> Result<Vec<std::net::TcpListener>, String> {
    use socket2::{Domain, Socket, Type};
    let mut listeners = Vec::new();
    for word in bind.split_whitespace() {
        let optional = word.starts_with('-');
        let host = word.trim_start_matches('-');
        let ip: std::net::IpAddr = match host {
            "*" => std::net::Ipv4Addr::UNSPECIFIED.into(),
            "::*" => std::net::Ipv6Addr::UNSPECIFIED.into(),
            h => h.parse().map_err(|_| {
                format!(
                    "Could not create server TCP listening socket {host}:{port}: Invalid argument"
                )
            })?,
        };
        let sockaddr = std::net::SocketAddr::new(ip, port);
        let attempt = || -> io::Result<std::net::TcpListener> {
            let sock = Socket::new(Domain::for_address(sockaddr), Type::STREAM, None)?;
            if ip.is_ipv6() {
                sock.set_only_v6(true)?;
            }
            sock.set_reuse_address(true)?;
            sock.bind(&sockaddr.into())?;
            sock.listen(backlog)?;
            sock.set_nonblocking(true)?;
            Ok(sock.into())
        };
        match attempt() {
            Ok(l) => listeners.push(l),
            Err(e) => {
                let code = e.raw_os_error().unwrap_or(0);
                tracing::warn!(
                    "Warning: Could not create server TCP listening socket {host}:{port}: {}",
                    crate::util::strerror(&e)
                );
                let unsupported = [
                    libc::ENOPROTOOPT,
                    libc::EPROTONOSUPPORT,
                    libc::ESOCKTNOSUPPORT,
                    libc::EPFNOSUPPORT,
                    libc::EAFNOSUPPORT,
                ];
                if (optional && code == libc::EADDRNOTAVAIL) || unsupported.contains(&code) {
                    continue;
                }
                return Err(format!("can't bind {sockaddr}: {e}"));
            }
        }
    }
    Ok(listeners)
}

/// Whether a client address (`ip:port` as CLIENT LIST shows it) is local in Redis's sense
/// (islocalClient): exactly 127.0.0.1 or ::1. Other 127.x addresses are not.
pub(crate) fn is_local_peer(addr: &str) -> bool {
    match addr.parse::<std::net::SocketAddr>() {
        Ok(a) => {
            a.ip() == std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
                || a.ip() == std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
        }
        // Not ip:port: a Unix-socket client (`path:0`), which is local.
        Err(_) => true,
    }
}

/// The connected stream: TCP, the local Unix socket, or TLS over TCP.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(TlsStream),
}

/// A TLS session over a non-blocking TCP socket. OpenSSL's state is behind a lock: the
/// socket loop reads while the park hook may write the same client's replies.
pub struct TlsStream {
    fd: RawFd,
    ssl: parking_lot::Mutex<openssl::ssl::SslStream<TcpStream>>,
}

/// What one OpenSSL call on a non-blocking socket came to.
enum TlsIo {
    Done(usize),
    /// The socket had nothing to read (EAGAIN): wait until it is readable, then call again.
    WantRead,
    /// The socket took no more: wait until it is writable, then call again with the same data.
    WantWrite,
    /// The peer closed the session (close_notify, or the socket's end of file).
    Closed,
    Failed(io::Error),
}

impl TlsIo {
    fn of(r: Result<usize, openssl::ssl::Error>) -> TlsIo {
        use openssl::ssl::ErrorCode;
        match r {
            Ok(n) => TlsIo::Done(n),
            Err(e) => match e.code() {
                ErrorCode::WANT_READ => TlsIo::WantRead,
                ErrorCode::WANT_WRITE => TlsIo::WantWrite,
                ErrorCode::ZERO_RETURN => TlsIo::Closed,
                ErrorCode::SYSCALL => match e.into_io_error() {
                    Ok(io) if io.kind() == io::ErrorKind::Interrupted => TlsIo::WantRead,
                    Ok(io) => TlsIo::Failed(io),
                    // An end of file without close_notify: the peer went away.
                    Err(_) => TlsIo::Closed,
                },
                _ => TlsIo::Failed(io::Error::other(e.to_string())),
            },
        }
    }
}

impl TlsStream {
    /// Decrypt what the session has into the spare capacity of `buf` (which must have some).
    fn read_spare(&self, buf: &mut BytesMut) -> TlsIo {
        let r = self.ssl.lock().ssl_read_uninit(buf.spare_capacity_mut());
        let io = TlsIo::of(r);
        if let TlsIo::Done(n) = io {
            // SAFETY: ssl_read_uninit initialised exactly `n` bytes at the start of the spare
            // capacity. Covered by tests/tls.rs (every request over TLS is read here).
            unsafe { buf.set_len(buf.len() + n) };
        }
        io
    }

    fn write(&self, data: &[u8]) -> io::Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        match TlsIo::of(self.ssl.lock().ssl_write(data)) {
            TlsIo::Done(n) => Ok(n),
            TlsIo::WantRead | TlsIo::WantWrite => Err(io::ErrorKind::WouldBlock.into()),
            TlsIo::Closed => Err(io::ErrorKind::BrokenPipe.into()),
            TlsIo::Failed(e) => Err(e),
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tls(t) => t.fd,
        }
    }
}

impl Stream {
    fn write(&self, data: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).write(data),
            Stream::Unix(s) => (&*s).write(data),
            Stream::Tls(t) => t.write(data),
        }
    }
}

pub struct ClientSocket {
    fd: AsyncFd<Stream>,
    /// Numbers the socket's read wakes (crate::arrival): the stamp, and the waker made from it
    /// that `read_buf` registers as the socket's read waker; None when ordering is off (one
    /// worker thread).
    arrival: Option<(Arc<crate::arrival::Stamp>, std::task::Waker)>,
}

impl Drop for ClientSocket {
    fn drop(&mut self) {
        if let Some((stamp, _)) = &self.arrival {
            stamp.retire();
        }
    }
}

/// Read from `fd` into the spare capacity of `buf` (which must have some).
fn read_spare(fd: std::os::fd::RawFd, buf: &mut BytesMut) -> io::Result<usize> {
    let spare = buf.spare_capacity_mut();
    // SAFETY: `read` writes at most `spare.len()` bytes into memory we own (the buffer's spare
    // capacity, valid for writes even though uninitialised); only the `n` bytes it reports as
    // written are then marked initialised by `set_len`. Covered by `reads_into_spare_capacity`.
    let n = unsafe { libc::read(fd, spare.as_mut_ptr().cast(), spare.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    // SAFETY: the kernel initialised exactly `n` bytes after the current length.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

impl ClientSocket {
    pub fn new(stream: tokio::net::TcpStream) -> io::Result<ClientSocket> {
        let _ = stream.set_nodelay(true);
        let std = stream.into_std()?;
        std.set_nonblocking(true)?;
        Self::register(Stream::Tcp(std))
    }

    pub fn new_unix(stream: tokio::net::UnixStream) -> io::Result<ClientSocket> {
        let std = stream.into_std()?;
        std.set_nonblocking(true)?;
        Self::register(Stream::Unix(std))
    }

    /// A client of the TLS port, with its session `ssl` (made from the contexts in use when
    /// the client was accepted); [`ClientSocket::handshake`] then completes the handshake.
    pub fn new_tls(
        stream: tokio::net::TcpStream,
        ssl: openssl::ssl::Ssl,
    ) -> io::Result<ClientSocket> {
        let _ = stream.set_nodelay(true);
        let std = stream.into_std()?;
        std.set_nonblocking(true)?;
        let fd = std.as_raw_fd();
        let session = openssl::ssl::SslStream::new(ssl, std).map_err(io::Error::other)?;
        Self::register(Stream::Tls(TlsStream {
            fd,
            ssl: parking_lot::Mutex::new(session),
        }))
    }

    /// Complete a TLS client's handshake (nothing to do for plain TCP and the Unix socket);
    /// Err when it fails. The client's first request may have come with the handshake's last
    /// message, with no readiness wake of its own to number, so the end of the handshake is
    /// numbered as one (crate::arrival): that request keeps its place among other
    /// connections' requests.
    pub async fn handshake(&self) -> io::Result<()> {
        if !matches!(self.fd.get_ref(), Stream::Tls(_)) {
            return Ok(());
        }
        self.tls_call(|s| s.accept().map(|()| 0)).await?;
        if let Some((_, waker)) = &self.arrival {
            waker.wake_by_ref();
        }
        Ok(())
    }

    /// Drive an OpenSSL call on this TLS socket to its end, waiting for whichever readiness
    /// it asks for (a handshake may want to read and to write several times).
    async fn tls_call(
        &self,
        mut call: impl FnMut(
            &mut openssl::ssl::SslStream<TcpStream>,
        ) -> Result<usize, openssl::ssl::Error>,
    ) -> io::Result<usize> {
        let Stream::Tls(t) = self.fd.get_ref() else {
            return Err(io::ErrorKind::Unsupported.into());
        };
        // What the previous attempt waited for: a guard whose readiness turned out stale is
        // cleared, so the next wait goes to the reactor.
        let mut waiting: Option<bool> = None; // Some(true): readable, Some(false): writable
        loop {
            let mut guard = match waiting {
                None => None,
                Some(true) => Some(self.fd.readable().await?),
                Some(false) => Some(self.fd.writable().await?),
            };
            let io = TlsIo::of(call(&mut t.ssl.lock()));
            let want = match io {
                TlsIo::Done(n) => return Ok(n),
                TlsIo::Closed => return Err(io::ErrorKind::UnexpectedEof.into()),
                TlsIo::Failed(e) => return Err(e),
                TlsIo::WantRead => true,
                TlsIo::WantWrite => false,
            };
            if waiting == Some(want) {
                if let Some(g) = guard.as_mut() {
                    g.clear_ready();
                }
            }
            waiting = Some(want);
        }
    }

    /// Whether the client came over the TLS port.
    pub fn is_tls(&self) -> bool {
        matches!(self.fd.get_ref(), Stream::Tls(_))
    }

    /// The socket's descriptor (the Lua debugger talks to its client directly).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.get_ref().as_raw_fd()
    }

    fn register(stream: Stream) -> io::Result<ClientSocket> {
        // SAFETY: the AsyncFd owns the std stream, whose descriptor stays open and the same
        // for as long as the stream lives, i.e. the AsyncFd's whole lifetime.
        let fd = unsafe { AsyncFd::register(stream) }.map_err(|e| e.into_parts().1)?;
        let arrival = crate::arrival::enabled().then(|| {
            let stamp = Arc::new(crate::arrival::Stamp::default());
            let waker = stamp.waker();
            (stamp, waker)
        });
        Ok(ClientSocket { fd, arrival })
    }

    /// Whether the client came over the Unix socket.
    pub fn is_unix(&self) -> bool {
        matches!(self.fd.get_ref(), Stream::Unix(_))
    }

    /// Enable TCP keepalive probes after `secs` idle seconds (`tcp-keepalive`; 0 = off).
    pub fn set_keepalive(&self, secs: i64) {
        if secs <= 0 || self.is_unix() {
            return;
        }
        let fd = self.fd.get_ref().as_raw_fd();
        let on: libc::c_int = 1;
        let idle: libc::c_int = secs.min(i64::from(i32::MAX)) as libc::c_int;
        let intvl: libc::c_int = (idle / 3).max(1);
        let size = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: setsockopt reads `size` bytes from pointers to live c_ints on an open socket.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_KEEPALIVE,
                (&on as *const libc::c_int).cast(),
                size,
            );
            libc::setsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_KEEPIDLE,
                (&idle as *const libc::c_int).cast(),
                size,
            );
            libc::setsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_KEEPINTVL,
                (&intvl as *const libc::c_int).cast(),
                size,
            );
        }
    }

    /// The local address as CLIENT LIST shows it: `ip:port`, or `path:0` for the Unix socket.
    pub fn local_addr(&self) -> String {
        match self.fd.get_ref() {
            Stream::Tcp(s) => s.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            Stream::Tls(t) => t
                .ssl
                .lock()
                .get_ref()
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default(),
            Stream::Unix(s) => s
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| format!("{}:0", p.display())))
                .unwrap_or_default(),
        }
    }

    /// Wait for data and append it to `buf`. Ok(0) means the peer closed.
    /// Room is made once data is readable (16 KiB when less than 4 KiB is left), so an idle
    /// client whose buffer was given back holds none while it waits.
    pub async fn read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        self.read_buf_with_room(buf, 4096).await
    }

    /// [`ClientSocket::read_buf`] into the room `buf` has, made only when it has none: for a
    /// caller that sizes its buffer itself (a client's query buffer, sized exactly for a big
    /// argument, as Redis sizes its own).
    pub async fn read_buf_as_sized(&self, buf: &mut BytesMut) -> io::Result<usize> {
        self.read_buf_with_room(buf, 1).await
    }

    async fn read_buf_with_room(&self, buf: &mut BytesMut, min_room: usize) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_read_with_room(cx, buf, min_room)).await
    }

    /// [`ClientSocket::read_buf_as_sized`] as a poll function, for a caller that polls it
    /// beside other sources in one `poll_fn` (`connection::serve_client`'s idle wait).
    #[inline]
    pub fn poll_read_as_sized(
        &self,
        cx: &mut std::task::Context<'_>,
        buf: &mut BytesMut,
    ) -> std::task::Poll<io::Result<usize>> {
        self.poll_read_with_room(cx, buf, 1)
    }

    fn poll_read_with_room(
        &self,
        cx: &mut std::task::Context<'_>,
        buf: &mut BytesMut,
        min_room: usize,
    ) -> std::task::Poll<io::Result<usize>> {
        // With arrival ordering on, the driver wakes this socket's reader through its Stamp,
        // which numbers the wake before it wakes the task.
        match &self.arrival {
            Some((stamp, waker)) => {
                stamp.register(cx.waker());
                self.poll_read_into(&mut std::task::Context::from_waker(waker), buf, min_room)
            }
            None => self.poll_read_into(cx, buf, min_room),
        }
    }

    fn poll_read_into(
        &self,
        cx: &mut std::task::Context<'_>,
        buf: &mut BytesMut,
        min_room: usize,
    ) -> std::task::Poll<io::Result<usize>> {
        loop {
            let mut guard = std::task::ready!(self.fd.poll_read_ready(cx))?;
            if buf.capacity() - buf.len() < min_room {
                buf.reserve(16 * 1024);
            }
            if let Stream::Tls(t) = self.fd.get_ref() {
                // OpenSSL reads a record at a time and may hold decrypted bytes, so readiness
                // is cleared only when it reports the socket empty (WANT_READ).
                match t.read_spare(buf) {
                    TlsIo::Done(n) => return std::task::Poll::Ready(Ok(n)),
                    TlsIo::Closed => return std::task::Poll::Ready(Ok(0)),
                    TlsIo::Failed(e) => return std::task::Poll::Ready(Err(e)),
                    TlsIo::WantRead => {
                        guard.clear_ready();
                        continue;
                    }
                    TlsIo::WantWrite => {
                        // A read that must first write (a post-handshake message while the
                        // send buffer is full): wait until the socket takes more.
                        drop(guard);
                        let mut w = std::task::ready!(self.fd.poll_write_ready(cx))?;
                        match t.read_spare(buf) {
                            TlsIo::Done(n) => return std::task::Poll::Ready(Ok(n)),
                            TlsIo::Closed => return std::task::Poll::Ready(Ok(0)),
                            TlsIo::Failed(e) => return std::task::Poll::Ready(Err(e)),
                            TlsIo::WantWrite => w.clear_ready(),
                            TlsIo::WantRead => {}
                        }
                        continue;
                    }
                }
            }
            let offered = buf.capacity() - buf.len();
            match read_spare(self.fd.get_ref().as_raw_fd(), buf) {
                Ok(n) => {
                    if n > 0 && n < offered {
                        // Drained: wait for the next event rather than probing with read().
                        guard.clear_ready();
                    }
                    return std::task::Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return std::task::Poll::Ready(Err(e)),
            }
        }
    }

    /// After a read: the arrival ticket of the wake it consumed (crate::arrival), to hold
    /// until the read's first request has run.
    pub fn arrival_ticket(&self) -> Option<crate::arrival::Ticket> {
        self.arrival
            .as_ref()
            .and_then(|(stamp, _)| stamp.take_ticket())
    }

    /// Read what the socket has now into `buf`, without waiting: WouldBlock when it has
    /// nothing, Ok(0) when the peer closed. For the Lua debugger, which owns the connection
    /// while a session runs and waits with poll(2) on [`ClientSocket::raw_fd`].
    pub(crate) fn read_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self.fd.get_ref() {
            Stream::Tcp(s) => (&*s).read(buf),
            Stream::Unix(s) => (&*s).read(buf),
            Stream::Tls(t) => match TlsIo::of(t.ssl.lock().ssl_read(buf)) {
                TlsIo::Done(n) => Ok(n),
                TlsIo::Closed => Ok(0),
                TlsIo::WantRead | TlsIo::WantWrite => Err(io::ErrorKind::WouldBlock.into()),
                TlsIo::Failed(e) => Err(e),
            },
        }
    }

    /// Wait until the peer has closed its end (or the connection failed), reading nothing:
    /// whatever it sent stays in the socket for the next read, and once it has sent something
    /// this never resolves. For a replica waiting for its image, whose going away Redis
    /// notices from its event loop.
    pub(crate) async fn closed(&self) {
        loop {
            let Ok(mut guard) = self.fd.readable().await else {
                return;
            };
            let mut byte = [0u8; 1];
            // SAFETY: recv(2) with MSG_PEEK copies at most one byte into a local buffer and
            // leaves the socket's data in place; MSG_DONTWAIT keeps it from blocking.
            let n = unsafe {
                libc::recv(
                    self.raw_fd(),
                    byte.as_mut_ptr().cast(),
                    1,
                    libc::MSG_PEEK | libc::MSG_DONTWAIT,
                )
            };
            match n {
                0 => return,
                n if n < 0 => {
                    if std::io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                        return;
                    }
                    guard.clear_ready();
                }
                // Data waits: the connection's next read takes it, so its readiness stays
                // (cleared, the edge-triggered poller would not report those bytes again and
                // the read after the image would wait for more). A close behind the data is
                // then noticed by that read, or by a write failing.
                _ => {
                    drop(guard);
                    std::future::pending::<()>().await
                }
            }
        }
    }

    /// Write what the socket takes of `data` now, without waiting (WouldBlock when it takes
    /// nothing).
    pub(crate) fn try_write(&self, data: &[u8]) -> io::Result<usize> {
        self.fd.get_ref().write(data)
    }

    /// Wait until the socket takes some of `data`, and write it; returns how much was
    /// written. Cancel-safe: nothing is written before the socket is writable.
    pub(crate) async fn write_some(&self, data: &[u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.fd.writable().await?;
            match guard.try_io(|s| s.get_ref().write(data)) {
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(r) => return r,
                Err(_would_block) => {}
            }
        }
    }

    /// Write all of `data`.
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            match self.fd.get_ref().write(data) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => data = &data[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let mut guard = self.fd.writable().await?;
                    match guard.try_io(|s| s.get_ref().write(data)) {
                        Ok(Ok(n)) => data = &data[n..],
                        Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                        Ok(Err(e)) => return Err(e),
                        Err(_would_block) => {}
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub fn shutdown(&self) {
        let _ = match self.fd.get_ref() {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
            Stream::Tls(t) => {
                let mut ssl = t.ssl.lock();
                // close_notify, if the socket takes it now; the TCP shutdown follows anyway.
                let _ = ssl.shutdown();
                ssl.get_ref().shutdown(Shutdown::Both)
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_peers_are_exactly_the_loopback_addresses() {
        assert!(is_local_peer("127.0.0.1:5000"));
        assert!(is_local_peer("[::1]:5000"));
        assert!(is_local_peer("/tmp/redis.sock:0"));
        assert!(!is_local_peer("127.0.0.2:5000"));
        assert!(!is_local_peer("[::ffff:127.0.0.1]:5000"));
        assert!(!is_local_peer("10.0.0.1:5000"));
        assert!(is_local_peer("redis.sock:0"));
        assert!(protected_mode_refuses(true, true, "127.0.0.2:1"));
        assert!(!protected_mode_refuses(true, false, "127.0.0.2:1"));
        assert!(!protected_mode_refuses(false, true, "127.0.0.2:1"));
        assert!(!protected_mode_refuses(true, true, "127.0.0.1:1"));
    }

    #[test]
    fn cross_protocol_names() {
        for n in ["POST", "post", "Host:", "HOST:"] {
            assert!(is_cross_protocol(n.as_bytes()), "{n}");
        }
        for n in ["host", "posts", "GET", ""] {
            assert!(!is_cross_protocol(n.as_bytes()), "{n}");
        }
    }

    #[test]
    fn bind_forms() {
        let l = bind_listeners("127.0.0.1 -10.254.254.254", 0, 16).unwrap();
        assert_eq!(l.len(), 1);
        assert!(bind_listeners("10.254.254.254", 0, 16).is_err());
        assert!(bind_listeners("not-an-address", 0, 16).is_err());
    }

    #[test]
    fn reads_into_spare_capacity() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        a.write_all(b"hello").unwrap();
        let mut buf = BytesMut::with_capacity(64);
        buf.extend_from_slice(b">");
        let n = read_spare(b.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(n, 5);
        assert_eq!(&buf[..], b">hello");
    }

    #[tokio::test]
    async fn keepalive_is_enabled_on_request() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().await.unwrap();
        let sock = ClientSocket::new(s).unwrap();
        sock.set_keepalive(300);
        let fd = sock.fd.get_ref().as_raw_fd();
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `v`.
        unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_KEEPALIVE,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            );
        }
        assert_eq!(v, 1);
    }

    #[tokio::test]
    async fn short_reads_do_not_lose_later_data() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let writer = tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).unwrap();
            for i in 0..50u8 {
                s.write_all(&[i]).unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        });
        let (s, _) = l.accept().await.unwrap();
        let sock = ClientSocket::new(s).unwrap();
        let mut buf = BytesMut::new();
        while buf.len() < 50 {
            let n =
                tokio::time::timeout(std::time::Duration::from_secs(5), sock.read_buf(&mut buf))
                    .await
                    .unwrap()
                    .unwrap();
            assert!(n > 0);
        }
        assert_eq!(&buf[..], &(0..50u8).collect::<Vec<_>>()[..]);
        writer.await.unwrap();
    }
}
