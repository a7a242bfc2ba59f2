//! The memory behind large numpy outputs: page-aligned blocks with huge pages
//! asked for, and a small process-wide pool of freed ones, so that a steady
//! stream of calls writes into pages already faulted in ([`take_output`],
//! [`give_back`]).

use std::ptr::NonNull;
use std::sync::Mutex;

use crate::buffers::HUGE_PAGE;

/// Outputs at least this large come from (and go back to) the pool; smaller
/// ones are left to numpy's allocator, whose heap keeps them warm already
/// (glibc serves blocks up to 32 MiB from its heap once one has been freed).
pub(super) const POOL_MIN_BYTES: usize = 16 << 20;

/// Most freed outputs the pool keeps, and their most bytes in all: the
/// memory a process holds past its calls is at most this.
const POOL_MAX_BUFFERS: usize = 2;
const POOL_MAX_BYTES: usize = 512 << 20;

/// A page-aligned block of memory, its length a multiple of [`HUGE_PAGE`], with
/// huge pages asked for. Its contents are unspecified (zero when new, a
/// previous output's values when pooled): a user writes every byte it reads.
/// Nothing here touches it (with the GIL held, a fresh block's page faults
/// would stop every Python thread): the core poisons an output it is handed,
/// in the poison mode, once the GIL is released (`pipeline::run_planned`).
#[derive(Debug)]
pub(super) struct OutputMemory {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: `OutputMemory` owns its block outright (no aliasing pointer is kept
// anywhere else), like a `Box<[u8]>`.
unsafe impl Send for OutputMemory {}
// SAFETY: as for `Send`; `&OutputMemory` gives out only the address.
unsafe impl Sync for OutputMemory {}

impl OutputMemory {
    /// A new block of at least `bytes` (rounded up to whole huge pages), or
    /// `None` when the system has no memory for it.
    fn new(bytes: usize) -> Option<Self> {
        let len = bytes.max(1).checked_next_multiple_of(HUGE_PAGE)?;
        #[cfg(target_os = "linux")]
        {
            // Map one huge page more, then unmap the misaligned head and the
            // tail, so that the block starts on a huge-page boundary.
            let map = len.checked_add(HUGE_PAGE)?;
            // SAFETY: an anonymous private mapping at an address of the
            // kernel's choice: no existing memory is affected.
            let raw = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    map,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if raw == libc::MAP_FAILED {
                return None;
            }
            let raw = raw.cast::<u8>();
            let head = raw.align_offset(HUGE_PAGE);
            // SAFETY: the mapping is `map` bytes from `raw`, page-aligned, and
            // `head` is a multiple of the page size below `HUGE_PAGE`; the two
            // ranges unmapped here are its parts outside `[head, head + len)`,
            // which nothing refers to. The advice is on the kept range.
            unsafe {
                if head > 0 {
                    libc::munmap(raw.cast(), head);
                }
                let tail = map - head - len;
                if tail > 0 {
                    libc::munmap(raw.add(head + len).cast(), tail);
                }
                libc::madvise(raw.add(head).cast(), len, libc::MADV_HUGEPAGE);
            }
            // SAFETY: `raw` is non-null (not MAP_FAILED), so is `raw + head`.
            let ptr = unsafe { NonNull::new_unchecked(raw.add(head)) };
            Some(Self { ptr, len })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let layout = std::alloc::Layout::from_size_align(len, 4096).ok()?;
            // SAFETY: `layout` has a non-zero size.
            let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })?;
            Some(Self { ptr, len })
        }
    }

    /// Bytes of the block.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The block's first byte (page-aligned, so aligned for every element type).
    pub(super) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for OutputMemory {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        // SAFETY: the block was mapped by `new` with exactly this address and
        // length, and is owned by `self` alone.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
        #[cfg(not(target_os = "linux"))]
        // SAFETY: allocated in `new` with this layout (already validated there).
        unsafe {
            let layout = std::alloc::Layout::from_size_align_unchecked(self.len, 4096);
            std::alloc::dealloc(self.ptr.as_ptr(), layout);
        }
    }
}

