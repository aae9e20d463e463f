//! CPU kernel of [`Fused`] groups (see `crate::primitives::fused`): the output is cut into tiles
//! of at most [`TILE`] elements, and each tile runs the group's steps one after the other
//! through the same kernels as the separate nodes (so results are bit-identical to them), on
//! tile-sized buffers that stay in cache. An intermediate dies, or gives its buffer to the next
//! step, as soon as its last reader ran. Tiles run in parallel for large outputs.
//!
//! The slice path: a group of `f32` or `f64` unary and arithmetic binary steps, on a tile where
//! every input is one element or dense over the tile, runs each step as one loop over
//! tile-sized scratch slices with the eager kernels' element functions (`float_unary_slice`,
//! `float_binary_slice`, the same tables as the separate kernels, so the same bits): no views,
//! operands or buffers per step. Other groups and tiles take the general path.
use super::binary::{binary_run, float_binary_slice, select_kernel, Side};
use super::unary::{cast_data, float_unary_slice, unary_run};
use super::CpuKernel;
use crate::backend::cpu::buffer::{try_filled, try_to_vec, try_with_capacity, BufferElement};
use crate::backend::cpu::elementwise::{Operand, PARALLEL_THRESHOLD};
use crate::backend::cpu::math::Float;
use crate::backend::cpu::Data;
use crate::primitive::{Op, Spec};
use crate::primitives::fused::{Fused, FusedArg, StepOp};
use crate::shape::Shape;
use crate::{Array, DType, Error, Result};
use rayon::prelude::*;
use smallvec::SmallVec;

/// Most elements of one tile: a few tile-sized intermediates fit in the L2 cache.
const TILE: usize = 4096;

/// Largest scratch (in elements) a thread keeps between tiles of the slice path: 64 tile-sized
/// slots of `f64`, 2 MiB.
const KEPT_SCRATCH: usize = 64 * TILE;

/// Per-thread scratch of the slice path, reused from tile to tile: a small group on a 2-core
/// machine used to spend a few per cent of its time allocating and zero-filling its slots.
trait SliceScratch: Sized + BufferElement + Default {
    /// Runs `f` on this thread's kept scratch.
    fn with_kept<R>(f: impl FnOnce(&mut Vec<Self>) -> R) -> R;

    /// A scratch of `len` elements of arbitrary (initialised) values: this thread's kept one
    /// when it is not in use (a tile inside a tile, through rayon's work stealing, gets its own).
    fn take_scratch(len: usize) -> Result<Vec<Self>> {
        let v = Self::with_kept(std::mem::take);
        if v.len() >= len {
            return Ok(v);
        }
        drop(v);
        try_filled(Self::default(), len)
    }

    /// Hands `v` back to this thread for the next tile, unless it is larger than
    /// [`KEPT_SCRATCH`] (then it is freed).
    fn give_back_scratch(v: Vec<Self>) {
        if v.len() <= KEPT_SCRATCH {
            Self::with_kept(|kept| {
                if kept.len() < v.len() {
                    *kept = v;
                }
            });
        }
    }
}

macro_rules! slice_scratch {
    ($($t:ty),*) => {$(
        impl SliceScratch for $t {
            fn with_kept<R>(f: impl FnOnce(&mut Vec<Self>) -> R) -> R {
                thread_local!(static KEPT: std::cell::RefCell<Vec<$t>> = const { std::cell::RefCell::new(Vec::new()) });
                KEPT.with(|k| f(&mut k.borrow_mut()))
            }
        }
    )*};
}
slice_scratch!(f32, f64);

/// How the output of a fused group is cut into tiles: every tile fixes the axes before `axis`,
/// takes up to `run` indices of `axis` and all of the axes after it, so it is one contiguous
/// block of the row-major output.
struct Tiling<'a> {
    shape: &'a [usize],
    axis: usize,
    run: usize,
    /// Elements per index of `axis` (the product of the later extents).
    inner: usize,
    /// Tiles per fixed index of the earlier axes.
    per_outer: usize,
    count: usize,
}

