//! Reading columns: a selection of rows is split by page, each page's
//! byte ranges are planned from its encoding, fetched in one coalesced
//! request set and decoded; strings and lists take a second round for
//! their bytes or items.

use super::*;

/// How a leaf page is read.
enum LeafPlan {
    Fixed,
    BinaryFull,
    BinaryPartial,
    Dictionary,
}

enum Step {
    Done(ArrayRef),
    Bytes {
        runs: Vec<OffsetRun>,
        ranges: Vec<Range<u64>>,
    },
}

fn bytes_buffer(enc: &Enc, ctx: &Ctx) -> Result<Range<u64>> {
    match enc {
        Enc::Flat { bits: 8, buf } => Ok(buf.clone()),
        _ => Err(ctx.unsupported("binary bytes not stored as Flat(8 bits)")),
    }
}

impl Inner {
    pub(super) fn ctx<'a>(&'a self, column: usize) -> Ctx<'a> {
        Ctx {
            path: self.io.path.as_ref(),
            column: &self.columns[column].name,
            page: None,
        }
    }

    /// Checks that page lengths add up along the schema tree.
    pub(super) fn check_lengths(&self, node: &Node, rows: u64) -> Result<()> {
        if self.structural {
            // Every leaf column holds one entry per row, nested or not.
            if node.column != NO_COLUMN {
                let have = *self.columns[node.column].starts.last().unwrap();
                if have != rows {
                    return Err(self
                        .ctx(node.column)
                        .corrupt(format!("pages hold {have} rows but {rows} are expected")));
                }
            }
            for c in &node.children {
                self.check_lengths(c, rows)?;
            }
            return Ok(());
        }
        let col = &self.columns[node.column];
        let have = *col.starts.last().unwrap();
        if have != rows {
            return Err(self
                .ctx(node.column)
                .corrupt(format!("pages hold {have} values but {rows} are expected")));
        }
        match node.field.data_type() {
            DataType::List(_) | DataType::LargeList(_) => {
                for p in &col.pages {
                    if !matches!(p, Enc::List { .. } | Enc::AllNull) {
                        return Err(self.ctx(node.column).corrupt(format!(
                            "list column page encoded as {}",
                            crate::encoding::decode::enc_name(p)
                        )));
                    }
                }
                self.check_lengths(&node.children[0], *col.item_starts.last().unwrap())
            }
            DataType::Struct(_) => {
                for c in &node.children {
                    self.check_lengths(c, rows)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Splits a column-level selection into page-local selections.
    pub(super) fn split(&self, column: usize, sel: &[Range<u64>]) -> Vec<(usize, Vec<Range<u64>>)> {
        let starts = &self.columns[column].starts;
        let mut out: Vec<(usize, Vec<Range<u64>>)> = Vec::new();
        let mut p = 0;
        for r in sel {
            let mut s = r.start;
            while s < r.end {
                while starts[p + 1] <= s {
                    p += 1;
                }
                let e = r.end.min(starts[p + 1]);
                let local = s - starts[p]..e - starts[p];
                match out.last_mut() {
                    Some((lp, v)) if *lp == p => v.push(local),
                    _ => out.push((p, vec![local])),
                }
                s = e;
            }
        }
        out
    }

    pub(super) fn read_node<'a>(
        &'a self,
        node: &'a Node,
        sel: Vec<Range<u64>>,
    ) -> BoxFuture<'a, Result<ArrayRef>> {
        async move {
            let dt = node.field.data_type();
            if sel.is_empty() {
                return Ok(new_empty_array(dt));
            }
            if self.structural {
                return self.read_node21(node, sel).await;
            }
            match dt {
                DataType::Struct(fields) => {
                    let n = sel_len(&sel) as usize;
                    if node.children.is_empty() {
                        return Ok(Arc::new(StructArray::new_empty_fields(n, None)) as ArrayRef);
                    }
                    let children =
                        try_join_all(node.children.iter().map(|c| self.read_node(c, sel.clone())))
                            .await?;
                    Ok(Arc::new(StructArray::try_new(fields.clone(), children, None)?) as ArrayRef)
                }
                DataType::List(item) | DataType::LargeList(item) => {
                    self.read_list(node, item.clone(), sel).await
                }
                _ => self.read_leaf(node.column, dt, &sel).await,
            }
        }
        .boxed()
    }

    async fn read_list(
        &self,
        node: &Node,
        item: Arc<Field>,
        sel: Vec<Range<u64>>,
    ) -> Result<ArrayRef> {
        let column = node.column;
        let ctx = self.ctx(column);
        let info = &self.columns[column];
        let parts = self.split(column, &sel);
        let mut ranges = Vec::new();
        for (p, s) in &parts {
            if let Enc::List { offsets, .. } = &info.pages[*p] {
                fixed_ranges(offsets, &offset_runs(s), &ctx, &mut ranges)?;
            }
        }
        let fetched = self.io.read_ranges(&ranges).await?;
        let mut it = fetched.into_iter();
        let mut lengths: Vec<u64> = Vec::with_capacity(sel_len(&sel) as usize);
        let mut validity: Vec<bool> = Vec::with_capacity(lengths.capacity());
        let mut any_null = false;
        let mut item_sel = Vec::new();
        for (p, s) in &parts {
            match &info.pages[*p] {
                Enc::List {
                    offsets,
                    null_adj,
                    num_items,
                } => {
                    let offs = decode_u64s(offsets, &offset_runs(s), &ctx, &mut it)?;
                    let runs = interpret_offsets(s, &offs, *null_adj, *num_items, &ctx)?;
                    let base = info.item_starts[*p];
                    for run in runs {
                        item_sel.push(base + run.items.start..base + run.items.end);
                        match &run.validity {
                            Some(v) => {
                                any_null = true;
                                validity.extend_from_slice(v)
                            }
                            None => validity.extend(std::iter::repeat_n(true, run.lengths.len())),
                        }
                        lengths.extend_from_slice(&run.lengths);
                    }
                }
                _ => {
                    let n = sel_len(s) as usize;
                    any_null = true;
                    lengths.extend(std::iter::repeat_n(0, n));
                    validity.extend(std::iter::repeat_n(false, n));
                }
            }
        }
        let values = self
            .read_node(&node.children[0], merge_runs(item_sel))
            .await?;
        let nulls = any_null.then(|| NullBuffer::new(BooleanBuffer::from(validity)));
        Ok(match node.field.data_type() {
            DataType::List(_) => {
                let total: u64 = lengths.iter().sum();
                if total > i32::MAX as u64 {
                    return Err(Error::invalid(format!(
                        "column '{}': {total} list items in one read exceed i32 offsets",
                        info.name
                    )));
                }
                let offsets =
                    OffsetBuffer::<i32>::from_lengths(lengths.iter().map(|l| *l as usize));
                Arc::new(ListArray::try_new(item, offsets, values, nulls)?) as ArrayRef
            }
            _ => {
                let offsets =
                    OffsetBuffer::<i64>::from_lengths(lengths.iter().map(|l| *l as usize));
                Arc::new(LargeListArray::try_new(item, offsets, values, nulls)?) as ArrayRef
            }
        })
    }

    async fn read_leaf(
        &self,
        column: usize,
        dt: &DataType,
        sel: &[Range<u64>],
    ) -> Result<ArrayRef> {
        // A dictionary-typed column (Lance's `dict:` logical type) holds
        // pages of Arrow dictionary keys (0-based, nulls in their validity)
        // and items; pages of plain values are encoded after reading.
        let (dt, dict_type) = match dt {
            DataType::Dictionary(_, value) => (value.as_ref(), Some(dt)),
            _ => (dt, None),
        };
        let ctx = self.ctx(column);
        let info = &self.columns[column];
        let parts = self.split(column, sel);
        let page_rows = |p: usize| info.starts[p + 1] - info.starts[p];

        // Many runs of plain fixed-width values (a take of scattered rows):
        // gather their bytes straight into one buffer.
        if let Some(w) = byte_width(dt).filter(|_| *dt != DataType::Boolean)
            && parts.iter().map(|(_, s)| s.len()).sum::<usize>() > 1
            && parts.iter().all(|(p, _)| {
                matches!(plain(&info.pages[*p]), Some(Enc::Flat { bits, .. }) if *bits == w * 8)
            })
        {
            let mut ranges = Vec::with_capacity(sel.len());
            for (p, s) in &parts {
                fixed_ranges(plain(&info.pages[*p]).unwrap(), s, &ctx, &mut ranges)?;
            }
            let buf = self.io.read_concat(&ranges).await?;
            let n = sel_len(sel) as usize;
            if buf.len() != n * w as usize {
                return Err(ctx.corrupt("flat buffer size does not match its rows"));
            }
            return Ok(make_array(
                arrow_data::ArrayData::builder(dt.clone())
                    .len(n)
                    .add_buffer(buf.into())
                    .build()?,
            ));
        }

        // Step 1: fixed data, string offsets (or whole small string pages), dictionaries.
        let mut ranges = Vec::new();
        let mut plans = Vec::with_capacity(parts.len());
        for (p, s) in &parts {
            let plan = match &info.pages[*p] {
                Enc::Binary { indices, bytes, .. } => {
                    let rows = page_rows(*p);
                    if sel_len(s) == rows {
                        fixed_ranges(indices, &[0..rows], &ctx, &mut ranges)?;
                        ranges.push(bytes_buffer(bytes, &ctx)?);
                        LeafPlan::BinaryFull
                    } else {
                        fixed_ranges(indices, &offset_runs(s), &ctx, &mut ranges)?;
                        LeafPlan::BinaryPartial
                    }
                }
                Enc::Dictionary {
                    indices,
                    items,
                    num_items,
                } => {
                    fixed_ranges(indices, s, &ctx, &mut ranges)?;
                    let Enc::Binary {
                        indices: ii,
                        bytes: ib,
                        ..
                    } = items.as_ref()
                    else {
                        return Err(ctx.unsupported("dictionary items that are not Binary"));
                    };
                    fixed_ranges(ii, &[0..*num_items], &ctx, &mut ranges)?;
                    ranges.push(bytes_buffer(ib, &ctx)?);
                    LeafPlan::Dictionary
                }
                enc => {
                    fixed_ranges(enc, s, &ctx, &mut ranges)?;
                    LeafPlan::Fixed
                }
            };
            plans.push(plan);
        }
        let fetched = self.io.read_ranges(&ranges).await?;
        let mut it = fetched.into_iter();
        let mut steps = Vec::with_capacity(parts.len());
        for ((p, s), plan) in parts.iter().zip(&plans) {
            let enc = &info.pages[*p];
            let step = match (plan, enc) {
                (LeafPlan::Fixed, enc) => {
                    Step::Done(make_array(decode_fixed(enc, s, dt, &ctx, &mut it)?))
                }
                (
                    LeafPlan::BinaryFull,
                    Enc::Binary {
                        indices, null_adj, ..
                    },
                ) => {
                    let rows = page_rows(*p);
                    let offs = decode_u64s(indices, &[0..rows], &ctx, &mut it)?;
                    let bytes = it.next().unwrap_or_default();
                    let runs =
                        interpret_offsets(&[0..rows], &offs, *null_adj, bytes.len() as u64, &ctx)?;
                    let run = &runs[0];
                    let data = bytes.slice(run.items.start as usize..run.items.end as usize);
                    Step::Done(make_array(build_binary(dt, &runs, &[data])?))
                }
                (
                    LeafPlan::BinaryPartial,
                    Enc::Binary {
                        indices,
                        bytes,
                        null_adj,
                    },
                ) => {
                    let buf = bytes_buffer(bytes, &ctx)?;
                    let offs = decode_u64s(indices, &offset_runs(s), &ctx, &mut it)?;
                    let runs = interpret_offsets(s, &offs, *null_adj, buf.end - buf.start, &ctx)?;
                    let ranges = runs
                        .iter()
                        .map(|r| buf.start + r.items.start..buf.start + r.items.end)
                        .collect();
                    Step::Bytes { runs, ranges }
                }
                (
                    LeafPlan::Dictionary,
                    Enc::Dictionary {
                        indices,
                        items,
                        num_items,
                    },
                ) => {
                    let (idx, keys) = match dict_type {
                        Some(DataType::Dictionary(k, _)) => (
                            Default::default(),
                            Some(decode_fixed(indices, s, k, &ctx, &mut it)?),
                        ),
                        _ => (decode_u64s(indices, s, &ctx, &mut it)?, None),
                    };
                    let Enc::Binary {
                        indices: ii,
                        null_adj,
                        ..
                    } = items.as_ref()
                    else {
                        unreachable!("checked when planning")
                    };
                    let offs = decode_u64s(ii, &[0..*num_items], &ctx, &mut it)?;
                    let bytes = it.next().unwrap_or_default();
                    let runs = interpret_offsets(
                        &[0..*num_items],
                        &offs,
                        *null_adj,
                        bytes.len() as u64,
                        &ctx,
                    )?;
                    let run = &runs[0];
                    let data = bytes.slice(run.items.start as usize..run.items.end as usize);
                    let items = make_array(build_binary(dt, &runs, &[data])?);
                    match (dict_type, keys) {
                        (Some(d), Some(keys)) => {
                            let keys = make_array(keys);
                            Step::Done(dictionary_of(d, keys, items, &ctx)?)
                        }
                        _ => Step::Done(make_array(apply_dictionary(items, &idx, &ctx)?)),
                    }
                }
                _ => unreachable!("plan matches encoding"),
            };
            steps.push(step);
        }

        // Step 2: string bytes.
        let ranges: Vec<Range<u64>> = steps
            .iter()
            .flat_map(|s| match s {
                Step::Bytes { ranges, .. } => ranges.clone(),
                Step::Done(_) => vec![],
            })
            .collect();
        let mut fetched = self.io.read_ranges(&ranges).await?.into_iter();
        let mut arrays = Vec::with_capacity(steps.len());
        for step in steps {
            arrays.push(match step {
                Step::Done(a) => a,
                Step::Bytes { runs, ranges } => {
                    let data: Vec<Bytes> = (&mut fetched).take(ranges.len()).collect();
                    make_array(build_binary(dt, &runs, &data)?)
                }
            });
        }
        if let Some(d) = dict_type {
            for a in arrays.iter_mut() {
                if a.data_type() != d {
                    *a = arrow_cast::cast(a, d)?;
                }
            }
        }
        if arrays.len() == 1 {
            return Ok(arrays.pop().unwrap());
        }
        let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
        Ok(arrow_select::concat::concat(&refs)?)
    }
}

/// A dictionary array of type `dt` from a page's keys and items, checking
/// every key against the items.
fn dictionary_of(dt: &DataType, keys: ArrayRef, items: ArrayRef, ctx: &Ctx) -> Result<ArrayRef> {
    let data = keys
        .to_data()
        .into_builder()
        .data_type(dt.clone())
        .child_data(vec![items.to_data()]);
    let data = data
        .build()
        .map_err(|e| ctx.corrupt(format!("dictionary keys do not fit their items: {e}")))?;
    Ok(make_array(data))
}
