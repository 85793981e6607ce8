//! Random Arrow data for property tests. Deterministic for a given seed.

use std::sync::Arc;

use arrow_array::types::*;
use arrow_array::*;
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A seeded generator.
pub struct Gen {
    pub rng: StdRng,
    /// Probability that a value is null (per level).
    pub null_prob: f64,
}

/// Every leaf type the file format stores.
pub fn leaf_types() -> Vec<DataType> {
    use DataType::*;
    vec![
        Boolean,
        Int8,
        Int16,
        Int32,
        Int64,
        UInt8,
        UInt16,
        UInt32,
        UInt64,
        Float16,
        Float32,
        Float64,
        Date32,
        Date64,
        Time32(TimeUnit::Second),
        Time32(TimeUnit::Millisecond),
        Time64(TimeUnit::Microsecond),
        Time64(TimeUnit::Nanosecond),
        Timestamp(TimeUnit::Second, None),
        Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
        Timestamp(TimeUnit::Microsecond, Some("America/New_York".into())),
        Timestamp(TimeUnit::Nanosecond, None),
        Decimal128(18, 3),
        Utf8,
        LargeUtf8,
        Binary,
        LargeBinary,
        FixedSizeBinary(5),
        FixedSizeList(Arc::new(Field::new("item", Float32, true)), 8),
    ]
}

impl Gen {
    pub fn new(seed: u64, null_prob: f64) -> Self {
        Gen {
            rng: StdRng::seed_from_u64(seed),
            null_prob,
        }
    }

    fn valid(&mut self) -> bool {
        !self.rng.random_bool(self.null_prob.clamp(0.0, 1.0))
    }

    fn validity(&mut self, n: usize) -> Option<NullBuffer> {
        if self.null_prob <= 0.0 {
            return None;
        }
        let v: Vec<bool> = (0..n).map(|_| self.valid()).collect();
        Some(NullBuffer::from(v))
    }

    /// A random data type: a leaf, or (up to `depth`) a list, large list or
    /// struct of random types.
    pub fn data_type(&mut self, depth: usize) -> DataType {
        let leaves = leaf_types();
        if depth == 0 || self.rng.random_bool(0.6) {
            return leaves[self.rng.random_range(0..leaves.len())].clone();
        }
        match self.rng.random_range(0..3) {
            0 => DataType::List(Arc::new(Field::new(
                "item",
                self.data_type(depth - 1),
                true,
            ))),
            1 => DataType::LargeList(Arc::new(Field::new(
                "item",
                self.data_type(depth - 1),
                true,
            ))),
            _ => {
                let k = self.rng.random_range(1..=3);
                DataType::Struct(Fields::from(
                    (0..k)
                        .map(|i| Field::new(format!("f{i}"), self.data_type(depth - 1), true))
                        .collect::<Vec<_>>(),
                ))
            }
        }
    }

    /// A random schema of `cols` columns.
    pub fn schema(&mut self, cols: usize, depth: usize) -> Schema {
        Schema::new(
            (0..cols)
                .map(|i| Field::new(format!("c{i}"), self.data_type(depth), true))
                .collect::<Vec<_>>(),
        )
    }

    /// A batch of `n` random rows.
    pub fn batch(&mut self, schema: &Arc<Schema>, n: usize) -> RecordBatch {
        let cols = schema
            .fields()
            .iter()
            .map(|f| self.array(f.data_type(), n))
            .collect();
        RecordBatch::try_new(schema.clone(), cols).unwrap()
    }

    fn prim<T: ArrowPrimitiveType>(
        &mut self,
        n: usize,
        f: impl Fn(&mut StdRng) -> T::Native,
    ) -> PrimitiveArray<T> {
        let vals: Vec<Option<T::Native>> = (0..n)
            .map(|_| {
                if self.valid() {
                    Some(f(&mut self.rng))
                } else {
                    None
                }
            })
            .collect();
        vals.into_iter().collect::<PrimitiveArray<T>>()
    }

    fn strings(&mut self, n: usize) -> Vec<Option<String>> {
        // Half the time draw from a small vocabulary, so dictionaries appear.
        let vocab = self.rng.random_bool(0.5);
        (0..n)
            .map(|_| {
                if !self.valid() {
                    return None;
                }
                Some(if vocab {
                    format!("word{}", self.rng.random_range(0..7))
                } else {
                    let len = self.rng.random_range(0..12);
                    (0..len)
                        .map(|_| char::from(self.rng.random_range(b'a'..=b'z')))
                        .collect()
                })
            })
            .collect()
    }