/// One tile: its first element in the output, its shape, and its position per axis.
struct Tile {
    start: usize,
    shape: Shape,
    /// Index of the first element along each axis.
    first: SmallVec<[usize; 6]>,
}

impl<'a> Tiling<'a> {
    fn new(shape: &'a [usize]) -> Tiling<'a> {
        let n = shape.len();
        let mut axis = n;
        let mut inner = 1usize;
        // the smallest axis whose later extents together hold at most TILE elements
        while axis > 0 && inner.saturating_mul(shape[axis - 1]) <= TILE {
            axis -= 1;
            inner *= shape[axis];
        }
        if axis == n {
            // every trailing block is too big or the array is 0-d: tile the last axis
            return if n == 0 {
                Tiling { shape, axis: 0, run: 1, inner: 1, per_outer: 1, count: 1 }
            } else {
                let run = TILE;
                let per_outer = shape[n - 1].div_ceil(run);
                let outer: usize = shape[..n - 1].iter().product();
                Tiling { shape, axis: n - 1, run, inner: 1, per_outer, count: outer * per_outer }
            };
        }
        if axis == 0 {
            // the whole array is one tile
            return Tiling { shape, axis: 0, run: shape.first().copied().unwrap_or(1), inner, per_outer: 1, count: 1 };
        }
        // `inner` elements per index of `axis - 1` fit; take as many indices of it as fit
        let axis = axis - 1;
        let run = (TILE / inner.max(1)).max(1);
        let per_outer = shape[axis].div_ceil(run);
        let outer: usize = shape[..axis].iter().product();
        Tiling { shape, axis, run, inner, per_outer, count: outer * per_outer }
    }

    fn tile(&self, t: usize) -> Tile {
        let n = self.shape.len();
        if n == 0 {
            return Tile { start: 0, shape: Shape::new(), first: SmallVec::new() };
        }
        let (mut outer, r) = (t / self.per_outer, t % self.per_outer);
        let mut first: SmallVec<[usize; 6]> = smallvec::smallvec![0; n];
        for j in (0..self.axis).rev() {
            first[j] = outer % self.shape[j];
            outer /= self.shape[j];
        }
        first[self.axis] = r * self.run;
        let len = self.run.min(self.shape[self.axis] - first[self.axis]);
        let mut shape: Shape = self.shape.iter().copied().collect();
        for s in shape.iter_mut().take(self.axis) {
            *s = 1;
        }
        shape[self.axis] = len;
        let mut start = 0usize;
        for j in 0..=self.axis {
            start = start * self.shape[j] + first[j];
        }
        start *= self.inner;
        Tile { start, shape, first }
    }
}

/// The part of input `data` (of `in_shape`, broadcast to the group's shape) that a tile reads,
/// as a view of the same buffer: its shape keeps the input's extents of 1 (the kernels
/// broadcast them), so it is the tile's shape only where the input is not broadcast.
fn tile_view(data: &Data, in_shape: &[usize], tile: &Tile) -> (Data, Shape) {
    if in_shape.iter().product::<usize>() == 1 {
        return (data.clone(), in_shape.iter().copied().collect());
    }
    let n = tile.shape.len();
    let lead = n - in_shape.len();
    let mut offset = data.offset as isize;
    let mut shape = Shape::with_capacity(n);
    let mut strides = crate::shape::Strides::with_capacity(n);
    for j in 0..n {
        if j < lead {
            shape.push(1);
            strides.push(0);
            continue;
        }
        let (extent, stride) = (in_shape[j - lead], data.strides[j - lead]);
        if extent == 1 {
            shape.push(1);
        } else {
            offset += tile.first[j] as isize * stride;
            shape.push(tile.shape[j]);
        }
        strides.push(stride);
    }
    (Data { buf: data.buf.clone(), strides, offset: offset as usize }, shape)
}

/// A value inside a tile: computed data with its shape and dtype.
struct Value {
    data: Data,
    shape: Shape,
    dtype: DType,
}

/// The dtype of the slice path for this group and these inputs (see the module docs): every
/// step a unary or binary op whose result and operands are all `f32`, or all `f64`.
fn slice_dtype(group: &Fused, inputs: &[(&Data, &[usize], DType)]) -> Option<DType> {
    let steps = group.steps();
    let dtype = steps.first()?.spec.dtype;
    if !matches!(dtype, DType::F32 | DType::F64) {
        return None;
    }
    let arg_dtype = |a: &FusedArg| match *a {
        FusedArg::Input(x) => inputs[x].2,
        FusedArg::Step(j) => steps[j].spec.dtype,
    };
    steps
        .iter()
        .zip(group.step_ops())
        .all(|(s, op)| {
            matches!(op, StepOp::Unary(_) | StepOp::Binary(_))
                && s.spec.dtype == dtype
                && s.args.iter().all(|a| arg_dtype(a) == dtype)
        })
        .then_some(dtype)
}

/// A value of the slice path: an input's elements for the tile, one value for all elements, or
/// a step's result in its scratch slot ([`Fused::slots`]).
#[derive(Clone, Copy)]
enum SliceValue<'a, T> {
    Input(&'a [T]),
    Scalar(T),
    Slot(usize),
}

/// A value of the slice path as an operand of [`float_binary_slice`].
fn side<'a, T: Copy>(v: SliceValue<'a, T>, slot: &'a [&mut [T]]) -> Side<'a, T> {
    match v {
        SliceValue::Input(s) => Side::Slice(s),
        SliceValue::Scalar(x) => Side::Scalar(x),
        SliceValue::Slot(k) => Side::Slice(&*slot[k]),
    }
}

/// One step of the slice path into `dst` (one element when every operand is a scalar); `None`
/// for an op the slice path does not run.
fn step_into<T: Float>(op: StepOp, a: Side<T>, b: Option<Side<T>>, dst: &mut [T]) -> Option<()> {
    match (op, a, b) {
        (StepOp::Unary(u), Side::Slice(x), None) => float_unary_slice(u, x, dst),
        (StepOp::Unary(u), Side::Scalar(x), None) => float_unary_slice(u, &[x], dst),
        (StepOp::Binary(op), x, Some(y)) => float_binary_slice(op, x, y, dst),
        _ => None,
    }
}

/// [`run_tile`] on the slice path (see the module docs), or `None` when an input is neither one
/// element nor dense over this tile (then the general path runs the tile). Step results live in
/// one scratch buffer of `len` elements per slot.
fn run_tile_slices<T: Float + SliceScratch>(
    group: &Fused,
    inputs: &[(&Data, &[usize], DType)],
    tile: &Tile,
    out: TileOut,
) -> Option<Result<Vec<Data>>> {
    let len = crate::shape::numel(&tile.shape);
    let mut ins: SmallVec<[SliceValue<T>; 4]> = SmallVec::with_capacity(inputs.len());
    for (x, &(data, shape, _)) in inputs.iter().enumerate() {
        if let TileOut::Buffers { donated_inputs, .. } = out {
            if let Some(p) = donated_inputs[x] {
                // SAFETY: `p` is the start of the donated buffer of input `x`, `numel` elements of
                // `T` (the group's shape, dense), now also an output; this tile reads only its
                // own range `tile.start .. + len`, before writing it, and no other tile touches
                // that range (see `SendPtr`). Only this range is borrowed, never the whole buffer.
                ins.push(SliceValue::Input(unsafe {
                    std::slice::from_raw_parts((p.0 as *const T).add(tile.start), len)
                }));
                continue;
            }
        }
        let buf = data.buf.as_slice::<T>();
        ins.push(if shape.iter().product::<usize>() == 1 {
            SliceValue::Scalar(buf[data.offset])
        } else {
            let (view, view_shape) = tile_view(data, shape, tile);
            if view_shape != tile.shape || !view.is_contiguous(&tile.shape) {
                return None;
            }
            SliceValue::Input(&buf[view.offset..view.offset + len])
        });
    }
    let (slots, n_slots) = group.slots();
    let mut scratch = match T::take_scratch(len * n_slots) {
        Ok(v) => v,
        Err(e) => return Some(Err(e)),
    };
    let result = run_steps_on_slices(group, &ins, tile, out, len, slots, n_slots, &mut scratch[..len * n_slots]);
    T::give_back_scratch(scratch);
    result
}

/// The steps and exports of [`run_tile_slices`] once its inputs are slices, with the slots in
/// `scratch` (`len * n_slots` elements of any value: every slot element is written before it is
/// read). `None` where a step has no slice kernel (the caller then takes the general path).
#[allow(clippy::too_many_arguments)]
fn run_steps_on_slices<T: Float + SliceScratch>(
    group: &Fused,
    ins: &[SliceValue<T>],
    tile: &Tile,
    out: TileOut,
    len: usize,
    slots: &[usize],
    n_slots: usize,
    scratch: &mut [T],
) -> Option<Result<Vec<Data>>> {
    let mut slot: Vec<&mut [T]> = scratch.chunks_mut(len.max(1)).collect();
    slot.resize_with(n_slots, Default::default); // (len 0: empty slots)
    let mut values: Vec<SliceValue<T>> = Vec::with_capacity(group.steps().len());
    for (i, step) in group.steps().iter().enumerate() {
        let value = |a: &FusedArg| match *a {
            FusedArg::Input(x) => ins[x],
            FusedArg::Step(j) => values[j],
        };
        let (a, b) = (value(&step.args[0]), step.args.get(1).map(value));
        let scalar = |v: &SliceValue<T>| matches!(v, SliceValue::Scalar(_));
        let op = group.step_ops()[i];
        if scalar(&a) && b.as_ref().is_none_or(scalar) {
            let mut one = [T::ZERO];
            step_into(op, side(a, &slot), b.map(|b| side(b, &slot)), &mut one)?;
            values.push(SliceValue::Scalar(one[0]));
        } else {
            // the result's slot is taken out while the operands (never in it) are read
            let dst = std::mem::take(&mut slot[slots[i]]);
            step_into(op, side(a, &slot), b.map(|b| side(b, &slot)), dst)?;
            slot[slots[i]] = dst;
            values.push(SliceValue::Slot(slots[i]));
        }
    }
    let value = |e: usize| match values[e] {
        SliceValue::Slot(k) => Ok(&*slot[k]),
        SliceValue::Scalar(x) => Err(x),
        SliceValue::Input(_) => unreachable!("a step's value is a scalar or in a slot"),
    };
    if let TileOut::Buffers { outs, .. } = out {
        for (&e, p) in group.exports().iter().zip(outs) {
            // SAFETY: `p` is the start of an output buffer of `T` (every step of the slice path
            // has dtype `T`, exports included) with room for the elements of this tile's range
            // `tile.start .. tile.start + len`, which no other tile writes or reads (see
            // `SendPtr`); the source is this tile's scratch (or one value), never the output.
            unsafe {
                let dst = (p.0 as *mut T).add(tile.start);
                match value(e) {
                    Ok(src) => std::ptr::copy_nonoverlapping(src.as_ptr(), dst, len),
                    Err(x) => (0..len).for_each(|i| dst.add(i).write(x)),
                }
            }
        }
        return Some(Ok(Vec::new()));
    }
    let export = |e: usize| -> Result<Data> {
        let v = match value(e) {
            Ok(src) => try_to_vec(src)?,
            Err(x) => try_filled(x, len)?,
        };
        Ok(Data::from_vec(v, &tile.shape))
    };
    Some(group.exports().iter().map(|&e| export(e)).collect())
}

/// Where [`run_tile`] leaves a tile's exports: returned as data, or written into the output
/// buffers at the tile's range (then it returns no data). `donated_inputs[x]` is the buffer of
/// input `x` when an output took it: the slice path then reads the tile's range through it.
#[derive(Clone, Copy)]
enum TileOut<'a> {
    Returned,
    Buffers { outs: &'a [SendPtr], donated_inputs: &'a [Option<SendPtr>] },
}

