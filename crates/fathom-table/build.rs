//! Compiles the table protos with protox (pure Rust); `lance.file` types are
//! reused from fathom-file rather than generated twice.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../protos");
    let files = ["table.proto", "transaction.proto", "rowids.proto"];
    for f in files.iter().chain(["file.proto"].iter()) {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    let fds = protox::compile(files, [&root])?;
    prost_build::Config::new()
        .extern_path(".lance.file", "::fathom_file::pb::file")
        .compile_fds(fds)?;
    Ok(())
}
