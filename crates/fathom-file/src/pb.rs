//! Generated protobuf messages. Nothing outside this crate's format layer
//! should need them: the public API speaks in domain types.
#![allow(clippy::all, missing_docs)]

/// `lance.file`: schema and file descriptor.
pub mod file {
    include!(concat!(env!("OUT_DIR"), "/lance.file.rs"));
    /// `lance.file.v2`: column metadata of the container.
    pub mod v2 {
        include!(concat!(env!("OUT_DIR"), "/lance.file.v2.rs"));
    }
}

/// `lance.encodings`: the 2.0 page encodings.
pub mod encodings {
    include!(concat!(env!("OUT_DIR"), "/lance.encodings.rs"));
}

/// `lance.encodings21`: the structural page layouts of 2.1 and 2.2.
pub mod encodings21 {
    include!(concat!(env!("OUT_DIR"), "/lance.encodings21.rs"));
}
