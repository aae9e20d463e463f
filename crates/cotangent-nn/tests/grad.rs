//! Gradients through whole models against central finite differences (f64, tiny sizes), the
//! fused cross-entropy VJP, and `value_and_grad` with frozen parameters.
use cotangent::{self as ct, Array, DType, Result};
use cotangent_nn::losses::{binary_cross_entropy_with_logits, cross_entropy, mse, Reduction};
use cotangent_nn::*;

/// Compare the gradient tree of `loss(model)` with central differences on every parameter
/// element.
fn check_model_grads<M: Module + Clone + Send + Sync + 'static>(
    model: &M,
    loss: impl Fn(&M) -> Result<Array> + Send + Sync + Clone + 'static,
    tol: f64,
) {
    let l2 = loss.clone();
    let vg = value_and_grad(move |m: &M, _b: &[Array]| l2(m));
    let (_, grads) = vg(model, &[]).unwrap();
    let params = model.parameters();
    let h = 1e-6;
    let mut checked = 0;
    for (name, p) in params.flatten() {
        let g = grads.require(&name).unwrap().to_f64_vec().unwrap();
        let base = p.to_f64_vec().unwrap();
        for i in 0..base.len() {
            let eval_at = |d: f64| {
                let mut v = base.clone();
                v[i] += d;
                let mut m = model.clone();
                let t = Tree::unflatten([(name.clone(), Array::from_vec(v, p.shape()))]).unwrap();
                m.update(&t).unwrap();
                loss(&m).unwrap().item::<f64>().unwrap()
            };
            let fd = (eval_at(h) - eval_at(-h)) / (2.0 * h);
            assert!(
                (g[i] - fd).abs() <= tol * (1.0 + fd.abs()),
                "{name}[{i}]: grad {} vs finite difference {fd}",
                g[i]
            );
            checked += 1;
        }
    }
    assert!(checked > 0);
}

#[test]
fn gated_deltanet_layer_gradients_chunked_and_recurrent() {
    for mode in [RecurrenceMode::Chunked(3), RecurrenceMode::Recurrent] {
        let mut cfg = GatedDeltaNetConfig::new(4, 2);
        cfg.mode = mode;
        let layer = GatedDeltaNet::new(&ct::random::key(1), cfg, DType::F64);
        let x = ct::random::normal(&ct::random::key(2), &[1, 7, 4], DType::F64);
        let w = ct::random::normal(&ct::random::key(3), &[1, 7, 4], DType::F64);
        check_model_grads(&layer, move |m: &GatedDeltaNet| Ok((m.forward(&x)? * &w).sum_all()), 1e-6);
    }
}

#[test]
fn chunked_and_recurrent_gradients_agree() {
    let mut cfg = GatedDeltaNetConfig::new(8, 2);
    cfg.mode = RecurrenceMode::Chunked(4);
    let layer = GatedDeltaNet::new(&ct::random::key(4), cfg, DType::F64);
    let mut rec = layer.clone();
    rec.config.mode = RecurrenceMode::Recurrent;
    let x = ct::random::normal(&ct::random::key(5), &[2, 13, 8], DType::F64);
    let f = move |m: &GatedDeltaNet, b: &[Array]| m.forward(&b[0]).map(|y| y.square().sum_all());
    let (_, g1) = value_and_grad(f)(&layer, std::slice::from_ref(&x)).unwrap();
    let (_, g2) = value_and_grad(f)(&rec, &[x]).unwrap();
    for ((n, a), (_, b)) in g1.flatten().iter().zip(g2.flatten()) {
        let (a, b) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-9 * (1.0 + y.abs()), "{n}: {x} vs {y}");
        }
    }
}

#[derive(Clone)]
struct Tiny {
    embed: Embedding,
    attn: MultiHeadAttention,
    norm: LayerNorm,
    mlp: Mlp,
    head: Linear,
}

impl Tiny {
    fn forward(&self, ids: &Array) -> Array {
        let x = self.embed.forward(ids);
        let x = &x + self.attn.forward(&self.norm.forward(&x));
        let x = &x + self.mlp.forward(&x);
        self.head.forward(&x)
    }
}

impl Module for Tiny {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.child("embed", &mut self.embed);
        v.child("attn", &mut self.attn);
        v.child("norm", &mut self.norm);
        v.child("mlp", &mut self.mlp);
        v.child("head", &mut self.head);
    }
}

