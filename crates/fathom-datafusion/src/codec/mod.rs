//! [`FathomPhysicalCodec`]: every execution node of ours through
//! DataFusion's `PhysicalExtensionCodec` (datafusion-proto), so a
//! distributed engine (datafusion-distributed, Ballista) can ship Fathom
//! scans, index branches and DML to workers.
//!
//! A node's dataset travels as a [`DatasetSnapshot`] (URI, manifest bytes):
//! the worker reopens exactly the planned version without listing or
//! reading manifests, resolving the store from the URI. Physical
//! expressions go through datafusion-proto itself; index-query values
//! (any Arrow type) as Arrow IPC. Children are encoded by DataFusion.
//!
//! ```ignore
//! let codec = FathomPhysicalCodec::default();
//! let bytes = physical_plan_to_bytes_with_extension_codec(plan, &codec)?;
//! let plan = physical_plan_from_bytes_with_extension_codec(&bytes, &task_ctx, &codec)?;
//! ```

use std::io::Cursor;
use std::ops::Bound;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{Field, Schema, SchemaRef};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::pruning::PruningPredicateBuilder;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{
    PhysicalExtensionCodec, PhysicalPlanDecodeContext, PhysicalProtoConverterExtension,
};
use datafusion_proto::protobuf::PhysicalExprNode;
use fathom_index::{Exactness, IndexCache, IndexKind, ScalarQuery};
use fathom_table::scan::Projection;
use fathom_table::{Dataset, DatasetSnapshot, RowSet};
use prost::Message;

use crate::error::to_df;
use crate::exec::count::{CountRecheck, IndexCountExec};
use crate::exec::count_union::CountUnionExec;
use crate::exec::dml::{DmlExec, DmlKind, UpdateStrategy};
use crate::exec::exclusion::ExclusionExec;
use crate::exec::index_scan::ScalarIndexExec;
use crate::exec::overlaid::OverlaidRowsExec;
use crate::exec::scan::FragmentScanExec;
use crate::exec::take::TakeExec;
use crate::index_expr::IndexExpr;
use crate::plan::{ExclusionSource, FlatPartitions, ScanUnit};
use crate::provider::TableState;

/// Encodes and decodes Fathom's execution nodes. Decoded index nodes share
/// this codec's index cache.
#[derive(Debug, Default)]
pub struct FathomPhysicalCodec {
    cache: Arc<IndexCache>,
}

impl FathomPhysicalCodec {
    /// A codec whose decoded index nodes use `cache`.
    pub fn with_cache(cache: Arc<IndexCache>) -> Self {
        FathomPhysicalCodec { cache }
    }
}

mod search;
mod values;
mod wire;

use values::*;

fn bad(what: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Internal(format!("FathomPhysicalCodec: {what}"))
}

fn required<T>(v: Option<T>, what: &str) -> Result<T> {
    v.ok_or_else(|| bad(format!("message without its {what}")))
}

// ---- physical expressions (through datafusion-proto) ----

struct Exprs<'a> {
    codec: &'a FathomPhysicalCodec,
    conv: &'a dyn PhysicalProtoConverterExtension,
}

impl Exprs<'_> {
    fn enc(&self, e: &Arc<dyn PhysicalExpr>) -> Result<PhysicalExprNode> {
        self.conv.physical_expr_to_proto(e, self.codec)
    }
    fn enc_opt(&self, e: Option<&Arc<dyn PhysicalExpr>>) -> Result<Option<PhysicalExprNode>> {
        e.map(|e| self.enc(e)).transpose()
    }
}

struct ExprDecoder<'a> {
    ctx: PhysicalPlanDecodeContext<'a>,
    conv: &'a dyn PhysicalProtoConverterExtension,
}

impl ExprDecoder<'_> {
    fn dec(&self, e: &PhysicalExprNode, schema: &Schema) -> Result<Arc<dyn PhysicalExpr>> {
        self.conv.proto_to_physical_expr(e, schema, &self.ctx)
    }
    fn dec_opt(
        &self,
        e: Option<&PhysicalExprNode>,
        schema: &Schema,
    ) -> Result<Option<Arc<dyn PhysicalExpr>>> {
        e.map(|e| self.dec(e, schema)).transpose()
    }
}

// ---- nodes ----

fn enc_rows(rows: &RowSet) -> Result<Vec<u8>> {
    let t = rows.as_treemap();
    let mut out = Vec::with_capacity(t.serialized_size());
    t.serialize_into(&mut out)
        .map_err(|e| DataFusionError::Internal(format!("row set: {e}")))?;
    Ok(out)
}

