//! Fused element-wise groups ([`Fused`], built by [`compile`](crate::compile)): one generated
//! kernel per group structure, reading every input once and writing every exported step once.
//!
//! Each step is the same snippet, in the same compute type, as the step's own kernel in
//! [`elementwise`](super::elementwise), and each step's value is rounded to its stored dtype
//! before later steps read it (f16 and bf16 go through their 16-bit patterns, exactly as when
//! the step's result is written to memory and read back), so a fused group's results are bit
//! for bit those of its steps run as separate kernels (NVRTC compiles with `--fmad=false`: no
//! multiply-add contracts across steps).
//!
//! Kernels are cached per device by a structural key (the ops, the dtypes, how steps read
//! inputs and earlier steps, which steps are exported); the layouts of the inputs (dense,
//! broadcast scalar, strided) are launch arguments, so one kernel serves every shape.
use super::codegen::{self, Layout, PRELUDE};
use super::device::Kernel;
use super::elementwise::{self, binary_snippet, class, launch_map, map_source_unrolled, same_device, unary_snippet};
use super::storage::CudaData;
use crate::backend::cpu::elementwise::broadcast_strides;
use crate::primitive::Op;
use crate::primitives::fused::{Fused, FusedArg, FusedBatch};
use crate::{Array, DType, Result};
use std::fmt::Write;

/// The most bytes of launch parameters a fused kernel takes: pointers and the layout travel by
/// value, and CUDA 12.1 and later accept up to 32,764 bytes of parameters on Volta and newer
/// GPUs (the driver this backend loads is CUDA 13). A group whose inputs and exports need more
/// (72 bytes per input and 8 per export: about 440 inputs, or 3,900 exports of a group with a few
/// inputs) runs on the host.
const MAX_PARAM_BYTES: usize = 32_000;

/// The launch parameter bytes of a fused kernel with `inputs` inputs and `outputs` exports: one
/// pointer each, then `ct_args<inputs>` (`n`, `ndim`, `contig`, a shape and one set of strides per input).
fn param_bytes(inputs: usize, outputs: usize) -> usize {
    8 * (inputs + outputs) + 8 * (3 + super::MAX_DIMS * (1 + inputs))
}

/// Whether a fused kernel can compute `op` on operands of `dtype` (the dtype of its first
/// operand; for `select`, the values' dtype).
pub(crate) fn fusable(op: Op<'_>, operand: DType) -> bool {
    match op {
        Op::Unary(u) => elementwise::unary_defined(u, operand),
        Op::Binary(b) => elementwise::binary_defined(b, operand),
        Op::Cast(_) | Op::Select => true,
        _ => false,
    }
}

/// The dtype step `arg` reads: an input's, or an earlier step's result.
fn arg_dtype(group: &Fused, input_dtypes: &[DType], arg: FusedArg) -> DType {
    match arg {
        FusedArg::Input(i) => input_dtypes[i],
        FusedArg::Step(j) => group.steps()[j].spec.dtype,
    }
}

/// The C expression of `arg`'s stored value inside the kernel body.
fn arg_value(arg: FusedArg) -> String {
    match arg {
        FusedArg::Input(i) => format!("@{i}@"),
        FusedArg::Step(j) => format!("v{j}"),
    }
}

/// The kernel cache key of `group` over inputs of `input_dtypes`, or `None` when a step has no
/// kernel for its dtypes.
fn key(group: &Fused, input_dtypes: &[DType]) -> Option<String> {
    let mut k = String::from("ct_fused:");
    for d in input_dtypes {
        let _ = write!(k, "{},", codegen::tag(*d));
    }
    for step in group.steps() {
        let operand = arg_dtype(group, input_dtypes, *step.args.last()?);
        let op = step.prim.op();
        if !fusable(op, operand) {
            return None;
        }
        let _ = match op {
            Op::Unary(u) => write!(k, "|{}", u.name()),
            Op::Binary(b) => write!(k, "|{}", b.name()),
            Op::Cast(to) => write!(k, "|astype_{}", codegen::tag(to)),
            _ => write!(k, "|select"),
        };
        let _ = write!(k, ":{}(", codegen::tag(operand));
        for a in &step.args {
            let _ = match a {
                FusedArg::Input(i) => write!(k, "i{i},"),
                FusedArg::Step(j) => write!(k, "s{j},"),
            };
        }
        k.push(')');
    }
    let _ = write!(k, "|out{:?}", group.exports());
    Some(k)
}

