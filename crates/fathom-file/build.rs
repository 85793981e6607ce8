//! Compiles protos/ with protox (pure Rust): no system `protoc` is needed.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../protos");
    let files = [
        "file.proto",
        "file2.proto",
        "encodings_v2_0.proto",
        "encodings_v2_1.proto",
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    let fds = protox::compile(files, [&root])?;
    prost_build::Config::new().compile_fds(fds)?;
    Ok(())
}
