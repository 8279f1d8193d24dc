//! Element types: the [`Element`] trait, its runtime tag [`DataType`], and the reduction
//! kernels, written per type.

use std::fmt;

use half::{bf16, f16, slice::HalfFloatSliceExt};

use crate::op::ReduceOp;

/// The element types a collective can move and reduce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum DataType {
    /// `i8`
    I8,
    /// `u8`
    U8,
    /// `i32`
    I32,
    /// `u32`
    U32,
    /// `i64`
    I64,
    /// `u64`
    U64,
    /// IEEE binary16 ([`half::f16`]); reductions accumulate in `f32`.
    F16,
    /// bfloat16 ([`half::bf16`]); reductions accumulate in `f32`.
    Bf16,
    /// `f32`
    F32,
    /// `f64`
    F64,
}

impl DataType {
    /// Every data type, in the order above.
    pub const ALL: [DataType; 10] = [
        DataType::I8,
        DataType::U8,
        DataType::I32,
        DataType::U32,
        DataType::I64,
        DataType::U64,
        DataType::F16,
        DataType::Bf16,
        DataType::F32,
        DataType::F64,
    ];

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DataType::I8 | DataType::U8 => 1,
            DataType::F16 | DataType::Bf16 => 2,
            DataType::I32 | DataType::U32 | DataType::F32 => 4,
            DataType::I64 | DataType::U64 | DataType::F64 => 8,
        }
    }

    /// Whether the type is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DataType::F16 | DataType::Bf16 | DataType::F32 | DataType::F64
        )
    }

    /// The lowercase name used by the CLI (`f32`, `bf16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DataType::I8 => "i8",
            DataType::U8 => "u8",
            DataType::I32 => "i32",
            DataType::U32 => "u32",
            DataType::I64 => "i64",
            DataType::U64 => "u64",
            DataType::F16 => "f16",
            DataType::Bf16 => "bf16",
            DataType::F32 => "f32",
            DataType::F64 => "f64",
        }
    }

    /// Whether `op` is defined on this type (bitwise operations are integer-only).
    pub fn supports(self, op: ReduceOp) -> bool {
        !(op.is_bitwise() && self.is_float())
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl std::str::FromStr for DataType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DataType::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("unknown data type {s:?} (expected one of i8 u8 i32 u32 i64 u64 f16 bf16 f32 f64)"))
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A type rcoll can reduce: plain old data with a [`DataType`] tag and reduction kernels.
///
/// Sealed: the kernels are written per type so that the compiler vectorises them.
pub trait Element: bytemuck::Pod + Send + Sync + PartialEq + fmt::Debug + sealed::Sealed {
    /// The runtime tag of this type.
    const DTYPE: DataType;

    /// `acc[i] = acc[i] op other[i]` for every `i`. The slices have equal lengths.
    fn reduce_assign(op: ReduceOp, acc: &mut [Self], other: &[Self]);

    /// `dst[i] = a[i] op b[i]` for every `i`. The slices have equal lengths.
    fn reduce_to(op: ReduceOp, dst: &mut [Self], a: &[Self], b: &[Self]);

    /// Turns sums into averages over `nranks` contributions (integers divide, truncating).
    fn average(buf: &mut [Self], nranks: usize);

    /// Converts from `f64`, for test data and reference results (saturating for integers).
    fn from_f64(v: f64) -> Self;

    /// Converts to `f64`, for comparisons against a reference.
    fn to_f64(self) -> f64;
}

macro_rules! seal {
    ($($t:ty),*) => { $(impl sealed::Sealed for $t {})* };
}
seal!(i8, u8, i32, u32, i64, u64, f16, bf16, f32, f64);

// The kernels. Every one is a straight loop over equal-length slices that LLVM
// vectorises (the criterion bench `reduce` measures it against `memcpy`). Integer
// arithmetic wraps: a collective never panics on overflow. `f16` and `bf16` are computed in
// `f32` and rounded once per reduction: `f16` through `half`'s slice conversions in blocks
// (which use F16C when the CPU has it), `bf16` element-wise with exact widening and integer
// round-to-nearest-even narrowing, which LLVM vectorises.

#[inline(always)]
fn zip_assign<T: Copy>(acc: &mut [T], other: &[T], f: impl Fn(T, T) -> T) {
    let n = acc.len().min(other.len());
    for (a, b) in acc[..n].iter_mut().zip(&other[..n]) {
        *a = f(*a, *b);
    }
}

#[inline(always)]
fn zip_to<T: Copy>(dst: &mut [T], a: &[T], b: &[T], f: impl Fn(T, T) -> T) {
    let n = dst.len().min(a.len()).min(b.len());
    for (d, (x, y)) in dst[..n].iter_mut().zip(a[..n].iter().zip(&b[..n])) {
        *d = f(*x, *y);
    }
}

