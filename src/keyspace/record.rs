//! `Record`: one key of the keyspace and its entry, in a single allocation sized to the key
//! and, for a short string, to its value.
//!
//! A shard's one table (`keyspace/table.rs`) holds an 8-byte pointer per key in 64-byte
//! buckets; the key's bytes and its entry live here, once, in one of two forms:
//!
//! ```text
//! full:   [ Header (vol, meta) | Value (24 bytes) | (long keys: u64 length) | key bytes ]
//! packed: [ Header (vol, meta) | value length: u8 | key bytes | value bytes ]
//! ```
//!
//! Both start with the same 8-byte [`Header`]: `vol` (the key's place in its shard's TTL list)
//! and `meta`, whose low 24 bits are the access clock and whose top byte says which form this
//! is and how long the key is:
//! - 0..=127: full, a key of that many bytes;
//! - 128..=254: packed, a key of `tag - 128` bytes (at most 126);
//! - 255: full, a longer key whose length follows the value as a u64.
//!
//! The packed form is for the commonest small key of all, a string of up to
//! [`PACKED_VALUE_MAX`] bytes (a counter, a flag, a short cached value): a 12-byte key and a
//! 10-byte value make a 31-byte record, jemalloc's 32-byte class, where the full form takes 48
//! (Redis 7.0 spends a 24-byte dictEntry, a 16-byte robj and the key's sds on the same). A
//! full record is 32 bytes of entry and the key: jemalloc's 48-byte class up to a 16-byte key,
//! which is what a small hash, set, list or sorted set of a short key costs besides its one
//! array. A
//! packed record holds no [`Value`]: readers get the entry as an [`EntryRef`], made on the
//! stack (the value fits `CompactBytes`' inline form, so no allocation), and a writer has its
//! shard turn the record into the full form first (`Shard::unpack`), which the shard packs
//! again when the command that changed it lets go of the shard (`Shard::settle`).
//! (A key's expiry is kept by its shard, beside the list of keys with a TTL.)
//!
//! The table owns each record: it holds the record's pointer as a [`RecordRef`] (made by
//! [`Record::into_ref`], turned back into the owning [`Record`] by [`Record::from_ref`] when the
//! key leaves the table or the table is dropped), and the shard's list of keys with a TTL
//! holds copies of the same pointers. The shard keeps the rule that makes those copies safe to
//! follow: a record leaves the TTL list before it is freed, and a record replaced by another
//! (packed or unpacked) has its pointer replaced everywhere first.
//!
//! The layout is Podium's own, so this and the table are the places in the keyspace with
//! `unsafe`: every block says why it holds, and `tests` exercise keys of every length form,
//! both forms, drops, and taking the entry out.

use super::{Entry, Header};
use crate::alloc::defrag::Relocator;
use crate::types::compact::{CompactBytes, INLINE_MAX};
use crate::types::Value;
use std::alloc::Layout;
use std::ptr::NonNull;

/// The tag of a full record whose key length follows as a u64.
const LONG_KEY: u32 = 0xff;
/// Tags from here (up to LONG_KEY, excluded) are packed records; below, full ones.
const PACKED_TAG: u32 = 0x80;
/// Longest key a full record keeps without the u64 length.
const SHORT_KEY_MAX: usize = PACKED_TAG as usize - 1;
/// Longest key a packed record holds.
const PACKED_KEY_MAX: usize = (LONG_KEY - 1 - PACKED_TAG) as usize;
/// Longest string value a packed record holds: what `CompactBytes` keeps inline, so reading
/// one back never allocates.
pub const PACKED_VALUE_MAX: usize = INLINE_MAX;
/// Bytes of the entry at the head of a full record (a multiple of its alignment).
const ENTRY_BYTES: usize = std::mem::size_of::<Entry>();
/// Bytes of the header both forms start with.
const HEADER_BYTES: usize = std::mem::size_of::<Header>();
/// Where a full record's long key length, or its short key's bytes, start.
const TAIL_AT: usize = ENTRY_BYTES;
/// Where a packed record's key starts (after the header and the value's length byte).
const PACKED_KEY_AT: usize = HEADER_BYTES + 1;
/// `Header::meta` bits that hold the access clock; the byte above holds the form/length tag.
pub(super) const ACCESS_MASK: u32 = 0x00ff_ffff;
/// Records are aligned as the entry is, whichever form they have.
const ALIGN: usize = std::mem::align_of::<Entry>();

