//! Encoders for the values nodes carry: datasets, projections, flat
//! partitions, index expressions and their bounds and exactness.

use super::*;

// ---- datasets, projections, partitions ----

pub(super) fn enc_dataset(ds: &Dataset) -> wire::Dataset {
    let s = ds.snapshot();
    wire::Dataset {
        uri: s.uri,
        manifest: s.manifest.to_vec(),
        v1_names: s.v1_names,
    }
}

pub(super) fn dec_dataset(d: Option<wire::Dataset>) -> Result<Dataset> {
    let d = required(d, "dataset")?;
    Dataset::from_snapshot(&DatasetSnapshot {
        uri: d.uri,
        manifest: d.manifest.into(),
        v1_names: d.v1_names,
    })
    .map_err(to_df)
}

pub(super) fn enc_projection(p: &Projection) -> wire::Projection {
    wire::Projection {
        fields: p.fields.iter().map(|f| *f as u32).collect(),
        with_row_id: p.with_row_id,
        with_row_addr: p.with_row_addr,
    }
}

pub(super) fn dec_projection(p: Option<wire::Projection>, ds: &Dataset) -> Result<Projection> {
    let p = required(p, "projection")?;
    let n = ds.schema().fields().len();
    if let Some(f) = p.fields.iter().find(|f| **f as usize >= n) {
        return Err(bad(format!(
            "column {f} is beyond the {n} columns of {} version {}",
            ds.uri(),
            ds.version()
        )));
    }
    Ok(Projection {
        fields: p.fields.iter().map(|f| *f as usize).collect(),
        with_row_id: p.with_row_id,
        with_row_addr: p.with_row_addr,
    })
}

pub(super) fn enc_partitions(p: &FlatPartitions) -> Vec<wire::Partition> {
    p.partitions
        .iter()
        .map(|units| wire::Partition {
            units: units
                .iter()
                .map(|u| wire::ScanUnit {
                    fragment: u.fragment,
                    start: u.rows.start,
                    end: u.rows.end,
                })
                .collect(),
        })
        .collect()
}

pub(super) fn dec_partitions(p: Vec<wire::Partition>) -> FlatPartitions {
    FlatPartitions {
        partitions: p
            .into_iter()
            .map(|part| {
                part.units
                    .into_iter()
                    .map(|u| ScanUnit {
                        fragment: u.fragment,
                        rows: u.start..u.end,
                    })
                    .collect()
            })
            .collect(),
    }
}

// ---- index expressions ----

pub(super) fn enc_array(a: &ArrayRef) -> Result<Vec<u8>> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "v",
        a.data_type().clone(),
        true,
    )]));
    let batch = RecordBatch::try_new(schema.clone(), vec![a.clone()])?;
    let mut buf = Vec::new();
    let mut w = StreamWriter::try_new(&mut buf, &schema)?;
    w.write(&batch)?;
    w.finish()?;
    drop(w);
    Ok(buf)
}

pub(super) fn dec_array(bytes: &[u8]) -> Result<ArrayRef> {
    let reader = StreamReader::try_new(Cursor::new(bytes), None)?;
    let mut parts = Vec::new();
    for b in reader {
        parts.push(b?.column(0).clone());
    }
    match parts.len() {
        1 => Ok(parts.pop().unwrap()),
        n => Err(bad(format!("an index value holds {n} batches, not one"))),
    }
}

pub(super) fn enc_bound(b: &Bound<ArrayRef>) -> Result<Option<wire::Bound>> {
    Ok(match b {
        Bound::Unbounded => None,
        Bound::Included(v) => Some(wire::Bound {
            inclusive: true,
            value: enc_array(v)?,
        }),
        Bound::Excluded(v) => Some(wire::Bound {
            inclusive: false,
            value: enc_array(v)?,
        }),
    })
}

pub(super) fn dec_bound(b: Option<wire::Bound>) -> Result<Bound<ArrayRef>> {
    Ok(match b {
        None => Bound::Unbounded,
        Some(b) if b.inclusive => Bound::Included(dec_array(&b.value)?),
        Some(b) => Bound::Excluded(dec_array(&b.value)?),
    })
}

pub(super) fn enc_index_expr(e: &IndexExpr) -> Result<wire::IndexExpr> {
    use wire::index_expr::Kind;
    let pair = |a: &IndexExpr, b: &IndexExpr| -> Result<Box<wire::Pair>> {
        Ok(Box::new(wire::Pair {
            left: Some(Box::new(enc_index_expr(a)?)),
            right: Some(Box::new(enc_index_expr(b)?)),
        }))
    };
    let kind = match e {
        IndexExpr::Query {
            index,
            column,
            kind,
            query,
        } => {
            let mut q = wire::IndexQuery {
                index: index.clone(),
                column: column.clone(),
                kind: kind.name().to_string(),
                ..Default::default()
            };
            match query {
                ScalarQuery::Equals(v) => q.values = enc_array(v)?,
                ScalarQuery::IsIn(v) => {
                    q.op = 1;
                    q.values = enc_array(v)?;
                }
                ScalarQuery::IsNull => q.op = 2,
                ScalarQuery::Range { lower, upper } => {
                    q.op = 3;
                    q.lower = enc_bound(lower)?;
                    q.upper = enc_bound(upper)?;
                }
            }
            Kind::Query(q)
        }
        IndexExpr::And(a, b) => Kind::And(pair(a, b)?),
        IndexExpr::Or(a, b) => Kind::Or(pair(a, b)?),
    };
    Ok(wire::IndexExpr { kind: Some(kind) })
}

pub(super) fn dec_index_expr(e: wire::IndexExpr) -> Result<IndexExpr> {
    use wire::index_expr::Kind;
    let pair = |p: Box<wire::Pair>| -> Result<(Box<IndexExpr>, Box<IndexExpr>)> {
        let p = *p;
        Ok((
            Box::new(dec_index_expr(*required(p.left, "left operand")?)?),
            Box::new(dec_index_expr(*required(p.right, "right operand")?)?),
        ))
    };
    Ok(match required(e.kind, "index expression")? {
        Kind::Query(q) => {
            let kind = IndexKind::parse(&q.kind).map_err(|e| bad(e.to_string()))?;
            let query = match q.op {
                0 => ScalarQuery::Equals(dec_array(&q.values)?),
                1 => ScalarQuery::IsIn(dec_array(&q.values)?),
                2 => ScalarQuery::IsNull,
                3 => ScalarQuery::Range {
                    lower: dec_bound(q.lower)?,
                    upper: dec_bound(q.upper)?,
                },
                op => return Err(bad(format!("unknown index query operator {op}"))),
            };
            IndexExpr::Query {
                index: q.index,
                column: q.column,
                kind,
                query,
            }
        }
        Kind::And(p) => {
            let (a, b) = pair(p)?;
            IndexExpr::And(a, b)
        }
        Kind::Or(p) => {
            let (a, b) = pair(p)?;
            IndexExpr::Or(a, b)
        }
    })
}

pub(super) fn enc_exactness(e: Exactness) -> u32 {
    match e {
        Exactness::Exact => 0,
        Exactness::AtMost => 1,
        Exactness::AtLeast => 2,
    }
}

pub(super) fn dec_exactness(v: u32) -> Result<Exactness> {
    Ok(match v {
        0 => Exactness::Exact,
        1 => Exactness::AtMost,
        2 => Exactness::AtLeast,
        v => return Err(bad(format!("unknown exactness {v}"))),
    })
}