/// Runs the group's steps on one tile; returns the exports' data (dense, the tile's shape), or
/// writes them into the output buffers (`out`). `last_use[j]` is the last step that reads step
/// `j` (`usize::MAX` for the exports, kept to the end); `slice` is the group's [`slice_dtype`].
/// Every read of a tile's inputs happens before its exports are written, so an output buffer may
/// be an input's (donated) buffer.
fn run_tile(
    group: &Fused,
    inputs: &[(&Data, &[usize], DType)],
    last_use: &[usize],
    tile: &Tile,
    slice: Option<DType>,
    out: TileOut,
) -> Result<Vec<Data>> {
    let fast = match slice {
        Some(DType::F32) => run_tile_slices::<f32>(group, inputs, tile, out),
        Some(DType::F64) => run_tile_slices::<f64>(group, inputs, tile, out),
        _ => None,
    };
    if let Some(r) = fast {
        return r;
    }
    let TileOut::Buffers { outs, donated_inputs } = out else {
        return run_tile_steps(group, inputs, last_use, tile);
    };
    if donated_inputs.iter().any(Option::is_some) {
        // `eval_owned` donates only to groups the slice path runs whole (`runs_on_slices`)
        return Err(Error::Eval("fused: a group with a donated input left the slice path".into()));
    }
    let datas = run_tile_steps(group, inputs, last_use, tile)?;
    for ((d, &e), &p) in datas.iter().zip(group.exports()).zip(outs) {
        // SAFETY: `p` is the start of the output buffer of export `e`, of its dtype (the `T`
        // dispatched here), with room for this tile's range `tile.start .. + numel(tile.shape)`,
        // which no other tile touches (see `SendPtr`).
        crate::dispatch_dtype!(group.steps()[e].spec.dtype, T => unsafe { write_tile::<T>(p.0, tile.start, d, &tile.shape) });
    }
    Ok(Vec::new())
}

