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
//! field the segment is keyed on or carries makes the segment's answer
//! stale for the rows it covers. Two ways out:
//!
//! - **row level** (scalar kinds: B-tree, bitmap, zone map, label list;
//!   vector and full-text kinds): the segment keeps covering the
//!   fragment; the scan plan excludes the [`overlaid_rows`] from the
//!   index result and re-evaluates them on the flat path against their
//!   current values (filters re-applied, vectors re-scored by brute
//!   force, text tokenized and scored, the stale documents left out of
//!   the corpus statistics);
//! - **whole fragment** (every kind
//!   when compaction rewrites the fragment under a fragment reuse index):
//!   [`exclude_overlaid`] takes the fragment out of the segment's
//!   coverage on every manifest read and every commit, so it is scanned
//!   flat; a segment committed concurrently from an older version is
//!   excluded the same way.
//!
//! Compaction rewrites fragments with overlays (folding them into base
//! data).

use arrow_array::{Array, RecordBatch, UInt32Array};
use futures::{FutureExt, StreamExt};
use roaring::RoaringBitmap;

use crate::address::RowSet;
use crate::compact::ProgressFn;
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::format::{DataFile, Fragment, IndexMetadata, Manifest};
use crate::pb;
use crate::transaction::Operation;
use crate::write::conform_batch;

/// Overlay files an update writes concurrently.
const OVERLAY_WRITES_AT_ONCE: usize = 8;

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
        let file = DataFile::from(d);
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

/// Whether readers of `meta`'s kind exclude and re-evaluate the rows an
/// overlay changed (see the module documentation), rather than needing
/// the whole fragment out of the segment's coverage: every kind this
/// reader knows (an entry without details is not one).
pub fn reevaluated_by_row(meta: &IndexMetadata) -> bool {
    meta.index_details.is_some()
}

/// The fragment's overlays committed after version `since` that change
/// one of `fields`. Overlays that fail to decode are left to the reader,
/// which reports them.
fn newer_overlays(f: &Fragment, fields: &[i32], since: u64) -> Vec<Overlay> {
    if !f.has_overlays() {
        return vec![];
    }
    f.overlays()
        .unwrap_or_default()
        .into_iter()
        .filter(|o| o.committed_version > since && fields.iter().any(|id| o.covers(*id).is_some()))
        .collect()
}

fn segment_fields(meta: &IndexMetadata) -> Vec<i32> {
    meta.fields
        .iter()
        .chain(&meta.covering_fields)
        .copied()
        .collect()
}

/// The rows of fragments `meta` covers whose value of a field it is keyed
/// on or carries an overlay changed after the segment was built: its
/// answer for them is stale (deleted rows included; callers drop those).
/// `overlaid` are the version's fragments with overlays
/// ([`crate::ManifestFacts::overlaid`]; any superset will do).
pub fn overlaid_rows<'a>(
    overlaid: impl IntoIterator<Item = &'a Fragment>,
    meta: &IndexMetadata,
) -> RowSet {
    let mut out = RowSet::new();
    let Some(covered) = meta.fragment_bitmap.as_ref() else {
        return out;
    };
    let fields = segment_fields(meta);
    for f in overlaid.into_iter().filter(|f| f.has_overlays()) {
        let Ok(id) = u32::try_from(f.id) else {
            continue;
        };
        if !covered.contains(id) {
            continue;
        }
        let mut rows = RoaringBitmap::new();
        for o in newer_overlays(f, &fields, meta.dataset_version) {
            for fid in &fields {
                if let Some(c) = o.covers(*fid) {
                    rows |= c;
                }
            }
        }
        if !rows.is_empty() {
            out = out | RowSet::from(roaring::RoaringTreemap::from_bitmaps([(id, rows)]));
        }
    }
    out
}

