//! Lance's vector index messages (`lance.index.pb`), field numbers as
//! pylance 14 writes them (research: lance-index-bytes.md sections 1, 2.2).

/// `lance.index.pb.Tensor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Tensor {
    /// BF16 0, F16 1, F32 2, F64 3, U8 4, U16 5, U32 6, U64 7.
    #[prost(int32, tag = "1")]
    pub data_type: i32,
    #[prost(uint32, repeated, tag = "2")]
    pub shape: Vec<u32>,
    #[prost(bytes = "vec", tag = "3")]
    pub data: Vec<u8>,
}

pub const TENSOR_F32: i32 = 2;

/// `lance.index.pb.IVF`: centroids (in `index.idx`) and the partitions'
/// row ranges (in `auxiliary.idx`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Ivf {
    #[prost(float, repeated, tag = "1")]
    pub centroids: Vec<f32>,
    #[prost(uint64, repeated, tag = "2")]
    pub offsets: Vec<u64>,
    #[prost(uint32, repeated, tag = "3")]
    pub lengths: Vec<u32>,
    #[prost(message, optional, tag = "4")]
    pub centroids_tensor: Option<Tensor>,
    #[prost(double, optional, tag = "5")]
    pub loss: Option<f64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PqDetails {
    #[prost(uint32, tag = "1")]
    pub num_bits: u32,
    #[prost(uint32, tag = "2")]
    pub num_sub_vectors: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SqDetails {
    #[prost(uint32, tag = "1")]
    pub num_bits: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HnswDetails {
    #[prost(uint32, tag = "1")]
    pub max_connections: u32,
    #[prost(uint32, tag = "2")]
    pub construction_ef: u32,
    #[prost(uint32, tag = "3")]
    pub max_level: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct FlatDetails {}

/// `lance.index.pb.VectorIndexDetails` (the manifest's `index_details`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct VectorIndexDetails {
    /// L2 0, cosine 1, dot 2.
    #[prost(int32, tag = "1")]
    pub metric_type: i32,
    #[prost(message, optional, tag = "3")]
    pub hnsw_index_config: Option<HnswDetails>,
    #[prost(message, optional, tag = "4")]
    pub pq: Option<PqDetails>,
    #[prost(message, optional, tag = "5")]
    pub sq: Option<SqDetails>,
    #[prost(message, optional, tag = "8")]
    pub flat: Option<FlatDetails>,
    #[prost(map = "string, string", tag = "9")]
    pub runtime_hints: std::collections::HashMap<String, String>,
}

pub const VECTOR_DETAILS_URL: &str = "/lance.index.pb.VectorIndexDetails";
