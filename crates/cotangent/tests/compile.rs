//! `ct::compile`: compiled functions compute bit for bit what uncompiled ones compute, on the
//! CPU and (with `COTANGENT_DEVICE=cuda`) on CUDA (values and gradients, across the op library through the graph fuzzer's random
//! programs, which also wrap segments in checkpoints, custom functions and `depends`), trace
//! once per signature, fuse element-wise work, compose with the transforms, run from many
//! threads, and report errors as `Err`.
#[path = "fuzz_support/mod.rs"]
mod fuzz_support;

use cotangent::{self as ct, Array, DType};
use fuzz_support::program::{build, make_array, Class};
use fuzz_support::{gen_case, GenLimits};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Values as `f64` bit patterns (every dtype converts to `f64` exactly), or the error message.
fn bits(x: ct::Result<Array>) -> Result<Vec<u64>, String> {
    let x = x.map_err(|e| e.to_string())?;
    let v = x.astype(DType::F64).to_vec::<f64>().map_err(|e| e.to_string())?;
    Ok(v.iter().map(|f| f.to_bits()).collect())
}

fn values(x: &Array) -> Vec<f64> {
    x.astype(DType::F64).to_vec::<f64>().unwrap()
}

/// How far `grad(compile(f))` may be from `grad(f)`: a fused group's VJP sums the cotangents of
/// a value read several times in its own order, so sums of three or more terms may round
/// differently (a few units in the last place of the dtype, relative to the gradient's size).
fn regrouping_tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-13,
        DType::F32 => 1e-5,
        _ => 2e-2,
    }
}

fn first(r: ct::Result<Vec<Array>>) -> ct::Result<Array> {
    r.map(|v| v[0].clone())
}

/// Random programs from the graph fuzzer, in `f64` and a narrow dtype: the compiled value
/// equals the uncompiled one bit for bit, and so does the gradient of `compile(grad(f))`;
/// `grad(compile(f))` agrees up to the order of cotangent sums (see
/// [`regrouping_tolerance`]).
///
/// 5000 programs on the CPU. With CUDA as the default device every distinct fused group is a
/// new kernel for NVRTC to compile (tens to hundreds of milliseconds each, more than the
/// program takes), so 300 programs run there; `COMPILE_FUZZ_CASES=N` sets the count.
#[test]
fn random_programs_compile_bit_identically() {
    let on_gpu = ct::default_device() != ct::Device::Cpu;
    let cases: u64 = std::env::var("COMPILE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(if on_gpu {
        300
    } else {
        5000
    });
    let start = std::time::Instant::now();
    let mut fused_somewhere = 0;
    // COMPILE_FUZZ_SEEDS="161 162" runs just those programs (to study one that failed)
    let chosen: Option<Vec<u64>> =
        std::env::var("COMPILE_FUZZ_SEEDS").ok().map(|v| v.split_whitespace().filter_map(|s| s.parse().ok()).collect());
    let cases = chosen.as_ref().map_or(cases, |c| c.len() as u64);
    for seed in chosen.unwrap_or_else(|| (0..cases).collect()) {
        if on_gpu && seed % 50 == 0 {
            eprintln!("compile fuzz: {seed} programs in {:.1} s", start.elapsed().as_secs_f64());
        }
        let case = gen_case(seed, GenLimits::default());
        for dtype in [DType::F64, case.narrow] {
            let inputs: Vec<Array> =
                case.prog.inputs.iter().map(|i| make_array(&i.shape, &i.data, i.layout, dtype)).collect();
            let (prog, plan) = (case.prog.clone(), case.plan.clone());
            let f = move |xs: &[Array]| build(&prog, xs, &plan);
            let eager = bits(f(&inputs));
            let compiled = ct::compile(f.clone());
            let out = first(compiled(&inputs));
            if let Ok(o) = &out {
                fused_somewhere += format!("{o:?}").contains("fused[") as usize;
            }
            assert_eq!(bits(out), eager, "seed {seed}, {dtype}: compiled value differs\n{}", case.prog.to_rust());
            // a second call replays the cached program
            assert_eq!(
                bits(first(compiled(&inputs))),
                eager,
                "seed {seed}, {dtype}: replay differs\n{}",
                case.prog.to_rust()
            );
            if case.prog.class != Class::Float || case.special {
                continue;
            }
            let loss = move |xs: &[Array]| Ok::<_, ct::Error>(f(xs)?.sum_all());
            let g_eager = ct::grad(loss.clone())(&inputs);
            let g_outer = ct::grad(ct::compile(loss.clone()))(&inputs);
            let g_inner = ct::compile(ct::grad(loss))(&inputs);
            let (g_eager, g_outer, g_inner) = match (g_eager, g_outer, g_inner) {
                (Ok(a), Ok(b), Ok(c)) => (a, b, c),
                (a, b, c) => {
                    assert_eq!(a.is_ok(), b.is_ok(), "seed {seed}: grad(compile) ok-ness");
                    assert_eq!(a.is_ok(), c.is_ok(), "seed {seed}: compile(grad) ok-ness");
                    continue;
                }
            };
            for i in 0..g_eager.len() {
                let want = bits(Ok(g_eager[i].clone()));
                assert_eq!(bits(Ok(g_inner[i].clone())), want, "seed {seed}, {dtype}: compile(grad(f)) input {i}");
                let (got, want) = (values(&g_outer[i]), values(&g_eager[i]));
                let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
                for (a, b) in got.iter().zip(&want) {
                    assert!(
                        a.to_bits() == b.to_bits() || (a - b).abs() <= regrouping_tolerance(dtype) * scale,
                        "seed {seed}, {dtype}: grad(compile(f)) input {i}: {got:?} vs {want:?}"
                    );
                }
            }
        }
    }
    println!(
        "{cases} programs on {:?}, {fused_somewhere} outputs computed by a fused node, {:.1} s",
        ct::default_device(),
        start.elapsed().as_secs_f64()
    );
    // the programs are small, but many end in an element-wise run that fuses
    assert!(cases < 20 || fused_somewhere > cases as usize / 20, "only {fused_somewhere} outputs were fused");
}

