//! The hot loops of the CPU encoder in [`crate::fastbert`]: matrix products, fused
//! attention, the narrow product of short queries, and the element-wise kernels (softmax,
//! GELU, layer norm). Each is plain, branch-free Rust over arrays, written once and
//! compiled three times: for AVX-512, for AVX2+FMA, and portable (whatever the build
//! target allows: SSE2 on generic x86-64, NEON on aarch64). The block shapes (lanes per
//! vector, accumulators in flight) are const generics picked per instruction set, so each
//! compiled copy fills its own register file: 32 × 16 lanes with AVX-512, 16 × 8 with
//! AVX2, 16–32 × 4 portable.
//!
//! Which copy runs is an [`Isa`] passed to every kernel. [`isa()`] is the default: the
//! widest the CPU has, or `NEURALCORE_ISA=avx512|avx2|portable` to force a narrower one
//! (so each path can be tested and benchmarked on one machine). A kernel never runs code
//! the CPU lacks: the ISA it is given is capped at [`detected()`] first.
//!
//! Matrix products go to `gemm` with the same choice (its AVX-512 or its AVX2+FMA
//! kernels), and portable to [`tiled`]'s own blocked product, which is the same code on
//! every architecture.
//!
//! This is the only module of the crate with `unsafe`: calling `gemm` (raw pointers; the
//! safe wrapper [`matmul`] checks every index it can touch first), calling
//! `#[target_feature]` functions after checking that the CPU has the features, and the
//! fused attention kernel's unaligned vector loads from bounds-checked buffers.

#![allow(unsafe_code)]
// Index loops over const-sized arrays are how these kernels are written: LLVM unrolls
// them and keeps the arrays in registers (iterator chains have compiled worse).
#![allow(clippy::needless_range_loop)]

use std::sync::OnceLock;

pub use gemm::Parallelism;

mod attention;
mod narrow;
mod tiled;

pub use attention::{attention, AttnScratch};
pub use narrow::{
    narrow_matmul, narrow_matmul_weights, to_bf16, to_int8, Padded, Weights, NARROW_MAX,
};

/// Instruction sets the kernels are compiled for, narrowest first (so `min` caps one at
/// another).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Whatever the build target allows, with no run-time feature check: SSE2 on generic
    /// x86-64, NEON on aarch64.
    Portable,
    /// AVX2 with FMA.
    Avx2,
    /// AVX-512 F/BW/DQ/VL with FMA.
    Avx512,
}

impl Isa {
    /// Every instruction set, widest first.
    pub const ALL: [Isa; 3] = [Isa::Avx512, Isa::Avx2, Isa::Portable];

    /// The name `NEURALCORE_ISA` takes and benchmarks print.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2",
            Isa::Portable => "portable",
        }
    }

    /// Every instruction set this CPU runs, widest first.
    pub fn supported() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|&i| i <= detected()).collect()
    }

    /// `self` if the CPU runs it, else the widest it does.
    pub fn capped(self) -> Isa {
        self.min(detected())
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Isa {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Isa::ALL
            .into_iter()
            .find(|i| i.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| format!("unknown instruction set {s:?} (avx512, avx2 or portable)"))
    }
}

/// The widest instruction set this CPU runs (checked once).
pub fn detected() -> Isa {
    static DETECTED: OnceLock<Isa> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            // gemm's AVX2 kernels (with candle's f16 feature) also require F16C, which
            // a VM may hide.
            let avx2 = is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
                && is_x86_feature_detected!("bmi1")
                && is_x86_feature_detected!("bmi2");
            if avx2
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512dq")
                && is_x86_feature_detected!("avx512vl")
            {
                return Isa::Avx512;
            }
            if avx2 {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    })
}

/// `NEURALCORE_ISA` as set: `Ok(None)` when unset or empty, an error naming the
/// accepted values when it is not one of them. Front ends call this at start-up so a
/// typo is reported instead of silently ignored.
pub fn isa_from_env() -> Result<Option<Isa>, String> {
    match std::env::var("NEURALCORE_ISA") {
        Ok(v) if !v.trim().is_empty() => v
            .parse()
            .map(Some)
            .map_err(|e| format!("NEURALCORE_ISA: {e}")),
        _ => Ok(None),
    }
}