/// The code of `group`'s steps: a header holding a namespace `{ns}s{j}` per unary/binary step
/// (its op snippet, with that step's dtype macros) and a body that computes every step in
/// order as `v{j}`, reading input `i` as `@i@` (its stored value).
fn steps_code(group: &Fused, input_dtypes: &[DType], ns: &str) -> (String, String) {
    let (mut header, mut body) = (String::new(), String::new());
    for (j, step) in group.steps().iter().enumerate() {
        let out = step.spec.dtype;
        // the dtype the op computes on: its value operands' (for select, the last two)
        let operand = arg_dtype(group, input_dtypes, *step.args.last().expect("a step has operands"));
        let load = |a: FusedArg| codegen::load(arg_dtype(group, input_dtypes, a), &arg_value(a));
        let value = match step.prim.op() {
            op @ (Op::Unary(_) | Op::Binary(_)) => {
                let (snippet, params) = match op {
                    Op::Unary(u) => (unary_snippet(u, class(operand)), "T x"),
                    Op::Binary(b) => (binary_snippet(b, class(operand)), "T x, T y"),
                    _ => unreachable!("matched above"),
                };
                let _ = write!(
                    header,
                    "#undef IS_SIGNED\n#undef F\n#undef CT_NAN\n#undef CT_INF\nnamespace {ns}s{j} {{\n{}typedef {} R;\n\
                     __device__ __forceinline__ R op({params}) {{ {} }}\n}}\n",
                    codegen::generic_header(operand),
                    codegen::compute(out),
                    snippet.expect("checked by key()"),
                );
                let args: Vec<String> = step.args.iter().map(|&a| load(a)).collect();
                codegen::store(out, &format!("{ns}s{j}::op({})", args.join(", ")))
            }
            Op::Cast(to) => codegen::cast_expr(operand, to, &load(step.args[0])),
            _ => format!("({} ? {} : {})", load(step.args[0]), arg_value(step.args[1]), arg_value(step.args[2])),
        };
        let _ = write!(body, "const {} v{j} = {value}; ", codegen::storage(out));
    }
    (header, body)
}

/// The kernel source of `group`: its steps (see [`steps_code`]), then one store per export.
fn source(group: &Fused, input_dtypes: &[DType], name: &str) -> String {
    let (steps_header, mut body) = steps_code(group, input_dtypes, "");
    let header = codegen::saturating_casts() + &steps_header;
    let mut outs = Vec::new();
    for (e, &j) in group.exports().iter().enumerate() {
        let t = codegen::storage(group.steps()[j].spec.dtype);
        outs.push(format!("{t}* __restrict__ out{e}"));
        let _ = write!(body, "out{e}[i] = v{j}; ");
    }
    let in_ts: Vec<&str> = input_dtypes.iter().map(|&d| codegen::storage(d)).collect();
    // a few steps: bandwidth-bound, unrolled as a single op's kernel; many: compute-bound
    let unroll = match group.steps().len() {
        0..=8 => 8,
        9..=32 => 2,
        _ => 1,
    };
    let src = map_source_unrolled(&header, name, &outs.join(", "), &in_ts, &body, unroll);
    debug_assert!(src.starts_with(PRELUDE));
    src
}

