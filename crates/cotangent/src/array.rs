//! [`Array`]: a cheap, clonable, `Send + Sync` handle to one output of a graph node.
use crate::backend::cpu::buffer::BufferElement;
use crate::backend::cpu::Data;
use crate::backend::{Device, Storage};
use crate::primitive::{Primitive, Spec};
use crate::{DType, Error, Result};
use smallvec::SmallVec;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Marks the nodes built while one transform call traces a function. While the token is
/// active, evaluation keeps those nodes' inputs so the transform can still walk the graph.
/// Tokens are per call: nothing about tracing is global.
#[derive(Debug)]
pub(crate) struct TraceToken {
    active: AtomicBool,
    /// Set when the transform has collected every node it will walk (reverse mode, once its
    /// tape is taken): nodes built afterwards (the backward pass's own arithmetic) carry the
    /// token but are never walked by it.
    walked: AtomicBool,
}

impl TraceToken {
    pub(crate) fn new() -> Arc<TraceToken> {
        Arc::new(TraceToken { active: AtomicBool::new(true), walked: AtomicBool::new(false) })
    }
    pub(crate) fn finish(&self) {
        self.active.store(false, Ordering::Release);
    }
    fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }
    /// Mark that the transform will not walk nodes built from now on (see `walked`).
    pub(crate) fn tape_taken(&self) {
        self.walked.store(true, Ordering::Release);
    }
    /// Whether a node built now under this token may still be walked by its transform.
    fn may_walk_new_nodes(&self) -> bool {
        self.is_active() && !self.walked.load(Ordering::Acquire)
    }
}

/// Ends a trace when dropped, also on early return or panic.
pub(crate) struct TraceGuard(pub(crate) Arc<TraceToken>);
impl Drop for TraceGuard {
    fn drop(&mut self) {
        self.0.finish();
    }
}

pub(crate) type Traces = SmallVec<[Arc<TraceToken>; 1]>;

/// What a node is.
pub(crate) enum NodeKind {
    /// Data given at creation.
    Leaf,
    /// A stand-in with a shape and dtype but no data (vmap tracing); evaluating it is an error.
    Placeholder,
    /// The result of a primitive applied to the inputs.
    Op(Arc<dyn Primitive>),
}

/// Where a node was built: the public op the program called and the line that called it
/// (`#[track_caller]`), for errors found when the node is evaluated, e.g.
/// `take (src/main.rs:14:9): index 10 is out of range for axis 0 of extent 2`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Origin {
    /// The public op's name (`take`, `add`, `reshape`, ...).
    pub(crate) op: &'static str,
    /// The caller of the public op.
    pub(crate) at: &'static std::panic::Location<'static>,
    /// Which part of that op the node computes.
    pub(crate) role: Role,
}

/// Which part of a public op a node computes (see [`Origin`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The op's value (also batched by `vmap`).
    Value,
    /// Its gradient (built by a VJP rule).
    Gradient,
    /// Its tangent (built by a JVP rule).
    Tangent,
}

impl Origin {
    /// This origin for the nodes a transformation rule builds from this one's node.
    pub(crate) fn with_role(self, role: Role) -> Origin {
        Origin { role, ..self }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.role {
            Role::Value => {}
            Role::Gradient => write!(f, "gradient of ")?,
            Role::Tangent => write!(f, "tangent of ")?,
        }
        write!(f, "{} ({})", self.op, self.at)
    }
}

thread_local! {
    /// The public op this thread is building, if any (see [`OpScope`]).
    static CURRENT_OP: std::cell::Cell<Option<Origin>> = const { std::cell::Cell::new(None) };
}

/// The origin nodes built now on this thread record.
pub(crate) fn current_origin() -> Option<Origin> {
    CURRENT_OP.with(|c| c.get())
}

/// While it lives, nodes built on this thread record an [`Origin`]. Public ops enter one
/// first thing: the outermost wins, so `take` built from reshapes and a gather records `take`
/// on all of them, at the line that called `take`.
pub(crate) struct OpScope {
    /// What to restore when the scope ends (`None`: it changed nothing).
    restore: Option<Option<Origin>>,
}

