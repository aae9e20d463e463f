//! The main job's data and loss (`examples/mqar/model.rs`, included here):
//!
//! - `queries_ask_context_keys_and_answers_are_their_values`: every query position holds a key of
//!   its sequence's context, each key is asked exactly once, the answer is the value paired with
//!   that key in the context (and the next input token, as in the sequence), and every other
//!   position after the context is the filler token 0 — checked at the default size and at the
//!   `--hard` size.
//! - `loss_at_query_positions_equals_the_masked_loss_over_all_positions`: `loss_and_correct`
//!   computes logits at the query positions only; its loss and count of correct answers equal the
//!   masked mean cross-entropy and argmax hits over the logits of *all* positions, computed here
//!   in f64 — with an output projection and with the tied head.
//! - `compiled_training_gives_the_same_losses_bit_for_bit`: `--compile` (the loss and its
//!   gradients through `ct::compile`, across the chunked recurrence's custom functions) trains
//!   to the same losses and accuracies, bit for bit, as the uncompiled step.
#[allow(dead_code)]
#[path = "../examples/mqar/model.rs"]
mod model;

use cotangent as ct;
use model::{loss_and_correct, mqar_batch, Config, LanguageModel, Rng, Training};
use std::collections::{HashMap, HashSet};

#[test]
fn queries_ask_context_keys_and_answers_are_their_values() {
    for c in [Config::default(), Config::hard()] {
        let (n, t, p, half) = (6, c.seq_len, c.pairs, c.vocab / 2);
        let b = mqar_batch(&mut Rng(7), n, &c);
        assert_eq!(b.inputs.shape(), &[n, t]);
        assert_eq!(b.query_positions.shape(), &[n, p]);
        assert_eq!(b.answers.shape(), &[n, p]);
        let inputs: Vec<i32> = b.inputs.to_vec().unwrap();
        let positions: Vec<i32> = b.query_positions.to_vec().unwrap();
        let answers: Vec<i32> = b.answers.to_vec().unwrap();
        for s in 0..n {
            let seq = &inputs[s * t..(s + 1) * t];
            let value_of: HashMap<i32, i32> = (0..p).map(|i| (seq[2 * i], seq[2 * i + 1])).collect();
            assert_eq!(value_of.len(), p, "sequence {s}: the context's keys are distinct");
            for (&k, &v) in &value_of {
                assert!((1..half as i32).contains(&k), "key {k} outside the lower half");
                assert!((half as i32..c.vocab as i32).contains(&v), "value {v} outside the upper half");
            }
            let mut asked = HashSet::new();
            let mut query_slots = HashSet::new();
            for j in 0..p {
                let q = positions[s * p + j] as usize;
                let answer = answers[s * p + j];
                assert!(q >= 2 * p && q + 1 < t, "query position {q} outside the query section");
                assert!(j == 0 || q > positions[s * p + j - 1] as usize, "query positions ascend");
                assert_eq!(value_of.get(&seq[q]), Some(&answer), "sequence {s}, query {j} at {q}");
                assert_eq!(seq[q + 1], answer, "the answer follows its query in the sequence");
                asked.insert(seq[q]);
                query_slots.extend([q, q + 1]);
            }
            assert_eq!(asked.len(), p, "sequence {s}: every key is asked once");
            for (i, &tok) in seq.iter().enumerate().skip(2 * p) {
                if !query_slots.contains(&i) {
                    assert_eq!(tok, 0, "sequence {s}: position {i} is filler");
                }
            }
        }
    }
}

#[test]
fn loss_at_query_positions_equals_the_masked_loss_over_all_positions() {
    let base = Config { vocab: 32, pairs: 4, seq_len: 32, dim: 16, heads: 2, chunk: 8, ..Default::default() };
    for tie_head in [false, true] {
        let c = Config { tie_head, ..base.clone() };
        let model = LanguageModel::new(&ct::random::key(3), &c);
        let (n, t, v, p) = (4, c.seq_len, c.vocab, c.pairs);
        let b = mqar_batch(&mut Rng(11), n, &c);
        let out = loss_and_correct(&model, &b.arrays()).unwrap();
        let (loss, correct) = (out[0].item::<f32>().unwrap() as f64, out[1].item::<f32>().unwrap() as f64);

        // every position's logits, then the query positions picked out here
        let all: Vec<f32> = model.logits(&model.hidden(&b.inputs).unwrap()).to_vec().unwrap();
        assert_eq!(all.len(), n * t * v);
        let positions: Vec<i32> = b.query_positions.to_vec().unwrap();
        let answers: Vec<i32> = b.answers.to_vec().unwrap();
        let (mut ce_sum, mut hits) = (0.0f64, 0.0f64);
        for s in 0..n {
            for j in 0..p {
                let q = positions[s * p + j] as usize;
                let row: Vec<f64> = all[(s * t + q) * v..(s * t + q + 1) * v].iter().map(|&x| x as f64).collect();
                let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let lse = max + row.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
                let answer = answers[s * p + j] as usize;
                ce_sum += lse - row[answer];
                let argmax = (0..v).fold(0, |best, i| if row[i] > row[best] { i } else { best });
                hits += (argmax == answer) as u8 as f64;
            }
        }
        let reference = ce_sum / (n * p) as f64;
        assert!(
            (loss - reference).abs() <= 1e-5 * reference.abs().max(1.0),
            "tie_head {tie_head}: loss {loss} against {reference} from all positions' logits"
        );
        assert_eq!(correct, hits, "tie_head {tie_head}: correct answers");
        assert!(reference > 0.5 * (v as f64 / 2.0).ln(), "an untrained model is near chance ({reference})");
    }
}

#[test]
fn compiled_training_gives_the_same_losses_bit_for_bit() {
    let base =
        Config { vocab: 32, pairs: 4, seq_len: 32, dim: 16, batch: 4, chunk: 8, steps: 20, ..Default::default() };
    let run = |compile: bool| -> Vec<(u32, u64)> {
        let mut t = Training::new(&Config { compile, ..base.clone() });
        (0..6).map(|_| t.step().map(|r| (r.loss.to_bits(), r.train_acc.to_bits())).expect("a step")).collect()
    };
    let (plain, compiled) = (run(false), run(true));
    assert_eq!(plain, compiled);
    assert_ne!(plain[0].0, plain[5].0, "the loss changes as the model trains");
}
