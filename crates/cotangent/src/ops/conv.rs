//! Convolutions: [`conv1d`] and [`conv2d`] with PyTorch's layouts (`[N, C, L]` / `[N, C, H, W]`
//! inputs, `[O, C / groups, K]` / `[O, C / groups, KH, KW]` weights) and options
//! ([`ConvOptions`]: stride, zero padding, dilation, groups).
//!
//! Both are one generic composition of existing ops, an im2col: the zero-padded input is cut
//! into one strided slice (a view) per kernel position, the slices are stacked, and each group
//! of output channels is a batched matrix product with its weights. Every transform (VJP, JVP,
//! vmap, compile) therefore comes from the rules of pad, slice, stack, reshape and matmul, and
//! the convolution runs wherever those run (on CUDA: the pad, stack and copies as CUDA kernels,
//! the product through cuBLAS). The stacked slices take `prod(kernel)` times the memory of the
//! output's spatial positions times the input channels.
use crate::primitives::shape::Slice;
use crate::shape::Shape;
use crate::Array;

/// Options of a convolution over `N` spatial axes: per-axis `stride`, symmetric zero
/// `padding` and `dilation`, and the number of `groups` (input and output channels split into
/// `groups` independent convolutions; `groups` = channels is a depthwise convolution).
/// [`Default`] is stride 1, no padding, dilation 1, one group; the builder methods set one
/// value for every axis.
///
/// ```
/// use cotangent::ConvOptions;
/// let o = ConvOptions::<2>::default().stride(2).padding(1);
/// assert_eq!((o.stride, o.padding, o.dilation, o.groups), ([2, 2], [1, 1], [1, 1], 1));
/// let per_axis = ConvOptions { stride: [1, 2], ..ConvOptions::default() };
/// assert_eq!(per_axis.stride, [1, 2]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvOptions<const N: usize> {
    /// Step between output positions along each spatial axis (at least 1).
    pub stride: [usize; N],
    /// Zeros added before and after each spatial axis.
    pub padding: [usize; N],
    /// Step between kernel taps along each spatial axis (at least 1).
    pub dilation: [usize; N],
    /// Number of channel groups (divides both channel counts).
    pub groups: usize,
}

impl<const N: usize> Default for ConvOptions<N> {
    fn default() -> Self {
        ConvOptions { stride: [1; N], padding: [0; N], dilation: [1; N], groups: 1 }
    }
}

impl<const N: usize> ConvOptions<N> {
    /// The same stride on every spatial axis.
    ///
    /// ```
    /// assert_eq!(cotangent::ConvOptions::<1>::default().stride(3).stride, [3]);
    /// ```
    pub fn stride(mut self, s: usize) -> Self {
        self.stride = [s; N];
        self
    }
    /// The same padding on every spatial axis.
    ///
    /// ```
    /// assert_eq!(cotangent::ConvOptions::<2>::default().padding(1).padding, [1, 1]);
    /// ```
    pub fn padding(mut self, p: usize) -> Self {
        self.padding = [p; N];
        self
    }
    /// The same dilation on every spatial axis.
    ///
    /// ```
    /// assert_eq!(cotangent::ConvOptions::<1>::default().dilation(2).dilation, [2]);
    /// ```
    pub fn dilation(mut self, d: usize) -> Self {
        self.dilation = [d; N];
        self
    }
    /// The number of groups.
    ///
    /// ```
    /// assert_eq!(cotangent::ConvOptions::<2>::default().groups(4).groups, 4);
    /// ```
    pub fn groups(mut self, g: usize) -> Self {
        self.groups = g;
        self
    }
}

