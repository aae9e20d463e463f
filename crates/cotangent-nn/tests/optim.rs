//! Optimizers' first steps against closed-form values; clipping and schedules; the state
//! saved and restored (a resumed run is bit-identical), its checks, compiled training steps and
//! gradient accumulation.
use cotangent::{self as ct, Array, DType};
use cotangent_nn::optim::{self, clip_grad_norm, global_norm, schedules, Adam, AdamW, Optimizer, Sgd};
use cotangent_nn::{self as nn, io, Activation, Mlp, Module, Tree};

fn tree(p: &[f64]) -> Tree {
    Tree::dict([("a", Tree::leaf(Array::from_slice(&p[..2], &[2]))), ("b", Tree::leaf(Array::scalar(p[2])))])
}

fn values(t: &Tree) -> Vec<f64> {
    t.leaves().iter().flat_map(|a| a.to_f64_vec().unwrap()).collect()
}

fn close(got: &[f64], want: &[f64]) {
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-12 * (1.0 + w.abs()), "got {got:?}, want {want:?}");
    }
}

const P: [f64; 3] = [1.0, -2.0, 0.5];
const G1: [f64; 3] = [0.1, 0.2, -0.3];
const G2: [f64; 3] = [-0.4, 0.0, 0.6];

/// Run two steps with gradients G1 then G2 and return the parameters after each.
fn two_steps(opt: &mut dyn FnMut(&Tree, &Tree) -> Tree) -> (Vec<f64>, Vec<f64>) {
    let p1 = opt(&tree(&P), &tree(&G1));
    let p2 = opt(&p1, &tree(&G2));
    (values(&p1), values(&p2))
}

#[test]
fn sgd_plain_momentum_nesterov_weight_decay() {
    let (lr, mu, wd) = (0.1, 0.9, 0.01);
    // plain
    let mut o = Sgd::new(lr);
    let (a, b) = two_steps(&mut |p, g| o.step(p, g).unwrap());
    let w1: Vec<f64> = (0..3).map(|i| P[i] - lr * G1[i]).collect();
    close(&a, &w1);
    close(&b, &(0..3).map(|i| w1[i] - lr * G2[i]).collect::<Vec<_>>());
    // momentum + weight decay (PyTorch: g += wd p; buf = g on step 1, then mu buf + g)
    for nesterov in [false, true] {
        let mut o = Sgd::new(lr).momentum(mu, nesterov).weight_decay(wd);
        let (a, b) = two_steps(&mut |p, g| o.step(p, g).unwrap());
        let (mut w1, mut w2) = (vec![0.0; 3], vec![0.0; 3]);
        for i in 0..3 {
            let g = G1[i] + wd * P[i];
            let buf = g;
            w1[i] = P[i] - lr * if nesterov { g + mu * buf } else { buf };
            let g2 = G2[i] + wd * w1[i];
            let buf2 = mu * buf + g2;
            w2[i] = w1[i] - lr * if nesterov { g2 + mu * buf2 } else { buf2 };
        }
        close(&a, &w1);
        close(&b, &w2);
        assert_eq!(o.state().names(), ["lr", "momentum_buffer.a", "momentum_buffer.b"]);
    }
}

fn adam_reference(decoupled: bool, lr: f64, wd: f64) -> (Vec<f64>, Vec<f64>) {
    let (b1, b2, eps) = (0.9, 0.999, 1e-8);
    let mut p = P.to_vec();
    let (mut m, mut v) = (vec![0.0; 3], vec![0.0; 3]);
    let mut out = vec![];
    for (t, g) in [G1, G2].iter().enumerate() {
        let t = t as i32 + 1;
        for i in 0..3 {
            let gi = if decoupled { g[i] } else { g[i] + wd * p[i] };
            m[i] = b1 * m[i] + (1.0 - b1) * gi;
            v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
            let mh = m[i] / (1.0 - b1.powi(t));
            let vh = v[i] / (1.0 - b2.powi(t));
            let d = mh / (vh.sqrt() + eps);
            p[i] -= lr * if decoupled { d + wd * p[i] } else { d };
        }
        out.push(p.clone());
    }
    (out[0].clone(), out[1].clone())
}

#[test]
fn adam_first_steps() {
    let mut o = Adam::new(0.01);
    let (a, b) = two_steps(&mut |p, g| o.step(p, g).unwrap());
    let (w1, w2) = adam_reference(false, 0.01, 0.0);
    close(&a, &w1);
    close(&b, &w2);
    // the first Adam step moves every coordinate by ~lr (sign of the gradient)
    for i in 0..3 {
        assert!(((P[i] - a[i]).abs() - 0.01).abs() < 1e-6);
    }
    let mut o = Adam::new(0.01);
    o.weight_decay = 0.1;
    let (a, b) = two_steps(&mut |p, g| o.step(p, g).unwrap());
    let (w1, w2) = adam_reference(false, 0.01, 0.1);
    close(&a, &w1);
    close(&b, &w2);
    assert_eq!(o.steps().unwrap(), 2);
    assert_eq!(o.state().names(), ["step", "lr", "m.a", "m.b", "v.a", "v.b"]);
}

