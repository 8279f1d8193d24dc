//! The fingerprint every message carries (`Tag::schedule`): what the sender is calling and
//! how it runs it, so that ranks that disagree get an error naming the disagreement instead
//! of a hang or silently combined garbage (NCCL users' long-standing complaint).
//!
//! ```text
//!  bits 0-3 algorithm   4-7 element type   8-11 operation   12-15 collective
//!  bits 16-31 hash of (count, root, segment length, the hierarchical levels' algorithms)
//! ```
//!
//! It rides in the tag of every message at no extra byte, so its cost on an 8-byte
//! collective is one hash per call.

use crate::algorithm::hierarchical::{LevelAlgorithms, LEVEL_CANDIDATES};
use crate::algorithm::Algorithm;
use crate::element::DataType;
use crate::op::ReduceOp;
use crate::schedule::Collective;

/// Everything two ranks must agree on for their messages to mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    /// The collective (`SendRecv` for point-to-point).
    pub collective: Collective,
    /// The element type.
    pub dtype: DataType,
    /// The reduction (`Sum` where none applies).
    pub op: ReduceOp,
    /// The algorithm (`None` for point-to-point).
    pub algorithm: Option<Algorithm>,
    /// Elements per rank.
    pub count: usize,
    /// Root (0 where none applies).
    pub root: usize,
    /// Elements per segment.
    pub segment_elems: usize,
    /// The algorithms of the hierarchical schedule's levels (`None` for flat ones).
    pub levels: Option<LevelAlgorithms>,
}

fn index<T: PartialEq>(all: &[T], x: &T) -> u32 {
    all.iter().position(|a| a == x).map_or(15, |i| i as u32) & 0xf
}

impl Call {
    /// The 32-bit fingerprint.
    pub fn fingerprint(&self) -> u32 {
        let algo = self.algorithm.map_or(0, |a| index(&Algorithm::ALL, &a) + 1) & 0xf;
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let levels = self.levels.map_or(0, |l| {
            1 + u64::from(index(&LEVEL_CANDIDATES, &l.local))
                + 16 * u64::from(index(&LEVEL_CANDIDATES, &l.global))
        });
        for v in [
            self.count as u64,
            self.root as u64,
            self.segment_elems as u64,
            levels,
        ] {
            h = (h ^ v).wrapping_mul(0x0000_0100_0000_01b3);
        }
        let hash = ((h >> 32) ^ h) as u32 & 0xffff;
        algo | index(&DataType::ALL, &self.dtype) << 4
            | index(&ReduceOp::ALL, &self.op) << 8
            | index(&Collective::ALL, &self.collective) << 12
            | hash << 16
    }
}

/// A readable field of the fingerprint: its name, its bit offset, and its value names.
type Field<'a> = (&'a str, u32, &'a dyn Fn(usize) -> Option<String>);

/// Explains how two fingerprints differ, field by field where the fields are readable.
pub fn explain(ours: u32, theirs: u32) -> String {
    let nibble = |f: u32, shift: u32| ((f >> shift) & 0xf) as usize;
    let name = |f: u32, shift: u32, names: &dyn Fn(usize) -> Option<String>| {
        names(nibble(f, shift)).unwrap_or_else(|| format!("#{}", nibble(f, shift)))
    };
    let algorithm = |i: usize| match i {
        0 => Some("point-to-point".to_owned()),
        i => Algorithm::ALL.get(i - 1).map(|a| a.to_string()),
    };
    let dtype = |i: usize| DataType::ALL.get(i).map(|d| d.to_string());
    let op = |i: usize| ReduceOp::ALL.get(i).map(|o| o.to_string());
    let collective = |i: usize| Collective::ALL.get(i).map(|c| c.to_string());
    let fields: [Field; 4] = [
        ("collective", 12, &collective),
        ("element type", 4, &dtype),
        ("operation", 8, &op),
        ("algorithm", 0, &algorithm),
    ];
    let mut diffs: Vec<String> = fields
        .iter()
        .filter(|(_, shift, _)| nibble(ours, *shift) != nibble(theirs, *shift))
        .map(|(what, shift, names)| {
            format!(
                "{what} {} here, {} there",
                name(ours, *shift, *names),
                name(theirs, *shift, *names)
            )
        })
        .collect();
    if ours >> 16 != theirs >> 16 {
        diffs.push("count, root, segment size or level algorithms differ".into());
    }
    if diffs.is_empty() {
        diffs.push("the calls differ".into());
    }
    diffs.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call() -> Call {
        Call {
            collective: Collective::AllReduce,
            dtype: DataType::F32,
            op: ReduceOp::Sum,
            algorithm: Some(Algorithm::Ring),
            count: 1000,
            root: 0,
            segment_elems: 32768,
            levels: None,
        }
    }

    #[test]
    fn each_difference_is_named() {
        let a = call().fingerprint();
        let cases = [
            (
                Call {
                    dtype: DataType::I32,
                    ..call()
                },
                "element type f32 here, i32 there",
            ),
            (
                Call {
                    op: ReduceOp::Max,
                    ..call()
                },
                "operation sum here, max there",
            ),
            (
                Call {
                    collective: Collective::Broadcast,
                    ..call()
                },
                "collective all_reduce here, broadcast there",
            ),
            (
                Call {
                    algorithm: Some(Algorithm::Mesh),
                    ..call()
                },
                "algorithm ring here, mesh there",
            ),
            (
                Call {
                    count: 1001,
                    ..call()
                },
                "count, root, segment size or level algorithms differ",
            ),
            (
                Call { root: 1, ..call() },
                "count, root, segment size or level algorithms differ",
            ),
            (
                Call {
                    algorithm: Some(Algorithm::Hierarchical),
                    levels: Some(LevelAlgorithms {
                        local: Algorithm::Mesh,
                        global: Algorithm::Ring,
                    }),
                    ..call()
                },
                "algorithm ring here, hierarchical there",
            ),
        ];
        for (other, words) in cases {
            let b = other.fingerprint();
            assert_ne!(a, b, "{other:?}");
            assert!(explain(a, b).contains(words), "{}", explain(a, b));
        }
        assert_eq!(call().fingerprint(), a);
        // Hierarchical calls whose levels run different algorithms differ too.
        let hier = |local, global| {
            Call {
                algorithm: Some(Algorithm::Hierarchical),
                levels: Some(LevelAlgorithms { local, global }),
                ..call()
            }
            .fingerprint()
        };
        let (x, y) = (
            hier(Algorithm::Mesh, Algorithm::Ring),
            hier(Algorithm::Ring, Algorithm::Ring),
        );
        assert_ne!(x, y);
        assert!(
            explain(x, y).contains("level algorithms differ"),
            "{}",
            explain(x, y)
        );
        assert_ne!(
            hier(Algorithm::Ring, Algorithm::Mesh),
            hier(Algorithm::Mesh, Algorithm::Ring)
        );
    }
}
