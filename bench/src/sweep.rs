//! The message sizes a benchmark sweeps, following nccl-tests' `-b`, `-e`, `-f` and `-i`.

use crate::error::{usage, BenchError};

/// How one size leads to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Multiply by a factor greater than one (`-f`).
    Factor(usize),
    /// Add a fixed number of bytes (`-i`).
    Bytes(usize),
}

impl Step {
    /// The step nccl-tests would take: a factor above one wins; otherwise `-i` bytes
    /// (1 MiB, nccl-tests' default, if `-i` is absent). With neither flag, the factor is 2.
    pub fn from_flags(factor: Option<usize>, bytes: Option<usize>) -> Step {
        match (factor, bytes) {
            (Some(f), _) if f > 1 => Step::Factor(f),
            (None, None) => Step::Factor(2),
            (_, b) => Step::Bytes(b.unwrap_or(1 << 20)),
        }
    }

    /// The size after `size`, or `None` if it would overflow.
    fn next(self, size: usize) -> Option<usize> {
        match self {
            Step::Factor(f) => size.checked_mul(f),
            Step::Bytes(b) => size.checked_add(b),
        }
    }
}

/// Every size from `min` up to `max` inclusive, in steps of `step`.
pub fn sizes(min: usize, max: usize, step: Step) -> Result<Vec<usize>, BenchError> {
    if min > max {
        return Err(usage(format!(
            "-b/--minbytes ({min}) is larger than -e/--maxbytes ({max})"
        )));
    }
    match step {
        Step::Factor(_) if min == 0 => {
            return Err(usage(
                "-b/--minbytes 0 never grows with -f/--stepfactor: start at 1 or more",
            ))
        }
        Step::Bytes(0) if min < max => {
            return Err(usage("-i/--stepbytes 0 never reaches -e/--maxbytes"))
        }
        _ => {}
    }
    let mut out = vec![min];
    let mut size = min;
    while let Some(next) = step.next(size).filter(|n| *n <= max && *n > size) {
        out.push(next);
        size = next;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubling_from_8_to_64m() {
        let s = sizes(8, 64 << 20, Step::from_flags(Some(2), None)).unwrap();
        assert_eq!(s.len(), 24);
        assert_eq!(&s[..4], [8, 16, 32, 64]);
        assert_eq!(s.last(), Some(&(64 << 20)));
        assert!(s.windows(2).all(|w| w[1] == 2 * w[0]));
    }

    #[test]
    fn factor_stops_at_or_below_max() {
        assert_eq!(
            sizes(8, 1 << 20, Step::Factor(4)).unwrap(),
            [8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288]
        );
    }

    #[test]
    fn increments_and_flag_precedence() {
        assert_eq!(sizes(0, 10, Step::Bytes(4)).unwrap(), [0, 4, 8]);
        assert_eq!(Step::from_flags(None, None), Step::Factor(2));
        assert_eq!(Step::from_flags(None, Some(100)), Step::Bytes(100));
        assert_eq!(Step::from_flags(Some(3), Some(100)), Step::Factor(3));
        assert_eq!(Step::from_flags(Some(1), Some(100)), Step::Bytes(100));
        assert_eq!(Step::from_flags(Some(0), None), Step::Bytes(1 << 20));
    }

    #[test]
    fn impossible_sweeps_are_usage_errors() {
        assert!(sizes(16, 8, Step::Factor(2)).is_err());
        assert!(sizes(0, 8, Step::Factor(2)).is_err());
        assert!(sizes(1, 8, Step::Bytes(0)).is_err());
        assert_eq!(sizes(8, 8, Step::Bytes(0)).unwrap(), [8]);
    }
}
