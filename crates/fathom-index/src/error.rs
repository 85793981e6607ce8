//! Errors of the index layer.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Table(#[from] fathom_table::Error),
    #[error(transparent)]
    File(#[from] fathom_file::Error),
    #[error("arrow error: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    #[error("invalid index request: {0}")]
    InvalidInput(String),
    #[error("corrupt index {path}: {message}")]
    Corrupt { path: String, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
