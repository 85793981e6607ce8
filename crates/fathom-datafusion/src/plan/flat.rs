//! Partitioning the flat path: fragments (split into row ranges when
//! large) spread over partitions, balancing physical rows.

use std::ops::Range;

use fathom_table::Fragment;

/// A piece of work: physical rows `rows` of fragment `fragment`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanUnit {
    pub fragment: u64,
    pub rows: Range<u64>,
}

/// Units assigned to partitions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FlatPartitions {
    pub partitions: Vec<Vec<ScanUnit>>,
}

impl FlatPartitions {
    pub fn num_fragments(&self) -> usize {
        let mut ids: Vec<u64> = self
            .partitions
            .iter()
            .flatten()
            .map(|u| u.fragment)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    }
    pub fn num_rows(&self) -> u64 {
        self.partitions
            .iter()
            .flatten()
            .map(|u| u.rows.end - u.rows.start)
            .sum()
    }
}

/// Below this many rows per partition, parallelism costs more than it gives.
pub const MIN_ROWS_PER_PARTITION: u64 = 32 * 1024;

/// Spreads fragments (split into row ranges when large) over at most
/// `target_partitions` partitions, balancing physical rows, with at least
/// `min_rows` rows per partition (small tables stay in order, in one).
pub fn plan_flat<'a>(
    fragments: impl Iterator<Item = &'a Fragment> + Clone,
    target_partitions: usize,
    min_rows: u64,
) -> FlatPartitions {
    let n = target_partitions.max(1);
    let total: u64 = fragments.clone().map(|f| f.physical_rows).sum();
    if total == 0 {
        return FlatPartitions {
            partitions: vec![vec![]],
        };
    }
    let per = total.div_ceil(n as u64).max(min_rows).max(1);
    let mut partitions: Vec<Vec<ScanUnit>> = vec![vec![]];
    let mut filled = 0u64;
    for f in fragments {
        let mut start = 0;
        while start < f.physical_rows {
            if filled >= per && partitions.len() < n {
                partitions.push(vec![]);
                filled = 0;
            }
            let take = (per - filled.min(per)).max(1).min(f.physical_rows - start);
            partitions.last_mut().unwrap().push(ScanUnit {
                fragment: f.id,
                rows: start..start + take,
            });
            filled += take;
            start += take;
        }
    }
    FlatPartitions { partitions }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fathom_table::format::FragmentPassthrough;

    fn frag(id: u64, rows: u64) -> Fragment {
        Fragment {
            id,
            files: vec![],
            deletion_file: None,
            physical_rows: rows,
            row_id_meta: None,
            passthrough: FragmentPassthrough::default(),
        }
    }

    #[test]
    fn balanced_and_complete() {
        let frags = [frag(0, 100), frag(3, 10), frag(7, 290)];
        let plan = plan_flat(frags.iter(), 4, 1);
        assert_eq!(plan.partitions.len(), 4);
        assert_eq!(plan.num_rows(), 400);
        assert_eq!(plan.num_fragments(), 3);
        for p in &plan.partitions {
            let rows: u64 = p.iter().map(|u| u.rows.end - u.rows.start).sum();
            assert_eq!(rows, 100);
        }
        // One big fragment is split into ranges across partitions.
        let plan = plan_flat([frag(1, 1000)].iter(), 3, 1);
        assert_eq!(plan.partitions.len(), 3);
        assert_eq!(plan.partitions[2][0].rows, 668..1000);
        assert_eq!(plan_flat([].iter(), 4, 1).partitions.len(), 1);
        // Small tables are not split.
        assert_eq!(
            plan_flat(frags.iter(), 4, MIN_ROWS_PER_PARTITION)
                .partitions
                .len(),
            1
        );
    }
}