/// The instruction set kernels use unless told otherwise: `NEURALCORE_ISA` capped at
/// what the CPU runs (a wider one than the CPU has, or a bad value, is logged once and
/// ignored), else [`detected()`].
pub fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| match isa_from_env() {
        Ok(Some(want)) => {
            if want > detected() {
                tracing::warn!(
                    "NEURALCORE_ISA={want}: this CPU runs at most {}; using that",
                    detected()
                );
            }
            want.capped()
        }
        Ok(None) => detected(),
        Err(e) => {
            tracing::warn!("{e}; using {}", detected());
            detected()
        }
    })
}

/// `a * b + c` in the portable kernels: fused where every CPU of the build target has
/// FMA (aarch64, or x86-64 built with `target-feature=+fma`), else a multiply and an
/// add (`mul_add` without hardware FMA is a slow library call).
const PORTABLE_FMA: bool = cfg!(any(target_arch = "aarch64", target_feature = "fma"));

/// A read-only strided matrix in a slice: element `(i, j)` is `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub struct MatRef<'a> {
    /// Backing storage.
    pub data: &'a [f32],
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Row stride.
    pub rs: usize,
    /// Column stride.
    pub cs: usize,
}

impl<'a> MatRef<'a> {
    /// A row-major `rows x cols` matrix with row stride `rs`.
    pub fn rows(data: &'a [f32], rows: usize, cols: usize, rs: usize) -> Self {
        MatRef {
            data,
            rows,
            cols,
            rs,
            cs: 1,
        }
    }
}

/// Elements spanned by a strided matrix (index of the last one + 1). Panics when that
/// overflows or a stride does not fit an `isize` (gemm takes signed strides): a caller
/// passing such a matrix must never get past the bounds checks built on this.
fn span(rows: usize, cols: usize, rs: usize, cs: usize) -> usize {
    assert!(
        rs <= isize::MAX as usize && cs <= isize::MAX as usize,
        "matrix stride too large"
    );
    if rows == 0 || cols == 0 {
        return 0;
    }
    (rows - 1)
        .checked_mul(rs)
        .and_then(|a| (cols - 1).checked_mul(cs).and_then(|b| a.checked_add(b)))
        .and_then(|a| a.checked_add(1))
        .expect("matrix span overflows")
}

/// `dst = a · b` (or `dst += a · b` with `accumulate`), `dst` row-major with row stride
/// `dst_rs`, through `gemm`'s kernels for `isa` (its scalar ones for [`Isa::Portable`]
/// on x86, where the encoder uses [`linear`] instead; its NEON ones on aarch64). Panics
/// if a matrix does not fit in its slice or the shapes disagree.
pub fn matmul(
    isa: Isa,
    dst: &mut [f32],
    dst_rs: usize,
    a: MatRef<'_>,
    b: MatRef<'_>,
    accumulate: bool,
    par: Parallelism,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(b.rows, k, "matmul: inner dimensions differ");
    assert!(span(m, n, dst_rs, 1) <= dst.len(), "matmul: dst too small");
    assert!(
        span(m, k, a.rs, a.cs) <= a.data.len(),
        "matmul: lhs too small"
    );
    assert!(
        span(k, n, b.rs, b.cs) <= b.data.len(),
        "matmul: rhs too small"
    );
    assert!(
        n <= dst_rs || m <= 1,
        "matmul: dst rows overlap (row stride below width)"
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                dst[r * dst_rs..r * dst_rs + n].fill(0.0);
            }
        }
        return;
    }
    // SAFETY: the asserts above keep every element gemm reads or writes (indices up to
    // `span(..) - 1` from each base pointer, all strides non-negative) inside the
    // slices; `dst` is borrowed mutably so it aliases neither input, and its rows do
    // not overlap each other. `gemm_for` only picks kernels the CPU runs.
    unsafe {
        gemm_for(
            isa.capped(),
            m,
            n,
            k,
            dst.as_mut_ptr(),
            dst_rs,
            accumulate,
            a,
            b,
            par,
        );
    }
}

