//! In-place column updates (Lance's `UpdateMode::RewriteColumns`).
//!
//! Rows stay where they are: for each fragment holding an updated row, the
//! updated columns are read whole, the new values put in at the updated
//! offsets, and the columns written to one new data file of the fragment.
//! The old columns' field ids are tombstoned (`-2`) in the fragment's older
//! data files (a file left with nothing but tombstones is dropped), and in
//! the same commit every index segment keyed on or carrying one of the
//! columns stops covering those fragments: they are scanned flat until an
//! index is extended over them again. Row ids, row addresses, deletion
//! files and every other column are untouched, so segments on other
//! columns keep covering the fragments.
//!
//! [`Dataset::update_rows_with`] is the other strategy (Lance's
//! `RewriteRows`): the updated rows are deleted where they are and written
//! whole to new fragments (keeping their stable row ids). Segments keep
//! covering the old fragments (the moved rows are deleted there) and the
//! new fragments are scanned flat. [`Dataset::cheaper_update`] picks one by
//! the bytes each would write: rewriting the columns writes every physical
//! row of the touched fragments, but only the set columns; moving rows
//! writes only the updated rows, but every column (bytes per row measured
//! from the touched fragments' data files). Columns win when many rows of
//! a fragment change or the table is wide.

use std::collections::BTreeMap;

use arrow_array::{Array, RecordBatch};
use fathom_file::{LanceField, LanceSchema};

use crate::compact::ProgressFn;
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::format::{DataFile, Fragment};
use crate::scan::{Projection, Rows};
use crate::transaction::{Operation, UpdateMode};
use crate::write::{FragmentWriter, WriteParams, conform_batch};

fn subtree_ids(f: &LanceField, out: &mut Vec<i32>) {
    out.push(f.id);
    f.children.iter().for_each(|c| subtree_ids(c, out));
}

/// A fragment and, sorted by offset, its `(offset, position)` pairs.
pub(crate) type FragmentCells<'a> = (&'a Fragment, Vec<(u32, usize)>);