fn tiny() -> Tiny {
    let k = ct::random::split_keys(&ct::random::key(7), 4);
    let mut norm = LayerNorm::new(4, 1e-5, true, DType::F64);
    norm.weight = Some(ct::random::normal(&k[3], &[4], DType::F64));
    Tiny {
        embed: Embedding::new(&k[0], 5, 4, DType::F64),
        attn: MultiHeadAttention::new(&k[1], 4, 2, DType::F64),
        norm,
        mlp: Mlp::new(&k[2], 4, 6, Activation::Gelu, DType::F64),
        head: Linear::new(&k[3], 4, 5, true, DType::F64),
    }
}

#[test]
fn transformer_gradients_with_fused_cross_entropy() {
    let ids = Array::from_slice(&[0i32, 3, 1, 4, 2, 2], &[2, 3]);
    let targets = Array::from_slice(&[3i32, 1, 4, 2, 2, 0], &[2, 3]);
    for smoothing in [0.0, 0.1] {
        let (ids, targets) = (ids.clone(), targets.clone());
        check_model_grads(
            &tiny(),
            move |m: &Tiny| Ok(cross_entropy(&m.forward(&ids), &targets, smoothing, Reduction::Mean)),
            1e-6,
        );
    }
}

#[test]
fn cross_entropy_values_and_fused_gradient() {
    let z = ct::random::normal(&ct::random::key(9), &[3, 5], DType::F64);
    let y = Array::from_slice(&[4i32, 0, 2], &[3]);
    let zv = z.to_f64_vec().unwrap();
    for eps in [0.0, 0.2] {
        let loss = cross_entropy(&z, &y, eps, Reduction::None).to_f64_vec().unwrap();
        let (_, g) = ct::vjp(
            |x: &[Array]| cross_entropy(&x[0], &y, eps, Reduction::Sum),
            std::slice::from_ref(&z),
            &[Array::scalar(1.0f64)],
        )
        .unwrap();
        let g = g[0].to_f64_vec().unwrap();
        for r in 0..3 {
            let row = &zv[r * 5..r * 5 + 5];
            let lse = row.iter().map(|v| v.exp()).sum::<f64>().ln();
            let t = [4, 0, 2][r];
            let q = |c: usize| (if c == t { 1.0 - eps } else { 0.0 }) + eps / 5.0;
            let want: f64 = (0..5).map(|c| -q(c) * (row[c] - lse)).sum();
            assert!((loss[r] - want).abs() < 1e-12, "loss row {r}: {} vs {want}", loss[r]);
            for c in 0..5 {
                let p = (row[c] - lse).exp();
                assert!((g[r * 5 + c] - (p - q(c))).abs() < 1e-12);
            }
        }
    }
    // the gradient is the custom rule's: no log-softmax graph differentiated. Second order
    // still works through the rule's ops.
    let mean = cross_entropy(&z, &y, 0.0, Reduction::Mean).item::<f64>().unwrap();
    let sum = cross_entropy(&z, &y, 0.0, Reduction::Sum).item::<f64>().unwrap();
    assert!((sum - 3.0 * mean).abs() < 1e-12);
}

#[test]
fn other_losses() {
    let p = Array::from_slice(&[1.0f64, 2.0, -1.0], &[3]);
    let t = Array::from_slice(&[0.0f64, 2.5, 1.0], &[3]);
    assert!((mse(&p, &t, Reduction::Mean).item::<f64>().unwrap() - (1.0 + 0.25 + 4.0) / 3.0).abs() < 1e-12);
    let z = Array::from_slice(&[-50.0f64, 0.3, 60.0], &[3]);
    let y = Array::from_slice(&[1.0f64, 0.0, 0.5], &[3]);
    let got = binary_cross_entropy_with_logits(&z, &y, Reduction::None).to_f64_vec().unwrap();
    let want: Vec<f64> = [(-50.0f64, 1.0f64), (0.3, 0.0), (60.0, 0.5)]
        .iter()
        .map(|&(z, y)| {
            let sp = if z > 30.0 { z } else { z.exp().ln_1p() };
            sp - y * z
        })
        .collect();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-9 * (1.0 + w.abs()), "{g} vs {w}");
    }
    assert!(got.iter().all(|v| v.is_finite()));
}

