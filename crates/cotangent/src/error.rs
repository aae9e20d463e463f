//! Errors returned by everything that can fail at run time.
use thiserror::Error;

/// The error type of cotangent's fallible operations.
#[derive(Error, Debug, Clone, PartialEq)]
pub enum Error {
    /// Data of one dtype was read as another.
    #[error("dtype mismatch: the array holds {actual} but {requested} was requested")]
    DTypeMismatch {
        /// The dtype that was asked for.
        requested: crate::DType,
        /// The array's dtype.
        actual: crate::DType,
    },
    /// A shape did not fit what an operation needs at run time.
    #[error("shape error: {0}")]
    Shape(String),
    /// A transformation was used in a way it does not support.
    #[error("transform error: {0}")]
    Transform(String),
    /// A user-supplied rule of a custom function returned something invalid.
    #[error("custom function `{name}`, {rule} rule: {message}")]
    CustomRule {
        /// The custom function's name.
        name: String,
        /// Which rule (`vjp`, `jvp`, `vmap`, `forward`).
        rule: &'static str,
        /// What was wrong.
        message: String,
    },
    /// Evaluation failed.
    #[error("evaluation error: {0}")]
    Eval(String),
    /// Reading or writing a file failed.
    #[error("i/o error: {0}")]
    Io(String),
    /// A buffer could not be allocated (the machine has not got the memory, or an allocation
    /// of that size is refused). Returned by evaluation; the failed array keeps reporting it.
    #[error("out of memory: {op} (a {dtype} result of shape {shape:?}) could not allocate a buffer of {bytes} bytes")]
    OutOfMemory {
        /// The op whose kernel failed to allocate.
        op: String,
        /// The shape of the op's result.
        shape: Vec<usize>,
        /// The dtype of the op's result.
        dtype: crate::DType,
        /// The size of the allocation that failed, in bytes.
        bytes: usize,
    },
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// `Result` with cotangent's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e.to_string())
    }
}

/// The op of an [`Error::OutOfMemory`] before [`Error::in_op`] names it.
const UNNAMED_OP: &str = "a kernel";

impl Error {
    /// An [`Error::OutOfMemory`] without its context yet: kernels report only the size that
    /// failed, and the primitive running them adds its name and result with
    /// [`Error::in_op`].
    pub(crate) fn alloc_failed(bytes: usize, dtype: crate::DType) -> Error {
        Error::OutOfMemory { op: UNNAMED_OP.to_string(), shape: Vec::new(), dtype, bytes }
    }

    /// This error with the op's name and result spec filled in, when it is an
    /// [`Error::OutOfMemory`] that has none yet; other errors are returned unchanged.
    pub(crate) fn in_op(self, op: &dyn crate::primitive::Primitive, out: &crate::primitive::Spec) -> Error {
        self.in_named_op(|| op.name().to_string(), &out.shape, out.dtype)
    }

    /// [`Error::in_op`] with the op's name (formatted only when used) and result given apart.
    pub(crate) fn in_named_op(self, op: impl FnOnce() -> String, shape: &[usize], dtype: crate::DType) -> Error {
        match self {
            Error::OutOfMemory { op: name, bytes, .. } if name == UNNAMED_OP => {
                Error::OutOfMemory { op: op(), shape: shape.to_vec(), dtype, bytes }
            }
            e => e,
        }
    }
}
