//! Misusing a layer, a loss or an activation panics at the caller's line (this file's, not
//! the library's) with a sentence naming the layer, the argument and the expected and given
//! shape or dtype.
use cotangent::{self as ct, Array, DType};
use cotangent_nn::gated_delta::{causal_conv1d, gated_delta_chunked, gated_delta_recurrent};
use cotangent_nn::losses::{binary_cross_entropy_with_logits, cross_entropy, mse, Reduction};
use cotangent_nn::qwen3_next::{
    CausalDepthwiseConv1d, Qwen3NextConfig, Qwen3NextDecoderLayer, Qwen3NextGatedDeltaNet, Qwen3NextMlp,
    Qwen3NextRMSNorm, Qwen3NextRMSNormGated,
};
use cotangent_nn::{
    activations, Activation, Dropout, Embedding, GatedDeltaNet, GatedDeltaNetConfig, LayerNorm, Linear, Mlp,
    MultiHeadAttention, RMSNorm,
};
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

/// Tests that swap the process-wide panic hook take turns.
static HOOK: Mutex<()> = Mutex::new(());

/// Run `f`, which must panic; return its message and the panic's location (file, line).
fn panic_of(f: impl FnOnce()) -> (String, String, u32) {
    let _turn = HOOK.lock().unwrap_or_else(|e| e.into_inner());
    let seen: Arc<Mutex<Option<(String, u32)>>> = Arc::default();
    let record = seen.clone();
    let previous = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        let at = info.location().map(|l| (l.file().to_string(), l.line()));
        *record.lock().unwrap_or_else(|e| e.into_inner()) = at;
    }));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    panic::set_hook(previous);
    let payload = result.expect_err("the call should have panicked");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .expect("a string panic message");
    let (file, line) = seen.lock().unwrap().clone().expect("the hook saw the panic's location");
    (message, file, line)
}

/// `$call` panics at this line of this file with a message containing every `$part`.
macro_rules! panics_here {
    ($call:expr, $($part:expr),+ $(,)?) => {{
        let line = line!();
        let (message, file, at) = panic_of(|| {
            let _ = $call;
        });
        assert_eq!(file, file!(), "the panic should be reported in the caller's file: {message}");
        assert!((line..line + 4).contains(&at), "the panic should be reported at line {line}, not {at}: {message}");
        $(assert!(message.contains($part), "the message should contain {:?}: {message}", $part);)+
        message
    }};
}

fn key(i: u64) -> Array {
    ct::random::key(i)
}

fn zeros(shape: &[usize]) -> Array {
    ct::zeros(shape, DType::F32)
}

#[test]
fn linear_names_in_features_and_the_shape() {
    let layer = Linear::new(&key(0), 4, 2, true, DType::F32);
    let m = panics_here!(layer.forward(&zeros(&[2, 3])), "Linear");
    assert_eq!(m, "Linear expects inputs whose last axis is in_features = 4, but got an input of shape [2, 3]");
    panics_here!(layer.forward(&Array::scalar(1.0f32)), "in_features = 4", "shape []");
    panics_here!(
        layer.forward(&ct::zeros(&[2, 4], DType::I32)),
        "Linear expects floating-point inputs, but got an input of dtype int32"
    );
}

#[test]
fn embedding_wants_integer_ids() {
    let table = Embedding::new(&key(0), 10, 3, DType::F32);
    panics_here!(
        table.forward(&zeros(&[2])),
        "Embedding expects integer ids, but got ids of dtype float32 (shape [2])"
    );
    panics_here!(table.as_linear(&zeros(&[2, 4])), "Embedding::as_linear expects inputs whose last axis is dim = 3");
}

#[test]
fn norms_name_their_width() {
    let ln = LayerNorm::new(5, 1e-5, true, DType::F32);
    panics_here!(
        ln.forward(&zeros(&[2, 4])),
        "LayerNorm expects inputs whose last axis is dim = 5, but got an input of shape [2, 4]"
    );
    let rms = RMSNorm::new(5, 1e-5, DType::F32);
    panics_here!(rms.forward(&zeros(&[5, 2])), "RMSNorm expects inputs whose last axis is dim = 5", "[5, 2]");
    panics_here!(
        rms.forward(&ct::zeros(&[5], DType::U8)),
        "RMSNorm expects floating-point inputs, but got an input of dtype uint8"
    );
}

