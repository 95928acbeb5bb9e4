//! The ACL command: SETUSER GETUSER DELUSER LIST USERS WHOAMI CAT GENPASS LOG DRYRUN SAVE LOAD
//! HELP, over the user table of [`crate::acl`]. Replies and error texts are Redis 7.0's.

use super::flags::*;
use super::{CmdResult, Ctx, Keys, Spec};
use crate::acl::{self, Denied, UserRef};
use crate::client::Client;
use crate::config::dir;
use crate::protocol::Reply;
use crate::state::Server;
use bytes::Bytes;
use std::sync::atomic::Ordering;
use std::sync::Arc;

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

fn acl_command(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    if let Some(e) = acl::subcommand_arity_error("acl", a) {
        return Err(e);
    }
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    let srv = ctx.srv;
    let pubsub_all = srv.config.text(dir::ACL_PUBSUB_DEFAULT) == "allchannels";
    match (sub.as_str(), a.len()) {
        ("setuser", n) if n >= 3 => {
            let name = &a[2];
            if name
                .iter()
                .any(|&c| c.is_ascii_whitespace() || c == 0)
            {
                return Err(Reply::error("ERR Usernames can't contain spaces or null characters"));
            }
            match srv.acl.set_user(name, &a[3..], pubsub_all) {
                Ok(None) => Ok(Reply::Ok),
                Ok(Some(upcoming)) => {
                    if let Some(user) = srv.acl.get(name) {
                        let id = ctx.client.id;
                        if disconnect_revoked_subscribers(srv, id, &user, &upcoming) {
                            ctx.close_after_reply = true;
                        }
                    }
                    Ok(Reply::Ok)
                }
                Err(e) => Err(Reply::Error(format!("ERR {}", e.replace(['\r', '\n'], " ")))),
            }
        }
        ("deluser", n) if n >= 3 => {
            if a[2..].iter().any(|n| &n[..] == b"default") {
                return Err(Reply::error("ERR The 'default' user cannot be removed"));
            }
            let removed = srv.acl.delete(&a[2..]);
            if disconnect_deleted_users(srv, ctx.client.id) {
                ctx.close_after_reply = true;
            }
            Ok(Reply::Int(removed as i64))
        }
        ("getuser", 3) => match srv.acl.get(&a[2]) {
            Some(u) => Ok(acl::view::getuser(&u.read())),
            None => Ok(Reply::Null),
        },
        ("list", 2) => Ok(Reply::Array(srv.acl.list().into_iter().map(bulk).collect())),
        ("users", 2) => Ok(Reply::Array(srv.acl.names().into_iter().map(bulk).collect())),
        ("whoami", 2) => match ctx.client.user.as_ref() {
            Some(u) => Ok(bulk(u.read().name.clone())),
            None => Ok(Reply::Null),
        },
        ("load" | "save", _) if aclfile(ctx).is_empty() => Err(Reply::error(
            "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.",
        )),
        ("load", 2) => match load_file(srv, &aclfile(ctx)) {
            Ok(()) => {
                if disconnect_deleted_users(srv, ctx.client.id) {
                    ctx.close_after_reply = true;
                }
                Ok(Reply::Ok)
            }
            Err(e) => Err(Reply::Error(format!("ERR {e}"))),
        },
        ("save", 2) => match save_file(srv, &aclfile(ctx)) {
            Ok(()) => Ok(Reply::Ok),
            Err(e) => {
                tracing::warn!("Failed saving ACL file: {e}");
                Err(Reply::error("ERR There was an error trying to save the ACLs. Please check the server logs for more information"))
            }
        },
        ("cat", 2) => Ok(Reply::Array(
            crate::command_table::CATEGORIES
                .iter()
                .map(|c| bulk(c.as_bytes()))
                .collect(),
        )),
        ("cat", 3) => {
            let name = String::from_utf8_lossy(&a[2]).into_owned();
            match acl::view::category(&name) {
                Some(cmds) => Ok(Reply::Array(cmds.into_iter().map(|c| bulk(c.as_bytes())).collect())),
                None => Err(Reply::Error(format!(
                    "ERR Unknown category '{}'",
                    name.chars().take(128).collect::<String>()
                ))),
            }
        }
        ("genpass", 2 | 3) => {
            let bits = if a.len() == 3 {
                super::args::int(&a[2])?
            } else {
                256
            };
            if bits <= 0 || bits > 4096 {
                return Err(Reply::error("ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096"));
            }
            let chars = ((bits + 3) / 4) as usize;
            Ok(bulk(random_hex(chars)))
        }
        ("log", 2 | 3) => {
            let mut count = 10i64;
            if a.len() == 3 {
                if a[2].eq_ignore_ascii_case(b"reset") {
                    acl::view::reset_log(&srv.acl);
                    return Ok(Reply::Ok);
                }
                count = super::args::int(&a[2])?.max(0);
            }
            Ok(acl::view::log(&srv.acl, count as usize))
        }
        ("dryrun", n) if n >= 4 => {
            let Some(user) = srv.acl.get(&a[2]) else {
                return Err(Reply::Error(format!(
                    "ERR User '{}' not found",
                    String::from_utf8_lossy(&a[2])
                )));
            };
            let Some(spec) = super::lookup(&a[3]) else {
                return Err(Reply::Error(format!(
                    "ERR Command '{}' not found",
                    String::from_utf8_lossy(&a[3])
                )));
            };
            let args = &a[3..];
            if !crate::cmdspec::arity_ok(spec.arity, args.len()) {
                let id = acl::resolve(spec.name, args);
                let name = id.map(acl::full_name).unwrap_or(spec.name);
                return Err(Reply::Error(format!(
                    "ERR wrong number of arguments for '{name}' command"
                )));
            }
            match check_user(&user, spec, args) {
                Ok(()) => Ok(Reply::Ok),
                Err((Denied::Command, _, id)) => Ok(bulk(format!(
                    "This user has no permissions to run the '{}' command",
                    acl::full_name(id)
                ))),
                Err((Denied::Key, pos, _)) => Ok(bulk(format!(
                    "This user has no permissions to access the '{}' key",
                    String::from_utf8_lossy(&args[pos])
                ))),
                Err((_, pos, _)) => Ok(bulk(format!(
                    "This user has no permissions to access the '{}' channel",
                    String::from_utf8_lossy(&args[pos])
                ))),
            }
        }
        ("help", 2) => Ok(Reply::Array(
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
        )),
        _ => Err(Reply::Error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try ACL HELP.",
            String::from_utf8_lossy(&a[1])
        ))),
    }
}