/// The general path of [`run_tile`]: each step through the separate nodes' kernels, on views.
fn run_tile_steps(
    group: &Fused,
    inputs: &[(&Data, &[usize], DType)],
    last_use: &[usize],
    tile: &Tile,
) -> Result<Vec<Data>> {
    let steps = group.steps();
    let views: Vec<(Data, Shape)> = inputs.iter().map(|(d, s, _)| tile_view(d, s, tile)).collect();
    let mut values: Vec<Option<Value>> = (0..steps.len()).map(|_| None).collect();
    for (i, step) in steps.iter().enumerate() {
        // a step's result is handed over at its last use (so its buffer may take the result),
        // everything else is read as a view
        let mut owned: SmallVec<[Option<Value>; 3]> = SmallVec::new();
        for arg in &step.args {
            let read_once_here = step.args.iter().filter(|a| *a == arg).count() == 1;
            owned.push(match *arg {
                FusedArg::Step(j) if last_use[j] == i && read_once_here => values[j].take(),
                _ => None,
            });
        }
        let out = Spec { shape: tile.shape.clone(), dtype: step.spec.dtype };
        let data = {
            let mut operands: SmallVec<[(Operand, Shape, DType); 3]> = SmallVec::new();
            for (arg, mine) in step.args.iter().zip(owned) {
                operands.push(match (*arg, mine) {
                    (_, Some(v)) => (Operand::Owned(v.data), v.shape, v.dtype),
                    (FusedArg::Input(x), None) => (Operand::View(&views[x].0), views[x].1.clone(), inputs[x].2),
                    (FusedArg::Step(j), None) => {
                        let v = values[j].as_ref().expect("a step's operand is computed first");
                        (Operand::View(&v.data), v.shape.clone(), v.dtype)
                    }
                });
            }
            let mut it = operands.into_iter();
            match step.prim.op() {
                Op::Unary(u) => {
                    let (x, shape, dtype) = it.next().expect("one operand");
                    unary_run(u, x, &shape, dtype, std::slice::from_ref(&out))?
                }
                Op::Cast(to) => {
                    let (x, shape, dtype) = it.next().expect("one operand");
                    cast_data(x.data(), &shape, dtype, to)?
                }
                Op::Binary(b) => {
                    let (a, sa, dtype) = it.next().expect("two operands");
                    let (c, sc, _) = it.next().expect("two operands");
                    binary_run(b, (a, &sa), (c, &sc), dtype, &out.shape)?
                }
                Op::Select => {
                    let (cond, scond, _) = it.next().expect("three operands");
                    let (a, sa, dtype) = it.next().expect("three operands");
                    let (b, sb, _) = it.next().expect("three operands");
                    select_kernel((cond.data(), &scond), (a, &sa), (b, &sb), dtype, &out.shape)?
                }
                other => return Err(Error::Eval(format!("fused: {other:?} is not an element-wise op"))),
            }
        };
        values[i] = Some(Value { data, shape: out.shape, dtype: out.dtype });
        // results nobody reads any more (not exported) are freed now
        for arg in &step.args {
            if let FusedArg::Step(j) = *arg {
                if last_use[j] == i {
                    values[j] = None;
                }
            }
        }
    }
    Ok(group.exports().iter().map(|&e| values[e].as_ref().expect("exports are computed").data.clone()).collect())
}

