//! [`compile`]: trace a function once per input signature, simplify the traced graph, fuse its
//! element-wise work, and replay it on later calls.
//!
//! # How it works
//!
//! The first call with a given signature (the shape, dtype and device of every input) runs the
//! function on data-less stand-ins, so it records the graph it builds instead of computing
//! anything, and turns that graph into a [`Program`]: a list of steps, each a primitive with
//! the places its inputs come from. Arrays the function builds without reading its inputs
//! (captured weights, constants such as the `1.01` of `x * 1.01`, whole subgraphs of them) are
//! the program's constants: they are computed once, on the first call that needs them, and kept.
//! Then, in order:
//!
//! 1. **No-ops go**: reshapes and broadcasts to the same shape, casts to the same dtype,
//!    transposes that keep the axes in place.
//! 2. **Common subexpressions merge**: two steps of the same primitive with equal parameters
//!    on the same inputs become one.
//! 3. **Dead steps go**: what no output needs.
//! 4. **Element-wise work fuses**: runs of unary, binary, cast and select steps whose results
//!    have one shape and one device become one [`Fused`] node. The CPU evaluates it tile by
//!    tile with the same kernels as the separate nodes; CUDA runs it as one generated kernel
//!    (cached by the group's structure) that computes each step with the same snippet and
//!    rounding as the step's own kernel. Either way results are bit-identical to uncompiled
//!    ones. A group is placed where its first step was, so every value it reads from outside
//!    must be computed before that step; steps that would break this start a new group.
//! 5. **Final groups batch**: the groups and element-wise steps that only the outputs read (an
//!    optimizer's updates of parameters of several shapes), each reading inputs of its own shape
//!    or single elements, become one [`FusedBatch`] node at the end of the program. CUDA runs it
//!    as one kernel whose threads are split among the groups; the CPU runs the groups one after
//!    another. Each group computes what it computed alone.
//!
//! A call replays the program: one node per step, built without shape inference, broadcasting
//! checks or dtype promotion (all done at trace time), on the caller's arrays. The replayed
//! nodes are ordinary graph nodes with the traced primitives' rules, so `grad(compile(f))`,
//! `vmap(compile(f))`, `compile(grad(f))`, custom functions, `depends` and `checkpoint` inside
//! `f` all work as uncompiled; a fused node's rules rebuild its steps and transform them.
//!
//! # What a compiled function may not do
//!
//! It may not read the values of arrays that depend on its inputs (`item`, `to_vec`, `eval`
//! of such an array): at trace time they do not exist, and the call returns an `Err` saying so.
//! Rust code in `f` (prints, counters, branches on shapes) runs only when tracing.
//!
//! # CUDA graphs
//!
//! On a GPU each launch costs the host several microseconds, so a replay of small kernels waits
//! on the host. A call whose program runs on one CUDA device, and whose arguments no transform
//! is tracing, becomes one lazy node; evaluating it replays the program step by step the first
//! time, captures the replay as a CUDA graph the second time (`backend::cuda::capture`), and
//! from then on copies the arguments into the graph's input buffers, launches the graph (one
//! driver call) and copies its outputs out. The graph runs the kernels the step-by-step replay
//! runs, on the same values, so results are identical. An argument that is a view (a
//! transpose, a broadcast) is copied dense first. A call the graph cannot take (indices not
//! known to be in range) replays step by step; a program whose capture fails three times (it reads values back to the host, say)
//! stops trying. `COTANGENT_CUDA_GRAPHS=0` turns capture off. Transforms of such a call
//! (`grad` of a compiled function called outside it) see the lazy node's rules, which replay
//! the program step by step.
use crate::array::{Origin, TraceGuard, TraceToken};
use crate::backend::Device;
use crate::graph::{topo_order, IdMap};
use crate::primitive::{Op, Primitive, Spec};
use crate::primitives::fused::{Fused, FusedArg, FusedBatch, FusedStep};
use crate::transforms::IntoOutputs;
use crate::{Array, DType, Error, Result, Shape};
use smallvec::SmallVec;
use std::sync::{Arc, RwLock};

/// The most steps in one fused group on a GPU (CPU groups are not limited). CUDA compiles one
/// kernel per group, and NVRTC's time grows steeply with the kernel: on an H100, `overhead --n
/// 1000 --modes fwd_compiled` (a 3000-step chain) did not finish within five minutes as one group
/// nor with groups of 1024 steps, and finished with groups of 256 (0.15 µs per op once
/// compiled). A longer chain becomes several groups, each passing its values to the next; no
/// value changes. A cut group may export many values (a gradient's forward group exports what its
/// backward steps read): the kernel takes its pointers as launch parameters, up to 32,000 bytes
/// (see `backend::cuda::fused`), so such groups still run as one kernel.
const MAX_GPU_GROUP_STEPS: usize = 256;