/// Counts the traces of a compiled function.
fn counted(
    f: impl Fn(&[Array]) -> Array + Send + Sync + 'static,
) -> (impl Fn(&[Array]) -> ct::Result<Vec<Array>> + Clone, Arc<AtomicUsize>) {
    let traces = Arc::new(AtomicUsize::new(0));
    let counter = traces.clone();
    let c = ct::compile(move |xs: &[Array]| {
        counter.fetch_add(1, Ordering::Relaxed);
        f(xs)
    });
    (c, traces)
}

fn chain(x: &Array, links: usize) -> Array {
    let mut x = x.clone();
    for _ in 0..links {
        x = x.sin() * 1.01 + 0.1;
    }
    x
}

#[test]
fn one_trace_per_signature_and_retrace_on_a_new_one() {
    let (f, traces) = counted(|x| chain(&x[0], 3));
    let a = Array::from_slice(&[0.1f32, 0.2, 0.3], &[3]);
    for _ in 0..5 {
        f(&[a.clone()]).unwrap();
    }
    assert_eq!(traces.load(Ordering::Relaxed), 1);
    // other values, same signature
    f(&[Array::from_slice(&[1.0f32, 2.0, 3.0], &[3])]).unwrap();
    assert_eq!(traces.load(Ordering::Relaxed), 1);
    // new shape, dtype: traced again, once each
    for _ in 0..2 {
        f(&[Array::from_slice(&[1.0f32, 2.0], &[2])]).unwrap();
        f(&[Array::from_slice(&[1.0f64, 2.0, 3.0], &[3])]).unwrap();
    }
    assert_eq!(traces.load(Ordering::Relaxed), 3);
    // clones share the cache
    let g = f.clone();
    g(&[a.clone()]).unwrap();
    assert_eq!(traces.load(Ordering::Relaxed), 3);
}

#[test]
fn element_wise_chains_fuse_into_one_node_with_identical_values() {
    let f = ct::compile(|x: &[Array]| chain(&x[0], 50));
    for n in [1usize, 7, 4096, 4097, 300_001] {
        let x = ct::linspace(-3.0, 3.0, n, DType::F32);
        let out = &f(&[x.clone()]).unwrap()[0];
        let shown = format!("{out:?}");
        assert!(shown.contains("fused[sin, multiply, add, sin"), "{shown}");
        assert_eq!(out.to_vec::<f32>().unwrap(), chain(&x, 50).to_vec::<f32>().unwrap(), "n = {n}");
    }
}

