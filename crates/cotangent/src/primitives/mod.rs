//! The primitives: one file per family, each primitive with its shape inference, CPU kernel and
//! vjp / jvp / vmap rules together.
pub mod binary;
pub mod fused;
pub mod graph;
pub mod index;
pub mod matmul;
pub mod random;
pub mod reduce;
pub mod shape;
pub mod sort;
pub mod unary;
