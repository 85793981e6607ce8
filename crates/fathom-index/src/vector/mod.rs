//! Vector indexes: IVF_FLAT, IVF_PQ, IVF_SQ and IVF_HNSW_SQ in Lance's layout
//! (`index.idx` with the IVF centroids, `auxiliary.idx` with row ids and
//! codes partition after partition; research: lance-index-bytes.md
//! section 2), built from a streamed column, searched partition by
//! partition with an allow-list.

pub mod build;
pub mod distance;
pub mod hnsw;
pub mod kmeans;
pub mod model;
pub mod nearest;
pub mod pb;
pub mod search;
pub mod segment;

pub use build::{ProgressFn, Training, build_vector_segment, vector_dim};
pub use distance::Metric;
pub use model::{Model, VectorKind, VectorParams};
pub use nearest::{Nearest, Ordered};
pub use search::{SearchOptions, SearchStats};
pub use segment::{VectorSegment, declared, is_vector};
