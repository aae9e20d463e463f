//! The CUDA side of the device seam: every [`Op`] evaluated on device memory.
//!
//! Views (reshape of a dense array, transpose, broadcast, slice) share the input's buffer, as on
//! the CPU. Element-wise ops, casts, reductions, scans, softmax, matmul, gathers, scatter-add,
//! slice updates, concatenation, summed slices and random sampling run as CUDA kernels.
//!
//! A few things fall back to the host (copy the inputs down, run the CPU kernel, copy the result
//! up), so every program that runs on the CPU also runs on a GPU, slower where it falls back:
//! `scatter` in `Put` mode (the last write must win deterministically, which the atomic kernel
//! does not promise), integer matmul (cuBLAS multiplies floats), random permutations and `argsort` (sorts), and element-wise ops the CUDA code generator has no snippet for in a
//! given dtype (the CPU then decides whether the op is defined at all). [`HOST_FALLBACKS`]
//! counts them, so a test or a profile can see that a program stays on the device.
use super::{device, elementwise, fused, index, matmul, random, reduce, CudaData};
use crate::backend::{cpu, Storage};
use crate::primitive::{Op, Primitive, Spec};
use crate::primitives::binary::BinaryOp;
use crate::shape::contiguous_strides;
use crate::{Array, Error, Result};
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many op evaluations on a CUDA device ran on the host instead (see the module docs).
pub static HOST_FALLBACKS: AtomicUsize = AtomicUsize::new(0);

/// The device data of a computed input.
pub(super) fn data(x: &Array) -> Result<&CudaData> {
    match x.computed_storage()? {
        Storage::Cuda(d) => Ok(d),
        other => Err(Error::Eval(format!("a CUDA kernel was given data on {}", other.device()))),
    }
}

/// `d` (dense, of the same element count) seen with the dense strides of `shape`.
fn dense_as(d: CudaData, shape: &[usize]) -> CudaData {
    let strides = contiguous_strides(shape);
    CudaData { strides, ..d }
}

/// A fresh dense copy of `x` that nothing else references (safe to write in place).
fn fresh_copy(x: &CudaData, shape: &[usize]) -> Result<CudaData> {
    let out = CudaData::empty(x.device(), x.dtype, shape)?;
    elementwise::copy_into(&out, x, shape)?;
    Ok(out)
}

/// The view of the region of a dense array of `shape` that starts at `starts` with `steps`.
fn region(out: &CudaData, shape: &[usize], starts: &[usize], steps: &[isize]) -> CudaData {
    let cs = contiguous_strides(shape);
    let offset: isize = starts.iter().zip(&cs).map(|(&s, &c)| s as isize * c).sum();
    let strides: Vec<isize> = cs.iter().zip(steps).map(|(&c, &s)| c * s).collect();
    out.view(&strides, out.offset + offset as usize)
}

/// Evaluate `op` on the CUDA device `ordinal`; `inputs` are computed and on that device.
pub(crate) fn eval(ordinal: usize, op: Op<'_>, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Storage>> {
    let out = match native(op, inputs, outputs)? {
        Some(out) => out,
        None => host_fallback(ordinal, op, inputs, outputs)?,
    };
    for (d, spec) in out.iter().zip(outputs) {
        if d.dtype != spec.dtype {
            return Err(Error::Eval(format!(
                "cuda: {op:?} produced {} where {} was expected (internal error)",
                d.dtype, spec.dtype
            )));
        }
    }
    Ok(out.into_iter().map(Storage::Cuda).collect())
}

/// Run `op` on the host and copy the outputs to the device.
fn host_fallback(ordinal: usize, op: Op<'_>, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<CudaData>> {
    HOST_FALLBACKS.fetch_add(1, Ordering::Relaxed);
    let dev = device(ordinal)?;
    let host: Vec<Array> = inputs
        .iter()
        .map(|x| {
            let d = data(x)?.to_host(x.shape())?;
            Ok(Array::from_storage(Storage::Cpu(d), x.shape(), x.dtype()))
        })
        .collect::<Result<_>>()?;
    let results = cpu::kernels::eval(op, &host, outputs)?;
    results.iter().zip(outputs).map(|(d, spec)| CudaData::from_host(&dev, d, &spec.shape)).collect()
}

