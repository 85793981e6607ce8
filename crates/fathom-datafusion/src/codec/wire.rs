//! The wire messages of `FathomPhysicalCodec` (protobuf, declared here
//! rather than in a .proto: they are private to the codec).

use datafusion_proto::protobuf::{PhysicalExprNode, Schema};

#[derive(Clone, PartialEq, prost::Message)]
pub struct Node {
    #[prost(oneof = "node::Kind", tags = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10")]
    pub kind: Option<node::Kind>,
}
pub mod node {
    #[derive(Clone, PartialEq, prost::Oneof)]
    // Decoded once per node: the size of the largest variant does not matter.
    #[allow(clippy::large_enum_variant)]
    pub enum Kind {
        #[prost(message, tag = "1")]
        Scan(super::FragmentScan),
        #[prost(message, tag = "2")]
        Index(super::ScalarIndex),
        #[prost(message, tag = "3")]
        Exclusion(super::Exclusion),
        #[prost(message, tag = "4")]
        Take(super::Take),
        #[prost(message, tag = "5")]
        Dml(super::Dml),
        #[prost(message, tag = "6")]
        Count(super::IndexCount),
        #[prost(message, tag = "7")]
        Knn(super::Knn),
        #[prost(message, tag = "8")]
        Fts(super::Fts),
        #[prost(message, tag = "9")]
        Overlaid(super::OverlaidRows),
        #[prost(message, tag = "10")]
        CountUnion(super::CountUnion),
    }
}

