//! The input rows a horizontal pass lays out next, fetched into the cache while
//! the tile before them is summed.
//!
//! A tile's layout ([`super::quads::rows_to_quads`]) reads its [`ROWS`] input
//! rows once, and the sums that follow read only the layout: on an image that
//! comes from memory (8000x8000 RGB is 192 MB) the layout waited on memory
//! while the arithmetic units idled, and the sums ran while memory idled.
//! Spread over the sums of the tile before it, a prefetch of the next tile's
//! lines overlaps the two. Where it pays is measured, and set, at
//! `FETCH_AHEAD_BYTES` in `passes.rs`.

use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};

use super::transpose::ROWS;

/// Bytes of one cache line.
const LINE: usize = 64;

/// The rows of the next tile (each the same length), fetched a few lines per
/// [`Ahead::step`] so that the last line is asked for at the last step:
/// spread evenly, the fetches never crowd the loads of the sums (one line of
/// each row at each step, until all were asked for, made 8000x8000 1.1x
/// slower where the even spread makes it 0.9x).
pub(super) struct Ahead<'a> {
    rows: Option<[&'a [u8]; ROWS]>,
    /// Lines in all, `ROWS` per line of a row.
    total: usize,
    /// Lines per step, in 1/65536ths; the lines due so far; those fetched.
    per_step: usize,
    due: usize,
    fetched: usize,
}

impl<'a> Ahead<'a> {
    /// Nothing to fetch.
    pub(super) fn none() -> Self {
        Self {
            rows: None,
            total: 0,
            per_step: 0,
            due: 0,
            fetched: 0,
        }
    }

    /// The lines of `rows` (`ROWS` rows of equal length), fetched over `steps`
    /// calls of [`Ahead::step`].
    pub(super) fn new(rows: [&'a [u8]; ROWS], steps: usize) -> Self {
        let total = rows[0].len().div_ceil(LINE) * ROWS;
        Self {
            rows: Some(rows),
            total,
            per_step: (total << 16).div_ceil(steps.max(1)),
            due: 0,
            fetched: 0,
        }
    }

    /// Fetch the lines due by this step into L2: a line of each row in turn,
    /// rows in order (the order the layout reads them).
    #[inline(always)]
    pub(super) fn step(&mut self) {
        let Some(rows) = &self.rows else { return };
        self.due += self.per_step;
        let due = (self.due >> 16).min(self.total);
        while self.fetched < due {
            let (line, row) = (self.fetched / ROWS, self.fetched % ROWS);
            let at = rows[row].as_ptr().wrapping_add(LINE * line);
            // SAFETY: a prefetch has no effect but on the caches, whatever the
            // address (no fault); SSE is in every x86-64 CPU.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(at.cast()) };
            self.fetched += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_is_fetched_by_the_last_step_and_none_twice() {
        for (len, steps) in [
            (24_000, 1793),
            (5760, 1288),
            (64, 1),
            (65, 3),
            (1, 1000),
            (0, 5),
        ] {
            let data = vec![0u8; len];
            let mut ahead = Ahead::new([&data[..]; ROWS], steps);
            let mut counts = Vec::new();
            for _ in 0..steps {
                let before = ahead.fetched;
                ahead.step();
                counts.push(ahead.fetched - before);
            }
            let lines = len.div_ceil(LINE) * ROWS;
            assert_eq!(ahead.fetched, lines, "{len} bytes, {steps} steps");
            // Spread evenly: no step fetches more than one more than the mean.
            let most = lines.div_ceil(steps) + 1;
            assert!(
                counts.iter().all(|&c| c <= most),
                "{len}, {steps}: {counts:?}"
            );
            ahead.step();
            assert_eq!(ahead.fetched, lines);
        }
        let mut none = Ahead::none();
        none.step();
        assert_eq!(none.fetched, 0);
    }
}
