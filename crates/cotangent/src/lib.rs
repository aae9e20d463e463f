//! cotangent: lazy n-dimensional arrays with composable function transformations
//! (`vjp`, `jvp`, `grad`, `vmap`, `checkpoint`) and custom functions whose rules you supply.
//!
//! # A custom function
//!
//! The VJP rule sees `(primals, cotangents, outputs)`: the forward outputs are computed once
//! and handed to the rule. The built function is a pure value, `Send + Sync + Clone + 'static`,
//! and every transform composes through it.
//!
//! ```
//! use cotangent::{self as ct, Array};
//!
//! // softplus(x) = log(1 + e^x); d/dx = 1 - e^{-y} with y the forward output
//! let softplus = ct::custom_function(|x: &[Array]| (x[0].exp() + 1.0).log())
//!     .vjp(|_primals, cotangents, outputs| vec![&cotangents[0] * (1.0 - (-&outputs[0]).exp())])
//!     .jvp(|primals, tangents| vec![&tangents[0] * primals[0].sigmoid()])
//!     .name("softplus")
//!     .build();
//!
//! let loss = move |x: &[Array]| softplus(x).map(|y| y[0].sum_all());
//! let x = Array::from_slice(&[-1.0f64, 0.0, 2.0], &[3]);
//!
//! // first and second derivatives through the custom rule: sigmoid and sigmoid'
//! let g = ct::grad(loss.clone())(&[x.clone()])?;
//! let dg = ct::grad(loss.clone());
//! let h = ct::grad(move |x: &[Array]| dg(x).map(|g| g[0].sum_all()))(&[x.clone()])?;
//! let s: Vec<f64> = [-1.0f64, 0.0, 2.0].iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect();
//! for ((a, b), s) in g[0].to_vec::<f64>()?.iter().zip(h[0].to_vec::<f64>()?).zip(&s) {
//!     assert!((a - s).abs() < 1e-12 && (b - s * (1.0 - s)).abs() < 1e-12);
//! }
//!
//! // a transformed function crosses threads
//! let per_example = ct::vmap(ct::grad(loss), &[Some(0)], &[Some(0)]);
//! let handle = std::thread::spawn(move || per_example(&[x.reshape(&[3, 1])]));
//! let batched = handle.join().unwrap()?;
//! assert_eq!(batched[0].shape(), &[3, 1]);
//! # Ok::<(), ct::Error>(())
//! ```
//!
//! # Threads
//!
//! Arrays and transformed functions may be used from any thread, also from the tasks of your own
//! rayon pools (say, a `par_iter` evaluating many functions of one shared lazy array). CPU
//! kernels that split their work run on cotangent's own thread pool (`cotangent-cpu-N`; its size
//! is `COTANGENT_NUM_THREADS`, else `RAYON_NUM_THREADS`, else one thread per core), never on
//! rayon's global pool; a thread that needs such a kernel, or a node another thread is
//! computing, blocks without running other tasks of its pool meanwhile. A node is computed
//! once: if its computation fails, also by a panic inside a kernel or a custom function, every
//! reader of the node, on every thread, gets that same error.
#![warn(missing_docs)]

pub mod array;
// Devices' storage and kernels, the primitive trait and the primitives: the machinery behind
// the ops, public for cotangent's own crates and tests (and for writing a new primitive), not
// part of the documented API. Users reach devices through `Device` and the functions
// re-exported below.
#[doc(hidden)]
pub mod backend;
pub mod dtype;
pub mod error;
mod format;
pub(crate) mod graph;
pub mod ops;
#[doc(hidden)]
pub mod primitive;
#[doc(hidden)]
pub mod primitives;
pub mod shape;
pub mod transforms;
pub mod tree;

/// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
mod readme {}

#[doc(hidden)]
#[cfg(feature = "test-hooks")]
pub use array::__buffer_donations;
pub use array::{eval, Array};
pub use backend::{default_device, set_default_device, set_host_cache_limit, Device, MemoryStats};
pub use dtype::{BufferElement, DType, Element};
pub use error::{Error, Result};
/// Ops as free functions (most are also methods on [`Array`]), listed explicitly so that only
/// what users may rely on is re-exported at the crate root.
pub use ops::{
    // element-wise, unary
    abs,
    // element-wise, binary
    add,
    // reductions and scans
    all,
    any,
    // creation
    arange,
    arccos,
    arcsin,
    arctan,
    arctan2,
    argmax,
    argmin,
    argsort,
    astype,
    binary,
    // shape
    broadcast_to,
    ceil,
    clip,
    concatenate,
    conv1d,
    conv2d,
    cos,
    cosh,
    cumprod,
    cumprod_opts,
    cumsum,
    cumsum_opts,
    divide,
    // linear algebra
    einsum,
    equal,
    erf,
    erfinv,
    exp,
    expand_dims,
    expm1,
    eye,
    flatten,
    flip,
    floor,
    floor_divide,
    full,
    full_like,
    greater,
    greater_equal,
    index,
    index_axis,
    isinf,
    isnan,
    less,
    less_equal,
    linspace,
    log,
    log1p,
    log2,
    logaddexp,
    logical_and,
    logical_not,
    logical_or,
    logsumexp,
    matmul,
    max,
    maximum,
    mean,
    min,
    minimum,
    moveaxis,
    multiply,
    negative,
    not_equal,
    // indexing
    one_hot,
    ones,
    ones_like,
    outer,
    pad,
    power,
    prod,
    put_along_axis,
    // random numbers, as `ct::random::uniform(..)`
    random,
    reciprocal,
    remainder,
    repeat,
    reshape,
    rope,
    round,
    rsqrt,
    scaled_dot_product_attention,
    scan,
    scatter_add,
    scatter_add_along_axis,
    select,
    sigmoid,
    sign,
    sin,
    sinh,
    slice,
    slice_axis,
    slice_update,
    softmax,
    sort,
    split,
    sqrt,
    square,
    squeeze,
    stack,
    std,
    subtract,
    sum,
    swapaxes,
    take,
    take_along_axis,
    tan,
    tanh,
    tensordot,
    tile,
    topk,
    transpose,
    tri,
    tril,
    triu,
    unary,
    var,
    zeros,
    zeros_like,
    AttentionMask,
    ConvOptions,
    IntoOperand,
    Operand,
    SliceItem,
    SplitSpec,
    TensordotAxes,
};
pub use shape::Shape;
pub use transforms::{
    checkpoint, compile, custom_function, depends, grad, grad_argnums, grad_tree, grad_with_aux, hessian, hvp, jacfwd,
    jacobian, jacrev, jvp, stop_gradient, value_and_grad, value_and_grad_argnums, value_and_grad_tree, vjp, vmap,
    vmap_tree, CustomFunction, IntoOutputs, VmapRuleResult,
};
pub use tree::{ArrayTree, IntoTree};