/// One key and its entry, owned (see the module's description).
pub struct Record {
    /// Points at the header at the start of the block.
    head: NonNull<Header>,
}

/// A non-owning copy of a [`Record`]'s pointer, as the shard's table and TTL list keep it.
/// Following it is `unsafe`: the caller promises the record is still owned by its shard.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RecordRef {
    head: NonNull<Header>,
}

/// An entry as a reader sees it: the one stored in a full record, or one made from a packed
/// record's bytes.
pub enum EntryRef<'a> {
    Stored(&'a Entry),
    Made(Entry),
}

impl std::ops::Deref for EntryRef<'_> {
    type Target = Entry;
    #[inline]
    fn deref(&self) -> &Entry {
        match self {
            EntryRef::Stored(e) => e,
            EntryRef::Made(e) => e,
        }
    }
}

// SAFETY: a Record owns its block outright, like a Box<Entry> with a trailer of plain bytes
// (or a block of plain bytes only, packed), and Entry is Send and Sync; so moving or sharing a
// Record across threads is exactly as safe as moving or sharing a Box<Entry>.
unsafe impl Send for Record {}
// SAFETY: see Send: `&Record` only gives out `&Entry`, `&[u8]` and copies.
unsafe impl Sync for Record {}
// SAFETY: a RecordRef lives only in the table and TTL list of the shard that owns its record
// and is only followed through that shard (under `&Shard` for reads, `&mut Shard` for writes), so it
// crosses threads exactly when the shard does, under the shard's mutex.
unsafe impl Send for RecordRef {}
// SAFETY: see Send.
unsafe impl Sync for RecordRef {}

const _: () = assert!(ENTRY_BYTES.is_multiple_of(ALIGN));
const _: () = assert!(std::mem::offset_of!(Entry, hdr) == 0);
const _: () = assert!(PACKED_KEY_MAX == 126 && SHORT_KEY_MAX == 127);

/// Rounded up to 16 bytes, the spacing of jemalloc's size classes up to 128 bytes: the block
/// is then exactly what jemalloc hands out for the usual record, so `used_memory` (which
/// counts requested bytes) agrees with MEMORY USAGE (which counts size classes).
fn block_layout(bytes: usize) -> Layout {
    // A key is at most a bulk string, far below isize::MAX; this cannot fail for one.
    Layout::from_size_align(bytes.next_multiple_of(16), ALIGN)
        .unwrap_or_else(|_| panic!("keyspace record of {bytes} bytes"))
}

fn full_layout(key_len: usize) -> Layout {
    let long = if key_len <= SHORT_KEY_MAX { 0 } else { 8 };
    block_layout(TAIL_AT + long + key_len)
}

fn packed_layout(key_len: usize, value_len: usize) -> Layout {
    block_layout(PACKED_KEY_AT + key_len + value_len)
}

/// The string a packed record would hold for `value`, if it fits one with `key`.
fn packable<'v>(key: &[u8], value: &'v Value) -> Option<&'v [u8]> {
    match value {
        Value::Str(s) if s.len() <= PACKED_VALUE_MAX && key.len() <= PACKED_KEY_MAX => Some(s),
        _ => None,
    }
}

/// The form/length tag of the record at `head`.
///
/// # Safety
/// `head` must point at a live record.
#[inline]
unsafe fn tag_at(head: NonNull<Header>) -> u32 {
    // SAFETY: per the contract; the tag byte is written in `new` and never changed (set_access
    // keeps it).
    unsafe { (*head.as_ptr()).meta >> 24 }
}

