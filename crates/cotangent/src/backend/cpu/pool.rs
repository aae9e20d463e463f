//! The CPU backend's private thread pool: where every kernel that may split its work runs.
//!
//! # Why a private pool
//!
//! A kernel that splits its work (rayon's parallel iterators, `gemm::Parallelism::Rayon`) waits
//! inside `rayon::join` for pieces other threads took, and a rayon worker that waits there runs
//! other jobs of its pool in the meantime (work stealing). When kernels ran on rayon's *global*
//! pool, the jobs a waiting worker could pick up included the user's own tasks (`par_iter` over
//! evaluations of functions of one shared array). Such a task evaluates, reaches the shared node,
//! and blocks until that node is computed — but the node's kernel was the very one waiting, lower
//! on the same stack, for the stolen task to return. Sixteen tasks on sixteen workers hung every
//! time (issue 13). Entering another pool from a rayon worker does not help by itself:
//! `ThreadPool::install` (rayon-core's `in_worker_cross`), `in_place_scope` and `broadcast` wait
//! with `WorkerThread::wait_until`, which steals from the waiting worker's *own* pool. Only a
//! thread that is not a rayon worker, or one blocked on a channel, waits without stealing.
//!
//! So cotangent owns a pool, [`pool`], whose threads (`cotangent-cpu-N`) run only:
//! - kernels, and the pieces kernels split into. Rayon's parallel iterators and `gemm` use the
//!   pool of the thread they run on, so running a node's kernel on a pool thread keeps all its
//!   parallelism in the pool without any change to the kernels (and `rayon::current_num_threads`
//!   in a kernel sees this pool's size). Kernels never wait for a node: they only wait for their
//!   own pieces.
//! - at most one evaluation walk at a time ([`run_on_first_worker`]), which computes nodes in
//!   order but never waits for a node another thread is computing and never runs user code (a
//!   lazily applied function's body): `graph::eval` stops the walk before such a node and
//!   handles it on the calling thread instead; and the spinning jobs that go with the walk
//!   (bounded, see [`spin_while_progressing`]).
//!
//! No user code ever runs on the pool. Its size is rayon's default (`RAYON_NUM_THREADS`, else one
//! thread per core), or `COTANGENT_NUM_THREADS` when set.
//!
//! # Where a kernel runs ([`run_kernel`])
//!
//! - On a pool thread (the walk): right there (its parallel pieces go to the pool).
//! - On any other thread, a node whose kernel may split — an input or output of at least
//!   [`SPLIT_MIN_ELEMENTS`] elements, or a product that `matmul::may_split` splits by its
//!   multiply-adds — is sent to the pool and the thread *blocks natively* until
//!   it is done: `ThreadPool::install` from a thread that is not a rayon worker (rayon then waits
//!   on a mutex and condition variable), or, from a worker of another pool (the user's), a job
//!   spawned into this pool and a channel ([`run_from_foreign_worker`]), because `install` from
//!   there would steal the other pool's jobs while it waits.
//! - Smaller nodes run on the calling thread: handing a small op to another thread costs far
//!   more than the op (per-op overhead is about half a microsecond). No kernel but the products
//!   calls into rayon below [`SPLIT_MIN_ELEMENTS`] (the assertions below tie every kernel's
//!   threshold to it), and products ask `matmul::may_split`, which mirrors their own rule, so
//!   such a kernel cannot steal anything on any thread.
//!
//! # Why waiting for a node is then deadlock-free
//!
//! A thread that holds a node in progress (it claimed it, `graph::compute`) runs nothing that
//! could wait for that node: a user thread computing it either runs a small kernel that calls
//! no rayon, blocks natively while the pool runs the kernel, or runs a lazily applied
//! function's body, which waits only for nodes created before it (nodes form no cycles); the walk
//! runs kernels, which wait only for their own pieces. A thread waits for a node another thread
//! holds only if it is not a pool thread, and then natively, running nothing else. Pool threads
//! run only kernels and pieces (which finish without waiting for any node), the walk (which
//! returns instead of waiting for a node) and spinning jobs (which return once the walk makes no
//! progress). So every kernel sent to the pool runs to its end, and every wait for a node ends.
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Nodes with an input or an output of at least this many elements are computed on the pool
/// (their kernels may split); smaller ones on the calling thread, products by their own rule
/// (`matmul::may_split`). Also the size from which a graph is worth handing to the pool's first
/// worker (`graph::eval`). 2^15: the smallest parallel threshold of the element-count kernels,
/// so that mid-sized nodes (a 64-step chunk's `4 × 64 × 64` arrays) that never split are not
/// handed to another thread (4096 before: a chunked gated-delta gradient walked the pool ~130
/// times for nodes none of which split but its small batched products).
pub(crate) const SPLIT_MIN_ELEMENTS: usize = 1 << 15;

