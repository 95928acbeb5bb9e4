//! Hash slots: which of Redis Cluster's 16,384 slots a key belongs to, and the per-slot key
//! index a shard keeps in cluster mode.
//!
//! A key's slot is the CRC16 (XMODEM: polynomial 0x1021, no reflection, initial value 0) of
//! the key, or of its hash tag (the bytes between the first `{` and the first `}` after it,
//! when that is not empty), modulo 16,384. In cluster mode the keyspace picks a key's shard
//! from its slot, so all keys of one slot share a shard, and each shard indexes its keys by
//! slot ([`SlotKeys`]): CLUSTER COUNTKEYSINSLOT reads one counter and CLUSTER GETKEYSINSLOT
//! walks only the keys it returns, whatever the size of the rest of the keyspace.

use hashbrown::{HashMap, HashSet};

/// Number of hash slots in a Redis cluster.
pub const SLOTS: usize = 16384;

/// The CRC16 table of polynomial 0x1021 (MSB first), built at compile time.
const CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// CRC16/XMODEM of `bytes`.
pub fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| {
        (crc << 8) ^ CRC16_TABLE[(((crc >> 8) as u8) ^ b) as usize]
    })
}

/// The hash slot of `key`, honouring a non-empty `{tag}`.
pub fn key_hash_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16(hashed) & (SLOTS as u16 - 1)
}

/// The keys of one shard grouped by slot (cluster mode only).
#[derive(Default)]
pub struct SlotKeys {
    by_slot: HashMap<u16, HashSet<Box<[u8]>>>,
}

impl SlotKeys {
    /// A new key was inserted.
    pub fn add(&mut self, key: &[u8]) {
        self.by_slot
            .entry(key_hash_slot(key))
            .or_default()
            .insert(key.into());
    }

    /// A key left the shard.
    pub fn remove(&mut self, key: &[u8]) {
        let slot = key_hash_slot(key);
        if let Some(set) = self.by_slot.get_mut(&slot) {
            set.remove(key);
            if set.is_empty() {
                self.by_slot.remove(&slot);
            }
        }
    }

    pub fn count(&self, slot: u16) -> usize {
        self.by_slot.get(&slot).map_or(0, |s| s.len())
    }

    /// Up to `max` keys of `slot`.
    pub fn keys(&self, slot: u16, max: usize) -> Vec<bytes::Bytes> {
        self.by_slot.get(&slot).map_or_else(Vec::new, |s| {
            s.iter()
                .take(max)
                .map(|k| bytes::Bytes::copy_from_slice(k))
                .collect()
        })
    }

    pub fn clear(&mut self) {
        self.by_slot = HashMap::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_xmodem_check_value() {
        // The standard check input of CRC-16/XMODEM.
        assert_eq!(crc16(b"123456789"), 0x31C3);
    }

    #[test]
    fn slots_match_redis_keyslot_answers() {
        // Values given by redis-server 7.0.15's CLUSTER KEYSLOT.
        assert_eq!(key_hash_slot(b"foo"), 12182);
        assert_eq!(key_hash_slot(b"bar"), 5061);
        assert_eq!(key_hash_slot(b""), 0);
        assert_eq!(
            key_hash_slot(b"{user1000}.following"),
            key_hash_slot(b"user1000")
        );
        // An empty tag hashes the whole key; only the first '{' counts.
        assert_eq!(key_hash_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") & 16383);
        assert_eq!(key_hash_slot(b"foo{{bar}}zap"), key_hash_slot(b"{bar"));
        assert_eq!(key_hash_slot(b"foo{bar}{zap}"), key_hash_slot(b"bar"));
    }

    #[test]
    fn slot_keys_count_and_list_by_slot() {
        let mut s = SlotKeys::default();
        s.add(b"{a}1");
        s.add(b"{a}2");
        s.add(b"b");
        let slot = key_hash_slot(b"a");
        assert_eq!(s.count(slot), 2);
        assert_eq!(s.keys(slot, 1).len(), 1);
        assert_eq!(s.keys(slot, 10).len(), 2);
        s.remove(b"{a}1");
        assert_eq!(s.count(slot), 1);
        s.clear();
        assert_eq!(s.count(key_hash_slot(b"b")), 0);
    }
}