/// A pointer to the first element of an output buffer that the tiles write, each its own range.
#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
// SAFETY: a `SendPtr` is only made in `eval_group`, from a buffer it owns alone (a new vector's
// allocation, or a donated input's buffer taken with `unique_slice_mut`), and is only written
// through by `run_tile`, each tile its own range `start .. start + numel(tile)`; distinct tiles
// have disjoint ranges, so threads sharing the pointer never touch the same element (a tile
// reads a donated input only in its own range, and before writing it). Nothing else reads the
// buffers, and they are not moved or dropped, until the tiles have ended.
unsafe impl Sync for SendPtr {}
// SAFETY: as for `Sync`: sending the pointer to another thread hands it nothing but the right to
// write its tiles' disjoint ranges of a buffer that outlives the loop.
unsafe impl Send for SendPtr {}

/// Copies a dense tile result into `out` (a buffer of `T`) at `start`.
///
/// # Safety
/// `out` must be the start of a buffer of `T` (so aligned for `T`) valid for writes of the
/// elements `start .. start + numel(shape)`, and no other thread may write or read that range
/// meanwhile. (`data` must hold `T`s of `shape`; a mismatch panics, it is not unsafe.)
unsafe fn write_tile<T: BufferElement>(out: *mut u8, start: usize, data: &Data, shape: &[usize]) {
    let src = data.to_contiguous::<T>(shape);
    // SAFETY: `to_contiguous` returns exactly `numel(shape)` elements, so the destination is the
    // range `start .. start + numel(shape)` the caller promised writable and unshared. The source
    // may be a view of that very range (a step that returned a donated input's view unchanged),
    // so the copy allows overlap.
    unsafe {
        let dst = (out as *mut T).add(start);
        if !std::ptr::eq(src.as_ptr(), dst) {
            std::ptr::copy(src.as_ptr(), dst, src.len());
        }
    }
}

