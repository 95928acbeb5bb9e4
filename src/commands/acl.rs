//! The ACL command: SETUSER GETUSER DELUSER LIST USERS WHOAMI CAT GENPASS LOG DRYRUN SAVE LOAD
//! HELP, over the user table of [`crate::acl`]. Replies and error texts are Redis 7.0's.

use super::flags::*;
use super::{Ctx, Keys, Spec};
use crate::acl::{self, Denied};
use crate::protocol::Reply;
use bytes::Bytes;

pub static COMMANDS: &[Spec] = &[Spec::new(
    "acl",
    -2,
    ADMIN | NOSCRIPT | LOADING | STALE,
    Keys::None,
    acl_command,
    "server",
)];

fn bulk(s: impl Into<Vec<u8>>) -> Reply {
    Reply::bulk(s.into())
}

fn acl_command(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    if let Some(e) = acl::subcommand_arity_error("acl", a) {
        return e;
    }
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    let srv = ctx.srv;
    let pubsub_all = srv.config.get("acl-pubsub-default").as_deref() == Some("allchannels");
    match (sub.as_str(), a.len()) {
        ("setuser", n) if n >= 3 => {
            let name = &a[2];
            if name
                .iter()
                .any(|&c| c.is_ascii_whitespace() || c == 0)
            {
                return Reply::error("ERR Usernames can't contain spaces or null characters");
            }
            match srv.acl.set_user(name, &a[3..], pubsub_all) {
                Ok(None) => Reply::Ok,
                Ok(Some(upcoming)) => {
                    if let Some(user) = srv.acl.get(name) {
                        let id = ctx.client.id;
                        if acl::disconnect_revoked_subscribers(srv, id, &user, &upcoming) {
                            ctx.close_after_reply = true;
                        }
                    }
                    Reply::Ok
                }
                Err(e) => Reply::Error(format!("ERR {}", e.replace(['\r', '\n'], " "))),
            }
        }
        ("deluser", n) if n >= 3 => {
            if a[2..].iter().any(|n| &n[..] == b"default") {
                return Reply::error("ERR The 'default' user cannot be removed");
            }
            let removed = srv.acl.delete(&a[2..]);
            if acl::disconnect_deleted_users(srv, ctx.client.id) {
                ctx.close_after_reply = true;
            }
            Reply::Int(removed as i64)
        }
        ("getuser", 3) => match srv.acl.get(&a[2]) {
            Some(u) => acl::view::getuser(&u.read()),
            None => Reply::Null,
        },
        ("list", 2) => Reply::Array(srv.acl.list().into_iter().map(bulk).collect()),
        ("users", 2) => Reply::Array(srv.acl.names().into_iter().map(bulk).collect()),
        ("whoami", 2) => match ctx.client.user.as_ref() {
            Some(u) => bulk(u.read().name.clone()),
            None => Reply::Null,
        },
        ("load" | "save", _) if aclfile(ctx).is_empty() => Reply::error(
            "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.",
        ),
        ("load", 2) => match load_file(srv, &aclfile(ctx)) {
            Ok(()) => {
                if acl::disconnect_deleted_users(srv, ctx.client.id) {
                    ctx.close_after_reply = true;
                }
                Reply::Ok
            }
            Err(e) => Reply::Error(format!("ERR {e}")),
        },
        ("save", 2) => match save_file(srv, &aclfile(ctx)) {
            Ok(()) => Reply::Ok,
            Err(e) => {
                tracing::warn!("Failed saving ACL file: {e}");
                Reply::error("ERR There was an error trying to save the ACLs. Please check the server logs for more information")
            }
        },
        ("cat", 2) => Reply::Array(
            crate::acl_commands::CATEGORIES
                .iter()
                .map(|c| bulk(c.as_bytes()))
                .collect(),
        ),
        ("cat", 3) => {
            let name = String::from_utf8_lossy(&a[2]).into_owned();
            match acl::view::category(&name) {
                Some(cmds) => Reply::Array(cmds.into_iter().map(|c| bulk(c.as_bytes())).collect()),
                None => Reply::Error(format!(
                    "ERR Unknown category '{}'",
                    name.chars().take(128).collect::<String>()
                )),
            }
        }
        ("genpass", 2 | 3) => {
            let bits = if a.len() == 3 {
                match super::args::int(&a[2]) {
                    Ok(b) => b,
                    Err(e) => return e,
                }
            } else {
                256
            };
            if bits <= 0 || bits > 4096 {
                return Reply::error("ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096");
            }
            let chars = ((bits + 3) / 4) as usize;
            bulk(random_hex(chars))
        }
        ("log", 2 | 3) => {
            let mut count = 10i64;
            if a.len() == 3 {
                if a[2].eq_ignore_ascii_case(b"reset") {
                    acl::view::reset_log(&srv.acl);
                    return Reply::Ok;
                }
                count = match super::args::int(&a[2]) {
                    Ok(c) => c.max(0),
                    Err(e) => return e,
                };
            }
            acl::view::log(&srv.acl, count as usize)
        }
        ("dryrun", n) if n >= 4 => {
            let Some(user) = srv.acl.get(&a[2]) else {
                return Reply::Error(format!(
                    "ERR User '{}' not found",
                    String::from_utf8_lossy(&a[2])
                ));
            };
            let Some(spec) = super::lookup(&a[3]) else {
                return Reply::Error(format!(
                    "ERR Command '{}' not found",
                    String::from_utf8_lossy(&a[3])
                ));
            };
            let args = &a[3..];
            if !super::arity_ok(spec.arity, args.len()) {
                let id = acl::resolve(spec.name, args);
                let name = id.map(acl::full_name).unwrap_or(spec.name);
                return Reply::Error(format!(
                    "ERR wrong number of arguments for '{name}' command"
                ));
            }
            match acl::check_user(&user, spec, args) {
                Ok(()) => Reply::Ok,
                Err((Denied::Command, _, id)) => bulk(format!(
                    "This user has no permissions to run the '{}' command",
                    acl::full_name(id)
                )),
                Err((Denied::Key, pos, _)) => bulk(format!(
                    "This user has no permissions to access the '{}' key",
                    String::from_utf8_lossy(&args[pos])
                )),
                Err((_, pos, _)) => bulk(format!(
                    "This user has no permissions to access the '{}' channel",
                    String::from_utf8_lossy(&args[pos])
                )),
            }
        }
        ("help", 2) => Reply::Array(
            [
                "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CAT [<category>]",
                "    List all commands that belong to <category>, or all command categories",
                "    when no category is specified.",
                "DELUSER <username> [<username> ...]",
                "    Delete a list of users.",
                "DRYRUN <username> <command> [<arg> ...]",
                "    Returns whether the user can execute the given command without executing the command.",
                "GETUSER <username>",
                "    Get the user's details.",
                "GENPASS [<bits>]",
                "    Generate a secure 256-bit user password. The optional `bits` argument can",
                "    be used to specify a different size.",
                "LIST",
                "    Show users details in config file format.",
                "LOAD",
                "    Reload users from the ACL file.",
                "LOG [<count> | RESET]",
                "    Show the ACL log entries.",
                "SAVE",
                "    Save the current config to the ACL file.",
                "SETUSER <username> <attribute> [<attribute> ...]",
                "    Create or modify a user with the specified attributes.",
                "USERS",
                "    List all the registered usernames.",
                "WHOAMI",
                "    Return the current connection username.",
                "HELP",
                "    Print this help.",
            ]
            .iter()
            .map(|s| Reply::StatusOwned(s.to_string()))
            .collect(),
        ),
        _ => Reply::Error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try ACL HELP.",
            String::from_utf8_lossy(&a[1])
        )),
    }
}

