//! The search nodes on the wire: `KnnExec` (vector) and `FtsExec`
//! (full text). Both carry the segments searched (by uuid, their metadata
//! is in the dataset's manifest) with the fragments assigned to each, the
//! columns read from the winners, and up to two children (prefilter,
//! flat rows).

use std::sync::Arc;

use arrow_schema::{Schema, SchemaRef};
use datafusion::error::Result;
use datafusion::physical_plan::ExecutionPlan;
use fathom_index::IndexCache;
use fathom_index::fts::MatchOp;
use fathom_index::fts::search::MAX_EXPANSIONS;
use fathom_index::vector::Metric;
use fathom_table::Dataset;

use super::wire::{self, node::Kind};
use super::{bad, dec_dataset, dec_projection, enc_dataset, enc_projection, required};
use crate::exec::fts::{FtsExec, FtsField, FtsSpec, SCORE};
use crate::exec::knn::{KnnExec, KnnSegment, KnnSpec};

fn enc_segments(segs: &[KnnSegment]) -> Result<Vec<wire::KnnSegment>> {
    segs.iter()
        .map(|seg| {
            let mut fragments = vec![];
            seg.fragments.serialize_into(&mut fragments).map_err(bad)?;
            Ok(wire::KnnSegment {
                uuid: seg.meta.uuid.to_string(),
                fragments,
            })
        })
        .collect()
}

fn dec_segments(ds: &Dataset, segs: Vec<wire::KnnSegment>) -> Result<Vec<KnnSegment>> {
    segs.into_iter()
        .map(|s| {
            let meta = ds
                .manifest()
                .indices
                .iter()
                .find(|i| i.uuid.to_string() == s.uuid)
                .ok_or_else(|| bad(format!("segment {} is not in the manifest", s.uuid)))?;
            let fragments =
                roaring::RoaringBitmap::deserialize_from(&s.fragments[..]).map_err(bad)?;
            Ok(KnnSegment {
                meta: meta.clone(),
                fragments: Arc::new(fragments),
            })
        })
        .collect()
}

type Children = (
    Option<Arc<dyn ExecutionPlan>>,
    Option<Arc<dyn ExecutionPlan>>,
);

fn children(
    node: &str,
    inputs: &[Arc<dyn ExecutionPlan>],
    has_prefilter: bool,
    has_flat: bool,
) -> Result<Children> {
    let n = usize::from(has_prefilter) + usize::from(has_flat);
    if inputs.len() != n {
        return Err(bad(format!(
            "{node} needs {n} inputs, got {}",
            inputs.len()
        )));
    }
    let mut it = inputs.iter().cloned();
    let prefilter = if has_prefilter { it.next() } else { None };
    let flat = if has_flat { it.next() } else { None };
    Ok((prefilter, flat))
}