/// An output buffer of [`eval_group`]: its data (a new vector is empty until every tile has
/// written its range) and where the tiles write.
struct OutBuf {
    data: Data,
    ptr: SendPtr,
    /// Elements to mark initialised once every tile has run (a new buffer), else 0.
    fresh: usize,
}

impl OutBuf {
    /// A new buffer of `n` elements of `dtype`, not yet initialised.
    fn new(dtype: DType, n: usize, shape: &[usize]) -> Result<OutBuf> {
        crate::dispatch_dtype!(dtype, T => {
            let mut v = try_with_capacity::<T>(n)?;
            let ptr = SendPtr(v.as_mut_ptr().cast::<u8>());
            Ok(OutBuf { data: Data::from_vec(v, shape), ptr, fresh: n })
        })
    }

    /// A donated input's buffer (reusable: dense over `shape`, its only owner; see
    /// `Array::take_unique_data`).
    fn donated(mut data: Data, shape: &[usize]) -> OutBuf {
        let ptr = crate::dispatch_dtype!(data.buf.dtype(), T => data
            .unique_slice_mut::<T>(shape)
            .expect("a donated buffer is dense and unique")
            .as_mut_ptr()
            .cast::<u8>());
        OutBuf { data, ptr: SendPtr(ptr), fresh: 0 }
    }