/// Evaluates `group` on `inputs` (each broadcasting to `shape`) in one kernel: one new dense
/// array per export. `Ok(None)` when the group's pointers and layout exceed
/// [`MAX_PARAM_BYTES`] of launch parameters, or a step has no kernel for its dtypes (the caller
/// then runs it on the host).
pub(crate) fn fused(group: &Fused, inputs: &[Array], shape: &[usize]) -> Result<Option<Vec<CudaData>>> {
    if inputs.is_empty() || param_bytes(inputs.len(), group.exports().len()) > MAX_PARAM_BYTES {
        return Ok(None);
    }
    let data: Vec<&CudaData> = inputs.iter().map(super::eval::data).collect::<Result<_>>()?;
    let dev = same_device("fused", &data)?;
    let input_dtypes: Vec<DType> = data.iter().map(|d| d.dtype).collect();
    let cached = {
        let made = group.cuda_kernels().lock().unwrap_or_else(|e| e.into_inner());
        made.iter().find(|g| g.ordinal == dev.ordinal() && g.input_dtypes == input_dtypes).map(|g| g.kernel)
    };
    // the structural key is only built (and the group checked for kernels of its dtypes) when
    // the group has no kernel for these dtypes on this device yet
    let key = match cached {
        Some(_) => String::new(),
        None => match key(group, &input_dtypes) {
            Some(key) => key,
            None => return Ok(None),
        },
    };
    let outs: Vec<CudaData> = group
        .exports()
        .iter()
        .map(|&j| CudaData::empty(dev, group.steps()[j].spec.dtype, shape))
        .collect::<Result<_>>()?;
    let strides: Vec<_> =
        inputs.iter().zip(&data).map(|(a, d)| broadcast_strides(a.shape(), &d.strides, shape)).collect();
    let stride_refs: Vec<&[isize]> = strides.iter().map(|s| s.as_slice()).collect();
    let layout = Layout::new("fused", shape, &stride_refs)?;
    if layout.n() == 0 {
        return Ok(Some(outs));
    }
    let k = match cached {
        Some(k) => k,
        None => {
            let name = format!("ct_fused_{:016x}", fnv64(&key));
            let kernel = dev.kernel(&key, &name, || source(group, &input_dtypes, &name))?;
            let made = GroupKernel { ordinal: dev.ordinal(), input_dtypes: input_dtypes.clone(), kernel };
            group.cuda_kernels().lock().unwrap_or_else(|e| e.into_inner()).push(made);
            kernel
        }
    };
    let out_ptrs: Vec<u64> = outs.iter().map(|o| o.ptr()).collect();
    let in_ptrs: Vec<u64> = data.iter().map(|d| d.ptr()).collect();
    // SAFETY: `k` is the fused group's kernel, generated for these outputs and inputs and their
    // dtypes; `layout` was built from the shapes and strides of these live views.
    unsafe { launch_map(dev, k, &out_ptrs, &in_ptrs, layout) }?;
    Ok(Some(outs))
}

