//! Vector distance functions for SQL, with the values Lance returns as
//! `_distance`: `l2_distance` (squared Euclidean), `cosine_distance`
//! (1 - cos), `dot_distance` (1 - a·b). Arguments are two vectors:
//! `FixedSizeList` or `List` of floats, typically a vector column and an
//! array literal (`[0.1, 0.2, ...]`). NULL in, NULL out; vectors of
//! different lengths are an error that names both lengths.
//!
//! `ORDER BY <distance> LIMIT k` over a Fathom table becomes a vector
//! search (see `knn`).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use arrow_array::{Array, ArrayRef, Float32Array};
use arrow_schema::DataType;
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use fathom_index::vector::Metric;

/// One of the distance functions.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct DistanceUdf {
    metric: Metric,
    name: &'static str,
    signature: Signature,
}

impl DistanceUdf {
    pub fn new(metric: Metric) -> Self {
        DistanceUdf {
            metric,
            name: match metric {
                Metric::L2 => "l2_distance",
                Metric::Cosine => "cosine_distance",
                Metric::Dot => "dot_distance",
            },
            signature: Signature::any(2, Volatility::Immutable),
        }
    }

    pub fn metric(&self) -> Metric {
        self.metric
    }
}

/// The three distance functions as UDFs.
pub fn distance_udfs() -> Vec<ScalarUDF> {
    [Metric::L2, Metric::Cosine, Metric::Dot]
        .into_iter()
        .map(|m| ScalarUDF::new_from_impl(DistanceUdf::new(m)))
        .collect()
}

/// The metric of a distance function's name, if it is one.
pub fn metric_of(name: &str) -> Option<Metric> {
    match name {
        "l2_distance" => Some(Metric::L2),
        "cosine_distance" => Some(Metric::Cosine),
        "dot_distance" => Some(Metric::Dot),
        _ => None,
    }
}

/// Rows of vectors: flat f32 values and, per row, a (start, len) or NULL.
pub(crate) struct Vectors {
    values: Float32Array,
    rows: Vec<Option<(usize, usize)>>,
}

impl Vectors {
    pub(crate) fn from_array(name: &str, a: &ArrayRef) -> Result<Vectors> {
        let bad = || {
            DataFusionError::Plan(format!(
                "{name}: arguments must be vectors (lists of numbers), got {}",
                a.data_type()
            ))
        };
        let (child, rows): (ArrayRef, Vec<Option<(usize, usize)>>) = match a.data_type() {
            DataType::FixedSizeList(_, n) => {
                let l = a.as_fixed_size_list();
                let n = *n as usize;
                (
                    l.values().clone(),
                    (0..l.len())
                        .map(|i| l.is_valid(i).then_some((i * n, n)))
                        .collect(),
                )
            }
            DataType::List(_) => {
                let l = a.as_list::<i32>();
                let o = l.value_offsets();
                let base = o[0] as usize;
                (
                    l.values().clone(),
                    (0..l.len())
                        .map(|i| {
                            l.is_valid(i)
                                .then(|| (o[i] as usize - base, (o[i + 1] - o[i]) as usize))
                        })
                        .collect(),
                )
            }
            DataType::LargeList(_) => {
                let l = a.as_list::<i64>();
                let o = l.value_offsets();
                let base = o[0] as usize;
                (
                    l.values().clone(),
                    (0..l.len())
                        .map(|i| {
                            l.is_valid(i)
                                .then(|| (o[i] as usize - base, (o[i + 1] - o[i]) as usize))
                        })
                        .collect(),
                )
            }
            DataType::Null => (
                Arc::new(Float32Array::from(Vec::<f32>::new())),
                vec![None; a.len()],
            ),
            _ => return Err(bad()),
        };
        if !child.data_type().is_numeric() && child.data_type() != &DataType::Null {
            return Err(bad());
        }
        let values = datafusion::arrow::compute::cast(&child, &DataType::Float32)?;
        let values = values.as_primitive::<Float32Type>().clone();
        // A NULL element makes the row's distance NULL.
        let rows = if values.null_count() > 0 {
            rows.into_iter()
                .map(|r| r.filter(|(s, n)| (*s..s + n).all(|i| values.is_valid(i))))
                .collect()
        } else {
            rows
        };
        Ok(Vectors { values, rows })
    }

