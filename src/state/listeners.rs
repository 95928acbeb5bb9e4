//! The handles of the running TCP accept loops, held by [`crate::state::Server`]; binding,
//! starting and replacing them is [`crate::listeners`], above.

use parking_lot::Mutex;

/// The running accept loops.
#[derive(Default)]
pub(crate) struct Listeners {
    pub(crate) accepting: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}