/// 1-D convolution (cross-correlation, as PyTorch's `conv1d`, without bias) of `x`
/// (`[N, C, L]`) with `weight` (`[O, C / groups, K]`): `[N, O, L_out]` with
/// `L_out = (L + 2 padding - dilation (K - 1) - 1) / stride + 1`. Float inputs of one dtype.
/// Differentiable in both arguments, batchable, and built from existing ops (see the
/// [module docs](self)).
///
/// ```
/// use cotangent::{self as ct, Array, ConvOptions};
/// let x = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 4]);
/// let w = Array::from_slice(&[1.0f32, -1.0], &[1, 1, 2]);
/// assert_eq!(ct::conv1d(&x, &w, ConvOptions::default()).to_vec::<f32>()?, vec![-1.0, -1.0, -1.0]);
/// let padded = ct::conv1d(&x, &w, ConvOptions::default().padding(1).stride(2));
/// assert_eq!(padded.to_vec::<f32>()?, vec![-1.0, -1.0, 4.0]);
/// # Ok::<(), ct::Error>(())
/// ```
///
/// # Panics
/// If the ranks, channel counts, groups or dtypes do not fit, a stride or dilation is zero, or
/// the dilated kernel is longer than the padded input (reported at the caller's line).
#[track_caller]
pub fn conv1d(x: &Array, weight: &Array, options: ConvOptions<1>) -> Array {
    let _op = crate::array::OpScope::enter("conv1d");
    conv("conv1d", x, weight, &options)
}

/// 2-D convolution (cross-correlation, as PyTorch's `conv2d`, without bias) of `x`
/// (`[N, C, H, W]`) with `weight` (`[O, C / groups, KH, KW]`): `[N, O, H_out, W_out]`, each
/// spatial extent as in [`conv1d`]. Float inputs of one dtype. Differentiable in both
/// arguments, batchable, built from existing ops (see the [module docs](self)).
///
/// ```
/// use cotangent::{self as ct, Array, ConvOptions};
/// let x = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], &[1, 1, 3, 3]);
/// let w = ct::ones(&[1, 1, 2, 2], ct::DType::F32);
/// let y = ct::conv2d(&x, &w, ConvOptions::default());
/// assert_eq!(y.shape(), &[1, 1, 2, 2]);
/// assert_eq!(y.to_vec::<f32>()?, vec![12.0, 16.0, 24.0, 28.0]);
/// // depthwise: one filter per channel
/// let x2 = ct::concatenate(&[x.clone(), &x * 2.0], 1);
/// let w2 = ct::ones(&[2, 1, 3, 3], ct::DType::F32);
/// let d = ct::conv2d(&x2, &w2, ConvOptions::default().groups(2));
/// assert_eq!(d.to_vec::<f32>()?, vec![45.0, 90.0]);
/// # Ok::<(), ct::Error>(())
/// ```
///
/// # Panics
/// As [`conv1d`].
#[track_caller]
pub fn conv2d(x: &Array, weight: &Array, options: ConvOptions<2>) -> Array {
    let _op = crate::array::OpScope::enter("conv2d");
    conv("conv2d", x, weight, &options)
}

impl Array {
    /// See [`conv1d`].
    ///
    /// ```
    /// use cotangent::{self as ct, Array, ConvOptions};
    /// let x = ct::ones(&[1, 2, 5], ct::DType::F32);
    /// assert_eq!(x.conv1d(&ct::ones(&[3, 2, 3], ct::DType::F32), ConvOptions::default()).shape(), &[1, 3, 3]);
    /// ```
    #[track_caller]
    pub fn conv1d(&self, weight: &Array, options: ConvOptions<1>) -> Array {
        let _op = crate::array::OpScope::enter("conv1d");
        conv("conv1d", self, weight, &options)
    }

    /// See [`conv2d`].
    ///
    /// ```
    /// use cotangent::{self as ct, Array, ConvOptions};
    /// let x = ct::ones(&[2, 4, 6, 6], ct::DType::F32);
    /// let w = ct::ones(&[8, 2, 3, 3], ct::DType::F32);
    /// let y = x.conv2d(&w, ConvOptions::default().stride(2).padding(1).groups(2));
    /// assert_eq!(y.shape(), &[2, 8, 3, 3]);
    /// ```
    #[track_caller]
    pub fn conv2d(&self, weight: &Array, options: ConvOptions<2>) -> Array {
        let _op = crate::array::OpScope::enter("conv2d");
        conv("conv2d", self, weight, &options)
    }
}

