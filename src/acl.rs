//! Access control: users, their passwords and what each may run (Redis 7.0's ACL).

use crate::server::Server;
use std::sync::atomic::Ordering;

/// Whether the default user has no password (`nopass`): protected mode then refuses
/// non-local clients.
pub(crate) fn default_user_nopass(srv: &Server) -> bool {
    !srv.config.hot.requirepass_set.load(Ordering::Relaxed)
}