macro_rules! int_element {
    ($t:ty, $dtype:ident) => {
        impl Element for $t {
            const DTYPE: DataType = DataType::$dtype;

            fn reduce_assign(op: ReduceOp, acc: &mut [Self], other: &[Self]) {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => zip_assign(acc, other, <$t>::wrapping_add),
                    ReduceOp::Prod => zip_assign(acc, other, <$t>::wrapping_mul),
                    ReduceOp::Min => zip_assign(acc, other, Ord::min),
                    ReduceOp::Max => zip_assign(acc, other, Ord::max),
                    ReduceOp::BitAnd => zip_assign(acc, other, |a, b| a & b),
                    ReduceOp::BitOr => zip_assign(acc, other, |a, b| a | b),
                    ReduceOp::BitXor => zip_assign(acc, other, |a, b| a ^ b),
                }
            }

            fn reduce_to(op: ReduceOp, dst: &mut [Self], a: &[Self], b: &[Self]) {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => zip_to(dst, a, b, <$t>::wrapping_add),
                    ReduceOp::Prod => zip_to(dst, a, b, <$t>::wrapping_mul),
                    ReduceOp::Min => zip_to(dst, a, b, Ord::min),
                    ReduceOp::Max => zip_to(dst, a, b, Ord::max),
                    ReduceOp::BitAnd => zip_to(dst, a, b, |x, y| x & y),
                    ReduceOp::BitOr => zip_to(dst, a, b, |x, y| x | y),
                    ReduceOp::BitXor => zip_to(dst, a, b, |x, y| x ^ y),
                }
            }

            fn average(buf: &mut [Self], nranks: usize) {
                // A group never has more ranks than the type can count only for i8/u8
                // (up to 127/255 ranks); beyond that, dividing by the saturated value keeps
                // the result in range rather than panicking.
                let n = <$t>::try_from(nranks).unwrap_or(<$t>::MAX).max(1);
                for v in buf {
                    *v /= n;
                }
            }

            fn from_f64(v: f64) -> Self {
                v as $t
            }

            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}

int_element!(i8, I8);
int_element!(u8, U8);
int_element!(i32, I32);
int_element!(u32, U32);
int_element!(i64, I64);
int_element!(u64, U64);

macro_rules! float_element {
    ($t:ty, $dtype:ident) => {
        impl Element for $t {
            const DTYPE: DataType = DataType::$dtype;

            fn reduce_assign(op: ReduceOp, acc: &mut [Self], other: &[Self]) {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => zip_assign(acc, other, |a, b| a + b),
                    ReduceOp::Prod => zip_assign(acc, other, |a, b| a * b),
                    ReduceOp::Min => zip_assign(acc, other, <$t>::min),
                    ReduceOp::Max => zip_assign(acc, other, <$t>::max),
                    // Rejected before any data moves (`DataType::supports`).
                    ReduceOp::BitAnd | ReduceOp::BitOr | ReduceOp::BitXor => {}
                }
            }

            fn reduce_to(op: ReduceOp, dst: &mut [Self], a: &[Self], b: &[Self]) {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => zip_to(dst, a, b, |x, y| x + y),
                    ReduceOp::Prod => zip_to(dst, a, b, |x, y| x * y),
                    ReduceOp::Min => zip_to(dst, a, b, <$t>::min),
                    ReduceOp::Max => zip_to(dst, a, b, <$t>::max),
                    ReduceOp::BitAnd | ReduceOp::BitOr | ReduceOp::BitXor => {}
                }
            }

            fn average(buf: &mut [Self], nranks: usize) {
                let n = nranks.max(1) as $t;
                for v in buf {
                    *v /= n;
                }
            }

            fn from_f64(v: f64) -> Self {
                v as $t
            }

            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}

float_element!(f32, F32);
float_element!(f64, F64);

/// Elements widened to `f32` per block: small enough for the stack and L1.
const HALF_BLOCK: usize = 256;

