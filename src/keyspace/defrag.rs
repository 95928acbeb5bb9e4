//! Active defragmentation of one shard: moving its records and values out of sparse slabs.
//!
//! The defragmenter (`state::defrag`) walks every shard with the table's SCAN cursor, one
//! bucket chain at a time, holding the shard's lock as a command would. Each record the
//! relocator picks (`alloc::defrag`) is copied whole to a new block and its pointer replaced
//! everywhere the shard keeps one: its table slot, its place in the TTL list, and the list of
//! records unpacked by a running command (empty between commands, kept right all the same).
//! Then the record's value moves its own blocks (`types::Value::defrag`); a value with more
//! elements than `active-defrag-max-scan-fields` is only noted by key, and walked over later
//! steps by [`Shard::defrag_value`], which finds the key again each time (it may have changed
//! or gone meanwhile), as Redis defers big values to its `defrag_later` list.

use super::record::RecordRef;
use super::{Shard, NO_VOL};
use crate::alloc::defrag::Relocator;
use bytes::Bytes;

/// Keys one defrag call looked at: those with a block moved (Redis's key hits), the others
/// (key misses).
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyTally {
    pub hits: u64,
    pub misses: u64,
}

impl Shard {
    /// Defragment the keys of the bucket chain `cursor` names (see `Table::scan`): each
    /// record, and each value of at most `max_fields` elements in full; the keys of bigger
    /// values are pushed on `later` (see the module's description). Returns the next cursor,
    /// 0 after the last bucket.
    pub fn defrag_buckets(
        &mut self,
        cursor: u64,
        r: &mut Relocator,
        max_fields: usize,
        later: &mut Vec<Bytes>,
        keys: &mut KeyTally,
    ) -> u64 {
        let Shard {
            table,
            volatile,
            unpacked,
            ..
        } = self;
        table.defrag_chain(cursor, r, |rec, r| {
            let hits_before = r.tally.hits;
            // SAFETY: `rec` is a record of this shard's table and `&mut self` is held, so
            // nothing else reads it; if it moves, every copy of its pointer the shard keeps
            // is replaced below (the table's by `defrag_chain`) before anything follows one.
            let moved = unsafe { rec.relocate(r) };
            let now = moved.unwrap_or(rec);
            if let Some(new) = moved {
                // SAFETY: `new` is the live record just moved, owned by this shard.
                let vol = unsafe { new.header() }.vol;
                if vol != NO_VOL {
                    volatile[vol as usize] = new;
                }
                for u in unpacked.iter_mut().filter(|u| **u == rec) {
                    *u = new;
                }
            }
            // SAFETY: as above: the record (moved or not) is live and referenced only here.
            if let Some(e) = unsafe { now.full_entry_mut() } {
                if e.value.elements() > max_fields {
                    // SAFETY: as above.
                    later.push(Bytes::copy_from_slice(unsafe { now.key() }));
                } else {
                    e.value.defrag(r, 0, usize::MAX);
                }
            }
            if r.tally.hits > hits_before {
                keys.hits += 1;
            } else {
                keys.misses += 1;
            }
            moved
        })
    }

