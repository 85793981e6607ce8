//! The fragment reuse index (Lance's `__lance_frag_reuse` system index):
//! a compaction that defers remapping the user indexes records, per group
//! of rewritten fragments, which old row addresses survived (a roaring
//! treemap, in the order their rows were written) and the old and new
//! fragments. Readers remap what a segment built before the compaction
//! returns: the k-th surviving old address becomes the k-th row of the new
//! fragments; an old address that did not survive was deleted.
//!
//! A segment's fragment bitmap is remapped the same way when a manifest is
//! read: a group's old fragments leave it, and its new fragments join it
//! when every old fragment of the group was covered (else the new ones are
//! scanned flat: never a claim on rows the segment does not hold). Each
//! compaction adds a version; a version is trimmed once every index was
//! built after it (its `dataset_version` is the version the compaction
//! committed on top of, so a segment with a later `dataset_version` holds
//! no address it remaps).

use std::collections::HashMap;
use std::sync::Arc;

use prost::Message;
use roaring::{RoaringBitmap, RoaringTreemap};

use crate::address::RowSet;
use crate::error::{Error, Result};
use crate::format::{IndexMetadata, Manifest};
use crate::pb;
use pb::fragment_reuse_index_details as fri;

/// The name of the system index.
pub const FRAG_REUSE_INDEX_NAME: &str = "__lance_frag_reuse";
/// Its `index_details` type URL (as pylance 14 writes it).
pub const TYPE_URL: &str = "/lance.table.FragmentReuseIndexDetails";
/// Where Lance puts details too large to keep inline.
pub const DETAILS_FILE: &str = "details.binpb";

/// A fragment as a reuse group records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FragDigest {
    pub id: u64,
    pub physical_rows: u64,
    pub num_deleted_rows: u64,
}

/// One rewrite group of one compaction.
#[derive(Debug, Clone, PartialEq)]
pub struct ReuseGroup {
    /// The surviving old row addresses.
    pub changed: RoaringTreemap,
    pub old: Vec<FragDigest>,
    pub new: Vec<FragDigest>,
}

/// One compaction.
#[derive(Debug, Clone, PartialEq)]
pub struct ReuseVersion {
    /// The version the compaction's commit was applied to.
    pub dataset_version: u64,
    pub groups: Vec<ReuseGroup>,
}

/// Where an old fragment's rows went: its group, and how many surviving
/// rows of the group come before its own.
#[derive(Debug, Clone, PartialEq)]
struct OldFragment {
    group: usize,
    base: u64,
    survivors: RoaringBitmap,
}

/// Lookup tables of one version.
#[derive(Debug, Clone, PartialEq)]
struct VersionMap {
    old: HashMap<u32, OldFragment>,
    /// Per group, the first rank of each new fragment.
    starts: Vec<Vec<u64>>,
}

/// The decoded index, ready to remap addresses.
#[derive(Debug, Clone, PartialEq)]
pub struct FragReuse {
    pub versions: Vec<ReuseVersion>,
    maps: Vec<VersionMap>,
}

enum Step {
    Unchanged,
    Deleted,
    Moved(u64),
}

impl FragReuse {
    pub fn new(mut versions: Vec<ReuseVersion>) -> Result<Self> {
        versions.sort_by_key(|v| v.dataset_version);
        let mut maps = Vec::with_capacity(versions.len());
        for v in &versions {
            let mut old = HashMap::new();
            let mut starts = Vec::with_capacity(v.groups.len());
            for (gi, g) in v.groups.iter().enumerate() {
                let capacity: u64 = g.new.iter().map(|f| f.physical_rows).sum();
                if g.changed.len() != capacity {
                    return Err(Error::corrupt(
                        FRAG_REUSE_INDEX_NAME,
                        format!(
                            "a group of version {} keeps {} rows but its new fragments hold {capacity}",
                            v.dataset_version,
                            g.changed.len()
                        ),
                    ));
                }
                let mut ids: Vec<u32> = Vec::with_capacity(g.old.len());
                for f in &g.old {
                    let id = u32::try_from(f.id).map_err(|_| {
                        Error::corrupt(FRAG_REUSE_INDEX_NAME, format!("fragment id {}", f.id))
                    })?;
                    ids.push(id);
                }
                let mut base = 0;
                for (f, b) in g.changed.bitmaps() {
                    if !ids.contains(&f) {
                        return Err(Error::corrupt(
                            FRAG_REUSE_INDEX_NAME,
                            format!(
                                "version {} keeps rows of fragment {f}, which its group did not rewrite",
                                v.dataset_version
                            ),
                        ));
                    }
                    old.insert(
                        f,
                        OldFragment {
                            group: gi,
                            base,
                            survivors: b.clone(),
                        },
                    );
                    base += b.len();
                }
                // Old fragments none of whose rows survived.
                for id in ids {
                    old.entry(id).or_insert(OldFragment {
                        group: gi,
                        base,
                        survivors: RoaringBitmap::new(),
                    });
                }
                let mut s = Vec::with_capacity(g.new.len());
                let mut at = 0;
                for f in &g.new {
                    s.push(at);
                    at += f.physical_rows;
                }
                starts.push(s);
            }
            maps.push(VersionMap { old, starts });
        }
        Ok(FragReuse { versions, maps })
    }

