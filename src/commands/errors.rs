//! Redis 7.0's error texts that more than one command family replies with, in one place so a
//! family cannot drift from the others (Redis has one `shared.syntaxerr`, one "invalid cursor",
//! one timeout parser ...). Texts include the error code, as [`crate::protocol::Reply::Error`]
//! carries them. Family-specific texts stay next to their command.

pub const SYNTAX: &str = "ERR syntax error";
pub const NOT_INT: &str = "ERR value is not an integer or out of range";
pub const NOT_FLOAT: &str = "ERR value is not a valid float";
pub const INVALID_CURSOR: &str = "ERR invalid cursor";
pub const TIMEOUT_NOT_FLOAT: &str = "ERR timeout is not a float or out of range";
pub const TIMEOUT_NEGATIVE: &str = "ERR timeout is negative";
pub use crate::types::WRONGTYPE;

use crate::protocol::Reply;
use bytes::Bytes;

/// `ERR invalid expire time in 'CMD' command` (Redis's addReplyErrorExpireTime).
pub fn invalid_expire_time(cmd: &str) -> String {
    format!("ERR invalid expire time in '{cmd}' command")
}

/// Redis 7.0's error for an unknown command, byte for byte: `ERR unknown command 'NAME', with
/// args beginning with: 'A' 'B' `. Redis formats the arguments as C strings with `%.*s`, so
/// each ends at its first NUL byte, other bytes (`\xff`, quotes, UTF-8) are copied as they
/// are, and `\r`/`\n` become spaces; the name is cut to 128 bytes, and arguments are added
/// while the list is shorter than 128 bytes, the last one cut to fill it. Non-UTF-8 bytes
/// cannot live in [`Reply::Error`]'s text, so the reply is the encoded error line
/// ([`Reply::Raw`], still counted as an error by [`Reply::is_error`]).
pub fn unknown_command(args: &[Bytes]) -> Reply {
    use crate::util::c_str;
    let name = c_str(&args[0]);
    let mut list: Vec<u8> = Vec::new();
    for a in args.iter().skip(1) {
        if list.len() >= 128 {
            break;
        }
        let a = c_str(a);
        let room = 128 - list.len();
        list.push(b'\'');
        list.extend_from_slice(&a[..a.len().min(room)]);
        list.extend_from_slice(b"' ");
    }
    let mut line = b"-ERR unknown command '".to_vec();
    line.extend_from_slice(&name[..name.len().min(128)]);
    line.extend_from_slice(b"', with args beginning with: ");
    line.extend_from_slice(&list);
    for b in &mut line {
        if *b == b'\r' || *b == b'\n' {
            *b = b' ';
        }
    }
    line.extend_from_slice(b"\r\n");
    Reply::Raw(Bytes::from(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(args: &[&[u8]]) -> Vec<u8> {
        let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
        match unknown_command(&args) {
            Reply::Raw(b) => b.to_vec(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_command_quotes_like_redis() {
        // Reference lines captured from redis-server 7.0.15.
        assert_eq!(
            line(&[b"FOO", b"a\xffb", b"c\nd\re", b"x\x00y", b"\x01\"'\\"]),
            b"-ERR unknown command 'FOO', with args beginning with: 'a\xffb' 'c d e' 'x' '\x01\"'\\' \r\n"
        );
        assert_eq!(
            line(&[b"F\xffO\nO", b"a"]),
            b"-ERR unknown command 'F\xffO O', with args beginning with: 'a' \r\n"
        );
        let (a100, b100) = (vec![b'a'; 100], vec![b'b'; 100]);
        let mut want = b"-ERR unknown command 'FOO', with args beginning with: '".to_vec();
        want.extend_from_slice(&a100);
        want.extend_from_slice(b"' '");
        want.extend_from_slice(&b100[..25]);
        want.extend_from_slice(b"' \r\n");
        assert_eq!(line(&[b"FOO", &a100, &b100, b"c"]), want);
        assert_eq!(
            line(&[b"FOO\x00bar", b"\r\n"]),
            b"-ERR unknown command 'FOO', with args beginning with: '  ' \r\n"
        );
        assert_eq!(
            line(&[b"nope"]),
            b"-ERR unknown command 'nope', with args beginning with: \r\n"
        );
        assert!(unknown_command(&[Bytes::from_static(b"x")]).is_error());
    }
}