macro_rules! half_element {
    ($t:ty, $dtype:ident) => {
        impl Element for $t {
            const DTYPE: DataType = DataType::$dtype;

            fn reduce_assign(op: ReduceOp, acc: &mut [Self], other: &[Self]) {
                let mut wa = [0f32; HALF_BLOCK];
                let mut wb = [0f32; HALF_BLOCK];
                for (a, b) in acc.chunks_mut(HALF_BLOCK).zip(other.chunks(HALF_BLOCK)) {
                    let n = a.len().min(b.len());
                    a[..n].convert_to_f32_slice(&mut wa[..n]);
                    b[..n].convert_to_f32_slice(&mut wb[..n]);
                    f32::reduce_assign(op, &mut wa[..n], &wb[..n]);
                    a[..n].convert_from_f32_slice(&wa[..n]);
                }
            }

            fn reduce_to(op: ReduceOp, dst: &mut [Self], a: &[Self], b: &[Self]) {
                let mut wa = [0f32; HALF_BLOCK];
                let mut wb = [0f32; HALF_BLOCK];
                for ((d, a), b) in dst
                    .chunks_mut(HALF_BLOCK)
                    .zip(a.chunks(HALF_BLOCK))
                    .zip(b.chunks(HALF_BLOCK))
                {
                    let n = d.len().min(a.len()).min(b.len());
                    a[..n].convert_to_f32_slice(&mut wa[..n]);
                    b[..n].convert_to_f32_slice(&mut wb[..n]);
                    f32::reduce_assign(op, &mut wa[..n], &wb[..n]);
                    d[..n].convert_from_f32_slice(&wa[..n]);
                }
            }

            fn average(buf: &mut [Self], nranks: usize) {
                let mut w = [0f32; HALF_BLOCK];
                for chunk in buf.chunks_mut(HALF_BLOCK) {
                    let n = chunk.len();
                    chunk.convert_to_f32_slice(&mut w[..n]);
                    f32::average(&mut w[..n], nranks);
                    chunk.convert_from_f32_slice(&w[..n]);
                }
            }

            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }

            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
        }
    };
}

half_element!(f16, F16);

/// `bf16` to `f32` is exact: the same sign and exponent, the mantissa padded with zeros.
#[inline(always)]
fn widen(x: bf16) -> f32 {
    f32::from_bits(u32::from(x.to_bits()) << 16)
}

/// `f32` to `bf16`, rounding to nearest even and keeping NaNs NaN (quieted), exactly as
/// `bf16::from_f32`; written with integer operations so that LLVM vectorises the loops.
#[inline(always)]
fn narrow(x: f32) -> bf16 {
    let bits = x.to_bits();
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        return bf16::from_bits((bits >> 16) as u16 | 0x0040);
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    bf16::from_bits((bits.wrapping_add(round) >> 16) as u16)
}

/// `a op b` for bf16, computed in f32 and rounded once.
#[inline(always)]
fn bf16_op(op: ReduceOp) -> impl Fn(bf16, bf16) -> bf16 {
    move |a, b| {
        let (x, y) = (widen(a), widen(b));
        narrow(match op {
            ReduceOp::Sum | ReduceOp::Avg => x + y,
            ReduceOp::Prod => x * y,
            ReduceOp::Min => x.min(y),
            ReduceOp::Max => x.max(y),
            // Rejected before any data moves (`DataType::supports`).
            ReduceOp::BitAnd | ReduceOp::BitOr | ReduceOp::BitXor => x,
        })
    }
}

impl Element for bf16 {
    const DTYPE: DataType = DataType::Bf16;

    fn reduce_assign(op: ReduceOp, acc: &mut [Self], other: &[Self]) {
        // One match outside the loop, so that each arm's loop is a straight vector loop.
        match op {
            ReduceOp::Sum | ReduceOp::Avg => zip_assign(acc, other, bf16_op(ReduceOp::Sum)),
            ReduceOp::Prod => zip_assign(acc, other, bf16_op(ReduceOp::Prod)),
            ReduceOp::Min => zip_assign(acc, other, bf16_op(ReduceOp::Min)),
            ReduceOp::Max => zip_assign(acc, other, bf16_op(ReduceOp::Max)),
            ReduceOp::BitAnd | ReduceOp::BitOr | ReduceOp::BitXor => {}
        }
    }

    fn reduce_to(op: ReduceOp, dst: &mut [Self], a: &[Self], b: &[Self]) {
        match op {
            ReduceOp::Sum | ReduceOp::Avg => zip_to(dst, a, b, bf16_op(ReduceOp::Sum)),
            ReduceOp::Prod => zip_to(dst, a, b, bf16_op(ReduceOp::Prod)),
            ReduceOp::Min => zip_to(dst, a, b, bf16_op(ReduceOp::Min)),
            ReduceOp::Max => zip_to(dst, a, b, bf16_op(ReduceOp::Max)),
            ReduceOp::BitAnd | ReduceOp::BitOr | ReduceOp::BitXor => {}
        }
    }

