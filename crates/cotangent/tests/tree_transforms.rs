//! Tree-aware transforms (`grad_tree`, `value_and_grad_tree`, `vmap_tree`) over structured
//! parameters and batches, checked against the positional transforms on the flattened leaves
//! and against gradients derived by hand or by central differences in f64.
use cotangent::{self as ct, Array, ArrayTree, Result};
use std::collections::BTreeMap;

/// Parameters of a one-hidden-layer network: `"hidden"` is `(W1 [3, 2], [b1 [3]])`, `"out"`
/// is `(w2 [3], [b2 []])`. Flattened in key order: W1, b1, w2, b2.
type Params = BTreeMap<String, (Array, Vec<Array>)>;
/// Inputs `x [n, 2]` and targets `t [n]`.
type Batch = (Array, Array);

const W1: [f64; 6] = [0.3, -0.2, 0.5, 0.1, -0.4, 0.7];
const B1: [f64; 3] = [0.05, -0.1, 0.2];
const W2: [f64; 3] = [0.6, -0.8, 0.4];
const B2: f64 = 0.15;
const X: [f64; 8] = [1.0, 0.5, -0.3, 2.0, 0.8, -1.2, 1.5, 0.25];
const T: [f64; 4] = [0.2, -0.5, 0.7, 0.1];

fn params() -> Params {
    BTreeMap::from([
        ("hidden".to_string(), (Array::from_slice(&W1, &[3, 2]), vec![Array::from_slice(&B1, &[3])])),
        ("out".to_string(), (Array::from_slice(&W2, &[3]), vec![Array::scalar(B2)])),
    ])
}

fn batch() -> Batch {
    (Array::from_slice(&X, &[4, 2]), Array::from_slice(&T, &[4]))
}

/// The network's predictions `tanh(x W1ᵀ + b1) · w2 + b2`, one per row of `x`.
fn predict(p: &Params, x: &Array) -> Array {
    let (w1, b1) = &p["hidden"];
    let (w2, b2) = &p["out"];
    let h = (x.matmul(&w1.t()) + &b1[0]).tanh();
    (&h * w2).sum(&[-1], false) + &b2[0]
}

/// Mean squared error of the predictions.
fn mse_loss(p: &Params, (x, t): &Batch) -> Array {
    (predict(p, x) - t).square().mean_all()
}

/// The loss and its gradient (W1, b1, w2, b2 flattened, in that order) derived by hand, in f64,
/// for parameters given as flat slices.
fn hand_loss_and_grads(w1: &[f64], b1: &[f64], w2: &[f64], b2: f64, x: &[f64], t: &[f64]) -> (f64, Vec<Vec<f64>>) {
    let n = t.len();
    let (mut loss, mut gw1, mut gb1, mut gw2, mut gb2) = (0.0, vec![0.0; 6], vec![0.0; 3], vec![0.0; 3], 0.0);
    for e in 0..n {
        let xe = &x[e * 2..e * 2 + 2];
        let h: Vec<f64> = (0..3).map(|j| (w1[j * 2] * xe[0] + w1[j * 2 + 1] * xe[1] + b1[j]).tanh()).collect();
        let r = (0..3).map(|j| h[j] * w2[j]).sum::<f64>() + b2 - t[e];
        loss += r * r / n as f64;
        let dy = 2.0 * r / n as f64;
        gb2 += dy;
        for j in 0..3 {
            gw2[j] += dy * h[j];
            let da = dy * w2[j] * (1.0 - h[j] * h[j]);
            gb1[j] += da;
            gw1[j * 2] += da * xe[0];
            gw1[j * 2 + 1] += da * xe[1];
        }
    }
    (loss, vec![gw1, gb1, gw2, vec![gb2]])
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}[{i}]: got {g}, want {w}");
    }
}

fn values(tree: &impl ArrayTree) -> Vec<Vec<f64>> {
    tree.leaves().iter().map(|a| a.to_f64_vec().unwrap()).collect()
}

/// Central differences of `loss` at `params`, for every element of every leaf, in leaf order.
fn central_differences<P: ArrayTree>(params: &P, loss: impl Fn(&P) -> f64) -> Vec<Vec<f64>> {
    let leaves = params.leaves();
    let h = 1e-6;
    leaves
        .iter()
        .enumerate()
        .map(|(i, leaf)| {
            let base = leaf.to_f64_vec().unwrap();
            (0..base.len())
                .map(|k| {
                    let at = |d: f64| {
                        let mut v = base.clone();
                        v[k] += d;
                        let mut moved = leaves.clone();
                        moved[i] = Array::from_vec(v, leaf.shape());
                        loss(&params.with_leaves(moved).unwrap())
                    };
                    (at(h) - at(-h)) / (2.0 * h)
                })
                .collect()
        })
        .collect()
}