#[test]
fn value_and_grad_excludes_frozen_parameters() {
    let model = Freeze::new(tiny(), &["embed", "attn.q_proj"]);
    let ids = Array::from_slice(&[0i32, 3, 1], &[1, 3]);
    let vg = value_and_grad(|m: &Freeze<Tiny>, b: &[Array]| m.forward(&b[0]).square().sum_all());
    let (outs, grads) = vg(&model, std::slice::from_ref(&ids)).unwrap();
    let names = grads.names();
    assert!(!names.iter().any(|n| n.starts_with("embed") || n.starts_with("attn.q_proj")), "{names:?}");
    assert!(names.contains(&"attn.k_proj.weight".to_string()));
    assert_eq!(names.len(), model.parameters().len() - 2);
    // the trainable gradients equal those of the unfrozen model
    let (_, all) =
        value_and_grad(|m: &Tiny, b: &[Array]| m.forward(&b[0]).square().sum_all())(&model.module, &[ids]).unwrap();
    for (n, g) in grads.flatten() {
        assert_eq!(g.to_f64_vec().unwrap(), all.require(&n).unwrap().to_f64_vec().unwrap(), "{n}");
    }
    assert!(outs[0].item::<f64>().unwrap() > 0.0);
}

/// `ct::grad_tree` over a model's parameter `Tree` (written into a copy of the model by name)
/// gives the same gradient tree, leaf for leaf, as the module-level `value_and_grad`, and its
/// loss values agree; the tree-aware `value_and_grad_tree` returns the same loss.
#[test]
fn grad_tree_over_a_parameter_tree_matches_module_value_and_grad() {
    let model = Mlp::new(&ct::random::key(7), 3, 5, Activation::Tanh, DType::F64);
    let x = ct::random::normal(&ct::random::key(8), &[4, 3], DType::F64);
    let target = ct::random::normal(&ct::random::key(9), &[4, 3], DType::F64);
    let batch = (x, target);

    let module_vg = value_and_grad(|m: &Mlp, b: &[Array]| mse(&m.forward(&b[0]), &b[1], Reduction::Mean));
    let (module_outs, module_grads) = module_vg(&model, &[batch.0.clone(), batch.1.clone()]).unwrap();

    let template = model.clone();
    let tree_loss = move |params: &Tree, (x, target): &(Array, Array)| -> Result<Array> {
        let mut m = template.clone();
        m.update(params)?;
        Ok(mse(&m.forward(x), target, Reduction::Mean))
    };
    let params = model.parameters();
    let grads: Tree = ct::grad_tree(tree_loss.clone())(&params, &batch).unwrap();
    let (outs, grads_again) = ct::value_and_grad_tree(tree_loss)(&params, &batch).unwrap();

    assert_eq!(grads.names(), module_grads.names());
    assert_eq!(grads.names(), ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]);
    for (name, g) in grads.flatten() {
        assert_eq!(g.shape(), params.require(&name).unwrap().shape(), "{name}");
        let expected = module_grads.require(&name).unwrap().to_f64_vec().unwrap();
        for (which, tree) in [("grad_tree", &grads), ("value_and_grad_tree", &grads_again)] {
            let got = tree.require(&name).unwrap().to_f64_vec().unwrap();
            for (i, (a, b)) in got.iter().zip(&expected).enumerate() {
                assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "{which} {name}[{i}]: {a} vs {b}");
            }
        }
    }
    let loss = outs[0].item::<f64>().unwrap();
    assert!((loss - module_outs[0].item::<f64>().unwrap()).abs() < 1e-12);

    // the loss, computed independently in f64 from the parameter values
    let p = |n: &str| params.require(n).unwrap().to_f64_vec().unwrap();
    let (w1, b1, w2, b2) = (p("fc1.weight"), p("fc1.bias"), p("fc2.weight"), p("fc2.bias"));
    let (xs, ts) = (batch.0.to_f64_vec().unwrap(), batch.1.to_f64_vec().unwrap());
    let mut sum = 0.0;
    for n in 0..4 {
        let h: Vec<f64> =
            (0..5).map(|j| (b1[j] + (0..3).map(|k| w1[j * 3 + k] * xs[n * 3 + k]).sum::<f64>()).tanh()).collect();
        for i in 0..3 {
            let y = b2[i] + (0..5).map(|j| w2[i * 5 + j] * h[j]).sum::<f64>();
            sum += (y - ts[n * 3 + i]).powi(2);
        }
    }
    assert!((loss - sum / 12.0).abs() < 1e-12, "{loss} vs {}", sum / 12.0);
}
