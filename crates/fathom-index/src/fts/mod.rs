//! Full-text search: Lance's inverted index (format 2, as pylance 14
//! writes it; research: lance-index-bytes.md section 3). A segment holds
//! one or more partitions, each a token dictionary (an `fst` map), a docs
//! file (row address and token count of every row with a token) and one
//! posting list per token; `metadata.lance` names the partitions and the
//! analysis parameters. Search is BM25 over corpus statistics the caller
//! gives (so scores do not depend on which fragments are indexed), top-k
//! by block-max WAND.

pub mod analyzer;
pub mod build;
mod cursor;
mod nested;
pub mod posting;
pub mod query;
pub mod search;
pub mod segment;

pub use analyzer::{Analyzer, BaseTokenizer, FtsParams};
pub use build::build_fts_segment;
pub use search::{Corpus, MatchOp, Occur, Query, Scored};
pub use segment::{FtsSegment, is_fts};

/// `lance.table.InvertedIndexDetails` (field numbers as pylance 14 writes
/// them; research: lance-index-bytes.md section 1).
#[derive(Clone, PartialEq, prost::Message)]
pub struct InvertedIndexDetails {
    #[prost(string, optional, tag = "1")]
    pub base_tokenizer: Option<String>,
    /// JSON-quoted, e.g. `"English"` with the quotes.
    #[prost(string, tag = "2")]
    pub language: String,
    #[prost(bool, tag = "3")]
    pub with_position: bool,
    #[prost(uint32, optional, tag = "4")]
    pub max_token_length: Option<u32>,
    #[prost(bool, tag = "5")]
    pub lower_case: bool,
    #[prost(bool, tag = "6")]
    pub stem: bool,
    #[prost(bool, tag = "7")]
    pub remove_stop_words: bool,
    #[prost(bool, tag = "8")]
    pub ascii_folding: bool,
    #[prost(uint32, tag = "9")]
    pub min_ngram_length: u32,
    #[prost(uint32, tag = "10")]
    pub max_ngram_length: u32,
    #[prost(bool, tag = "11")]
    pub prefix_only: bool,
    #[prost(uint32, optional, tag = "12")]
    pub block_size: Option<u32>,
    #[prost(uint32, optional, tag = "15")]
    pub posting_format_version: Option<u32>,
}

/// The manifest type URL of an inverted index segment.
pub const TYPE_URL: &str = "/lance.table.InvertedIndexDetails";
/// Older Lance releases' type URL for the same message.
pub const LEGACY_TYPE_URL: &str = "/lance.index.pb.InvertedIndexDetails";
/// The manifest `index_version` pylance 14 writes for an inverted index.
pub const INDEX_VERSION: i32 = 2;

/// The manifest's `index_details` for `params`.
pub fn details(params: &FtsParams) -> prost_types::Any {
    use prost::Message;
    let (min, max, prefix_only) = match params.base_tokenizer {
        BaseTokenizer::Ngram {
            min,
            max,
            prefix_only,
        } => (min as u32, max as u32, prefix_only),
        _ => (3, 3, false),
    };
    let d = InvertedIndexDetails {
        base_tokenizer: Some(params.base_tokenizer.name().to_string()),
        language: serde_json::Value::from(params.language.as_str()).to_string(),
        with_position: params.with_position,
        max_token_length: params.max_token_length.map(|n| n as u32),
        lower_case: params.lower_case,
        stem: params.stem,
        remove_stop_words: params.remove_stop_words,
        ascii_folding: params.ascii_folding,
        min_ngram_length: min,
        max_ngram_length: max,
        prefix_only,
        block_size: Some(posting::BLOCK as u32),
        posting_format_version: Some(2),
    };
    prost_types::Any {
        type_url: TYPE_URL.into(),
        value: d.encode_to_vec(),
    }
}
