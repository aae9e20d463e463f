//! Shared helpers for cotangent's benchmark programs.
//!
//! They mirror `bench/peers/_common.py`: the same timing procedure (`time_fn`: warm-up calls, an
//! inner loop calibrated to last at least `min_time`, the median over `reps` repetitions), the same
//! memory probes (VmRSS / VmHWM from `/proc/self/status`, peak reset through
//! `/proc/self/clear_refs`), and one JSON line per run with the keys
//! `{"bench", "framework", "version", "params", "results", "machine"}`.
#![warn(missing_docs)]

use serde_json::{json, Map, Value};
use std::time::Instant;

pub use serde_json;

/// Result of [`time_fn`], in seconds per call (the keys of `_common.time_fn`).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Median over the repetitions.
    pub median_s: f64,
    /// Fastest repetition.
    pub min_s: f64,
    /// Slowest repetition.
    pub max_s: f64,
    /// Calls per repetition.
    pub inner: usize,
    /// Number of repetitions.
    pub reps: usize,
}

/// Median per-call wall time of `f`, exactly as `_common.time_fn`: `warmup` untimed calls, an
/// inner loop calibrated so a repetition lasts at least `min_time` seconds, then `reps` timed
/// repetitions. Each call is followed by a synchronisation of the default device, so work a GPU
/// has only queued is counted (as `torch.cuda.synchronize()` after each call in the peers).
pub fn time_fn(mut f: impl FnMut(), warmup: usize, reps: usize, min_time: f64) -> Timing {
    let device = cotangent::default_device();
    let mut f = move || {
        f();
        device.synchronize().expect("synchronising the device");
    };
    const MAX_INNER: usize = 1_000_000;
    for _ in 0..warmup {
        f();
    }
    let mut inner = 1usize;
    loop {
        let t0 = Instant::now();
        for _ in 0..inner {
            f();
        }
        let dt = t0.elapsed().as_secs_f64();
        if dt >= min_time || inner >= MAX_INNER {
            break;
        }
        let scaled = (inner as f64 * min_time / dt.max(1e-9) * 1.1) as usize;
        inner = MAX_INNER.min((inner * 2).max(scaled));
    }
    let mut samples: Vec<f64> = (0..reps)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..inner {
                f();
            }
            t0.elapsed().as_secs_f64() / inner as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    Timing { median_s: median_sorted(&samples), min_s: samples[0], max_s: samples[samples.len() - 1], inner, reps }
}

fn median_sorted(s: &[f64]) -> f64 {
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Median of unsorted samples (Python's `statistics.median`).
pub fn median(samples: &[f64]) -> f64 {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    median_sorted(&s)
}

/// Wall time of one call and its result (`_common.timed_once`).
pub fn timed_once<R>(f: impl FnOnce() -> R) -> (f64, R) {
    let t0 = Instant::now();
    let r = f();
    (t0.elapsed().as_secs_f64(), r)
}

fn status_kib(field: &str) -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
}

/// Current resident set size in MiB (VmRSS).
pub fn rss_mib() -> Option<f64> {
    status_kib("VmRSS").map(|k| k / 1024.0)
}

/// Peak RSS in MiB since process start or the last [`reset_peak_rss`] (VmHWM).
pub fn hwm_mib() -> Option<f64> {
    status_kib("VmHWM").map(|k| k / 1024.0)
}

/// Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to `/proc/self/clear_refs`).
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// `getrusage(RUSAGE_SELF).ru_maxrss` in MiB: the whole-lifetime peak, which `clear_refs` does
/// not reset (`_common.maxrss_mib`).
pub fn maxrss_mib() -> Option<f64> {
    #[repr(C)]
    struct Timeval {
        sec: i64,
        usec: i64,
    }
    #[repr(C)]
    struct Rusage {
        utime: Timeval,
        stime: Timeval,
        maxrss: i64,
        rest: [i64; 13],
    }
    extern "C" {
        fn getrusage(who: i32, usage: *mut Rusage) -> i32;
    }
    let mut r = std::mem::MaybeUninit::<Rusage>::zeroed();
    // SAFETY: getrusage writes a `struct rusage` (same layout on x86_64/aarch64 Linux) into `r`.
    let rc = unsafe { getrusage(0, r.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: initialised (zeroed, then filled by the kernel).
    let r = unsafe { r.assume_init() };
    Some(r.maxrss as f64 / 1024.0)
}

/// Return freed memory to the OS before a memory measurement: cotangent's cached host buffers
/// (`Device::clear_cache`), then freed heap pages (`malloc_trim(0)`, as `_common.trim_heap`).
/// Memory the measured calls cache again counts in their peak.
pub fn trim_heap() {
    let _ = cotangent::Device::Cpu.clear_cache();
    extern "C" {
        fn malloc_trim(pad: usize) -> i32;
    }
    // SAFETY: glibc's malloc_trim has no preconditions.
    unsafe {
        malloc_trim(0);
    }
}

/// CPU model from `lscpu` ("Model name:").
pub fn cpu_model() -> String {
    std::process::Command::new("lscpu")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find(|l| l.starts_with("Model name:"))
                .map(|l| l.split_once(':').map(|x| x.1.trim().to_string()).unwrap_or_default())
        })
        .unwrap_or_default()
}

/// The `machine` object of the peer records (cpu, ncpu, env), with `rust` in place of `python`.
pub fn env_info(threads: Option<usize>) -> Value {
    let keys = [
        "OPENBLAS_CORETYPE",
        "OPENBLAS_L2_SIZE",
        "OPENBLAS_NUM_THREADS",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "RAYON_NUM_THREADS",
        "XLA_FLAGS",
        "JAX_PLATFORMS",
    ];
    let mut env = Map::new();
    for k in keys {
        if let Ok(v) = std::env::var(k) {
            env.insert(k.into(), Value::String(v));
        }
    }
    json!({
        "cpu": cpu_model(),
        "ncpu": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "rayon_threads": rayon_threads(),
        "device": cotangent::default_device().to_string(),
        "threads_arg": threads,
        "env": env,
    })
}

fn rayon_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
}

