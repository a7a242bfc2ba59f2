//! Optional data parallelism over disjoint output chunks, on the crate's own
//! rayon pools (never rayon's global pool, so a host's pool is left alone).

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rayon::prelude::*;
use rayon::{ThreadPool, ThreadPoolBuilder};

/// Estimated pixel work (see `pipeline::schedule::view_work`: about one unit per output
/// value written, resize multiply-adds counted at half a unit) below which a
/// call, an image or a stage runs on one thread even when more are asked for:
/// under it, waking the pool's workers and handing the result back (tens of
/// microseconds each on an idle machine, a scheduler time slice on a busy
/// one) costs more than the second thread saves. 8 M units is about 3-5 ms of
/// work on one core of the measurement machine, above a 1920x1080 image that
/// is not resized (6.3 M output values, memory-bound: two threads gain
/// nothing there) and below a 1024x1024 image resized to 701x701 (16 M units;
/// a 2000x2000 image resized under K2.5 is 61 M). Measured with `benchmarks/bench_threads.py`.
pub(crate) const MIN_PARALLEL_WORK: u64 = 8_000_000;

/// Least bytes of output one parallel task of [`for_each_chunk`] writes: chunks
/// smaller than this (a row of a vertical-only resize, a band of a narrow
/// image) are grouped, so that a task's scratch set-up and scheduling are
/// amortised over at least this much work.
const MIN_TASK_BYTES: usize = 256 * 1024;

/// Run `f(state, index, chunk)` on every `chunk_len`-sized chunk of `data`
/// (the last may be shorter), in parallel on the current pool when `parallel`,
/// else in order on this thread. `init` makes one scratch state per task; in
/// parallel, a task takes consecutive chunks of at least [`MIN_TASK_BYTES`]
/// in all (or every chunk).
pub(crate) fn for_each_chunk<T, S, I, F>(
    data: &mut [T],
    chunk_len: usize,
    parallel: bool,
    init: I,
    f: F,
) where
    T: Send,
    I: Fn() -> S + Sync + Send,
    F: Fn(&mut S, usize, &mut [T]) + Sync + Send,
{
    let chunk_len = chunk_len.max(1);
    if parallel {
        let chunk_bytes = (chunk_len * std::mem::size_of::<T>()).max(1);
        data.par_chunks_mut(chunk_len)
            .with_min_len(MIN_TASK_BYTES.div_ceil(chunk_bytes))
            .enumerate()
            .for_each_init(&init, |state, (i, chunk)| f(state, i, chunk));
    } else {
        let mut state = init();
        for (i, chunk) in data.chunks_mut(chunk_len).enumerate() {
            f(&mut state, i, chunk);
        }
    }
}

/// How many pools (distinct thread counts) a process keeps. Beyond this the
/// least recently used pool is dropped; its threads exit once the calls running
/// on it return. The threads kept idle are at most the sum of the
/// `MAX_POOLS` most recently used thread counts, however many distinct counts
/// callers ask for.
pub(crate) const MAX_POOLS: usize = 4;

/// The pools of one process, by thread count, least recently used first.
struct Registry {
    pid: u32,
    pools: Mutex<Vec<(usize, Arc<ThreadPool>)>>,
}

/// The current process's registry. A forked child starts a registry of its own:
/// the parent's worker threads do not exist there, and the parent's lock may have
/// been held by another thread at the moment of the fork, so neither is touched.
/// (The parent's registry is leaked in the child: a few bytes per fork.)
static REGISTRY: AtomicPtr<Registry> = AtomicPtr::new(std::ptr::null_mut());

fn registry() -> &'static Registry {
    let pid = std::process::id();
    loop {
        let current = REGISTRY.load(Ordering::Acquire);
        // SAFETY: a non-null pointer here always comes from `Box::leak` below and is
        // never freed, so it stays valid for the life of the process.
        if let Some(registry) = unsafe { current.as_ref() } {
            if registry.pid == pid {
                return registry;
            }
        }
        let fresh: *mut Registry = Box::leak(Box::new(Registry {
            pid,
            pools: Mutex::new(Vec::with_capacity(MAX_POOLS + 1)),
        }));
        if REGISTRY
            .compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Another thread installed one first: drop ours, use theirs.
            // SAFETY: `fresh` was leaked just above and never shared.
            drop(unsafe { Box::from_raw(fresh) });
        }
    }
}

/// Run `f` on a pool of `threads` workers (`threads >= 2`), built on first use
/// and kept while it is among the [`MAX_POOLS`] most recently used.
///
/// # Errors
/// The OS error text when the pool's threads cannot be spawned.
pub(crate) fn install<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> Result<R, String> {
    let (pool, evicted) = {
        let mut pools = registry()
            .pools
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let pool = match pools.iter().position(|(n, _)| *n == threads) {
            Some(i) => pools.remove(i).1,
            None => Arc::new(
                ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(|i| format!("kimi-k3-rs-{i}"))
                    .build()
                    .map_err(|e| e.to_string())?,
            ),
        };
        pools.push((threads, Arc::clone(&pool)));
        let evicted = if pools.len() > MAX_POOLS {
            Some(pools.remove(0))
        } else {
            None
        };
        (pool, evicted)
    };
    // Dropped outside the lock: a pool's drop tells its workers to exit.
    drop(evicted);
    Ok(pool.install(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_most_recently_used_pools() {
        for threads in 2..=9 {
            assert_eq!(install(threads, rayon::current_num_threads), Ok(threads));
        }
        assert_eq!(install(7, rayon::current_num_threads), Ok(7));
        let pools = registry()
            .pools
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Other tests may install pools of their own meanwhile; this test's last
        // one is the most recent, and the registry never grows past the cap.
        assert!(pools.len() <= MAX_POOLS);
        assert!(pools.iter().any(|(n, _)| *n == 7));
    }
}