    pub(crate) fn from_scalar(name: &str, s: &ScalarValue) -> Result<Vectors> {
        Self::from_array(name, &s.to_array()?)
    }

    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    pub(crate) fn get(&self, i: usize) -> Option<&[f32]> {
        self.rows[i].map(|(s, n)| &self.values.values()[s..s + n])
    }
}

fn distances(name: &str, metric: Metric, a: &Vectors, b: &Vectors) -> Result<Float32Array> {
    let n = a.len().max(b.len());
    fn at(v: &Vectors, i: usize) -> Option<&[f32]> {
        if v.len() == 1 { v.get(0) } else { v.get(i) }
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        out.push(match (at(a, i), at(b, i)) {
            (Some(x), Some(y)) if x.len() == y.len() => Some(metric.distance(x, y)),
            (Some(x), Some(y)) => {
                return Err(DataFusionError::Execution(format!(
                    "{name}: vectors of different dimensions ({} and {})",
                    x.len(),
                    y.len()
                )));
            }
            _ => None,
        });
    }
    Ok(Float32Array::from(out))
}

/// A column name for a long vector literal: its first values, its length
/// and a hash of all its values (FNV-1a over their bytes), e.g.
/// `[0.12,-0.5,0.33,...128 values #5f0c2d9e8a1b7c43]`. DataFusion names
/// an expression by printing it, and a plan's passes name each
/// projection again: printing a 128-float query vector every time is
/// most of what planning a vector search costs. `None` for anything but
/// a literal list of more than 16 non-null numbers.
fn vector_literal_name(e: &Expr) -> Option<String> {
    const SHOWN: usize = 3;
    let Expr::Literal(v, _) = e else {
        return None;
    };
    let values: ArrayRef = match v {
        ScalarValue::List(a) if a.len() == 1 => a.value(0),
        ScalarValue::LargeList(a) if a.len() == 1 => a.value(0),
        ScalarValue::FixedSizeList(a) if a.len() == 1 => a.value(0),
        _ => return None,
    };
    let width = values.data_type().primitive_width()?;
    if values.len() <= 16 || values.null_count() > 0 || !values.data_type().is_numeric() {
        return None;
    }
    let data = values.to_data();
    let bytes = data.buffers().first()?.as_slice();
    let bytes = bytes.get(data.offset() * width..(data.offset() + data.len()) * width)?;
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in bytes {
        h = (h ^ *b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut name = String::from("[");
    for i in 0..SHOWN {
        name.push_str(&ScalarValue::try_from_array(&values, i).ok()?.to_string());
        name.push(',');
    }
    name.push_str(&format!("...{} values #{h:016x}]", values.len()));
    Some(name)
}

impl ScalarUDFImpl for DistanceUdf {
    fn name(&self) -> &str {
        self.name
    }

    /// `l2_distance(emb,[0.12,-0.5,0.33,...128 values #..])` for a long
    /// vector literal (see [`vector_literal_name`]), DataFusion's name
    /// otherwise.
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        let parts: Vec<String> = args
            .iter()
            .map(|a| vector_literal_name(a).unwrap_or_else(|| a.schema_name().to_string()))
            .collect();
        Ok(format!("{}({})", self.name, parts.join(",")))
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        for a in args {
            match a {
                DataType::FixedSizeList(f, _) | DataType::List(f) | DataType::LargeList(f)
                    if f.data_type().is_numeric() || f.data_type() == &DataType::Null => {}
                DataType::Null => {}
                other => {
                    return Err(DataFusionError::Plan(format!(
                        "{}: arguments must be vectors (lists of numbers), got {other}",
                        self.name
                    )));
                }
            }
        }
        Ok(DataType::Float32)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [a, b] = args.args.as_slice() else {
            return Err(DataFusionError::Plan(format!(
                "{} takes two vectors",
                self.name
            )));
        };
        let vecs = |c: &ColumnarValue| match c {
            ColumnarValue::Array(a) => Vectors::from_array(self.name, a),
            ColumnarValue::Scalar(s) => Vectors::from_scalar(self.name, s),
        };
        let (va, vb) = (vecs(a)?, vecs(b)?);
        let d = distances(self.name, self.metric, &va, &vb)?;
        if matches!((a, b), (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_))) {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&d, 0)?));
        }
        Ok(ColumnarValue::Array(Arc::new(d)))
    }
}
