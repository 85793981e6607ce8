//! Zone statistics: per zone of N rows and per eligible top-level column,
//! the zone's min, max and null count, written with the file (an Arrow IPC
//! file in a global buffer, located by schema metadata) so that scans can
//! skip zones a filter cannot match. Readers that do not know the keys
//! (the real Lance) ignore them.
//!
//! Eligible columns: integers, floats, dates, times, timestamps, decimals,
//! utf8 / large_utf8. Min and max follow Arrow's total order (NaN largest).

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, UInt64Array, new_null_array};
use arrow_ord::ord::make_comparator;
use arrow_schema::{DataType, Field, Schema, SortOptions};

use crate::error::{Error, Result};

/// Schema metadata key: global buffer index of the statistics.
pub const STATS_KEY: &str = "fathom:zone_stats";
/// Schema metadata key: rows per zone.
pub const ZONE_ROWS_KEY: &str = "fathom:zone_rows";

pub fn eligible(dt: &DataType) -> bool {
    (dt.is_primitive() && !matches!(dt, DataType::Float16 | DataType::Interval(_)))
        || matches!(dt, DataType::Utf8 | DataType::LargeUtf8)
}

/// Min / max (1-element arrays, null when no non-null value) of `a`.
fn min_max(a: &ArrayRef) -> Result<(ArrayRef, ArrayRef)> {
    use arrow_arith::aggregate::{max, max_string, min, min_string};
    use arrow_array::cast::AsArray;
    use arrow_array::types::*;
    macro_rules! prim {
        ($t:ty) => {{
            let p = a.as_primitive::<$t>();
            let one = |v: Option<<$t as arrow_array::ArrowPrimitiveType>::Native>| -> ArrayRef {
                Arc::new(
                    arrow_array::PrimitiveArray::<$t>::from(vec![v])
                        .with_data_type(a.data_type().clone()),
                )
            };
            (one(min(p)), one(max(p)))
        }};
    }
    let dt = a.data_type();
    Ok(match dt {
        DataType::Int8 => prim!(Int8Type),
        DataType::Int16 => prim!(Int16Type),
        DataType::Int32 => prim!(Int32Type),
        DataType::Int64 => prim!(Int64Type),
        DataType::UInt8 => prim!(UInt8Type),
        DataType::UInt16 => prim!(UInt16Type),
        DataType::UInt32 => prim!(UInt32Type),
        DataType::UInt64 => prim!(UInt64Type),
        DataType::Float32 => prim!(Float32Type),
        DataType::Float64 => prim!(Float64Type),
        DataType::Date32 => prim!(Date32Type),
        DataType::Date64 => prim!(Date64Type),
        DataType::Timestamp(arrow_schema::TimeUnit::Second, _) => prim!(TimestampSecondType),
        DataType::Timestamp(arrow_schema::TimeUnit::Millisecond, _) => {
            prim!(TimestampMillisecondType)
        }
        DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, _) => {
            prim!(TimestampMicrosecondType)
        }
        DataType::Timestamp(arrow_schema::TimeUnit::Nanosecond, _) => {
            prim!(TimestampNanosecondType)
        }
        DataType::Utf8 => {
            let s = a.as_string::<i32>();
            (
                Arc::new(arrow_array::StringArray::from(vec![min_string(s)])) as ArrayRef,
                Arc::new(arrow_array::StringArray::from(vec![max_string(s)])) as ArrayRef,
            )
        }
        DataType::LargeUtf8 => {
            let s = a.as_string::<i64>();
            (
                Arc::new(arrow_array::LargeStringArray::from(vec![min_string(s)])) as ArrayRef,
                Arc::new(arrow_array::LargeStringArray::from(vec![max_string(s)])) as ArrayRef,
            )
        }
        _ => {
            // Other eligible types (times, durations, decimals): by sorting.
            let pick = |descending: bool| -> Result<ArrayRef> {
                let idx = arrow_ord::sort::sort_to_indices(
                    a.as_ref(),
                    Some(SortOptions {
                        descending,
                        nulls_first: false,
                    }),
                    Some(1),
                )?;
                Ok(if idx.is_empty() || a.is_null(idx.value(0) as usize) {
                    new_null_array(a.data_type(), 1)
                } else {
                    a.slice(idx.value(0) as usize, 1)
                })
            };
            (pick(false)?, pick(true)?)
        }
    })
}

fn better(a: &ArrayRef, b: &ArrayRef, want_less: bool) -> Result<ArrayRef> {
    if a.is_null(0) {
        return Ok(b.clone());
    }
    if b.is_null(0) {
        return Ok(a.clone());
    }
    let c = make_comparator(a.as_ref(), b.as_ref(), SortOptions::default())?;
    let less = c(0, 0) == std::cmp::Ordering::Less;
    Ok(if less == want_less {
        a.clone()
    } else {
        b.clone()
    })
}

/// Accumulates statistics as batches stream through the writer.
pub struct ZoneStatsBuilder {
    rows_per_zone: u64,
    columns: Vec<(usize, DataType)>,
    rows: u64,
    /// Per finished or open zone: per column (min, max, nulls).
    zones: Vec<Vec<(ArrayRef, ArrayRef, u64)>>,
    zone_rows: Vec<u64>,
}

