//! One error type for the dataset layer; every variant names what is wrong.

use arrow_schema::ArrowError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    File(#[from] fathom_file::Error),
    #[error("dataset not found at {uri}: {message}")]
    NotFound { uri: String, message: String },
    #[error("version {version} of dataset {uri} does not exist")]
    VersionNotFound { uri: String, version: u64 },
    #[error("corrupt dataset file {path}: {message}")]
    Corrupt { path: String, message: String },
    #[error("unsupported dataset {uri}: {message}")]
    Unsupported { uri: String, message: String },
    #[error("commit conflict on {uri}: {message}")]
    Conflict { uri: String, message: String },
    #[error("dataset already exists at {uri}")]
    AlreadyExists { uri: String },
    #[error("invalid input: {0}")]
    InvalidInput(String),
    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: object_store::Error,
    },
    #[error("arrow error: {0}")]
    Arrow(#[from] ArrowError),
    /// An error of the caller's (e.g. of the query producing the rows being
    /// written), carried through unchanged.
    #[error(transparent)]
    External(Box<dyn std::error::Error + Send + Sync>),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn corrupt(path: impl ToString, message: impl ToString) -> Self {
        Error::Corrupt {
            path: path.to_string(),
            message: message.to_string(),
        }
    }
    pub(crate) fn invalid(message: impl ToString) -> Self {
        Error::InvalidInput(message.to_string())
    }
    /// An I/O error on `path` of `store`, the path shown whole (see
    /// [`crate::store::shown`]).
    pub(crate) fn io(
        store: &dyn object_store::ObjectStore,
        path: &object_store::path::Path,
    ) -> impl FnOnce(object_store::Error) -> Self + use<> {
        let path = crate::store::shown(store, path);
        move |source| Error::Io { path, source }
    }
}