// No kernel may call into rayon for a node below SPLIT_MIN_ELEMENTS: a small node runs on the
// calling thread, which may be a worker of the user's pool, and must not steal its jobs.
const _: () = assert!(super::elementwise::PARALLEL_THRESHOLD >= SPLIT_MIN_ELEMENTS);
const _: () = assert!(super::random::PARALLEL >= SPLIT_MIN_ELEMENTS);
const _: () = assert!(super::reduce::ROW_PARALLEL_THRESHOLD >= SPLIT_MIN_ELEMENTS);
const _: () = assert!(super::sum::PARALLEL_MIN >= SPLIT_MIN_ELEMENTS && super::sum::JOIN_MIN >= SPLIT_MIN_ELEMENTS);
// Products split by their multiply-adds, not by element counts: `graph` asks
// `matmul::may_split` for them. The copies a product makes of its operands split by element
// counts (the transposing copy at elementwise::PARALLEL_THRESHOLD, checked above).

/// The pool every kernel that may split its work runs on (see the module docs).
pub(crate) fn pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        let mut builder = rayon::ThreadPoolBuilder::new().thread_name(|i| format!("cotangent-cpu-{i}"));
        if let Some(n) = std::env::var("COTANGENT_NUM_THREADS").ok().and_then(|v| v.trim().parse::<usize>().ok()) {
            builder = builder.num_threads(n);
        }
        builder.build().expect("cotangent: cannot start the CPU thread pool")
    })
}

/// What kind of thread the caller is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// A thread of the kernel pool.
    Pool,
    /// A thread that belongs to no rayon pool.
    Plain,
    /// A worker of another rayon pool (the global one or a user's).
    Foreign,
}

/// The kind of the calling thread.
pub(crate) fn place() -> Place {
    if rayon::current_thread_index().is_none() {
        Place::Plain
    } else if pool().current_thread_index().is_some() {
        Place::Pool
    } else {
        Place::Foreign
    }
}

/// Runs a node's kernel `f` where it belongs (see the module docs): on this thread if it is a
/// pool thread or if `may_split` is false, else on the pool while this thread blocks natively.
/// A panic of `f` reaches the caller.
pub(crate) fn run_kernel<R: Send + 'static>(
    place: Place,
    may_split: bool,
    f: impl FnOnce() -> R + Send + 'static,
) -> R {
    match place {
        Place::Pool => f(),
        _ if !may_split => f(),
        Place::Plain => pool().install(f),
        Place::Foreign => run_from_foreign_worker(f),
    }
}

/// Runs `f` on the pool from a worker of another rayon pool and blocks this thread on a channel
/// until it is done, so that the thread runs none of its own pool's jobs in the meantime.
fn run_from_foreign_worker<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    pool().spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    // The pool's threads live for the whole process (the pool is a static that is never
    // dropped) and the job sends whatever `f` does, so the result always arrives.
    match rx.recv().expect("cotangent: a kernel job on the CPU pool vanished") {
        Ok(r) => r,
        Err(payload) => std::panic::resume_unwind(payload),
    }
}

