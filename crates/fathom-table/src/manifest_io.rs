//! Manifest files: length-prefixed protobuf sections and a 16-byte trailer.
//!
//! ```text
//! [u32 len][IndexSection]     (only when the version has indices)
//! [u32 len][Manifest]         (Manifest.index_section = offset of the section's prefix)
//! [i64 manifest position][u16 major = 0][u16 minor = 2]["LANC"]
//! ```

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use prost::Message;

use crate::error::{Error, Result};
use crate::format::Manifest;
use crate::pb;

const TRAILER_LEN: usize = 16;
const MAGIC: &[u8; 4] = b"LANC";

/// Serializes a manifest (and its index section) into manifest-file bytes.
pub fn encode_manifest(m: &Manifest) -> Bytes {
    let mut out = Vec::new();
    let mut pbm = m.to_pb();
    if !m.indices.is_empty() {
        let section = pb::IndexSection {
            indices: m.indices.iter().map(|i| i.to_pb()).collect(),
        }
        .encode_to_vec();
        pbm.index_section = Some(out.len() as u64);
        out.extend_from_slice(&(section.len() as u32).to_le_bytes());
        out.extend_from_slice(&section);
    }
    let pos = out.len() as i64;
    let body = pbm.encode_to_vec();
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&pos.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(MAGIC);
    Bytes::from(out)
}

fn section(bytes: &[u8], pos: u64, path: &str, what: &str) -> Result<Bytes> {
    let pos = pos as usize;
    let len = bytes
        .get(pos..pos + 4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize)
        .ok_or_else(|| Error::corrupt(path, format!("{what} offset {pos} beyond the file")))?;
    bytes
        .get(pos + 4..pos + 4 + len)
        .map(Bytes::copy_from_slice)
        .ok_or_else(|| {
            Error::corrupt(
                path,
                format!("{what} of {len} bytes at {pos} runs past the end"),
            )
        })
}

/// Parses manifest-file bytes.
pub fn decode_manifest(bytes: &[u8], path: &str) -> Result<Manifest> {
    if bytes.len() < TRAILER_LEN + 4 {
        return Err(Error::corrupt(
            path,
            format!("manifest is {} bytes: truncated", bytes.len()),
        ));
    }
    let t = &bytes[bytes.len() - TRAILER_LEN..];
    if &t[12..16] != MAGIC {
        return Err(Error::corrupt(
            path,
            "manifest does not end in \"LANC\": truncated or not a manifest",
        ));
    }
    let pos = i64::from_le_bytes(t[0..8].try_into().unwrap());
    if pos < 0 || pos as usize >= bytes.len() - TRAILER_LEN {
        return Err(Error::corrupt(
            path,
            format!("manifest position {pos} out of range"),
        ));
    }
    let body = section(bytes, pos as u64, path, "manifest")?;
    let m = pb::Manifest::decode(body)
        .map_err(|e| Error::corrupt(path, format!("manifest protobuf: {e}")))?;
    let indices = match m.index_section {
        Some(p) => {
            pb::IndexSection::decode(section(bytes, p, path, "index section")?)
                .map_err(|e| Error::corrupt(path, format!("index section protobuf: {e}")))?
                .indices
        }
        None => vec![],
    };
    Manifest::from_pb(m, indices, path)
}

pub async fn read_manifest(store: &dyn ObjectStore, path: &Path) -> Result<Manifest> {
    let bytes = store
        .get(path)
        .await
        .map_err(Error::io(store, path))?
        .bytes()
        .await
        .map_err(Error::io(store, path))?;
    let shown = crate::store::shown(store, path);
    let mut m = decode_manifest(&bytes, &shown)?;
    // A fragment reuse index whose details live in a file of its own.
    let external = m
        .indices
        .iter()
        .find(|i| crate::frag_reuse::is_frag_reuse(i))
        .and_then(|i| crate::frag_reuse::FragReuse::external_file(i).map(|f| (i.uuid, f)));
    if let Some((uuid, f)) = external {
        // `<root>/_versions/<n>.manifest` -> `<root>/_indices/<uuid>/<file>`.
        let parts: Vec<_> = path.parts().collect();
        let root: Path = parts[..parts.len().saturating_sub(2)]
            .iter()
            .cloned()
            .collect();
        let file = crate::naming::index_dir(&root, &uuid).join(f.path.as_str());
        let range = f.offset..f.offset + f.size;
        let data = store
            .get_range(&file, range)
            .await
            .map_err(Error::io(store, &file))?;
        crate::frag_reuse::load(&mut m, Some(&data))?;
    }
    Ok(m)
}

/// Writes a manifest only if no file exists at `path` (the commit point).
/// Returns `Ok(false)` when another writer created it first.
pub async fn write_manifest_if_absent(
    store: &dyn ObjectStore,
    path: &Path,
    m: &Manifest,
) -> Result<bool> {
    let opts = PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    match store
        .put_opts(path, PutPayload::from(encode_manifest(m)), opts)
        .await
    {
        Ok(_) => Ok(true),
        Err(object_store::Error::AlreadyExists { .. })
        | Err(object_store::Error::Precondition { .. }) => Ok(false),
        Err(e) => Err(Error::io(store, path)(e)),
    }
}
