//! Input checks shared by the layers, losses and activations: misuse panics at the caller's
//! line (every function here and every public entry point that calls one is
//! `#[track_caller]`) with a sentence naming the layer, the argument, and the expected and
//! the given shape or dtype, e.g. "Linear expects inputs whose last axis is in_features = 4,
//! but got an input of shape [2, 3]".
use cotangent::Array;

/// How an argument is named in a message: the plural for what is expected ("inputs") and the
/// singular with its article for what was given ("an input"); nouns without a singular use
/// the same word twice (`("ids", "ids")`).
pub(crate) type Noun = (&'static str, &'static str);

/// The input of a layer.
pub(crate) const INPUT: Noun = ("inputs", "an input");

/// `x`'s last axis must be `n` (the layer's `field`).
#[track_caller]
pub(crate) fn last_axis(layer: &str, (many, one): Noun, x: &Array, field: &str, n: usize) {
    if x.ndim() == 0 || x.shape()[x.ndim() - 1] != n {
        panic!("{layer} expects {many} whose last axis is {field} = {n}, but got {one} of shape {:?}", x.shape());
    }
}

/// `x` must have `ndim` axes, laid out as `layout` (e.g. `"[batch, time, dim]"`).
#[track_caller]
pub(crate) fn rank(layer: &str, (many, one): Noun, x: &Array, ndim: usize, layout: &str) {
    if x.ndim() != ndim {
        panic!("{layer} expects {many} of shape {layout}, but got {one} of shape {:?}", x.shape());
    }
}

/// `x` must have at least `ndim` axes.
#[track_caller]
pub(crate) fn rank_at_least(layer: &str, (many, one): Noun, x: &Array, ndim: usize) {
    if x.ndim() < ndim {
        let axes = if ndim == 1 { "axis" } else { "axes" };
        panic!("{layer} expects {many} with at least {ndim} {axes}, but got {one} of shape {:?}", x.shape());
    }
}

/// `x` must have a floating-point dtype.
#[track_caller]
pub(crate) fn float(layer: &str, (many, one): Noun, x: &Array) {
    if !x.dtype().is_float() {
        panic!("{layer} expects floating-point {many}, but got {one} of dtype {} (shape {:?})", x.dtype(), x.shape());
    }
}

/// `x` must have an integer dtype.
#[track_caller]
pub(crate) fn integer(layer: &str, (many, one): Noun, x: &Array) {
    if !x.dtype().is_int() {
        panic!("{layer} expects integer {many}, but got {one} of dtype {} (shape {:?})", x.dtype(), x.shape());
    }
}

/// `a` and `b` (named `a_name`, `b_name`) must have the same shape.
#[track_caller]
pub(crate) fn same_shape(layer: &str, (a_name, a): (&str, &Array), (b_name, b): (&str, &Array)) {
    if a.shape() != b.shape() {
        panic!(
            "{layer} expects {a_name} and {b_name} of the same shape, but got {a_name} of shape {:?} and {b_name} of \
             shape {:?}",
            a.shape(),
            b.shape()
        );
    }
}

/// `axis` must name an axis of `x`.
#[track_caller]
pub(crate) fn axis(layer: &str, noun: Noun, x: &Array, axis: isize) {
    rank_at_least(layer, noun, x, 1);
    let one = noun.1;
    let n = x.ndim() as isize;
    if !(-n..n).contains(&axis) {
        panic!("{layer} expects an axis in {}..{n}, but got axis {axis} for {one} of shape {:?}", -n, x.shape());
    }
}
