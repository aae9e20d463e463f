//! The CPU's host buffer cache: a freed buffer of 4 KiB to 1 MiB is reused by the next buffer of
//! the same size and alignment, whatever its dtype or thread; the limit evicts the least
//! recently used sizes; `clear_cache` frees everything.
use cotangent::{self as ct, Array, DType, Device};
use std::sync::Mutex;

/// The two tests share the process's cache: they take turns.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Both tests are about the CPU's cache, so their arrays live on the CPU whatever
/// `COTANGENT_DEVICE` says (a whole-suite run on a GPU sets it for every binary).
fn on_the_cpu() -> std::sync::MutexGuard<'static, ()> {
    let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    ct::set_default_device(Device::Cpu);
    turn
}

/// A computed array of `n` elements of `dtype`, all `v` (its buffer is the negation's output;
/// `full` is a broadcast view of one element).
fn filled(n: usize, dtype: DType, v: f64) -> Array {
    let x = -ct::full(&[n], -v, dtype);
    x.eval().unwrap();
    x
}

#[test]
fn freed_buffers_are_reused_by_size_and_alignment_and_the_limit_holds() {
    let _turn = on_the_cpu();
    let cpu = Device::Cpu;
    cpu.clear_cache().unwrap();
    assert_eq!(cpu.cached_bytes(), 0);

    // a 16 KiB f32 buffer goes to the cache and comes back as an i32 buffer (same alignment)
    let x = filled(4096, DType::F32, 1.0);
    let addr = x.__buffer_addr();
    drop(x);
    assert_eq!(cpu.cached_bytes(), 16384);
    let y = filled(4096, DType::I32, 2.0);
    assert_eq!(y.__buffer_addr(), addr, "the cached block is reused");
    assert_eq!(cpu.cached_bytes(), 0);
    assert!(y.to_vec::<i32>().unwrap().iter().all(|&v| v == 2), "every element rewritten");

    // sizes round up to whole 4 KiB pages: 4097 f32 (16388 bytes) share the 20 KiB list
    drop(y);
    let z = filled(4097, DType::F32, 3.0);
    assert_eq!(cpu.cached_bytes(), 16384, "a 20 KiB request does not take the 16 KiB block");
    drop(z);
    assert_eq!(cpu.cached_bytes(), 16384 + 20480);
    let z = filled(5000, DType::F32, 4.0); // 20000 bytes: the 20 KiB block
    assert_eq!(cpu.cached_bytes(), 16384);
    assert_eq!(z.to_vec::<f32>().unwrap(), vec![4.0; 5000]);
    drop(z);

    // an 8-byte-aligned request never takes a 4-byte-aligned block of its size
    let w = filled(2048, DType::F64, 5.0); // 16 KiB, like the cached f32 block
    assert_eq!(cpu.cached_bytes(), 16384 + 20480, "the f32 blocks stay cached");
    let w_addr = w.__buffer_addr();
    drop(w);
    assert_eq!(cpu.cached_bytes(), 2 * 16384 + 20480);

    // a lower limit evicts the least recently used sizes first: the f32 blocks, not the f64 one
    let previous = ct::set_host_cache_limit(24 << 10);
    assert_eq!(cpu.cached_bytes(), 16384);
    let w = filled(2048, DType::F64, 6.0);
    assert_eq!(w.__buffer_addr(), w_addr, "the most recently used block stayed");
    drop(w);

    // a buffer larger than the limit is not cached; limit 0 turns the cache off
    drop(filled(8192, DType::F32, 7.0)); // 32 KiB > 24 KiB
    assert_eq!(cpu.cached_bytes(), 16384);
    ct::set_host_cache_limit(0);
    assert_eq!(cpu.cached_bytes(), 0);
    drop(filled(4096, DType::F32, 8.0));
    assert_eq!(cpu.cached_bytes(), 0);

    ct::set_host_cache_limit(previous);
    drop(filled(4096, DType::F32, 9.0));
    assert_eq!(cpu.cached_bytes(), 16384);
    // buffers over 1 MiB go back to the global allocator
    drop(filled(1 << 18, DType::F32, 10.0)); // exactly 1 MiB: cached
    assert_eq!(cpu.cached_bytes(), 16384 + (1 << 20));
    drop(filled((1 << 18) + 1, DType::F32, 11.0));
    assert_eq!(cpu.cached_bytes(), 16384 + (1 << 20));
    cpu.clear_cache().unwrap();
    assert_eq!(cpu.cached_bytes(), 0);
}

#[test]
fn threads_sharing_the_cache_read_their_own_values() {
    // Eight threads allocate and free buffers of a few sizes as fast as they can; each block
    // moves between threads through the cache, and every array keeps the values it was given.
    let _turn = on_the_cpu();
    std::thread::scope(|s| {
        for t in 0..8u32 {
            s.spawn(move || {
                for i in 0..200u32 {
                    let n = [1024, 4096, 5000, 16384][(i + t) as usize % 4];
                    let v = f64::from(t * 1000 + i);
                    let x = filled(n, DType::F32, v);
                    let y = (&x * 2.0).to_vec::<f32>().unwrap();
                    assert!(y.iter().all(|&e| e == 2.0 * v as f32), "thread {t}, step {i}");
                    assert!(x.to_vec::<f32>().unwrap().iter().all(|&e| e == v as f32), "thread {t}, step {i}");
                }
            });
        }
    });
}
