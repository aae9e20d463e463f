//! Function transformations.