    /// The data, once every element has been written.
    ///
    /// # Safety
    /// Every element `0..fresh` of a new buffer must have been written through `ptr`.
    unsafe fn finish(mut self) -> Data {
        if self.fresh > 0 {
            let buf = std::sync::Arc::get_mut(&mut self.data.buf).expect("a new buffer has one owner");
            crate::dispatch_dtype!(buf.dtype(), T => {
                let v = T::vec_mut(buf).expect("the buffer holds its dtype");
                // SAFETY: the capacity is `fresh` (`try_with_capacity`), and the caller promises
                // all of those elements were written; elements are plain `Copy` values.
                unsafe { v.set_len(self.fresh) }
            });
        }
        self.data
    }
}

/// Evaluates the group; `donated[k]` is an input's buffer that output `k` may overwrite (with the
/// input index), `None` for a new buffer.
fn eval_group(
    group: &Fused,
    inputs: &[Array],
    donated: Vec<Option<(usize, Data)>>,
    outputs: &[Spec],
) -> Result<Vec<Data>> {
    let shape: &[usize] = &outputs[0].shape;
    let last_use = group.last_use();
    let tiling = Tiling::new(shape);
    let n: usize = shape.iter().product();
    if tiling.count == 1 && donated.iter().all(Option::is_none) {
        let ins: Vec<(&Data, &[usize], DType)> =
            inputs.iter().map(|x| Ok((x.computed_data()?, x.shape(), x.dtype()))).collect::<Result<_>>()?;
        let slice = slice_dtype(group, &ins);
        let datas = run_tile(group, &ins, last_use, &tiling.tile(0), slice, TileOut::Returned)?;
        // the tile is the whole output: its shape differs only in leading 1s
        return Ok(datas.into_iter().map(|d| crate::backend::cpu::elementwise::dense(d, shape)).collect());
    }
    let mut outs: Vec<OutBuf> = Vec::with_capacity(outputs.len());
    let mut read_from: SmallVec<[Option<usize>; 4]> = smallvec::smallvec![None; inputs.len()];
    for (k, (o, d)) in outputs.iter().zip(donated).enumerate() {
        outs.push(match d {
            Some((x, data)) => {
                read_from[x] = Some(k);
                OutBuf::donated(data, shape)
            }
            None => OutBuf::new(o.dtype, n, shape)?,
        });
    }
    // a donated input is read from its buffer, now held by its output
    let ins: Vec<(&Data, &[usize], DType)> = inputs
        .iter()
        .zip(&read_from)
        .map(|(x, k)| Ok((k.map_or_else(|| x.computed_data(), |k| Ok(&outs[k].data))?, x.shape(), x.dtype())))
        .collect::<Result<_>>()?;
    let slice = slice_dtype(group, &ins);
    let ptrs: Vec<SendPtr> = outs.iter().map(|o| o.ptr).collect();
    let donated_inputs: SmallVec<[Option<SendPtr>; 4]> = read_from.iter().map(|k| k.map(|k| outs[k].ptr)).collect();
    let out = TileOut::Buffers { outs: &ptrs, donated_inputs: &donated_inputs };
    let run = |t: usize| -> Result<()> { run_tile(group, &ins, last_use, &tiling.tile(t), slice, out).map(drop) };
    if n >= PARALLEL_THRESHOLD {
        (0..tiling.count).into_par_iter().try_for_each(run)?;
    } else {
        (0..tiling.count).try_for_each(run)?;
    }
    drop(ins);
    // SAFETY: the tiles cover `0..n` (`Tiling`: every index of the earlier axes, every run of
    // `axis`), and each ran without error, so every element of every output was written.
    Ok(outs.into_iter().map(|o| unsafe { o.finish() }).collect())
}

