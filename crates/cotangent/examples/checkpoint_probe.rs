//! Peak memory of the grad of a deep tanh(W x) stack, with and without checkpointing.
//! Run: cargo run --release --example checkpoint_probe
use cotangent::{self as ct, Array, DType};

fn peak_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let l = s.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    l.split_whitespace().nth(1).unwrap().parse::<f64>().unwrap() / 1024.0
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (layers, width, batch, every) = (32usize, 128usize, 1024usize, 8usize);
    if args.len() < 2 {
        for mode in ["plain", "checkpoint"] {
            let out = std::process::Command::new(std::env::current_exe().unwrap()).arg(mode).output().unwrap();
            print!("{}", String::from_utf8_lossy(&out.stdout));
            eprint!("{}", String::from_utf8_lossy(&out.stderr));
        }
        return;
    }
    let key = ct::random::key(0);
    let ws: Vec<Array> = ct::random::split_keys(&key, layers)
        .iter()
        .map(|k| ct::random::normal(k, &[width, width], DType::F32) * (1.0 / (width as f64).sqrt()))
        .collect();
    ct::eval(&ws).unwrap();
    let x = ct::random::normal(&key, &[batch, width], DType::F32);
    x.eval().unwrap();
    let block = |x: &[Array]| {
        let mut h = x[0].clone();
        for w in &x[1..] {
            h = h.matmul(w).tanh();
        }
        h
    };
    let seg = ct::checkpoint(block);
    let ckpt = args[1] == "checkpoint";
    let base = peak_mib();
    let ws2 = ws.clone();
    let f = move |p: &[Array]| -> ct::Result<Array> {
        let mut h = p[0].clone();
        for g in 0..layers / every {
            let mut a = vec![h.clone()];
            a.extend(ws2[g * every..(g + 1) * every].iter().cloned());
            h = if ckpt { seg(&a)?.remove(0) } else { block(&a) };
        }
        Ok(h.sum_all())
    };
    let g = ct::grad(f)(&[x]).unwrap();
    g[0].eval().unwrap();
    println!("{}: peak {:.1} MiB (baseline {:.1} MiB)", args[1], peak_mib(), base);
}
