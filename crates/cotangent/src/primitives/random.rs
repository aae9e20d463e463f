//! Random primitives (in progress).