/// `CountUnionExec`: its branches are its inputs.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CountUnion {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Dataset {
    #[prost(string, tag = "1")]
    pub uri: String,
    #[prost(bytes = "vec", tag = "2")]
    pub manifest: Vec<u8>,
    #[prost(bool, tag = "3")]
    pub v1_names: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Projection {
    #[prost(uint32, repeated, tag = "1")]
    pub fields: Vec<u32>,
    #[prost(bool, tag = "2")]
    pub with_row_id: bool,
    #[prost(bool, tag = "3")]
    pub with_row_addr: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ScanUnit {
    #[prost(uint64, tag = "1")]
    pub fragment: u64,
    #[prost(uint64, tag = "2")]
    pub start: u64,
    #[prost(uint64, tag = "3")]
    pub end: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Partition {
    #[prost(message, repeated, tag = "1")]
    pub units: Vec<ScanUnit>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct FragmentScan {
    #[prost(message, optional, tag = "1")]
    pub dataset: Option<Dataset>,
    #[prost(message, repeated, tag = "2")]
    pub partitions: Vec<Partition>,
    #[prost(message, optional, tag = "3")]
    pub read: Option<Projection>,
    #[prost(uint32, repeated, tag = "4")]
    pub output: Vec<u32>,
    #[prost(message, optional, tag = "5")]
    pub filter: Option<PhysicalExprNode>,
    #[prost(message, optional, tag = "6")]
    pub prefilter_read: Option<Projection>,
    #[prost(message, optional, tag = "7")]
    pub prefilter: Option<PhysicalExprNode>,
    /// The pruning predicate's source expression (over the dataset's columns).
    #[prost(message, optional, tag = "8")]
    pub pruning: Option<PhysicalExprNode>,
    #[prost(uint64, optional, tag = "9")]
    pub limit: Option<u64>,
    #[prost(message, optional, tag = "10")]
    pub schema: Option<Schema>,
    #[prost(uint64, tag = "11")]
    pub batch_size: u64,
    #[prost(uint64, tag = "12")]
    pub skipped_segments: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ScalarIndex {
    #[prost(message, optional, tag = "1")]
    pub dataset: Option<Dataset>,
    #[prost(message, optional, tag = "2")]
    pub expr: Option<IndexExpr>,
    /// 0 exact, 1 at most, 2 at least.
    #[prost(uint32, tag = "3")]
    pub planned: u32,
    #[prost(uint64, tag = "4")]
    pub batch_size: u64,
    #[prost(uint64, tag = "5")]
    pub skipped_segments: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct IndexExpr {
    #[prost(oneof = "index_expr::Kind", tags = "1, 2, 3")]
    pub kind: Option<index_expr::Kind>,
}
pub mod index_expr {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Kind {
        #[prost(message, tag = "1")]
        Query(super::IndexQuery),
        #[prost(message, tag = "2")]
        And(Box<super::Pair>),
        #[prost(message, tag = "3")]
        Or(Box<super::Pair>),
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Pair {
    #[prost(message, optional, boxed, tag = "1")]
    pub left: Option<Box<IndexExpr>>,
    #[prost(message, optional, boxed, tag = "2")]
    pub right: Option<Box<IndexExpr>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct IndexQuery {
    #[prost(string, tag = "1")]
    pub index: String,
    #[prost(string, tag = "2")]
    pub column: String,
    /// The kind's registry name (`IndexKind::parse`).
    #[prost(string, tag = "3")]
    pub kind: String,
    /// 0 equals, 1 in, 2 is null, 3 range.
    #[prost(uint32, tag = "4")]
    pub op: u32,
    /// Equals / IN values, as an Arrow IPC stream of one column.
    #[prost(bytes = "vec", tag = "5")]
    pub values: Vec<u8>,
    #[prost(message, optional, tag = "6")]
    pub lower: Option<Bound>,
    #[prost(message, optional, tag = "7")]
    pub upper: Option<Bound>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Bound {
    #[prost(bool, tag = "1")]
    pub inclusive: bool,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Exclusion {
    #[prost(message, optional, tag = "1")]
    pub dataset: Option<Dataset>,
    #[prost(message, repeated, tag = "2")]
    pub sources: Vec<ExclusionSource>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct IndexCount {
    #[prost(message, optional, tag = "1")]
    pub dataset: Option<Dataset>,
    /// Absent: every row.
    #[prost(message, optional, tag = "2")]
    pub expr: Option<IndexExpr>,
    #[prost(uint32, tag = "3")]
    pub planned: u32,
    #[prost(message, repeated, tag = "4")]
    pub sources: Vec<ExclusionSource>,
    #[prost(message, optional, tag = "5")]
    pub recheck_read: Option<Projection>,
    #[prost(message, optional, tag = "6")]
    pub recheck: Option<PhysicalExprNode>,
    #[prost(string, optional, tag = "7")]
    pub group_index: Option<String>,
    #[prost(uint64, tag = "8")]
    pub batch_size: u64,
    #[prost(message, optional, tag = "9")]
    pub schema: Option<Schema>,
    #[prost(bool, tag = "10")]
    pub residual: bool,
    /// Instead of `expr`: these rows (a serialized `RoaringTreemap` of
    /// addresses), each rechecked.
    #[prost(bytes = "vec", optional, tag = "11")]
    pub rows: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExclusionSource {
    /// Deleted rows when true; else the rows in `rows` when set; else
    /// fragments outside `fragments`.
    #[prost(bool, tag = "1")]
    pub deleted_rows: bool,
    #[prost(uint64, repeated, tag = "2")]
    pub fragments: Vec<u64>,
    /// Overlaid rows: a serialized `RoaringTreemap` of addresses.
    #[prost(bytes = "vec", optional, tag = "3")]
    pub rows: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct OverlaidRows {
    /// A serialized `RoaringTreemap` of addresses.
    #[prost(bytes = "vec", tag = "1")]
    pub rows: Vec<u8>,
    #[prost(uint64, tag = "2")]
    pub batch_size: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Take {
    #[prost(message, optional, tag = "1")]
    pub dataset: Option<Dataset>,
    #[prost(message, optional, tag = "2")]
    pub read: Option<Projection>,
    #[prost(uint64, optional, tag = "3")]
    pub limit: Option<u64>,
    #[prost(message, optional, tag = "4")]
    pub recheck: Option<PhysicalExprNode>,
    #[prost(bool, tag = "5")]
    pub has_keep: bool,
    #[prost(uint32, repeated, tag = "6")]
    pub keep: Vec<u32>,
    /// Absent: true.
    #[prost(bool, optional, tag = "7")]
    pub residual: Option<bool>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Dml {
    #[prost(message, optional, tag = "1")]
    pub dataset: Option<Dataset>,
    #[prost(bool, tag = "2")]
    pub pinned: bool,
    /// 0 append, 1 overwrite, 2 delete, 3 update. The version is the one
    /// a delete or update was planned on.
    #[prost(uint32, tag = "3")]
    pub op: u32,
    // Tags 4 and 5 (the columns read and the filter) are retired: a
    // DELETE or UPDATE has its planned scan as input.
    /// Per table column (update): its new value (over the input's
    /// columns), if assigned.
    #[prost(message, repeated, tag = "6")]
    pub assignments: Vec<Assignment>,
    /// Update strategy: 0 auto, 1 rows, 2 columns, 3 overlay.
    #[prost(uint32, tag = "7")]
    pub update_mode: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Assignment {
    #[prost(message, optional, tag = "1")]
    pub value: Option<PhysicalExprNode>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct KnnSegment {
    /// The segment's uuid (its metadata is in the dataset's manifest).
    #[prost(string, tag = "1")]
    pub uuid: String,
    /// Fragments assigned to it (portable roaring).
    #[prost(bytes = "vec", tag = "2")]
    pub fragments: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Knn {
    #[prost(message, optional, tag = "1")]
    pub dataset: Option<Dataset>,
    #[prost(uint32, tag = "2")]
    pub column: u32,
    #[prost(string, tag = "3")]
    pub column_name: String,
    #[prost(float, repeated, tag = "4")]
    pub query: Vec<f32>,
    #[prost(string, tag = "5")]
    pub metric: String,
    #[prost(uint64, tag = "6")]
    pub k: u64,
    #[prost(uint64, tag = "7")]
    pub nprobes: u64,
    #[prost(uint64, tag = "8")]
    pub refine_factor: u64,
    #[prost(string, optional, tag = "9")]
    pub index: Option<String>,
    #[prost(message, repeated, tag = "10")]
    pub segments: Vec<KnnSegment>,
    #[prost(message, optional, tag = "11")]
    pub read: Option<Projection>,
    #[prost(uint32, repeated, tag = "12")]
    pub output: Vec<u32>,
    #[prost(bool, tag = "13")]
    pub has_prefilter: bool,
    #[prost(bool, tag = "14")]
    pub has_flat: bool,
    #[prost(message, optional, tag = "15")]
    pub schema: Option<Schema>,
    #[prost(uint64, tag = "16")]
    pub ef: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct FtsField {
    #[prost(uint32, tag = "1")]
    pub column: u32,
    #[prost(string, tag = "2")]
    pub column_name: String,
    #[prost(float, tag = "3")]
    pub boost: f32,
    #[prost(string, optional, tag = "4")]
    pub index: Option<String>,
    #[prost(message, repeated, tag = "5")]
    pub segments: Vec<KnnSegment>,
    /// Whether the node has a flat input for this field (inputs: the
    /// prefilter if any, then the fields' flat inputs in order).
    #[prost(bool, tag = "6")]
    pub has_flat: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Fts {
    #[prost(message, optional, tag = "1")]
    pub dataset: Option<Dataset>,
    #[prost(message, repeated, tag = "2")]
    pub fields: Vec<FtsField>,
    #[prost(string, tag = "4")]
    pub query: String,
    /// "OR", "AND" or "PHRASE".
    #[prost(string, tag = "5")]
    pub op: String,
    #[prost(uint64, optional, tag = "6")]
    pub k: Option<u64>,
    #[prost(message, optional, tag = "9")]
    pub read: Option<Projection>,
    /// Per output column, its position among the columns read
    /// (u32::MAX: the score).
    #[prost(uint32, repeated, tag = "10")]
    pub output: Vec<u32>,
    #[prost(bool, tag = "11")]
    pub has_prefilter: bool,
    #[prost(message, optional, tag = "13")]
    pub schema: Option<Schema>,
    /// Fuzzy terms: most expansions (absent: Lance's 50).
    #[prost(uint64, optional, tag = "14")]
    pub max_expansions: Option<u64>,
    #[prost(uint64, tag = "15")]
    pub prefix_length: u64,
}