/// `gemm::gemm` with its kernels chosen by `isa` instead of by its own detection (which
/// always takes the widest): `dst (m × n, row stride dst_rs) (+)= a · b`.
///
/// # Safety
/// As [`gemm::gemm`]: every element addressed through the strides is inside its
/// slice, `dst` overlaps neither input, and the CPU runs `isa`.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_for(
    isa: Isa,
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_rs: usize,
    accumulate: bool,
    a: MatRef<'_>,
    b: MatRef<'_>,
    par: Parallelism,
) {
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Avx512 {
        // What `gemm::gemm` does before dispatching, for a row-major `dst` (column
        // stride 1 below the row stride): compute the transpose, `dstᵀ = bᵀ · aᵀ`, so
        // the kernels write along columns.
        let (m, n) = (n, m);
        let (lhs, lhs_cs, lhs_rs) = (b.data.as_ptr(), b.rs as isize, b.cs as isize);
        let (rhs, rhs_cs, rhs_rs) = (a.data.as_ptr(), a.rs as isize, a.cs as isize);
        let (dst_cs, dst_rs) = (dst_rs as isize, 1isize);
        macro_rules! run {
            ($simd:ty, $uk:path, $lanes:expr) => {{
                use gemm_common::simd::MixedSimd;
                use $uk as uk;
                const N: usize = $lanes;
                gemm_common::gemm::gemm_basic_generic::<
                    _,
                    f32,
                    N,
                    { uk::MR_DIV_N * N },
                    { uk::NR },
                    { uk::MR_DIV_N },
                    { uk::H_M },
                    { uk::H_N },
                >(
                    <$simd as MixedSimd<f32, f32, f32, f32>>::try_new()
                        .expect("the CPU runs this instruction set"),
                    m,
                    n,
                    k,
                    dst,
                    dst_cs,
                    dst_rs,
                    accumulate,
                    lhs,
                    lhs_cs,
                    lhs_rs,
                    rhs,
                    rhs_cs,
                    rhs_rs,
                    1.0,
                    1.0,
                    false,
                    false,
                    false,
                    |a, b, c| a * b + c,
                    &uk::UKR,
                    &uk::H_UKR,
                    false,
                    par,
                )
            }};
        }
        match isa {
            Isa::Avx2 => run!(gemm_common::simd::V3, gemm_f32::microkernel::fma::f32, 8),
            _ => run!(
                gemm_common::simd::Scalar,
                gemm_f32::microkernel::scalar::f32,
                1
            ),
        }
        return;
    }
    let _ = isa;
    gemm::gemm(
        m,
        n,
        k,
        dst,
        1,
        dst_rs as isize,
        accumulate,
        a.data.as_ptr(),
        a.cs as isize,
        a.rs as isize,
        b.data.as_ptr(),
        b.cs as isize,
        b.rs as isize,
        1.0,
        1.0,
        false,
        false,
        false,
        par,
    );
}

/// Scratch of [`linear`]'s narrow product, one part per thread it splits over.
#[derive(Default)]
pub struct LinearScratch {
    parts: [NarrowScratch; 2],
}

#[derive(Default)]
struct NarrowScratch {
    pad: Vec<Padded>,
    buf: Vec<f32>,
}

/// The narrow product of [`linear`] on one thread.
#[allow(clippy::too_many_arguments)]
fn narrow_part(
    isa: Isa,
    dst: &mut [f32],
    w: Weights<'_>,
    rows: usize,
    x: &[f32],
    t: usize,
    accumulate: bool,
    s: &mut NarrowScratch,
) {
    narrow_matmul_weights(isa, dst, w, rows, x, t, accumulate, &mut s.pad, &mut s.buf);
}

