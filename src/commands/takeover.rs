//! What a command leaves for its connection once its reply is due, because it needs the
//! socket or a wait: SYNC / PSYNC's full resynchronization, WAIT's wait for the replicas'
//! acknowledgements, SHUTDOWN's wait for its replicas.
//!
//! The command sets [`super::Ctx::takeover`]; the dispatcher hands it out in its
//! [`super::Outcome`]; the connection sends what it owes the client and then has
//! `crate::takeover::run` carry it out (a layer between the connection and replication), so
//! the connection needs nothing from replication or shutdown, and no field of `Client`
//! carries a pending action out of the dispatcher. Commands inside EXEC or a script never
//! leave one: SYNC, PSYNC and SHUTDOWN are refused there, and WAIT answers at once.

/// The work a command leaves for its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takeover {
    /// Send this replica the RDB image, then its stream (SYNC / PSYNC without +CONTINUE).
    FullSync,
    /// WAIT: until `replicas` replicas acknowledged `offset`, or `deadline_ms` (0: none).
    Wait {
        replicas: i64,
        offset: u64,
        deadline_ms: i64,
    },
    /// SHUTDOWN waiting for the replicas: blocked until the process exits, or answered with
    /// an error when the wait's failure count moves past `failures` (aborted, save failed).
    AwaitShutdown { failures: u64 },
}
