//! An image decoded band by band as the pipeline reads it ([`Streamed`]), so
//! that the decoded image is never held whole, and, on two threads or more,
//! decoded ahead on another thread while the bands before are resized, or,
//! where a decoder skips rows cheaply, read by several decoders at once, each
//! from its own row ([`Lanes`]). The pipeline streams every encoded image
//! ([`Decoder`]).

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError, TryLockError};
use std::thread::ThreadId;
use std::time::Duration;

use crate::buffers::{poison, Scratch};
use crate::decode::{Decoder, Header};
use crate::error::KimiError;
use crate::image::RowSource;

/// Bytes of decoded rows in one chunk of the stream (at least one row).
const CHUNK_BYTES: usize = 256 << 10;
/// Bytes of rows the decode ahead ([`Streamed::decode_ahead`]) keeps ready
/// past the last row read.
const AHEAD_BYTES: usize = 8 << 20;
/// The longest a read waits for the decode ahead's next chunk before it
/// looks again.
const WAIT: Duration = Duration::from_millis(1);
/// What a [`Lanes`] decoder that starts at a row costs per row before it, as
/// a fraction of decoding, resizing and normalising a row in a lane: a row
/// skipped costs 0.55 of a row decoded (`jpeg_skip_scanlines` entropy-decodes
/// it: 8000x6000 q90 4:2:0, 30 ms for 3,000 rows against 55 ms to decode
/// them), and decoding is 0.6 to 0.75 of a row's work (measured: at 0.4 the
/// first of two lanes ran 7-10 % longer than the second, 8000x6000 and
/// 4032x3024 photos to Kimi-K2.5's size; at 0.33 they end together).
const SKIP_COST: f64 = 0.33;

/// A decode that gives an image's rows in order, a few at a time.
pub(super) trait InOrder: Send {
    /// The next `out.len() / row_len` rows into `out` (whole rows, no more
    /// than are left), all written; after an error it is not read again.
    ///
    /// # Errors
    /// Why the rows cannot be decoded.
    fn read(&mut self, out: &mut [u8]) -> Result<(), KimiError>;

    /// Whether a decoder started at a row saves most of the work of the rows
    /// before it ([`Decoder::skips_rows`]).
    fn skips_rows(&self) -> bool;
}

impl InOrder for Decoder<'_> {
    fn read(&mut self, out: &mut [u8]) -> Result<(), KimiError> {
        Decoder::read(self, out)
    }

    fn skips_rows(&self) -> bool {
        Decoder::skips_rows(self)
    }
}

/// The rows of an encoded image, decoded in order by the decoders `start`
/// makes, as they are read ([`RowSource::read_rows`]) or ahead of the reads
/// ([`Streamed::decode_ahead`]), and kept until they are
/// [released](RowSource::release): a band of rows at a time, never the whole
/// image. A read of released rows starts a new decoder at its first row (the
/// pipeline makes one only in a [`Lanes`] stream after its first). The bytes
/// are the decoder's.
pub(super) struct Streamed<D, F> {
    /// A new decoder whose next row is the row asked for or one before it,
    /// and that row.
    start: F,
    /// The image's size and channels.
    header: Header,
    /// Bytes of a row: `width * channels`.
    row_len: usize,
    /// Rows of a chunk.
    chunk_rows: usize,
    /// Rows the decode ahead keeps ready past the last row read.
    ahead_rows: usize,
    decoding: Mutex<Decoding<D>>,
    rows: Mutex<Rows>,
    /// A chunk was decoded, rows were released or asked for further on, the
    /// reads ended, or the decode failed.
    changed: Condvar,
}

/// The decoder, run by one thread at a time.
struct Decoding<D> {
    /// `None` once every row is decoded, or after an error.
    decoder: Option<D>,
    /// Rows decoded so far.
    next: usize,
}

/// The decoded rows kept.
#[derive(Default)]
struct Rows {
    /// `(first row, rows, bytes)` in order, contiguous.
    chunks: VecDeque<(usize, usize, Scratch)>,
    /// Buffers of released chunks, for the next ones.
    spare: Vec<Scratch>,
    /// No row before this one will be read again.
    released: usize,
    /// The end of the reads so far.
    read_to: usize,
    /// The decode's error, if it failed.
    error: Option<KimiError>,
    /// The thread that reads the rows, from [`Streamed::reads`].
    reader: Option<ThreadId>,
    /// The reads have ended: the decode ahead stops.
    ended: bool,
}