/// A linear layer's product, `dst = w · x` (`+=` with `accumulate`), for the row-major
/// `[rows, inp]` weight `w` and feature-major `[inp, t]` activations `x`; `dst` is
/// `[rows, t]`. Up to [`NARROW_MAX`] tokens (a query) go through the narrow product,
/// in whatever [`Weights`] format `w` is, split in two halves over the thread pool when
/// `par` allows; more go through `gemm` ([`matmul`]) or, portable, [`tiled`]'s blocked
/// product, and need f32 weights.
#[allow(clippy::too_many_arguments)]
pub fn linear(
    isa: Isa,
    dst: &mut [f32],
    w: Weights<'_>,
    rows: usize,
    x: &[f32],
    t: usize,
    accumulate: bool,
    par: Parallelism,
    scratch: &mut LinearScratch,
) {
    if t == 0 || rows == 0 {
        return;
    }
    if t <= NARROW_MAX {
        let [s0, s1] = &mut scratch.parts;
        if !matches!(par, Parallelism::None) && rayon::current_num_threads() > 1 && rows >= 64 {
            // Two parts of the rows (multiples of 12, whole blocks of every kernel
            // shape), each streaming its own part of the weights.
            let inp = w.len() / rows;
            assert_eq!(w.len(), rows * inp, "linear: weight shape");
            let r0 = (rows / 2).div_ceil(12) * 12;
            let (d0, d1) = dst[..rows * t].split_at_mut(r0 * t);
            let (w0, w1) = (w.rows(inp, 0, r0), w.rows(inp, r0, rows));
            rayon::join(
                || narrow_part(isa, d0, w0, r0, x, t, accumulate, s0),
                || narrow_part(isa, d1, w1, rows - r0, x, t, accumulate, s1),
            );
        } else {
            narrow_part(isa, dst, w, rows, x, t, accumulate, s0);
        }
        return;
    }
    let Weights::F32(w) = w else {
        panic!("linear: more than {NARROW_MAX} tokens need f32 weights");
    };
    let inp = w.len() / rows;
    if isa.capped() == Isa::Portable {
        tiled::matmul(dst, w, rows, x, t, accumulate, par);
        return;
    }
    matmul(
        isa,
        dst,
        t,
        MatRef::rows(w, rows, inp, inp),
        MatRef::rows(x, inp, t, t),
        accumulate,
        par,
    );
}

/// Generates `pub fn $name(isa, args)` that runs `$imp::<FMA>(args)` compiled for `isa`
/// (capped at what the CPU runs).
macro_rules! multiversion {
    ($(#[$doc:meta])* $name:ident => $imp:ident ( $($arg:ident : $ty:ty),* ) $(-> $ret:ty)?) => {
        $(#[$doc])*
        #[allow(clippy::too_many_arguments)]
        pub fn $name(isa: Isa, $($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi1,bmi2")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                    $imp::<true>($($arg),*)
                }
                #[target_feature(enable = "avx2,fma,bmi1,bmi2")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                    $imp::<true>($($arg),*)
                }
                match isa.capped() {
                    // SAFETY: `capped` keeps to what the CPU runs.
                    Isa::Avx512 => return unsafe { avx512($($arg),*) },
                    // SAFETY: as above.
                    Isa::Avx2 => return unsafe { avx2($($arg),*) },
                    Isa::Portable => {}
                }
            }
            let _ = isa;
            $imp::<PORTABLE_FMA>($($arg),*)
        }
    };
}
pub(crate) use multiversion;

/// `a * b + c`, fused when the instruction set has FMA.
#[inline(always)]
fn fma<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

const LANES: usize = 16;

/// `e^x` for f32 (Cephes' `expf`: range reduction by ln 2 and a degree-6 polynomial,
/// about 1 ulp), branch-free so it vectorizes. Inputs are clamped to the range where
/// the result is a normal number.
#[inline(always)]
fn exp_fast<const FMA: bool>(x: f32) -> f32 {
    let x = if x > 88.376_26 { 88.376_26 } else { x };
    exp_neg::<FMA>(x)
}

/// [`exp_fast`] without the upper clamp: for `x <= 88.37` (softmax subtracts the
/// maximum first, so its inputs are `<= 0`).
#[inline(always)]
fn exp_neg<const FMA: bool>(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let x = if x < -87.336_55 { -87.336_55 } else { x };
    let t = fma::<FMA>(x, std::f32::consts::LOG2_E, MAGIC);
    let n = t - MAGIC;
    let r = fma::<FMA>(n, -0.693_359_4, x);
    let r = fma::<FMA>(n, 2.121_944_4e-4, r);
    let mut p = 1.987_569_1e-4;
    p = fma::<FMA>(p, r, 1.398_199_9e-3);
    p = fma::<FMA>(p, r, 8.333_452e-3);
    p = fma::<FMA>(p, r, 4.166_579_6e-2);
    p = fma::<FMA>(p, r, 0.166_666_65);
    p = fma::<FMA>(p, r, 0.5);
    let y = fma::<FMA>(p, r * r, r) + 1.0;
    // 2^n from the integer sitting in the low mantissa bits of `t`.
    let bits = t
        .to_bits()
        .wrapping_sub(MAGIC.to_bits())
        .wrapping_add(127)
        .wrapping_shl(23);
    y * f32::from_bits(bits)
}

