//! The TCP listening sockets, which CONFIG SET port and CONFIG SET bind replace at run time.
//!
//! This module owns the accept loops of the `bind` addresses on `port`. A change binds the
//! new sockets first and only then stops the old accept loops, so a port that is taken or an
//! address that cannot be bound leaves the server listening where it was (Redis's "Unable to
//! listen on this port" / "Failed to bind to specified addresses"). An empty `bind` listens on
//! no TCP address (the Unix socket, if any, stays). Connections already accepted are not
//! affected.

use crate::config::dir;
use crate::state::Server;
use std::sync::Arc;
use std::time::Duration;

/// Bind `bind` on `port` with the configured backlog (std sockets, before any accept loop).
pub(crate) fn bind(
    srv: &Server,
    bind: &str,
    port: u16,
) -> Result<Vec<std::net::TcpListener>, String> {
    let backlog = srv
        .config
        .int(dir::TCP_BACKLOG)
        .clamp(1, i64::from(i32::MAX)) as i32;
    crate::net::bind_listeners(bind, port, backlog)
}

/// Start accepting on `sockets`, in addition to whatever accepts already. Must run inside
/// the runtime.
pub(crate) fn start(srv: &Arc<Server>, sockets: Vec<std::net::TcpListener>) -> Result<(), String> {
    let listeners = sockets
        .into_iter()
        .map(tokio::net::TcpListener::from_std)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("can't listen: {e}"))?;
    let Some(&serve) = srv.listeners.serve.get() else {
        return Err("can't listen: no connection handler registered".into());
    };
    let mut accepting = srv.listeners.accepting.lock();
    for l in listeners {
        let srv = srv.clone();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&l);
        let task = tokio::spawn(async move {
            loop {
                match l.accept().await {
                    Ok((sock, peer)) => serve(srv.clone(), sock, peer),
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        });
        accepting.push((task, fd));
    }
    Ok(())
}

/// Stop every accept loop and wait until their sockets are closed (the addresses are then
/// free to bind again, and new connections are refused: SHUTDOWN stops accepting before it
/// returns, as redis-server exits inside it). On the multi-threaded runtime it lends its
/// worker to the wait. A single-threaded runtime (the server always runs the multi-threaded
/// one, even with one worker; tests may not) cannot wait for its own tasks from inside one:
/// there each socket stops listening at once (shutdown(2) of a listening
/// socket refuses new connections), and the aborted loop closes it when the runtime next
/// gets to it.
pub(crate) fn stop_all(srv: &Server) {
    let tasks = std::mem::take(&mut *srv.listeners.accepting.lock());
    for (t, _) in &tasks {
        t.abort();
    }
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if !multi_thread {
        for (_, fd) in &tasks {
            // SAFETY: shutdown(2) of a descriptor its aborted accept loop still owns (it is
            // closed only when that task is dropped, after this).
            unsafe {
                libc::shutdown(*fd, libc::SHUT_RDWR);
            }
        }
        return;
    }
    let handle = tokio::runtime::Handle::current();
    crate::util::write_turn::block_in_place(|| {
        handle.block_on(async {
            for (t, _) in tasks {
                let _ = t.await;
            }
        })
    });
}

/// CONFIG SET port / bind: listen on `bind_text` and `port` instead of `old`; Err is Redis's
/// reason, and the server then listens where it did.
fn rebind(
    srv: &Server,
    (bind_text, port): (&str, u16),
    old: (&str, u16),
    changed: &str,
) -> Result<(), String> {
    let Some(me) = srv.arc() else {
        return Err("the server is not running".into());
    };
    // Redis closes the old sockets first, so an address can move between its own sockets.
    stop_all(srv);
    match bind(srv, bind_text, port) {
        Ok(sockets) => {
            start(&me, sockets)?;
            srv.port
                .store(i64::from(port), std::sync::atomic::Ordering::Relaxed);
            Ok(())
        }
        Err(e) => {
            tracing::warn!("Failed to listen on {bind_text} port {port}: {e}");
            match bind(srv, old.0, old.1) {
                Ok(sockets) => start(&me, sockets)?,
                Err(e) => tracing::warn!("Failed to restore the old listeners: {e}"),
            }
            Err(if changed == "port" {
                "Unable to listen on this port".to_string()
            } else {
                "Failed to bind to specified addresses.".to_string()
            })
        }
    }
}

/// The values CONFIG SET is about to change (names as given), to put back if applying the
/// change fails.
pub(crate) fn values_before(srv: &Server, pairs: &[(String, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .filter_map(|(name, _)| srv.config.get(name).map(|v| (name.clone(), v)))
        .collect()
}

/// After CONFIG SET changed `names` (`before`: their old values): listen on the new `port` /
/// `bind` if either changed, or put every value of the CONFIG SET back and return Redis's
/// reason, as Redis rolls back a CONFIG SET whose apply step fails.
pub(crate) fn apply_config_set(
    srv: &Server,
    changed: &crate::config::Changed,
    before: &[(String, String)],
) -> Result<(), String> {
    let changed = if changed.contains(dir::PORT) {
        "port"
    } else if changed.contains(dir::BIND) {
        "bind"
    } else {
        return Ok(());
    };
    let old = |name: &str| {
        before
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let bind_text = srv.config.text(dir::BIND);
    let port = srv.config.int(dir::PORT);
    let old_bind = old("bind").unwrap_or_else(|| bind_text.clone());
    let old_port = old("port")
        .and_then(|p| p.parse::<i64>().ok())
        .unwrap_or(port);
    if (bind_text.as_str(), port) == (old_bind.as_str(), old_port) {
        return Ok(());
    }
    let as_port = |p: i64| u16::try_from(p).unwrap_or(0);
    rebind(
        srv,
        (&bind_text, as_port(port)),
        (&old_bind, as_port(old_port)),
        changed,
    )
    .map_err(|e| {
        let _ = srv.config.set_runtime(before);
        format!("ERR CONFIG SET failed (possibly related to argument '{changed}') - {e}")
    })
}
