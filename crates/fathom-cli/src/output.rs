//! Printing results as a table, CSV or JSON.

use std::io::Write;

use arrow_array::RecordBatch;

use crate::Format;

pub fn print(batches: &[RecordBatch], format: Format, out: &mut dyn Write) -> Result<(), String> {
    let e = |e: arrow_schema::ArrowError| e.to_string();
    match format {
        Format::Table => {
            if batches.iter().all(|b| b.num_columns() == 0) {
                return Ok(());
            }
            let text = arrow_cast::pretty::pretty_format_batches(batches).map_err(e)?;
            writeln!(out, "{text}").map_err(|e| e.to_string())?;
        }
        Format::Csv => {
            let mut w = arrow_csv::WriterBuilder::new().with_header(true).build(out);
            for b in batches {
                w.write(b).map_err(e)?;
            }
        }
        Format::Json => {
            let mut w = arrow_json::LineDelimitedWriter::new(out);
            for b in batches {
                w.write(b).map_err(e)?;
            }
            w.finish().map_err(e)?;
        }
    }
    Ok(())
}
