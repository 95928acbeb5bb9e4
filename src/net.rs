//! A client socket that costs one `read` per readiness event.
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
use std::io::{self, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use tokio::io::unix::AsyncFd;

/// The connected stream: TCP, or the local Unix socket.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Stream {
    fn write(&self, data: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).write(data),
            Stream::Unix(s) => (&*s).write(data),
        }
    }
}

pub struct ClientSocket {
    fd: AsyncFd<Stream>,
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

    fn register(stream: Stream) -> io::Result<ClientSocket> {
        // SAFETY: the AsyncFd owns the std stream, whose descriptor stays open and the same
        // for as long as the stream lives, i.e. the AsyncFd's whole lifetime.
        let fd = unsafe { AsyncFd::register(stream) }.map_err(|e| e.into_parts().1)?;
        Ok(ClientSocket { fd })
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
            Stream::Unix(s) => s
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| format!("{}:0", p.display())))
                .unwrap_or_default(),
        }
    }

    /// Wait for data and append it to `buf`. Ok(0) means the peer closed.
    pub async fn read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        loop {
            let mut guard = self.fd.readable().await?;
            let offered = buf.capacity() - buf.len();
            match read_spare(self.fd.get_ref().as_raw_fd(), buf) {
                Ok(n) => {
                    if n > 0 && n < offered {
                        // Drained: wait for the next event rather than probing with read().
                        guard.clear_ready();
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
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
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