/// A fused group with several values live at once, then groups with fewer, over sizes that
/// grow and shrink (one and two tiles, one element, none), in both float dtypes, one after the
/// other on one thread: the CPU's per-thread scratch kept from an earlier, larger tile holds
/// stale values, which no group may read. Each result equals the uncompiled expression bit for
/// bit and an `f64` reference within rounding.
#[test]
fn groups_of_every_size_on_one_thread_match_uncompiled() {
    fn wide(x: &Array) -> Array {
        (x.sin() * x.cos()) + (x.exp() * 0.5 - x.tanh()) * (x * x + 1.0).sqrt()
    }
    fn wide_ref(v: f64) -> f64 {
        v.sin() * v.cos() + (v.exp() * 0.5 - v.tanh()) * (v * v + 1.0).sqrt()
    }
    let wide_c = ct::compile(|x: &[Array]| wide(&x[0]));
    let chain_c = ct::compile(|x: &[Array]| chain(&x[0], 3));
    for (n, dtype) in
        [(9000, DType::F64), (5, DType::F32), (0, DType::F64), (4097, DType::F32), (1, DType::F64), (9000, DType::F32)]
    {
        let x = ct::linspace(-2.0, 2.0, n, dtype);
        let xs = values(&x);
        let got = &wide_c(&[x.clone()]).unwrap()[0];
        assert_eq!(bits(Ok(got.clone())), bits(Ok(wide(&x))), "wide, n = {n}, {dtype:?}");
        let tol = if dtype == DType::F64 { 1e-12 } else { 1e-5 };
        for (g, v) in values(got).iter().zip(&xs) {
            assert!(
                (g - wide_ref(*v)).abs() <= tol * (1.0 + wide_ref(*v).abs()),
                "wide({v}) = {g}, n = {n}, {dtype:?}"
            );
        }
        let got = &chain_c(&[x.clone()]).unwrap()[0];
        assert_eq!(bits(Ok(got.clone())), bits(Ok(chain(&x, 3))), "chain, n = {n}, {dtype:?}");
    }
}

/// On a GPU a chain longer than one group's limit (256 steps) is cut into several fused groups
/// (so that NVRTC compiles kernels of bounded size); on the CPU it stays one group. Either way the
/// values are those of the uncompiled chain. (300 steps, not more: NVRTC compiles the kernels,
/// and a 1200-step chain cut into 256-step groups took over a minute on an H100.)
#[test]
fn long_chains_are_cut_into_bounded_groups_on_a_gpu() {
    let f = ct::compile(|x: &[Array]| chain(&x[0], 100)); // 300 element-wise steps
    let x = ct::linspace(-3.0, 3.0, 5000, DType::F32);
    let out = &f(&[x.clone()]).unwrap()[0];
    let shown = format!("{out:?}");
    let steps = shown.split("fused[").nth(1).and_then(|s| s.split(']').next()).expect(&shown).split(", ").count();
    if ct::default_device() == ct::Device::Cpu {
        assert_eq!(steps, 300, "{shown}");
    } else {
        assert!((2..=256).contains(&steps), "the last group has {steps} steps: {shown}");
    }
    assert_eq!(out.to_vec::<f32>().unwrap(), chain(&x, 100).to_vec::<f32>().unwrap());
}

/// Broadcasting in every direction, strided and transposed inputs, several dtypes, outputs
/// large enough to be cut into many tiles and run in parallel.
#[test]
fn broadcasts_layouts_and_dtypes_match_uncompiled() {
    let key = ct::random::key(7);
    let ks = ct::random::split_keys(&key, 4);
    let body = |x: &[Array]| {
        let (a, row, col, s) = (&x[0], &x[1], &x[2], &x[3]);
        let t = (a * row).exp() - col.tanh() * s;
        let m = ct::select(&t.greater(Array::scalar(0.5f64).astype(t.dtype())), t.sqrt(), (-&t).log1p());
        vec![m.clone(), (m * 2.0 + a).astype(DType::F32), t.less(col)]
    };
    for dtype in [DType::F64, DType::F32, DType::F16, DType::BF16] {
        for (rows, cols) in [(3, 5), (300, 1000), (1, 70_000), (70_000, 1)] {
            let a = ct::random::normal(&ks[0], &[cols, rows], dtype).t(); // transposed view
            let row = ct::random::uniform(&ks[1], &[cols], 0.0, 1.0, dtype);
            let col = ct::random::normal(&ks[2], &[rows, 1], dtype);
            let s = Array::scalar(0.25f64).astype(dtype);
            let args = [a, row, col, s];
            let eager = body(&args);
            let compiled = ct::compile(body)(&args).unwrap();
            assert_eq!(compiled.len(), 3);
            for (c, e) in compiled.iter().zip(&eager) {
                assert_eq!((c.shape(), c.dtype()), (e.shape(), e.dtype()));
                assert_eq!(bits(Ok(c.clone())), bits(Ok(e.clone())), "{dtype} {rows}x{cols}");
            }
        }
    }
}

