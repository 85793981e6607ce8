//! One error type for the file layer. Every variant that concerns a file
//! names it, so a user can tell which file is damaged and how.

use arrow_schema::ArrowError;

/// Errors from reading or writing a Lance file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bytes do not form a valid file: bad magic, truncation, lengths
    /// that do not add up, offsets out of range.
    #[error("corrupt Lance file {path}: {message}")]
    Corrupt { path: String, message: String },
    /// The file is valid but uses something this reader does not implement.
    #[error("unsupported in Lance file {path}: {message}")]
    Unsupported { path: String, message: String },
    /// The caller passed something wrong (a type we cannot store, an index
    /// out of range, a batch that does not match the schema).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The object store failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: object_store::Error,
    },
    /// Arrow refused to build an array (invalid UTF-8, bad offsets...).
    #[error("arrow error: {0}")]
    Arrow(#[from] ArrowError),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn corrupt(path: impl ToString, message: impl ToString) -> Self {
        Error::Corrupt {
            path: path.to_string(),
            message: message.to_string(),
        }
    }
    pub(crate) fn unsupported(path: impl ToString, message: impl ToString) -> Self {
        Error::Unsupported {
            path: path.to_string(),
            message: message.to_string(),
        }
    }
    pub(crate) fn invalid(message: impl ToString) -> Self {
        Error::InvalidInput(message.to_string())
    }
}
