//! Graph primitives: StopGradient, Depends, CustomTransforms.
