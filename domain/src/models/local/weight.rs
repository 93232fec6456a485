//! A quantized weight matrix ([`Weight`]) multiplied in the layout that is
//! fastest for the shape at hand: candle's tiles for a prompt's many rows,
//! the file's compact blocks for a one-token decode step.
//!
//! On x86 candle repacks a Q4_K weight into tiles the first time it is
//! multiplied, whatever the number of rows: 16 rows per tile with the
//! scales expanded to `f32`, about a third more bytes than the file's
//! blocks. A prompt reuses each tile for many rows and gains; a decode step
//! reads every weight once, for one row, and is bound by memory bandwidth,
//! so the larger tiles cost it (on a 2-core AVX2 machine: 12–14 tokens/s
//! tiled, 17–18 compact; BENCHMARKS.md). candle keeps Q6_K compact for one
//! row for this reason but not Q4_K. With its public API a weight stays
//! compact only when its row count is not a multiple of the tile height, so
//! the decode copy is the same blocks plus one zero row, whose output
//! column is cut off again.
//!
//! Invariants:
//! - Both layouts hold the same blocks: a product is the same matrix's
//!   whichever layout computes it, and never includes the padding row.
//! - The compact copy exists only where candle's tiles are its plain AVX2
//!   ones (no VNNI) and the weight is Q4_K; everywhere else a weight is
//!   exactly candle's `QMatMul`. It costs the weight's size again in memory.

use candle_core::{
    D, Device, Module, Result, Tensor,
    quantized::{GgmlDType, QMatMul, QTensor, ggml_file::qtensor_from_ggml},
};

/// A weight `(rows, columns)` applied as `x · Wᵀ`; see the module docs.
pub struct Weight {
    tiled: QMatMul,
    /// The same blocks and one zero row, multiplied without tiles.
    compact: Option<QMatMul>,
    rows: usize,
}

impl Weight {
    /// The weight, with a compact copy for one-row products where that is
    /// faster on this CPU.
    pub fn new(tensor: QTensor) -> Result<Self> {
        let compact = match tensor.dtype() == GgmlDType::Q4K && plain_avx2_tiles() {
            true => Some(QMatMul::from_qtensor(padded(&tensor)?)?),
            false => None,
        };
        Self::with_layouts(tensor, compact)
    }

    fn with_layouts(tensor: QTensor, compact: Option<QMatMul>) -> Result<Self> {
        let (rows, _) = tensor.shape().dims2()?;
        Ok(Self {
            tiled: QMatMul::from_qtensor(tensor)?,
            compact,
            rows,
        })
    }

    /// `x · Wᵀ` for `x` of shape `(…, columns)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let one_row = x.dims().iter().rev().skip(1).product::<usize>() == 1;
        match (&self.compact, one_row) {
            (Some(compact), true) => compact
                .forward(x)?
                .narrow(D::Minus1, 0, self.rows)?
                .contiguous(),
            _ => self.tiled.forward(x),
        }
    }
}

/// `tensor`'s blocks followed by one row of zero blocks.
fn padded(tensor: &QTensor) -> Result<QTensor> {
    let (rows, columns) = tensor.shape().dims2()?;
    let mut bytes = tensor.data()?.into_owned();
    let row_bytes = bytes.len() / rows;
    bytes.resize(bytes.len() + row_bytes, 0);
    qtensor_from_ggml(
        tensor.dtype(),
        &bytes,
        vec![rows + 1, columns],
        &Device::Cpu,
    )
}

/// Whether candle's x86 tiles here are its AVX2 ones, whose one-row
/// products are slower than the compact blocks'. With VNNI they are other
/// kernels, not measured against the compact ones, so candle decides.
fn plain_avx2_tiles() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && !std::arch::is_x86_feature_detected!("avx512vnni")
            && !std::arch::is_x86_feature_detected!("avxvnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Q4_K weight of 32 rows (two tiles) and 512 columns.
    fn q4k_weight() -> QTensor {
        let values: Vec<f32> = (0..32 * 512)
            .map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0)
            .collect();
        let weight = Tensor::from_vec(values, (32, 512), &Device::Cpu).expect("tensor");
        QTensor::quantize(&weight, GgmlDType::Q4K).expect("quantize")
    }

    fn input(rows: usize) -> Tensor {
        let values: Vec<f32> = (0..rows * 512)
            .map(|i| ((i * 104_729 % 997) as f32 / 498.0) - 1.0)
            .collect();
        Tensor::from_vec(values, (1, rows, 512), &Device::Cpu).expect("tensor")
    }

    /// The largest absolute value in `t`.
    fn largest(t: &Tensor) -> f32 {
        t.abs()
            .expect("abs")
            .flatten_all()
            .expect("flatten")
            .max(0)
            .expect("max")
            .to_scalar::<f32>()
            .expect("scalar")
    }

    fn largest_difference(a: &Tensor, b: &Tensor) -> f32 {
        largest(&(a - b).expect("sub"))
    }

    #[test]
    fn the_compact_copy_multiplies_one_row_as_the_tiles_do_and_prompts_stay_on_the_tiles() {
        let weight = q4k_weight();
        let compact = QMatMul::from_qtensor(padded(&weight).expect("padded")).expect("compact");
        let both = Weight::with_layouts(weight, Some(compact)).expect("weight");
        let tiled_only = Weight::with_layouts(q4k_weight(), None).expect("weight");

        let one = input(1);
        let by_compact = both.forward(&one).expect("forward");
        let by_tiles = tiled_only.forward(&one).expect("forward");
        assert_eq!(by_compact.dims(), &[1, 1, 32], "the padding row is cut off");
        let scale = largest(&by_tiles);
        assert!(scale > 1.0, "the product is not trivially zero");
        assert!(
            largest_difference(&by_compact, &by_tiles) <= scale * 1e-3,
            "the two layouts hold the same matrix"
        );

        let prompt = input(5);
        let a = both.forward(&prompt).expect("forward");
        let b = tiled_only.forward(&prompt).expect("forward");
        assert_eq!(a.dims(), &[1, 5, 32]);
        assert_eq!(
            largest_difference(&a, &b),
            0.0,
            "a prompt's rows go through the same tiles"
        );
    }
}
