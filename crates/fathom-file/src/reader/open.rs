//! Opening a file: the tail read, footer, offset tables, column metadata
//! and schema, and the tree of read nodes with every page's encoding
//! parsed.

use super::*;

pub(super) fn build_nodes(
    fields: &[LanceField],
    next: &mut usize,
    structural: bool,
) -> Result<Vec<Node>> {
    fields
        .iter()
        .map(|f| {
            let field = f.to_arrow()?;
            // A struct marked packed is one column (2.1+): its fixed-width
            // children side by side in each row.
            let packed = structural && is_packed_struct(&field);
            let has_column = !structural
                || packed
                || !matches!(
                    field.data_type(),
                    DataType::Struct(_) | DataType::List(_) | DataType::LargeList(_)
                );
            let column = if has_column {
                *next += 1;
                *next - 1
            } else {
                NO_COLUMN
            };
            let children = if packed {
                Vec::new()
            } else {
                build_nodes(&f.children, next, structural)?
            };
            Ok(Node {
                column,
                field: Arc::new(field),
                children,
            })
        })
        .collect()
}

impl FileReader {
    /// Opens a file; pass its size if known to save a HEAD request.
    pub async fn open(
        store: Arc<dyn ObjectStore>,
        path: Path,
        size: Option<u64>,
        opts: FileReaderOptions,
    ) -> Result<Self> {
        let p = crate::io::shown(store.as_ref(), &path);
        let size = match size {
            Some(s) => s,
            None => {
                store
                    .head(&path)
                    .await
                    .map_err(|source| Error::Io {
                        path: p.clone(),
                        source,
                    })?
                    .size
            }
        };
        let io = FileIo {
            store,
            path,
            size,
            coalesce_gap: opts.coalesce_gap,
            stats: Arc::new(IoStats::default()),
            resident: None,
        };
        if size < FOOTER_LEN as u64 {
            return Err(Error::corrupt(
                &p,
                format!("file is {size} bytes, too short to hold the 40-byte footer"),
            ));
        }
        let tail_start = size.saturating_sub(TAIL_READ);
        let mut region_start = tail_start;
        // Copied: the reader outlives this read (readers are cached), and
        // must not pin a store's buffer such as a file mapping.
        let mut region = Bytes::copy_from_slice(&io.read(tail_start..size).await?);
        let footer = Footer::parse(&p, &region[region.len() - FOOTER_LEN..], size)?;
        let meta_start = footer.column_meta_start.min(footer.gbo_table_start);
        if meta_start < region_start {
            let head = io.read(meta_start..region_start).await?;
            let mut v = Vec::with_capacity(head.len() + region.len());
            v.extend_from_slice(&head);
            v.extend_from_slice(&region);
            region = Bytes::from(v);
            region_start = meta_start;
        }
        // A slice of the file, from the loaded region or a new read.
        let region_ref = &region;
        let get = |r: Range<u64>| {
            let io = io.clone();
            async move {
                if r.start >= region_start && r.end <= size {
                    Ok(region_ref
                        .slice((r.start - region_start) as usize..(r.end - region_start) as usize))
                } else {
                    io.read(r).await
                }
            }
        };
        let u64s = |b: &[u8]| -> Vec<u64> {
            b.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        let entry_range = |pos: u64, len: u64, what: &str| -> Result<Range<u64>> {
            match pos.checked_add(len) {
                Some(end) if end <= size => Ok(pos..end),
                _ => Err(Error::corrupt(
                    &p,
                    format!("{what} at {pos} (+{len} bytes) lies beyond the file ({size} bytes)"),
                )),
            }
        };

        let gbo = u64s(
            &get(footer.gbo_table_start
                ..footer.gbo_table_start + 16 * footer.num_global_buffers as u64)
            .await?,
        );
        let global_buffers = gbo
            .chunks_exact(2)
            .map(|c| entry_range(c[0], c[1], "global buffer"))
            .collect::<Result<Vec<_>>>()?;
        let descriptor = pbf::FileDescriptor::decode(get(global_buffers[0].clone()).await?)
            .map_err(|e| Error::corrupt(&p, format!("file descriptor (global buffer 0): {e}")))?;
        let pb_schema = descriptor
            .schema
            .ok_or_else(|| Error::corrupt(&p, "file descriptor has no schema"))?;
        let schema = LanceSchema::from_pb(&pb_schema.fields, &pb_schema.metadata)
            .map_err(|e| relabel(e, &p))?;
        let arrow_schema = Arc::new(schema.to_arrow().map_err(|e| relabel(e, &p))?);
        let num_rows = descriptor.length;

        let structural = footer.is_structural();
        let mut next = 0;
        let nodes =
            build_nodes(&schema.fields, &mut next, structural).map_err(|e| relabel(e, &p))?;
        if next != footer.num_columns as usize {
            return Err(Error::corrupt(
                &p,
                format!(
                    "schema has {next} columns but the footer lists {}",
                    footer.num_columns
                ),
            ));
        }
        let mut names = vec![String::new(); next];
        fn name_nodes(nodes: &[Node], prefix: &str, names: &mut Vec<String>) {
            for n in nodes {
                let name = if prefix.is_empty() {
                    n.field.name().clone()
                } else {
                    format!("{prefix}.{}", n.field.name())
                };
                name_nodes(&n.children, &name, names);
                if n.column != NO_COLUMN {
                    names[n.column] = name;
                }
            }
        }
        name_nodes(&nodes, "", &mut names);

        let cmo = u64s(
            &get(footer.cmo_table_start..footer.cmo_table_start + 16 * footer.num_columns as u64)
                .await?,
        );
        let mut columns = Vec::with_capacity(footer.num_columns as usize);
        for (c, entry) in cmo.chunks_exact(2).enumerate() {
            let range = entry_range(entry[0], entry[1], "column metadata")?;
            let meta = pb2::ColumnMetadata::decode(get(range).await?).map_err(|e| {
                Error::corrupt(&p, format!("metadata of column '{}': {e}", names[c]))
            })?;
            let column_bufs = meta
                .buffer_offsets
                .iter()
                .zip(&meta.buffer_sizes)
                .map(|(o, s)| entry_range(*o, *s, "column buffer"))
                .collect::<Result<Vec<_>>>()?;
            let mut pages = Vec::with_capacity(meta.pages.len());
            let mut starts = vec![0u64];
            let mut item_starts = vec![0u64];
            let mut data_bytes = 0;
            for (page_no, page) in meta.pages.iter().enumerate() {
                if page.buffer_offsets.len() != page.buffer_sizes.len() {
                    return Err(Error::corrupt(
                        &p,
                        format!(
                            "a page of column '{}' lists unequal buffer offsets and sizes",
                            names[c]
                        ),
                    ));
                }
                let bufs = page
                    .buffer_offsets
                    .iter()
                    .zip(&page.buffer_sizes)
                    .map(|(o, s)| entry_range(*o, *s, "page buffer"))
                    .collect::<Result<Vec<_>>>()?;
                data_bytes += page.buffer_sizes.iter().sum::<u64>();
                let any = match page.encoding.as_ref().and_then(|e| e.location.as_ref()) {
                    Some(pb2::encoding::Location::Direct(d)) => Bytes::from(d.encoding.clone()),
                    Some(pb2::encoding::Location::Indirect(d)) => {
                        get(entry_range(
                            d.buffer_location,
                            d.buffer_length,
                            "page encoding",
                        )?)
                        .await?
                    }
                    _ => {
                        return Err(Error::corrupt(
                            &p,
                            format!("a page of column '{}' has no encoding", names[c]),
                        ));
                    }
                };
                let enc = Enc::from_any_bytes(
                    &p,
                    &any,
                    &BufferTable {
                        page: &bufs,
                        column: &column_bufs,
                    },
                )
                .map_err(|e| relabel_page(e, &p, &names[c], page_no))?;
                let items = match &enc {
                    Enc::List { num_items, .. } => *num_items,
                    _ => 0,
                };
                starts.push(
                    starts
                        .last()
                        .unwrap()
                        .checked_add(page.length)
                        .ok_or_else(|| Error::corrupt(&p, "page lengths overflow"))?,
                );
                item_starts.push(item_starts.last().unwrap().saturating_add(items));
                pages.push(enc);
            }
            columns.push(ColumnInfo {
                name: names[c].clone(),
                pages,
                starts,
                item_starts,
                data_bytes,
            });
        }
        // A small file was read whole: keep it (see KEEP_WHOLE_MAX).
        let io = FileIo {
            resident: (region_start == 0 && size <= opts.keep_whole_max).then(|| region.clone()),
            ..io
        };
        let inner = Inner {
            io,
            schema,
            arrow_schema,
            num_rows,
            columns,
            nodes,
            global_buffers,
            opts,
            zone_stats: tokio::sync::OnceCell::new(),
            structural,
        };
        for n in &inner.nodes {
            inner.check_lengths(n, num_rows)?;
        }
        Ok(FileReader {
            inner: Arc::new(inner),
        })
    }
}
