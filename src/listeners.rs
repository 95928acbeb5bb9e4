//! The TCP listening sockets, which CONFIG SET port, tls-port and bind replace at run time,
//! and the TLS contexts the `tls-*` directives make.
//!
//! This module owns the accept loops of the `bind` addresses on `port` and on `tls-port`
//! (two groups: a change of `port` leaves the TLS port alone, a change of `bind` moves both).
//! A port of 0 listens nowhere, as in Redis. A change binds the new sockets first and only
//! then stops the old accept loops, so a port that is taken or an address that cannot be
//! bound leaves the server listening where it was (Redis's "Unable to listen on this port" /
//! "Failed to bind to specified addresses"). An empty `bind` listens on no TCP address (the
//! Unix socket, if any, stays). Connections already accepted are not affected.
//!
//! A client of the TLS port gets its session from the contexts in use when it is accepted
//! (crate::tls), so CONFIG SET of a certificate reaches new connections only, as in Redis.

use crate::config::dir;
use crate::state::Server;
use std::sync::Arc;
use std::time::Duration;

/// Which accept loops: `port`'s or `tls-port`'s.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Group {
    Plain,
    Tls,
}

impl Group {
    fn loops(
        self,
        srv: &Server,
    ) -> &parking_lot::Mutex<Vec<(tokio::task::JoinHandle<()>, std::os::fd::RawFd)>> {
        match self {
            Group::Plain => &srv.listeners.accepting,
            Group::Tls => &srv.listeners.tls_accepting,
        }
    }

    fn port(self, srv: &Server) -> i64 {
        match self {
            Group::Plain => srv.config.int(dir::PORT),
            Group::Tls => srv.config.int(dir::TLS_PORT),
        }
    }
}

/// The `tls-*` directives as crate::tls reads them.
pub(crate) fn tls_settings(srv: &Server) -> crate::tls::Settings {
    let c = &srv.config;
    crate::tls::Settings {
        cert_file: c.text(dir::TLS_CERT_FILE),
        key_file: c.text(dir::TLS_KEY_FILE),
        key_file_pass: c.text(dir::TLS_KEY_FILE_PASS),
        client_cert_file: c.text(dir::TLS_CLIENT_CERT_FILE),
        client_key_file: c.text(dir::TLS_CLIENT_KEY_FILE),
        client_key_file_pass: c.text(dir::TLS_CLIENT_KEY_FILE_PASS),
        dh_params_file: c.text(dir::TLS_DH_PARAMS_FILE),
        ca_cert_file: c.text(dir::TLS_CA_CERT_FILE),
        ca_cert_dir: c.text(dir::TLS_CA_CERT_DIR),
        protocols: c.text(dir::TLS_PROTOCOLS),
        ciphers: c.text(dir::TLS_CIPHERS),
        ciphersuites: c.text(dir::TLS_CIPHERSUITES),
        prefer_server_ciphers: c.flag(dir::TLS_PREFER_SERVER_CIPHERS),
        session_caching: c.flag(dir::TLS_SESSION_CACHING),
        session_cache_size: c.int(dir::TLS_SESSION_CACHE_SIZE),
        session_cache_timeout: c.int(dir::TLS_SESSION_CACHE_TIMEOUT),
        needs_ca: c.text(dir::TLS_AUTH_CLIENTS) != "no"
            || c.flag(dir::TLS_REPLICATION)
            || c.flag(dir::TLS_CLUSTER),
    }
}

/// Whether anything uses TLS: a TLS port, or TLS for replication or the cluster bus. Redis
/// builds its contexts only then, so a redis.conf with certificates but no TLS use starts
/// whether or not the files exist.
pub(crate) fn tls_in_use(srv: &Server) -> bool {
    srv.config.int(dir::TLS_PORT) != 0
        || srv.config.flag(dir::TLS_REPLICATION)
        || srv.config.flag(dir::TLS_CLUSTER)
}

/// Build the TLS contexts from the configuration (at startup, and after CONFIG SET of a
/// `tls-*` directive) when TLS is in use. Err is what went wrong, already logged.
pub(crate) fn configure_tls(srv: &Server) -> Result<(), String> {
    srv.tls.set_auth_clients(crate::tls::AuthClients::parse(
        &srv.config.text(dir::TLS_AUTH_CLIENTS),
    ));
    if !tls_in_use(srv) {
        return Ok(());
    }
    srv.tls
        .configure(&tls_settings(srv))
        .inspect_err(|e| tracing::warn!("{e}"))
}

/// Bind `bind` on `port` with the configured backlog (std sockets, before any accept loop).
pub(crate) fn bind(
    srv: &Server,
    bind: &str,
    port: u16,
) -> Result<Vec<std::net::TcpListener>, String> {
    if port == 0 {
        return Ok(Vec::new());
    }
    let backlog = srv
        .config
        .int(dir::TCP_BACKLOG)
        .clamp(1, i64::from(i32::MAX)) as i32;
    crate::net::bind_listeners(bind, port, backlog)
}

