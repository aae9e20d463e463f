//! cotangent: lazy n-dimensional arrays with composable function transformations.
#![warn(missing_docs)]

pub mod array;
pub mod backend;
pub mod dtype;
pub mod error;
pub(crate) mod graph;
pub mod ops;
pub mod primitive;
pub mod primitives;
pub mod shape;
pub mod transforms;

pub use array::{eval, Array};
pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use ops::*;
pub use shape::Shape;
pub use transforms::*;