#[test]
fn dropout_mlp_and_attention() {
    panics_here!(Dropout::new(1.5), "Dropout expects a drop probability p in [0, 1), but got p = 1.5");
    let mlp = Mlp::new(&key(0), 4, 8, Activation::Gelu, DType::F32);
    panics_here!(
        mlp.forward(&zeros(&[3, 8])),
        "Mlp expects inputs whose last axis is dim = 4, but got an input of shape [3, 8]"
    );
    panics_here!(
        MultiHeadAttention::new(&key(0), 6, 4, DType::F32),
        "MultiHeadAttention expects num_heads to divide dim, but got num_heads = 4 and dim = 6"
    );
    let attn = MultiHeadAttention::new(&key(0), 8, 2, DType::F32);
    panics_here!(
        attn.forward(&zeros(&[3, 8])),
        "MultiHeadAttention expects inputs of shape [batch, time, dim], but got an input of shape [3, 8]"
    );
    panics_here!(attn.forward(&zeros(&[1, 3, 6])), "MultiHeadAttention expects inputs whose last axis is dim = 8");
}

#[test]
fn cross_entropy_names_targets_and_logits() {
    let logits = zeros(&[2, 5]);
    panics_here!(
        cross_entropy(&logits, &zeros(&[2]), 0.0, Reduction::Mean),
        "cross_entropy expects integer class targets, but got targets of dtype float32 (shape [2])"
    );
    let ids = Array::from_slice(&[1i32, 2, 3], &[3]);
    panics_here!(
        cross_entropy(&logits, &ids, 0.0, Reduction::Mean),
        "cross_entropy expects targets of shape [2] (the logits' shape without the class axis), but got logits of \
         shape [2, 5] and targets of shape [3]"
    );
    let two = Array::from_slice(&[1i32, 2], &[2]);
    panics_here!(
        cross_entropy(&logits, &two, 1.5, Reduction::Mean),
        "cross_entropy expects label_smoothing in [0, 1], but got label_smoothing = 1.5"
    );
    panics_here!(
        cross_entropy(&ct::zeros(&[2, 5], DType::I32), &two, 0.0, Reduction::Mean),
        "cross_entropy expects floating-point logits, but got logits of dtype int32"
    );
    panics_here!(cross_entropy(&Array::scalar(0.0f32), &two, 0.0, Reduction::Mean), "at least 1 axis");
}

#[test]
fn elementwise_losses_do_not_broadcast_mismatched_shapes() {
    panics_here!(
        mse(&zeros(&[4, 1]), &zeros(&[4]), Reduction::Mean),
        "mse expects pred and target of the same shape, but got pred of shape [4, 1] and target of shape [4]"
    );
    panics_here!(
        binary_cross_entropy_with_logits(&zeros(&[3]), &zeros(&[3, 1]), Reduction::Sum),
        "binary_cross_entropy_with_logits expects logits and targets of the same shape"
    );
    panics_here!(
        binary_cross_entropy_with_logits(&ct::zeros(&[3], DType::I64), &zeros(&[3]), Reduction::Sum),
        "binary_cross_entropy_with_logits expects floating-point logits, but got logits of dtype int64"
    );
}

#[test]
fn activations_name_the_function() {
    let x = zeros(&[2, 3]);
    panics_here!(
        activations::softmax(&x, 2),
        "softmax expects an axis in -2..2, but got axis 2 for an input of shape [2, 3]"
    );
    panics_here!(activations::softmax(&Array::scalar(1.0f32), 0), "softmax expects inputs with at least 1 axis");
    panics_here!(
        activations::l2_normalize(&Array::scalar(1.0f32), 1e-6),
        "l2_normalize expects inputs with at least 1 axis, but got an input of shape []"
    );
    // and the ops they are made of report the caller's line too
    panics_here!(activations::silu(&x) + zeros(&[4]), "do not broadcast");
}