fn dec_rows(bytes: &[u8]) -> Result<RowSet> {
    roaring::RoaringTreemap::deserialize_from(bytes)
        .map(RowSet::from)
        .map_err(|e| DataFusionError::Plan(format!("a corrupt row set in a serialized plan: {e}")))
}

fn enc_sources(sources: &[ExclusionSource]) -> Result<Vec<wire::ExclusionSource>> {
    sources
        .iter()
        .map(|s| {
            Ok(match s {
                ExclusionSource::DeletedRows => wire::ExclusionSource {
                    deleted_rows: true,
                    ..Default::default()
                },
                ExclusionSource::OutsideFragments(f) => wire::ExclusionSource {
                    fragments: f.iter().map(u64::from).collect(),
                    ..Default::default()
                },
                ExclusionSource::OverlaidRows(r) => wire::ExclusionSource {
                    rows: Some(enc_rows(r)?),
                    ..Default::default()
                },
            })
        })
        .collect()
}

fn dec_sources(sources: Vec<wire::ExclusionSource>) -> Result<Vec<ExclusionSource>> {
    sources
        .into_iter()
        .map(|s| {
            Ok(if s.deleted_rows {
                ExclusionSource::DeletedRows
            } else if let Some(r) = &s.rows {
                ExclusionSource::OverlaidRows(Arc::new(dec_rows(r)?))
            } else {
                // Ids beyond 32 bits name no fragment a row address can hold.
                ExclusionSource::OutsideFragments(std::sync::Arc::new(
                    s.fragments
                        .iter()
                        .filter_map(|&f| u32::try_from(f).ok())
                        .collect(),
                ))
            })
        })
        .collect()
}

impl FathomPhysicalCodec {
    fn encode_node(
        &self,
        node: &Arc<dyn ExecutionPlan>,
        x: &Exprs<'_>,
    ) -> Result<Option<wire::node::Kind>> {
        use wire::node::Kind;
        if let Some(n) = node.downcast_ref::<FragmentScanExec>() {
            let schema: SchemaRef = n.schema();
            return Ok(Some(Kind::Scan(wire::FragmentScan {
                dataset: Some(enc_dataset(n.dataset())),
                partitions: enc_partitions(n.plan()),
                read: Some(enc_projection(n.read())),
                output: n.output().iter().map(|i| *i as u32).collect(),
                filter: x.enc_opt(n.filter())?,
                prefilter_read: n.prefilter().map(|(p, _)| enc_projection(p)),
                prefilter: x.enc_opt(n.prefilter().map(|(_, f)| f))?,
                pruning: x.enc_opt(n.pruning().map(|p| p.orig_expr()))?,
                limit: n.limit().map(|l| l as u64),
                schema: Some(schema.as_ref().try_into()?),
                batch_size: n.batch_size() as u64,
                skipped_segments: n.skipped_segments() as u64,
            })));
        }
        if let Some(n) = node.downcast_ref::<ScalarIndexExec>() {
            return Ok(Some(Kind::Index(wire::ScalarIndex {
                dataset: Some(enc_dataset(n.dataset())),
                expr: Some(enc_index_expr(n.expr())?),
                planned: enc_exactness(n.planned()),
                batch_size: n.batch_size() as u64,
                skipped_segments: n.skipped_segments() as u64,
            })));
        }
        if let Some(n) = node.downcast_ref::<ExclusionExec>() {
            return Ok(Some(Kind::Exclusion(wire::Exclusion {
                dataset: Some(enc_dataset(n.dataset())),
                sources: enc_sources(n.sources())?,
            })));
        }
        if let Some(n) = node.downcast_ref::<OverlaidRowsExec>() {
            return Ok(Some(Kind::Overlaid(wire::OverlaidRows {
                rows: enc_rows(n.rows())?,
                batch_size: n.batch_size() as u64,
            })));
        }
        if node.is::<CountUnionExec>() {
            return Ok(Some(Kind::CountUnion(wire::CountUnion {})));
        }
        if let Some(n) = node.downcast_ref::<IndexCountExec>() {
            let schema: SchemaRef = n.schema();
            return Ok(Some(Kind::Count(wire::IndexCount {
                dataset: Some(enc_dataset(n.dataset())),
                expr: n.expr().map(enc_index_expr).transpose()?,
                planned: enc_exactness(n.planned()),
                sources: enc_sources(n.exclusions())?,
                recheck_read: n.recheck().map(|r| enc_projection(&r.read)),
                recheck: x.enc_opt(n.recheck().map(|r| &r.predicate))?,
                group_index: n.group_index().map(str::to_string),
                batch_size: n.batch_size() as u64,
                schema: Some(schema.as_ref().try_into()?),
                residual: n.recheck().is_some_and(|r| r.residual),
                rows: n.rows().map(|r| enc_rows(r)).transpose()?,
            })));
        }
        if let Some(k) = search::encode(node)? {
            return Ok(Some(k));
        }
        if let Some(n) = node.downcast_ref::<TakeExec>() {
            return Ok(Some(Kind::Take(wire::Take {
                dataset: Some(enc_dataset(n.dataset())),
                read: Some(enc_projection(n.read())),
                limit: n.limit().map(|l| l as u64),
                recheck: x.enc_opt(n.recheck())?,
                has_keep: n.keep().is_some(),
                keep: n
                    .keep()
                    .unwrap_or_default()
                    .iter()
                    .map(|i| *i as u32)
                    .collect(),
                residual: Some(n.recheck_residual()),
            })));
        }
        if let Some(n) = node.downcast_ref::<DmlExec>() {
            let state = n.state();
            let mut m = wire::Dml {
                dataset: Some(enc_dataset(n.dataset())),
                pinned: state.pinned(),
                ..Default::default()
            };
            match n.kind() {
                DmlKind::Insert { overwrite, .. } => m.op = u32::from(*overwrite),
                DmlKind::Delete { .. } => m.op = 2,
                DmlKind::Update {
                    assignments, mode, ..
                } => {
                    m.op = 3;
                    m.update_mode = match mode {
                        None => 0,
                        Some(UpdateStrategy::Rows) => 1,
                        Some(UpdateStrategy::Columns) => 2,
                        Some(UpdateStrategy::Overlay) => 3,
                    };
                    m.assignments = assignments
                        .iter()
                        .map(|a| {
                            Ok(wire::Assignment {
                                value: x.enc_opt(a.as_ref())?,
                            })
                        })
                        .collect::<Result<_>>()?;
                }
            }
            return Ok(Some(Kind::Dml(m)));
        }
        Ok(None)
    }

