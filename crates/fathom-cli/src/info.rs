//! `fathom info DATASET`.

use fathom_table::Dataset;

/// A commit time as a UTC date, e.g. `2026-12-02 19:03:52.123 UTC`.
fn ts(t: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t)
        .format("%Y-%m-%d %H:%M:%S%.3f UTC")
        .to_string()
}

pub async fn run(uri: &str) -> Result<(), String> {
    let ds = Dataset::open(uri).await.map_err(|e| e.to_string())?;
    let m = ds.manifest();
    println!("dataset:   {uri}");
    println!(
        "version:   {} (format lance {}, {})",
        m.version,
        m.data_format.1,
        if m.uses_stable_row_ids() {
            "stable row ids"
        } else {
            "row ids = addresses"
        }
    );
    println!(
        "rows:      {} live, {} deleted",
        m.num_rows(),
        m.num_deleted_rows()
    );
    let bytes: u64 = m
        .fragments
        .iter()
        .flat_map(|f| f.files.iter())
        .map(|f| f.file_size_bytes)
        .sum();
    println!("fragments: {} ({} data bytes)", m.fragments.len(), bytes);
    println!("schema:");
    for f in ds.schema().fields() {
        println!(
            "  {}: {}{}",
            f.name(),
            f.data_type(),
            if f.is_nullable() { "" } else { " NOT NULL" }
        );
    }
    println!("fragments:");
    for f in &m.fragments {
        let deleted = f.deletion_file.as_ref().map_or(0, |d| d.num_deleted_rows);
        let size: u64 = f.files.iter().map(|d| d.file_size_bytes).sum();
        println!(
            "  #{:<5} rows {:>10}  deleted {:>8}  files {}  bytes {}",
            f.id,
            f.physical_rows,
            deleted,
            f.files.len(),
            size
        );
    }
    println!("indexes:");
    if m.indices.is_empty() {
        println!("  (none)");
    }
    for i in &m.indices {
        let kind = i
            .index_details
            .as_ref()
            .map_or("?", |d| d.type_url.rsplit('.').next().unwrap_or("?"));
        let covered = i
            .fragment_bitmap
            .as_ref()
            .map_or("unknown".to_string(), |b| format!("{} fragments", b.len()));
        println!(
            "  {} ({kind}) on fields {:?}: {covered}, built at version {}",
            i.name, i.fields, i.dataset_version
        );
    }
    println!("versions:");
    for v in ds.versions().await.map_err(|e| e.to_string())? {
        println!(
            "  v{:<5} at {}  rows {:>10}  fragments {}",
            v.version,
            ts(v.timestamp),
            v.num_rows,
            v.num_fragments
        );
    }
    Ok(())
}

/// `fathom count DATASET [FILTER]`: prints the number of matching rows.
pub async fn count(uri: &str, filter: Option<&str>) -> Result<(), String> {
    let table = fathom_datafusion::open_table(uri, None, None, Default::default())
        .await
        .map_err(|e| e.to_string())?;
    let ctx = fathom_datafusion::new_session(None).map_err(|e| e.to_string())?;
    let n = table
        .count_rows(&ctx, filter)
        .await
        .map_err(|e| e.to_string())?;
    println!("{n}");
    Ok(())
}
