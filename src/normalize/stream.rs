//! Non-temporal (cache-bypassing) streaming stores of finished output.

/// `dst.copy_from_slice(src)` with non-temporal stores on x86-64: the output is
/// written once and not read again by this call, so its lines bypass the cache
/// and skip the read-for-ownership an ordinary store pays on a cold line. Call
/// [`stream_fence`] before the written values are handed to another thread.
pub(super) fn stream_copy<T: Copy>(dst: &mut [T], src: &[T]) {
    assert_eq!(dst.len(), src.len());
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let bytes = std::mem::size_of_val(dst);
        let (d, s) = (dst.as_mut_ptr().cast::<u8>(), src.as_ptr().cast::<u8>());
        let head = d.align_offset(16).min(bytes);
        let end = head + (bytes - head) / 16 * 16;
        // SAFETY: `dst` and `src` are `bytes` long and do not overlap (one is
        // borrowed mutably); every access below stays inside `[0, bytes)`, and
        // the 16-byte stores land on 16-aligned addresses (SSE2 is x86-64 baseline).
        unsafe {
            std::ptr::copy_nonoverlapping(s, d, head);
            for k in (head..end).step_by(16) {
                let v = _mm_loadu_si128(s.add(k).cast::<__m128i>());
                _mm_stream_si128(d.add(k).cast::<__m128i>(), v);
            }
            std::ptr::copy_nonoverlapping(s.add(end), d.add(end), bytes - end);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

/// Order the non-temporal stores of [`stream_copy`] before any later store
/// (a rayon job's completion, or the return to the caller).
pub(super) fn stream_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no preconditions (SSE is part of the x86-64 baseline).
    unsafe {
        std::arch::x86_64::_mm_sfence();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_copy_at_every_alignment() {
        let src: Vec<u16> = (0..200).collect();
        for start in 0..9 {
            for len in [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 150] {
                let mut dst = vec![0u16; 200];
                stream_copy(&mut dst[start..start + len], &src[..len]);
                stream_fence();
                assert_eq!(&dst[start..start + len], &src[..len]);
                assert!(dst[..start]
                    .iter()
                    .chain(&dst[start + len..])
                    .all(|&v| v == 0));
            }
        }
    }
}