    fn step(&self, v: usize, addr: u64) -> Step {
        let frag = (addr >> 32) as u32;
        let Some(o) = self.maps[v].old.get(&frag) else {
            return Step::Unchanged;
        };
        let offset = addr as u32;
        if !o.survivors.contains(offset) {
            return Step::Deleted;
        }
        let rank = o.base + o.survivors.rank(offset) - 1;
        let starts = &self.maps[v].starts[o.group];
        let k = starts.partition_point(|s| *s <= rank) - 1;
        let to = &self.versions[v].groups[o.group].new[k];
        Step::Moved((to.id << 32) | (rank - starts[k]))
    }

    /// The current address of a row a segment built before these
    /// compactions knows as `addr`; `None` when it was deleted.
    pub fn remap(&self, mut addr: u64) -> Option<u64> {
        for v in 0..self.versions.len() {
            match self.step(v, addr) {
                Step::Unchanged => {}
                Step::Deleted => return None,
                Step::Moved(a) => addr = a,
            }
        }
        Some(addr)
    }

    /// The same mapping as [`Self::remap`] as lookup tables, one entry per
    /// row of every rewritten fragment: for remapping many addresses (a
    /// segment rewritten whole), where a rank per address in the
    /// survivors' bitmaps would cost far more.
    pub fn dense(&self) -> DenseRemap {
        let versions = self
            .versions
            .iter()
            .map(|v| {
                let mut old: HashMap<u32, Vec<u64>> = HashMap::new();
                for g in &v.groups {
                    for f in &g.old {
                        old.insert(f.id as u32, vec![u64::MAX; f.physical_rows as usize]);
                    }
                    let mut new = g
                        .new
                        .iter()
                        .flat_map(|f| (0..f.physical_rows).map(move |o| (f.id << 32) | o));
                    for a in g.changed.iter() {
                        let Some(to) = new.next() else { break };
                        if let Some(slot) = old
                            .get_mut(&((a >> 32) as u32))
                            .and_then(|t| t.get_mut(a as u32 as usize))
                        {
                            *slot = to;
                        }
                    }
                }
                old
            })
            .collect();
        DenseRemap { versions }
    }

    /// Whether a segment built at `dataset_version` may name rows by
    /// addresses these compactions changed.
    pub fn applies_to(&self, dataset_version: u64) -> bool {
        self.versions
            .iter()
            .any(|v| v.dataset_version >= dataset_version)
    }

    /// Whether a compaction recorded here rewrote fragment `frag`.
    pub fn rewrote(&self, frag: u32) -> bool {
        self.maps.iter().any(|m| m.old.contains_key(&frag))
    }

    /// `rows` with every address remapped (deleted rows dropped).
    pub fn remap_rows(&self, rows: &RowSet) -> RowSet {
        if !rows.fragments().any(|(f, _)| self.rewrote(f.0)) {
            return rows.clone();
        }
        let mut out: Vec<u64> = Vec::with_capacity(rows.len() as usize);
        let mut kept = RoaringTreemap::new();
        for (f, b) in rows.fragments() {
            if self.rewrote(f.0) {
                let high = (f.0 as u64) << 32;
                out.extend(b.iter().filter_map(|o| self.remap(high | o as u64)));
            } else {
                kept |= RoaringTreemap::from_bitmaps([(f.0, b.clone())]);
            }
        }
        out.sort_unstable();
        let mut t = RoaringTreemap::from_sorted_iter(out).expect("sorted");
        t |= kept;
        t.into()
    }