/// The most pointers and group ends one [`FusedBatch`] takes (its kernel's parameters: 8 bytes
/// each, well inside the 32,000 bytes `backend::cuda::fused` allows).
const MAX_BATCH_POINTERS: usize = 3_000;

/// Compile `f`: the returned function traces `f` on its first call for each input signature
/// (shapes, dtypes, devices), simplifies and fuses the traced graph, caches it, and replays it
/// on later calls with that signature. A new signature traces again.
///
/// The compiled function computes what `f` computes — on the CPU bit for bit — and composes
/// with every transform (`grad(compile(f))`, `compile(grad(f))`, `vmap(compile(f))`). It is
/// `Send + Sync + Clone + 'static`; clones share one cache, and several threads may call it at
/// once (two first calls with one signature may both trace; one program is kept).
///
/// `f` must not read values computed from its inputs (`item`, `to_vec`, `eval`): the call
/// returns an `Err`. Its Rust side effects happen only when it is traced.
///
/// What the compiler does to the traced graph: no-op reshapes, broadcasts, casts and
/// transposes go; common subexpressions merge; steps no output needs go; arrays that do not
/// depend on the inputs become constants, computed once; and on the CPU, runs of element-wise
/// steps of one shape become one fused node, evaluated tile by tile with the uncompiled
/// kernels (so results are bit-identical). On CUDA a group is one generated kernel, the groups
/// that only the outputs read (an optimizer's updates of parameters of several shapes) share
/// one kernel, and from the second call on a call's steps run as one captured CUDA graph (see
/// the module docs).
///
/// ```
/// use cotangent::{self as ct, Array};
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
///
/// let traces = Arc::new(AtomicUsize::new(0));
/// let counter = traces.clone();
/// let f = ct::compile(move |x: &[Array]| {
///     counter.fetch_add(1, Ordering::Relaxed);
///     (x[0].sin() * 1.01 + 0.1).sum_all()
/// });
/// let x = Array::from_slice(&[0.5f32, 1.0, 1.5], &[3]);
/// let y = f(&[x.clone()])?;
/// let eager = (x.sin() * 1.01 + 0.1).sum_all();
/// assert_eq!(y[0].item::<f32>()?, eager.item::<f32>()?); // bit-identical on the CPU
/// f(&[Array::from_slice(&[2.0f32, 3.0, 4.0], &[3])])?; // same signature: replayed
/// assert_eq!(traces.load(Ordering::Relaxed), 1);
/// f(&[Array::from_slice(&[2.0f32; 4], &[4])])?; // new shape: traced again
/// assert_eq!(traces.load(Ordering::Relaxed), 2);
///
/// // it composes with the other transforms
/// let g = ct::grad(f.clone())(&[x.clone()])?;
/// let expected = (x.cos() * 1.01).to_vec::<f32>()?;
/// assert_eq!(g[0].to_vec::<f32>()?, expected);
/// # Ok::<(), ct::Error>(())
/// ```
pub fn compile<F, O>(f: F) -> impl Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + Clone + 'static
where
    F: Fn(&[Array]) -> O + Send + Sync + 'static,
    O: IntoOutputs,
{
    let compiled =
        Arc::new(Compiled { f: Box::new(move |xs: &[Array]| f(xs).into_outputs()), cache: RwLock::default() });
    move |args: &[Array]| compiled.call(args)
}

/// The shape, dtype and device of one input: what a trace depends on.
type Signature = SmallVec<[(Shape, DType, Device); 4]>;

type Body = Box<dyn Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync>;

/// A compiled function: the function and its programs, one per signature.
struct Compiled {
    f: Body,
    cache: RwLock<Vec<(Signature, Arc<Program>)>>,
}

impl Compiled {
    fn call(&self, args: &[Array]) -> Result<Vec<Array>> {
        let signature: Signature = args.iter().map(|a| (a.shape().into(), a.dtype(), a.device())).collect();
        let cached = {
            let cache = self.cache.read().unwrap_or_else(|e| e.into_inner());
            cache.iter().find(|(s, _)| *s == signature).map(|(_, p)| p.clone())
        };
        let program = match cached {
            Some(p) => p,
            None => {
                // traced without holding the lock: `f` is user code (it may call this function)
                let p = Arc::new(Program::trace(&self.f, &signature)?);
                let mut cache = self.cache.write().unwrap_or_else(|e| e.into_inner());
                match cache.iter().find(|(s, _)| *s == signature) {
                    Some((_, other)) => other.clone(),
                    None => {
                        cache.push((signature, p.clone()));
                        p
                    }
                }
            }
        };
        Ok(program.call(args))
    }
}

