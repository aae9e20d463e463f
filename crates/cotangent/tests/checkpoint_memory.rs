//! Checkpointing must save memory, not only give the same gradients: the peak number of bytes
//! allocated while evaluating the gradient of a deep chain, with and without `ct::checkpoint`.
//!
//! This test binary installs a counting global allocator (so it lives in its own file); its tests
//! take a lock so nothing else allocates concurrently while one measures.
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

/// Held by each test while it measures.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Peak bytes allocated above the level at the start while `f` runs: host memory through the
/// counting allocator, or the device allocator's own counter when arrays live on a GPU.
fn peak_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let device = ct::default_device();
    if let Some(before) = device.memory_stats() {
        device.reset_peak_memory();
        let r = f();
        let after = device.memory_stats().expect("the device answered before");
        return (r, after.peak - before.in_use);
    }
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
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
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

/// `STEPS` steps of `h = tanh(h * w + x_t)` on `[4]` vectors; inputs `[h, x [STEPS, 4], w]`.
const STEPS: usize = 64;
fn recurrence(a: &[Array]) -> Array {
    let (mut h, x, w) = (a[0].clone(), &a[1], &a[2]);
    for t in 0..STEPS as isize {
        h = (&h * w + x.slice_axis(0, Some(t), Some(t + 1), 1).squeeze(&[0])).tanh();
    }
    h
}

/// Bytes still allocated after building (not evaluating) the gradient graph of 32 chunks of
/// `recurrence`, plain or checkpointed, and the evaluated gradients.
fn graph_bytes(inputs: &[Array], checkpointed: bool) -> (usize, Vec<Vec<f32>>) {
    let chunk = ct::checkpoint(recurrence);
    let f = move |a: &[Array]| -> ct::Result<Array> {
        let mut h = a[0].clone();
        for c in 0..32 {
            let args = [h, a[1 + c].clone(), a[33].clone()];
            h = if checkpointed { chunk(&args)?.remove(0) } else { recurrence(&args) };
        }
        Ok(h.sum_all())
    };
    let base = CURRENT.load(Ordering::SeqCst);
    let grads = ct::grad(f)(inputs).unwrap();
    let held = CURRENT.load(Ordering::SeqCst) - base;
    (held, grads.iter().map(|g| g.to_vec::<f32>().unwrap()).collect())
}

#[test]
fn large_checkpointed_chunks_hold_one_node_each_until_evaluated() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut inputs = vec![Array::from_slice(&[0.1f32, -0.2, 0.3, 0.05], &[4])];
    inputs.extend(
        (0..32).map(|c| {
            Array::from_vec((0..STEPS * 4).map(|i| ((c * 31 + i) as f32 * 0.37).sin()).collect(), &[STEPS, 4])
        }),
    );
    inputs.push(Array::from_slice(&[0.9f32, 0.8, 1.1, 0.7], &[4]));
    let (plain_bytes, plain) = graph_bytes(&inputs, false);
    let (ckpt_bytes, ckpt) = graph_bytes(&inputs, true);
    eprintln!("gradient graph before evaluation: plain {plain_bytes} bytes, checkpointed {ckpt_bytes} bytes");
    // the chunks' forwards and backward rules build > 256 nodes each, so they are rebuilt when
    // evaluated: the graph holds a few nodes per chunk instead of every step's forward and
    // backward (about 25 nodes per step plain)
    assert!(plain_bytes > 32 * STEPS * 20 * 100, "plain graph {plain_bytes} bytes is suspiciously small");
    assert!(
        ckpt_bytes * 10 < plain_bytes,
        "checkpointed graph holds {ckpt_bytes} bytes before evaluation vs {plain_bytes} plain"
    );
    for (i, (p, c)) in plain.iter().zip(&ckpt).enumerate() {
        for (x, y) in p.iter().zip(c) {
            assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "gradient {i}: {x} vs {y}");
        }
    }
}
