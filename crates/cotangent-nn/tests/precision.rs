//! f64 layers compute in f64: their gradients agree with central finite differences of the
//! layer itself to 1e-8 or better (measured: 4e-8 at worst, the truncation error of the
//! difference), which a layer that rounds its norms or recurrence to f32 inside cannot reach
//! (its finite differences are noise: relative errors of 5e-5 to 5e-4 with the old f32 path).
//!
//! The check, for a function `L(p) = Σ forward(p) · w` of all inputs and parameters `p`: the
//! directional derivative `∇L · d` from `ct::grad` against `(L(p + h d) − L(p − h d)) / 2h`
//! along a random direction `d`, with `h = 2.5e-6`.
use cotangent::{self as ct, Array, DType, Result};
use cotangent_nn::gated_delta::{gated_delta_chunked, gated_delta_recurrent};
use cotangent_nn::models::LinearAttention;
use cotangent_nn::qwen3_next::{
    Qwen3NextConfig, Qwen3NextDecoderLayer, Qwen3NextGatedDeltaNet, Qwen3NextRMSNorm, Qwen3NextRMSNormGated,
};
use cotangent_nn::{Module, RecurrenceMode};

const TOLERANCE: f64 = 1e-6;

fn normal(i: u64, shape: &[usize], scale: f64) -> Array {
    ct::random::normal(&ct::random::key(1000 + i), shape, DType::F64) * scale
}

/// `|∇L · d − FD| / |∇L · d|` for `loss` at `primals` along a random direction.
fn directional_error(
    loss: impl Fn(&[Array]) -> Result<Array> + Send + Sync + Clone + 'static,
    primals: &[Array],
) -> f64 {
    let h = 2.5e-6;
    let dirs: Vec<Array> = primals.iter().enumerate().map(|(i, p)| normal(500 + i as u64, p.shape(), 1.0)).collect();
    let l = loss.clone();
    let grads = ct::grad(move |x: &[Array]| l(x))(primals).unwrap();
    let analytic: f64 = grads.iter().zip(&dirs).map(|(g, d)| (g * d).sum_all().item::<f64>().unwrap()).sum();
    let shifted = |sign: f64| -> f64 {
        let p: Vec<Array> = primals.iter().zip(&dirs).map(|(p, d)| p + d * (sign * h)).collect();
        loss(&p).unwrap().item::<f64>().unwrap()
    };
    let numeric = (shifted(1.0) - shifted(-1.0)) / (2.0 * h);
    assert!(analytic.abs() > 1e-3, "a degenerate test: the directional derivative is {analytic}");
    let err = (analytic - numeric).abs() / analytic.abs();
    eprintln!("directional derivative {analytic:.12e}, finite difference {numeric:.12e}, relative error {err:.1e}");
    err
}

/// The loss of a module's forward over `[x, parameters...]`, weighted by a fixed random `w`.
fn module_loss<M: Module + Send + Sync + 'static>(
    model: &M,
    out_shape: &[usize],
    forward: fn(&M, &Array) -> Result<Array>,
) -> (impl Fn(&[Array]) -> Result<Array> + Send + Sync + Clone + 'static, Vec<Array>) {
    let params = model.parameters();
    let template = model.clone();
    let w = normal(99, out_shape, 1.0);
    let loss = move |xs: &[Array]| -> Result<Array> {
        let mut m = template.clone();
        m.update(&params.with_leaves(xs[1..].to_vec())?)?;
        let y = forward(&m, &xs[0])?;
        assert_eq!(y.dtype(), DType::F64);
        Ok((y * &w).sum_all())
    };
    (loss, model.parameters().leaves())
}

fn config(recurrence: RecurrenceMode) -> Qwen3NextConfig {
    let mut c = Qwen3NextConfig::small(16);
    c.recurrence = recurrence;
    c
}

#[test]
fn an_f64_qwen3_next_linear_attention_layer_matches_finite_differences() {
    for mode in [RecurrenceMode::Chunked(4), RecurrenceMode::Recurrent] {
        let layer = Qwen3NextGatedDeltaNet::new(&ct::random::key(1), config(mode), DType::F64);
        let x = normal(2, &[2, 9, 16], 1.0);
        let (loss, params) = module_loss(&layer, &[2, 9, 16], |m, x| m.forward(x));
        let primals: Vec<Array> = std::iter::once(x).chain(params).collect();
        let err = directional_error(loss, &primals);
        assert!(err < TOLERANCE, "{mode:?}: relative error {err:e}");
    }
}