/// Updates of several parameters of different shapes that only the outputs read (an optimizer
/// step) run as one `fused_batch` node (on CUDA one kernel; a view among its inputs runs group
/// by group), with the values of the uncompiled updates bit for bit; its gradient, tangents
/// (only some members' inputs differentiated) and batched values (some members unbatched) are
/// those of the uncompiled function.
#[test]
fn final_updates_of_several_shapes_batch_into_one_node() {
    fn update(x: &[Array]) -> Vec<Array> {
        let lr = &x[6];
        vec![&x[0] - &x[1] * lr, &x[2] - &x[3] * lr, (&x[4] - &x[5] * lr).tanh(), x[1].sum_all() / 4.0]
    }
    let ks = ct::random::split_keys(&ct::random::key(11), 6);
    let shapes: [&[usize]; 6] = [&[3, 4], &[3, 4], &[5], &[5], &[2, 3, 2], &[2, 3, 2]];
    let mut args: Vec<Array> = ks.iter().zip(shapes).map(|(k, s)| ct::random::normal(k, s, DType::F32)).collect();
    args.push(Array::scalar(0.125f32));
    let mut with_view = args.clone();
    with_view[0] = ct::random::normal(&ks[0], &[4, 3], DType::F32).t();
    let f = ct::compile(update);
    for args in [&args, &with_view] {
        let got = f(args).unwrap();
        assert!(format!("{:?}", got[0]).contains("fused_batch[fused[multiply, subtract]"), "{:?}", got[0]);
        for (i, (g, w)) in got.iter().zip(update(args)).enumerate() {
            assert_eq!(bits(Ok(g.clone())), bits(Ok(w)), "output {i}");
        }
    }
    // reverse mode through the batch's rule
    let total = |outs: Vec<Array>| outs.iter().map(|o| o.sum_all()).reduce(|a, b| a + b).unwrap();
    let fc = f.clone();
    let got = ct::grad(move |x: &[Array]| fc(x).map(total))(&args).unwrap();
    let want = ct::grad(move |x: &[Array]| total(update(x)))(&args).unwrap();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let (g, w) = (values(g), values(w));
        let tol = regrouping_tolerance(DType::F32);
        assert!(g.iter().zip(&w).all(|(a, b)| (a - b).abs() <= tol * (1.0 + b.abs())), "grad {i}: {g:?} vs {w:?}");
    }
    // forward mode with only the first member's parameter varying: the others' tangents are zero
    let rest = args[1..].to_vec();
    let (fc, rest2) = (f.clone(), rest.clone());
    let t = ct::random::normal(&ct::random::key(12), &[3, 4], DType::F32);
    let with = move |r: &[Array], x: &Array| [&[x.clone()][..], r].concat();
    let (w2, r2) = (with, rest.clone());
    let (_, got) = ct::jvp(move |x: &[Array]| fc(&w2(&rest2, &x[0])).unwrap(), &args[..1], &[t.clone()]).unwrap();
    let (_, want) = ct::jvp(move |x: &[Array]| update(&with(&r2, &x[0])), &args[..1], &[t]).unwrap();
    assert_eq!(got.len(), 4);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(bits(Ok(g.clone())), bits(Ok(w.clone())), "tangent {i}");
    }
    // batched over the first member's inputs only
    let mut stacked = args.clone();
    stacked[0] = ct::random::normal(&ks[0], &[2, 3, 4], DType::F32);
    stacked[1] = ct::random::normal(&ks[1], &[2, 3, 4], DType::F32);
    let axes = [Some(0), Some(0), None, None, None, None, None];
    let out_axes = [Some(0); 4];
    let got = ct::vmap(ct::compile(update), &axes, &out_axes)(&stacked).unwrap();
    let want = ct::vmap(update, &axes, &out_axes)(&stacked).unwrap();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(bits(Ok(g.clone())), bits(Ok(w.clone())), "batched output {i}");
    }
}

