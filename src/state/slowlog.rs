//! The SLOWLOG's entries, held by [`crate::state::Server`]; recording and the SLOWLOG command
//! are [`crate::commands::slowlog`], above.

use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;

/// One logged command.
pub(crate) struct Entry {
    pub(crate) id: u64,
    pub(crate) time: i64,
    pub(crate) duration_us: u64,
    pub(crate) args: Vec<Bytes>,
    pub(crate) addr: String,
    pub(crate) name: Bytes,
}

/// The log itself.
#[derive(Default)]
pub struct SlowLog {
    pub(crate) entries: Mutex<VecDeque<Entry>>,
    pub(crate) next_id: AtomicU64,
}