#[test]
fn qwen3_next_layers_name_their_sizes() {
    let c = Qwen3NextConfig::small(16);
    let norm = Qwen3NextRMSNorm::new(16, 1e-6, DType::F32);
    panics_here!(norm.forward(&zeros(&[1, 2, 8])), "Qwen3NextRMSNorm expects inputs whose last axis is dim = 16");
    let gated = Qwen3NextRMSNormGated::new(4, 1e-6, DType::F32);
    panics_here!(
        gated.forward(&zeros(&[2, 4]), &zeros(&[2, 1])),
        "Qwen3NextRMSNormGated expects x and gate of the same shape, but got x of shape [2, 4] and gate of shape [2, 1]"
    );
    let conv = CausalDepthwiseConv1d::new(&key(0), 6, 4, DType::F32);
    panics_here!(
        conv.forward(&zeros(&[2, 6])),
        "CausalDepthwiseConv1d expects inputs of shape [batch, time, channels], but got an input of shape [2, 6]"
    );
    panics_here!(
        conv.forward(&zeros(&[1, 2, 5])),
        "CausalDepthwiseConv1d expects inputs whose last axis is channels = 6"
    );
    let net = Qwen3NextGatedDeltaNet::new(&key(0), c, DType::F32);
    panics_here!(
        net.forward(&zeros(&[3, 16])),
        "Qwen3NextGatedDeltaNet expects inputs of shape [batch, time, hidden_size], but got an input of shape [3, 16]"
    );
    panics_here!(
        net.forward(&zeros(&[1, 3, 12])),
        "Qwen3NextGatedDeltaNet expects inputs whose last axis is hidden_size = 16"
    );
    let layer = Qwen3NextDecoderLayer::new(&key(1), c, DType::F32);
    panics_here!(
        layer.forward(&zeros(&[1, 3, 32])),
        "Qwen3NextDecoderLayer expects inputs whose last axis is hidden_size = 16"
    );
    let mlp = Qwen3NextMlp::new(&key(2), 16, 32, DType::F32);
    panics_here!(mlp.forward(&zeros(&[32])), "Qwen3NextMlp expects inputs whose last axis is hidden_size = 16");
    let mut bad = c;
    bad.linear_num_value_heads = 3;
    panics_here!(
        Qwen3NextGatedDeltaNet::new(&key(0), bad, DType::F32),
        "Qwen3NextGatedDeltaNet::new expects a valid config",
        "3 value heads are not a multiple of 2 key heads"
    );
}

#[test]
fn the_gated_delta_rule_checks_its_inputs() {
    let (q, v) = (zeros(&[1, 2, 5, 3]), zeros(&[1, 2, 5, 4]));
    let (g, b) = (zeros(&[1, 2, 5]), zeros(&[1, 2, 5]));
    panics_here!(
        gated_delta_recurrent(&q, &q, &v, &g, &zeros(&[1, 2, 4])),
        "gated_delta_recurrent expects write strengths beta of shape [batch, heads, time] = [1, 2, 5] (from the \
         queries' shape [1, 2, 5, 3]), but got write strengths beta of shape [1, 2, 4]"
    );
    panics_here!(
        gated_delta_chunked(&q, &zeros(&[1, 2, 5, 4]), &v, &g, &b, 2),
        "gated_delta_chunked expects keys k of shape [batch, heads, time, d_k] = [1, 2, 5, 3]"
    );
    panics_here!(
        gated_delta_chunked(&q, &q, &v.astype(DType::F64), &g, &b, 2),
        "gated_delta_chunked expects q, k, v, log_g and beta of one float dtype, but got float32, float32, float64, \
         float32 and float32"
    );
    panics_here!(gated_delta_chunked(&q, &q, &v, &g, &b, 0), "gated_delta_chunked expects a positive chunk size");
    panics_here!(
        gated_delta_recurrent(&zeros(&[2, 5, 3]), &q, &v, &g, &b),
        "gated_delta_recurrent expects queries q of shape [batch, heads, time, d_k], but got queries q of shape [2, 5, 3]"
    );
    panics_here!(
        causal_conv1d(&zeros(&[1, 5, 3]), &zeros(&[4, 2])),
        "causal_conv1d expects weights of shape [channels, kernel] = [3, kernel > 0] for an input of shape [1, 5, 3], \
         but got weights of shape [4, 2]"
    );
    let net = GatedDeltaNet::new(&key(0), GatedDeltaNetConfig::new(8, 2), DType::F32);
    panics_here!(net.forward(&zeros(&[1, 3, 4])), "GatedDeltaNet expects inputs whose last axis is dim = 8");
    panics_here!(
        GatedDeltaNetConfig::new(8, 3),
        "GatedDeltaNetConfig expects num_heads to divide dim, but got num_heads = 3 and dim = 8"
    );
}

#[test]
fn valid_calls_still_work() {
    let layer = Linear::new(&key(0), 4, 2, true, DType::F32);
    assert_eq!(layer.forward(&zeros(&[3, 5, 4])).shape(), &[3, 5, 2]);
    let ids = Array::from_slice(&[1u8, 0], &[2]);
    assert_eq!(Embedding::new(&key(0), 3, 2, DType::F32).forward(&ids).shape(), &[2, 2]);
    let l = cross_entropy(&zeros(&[2, 4]), &Array::from_slice(&[0i64, 3], &[2]), 0.1, Reduction::Mean);
    assert!((l.item::<f32>().unwrap() - 4f32.ln()).abs() < 1e-6);
    assert_eq!(activations::softmax(&zeros(&[2, 3]), -2).shape(), &[2, 3]);
}