/// erf(x) as a ratio of two polynomials in x² on [-4, 4], saturated outside (the f32
/// form Eigen and XLA use; |error| < 1e-6).
#[inline(always)]
fn erf_fast<const FMA: bool>(x: f32) -> f32 {
    let x = if x < -4.0 { -4.0 } else { x };
    let x = if x > 4.0 { 4.0 } else { x };
    let x2 = x * x;
    let mut p = fma::<FMA>(x2, -2.726_142_3e-10, 2.770_681_4e-8);
    p = fma::<FMA>(x2, p, -2.101_024e-6);
    p = fma::<FMA>(x2, p, -5.692_506_4e-5);
    p = fma::<FMA>(x2, p, -7.349_906_3e-4);
    p = fma::<FMA>(x2, p, -2.954_6e-3);
    p = fma::<FMA>(x2, p, -1.609_603_3e-2);
    p *= x;
    let mut q = fma::<FMA>(x2, -1.456_607_2e-5, -2.133_740_6e-4);
    q = fma::<FMA>(x2, q, -1.682_827e-3);
    q = fma::<FMA>(x2, q, -7.373_329_3e-3);
    q = fma::<FMA>(x2, q, -1.426_474e-2);
    p / q
}

#[inline(always)]
fn reduce(acc: [f32; LANES]) -> f32 {
    let mut w = acc;
    let mut half = LANES / 2;
    while half > 0 {
        for i in 0..half {
            w[i] += w[i + half];
        }
        half /= 2;
    }
    w[0]
}

/// Row-wise `exp(scale · (x - max))` in place; `inv_sums[r]` gets `1 / sum` of row `r`
/// (the caller scales whatever the probabilities are multiplied into).
#[inline(always)]
fn softmax_rows_imp<const FMA: bool>(
    x: &mut [f32],
    width: usize,
    scale: f32,
    inv_sums: &mut [f32],
) {
    // Its exp takes inputs <= 0: `scale · (x - max)` with a positive scale.
    assert!(scale > 0.0, "softmax_rows: scale must be positive");
    for (row, inv_sum) in x.chunks_exact_mut(width).zip(inv_sums.iter_mut()) {
        let mut mx = [f32::NEG_INFINITY; LANES];
        let mut chunks = row.chunks_exact(LANES);
        for c in &mut chunks {
            for i in 0..LANES {
                mx[i] = if c[i] > mx[i] { c[i] } else { mx[i] };
            }
        }
        for (i, &v) in chunks.remainder().iter().enumerate() {
            mx[i] = if v > mx[i] { v } else { mx[i] };
        }
        let mut m = mx[0];
        for &v in &mx[1..] {
            m = if v > m { v } else { m };
        }
        let shift = -m * scale;
        let mut acc = [0f32; LANES];
        let mut chunks = row.chunks_exact_mut(LANES);
        for c in &mut chunks {
            for i in 0..LANES {
                let e = exp_neg::<FMA>(fma::<FMA>(c[i], scale, shift));
                c[i] = e;
                acc[i] += e;
            }
        }
        for (i, v) in chunks.into_remainder().iter_mut().enumerate() {
            let e = exp_neg::<FMA>(fma::<FMA>(*v, scale, shift));
            *v = e;
            acc[i] += e;
        }
        *inv_sum = 1.0 / reduce(acc);
    }
}

multiversion!(
    /// Unnormalized row-wise softmax of `scale · x` over rows of `width` values, in
    /// place, with `1 / row sum` in `inv_sums`.
    softmax_rows => softmax_rows_imp(x: &mut [f32], width: usize, scale: f32, inv_sums: &mut [f32])
);

