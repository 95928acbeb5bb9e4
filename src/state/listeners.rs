//! The handles of the running TCP accept loops, held by [`crate::state::Server`]; binding,
//! starting and replacing them is [`crate::listeners`], above.

use parking_lot::Mutex;
use std::sync::OnceLock;

/// What an accept loop does with a new connection: start serving it (the connection layer's
/// entry point, registered by the server at startup, so that the listeners, which CONFIG SET
/// rebinds from the command layer, do not depend on the connection layer above it).
pub(crate) type ServeConnection =
    fn(std::sync::Arc<crate::state::Server>, tokio::net::TcpStream, std::net::SocketAddr);

/// The running accept loops.
#[derive(Default)]
pub(crate) struct Listeners {
    /// Each accept loop with its listening socket's descriptor (owned by the loop).
    pub(crate) accepting: Mutex<Vec<(tokio::task::JoinHandle<()>, std::os::fd::RawFd)>>,
    pub(crate) serve: OnceLock<ServeConnection>,
}