impl OpScope {
    /// Enters public op `op` called from the caller's caller (the public op must be
    /// `#[track_caller]`); nothing changes inside another op.
    #[track_caller]
    #[inline]
    pub(crate) fn enter(op: &'static str) -> OpScope {
        let at = std::panic::Location::caller();
        CURRENT_OP.with(|c| match c.get() {
            Some(_) => OpScope { restore: None },
            None => {
                c.set(Some(Origin { op, at, role: Role::Value }));
                OpScope { restore: Some(None) }
            }
        })
    }

    /// Sets the origin of what is built next to `origin`, whatever op is being built: a
    /// transformation applying a node's rule gives the rule's nodes the node's origin in that
    /// role. A node without an origin (a custom function's) sets `None`, so the public ops that
    /// the user's rules call record their own lines.
    pub(crate) fn set(origin: Option<Origin>) -> OpScope {
        OpScope { restore: Some(CURRENT_OP.with(|c| c.replace(origin))) }
    }
}

impl Drop for OpScope {
    #[inline]
    fn drop(&mut self) {
        if let Some(prev) = self.restore {
            CURRENT_OP.with(|c| c.set(prev));
        }
    }
}

/// One node of the graph: a primitive, its inputs, its outputs' specs and, once computed,
/// their data.
pub(crate) struct Node {
    pub(crate) kind: NodeKind,
    pub(crate) inputs: Mutex<Vec<Array>>,
    pub(crate) specs: SmallVec<[Spec; 1]>,
    pub(crate) data: OnceLock<Result<SmallVec<[Storage; 1]>>>,
    /// Set by the one thread that computes `data` (see [`Node::claim`]); a node created with
    /// its data starts claimed.
    pub(crate) claimed: AtomicBool,
    /// The device the outputs are computed on.
    pub(crate) device: Device,
    pub(crate) traces: Traces,
    /// Creation sequence number: inputs always have smaller numbers than their consumers, so
    /// sorting by it gives a topological order, the order the program built the graph in
    /// (see `graph::eval`).
    pub(crate) seq: u64,
    /// The public op and line that built the node, when built inside one (see [`OpScope`]).
    pub(crate) origin: Option<Origin>,
}

/// Source of [`Node::seq`]. Only its order matters; threads interleaving is harmless (any
/// order of creation is a topological order).
static NEXT_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

