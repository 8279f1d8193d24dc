//! Known per-rank input data, and the result each collective must make of it.
//!
//! Element `i` of rank `r`'s input is a small integer: `(7r + 3i) mod 11`, shifted down by 5
//! for signed and floating-point types; for `prod`, 2 where `(r + i) mod 3 == 0` and 1
//! elsewhere. Sums of such values stay exact in every type up to many ranks (`f16` up to
//! 409 ranks, `bf16` up to 51), products of 1s and 2s are exact until they overflow (to
//! infinity in every order for floats, wrapping identically in every order for
//! integers), so the result does not depend on the order an algorithm reduces in and can
//! be compared exactly. Beyond those rank counts half-precision results are compared with
//! a relative tolerance of `nranks` units in the last place.
//!
//! The data repeats every [`PERIOD`] elements, so one table per rank holds every input
//! and one table holds every reduction: checking costs one lookup per element.

use rcoll::{Collective, DataType, Element, ReduceOp};

/// The data's period: 11 (the value pattern) times 3 (the `prod` pattern).
pub const PERIOD: usize = 33;

/// Every rank's input and the reduction of all of them, for one type and operation.
#[derive(Clone, Debug)]
pub struct Reference<T> {
    inputs: Vec<[T; PERIOD]>,
    reduced: [T; PERIOD],
    sentinel: T,
    tolerance: f64,
}

impl<T: Element> Reference<T> {
    /// The reference for `nranks` ranks reducing with `op`.
    pub fn new(op: ReduceOp, nranks: usize) -> Self {
        let inputs: Vec<[T; PERIOD]> = (0..nranks)
            .map(|r| std::array::from_fn(|i| value(T::DTYPE, op, r, i)))
            .collect();
        let mut reduced = inputs
            .first()
            .copied()
            .unwrap_or([T::from_f64(0.0); PERIOD]);
        for other in inputs.iter().skip(1) {
            T::reduce_assign(op, &mut reduced, other);
        }
        if op == ReduceOp::Avg {
            T::average(&mut reduced, nranks);
        }
        Reference {
            inputs,
            reduced,
            sentinel: T::from_f64(99.0),
            tolerance: tolerance(T::DTYPE, nranks),
        }
    }

    /// A value written into outputs before a checked call, so that elements the call
    /// fails to write are likely to show.
    pub fn sentinel(&self) -> T {
        self.sentinel
    }

    /// Element `i` of `rank`'s input.
    pub fn input(&self, rank: usize, i: usize) -> T {
        self.inputs[rank][i % PERIOD]
    }

    /// Writes `rank`'s input into `buf`.
    pub fn fill_input(&self, rank: usize, buf: &mut [T]) {
        for (d, s) in buf.iter_mut().zip(self.inputs[rank].iter().cycle()) {
            *d = *s;
        }
    }

    /// How many elements of `out`, rank `rank`'s output of `collective` with `count`
    /// elements per rank (a block, for the blocked collectives), differ from the
    /// definition.
    pub fn count_wrong(
        &self,
        collective: Collective,
        nranks: usize,
        rank: usize,
        root: usize,
        count: usize,
        out: &[T],
    ) -> u64 {
        let wrong = |expected: &dyn Fn(usize) -> T| {
            out.iter()
                .enumerate()
                .filter(|(j, got)| !self.same(**got, expected(*j)))
                .count() as u64
        };
        let block = count.max(1);
        match collective {
            Collective::AllReduce | Collective::Reduce => wrong(&|j| self.reduced[j % PERIOD]),
            Collective::Broadcast => wrong(&|j| self.input(root, j)),
            Collective::AllGather | Collective::Gather => {
                wrong(&|j| self.input(j / block, j % block))
            }
            Collective::ReduceScatter => wrong(&|j| self.reduced[(rank * count + j) % PERIOD]),
            Collective::Scatter => wrong(&|j| self.input(root, rank * count + j)),
            Collective::AllToAll => wrong(&|j| self.input(j / block, rank * count + j % block)),
            Collective::SendRecv => wrong(&|j| self.input((rank + nranks - 1) % nranks, j)),
            _ => 0,
        }
    }

    fn same(&self, got: T, want: T) -> bool {
        if got == want {
            return true;
        }
        let (g, w) = (got.to_f64(), want.to_f64());
        self.tolerance > 0.0 && (g - w).abs() <= self.tolerance * w.abs().max(1.0)
    }
}

/// Element `i` of `rank`'s input (see the module docs).
fn value<T: Element>(dtype: DataType, op: ReduceOp, rank: usize, i: usize) -> T {
    let k = ((rank % PERIOD) * 7 + i * 3) % 11;
    let v = match op {
        ReduceOp::Prod => {
            if (rank + i) % 3 == 0 {
                2.0
            } else {
                1.0
            }
        }
        _ if dtype.name().starts_with('u') => k as f64,
        _ => k as f64 - 5.0,
    };
    T::from_f64(v)
}

/// Zero while every partial sum of `nranks` values (floats are at most 5 in magnitude)
/// is an exactly representable integer in `dtype`; otherwise `nranks` units in the last
/// place, relative.
fn tolerance(dtype: DataType, nranks: usize) -> f64 {
    let mantissa_bits = match dtype {
        DataType::F16 => 11,
        DataType::Bf16 => 8,
        DataType::F32 => 24,
        DataType::F64 => 53,
        _ => return 0.0,
    };
    let exact_up_to = 2f64.powi(mantissa_bits);
    if 5.0 * nranks as f64 <= exact_up_to {
        0.0
    } else {
        nranks as f64 * 2f64.powi(1 - mantissa_bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reduction_is_exact_and_periodic() {
        let r = Reference::<half::bf16>::new(ReduceOp::Sum, 8);
        for i in 0..3 * PERIOD {
            let want: f64 = (0..8).map(|q| r.input(q, i).to_f64()).sum();
            assert_eq!(r.reduced[i % PERIOD].to_f64(), want);
        }
    }

    #[test]
    fn unsigned_inputs_are_not_clamped() {
        let r = Reference::<u8>::new(ReduceOp::Sum, 3);
        assert!((0..PERIOD).any(|i| r.input(1, i) > 5));
        let r = Reference::<i8>::new(ReduceOp::Sum, 3);
        assert!((0..PERIOD).any(|i| r.input(1, i) < 0));
    }

    #[test]
    fn wrong_elements_are_counted() {
        let n = 4;
        let r = Reference::<f32>::new(ReduceOp::Max, n);
        let count = 5;
        let mut out: Vec<f32> = (0..n * count)
            .map(|j| r.input(j / count, j % count))
            .collect();
        assert_eq!(
            r.count_wrong(Collective::AllGather, n, 2, 0, count, &out),
            0
        );
        out[7] = r.sentinel();
        assert_eq!(
            r.count_wrong(Collective::AllGather, n, 2, 0, count, &out),
            1
        );
        let mut shifted = vec![0f32; count];
        r.fill_input(n - 1, &mut shifted);
        assert_eq!(
            r.count_wrong(Collective::SendRecv, n, 0, 0, count, &shifted),
            0
        );
    }
}
