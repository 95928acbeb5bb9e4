//! Carrying out what a command left for its connection ([`crate::commands::takeover`]): the
//! full resynchronization of a replica (SYNC / PSYNC), WAIT's wait for acknowledgements and
//! SHUTDOWN's wait for its replicas. The connection calls [`run`] once it has sent what it
//! owed the client, and acts on the [`Resume`] it gets back without knowing which command it
//! was for; this layer sits between the connection and replication (README, "Layering").

use crate::client::Client;
use crate::commands::takeover::Takeover;
use crate::net::ClientSocket;
use crate::protocol::Reply;
use crate::state::Server;
use std::sync::atomic::Ordering;

/// How the connection goes on after a takeover.
pub enum Resume {
    /// Send the command's own reply (nothing, for SYNC) and go on reading.
    KeepReply,
    /// Send this reply instead and go on.
    Reply(Reply),
    /// The connection ends (the replica link went away, the client was killed, the server
    /// is exiting).
    Close,
}

/// A replica's connection closed: replication forgets it (and stops a BGSAVE no replica
/// waits for any more, see [`crate::persistence::forget_replica`]).
pub(crate) fn replica_closed(srv: &Server, client_id: u64) {
    crate::persistence::forget_replica(srv, client_id);
}

/// Carry out `t` for `client` on `sock` (the connection has sent what it owed first).
pub(crate) async fn run(
    srv: &Server,
    sock: &ClientSocket,
    client: &mut Client,
    t: Takeover,
) -> Resume {
    match t {
        Takeover::FullSync => {
            if crate::replication::full_sync(srv, sock, client).await {
                // The stream queued since the image's instant follows from the mailbox.
                Resume::KeepReply
            } else {
                Resume::Close
            }
        }
        Takeover::Wait {
            replicas,
            offset,
            deadline_ms,
        } => {
            client.info.blocked.store(true, Ordering::Relaxed);
            let r = crate::replication::wait_acks(srv, client, replicas, offset, deadline_ms).await;
            client.info.blocked.store(false, Ordering::Relaxed);
            match r {
                Some(r) => Resume::Reply(r),
                None => Resume::Close,
            }
        }
        Takeover::AwaitShutdown { failures } => {
            // SHUTDOWN marked the client blocked already (counted from the command on).
            let failed = await_shutdown(srv, &client.info, failures).await;
            client.info.blocked.store(false, Ordering::Relaxed);
            if failed {
                Resume::Reply(Reply::error("ERR Errors trying to SHUTDOWN. Check logs."))
            } else {
                Resume::Close
            }
        }
    }
}

/// A SHUTDOWN waiting for its replicas: true when the wait failed (aborted, or the save
/// failed: the client gets an error), false when the client was killed (the server is exiting).
async fn await_shutdown(srv: &Server, info: &crate::client::ClientInfo, failures: u64) -> bool {
    loop {
        let changed = srv.shutdown_wait.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if srv.shutdown_wait.failures() != failures {
            return true;
        }
        tokio::select! {
            _ = changed => {}
            _ = info.kill.notified() => return false,
        }
    }
}