#[test]
fn gradients_over_a_nested_map_match_positional_grad_and_hand_derived_formulas() {
    let p = params();
    let grads: Params = ct::grad_tree(mse_loss)(&p, &batch()).unwrap();

    // same keys and shapes as the parameters
    assert_eq!(grads.keys().collect::<Vec<_>>(), ["hidden", "out"]);
    for (key, (w, b)) in &p {
        assert_eq!(grads[key].0.shape(), w.shape(), "{key}");
        assert_eq!(grads[key].1.len(), b.len(), "{key}");
        assert_eq!(grads[key].1[0].shape(), b[0].shape(), "{key}");
    }

    // the positional transform on the same function of the flattened leaves
    let template = p.clone();
    let positional = ct::grad(move |leaves: &[Array]| -> Result<Array> {
        Ok(mse_loss(&template.with_leaves(leaves.to_vec())?, &batch()))
    })(&p.leaves())
    .unwrap();
    for (tree_leaf, positional_leaf) in values(&grads).iter().zip(values(&positional)) {
        assert_close(tree_leaf, &positional_leaf, 1e-14, "grad_tree vs grad");
    }

    let (_, hand) = hand_loss_and_grads(&W1, &B1, &W2, B2, &X, &T);
    for (i, (got, want)) in values(&grads).iter().zip(&hand).enumerate() {
        assert_close(got, want, 1e-12, &format!("leaf {i} vs hand-derived"));
    }
    let fd = central_differences(&p, |q| mse_loss(q, &batch()).item::<f64>().unwrap());
    for (i, (got, want)) in values(&grads).iter().zip(&fd).enumerate() {
        assert_close(got, want, 1e-7, &format!("leaf {i} vs central differences"));
    }
}

#[test]
fn value_and_grad_tree_returns_the_loss_its_auxiliary_outputs_and_gradients() {
    let loss_and_predictions = |p: &Params, b: &Batch| vec![mse_loss(p, b), predict(p, &b.0)];
    let (outputs, grads) = ct::value_and_grad_tree(loss_and_predictions)(&params(), &batch()).unwrap();
    assert_eq!(outputs.len(), 2);

    let (loss, hand) = hand_loss_and_grads(&W1, &B1, &W2, B2, &X, &T);
    assert!((outputs[0].item::<f64>().unwrap() - loss).abs() < 1e-14, "loss");
    let predictions: Vec<f64> = (0..4)
        .map(|e| {
            let h = (0..3).map(|j| (W1[j * 2] * X[e * 2] + W1[j * 2 + 1] * X[e * 2 + 1] + B1[j]).tanh());
            h.zip(W2).map(|(h, w)| h * w).sum::<f64>() + B2
        })
        .collect();
    assert_close(&outputs[1].to_f64_vec().unwrap(), &predictions, 1e-14, "auxiliary predictions");
    // the auxiliary output is not differentiated: the gradient is the loss's alone
    for (got, want) in values(&grads).iter().zip(&hand) {
        assert_close(got, want, 1e-12, "gradient");
    }
}

#[test]
fn grad_of_grad_through_a_tree() {
    // f(a, b) = Σ sin(a_i) b²; s = Σ ∂f/∂a_i + ∂f/∂b = b² Σ cos(a_i) + 2b Σ sin(a_i)
    let f = |(a, b): &(Array, Option<Array>), _: &()| a.sin().sum_all() * b.as_ref().unwrap().square();
    let df = ct::grad_tree(f);
    let sum_of_gradients = move |p: &(Array, Option<Array>), batch: &()| -> Result<Array> {
        let leaves = df(p, batch)?.leaves();
        Ok(leaves.iter().map(Array::sum_all).reduce(|x, y| x + y).unwrap())
    };
    let a = [0.3f64, -1.1, 2.0];
    let b = 1.7f64;
    let p = (Array::from_slice(&a, &[3]), Some(Array::scalar(b)));
    let (da, db) = ct::grad_tree(sum_of_gradients)(&p, &()).unwrap();

    let want_da: Vec<f64> = a.iter().map(|x| -x.sin() * b * b + 2.0 * b * x.cos()).collect();
    let want_db = 2.0 * b * a.iter().map(|x| x.cos()).sum::<f64>() + 2.0 * a.iter().map(|x| x.sin()).sum::<f64>();
    assert_close(&da.to_f64_vec().unwrap(), &want_da, 1e-12, "d²/da");
    assert_close(&[db.unwrap().item::<f64>().unwrap()], &[want_db], 1e-12, "d²/db");
}

