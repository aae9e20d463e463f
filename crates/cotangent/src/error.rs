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