/// The key of the record at `head`.
///
/// # Safety
/// `head` must point at a live record (made by [`Record::new`], not yet freed), and the
/// returned slice must not outlive it.
#[inline]
unsafe fn key_at<'a>(head: NonNull<Header>) -> &'a [u8] {
    // SAFETY: per the contract the block is live; its tag says which form it has, and the
    // bytes it describes were written in `new`, inside the block.
    unsafe {
        let tag = tag_at(head);
        let block = head.as_ptr().cast::<u8>();
        if tag < PACKED_TAG {
            std::slice::from_raw_parts(block.add(TAIL_AT), tag as usize)
        } else if tag != LONG_KEY {
            std::slice::from_raw_parts(block.add(PACKED_KEY_AT), (tag - PACKED_TAG) as usize)
        } else {
            let mut len = [0u8; 8];
            std::ptr::copy_nonoverlapping(block.add(TAIL_AT), len.as_mut_ptr(), 8);
            std::slice::from_raw_parts(block.add(TAIL_AT + 8), u64::from_le_bytes(len) as usize)
        }
    }
}

/// The string value of the packed record at `head`.
///
/// # Safety
/// As [`key_at`], and the record must be packed.
#[inline]
unsafe fn packed_value_at<'a>(head: NonNull<Header>) -> &'a [u8] {
    // SAFETY: per the contract the block is a live packed record: its length byte follows the
    // header and its value follows the key, inside the block.
    unsafe {
        let block = head.as_ptr().cast::<u8>();
        let len = *block.add(HEADER_BYTES) as usize;
        let key_len = (tag_at(head) - PACKED_TAG) as usize;
        std::slice::from_raw_parts(block.add(PACKED_KEY_AT + key_len), len)
    }
}

/// The layout the record at `head` was allocated with.
///
/// # Safety
/// As [`key_at`].
unsafe fn layout_at(head: NonNull<Header>) -> Layout {
    // SAFETY: forwarded to the caller's contract.
    unsafe {
        let key = key_at(head);
        if is_packed_at(head) {
            packed_layout(key.len(), packed_value_at(head).len())
        } else {
            full_layout(key.len())
        }
    }
}

/// # Safety
/// As [`key_at`].
#[inline]
unsafe fn is_packed_at(head: NonNull<Header>) -> bool {
    // SAFETY: forwarded to the caller's contract.
    let tag = unsafe { tag_at(head) };
    (PACKED_TAG..LONG_KEY).contains(&tag)
}

impl Record {
    /// A record for `key` holding `value`: packed when `value` is a string short enough (see
    /// the module's description), full otherwise.
    pub fn new(key: &[u8], value: Value, vol: u32, access: u32) -> Record {
        if let Some(s) = packable(key, &value) {
            return Record::new_packed(key, s, vol, access);
        }
        Record::new_full(key, value, vol, access)
    }