#[test]
fn vmap_over_a_batch_tree_gives_per_example_gradients_in_the_params_structure() {
    let p = params();
    let per_example = ct::vmap_tree(ct::grad_tree(mse_loss), (None, Some(0)), Some(0));
    let grads: Params = per_example(&p, &batch()).unwrap();
    assert_eq!(grads["hidden"].0.shape(), &[4, 3, 2]);
    assert_eq!(grads["hidden"].1[0].shape(), &[4, 3]);
    assert_eq!(grads["out"].0.shape(), &[4, 3]);
    assert_eq!(grads["out"].1[0].shape(), &[4]);

    // each example's gradient, derived by hand from that example alone
    let all = values(&grads);
    for e in 0..4 {
        let (_, hand) = hand_loss_and_grads(&W1, &B1, &W2, B2, &X[e * 2..e * 2 + 2], &T[e..e + 1]);
        for (leaf, want) in all.iter().zip(&hand) {
            let n = want.len();
            assert_close(&leaf[e * n..(e + 1) * n], want, 1e-12, &format!("example {e}"));
        }
    }

    // grad of vmap: the mean of the per-example losses has the batched loss's gradient
    let per_example_loss = ct::vmap_tree(mse_loss, (None, Some(0)), Some(0));
    let mean_loss = move |p: &Params, b: &Batch| per_example_loss(p, b).map(|l: Array| l.mean_all());
    let through_vmap = ct::grad_tree(mean_loss)(&p, &batch()).unwrap();
    let (_, hand) = hand_loss_and_grads(&W1, &B1, &W2, B2, &X, &T);
    for (got, want) in values(&through_vmap).iter().zip(&hand) {
        assert_close(got, want, 1e-12, "grad of vmap");
    }

    // batched parameters (an ensemble of two), unbatched input; output axis last
    let ensemble = (Array::from_slice(&[1.0f64, 2.0, 3.0, 4.0], &[2, 2]), Array::from_slice(&[10.0f64, 20.0], &[2]));
    let affine = |(w, b): &(Array, Array), x: &Array| vec![w * x + b];
    let ys =
        ct::vmap_tree(affine, (Some(0), None), Some(-1))(&ensemble, &Array::from_slice(&[1.0f64, -1.0], &[2])).unwrap();
    assert_eq!(ys[0].shape(), &[2, 2]);
    // member 0: [1, -2] + 10 = [11, 8]; member 1: [3, -4] + 20 = [23, 16]; members last
    assert_eq!(ys[0].to_vec::<f64>().unwrap(), vec![11.0, 23.0, 8.0, 16.0]);
}

/// A dense layer with an optional bias, as a user would write it.
struct Dense {
    weight: Array,
    bias: Option<Array>,
}

impl ArrayTree for Dense {
    fn push_leaves(&self, leaves: &mut Vec<Array>) {
        self.weight.push_leaves(leaves);
        self.bias.push_leaves(leaves);
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        Ok(Dense { weight: self.weight.rebuild(leaves)?, bias: self.bias.rebuild(leaves)? })
    }
}

/// A stack of layers, as a user would write it.
struct Network {
    layers: Vec<Dense>,
}

impl ArrayTree for Network {
    fn push_leaves(&self, leaves: &mut Vec<Array>) {
        self.layers.push_leaves(leaves);
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        Ok(Network { layers: self.layers.rebuild(leaves)? })
    }
}

#[test]
fn a_users_struct_through_a_custom_function_and_checkpoint() {
    // softplus with its own VJP rule; every layer's forward is checkpointed
    let softplus = ct::custom_function(|x: &[Array]| (x[0].exp() + 1.0).log())
        .vjp(|_primals, cotangents, outputs| vec![&cotangents[0] * (1.0 - (-&outputs[0]).exp())])
        .build();
    let dense = ct::checkpoint(move |v: &[Array]| -> Result<Array> {
        let z = v[1].matmul(&v[0].t()) + &v[2];
        Ok(softplus(&[z])?.remove(0))
    });
    let loss = move |net: &Network, x: &Array| -> Result<Array> {
        let mut h = x.clone();
        for layer in &net.layers {
            h = match &layer.bias {
                Some(b) => dense(&[layer.weight.clone(), h, b.clone()])?.remove(0),
                None => h.matmul(&layer.weight.t()),
            };
        }
        Ok(h.square().sum_all())
    };
    let net = Network {
        layers: vec![
            Dense { weight: Array::from_slice(&[0.2f64, -0.5, 0.7, 0.1, 0.3, -0.6], &[3, 2]), bias: None },
            Dense {
                weight: Array::from_slice(&[0.4f64, -0.3, 0.9, -0.2, 0.5, 0.8], &[2, 3]),
                bias: Some(Array::from_slice(&[0.1f64, -0.2], &[2])),
            },
        ],
    };
    let x = Array::from_slice(&[1.0f64, -2.0, 0.5, 1.5], &[2, 2]);

    let grads: Network = ct::grad_tree(loss.clone())(&net, &x).unwrap();
    assert_eq!(grads.layers.len(), 2);
    assert!(grads.layers[0].bias.is_none());
    assert_eq!(grads.layers[1].bias.as_ref().unwrap().shape(), &[2]);

    let template = Network {
        layers: net.layers.iter().map(|l| Dense { weight: l.weight.clone(), bias: l.bias.clone() }).collect(),
    };
    let x2 = x.clone();
    let l2 = loss.clone();
    let positional =
        ct::grad(move |leaves: &[Array]| l2(&template.with_leaves(leaves.to_vec())?, &x2))(&net.leaves()).unwrap();
    for (got, want) in values(&grads).iter().zip(values(&positional)) {
        assert_close(got, &want, 1e-14, "grad_tree vs grad");
    }
    let fd = central_differences(&net, |n| loss(n, &x).unwrap().item::<f64>().unwrap());
    for (i, (got, want)) in values(&grads).iter().zip(&fd).enumerate() {
        assert_close(got, want, 1e-7, &format!("leaf {i} vs central differences"));
    }
}

