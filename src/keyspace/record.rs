//! `Record`: one key of the keyspace and its entry, in a single allocation sized to the key.
//!
//! A shard's table used to store a `(Key, Entry)` pair of 96 bytes inline in every bucket, at
//! hashbrown's load of 0.44–0.875, and its SCAN order table held a second 40-byte copy of
//! every key: about 200 bytes of tables per key before any value. Now a shard's one table
//! (`keyspace/table.rs`) holds an 8-byte pointer per key in 64-byte buckets, and the key's
//! bytes and its entry live here, once:
//!
//! ```text
//! [ Entry (value, vol, meta) | (long keys: u64 length) | key bytes ]
//! ```
//!
//! The key's length is the top byte of the entry's `meta` word (whose low 24 bits are the
//! access clock): 0..=254, or 255 for a long key, whose length then follows as a u64. A key
//! of up to 16 bytes with a short string value makes a 64-byte record, jemalloc's 64-byte
//! class; Redis 7.0 spends a 24-byte dictEntry, a 16-byte robj and the key's sds on the same.
//! (A key's expiry is kept by its shard, beside the list of keys with a TTL.)
//!
//! The table owns each record: it holds the record's pointer as a [`RecordRef`] (made by
//! [`Record::into_ref`], turned back into the owning [`Record`] by [`Record::from_ref`] when the
//! key leaves the table or the table is dropped), and the shard's list of keys with a TTL
//! holds copies of the same pointers. The shard keeps the rule that makes those copies safe to
//! follow: a record leaves the TTL list before it is freed.
//!
//! The layout is Podium's own, so this and the table are the places in the keyspace with
//! `unsafe`: every block says why it holds, and `tests` exercise keys of every length form,
//! drops, and taking the entry out.

use super::Entry;
use std::alloc::Layout;
use std::ptr::NonNull;

/// The length tag of a key whose length follows as a u64.
const LONG_KEY: u32 = 0xff;
/// Bytes of the entry at the head of a record (a multiple of its alignment).
const ENTRY_BYTES: usize = std::mem::size_of::<Entry>();
/// Where a long key's length, or a short key's bytes, start.
const TAIL_AT: usize = ENTRY_BYTES;
/// `Entry::meta` bits that hold the access clock; the byte above holds the key length tag.
pub(super) const ACCESS_MASK: u32 = 0x00ff_ffff;

/// One key and its entry, owned (see the module's description).
pub struct Record {
    /// Points at the entry at the start of the block; the key length and bytes follow it.
    head: NonNull<Entry>,
}

/// A non-owning copy of a [`Record`]'s pointer, as the shard's table and TTL list keep it.
/// Following it is `unsafe`: the caller promises the record is still owned by its shard.
#[derive(Clone, Copy)]
pub struct RecordRef {
    head: NonNull<Entry>,
}

// SAFETY: a Record owns its block outright, like a Box<Entry> with a trailer of plain bytes,
// and Entry is Send and Sync; so moving or sharing a Record across threads is exactly as
// safe as moving or sharing a Box<Entry>.
unsafe impl Send for Record {}
// SAFETY: see Send: `&Record` only gives out `&Entry` and `&[u8]`.
unsafe impl Sync for Record {}
// SAFETY: a RecordRef lives only in the table and TTL list of the shard that owns its record
// and is only followed through that shard (under `&Shard` for reads, `&mut Shard` for writes), so it
// crosses threads exactly when the shard does, under the shard's mutex.
unsafe impl Send for RecordRef {}
// SAFETY: see Send.
unsafe impl Sync for RecordRef {}

const _: () = assert!(ENTRY_BYTES.is_multiple_of(std::mem::align_of::<Entry>()));

fn layout(key_len: usize) -> Layout {
    let long = if key_len < LONG_KEY as usize { 0 } else { 8 };
    // Rounded up to 16 bytes, the spacing of jemalloc's size classes up to 128 bytes: the
    // block is then exactly what jemalloc hands out for the usual record, so `used_memory`
    // (which counts requested bytes) agrees with MEMORY USAGE (which counts size classes).
    let size = (TAIL_AT + long + key_len).next_multiple_of(16);
    // A key is at most a bulk string, far below isize::MAX; this cannot fail for one.
    Layout::from_size_align(size, std::mem::align_of::<Entry>())
        .unwrap_or_else(|_| panic!("keyspace record of {key_len}-byte key"))
}