/// Start accepting on `sockets` for `group`, in addition to whatever accepts already. Must
/// run inside the runtime.
pub(crate) fn start(
    srv: &Arc<Server>,
    sockets: Vec<std::net::TcpListener>,
    group: Group,
) -> Result<(), String> {
    let listeners = sockets
        .into_iter()
        .map(tokio::net::TcpListener::from_std)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("can't listen: {e}"))?;
    let Some(&serve) = srv.listeners.serve.get() else {
        return Err("can't listen: no connection handler registered".into());
    };
    let mut accepting = group.loops(srv).lock();
    for l in listeners {
        let srv = srv.clone();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&l);
        let task = tokio::spawn(async move {
            loop {
                match l.accept().await {
                    Ok((sock, peer)) if group == Group::Plain => {
                        serve(srv.clone(), sock, peer, None)
                    }
                    Ok((sock, peer)) => match srv.tls.accepting() {
                        Ok(ssl) => serve(srv.clone(), sock, peer, Some(ssl)),
                        Err(e) => tracing::warn!("Error accepting a TLS client connection: {e}"),
                    },
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
    stop(srv, Group::Plain);
    stop(srv, Group::Tls);
}

/// Stop `group`'s accept loops, as [`stop_all`] does.
fn stop(srv: &Server, group: Group) {
    let tasks = std::mem::take(&mut *group.loops(srv).lock());
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

/// CONFIG SET port / tls-port / bind: listen with `group` on `bind_text` and `port` instead
/// of `old`; Err is Redis's reason, and the group then listens where it did.
fn rebind(
    srv: &Server,
    group: Group,
    (bind_text, port): (&str, u16),
    old: (&str, u16),
    changed: &str,
) -> Result<(), String> {
    let Some(me) = srv.arc() else {
        return Err("the server is not running".into());
    };
    // Redis closes the old sockets first, so an address can move between its own sockets.
    stop(srv, group);
    match bind(srv, bind_text, port) {
        Ok(sockets) => {
            start(&me, sockets, group)?;
            if group == Group::Plain {
                srv.port
                    .store(i64::from(port), std::sync::atomic::Ordering::Relaxed);
            }
            Ok(())
        }
        Err(e) => {
            tracing::warn!("Failed to listen on {bind_text} port {port}: {e}");
            match bind(srv, old.0, old.1) {
                Ok(sockets) => start(&me, sockets, group)?,
                Err(e) => tracing::warn!("Failed to restore the old listeners: {e}"),
            }
            Err(if changed == "bind" {
                "Failed to bind to specified addresses.".to_string()
            } else {
                "Unable to listen on this port".to_string()
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

/// After CONFIG SET changed `changed` (`before`: their old values): rebuild the TLS contexts
/// if a `tls-*` directive changed, then listen on the new `port` / `tls-port` / `bind` if
/// any changed. If a step fails, every value of the CONFIG SET is put back and Err is Redis's
/// reply, as Redis rolls back a CONFIG SET whose apply step fails.
pub(crate) fn apply_config_set(
    srv: &Server,
    changed: &crate::config::Changed,
    before: &[(String, String)],
) -> Result<(), String> {
    let old = |name: &str| {
        before
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let roll_back = |name: &str, why: &str| {
        let _ = srv.config.set_runtime(before);
        let _ = configure_tls(srv);
        format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}")
    };
    if let Some(name) = changed.names().find(|n| n.starts_with("tls-")) {
        if configure_tls(srv).is_err() {
            return Err(roll_back(
                name,
                "Unable to update TLS configuration. Check server logs.",
            ));
        }
    }
    let bind_text = srv.config.text(dir::BIND);
    let old_bind = old("bind").unwrap_or_else(|| bind_text.clone());
    let bind_moved = bind_text != old_bind;
    let as_port = |p: i64| u16::try_from(p).unwrap_or(0);
    let mut moved: Vec<(Group, u16)> = Vec::new();
    for (group, name) in [(Group::Plain, "port"), (Group::Tls, "tls-port")] {
        let port = group.port(srv);
        let old_port = old(name)
            .and_then(|p| p.parse::<i64>().ok())
            .unwrap_or(port);
        if !bind_moved && port == old_port {
            continue;
        }
        let what = if port != old_port { name } else { "bind" };
        if let Err(e) = rebind(
            srv,
            group,
            (&bind_text, as_port(port)),
            (&old_bind, as_port(old_port)),
            what,
        ) {
            // A group already moved goes back where it was, with the values.
            for (g, p) in moved {
                let _ = rebind(srv, g, (&old_bind, p), (&old_bind, p), what);
            }
            return Err(roll_back(what, &e));
        }
        moved.push((group, as_port(old_port)));
    }
    Ok(())
}
