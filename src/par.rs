//! Optional data parallelism over disjoint output chunks, on the crate's own
//! rayon pools (never rayon's global pool, so a host's pool is left alone).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rayon::prelude::*;
use rayon::{ThreadPool, ThreadPoolBuilder};

/// Run `f(state, index, chunk)` on every `chunk_len`-sized chunk of `data`
/// (the last may be shorter), in parallel on the current pool when `parallel`,
/// else in order on this thread. `init` makes one scratch state per task.
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
        data.par_chunks_mut(chunk_len)
            .enumerate()
            .for_each_init(&init, |state, (i, chunk)| f(state, i, chunk));
    } else {
        let mut state = init();
        for (i, chunk) in data.chunks_mut(chunk_len).enumerate() {
            f(&mut state, i, chunk);
        }
    }
}

type Pools = HashMap<usize, Arc<ThreadPool>>;

/// Pools by thread count, for the process that built them (a forked child
/// builds its own: the parent's worker threads do not exist there).
static POOLS: Mutex<Option<(u32, Pools)>> = Mutex::new(None);

/// Run `f` on a pool of `threads` workers (`threads >= 2`), built on first use.
///
/// # Errors
/// The OS error text when the pool's threads cannot be spawned.
pub(crate) fn install<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> Result<R, String> {
    let pool = {
        let mut guard = POOLS.lock().unwrap_or_else(PoisonError::into_inner);
        let pid = std::process::id();
        if guard.as_ref().is_some_and(|(owner, _)| *owner != pid) {
            *guard = None;
        }
        let (_, pools) = guard.get_or_insert_with(|| (pid, HashMap::new()));
        match pools.get(&threads) {
            Some(pool) => Arc::clone(pool),
            None => {
                let pool = ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(|i| format!("kimi-k3-rs-{i}"))
                    .build()
                    .map_err(|e| e.to_string())?;
                let pool = Arc::new(pool);
                pools.insert(threads, Arc::clone(&pool));
                pool
            }
        }
    };
    Ok(pool.install(f))
}