fn aclfile(ctx: &Ctx) -> String {
    ctx.srv.config.text(dir::ACLFILE)
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
pub(crate) fn load_file(srv: &crate::state::Server, path: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "Error loading ACLs, opening file '{path}': {}",
            crate::util::strerror(&e)
        )
    })?;
    let defs = parse_acl_file(&text, path)?;
    let requirepass = srv.config.text(dir::REQUIREPASS);
    srv.acl.replace_all(&defs, &requirepass)
}

/// ACL SAVE: every user as ACL LIST shows it, written to a temporary file then renamed.
pub(crate) fn save_file(srv: &crate::state::Server, path: &str) -> std::io::Result<()> {
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
pub(crate) fn load_users_at_startup(srv: &crate::state::Server) -> Result<(), String> {
    let users = srv.config.acl_users.lock().clone();
    let file = srv.config.text(dir::ACLFILE);
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
    let requirepass = srv.config.text(dir::REQUIREPASS);
    srv.acl
        .replace_all(&defs, &requirepass)
        .map_err(|e| format!("Error in user declaration: {e}"))
}

/// Whether the default user has no password (`nopass`): protected mode then refuses
/// non-local clients.
pub(crate) fn default_user_nopass(srv: &crate::state::Server) -> bool {
    srv.acl.default_user().read().nopass
}

/// Whether a new (or RESET) connection starts authenticated: the default user is nopass and
/// enabled.
pub(crate) fn starts_authenticated(srv: &crate::state::Server) -> bool {
    let u = srv.acl.default_user();
    let u = u.read();
    u.nopass && u.enabled
}

/// The check the dispatcher, EXEC and scripts make before running `spec` for `client`:
/// Ok, or the denial and the argument position it concerns. A client without a user (AOF
/// loading) may run anything.
pub(crate) fn check(
    client: &Client,
    spec: &Spec,
    args: &[Bytes],
) -> Result<(), (Denied, usize, usize)> {
    let Some(user) = client.user.as_ref() else {
        return Ok(());
    };
    // The user found unrestricted before, and not changed since: no lock to take (its read
    // lock was two atomic operations on every request).
    let (seen_user, seen_changes) = &client.unrestricted_user;
    let (address, changes) = (Arc::as_ptr(user) as usize, acl::users_changed());
    if seen_user.load(Ordering::Relaxed) == address
        && seen_changes.load(Ordering::Relaxed) == changes
    {
        return Ok(());
    }
    let u = user.read();
    if u.unrestricted() {
        seen_user.store(address, Ordering::Relaxed);
        seen_changes.store(changes, Ordering::Relaxed);
        return Ok(());
    }
    let Some(id) = acl::resolve(spec.name, args) else {
        return Ok(());
    };
    let keys = acl::keys_of(id, args, &|| spec.key_positions(args));
    u.check(id, args, &keys).map_err(|(d, pos)| (d, pos, id))
}

/// Whether some selector of the client's user allows this command and reading every key
/// (`allkeys`, `~*` or `%R~*`): SORT's BY and GET name keys by pattern (Redis's
/// ACLUserCheckCmdWithUnrestrictedKeyAccess with key access).
pub(crate) fn full_read_access(client: &Client, name: &str, args: &[Bytes]) -> bool {
    let Some(user) = client.user.as_ref() else {
        return true;
    };
    let u = user.read();
    let Some(id) = acl::resolve(name, args) else {
        return true;
    };
    let keys = acl::keys_of(id, args, &Vec::new);
    u.selectors.iter().any(|s| {
        s.check(id, args, &keys).is_ok()
            && (s.allkeys
                || s.patterns
                    .iter()
                    .any(|(p, f)| f & acl::READ != 0 && p[..] == b"*"[..]))
    })
}

/// `check` for a user other than the client's (ACL DRYRUN).
pub(crate) fn check_user(
    user: &acl::UserRef,
    spec: &Spec,
    args: &[Bytes],
) -> Result<(), (Denied, usize, usize)> {
    let Some(id) = acl::resolve(spec.name, args) else {
        return Ok(());
    };
    let keys = acl::keys_of(id, args, &|| spec.key_positions(args));
    user.read()
        .check(id, args, &keys)
        .map_err(|(d, pos)| (d, pos, id))
}

/// Record a denial of `args` for `client` in the ACL LOG (`context`: toplevel, multi, lua).
pub(crate) fn log_denial(
    srv: &crate::state::Server,
    client: &Client,
    denied: Denied,
    pos: usize,
    id: usize,
    args: &[Bytes],
    context: &'static str,
) {
    let object: Vec<u8> = match denied {
        Denied::Command => acl::full_name(id).as_bytes().to_vec(),
        Denied::Key | Denied::Channel => args.get(pos).map(|a| a.to_vec()).unwrap_or_default(),
        Denied::Auth => args.first().map(|a| a.to_vec()).unwrap_or_default(),
    };
    let username = client
        .user
        .as_ref()
        .map(|u| u.read().name.clone())
        .unwrap_or_default();
    srv.acl.log_denial(
        srv.config.int(dir::ACLLOG_MAX_LEN).max(0) as usize,
        denied,
        context,
        &object,
        &username,
        client.info.describe(),
    );
}

/// Record a failed AUTH/HELLO for `username`.
pub(crate) fn log_auth_failure(
    srv: &crate::state::Server,
    client: &Client,
    command: &[u8],
    username: &[u8],
) {
    let context = if client.multi.is_some() {
        "multi"
    } else {
        "toplevel"
    };
    srv.acl.log_denial(
        srv.config.int(dir::ACLLOG_MAX_LEN).max(0) as usize,
        Denied::Auth,
        context,
        command,
        username,
        client.info.describe(),
    );
}

/// True when the client's user was deleted (ACL DELUSER, ACL LOAD): Redis disconnects it.
pub(crate) fn user_revoked(client: &Client) -> bool {
    let Some(user) = client.user.as_ref() else {
        return false;
    };
    // Deleting a user counts as a change (`acl::users_changed`): a user seen live since the
    // last change still is, and its lock (two atomic operations a request) is not taken.
    let (seen_user, seen_changes) = &client.live_user;
    let (address, changes) = (Arc::as_ptr(user) as usize, acl::users_changed());
    if seen_user.load(Ordering::Relaxed) == address
        && seen_changes.load(Ordering::Relaxed) == changes
    {
        return false;
    }
    let deleted = user.read().deleted.load(Ordering::SeqCst);
    if !deleted {
        seen_user.store(address, Ordering::Relaxed);
        seen_changes.store(changes, Ordering::Relaxed);
    }
    deleted
}

/// After ACL SETUSER took channel permissions away from `user` (`upcoming`: what it keeps):
/// disconnect every client authenticated as that user with a subscription no longer allowed,
/// as Redis does. True when the client running the command (`current`) is one of them: it is
/// to be closed after its reply (killing it now would drop the reply).
pub(crate) fn disconnect_revoked_subscribers(
    srv: &Server,
    current: u64,
    user: &UserRef,
    upcoming: &[Vec<u8>],
) -> bool {
    let mut doomed: Vec<Arc<crate::client::ClientInfo>> = Vec::new();
    srv.pubsub.for_each_subscription(|kind, name, info| {
        let same_user = info
            .user
            .lock()
            .as_ref()
            .is_some_and(|u| Arc::ptr_eq(u, user));
        let pattern = kind == crate::client::Kind::Pattern;
        if same_user && !crate::acl::subscription_allowed(upcoming, name, pattern) {
            doomed.push(info.clone());
        }
    });
    let mut close_current = false;
    for info in doomed {
        if info.id == current {
            close_current = true;
        } else {
            info.kill();
        }
    }
    close_current
}

/// Disconnect every client whose user was deleted (ACL DELUSER, ACL LOAD), at once, as Redis
/// does. True when the client running the command (`current`) is one of them: it gets its
/// reply first and is closed after it.
pub(crate) fn disconnect_deleted_users(srv: &Server, current: u64) -> bool {
    let clients: Vec<Arc<crate::client::ClientInfo>> =
        srv.clients.lock().values().cloned().collect();
    let mut close_current = false;
    for info in clients {
        let deleted = info
            .user
            .lock()
            .as_ref()
            .is_some_and(|u| u.read().deleted.load(Ordering::SeqCst));
        if deleted && info.id == current {
            close_current = true;
        } else if deleted {
            info.kill();
        }
    }
    close_current
}
