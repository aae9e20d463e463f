//! Checkpointing must save memory, not only give the same gradients: the peak number of bytes
//! allocated while evaluating the gradient of a deep chain, with and without `ct::checkpoint`.
//!
//! This test binary installs a counting global allocator (so it lives in its own file) and has a
//! single test, so nothing else allocates concurrently while it measures.
use cotangent::{self as ct, Array};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = CURRENT.fetch_add(n, Ordering::SeqCst) + n;
    PEAK.fetch_max(now, Ordering::SeqCst);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        CURRENT.fetch_sub(layout.size(), Ordering::SeqCst);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                CURRENT.fetch_sub(layout.size() - new_size, Ordering::SeqCst);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Peak bytes allocated above the level at the start while `f` runs.
fn peak_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let base = CURRENT.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let r = f();
    (r, PEAK.load(Ordering::SeqCst) - base)
}

const LAYERS: usize = 32;
const GROUP: usize = 8;
const N: usize = 256;

/// `GROUP` layers of `x = tanh(x * w_l)`; inputs `[x, w_0, .., w_{GROUP-1}]`.
fn group(a: &[Array]) -> Array {
    let mut x = a[0].clone();
    for w in &a[1..] {
        x = (&x * w).tanh();
    }
    x
}

/// The whole chain; inputs `[x, w_0, .., w_{LAYERS-1}]`; `checkpointed` wraps each group of
/// `GROUP` layers in `ct::checkpoint`.
fn chain(a: &[Array], checkpointed: bool) -> ct::Result<Array> {
    let cgroup = ct::checkpoint(group);
    let mut x = a[0].clone();
    for g in 0..LAYERS / GROUP {
        let mut args = vec![x];
        args.extend_from_slice(&a[1 + g * GROUP..1 + (g + 1) * GROUP]);
        x = if checkpointed { cgroup(&args)?.remove(0) } else { group(&args) };
    }
    Ok(x.sum_all())
}

/// The gradients (as f32 values) and the peak bytes allocated while computing them.
fn grads_and_peak(inputs: &[Array], checkpointed: bool) -> (Vec<Vec<f32>>, usize) {
    let (grads, peak) = peak_during(|| {
        let g = ct::grad(move |a: &[Array]| chain(a, checkpointed))(inputs).unwrap();
        ct::eval(&g).unwrap();
        g
    });
    (grads.iter().map(|g| g.to_vec::<f32>().unwrap()).collect(), peak)
}

#[test]
fn checkpoint_halves_peak_memory_of_a_deep_chain() {
    let x: Vec<f32> = (0..N * N).map(|i| ((i * 7919 % 1000) as f32 / 1000.0) - 0.5).collect();
    let mut inputs = vec![Array::from_vec(x, &[N, N])];
    inputs.extend((0..LAYERS).map(|l| Array::scalar(1.2f32 - 0.01 * l as f32)));
    let array_bytes = N * N * 4;

    let (plain, plain_peak) = grads_and_peak(&inputs, false);
    let (ckpt, ckpt_peak) = grads_and_peak(&inputs, true);
    eprintln!(
        "peak while evaluating the gradient: plain {:.2} MiB ({:.1} arrays of {N}x{N} f32), \
         checkpointed every {GROUP} layers {:.2} MiB ({:.1} arrays)",
        plain_peak as f64 / (1 << 20) as f64,
        plain_peak as f64 / array_bytes as f64,
        ckpt_peak as f64 / (1 << 20) as f64,
        ckpt_peak as f64 / array_bytes as f64,
    );
    // same gradients: the recomputation runs the same kernels on the same values
    assert_eq!(plain, ckpt, "checkpointed gradients differ");
    // the plain backward keeps every layer's intermediates (2 per layer): the peak must show it,
    // or this test measures nothing
    assert!(plain_peak >= LAYERS * array_bytes, "plain peak {plain_peak} is suspiciously low");
    assert!(
        2 * ckpt_peak <= plain_peak,
        "checkpointing saved too little memory: peak {ckpt_peak} bytes vs {plain_peak} bytes without"
    );
}
