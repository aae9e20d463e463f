//! Structured inputs and outputs for transforms: any container of arrays that flattens to a
//! fixed sequence of leaves and rebuilds the same structure from new leaves.
//!
//! [`ArrayTree`] is implemented for [`Array`], `Vec<T>`, `[T; N]`, `Box<T>`, `Option<T>`,
//! `BTreeMap<K, T>` (in key order) and tuples of up to four items (and `()`, a tree with no
//! leaves), where `T` is itself an `ArrayTree`; so a `BTreeMap<String, (Array, Vec<Array>)>` is
//! one. The tree-aware transforms [`grad_tree`](crate::grad_tree),
//! [`value_and_grad_tree`](crate::value_and_grad_tree) and [`vmap_tree`](crate::vmap_tree)
//! take and return such structures, so parameters are named, not numbered.
//!
//! # Your own struct
//!
//! Name the fields once in each direction, in the same order:
//!
//! ```
//! use cotangent::{self as ct, Array, ArrayTree};
//!
//! struct Linear {
//!     weight: Array,
//!     bias: Option<Array>,
//! }
//!
//! impl ArrayTree for Linear {
//!     fn push_leaves(&self, leaves: &mut Vec<Array>) {
//!         self.weight.push_leaves(leaves);
//!         self.bias.push_leaves(leaves);
//!     }
//!     fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> ct::Result<Self> {
//!         Ok(Linear { weight: self.weight.rebuild(leaves)?, bias: self.bias.rebuild(leaves)? })
//!     }
//! }
//!
//! let layer = Linear { weight: Array::from_slice(&[1.0f64, 2.0], &[2]), bias: Some(Array::scalar(0.5f64)) };
//! let loss = |p: &Linear, x: &Array| {
//!     let y = (&p.weight * x).sum_all();
//!     match &p.bias {
//!         Some(b) => y + b,
//!         None => y,
//!     }
//! };
//! let grads = ct::grad_tree(loss)(&layer, &Array::from_slice(&[3.0f64, 4.0], &[2]))?;
//! assert_eq!(grads.weight.to_vec::<f64>()?, vec![3.0, 4.0]); // d/dw = x
//! assert_eq!(grads.bias.unwrap().item::<f64>()?, 1.0);
//! # Ok::<(), ct::Error>(())
//! ```
use crate::{Array, Error, Result};
use std::collections::BTreeMap;

/// A structure of arrays that transforms can flatten to leaves and rebuild.
///
/// [`push_leaves`](ArrayTree::push_leaves) lists the arrays in a fixed order;
/// [`rebuild`](ArrayTree::rebuild) makes a value of the same structure as `self` (the same
/// vector lengths, the same map keys, the same `Some`/`None`) whose arrays are taken, in that
/// order, from an iterator. Transforms use `self` only as the template of the structure: the
/// gradients of a `BTreeMap` of parameters are a `BTreeMap` with the same keys.
///
/// ```
/// use cotangent::{Array, ArrayTree};
/// use std::collections::BTreeMap;
/// let params = BTreeMap::from([
///     ("b".to_string(), vec![Array::scalar(2.0f32)]),
///     ("a".to_string(), vec![Array::scalar(0.0f32), Array::scalar(1.0f32)]),
/// ]);
/// let leaves = params.leaves(); // key order: a's two arrays, then b's
/// assert_eq!(leaves.len(), 3);
/// let doubled = params.with_leaves(leaves.iter().map(|x| x * 2.0).collect())?;
/// assert_eq!(doubled["b"][0].item::<f32>()?, 4.0);
/// assert!(params.with_leaves(leaves[..2].to_vec()).is_err()); // wrong number of leaves
/// # Ok::<(), cotangent::Error>(())
/// ```
pub trait ArrayTree: Sized {
    /// Append this structure's arrays to `leaves`, in the order [`rebuild`](ArrayTree::rebuild)
    /// takes them back.
    ///
    /// ```
    /// use cotangent::{Array, ArrayTree};
    /// let mut leaves = Vec::new();
    /// (Array::scalar(1.0f32), Some(Array::scalar(2.0f32))).push_leaves(&mut leaves);
    /// assert_eq!(leaves.len(), 2);
    /// ```
    fn push_leaves(&self, leaves: &mut Vec<Array>);

    /// A value of the same structure as `self` whose arrays are the next ones from `leaves`.
    /// Errs if `leaves` runs out.
    ///
    /// ```
    /// use cotangent::{Array, ArrayTree};
    /// let template = [Array::scalar(0.0f32), Array::scalar(0.0f32)];
    /// let mut source = vec![Array::scalar(5.0f32), Array::scalar(6.0f32)].into_iter();
    /// let rebuilt = template.rebuild(&mut source)?;
    /// assert_eq!(rebuilt[1].item::<f32>()?, 6.0);
    /// assert!(template.rebuild(&mut source).is_err()); // nothing left
    /// # Ok::<(), cotangent::Error>(())
    /// ```
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self>;

    /// The arrays of this structure, in order.
    ///
    /// ```
    /// use cotangent::{Array, ArrayTree};
    /// let t = (Array::scalar(1.0f32), vec![Array::scalar(2.0f32), Array::scalar(3.0f32)]);
    /// let values: Vec<f32> = t.leaves().iter().map(|a| a.item::<f32>().unwrap()).collect();
    /// assert_eq!(values, [1.0, 2.0, 3.0]);
    /// ```
    fn leaves(&self) -> Vec<Array> {
        let mut leaves = Vec::new();
        self.push_leaves(&mut leaves);
        leaves
    }