impl Dataset {
    /// `addresses` grouped by fragment (in fragment id order): each
    /// fragment with its `(offset, position in addresses)` pairs, sorted
    /// by offset. An address outside this version or given twice is an
    /// error naming it.
    pub(crate) fn cells_by_fragment(&self, addresses: &[u64]) -> Result<Vec<FragmentCells<'_>>> {
        let mut by_fragment: BTreeMap<u64, Vec<(u32, usize)>> = BTreeMap::new();
        for (row, &a) in addresses.iter().enumerate() {
            by_fragment
                .entry(a >> 32)
                .or_default()
                .push((a as u32, row));
        }
        let mut out = Vec::with_capacity(by_fragment.len());
        for (frag_id, mut cells) in by_fragment {
            let frag = self.fragment(frag_id).ok_or_else(|| {
                Error::invalid(format!(
                    "row address {}: fragment {frag_id} is not in version {}",
                    frag_id << 32,
                    self.version()
                ))
            })?;
            cells.sort_unstable();
            if let Some(w) = cells.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(Error::invalid(format!(
                    "row address {} is updated twice",
                    (frag_id << 32) | w[0].0 as u64
                )));
            }
            if let Some(&(o, _)) = cells.last()
                && o as u64 >= frag.physical_rows
            {
                return Err(Error::invalid(format!(
                    "row address {}: offset {o} beyond the {} rows of fragment {frag_id}",
                    (frag_id << 32) | o as u64,
                    frag.physical_rows
                )));
            }
            out.push((frag, cells));
        }
        Ok(out)
    }

    /// The update strategy that writes fewer bytes for setting `values`
    /// (columns of the table) at `addresses` (see the module documentation).
    pub fn cheaper_update(&self, addresses: &[u64], values: &RecordBatch) -> UpdateMode {
        let mut touched: Vec<u64> = addresses.iter().map(|a| a >> 32).collect();
        touched.sort_unstable();
        touched.dedup();
        let (mut rows, mut bytes) = (0u64, 0u64);
        for f in touched.iter().filter_map(|&id| self.fragment(id)) {
            rows += f.physical_rows;
            bytes += f.files.iter().map(|d| d.file_size_bytes).sum::<u64>();
        }
        if rows == 0 || addresses.is_empty() {
            return UpdateMode::RewriteRows;
        }
        let per_row = bytes as f64 / rows as f64;
        let per_value = values.get_array_memory_size() as f64 / addresses.len() as f64;
        let columns_cost = rows as f64 * per_value;
        let rows_cost = addresses.len() as f64 * per_row;
        if columns_cost <= rows_cost {
            UpdateMode::RewriteColumns
        } else {
            UpdateMode::RewriteRows
        }
    }

    /// Sets `columns` of the rows at `addresses` to `values` (as
    /// [`Dataset::update_columns`]) by moving the rows: they are deleted
    /// where they are and written whole, with the new values, to new
    /// fragments (stable row ids kept); one commit.
    pub async fn update_rows_with(
        &self,
        columns: &[&str],
        addresses: &[u64],
        values: &RecordBatch,
    ) -> Result<Self> {
        if addresses.len() != values.num_rows() || columns.len() != values.num_columns() {
            return Err(Error::invalid(format!(
                "{} addresses and {} columns, but new values of {} rows and {} columns",
                addresses.len(),
                columns.len(),
                values.num_rows(),
                values.num_columns()
            )));
        }
        if addresses.is_empty() {
            return Ok(self.clone());
        }
        let schema = self.schema().clone();
        let mut set = Vec::with_capacity(columns.len());
        for name in columns {
            set.push(schema.index_of(name).map_err(|_| {
                Error::invalid(format!("'{name}' is not a column of {}", self.uri()))
            })?);
        }
        let stable = self.manifest().uses_stable_row_ids();
        let projection = Projection {
            fields: (0..schema.fields().len()).collect(),
            with_row_id: stable,
            with_row_addr: false,
        };
        let mut writer = self.fragment_writer(WriteParams::default())?;
        let mut row_ids: Vec<u64> = Vec::new();
        const CHUNK: usize = 8192;
        for start in (0..addresses.len()).step_by(CHUNK) {
            let end = (start + CHUNK).min(addresses.len());
            let old = self
                .take_addresses(&addresses[start..end], &projection)
                .await?;
            if old.num_rows() != end - start {
                return Err(Error::invalid(format!(
                    "{} of the rows to update are deleted",
                    end - start - old.num_rows()
                )));
            }
            let mut cols = old.columns()[..schema.fields().len()].to_vec();
            for (k, &i) in set.iter().enumerate() {
                let v = values.column(k).slice(start, end - start);
                cols[i] = if v.data_type() == schema.field(i).data_type() {
                    v
                } else {
                    arrow_cast::cast(&v, schema.field(i).data_type())?
                };
            }
            if stable {
                let ids = old.column(schema.fields().len());
                let ids = ids
                    .as_any()
                    .downcast_ref::<arrow_array::UInt64Array>()
                    .ok_or_else(|| Error::invalid("row ids are not UInt64"))?;
                row_ids.extend(ids.values().iter().copied());
            }
            let batch = RecordBatch::try_new(schema.clone(), cols)
                .map_err(|e| Error::invalid(format!("updated rows do not fit the table: {e}")))?;
            writer.write(&batch).await?;
        }
        let mut new = writer.finish().await?;
        if stable {
            let mut start = 0usize;
            for f in &mut new {
                let end = start + f.physical_rows as usize;
                let seq = crate::rowids::RowIdSequence::from_ids(&row_ids[start..end]);
                f.row_id_meta = Some(crate::format::RowIdMeta::Inline(seq.encode()));
                start = end;
            }
        }
        self.update_rows(addresses, new).await
    }

    /// Sets `columns` (top-level columns, by name) of the rows at
    /// `addresses` to the values in `values` (one row per address, one
    /// column per name, in order), rewriting those columns of the touched
    /// fragments in place; one commit. See the module documentation.
    pub async fn update_columns(
        &self,
        columns: &[&str],
        addresses: &[u64],
        values: &RecordBatch,
        progress: Option<&ProgressFn>,
    ) -> Result<Self> {
        let (positions, part) = self.columns_to_set(columns, addresses, values)?;
        let part_arrow = std::sync::Arc::new(part.to_arrow()?);
        let values = conform_batch(&part_arrow, values)?;
        let mut modified = Vec::new();
        part.fields
            .iter()
            .for_each(|f| subtree_ids(f, &mut modified));

        let projection = Projection {
            fields: positions,
            with_row_id: false,
            with_row_addr: false,
        };
        let cells_by_fragment = self.cells_by_fragment(addresses)?;
        let total = cells_by_fragment.len() as u64;
        let mut updated = Vec::with_capacity(cells_by_fragment.len());
        for (done, (frag, cells)) in cells_by_fragment.into_iter().enumerate() {
            updated.push(
                self.rewrite_fragment_columns(frag, &projection, &part, &modified, &values, &cells)
                    .await?,
            );
            if let Some(p) = progress {
                p("updating columns", done as u64 + 1, total);
            }
        }
        if updated.is_empty() {
            return Ok(self.clone());
        }
        self.commit(Operation::Update {
            removed_ids: vec![],
            updated,
            new: vec![],
            fields_modified: modified.iter().map(|&i| i as u32).collect(),
            mode: UpdateMode::RewriteColumns,
        })
        .await
    }

    /// The top-level columns `columns` name (positions in the schema, and
    /// a schema of just them) for an update setting them at `addresses`
    /// to `values`: an unknown or repeated column, or a row count that
    /// differs from the address count, is an error naming it.
    pub(crate) fn columns_to_set(
        &self,
        columns: &[&str],
        addresses: &[u64],
        values: &RecordBatch,
    ) -> Result<(Vec<usize>, LanceSchema)> {
        if addresses.len() != values.num_rows() {
            return Err(Error::invalid(format!(
                "{} addresses but {} rows of new values",
                addresses.len(),
                values.num_rows()
            )));
        }
        let schema = &self.manifest().schema;
        let mut positions = Vec::with_capacity(columns.len());
        for name in columns {
            let i = schema
                .fields
                .iter()
                .position(|f| f.name == *name)
                .ok_or_else(|| {
                    Error::invalid(format!("'{name}' is not a column of {}", self.uri()))
                })?;
            if positions.contains(&i) {
                return Err(Error::invalid(format!("column '{name}' is set twice")));
            }
            positions.push(i);
        }
        let part = LanceSchema {
            fields: positions
                .iter()
                .map(|&i| schema.fields[i].clone())
                .collect(),
            metadata: schema.metadata.clone(),
        };
        Ok((positions, part))
    }

    /// Writes `batch` (columns `part`) as one data file of the table's
    /// format and returns it; `what` names the write in an error.
    pub(crate) async fn write_single_file(
        &self,
        part: &LanceSchema,
        batch: &RecordBatch,
        what: impl FnOnce() -> String,
    ) -> Result<DataFile> {
        let params = WriteParams {
            max_rows_per_file: batch.num_rows().max(1),
            ..Default::default()
        };
        let params = crate::dataset::params_for(self.manifest(), self.uri(), params)?;
        let mut w = FragmentWriter::new(
            self.store().clone(),
            self.root().clone(),
            part.clone(),
            params,
        )?;
        w.write(batch).await?;
        let written = w.finish().await?;
        match written.as_slice() {
            [one] if one.files.len() == 1 => Ok(one.files[0].clone()),
            _ => Err(Error::invalid(format!(
                "{} produced {} fragments, not one file",
                what(),
                written.len()
            ))),
        }
    }

    /// `frag` with `part`'s columns rewritten: old values, with
    /// `values[row]` at each `(offset, row)` of `cells`.
    async fn rewrite_fragment_columns(
        &self,
        frag: &Fragment,
        projection: &Projection,
        part: &LanceSchema,
        modified: &[i32],
        values: &RecordBatch,
        cells: &[(u32, usize)],
    ) -> Result<Fragment> {
        let reader = self.fragment_reader(frag, false).await?;
        let n = frag.physical_rows;
        let old = reader.read(projection, Rows::Runs(&[0..n])).await?;
        // Per physical offset: (0, offset) keeps the old value, (1, row)
        // takes the new one.
        let mut picks: Vec<(usize, usize)> = (0..n as usize).map(|o| (0, o)).collect();
        for &(o, row) in cells {
            picks[o as usize] = (1, row);
        }
        let cols = (0..old.num_columns())
            .map(|c| {
                let sources: [&dyn Array; 2] = [old.column(c).as_ref(), values.column(c).as_ref()];
                arrow_select::interleave::interleave(&sources, &picks)
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let batch = RecordBatch::try_new(values.schema(), cols)?;
        let new_file = self
            .write_single_file(part, &batch, || {
                format!("rewriting columns of fragment {}", frag.id)
            })
            .await?;
        let mut f = frag.clone();
        for d in &mut f.files {
            for id in &mut d.fields {
                if modified.contains(id) {
                    *id = -2;
                }
            }
        }
        f.files.push(new_file);
        crate::overlay::drop_fields(&mut f, modified);
        Ok(f)
    }
}