/// The key of the record at `head`.
///
/// # Safety
/// `head` must point at a live record (made by [`Record::new`], not yet freed), and the
/// returned slice must not outlive it.
#[inline]
unsafe fn key_at<'a>(head: NonNull<Entry>) -> &'a [u8] {
    // SAFETY: per the contract the block is live; its entry's meta was written in `new` and
    // its top byte is never changed afterwards (set_access keeps it), and the trailer holds
    // exactly the length it describes, inside the block.
    unsafe {
        let tag = (*head.as_ptr()).meta >> 24;
        let block = head.as_ptr().cast::<u8>();
        if tag != LONG_KEY {
            std::slice::from_raw_parts(block.add(TAIL_AT), tag as usize)
        } else {
            let mut len = [0u8; 8];
            std::ptr::copy_nonoverlapping(block.add(TAIL_AT), len.as_mut_ptr(), 8);
            std::slice::from_raw_parts(block.add(TAIL_AT + 8), u64::from_le_bytes(len) as usize)
        }
    }
}

impl Record {
    /// A record for `key` holding `value`, with access clock `access`.
    pub fn new(key: &[u8], value: super::Value, vol: u32, access: u32) -> Record {
        let layout = layout(key.len());
        let tag = (key.len() as u32).min(LONG_KEY);
        let entry = Entry {
            value,
            vol,
            meta: (tag << 24) | (access & ACCESS_MASK),
        };
        // SAFETY: the layout's size is at least TAIL_AT, never zero.
        let block = unsafe { std::alloc::alloc(layout) };
        let Some(head) = NonNull::new(block.cast::<Entry>()) else {
            std::alloc::handle_alloc_error(layout)
        };
        // SAFETY: `block` is a fresh allocation of `layout`: ENTRY_BYTES at the entry's
        // alignment for the entry, then (for a long key) 8 length bytes and the key, which the
        // writes below fill exactly (byte copies, no alignment needed).
        unsafe {
            head.as_ptr().write(entry);
            let mut at = TAIL_AT;
            if tag == LONG_KEY {
                let len = (key.len() as u64).to_le_bytes();
                std::ptr::copy_nonoverlapping(len.as_ptr(), block.add(at), 8);
                at += 8;
            }
            std::ptr::copy_nonoverlapping(key.as_ptr(), block.add(at), key.len());
        }
        Record { head }
    }

    /// Bytes jemalloc hands out for the record of a `key_len`-byte key (MEMORY USAGE).
    pub fn alloc_bytes(key_len: usize) -> usize {
        crate::alloc::size_class(layout(key_len).size())
    }

    /// A copy of this record's pointer.
    #[inline]
    pub fn as_ref(&self) -> RecordRef {
        RecordRef { head: self.head }
    }

    /// Give up ownership to a table: the record stays allocated, reachable through the
    /// returned pointer, until [`Record::from_ref`] takes it back.
    #[inline]
    pub fn into_ref(self) -> RecordRef {
        let r = self.as_ref();
        std::mem::forget(self);
        r
    }

    /// Take back ownership of a record given up with [`Record::into_ref`].
    ///
    /// # Safety
    /// `r` must come from `into_ref` and be taken back once: no other `Record` owns it, and
    /// no copy of it is followed after the returned record is dropped.
    #[inline]
    pub unsafe fn from_ref(r: RecordRef) -> Record {
        Record { head: r.head }
    }

    #[inline]
    pub fn entry(&self) -> &Entry {
        // SAFETY: `head` points at the entry written in `new`, alive until drop or
        // `into_entry`; the borrow of self keeps it so.
        unsafe { self.head.as_ref() }
    }

    #[inline]
    pub fn entry_mut(&mut self) -> &mut Entry {
        // SAFETY: as `entry`, and `&mut self` makes this the only reference through the
        // owner; the shard never follows an index copy while it holds this borrow.
        unsafe { self.head.as_mut() }
    }

    #[inline]
    pub fn key(&self) -> &[u8] {
        // SAFETY: the record is alive for as long as self is borrowed.
        unsafe { key_at(self.head) }
    }

    /// Free the record, keeping its entry.
    pub fn into_entry(self) -> Entry {
        let layout = layout(self.key().len());
        let block = self.head.as_ptr();
        std::mem::forget(self);
        // SAFETY: the entry is read out exactly once (the record is forgotten, so its drop
        // does not drop it again), then the block is freed with the layout it was made with.
        unsafe {
            let entry = block.read();
            std::alloc::dealloc(block.cast::<u8>(), layout);
            entry
        }
    }
}

impl RecordRef {
    /// # Safety
    /// The record must be alive (still owned by its shard) for `'a`, and not mutably
    /// borrowed during it.
    #[inline]
    pub unsafe fn key<'a>(self) -> &'a [u8] {
        // SAFETY: forwarded to the caller's contract.
        unsafe { key_at(self.head) }
    }