/// Evaluates the groups of `batch` in one kernel when every input is dense with its group's
/// shape or a single element (the case `compile` builds batches for: parameters, their
/// gradients, a learning rate): thread `t` of the launch computes element `t - start` of the
/// group whose range of the concatenated elements holds `t`. Other inputs (views, broadcasts)
/// run group by group. `Ok(None)` when a group has no kernel for its dtypes (the caller runs the
/// batch on the host).
pub(crate) fn batch(batch: &FusedBatch, inputs: &[Array]) -> Result<Option<Vec<CudaData>>> {
    let members = batch.members();
    let data: Vec<&CudaData> = inputs.iter().map(super::eval::data).collect::<Result<_>>()?;
    // per input: whether it is read as one element (else it is dense with its group's shape)
    let scalar: Option<Vec<bool>> = members
        .iter()
        .flat_map(|m| m.inputs.clone().map(move |k| (m, k)))
        .map(|(m, k)| {
            let shape = inputs[k].shape();
            if crate::shape::numel(shape) == 1 {
                Some(true)
            } else {
                (shape == &m.shape[..] && data[k].is_contiguous(shape)).then_some(false)
            }
        })
        .collect();
    let n_outputs: usize = members.iter().map(|m| m.outputs.len()).sum();
    let one_kernel = scalar.filter(|_| {
        members.iter().all(|m| !m.inputs.is_empty())
            && 8 * (inputs.len() + n_outputs + members.len()) <= MAX_PARAM_BYTES
    });
    let Some(scalar) = one_kernel else {
        let mut outs = Vec::with_capacity(n_outputs);
        for m in members {
            match fused(&m.group, &inputs[m.inputs.clone()], &m.shape)? {
                Some(o) => outs.extend(o),
                None => return Ok(None),
            }
        }
        return Ok(Some(outs));
    };
    let dev = same_device("fused_batch", &data)?;
    let input_dtypes: Vec<DType> = data.iter().map(|d| d.dtype).collect();
    let cached = {
        let made = batch.cuda_kernels().lock().unwrap_or_else(|e| e.into_inner());
        made.iter().find(|g| g.ordinal == dev.ordinal() && g.input_dtypes == input_dtypes).map(|g| g.kernel)
    };
    let k = match cached {
        Some(k) => k,
        None => {
            let mut key = String::from("ct_fused_batch:");
            for m in members {
                let Some(k) = self::key(&m.group, &input_dtypes[m.inputs.clone()]) else { return Ok(None) };
                let flags: String = scalar[m.inputs.clone()].iter().map(|&s| if s { '1' } else { '0' }).collect();
                let _ = write!(key, "{{{k}|scalar{flags}}}");
            }
            let name = format!("ct_fused_batch_{:016x}", fnv64(&key));
            let kernel = dev.kernel(&key, &name, || batch_source(batch, &input_dtypes, &scalar, &name))?;
            let made = GroupKernel { ordinal: dev.ordinal(), input_dtypes: input_dtypes.clone(), kernel };
            batch.cuda_kernels().lock().unwrap_or_else(|e| e.into_inner()).push(made);
            kernel
        }
    };
    let mut outs = Vec::with_capacity(n_outputs);
    let mut ends: Vec<i64> = Vec::with_capacity(members.len());
    for m in members {
        for &j in m.group.exports() {
            outs.push(CudaData::empty(dev, m.group.steps()[j].spec.dtype, &m.shape)?);
        }
        ends.push(ends.last().copied().unwrap_or(0) + crate::shape::numel(&m.shape) as i64);
    }
    let total = *ends.last().expect("a batch has members") as u64;
    if total == 0 {
        return Ok(Some(outs));
    }
    let mut ptrs: Vec<u64> = outs.iter().map(|o| o.ptr()).chain(data.iter().map(|d| d.ptr())).collect();
    let mut params: Vec<*mut std::ffi::c_void> = ptrs.iter_mut().map(|p| p as *mut u64 as *mut _).collect();
    params.extend(ends.iter_mut().map(|e| e as *mut i64 as *mut std::ffi::c_void));
    const BLOCK: u32 = 256;
    // SAFETY: `k` was generated for this batch's outputs, inputs and dtypes and takes one pointer
    // per output and input, then one `i64` end per group, in that order; every input was checked
    // above to be dense with its group's shape (or read at element 0 only), every output is a
    // fresh dense buffer of its group's shape, and the ends are the running element counts.
    unsafe { dev.launch(k, dev.grid_for(total, BLOCK), BLOCK, 0, &mut params) }?;
    Ok(Some(outs))
}

/// The kernel source of `batch` (see [`batch`]): each group's steps in a namespace of its own,
/// and a grid-stride loop over the concatenated elements that runs the group owning each one.
fn batch_source(batch: &FusedBatch, input_dtypes: &[DType], scalar: &[bool], name: &str) -> String {
    let mut header = codegen::saturating_casts();
    let (mut params, mut loop_body) = (Vec::new(), String::new());
    let mut n_out = 0;
    for m in batch.members() {
        for &j in m.group.exports() {
            params.push(format!("{}* __restrict__ o{n_out}", codegen::storage(m.group.steps()[j].spec.dtype)));
            n_out += 1;
        }
    }
    for (k, &d) in input_dtypes.iter().enumerate() {
        params.push(format!("const {}* __restrict__ a{k}", codegen::storage(d)));
    }
    for g in 0..batch.members().len() {
        params.push(format!("const i64 e{g}"));
    }
    for (g, m) in batch.members().iter().enumerate() {
        let (steps_header, mut body) = steps_code(&m.group, &input_dtypes[m.inputs.clone()], &format!("g{g}"));
        header.push_str(&steps_header);
        for (local, k) in m.inputs.clone().enumerate() {
            let at = if scalar[k] { "0" } else { "i" };
            body = body.replace(&format!("@{local}@"), &format!("a{k}[{at}]"));
        }
        for (e, &j) in m.group.exports().iter().enumerate() {
            let _ = write!(body, "o{}[i] = v{j}; ", m.outputs.start + e);
        }
        let start = if g == 0 { "0".to_string() } else { format!("e{}", g - 1) };
        let branch = if g == 0 { "if" } else { "else if" };
        let _ = writeln!(loop_body, "    {branch} (t < e{g}) {{ const i64 i = t - {start}; {body}}}");
    }
    let last = batch.members().len() - 1;
    format!(
        "{PRELUDE}\n{header}\nextern \"C\" __global__ void {name}({}) {{\n  CT_LOOP(t, e{last}) {{\n{loop_body}  }}\n}}\n",
        params.join(", ")
    )
}