impl Rows {
    /// The rows kept: `first..end`.
    fn kept(&self) -> std::ops::Range<usize> {
        match (self.chunks.front(), self.chunks.back()) {
            (Some(&(first, ..)), Some(&(last, n, _))) => first..last + n,
            _ => self.released..self.released,
        }
    }

    /// Drop the chunks wholly before `self.released`, their buffers kept for
    /// the next chunks (so a stream holds no more buffers than it held
    /// chunks at once, and its pages are faulted in once).
    fn drop_released(&mut self) {
        while let Some(&(first, n, _)) = self.chunks.front() {
            if first + n > self.released {
                break;
            }
            if let Some((_, _, bytes)) = self.chunks.pop_front() {
                self.spare.push(bytes);
            }
        }
    }
}

impl<D, F> std::fmt::Debug for Streamed<D, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streamed")
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

/// The guarded value, whether or not a thread panicked holding the lock.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<D: InOrder, F: Fn(usize) -> Result<(D, usize), KimiError> + Sync> Streamed<D, F> {
    /// The rows of the image of `header` (its size and channels), decoded by
    /// the decoders `start` makes: the first one, at the first row, made here.
    ///
    /// # Errors
    /// `start`'s.
    pub(super) fn new(header: Header, start: F) -> Result<Self, KimiError> {
        let row_len = header.width * header.channels;
        Self::with_sizes(header, start, CHUNK_BYTES / row_len, AHEAD_BYTES / row_len)
    }

    /// [`Streamed::new`] with chunks of `chunk_rows` rows and the decode
    /// ahead `ahead_rows` rows past the last row read (1 at least each).
    fn with_sizes(
        header: Header,
        start: F,
        chunk_rows: usize,
        ahead_rows: usize,
    ) -> Result<Self, KimiError> {
        let (decoder, next) = start(0)?;
        let stream = Self::unstarted(header, start, chunk_rows, ahead_rows);
        *lock(&stream.decoding) = Decoding {
            decoder: Some(decoder),
            next,
        };
        lock(&stream.rows).released = 0;
        Ok(stream)
    }

    /// A stream with every row released: its first read starts a decoder
    /// at the read's first row.
    fn unstarted(header: Header, start: F, chunk_rows: usize, ahead_rows: usize) -> Self {
        Self {
            start,
            header,
            row_len: header.width * header.channels,
            chunk_rows: chunk_rows.max(1),
            ahead_rows: ahead_rows.max(1),
            decoding: Mutex::new(Decoding {
                decoder: None,
                next: header.height,
            }),
            rows: Mutex::new(Rows {
                released: usize::MAX,
                ..Rows::default()
            }),
            changed: Condvar::new(),
        }
    }

    /// Whether the decoder skips rows cheaply ([`InOrder::skips_rows`]).
    pub(super) fn skips_rows(&self) -> bool {
        lock(&self.decoding)
            .decoder
            .as_ref()
            .is_some_and(InOrder::skips_rows)
    }

    /// The error that stopped the decode, if one did: the pipeline returns it
    /// in place of the read's [`KimiError::ImageRows`].
    pub(super) fn take_error(&self) -> Option<KimiError> {
        lock(&self.rows).error.take()
    }

    /// The reads begin on this thread: until the guard drops, which ends
    /// them ([`Streamed::decode_ahead`] then stops), however the thread leaves.
    pub(super) fn reads(&self) -> EndReads<'_, D, F> {
        lock(&self.rows).reader = Some(std::thread::current().id());
        EndReads(self)
    }

    /// Decode ahead of the reads, up to [`AHEAD_BYTES`] of rows past the last
    /// row read, until every row is decoded, the decode fails or the reads
    /// end. Run on a second thread of the pool while the first reads; on the
    /// reading thread itself (a pool's thread runs the job it left while it
    /// waits for another) it returns at once, as it would wait for itself.
    pub(super) fn decode_ahead(&self) {
        loop {
            let mut rows = lock(&self.rows);
            if rows.reader == Some(std::thread::current().id()) {
                return;
            }
            loop {
                let kept = rows.kept();
                if rows.ended || rows.error.is_some() || kept.end == self.header.height {
                    return;
                }
                if kept.end < rows.read_to.max(rows.released) + self.ahead_rows {
                    break;
                }
                rows = self
                    .changed
                    .wait(rows)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            let want = rows.kept().end + 1;
            drop(rows);
            self.decode_to(want);
        }
    }

    /// Decode chunks until row `want - 1` is decoded (nothing when it is),
    /// every row is, or the decode fails (the error is kept in `Rows`).
    fn decode_to(&self, want: usize) {
        self.decode_with(lock(&self.decoding), want);
    }

    /// [`Streamed::decode_to`] with the decoder's lock held.
    fn decode_with(&self, mut decoding: MutexGuard<'_, Decoding<D>>, want: usize) {
        while decoding.next < want {
            let first = decoding.next;
            let Some(decoder) = decoding.decoder.as_mut() else {
                return;
            };
            let n = self.chunk_rows.min(self.header.height - first);
            let spare = lock(&self.rows).spare.pop();
            // A chunk's buffer starts as garbage in the poison mode: the
            // decoder writes every byte of the rows it keeps.
            let read = match spare {
                Some(mut bytes) => {
                    poison(&mut bytes);
                    Ok(bytes)
                }
                // The thread's kept buffers first: their pages are in already.
                None => Scratch::new(self.chunk_rows * self.row_len)
                    .map_err(|e| self.header.allocation_failed(e)),
            }
            .and_then(|mut bytes| {
                decoder.read(&mut bytes[..n * self.row_len])?;
                Ok(bytes)
            });
            let mut rows = lock(&self.rows);
            match read {
                Ok(bytes) => {
                    rows.chunks.push_back((first, n, bytes));
                    rows.drop_released();
                    decoding.next += n;
                    if decoding.next == self.header.height {
                        decoding.decoder = None;
                    }
                }
                Err(e) => {
                    rows.error = Some(e);
                    decoding.decoder = None;
                }
            }
            drop(rows);
            self.changed.notify_all();
        }
    }

    /// After the decoder read its next rows, up to `end`, straight into a
    /// read's buffer: the decoder moves on, or its error is the decode's.
    fn end_read(
        &self,
        mut decoding: MutexGuard<'_, Decoding<D>>,
        read: Result<(), KimiError>,
        end: usize,
    ) -> Result<(), String> {
        let result = match read {
            Ok(()) => {
                decoding.next = end;
                if end == self.header.height {
                    decoding.decoder = None;
                }
                Ok(())
            }
            Err(e) => {
                let message = e.to_string();
                lock(&self.rows).error = Some(e);
                decoding.decoder = None;
                Err(message)
            }
        };
        drop(decoding);
        self.changed.notify_all();
        result
    }

    /// Start the decode again at row `first` (or a row before it, whose
    /// rows up to `first` are dropped as they come), keeping rows from
    /// `first` on; nothing while a decoder is under way and the rows kept
    /// start at `first` or before. If no decoder can be started, `start`'s
    /// error is the stream's.
    fn restart(&self, first: usize) {
        let mut decoding = lock(&self.decoding);
        let mut rows = lock(&self.rows);
        if decoding.decoder.is_some() && rows.kept().start <= first {
            return;
        }
        rows.released = first;
        while let Some((_, _, bytes)) = rows.chunks.pop_front() {
            rows.spare.push(bytes);
        }
        match (self.start)(first) {
            Ok((decoder, next)) => {
                *decoding = Decoding {
                    decoder: Some(decoder),
                    next,
                }
            }
            Err(e) => rows.error = Some(e),
        }
    }
}

