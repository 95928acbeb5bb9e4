//! The handles of the running TCP accept loops (plain and TLS), held by [`crate::state::Server`]; binding,
//! starting and replacing them is [`crate::listeners`], above.

use parking_lot::Mutex;
use std::sync::OnceLock;

/// What an accept loop does with a new connection: start serving it (the connection layer's
/// entry point, registered by the server at startup, so that the listeners, which CONFIG SET
/// rebinds from the command layer, do not depend on the connection layer above it).
/// The last argument is the TLS session a client of the TLS port is to be served through
/// (its handshake not yet done).
pub(crate) type ServeConnection = fn(
    std::sync::Arc<crate::state::Server>,
    tokio::net::TcpStream,
    std::net::SocketAddr,
    Option<openssl::ssl::Ssl>,
);

/// The running accept loops.
#[derive(Default)]
pub(crate) struct Listeners {
    /// Each accept loop of `port` with its listening socket's descriptor (owned by the loop).
    pub(crate) accepting: Mutex<Vec<(tokio::task::JoinHandle<()>, std::os::fd::RawFd)>>,
    /// The same for `tls-port`.
    pub(crate) tls_accepting: Mutex<Vec<(tokio::task::JoinHandle<()>, std::os::fd::RawFd)>>,
    pub(crate) serve: OnceLock<ServeConnection>,
}