#[test]
fn adamw_first_steps() {
    let mut o = AdamW::new(0.01, 0.1);
    let (a, b) = two_steps(&mut |p, g| o.step(p, g).unwrap());
    let (w1, w2) = adam_reference(true, 0.01, 0.1);
    close(&a, &w1);
    close(&b, &w2);
}

#[test]
fn clipping_by_global_norm() {
    let g = tree(&[3.0, 0.0, 4.0]);
    assert!((global_norm(&g).item::<f64>().unwrap() - 5.0).abs() < 1e-12);
    let (c, n) = clip_grad_norm(&g, 1.0);
    assert!((n.item::<f64>().unwrap() - 5.0).abs() < 1e-12);
    let s = 1.0 / (5.0 + 1e-6);
    close(&values(&c), &[3.0 * s, 0.0, 4.0 * s]);
    let (c, _) = clip_grad_norm(&g, 10.0);
    close(&values(&c), &[3.0, 0.0, 4.0]);
}

#[test]
fn schedules_values() {
    let w = schedules::linear_warmup(0.0, 1.0, 10);
    assert_eq!(w(0), 0.0);
    assert!((w(5) - 0.5).abs() < 1e-12);
    assert_eq!(w(10), 1.0);
    assert_eq!(w(100), 1.0);
    let c = schedules::cosine_decay(1.0, 100, 0.1);
    assert!((c(0) - 1.0).abs() < 1e-12);
    assert!((c(50) - 0.55).abs() < 1e-12);
    assert!((c(100) - 0.1).abs() < 1e-12);
    assert!((c(1000) - 0.1).abs() < 1e-12);
    let wc = schedules::warmup_cosine(2.0, 10, 110, 0.0);
    assert!((wc(5) - 1.0).abs() < 1e-12);
    assert!((wc(10) - 2.0).abs() < 1e-12);
    assert!((wc(60) - 1.0).abs() < 1e-12);
    assert!(wc(110).abs() < 1e-12);
}

// ----- state: save, restore, resume -----------------------------------------------------------

/// A small regression problem: an MLP `4 -> 8 -> 2` in f32 and batch `i` of 6 rows.
fn mlp(seed: u64) -> Mlp {
    Mlp::new(&ct::random::key(seed), 4, 8, Activation::Gelu, DType::F32)
}

fn batch(i: usize) -> Vec<Array> {
    let key = ct::random::fold_in(&ct::random::key(99), i as u32);
    let (kx, ky) = ct::random::split2(&key);
    vec![ct::random::normal(&kx, &[6, 4], DType::F32), ct::random::normal(&ky, &[6, 4], DType::F32)]
}

fn mse(m: &Mlp, b: &[Array]) -> Array {
    (m.forward(&b[0]) - &b[1]).square().mean_all()
}

/// The learning rate of step `s`: it changes at every step (warm-up, then cosine).
fn lr_at(s: usize) -> f64 {
    schedules::warmup_cosine(0.05, 3, 10, 0.005)(s)
}

fn bits(t: &Tree) -> Vec<(String, Vec<u32>)> {
    t.flatten()
        .into_iter()
        .map(|(n, a)| (n, a.to_vec::<f32>().unwrap().iter().map(|x| x.to_bits()).collect()))
        .collect()
}

/// Steps `from..to` of the reference run on `model` with `opt`: value_and_grad, clipping, the
/// schedule and `update`. Returns the losses' bits.
fn run_steps<O: Optimizer>(model: &mut Mlp, opt: &mut O, from: usize, to: usize) -> Vec<u32> {
    let vg = nn::value_and_grad(mse);
    (from..to)
        .map(|s| {
            let (outs, grads) = vg(model, &batch(s)).unwrap();
            let (grads, _) = clip_grad_norm(&grads, 0.5);
            opt.set_lr(lr_at(s));
            opt.update(model, &grads).unwrap();
            outs[0].item::<f32>().unwrap().to_bits()
        })
        .collect()
}

