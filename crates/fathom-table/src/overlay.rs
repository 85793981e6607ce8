//! Data overlay files (Lance feature flag 64): new values for some cells
//! of a fragment, without rewriting its data files.
//!
//! An overlay is a data file holding one column per field it lists and
//! one row per covered physical offset, in offset order, with a coverage
//! bitmap (shared by every field, or one per field). Readers resolve a
//! cell newest overlay first (higher `committed_version`, then later in
//! the fragment's list), then the base files; a covered NULL is NULL;
//! deletions beat overlays. `committed_version` is the version the commit
//! that attached the overlay created: stamped by `transaction::apply`
//! (so again on every retry).
//!
//! Indexes: an overlay committed after a segment was built (its
//! `committed_version` greater than the segment's `dataset_version`) on a
//! field the segment is keyed on or carries makes the segment stop
//! covering that fragment (whole-fragment exclusion): [`exclude_overlaid`]
//! runs on every manifest read and every commit, so every index path
//! (scalar, counts, vector, full text) scans such fragments flat with
//! their current values, and a segment committed concurrently from an
//! older version is excluded the same way. Compaction rewrites fragments
//! with overlays (folding them into base data).

use arrow_array::{Array, RecordBatch, UInt32Array};
use fathom_file::LanceSchema;
use roaring::RoaringBitmap;

use crate::compact::ProgressFn;
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::format::{DataFile, Fragment, Manifest};
use crate::pb;
use crate::transaction::Operation;
use crate::write::{FragmentWriter, WriteParams, conform_batch};

/// One overlay of a fragment, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Overlay {
    pub file: DataFile,
    /// Offsets covered, per entry of `file.fields` (one shared bitmap
    /// repeated when the overlay is dense).
    pub coverage: Vec<RoaringBitmap>,
    pub committed_version: u64,
}

fn bitmap(bytes: &[u8], what: &str) -> Result<RoaringBitmap> {
    RoaringBitmap::deserialize_from(bytes)
        .map_err(|e| Error::corrupt("manifest", format!("overlay {what} coverage bitmap: {e}")))
}

impl Overlay {
    pub fn decode(p: &pb::DataOverlayFile) -> Result<Self> {
        use pb::data_overlay_file::Coverage;
        let d = p
            .data_file
            .as_ref()
            .ok_or_else(|| Error::corrupt("manifest", "an overlay without a data file"))?;
        let file = DataFile {
            path: d.path.clone(),
            fields: d.fields.clone(),
            column_indices: d.column_indices.clone(),
            file_major_version: d.file_major_version,
            file_minor_version: d.file_minor_version,
            file_size_bytes: d.file_size_bytes,
            base_id: d.base_id,
        };
        let coverage = match &p.coverage {
            Some(Coverage::SharedOffsetBitmap(b)) => {
                let b = bitmap(b, &file.path)?;
                vec![b; file.fields.len()]
            }
            Some(Coverage::FieldCoverage(fc)) => {
                if fc.offset_bitmaps.len() != file.fields.len() {
                    return Err(Error::corrupt(
                        "manifest",
                        format!(
                            "overlay {} has {} coverage bitmaps for {} fields",
                            file.path,
                            fc.offset_bitmaps.len(),
                            file.fields.len()
                        ),
                    ));
                }
                fc.offset_bitmaps
                    .iter()
                    .map(|b| bitmap(b, &file.path))
                    .collect::<Result<_>>()?
            }
            None => {
                return Err(Error::corrupt(
                    "manifest",
                    format!("overlay {} has no coverage", file.path),
                ));
            }
        };
        Ok(Overlay {
            file,
            coverage,
            committed_version: p.committed_version,
        })
    }

    /// The offsets it covers for field `id`, if it holds that field.
    pub fn covers(&self, id: i32) -> Option<&RoaringBitmap> {
        self.file
            .fields
            .iter()
            .position(|f| *f == id)
            .map(|i| &self.coverage[i])
            .filter(|b| !b.is_empty())
    }
}

