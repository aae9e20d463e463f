//! What a new user's first program does: arrays, a gradient, a small model trained with AdamW.
use cotangent::{self as ct, Array, DType};
use cotangent_nn::losses::{cross_entropy, Reduction};
use cotangent_nn::optim::{AdamW, Optimizer};
use cotangent_nn::{Activation, Mlp, Module};

fn main() -> ct::Result<()> {
    let x = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    let df = ct::grad(|a: &[Array]| (&a[0] * &a[0]).sum_all());
    println!("d/dx sum(x²) = {:?}", df(&[x])?[0].to_vec::<f32>()?);

    let key = ct::random::key(0);
    let mut model = Mlp::new(&key, 8, 32, Activation::Relu, DType::F32);
    let inputs = ct::random::normal(&ct::random::key(1), &[64, 8], DType::F32);
    let labels = inputs.sum(&[-1], false).greater(&Array::scalar(0.0f32)).astype(DType::I64);
    let step = cotangent_nn::value_and_grad(|m: &Mlp, d: &[Array]| {
        let logits = m.forward(&d[0]);
        let two = logits.slice(&[0, 0], &[64, 2], &[1, 1]);
        cross_entropy(&two, &d[1], 0.0, Reduction::Mean)
    });
    let mut opt = AdamW::new(1e-2, 0.0);
    for i in 0..50 {
        let (outs, grads) = step(&model, &[inputs.clone(), labels.clone()])?;
        opt.update(&mut model, &grads)?;
        if i % 10 == 0 {
            println!("step {i}: loss {}", outs[0].item::<f32>()?);
        }
    }
    Ok(())
}