impl<D: InOrder, F: Fn(usize) -> Result<(D, usize), KimiError> + Sync> RowSource
    for Streamed<D, F>
{
    /// Rows `first..end`, decoded first where they are not yet.
    fn read_rows(&self, first: usize, end: usize, out: &mut [u8]) -> Result<(), String> {
        if out.len() != (end - first) * self.row_len || end > self.header.height {
            return Err(format!("{} bytes asked for rows {first}..{end}", out.len()));
        }
        loop {
            let mut rows = lock(&self.rows);
            if let Some(e) = &rows.error {
                return Err(e.to_string());
            }
            if end > rows.read_to {
                // The decode ahead may go on past these rows.
                rows.read_to = end;
                self.changed.notify_all();
            }
            let kept = rows.kept();
            if kept.start > first {
                drop(rows);
                self.restart(first);
                continue;
            }
            if kept.end >= end {
                let mut at = first;
                for (chunk_first, n, bytes) in &rows.chunks {
                    let chunk_end = chunk_first + n;
                    if chunk_end <= at {
                        continue;
                    }
                    let stop = chunk_end.min(end);
                    let from = (at - chunk_first) * self.row_len;
                    let to = (stop - chunk_first) * self.row_len;
                    out[(at - first) * self.row_len..(stop - first) * self.row_len]
                        .copy_from_slice(&bytes[from..to]);
                    at = stop;
                    if at == end {
                        break;
                    }
                }
                return Ok(());
            }
            // Not decoded yet: decode them here, unless the decode ahead is
            // at it (then wait for its next chunk: taking its turn at the
            // lock would wait for it to run out of rows to decode ahead).
            let mut decoding = match self.decoding.try_lock() {
                Ok(decoding) => decoding,
                Err(TryLockError::Poisoned(decoding)) => decoding.into_inner(),
                Err(TryLockError::WouldBlock) => {
                    // Woken by each chunk; the timeout only bounds a wait for
                    // a decode ahead that stopped between two chunks.
                    drop(self.changed.wait_timeout(rows, WAIT));
                    continue;
                }
            };
            let next = decoding.next;
            match decoding.decoder.as_mut() {
                Some(decoder) if next == first && kept.end <= first => {
                    // The rows asked for are the decoder's next ones, and
                    // none before them is kept: decoded straight into `out`,
                    // and kept nowhere (a later read of them starts a new
                    // decoder).
                    rows.released = end;
                    rows.drop_released();
                    drop(rows);
                    let read = decoder.read(out);
                    return self.end_read(decoding, read, end);
                }
                Some(_) => {
                    drop(rows);
                    self.decode_with(decoding, end);
                }
                None => {
                    // No decoder has these rows to give (the stream has not
                    // started, or its rows were released after the last was
                    // decoded): a new one.
                    drop((rows, decoding));
                    self.restart(first);
                }
            }
        }
    }

    fn in_order(&self) -> bool {
        true
    }

    fn release(&self, row: usize) {
        let mut rows = lock(&self.rows);
        rows.released = rows.released.max(row);
        rows.drop_released();
        drop(rows);
        self.changed.notify_all();
    }
}