impl ZoneStatsBuilder {
    pub fn new(schema: &Schema, rows_per_zone: u64) -> Self {
        ZoneStatsBuilder {
            rows_per_zone: rows_per_zone.max(1),
            columns: schema
                .fields()
                .iter()
                .enumerate()
                .filter(|(_, f)| eligible(f.data_type()))
                .map(|(i, f)| (i, f.data_type().clone()))
                .collect(),
            rows: 0,
            zones: vec![],
            zone_rows: vec![],
        }
    }

    pub fn push(&mut self, batch: &RecordBatch) -> Result<()> {
        if self.columns.is_empty() {
            return Ok(());
        }
        let mut offset = 0usize;
        while offset < batch.num_rows() {
            let zone = (self.rows / self.rows_per_zone) as usize;
            let room = (self.rows_per_zone - self.rows % self.rows_per_zone) as usize;
            let n = room.min(batch.num_rows() - offset);
            if zone == self.zones.len() {
                self.zones.push(
                    self.columns
                        .iter()
                        .map(|(_, dt)| (new_null_array(dt, 1), new_null_array(dt, 1), 0))
                        .collect(),
                );
                self.zone_rows.push(0);
            }
            for (k, (col, _)) in self.columns.iter().enumerate() {
                let slice = batch.column(*col).slice(offset, n);
                let (mn, mx) = min_max(&slice)?;
                let entry = &mut self.zones[zone][k];
                entry.0 = better(&entry.0, &mn, true)?;
                entry.1 = better(&entry.1, &mx, false)?;
                entry.2 += slice.null_count() as u64;
            }
            self.zone_rows[zone] += n as u64;
            self.rows += n as u64;
            offset += n;
        }
        Ok(())
    }

    /// The statistics as Arrow IPC bytes, or `None` when nothing is eligible.
    pub fn finish(self, schema: &Schema) -> Result<Option<Vec<u8>>> {
        if self.columns.is_empty() || self.zones.is_empty() {
            return Ok(None);
        }
        let mut fields = vec![Field::new("rows", DataType::UInt64, false)];
        let mut arrays: Vec<ArrayRef> = vec![Arc::new(UInt64Array::from(self.zone_rows.clone()))];
        for (k, (col, dt)) in self.columns.iter().enumerate() {
            let name = schema.field(*col).name();
            let mins: Vec<&dyn Array> = self.zones.iter().map(|z| z[k].0.as_ref()).collect();
            let maxs: Vec<&dyn Array> = self.zones.iter().map(|z| z[k].1.as_ref()).collect();
            fields.push(Field::new(format!("min:{name}"), dt.clone(), true));
            fields.push(Field::new(format!("max:{name}"), dt.clone(), true));
            fields.push(Field::new(format!("nulls:{name}"), DataType::UInt64, false));
            arrays.push(arrow_select::concat::concat(&mins)?);
            arrays.push(arrow_select::concat::concat(&maxs)?);
            arrays.push(Arc::new(UInt64Array::from_iter_values(
                self.zones.iter().map(|z| z[k].2),
            )));
        }
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?;
        let mut out = Vec::new();
        let mut w = arrow_ipc::writer::FileWriter::try_new(&mut out, &batch.schema())?;
        w.write(&batch)?;
        w.finish()?;
        drop(w);
        Ok(Some(out))
    }

    pub fn rows_per_zone(&self) -> u64 {
        self.rows_per_zone
    }
}

/// Zone statistics read back: `rows` per zone and, per column name,
/// `(min, max, nulls)` arrays with one entry per zone.
#[derive(Debug, Clone)]
pub struct ZoneStats {
    pub rows_per_zone: u64,
    pub batch: RecordBatch,
}

impl ZoneStats {
    pub fn decode(bytes: &[u8], rows_per_zone: u64, path: &str) -> Result<Self> {
        let r = arrow_ipc::reader::FileReader::try_new(std::io::Cursor::new(bytes), None)
            .map_err(|e| Error::corrupt(path, format!("zone statistics: {e}")))?;
        let schema = r.schema();
        let batches: Vec<RecordBatch> = r
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| Error::corrupt(path, format!("zone statistics: {e}")))?;
        Ok(ZoneStats {
            rows_per_zone,
            batch: arrow_select::concat::concat_batches(&schema, &batches)?,
        })
    }

    pub fn num_zones(&self) -> usize {
        self.batch.num_rows()
    }

    /// (min, max, nulls) of a column, if it has statistics.
    pub fn column(&self, name: &str) -> Option<(ArrayRef, ArrayRef, ArrayRef)> {
        Some((
            self.batch.column_by_name(&format!("min:{name}"))?.clone(),
            self.batch.column_by_name(&format!("max:{name}"))?.clone(),
            self.batch.column_by_name(&format!("nulls:{name}"))?.clone(),
        ))
    }

    pub fn rows(&self) -> ArrayRef {
        self.batch.column(0).clone()
    }
}