thread_local! {
    /// Nodes created by this thread.
    static CREATED_HERE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn next_seq() -> u64 {
    CREATED_HERE.with(|c| c.set(c.get() + 1));
    NEXT_SEQ.fetch_add(1, Ordering::Relaxed)
}

/// How many nodes the calling thread has created so far: the difference of two readings is
/// what the code run in between built on this thread, whatever other threads do meanwhile (so
/// whether a custom forward is rebuilt lazily does not depend on them).
pub(crate) fn nodes_created() -> u64 {
    CREATED_HERE.with(|c| c.get())
}

impl Node {
    /// A node applying `prim` to `inputs` on `device`, traced by every active trace of its inputs.
    fn op(
        prim: Arc<dyn Primitive>,
        inputs: Vec<Array>,
        specs: SmallVec<[Spec; 1]>,
        device: Device,
        origin: Option<Origin>,
    ) -> Node {
        let mut traces: Traces = SmallVec::new();
        for inp in &inputs {
            for t in &inp.node.traces {
                if t.is_active() && !traces.iter().any(|u| Arc::ptr_eq(u, t)) {
                    traces.push(t.clone());
                }
            }
        }
        Node {
            kind: NodeKind::Op(prim),
            inputs: Mutex::new(inputs),
            specs,
            data: OnceLock::new(),
            claimed: AtomicBool::new(false),
            device,
            traces,
            seq: next_seq(),
            origin,
        }
    }

    pub(crate) fn is_computed(&self) -> bool {
        self.data.get().is_some()
    }
    /// Claims the computation of this node for the calling thread: `true` for exactly one
    /// caller, which must then store a result in `data` (`graph::compute` stores even a panic
    /// as an error). Others wait for `data` or, on the evaluation walk, stop. Claiming first,
    /// instead of computing inside `OnceLock::get_or_init`, lets a thread that must not block
    /// find out that another one is computing the node.
    pub(crate) fn claim(&self) -> bool {
        !self.claimed.swap(true, Ordering::AcqRel)
    }
    /// Whether evaluation must keep this node's inputs (a transform is tracing through it).
    pub(crate) fn keeps_inputs(&self) -> bool {
        self.traces.iter().any(|t| t.is_active())
    }
    /// Whether a transform may still walk this node, so it must stay the op it was built as
    /// (eager fusion leaves it alone): some active trace marks it and has not yet taken its
    /// tape. Nodes a backward pass builds are free once that pass is their only trace.
    pub(crate) fn seen_by_transforms(&self) -> bool {
        self.traces.iter().any(|t| t.may_walk_new_nodes())
    }
    pub(crate) fn primitive(&self) -> Option<&dyn Primitive> {
        match &self.kind {
            NodeKind::Op(p) => Some(p.as_ref()),
            _ => None,
        }
    }
    pub(crate) fn inputs(&self) -> Vec<Array> {
        self.inputs.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    /// What errors of this node call it: the public op and the line that built it when known
    /// (`take (src/main.rs:14:9)`), else the primitive's name.
    pub(crate) fn describe(&self) -> String {
        match (&self.origin, &self.kind) {
            (Some(o), _) => o.to_string(),
            (None, NodeKind::Op(p)) => p.name().to_string(),
            (None, NodeKind::Leaf) => "a leaf".to_string(),
            (None, NodeKind::Placeholder) => "a placeholder".to_string(),
        }
    }
}

impl Drop for Node {
    /// Drops long input chains iteratively so a graph of a million nodes cannot overflow the stack.
    fn drop(&mut self) {
        let mut stack = std::mem::take(self.inputs.get_mut().unwrap_or_else(|e| e.into_inner()));
        while let Some(a) = stack.pop() {
            if let Some(mut node) = Arc::into_inner(a.node) {
                stack.append(node.inputs.get_mut().unwrap_or_else(|e| e.into_inner()));
            }
        }
    }
}

/// An immutable, lazily evaluated n-dimensional array.
///
/// Cloning is cheap (a reference count). Building ops only records the computation; [`eval`],
/// [`to_vec`](Array::to_vec) and [`item`](Array::item) compute it. Arrays are `Send + Sync`:
/// several threads may build on, or evaluate, the same array at once.
///
/// ```
/// use cotangent::{self as ct, Array};
/// let x = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
/// let y = (&x * 2.0 + &x).sum(&[-1], false);
/// assert_eq!(y.to_vec::<f32>().unwrap(), vec![9.0, 21.0]);
/// ```
///
/// [`eval`]: Array::eval
#[derive(Clone)]
pub struct Array {
    pub(crate) node: Arc<Node>,
    pub(crate) index: usize,
}

impl Array {
    // ----- construction -------------------------------------------------------------------

    #[track_caller]
    pub(crate) fn from_data(data: Data, shape: &[usize], dtype: DType) -> Array {
        Array::from_storage(Storage::Cpu(data), shape, dtype)
    }

    /// A leaf holding computed `data` (on its device).
    #[track_caller]
    pub(crate) fn from_storage(data: Storage, shape: &[usize], dtype: DType) -> Array {
        crate::shape::check_shape(|| "from_data".into(), shape, dtype);
        let node = Node {
            kind: NodeKind::Leaf,
            inputs: Mutex::new(Vec::new()),
            specs: smallvec::smallvec![Spec::new(shape, dtype)],
            device: data.device(),
            data: OnceLock::from(Ok(smallvec::smallvec![data])),
            claimed: AtomicBool::new(true),
            traces: SmallVec::new(),
            seq: next_seq(),
            origin: None,
        };
        Array { node: Arc::new(node), index: 0 }
    }

    /// An array of `shape` and `dtype` whose computation has already failed with `err`: every
    /// evaluation or read returns `err` (e.g. an eagerly built constant whose buffer could not
    /// be allocated).
    #[track_caller]
    pub(crate) fn failed(shape: &[usize], dtype: DType, err: Error) -> Array {
        crate::shape::check_shape(|| "failed".into(), shape, dtype);
        let node = Node {
            kind: NodeKind::Leaf,
            inputs: Mutex::new(Vec::new()),
            specs: smallvec::smallvec![Spec::new(shape, dtype)],
            device: crate::backend::default_device(),
            data: OnceLock::from(Err(err)),
            claimed: AtomicBool::new(true),
            traces: SmallVec::new(),
            seq: next_seq(),
            origin: None,
        };
        Array { node: Arc::new(node), index: 0 }
    }

    /// This freshly built single-output array with `token` added to its node's traces.
    pub(crate) fn add_trace(self, token: &Arc<TraceToken>) -> Array {
        let Array { node, index } = self;
        let mut node = Arc::into_inner(node).expect("add_trace on a shared node");
        node.traces.push(token.clone());
        Array { node: Arc::new(node), index }
    }

    /// A data-less stand-in of the given shape and dtype (vmap tracing).
    #[track_caller]
    pub(crate) fn placeholder(shape: &[usize], dtype: DType, token: &Arc<TraceToken>) -> Array {
        Array::placeholder_on(shape, dtype, crate::backend::default_device(), token)
    }

    /// A data-less stand-in on `device` (vmap and compile tracing).
    #[track_caller]
    pub(crate) fn placeholder_on(shape: &[usize], dtype: DType, device: Device, token: &Arc<TraceToken>) -> Array {
        crate::shape::check_shape(|| "placeholder".into(), shape, dtype);
        let node = Node {
            kind: NodeKind::Placeholder,
            inputs: Mutex::new(Vec::new()),
            specs: smallvec::smallvec![Spec::new(shape, dtype)],
            data: OnceLock::new(),
            claimed: AtomicBool::new(false),
            device,
            traces: smallvec::smallvec![token.clone()],
            seq: next_seq(),
            origin: None,
        };
        Array { node: Arc::new(node), index: 0 }
    }

    /// Build a node applying `prim` to `inputs` with outputs described by `specs`; returns one
    /// array per output.
    ///
    /// This and [`from_primitive`](Array::from_primitive) are where every op's outputs are
    /// recorded, so they check that each output can exist: its element count fits `usize` and
    /// its size in bytes is at most `isize::MAX`. A kernel never sees an impossible shape.
    ///
    /// # Panics
    /// If the inputs are on different devices (0-d inputs follow the others; see
    /// [`Array::to_device`]), or an output's shape is too large for its dtype (the message
    /// names the primitive, the shape, the dtype and the caller's location).
    #[doc(hidden)]
    #[track_caller]
    pub fn from_primitive_multi(prim: impl Primitive, mut inputs: Vec<Array>, specs: Vec<Spec>) -> Vec<Array> {
        for s in &specs {
            crate::shape::check_shape(|| prim.name().to_string(), &s.shape, s.dtype);
        }
        let device = common_device(&prim, &mut inputs);
        let n = specs.len();
        let node = Arc::new(Node::op(Arc::new(prim), inputs, SmallVec::from_vec(specs), device, current_origin()));
        (0..n).map(|index| Array { node: node.clone(), index }).collect()
    }

    /// Build a single-output node applying `prim` to `inputs`.
    ///
    /// # Panics
    /// If the inputs are on different devices (0-d inputs follow the others; see
    /// [`Array::to_device`]), or `shape` is too large for `dtype`: more than `usize::MAX`
    /// elements or more than `isize::MAX` bytes (see
    /// [`from_primitive_multi`](Array::from_primitive_multi)).
    #[doc(hidden)]
    #[track_caller]
    pub fn from_primitive(prim: impl Primitive, mut inputs: Vec<Array>, shape: &[usize], dtype: DType) -> Array {
        crate::shape::check_shape(|| prim.name().to_string(), shape, dtype);
        let device = common_device(&prim, &mut inputs);
        let node =
            Node::op(Arc::new(prim), inputs, smallvec::smallvec![Spec::new(shape, dtype)], device, current_origin());
        Array { node: Arc::new(node), index: 0 }
    }

    /// A node applying a primitive shared with other nodes (a compiled program's replay) to
    /// `inputs`, with known output `specs`, `device` and `origin`: none of the checks of
    /// [`from_primitive_multi`](Array::from_primitive_multi), which the traced node passed.
    pub(crate) fn from_shared_primitive(
        prim: &Arc<dyn Primitive>,
        inputs: Vec<Array>,
        specs: &[Spec],
        device: Device,
        origin: Option<Origin>,
    ) -> SmallVec<[Array; 1]> {
        let node = Arc::new(Node::op(prim.clone(), inputs, specs.iter().cloned().collect(), device, origin));
        (0..specs.len()).map(|index| Array { node: node.clone(), index }).collect()
    }

    /// An array holding a copy of `data` with the given shape.
    ///
    /// # Panics
    /// If `data.len()` is not the product of `shape`, or the shape's element count overflows
    /// `usize` (or its size in bytes `isize::MAX`).
    #[track_caller]
    pub fn from_slice<T: BufferElement>(data: &[T], shape: &[usize]) -> Array {
        Array::check_fill("from_slice", data.len(), shape, T::DTYPE);
        Array::from_vec(data.to_vec(), shape)
    }

    /// Panics unless `len` elements of `dtype` fill an array of `shape` (`op` names the
    /// constructor the user called).
    #[track_caller]
    fn check_fill(op: &'static str, len: usize, shape: &[usize], dtype: DType) {
        crate::shape::check_shape(|| op.into(), shape, dtype);
        let n = crate::shape::numel(shape);
        if len != n {
            panic!("cotangent::{op}: {len} elements of {dtype} do not fill shape {shape:?} ({n} elements)");
        }
    }

    /// An array taking ownership of `data` with the given shape.
    ///
    /// # Panics
    /// If `data.len()` is not the product of `shape`, or the shape's element count overflows
    /// `usize` (or its size in bytes `isize::MAX`): a product that wraps around is never taken
    /// for the length.
    #[track_caller]
    pub fn from_vec<T: BufferElement>(data: Vec<T>, shape: &[usize]) -> Array {
        Array::check_fill("from_vec", data.len(), shape, T::DTYPE);
        Array::from_data(Data::from_vec(data, shape), shape, T::DTYPE).to_device(crate::backend::default_device())
    }

    /// A 0-dimensional array holding `v`.
    #[track_caller]
    pub fn scalar<T: BufferElement>(v: T) -> Array {
        Array::from_vec(vec![v], &[])
    }

    // ----- metadata -----------------------------------------------------------------------

    pub(crate) fn spec(&self) -> &Spec {
        &self.node.specs[self.index]
    }
    /// The extent of every axis.
    pub fn shape(&self) -> &[usize] {
        &self.spec().shape
    }
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.spec().dtype
    }
    /// Number of axes.
    pub fn ndim(&self) -> usize {
        self.shape().len()
    }
    /// Number of elements.
    pub fn size(&self) -> usize {
        crate::shape::numel(self.shape())
    }
    /// Extent of axis `axis` (negative counts from the end).
    #[track_caller]
    pub fn dim(&self, axis: isize) -> usize {
        let a = crate::ops::shape::axis_for("dim", axis, self.shape(), self.ndim());
        self.shape()[a]
    }
    /// Whether the array has been computed.
    pub fn is_evaluated(&self) -> bool {
        self.node.is_computed()
    }
    /// Identity of the node and output this array refers to (stable while the array lives).
    pub(crate) fn id(&self) -> (usize, usize) {
        (Arc::as_ptr(&self.node) as *const u8 as usize, self.index)
    }
    pub(crate) fn node_id(&self) -> usize {
        Arc::as_ptr(&self.node) as *const u8 as usize
    }
    // ----- buffer donation -----------------------------------------------------------------

    /// Takes this array's computed data out of its node so an element-wise kernel can write its
    /// result into the buffer (buffer donation), when nothing else can observe it:
    /// - this handle is the only reference to the node (no user `Array`, sibling output,
    ///   consumer or evaluation tape holds it; `Arc::get_mut` checks this atomically, so a
    ///   clone held by another thread prevents it),
    /// - the data has `dtype` and `len` elements, is a dense row-major view starting at offset
    ///   0 and covering its whole buffer (views — broadcast, transposed, sliced — are never
    ///   taken), and no other `Data` (a view node's output) shares the buffer.
    ///
    /// The node is left without data: it is unreachable except through `self`, which the
    /// caller drops (do not read it again). `None` leaves everything as it was.
    pub(crate) fn take_unique_data(&mut self, dtype: DType, len: usize) -> Option<Data> {
        let index = self.index;
        let node = Arc::get_mut(&mut self.node)?;
        let spec = &node.specs[index];
        if spec.dtype != dtype || crate::shape::numel(&spec.shape) != len {
            return None;
        }
        match node.data.get() {
            Some(Ok(d)) if matches!(&d[index], Storage::Cpu(d) if d.is_reusable(&spec.shape)) => {}
            _ => return None,
        }
        let data = match node.data.take() {
            Some(Ok(datas)) => match datas.into_iter().nth(index)? {
                Storage::Cpu(d) => d,
                #[allow(unreachable_patterns)]
                _ => return None,
            },
            _ => return None,
        };
        #[cfg(feature = "test-hooks")]
        DONATIONS.fetch_add(1, Ordering::Relaxed);
        Some(data)
    }

    /// Address of the first element of this array's buffer (evaluates first), for tests that
    /// check whether a kernel wrote its result into an input's buffer. Not a stable API.
    #[doc(hidden)]
    #[cfg(feature = "test-hooks")]
    pub fn __buffer_addr(&self) -> Result<usize> {
        let d = self.data()?;
        Ok(crate::dispatch_dtype!(d.buf.dtype(), T => d.buf.as_slice::<T>().as_ptr() as usize))
    }

    // ----- evaluation and reading ---------------------------------------------------------

    /// Compute this array (and everything it depends on that is not computed yet).
    pub fn eval(&self) -> Result<()> {
        crate::graph::eval(std::slice::from_ref(self))
    }

    /// The computed data; evaluates first if needed.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn data(&self) -> Result<&Data> {
        if !self.node.is_computed() {
            self.eval()?;
        }
        self.computed_data()
    }

    /// The storage of an array that has been computed (or has failed).
    pub(crate) fn computed_storage(&self) -> Result<&Storage> {
        match self.node.data.get() {
            Some(Ok(d)) => Ok(&d[self.index]),
            Some(Err(e)) => Err(e.clone()),
            None => Err(Error::Eval("array read before evaluation".into())),
        }
    }

    /// The host data of an array that has been computed on the CPU (or has failed); for the
    /// CPU kernels.
    pub(crate) fn computed_data(&self) -> Result<&Data> {
        match self.computed_storage()? {
            Storage::Cpu(d) => Ok(d),
            #[allow(unreachable_patterns)]
            other => Err(Error::Eval(format!("a CPU kernel was given data on {}", other.device()))),
        }
    }

    /// The device this array is (or will be) computed on.
    ///
    /// ```
    /// use cotangent::{Array, Device};
    /// assert_eq!(Array::scalar(1.0f32).to_device(Device::Cpu).device(), Device::Cpu);
    /// ```
    pub fn device(&self) -> Device {
        self.node.device
    }

    /// This array on `device`: itself when it is already there, otherwise a lazy copy whose
    /// VJP moves the cotangent back.
    ///
    /// ```
    /// use cotangent::{self as ct, Array, Device};
    /// let x = Array::from_slice(&[1.0f32, 2.0], &[2]);
    /// let g = ct::grad(|x: &[Array]| x[0].to_device(Device::Cpu).square().sum_all())(&[x])?;
    /// assert_eq!(g[0].to_vec::<f32>()?, vec![2.0, 4.0]);
    /// # Ok::<(), ct::Error>(())
    /// ```
    #[track_caller]
    pub fn to_device(&self, device: Device) -> Array {
        let _op = OpScope::enter("to_device");
        if self.device() == device {
            return self.clone();
        }
        let spec = self.spec().clone();
        let prim = Arc::new(crate::primitives::graph::ToDevice(device));
        let node = Node::op(prim, vec![self.clone()], smallvec::smallvec![spec], device, current_origin());
        Array { node: Arc::new(node), index: 0 }
    }

    /// The computed data on the host (copied from a device, synchronising).
    fn host_data(&self) -> Result<std::borrow::Cow<'_, Data>> {
        if !self.node.is_computed() {
            self.eval()?;
        }
        self.computed_storage()?.to_host(self.spec())
    }

    /// The elements in row-major order. Asking for a type other than the array's dtype is an
    /// `Err` (use [`astype`](Array::astype) to convert).
    pub fn to_vec<T: BufferElement>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::DTypeMismatch { requested: T::DTYPE, actual: self.dtype() });
        }
        self.host_copy(|d, shape| d.try_to_vec::<T>(shape))?
    }

    /// The single element of a one-element array (any shape). Asking for a type other than the
    /// array's dtype is an `Err`.
    pub fn item<T: BufferElement>(&self) -> Result<T> {
        if self.size() != 1 {
            return Err(Error::Shape(format!(
                "item() needs an array of exactly one element, got shape {:?}",
                self.shape()
            )));
        }
        Ok(self.to_vec::<T>()?[0])
    }

    /// The elements converted to `f64` (any dtype); `Err(Error::OutOfMemory)` when the copy
    /// cannot be allocated.
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        let dtype = self.dtype();
        let n = self.size();
        self.host_copy(move |d, shape| {
            let mut out = crate::backend::cpu::buffer::try_with_capacity::<f64>(n)?;
            crate::dispatch_dtype!(dtype, T => out.extend(
                d.try_to_contiguous::<T>(shape)?.iter().map(|v| crate::dtype::Element::to_f64(*v))));
            Ok(out)
        })?
    }

    /// `copy(data, shape)` of the computed host data, run where a kernel of this size runs
    /// (`backend::cpu::pool::run_kernel`): a large strided copy splits over rayon, and on a
    /// worker of the user's pool that would let this thread steal the user's tasks while it
    /// may be computing a node (inside a custom function's body).
    fn host_copy<R: Send + 'static>(&self, copy: impl FnOnce(&Data, &[usize]) -> R + Send + 'static) -> Result<R> {
        use crate::backend::cpu::pool;
        let d = self.host_data()?.into_owned();
        let shape = self.shape().to_vec();
        Ok(pool::run_kernel(pool::place(), self.size() >= pool::SPLIT_MIN_ELEMENTS, move || copy(&d, &shape)))
    }
}

