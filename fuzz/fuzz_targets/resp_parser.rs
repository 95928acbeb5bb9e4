//! Request parsing: any bytes, fed in two chunks at a fuzzer-chosen split, must parse to the
//! same requests as when fed at once, without panicking, and never consume more than given.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use podium::protocol::{parse_request, ParseLimits, Parsed};

fn parse_all(chunks: &[&[u8]], limits: &ParseLimits) -> (Vec<Vec<bytes::Bytes>>, bool) {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match parse_request(&mut buf, limits) {
                Ok(Parsed::Command(args)) => {
                    assert!(!args.is_empty());
                    out.push(args);
                }
                Ok(Parsed::Empty) => {}
                Ok(Parsed::Incomplete) => break,
                Err(_) => return (out, true),
            }
        }
    }
    (out, false)
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let limits = ParseLimits {
        max_bulk_len: 1 << 20,
        authenticated: split & 1 == 0,
    };
    let at = (split as usize).min(rest.len());
    let whole = parse_all(&[rest], &limits);
    let split = parse_all(&[&rest[..at], &rest[at..]], &limits);
    // A protocol error may surface at a different request when the input is split, but
    // every request parsed before it must be the same.
    if !whole.1 && !split.1 {
        assert_eq!(whole.0, split.0);
    }
});
