//! A cache of freed host buffers, reused by the next buffer of the same size.
//!
//! Every kernel output of [`MIN_BYTES`] to [`MAX_BYTES`] is allocated in whole [`PAGE`]s and, when its
//! [`Buffer`](super::buffer::Buffer) drops, goes to a free list of its size (and alignment)
//! instead of back to the global allocator; the next request of that size takes it from there.
//! A training loop allocates the same sizes at every step, so after the first step its buffers
//! come from the cache.
//!
//! Why: with the global allocator, where a buffer's memory comes from depends on the thread
//! that allocates and frees it (glibc keeps an arena per thread, returns the top of an arena to
//! the system when it frees there, and maps large blocks afresh each time). Evaluation moves
//! between the calling thread and the kernel pool's workers, so the same workload faulted in
//! fresh pages at every step on one thread and not on another, and its resident memory moved by
//! megabytes from step to step. The cache makes a buffer's cost independent of the thread: a hit
//! is a lock and a pop, its pages are already resident.
//!
//! The cache holds at most [`cache_limit`] bytes (default: an eighth of [`memory_limit`], at
//! most 1 GiB); a buffer that would exceed it frees the least recently used sizes first.
//! [`clear`] frees everything cached (also done before an allocation the global allocator
//! refuses is retried, so memory held here never causes an out-of-memory error).
use super::buffer::memory_limit;
use std::alloc::Layout;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Buffers smaller than this are left to the global allocator (its per-thread caches are fast
/// for them, and they are not what moves resident memory).
pub(crate) const MIN_BYTES: usize = 4 << 10;
/// Buffers larger than this are left to the global allocator too: glibc maps them afresh
/// (their page faults are small next to the work on them), and cached ones raised the peak
/// memory of a checkpointed gradient of 4 MiB activations by 16 % (freed blocks waiting for a
/// request of their size while other sizes were allocated).
pub(crate) const MAX_BYTES: usize = 1 << 20;
/// Cached buffers are whole multiples of this many bytes (a multiple of every element size), so
/// that nearby sizes share a free list.
pub(crate) const PAGE: usize = 4 << 10;

/// The cached size of a request of `bytes` bytes: whole pages from [`MIN_BYTES`] to
/// [`MAX_BYTES`], else `None` (not cached).
#[inline(always)]
pub(crate) fn bucket(bytes: usize) -> Option<usize> {
    if !(MIN_BYTES..=MAX_BYTES).contains(&bytes) {
        return None;
    }
    bytes.checked_next_multiple_of(PAGE)
}

/// One free list: blocks of one size and alignment, and when it was last used.
struct FreeList {
    blocks: Vec<Block>,
    last_use: u64,
}

/// A cached block. It owns its memory (allocated by the global allocator with the layout of
/// its key); nothing else refers to it.
struct Block(NonNull<u8>);
// SAFETY: a `Block` is an owned, unaliased allocation (see above); moving it between threads
// moves that ownership.
unsafe impl Send for Block {}

#[derive(Default)]
struct Lists {
    /// Free lists by (bytes, alignment).
    free: HashMap<(usize, usize), FreeList>,
    /// Bytes held in `free`.
    bytes: usize,
    /// Advances at every push and pop (the "time" of `FreeList::last_use`).
    clock: u64,
}

static LISTS: Mutex<Option<Lists>> = Mutex::new(None);
/// The cache limit in bytes; `usize::MAX` means "not set yet" (the default applies).
static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

fn lists() -> MutexGuard<'static, Option<Lists>> {
    // A panic while holding the lock cannot leave the lists inconsistent (every update is a
    // push or pop plus a counter), so a poisoned lock is taken over.
    LISTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The most bytes the host buffer cache holds (see the module docs).
pub fn cache_limit() -> usize {
    match LIMIT.load(Ordering::Relaxed) {
        usize::MAX => (memory_limit() / 8).min(1 << 30),
        l => l,
    }
}

/// Sets [`cache_limit`] and returns the previous limit; a lower limit frees cached buffers
/// down to it now. 0 turns the cache off.
pub fn set_cache_limit(bytes: usize) -> usize {
    let previous = cache_limit();
    LIMIT.store(bytes.min(usize::MAX - 1), Ordering::Relaxed);
    let evicted = {
        let mut guard = lists();
        match guard.as_mut() {
            Some(l) => l.evict_until(bytes, 0),
            None => Vec::new(),
        }
    };
    free_blocks(evicted);
    previous
}

/// Bytes held in the cache now.
pub fn cached_bytes() -> usize {
    lists().as_ref().map_or(0, |l| l.bytes)
}

/// Frees every cached buffer.
pub fn clear() {
    let all: Vec<_> = {
        let mut guard = lists();
        match guard.as_mut() {
            Some(l) => {
                l.bytes = 0;
                l.free.drain().flat_map(|(key, list)| list.blocks.into_iter().map(move |b| (key, b))).collect()
            }
            None => Vec::new(),
        }
    };
    free_blocks(all);
}

impl Lists {
    /// Removes least recently used free lists' blocks until at most `limit - incoming` bytes
    /// remain; returns them to be freed outside the lock.
    fn evict_until(&mut self, limit: usize, incoming: usize) -> Vec<((usize, usize), Block)> {
        let mut out = Vec::new();
        while self.bytes + incoming > limit && self.bytes > 0 {
            let Some((&key, _)) =
                self.free.iter().filter(|(_, l)| !l.blocks.is_empty()).min_by_key(|(_, l)| l.last_use)
            else {
                break;
            };
            let list = self.free.remove(&key).expect("the key just found");
            self.bytes -= key.0 * list.blocks.len();
            out.extend(list.blocks.into_iter().map(|b| (key, b)));
        }
        out
    }
}

fn free_blocks(blocks: Vec<((usize, usize), Block)>) {
    for ((bytes, align), Block(ptr)) in blocks {
        // SAFETY: the block was allocated by the global allocator with exactly this size and
        // alignment (its key, from the `Vec` that owned it: see `give`), is owned by the cache
        // alone, and was removed from the lists above, so it is freed once.
        unsafe { std::alloc::dealloc(ptr.as_ptr(), Layout::from_size_align_unchecked(bytes, align)) }
    }
}

/// A cached vector with room for exactly `bucket / size_of::<T>()` elements, where `bucket` is
/// [`bucket`] of the request, or `None` (a miss: allocate it).
pub(crate) fn take<T>(bucket: usize) -> Option<Vec<T>> {
    let size = std::mem::size_of::<T>();
    if size == 0 || !bucket.is_multiple_of(size) {
        return None;
    }
    let key = (bucket, std::mem::align_of::<T>());
    let block = {
        let mut guard = lists();
        let lists = guard.as_mut()?;
        lists.clock += 1;
        let clock = lists.clock;
        let list = lists.free.get_mut(&key)?;
        let block = list.blocks.pop()?;
        list.last_use = clock;
        lists.bytes -= bucket;
        block
    };
    // SAFETY: the block was allocated by the global allocator with size `bucket` and alignment
    // `align_of::<T>()` (its key), which is the layout of `Vec<T>` with capacity
    // `bucket / size_of::<T>()` (exact: `bucket` is a multiple of the size). Length 0: nothing in
    // it is read as a `T` before the caller writes it. The cache gave up its only handle.
    Some(unsafe { Vec::from_raw_parts(block.0.as_ptr() as *mut T, 0, bucket / size) })
}

/// Takes `v`'s memory into the cache if its capacity is a cached size and the cache has room
/// (after evicting older sizes); otherwise drops it. Elements of `T` need no drop (every
/// buffer element is `Copy`).
#[inline]
pub(crate) fn give<T: Copy>(v: Vec<T>) {
    let bytes = v.capacity() * std::mem::size_of::<T>();
    if bucket(bytes) == Some(bytes) {
        keep(v, bytes);
    }
}

/// [`give`] for a vector of a cached size (`bytes` of capacity).
fn keep<T: Copy>(v: Vec<T>, bytes: usize) {
    let limit = cache_limit();
    if bytes > limit {
        return;
    }
    let key = (bytes, std::mem::align_of::<T>());
    let mut v = std::mem::ManuallyDrop::new(v);
    // SAFETY: a vector with non-zero capacity of a sized type owns a non-null allocation.
    let block = Block(unsafe { NonNull::new_unchecked(v.as_mut_ptr() as *mut u8) });
    let evicted = {
        let mut guard = lists();
        let lists = guard.get_or_insert_with(Lists::default);
        let evicted = lists.evict_until(limit, bytes);
        lists.clock += 1;
        let clock = lists.clock;
        let list = lists.free.entry(key).or_insert(FreeList { blocks: Vec::new(), last_use: clock });
        list.blocks.push(block);
        list.last_use = clock;
        lists.bytes += bytes;
        evicted
    };
    free_blocks(evicted);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_whole_pages_from_the_minimum() {
        assert_eq!(bucket(MIN_BYTES - 1), None);
        assert_eq!(bucket(MIN_BYTES), Some(MIN_BYTES));
        assert_eq!(bucket(MIN_BYTES + 1), Some(MIN_BYTES + PAGE));
        assert_eq!(bucket(MAX_BYTES), Some(MAX_BYTES));
        assert_eq!(bucket(MAX_BYTES + 1), None);
        assert_eq!(bucket(usize::MAX), None);
    }
}