/// A kernel made for a [`Fused`] group, kept with the group (`Fused::cuda_kernels`): the
/// device it was loaded on and the input dtypes it was generated for.
#[derive(Debug)]
pub(crate) struct GroupKernel {
    ordinal: usize,
    input_dtypes: Vec<DType>,
    kernel: Kernel,
}

/// 64-bit FNV-1a of `s` (a kernel name derived from its structural key).
fn fnv64(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cuda::nvrtc;

    /// The fused groups `compile` builds from a mixed program (float, half, integer, boolean,
    /// casts, select, several exports) generate kernels that NVRTC compiles for sm_90 (runs
    /// wherever libnvrtc loads, GPU or not), and their keys tell the groups apart.
    #[test]
    fn generated_fused_kernels_compile() {
        let f = crate::compile(|x: &[Array]| {
            let t = (&x[0] * &x[1]).sin() * 1.01 + 0.1;
            let h = t.astype(DType::F16).tanh().astype(DType::F32) + t.astype(DType::BF16).sigmoid().astype(DType::F32);
            let n = (&t * 100.0).astype(DType::I32) % 7i32;
            let m = crate::select(&n.greater(Array::scalar(2i32)), &h, -&t);
            vec![m.clone(), n, (&m * 3.0).square().less(&t)]
        });
        // the group is read from a program traced on the host: on a GPU a compiled call's
        // outputs come from one graph node
        let host = crate::Device::Cpu;
        let a = Array::from_slice(&[0.5f32; 6], &[2, 3]).to_device(host);
        let b = Array::from_slice(&[0.25f32; 3], &[3]).to_device(host);
        let outs = f(&[a, b]).expect("traced");
        let mut keys = Vec::new();
        for out in &outs {
            let Some(Op::Fused(group)) = out.node.primitive().map(|p| p.op()) else {
                panic!("{out:?} is not fused");
            };
            let dtypes: Vec<DType> = out.node.inputs().iter().map(|x| x.dtype()).collect();
            let key = key(group, &dtypes).expect("every step has a CUDA snippet");
            let src = source(group, &dtypes, "ct_fused_check");
            assert!(src.contains("out0") && src.contains("s0::op"), "{src}");
            keys.push(key);
            if nvrtc::available() {
                let size =
                    nvrtc::check_compiles(&src, "ct_fused_check", (9, 0)).unwrap_or_else(|e| panic!("{e}\n{src}"));
                assert!(size > 0);
            }
        }
        // all three outputs come from one group
        assert!(keys.windows(2).all(|w| w[0] == w[1]), "{keys:?}");
    }

    /// The batch `compile` builds from the final updates of several shapes and dtypes (float,
    /// half, integer, a boolean export, a scalar learning rate) generates a kernel that NVRTC
    /// compiles for sm_90, with one branch per group and scalars read at element 0.
    #[test]
    fn generated_batch_kernels_compile() {
        let f = crate::compile(|x: &[Array]| {
            let lr = &x[4];
            vec![
                &x[0] - &x[0].sin() * lr,
                (&x[1].astype(DType::F32) * lr).astype(DType::F16).tanh(),
                (&x[2] * 3i32) % 5i32,
                x[3].greater(lr),
            ]
        });
        let args = [
            Array::from_slice(&[0.5f32; 6], &[2, 3]),
            Array::from_slice(&[0.25f32; 4], &[4]).astype(DType::F16),
            Array::from_slice(&[7i32; 5], &[5]),
            Array::from_slice(&[0.1f32; 8], &[2, 2, 2]),
            Array::scalar(0.01f32),
        ]
        .map(|x| x.to_device(crate::Device::Cpu)); // traced on the host, as above
        let outs = f(&args).expect("traced");
        let Some(Op::FusedBatch(batch)) = outs[0].node.primitive().map(|p| p.op()) else {
            panic!("{:?} is not a batch", outs[0]);
        };
        assert_eq!(batch.members().len(), 4, "{:?}", outs[0]);
        let inputs = outs[0].node.inputs();
        let dtypes: Vec<DType> = inputs.iter().map(|x| x.dtype()).collect();
        let scalar: Vec<bool> = inputs.iter().map(|x| x.size() == 1).collect();
        assert!(scalar.iter().any(|&s| s) && !scalar.iter().all(|&s| s), "{scalar:?}");
        let src = batch_source(batch, &dtypes, &scalar, "ct_fused_batch_check");
        assert_eq!(src.matches("(t < e").count(), 4, "{src}");
        assert!(src.contains("g3s0::op"), "{src}");
        if nvrtc::available() {
            let size =
                nvrtc::check_compiles(&src, "ct_fused_batch_check", (9, 0)).unwrap_or_else(|e| panic!("{e}\n{src}"));
            assert!(size > 0);
        }
    }

    /// A group of 245 steps reading 99 inputs and exporting 147 values (more pointers than the
    /// classic 4 KiB of launch parameters hold) runs as one kernel on a GPU, bit for bit as the
    /// separate kernels: once with every input dense or a scalar flagged in `contig` (the dense
    /// path), once with scalars past the 62 flagged operands (the strided path).
    #[test]
    fn wide_groups_run_as_one_kernel() {
        // without a GPU the group is traced on the CPU and its kernel only compiled by NVRTC
        // (where libnvrtc loads): 99 pointers and a 6.4 KiB layout fit the parameter space
        let on_gpu = super::super::cuda_available();
        let cuda = if on_gpu { crate::Device::Cuda(0) } else { crate::Device::Cpu };
        let body = |x: &[Array]| {
            let mut acc = x[0].clone();
            let mut outs = Vec::new();
            for (i, xi) in x.iter().enumerate().skip(1) {
                acc = (&acc * xi).sin();
                outs.push(acc.clone());
                if i % 2 == 0 {
                    outs.push(acc.cos());
                }
            }
            outs
        };
        for scalars_past_62 in [false, true] {
            let key = crate::random::key(scalars_past_62 as u64);
            let keys = crate::random::split_keys(&key, 99);
            let inputs: Vec<Array> = (0..99)
                .map(|i| {
                    let scalar = i % 2 == 1 && (i < 62 || scalars_past_62);
                    let shape: &[usize] = if scalar { &[] } else { &[3, 1000] };
                    crate::random::uniform(&keys[i], shape, 0.5, 1.5, DType::F32).to_device(cuda)
                })
                .collect();
            let eager = body(&inputs);
            let compiled_fn = crate::compile(body);
            let compiled = compiled_fn(&inputs).expect("compiled call");
            assert_eq!(compiled.len(), 147);
            // the group, from the program traced on the host (on a GPU the call's outputs come
            // from one graph node)
            let host: Vec<Array> = inputs.iter().map(|x| x.to_device(crate::Device::Cpu)).collect();
            let traced = crate::compile(body)(&host).expect("compiled on the host");
            let node = &traced[0].node;
            let Some(Op::Fused(group)) = node.primitive().map(|p| p.op()) else {
                panic!("{:?} is not fused", traced[0]);
            };
            assert!(group.exports().len() >= 147 && node.inputs().len() == 99, "{:?}", traced[0]);
            if !on_gpu {
                if nvrtc::available() && !scalars_past_62 {
                    let dtypes = vec![DType::F32; 99];
                    let src = source(group, &dtypes, "ct_fused_wide");
                    let size = nvrtc::check_compiles(&src, "ct_fused_wide", (9, 0)).unwrap_or_else(|e| panic!("{e}"));
                    assert!(size > 0);
                }
                continue;
            }
            // the group's inputs (the call's arguments, in the order the group reads them) on the GPU
            let node_inputs: Vec<Array> = node.inputs().iter().map(|x| x.to_device(cuda)).collect();
            crate::eval(&node_inputs).expect("the group's inputs");
            let direct = fused(group, &node_inputs, &[3, 1000]).expect("launch");
            assert!(direct.is_some(), "a group of 99 inputs and 147 exports ran on the host");
            // a second call replays the same group, whose kernel it finds in the group's cache
            let replayed = compiled_fn(&inputs).expect("second compiled call");
            for (i, ((c, r), e)) in compiled.iter().zip(&replayed).zip(&eager).enumerate() {
                assert_eq!(c.device(), cuda);
                let (c, r, e) = (c.to_vec::<f32>().unwrap(), r.to_vec::<f32>().unwrap(), e.to_vec::<f32>().unwrap());
                assert!(
                    c.iter().zip(&e).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "output {i}, scalars past 62: {scalars_past_62}: compiled differs from separate kernels"
                );
                assert!(
                    r.iter().zip(&e).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "output {i}, scalars past 62: {scalars_past_62}: the replay differs from separate kernels"
                );
            }
            let made = group.cuda_kernels().lock().unwrap().len();
            assert_eq!(made, 1, "three launches of one group on one device with one dtype made {made} kernels");
        }
    }
}

