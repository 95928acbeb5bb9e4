//! RESTORE payloads: any bytes must decode to a value or be refused, never panic or allocate
//! without bound. Half the inputs get a valid footer (RDB version 10 and the CRC-64 of the
//! body), so the fuzzer reaches the object decoders instead of stopping at the checksum; those
//! are decoded both with deep sanitization and with the shallow check
//! (`sanitize-dump-payload no`, Redis's default).
#![no_main]

use libfuzzer_sys::fuzz_target;
use podium::persistence::rdb::{restore, Limits};
use podium::types::hash::HashLimits;
use podium::types::zset::ZsetLimits;

fn limits(deep: bool) -> Limits {
    Limits {
        hash: HashLimits {
            max_entries: 128,
            max_value: 64,
        },
        zset: ZsetLimits {
            max_entries: 128,
            max_value: 64,
        },
        set_max_intset: 512,
        deep,
    }
}

/// Redis's CRC-64 (Jones polynomial, reflected), as DUMP appends it.
fn crc64(data: &[u8]) -> u64 {
    let mut crc: u64 = 0;
    for &b in data {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x95AC_9329_AC4B_C9B5
            } else {
                crc >> 1
            };
        }
    }
    crc
}

fuzz_target!(|data: &[u8]| {
    let _ = restore(data, &limits(true));
    let mut payload = data.to_vec();
    payload.extend_from_slice(&10u16.to_le_bytes());
    let crc = crc64(&payload);
    payload.extend_from_slice(&crc.to_le_bytes());
    let _ = restore(&payload, &limits(true));
    let _ = restore(&payload, &limits(false));
});