    /// A full record, whatever the value.
    fn new_full(key: &[u8], value: Value, vol: u32, access: u32) -> Record {
        let layout = full_layout(key.len());
        let tag = if key.len() <= SHORT_KEY_MAX {
            key.len() as u32
        } else {
            LONG_KEY
        };
        let entry = Entry {
            hdr: Header {
                vol,
                meta: (tag << 24) | (access & ACCESS_MASK),
            },
            value,
        };
        // SAFETY: the layout's size is at least TAIL_AT, never zero.
        let block = unsafe { std::alloc::alloc(layout) };
        let Some(head) = NonNull::new(block.cast::<Header>()) else {
            std::alloc::handle_alloc_error(layout)
        };
        // SAFETY: `block` is a fresh allocation of `layout`: ENTRY_BYTES at the entry's
        // alignment for the entry, then (for a long key) 8 length bytes and the key, which the
        // writes below fill exactly (byte copies, no alignment needed).
        unsafe {
            block.cast::<Entry>().write(entry);
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

    /// A packed record; `key` and `value` fit one (see [`packable`]).
    fn new_packed(key: &[u8], value: &[u8], vol: u32, access: u32) -> Record {
        debug_assert!(key.len() <= PACKED_KEY_MAX && value.len() <= PACKED_VALUE_MAX);
        let layout = packed_layout(key.len(), value.len());
        let tag = PACKED_TAG + key.len() as u32;
        // SAFETY: the layout's size is at least PACKED_KEY_AT, never zero.
        let block = unsafe { std::alloc::alloc(layout) };
        let Some(head) = NonNull::new(block.cast::<Header>()) else {
            std::alloc::handle_alloc_error(layout)
        };
        // SAFETY: `block` is a fresh allocation of `layout`, aligned for the header: the header,
        // the value's length byte, the key and the value fill it exactly (up to the rounding).
        unsafe {
            head.as_ptr().write(Header {
                vol,
                meta: (tag << 24) | (access & ACCESS_MASK),
            });
            *block.add(HEADER_BYTES) = value.len() as u8;
            std::ptr::copy_nonoverlapping(key.as_ptr(), block.add(PACKED_KEY_AT), key.len());
            std::ptr::copy_nonoverlapping(
                value.as_ptr(),
                block.add(PACKED_KEY_AT + key.len()),
                value.len(),
            );
        }
        Record { head }
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
    pub fn key(&self) -> &[u8] {
        // SAFETY: the record is alive for as long as self is borrowed.
        unsafe { key_at(self.head) }
    }

    /// Bytes jemalloc hands out for this record (MEMORY USAGE).
    pub fn alloc_bytes(&self) -> usize {
        // SAFETY: the record is alive for as long as self is borrowed.
        unsafe { self.as_ref().alloc_bytes() }
    }

    /// Free the record, keeping its entry.
    pub fn into_entry(self) -> Entry {
        let head = self.head;
        std::mem::forget(self);
        // SAFETY: the record is live and owned here. A full record's entry is read out
        // exactly once (the record is forgotten, so its drop does not drop it again); a packed
        // one's is made from its bytes before the block is freed with its layout.
        unsafe {
            let layout = layout_at(head);
            let entry = if is_packed_at(head) {
                made_entry(head)
            } else {
                head.as_ptr().cast::<Entry>().read()
            };
            std::alloc::dealloc(head.as_ptr().cast::<u8>(), layout);
            entry
        }
    }
}

/// The entry a packed record stands for, made from its bytes.
///
/// # Safety
/// As [`packed_value_at`].
unsafe fn made_entry(head: NonNull<Header>) -> Entry {
    // SAFETY: forwarded to the caller's contract.
    unsafe {
        Entry {
            hdr: *head.as_ptr(),
            value: Value::Str(CompactBytes::new(packed_value_at(head))),
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

    /// True for a packed record (see the module's description).
    ///
    /// # Safety
    /// As [`RecordRef::key`].
    #[inline]
    pub unsafe fn is_packed(self) -> bool {
        // SAFETY: forwarded to the caller's contract.
        unsafe { is_packed_at(self.head) }
    }

    /// The entry, as a reader sees it: the stored one, or one made from a packed record.
    ///
    /// # Safety
    /// As [`RecordRef::key`].
    #[inline]
    pub unsafe fn entry<'a>(self) -> EntryRef<'a> {
        // SAFETY: forwarded to the caller's contract; a full record starts with its entry.
        unsafe {
            if is_packed_at(self.head) {
                EntryRef::Made(made_entry(self.head))
            } else {
                EntryRef::Stored(&*self.head.as_ptr().cast::<Entry>())
            }
        }
    }

    /// The entry a packed record stands for, made from its bytes.
    ///
    /// # Safety
    /// As [`RecordRef::key`], and the record must be packed.
    #[inline]
    pub unsafe fn made_entry(self) -> Entry {
        // SAFETY: forwarded to the caller's contract.
        unsafe { made_entry(self.head) }
    }

    /// The string a packed record holds.
    ///
    /// # Safety
    /// As [`RecordRef::key`], and the record must be packed.
    #[inline]
    pub unsafe fn packed_value<'a>(self) -> &'a [u8] {
        // SAFETY: forwarded to the caller's contract.
        unsafe { packed_value_at(self.head) }
    }

    /// Rewrite a packed record's string with `v` in its block, if the block is the size a
    /// record of `v` would have; false (nothing changed) otherwise.
    ///
    /// # Safety
    /// As [`RecordRef::full_entry_mut`], and the record must be packed.
    pub unsafe fn rewrite_packed_in_place(self, v: &[u8]) -> bool {
        // SAFETY: forwarded to the caller's contract: a live packed record, referenced only
        // here; the new value is written inside the block its layout says it has.
        unsafe {
            let key_len = key_at(self.head).len();
            let now = packed_layout(key_len, packed_value_at(self.head).len());
            if v.len() > PACKED_VALUE_MAX || packed_layout(key_len, v.len()) != now {
                return false;
            }
            let block = self.head.as_ptr().cast::<u8>();
            *block.add(HEADER_BYTES) = v.len() as u8;
            std::ptr::copy_nonoverlapping(v.as_ptr(), block.add(PACKED_KEY_AT + key_len), v.len());
            true
        }
    }

    /// The stored entry of a full record; None for a packed one.
    ///
    /// # Safety
    /// The record must be alive for `'a`, and no other reference to it may be used during
    /// `'a` (the caller holds its shard mutably).
    #[inline]
    pub unsafe fn full_entry_mut<'a>(self) -> Option<&'a mut Entry> {
        // SAFETY: forwarded to the caller's contract; a full record starts with its entry.
        unsafe {
            if is_packed_at(self.head) {
                None
            } else {
                Some(&mut *self.head.as_ptr().cast::<Entry>())
            }
        }
    }

    /// A copy of the header both forms start with.
    ///
    /// # Safety
    /// As [`RecordRef::key`].
    #[inline]
    pub unsafe fn header(self) -> Header {
        // SAFETY: forwarded to the caller's contract; every record starts with its header.
        unsafe { self.head.as_ptr().read() }
    }

    /// The header both forms start with.
    ///
    /// # Safety
    /// As [`RecordRef::full_entry_mut`].
    #[inline]
    pub unsafe fn header_mut<'a>(self) -> &'a mut Header {
        // SAFETY: forwarded to the caller's contract; every record starts with its header.
        unsafe { &mut *self.head.as_ptr() }
    }

    /// Bytes jemalloc hands out for this record.
    ///
    /// # Safety
    /// As [`RecordRef::key`].
    pub unsafe fn alloc_bytes(self) -> usize {
        // SAFETY: forwarded to the caller's contract.
        crate::alloc::size_class(unsafe { layout_at(self.head) }.size())
    }

    /// Move the record's block to a fuller slab if the relocator picks it (active defrag):
    /// its bytes are copied whole (the entry is moved, not cloned) and the old block freed.
    /// Returns the new pointer, which the caller puts in the place of every copy of this one.
    ///
    /// # Safety
    /// As [`RecordRef::full_entry_mut`]; and no copy of the old pointer may be followed after
    /// the call unless it returned None.
    pub unsafe fn relocate(self, r: &mut Relocator) -> Option<RecordRef> {
        // SAFETY: per the contract the record is live and referenced only here; its block is
        // the global allocator's, of the layout its bytes describe.
        unsafe {
            let layout = layout_at(self.head);
            r.relocate(self.head.cast(), layout)
                .map(|p| RecordRef { head: p.cast() })
        }
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

/// A packed copy of the full record `e` of `key` (the same value, TTL place and access word),
/// if its value is a string short enough; the original keeps its value.
pub(super) fn packed_copy(key: &[u8], e: &Entry) -> Option<Record> {
    let s = packable(key, &e.value)?;
    Some(Record::new_packed(
        key,
        s,
        e.hdr.vol,
        e.hdr.meta & ACCESS_MASK,
    ))
}

/// True when a record of `key` holding `value` is packed.
pub(super) fn could_pack(key: &[u8], value: &Value) -> bool {
    packable(key, value).is_some()
}

/// A full record of `key` holding `e` (an entry made from a packed record, to be changed).
pub(super) fn full_copy(key: &[u8], e: Entry) -> Record {
    Record::new_full(key, e.value, e.hdr.vol, e.hdr.meta & ACCESS_MASK)
}

impl Drop for Record {
    fn drop(&mut self) {
        // SAFETY: the record is alive and owned here; a full record's entry (not taken by
        // `into_entry`, which forgets the record) is dropped once, then the block is freed
        // with the layout it was made with.
        unsafe {
            let layout = layout_at(self.head);
            if !is_packed_at(self.head) {
                std::ptr::drop_in_place(self.head.as_ptr().cast::<Entry>());
            }
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
        // Both forms: a short string packs (keys up to 126 bytes), a longer one does not.
        let long_value = [b'v'; PACKED_VALUE_MAX + 1];
        for v in [&b"value"[..], &long_value[..]] {
            for len in [0usize, 1, 12, 126, 127, 128, 254, 255, 256, 70_000] {
                let key: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
                let r = Record::new(&key, value(v), 7, 42);
                let packed = v.len() <= PACKED_VALUE_MAX && len <= 126;
                let p = r.as_ref();
                // SAFETY: `r` is alive and not mutably borrowed for these calls.
                unsafe {
                    assert_eq!(p.is_packed(), packed, "key {len}, value {}", v.len());
                    assert_eq!(p.key(), &key[..]);
                    assert_eq!(p.entry().access(), 42);
                    p.header_mut().set_access(0x00ab_cdef);
                    assert_eq!(p.entry().access(), 0x00ab_cdef);
                    // Out-of-range access bits are dropped, never spilled into the tag.
                    p.header_mut().set_access(u32::MAX);
                    assert_eq!(p.entry().access(), ACCESS_MASK);
                    assert_eq!(p.is_packed(), packed);
                    assert!(matches!(&p.entry().value, Value::Str(s) if &s[..] == v));
                }
                assert_eq!(r.key(), &key[..], "header writes leave the key alone");
                let expect = if packed {
                    crate::alloc::size_class(9 + len + v.len())
                } else {
                    crate::alloc::size_class(32 + len + if len > 127 { 8 } else { 0 })
                };
                assert_eq!(r.alloc_bytes(), expect, "key {len}, value {}", v.len());
                // Handed to a table and taken back, the record is the same.
                let q = r.into_ref();
                assert_eq!(RecordRef::from_raw(q.raw()).raw(), q.raw());
                // SAFETY: `q` came from into_ref just above and is taken back once.
                let r = unsafe { Record::from_ref(q) };
                assert_eq!(r.key(), &key[..]);
                let e = r.into_entry();
                assert_eq!(e.hdr.vol, 7);
                assert_eq!(e.access(), ACCESS_MASK);
                assert!(matches!(&e.value, Value::Str(s) if &s[..] == v));
            }
        }
    }

    #[test]
    fn only_short_strings_with_short_keys_are_packed() {
        let packed = |key: &[u8], v: Value| {
            let r = Record::new(key, v, NO_VOL_FOR_TESTS, 0);
            // SAFETY: `r` is alive for the call.
            unsafe { r.as_ref().is_packed() }
        };
        assert!(packed(b"k", value(b"")));
        assert!(packed(b"k", value(&[b'x'; PACKED_VALUE_MAX])));
        assert!(!packed(b"k", value(&[b'x'; PACKED_VALUE_MAX + 1])));
        assert!(!packed(&[b'k'; 127], value(b"1")));
        assert!(!packed(b"k", Value::List(Default::default())));
    }

    const NO_VOL_FOR_TESTS: u32 = u32::MAX;

    #[test]
    fn packed_and_full_copies_keep_the_header() {
        let r = Record::new(b"counter:1", value(b"41"), 3, 77);
        // SAFETY: `r` is alive; the copies are made while it is, and own their own blocks.
        let full = unsafe { full_copy(r.key(), r.as_ref().made_entry()) };
        // SAFETY: `full` is alive for these calls and not borrowed elsewhere.
        unsafe {
            let f = full.as_ref();
            assert!(!f.is_packed());
            let e = f.full_entry_mut().expect("full");
            assert_eq!((e.hdr.vol, e.access()), (3, 77));
            e.value = value(b"42");
            let again = packed_copy(full.key(), e).expect("still short");
            assert!(again.as_ref().is_packed());
            assert_eq!(again.key(), b"counter:1");
            let e = again.into_entry();
            assert_eq!((e.hdr.vol, e.access()), (3, 77));
            assert!(matches!(&e.value, Value::Str(s) if &s[..] == b"42"));
            let e = f.full_entry_mut().expect("full");
            e.value = value(&[b'x'; 40]);
            assert!(
                packed_copy(full.key(), e).is_none(),
                "a long string stays full"
            );
        }
    }

    #[test]
    fn values_are_dropped_once() {
        // Heap values (a long string, a packed list, a boxed deque, a hash, a set) are
        // released by the record's drop, and by the entry's drop after into_entry, and not
        // before: the entry taken out still reads back whole. (A second free of a block
        // would abort the test process in the allocator.)
        let values = || {
            let mut list = crate::types::list::List::new();
            list.push_back(b"a");
            let mut deque = crate::types::list::List::new();
            deque.deque_mut().push_back(vec![b'd'; 100]);
            let mut hash = crate::types::hash::Hash::new();
            hash.set(b"f", b"v", &Default::default());
            let mut set = crate::types::set::Set::new_intset();
            set.add(b"7", 512);
            vec![
                value(&[b'x'; 300]),
                Value::List(list),
                Value::List(deque),
                Value::Hash(hash),
                Value::Set(set),
            ]
        };
        for v in values() {
            drop(Record::new(b"k", v, 0, 0));
        }
        for v in values() {
            let kind = v.type_name();
            let e = Record::new(&[b'k'; 200], v, 0, 0).into_entry();
            match &e.value {
                Value::Str(s) => assert_eq!(&s[..], &[b'x'; 300][..]),
                Value::List(l) => assert!(l.iter().next().is_some_and(|x| !x.is_empty())),
                Value::Hash(h) => assert_eq!(h.get(b"f"), Some(&b"v"[..])),
                Value::Set(s) => assert!(s.contains(b"7")),
                _ => unreachable!("{kind}"),
            }
            drop(e);
        }
    }

    #[test]
    fn a_short_key_and_string_fit_jemallocs_32_byte_class() {
        assert_eq!(ENTRY_BYTES, 32);
        // The usual cached string and counter: 9 bytes of header, key and value.
        assert_eq!(
            Record::new(b"key:00000001", value(b"v000000001"), 0, 0).alloc_bytes(),
            32
        );
        assert_eq!(
            Record::new(b"c:123456", value(b"123456"), 0, 0).alloc_bytes(),
            32
        );
        assert_eq!(
            Record::new(b"key:00000001", value(&[b'x'; 23]), 0, 0).alloc_bytes(),
            48
        );
        // A full record: 32 bytes of entry and the key; up to 16 bytes of key, jemalloc's
        // 48-byte class (every aggregate of a short key, and a long string).
        let list = || Value::List(Default::default());
        assert_eq!(Record::new(b"", list(), 0, 0).alloc_bytes(), 32);
        for len in 1..=16 {
            assert_eq!(
                Record::new(&vec![b'k'; len], list(), 0, 0).alloc_bytes(),
                48
            );
        }
        assert_eq!(Record::new(&[b'k'; 17], list(), 0, 0).alloc_bytes(), 64);
        assert_eq!(Record::new(&[b'k'; 32], list(), 0, 0).alloc_bytes(), 64);
        assert_eq!(Record::new(&[b'k'; 33], list(), 0, 0).alloc_bytes(), 80);
        assert_eq!(
            Record::new(b"user:123456", value(&[b'x'; 24]), 0, 0).alloc_bytes(),
            48
        );
    }
}