/// The convolution over the `N` trailing axes (see the module docs).
#[track_caller]
fn conv<const N: usize>(op: &str, x: &Array, w: &Array, o: &ConvOptions<N>) -> Array {
    let (xs, ws) = (x.shape(), w.shape());
    let layout = if N == 1 { "[N, C, L] and [O, C / groups, K]" } else { "[N, C, H, W] and [O, C / groups, KH, KW]" };
    assert!(
        x.ndim() == N + 2 && w.ndim() == N + 2,
        "cotangent::{op}: the input and weight must be {layout}, got shapes {xs:?} ({}) and {ws:?} ({})",
        x.dtype(),
        w.dtype()
    );
    assert!(
        x.dtype() == w.dtype() && x.dtype().is_float(),
        "cotangent::{op}: the input and weight must be floats of one dtype, got {} (shape {xs:?}) and {} (shape \
         {ws:?})",
        x.dtype(),
        w.dtype()
    );
    let (b, c, out_c, g) = (xs[0], xs[1], ws[0], o.groups);
    assert!(
        g >= 1 && c % g == 0 && out_c % g == 0,
        "cotangent::{op}: groups = {g} must be at least 1 and divide the input channels {c} and the output channels \
         {out_c} (shapes {xs:?} and {ws:?})"
    );
    assert!(
        ws[1] * g == c,
        "cotangent::{op}: the weight of shape {ws:?} has {} input channels per group, but the input of shape {xs:?} \
         with groups = {g} has {}",
        ws[1],
        c / g
    );
    assert!(
        o.stride.iter().chain(&o.dilation).all(|&v| v >= 1),
        "cotangent::{op}: stride {:?} and dilation {:?} must be at least 1",
        o.stride,
        o.dilation
    );
    let mut out = [0usize; N];
    for i in 0..N {
        let padded = xs[2 + i] + 2 * o.padding[i];
        let span = o.dilation[i] * (ws[2 + i].max(1) - 1) + 1;
        assert!(
            ws[2 + i] >= 1 && span <= padded,
            "cotangent::{op}: the kernel of extent {} (dilation {}) spans {span} positions, more than the {padded} of \
             spatial axis {i} of the input of shape {xs:?} padded by {}",
            ws[2 + i],
            o.dilation[i],
            o.padding[i]
        );
        out[i] = (padded - span) / o.stride[i] + 1;
    }
    let mut widths = vec![(0, 0); 2];
    widths.extend(o.padding.iter().map(|&p| (p, p)));
    let xp = x.pad(&widths, 0.0);
    // one strided view per kernel position, in the weight's row-major order of taps
    let kernel = &ws[2..];
    let taps: usize = kernel.iter().product();
    let mut views = Vec::with_capacity(taps);
    for t in 0..taps {
        let (mut rest, mut starts) = (t, vec![0usize; N + 2]);
        for i in (0..N).rev() {
            starts[2 + i] = (rest % kernel[i]) * o.dilation[i];
            rest /= kernel[i];
        }
        let mut steps = vec![1isize; N + 2];
        let mut shape = Shape::from_slice(&[b, c]);
        for i in 0..N {
            steps[2 + i] = o.stride[i] as isize;
            shape.push(out[i]);
        }
        views.push(super::shape::slice_raw(&xp, Slice { starts, steps, shape }));
    }
    let positions: usize = out.iter().product();
    let cols = super::shape::stack(&views, 2).reshape_exact(&[b, g, (c / g) * taps, positions]);
    let wm = w.reshape_exact(&[g, out_c / g, (c / g) * taps]);
    let mut shape = vec![b, out_c];
    shape.extend_from_slice(&out);
    wm.matmul(&cols).reshape_exact(&shape)
}