    fn average(buf: &mut [Self], nranks: usize) {
        let n = nranks.max(1) as f32;
        for v in buf {
            *v = narrow(widen(*v) / n);
        }
    }

    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }

    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check<T: Element>(op: ReduceOp, a: &[f64], b: &[f64], want: &[f64]) {
        let a: Vec<T> = a.iter().map(|&v| T::from_f64(v)).collect();
        let b: Vec<T> = b.iter().map(|&v| T::from_f64(v)).collect();
        let mut acc = a.clone();
        T::reduce_assign(op, &mut acc, &b);
        let mut dst = vec![T::from_f64(0.0); a.len()];
        T::reduce_to(op, &mut dst, &a, &b);
        let got: Vec<f64> = acc.iter().map(|v| v.to_f64()).collect();
        assert_eq!(got, want, "{op} on {}", T::DTYPE);
        assert_eq!(
            acc,
            dst,
            "reduce_to agrees with reduce_assign for {op} on {}",
            T::DTYPE
        );
    }

    #[test]
    fn every_op_on_every_type() {
        let a = [1.0, 6.0, 3.0];
        let b = [5.0, 2.0, 3.0];
        macro_rules! all_types {
            ($op:expr, $want:expr) => {
                check::<i8>($op, &a, &b, &$want);
                check::<u8>($op, &a, &b, &$want);
                check::<i32>($op, &a, &b, &$want);
                check::<u32>($op, &a, &b, &$want);
                check::<i64>($op, &a, &b, &$want);
                check::<u64>($op, &a, &b, &$want);
                check::<f16>($op, &a, &b, &$want);
                check::<bf16>($op, &a, &b, &$want);
                check::<f32>($op, &a, &b, &$want);
                check::<f64>($op, &a, &b, &$want);
            };
        }
        all_types!(ReduceOp::Sum, [6.0, 8.0, 6.0]);
        all_types!(ReduceOp::Prod, [5.0, 12.0, 9.0]);
        all_types!(ReduceOp::Min, [1.0, 2.0, 3.0]);
        all_types!(ReduceOp::Max, [5.0, 6.0, 3.0]);
        check::<u32>(ReduceOp::BitAnd, &a, &b, &[1.0, 2.0, 3.0]);
        check::<u32>(ReduceOp::BitOr, &a, &b, &[5.0, 6.0, 3.0]);
        check::<i64>(ReduceOp::BitXor, &a, &b, &[4.0, 4.0, 0.0]);
    }

    #[test]
    fn integer_overflow_wraps_instead_of_panicking() {
        let mut acc = [i8::MAX, 100];
        i8::reduce_assign(ReduceOp::Sum, &mut acc, &[1, 100]);
        assert_eq!(acc, [i8::MIN, -56]);
        let mut acc = [u64::MAX];
        u64::reduce_assign(ReduceOp::Prod, &mut acc, &[2]);
        assert_eq!(acc, [u64::MAX - 1]);
    }

    #[test]
    fn average_divides_by_ranks() {
        let mut v = [9i32, -9, 10];
        i32::average(&mut v, 3);
        assert_eq!(v, [3, -3, 3]);
        let mut v = [f16::from_f32(3.0); 300];
        f16::average(&mut v, 4);
        assert!(v.iter().all(|x| x.to_f32() == 0.75));
        let mut v = [9u8];
        u8::average(&mut v, 1000);
        assert_eq!(v, [0]);
    }

    #[test]
    fn half_blocks_cover_lengths_that_are_not_multiples_of_the_block() {
        let n = HALF_BLOCK * 2 + 3;
        let a: Vec<bf16> = (0..n).map(|i| bf16::from_f32(i as f32)).collect();
        let mut acc = a.clone();
        bf16::reduce_assign(ReduceOp::Max, &mut acc, &vec![bf16::from_f32(100.0); n]);
        for (i, v) in acc.iter().enumerate() {
            assert_eq!(v.to_f32(), bf16::from_f32((i as f32).max(100.0)).to_f32());
        }
    }

    #[test]
    fn bf16_narrowing_rounds_exactly_like_half() {
        // Every 97th f32 bit pattern: all exponents, signs, NaNs, infinities, subnormals
        // and rounding ties are represented.
        for bits in (0..=u32::MAX)
            .step_by(97)
            .chain([0x3f80_8000, 0x3f81_8000, 0x7f7f_ffff])
        {
            let x = f32::from_bits(bits);
            let (fast, reference) = (narrow(x), bf16::from_f32(x));
            if x.is_nan() {
                assert!(fast.is_nan(), "{bits:#x}");
            } else {
                assert_eq!(fast.to_bits(), reference.to_bits(), "{bits:#x}");
            }
        }
    }

    #[test]
    fn nan_loses_to_a_number_in_min_and_max() {
        let mut acc = [f32::NAN, 1.0];
        f32::reduce_assign(ReduceOp::Min, &mut acc, &[2.0, f32::NAN]);
        assert_eq!(acc, [2.0, 1.0]);
    }

    #[test]
    fn bitwise_ops_are_integer_only() {
        assert!(!DataType::F32.supports(ReduceOp::BitAnd));
        assert!(DataType::U8.supports(ReduceOp::BitXor));
        assert!(DataType::Bf16.supports(ReduceOp::Avg));
    }
}
