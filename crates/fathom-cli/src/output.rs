//! Printing results as a table, CSV or JSON lines. Nothing is dropped:
//! every column of every row is printed, a NULL is told apart from an
//! empty string (CSV: nothing vs `""`; JSON: `null` vs `""`), NaN and
//! infinities stay what they are (JSON: the strings "NaN", "Infinity",
//! "-Infinity", since JSON numbers cannot hold them), nested values (lists,
//! structs, vectors) print as text in CSV and as JSON in JSON, and an
//! empty result still prints its header.

use std::io::Write;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float16Type, Float32Type, Float64Type};
use arrow_array::{Array, RecordBatch};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{ArrowError, DataType, Schema};

use crate::Format;

fn e(e: impl ToString) -> String {
    e.to_string()
}

pub fn print(
    schema: &Schema,
    batches: &[RecordBatch],
    format: Format,
    out: &mut dyn Write,
) -> Result<(), String> {
    if schema.fields().is_empty() && batches.iter().all(|b| b.num_columns() == 0) {
        return Ok(()); // DDL and DML without a result
    }
    match format {
        Format::Table => {
            let text = arrow_cast::pretty::pretty_format_batches_with_schema(
                std::sync::Arc::new(schema.clone()),
                batches,
            )
            .map_err(e)?;
            writeln!(out, "{text}").map_err(e)?;
        }
        Format::Csv => {
            let header: Vec<String> = schema
                .fields()
                .iter()
                .map(|f| csv_field(f.name()))
                .collect();
            writeln!(out, "{}", header.join(",")).map_err(e)?;
            let opts = FormatOptions::default().with_null("");
            for b in batches {
                let fmts = b
                    .columns()
                    .iter()
                    .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
                    .collect::<Result<Vec<_>, ArrowError>>()
                    .map_err(e)?;
                for row in 0..b.num_rows() {
                    let mut line = String::new();
                    for (i, (c, f)) in b.columns().iter().zip(&fmts).enumerate() {
                        if i > 0 {
                            line.push(',');
                        }
                        if c.is_valid(row) {
                            line.push_str(&csv_field(&f.value(row).to_string()));
                        }
                    }
                    writeln!(out, "{line}").map_err(e)?;
                }
            }
        }
        Format::Json => {
            let names: Vec<String> = schema
                .fields()
                .iter()
                .map(|f| serde_json::to_string(f.name()).unwrap())
                .collect();
            for b in batches {
                let cols = b
                    .columns()
                    .iter()
                    .map(|c| json_values(c.as_ref()))
                    .collect::<Result<Vec<_>, String>>()?;
                for row in 0..b.num_rows() {
                    let fields: Vec<String> = names
                        .iter()
                        .zip(&cols)
                        .map(|(n, c)| format!("{n}:{}", c[row]))
                        .collect();
                    writeln!(out, "{{{}}}", fields.join(",")).map_err(e)?;
                }
            }
        }
    }
    out.flush().map_err(e)
}

/// A CSV field: quoted when empty (so `""` is not NULL) or when it holds a
/// separator, quote or line break.
fn csv_field(s: &str) -> String {
    if s.is_empty() || s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Each value of `col` as JSON text (`null` for NULL).
fn json_values(col: &dyn Array) -> Result<Vec<String>, String> {
    fn float(v: f64) -> String {
        if v.is_nan() {
            "\"NaN\"".into()
        } else if v.is_infinite() {
            if v > 0.0 {
                "\"Infinity\""
            } else {
                "\"-Infinity\""
            }
            .into()
        } else {
            format!("{v:?}")
        }
    }
    let n = col.len();
    let get = |f: &dyn Fn(usize) -> f64| -> Vec<String> {
        (0..n)
            .map(|i| {
                if col.is_valid(i) {
                    float(f(i))
                } else {
                    "null".into()
                }
            })
            .collect()
    };
    Ok(match col.data_type() {
        DataType::Float64 => {
            let a = col.as_primitive::<Float64Type>();
            get(&|i| a.value(i))
        }
        DataType::Float32 => {
            // Shortest text of the f32 itself, not of its f64 widening.
            let a = col.as_primitive::<Float32Type>();
            (0..n)
                .map(|i| match (col.is_valid(i), a.value(i)) {
                    (false, _) => "null".into(),
                    (true, v) if v.is_finite() => format!("{v:?}"),
                    (true, v) => float(v as f64),
                })
                .collect()
        }
        DataType::Float16 => {
            let a = col.as_primitive::<Float16Type>();
            get(&|i| a.value(i).to_f64())
        }
        _ => {
            // arrow-json per column, nulls written out: {"v":<value>} per row.
            let field = arrow_schema::Field::new("v", col.data_type().clone(), true);
            let batch = RecordBatch::try_new(
                std::sync::Arc::new(Schema::new(vec![field])),
                vec![arrow_array::make_array(col.to_data())],
            )
            .map_err(e)?;
            let mut buf = Vec::new();
            {
                let mut w = arrow_json::WriterBuilder::new()
                    .with_explicit_nulls(true)
                    .build::<_, arrow_json::writer::LineDelimited>(&mut buf);
                w.write(&batch).map_err(e)?;
                w.finish().map_err(e)?;
            }
            String::from_utf8(buf)
                .map_err(e)?
                .lines()
                .map(|l| {
                    l.strip_prefix("{\"v\":")
                        .and_then(|l| l.strip_suffix('}'))
                        .unwrap_or("null")
                        .to_string()
                })
                .collect()
        }
    })
}