fn aclfile(ctx: &Ctx) -> String {
    ctx.srv.config.get("aclfile").unwrap_or_default()
}

/// Hex characters from the operating system's random source.
fn random_hex(chars: usize) -> String {
    let mut bytes = vec![0u8; chars.div_ceil(2)];
    let filled = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .is_ok();
    if !filled {
        use rand::RngCore;
        rand::rngs::OsRng.fill_bytes(&mut bytes);
    }
    let mut s: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    s.truncate(chars);
    s
}

/// Parse an ACL file: `user <name> rules...` lines (comments and blank lines skipped). Err
/// is Redis's message naming the line.
pub(crate) fn parse_acl_file(text: &str, path: &str) -> Result<Vec<Vec<Bytes>>, String> {
    let mut defs = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words = crate::protocol::split_args(line.as_bytes())
            .ok_or_else(|| format!("{path}:{}: unbalanced quotes in acl line. ", n + 1))?;
        if words.first().map(|w| w.eq_ignore_ascii_case(b"user")) != Some(true) {
            return Err(format!(
                "{path}:{}: line should start with user keyword. ",
                n + 1
            ));
        }
        if words.len() < 2 {
            return Err(format!(
                "{path}:{}: line should start with user keyword. ",
                n + 1
            ));
        }
        defs.push(words[1..].iter().map(|w| Bytes::from(w.clone())).collect());
    }
    Ok(defs)
}

/// ACL LOAD: replace every user with the file's (all or nothing).
pub(crate) fn load_file(srv: &crate::server::Server, path: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "Error loading ACLs, opening file '{path}': {}",
            crate::config::strerror(&e)
        )
    })?;
    let defs = parse_acl_file(&text, path)?;
    let requirepass = srv.config.get("requirepass").unwrap_or_default();
    srv.acl.replace_all(&defs, &requirepass)
}

/// ACL SAVE: every user as ACL LIST shows it, written to a temporary file then renamed.
pub(crate) fn save_file(srv: &crate::server::Server, path: &str) -> std::io::Result<()> {
    let mut text = String::new();
    for line in srv.acl.list() {
        text.push_str(&line);
        text.push('\n');
    }
    let tmp = format!("{path}.tmp-{}", std::process::id());
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// At startup: users from `user` directives or from `aclfile` (not both, as Redis).
pub(crate) fn load_users_at_startup(srv: &crate::server::Server) -> Result<(), String> {
    let users = srv.config.acl_users.lock().clone();
    let file = srv.config.get("aclfile").unwrap_or_default();
    if !users.is_empty() && !file.is_empty() {
        return Err("Configuring Redis with users defined in redis.conf and at the same setting an ACL file path is invalid. This setup is very likely to lead to configuration errors and security holes, please define either an ACL file or declare users directly in your redis.conf, but not both.".into());
    }
    if !file.is_empty() {
        return load_file(srv, &file)
            .map_err(|e| format!("Aborting Redis startup because of ACL errors: {e}"));
    }
    if users.is_empty() {
        return Ok(());
    }
    let defs: Vec<Vec<Bytes>> = users
        .iter()
        .map(|u| {
            u.iter()
                .map(|w| Bytes::from(w.clone().into_bytes()))
                .collect()
        })
        .collect();
    let requirepass = srv.config.get("requirepass").unwrap_or_default();
    srv.acl
        .replace_all(&defs, &requirepass)
        .map_err(|e| format!("Error in user declaration: {e}"))
}
