//! Backends: where arrays live and how primitives are computed.
//!
//! Only the CPU backend exists today. A buffer knows its device ([`Device`]), each primitive
//! evaluates per backend (`Primitive::eval_cpu`), and ops and transforms never look at device
//! memory, so a second backend adds an `eval_<device>` method and a buffer variant and nothing
//! else changes.
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;

/// Where a buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// Host memory.
    Cpu,
}