/// N steps in one go against k steps, a save of the parameters and the optimizer state, a load
/// into a fresh model and optimizer (other init, other learning rate), and N − k more steps:
/// every loss, parameter and state array bit-equal.
fn check_resume<O: Optimizer + Clone>(make: impl Fn() -> O) {
    let (n, k) = (8, 3);
    let mut model = mlp(0);
    let mut opt = make();
    let straight = run_steps(&mut model, &mut opt, 0, n);

    let dir = std::env::temp_dir().join(format!("cotangent_optim_resume_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut first = mlp(0);
    let mut opt1 = make();
    let mut resumed = run_steps(&mut first, &mut opt1, 0, k);
    io::save(dir.join("params.safetensors"), &first.parameters(), None).unwrap();
    opt1.save_state(dir.join("optimizer.safetensors")).unwrap();
    drop((first, opt1));

    let mut second = mlp(7);
    io::load_into(&mut second, dir.join("params.safetensors")).unwrap();
    let mut opt2 = make();
    opt2.set_lr(123.0);
    opt2.load_state_file(dir.join("optimizer.safetensors")).unwrap();
    resumed.extend(run_steps(&mut second, &mut opt2, k, n));
    std::fs::remove_dir_all(&dir).ok();

    assert_eq!(resumed, straight, "losses of the resumed run against the uninterrupted one");
    assert_eq!(bits(&second.parameters()), bits(&model.parameters()));
    let state = |o: &O| o.state().flatten().into_iter().map(|(n, a)| (n, a.to_f64_vec().unwrap())).collect::<Vec<_>>();
    let (a, b) = (state(&opt2), state(&opt));
    assert_eq!(a.len(), b.len());
    for ((na, va), (nb, vb)) in a.iter().zip(&b) {
        assert_eq!(na, nb);
        assert!(va.iter().zip(vb).all(|(x, y)| x.to_bits() == y.to_bits()), "state `{na}` differs");
    }
}

#[test]
fn resumed_runs_are_bit_identical() {
    check_resume(|| Sgd::new(0.1).momentum(0.9, true).weight_decay(1e-3));
    check_resume(|| {
        let mut a = Adam::new(0.01);
        a.weight_decay = 1e-3;
        a
    });
    check_resume(|| AdamW::new(0.01, 0.1));
}

#[test]
fn the_state_holds_the_step_and_the_learning_rate() {
    let mut model = mlp(0);
    let mut opt = AdamW::new(0.01, 0.0);
    run_steps(&mut model, &mut opt, 0, 2);
    let state = opt.state();
    assert_eq!(state.require("step").unwrap().item::<i64>().unwrap(), 2);
    assert_eq!(state.require("lr").unwrap().item::<f64>().unwrap(), lr_at(1));
    assert_eq!(opt.lr().unwrap(), lr_at(1));
    assert_eq!(opt.steps().unwrap(), 2);
    // the moments are named like the parameters
    let names = model.trainable_parameters().names();
    let m: Vec<String> = state.names().into_iter().filter_map(|n| n.strip_prefix("m.").map(String::from)).collect();
    assert_eq!(m, names);
}

#[test]
fn load_state_names_every_mismatch() {
    let params =
        Tree::dict([("a", Tree::leaf(ct::zeros(&[2, 3], DType::F32))), ("b", Tree::leaf(ct::zeros(&[3], DType::F32)))]);
    let mut opt = AdamW::new(0.01, 0.0);
    opt.init(&params);
    let good = opt.state();
    // a wrong shape, a wrong dtype, a missing moment, an unknown name, an f32 learning rate
    let bad = Tree::dict([
        ("step", Tree::leaf(Array::scalar(3i64))),
        ("lr", Tree::leaf(Array::scalar(0.1f32))),
        (
            "m",
            Tree::dict([
                ("a", Tree::leaf(ct::zeros(&[3, 2], DType::F32))),
                ("b", Tree::leaf(ct::zeros(&[3], DType::F64))),
            ]),
        ),
        ("v", Tree::dict([("a", Tree::leaf(ct::zeros(&[2, 3], DType::F32)))])),
        ("momentum", Tree::leaf(Array::scalar(0.9f64))),
    ]);
    let err = opt.load_state(&bad).unwrap_err().to_string();
    for part in [
        "AdamW::load_state",
        "`momentum` is not part of the state of AdamW",
        "`lr` must be a 0-d float64 array, but it has shape [] and dtype float32",
        "`m.a` has shape [3, 2] and dtype float32, but this optimizer's `m.a` has shape [2, 3] and dtype float32",
        "`m.b` has shape [3] and dtype float64, but this optimizer's `m.b` has shape [3] and dtype float32",
        "`v.b` is missing (this optimizer's `v.b` exists)",
    ] {
        assert!(err.contains(part), "`{part}` not in: {err}");
    }
    // unchanged by the failed load, and a good state loads
    assert_eq!(opt.steps().unwrap(), 0);
    opt.load_state(&good.map(|n, a| if n == "step" { Array::scalar(5i64) } else { a.clone() })).unwrap();
    assert_eq!(opt.steps().unwrap(), 5);
    // a state without moments cannot replace one with moments
    let err = opt.load_state(&good.filter(|n| n == "step" || n == "lr")).unwrap_err().to_string();
    assert!(err.contains("holds moments"), "{err}");
    // Sgd names its own keys
    let err = Sgd::new(0.1).load_state(&good).unwrap_err().to_string();
    assert!(err.contains("`step` is not part of the state of Sgd"), "{err}");
}

// ----- compiled steps --------------------------------------------------------------------------

/// The compiled step against the uncompiled one for `n` steps whose learning rate changes at
/// every step: bit-identical losses, gradient norms, parameters and state on the CPU.
fn check_compiled<O: Optimizer + Clone + Send + Sync + 'static>(opt: O) {
    let n = 6;
    let mut eager_model = mlp(3);
    let mut eager_opt = opt.clone();
    let vg = nn::value_and_grad(mse);
    let mut eager = Vec::new();
    for s in 0..n {
        let (outs, grads) = vg(&eager_model, &batch(s)).unwrap();
        let (grads, norm) = clip_grad_norm(&grads, 0.5);
        eager_opt.set_lr(lr_at(s));
        eager_opt.update(&mut eager_model, &grads).unwrap();
        eager.push((outs[0].item::<f32>().unwrap().to_bits(), norm.item::<f32>().unwrap().to_bits()));
    }
    let mut model = mlp(3);
    let mut o = opt;
    let step = optim::compile_step(mse, &model, &o, Some(0.5));
    let mut compiled = Vec::new();
    for s in 0..n {
        o.set_lr(lr_at(s));
        let outs = step(&mut model, &mut o, &batch(s)).unwrap();
        assert_eq!(outs.len(), 2, "the loss and the gradient norm");
        compiled.push((outs[0].item::<f32>().unwrap().to_bits(), outs[1].item::<f32>().unwrap().to_bits()));
    }
    assert_eq!(compiled, eager);
    assert_eq!(bits(&model.parameters()), bits(&eager_model.parameters()));
    let state = |o: &O| o.state().leaves().iter().map(|a| a.to_f64_vec().unwrap()).collect::<Vec<_>>();
    let (a, b) = (state(&o), state(&eager_opt));
    assert!(a.iter().flatten().zip(b.iter().flatten()).all(|(x, y)| x.to_bits() == y.to_bits()));
}

#[test]
fn compiled_steps_match_uncompiled_ones() {
    check_compiled(AdamW::new(0.01, 0.1));
    check_compiled(Adam::new(0.01));
    check_compiled(Sgd::new(0.1).momentum(0.9, false));
}

#[test]
fn a_compiled_step_refuses_another_model() {
    let model = mlp(0);
    let opt = AdamW::new(0.01, 0.0);
    let step = optim::compile_step(mse, &model, &opt, None);
    let mut other = Mlp::new(&ct::random::key(0), 4, 8, Activation::Gelu, DType::F32);
    other.fc2.bias = None;
    let err = step(&mut other, &mut opt.clone(), &batch(0)).unwrap_err().to_string();
    assert!(err.contains("compiled for 4 trainable parameters"), "{err}");
}

// ----- gradient accumulation -------------------------------------------------------------------

#[test]
fn accumulated_gradients_are_the_whole_batch_gradient() {
    let model = Mlp::new(&ct::random::key(1), 3, 5, Activation::Tanh, DType::F64);
    let key = ct::random::key(2);
    let x = ct::random::normal(&key, &[8, 3], DType::F64);
    let y = ct::random::normal(&ct::random::fold_in(&key, 1), &[8, 3], DType::F64);
    let loss = |m: &Mlp, b: &[Array]| (m.forward(&b[0]) - &b[1]).square().mean_all();
    let vg = nn::value_and_grad(loss);
    let (whole_loss, whole) = vg(&model, &[x.clone(), y.clone()]).unwrap();
    let rows = |a: &Array, i: isize| a.slice_axis(0, Some(2 * i), Some(2 * i + 2), 1);
    let micro: Vec<Vec<Array>> = (0..4).map(|i| vec![rows(&x, i), rows(&y, i)]).collect();
    let (loss, acc) = optim::accumulate_gradients(&vg, &model, &micro).unwrap();
    let l = loss[0].item::<f64>().unwrap();
    let w = whole_loss[0].item::<f64>().unwrap();
    assert!((l - w).abs() < 1e-13 * w.abs(), "{l} vs {w}");
    assert_eq!(acc.names(), whole.names());
    for ((name, a), (_, b)) in acc.flatten().iter().zip(whole.flatten()) {
        let (a, b) = (a.to_vec::<f64>().unwrap(), b.to_vec::<f64>().unwrap());
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-13 * (1.0 + y.abs()), "{name}: {x} vs {y}");
        }
    }
}
