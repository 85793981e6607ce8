//! The container: constants and the 40-byte footer.
//!
//! ```text
//! page buffers (each padded to 64 bytes)
//! global buffers (buffer 0 = FileDescriptor: schema + row count)
//! column metadata blobs (one ColumnMetadata protobuf per column)
//! CMO table: per column   u64 position, u64 size
//! GBO table: per global buffer   u64 position, u64 size
//! footer: u64 column_meta_start, u64 cmo_table_start, u64 gbo_table_start,
//!         u32 num_global_buffers, u32 num_columns, u16 major, u16 minor, "LANC"
//! ```

use crate::error::{Error, Result};

/// Trailing magic of every Lance file.
pub const MAGIC: &[u8; 4] = b"LANC";
/// Size of the footer in bytes.
pub const FOOTER_LEN: usize = 40;
/// Alignment of page buffers.
pub const PAGE_ALIGN: u64 = 64;
/// Byte used to pad page buffers (what Lance writes).
pub const PAD_BYTE: u8 = 0x48;
/// The footer of a 2.0 file says 0.3.
pub const V2_0_FOOTER: (u16, u16) = (0, 3);
/// Type URL of a 2.0 page encoding.
pub const ARRAY_ENCODING_URL: &str = "/lance.encodings.ArrayEncoding";
/// Type URL of a 2.1+ page layout.
pub const PAGE_LAYOUT_URL: &str = "/lance.encodings21.PageLayout";
/// Type URL of a column-level encoding.
pub const COLUMN_ENCODING_URL: &str = "/lance.encodings.ColumnEncoding";
/// Bytes read from the end of a file on open when its size is unknown or large.
pub const TAIL_READ: u64 = 64 * 1024;
/// A file of at most this many bytes is read whole on open (the tail read
/// covers it) and kept with the open reader: its pages are then read from
/// memory, with no request to the store. Tables of many tiny fragments
/// (frequent small commits) are made of such files; the bytes kept are at
/// most a few times the reader's own metadata.
pub const KEEP_WHOLE_MAX: u64 = 16 * 1024;

/// The decoded footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    pub column_meta_start: u64,
    pub cmo_table_start: u64,
    pub gbo_table_start: u64,
    pub num_global_buffers: u32,
    pub num_columns: u32,
    pub major: u16,
    pub minor: u16,
}

impl Footer {
    /// Does the file use the structural encodings of 2.1 and later?
    pub fn is_structural(&self) -> bool {
        self.major == 2 && self.minor >= 1
    }

    /// Parses and checks the last 40 bytes of a file of `file_size` bytes.
    pub fn parse(path: &str, bytes: &[u8], file_size: u64) -> Result<Self> {
        if bytes.len() != FOOTER_LEN {
            return Err(Error::corrupt(path, "footer shorter than 40 bytes"));
        }
        if &bytes[36..40] != MAGIC {
            return Err(Error::corrupt(
                path,
                format!(
                    "wrong magic {:?} at end of file (expected \"LANC\"): not a Lance file, or truncated",
                    String::from_utf8_lossy(&bytes[36..40])
                ),
            ));
        }
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap());
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
        let u16_at = |i: usize| u16::from_le_bytes(bytes[i..i + 2].try_into().unwrap());
        let f = Footer {
            column_meta_start: u64_at(0),
            cmo_table_start: u64_at(8),
            gbo_table_start: u64_at(16),
            num_global_buffers: u32_at(24),
            num_columns: u32_at(28),
            major: u16_at(32),
            minor: u16_at(34),
        };
        match (f.major, f.minor) {
            (0, 3) | (2, 0) | (2, 1) | (2, 2) => {}
            (2, m) => {
                return Err(Error::unsupported(
                    path,
                    format!("file format version 2.{m} (2.0, 2.1 and 2.2 are implemented)"),
                ));
            }
            (maj, min) => {
                return Err(Error::unsupported(
                    path,
                    format!("file format version {maj}.{min} (legacy or unknown)"),
                ));
            }
        }
        let body_end = file_size - FOOTER_LEN as u64;
        let cmo_end = f.cmo_table_start.checked_add(16 * f.num_columns as u64);
        let gbo_end = f
            .gbo_table_start
            .checked_add(16 * f.num_global_buffers as u64);
        let ok = f.column_meta_start <= f.cmo_table_start
            && cmo_end.is_some_and(|e| e <= body_end)
            && gbo_end.is_some_and(|e| e <= body_end)
            && f.num_global_buffers >= 1;
        if !ok {
            return Err(Error::corrupt(
                path,
                format!(
                    "footer offsets do not fit in a file of {file_size} bytes \
                     (column metadata at {}, offset tables at {} and {}, {} columns, {} global buffers)",
                    f.column_meta_start,
                    f.cmo_table_start,
                    f.gbo_table_start,
                    f.num_columns,
                    f.num_global_buffers
                ),
            ));
        }
        Ok(f)
    }

    /// Serializes the footer.
    pub fn to_bytes(&self) -> [u8; FOOTER_LEN] {
        let mut b = [0u8; FOOTER_LEN];
        b[0..8].copy_from_slice(&self.column_meta_start.to_le_bytes());
        b[8..16].copy_from_slice(&self.cmo_table_start.to_le_bytes());
        b[16..24].copy_from_slice(&self.gbo_table_start.to_le_bytes());
        b[24..28].copy_from_slice(&self.num_global_buffers.to_le_bytes());
        b[28..32].copy_from_slice(&self.num_columns.to_le_bytes());
        b[32..34].copy_from_slice(&self.major.to_le_bytes());
        b[34..36].copy_from_slice(&self.minor.to_le_bytes());
        b[36..40].copy_from_slice(MAGIC);
        b
    }
}

/// Does an `Any` type URL name `expected` (compared case-insensitively, on
/// the part after the last '/')?
pub fn type_url_is(url: &str, expected: &str) -> bool {
    let tail = |s: &str| s.rsplit('/').next().unwrap_or("").to_ascii_lowercase();
    tail(url) == tail(expected)
}