/// The wire form of a search node (`None`: not one).
pub(super) fn encode(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Kind>> {
    if let Some(n) = node.downcast_ref::<KnnExec>() {
        let schema: SchemaRef = n.schema();
        let s = n.spec();
        return Ok(Some(Kind::Knn(wire::Knn {
            dataset: Some(enc_dataset(n.dataset())),
            column: s.column as u32,
            column_name: s.column_name.clone(),
            query: s.query.clone(),
            metric: s.metric.name().to_string(),
            k: s.k as u64,
            nprobes: s.nprobes as u64,
            refine_factor: s.refine_factor as u64,
            ef: s.ef as u64,
            index: s.index.clone(),
            segments: enc_segments(n.segments())?,
            read: Some(enc_projection(n.read())),
            output: n.output_idx().iter().map(|i| *i as u32).collect(),
            has_prefilter: n.has_prefilter(),
            has_flat: n.has_flat(),
            schema: Some(schema.as_ref().try_into()?),
        })));
    }
    if let Some(n) = node.downcast_ref::<FtsExec>() {
        let schema: SchemaRef = n.schema();
        let s = n.spec();
        let fields = s
            .fields
            .iter()
            .zip(n.has_flat())
            .map(|(f, has_flat)| {
                Ok(wire::FtsField {
                    column: f.column as u32,
                    column_name: f.column_name.clone(),
                    boost: f.boost,
                    index: f.index.clone(),
                    segments: enc_segments(&f.segments)?,
                    has_flat,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        return Ok(Some(Kind::Fts(wire::Fts {
            dataset: Some(enc_dataset(n.dataset())),
            fields,
            query: s.query.clone(),
            op: s.op.name().to_string(),
            k: s.k.map(|k| k as u64),
            read: Some(enc_projection(n.read())),
            output: n
                .output_idx()
                .iter()
                .map(|i| if *i == SCORE { u32::MAX } else { *i as u32 })
                .collect(),
            has_prefilter: n.has_prefilter(),
            schema: Some(schema.as_ref().try_into()?),
            max_expansions: Some(s.max_expansions as u64),
            prefix_length: s.prefix_length as u64,
        })));
    }
    Ok(None)
}

pub(super) fn dec_knn(
    m: wire::Knn,
    inputs: &[Arc<dyn ExecutionPlan>],
    cache: &Arc<IndexCache>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let ds = dec_dataset(m.dataset)?;
    let read = dec_projection(m.read, &ds)?;
    let schema: Schema = required(m.schema.as_ref(), "knn schema")?.try_into()?;
    let segments = dec_segments(&ds, m.segments)?;
    let (prefilter, flat) = children("KnnExec", inputs, m.has_prefilter, m.has_flat)?;
    let spec = KnnSpec {
        column: m.column as usize,
        column_name: m.column_name,
        query: m.query,
        metric: Metric::parse(&m.metric).map_err(bad)?,
        k: m.k as usize,
        nprobes: m.nprobes as usize,
        refine_factor: m.refine_factor as usize,
        ef: m.ef as usize,
        index: m.index,
    };
    Ok(Arc::new(KnnExec::new(
        ds,
        spec,
        segments,
        read,
        m.output.iter().map(|i| *i as usize).collect(),
        prefilter,
        flat,
        cache.clone(),
        Arc::new(schema),
    )))
}

pub(super) fn dec_fts(
    m: wire::Fts,
    inputs: &[Arc<dyn ExecutionPlan>],
    cache: &Arc<IndexCache>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let ds = dec_dataset(m.dataset)?;
    let read = dec_projection(m.read, &ds)?;
    let schema: Schema = required(m.schema.as_ref(), "fts schema")?.try_into()?;
    if m.fields.is_empty() {
        return Err(bad("FtsExec needs a column"));
    }
    let n = usize::from(m.has_prefilter) + m.fields.iter().filter(|f| f.has_flat).count();
    if inputs.len() != n {
        return Err(bad(format!(
            "FtsExec needs {n} inputs, got {}",
            inputs.len()
        )));
    }
    let mut it = inputs.iter().cloned();
    let prefilter = if m.has_prefilter { it.next() } else { None };
    let mut fields = Vec::with_capacity(m.fields.len());
    let mut flat = Vec::with_capacity(m.fields.len());
    for f in m.fields {
        flat.push(if f.has_flat { it.next() } else { None });
        fields.push(FtsField {
            column: f.column as usize,
            column_name: f.column_name,
            boost: f.boost,
            index: f.index,
            segments: dec_segments(&ds, f.segments)?,
        });
    }
    let op = MatchOp::parse(&m.op)
        .ok_or_else(|| bad(format!("unknown full-text operator '{}'", m.op)))?;
    let spec = FtsSpec {
        fields,
        query: m.query,
        op,
        k: m.k.map(|k| k as usize),
        max_expansions: m.max_expansions.map_or(MAX_EXPANSIONS, |n| n as usize),
        prefix_length: m.prefix_length as usize,
    };
    Ok(Arc::new(FtsExec::new(
        ds,
        spec,
        read,
        m.output
            .iter()
            .map(|i| if *i == u32::MAX { SCORE } else { *i as usize })
            .collect(),
        prefilter,
        flat,
        cache.clone(),
        Arc::new(schema),
    )))
}