    /// # Safety
    /// As [`RecordRef::key`].
    #[inline]
    pub unsafe fn entry<'a>(self) -> &'a Entry {
        // SAFETY: forwarded to the caller's contract.
        unsafe { &*self.head.as_ptr() }
    }

    /// # Safety
    /// The record must be alive for `'a`, and no other reference to it may be used during
    /// `'a` (the caller holds its shard mutably).
    #[inline]
    pub unsafe fn entry_mut<'a>(self) -> &'a mut Entry {
        // SAFETY: forwarded to the caller's contract.
        unsafe { &mut *self.head.as_ptr() }
    }

    /// The pointer, as a table stores it.
    #[inline]
    pub(super) fn raw(self) -> NonNull<u8> {
        self.head.cast()
    }

    /// A pointer a table stored with [`RecordRef::raw`]. Making one is safe; following it is
    /// what needs the record alive.
    #[inline]
    pub(super) fn from_raw(p: NonNull<u8>) -> RecordRef {
        RecordRef { head: p.cast() }
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        let layout = layout(self.key().len());
        // SAFETY: the entry is alive (not taken by `into_entry`, which forgets the record) and
        // is dropped once, then the block is freed with the layout it was made with.
        unsafe {
            std::ptr::drop_in_place(self.head.as_ptr());
            std::alloc::dealloc(self.head.as_ptr().cast::<u8>(), layout);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Value;

    fn value(v: &[u8]) -> Value {
        Value::Str(crate::types::compact::CompactBytes::new(v))
    }

    #[test]
    fn keys_of_every_length_form_round_trip() {
        for len in [0usize, 1, 12, 254, 255, 256, 70_000] {
            let key: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let r = Record::new(&key, value(b"value"), 7, 42);
            assert_eq!(r.key(), &key[..]);
            assert_eq!(r.entry().access(), 42);
            let p = r.as_ref();
            // SAFETY: `r` is alive and not mutably borrowed for these calls.
            unsafe {
                assert_eq!(p.key(), &key[..]);
                p.entry_mut().set_access(0x00ab_cdef);
                assert_eq!(p.entry().access(), 0x00ab_cdef);
                // Out-of-range access bits are dropped, never spilled into the length tag.
                p.entry_mut().set_access(u32::MAX);
                assert_eq!(p.entry().access(), ACCESS_MASK);
            }
            assert_eq!(r.key(), &key[..], "entry writes leave the key alone");
            // Handed to a table and taken back, the record is the same.
            let q = r.into_ref();
            assert_eq!(RecordRef::from_raw(q.raw()).raw(), q.raw());
            // SAFETY: `q` came from into_ref just above and is taken back once.
            let r = unsafe { Record::from_ref(q) };
            assert_eq!(r.key(), &key[..]);
            let e = r.into_entry();
            assert_eq!(e.vol, 7);
            assert!(matches!(&e.value, Value::Str(s) if &s[..] == b"value"));
        }
    }

    #[test]
    fn values_are_dropped_once() {
        // A heap value is released by the record's drop, and by the entry's drop after
        // into_entry, and not before: its owner's drops are counted.
        use std::sync::atomic::{AtomicUsize, Ordering};
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        struct Owner(Vec<u8>);
        impl AsRef<[u8]> for Owner {
            fn as_ref(&self) -> &[u8] {
                &self.0
            }
        }
        impl Drop for Owner {
            fn drop(&mut self) {
                DROPS.fetch_add(1, Ordering::SeqCst);
            }
        }
        let heap_value = || {
            let bytes = bytes::Bytes::from_owner(Owner(vec![b'x'; 300]));
            Value::Str(crate::types::compact::CompactBytes::from_bytes(bytes))
        };
        let r = Record::new(b"k", heap_value(), 0, 0);
        assert_eq!(DROPS.load(Ordering::SeqCst), 0);
        drop(r);
        assert_eq!(DROPS.load(Ordering::SeqCst), 1);
        let e = Record::new(b"k", heap_value(), 0, 0).into_entry();
        assert_eq!(
            DROPS.load(Ordering::SeqCst),
            1,
            "taking the entry out keeps the value"
        );
        drop(e);
        assert_eq!(DROPS.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_short_key_and_string_fit_jemallocs_64_byte_class() {
        assert_eq!(ENTRY_BYTES, 48);
        assert_eq!(Record::alloc_bytes(12), 64);
        assert_eq!(Record::alloc_bytes(16), 64);
        assert_eq!(Record::alloc_bytes(17), 80);
    }
}