    /// A value of the same structure as `self` holding `leaves`, in order. Errs, naming the
    /// type and both counts, unless `leaves` has exactly as many arrays as `self`.
    ///
    /// ```
    /// use cotangent::{Array, ArrayTree};
    /// let t = (Array::scalar(1.0f32), Array::scalar(2.0f32));
    /// let (a, b) = t.with_leaves(vec![Array::scalar(3.0f32), Array::scalar(4.0f32)])?;
    /// assert_eq!((a.item::<f32>()?, b.item::<f32>()?), (3.0, 4.0));
    /// let err = t.with_leaves(vec![Array::scalar(3.0f32)]).unwrap_err();
    /// assert!(err.to_string().contains("1 arrays given for a structure of 2"), "{err}");
    /// # Ok::<(), cotangent::Error>(())
    /// ```
    fn with_leaves(&self, leaves: Vec<Array>) -> Result<Self> {
        let expected = self.leaves().len();
        let mismatch = |given: usize| {
            Error::Transform(format!(
                "array tree: {given} arrays given for a structure of {expected} leaves (`{}`)",
                std::any::type_name::<Self>()
            ))
        };
        if leaves.len() != expected {
            return Err(mismatch(leaves.len()));
        }
        let mut source = leaves.into_iter();
        let rebuilt = self.rebuild(&mut source)?;
        // `push_leaves` and `rebuild` of a user's type may disagree: never drop arrays silently
        let left = source.len();
        if left != 0 {
            return Err(Error::Transform(format!(
                "array tree: `{}` lists {expected} leaves but its rebuild took only {}",
                std::any::type_name::<Self>(),
                expected - left
            )));
        }
        Ok(rebuilt)
    }
}

impl ArrayTree for Array {
    fn push_leaves(&self, leaves: &mut Vec<Array>) {
        leaves.push(self.clone());
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        leaves.next().ok_or_else(|| {
            Error::Transform(
                "array tree: the leaves ran out while rebuilding a structure (too few arrays given)".into(),
            )
        })
    }
}

impl<T: ArrayTree> ArrayTree for Vec<T> {
    fn push_leaves(&self, leaves: &mut Vec<Array>) {
        self.iter().for_each(|item| item.push_leaves(leaves));
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        self.iter().map(|item| item.rebuild(leaves)).collect()
    }
}

impl<T: ArrayTree, const N: usize> ArrayTree for [T; N] {
    fn push_leaves(&self, leaves: &mut Vec<Array>) {
        self.iter().for_each(|item| item.push_leaves(leaves));
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        let items = self.iter().map(|item| item.rebuild(leaves)).collect::<Result<Vec<T>>>()?;
        Ok(items.try_into().unwrap_or_else(|_: Vec<T>| unreachable!("one item is rebuilt per item of the array")))
    }
}

impl<T: ArrayTree> ArrayTree for Box<T> {
    fn push_leaves(&self, leaves: &mut Vec<Array>) {
        (**self).push_leaves(leaves);
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        (**self).rebuild(leaves).map(Box::new)
    }
}

impl<T: ArrayTree> ArrayTree for Option<T> {
    fn push_leaves(&self, leaves: &mut Vec<Array>) {
        if let Some(item) = self {
            item.push_leaves(leaves);
        }
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        self.as_ref().map(|item| item.rebuild(leaves)).transpose()
    }
}

impl<K: Ord + Clone, T: ArrayTree> ArrayTree for BTreeMap<K, T> {
    fn push_leaves(&self, leaves: &mut Vec<Array>) {
        self.values().for_each(|item| item.push_leaves(leaves));
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        self.iter().map(|(key, item)| Ok((key.clone(), item.rebuild(leaves)?))).collect()
    }
}

/// `ArrayTree` for a tuple whose items are `ArrayTree`s: the items' leaves in item order.
macro_rules! tuple_array_tree {
    ($($item:ident $value:ident),*) => {
        #[allow(unused_variables, clippy::unused_unit)]
        impl<$($item: ArrayTree),*> ArrayTree for ($($item,)*) {
            fn push_leaves(&self, leaves: &mut Vec<Array>) {
                let ($($value,)*) = self;
                $($value.push_leaves(leaves);)*
            }

            fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
                let ($($value,)*) = self;
                Ok(($($value.rebuild(leaves)?,)*))
            }
        }
    };
}

tuple_array_tree!();
tuple_array_tree!(A a);
tuple_array_tree!(A a, B b);
tuple_array_tree!(A a, B b, C c);
tuple_array_tree!(A a, B b, C c, D d);

/// What a function transformed by [`vmap_tree`](crate::vmap_tree) may return: an
/// [`ArrayTree`], or a `Result` of one.
///
/// ```
/// use cotangent::{Array, IntoTree};
/// let out = Ok::<_, cotangent::Error>((Array::scalar(1.0f32), vec![Array::scalar(2.0f32)]));
/// let (first, rest) = out.into_tree()?;
/// assert_eq!((first.item::<f32>()?, rest.len()), (1.0, 1));
/// # Ok::<(), cotangent::Error>(())
/// ```
pub trait IntoTree {
    /// The structure returned.
    type Tree: ArrayTree;

    /// The structure, or the function's error.
    fn into_tree(self) -> Result<Self::Tree>;
}

impl<T: ArrayTree> IntoTree for T {
    type Tree = T;

    fn into_tree(self) -> Result<T> {
        Ok(self)
    }
}

impl<T: ArrayTree> IntoTree for Result<T> {
    type Tree = T;

    fn into_tree(self) -> Result<T> {
        self
    }
}
