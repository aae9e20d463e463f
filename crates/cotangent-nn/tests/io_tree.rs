//! Parameter trees and safetensors round trips / malformed files.
use cotangent::{self as ct, Array, DType, Error};
use cotangent_nn::io::{from_safetensors_bytes, load, load_into, save, to_safetensors_bytes};
use cotangent_nn::*;

fn sample() -> Tree {
    let layer = |s: f32| {
        Tree::dict([
            ("weight", Tree::leaf(Array::from_slice(&[s, s + 1.0, s + 2.0, s + 3.0, s + 4.0, s + 5.0], &[2, 3]))),
            ("bias", Tree::leaf(Array::from_slice(&[s, -s], &[2]))),
        ])
    };
    Tree::dict([
        ("layers", Tree::list((0..12).map(|i| layer(i as f32 * 0.25)))),
        ("scale", Tree::leaf(Array::scalar(0.5f32))),
        ("steps", Tree::leaf(Array::from_slice(&[7i32, 8], &[2]))),
    ])
}

#[test]
fn flatten_unflatten_map_zip() {
    let t = sample();
    let flat = t.flatten();
    assert_eq!(flat.len(), 26);
    assert_eq!(flat[0].0, "layers.0.weight");
    assert_eq!(flat[23].0, "layers.11.bias");
    assert_eq!(t.get("layers.10.bias").unwrap().to_vec::<f32>().unwrap(), vec![2.5, -2.5]);
    let back = Tree::unflatten(flat.clone()).unwrap();
    assert!(matches!(back.child("layers"), Some(Tree::List(l)) if l.len() == 12));
    assert_eq!(back.names(), t.names());
    let doubled = t.map(|_, a| a * 2);
    let diff = doubled.zip(&t, |_, a, b| a - b).unwrap();
    for ((n, d), (_, a)) in diff.flatten().iter().zip(&flat) {
        assert_eq!(d.to_f64_vec().unwrap(), a.to_f64_vec().unwrap(), "{n}");
    }
    // structure mismatches are errors naming the place
    let other = Tree::dict([("layers", Tree::list([])), ("scale", Tree::leaf(Array::scalar(1.0f32)))]);
    let e = t.zip(&other, |_, a, _| a.clone()).unwrap_err();
    assert!(e.to_string().contains("<root>"), "{e}");
    let e = Tree::unflatten([("a.b".to_string(), Array::scalar(1)), ("a".to_string(), Array::scalar(2))]).unwrap_err();
    assert!(e.to_string().contains("`a`"), "{e}");
    // filter and merge
    let biases = t.filter(|n| n.ends_with("bias"));
    assert_eq!(biases.len(), 12);
    let merged = t.merge(&biases.map(|_, a| a * 0.0)).unwrap();
    assert_eq!(merged.get("layers.3.bias").unwrap().to_vec::<f32>().unwrap(), vec![0.0, 0.0]);
    assert_eq!(merged.get("layers.3.weight").unwrap().shape(), &[2, 3]);
    assert!(t.merge(&Tree::dict([("nope", Tree::leaf(Array::scalar(1.0f32)))])).is_err());
    assert_eq!(t.num_elements(), 12 * 8 + 1 + 2);
}