    /// Remaps a segment's coverage: each group's old fragments leave it;
    /// its new ones join when all the old ones were covered.
    pub fn remap_bitmap(&self, bitmap: &mut RoaringBitmap) {
        for v in &self.versions {
            for g in &v.groups {
                let mut removed = 0;
                for f in &g.old {
                    if bitmap.remove(f.id as u32) {
                        removed += 1;
                    }
                }
                if removed > 0 && removed == g.old.len() {
                    bitmap.extend(g.new.iter().map(|f| f.id as u32));
                }
            }
        }
    }

    /// Decodes the index's details (inline, or the bytes of its external file).
    pub fn decode(meta: &IndexMetadata, external: Option<&[u8]>) -> Result<Self> {
        let bad = |m: String| Error::corrupt(format!("index {}", meta.name), m);
        let any = meta
            .index_details
            .as_ref()
            .ok_or_else(|| bad("no index_details".into()))?;
        let details = pb::FragmentReuseIndexDetails::decode(any.value.as_slice())
            .map_err(|e| bad(format!("details: {e}")))?;
        let content = match details.content {
            Some(fri::Content::Inline(c)) => c,
            Some(fri::Content::External(_)) => {
                let bytes = external.ok_or_else(|| bad("external details not read".into()))?;
                fri::InlineContent::decode(bytes)
                    .map_err(|e| bad(format!("{DETAILS_FILE}: {e}")))?
            }
            None => return Err(bad("details without content".into())),
        };
        let digest = |d: fri::FragmentDigest| FragDigest {
            id: d.id,
            physical_rows: d.physical_rows,
            num_deleted_rows: d.num_deleted_rows,
        };
        let mut versions = Vec::with_capacity(content.versions.len());
        for v in content.versions {
            let mut groups = Vec::with_capacity(v.groups.len());
            for g in v.groups {
                let changed = RoaringTreemap::deserialize_from(g.changed_row_addrs.as_slice())
                    .map_err(|e| bad(format!("changed_row_addrs: {e}")))?;
                groups.push(ReuseGroup {
                    changed,
                    old: g.old_fragments.into_iter().map(digest).collect(),
                    new: g.new_fragments.into_iter().map(digest).collect(),
                });
            }
            versions.push(ReuseVersion {
                dataset_version: v.dataset_version,
                groups,
            });
        }
        FragReuse::new(versions)
    }

    /// The external file a decoded index needs read first, if any.
    pub fn external_file(meta: &IndexMetadata) -> Option<pb::ExternalFile> {
        let any = meta.index_details.as_ref()?;
        match pb::FragmentReuseIndexDetails::decode(any.value.as_slice())
            .ok()?
            .content?
        {
            fri::Content::External(f) => Some(f),
            fri::Content::Inline(_) => None,
        }
    }

    /// The manifest entry for these versions (details inline: Lance reads
    /// inline details of any size).
    pub fn to_metadata(&self) -> IndexMetadata {
        let digest = |d: &FragDigest| fri::FragmentDigest {
            id: d.id,
            physical_rows: d.physical_rows,
            num_deleted_rows: d.num_deleted_rows,
        };
        let content = fri::InlineContent {
            versions: self
                .versions
                .iter()
                .map(|v| fri::Version {
                    dataset_version: v.dataset_version,
                    groups: v
                        .groups
                        .iter()
                        .map(|g| {
                            let mut bytes = Vec::with_capacity(g.changed.serialized_size());
                            g.changed
                                .serialize_into(&mut bytes)
                                .expect("writing to a Vec");
                            fri::Group {
                                changed_row_addrs: bytes,
                                old_fragments: g.old.iter().map(digest).collect(),
                                new_fragments: g.new.iter().map(digest).collect(),
                            }
                        })
                        .collect(),
                })
                .collect(),
        };
        let details = pb::FragmentReuseIndexDetails {
            content: Some(fri::Content::Inline(content)),
        };
        let mut bitmap = RoaringBitmap::new();
        for v in &self.versions {
            for g in &v.groups {
                bitmap.extend(g.new.iter().map(|f| f.id as u32));
            }
        }
        IndexMetadata {
            uuid: uuid::Uuid::new_v4(),
            name: FRAG_REUSE_INDEX_NAME.to_string(),
            fields: vec![],
            dataset_version: self.versions.last().map_or(0, |v| v.dataset_version),
            fragment_bitmap: (!bitmap.is_empty()).then_some(bitmap),
            index_details: Some(prost_types::Any {
                type_url: TYPE_URL.to_string(),
                value: details.encode_to_vec(),
            }),
            index_version: Some(0),
            created_at_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()
                .map(|d| d.as_millis() as u64),
            base_id: None,
            files: vec![],
            covering_fields: vec![],
        }
    }
}

