//! `Scanner`: a scan of one version, as a stream of batches.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};

use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::format::Fragment;
use crate::scan::{Projection, Rows, chunk_runs};

/// Builds a scan of one version.
pub struct Scanner {
    ds: Dataset,
    projection: Projection,
    fragments: Option<Vec<u64>>,
    batch_size: usize,
}

impl Scanner {
    pub(crate) fn new(ds: Dataset) -> Self {
        Scanner {
            projection: Projection::all(&ds.schema),
            ds,
            fragments: None,
            batch_size: 8192,
        }
    }

    /// Columns by name; `_rowid` and `_rowaddr` select the virtual columns.
    pub fn project(mut self, names: &[impl AsRef<str>]) -> Result<Self> {
        self.projection = Projection::from_names(&self.ds.schema, names)?;
        Ok(self)
    }
    pub fn with_projection(mut self, p: Projection) -> Self {
        self.projection = p;
        self
    }
    pub fn with_row_id(mut self) -> Self {
        self.projection.with_row_id = true;
        self
    }
    pub fn with_row_addr(mut self) -> Self {
        self.projection.with_row_addr = true;
        self
    }
    /// Only these fragments (by id, in this order).
    pub fn with_fragments(mut self, ids: Vec<u64>) -> Self {
        self.fragments = Some(ids);
        self
    }
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n.max(1);
        self
    }
    pub fn schema(&self) -> SchemaRef {
        self.projection.schema(&self.ds.schema)
    }

    /// The scan as a stream of batches (deleted rows removed).
    pub async fn try_into_stream(self) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let frags: Vec<Fragment> = match &self.fragments {
            None => self.ds.manifest.fragments.clone(),
            Some(ids) => {
                let by_id: HashMap<u64, &Fragment> = self
                    .ds
                    .manifest
                    .fragments
                    .iter()
                    .map(|f| (f.id, f))
                    .collect();
                ids.iter()
                    .map(|id| {
                        by_id.get(id).map(|f| (*f).clone()).ok_or_else(|| {
                            Error::invalid(format!(
                                "fragment {id} is not in version {}",
                                self.ds.version()
                            ))
                        })
                    })
                    .collect::<Result<_>>()?
            }
        };
        let ds = self.ds.clone();
        let projection = Arc::new(self.projection);
        let batch_size = self.batch_size as u64;
        let s = stream::iter(frags)
            .then(move |f| {
                let ds = ds.clone();
                let projection = projection.clone();
                async move {
                    let reader = ds.fragment_reader(&f, projection.with_row_id).await?;
                    let chunks = chunk_runs(&reader.live_runs(), batch_size);
                    Ok::<_, Error>(stream::iter(chunks).map(move |c| {
                        let reader = reader.clone();
                        let projection = projection.clone();
                        Ok(async move { reader.read(&projection, Rows::Runs(&c)).await })
                    }))
                }
            })
            .try_flatten()
            .try_buffered(2);
        Ok(s.boxed())
    }

    /// Reads the whole scan into one batch.
    pub async fn collect(self) -> Result<RecordBatch> {
        let schema = self.schema();
        let batches: Vec<RecordBatch> = self.try_into_stream().await?.try_collect().await?;
        Ok(arrow_select::concat::concat_batches(&schema, &batches)?)
    }
}