/// Freed output memory, least recently freed first.
static POOL: Mutex<Vec<OutputMemory>> = Mutex::new(Vec::new());

/// Whether a pooled block of `len` bytes serves an output of `bytes`: large
/// enough, and at most half as large again (so a big block is not held by a
/// small output).
fn fits(len: usize, bytes: usize) -> bool {
    len >= bytes && len - bytes <= bytes / 2
}

/// Memory for an output of `bytes` (at least [`POOL_MIN_BYTES`] to be served
/// from the pool): the smallest pooled block that [`fits`], else a new one.
/// `None` when a new block cannot be mapped.
///
/// The pool is only ever tried (`try_lock`), never waited for: a lock held by
/// a thread that no longer exists after a `fork` leaves the child allocating
/// new blocks, never deadlocked.
pub(super) fn take_output(bytes: usize) -> Option<OutputMemory> {
    let pooled = (bytes >= POOL_MIN_BYTES)
        .then(|| POOL.try_lock().ok())
        .flatten()
        .and_then(|mut pool| {
            let best = pool
                .iter()
                .enumerate()
                .filter(|(_, m)| fits(m.len, bytes))
                .min_by_key(|(_, m)| m.len)
                .map(|(i, _)| i)?;
            Some(pool.remove(best))
        });
    pooled.or_else(|| OutputMemory::new(bytes))
}

/// Return an output's memory once nothing refers to it any more: kept for a
/// later [`take_output`] when it is large enough, dropping the least recently
/// freed blocks beyond [`POOL_MAX_BUFFERS`] or [`POOL_MAX_BYTES`]; else unmapped.
pub(super) fn give_back(memory: OutputMemory) {
    if memory.len < POOL_MIN_BYTES || memory.len > POOL_MAX_BYTES {
        return;
    }
    let Ok(mut pool) = POOL.try_lock() else {
        return;
    };
    pool.push(memory);
    let mut evicted = Vec::new();
    while pool.len() > POOL_MAX_BUFFERS
        || pool.iter().map(OutputMemory::len).sum::<usize>() > POOL_MAX_BYTES
    {
        evicted.push(pool.remove(0));
    }
    drop(pool);
    // Unmapped outside the lock.
    drop(evicted);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a failure is the test's panic
mod tests {
    use super::*;

    #[test]
    fn output_memory_is_aligned_writable_and_pooled() {
        let bytes = POOL_MIN_BYTES + 12345;
        let first = take_output(bytes).unwrap();
        assert_eq!(first.len() % HUGE_PAGE, 0);
        assert!(first.len() >= bytes);
        assert_eq!(first.as_ptr().align_offset(HUGE_PAGE), 0);
        // SAFETY: the block is `len` bytes, owned here.
        let data = unsafe { std::slice::from_raw_parts_mut(first.as_ptr(), first.len()) };
        data.fill(7);
        assert!(data.iter().all(|&b| b == 7));
        let address = first.as_ptr();
        give_back(first);
        // Other tests may take it first; when this one does, it is the same block.
        let again = take_output(bytes).unwrap();
        if again.as_ptr() == address {
            // SAFETY: as above.
            let data = unsafe { std::slice::from_raw_parts(again.as_ptr(), again.len()) };
            assert_eq!(data[bytes - 1], 7);
        }
        // A block twice too large is not used for a small output.
        assert!(!fits(4 * POOL_MIN_BYTES, POOL_MIN_BYTES));
        assert!(fits(POOL_MIN_BYTES + POOL_MIN_BYTES / 2, POOL_MIN_BYTES));
        give_back(again);
        assert!(POOL.lock().unwrap().len() <= POOL_MAX_BUFFERS);
    }
}
