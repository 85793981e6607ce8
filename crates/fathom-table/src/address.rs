//! Row addresses and row sets.
//!
//! A row address names a physical row: `(fragment id << 32) | offset`.
//! Fragment ids are u32 wherever Lance stores them in bitmaps (index
//! coverage, row-address maps), so [`FragmentId`] is a u32; the manifest
//! keeps them as u64 and converts at the edge. A [`RowSet`] is a set of
//! addresses grouped by fragment (a roaring treemap whose high 32 bits are
//! the fragment): index results, exclusions and takes all use it.

use std::fmt;
use std::ops::{BitAnd, BitOr, Sub};

use roaring::{RoaringBitmap, RoaringTreemap};

/// The id of a fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FragmentId(pub u32);

impl FragmentId {
    /// The id as the manifest stores it.
    pub fn as_u64(self) -> u64 {
        self.0 as u64
    }
}

impl From<u32> for FragmentId {
    fn from(v: u32) -> Self {
        FragmentId(v)
    }
}

impl TryFrom<u64> for FragmentId {
    type Error = crate::Error;
    fn try_from(v: u64) -> crate::Result<Self> {
        u32::try_from(v)
            .map(FragmentId)
            .map_err(|_| crate::Error::invalid(format!("fragment id {v} does not fit in 32 bits")))
    }
}

impl fmt::Display for FragmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The address of a physical row: fragment and offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RowAddress(u64);

impl RowAddress {
    pub const fn new(fragment: FragmentId, offset: u32) -> Self {
        RowAddress(((fragment.0 as u64) << 32) | offset as u64)
    }
    pub const fn from_u64(v: u64) -> Self {
        RowAddress(v)
    }
    pub const fn as_u64(self) -> u64 {
        self.0
    }
    pub const fn fragment(self) -> FragmentId {
        FragmentId((self.0 >> 32) as u32)
    }
    pub const fn offset(self) -> u32 {
        self.0 as u32
    }
}

impl From<RowAddress> for u64 {
    fn from(a: RowAddress) -> u64 {
        a.0
    }
}

impl fmt::Display for RowAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.fragment(), self.offset())
    }
}

/// A set of row addresses, grouped by fragment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowSet(RoaringTreemap);

impl RowSet {
    pub fn new() -> Self {
        RowSet(RoaringTreemap::new())
    }
    pub fn len(&self) -> u64 {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn insert(&mut self, a: RowAddress) -> bool {
        self.0.insert(a.0)
    }
    pub fn contains(&self, a: RowAddress) -> bool {
        self.0.contains(a.0)
    }
    /// Offsets `range` of fragment `f`.
    pub fn insert_range(&mut self, f: FragmentId, range: std::ops::Range<u32>) {
        let base = (f.0 as u64) << 32;
        self.0
            .insert_range(base + range.start as u64..base + range.end as u64);
    }
    /// Addresses in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = RowAddress> + '_ {
        self.0.iter().map(RowAddress)
    }
    /// The addresses, ascending, as `u64`s: each fragment's bitmap walked
    /// directly (the treemap's own iterator costs several times more).
    pub fn to_u64s(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.0.len() as usize);
        for (f, b) in self.0.bitmaps() {
            let hi = u64::from(f) << 32;
            out.extend(b.iter().map(|o| hi | u64::from(o)));
        }
        out
    }
    /// Per fragment (ascending), the offsets of the set in it.
    pub fn fragments(&self) -> impl Iterator<Item = (FragmentId, &RoaringBitmap)> + '_ {
        self.0.bitmaps().map(|(f, b)| (FragmentId(f), b))
    }
    /// Keeps only the fragments `keep` says yes to.
    pub fn retain_fragments(&mut self, mut keep: impl FnMut(FragmentId) -> bool) {
        let kept: RoaringTreemap = RoaringTreemap::from_bitmaps(
            self.0
                .bitmaps()
                .filter(|(f, _)| keep(FragmentId(*f)))
                .map(|(f, b)| (f, b.clone())),
        );
        self.0 = kept;
    }
    /// Removes offsets `offsets` of fragment `f`.
    pub fn remove_offsets(&mut self, f: FragmentId, offsets: &RoaringBitmap) {
        let other = RoaringTreemap::from_bitmaps([(f.0, offsets.clone())]);
        self.0 -= other;
    }
    pub fn as_treemap(&self) -> &RoaringTreemap {
        &self.0
    }
    pub fn into_treemap(self) -> RoaringTreemap {
        self.0
    }
}

impl From<RoaringTreemap> for RowSet {
    fn from(t: RoaringTreemap) -> Self {
        RowSet(t)
    }
}

impl FromIterator<RowAddress> for RowSet {
    fn from_iter<I: IntoIterator<Item = RowAddress>>(iter: I) -> Self {
        RowSet(iter.into_iter().map(|a| a.0).collect())
    }
}

impl BitOr for RowSet {
    type Output = RowSet;
    fn bitor(self, rhs: RowSet) -> RowSet {
        RowSet(self.0 | rhs.0)
    }
}

impl BitAnd for RowSet {
    type Output = RowSet;
    fn bitand(self, rhs: RowSet) -> RowSet {
        RowSet(self.0 & rhs.0)
    }
}

impl Sub for RowSet {
    type Output = RowSet;
    fn sub(self, rhs: RowSet) -> RowSet {
        RowSet(self.0 - rhs.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_sets() {
        let a = RowAddress::new(FragmentId(7), 3);
        assert_eq!(a.as_u64(), (7 << 32) | 3);
        assert_eq!((a.fragment(), a.offset()), (FragmentId(7), 3));
        assert_eq!(
            RowAddress::from_u64(u64::MAX).fragment(),
            FragmentId(u32::MAX)
        );
        let mut s: RowSet = [a, RowAddress::new(FragmentId(1), 9)].into_iter().collect();
        s.insert_range(FragmentId(2), 0..4);
        assert_eq!(s.len(), 6);
        let frags: Vec<(u32, u64)> = s.fragments().map(|(f, b)| (f.0, b.len())).collect();
        assert_eq!(frags, vec![(1, 1), (2, 4), (7, 1)]);
        s.remove_offsets(FragmentId(2), &[1u32, 3].into_iter().collect());
        assert_eq!(s.len(), 4);
        s.retain_fragments(|f| f != FragmentId(1));
        let got: Vec<String> = s.iter().map(|a| a.to_string()).collect();
        assert_eq!(got, vec!["2:0", "2:2", "7:3"]);
        assert!(FragmentId::try_from(1u64 << 32).is_err());
    }
}
