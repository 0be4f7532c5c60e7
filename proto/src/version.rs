//! Ordering of `(epoch, seq)` versions, shared by both ends of the stream.

use crate::v1::Version;
use std::cmp::Ordering;

/// Total order on [`Version`]: by epoch, then by sequence number.
pub trait VersionExt {
    /// Compares two versions lexicographically by `(epoch, seq)`.
    fn order(&self, other: &Version) -> Ordering;
    /// True when `self` is strictly newer than `other`.
    fn is_newer_than(&self, other: &Version) -> bool {
        self.order(other) == Ordering::Greater
    }
}

impl VersionExt for Version {
    fn order(&self, other: &Version) -> Ordering {
        (self.epoch, self.seq).cmp(&(other.epoch, other.seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(epoch: u64, seq: u64) -> Version {
        Version { epoch, seq }
    }

    #[test]
    fn epoch_dominates_sequence() {
        assert!(v(2, 0).is_newer_than(&v(1, 999)));
        assert!(v(1, 5).is_newer_than(&v(1, 4)));
        assert!(!v(1, 4).is_newer_than(&v(1, 4)));
        assert!(!v(0, 9).is_newer_than(&v(1, 0)));
    }
}