#[test]
fn common_subexpressions_merge_and_no_ops_vanish() {
    let f = ct::compile(|x: &[Array]| {
        let a = x[0].sin() + x[0].sin();
        a.reshape(&[4]).astype(DType::F32).exp()
    });
    let x = Array::from_slice(&[0.1f32, 0.2, 0.3, 0.4], &[4]);
    let out = &f(&[x.clone()]).unwrap()[0];
    // one fused node: one `sin`, no reshape or cast
    assert!(format!("{out:?}").contains("fused[sin, add, exp])"), "{out:?}");
    assert_eq!(out.to_vec::<f32>().unwrap(), (x.sin() + x.sin()).exp().to_vec::<f32>().unwrap());
}

#[test]
fn integer_and_boolean_programs_fuse_too() {
    let f = |x: &[Array]| {
        let a = &x[0] * 3i32 + &x[1];
        let b = a.abs().maximum(&x[1]) % 7i32;
        ct::select(&b.greater(Array::scalar(2i32)), &b, -&b).astype(DType::I64)
    };
    let x = ct::arange(-20.0, 20.0, 1.0, DType::I32).reshape(&[5, 8]);
    let y = ct::arange(0.0, 8.0, 1.0, DType::I32);
    let c = ct::compile(f)(&[x.clone(), y.clone()]).unwrap();
    assert_eq!(c[0].to_vec::<i64>().unwrap(), f(&[x, y]).to_vec::<i64>().unwrap());
}

#[test]
fn vmap_of_compile_and_compile_of_vmap_match_vmap() {
    let f = |x: &[Array]| (x[0].sin() * &x[1]).sum(&[-1], false) + x[0].exp().max_all();
    let xs = ct::random::normal(&ct::random::key(1), &[6, 4, 5], DType::F64);
    let w = ct::random::normal(&ct::random::key(2), &[5], DType::F64);
    let want = ct::vmap(f, &[Some(0), None], &[Some(0)])(&[xs.clone(), w.clone()]).unwrap();
    let a = ct::vmap(ct::compile(f), &[Some(0), None], &[Some(0)])(&[xs.clone(), w.clone()]).unwrap();
    let b = ct::compile(ct::vmap(f, &[Some(0), None], &[Some(0)]))(&[xs, w]).unwrap();
    assert_eq!(bits(Ok(a[0].clone())), bits(Ok(want[0].clone())));
    assert_eq!(bits(Ok(b[0].clone())), bits(Ok(want[0].clone())));
}

#[test]
fn second_order_and_jvp_through_compile() {
    fn f(x: &[Array]) -> Array {
        (x[0].sin() * x[0].exp()).sum_all()
    }
    let x = Array::from_slice(&[0.3f64, -0.7, 1.1], &[3]);
    // the gradient of the sum of the gradient, uncompiled and through compile at both levels
    let eager = ct::grad(f);
    let want = ct::grad(move |x: &[Array]| eager(x).map(|v| v[0].sum_all()))(&[x.clone()]).unwrap();
    let inner = ct::grad(ct::compile(f));
    let got = ct::grad(move |x: &[Array]| inner(x).map(|v| v[0].sum_all()))(&[x.clone()]).unwrap();
    let outer = ct::compile(ct::grad(move |x: &[Array]| ct::grad(f)(x).map(|v| v[0].sum_all())));
    let got2 = outer(&[x.clone()]).unwrap();
    assert_eq!(bits(Ok(got[0].clone())), bits(Ok(want[0].clone())));
    assert_eq!(bits(Ok(got2[0].clone())), bits(Ok(want[0].clone())));
    let t = Array::from_slice(&[1.0f64, 0.5, -2.0], &[3]);
    let (_, jv) = ct::jvp(ct::compile(f), &[x.clone()], &[t.clone()]).unwrap();
    let (_, jw) = ct::jvp(f, &[x], &[t]).unwrap();
    assert_eq!(bits(Ok(jv[0].clone())), bits(Ok(jw[0].clone())));
}

