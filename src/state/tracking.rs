//! The data of client-side caching: which clients read which keys, the BCAST prefixes, and
//! each tracking client's options. Only the data lives here, below [`crate::state::Server`]
//! which holds it; the code that fills it and sends invalidations is [`crate::tracking`],
//! above.

use bytes::Bytes;
use hashbrown::{HashMap, HashSet};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;

/// One client's CLIENT TRACKING options.
#[derive(Clone, Default, Debug)]
pub(crate) struct Options {
    pub redirect: u64,
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    pub prefixes: Vec<Bytes>,
    /// The redirect target was found gone (CLIENT TRACKINGINFO flag `broken_redirect`).
    pub broken: bool,
}

#[derive(Default)]
pub(crate) struct Prefix {
    pub(crate) clients: HashSet<u64>,
    /// Keys changed under this prefix since the last broadcast, with who changed them (0:
    /// the server itself), for NOLOOP.
    pub(crate) pending: Vec<(Bytes, u64)>,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) keys: HashMap<Bytes, HashSet<u64>>,
    pub(crate) items: usize,
    pub(crate) prefixes: BTreeMap<Bytes, Prefix>,
    pub(crate) clients: HashMap<u64, Options>,
}

/// The server-wide tracking state.
#[derive(Default)]
pub(crate) struct Tracking {
    pub(crate) state: Mutex<State>,
    /// Some client has tracking on (checked before anything else is done).
    pub(crate) active: AtomicBool,
    /// `tracking-table-max-keys` was just lowered: the next command (of any client) applies it
    /// before it runs, as Redis does at the top of processCommand, so a client in MULTI gets
    /// its invalidations before its QUEUED.
    pub(crate) limit_lowered: AtomicBool,
}