impl fmt::Debug for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Array(shape={:?}, dtype={}, ", self.shape(), self.dtype())?;
        match &self.node.kind {
            NodeKind::Leaf => f.write_str("leaf)")?,
            NodeKind::Placeholder => f.write_str("placeholder)")?,
            NodeKind::Op(p) => write!(f, "{})", &**p)?,
        }
        if let Some(Ok(_)) = self.node.data.get() {
            if self.size() <= 64 {
                if let Ok(v) = self.to_f64_vec() {
                    write!(f, " {v:?}")?;
                }
            }
        }
        Ok(())
    }
}

/// Evaluate several arrays together (shared work is done once).
pub fn eval(arrays: &[Array]) -> Result<()> {
    crate::graph::eval(arrays)
}

/// Buffers taken for donation by all evaluations so far (see [`Array::take_unique_data`]).
#[cfg(feature = "test-hooks")]
static DONATIONS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many input buffers evaluations on all threads have handed to element-wise kernels to
/// overwrite (buffer donation), for tests. Not a stable API.
#[doc(hidden)]
#[cfg(feature = "test-hooks")]
pub fn __buffer_donations() -> usize {
    DONATIONS.load(Ordering::Relaxed)
}

/// The device of a node over `inputs`: theirs, when they agree. A 0-d input on another device
/// (a scalar made from a Rust number) is moved to the others' device.
#[track_caller]
fn common_device(prim: &dyn Primitive, inputs: &mut [Array]) -> Device {
    let Some(first) = inputs.first() else {
        return crate::backend::default_device();
    };
    let device = first.device();
    if inputs.iter().all(|x| x.device() == device) {
        return device;
    }
    let device = inputs.iter().find(|x| x.ndim() > 0).map_or(device, |x| x.device());
    if inputs.iter().any(|x| x.ndim() > 0 && x.device() != device) {
        let devices: Vec<String> = inputs.iter().map(|x| format!("{:?} on {}", x.shape(), x.device())).collect();
        panic!(
            "cotangent::{}: inputs on different devices ({}); move them with to_device",
            prim.name(),
            devices.join(", ")
        );
    }
    for x in inputs.iter_mut().filter(|x| x.device() != device) {
        *x = x.to_device(device);
    }
    device
}
