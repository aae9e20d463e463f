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
    /// A user-supplied rule of a custom function returned something invalid. The message is a
    /// sentence naming the rule, the function and the line that built it, e.g. "the vjp rule of
    /// custom function `f` (built at src/main.rs:7:13) returned 1 array, but the function has 2
    /// inputs (one cotangent per input is expected)".
    #[error("{} of custom function `{name}` (built at {location}) {message}", rule_phrase(.rule))]
    CustomRule {
        /// The custom function's name.
        name: String,
        /// Where the program called `custom_function` (`file:line:column`).
        location: String,
        /// Which rule (`vjp`, `jvp`, `vmap`, `forward`).
        rule: &'static str,
        /// What was wrong.
        message: String,
    },
    /// Evaluation failed. Errors of an op's computation start with the op the program called
    /// and the line that called it, e.g. `take (src/main.rs:14:9): index 10 is out of range for
    /// axis 0 of extent 2 (valid: -2..2)` (the gradient of an op reads `gradient of take (..)`).
    #[error("evaluation error: {0}")]
    Eval(String),
    /// Reading or writing a file failed.
    #[error("i/o error: {0}")]
    Io(String),
    /// A buffer could not be allocated (the machine has not got the memory, or an allocation
    /// of that size is refused). Returned by evaluation; the failed array keeps reporting it.
    #[error(
        "out of memory{}: {op} (a {dtype} result of shape {shape:?}) could not allocate a buffer of {bytes} bytes",
        in_origin(.origin)
    )]
    OutOfMemory {
        /// The primitive whose kernel failed to allocate (`add`, `astype(float64)`,
        /// `take_along_axis[0]`).
        op: String,
        /// The public op and the line that built it (`take (src/main.rs:14:9)`), when known.
        origin: Option<String>,
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

fn in_origin(origin: &Option<String>) -> String {
    origin.as_ref().map_or(String::new(), |o| format!(" in {o}"))
}

/// "the forward" or "the vjp rule" (the subject of a custom-rule error's sentence).
fn rule_phrase(rule: &str) -> String {
    if rule == "forward" {
        "the forward".to_string()
    } else {
        format!("the {rule} rule")
    }
}

/// `Result` with cotangent's [`Error`](enum@Error).
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
        Error::OutOfMemory { op: UNNAMED_OP.to_string(), origin: None, shape: Vec::new(), dtype, bytes }
    }

    /// This error of the kernel of `node` with the node's context added: an
    /// [`Error::OutOfMemory`] without context yet gets the primitive's name, its first
    /// result's spec and the node's origin; an [`Error::Eval`] is prefixed with the public op
    /// and the line that built the node (`take (src/main.rs:14:9): ...`), or the primitive's
    /// name when the node was built outside a public op. Other errors are returned unchanged.
    pub(crate) fn in_node(self, node: &crate::array::Node) -> Error {
        match self {
            Error::Eval(message) => Error::Eval(format!("{}: {message}", node.describe())),
            e => {
                let origin = node.origin.map(|o| o.to_string());
                let out = &node.specs[0];
                let name = || node.primitive().map_or_else(|| node.describe(), |p| p.name().to_string());
                e.in_named_op(name, origin, &out.shape, out.dtype)
            }
        }
    }

    /// When this is an [`Error::OutOfMemory`] without context yet: it with the op's name
    /// (formatted only then), origin and result filled in; other errors are returned unchanged.
    pub(crate) fn in_named_op(
        self,
        op: impl FnOnce() -> String,
        origin: Option<String>,
        shape: &[usize],
        dtype: crate::DType,
    ) -> Error {
        match self {
            Error::OutOfMemory { op: name, bytes, .. } if name == UNNAMED_OP => {
                Error::OutOfMemory { op: op(), origin, shape: shape.to_vec(), dtype, bytes }
            }
            e => e,
        }
    }
}