/// The CUDA kernels of `op`, or `None` where it runs on the host.
fn native(op: Op<'_>, inputs: &[Array], outputs: &[Spec]) -> Result<Option<Vec<CudaData>>> {
    let out_shape = || outputs[0].shape.as_slice();
    let one = |d: CudaData| Ok(Some(vec![d]));
    let x = || data(&inputs[0]);
    let xs = || inputs[0].shape();
    match op {
        Op::Unary(u) if !elementwise::unary_defined(u, x()?.dtype) => Ok(None),
        Op::Unary(u) => one(elementwise::unary(u, x()?, xs())?),
        Op::Cast(to) => one(elementwise::cast(x()?, xs(), to)?),
        Op::Binary(b) => {
            let (a, bb) = (&inputs[0], &inputs[1]);
            if !elementwise::binary_defined(b, a.dtype()) {
                return Ok(None);
            }
            one(elementwise::binary(b, data(a)?, a.shape(), data(bb)?, bb.shape(), out_shape())?)
        }
        Op::Select => {
            let [c, a, b] = [&inputs[0], &inputs[1], &inputs[2]];
            one(elementwise::select((data(c)?, c.shape()), (data(a)?, a.shape()), (data(b)?, b.shape()), out_shape())?)
        }
        Op::Reduce(r) => one(dense_as(reduce::reduce(r.op, x()?, xs(), &r.axes)?, out_shape())),
        Op::ArgReduce(r) => one(dense_as(reduce::arg_reduce(r.op, x()?, xs(), r.axis)?, out_shape())),
        // sorting runs on the host (no CUDA sort kernel yet)
        Op::ArgSort(_) => Ok(None),
        Op::LogSumExp(l) => one(dense_as(reduce::logsumexp(x()?, xs(), &l.axes)?, out_shape())),
        Op::Softmax(s) => one(reduce::softmax(x()?, xs(), &s.axes)?),
        Op::Scan(s) => one(reduce::scan(s.op, x()?, xs(), s.axis, s.reverse, s.inclusive)?),
        // integer products run on the host (cuBLAS multiplies floats only)
        Op::Matmul if !inputs[0].dtype().is_float() => Ok(None),
        Op::Matmul => {
            let (a, b) = (&inputs[0], &inputs[1]);
            one(matmul::matmul(data(a)?, a.shape(), data(b)?, b.shape(), out_shape())?)
        }
        Op::Gather(g) => {
            let (x, idx) = (&inputs[0], &inputs[1]);
            one(index::gather(data(x)?, x.shape(), data(idx)?, idx.shape(), g.axis)?)
        }
        Op::Scatter(s) => {
            let (x, idx, upd) = (&inputs[0], &inputs[1], &inputs[2]);
            one(index::scatter(s.mode, data(x)?, x.shape(), data(idx)?, idx.shape(), data(upd)?, s.axis)?)
        }
        Op::Reshape(r) => {
            let dense = elementwise::to_contiguous(x()?, xs())?;
            one(dense_as(dense, &r.0))
        }
        Op::Transpose(t) => {
            let d = x()?;
            let strides: Vec<isize> = t.0.iter().map(|&p| d.strides[p]).collect();
            one(d.view(&strides, d.offset))
        }
        Op::Broadcast(b) => {
            let d = x()?;
            one(d.view(&cpu::elementwise::broadcast_strides(xs(), &d.strides, &b.0), d.offset))
        }
        Op::Slice(s) => {
            let d = x()?;
            if crate::shape::numel(&s.shape) == 0 {
                return one(d.view(&contiguous_strides(&s.shape), d.offset));
            }
            let mut offset = d.offset as isize;
            let mut strides = Vec::with_capacity(s.shape.len());
            for i in 0..s.shape.len() {
                offset += s.starts[i] as isize * d.strides[i];
                strides.push(d.strides[i] * s.steps[i]);
            }
            let offset = usize::try_from(offset)
                .map_err(|_| Error::Eval(format!("{}: negative offset (internal error)", s.name())))?;
            one(d.view(&strides, offset))
        }
        Op::SliceUpdate(s) => {
            let (base, upd) = (&inputs[0], &inputs[1]);
            let out = fresh_copy(data(base)?, base.shape())?;
            let dst = region(&out, base.shape(), &s.starts, &s.steps);
            elementwise::copy_into(&dst, data(upd)?, upd.shape())?;
            one(out)
        }
        Op::Concatenate(c) => {
            let shape = out_shape();
            let dev = x()?.device().clone();
            let out = CudaData::empty(&dev, outputs[0].dtype, shape)?;
            let mut start = 0;
            for part in inputs {
                let mut starts = vec![0; shape.len()];
                starts[c.0] = start;
                let dst = region(&out, shape, &starts, &vec![1; shape.len()]);
                elementwise::copy_into(&dst, data(part)?, part.shape())?;
                start += part.shape()[c.0];
            }
            one(out)
        }
        Op::ScatterSlices(s) => {
            let dev = x()?.device().clone();
            let out = CudaData::zeros(&dev, outputs[0].dtype, &s.shape)?;
            for ((starts, steps), u) in s.regions.iter().zip(inputs) {
                // read-add-write of each region in stream order, so overlapping regions add up
                let dst = region(&out, &s.shape, starts, steps);
                let sum = elementwise::binary(BinaryOp::Add, &dst, u.shape(), data(u)?, u.shape(), u.shape())?;
                elementwise::copy_into(&dst, &sum, u.shape())?;
            }
            one(out)
        }
        // a permutation sorts random keys: the CPU does it
        // one generated kernel per group (the host runs groups of more inputs than it takes)
        Op::Fused(g) => fused::fused(g, inputs, out_shape()),
        Op::FusedBatch(b) => fused::batch(b, inputs),
        Op::Random(r) if matches!(r.dist, crate::primitives::random::Dist::Permutation(_)) => Ok(None),
        Op::Random(r) => {
            let k = &inputs[0];
            one(random::random(r.dist, data(k)?, k.shape(), &r.shape, r.dtype)?)
        }
        op @ (Op::PassThrough { .. } | Op::Call(_) | Op::ToDevice(_)) => {
            Err(Error::Eval(format!("{op:?} is evaluated by the graph, not by a backend")))
        }
    }
}