/// Takes each fragment out of every segment that an overlay committed
/// after the segment's build changes a field of, for the kinds not
/// [`reevaluated_by_row`], and for every kind in fragments `every_kind`
/// (about to be rewritten under a fragment reuse index, which would
/// otherwise carry the stale answers over to the new fragments).
pub(crate) fn exclude_overlaid(m: &mut Manifest, every_kind: &RoaringBitmap) {
    if !m.fragments.iter().any(|f| f.has_overlays()) {
        return;
    }
    let overlaid: Vec<&Fragment> = m.fragments.iter().filter(|f| f.has_overlays()).collect();
    let mut out: Vec<(usize, RoaringBitmap)> = vec![];
    for (n, i) in m.indices.iter().enumerate() {
        if i.fragment_bitmap.is_none() {
            continue;
        }
        let by_row = reevaluated_by_row(i);
        let fields = segment_fields(i);
        let mut gone = RoaringBitmap::new();
        for f in &overlaid {
            let id = f.id as u32;
            if (!by_row || every_kind.contains(id))
                && !newer_overlays(f, &fields, i.dataset_version).is_empty()
            {
                gone.insert(id);
            }
        }
        if !gone.is_empty() {
            out.push((n, gone));
        }
    }
    for (n, gone) in out {
        if let Some(b) = m.indices[n].fragment_bitmap.as_mut() {
            *b -= gone;
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
        let (_, part) = self.columns_to_set(columns, addresses, values)?;
        if let Some(f) = part.fields.iter().find(|f| !f.children.is_empty()) {
            return Err(Error::invalid(format!(
                "column '{}' is nested: overlays are written for top-level \
                 primitive columns (rewrite the rows or the column instead)",
                f.name
            )));
        }
        let values = conform_batch(&std::sync::Arc::new(part.to_arrow()?), values)?;
        let cells_by_fragment = self.cells_by_fragment(addresses)?;
        let total = cells_by_fragment.len() as u64;
        // One small file per fragment: written a few at a time (each is
        // mostly waiting on the store), committed together in order.
        let part = &part;
        let values = &values;
        // Boxed, so the futures are Send for the caller's sake.
        let writes: Vec<futures::future::BoxFuture<'_, Result<_>>> = cells_by_fragment
            .into_iter()
            .map(|(frag, cells)| {
                async move {
                    let frag_id = frag.id;
                    let coverage: RoaringBitmap = cells.iter().map(|(o, _)| *o).collect();
                    let order = UInt32Array::from_iter_values(cells.iter().map(|(_, r)| *r as u32));
                    let cols = values
                        .columns()
                        .iter()
                        .map(|c| arrow_select::take::take(c.as_ref(), &order, None))
                        .collect::<std::result::Result<Vec<_>, _>>()?;
                    let batch = RecordBatch::try_new(values.schema(), cols)?;
                    let d = self
                        .write_single_file(part, &batch, || {
                            format!("an overlay of fragment {frag_id}")
                        })
                        .await?;
                    let mut bytes = Vec::with_capacity(coverage.serialized_size());
                    coverage
                        .serialize_into(&mut bytes)
                        .map_err(|e| Error::invalid(format!("overlay coverage: {e}")))?;
                    Ok::<_, Error>((
                        frag_id,
                        vec![pb::DataOverlayFile {
                            data_file: Some(pb::DataFile::from(&d)),
                            coverage: Some(pb::data_overlay_file::Coverage::SharedOffsetBitmap(
                                bytes,
                            )),
                            committed_version: 0,
                        }],
                    ))
                }
                .boxed()
            })
            .collect();
        let mut stream = futures::stream::iter(writes).buffered(OVERLAY_WRITES_AT_ONCE);
        let mut groups = Vec::with_capacity(total as usize);
        while let Some(g) = stream.next().await {
            groups.push(g?);
            if let Some(p) = progress {
                p("writing overlays", groups.len() as u64, total);
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

/// Where each selected offset's value of one field comes from: `picks[p]`
/// is `(0, p)` for the base file, or `(1 + j, i)` for the `i`-th value
/// taken from overlay `j` at the ranks `wanted[j]`.
pub(crate) struct Picks {
    picks: Vec<(usize, usize)>,
    wanted: Vec<Vec<u64>>,
    /// Offsets left to the base file.
    from_base: usize,
}

impl Picks {
    /// Whether the base file need not be read for this field.
    pub(crate) fn base_unused(&self) -> bool {
        self.from_base == 0
    }
    /// Whether any selected cell comes from an overlay.
    pub(crate) fn uses_overlays(&self) -> bool {
        self.from_base < self.picks.len()
    }
}

/// For field `id` at physical `offsets`, the newest of `overlays` (newest
/// first) covering each offset, and the rank of the offset in it (a
/// covered offset's value sits at the number of covered offsets below it).
pub(crate) fn plan_picks(id: i32, offsets: &[u64], overlays: &[&Overlay]) -> Picks {
    let mut picks: Vec<(usize, usize)> = (0..offsets.len()).map(|p| (0, p)).collect();
    let mut wanted: Vec<Vec<u64>> = vec![vec![]; overlays.len()];
    let mut from_base = offsets.len();
    let empty = RoaringBitmap::new();
    let covs: Vec<&RoaringBitmap> = overlays
        .iter()
        .map(|ov| ov.covers(id).unwrap_or(&empty))
        .collect();
    let sorted = offsets.windows(2).all(|w| w[0] < w[1])
        && offsets.last().is_none_or(|&o| o <= u32::MAX as u64);
    // The usual re-evaluation: the offsets are exactly what the newest
    // overlay holding the field covers. Its values are then the column,
    // in file order (compared container by container, no walk).
    if sorted && let Some(j) = covs.iter().position(|c| !c.is_empty()) {
        let c = covs[j];
        if c.len() == offsets.len() as u64 && c.iter().map(u64::from).eq(offsets.iter().copied()) {
            wanted[j] = (0..offsets.len() as u64).collect();
            for (p, pick) in picks.iter_mut().enumerate() {
                *pick = (1 + j, p);
            }
            return Picks {
                picks,
                wanted,
                from_base: 0,
            };
        }
    }
    if sorted {
        // Sorted offsets (scans, takes of sorted addresses): one cursor
        // per overlay walks its coverage alongside them.
        let first = offsets.first().map_or(0, |&o| o as u32);
        let mut cursors: Vec<(std::iter::Peekable<roaring::bitmap::Iter<'_>>, u64)> = covs
            .iter()
            .map(|c| {
                let mut it = c.iter();
                it.advance_to(first);
                let below = c.rank(first) - u64::from(c.contains(first));
                (it.peekable(), below)
            })
            .collect();
        for (p, &o) in offsets.iter().enumerate() {
            let o32 = o as u32;
            for (j, (it, rank)) in cursors.iter_mut().enumerate() {
                while it.next_if(|&v| v < o32).is_some() {
                    *rank += 1;
                }
                if it.peek() == Some(&o32) {
                    wanted[j].push(*rank);
                    picks[p] = (1 + j, wanted[j].len() - 1);
                    from_base -= 1;
                    break;
                }
            }
        }
    } else {
        for (p, &o) in offsets.iter().enumerate() {
            let Ok(o32) = u32::try_from(o) else { continue };
            for (j, c) in covs.iter().enumerate() {
                if c.contains(o32) {
                    wanted[j].push(c.rank(o32) - 1);
                    picks[p] = (1 + j, wanted[j].len() - 1);
                    from_base -= 1;
                    break;
                }
            }
        }
    }
    Picks {
        picks,
        wanted,
        from_base,
    }
}

/// Resolves `base` (values of the field at the offsets `picks` was planned
/// for; read only if some offset is left to it) against the overlays
/// `picks` was planned with, each with its open reader and the file column
/// holding the field (and its path, for errors).
pub(crate) async fn resolve(
    base: Option<arrow_array::ArrayRef>,
    picks: Picks,
    overlays: &[(&fathom_file::reader::FileReader, Option<usize>, &str)],
) -> Result<arrow_array::ArrayRef> {
    let n = picks.picks.len();
    let mut sources: Vec<Option<arrow_array::ArrayRef>> = vec![base];
    for (j, (reader, col, path)) in overlays.iter().enumerate() {
        let w = &picks.wanted[j];
        if w.is_empty() {
            sources.push(None);
            continue;
        }
        let col = col.ok_or_else(|| {
            Error::corrupt(
                *path,
                "the overlay's coverage names a field its file does not hold",
            )
        })?;
        // Every row of the file, in order (the usual case when re-reading
        // the rows an update changed): one range read.
        let whole = w.len() as u64 == reader.num_rows()
            && w.first() == Some(&0)
            && w.windows(2).all(|x| x[1] == x[0] + 1);
        let b = if whole {
            reader
                .read_selection(&[0..w.len() as u64], Some(&[col]))
                .await?
        } else {
            reader.take(w, Some(&[col])).await?
        };
        // One overlay holds every selected value, in order: it is the column.
        if w.len() == n {
            return Ok(b.column(0).clone());
        }
        sources.push(Some(b.column(0).clone()));
    }
    let Some(template) = sources.iter().flatten().next().cloned() else {
        return Err(Error::invalid(
            "an overlaid field with no values to resolve",
        ));
    };
    let sources: Vec<arrow_array::ArrayRef> = sources
        .into_iter()
        .map(|a| a.unwrap_or_else(|| template.slice(0, 0)))
        .collect();
    let refs: Vec<&dyn Array> = sources.iter().map(|a| a.as_ref()).collect();
    Ok(arrow_select::interleave::interleave(&refs, &picks.picks)?)
}