/// The reads of a [`Streamed`] under way ([`Streamed::reads`]): dropping it
/// ends them, and the decode ahead stops.
pub(super) struct EndReads<'s, D, F>(&'s Streamed<D, F>);

impl<D, F> Drop for EndReads<'_, D, F> {
    fn drop(&mut self) {
        lock(&self.0.rows).ended = true;
        self.0.changed.notify_all();
    }
}

/// An image's rows read by several decoders at once, for threads that each
/// resize a run of bands ([`RowSource::lanes`]): the first stream decodes
/// from the first row, each other starts at the row of its first read (its
/// decoder [skips](InOrder::skips_rows) the rows before). Read as a source
/// of its own, it is its first stream.
///
/// A stream that starts past the first row is exact where it succeeds (the
/// rows after a skip are a whole decode's), but not where it fails: the
/// skip reads ahead of the rows Pillow reads, so a lane may fail where a
/// decode from the first row fails elsewhere. The pipeline then runs the
/// image again from one stream ([`super::run`]).
pub(super) struct Lanes<D, F>(Vec<Streamed<D, F>>);

impl<D, F> std::fmt::Debug for Lanes<D, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Lanes").field(&self.0.len()).finish()
    }
}

impl<D: InOrder, F: Fn(usize) -> Result<(D, usize), KimiError> + Sync + Clone> Lanes<D, F> {
    /// `first` and `lanes - 1` streams more of its image that start where
    /// they are first read.
    pub(super) fn new(first: Streamed<D, F>, lanes: usize) -> Self {
        let more: Vec<_> = (1..lanes)
            .map(|_| {
                Streamed::unstarted(
                    first.header,
                    first.start.clone(),
                    first.chunk_rows,
                    first.ahead_rows,
                )
            })
            .collect();
        Self(std::iter::once(first).chain(more).collect())
    }
}

impl<D: InOrder, F: Fn(usize) -> Result<(D, usize), KimiError> + Sync> RowSource for Lanes<D, F> {
    fn read_rows(&self, first: usize, end: usize, out: &mut [u8]) -> Result<(), String> {
        self.0[0].read_rows(first, end, out)
    }

    fn in_order(&self) -> bool {
        true
    }

    fn release(&self, row: usize) {
        self.0[0].release(row);
    }

    fn lanes(&self) -> (usize, f64) {
        (self.0.len(), SKIP_COST)
    }