    /// A random array of type `dt`.
    pub fn array(&mut self, dt: &DataType, n: usize) -> ArrayRef {
        use DataType::*;
        match dt {
            Boolean => {
                let v: Vec<Option<bool>> = (0..n)
                    .map(|_| self.valid().then(|| self.rng.random()))
                    .collect();
                Arc::new(BooleanArray::from(v))
            }
            Int8 => Arc::new(self.prim::<Int8Type>(n, |r| r.random())),
            Int16 => Arc::new(self.prim::<Int16Type>(n, |r| r.random())),
            Int32 => Arc::new(self.prim::<Int32Type>(n, |r| r.random_range(-1000..1000))),
            Int64 => Arc::new(self.prim::<Int64Type>(n, |r| r.random())),
            UInt8 => Arc::new(self.prim::<UInt8Type>(n, |r| r.random())),
            UInt16 => Arc::new(self.prim::<UInt16Type>(n, |r| r.random())),
            UInt32 => Arc::new(self.prim::<UInt32Type>(n, |r| r.random())),
            UInt64 => Arc::new(self.prim::<UInt64Type>(n, |r| r.random())),
            Float16 => Arc::new(
                self.prim::<Float16Type>(n, |r| half::f16::from_f32(r.random_range(-10.0..10.0))),
            ),
            Float32 => Arc::new(self.prim::<Float32Type>(n, |r| r.random_range(-1.0..1.0))),
            Float64 => Arc::new(self.prim::<Float64Type>(n, |r| r.random())),
            Date32 => Arc::new(self.prim::<Date32Type>(n, |r| r.random_range(0..40000))),
            Date64 => {
                Arc::new(self.prim::<Date64Type>(n, |r| r.random_range(0..4_000_000_000_000)))
            }
            Time32(TimeUnit::Second) => {
                Arc::new(self.prim::<Time32SecondType>(n, |r| r.random_range(0..86400)))
            }
            Time32(_) => {
                Arc::new(self.prim::<Time32MillisecondType>(n, |r| r.random_range(0..86_400_000)))
            }
            Time64(TimeUnit::Microsecond) => Arc::new(
                self.prim::<Time64MicrosecondType>(n, |r| r.random_range(0..86_400_000_000)),
            ),
            Time64(_) => Arc::new(
                self.prim::<Time64NanosecondType>(n, |r| r.random_range(0..86_400_000_000_000)),
            ),
            Timestamp(unit, tz) => {
                let a: ArrayRef = match unit {
                    TimeUnit::Second => Arc::new(
                        self.prim::<TimestampSecondType>(n, |r| r.random_range(0..2_000_000_000)),
                    ),
                    TimeUnit::Millisecond => {
                        Arc::new(self.prim::<TimestampMillisecondType>(n, |r| {
                            r.random_range(0..2_000_000_000_000)
                        }))
                    }
                    TimeUnit::Microsecond => {
                        Arc::new(self.prim::<TimestampMicrosecondType>(n, |r| {
                            r.random_range(0..2_000_000_000_000_000)
                        }))
                    }
                    TimeUnit::Nanosecond => {
                        Arc::new(self.prim::<TimestampNanosecondType>(n, |r| r.random()))
                    }
                };
                retz(a, tz.clone())
            }
            Duration(_) => Arc::new(self.prim::<DurationMicrosecondType>(n, |r| r.random())),
            Decimal128(p, s) => Arc::new(
                self.prim::<Decimal128Type>(n, |r| {
                    r.random_range(-999_999_999_999..999_999_999_999)
                })
                .with_precision_and_scale(*p, *s)
                .unwrap(),
            ),
            Utf8 => Arc::new(StringArray::from(self.strings(n))),
            LargeUtf8 => Arc::new(LargeStringArray::from(self.strings(n))),
            Binary => {
                let s = self.strings(n);
                Arc::new(BinaryArray::from_iter(
                    s.iter().map(|v| v.as_ref().map(|v| v.as_bytes())),
                ))
            }
            LargeBinary => {
                let s = self.strings(n);
                Arc::new(LargeBinaryArray::from_iter(
                    s.iter().map(|v| v.as_ref().map(|v| v.as_bytes())),
                ))
            }
            FixedSizeBinary(w) => {
                let w = *w as usize;
                let vals: Vec<Option<Vec<u8>>> = (0..n)
                    .map(|_| {
                        self.valid()
                            .then(|| (0..w).map(|_| self.rng.random()).collect())
                    })
                    .collect();
                Arc::new(
                    FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                        vals.into_iter(),
                        w as i32,
                    )
                    .unwrap(),
                )
            }
            FixedSizeList(f, d) => {
                let child = self.array(f.data_type(), n * *d as usize);
                let nulls = self.validity(n);
                Arc::new(FixedSizeListArray::new(f.clone(), *d, child, nulls))
            }
            List(f) | LargeList(f) => {
                let lengths: Vec<usize> = (0..n).map(|_| self.rng.random_range(0..4)).collect();
                let total = lengths.iter().sum();
                let child = self.array(f.data_type(), total);
                let nulls = self.validity(n);
                if matches!(dt, List(_)) {
                    Arc::new(ListArray::new(
                        f.clone(),
                        OffsetBuffer::from_lengths(lengths),
                        child,
                        nulls,
                    ))
                } else {
                    Arc::new(LargeListArray::new(
                        f.clone(),
                        OffsetBuffer::from_lengths(lengths),
                        child,
                        nulls,
                    ))
                }
            }
            Struct(fields) => {
                let children = fields
                    .iter()
                    .map(|f| self.array(f.data_type(), n))
                    .collect();
                // Lance 2.0 cannot store struct validity: structs are never null.
                Arc::new(StructArray::new(fields.clone(), children, None))
            }
            other => panic!("generator does not support {other}"),
        }
    }
}

fn retz(a: ArrayRef, tz: Option<Arc<str>>) -> ArrayRef {
    use arrow_array::cast::AsArray;
    match a.data_type() {
        DataType::Timestamp(TimeUnit::Second, _) => Arc::new(
            a.as_primitive::<TimestampSecondType>()
                .clone()
                .with_timezone_opt(tz),
        ),
        DataType::Timestamp(TimeUnit::Millisecond, _) => Arc::new(
            a.as_primitive::<TimestampMillisecondType>()
                .clone()
                .with_timezone_opt(tz),
        ),
        DataType::Timestamp(TimeUnit::Microsecond, _) => Arc::new(
            a.as_primitive::<TimestampMicrosecondType>()
                .clone()
                .with_timezone_opt(tz),
        ),
        _ => Arc::new(
            a.as_primitive::<TimestampNanosecondType>()
                .clone()
                .with_timezone_opt(tz),
        ),
    }
}