/// [`FragReuse::remap`] as tables (see [`FragReuse::dense`]).
#[derive(Debug, Clone)]
pub struct DenseRemap {
    /// Per version, each rewritten fragment's new address of each row
    /// (`u64::MAX`: deleted).
    versions: Vec<HashMap<u32, Vec<u64>>>,
}

impl DenseRemap {
    /// The current address of a row a segment built before the
    /// compactions knows as `addr`; `None` when it was deleted.
    pub fn remap(&self, mut addr: u64) -> Option<u64> {
        for v in &self.versions {
            if let Some(t) = v.get(&((addr >> 32) as u32)) {
                addr = *t.get(addr as u32 as usize)?;
                if addr == u64::MAX {
                    return None;
                }
            }
        }
        Some(addr)
    }
}

/// Whether `meta` is the fragment reuse index.
pub fn is_frag_reuse(meta: &IndexMetadata) -> bool {
    meta.name == FRAG_REUSE_INDEX_NAME
}

/// Decodes the manifest's fragment reuse index (given the bytes of its
/// external file, when it has one) and remaps the user indexes' coverage.
pub(crate) fn load(m: &mut Manifest, external: Option<&[u8]>) -> Result<()> {
    let Some(meta) = m.indices.iter().find(|i| is_frag_reuse(i)) else {
        m.frag_reuse = None;
        return Ok(());
    };
    if external.is_none() && FragReuse::external_file(meta).is_some() {
        // Read by `manifest_io::read_manifest`; until then no segment's
        // coverage is remapped (their rewritten fragments are scanned flat).
        m.frag_reuse = None;
        return Ok(());
    }
    let fr = FragReuse::decode(meta, external)?;
    remap_coverage(m, &fr);
    m.frag_reuse = Some(Arc::new(fr));
    Ok(())
}

fn remap_coverage(m: &mut Manifest, fr: &FragReuse) {
    for i in &mut m.indices {
        if is_frag_reuse(i) {
            continue;
        }
        if let Some(b) = &mut i.fragment_bitmap {
            fr.remap_bitmap(b);
        }
    }
}

/// After a commit: adds a compaction's version (if any), remaps coverage,
/// and trims versions every index was built after.
pub(crate) fn settle(m: &mut Manifest, added: Option<ReuseVersion>) -> Result<()> {
    let mut versions = m
        .frag_reuse
        .as_ref()
        .map(|f| f.versions.clone())
        .unwrap_or_default();
    if m.frag_reuse.is_none() && m.indices.iter().any(is_frag_reuse) {
        // An external index not read: leave it as it is.
        if added.is_some() {
            return Err(Error::invalid(
                "the fragment reuse index's details file was not read; cannot add to it",
            ));
        }
        return Ok(());
    }
    let changed = added.is_some();
    versions.extend(added);
    if versions.is_empty() {
        return Ok(());
    }
    let fr = FragReuse::new(versions)?;
    remap_coverage(m, &fr);
    let oldest_index = m
        .indices
        .iter()
        .filter(|i| !is_frag_reuse(i))
        .map(|i| i.dataset_version)
        .min();
    let keep: Vec<ReuseVersion> = fr
        .versions
        .iter()
        .filter(|v| oldest_index.is_some_and(|o| o <= v.dataset_version))
        .cloned()
        .collect();
    let trimmed = keep.len() != fr.versions.len();
    let fr = if trimmed { FragReuse::new(keep)? } else { fr };
    if changed || trimmed {
        m.indices.retain(|i| !is_frag_reuse(i));
        if !fr.versions.is_empty() {
            m.indices.push(fr.to_metadata());
        }
    }
    m.frag_reuse = (!fr.versions.is_empty()).then(|| Arc::new(fr));
    Ok(())
}

/// The surviving addresses of `fragments` (ascending: the order a
/// compaction writes them in).
pub fn survivors(fragments: &[(u64, u64, Option<Arc<RoaringBitmap>>)]) -> RoaringTreemap {
    let mut t = RoaringTreemap::new();
    for (id, rows, deleted) in fragments {
        let mut b = RoaringBitmap::new();
        b.insert_range(0..*rows as u32);
        if let Some(d) = deleted {
            b -= d.as_ref();
        }
        t |= RoaringTreemap::from_bitmaps([(*id as u32, b)]);
    }
    t
}