/// Whether every tile of `group` over `inputs` takes the slice path from start to end: its
/// steps are all ones the slice path runs (probed on empty slices), in one float dtype, and every
/// input is one element or dense with the group's whole `shape`.
fn runs_on_slices(group: &Fused, inputs: &[Array], shape: &[usize]) -> Result<bool> {
    let ins: Vec<(&Data, &[usize], DType)> =
        inputs.iter().map(|x| Ok((x.computed_data()?, x.shape(), x.dtype()))).collect::<Result<_>>()?;
    let dense = ins.iter().all(|(d, s, _)| crate::shape::numel(s) == 1 || (*s == shape && d.is_contiguous(s)));
    fn steps_run<T: Float>(group: &Fused) -> bool {
        group.step_ops().iter().all(|op| match *op {
            StepOp::Unary(u) => float_unary_slice::<T>(u, &[], &mut []).is_some(),
            StepOp::Binary(b) => float_binary_slice::<T>(b, Side::Slice(&[]), Side::Slice(&[]), &mut []).is_some(),
            StepOp::Other => false,
        })
    }
    Ok(dense
        && match slice_dtype(group, &ins) {
            Some(DType::F32) => steps_run::<f32>(group),
            Some(DType::F64) => steps_run::<f64>(group),
            _ => false,
        })
}

impl CpuKernel for Fused {
    fn eval(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>> {
        eval_group(self, inputs, vec![None; outputs.len()], outputs)
    }

    /// Like the separate element-wise kernels, an output may take the buffer of an input that
    /// nobody else can observe, of its dtype and of the group's whole shape (not broadcast), when
    /// the slice path runs the whole group (each tile then reads its range of that input
    /// before writing it, and borrows no more of the buffer than that range).
    fn eval_owned(&self, mut inputs: Vec<Array>, outputs: &[Spec]) -> Result<Vec<Data>> {
        let shape: &[usize] = &outputs[0].shape;
        let n = crate::shape::numel(shape);
        let mut donated: Vec<Option<(usize, Data)>> = vec![None; outputs.len()];
        if Tiling::new(shape).count > 1 && runs_on_slices(self, &inputs, shape)? {
            let mut taken: SmallVec<[bool; 4]> = smallvec::smallvec![false; inputs.len()];
            for (k, o) in outputs.iter().enumerate() {
                for (x, input) in inputs.iter_mut().enumerate() {
                    if taken[x] || input.shape() != shape {
                        continue;
                    }
                    if let Some(data) = input.take_unique_data(o.dtype, n) {
                        taken[x] = true;
                        donated[k] = Some((x, data));
                        break;
                    }
                }
            }
        }
        eval_group(self, &inputs, donated, outputs)
    }
}

/// Each member of the batch as the group it is (a batch runs as one kernel only on CUDA).
impl CpuKernel for crate::primitives::fused::FusedBatch {
    fn eval(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>> {
        let mut out = Vec::with_capacity(outputs.len());
        for m in self.members() {
            out.extend(m.group.eval(&inputs[m.inputs.clone()], &outputs[m.outputs.clone()])?);
        }
        Ok(out)
    }

    /// Each member with its own inputs handed over (so its outputs may take their buffers).
    fn eval_owned(&self, inputs: Vec<Array>, outputs: &[Spec]) -> Result<Vec<Data>> {
        let mut out = Vec::with_capacity(outputs.len());
        let mut inputs = inputs.into_iter();
        for m in self.members() {
            let mine: Vec<Array> = inputs.by_ref().take(m.inputs.len()).collect();
            out.extend(m.group.eval_owned(mine, &outputs[m.outputs.clone()])?);
        }
        Ok(out)
    }
}
