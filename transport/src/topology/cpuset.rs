//! Sets of CPUs (PUs) and NUMA nodes by OS index, in the text forms the kernel and hwloc
//! write them: Linux lists (`0-3,8-11`) and hwloc masks (`0x000000ff` or comma-separated
//! 32-bit words, most significant first: `0x00000001,0xffffffff`).

use std::fmt;

/// A set of OS indexes (CPUs or NUMA nodes), kept sorted and unique.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct CpuSet(Vec<u32>);

impl CpuSet {
    /// The empty set.
    pub fn new() -> CpuSet {
        CpuSet(Vec::new())
    }

    /// The set of `ids` (any order, repeats allowed).
    pub fn of(ids: impl IntoIterator<Item = u32>) -> CpuSet {
        let mut v: Vec<u32> = ids.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        CpuSet(v)
    }

    /// Parses a Linux list: `0-3,8,10-11` (empty text: the empty set).
    pub fn parse_list(text: &str) -> Result<CpuSet, String> {
        let mut ids = Vec::new();
        for part in text
            .trim()
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            let bad = || format!("{text:?} is not a CPU list (like 0-3,8)");
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (
                    a.parse::<u32>().map_err(|_| bad())?,
                    b.parse::<u32>().map_err(|_| bad())?,
                ),
                None => {
                    let x = part.parse::<u32>().map_err(|_| bad())?;
                    (x, x)
                }
            };
            if hi < lo || hi - lo > 1 << 16 {
                return Err(bad());
            }
            ids.extend(lo..=hi);
        }
        Ok(CpuSet::of(ids))
    }

    /// Parses an hwloc or kernel mask: 32-bit hex words separated by commas, most
    /// significant first, each optionally `0x`-prefixed (`0x0000000f`, `ff,ffffffff`).
    pub fn parse_mask(text: &str) -> Result<CpuSet, String> {
        let words: Vec<&str> = text.trim().split(',').collect();
        let mut ids = Vec::new();
        for (i, w) in words.iter().rev().enumerate() {
            let w = w.trim();
            let hex = w.strip_prefix("0x").unwrap_or(w);
            if hex.is_empty() {
                continue;
            }
            let bits = u64::from_str_radix(hex, 16)
                .map_err(|_| format!("{text:?} is not a CPU mask (like 0x000000ff)"))?;
            if i > 4096 {
                return Err(format!("{text:?}: a mask of more than 131072 CPUs"));
            }
            let base = i as u32 * 32;
            ids.extend((0..64).filter(|b| bits >> b & 1 == 1).map(|b| base + b));
        }
        Ok(CpuSet::of(ids))
    }

    /// The ids, ascending.
    pub fn ids(&self) -> &[u32] {
        &self.0
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `id` is in the set.
    pub fn contains(&self, id: u32) -> bool {
        self.0.binary_search(&id).is_ok()
    }

    /// The ids in both sets.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(
            self.0
                .iter()
                .copied()
                .filter(|&i| other.contains(i))
                .collect(),
        )
    }

    /// The ids in either set.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        CpuSet::of(self.0.iter().chain(other.0.iter()).copied())
    }

    /// Whether every id of this set is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.iter().all(|&i| other.contains(i))
    }
}

impl fmt::Display for CpuSet {
    /// The Linux list form (`0-3,8`); `-` for the empty set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("-");
        }
        let mut first = true;
        let mut i = 0;
        while i < self.0.len() {
            let mut j = i;
            while j + 1 < self.0.len() && self.0[j + 1] == self.0[j] + 1 {
                j += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if j > i {
                write!(f, "{}-{}", self.0[i], self.0[j])?;
            } else {
                write!(f, "{}", self.0[i])?;
            }
            i = j + 1;
        }
        Ok(())
    }
}

impl From<CpuSet> for String {
    fn from(c: CpuSet) -> String {
        c.to_string()
    }
}

impl TryFrom<String> for CpuSet {
    type Error = String;
    fn try_from(s: String) -> Result<CpuSet, String> {
        if s == "-" {
            return Ok(CpuSet::new());
        }
        CpuSet::parse_list(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_masks_read_and_print() {
        let l = CpuSet::parse_list("0-3,8,10-11").unwrap();
        assert_eq!(l.ids(), &[0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(l.to_string(), "0-3,8,10-11");
        assert_eq!(CpuSet::parse_list("").unwrap(), CpuSet::new());
        assert!(CpuSet::parse_list("3-1").is_err() && CpuSet::parse_list("x").is_err());
        let m = CpuSet::parse_mask("0x00000001,0x0000000f").unwrap();
        assert_eq!(m.ids(), &[0, 1, 2, 3, 32]);
        assert_eq!(CpuSet::parse_mask("ff").unwrap().to_string(), "0-7");
        assert_eq!(
            CpuSet::parse_mask("0xf0000000,,0x1").unwrap().ids(),
            &[0, 92, 93, 94, 95]
        );
        assert!(CpuSet::parse_mask("0xzz").is_err());
        let a = CpuSet::of([1, 2, 3]);
        let b = CpuSet::of([3, 4]);
        assert_eq!(a.intersection(&b).ids(), &[3]);
        assert_eq!(a.union(&b).to_string(), "1-4");
        assert!(CpuSet::of([3]).is_subset(&a) && !b.is_subset(&a));
    }
}