    /// Defragment the value of `key` from element `from` on, for at most `budget` elements.
    /// Returns where to go on from, or None when the value is done (or the key is gone, or
    /// holds a packed string now).
    pub fn defrag_value(
        &mut self,
        key: &[u8],
        r: &mut Relocator,
        from: usize,
        budget: usize,
    ) -> Option<usize> {
        let rec: RecordRef = self.find(key)?;
        // SAFETY: a record of this shard's table; `&mut self` makes this the only reference.
        let e = unsafe { rec.full_entry_mut() }?;
        e.value.defrag(r, from, budget)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::compact::CompactBytes;
    use crate::types::Value;

    /// A shard of every kind of value, some keys with a TTL: its contents as text, to
    /// compare before and after a defrag that moves every block.
    fn filled() -> Shard {
        let mut sh = Shard::default();
        for i in 0..300 {
            let k = format!("key:{i}");
            let v = if i % 2 == 0 {
                format!("v{i}")
            } else {
                format!("{i}-{}", "x".repeat(40 + i % 50))
            };
            sh.insert(
                k.as_bytes(),
                Value::Str(CompactBytes::new(v.as_bytes())),
                false,
            );
            if i % 3 == 0 {
                sh.set_expire(k.as_bytes(), 4_000_000_000_000 + i as i64);
            }
        }
        let mut list = crate::types::list::List::new();
        for i in 0..500 {
            list.deque_mut().push_back(format!("elem{i}").into_bytes());
        }
        sh.insert(b"biglist", Value::List(list), false);
        let mut small = crate::types::list::List::new();
        small.push_back(b"a");
        sh.insert(b"smalllist", Value::List(small), false);
        let limits = crate::types::hash::HashLimits::default();
        let mut hash = crate::types::hash::Hash::new();
        for i in 0..400 {
            hash.set(
                format!("f{i}").as_bytes(),
                format!("value{i}").as_bytes(),
                &limits,
            );
        }
        sh.insert(b"bighash", Value::Hash(hash), false);
        let mut set = crate::types::set::Set::new_intset();
        for i in 0..300 {
            set.add(format!("member-{i}").as_bytes(), 512);
        }
        sh.insert(b"bigset", Value::Set(set), false);
        let mut z = crate::types::zset::ZSet::new_for(1, 300, &Default::default());
        for i in 0..300 {
            z.insert(
                format!("a-long-member-name-{i}").as_bytes(),
                i as f64,
                &Default::default(),
            );
        }
        sh.insert(b"bigzset", Value::ZSet(z), false);
        sh
    }

    fn dump(sh: &Shard) -> Vec<String> {
        let mut out: Vec<String> = sh
            .keys()
            .map(|(k, e, exp)| {
                let v = match &e.value {
                    Value::Str(s) => String::from_utf8_lossy(s).into_owned(),
                    Value::List(l) => format!("{:?}", l.iter().collect::<Vec<_>>()),
                    Value::Hash(h) => {
                        let mut p: Vec<_> =
                            h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
                        p.sort();
                        format!("{p:?}")
                    }
                    Value::Set(s) => {
                        let mut m: Vec<Vec<u8>> = s.iter().map(|m| m.to_vec()).collect();
                        m.sort();
                        format!("{m:?}")
                    }
                    Value::ZSet(z) => format!("{:?}", z.iter().collect::<Vec<_>>()),
                    Value::Stream(_) => "stream".into(),
                };
                format!("{}={v} ttl {exp}", String::from_utf8_lossy(k))
            })
            .collect();
        out.sort();
        out
    }

    /// Every record and value block moved (the test relocator moves all it is shown): the
    /// shard reads back the same, its TTL list follows the moved records, and the big
    /// values went through the deferred walk in steps.
    #[test]
    fn moving_every_block_changes_nothing() {
        let mut sh = filled();
        let before = dump(&sh);
        let mut r = Relocator::always();
        let mut later = Vec::new();
        let mut keys = KeyTally::default();
        let mut cursor = 0;
        loop {
            cursor = sh.defrag_buckets(cursor, &mut r, 100, &mut later, &mut keys);
            if cursor == 0 {
                break;
            }
        }
        assert_eq!(keys.hits + keys.misses, sh.len() as u64);
        assert_eq!(keys.misses, 0, "every record moves");
        let mut deferred: Vec<_> = later.iter().map(|k| k.to_vec()).collect();
        deferred.sort();
        assert_eq!(
            deferred,
            [&b"bighash"[..], b"biglist", b"bigset", b"bigzset"].map(<[u8]>::to_vec)
        );
        for k in &later {
            let mut from = 0;
            let mut steps = 0;
            while let Some(next) = sh.defrag_value(k, &mut r, from, 100) {
                assert!(next > from);
                from = next;
                steps += 1;
            }
            assert!(steps >= 2, "{k:?} walked in one step");
        }
        assert!(r.tally.hits > 2000, "{:?}", r.tally);
        assert_eq!(dump(&sh), before);
        // The TTL list follows: expiry still finds and removes the moved records.
        let mut rng = rand::thread_rng();
        let (mut gone, mut graveyard) = (Vec::new(), Vec::new());
        let mut ttls = super::super::TtlSample::default();
        let mut n = 0;
        while sh.volatile_len() > 0 && n < 10_000 {
            sh.active_expire(
                i64::MAX / 2,
                20,
                &mut rng,
                &mut gone,
                &mut graveyard,
                &mut ttls,
            );
            n += 1;
        }
        assert_eq!(gone.len(), 100);
        assert_eq!(sh.len(), 300 - 100 + 5);
        assert!(sh.defrag_value(b"nosuchkey", &mut r, 0, 10).is_none());
    }
}
