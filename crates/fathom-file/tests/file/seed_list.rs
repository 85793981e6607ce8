//! Seed 002's example: `[[A,B], null, [], [C,D,E]]` with
//! null_offset_adjustment 7 is stored as offsets `[2, 9, 2, 5]`, and each
//! range of lists in the seed's table resolves to the items it states.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ListArray, RecordBatch, StringArray};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Schema};
use fathom_file::encoding::decode::{Ctx, interpret_offsets, offset_runs};
use fathom_file::encoding::encode::{encode_list_offsets, encode_list_offsets_with_adjustment};

use super::{memory, open, runtime, write_file};

const OFFSETS: [u64; 4] = [2, 9, 2, 5];

fn ctx() -> Ctx<'static> {
    Ctx {
        path: "seed",
        column: "list",
        page: None,
    }
}

#[test]
fn writer_stores_the_seed_offsets() {
    // The seed assumes an adjustment of 7; the writer's default is items + 1 = 6.
    let page = encode_list_offsets_with_adjustment(&[2, 0, 0, 3], &[true, false, true, true], 7);
    let stored: Vec<u64> = page.buffers[0]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(stored, OFFSETS);
    let Some(fathom_file::pb::encodings::array_encoding::ArrayEncoding::List(l)) =
        page.encoding.array_encoding
    else {
        panic!("not a list page")
    };
    assert_eq!((l.null_offset_adjustment, l.num_items), (7, 5));
    let default = encode_list_offsets(&[2, 0, 0, 3], &[true, false, true, true]);
    let stored: Vec<u64> = default.buffers[0]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(stored, [2, 8, 2, 5]);
}

#[test]
fn every_range_in_the_seed_table() {
    // (lists, items) from the seed's table. The seed writes list ranges with
    // an inclusive end ("1..3" = lists 1, 2, 3, bounded by offsets[0] and
    // offsets[3]); here they become half-open ranges a..b+1.
    let table = [
        (0..3, 0..5),
        (0..2, 0..2),
        (0..1, 0..2),
        (1..3, 2..5),
        (1..2, 2..2),
        (2..3, 2..5),
    ];
    for (lists, items) in table {
        let sel = [lists.start..lists.end + 1];
        // Only offsets a-1 and b-1 .. are consulted.
        let needed: Vec<u64> = offset_runs(&sel)
            .iter()
            .flat_map(|r| OFFSETS[r.start as usize..r.end as usize].to_vec())
            .collect();
        let runs = interpret_offsets(&sel, &needed, 7, 5, &ctx()).unwrap();
        assert_eq!(runs[0].items, items, "lists {lists:?}");
    }
    // Row 1 is null, the others valid.
    let runs = interpret_offsets(&[0..4], &OFFSETS, 7, 5, &ctx()).unwrap();
    assert_eq!(runs[0].validity, Some(vec![true, false, true, true]));
    assert_eq!(runs[0].lengths, vec![2, 0, 0, 3]);
}

#[test]
fn seed_example_roundtrips_through_a_file() {
    runtime().block_on(async {
        let items = StringArray::from(vec!["A", "B", "C", "D", "E"]);
        let field = Arc::new(Field::new("item", DataType::Utf8, true));
        let list = ListArray::new(
            field,
            OffsetBuffer::from_lengths([2, 0, 0, 3]),
            Arc::new(items),
            Some(NullBuffer::from(vec![true, false, true, true])),
        );
        let schema = Arc::new(Schema::new(vec![Field::new(
            "l",
            list.data_type().clone(),
            true,
        )]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(list)]).unwrap();
        let store = memory();
        write_file(
            &store,
            "seed.lance",
            std::slice::from_ref(&batch),
            Default::default(),
        )
        .await;
        let r = open(&store, "seed.lance").await.unwrap();
        for (a, b) in [(0u64, 3u64), (0, 2), (0, 1), (1, 3), (1, 2), (2, 3), (3, 4)] {
            let got = r.read_range(a..b, None).await.unwrap();
            assert_eq!(got, batch.slice(a as usize, (b - a) as usize), "{a}..{b}");
        }
        let got = r.take(&[3], None).await.unwrap();
        let l = got.column(0).as_list::<i32>();
        assert_eq!(
            l.value(0)
                .as_string::<i32>()
                .iter()
                .flatten()
                .collect::<Vec<_>>(),
            ["C", "D", "E"]
        );
    });
}