#[inline(always)]
fn bias_gelu_rows_imp<const FMA: bool>(x: &mut [f32], width: usize, bias: &[f32]) {
    for (row, &b) in x.chunks_exact_mut(width).zip(bias) {
        for v in row {
            let y = *v + b;
            *v = 0.5 * y * (1.0 + erf_fast::<FMA>(y * std::f32::consts::FRAC_1_SQRT_2));
        }
    }
}

multiversion!(
    /// `x[r][j] = gelu(x[r][j] + bias[r])` (exact-form GELU with the rational erf) over
    /// rows of `width` values.
    bias_gelu_rows => bias_gelu_rows_imp(x: &mut [f32], width: usize, bias: &[f32])
);

#[inline(always)]
fn tanh_fast<const FMA: bool>(x: f32) -> f32 {
    // tanh(x) = 1 - 2 / (e^{2x} + 1), saturating for large |x|.
    let x = if x < -10.0 { -10.0 } else { x };
    let x = if x > 10.0 { 10.0 } else { x };
    1.0 - 2.0 / (exp_fast::<FMA>(2.0 * x) + 1.0)
}

#[inline(always)]
fn bias_gelu_tanh_rows_imp<const FMA: bool>(x: &mut [f32], width: usize, bias: &[f32]) {
    const C: f32 = 0.797_884_6; // sqrt(2 / pi)
    for (row, &b) in x.chunks_exact_mut(width).zip(bias) {
        for v in row {
            let y = *v + b;
            let inner = C * fma::<FMA>(0.044_715 * y, y * y, y);
            *v = 0.5 * y * (1.0 + tanh_fast::<FMA>(inner));
        }
    }
}

multiversion!(
    /// `x[r][j] = gelu_tanh(x[r][j] + bias[r])` over rows of `width` values.
    bias_gelu_tanh_rows => bias_gelu_tanh_rows_imp(x: &mut [f32], width: usize, bias: &[f32])
);

#[inline(always)]
fn bias_relu_rows_imp<const FMA: bool>(x: &mut [f32], width: usize, bias: &[f32]) {
    for (row, &b) in x.chunks_exact_mut(width).zip(bias) {
        for v in row {
            let y = *v + b;
            *v = if y > 0.0 { y } else { 0.0 };
        }
    }
}

multiversion!(
    /// `x[r][j] = relu(x[r][j] + bias[r])` over rows of `width` values.
    bias_relu_rows => bias_relu_rows_imp(x: &mut [f32], width: usize, bias: &[f32])
);

#[inline(always)]
fn add_bias_imp<const FMA: bool>(x: &mut [f32], bias: &[f32]) {
    for (v, &b) in x.iter_mut().zip(bias) {
        *v += b;
    }
}

multiversion!(
    /// `x += bias` element-wise.
    add_bias => add_bias_imp(x: &mut [f32], bias: &[f32])
);

#[inline(always)]
fn bias_layer_norm_cols_imp<const FMA: bool>(
    x: &mut [f32],
    width: usize,
    bias: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
    stats: &mut [f32],
) {
    let n = bias.len();
    let inv_n = 1.0 / n as f32;
    let (mean, rstd) = stats[..2 * width].split_at_mut(width);
    mean.fill(0.0);
    for (row, &b) in x.chunks_exact_mut(width).zip(bias) {
        for (v, m) in row.iter_mut().zip(mean.iter_mut()) {
            *v += b;
            *m += *v;
        }
    }
    for m in mean.iter_mut() {
        *m *= inv_n;
    }
    rstd.fill(0.0);
    for row in x.chunks_exact(width) {
        for ((&v, &m), s) in row.iter().zip(mean.iter()).zip(rstd.iter_mut()) {
            let d = v - m;
            *s = fma::<FMA>(d, d, *s);
        }
    }
    for s in rstd.iter_mut() {
        *s = 1.0 / (*s * inv_n + eps).sqrt();
    }
    for ((row, &g), &b) in x.chunks_exact_mut(width).zip(gamma).zip(beta) {
        for ((v, &m), &r) in row.iter_mut().zip(mean.iter()).zip(rstd.iter()) {
            *v = fma::<FMA>((*v - m) * r, g, b);
        }
    }
}