/// Version string of the measured library.
pub fn version() -> String {
    format!("cotangent {}", env!("CARGO_PKG_VERSION"))
}

/// Print one JSON record on stdout.
pub fn emit(record: &Value) {
    println!("{}", serde_json::to_string(record).expect("serialisable record"));
}

/// Round every float to 4 significant digits (`_common.r3`).
pub fn r3(v: Value) -> Value {
    match v {
        Value::Number(n) if n.is_f64() => {
            let x = n.as_f64().unwrap_or(0.0);
            let y: f64 = format!("{x:.3e}").parse().unwrap_or(x);
            json!(y)
        }
        Value::Array(a) => Value::Array(a.into_iter().map(r3).collect()),
        Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (k, r3(v))).collect()),
        other => other,
    }
}

/// The record shared by all benchmarks.
pub fn record(bench: &str, params: Value, results: Value) -> Value {
    json!({
        "bench": bench,
        "framework": "cotangent",
        "version": version(),
        "params": params,
        "results": r3(results),
        "machine": env_info(None),
    })
}

/// Minimal command-line parsing: `--name value [value ...]` pairs.
#[derive(Debug, Default)]
pub struct Args {
    pairs: Vec<(String, Vec<String>)>,
}

impl Args {
    /// Parse `std::env::args()`. `--device cpu|cuda|cuda:N` makes that device the default, so
    /// every array a benchmark creates lives there.
    pub fn parse() -> Args {
        let args = Args::parse_only();
        if let Some(d) = args.str("device") {
            let device =
                cotangent::Device::parse(&d).unwrap_or_else(|| panic!("--device {d:?}: expected cpu, cuda or cuda:N"));
            cotangent::set_default_device(device);
        }
        args
    }

    fn parse_only() -> Args {
        let mut pairs: Vec<(String, Vec<String>)> = Vec::new();
        for a in std::env::args().skip(1) {
            if let Some(name) = a.strip_prefix("--") {
                if let Some((k, v)) = name.split_once('=') {
                    pairs.push((k.to_string(), vec![v.to_string()]));
                } else {
                    pairs.push((name.to_string(), Vec::new()));
                }
            } else if let Some(last) = pairs.last_mut() {
                last.1.push(a);
            } else {
                panic!("unexpected argument {a:?}; options are --name value");
            }
        }
        Args { pairs }
    }

    fn get(&self, name: &str) -> Option<&Vec<String>> {
        self.pairs.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// `--name` present (a flag)?
    pub fn flag(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// A string option.
    pub fn str(&self, name: &str) -> Option<String> {
        self.get(name).and_then(|v| v.first().cloned())
    }

    /// A single number with a default.
    pub fn num<T: std::str::FromStr>(&self, name: &str, default: T) -> T {
        match self.get(name).and_then(|v| v.first()) {
            Some(s) => s.parse().unwrap_or_else(|_| panic!("--{name}: cannot parse {s:?}")),
            None => default,
        }
    }

    /// A list of numbers with a default.
    pub fn nums<T: std::str::FromStr + Clone>(&self, name: &str, default: &[T]) -> Vec<T> {
        match self.get(name) {
            Some(v) if !v.is_empty() => {
                v.iter().map(|s| s.parse().unwrap_or_else(|_| panic!("--{name}: cannot parse {s:?}"))).collect()
            }
            _ => default.to_vec(),
        }
    }

    /// A list of strings with a default.
    pub fn strs(&self, name: &str, default: &[&str]) -> Vec<String> {
        match self.get(name) {
            Some(v) if !v.is_empty() => v.clone(),
            _ => default.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// Deterministic pseudo-random numbers for synthetic data (SplitMix64 + Box–Muller). The peers
/// draw from numpy's PCG64; the values differ, the distributions and scales are the same.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Integer in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Standard normal.
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// `n` standard normals times `scale`, as f32.
    pub fn normal_f32(&mut self, n: usize, scale: f64) -> Vec<f32> {
        (0..n).map(|_| (self.normal() * scale) as f32).collect()
    }
}

/// Re-run this program as a child with extra arguments; return its last JSON line (as
/// `_common.run_child`), or an `{"error": ...}` object.
pub fn run_child(extra: &[String]) -> Value {
    let exe = std::env::current_exe().expect("current exe");
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    args.extend_from_slice(extra);
    match std::process::Command::new(exe).args(&args).output() {
        Ok(o) => {
            let out = String::from_utf8_lossy(&o.stdout);
            let last = out.lines().rev().find(|l| l.trim_start().starts_with('{'));
            match (o.status.success(), last) {
                (true, Some(l)) => serde_json::from_str(l).unwrap_or_else(|e| json!({"error": e.to_string()})),
                _ => {
                    let err = String::from_utf8_lossy(&o.stderr);
                    let tail: String = err.chars().rev().take(2000).collect::<Vec<_>>().into_iter().rev().collect();
                    json!({"error": format!("child status {}", o.status), "stderr_tail": tail})
                }
            }
        }
        Err(e) => json!({"error": e.to_string()}),
    }
}