#[test]
fn safetensors_round_trips_in_three_float_dtypes() {
    let dir = std::env::temp_dir().join(format!("ct_nn_io_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let t = sample();
    for (dtype, tol) in [(None, 0.0), (Some(DType::F16), 1e-3), (Some(DType::BF16), 1e-2), (Some(DType::F64), 0.0)] {
        let path = dir.join("t.safetensors");
        save(&path, &t, dtype).unwrap();
        let back = load(&path).unwrap();
        assert_eq!(back.names(), t.names(), "order kept");
        for ((n, a), (_, b)) in t.flatten().iter().zip(back.flatten()) {
            assert_eq!(a.shape(), b.shape(), "{n}");
            if a.dtype().is_float() {
                assert_eq!(b.dtype(), dtype.unwrap_or(DType::F32), "{n}");
            } else {
                assert_eq!(b.dtype(), DType::I32);
            }
            for (x, y) in a.to_f64_vec().unwrap().iter().zip(b.to_f64_vec().unwrap()) {
                assert!((x - y).abs() <= tol * (1.0 + x.abs()), "{n}: {x} vs {y}");
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn load_into_a_model_and_errors_that_name_the_problem() {
    let dir = std::env::temp_dir().join(format!("ct_nn_load_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.safetensors");
    let src = Mlp::new(&ct::random::key(1), 3, 4, Activation::Relu, DType::F32);
    save(&path, &src.parameters(), Some(DType::BF16)).unwrap();
    let mut dst = Mlp::new(&ct::random::key(2), 3, 4, Activation::Relu, DType::F32);
    load_into(&mut dst, &path).unwrap();
    assert_eq!(dst.fc1.weight.dtype(), DType::F32);
    let (a, b) = (src.fc1.weight.to_f64_vec().unwrap(), dst.fc1.weight.to_f64_vec().unwrap());
    assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-2 * (1.0 + x.abs())));

    // shape mismatch
    let mut wrong = Mlp::new(&ct::random::key(2), 3, 5, Activation::Relu, DType::F32);
    let e = load_into(&mut wrong, &path).unwrap_err();
    assert!(e.to_string().contains("fc1.weight") && e.to_string().contains("[4, 3]"), "{e}");

    // missing tensor
    save(&path, &src.parameters().filter(|n| n != "fc2.bias"), None).unwrap();
    let e = load_into(&mut dst, &path).unwrap_err();
    assert!(e.to_string().contains("missing tensor `fc2.bias`"), "{e}");

    // extra tensor
    let extra = src.parameters().with("surprise", Tree::leaf(Array::scalar(1.0f32)));
    save(&path, &extra, None).unwrap();
    let e = load_into(&mut dst, &path).unwrap_err();
    assert!(e.to_string().contains("surprise"), "{e}");

    // truncated and malformed files
    let bytes = to_safetensors_bytes(&src.parameters(), None).unwrap();
    for cut in [0, 4, 8, 20, bytes.len() - 3] {
        let e = from_safetensors_bytes(&bytes[..cut]).unwrap_err();
        assert!(matches!(e, Error::Io(_)), "cut {cut}: {e}");
    }
    let mut garbage = bytes.clone();
    garbage[8] = b'#';
    assert!(from_safetensors_bytes(&garbage).unwrap_err().to_string().contains("malformed"));
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let e = load(&path).unwrap_err();
    assert!(e.to_string().contains("m.safetensors"), "{e}");
    let e = load(dir.join("absent.safetensors")).unwrap_err();
    assert!(e.to_string().contains("absent.safetensors"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn module_update_checks_shapes_and_names() {
    let mut lin = Linear::new(&ct::random::key(0), 2, 3, true, DType::F32);
    let bad = Tree::dict([("weight", Tree::leaf(ct::zeros(&[2, 3], DType::F32)))]);
    let e = lin.update(&bad).unwrap_err();
    assert!(e.to_string().contains("weight"), "{e}");
    let unknown = Tree::dict([("weights", Tree::leaf(ct::zeros(&[3, 2], DType::F32)))]);
    assert!(lin.update(&unknown).unwrap_err().to_string().contains("weights"));
    // a partial update keeps the rest
    let before = lin.weight.to_vec::<f32>().unwrap();
    lin.update(&Tree::dict([("bias", Tree::leaf(ct::ones(&[3], DType::F32)))])).unwrap();
    assert_eq!(lin.weight.to_vec::<f32>().unwrap(), before);
    assert_eq!(lin.bias.as_ref().unwrap().to_vec::<f32>().unwrap(), vec![1.0; 3]);
}

#[test]
fn update_reports_every_problem_and_changes_nothing() {
    let mut mlp = Mlp::new(&ct::random::key(0), 2, 3, Activation::Relu, DType::F32);
    let before = mlp.parameters().leaves().iter().map(|a| a.to_vec::<f32>().unwrap()).collect::<Vec<_>>();
    let params = Tree::dict([
        ("fc1", Tree::dict([("weight", Tree::leaf(ct::zeros(&[2, 3], DType::F32)))])),
        ("fc2", Tree::dict([("bias", Tree::leaf(ct::zeros(&[2], DType::F64)))])),
        ("fc3", Tree::dict([("weight", Tree::leaf(ct::zeros(&[1], DType::F32)))])),
    ]);
    let message = mlp.update(&params).unwrap_err().to_string();
    for name in ["`fc1.weight`", "`fc2.bias`", "`fc3.weight`"] {
        assert!(message.contains(name), "{name} not in: {message}");
    }
    let after = mlp.parameters().leaves().iter().map(|a| a.to_vec::<f32>().unwrap()).collect::<Vec<_>>();
    assert_eq!(before, after, "a failed update changes nothing");
}

#[test]
fn freeze_marks_parameters_through_the_visitor() {
    let model = Freeze::new(vec![Linear::new(&ct::random::key(0), 2, 2, true, DType::F32); 2], &["0", "1.bias"]);
    assert_eq!(model.parameters().names(), ["0.weight", "0.bias", "1.weight", "1.bias"]);
    assert_eq!(model.trainable_parameters().names(), ["1.weight"]);
}

#[test]
fn load_into_reports_every_missing_extra_and_mis_shaped_tensor_at_once() {
    let dir = std::env::temp_dir().join(format!("ct_nn_load_all_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.safetensors");
    // the file: fc1.weight of another shape, no fc2.bias, and a tensor the model lacks
    let src = Mlp::new(&ct::random::key(1), 3, 5, Activation::Relu, DType::F32);
    let file = src.parameters().filter(|n| n != "fc2.bias").with("head.scale", Tree::leaf(ct::zeros(&[7], DType::F16)));
    save(&path, &file, None).unwrap();
    let mut model = Mlp::new(&ct::random::key(2), 3, 4, Activation::Relu, DType::F32);
    let before = model.parameters().leaves().iter().map(|a| a.to_vec::<f32>().unwrap()).collect::<Vec<_>>();
    let e = load_into(&mut model, &path).unwrap_err();
    assert!(matches!(e, Error::Other(_)), "a missing tensor is not an i/o error: {e:?}");
    let m = e.to_string();
    assert!(m.contains("m.safetensors: loading parameters: "), "{m}");
    for part in [
        "tensor `fc1.weight` has shape [5, 3] in the file but the model's parameter is [4, 3]",
        "missing tensor `fc2.bias` (the model's parameter is [3] float32)",
        "tensor `head.scale` is not a parameter of the model (the file has [7] float16)",
    ] {
        assert!(m.contains(part), "{part:?} not in: {m}");
    }
    let after = model.parameters().leaves().iter().map(|a| a.to_vec::<f32>().unwrap()).collect::<Vec<_>>();
    assert_eq!(before, after, "a failed load changes nothing");

    // only shape mismatches: a shape error
    save(&path, &src.parameters(), None).unwrap();
    assert!(matches!(load_into(&mut model, &path).unwrap_err(), Error::Shape(_)));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn update_errors_read_naturally() {
    let mut lin = Linear::new(&ct::random::key(0), 2, 3, true, DType::F32);
    let bad = Tree::dict([("weight", Tree::leaf(ct::zeros(&[2, 3], DType::F32)))]);
    let m = lin.update(&bad).unwrap_err().to_string();
    assert!(
        m.contains("updating parameters: `weight`: got shape [2, 3] float32 but the parameter is [3, 2] float32"),
        "{m}"
    );
}

/// `save_with_prefix` writes a layer under a prefix next to other tensors' names, and
/// `load_into_with_prefix` reads it back bit for bit (in bf16, the values rounded once).
#[test]
fn save_with_prefix_round_trips_through_load_into_with_prefix() {
    use cotangent_nn::io::{load_into_with_prefix, save_with_prefix};
    use cotangent_nn::qwen3_next::{Qwen3NextConfig, Qwen3NextDecoderLayer};
    let dir = std::env::temp_dir();
    let path = dir.join(format!("save_with_prefix_{}.safetensors", std::process::id()));
    let layer = Qwen3NextDecoderLayer::new(&ct::random::key(0), Qwen3NextConfig::small(16), DType::F32);
    save_with_prefix(&layer, &path, "model.layers.3.", None).unwrap();
    let names = load(&path).unwrap().names();
    let want: Vec<String> = layer.parameters().names().iter().map(|n| format!("model.layers.3.{n}")).collect();
    assert_eq!(names, want, "every parameter, prefixed, in the model's order");

    let mut back = Qwen3NextDecoderLayer::new(&ct::random::key(1), Qwen3NextConfig::small(16), DType::F32);
    assert_ne!(
        back.parameters().leaves()[1].to_vec::<f32>().unwrap(),
        layer.parameters().leaves()[1].to_vec::<f32>().unwrap()
    );
    load_into_with_prefix(&mut back, &path, "model.layers.3.").unwrap();
    for ((name, a), (_, b)) in layer.parameters().flatten().iter().zip(back.parameters().flatten()) {
        assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap(), "{name}");
    }
    // the wrong prefix finds nothing and says so
    let err = load_into_with_prefix(&mut back, &path, "model.layers.4.").unwrap_err().to_string();
    assert!(err.contains("missing tensor `model.layers.4.input_layernorm.weight`"), "{err}");

    // a float dtype for the file: f64 parameters saved as bf16 load back rounded once
    let lin = Linear::new(&ct::random::key(2), 3, 2, true, DType::F64);
    save_with_prefix(&lin, &path, "head.", Some(DType::BF16)).unwrap();
    assert_eq!(load(&path).unwrap().get("head.weight").unwrap().dtype(), DType::BF16);
    let mut lin_back = Linear::new(&ct::random::key(3), 3, 2, true, DType::F64);
    load_into_with_prefix(&mut lin_back, &path, "head.").unwrap();
    let rounded = lin.weight.astype(DType::BF16).astype(DType::F64).to_vec::<f64>().unwrap();
    assert_eq!(lin_back.weight.to_vec::<f64>().unwrap(), rounded);
    std::fs::remove_file(&path).ok();
}
