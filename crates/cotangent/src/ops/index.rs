//! (family in progress)