#[test]
fn an_f64_qwen3_next_decoder_layer_matches_finite_differences() {
    let mut layer = Qwen3NextDecoderLayer::new(&ct::random::key(3), config(RecurrenceMode::Chunked(4)), DType::F64);
    // non-zero norm weights, so the (1 + weight) scaling is exercised
    layer.input_layernorm.weight = normal(4, &[16], 0.3);
    layer.post_attention_layernorm.weight = normal(5, &[16], 0.3);
    let (loss, params) = module_loss(&layer, &[1, 7, 16], |m, x| m.forward(x));
    let primals: Vec<Array> = std::iter::once(normal(6, &[1, 7, 16], 1.0)).chain(params).collect();
    let err = directional_error(loss, &primals);
    assert!(err < TOLERANCE, "relative error {err:e}");
}

#[test]
fn the_models_linear_attention_in_f64_matches_finite_differences() {
    let attn = LinearAttention::Fused(Qwen3NextGatedDeltaNet::new(
        &ct::random::key(7),
        config(RecurrenceMode::Chunked(64)),
        DType::F64,
    ));
    let (loss, params) = module_loss(&attn, &[1, 6, 16], |m, x| m.forward(x, None));
    let primals: Vec<Array> = std::iter::once(normal(8, &[1, 6, 16], 1.0)).chain(params).collect();
    let err = directional_error(loss, &primals);
    assert!(err < TOLERANCE, "relative error {err:e}");
}

#[test]
fn the_f64_gated_delta_rule_matches_finite_differences() {
    let (b, h, t, dk, dv) = (1, 2, 11, 3, 4);
    let primals = vec![
        normal(10, &[b, h, t, dk], 0.5),
        normal(11, &[b, h, t, dk], 0.5),
        normal(12, &[b, h, t, dv], 1.0),
        normal(13, &[b, h, t], 0.3) - 0.5,
        normal(14, &[b, h, t], 1.0).sigmoid(),
    ];
    let w = normal(15, &[b, h, t, dv], 1.0);
    let w2 = w.clone();
    let chunked = move |x: &[Array]| -> Result<Array> {
        Ok((gated_delta_chunked(&x[0], &x[1], &x[2], &x[3], &x[4], 4)? * &w).sum_all())
    };
    let recurrent = move |x: &[Array]| -> Result<Array> {
        Ok((gated_delta_recurrent(&x[0], &x[1], &x[2], &x[3], &x[4]) * &w2).sum_all())
    };
    for (name, err) in
        [("chunked", directional_error(chunked, &primals)), ("recurrent", directional_error(recurrent, &primals))]
    {
        assert!(err < TOLERANCE, "{name}: relative error {err:e}");
    }
}

#[test]
fn f64_norms_compute_in_f64_and_bf16_norms_in_f32() {
    let x = normal(20, &[3, 5], 1.0);
    let w = normal(21, &[5], 0.5);
    let (xs, ws) = (x.to_vec::<f64>().unwrap(), w.to_vec::<f64>().unwrap());
    let eps = 1e-6;
    // the f64 reference: x / rms(x) · (1 + w), row by row
    let mut want = Vec::new();
    for row in xs.chunks(5) {
        let rms = (row.iter().map(|v| v * v).sum::<f64>() / 5.0 + eps).sqrt();
        want.extend(row.iter().zip(&ws).map(|(v, w)| v / rms * (1.0 + w)));
    }
    let norm = Qwen3NextRMSNorm { weight: w.clone(), eps };
    let got = norm.forward(&x).to_vec::<f64>().unwrap();
    let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(err < 1e-14, "Qwen3NextRMSNorm in f64 is off by {err:e}");

    // the gated norm: w · x / rms(x) · silu(gate)
    let gate = normal(22, &[3, 5], 1.0);
    let gs = gate.to_vec::<f64>().unwrap();
    let gated = Qwen3NextRMSNormGated { weight: w.clone(), eps };
    let got = gated.forward(&x, &gate).to_vec::<f64>().unwrap();
    let mut err: f64 = 0.0;
    for (r, row) in xs.chunks(5).enumerate() {
        let rms = (row.iter().map(|v| v * v).sum::<f64>() / 5.0 + eps).sqrt();
        for (j, v) in row.iter().enumerate() {
            let g = gs[r * 5 + j];
            let want = ws[j] * v / rms * (g / (1.0 + (-g).exp()));
            err = err.max((got[r * 5 + j] - want).abs());
        }
    }
    assert!(err < 1e-14, "Qwen3NextRMSNormGated in f64 is off by {err:e}");

    // bf16 keeps transformers' f32 upcast: the result equals the f32 computation rounded once
    let xb = x.astype(DType::BF16);
    let norm_b = Qwen3NextRMSNorm { weight: w.astype(DType::BF16), eps };
    let via_f32 = Qwen3NextRMSNorm { weight: w.astype(DType::BF16).astype(DType::F32), eps }
        .forward(&xb.astype(DType::F32))
        .astype(DType::BF16);
    assert_eq!(norm_b.forward(&xb).to_f64_vec().unwrap(), via_f32.to_f64_vec().unwrap());
}
