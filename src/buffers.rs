//! Large buffers, where the first touch of fresh pages is the cost: huge-page
//! advice for big intermediates, buffers kept per thread from image to image,
//! and the poison mode of buffers whose contents are unspecified until written.
//!
//! A fresh anonymous page is zeroed by the kernel on its first write. For a
//! 150 MB output (8000x8000 under K3) that is about 25 ms of kernel time on one
//! core of the measurement machine, more and very unevenly so when both cores
//! fault together or the host is busy. Memory of 2 MiB and more asks for
//! transparent huge pages (`MADV_HUGEPAGE`; a no-op where THP is `never`,
//! implied where it is `always`), which cuts the faults 512-fold; a thread's
//! working buffers are kept for its next image ([`Scratch`]). (The Python
//! binding pools the memory of freed numpy outputs the same way.)

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

/// The byte every buffer of unspecified contents starts as while poison is on
/// ([`set_poison`]).
pub const POISON_BYTE: u8 = 0xA5;

static POISON: AtomicBool = AtomicBool::new(false);

/// Turn the poison mode on or off for the whole process; returns the previous
/// setting. For tests: while it is on, every buffer whose contents are
/// unspecified until written (a thread's `Scratch` buffers, new or reused,
/// the windows and working rows of the banded resize, the bands read from a
/// row source, new outputs, and, in the Python binding, output memory new or
/// pooled and an `out=` array) starts as [`POISON_BYTE`] bytes, so that
/// a byte read before it is written shows in the output. Buffers whose zeros
/// are read by design are zero either way. Off by default; costs one pass over
/// each such buffer while on.
pub fn set_poison(on: bool) -> bool {
    POISON.swap(on, Ordering::Relaxed)
}

/// Fill `data` with [`POISON_BYTE`] bytes when the poison mode is on.
pub(crate) fn poison<T: Zeroable>(data: &mut [T]) {
    if POISON.load(Ordering::Relaxed) {
        // SAFETY: `T` accepts every bit pattern (`Zeroable`), and the byte view
        // covers exactly `data`, which this call borrows mutably.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                data.as_mut_ptr().cast::<u8>(),
                std::mem::size_of_val(data),
            )
        };
        bytes.fill(POISON_BYTE);
    }
}