/// A measurement, not a check (ignored by default): how long NVRTC takes to compile the fused
/// kernels of compiled chains `sin(x)*1.01+0.1` of 100 and 1000 links and their gradients, as
/// traced on the CPU (groups uncut). Needs libnvrtc, not a GPU:
/// `LD_LIBRARY_PATH=<dir of libnvrtc.so.13> cargo test --release --features cuda -p cotangent --lib
/// nvrtc_time -- --ignored --nocapture`. Results in bench/RESULTS.md.
#[cfg(test)]
mod nvrtc_timing {
    use super::*;
    use crate::backend::cuda::nvrtc;

    #[test]
    #[ignore = "a measurement of NVRTC compile time; needs libnvrtc"]
    fn nvrtc_time_of_compiled_chains() {
        if !nvrtc::available() {
            println!("no nvrtc");
            return;
        }
        for n in [100usize, 1000] {
            for grad in [false, true] {
                let chain = move |x: &Array| {
                    let mut x = x.clone();
                    for _ in 0..n {
                        x = x.sin() * 1.01 + 0.1;
                    }
                    x.sum_all()
                };
                let g = crate::grad(move |x: &[Array]| chain(&x[0]));
                let f = crate::compile(move |x: &[Array]| if grad { g(x).unwrap() } else { vec![chain(&x[0])] });
                let x = Array::from_slice(&[0.5f32; 16], &[16]);
                let outs = f(&[x]).unwrap();
                let mut stack: Vec<Array> = outs.clone();
                let mut seen = std::collections::HashSet::new();
                let mut total = 0.0;
                let mut groups = 0;
                while let Some(a) = stack.pop() {
                    if !seen.insert(a.node_id()) {
                        continue;
                    }
                    if let Some(Op::Fused(group)) = a.node.primitive().map(|p| p.op()) {
                        let dtypes: Vec<DType> = a.node.inputs().iter().map(|x| x.dtype()).collect();
                        let src = source(group, &dtypes, "ct_fused_t");
                        let t = std::time::Instant::now();
                        nvrtc::check_compiles(&src, "ct_fused_t", (9, 0)).unwrap();
                        let dt = t.elapsed().as_secs_f64();
                        total += dt;
                        groups += 1;
                        println!(
                            "n={n} grad={grad}: group of {} steps, {} inputs, {} exports: {:.2} s",
                            group.steps().len(),
                            dtypes.len(),
                            group.exports().len(),
                            dt
                        );
                    }
                    stack.extend(a.node.inputs().iter().cloned());
                }
                println!("n={n} grad={grad}: {groups} groups, {total:.1} s of NVRTC");
            }
        }
    }
}
