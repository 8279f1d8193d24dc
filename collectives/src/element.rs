//! Element types: the [`Element`] trait and its runtime tag [`DataType`].

use std::fmt;

use half::{bf16, f16};

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