multiversion!(
    /// Layer norm of each column of the feature-major `[bias.len(), width]` matrix `x`:
    /// `x[:, j] = layer_norm(x[:, j] + bias) · gamma + beta`. `stats` holds at least
    /// `2 · width` values of scratch.
    bias_layer_norm_cols => bias_layer_norm_cols_imp(
        x: &mut [f32],
        width: usize,
        bias: &[f32],
        gamma: &[f32],
        beta: &[f32],
        eps: f32,
        stats: &mut [f32]
    )
);

#[inline(always)]
fn add_into_imp<const FMA: bool>(dst: &mut [f32], a: &[f32], b: &[f32]) {
    for ((d, &x), &y) in dst.iter_mut().zip(a).zip(b) {
        *d = x + y;
    }
}

multiversion!(
    /// `dst = a + b` element-wise.
    add_into => add_into_imp(dst: &mut [f32], a: &[f32], b: &[f32])
);

#[inline(always)]
fn mul_assign_imp<const FMA: bool>(x: &mut [f32], f: &[f32]) {
    for (v, &f) in x.iter_mut().zip(f) {
        *v *= f;
    }
}

multiversion!(
    /// `x[i] *= f[i]` element-wise.
    mul_assign => mul_assign_imp(x: &mut [f32], f: &[f32])
);

#[inline(always)]
fn add_row_bias_imp<const FMA: bool>(x: &mut [f32], width: usize, bias: &[f32]) {
    for (row, &b) in x.chunks_exact_mut(width).zip(bias) {
        for v in row {
            *v += b;
        }
    }
}

multiversion!(
    /// `x[r][j] += bias[r]` over rows of `width` values.
    add_row_bias => add_row_bias_imp(x: &mut [f32], width: usize, bias: &[f32])
);

