//! File names and paths of a dataset, as Lance names them.
//!
//! ```text
//! <root>/_versions/{u64::MAX - v:020}.manifest   (V2 naming; V1 = {v}.manifest)
//! <root>/_transactions/{read_version}-{uuid}.txn
//! <root>/data/{24 binary chars}{26 hex chars}.lance
//! <root>/_deletions/{fragment}-{read_version}-{id}.{arrow|bin}
//! <root>/_indices/{uuid}/...
//! ```

use object_store::path::Path;

use crate::format::DeletionFileKind;

pub const VERSIONS_DIR: &str = "_versions";
pub const TRANSACTIONS_DIR: &str = "_transactions";
pub const DATA_DIR: &str = "data";
pub const DELETIONS_DIR: &str = "_deletions";
pub const INDICES_DIR: &str = "_indices";
pub const MANIFEST_EXT: &str = "manifest";

/// How manifest files are named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManifestNaming {
    /// `{version}.manifest`
    V1,
    /// `{u64::MAX - version:020}.manifest`: lists newest first.
    V2,
}

/// Parses a file name of `_versions/`; `None` for anything that is not a
/// committed manifest (hints, staging files, detached versions).
pub fn parse_manifest_name(name: &str) -> Option<(u64, ManifestNaming)> {
    let stem = name.strip_suffix(".manifest")?;
    if !stem.bytes().all(|b| b.is_ascii_digit()) || stem.is_empty() {
        return None;
    }
    if stem.len() == 20 {
        let inv: u64 = stem.parse().ok()?;
        Some((u64::MAX - inv, ManifestNaming::V2))
    } else {
        Some((stem.parse().ok()?, ManifestNaming::V1))
    }
}

pub fn manifest_path(root: &Path, version: u64, naming: ManifestNaming) -> Path {
    let name = match naming {
        ManifestNaming::V1 => format!("{version}.{MANIFEST_EXT}"),
        ManifestNaming::V2 => format!("{:020}.{MANIFEST_EXT}", u64::MAX - version),
    };
    root.clone().join(VERSIONS_DIR).join(name)
}

/// A new data file name: 16 random bytes, the first 3 as 24 '0'/'1'
/// characters and the other 13 as 26 hex characters, then `.lance`.
pub fn new_data_file_name() -> String {
    let b = uuid::Uuid::new_v4().into_bytes();
    let mut s = String::with_capacity(56);
    for byte in &b[..3] {
        s.push_str(&format!("{byte:08b}"));
    }
    for byte in &b[3..] {
        s.push_str(&format!("{byte:02x}"));
    }
    s.push_str(".lance");
    s
}

pub fn data_file_path(root: &Path, relative: &str) -> Path {
    let mut p = root.clone().join(DATA_DIR);
    for part in relative.split('/') {
        p = p.join(part);
    }
    p
}

pub fn deletion_file_path(
    root: &Path,
    fragment: u64,
    read_version: u64,
    id: u64,
    kind: DeletionFileKind,
) -> Path {
    let ext = match kind {
        DeletionFileKind::Arrow => "arrow",
        DeletionFileKind::Bitmap => "bin",
    };
    root.clone()
        .join(DELETIONS_DIR)
        .join(format!("{fragment}-{read_version}-{id}.{ext}"))
}

pub fn transaction_path(root: &Path, name: &str) -> Path {
    root.clone().join(TRANSACTIONS_DIR).join(name)
}

pub fn index_dir(root: &Path, uuid: &uuid::Uuid) -> Path {
    root.clone()
        .join(INDICES_DIR)
        .join(uuid.hyphenated().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            parse_manifest_name("18446744073709551614.manifest"),
            Some((1, ManifestNaming::V2))
        );
        assert_eq!(
            parse_manifest_name("12.manifest"),
            Some((12, ManifestNaming::V1))
        );
        assert_eq!(parse_manifest_name("latest_version_hint.json"), None);
        assert_eq!(parse_manifest_name("d5.manifest"), None);
        assert_eq!(parse_manifest_name("3.manifest-1234"), None);
        let root = Path::from("t");
        assert_eq!(
            manifest_path(&root, 1, ManifestNaming::V2).to_string(),
            "t/_versions/18446744073709551614.manifest"
        );
        let n = new_data_file_name();
        assert_eq!(n.len(), 56);
        assert!(n[..24].bytes().all(|b| b == b'0' || b == b'1'));
    }
}