    fn decode_node(
        &self,
        kind: wire::node::Kind,
        inputs: &[Arc<dyn ExecutionPlan>],
        x: &ExprDecoder<'_>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        use wire::node::Kind;
        let one_input = |name: &str| -> Result<Arc<dyn ExecutionPlan>> {
            match inputs {
                [i] => Ok(i.clone()),
                _ => Err(bad(format!("{name} needs 1 input, got {}", inputs.len()))),
            }
        };
        Ok(match kind {
            Kind::Scan(m) => {
                let ds = dec_dataset(m.dataset)?;
                let read = dec_projection(m.read, &ds)?;
                let read_schema = read.schema(ds.schema());
                let schema: Schema = required(m.schema.as_ref(), "schema")?.try_into()?;
                let output: Vec<usize> = m.output.iter().map(|i| *i as usize).collect();
                if let Some(i) = output.iter().find(|i| **i >= read_schema.fields().len()) {
                    return Err(bad(format!("output column {i} is not read")));
                }
                let filter = x.dec_opt(m.filter.as_ref(), &read_schema)?;
                let pruning = x.dec_opt(m.pruning.as_ref(), ds.schema())?;
                let prefilter = match (m.prefilter_read, m.prefilter.as_ref()) {
                    (Some(p), Some(f)) => {
                        let cols = dec_projection(Some(p), &ds)?;
                        let f = x.dec(f, &cols.schema(ds.schema()))?;
                        Some((cols, f))
                    }
                    _ => None,
                };
                let mut exec = FragmentScanExec::new(
                    ds.clone(),
                    dec_partitions(m.partitions),
                    read,
                    output,
                    filter,
                    m.limit.map(|l| l as usize),
                    Arc::new(schema),
                    m.batch_size as usize,
                )
                .with_skipped_segments(m.skipped_segments as usize)
                .with_index_cache(self.cache.clone());
                if let Some(p) = pruning.and_then(|p| {
                    PruningPredicateBuilder::new()
                        .with_file_schema(ds.schema().clone())
                        .build(p)
                }) {
                    exec = exec.with_pruning(p);
                }
                if let Some((cols, f)) = prefilter {
                    exec = exec.with_prefilter(cols, f);
                }
                Arc::new(exec)
            }
            Kind::Index(m) => Arc::new(
                ScalarIndexExec::new(
                    dec_dataset(m.dataset)?,
                    dec_index_expr(required(m.expr, "index expression")?)?,
                    dec_exactness(m.planned)?,
                    self.cache.clone(),
                    m.batch_size as usize,
                )
                .with_skipped_segments(m.skipped_segments as usize),
            ),
            Kind::Exclusion(m) => Arc::new(ExclusionExec::new(
                one_input("ExclusionExec")?,
                dec_dataset(m.dataset)?,
                dec_sources(m.sources)?,
            )),
            Kind::Overlaid(m) => Arc::new(OverlaidRowsExec::new(
                Arc::new(dec_rows(&m.rows)?),
                m.batch_size as usize,
            )),
            Kind::Count(m) => {
                let ds = dec_dataset(m.dataset)?;
                let recheck = match (m.recheck_read, m.recheck.as_ref()) {
                    (Some(p), Some(f)) => {
                        let read = dec_projection(Some(p), &ds)?;
                        let predicate = x.dec(f, &read.schema(ds.schema()))?;
                        Some(CountRecheck {
                            read,
                            predicate,
                            residual: m.residual,
                        })
                    }
                    _ => None,
                };
                let schema: Schema = required(m.schema.as_ref(), "count schema")?.try_into()?;
                let count = IndexCountExec::new(
                    ds,
                    m.expr.map(dec_index_expr).transpose()?,
                    dec_exactness(m.planned)?,
                    self.cache.clone(),
                    dec_sources(m.sources)?,
                    recheck,
                    m.group_index,
                    m.batch_size as usize,
                    Arc::new(schema),
                )?;
                Arc::new(match m.rows {
                    Some(r) => count.with_rows(Arc::new(dec_rows(&r)?)),
                    None => count,
                })
            }
            Kind::CountUnion(_) => Arc::new(CountUnionExec::try_new(inputs.to_vec())?),
            Kind::Knn(m) => search::dec_knn(m, inputs, &self.cache)?,
            Kind::Fts(m) => search::dec_fts(m, inputs, &self.cache)?,
            Kind::Take(m) => {
                let ds = dec_dataset(m.dataset)?;
                let read = dec_projection(m.read, &ds)?;
                let read_schema = read.schema(ds.schema());
                let recheck = x.dec_opt(m.recheck.as_ref(), &read_schema)?;
                let take = TakeExec::new(
                    one_input("TakeExec")?,
                    ds,
                    read,
                    m.limit.map(|l| l as usize),
                )?;
                Arc::new(match recheck {
                    Some(f) => take
                        .with_recheck(
                            f,
                            m.has_keep
                                .then(|| m.keep.iter().map(|i| *i as usize).collect()),
                        )?
                        .with_recheck_residual(m.residual.unwrap_or(true)),
                    None => take,
                })
            }
            Kind::Dml(m) => {
                let ds = dec_dataset(m.dataset)?;
                let kind = match m.op {
                    0 | 1 => DmlKind::Insert {
                        input: one_input("an INSERT")?,
                        overwrite: m.op == 1,
                    },
                    2 | 3 => {
                        let input = one_input("a DELETE or UPDATE")?;
                        let schema = input.schema();
                        if m.op == 2 {
                            DmlKind::Delete { input }
                        } else {
                            let assignments = m
                                .assignments
                                .iter()
                                .map(|a| x.dec_opt(a.value.as_ref(), &schema))
                                .collect::<Result<_>>()?;
                            let mode = match m.update_mode {
                                0 => None,
                                1 => Some(UpdateStrategy::Rows),
                                2 => Some(UpdateStrategy::Columns),
                                3 => Some(UpdateStrategy::Overlay),
                                v => return Err(bad(format!("unknown update mode {v}"))),
                            };
                            DmlKind::Update {
                                input,
                                assignments,
                                mode,
                            }
                        }
                    }
                    op => return Err(bad(format!("unknown DML operation {op}"))),
                };
                Arc::new(DmlExec::new(
                    Arc::new(TableState::new(ds.clone(), m.pinned)),
                    ds,
                    kind,
                ))
            }
        })
    }
}

impl PhysicalExtensionCodec for FathomPhysicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let node = wire::Node::decode(buf).map_err(|e| bad(format!("not a Fathom node: {e}")))?;
        let x = ExprDecoder {
            ctx: PhysicalPlanDecodeContext::new(ctx, self),
            conv: proto_converter,
        };
        self.decode_node(required(node.kind, "node")?, inputs, &x)
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let x = Exprs {
            codec: self,
            conv: proto_converter,
        };
        match self.encode_node(&node, &x)? {
            Some(kind) => {
                wire::Node { kind: Some(kind) }.encode(buf).map_err(bad)?;
                Ok(())
            }
            None => Err(DataFusionError::NotImplemented(format!(
                "FathomPhysicalCodec cannot encode {}",
                node.name()
            ))),
        }
    }
}