    fn lane(&self, i: usize) -> Option<&dyn RowSource> {
        self.0.get(i).map(|s| s as &dyn RowSource)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Format;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const WIDTH: usize = 5;
    const HEIGHT: usize = 100;
    const ROW: usize = WIDTH * 3;

    /// Byte `i` of row `row` of the test image.
    fn byte(row: usize, i: usize) -> u8 {
        u8::try_from((row * 131 + i * 7) % 251).expect("under 251")
    }

    fn rows(first: usize, end: usize) -> Vec<u8> {
        (first..end)
            .flat_map(|row| (0..ROW).map(move |i| byte(row, i)))
            .collect()
    }

    /// A decoder of the test image that fails at row `fail_at`.
    struct Pattern {
        next: usize,
        fail_at: usize,
    }

    impl InOrder for Pattern {
        fn skips_rows(&self) -> bool {
            true
        }

        fn read(&mut self, out: &mut [u8]) -> Result<(), KimiError> {
            for row in out.chunks_exact_mut(ROW) {
                if self.next == self.fail_at {
                    return Err(KimiError::Decode {
                        format: "JPEG",
                        detail: "image file is truncated".into(),
                    });
                }
                for (i, b) in row.iter_mut().enumerate() {
                    *b = byte(self.next, i);
                }
                self.next += 1;
            }
            Ok(())
        }
    }

    const HEADER: Header = Header {
        format: Format::Jpeg,
        width: WIDTH,
        height: HEIGHT,
        channels: 3,
    };

    /// A stream of the test image in chunks of 7 rows, decoded ahead up to 10
    /// rows, failing at `fail_at`; `starts` counts the decoders made.
    fn stream(
        starts: &AtomicUsize,
        fail_at: usize,
    ) -> Streamed<Pattern, impl Fn(usize) -> Result<(Pattern, usize), KimiError> + Sync + Clone + '_>
    {
        let start = move |_row| {
            starts.fetch_add(1, Ordering::Relaxed);
            Ok((Pattern { next: 0, fail_at }, 0))
        };
        Streamed::with_sizes(HEADER, start, 7, 10).expect("starts")
    }

    /// Overlapping bands, in order, as the resize reads them.
    const BANDS: [(usize, usize); 6] = [(0, 12), (8, 20), (15, 31), (30, 64), (60, 99), (97, 100)];

    fn read(s: &(impl RowSource + ?Sized), first: usize, end: usize) -> Result<Vec<u8>, String> {
        let mut out = vec![0u8; (end - first) * ROW];
        s.read_rows(first, end, &mut out).map(|()| out)
    }

    #[test]
    fn reads_that_go_on_where_the_last_ended_are_decoded_straight_into_them() {
        let starts = AtomicUsize::new(0);
        let s = stream(&starts, usize::MAX);
        for (first, end) in [(0, 12), (12, 20), (20, 31), (31, 64), (64, 100)] {
            s.release(first);
            assert_eq!(read(&s, first, end).unwrap(), rows(first, end));
            // Nothing kept: the rows went to the read only.
            assert_eq!(lock(&s.rows).kept(), end..end);
        }
        assert_eq!(starts.load(Ordering::Relaxed), 1);
        assert!(read(&s, 99, 101).is_err());
    }

    #[test]
    fn overlapping_bands_read_in_order_give_the_rows_and_keep_only_their_chunks() {
        let starts = AtomicUsize::new(0);
        let s = stream(&starts, usize::MAX);
        for (i, (first, end)) in BANDS.into_iter().enumerate() {
            s.release(first);
            assert_eq!(read(&s, first, end).unwrap(), rows(first, end));
            if i == 0 {
                // Decoded straight into the read; the next band's overlap
                // with it starts a new decoder, whose chunks serve the rest.
                continue;
            }
            let kept = lock(&s.rows).kept();
            // From the chunk holding `first` to the chunk holding `end - 1`.
            assert_eq!(kept.start, first / 7 * 7, "{first}..{end}");
            assert_eq!(kept.end, (end.div_ceil(7) * 7).min(HEIGHT));
        }
        assert_eq!(starts.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_read_of_released_rows_starts_the_decode_again() {
        let starts = AtomicUsize::new(0);
        let s = stream(&starts, usize::MAX);
        s.release(50);
        assert_eq!(read(&s, 50, 60).unwrap(), rows(50, 60));
        assert_eq!(read(&s, 10, 30).unwrap(), rows(10, 30));
        assert_eq!(read(&s, 40, 100).unwrap(), rows(40, 100));
        assert_eq!(starts.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_decode_error_fails_every_later_read_and_is_kept() {
        let starts = AtomicUsize::new(0);
        let s = stream(&starts, 30);
        assert_eq!(read(&s, 0, 20).unwrap(), rows(0, 20));
        let message = "cannot decode JPEG: image file is truncated";
        assert_eq!(read(&s, 25, 40).unwrap_err(), message);
        assert_eq!(read(&s, 0, 5).unwrap_err(), message);
        assert_eq!(s.take_error().unwrap().to_string(), message);
        assert_eq!(starts.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn decode_ahead_runs_beside_the_reads_and_stops_with_them() {
        for stop_after in [BANDS.len(), 2, 0] {
            let starts = AtomicUsize::new(0);
            let s = stream(&starts, usize::MAX);
            std::thread::scope(|scope| {
                let reads = s.reads();
                scope.spawn(|| s.decode_ahead());
                for &(first, end) in &BANDS[..stop_after] {
                    s.release(first);
                    assert_eq!(read(&s, first, end).unwrap(), rows(first, end));
                }
                drop(reads);
            });
            let rows_kept = lock(&s.rows);
            assert!(rows_kept.ended);
            // The decode ahead went no further than 10 rows past the last row
            // read, rounded up to a chunk.
            let (read_to, end) = (rows_kept.read_to, rows_kept.kept().end);
            assert!(end <= read_to + 10 + 7, "{end} {read_to}");
        }
    }

    #[test]
    fn decode_ahead_on_the_reading_thread_returns_at_once() {
        let starts = AtomicUsize::new(0);
        let s = stream(&starts, usize::MAX);
        let _reads = s.reads();
        s.decode_ahead();
        assert_eq!(lock(&s.rows).kept(), 0..0);
    }

    #[test]
    fn lanes_start_where_first_read_and_read_as_their_first_stream() {
        let starts = AtomicUsize::new(0);
        let start = |row| {
            starts.fetch_add(1, Ordering::Relaxed);
            Ok((
                Pattern {
                    next: row,
                    fail_at: 95,
                },
                row,
            ))
        };
        let lanes = Lanes::new(Streamed::with_sizes(HEADER, start, 7, 10).unwrap(), 3);
        assert_eq!(lanes.lanes(), (3, SKIP_COST));
        assert!(lanes.lane(3).is_none());
        let (one, two) = (lanes.lane(1).unwrap(), lanes.lane(2).unwrap());
        assert_eq!(starts.load(Ordering::Relaxed), 1);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                two.release(70);
                assert_eq!(read(two, 70, 85).unwrap(), rows(70, 85));
                assert_eq!(
                    read(two, 88, 97).unwrap_err(),
                    "cannot decode JPEG: image file is truncated"
                );
            });
            scope.spawn(|| {
                one.release(33);
                assert_eq!(read(one, 33, 71).unwrap(), rows(33, 71));
            });
            assert_eq!(read(&lanes, 0, 40).unwrap(), rows(0, 40));
        });
        // The first stream's decoder, and one a lane, each at its first read.
        assert_eq!(starts.load(Ordering::Relaxed), 3);
        // Each read went on where its lane's decoder was: nothing kept.
        assert_eq!(lock(&lanes.0[1].rows).kept(), 71..71);
        assert_eq!(lock(&lanes.0[0].rows).kept(), 40..40);
    }

    #[test]
    fn a_decoder_that_cannot_start_fails_the_read_and_every_later_one() {
        let start = |row| {
            if row > 0 {
                return Err(KimiError::Decode {
                    format: "JPEG",
                    detail: "image file is truncated".into(),
                });
            }
            Ok((
                Pattern {
                    next: 0,
                    fail_at: usize::MAX,
                },
                0,
            ))
        };
        let lanes = Lanes::new(Streamed::with_sizes(HEADER, start, 7, 10).unwrap(), 2);
        let lane = lanes.lane(1).unwrap();
        let message = "cannot decode JPEG: image file is truncated";
        for (first, end) in [(50, 60), (60, 70), (55, 80)] {
            lane.release(first);
            assert_eq!(read(lane, first, end).unwrap_err(), message);
        }
        assert_eq!(lanes.0[1].take_error().unwrap().to_string(), message);
        assert_eq!(read(&lanes, 0, 100).unwrap(), rows(0, 100));
    }
}