impl Fragment {
    /// The fragment's overlays, in the order stored.
    pub fn overlays(&self) -> Result<Vec<Overlay>> {
        self.passthrough
            .overlays
            .iter()
            .map(Overlay::decode)
            .collect()
    }

    pub fn has_overlays(&self) -> bool {
        !self.passthrough.overlays.is_empty()
    }
}

/// Takes each fragment out of every segment that an overlay committed
/// after the segment's build changes a field of (see the module
/// documentation). Overlays that fail to decode are left to the reader,
/// which reports them.
pub(crate) fn exclude_overlaid(m: &mut Manifest) {
    if !m.fragments.iter().any(|f| f.has_overlays()) {
        return;
    }
    let overlaid: Vec<(u32, Vec<Overlay>)> = m
        .fragments
        .iter()
        .filter(|f| f.has_overlays())
        .filter_map(|f| Some((f.id as u32, f.overlays().ok()?)))
        .collect();
    for i in &mut m.indices {
        let fields: Vec<i32> = i.fields.iter().chain(&i.covering_fields).copied().collect();
        let since = i.dataset_version;
        let Some(b) = i.fragment_bitmap.as_mut() else {
            continue;
        };
        for (f, overlays) in &overlaid {
            let newer = overlays.iter().any(|o| {
                o.committed_version > since && fields.iter().any(|id| o.covers(*id).is_some())
            });
            if newer {
                b.remove(*f);
            }
        }
    }
}

impl Dataset {
    /// Sets `columns` (top-level, by name) of the rows at `addresses` to
    /// `values` (one row per address, one column per name) by attaching
    /// an overlay to each touched fragment; one commit. Nothing else is
    /// rewritten. Needs readers that implement overlays (feature flag 64;
    /// pylance 14 refuses such datasets).
    pub async fn update_overlay(
        &self,
        columns: &[&str],
        addresses: &[u64],
        values: &RecordBatch,
        progress: Option<&ProgressFn>,
    ) -> Result<Self> {
        if addresses.len() != values.num_rows() {
            return Err(Error::invalid(format!(
                "{} addresses but {} rows of new values",
                addresses.len(),
                values.num_rows()
            )));
        }
        let schema = &self.manifest().schema;
        let mut fields = Vec::with_capacity(columns.len());
        for name in columns {
            let f = schema
                .fields
                .iter()
                .find(|f| f.name == *name)
                .ok_or_else(|| {
                    Error::invalid(format!("'{name}' is not a column of {}", self.uri()))
                })?;
            if !f.children.is_empty() {
                return Err(Error::invalid(format!(
                    "column '{name}' is nested: overlays are written for top-level \
                     primitive columns (rewrite the rows or the column instead)"
                )));
            }
            if fields
                .iter()
                .any(|x: &fathom_file::LanceField| x.id == f.id)
            {
                return Err(Error::invalid(format!("column '{name}' is set twice")));
            }
            fields.push(f.clone());
        }
        let part = LanceSchema {
            fields,
            metadata: schema.metadata.clone(),
        };
        let values = conform_batch(&std::sync::Arc::new(part.to_arrow()?), values)?;
        let cells_by_fragment = self.cells_by_fragment(addresses)?;
        let total = cells_by_fragment.len() as u64;
        let mut groups = Vec::with_capacity(cells_by_fragment.len());
        for (done, (frag, cells)) in cells_by_fragment.into_iter().enumerate() {
            let frag_id = frag.id;
            let coverage: RoaringBitmap = cells.iter().map(|(o, _)| *o).collect();
            let order = UInt32Array::from_iter_values(cells.iter().map(|(_, r)| *r as u32));
            let cols = values
                .columns()
                .iter()
                .map(|c| arrow_select::take::take(c.as_ref(), &order, None))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let batch = RecordBatch::try_new(values.schema(), cols)?;
            let params = WriteParams {
                max_rows_per_file: cells.len().max(1),
                ..Default::default()
            };
            let params = crate::dataset::params_for(self.manifest(), self.uri(), params)?;
            let mut w = FragmentWriter::new(
                self.store().clone(),
                self.root().clone(),
                part.clone(),
                params,
            )?;
            w.write(&batch).await?;
            let written = w.finish().await?;
            let [one] = written.as_slice() else {
                return Err(Error::invalid(format!(
                    "an overlay of fragment {frag_id} produced {} files",
                    written.len()
                )));
            };
            let d = &one.files[0];
            let mut bytes = Vec::with_capacity(coverage.serialized_size());
            coverage
                .serialize_into(&mut bytes)
                .map_err(|e| Error::invalid(format!("overlay coverage: {e}")))?;
            groups.push((
                frag_id,
                vec![pb::DataOverlayFile {
                    data_file: Some(pb::DataFile {
                        path: d.path.clone(),
                        fields: d.fields.clone(),
                        column_indices: d.column_indices.clone(),
                        file_major_version: d.file_major_version,
                        file_minor_version: d.file_minor_version,
                        file_size_bytes: d.file_size_bytes,
                        base_id: None,
                    }),
                    coverage: Some(pb::data_overlay_file::Coverage::SharedOffsetBitmap(bytes)),
                    committed_version: 0,
                }],
            ));
            if let Some(p) = progress {
                p("writing overlays", done as u64 + 1, total);
            }
        }
        if groups.is_empty() {
            return Ok(self.clone());
        }
        self.commit(Operation::DataOverlay { groups }).await
    }
}