#[test]
fn the_returned_functions_run_on_two_threads() {
    let grad = ct::grad_tree(mse_loss);
    let value_and_grad = ct::value_and_grad_tree(mse_loss);
    let scaled = |s: f64| -> Params {
        params().into_iter().map(|(k, (w, b))| (k, (&w * s, b.iter().map(|x| x * s).collect()))).collect()
    };
    let threads: Vec<_> = [1.0, 0.5]
        .into_iter()
        .map(|s| {
            let (grad, value_and_grad) = (grad.clone(), value_and_grad.clone());
            std::thread::spawn(move || {
                let p = scaled(s);
                let g = values(&grad(&p, &batch()).unwrap());
                let (outs, g2) = value_and_grad(&p, &batch()).unwrap();
                (outs[0].item::<f64>().unwrap(), g, values(&g2))
            })
        })
        .collect();
    for (s, handle) in [1.0, 0.5].into_iter().zip(threads) {
        let (loss, g, g2) = handle.join().unwrap();
        let sc = |v: &[f64]| v.iter().map(|x| x * s).collect::<Vec<f64>>();
        let (want_loss, want) = hand_loss_and_grads(&sc(&W1), &sc(&B1), &sc(&W2), B2 * s, &X, &T);
        assert!((loss - want_loss).abs() < 1e-14, "scale {s}: loss");
        for ((a, b), w) in g.iter().zip(&g2).zip(&want) {
            assert_close(a, w, 1e-12, &format!("scale {s}: grad_tree"));
            assert_close(b, w, 1e-12, &format!("scale {s}: value_and_grad_tree"));
        }
    }
}

/// A structure whose `push_leaves` lists two arrays but whose `rebuild` takes one.
struct Inconsistent {
    a: Array,
    b: Array,
}

impl ArrayTree for Inconsistent {
    fn push_leaves(&self, leaves: &mut Vec<Array>) {
        leaves.push(self.a.clone());
        leaves.push(self.b.clone());
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        let a = self.a.rebuild(leaves)?;
        Ok(Inconsistent { a, b: self.b.clone() })
    }
}

#[test]
fn mismatched_leaf_counts_are_errors() {
    let p = params();
    let leaves = p.leaves();
    assert_eq!(leaves.len(), 4);
    for wrong in [3, 5] {
        let given: Vec<Array> = leaves.iter().cycle().take(wrong).cloned().collect();
        let Err(err) = p.with_leaves(given) else { panic!("{wrong} leaves must not rebuild a structure of 4") };
        let message = err.to_string();
        assert!(message.contains(&format!("{wrong} arrays given for a structure of 4 leaves")), "{message}");
        assert!(message.contains("BTreeMap"), "{message}");
    }
    // rebuilding straight from an iterator that runs out
    let mut two = leaves[..2].iter().cloned();
    assert!(p.rebuild(&mut two).err().unwrap().to_string().contains("ran out"));

    // an implementation whose two directions disagree fails the transform, not silently
    let broken = Inconsistent { a: Array::scalar(1.0f64), b: Array::scalar(2.0f64) };
    let err = ct::grad_tree(|p: &Inconsistent, _: &()| &p.a * &p.b)(&broken, &()).err().unwrap();
    assert!(err.to_string().contains("lists 2 leaves but its rebuild took only 1"), "{err}");
    let err = ct::vmap_tree(|p: &Inconsistent, x: &Array| x * &p.a, (None, Some(0)), Some(0))(
        &broken,
        &Array::from_slice(&[1.0f64, 2.0], &[2]),
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("lists 2 leaves but its rebuild took only 1"), "{err}");
}