#[test]
fn custom_functions_checkpoint_and_depends_inside_compile() {
    let softplus = ct::custom_function(|x: &[Array]| (x[0].exp() + 1.0).log())
        .vjp(|_p, c, o| vec![&c[0] * (1.0f64 - (-&o[0]).exp())])
        .build();
    let sp = softplus.clone();
    let f = move |x: &[Array]| {
        let h = ct::checkpoint(|y: &[Array]| y[0].tanh() * 2.0)(&[x[0].clone()]).unwrap()[0].clone();
        let s = sp(&[h.clone()]).unwrap()[0].clone();
        let d = ct::depends(&[s], &[h])[0].clone();
        (d * &x[1]).sum_all()
    };
    let args = [ct::linspace(-2.0, 2.0, 9, DType::F64), ct::linspace(0.0, 1.0, 9, DType::F64)];
    let want = ct::value_and_grad(f.clone())(&args).unwrap();
    let got = ct::value_and_grad(ct::compile(f.clone()))(&args).unwrap();
    let got2 = ct::compile(ct::value_and_grad(f))(&args).unwrap();
    assert_eq!(bits(Ok(got.0[0].clone())), bits(Ok(want.0[0].clone())));
    assert_eq!(bits(Ok(got2[0].clone())), bits(Ok(want.0[0].clone())));
    for i in 0..2 {
        assert_eq!(bits(Ok(got.1[i].clone())), bits(Ok(want.1[i].clone())), "grad {i}");
        assert_eq!(bits(Ok(got2[1 + i].clone())), bits(Ok(want.1[i].clone())), "compile(value_and_grad) {i}");
    }
}

#[test]
fn many_threads_call_one_compiled_function() {
    let (f, traces) = counted(|x| (chain(&x[0], 20) * &x[1]).sum(&[-1], false));
    let w = ct::linspace(0.0, 1.0, 1000, DType::F32);
    let x0 = ct::linspace(-1.0, 1.0, 1000, DType::F32);
    f(&[x0.clone(), w.clone()]).unwrap(); // traced once before the threads start
    std::thread::scope(|s| {
        for t in 0..8 {
            let (f, w) = (f.clone(), w.clone());
            s.spawn(move || {
                for i in 0..50 {
                    let x = ct::linspace(-1.0, 1.0 + (t * 50 + i) as f64 * 1e-3, 1000, DType::F32);
                    let got = f(&[x.clone(), w.clone()]).unwrap()[0].item::<f32>().unwrap();
                    let want = (chain(&x, 20) * &w).sum(&[-1], false).item::<f32>().unwrap();
                    assert_eq!(got.to_bits(), want.to_bits());
                }
            });
        }
    });
    assert_eq!(traces.load(Ordering::Relaxed), 1);
}

#[test]
fn errors_surface_as_err_from_the_call() {
    // reading a value computed from the inputs while tracing
    let f = ct::compile(|x: &[Array]| {
        let s = x[0].sum_all().item::<f32>()?;
        Ok::<_, ct::Error>(&x[0] * s as f64)
    });
    let e = f(&[Array::from_slice(&[1.0f32, 2.0], &[2])]).unwrap_err().to_string();
    assert!(e.contains("traced by vmap or compile"), "{e}");
    // an error returned by the function
    let g = ct::compile(|_x: &[Array]| Err::<Array, _>(ct::Error::Transform("no".into())));
    assert!(g(&[Array::scalar(1.0f32)]).is_err());
    // an error found when the compiled graph runs names the op and the line that built it
    let h = ct::compile(|x: &[Array]| x[0].take(&Array::from_slice(&[5i32], &[1]), 0));
    let out = h(&[Array::from_slice(&[1.0f32, 2.0], &[2])]).unwrap();
    let e = out[0].eval().unwrap_err().to_string();
    assert!(e.contains("take") && e.contains("compile.rs"), "{e}");
}

#[test]
fn constants_are_computed_once_and_reused() {
    // a captured lazy constant and one built inside: both are shared by every call's graph
    let w = ct::linspace(0.0, 1.0, 4, DType::F64).exp();
    let f = ct::compile(move |x: &[Array]| &x[0] * &w + ct::ones(&[4], DType::F64) * 3.0);
    let a = f(&[ct::zeros(&[4], DType::F64)]).unwrap();
    let b = f(&[ct::ones(&[4], DType::F64)]).unwrap();
    let e = ct::linspace(0.0, 1.0, 4, DType::F64).exp();
    assert_eq!(a[0].to_vec::<f64>().unwrap(), vec![3.0; 4]);
    assert_eq!(b[0].to_vec::<f64>().unwrap(), (e + 3.0).to_vec::<f64>().unwrap());
}