/// `fragment`'s overlays with the field ids in `rewritten` tombstoned
/// (their values now live in a newer base file); overlays left with no
/// field are dropped.
pub(crate) fn drop_fields(fragment: &mut Fragment, rewritten: &[i32]) {
    for o in &mut fragment.passthrough.overlays {
        if let Some(d) = o.data_file.as_mut() {
            for id in &mut d.fields {
                if rewritten.contains(id) {
                    *id = -2;
                }
            }
        }
    }
    fragment.passthrough.overlays.retain(|o| {
        o.data_file
            .as_ref()
            .is_some_and(|d| d.fields.iter().any(|&id| id != -2))
    });
}

/// Resolves `base` (values of field `id` at physical `offsets`) against
/// `overlays` (newest first, each with its open reader and the file
/// column holding `id`): each offset takes the newest overlay covering it.
pub(crate) async fn resolve(
    base: arrow_array::ArrayRef,
    id: i32,
    offsets: &[u64],
    overlays: &[(&Overlay, &fathom_file::reader::FileReader, usize)],
) -> Result<arrow_array::ArrayRef> {
    let mut picks: Vec<(usize, usize)> = (0..offsets.len()).map(|p| (0, p)).collect();
    let mut wanted: Vec<Vec<u64>> = vec![vec![]; overlays.len()];
    let mut any = false;
    for (p, &o) in offsets.iter().enumerate() {
        let o32 = o as u32;
        for (j, (ov, _, _)) in overlays.iter().enumerate() {
            if let Some(c) = ov.covers(id)
                && c.contains(o32)
            {
                // Its value sits at the number of covered offsets below it.
                wanted[j].push(c.rank(o32) - 1);
                picks[p] = (1 + j, wanted[j].len() - 1);
                any = true;
                break;
            }
        }
    }
    if !any {
        return Ok(base);
    }
    let mut sources: Vec<arrow_array::ArrayRef> = vec![base];
    for (j, (_, reader, col)) in overlays.iter().enumerate() {
        if wanted[j].is_empty() {
            sources.push(sources[0].slice(0, 0));
            continue;
        }
        let b = reader.take(&wanted[j], Some(&[*col])).await?;
        sources.push(b.column(0).clone());
    }
    let refs: Vec<&dyn Array> = sources.iter().map(|a| a.as_ref()).collect();
    Ok(arrow_select::interleave::interleave(&refs, &picks)?)
}