/// Run `work` on the kernel pool's first worker thread and wait for it. Only for a thread that
/// is not a rayon worker (`broadcast` then blocks natively).
///
/// A kernel that splits its work over the pool then does part of it on the evaluating thread,
/// instead of waking the workers and sleeping until they are done (a loop of 32×256 products ran
/// slower on two threads than on one that way). Always the *same* worker: buffers are allocated
/// by the thread that evaluates, and glibc keeps freed memory per thread arena, so evaluations
/// wandering between workers kept one cache of freed buffers per worker (the training example's
/// peak rose from 98 to 161 MiB when any worker could take an evaluation).
///
/// The other workers do not go back to sleep while the evaluation makes progress: they spin,
/// running any kernel piece the evaluating worker offers (`yield_now`), so a kernel that splits
/// its work finds them awake. Sleeping between the single-threaded stretches of a step and being
/// woken for the next product cost a quarter of a loop of 32×256 products in scheduler time
/// (custom_vjp bench, best of 10, four interleaved pairs: 43–52 ms spinning, 53–60 ms not). The
/// price: during a large evaluation every pool thread keeps its core busy.
///
/// `work` counts the nodes it has computed in the counter it is given, and a spinning worker
/// stops spinning once that count has not moved, and no kernel piece was offered, for
/// [`SPIN_WITHOUT_PROGRESS`]. That bound keeps this free of deadlock: a worker can start its
/// spinning job while it is inside a kernel piece stolen from the evaluating worker (rayon runs a
/// thread's broadcast job whenever the thread looks for local work, also while it waits inside a
/// join). The evaluating worker then waits for that piece, which lies below the spinning job on
/// the spinner's stack, so it makes no progress and offers nothing; the spinner notices, returns,
/// and the piece completes. Without the bound this hung after a few seconds of repeated 64×256
/// products (tests/pool_evaluation.rs).
///
/// The walk itself may likewise start on top of a kernel (of another thread's node) that the
/// first worker was running; that is why `work` must never wait for a node (`graph::eval` stops
/// and hands what is left back to the calling thread instead).
pub(crate) fn run_on_first_worker(work: impl FnOnce(&AtomicUsize) + Send) {
    /// Marks the evaluation finished when dropped, also when it panics.
    struct Finished<'a>(&'a AtomicBool);
    impl Drop for Finished<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    debug_assert_eq!(place(), Place::Plain);
    let work = Mutex::new(Some(work));
    let done = AtomicBool::new(false);
    let progress = AtomicUsize::new(0);
    pool().broadcast(|ctx| {
        if ctx.index() == 0 {
            let _finished = Finished(&done);
            let w = work.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(w) = w {
                w(&progress);
            }
        } else {
            spin_while_progressing(&done, &progress);
        }
    });
}

/// How long a spinning worker waits, with no node finished and no kernel piece offered, before
/// it stops spinning (see [`run_on_first_worker`]). Nodes of the workloads that gain from
/// spinning take tens to hundreds of microseconds; a longer single-threaded stretch only loses
/// the spinning for the rest of its evaluation (later kernel pieces still reach the worker
/// through rayon's usual wake-up).
const SPIN_WITHOUT_PROGRESS: std::time::Duration = std::time::Duration::from_millis(2);

/// Run offered kernel pieces until `done`, or until for [`SPIN_WITHOUT_PROGRESS`] neither has
/// `progress` moved nor was there a piece to run.
fn spin_while_progressing(done: &AtomicBool, progress: &AtomicUsize) {
    let mut seen = progress.load(Ordering::Relaxed);
    let mut since = std::time::Instant::now();
    let mut idle = 0u32;
    while !done.load(Ordering::Acquire) {
        if let Some(rayon::Yield::Executed) = pool().yield_now() {
            // a piece of a kernel split over the pool: the evaluation is alive (a single long
            // product offers pieces round after round without finishing a node)
            idle = 0;
            since = std::time::Instant::now();
            continue;
        }
        idle = idle.wrapping_add(1);
        if !idle.is_multiple_of(64) {
            std::hint::spin_loop();
            continue;
        }
        let now = progress.load(Ordering::Relaxed);
        if now != seen {
            seen = now;
            since = std::time::Instant::now();
        } else if since.elapsed() > SPIN_WITHOUT_PROGRESS {
            return;
        }
        // let other runnable threads of the machine have the core now and then
        std::thread::yield_now();
    }
}
