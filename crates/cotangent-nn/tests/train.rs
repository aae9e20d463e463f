//! A short training run (seconds) that must reduce the loss: a one-layer Gated DeltaNet
//! language model learning to copy the previous token, with AdamW, clipping and a schedule.
use cotangent::{self as ct, Array, DType};
use cotangent_nn::losses::{cross_entropy, Reduction};
use cotangent_nn::optim::{clip_grad_norm, schedules, AdamW, Optimizer};
use cotangent_nn::*;

#[derive(Clone)]
struct Model {
    embed: Embedding,
    mixer: GatedDeltaNet,
    head: Linear,
}

impl Module for Model {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.child("embed", &mut self.embed);
        v.child("mixer", &mut self.mixer);
        v.child("head", &mut self.head);
    }
}

#[test]
fn training_reduces_the_loss() {
    let (vocab, dim, b, t) = (8, 16, 8, 12);
    let k = ct::random::split_keys(&ct::random::key(0), 4);
    let mut cfg = GatedDeltaNetConfig::new(dim, 2);
    cfg.mode = RecurrenceMode::Chunked(4);
    let mut model = Model {
        embed: Embedding::new(&k[0], vocab, dim, DType::F32),
        mixer: GatedDeltaNet::new(&k[1], cfg, DType::F32),
        head: Linear::new(&k[2], dim, vocab, true, DType::F32),
    };
    let vg = value_and_grad(|m: &Model, batch: &[Array]| {
        let x = m.embed.forward(&batch[0]);
        let h = &x + m.mixer.forward(&x)?;
        Ok::<_, ct::Error>(cross_entropy(&m.head.forward(&h), &batch[1], 0.0, Reduction::Mean))
    });
    let steps = 200;
    let mut opt = AdamW::new(3e-2, 0.01);
    let lr = schedules::warmup_cosine(3e-2, 10, steps, 1e-3);
    let mut losses = vec![];
    for step in 0..steps {
        // targets: the previous token (needs the mixer to look back one step)
        let ids =
            ct::random::randint(&ct::random::fold_in(&k[3], step as u32), 0, vocab as i64, &[b, t + 1], DType::I32);
        let inputs = ids.slice_axis(1, Some(1), None, 1);
        let targets = ids.slice_axis(1, Some(0), Some(t as isize), 1);
        let (outs, grads) = vg(&model, &[inputs, targets]).unwrap();
        let (grads, _) = clip_grad_norm(&grads, 1.0);
        opt.set_lr(lr(step));
        opt.update(&mut model, &grads).unwrap();
        losses.push(outs[0].item::<f32>().unwrap());
    }
    let first: f32 = losses[..5].iter().sum::<f32>() / 5.0;
    let last: f32 = losses[steps - 5..].iter().sum::<f32>() / 5.0;
    eprintln!("loss {first} -> {last}");
    assert!(last < 0.25 * first, "loss went from {first} to {last}: {losses:?}");
}
