//! Reduction operations (their kernels are each [`Element`](crate::Element)'s).

use std::fmt;

/// How contributions are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ReduceOp {
    /// Sum (integers wrap).
    Sum,
    /// Product (integers wrap).
    Prod,
    /// Minimum. Floats follow IEEE `minNum`: a NaN loses to a number.
    Min,
    /// Maximum. Floats follow IEEE `maxNum`: a NaN loses to a number.
    Max,
    /// Sum divided by the number of ranks (integers: truncating division of the wrapped sum).
    Avg,
    /// Bitwise and (integer types only).
    BitAnd,
    /// Bitwise or (integer types only).
    BitOr,
    /// Bitwise exclusive or (integer types only).
    BitXor,
}

impl ReduceOp {
    /// Every operation.
    pub const ALL: [ReduceOp; 8] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
        ReduceOp::BitAnd,
        ReduceOp::BitOr,
        ReduceOp::BitXor,
    ];

    /// The name used by the CLI and in errors.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
            ReduceOp::BitAnd => "band",
            ReduceOp::BitOr => "bor",
            ReduceOp::BitXor => "bxor",
        }
    }

    /// Whether the operation is bitwise (and so undefined on floats).
    pub fn is_bitwise(self) -> bool {
        matches!(self, ReduceOp::BitAnd | ReduceOp::BitOr | ReduceOp::BitXor)
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl std::str::FromStr for ReduceOp {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ReduceOp::ALL
            .into_iter()
            .find(|o| o.name() == s)
            .ok_or_else(|| {
                format!("unknown reduction {s:?} (expected sum prod min max avg band bor bxor)")
            })
    }
}