pub(crate) use attention::grow;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_2_ulp() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let want = (x as f64).exp();
            let got = exp_fast::<false>(x) as f64;
            worst = worst.max(((got - want) / want).abs());
            x += 0.001_7;
        }
        assert!(worst < 2.5e-7, "max relative error {worst}");
    }

    #[test]
    fn softmax_matches_naive() {
        let width = 37;
        let x: Vec<f32> = (0..width * 3)
            .map(|i| ((i * 7919) % 113) as f32 * 0.37 - 20.0)
            .collect();
        for isa in Isa::supported() {
            let mut got = x.clone();
            let mut inv = vec![0.0; 3];
            softmax_rows(isa, &mut got, width, 0.125, &mut inv);
            for (row, &f) in got.chunks_mut(width).zip(&inv) {
                row.iter_mut().for_each(|v| *v *= f);
            }
            for (row, g) in x.chunks(width).zip(got.chunks(width)) {
                let m = row
                    .iter()
                    .cloned()
                    .fold(f64::MIN, |a, b| a.max(b as f64 * 0.125));
                let e: Vec<f64> = row.iter().map(|&v| (v as f64 * 0.125 - m).exp()).collect();
                let s: f64 = e.iter().sum();
                for (w, &g) in e.iter().zip(g) {
                    assert!((w / s - g as f64).abs() < 1e-7, "{isa}: {} vs {g}", w / s);
                }
            }
        }
    }

    /// The query path's product: split over two threads or not, in every weight format,
    /// it is the exact product of the weights as the format holds them.
    #[test]
    fn linear_split_and_compact_weights_match_the_widened_product() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for isa in Isa::supported() {
            for (rows, inp, t) in [(64, 40, 1), (65, 37, 5), (100, 64, 17), (1536, 24, 32)] {
                let w: Vec<f32> = (0..rows * inp)
                    .map(|i| ((i * 7919) % 101) as f32 * 0.013 - 0.6)
                    .collect();
                let x: Vec<f32> = (0..inp * t)
                    .map(|i| ((i * 104_729) % 89) as f32 * 0.02 - 0.9)
                    .collect();
                let bf = to_bf16(&w);
                let (q, scales) = to_int8(&w, rows);
                let widened: Vec<(Weights<'_>, Vec<f32>)> = vec![
                    (Weights::F32(&w), w.clone()),
                    (
                        Weights::Bf16(&bf),
                        bf.iter()
                            .map(|&h| f32::from_bits(u32::from(h) << 16))
                            .collect(),
                    ),
                    (
                        Weights::Int8 {
                            q: &q,
                            scales: &scales,
                        },
                        q.iter()
                            .enumerate()
                            .map(|(i, &v)| f32::from(v) * scales[i / inp])
                            .collect(),
                    ),
                ];
                for (weights, exact) in widened {
                    for accumulate in [false, true] {
                        let start: Vec<f32> = (0..rows * t).map(|i| i as f32 * 0.01).collect();
                        let mut want = start.clone();
                        matmul(
                            Isa::Portable,
                            &mut want,
                            t,
                            MatRef::rows(&exact, rows, inp, inp),
                            MatRef::rows(&x, inp, t, t),
                            accumulate,
                            Parallelism::None,
                        );
                        for par in [Parallelism::None, Parallelism::Rayon(0)] {
                            let mut got = start.clone();
                            let mut scratch = LinearScratch::default();
                            pool.install(|| {
                                linear(
                                    isa,
                                    &mut got,
                                    weights,
                                    rows,
                                    &x,
                                    t,
                                    accumulate,
                                    par,
                                    &mut scratch,
                                )
                            });
                            for (g, w) in got.iter().zip(&want) {
                                assert!(
                                    (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                                    "{isa} {rows}x{inp}x{t}: {g} vs {w}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn compact_formats_round_as_documented() {
        assert_eq!(to_bf16(&[1.0, -2.5, 0.0]), [0x3f80, 0xc020, 0]);
        // 1 + 2^-8 lies halfway between two bfloat16 values: ties go to even.
        assert_eq!(to_bf16(&[1.0 + 1.0 / 256.0]), [0x3f80]);
        assert_eq!(to_bf16(&[1.0 + 3.0 / 256.0]), [0x3f82]);
        assert!(f32::from_bits(u32::from(to_bf16(&[f32::NAN])[0]) << 16).is_nan());
        let (q, s) = to_int8(&[0.5, -1.0, 0.25, 0.0, 0.0, 0.0], 2);
        assert_eq!(q, [64, -127, 32, 0, 0, 0]);
        assert_eq!(s, [1.0 / 127.0, 1.0]);
    }

    #[test]
    #[should_panic(expected = "stride too large")]
    fn a_stride_past_isize_is_refused_before_gemm() {
        let a = [1.0f32, 2.0];
        let wild = MatRef {
            data: &a,
            rows: 2,
            cols: 1,
            rs: usize::MAX,
            cs: 1,
        };
        let mut d = [0.0f32; 2];
        matmul(
            Isa::Portable,
            &mut d,
            1,
            wild,
            MatRef::rows(&a[..1], 1, 1, 1),
            false,
            Parallelism::None,
        );
    }

    #[test]
    fn isa_names_parse_and_cap() {
        for isa in Isa::ALL {
            assert_eq!(isa.name().parse::<Isa>(), Ok(isa));
        }
        assert_eq!(Isa::Avx512.capped(), detected());
        assert_eq!(Isa::Portable.capped(), Isa::Portable);
        assert_eq!(" AVX2 ".parse::<Isa>(), Ok(Isa::Avx2));
        assert!("sse9"
            .parse::<Isa>()
            .unwrap_err()
            .contains("avx512, avx2 or portable"));
        assert!(Isa::Portable < Isa::Avx2 && Isa::Avx2 < Isa::Avx512);
        assert_eq!(Isa::supported().last(), Some(&Isa::Portable));
        assert_eq!(Isa::supported()[0], detected());
    }

    #[test]
    fn matmul_strided_and_accumulating() {
        // a: 3x2 inside a row stride of 4, b = a^T view.
        let a = [1., 2., 9., 9., 3., 4., 9., 9., 5., 6., 9., 9.];
        let am = MatRef::rows(&a, 3, 2, 4);
        let at = MatRef {
            data: &a,
            rows: 2,
            cols: 3,
            rs: 1,
            cs: 4,
        };
        for isa in Isa::supported() {
            let mut d = vec![1.0; 9];
            matmul(isa, &mut d, 3, am, at, true, Parallelism::None);
            assert_eq!(d, [6., 12., 18., 12., 26., 40., 18., 40., 62.], "{isa}");
        }
    }
}