/// Where a step reads an input, or where an output comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Ref {
    /// The call's argument `i`.
    Input(usize),
    /// The program's constant `i`.
    Const(usize),
    /// Output `o` of step `s`.
    Step(usize, usize),
}

/// One node to build on replay.
#[derive(Clone)]
struct Step {
    prim: Arc<dyn Primitive>,
    inputs: SmallVec<[Ref; 3]>,
    specs: SmallVec<[Spec; 1]>,
    device: Device,
    origin: Option<Origin>,
}

thread_local! {
    /// How many `compile` traces the thread is inside.
    static TRACING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Marks the thread as tracing a compiled function while alive (see [`compile_tracing`]).
struct Tracing;

impl Tracing {
    fn enter() -> Tracing {
        TRACING.with(|t| t.set(t.get() + 1));
        Tracing
    }
}

impl Drop for Tracing {
    fn drop(&mut self) {
        TRACING.with(|t| t.set(t.get() - 1));
    }
}

/// Whether the calling thread is tracing a function for [`compile`]: rules then leave
/// element-wise chains to the compiled program's own fusion pass instead of fusing them
/// themselves (`primitives::fused::fuse_chain`).
pub(crate) fn compile_tracing() -> bool {
    TRACING.with(|t| t.get() > 0)
}

/// A traced function: steps in an order where every step reads only earlier ones.
struct Program {
    signature: Signature,
    steps: Vec<Step>,
    consts: Vec<Array>,
    outputs: Vec<Ref>,
    /// The program's CUDA graph, on a GPU (see the module docs).
    #[cfg(feature = "cuda")]
    graph: std::sync::Mutex<GraphState>,
    /// The name of a graph call's node: what computes each output (`compiled(fused[..], ..)`).
    #[cfg(feature = "cuda")]
    graph_name: std::sync::OnceLock<String>,
}

/// Where a program's CUDA graph stands.
#[cfg(feature = "cuda")]
#[derive(Default)]
struct GraphState {
    /// Calls that reached the graph path so far (the first replays step by step, which also
    /// compiles every kernel, so that no compilation happens inside a capture).
    calls: usize,
    /// Captures that failed; after [`MAX_CAPTURE_FAILURES`] the program stops trying.
    failures: usize,
    captured: Option<Arc<crate::backend::cuda::capture::CapturedGraph>>,
}

/// How often a program's capture may fail before its calls stop trying.
#[cfg(feature = "cuda")]
const MAX_CAPTURE_FAILURES: usize = 3;

impl Program {
    /// Runs `f` on stand-ins of `signature` and builds the simplified, fused program.
    fn trace(f: &Body, signature: &Signature) -> Result<Program> {
        let token = TraceToken::new();
        let guard = TraceGuard(token.clone());
        let _tracing = Tracing::enter();
        let stand_ins: Vec<Array> = signature
            .iter()
            .map(|(shape, dtype, device)| Array::placeholder_on(shape, *dtype, *device, &token))
            .collect();
        let outputs = f(&stand_ins)?;
        drop(guard);
        let mut program = Program::record(signature, &stand_ins, &outputs);
        program.simplify();
        program.fuse();
        program.batch_final_groups();
        Ok(program)
    }

    /// The program that builds `outputs` from `stand_ins`.
    fn record(signature: &Signature, stand_ins: &[Array], outputs: &[Array]) -> Program {
        let input_of: IdMap<usize, usize> = stand_ins.iter().enumerate().map(|(i, a)| (a.node_id(), i)).collect();
        let mut nodes = topo_order(outputs, |n| n.is_computed() || n.primitive().is_none());
        nodes.sort_by_key(|n| n.seq);
        // what each node became: an input, a step, or (not depending on any input) a constant
        let mut step_of: IdMap<usize, usize> = IdMap::default();
        let mut program = Program {
            signature: signature.clone(),
            steps: Vec::new(),
            consts: Vec::new(),
            outputs: Vec::new(),
            #[cfg(feature = "cuda")]
            graph: Default::default(),
            #[cfg(feature = "cuda")]
            graph_name: Default::default(),
        };
        let mut const_of: IdMap<(usize, usize), usize> = IdMap::default();
        for node in &nodes {
            let id = Arc::as_ptr(node) as *const u8 as usize;
            if input_of.contains_key(&id) || node.is_computed() {
                continue;
            }
            let Some(prim) = (match &node.kind {
                crate::array::NodeKind::Op(p) => Some(p.clone()),
                _ => None,
            }) else {
                continue;
            };
            let inputs = node.inputs();
            if !inputs.iter().any(|a| input_of.contains_key(&a.node_id()) || step_of.contains_key(&a.node_id())) {
                continue; // a constant: referenced as such by its consumers
            }
            let refs = inputs.iter().map(|a| program.reference(a, &input_of, &step_of, &mut const_of)).collect();
            step_of.insert(id, program.steps.len());
            program.steps.push(Step {
                prim,
                inputs: refs,
                specs: node.specs.clone(),
                device: node.device,
                origin: node.origin,
            });
        }
        program.outputs = outputs.iter().map(|a| program.reference(a, &input_of, &step_of, &mut const_of)).collect();
        program
    }

    /// How the program refers to `a`: an input, a step's output, or a constant (added).
    fn reference(
        &mut self,
        a: &Array,
        input_of: &IdMap<usize, usize>,
        step_of: &IdMap<usize, usize>,
        const_of: &mut IdMap<(usize, usize), usize>,
    ) -> Ref {
        let id = a.node_id();
        if let Some(&i) = input_of.get(&id) {
            return Ref::Input(i);
        }
        if let Some(&s) = step_of.get(&id) {
            return Ref::Step(s, a.index);
        }
        let k = *const_of.entry((id, a.index)).or_insert_with(|| {
            self.consts.push(a.clone());
            self.consts.len() - 1
        });
        Ref::Const(k)
    }

    fn spec(&self, r: Ref) -> Spec {
        match r {
            Ref::Input(i) => Spec { shape: self.signature[i].0.clone(), dtype: self.signature[i].1 },
            Ref::Const(k) => self.consts[k].spec().clone(),
            Ref::Step(s, o) => self.steps[s].specs[o].clone(),
        }
    }

    /// Removes no-ops, merges common subexpressions and drops dead steps.
    fn simplify(&mut self) {
        let mut alias: IdMap<(usize, usize), Ref> = IdMap::default();
        let mut seen: std::collections::HashMap<(&'static str, SmallVec<[Ref; 3]>), Vec<usize>> =
            std::collections::HashMap::new();
        let resolve = |alias: &IdMap<(usize, usize), Ref>, r: Ref| match r {
            Ref::Step(s, o) => alias.get(&(s, o)).copied().unwrap_or(r),
            r => r,
        };
        let mut keep = Vec::with_capacity(self.steps.len());
        for s in 0..self.steps.len() {
            let inputs: SmallVec<[Ref; 3]> = self.steps[s].inputs.iter().map(|&r| resolve(&alias, r)).collect();
            self.steps[s].inputs = inputs.clone();
            let step = &self.steps[s];
            if step.specs.len() == 1 && inputs.len() == 1 && self.is_no_op(step, inputs[0]) {
                alias.insert((s, 0), inputs[0]);
                keep.push(false);
                continue;
            }
            let key = (static_name(&*step.prim), inputs);
            let twins = seen.entry(key).or_default();
            let twin = twins.iter().copied().find(|&t| {
                let other = &self.steps[t];
                other.specs == step.specs
                    && other.device == step.device
                    && (Arc::ptr_eq(&other.prim, &step.prim) || other.prim.is_equivalent(&*step.prim))
            });
            match twin {
                Some(t) => {
                    for o in 0..step.specs.len() {
                        alias.insert((s, o), Ref::Step(t, o));
                    }
                    keep.push(false);
                }
                None => {
                    twins.push(s);
                    keep.push(true);
                }
            }
        }
        self.outputs = self.outputs.iter().map(|&r| resolve(&alias, r)).collect();
        // dead steps: neither an output nor read by a live step
        let mut live = vec![false; self.steps.len()];
        for r in &self.outputs {
            if let Ref::Step(s, _) = *r {
                live[s] = true;
            }
        }
        for s in (0..self.steps.len()).rev() {
            if live[s] && keep[s] {
                for r in &self.steps[s].inputs {
                    if let Ref::Step(t, _) = *r {
                        live[t] = true;
                    }
                }
            }
        }
        let keep: Vec<bool> = live.iter().zip(&keep).map(|(l, k)| *l && *k).collect();
        self.retain(&keep);
    }

    /// Whether `step`, reading `input`, returns it unchanged.
    fn is_no_op(&self, step: &Step, input: Ref) -> bool {
        let same = self.spec(input) == step.specs[0];
        same && match step.prim.op() {
            Op::Reshape(_) | Op::Broadcast(_) | Op::Cast(_) => true,
            Op::Transpose(t) => t.0.iter().enumerate().all(|(i, &a)| i == a),
            _ => false,
        }
    }

    /// Keeps the steps marked in `keep`, renumbering references.
    fn retain(&mut self, keep: &[bool]) {
        let mut new_index = vec![usize::MAX; self.steps.len()];
        let mut steps = Vec::with_capacity(keep.iter().filter(|k| **k).count());
        for (s, step) in std::mem::take(&mut self.steps).into_iter().enumerate() {
            if keep[s] {
                new_index[s] = steps.len();
                steps.push(step);
            }
        }
        let renumber = |r: &mut Ref| {
            if let Ref::Step(s, _) = r {
                debug_assert!(new_index[*s] != usize::MAX, "a kept reference to a removed step");
                *s = new_index[*s];
            }
        };
        for step in &mut steps {
            step.inputs.iter_mut().for_each(renumber);
        }
        self.outputs.iter_mut().for_each(renumber);
        self.steps = steps;
    }

    /// Fuses groups of element-wise steps (see the module docs), on a GPU at most
    /// [`MAX_GPU_GROUP_STEPS`] each.
    fn fuse(&mut self) {
        let n = self.steps.len();
        // which group each step joined; groups: (first step, shape, members)
        let mut group_of: Vec<Option<usize>> = vec![None; n];
        let mut groups: Vec<(usize, (Shape, Device), Vec<usize>)> = Vec::new();
        let mut last_of_shape: std::collections::HashMap<(Shape, Device), usize> = std::collections::HashMap::new();
        for s in 0..n {
            let step = &self.steps[s];
            if !self.is_fusable(step) {
                continue;
            }
            let shape = &(step.specs[0].shape.clone(), step.device);
            // candidate groups: those of its operands (latest first), then the last one of its shape
            let mut candidates: SmallVec<[usize; 4]> = step
                .inputs
                .iter()
                .filter_map(|r| match *r {
                    Ref::Step(t, _) => group_of[t],
                    _ => None,
                })
                .filter(|&g| groups[g].1 == *shape)
                .collect();
            candidates.sort_by_key(|&g| std::cmp::Reverse(groups[g].0));
            if let Some(&g) = last_of_shape.get(shape) {
                candidates.push(g);
            }
            let joins = candidates.into_iter().find(|&g| {
                (groups[g].1 .1 == Device::Cpu || groups[g].2.len() < MAX_GPU_GROUP_STEPS)
                    && step.inputs.iter().all(|r| match *r {
                        Ref::Step(t, _) => group_of[t] == Some(g) || t < groups[g].0,
                        _ => true,
                    })
            });
            let g = match joins {
                Some(g) => g,
                None => {
                    groups.push((s, shape.clone(), Vec::new()));
                    groups.len() - 1
                }
            };
            groups[g].2.push(s);
            group_of[s] = Some(g);
            last_of_shape.insert(shape.clone(), g);
        }
        if groups.iter().all(|g| g.2.len() < 2) {
            return;
        }
        // who reads each step outside its group
        let mut read_outside = vec![false; n];
        for (s, step) in self.steps.iter().enumerate() {
            for r in &step.inputs {
                if let Ref::Step(t, _) = *r {
                    let fused_together = group_of[t].is_some() && group_of[t] == group_of[s];
                    if !fused_together {
                        read_outside[t] = true;
                    }
                }
            }
        }
        for r in &self.outputs {
            if let Ref::Step(t, _) = *r {
                read_outside[t] = true;
            }
        }
        // rebuild: a group of two or more becomes one step where its first step was
        let old = std::mem::take(&mut self.steps);
        let mut new_ref: IdMap<(usize, usize), Ref> = IdMap::default();
        let map = |new_ref: &IdMap<(usize, usize), Ref>, r: Ref| match r {
            Ref::Step(s, o) => new_ref[&(s, o)],
            r => r,
        };
        for s in 0..n {
            let members = group_of[s].map(|g| &groups[g]).filter(|g| g.2.len() >= 2);
            match members {
                None => {
                    let mut step = old[s].clone();
                    step.inputs = step.inputs.iter().map(|&r| map(&new_ref, r)).collect();
                    for o in 0..step.specs.len() {
                        new_ref.insert((s, o), Ref::Step(self.steps.len(), o));
                    }
                    self.steps.push(step);
                }
                Some((first, (shape, _), members)) if *first == s => {
                    let mut inputs: SmallVec<[Ref; 3]> = SmallVec::new();
                    let mut local: IdMap<usize, usize> = IdMap::default();
                    let mut fused_steps = Vec::with_capacity(members.len());
                    let mut exports = Vec::new();
                    let mut specs: SmallVec<[Spec; 1]> = SmallVec::new();
                    for (i, &m) in members.iter().enumerate() {
                        let args = old[m]
                            .inputs
                            .iter()
                            .map(|&r| match r {
                                Ref::Step(t, 0) if local.contains_key(&t) => FusedArg::Step(local[&t]),
                                r => {
                                    let r = map(&new_ref, r);
                                    let at = inputs.iter().position(|x| *x == r).unwrap_or_else(|| {
                                        inputs.push(r);
                                        inputs.len() - 1
                                    });
                                    FusedArg::Input(at)
                                }
                            })
                            .collect();
                        local.insert(m, i);
                        fused_steps.push(FusedStep {
                            prim: old[m].prim.clone(),
                            args,
                            spec: old[m].specs[0].clone(),
                            origin: old[m].origin,
                        });
                        if read_outside[m] {
                            new_ref.insert((m, 0), Ref::Step(self.steps.len(), exports.len()));
                            exports.push(i);
                            specs.push(Spec { shape: shape.clone(), dtype: old[m].specs[0].dtype });
                        }
                    }
                    self.steps.push(Step {
                        prim: Arc::new(Fused::new(fused_steps, exports)),
                        inputs,
                        specs,
                        device: old[s].device,
                        origin: old[s].origin,
                    });
                }
                Some(_) => {} // built with its group's first step
            }
        }
        self.outputs = self.outputs.iter().map(|&r| map(&new_ref, r)).collect();
    }

    /// The element-wise steps and fused groups that no step reads (only the outputs do: an
    /// optimizer's updates of several parameters), whose every input has the step's shape or one
    /// element, become one [`FusedBatch`] at the end of the program: on CUDA one kernel for all
    /// of them instead of one per shape (see `backend::cuda::fused::batch`); elsewhere each group
    /// runs as before. At most [`MAX_BATCH_POINTERS`] pointers go into one batch.
    fn batch_final_groups(&mut self) {
        let n = self.steps.len();
        let mut read = vec![false; n];
        for step in &self.steps {
            for r in &step.inputs {
                if let Ref::Step(t, _) = *r {
                    read[t] = true;
                }
            }
        }
        let Some(device) = self.steps.last().map(|s| s.device) else { return };
        let batchable = |s: usize| {
            let step = &self.steps[s];
            let flat = step.inputs.iter().all(|&r| {
                let shape = self.spec(r).shape;
                shape == step.specs[0].shape || crate::shape::numel(&shape) == 1
            });
            let element_wise = matches!(step.prim.op(), Op::Fused(_)) || self.is_fusable(step);
            !read[s] && step.device == device && element_wise && flat && !step.inputs.is_empty()
        };
        let members: Vec<usize> = (0..n).filter(|&s| batchable(s)).collect();
        if members.len() < 2 {
            return;
        }
        // the other steps keep their order; the batches go last
        let mut new_index = vec![usize::MAX; n];
        let mut steps = Vec::with_capacity(n - members.len() + 1);
        let old = std::mem::take(&mut self.steps);
        let is_member: Vec<bool> = (0..n).map(|s| members.binary_search(&s).is_ok()).collect();
        for (s, step) in old.iter().enumerate() {
            if !is_member[s] {
                new_index[s] = steps.len();
                steps.push(step.clone());
            }
        }
        let renumber = |r: Ref| match r {
            Ref::Step(s, o) => Ref::Step(new_index[s], o),
            r => r,
        };
        for step in &mut steps {
            step.inputs = step.inputs.iter().map(|&r| renumber(r)).collect();
        }
        // where each member's outputs went: (batch step, first output)
        let mut moved: IdMap<usize, (usize, usize)> = IdMap::default();
        let mut chunk: Vec<usize> = Vec::new();
        let mut pointers = 0;
        let flush = |chunk: &mut Vec<usize>, steps: &mut Vec<Step>, moved: &mut IdMap<usize, (usize, usize)>| {
            if chunk.is_empty() {
                return;
            }
            let at = steps.len();
            let (mut groups, mut inputs, mut specs) = (Vec::new(), SmallVec::new(), SmallVec::new());
            for &s in chunk.iter() {
                let step = &old[s];
                let group = match step.prim.op() {
                    Op::Fused(g) => g.clone(),
                    _ => Fused::new(
                        vec![FusedStep {
                            prim: step.prim.clone(),
                            args: (0..step.inputs.len()).map(FusedArg::Input).collect(),
                            spec: step.specs[0].clone(),
                            origin: step.origin,
                        }],
                        vec![0],
                    ),
                };
                moved.insert(s, (at, specs.len()));
                groups.push((group, step.specs[0].shape.clone(), step.inputs.len()));
                inputs.extend(step.inputs.iter().map(|&r| renumber(r)));
                specs.extend(step.specs.iter().cloned());
            }
            let origin = old[chunk[0]].origin;
            steps.push(Step { prim: Arc::new(FusedBatch::new(groups)), inputs, specs, device, origin });
            chunk.clear();
        };
        for &s in &members {
            let size = old[s].inputs.len() + old[s].specs.len() + 1;
            if pointers + size > MAX_BATCH_POINTERS {
                flush(&mut chunk, &mut steps, &mut moved);
                pointers = 0;
            }
            chunk.push(s);
            pointers += size;
        }
        flush(&mut chunk, &mut steps, &mut moved);
        self.outputs = self
            .outputs
            .iter()
            .map(|&r| match r {
                Ref::Step(s, o) => match moved.get(&s) {
                    Some(&(at, first)) => Ref::Step(at, first + o),
                    None => Ref::Step(new_index[s], o),
                },
                r => r,
            })
            .collect();
        self.steps = steps;
    }

    /// Whether `step` may join a fused group: one output of an element-wise op that its
    /// device's backend fuses for the dtype it computes on.
    fn is_fusable(&self, step: &Step) -> bool {
        let Some(&operand) = step.inputs.last() else { return false };
        step.specs.len() == 1 && crate::backend::fusable(step.device, step.prim.op(), self.dtype_of(operand))
    }

    /// The dtype of what `r` refers to.
    fn dtype_of(&self, r: Ref) -> DType {
        match r {
            Ref::Input(i) => self.signature[i].1,
            Ref::Const(k) => self.consts[k].dtype(),
            Ref::Step(s, o) => self.steps[s].specs[o].dtype,
        }
    }

    /// A call of the program on `args`: one lazy node run as a CUDA graph where the program can
    /// be (see the module docs), else its nodes replayed.
    fn call(self: &Arc<Program>, args: &[Array]) -> Vec<Array> {
        #[cfg(feature = "cuda")]
        if let Some(ordinal) = self.graph_device(args) {
            let specs = self.outputs.iter().map(|&r| self.spec(r)).collect();
            let program = self.clone();
            let body: crate::transforms::custom::ForwardFn =
                Arc::new(move |xs: &[Array]| program.run_graph(ordinal, xs));
            let name = self.graph_name.get_or_init(|| self.describe_outputs()).clone();
            let call = crate::primitives::graph::Call { name, body, n_outputs: self.outputs.len() };
            return Array::from_primitive_multi(call, args.to_vec(), specs);
        }
        self.replay(args)
    }

    /// `compiled(..)` with what computes each output: a step's primitive, an input, a constant.
    #[cfg(feature = "cuda")]
    fn describe_outputs(&self) -> String {
        let parts: Vec<String> = self
            .outputs
            .iter()
            .map(|&r| match r {
                Ref::Step(s, _) => format!("{}", &*self.steps[s].prim),
                Ref::Input(i) => format!("input {i}"),
                Ref::Const(k) => format!("constant {k}"),
            })
            .collect();
        format!("compiled({})", parts.join(", "))
    }

    /// The CUDA device a call on `args` may run as a graph on: capture is on, every input and
    /// step is on that one device, and no transform traces the arguments (transforms see the
    /// replayed nodes instead, so a gradient does not recompute the forward).
    #[cfg(feature = "cuda")]
    fn graph_device(&self, args: &[Array]) -> Option<usize> {
        let Some(&(_, _, Device::Cuda(ordinal))) = self.signature.first() else { return None };
        let on_device = |d: &Device| *d == Device::Cuda(ordinal);
        let traced =
            |a: &Array| a.node.seen_by_transforms() || matches!(a.node.kind, crate::array::NodeKind::Placeholder);
        (crate::backend::cuda::graphs_enabled()
            && !self.steps.is_empty()
            && self.signature.iter().all(|s| on_device(&s.2))
            && self.steps.iter().all(|s| on_device(&s.device))
            && !args.iter().any(traced))
        .then_some(ordinal)
    }

    /// The body of a graph call (see [`call`](Self::call)): on computed arrays of the device
    /// (views copied dense), the captured graph's results; otherwise (transforms calling the
    /// body on traced arrays, a capture that failed) the replayed nodes.
    #[cfg(feature = "cuda")]
    fn run_graph(&self, ordinal: usize, xs: &[Array]) -> Result<Vec<Array>> {
        use crate::backend::cuda::capture::{capturing_any, CapturedGraph};
        use crate::backend::Storage;
        if capturing_any() {
            return Ok(self.replay(xs));
        }
        // a view (a transpose, a broadcast) is copied dense first: one copy kernel, where a
        // step-by-step replay would cost a launch per step
        let dense: Option<Vec<(crate::backend::cuda::CudaData, Vec<usize>)>> = xs
            .iter()
            .map(|x| match x.node.data.get() {
                Some(Ok(outs)) => match &outs[x.index] {
                    Storage::Cuda(d) if d.device().ordinal() == ordinal => {
                        let d = crate::backend::cuda::elementwise::to_contiguous(d, x.shape()).ok()?;
                        Some((d, x.shape().to_vec()))
                    }
                    _ => None,
                },
                _ => None,
            })
            .collect();
        let Some(dense) = dense else { return Ok(self.replay(xs)) };
        let wrap = |outs: Vec<crate::backend::cuda::CudaData>| {
            outs.into_iter()
                .zip(&self.outputs)
                .map(|(d, &r)| {
                    let spec = self.spec(r);
                    Array::from_storage(Storage::Cuda(d), &spec.shape, spec.dtype)
                })
                .collect()
        };
        let mut state = self.graph.lock().unwrap_or_else(|e| e.into_inner());
        let graph = match &state.captured {
            Some(g) => g.clone(),
            None => {
                state.calls += 1;
                if state.calls < 2 || state.failures >= MAX_CAPTURE_FAILURES {
                    return Ok(self.replay(xs));
                }
                // constants are computed once, outside any graph
                crate::graph::eval(&self.consts)?;
                let dev = crate::backend::cuda::device(ordinal)?;
                let captured = CapturedGraph::capture(&dev, &dense, |statics| {
                    let outs = self.replay(statics);
                    crate::graph::eval(&outs)?;
                    Ok(outs)
                });
                match captured {
                    Ok(g) => {
                        let g = Arc::new(g);
                        state.captured = Some(g.clone());
                        g
                    }
                    Err(_) => {
                        // the step-by-step replay reports the error if it is one of the program
                        state.failures += 1;
                        return Ok(self.replay(xs));
                    }
                }
            }
        };
        drop(state);
        Ok(match graph.launch(&dense)? {
            Some(outs) => wrap(outs),
            None => self.replay(xs),
        })
    }

    /// The program's nodes built on `args`; returns the outputs.
    fn replay(&self, args: &[Array]) -> Vec<Array> {
        let mut values: Vec<SmallVec<[Array; 1]>> = Vec::with_capacity(self.steps.len());
        let get = |values: &[SmallVec<[Array; 1]>], r: Ref| match r {
            Ref::Input(i) => args[i].clone(),
            Ref::Const(k) => self.consts[k].clone(),
            Ref::Step(s, o) => values[s][o].clone(),
        };
        for step in &self.steps {
            let inputs = step.inputs.iter().map(|&r| get(&values, r)).collect();
            values.push(Array::from_shared_primitive(&step.prim, inputs, &step.specs, step.device, step.origin));
        }
        self.outputs.iter().map(|&r| get(&values, r)).collect()
    }
}

/// A primitive's name for grouping candidates of common-subexpression elimination (names of
/// built-in primitives are static; others share one bucket).
fn static_name(prim: &dyn Primitive) -> &'static str {
    match prim.op() {
        Op::Unary(u) => u.name(),
        Op::Binary(b) => b.name(),
        Op::Cast(_) => "astype",
        Op::Select => "select",
        Op::Matmul => "matmul",
        Op::Reduce(_) => "reduce",
        Op::Reshape(_) => "reshape",
        Op::Transpose(_) => "transpose",
        Op::Broadcast(_) => "broadcast",
        Op::Slice(_) => "slice",
        _ => "",
    }
}

/// The error of evaluating a stand-in while tracing (see `graph::compute`).
pub(crate) fn stand_in_error() -> Error {
    Error::Transform(
        "cannot evaluate an array inside a function being traced by vmap or compile (its values do not exist until \
         the traced graph runs); return it instead of reading it"
            .into(),
    )
}
