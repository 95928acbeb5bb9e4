//! Which arguments of a command carry secrets, so MONITOR and SLOWLOG show `(redacted)` in
//! their place: the arguments Redis 7.0's commands redact as they run (AUTH, HELLO ... AUTH,
//! MIGRATE ... AUTH/AUTH2, ACL SETUSER, CONFIG SET of requirepass/masterauth). One list for
//! both readers, so what one hides the other cannot show.

use bytes::Bytes;

fn is(a: &[u8], name: &str) -> bool {
    a.eq_ignore_ascii_case(name.as_bytes())
}

/// Positions (ascending) of the arguments of `args` to hide.
pub(crate) fn secret_positions(args: &[Bytes]) -> Vec<usize> {
    let Some(name) = args.first() else {
        return Vec::new();
    };
    let n = args.len();
    let mut out = Vec::new();
    if is(name, "auth") {
        // AUTH with more than two arguments is a syntax error, and Redis redacts nothing then.
        if n <= 3 {
            out.extend(1..n);
        }
    } else if is(name, "hello") {
        // HELLO [protover [AUTH username password] [SETNAME name]]: the options walk as Redis's.
        let mut j = 2;
        while j < n {
            let more = n - 1 - j;
            if is(&args[j], "auth") && more >= 2 {
                out.extend([j + 1, j + 2]);
                j += 3;
            } else if is(&args[j], "setname") && more >= 1 {
                j += 2;
            } else {
                break;
            }
        }
    } else if is(name, "migrate") {
        let mut j = 6;
        while j < n {
            let more = n - 1 - j;
            if is(&args[j], "auth") && more >= 1 {
                out.push(j + 1);
                j += 2;
            } else if is(&args[j], "auth2") && more >= 2 {
                out.extend([j + 1, j + 2]);
                j += 3;
            } else if is(&args[j], "copy") || is(&args[j], "replace") {
                j += 1;
            } else {
                break;
            }
        }
    } else if is(name, "acl") && n >= 3 && is(&args[1], "setuser") {
        // The user name and every rule (passwords among them).
        out.extend(2..n);
    } else if is(name, "config") && n >= 4 && is(&args[1], "set") {
        let mut i = 2;
        while i + 1 < n {
            if is(&args[i], "requirepass") || is(&args[i], "masterauth") {
                out.push(i + 1);
            }
            i += 2;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<Bytes> {
        v.iter()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect()
    }

    #[test]
    fn secrets_by_command() {
        assert_eq!(secret_positions(&args(&["AUTH", "pw"])), vec![1]);
        assert_eq!(secret_positions(&args(&["auth", "u", "pw"])), vec![1, 2]);
        assert!(secret_positions(&args(&["auth", "u", "pw", "x"])).is_empty());
        assert_eq!(
            secret_positions(&args(&["hello", "3", "SETNAME", "auth", "AUTH", "u", "p"])),
            vec![5, 6]
        );
        assert_eq!(
            secret_positions(&args(&[
                "migrate", "h", "1", "", "0", "10", "COPY", "AUTH", "pw", "AUTH2", "u", "p2",
                "KEYS", "auth", "x"
            ])),
            vec![8, 10, 11]
        );
        assert_eq!(
            secret_positions(&args(&["acl", "setuser", "bob", ">pw"])),
            vec![2, 3]
        );
        assert_eq!(
            secret_positions(&args(&[
                "config",
                "set",
                "maxmemory",
                "1",
                "requirepass",
                "x"
            ])),
            vec![5]
        );
        assert!(secret_positions(&args(&["get", "auth"])).is_empty());
    }
}
