//! CLIENT PAUSE / CLIENT UNPAUSE: holding clients' commands back for a while.
//!
//! This module owns the rules Redis 7.0 applies to a pause (the state itself, none, WRITE or
//! ALL and when it ends, is `crate::state::pause`, held by the server). While a pause is in force, a client whose next command is
//! held back (every command under ALL; under WRITE, commands that write or may replicate:
//! PUBLISH, EVAL/FCALL of scripts that may write, EXEC of a transaction holding one) does not
//! run it: the dispatcher hands the request back (`Outcome::postponed`) and the connection
//! waits, counted in INFO `blocked_clients`, until the pause ends (CLIENT UNPAUSE, or its
//! timeout passes), then runs the request from the start, as Redis re-processes a postponed
//! client. Commands are checked where Redis checks them: after the command lookup, arity,
//! authentication and ACL checks (so a wrong-arity command is answered at once), before MULTI
//! queueing; commands run by scripts or inside EXEC are never held back, so a pause given
//! inside a transaction starts when the transaction ends. While a pause is in force the
//! dataset is static: lazy expiry treats expired keys as absent without deleting them, and
//! the active expiry cycle and eviction do not run.

use super::{flags, Ctx};
use crate::client::Client;
use crate::clock::unix_ms;
use crate::protocol::Reply;
use crate::state::pause::{ALL, OFF, WRITE};
use crate::state::Server;
use bytes::Bytes;

/// True when `client`'s request `args` (command `spec`) must wait for the pause to end.
pub(crate) fn holds_back(
    srv: &Server,
    client: &Client,
    spec: &crate::commands::Spec,
    args: &[Bytes],
) -> bool {
    // Internal clients (AOF loading) and commands run by scripts are never paused; our
    // master's link is (its writes wait under a WRITE pause, as in Redis).
    if (client.user.is_none() && !client.repl.is_master) || client.in_script {
        return false;
    }
    match srv.pause.current() {
        OFF => false,
        ALL => true,
        _ => may_replicate(srv, client, spec, args),
    }
}

/// Redis's "may replicate" test for a WRITE pause: the command writes or may propagate
/// something (PUBLISH, scripts that may write); EXEC asks it of its queued commands.
fn may_replicate(
    srv: &Server,
    client: &Client,
    spec: &crate::commands::Spec,
    args: &[Bytes],
) -> bool {
    match spec.name {
        "exec" => client.multi.as_ref().is_some_and(|queued| {
            queued.iter().any(|q| {
                crate::commands::lookup(&q[0])
                    .is_some_and(|s| s.name != "exec" && may_replicate(srv, client, s, q))
            })
        }),
        // FUNCTION's subcommands that change the libraries are write commands in Redis.
        "function" => args.get(1).is_some_and(|sub| {
            ["load", "delete", "flush", "restore"]
                .iter()
                .any(|w| sub.eq_ignore_ascii_case(w.as_bytes()))
        }),
        // Scripts by the flags they declare, if any (what the dispatcher judges them by).
        _ => {
            crate::commands::scripting::effective_command_flags(srv, spec.name, args, spec.flags)
                & (flags::WRITE | flags::MAY_REPLICATE)
                != 0
        }
    }
}

/// CLIENT PAUSE timeout [WRITE|ALL].
pub(crate) fn client_pause(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    if a.len() != 3 && a.len() != 4 {
        return crate::commands::wrong_arity("client|pause");
    }
    let kind = match a.get(3) {
        None => ALL,
        Some(m) if m.eq_ignore_ascii_case(b"write") => WRITE,
        Some(m) if m.eq_ignore_ascii_case(b"all") => ALL,
        Some(_) => return Reply::error("ERR CLIENT PAUSE mode must be WRITE or ALL"),
    };
    let Some(timeout) = crate::util::numtext::parse_i64(&a[2]) else {
        return Reply::error("ERR timeout is not an integer or out of range");
    };
    if timeout < 0 {
        return Reply::error("ERR timeout is negative");
    }
    // A zero timeout is a pause that has already ended, as in Redis.
    let end_ms = if timeout > 0 {
        timeout.saturating_add(unix_ms())
    } else {
        0
    };
    ctx.srv.pause.pause(end_ms, kind);
    Reply::Ok
}

/// CLIENT UNPAUSE.
pub(crate) fn client_unpause(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    if a.len() != 2 {
        return crate::commands::wrong_arity("client|unpause");
    }
    ctx.srv.pause.unpause();
    Reply::Ok
}