/// Bytes of an x86-64 / arm64 transparent huge page.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// Ask for transparent huge pages on the whole 2 MiB pages inside `data`,
/// before they are first touched (advice only: the contents are unchanged, and
/// any error, such as a kernel without THP, is ignored). Does nothing on other
/// systems than Linux.
pub(crate) fn advise_huge_pages<T>(data: &mut [T]) {
    #[cfg(target_os = "linux")]
    {
        let start = data.as_mut_ptr().cast::<u8>();
        let bytes = std::mem::size_of_val(data);
        let head = start.align_offset(HUGE_PAGE);
        if head >= bytes || bytes - head < HUGE_PAGE {
            return;
        }
        let len = (bytes - head) / HUGE_PAGE * HUGE_PAGE;
        // SAFETY: `[start + head, start + head + len)` lies inside `data`, which
        // this call borrows mutably; MADV_HUGEPAGE changes how later faults are
        // served, never the contents, so no reference to `data` is invalidated.
        unsafe {
            libc::madvise(start.add(head).cast(), len, libc::MADV_HUGEPAGE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = data;
}

/// An allocation that failed: the bytes asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AllocFailed {
    /// Bytes of the buffer that could not be had.
    pub(crate) bytes: usize,
}

impl From<AllocFailed> for crate::KimiError {
    /// A working buffer of an image that cannot be had: `ScratchAllocation`.
    fn from(e: AllocFailed) -> Self {
        Self::ScratchAllocation { bytes: e.bytes }
    }
}

/// Element types every bit pattern of which is a valid value (all zeros, or
/// [`POISON_BYTE`] bytes).
///
/// # Safety
/// An implementor must accept every bit pattern as a value.
pub(crate) unsafe trait Zeroable: Copy {}
// SAFETY: every bit pattern is a u8 (a u16, an f32).
unsafe impl Zeroable for u8 {}
// SAFETY: as for u8.
unsafe impl Zeroable for u16 {}
// SAFETY: as for u8.
unsafe impl Zeroable for f32 {}

/// `n` zero values, or [`AllocFailed`] when the allocator has no memory for
/// them (never an abort). Large blocks come straight from the kernel (zeroed,
/// untouched), and get the huge-page advice ([`advise_huge_pages`]) before
/// their first fault, so no pass over them is spent here.
pub(crate) fn try_zeroed<T: Zeroable>(n: usize) -> Result<Vec<T>, AllocFailed> {
    let fail = AllocFailed {
        bytes: n.saturating_mul(std::mem::size_of::<T>()),
    };
    let layout = std::alloc::Layout::array::<T>(n).map_err(|_| fail)?;
    if layout.size() == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        return Err(fail);
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout of
    // `[T; n]`, and all `n` values are initialised (zero bits are a value of
    // every `Zeroable`).
    let mut data = unsafe { Vec::from_raw_parts(ptr, n, n) };
    if layout.size() >= 2 * HUGE_PAGE {
        advise_huge_pages(&mut data);
    }
    Ok(data)
}

/// `n` values whose contents are unspecified until written: zero, or
/// [`POISON_BYTE`] bytes while the poison mode is on ([`set_poison`]). For a
/// buffer its user writes in full before reading it; [`try_zeroed`] where the
/// zeros are read.
pub(crate) fn try_buffer<T: Zeroable>(n: usize) -> Result<Vec<T>, AllocFailed> {
    let mut data = try_zeroed(n)?;
    poison(&mut data);
    Ok(data)
}

/// An empty vector with room for `n` bytes that are not zeroed first
/// ([`POISON_BYTE`] bytes while the poison mode is on), for a writer that fills
/// all of them through [`Vec::spare_capacity_mut`] before the length is set:
/// the memory a decode writes in full, where zeroing 144 MB first would cost
/// more than a tenth of the decode. Large blocks get the huge-page advice
/// ([`advise_huge_pages`]), as in [`try_zeroed`].
///
/// # Errors
/// [`AllocFailed`] when the allocator has no memory for them (never an abort).
pub(crate) fn try_unwritten(n: usize) -> Result<Vec<u8>, AllocFailed> {
    let mut data = Vec::new();
    data.try_reserve_exact(n)
        .map_err(|_| AllocFailed { bytes: n })?;
    let spare = &mut data.spare_capacity_mut()[..n];
    if n >= 2 * HUGE_PAGE {
        advise_huge_pages(spare);
    }
    if POISON.load(Ordering::Relaxed) {
        spare.fill(std::mem::MaybeUninit::new(POISON_BYTE));
    }
    Ok(data)
}

/// The largest scratch buffer a thread keeps after use, how many it keeps and
/// their most bytes in all: the resize of an 8000x8000 image under K3 is 38
/// MB, and a decode streamed into the resize holds a few dozen chunks of rows
/// of 256 KiB, so a worker keeps them for its next image (larger buffers are
/// freed after their image; past the count or the bytes, the smallest).
const KEPT_SCRATCH_BYTES: usize = 64 << 20;
const KEPT_SCRATCH_BUFFERS: usize = 64;
const KEPT_SCRATCH_TOTAL: usize = 96 << 20;

thread_local! {
    /// This thread's scratch buffers, freed by their last user.
    static KEPT: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An image-sized working buffer: a resize result. Taken
/// from the buffers this thread kept after earlier images when one is large
/// enough (so a stream of photos does not fault in fresh pages for every
/// image), else newly allocated, fallibly. Given back to the thread when
/// dropped.
///
/// Its contents are unspecified (zero when new, an earlier image's bytes when
/// reused, [`POISON_BYTE`] bytes either way while the poison mode is on): a
/// user writes every byte it reads.
#[derive(Debug)]
pub(crate) struct Scratch(Vec<u8>);

impl Scratch {
    /// `len` bytes, or [`AllocFailed`] when new memory is needed and cannot be had.
    pub(crate) fn new(len: usize) -> Result<Self, AllocFailed> {
        let kept = KEPT
            .try_with(|kept| {
                let mut kept = kept.borrow_mut();
                let best = kept
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| b.capacity() >= len)
                    .min_by_key(|(_, b)| b.capacity())
                    .map(|(i, _)| i);
                best.map(|i| kept.swap_remove(i))
            })
            .ok()
            .flatten();
        let mut data = match kept {
            // Within the capacity: no allocation, only the new tail is zeroed.
            Some(mut data) => {
                data.resize(len, 0);
                data
            }
            None => try_zeroed(len)?,
        };
        poison(&mut data);
        Ok(Self(data))
    }
}

impl std::ops::Deref for Scratch {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::ops::DerefMut for Scratch {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let data = std::mem::take(&mut self.0);
        if data.capacity() == 0 || data.capacity() > KEPT_SCRATCH_BYTES {
            return;
        }
        // A thread that is exiting has no store left: the buffer is freed.
        let _ = KEPT.try_with(|kept| {
            let mut kept = kept.borrow_mut();
            kept.push(data);
            // Keep the largest ones.
            while kept.len() > KEPT_SCRATCH_BUFFERS
                || kept.iter().map(Vec::capacity).sum::<usize>() > KEPT_SCRATCH_TOTAL
            {
                if let Some(i) = (0..kept.len()).min_by_key(|&i| kept[i].capacity()) {
                    kept.swap_remove(i);
                }
            }
        });
    }
}

/// Held by the tests that turn the poison mode on, and by those that read
/// back what an earlier user left in a buffer.
#[cfg(test)]
pub(crate) static POISON_SWITCH: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::PoisonError;

    #[test]
    fn zeroed_values_are_zero_and_too_large_fails() {
        for n in [0, 1, 2 * HUGE_PAGE + 3, 5 * HUGE_PAGE] {
            let v = try_zeroed::<u8>(n).unwrap();
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&b| b == 0));
        }
        assert!(try_zeroed::<f32>(7).unwrap().iter().all(|&v| v == 0.0));
        let huge = usize::MAX / 2;
        assert_eq!(
            try_zeroed::<u16>(huge),
            Err(AllocFailed {
                bytes: usize::MAX - 1
            })
        );
        assert!(Scratch::new(isize::MAX as usize).is_err());
        assert_eq!(
            try_unwritten(usize::MAX).err(),
            Some(AllocFailed { bytes: usize::MAX })
        );
        assert!(try_unwritten(5).unwrap().capacity() >= 5);
    }

    #[test]
    fn poison_fills_every_buffer_of_unspecified_contents() {
        // Other tests running meanwhile see the poison too: a correct user
        // writes every byte it reads, so their results do not change.
        let _switch = POISON_SWITCH.lock().unwrap_or_else(PoisonError::into_inner);
        let previous = set_poison(true);
        let reused = std::thread::spawn(|| {
            let mut first = Scratch::new(3 * HUGE_PAGE).unwrap();
            first.fill(9);
            drop(first);
            let again = Scratch::new(HUGE_PAGE + 5).unwrap();
            again.iter().all(|&b| b == POISON_BYTE)
        })
        .join()
        .unwrap();
        let fresh = Scratch::new(1000)
            .unwrap()
            .iter()
            .all(|&b| b == POISON_BYTE);
        let buffer = try_buffer::<f32>(33).unwrap();
        let mut unwritten = try_unwritten(2 * HUGE_PAGE + 7).unwrap();
        // SAFETY: the poison mode wrote every byte of the capacity asked for.
        unsafe { unwritten.set_len(2 * HUGE_PAGE + 7) };
        // Zeros that are read by design stay zeros.
        let zeroed = try_zeroed::<u8>(100).unwrap().iter().all(|&b| b == 0);
        set_poison(previous);
        assert!(reused && fresh && zeroed);
        assert!(unwritten.iter().all(|&b| b == POISON_BYTE));
        assert!(buffer.iter().all(|v| v.to_bits() == 0xA5A5_A5A5));
    }

    #[test]
    fn scratch_is_reused_on_its_thread() {
        let _switch = POISON_SWITCH.lock().unwrap_or_else(PoisonError::into_inner);
        std::thread::spawn(|| {
            let mut first = Scratch::new(3 * HUGE_PAGE).unwrap();
            first[5] = 9;
            let address = first.as_ptr();
            drop(first);
            // A smaller buffer is served from the kept one, its bytes as they were.
            let again = Scratch::new(HUGE_PAGE).unwrap();
            assert_eq!(
                (again.as_ptr(), again.len(), again[5]),
                (address, HUGE_PAGE, 9)
            );
            // A larger one is new (zeroed); all are kept, up to
            // KEPT_SCRATCH_BUFFERS of them (then the largest).
            let larger = Scratch::new(4 * HUGE_PAGE).unwrap();
            assert!(larger.iter().all(|&b| b == 0));
            let small: Vec<Scratch> = (0..KEPT_SCRATCH_BUFFERS)
                .map(|_| Scratch::new(10).unwrap())
                .collect();
            drop((again, larger, small));
            let caps = || KEPT.with(|k| k.borrow().iter().map(Vec::capacity).collect::<Vec<_>>());
            assert_eq!(caps().len(), KEPT_SCRATCH_BUFFERS);
            assert!(caps().contains(&(4 * HUGE_PAGE)) && caps().contains(&(3 * HUGE_PAGE)));
            // Past the bytes kept in all, the smallest go first.
            let large: Vec<Scratch> = (0..KEPT_SCRATCH_TOTAL / KEPT_SCRATCH_BYTES + 1)
                .map(|_| Scratch::new(KEPT_SCRATCH_BYTES).unwrap())
                .collect();
            drop(large);
            assert!(caps().iter().sum::<usize>() <= KEPT_SCRATCH_TOTAL);
            assert!(caps().contains(&KEPT_SCRATCH_BYTES));
            // Past the kept size, a buffer is freed after use.
            drop(Scratch::new(KEPT_SCRATCH_BYTES + 1).unwrap());
            let caps: Vec<usize> = KEPT.with(|k| k.borrow().iter().map(Vec::capacity).collect());
            assert!(caps.iter().all(|&c| c <= KEPT_SCRATCH_BYTES), "{caps:?}");
        })
        .join()
        .unwrap();
    }
}
