//! CLUSTER, READONLY, READWRITE and ASKING: the cluster commands of a server without cluster
//! support.
//!
//! Podium has no cluster mode (`cluster-enabled` is refused). Redis without cluster support
//! still knows these commands: it checks the subcommand and its arity as for any container,
//! then answers that cluster support is disabled. Podium does the same, so a client library
//! probing for cluster mode gets the answer it expects from a standalone Redis, and
//! COMMAND INFO, COMMAND LIST and COMMAND DOCS list the same subcommands Redis lists.

use super::flags::*;
use super::{CmdResult, Ctx, Keys, Spec};
use crate::cmdspec::{arity_ok, wrong_arity};
use crate::protocol::Reply;
use bytes::Bytes;

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    Spec::new("cluster", -2, 0, Keys::None, cluster, "cluster"),
    Spec::new("readonly", 1, FAST | LOADING | STALE, Keys::None, disabled, "cluster"),
    Spec::new("readwrite", 1, FAST | LOADING | STALE, Keys::None, disabled, "cluster"),
    Spec::new("asking", 1, FAST, Keys::None, disabled, "cluster"),
];

/// Redis's CLUSTER subcommands (all answered the same way here).
pub(crate) const SUBCOMMANDS: &[&str] = &[
    "addslots",
    "addslotsrange",
    "bumpepoch",
    "count-failure-reports",
    "countkeysinslot",
    "delslots",
    "delslotsrange",
    "failover",
    "flushslots",
    "forget",
    "getkeysinslot",
    "help",
    "info",
    "keyslot",
    "links",
    "meet",
    "myid",
    "nodes",
    "replicas",
    "replicate",
    "reset",
    "saveconfig",
    "set-config-epoch",
    "setslot",
    "shards",
    "slaves",
    "slots",
];

const DISABLED: &str = "ERR This instance has cluster support disabled";

fn disabled(_ctx: &mut Ctx, _a: &[Bytes]) -> CmdResult {
    Err(Reply::error(DISABLED))
}

fn cluster(_ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    let full = format!("cluster|{sub}");
    match crate::acl::view::command_row(&full) {
        None => Err(Reply::error(format!(
            "ERR unknown subcommand '{}'. Try CLUSTER HELP.",
            String::from_utf8_lossy(&a[1])
        ))),
        Some(row) if !arity_ok(row.arity, a.len()) => Err(wrong_arity(&full)),
        Some(_) => Err(Reply::error(DISABLED)),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_subcommand_is_one_of_redis_rows() {
        let rows: Vec<&str> = crate::acl::view::subcommand_rows("cluster")
            .iter()
            .map(|r| r.name.trim_start_matches("cluster|"))
            .collect();
        assert_eq!(rows, super::SUBCOMMANDS);
    }
}
