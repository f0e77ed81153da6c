//! Fused scaled dot-product attention of one head over one sequence: blocks of queries
//! go through QKᵀ, softmax and ·V while their scores stay in L1, with no `gemm` call.
//!
//! One generic kernel, [`head`], with the block shape as const generics: `W` lanes per
//! vector, `QV` vectors of queries per block, `KB` keys per block of the QKᵀ step (each
//! block holds `KB · QV` accumulators) and `DB` head dimensions per block of the ·V step
//! (`DB · QV` accumulators). [`attention`] instantiates it per instruction set:
//!
//! | isa | W | QV | KB | DB | registers in flight (of) |
//! |---|---|---|---|---|---|
//! | AVX-512 | 16 | 2 | 12 | 8 | 24 + 3 (32) |
//! | AVX2 | 8 | 2 | 6 | 4 | 12 + 3 (16) |
//! | portable | 4 | 2 | 4 | 4 | 8 + 3 (16 on SSE2, 32 on NEON) |

use super::{fma, span, Isa, PORTABLE_FMA};

/// Scratch of [`attention`]: queries, keys and values of one head, and transposed
/// scores.
#[derive(Default)]
pub struct AttnScratch {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    st: Vec<f32>,
}

/// The first `n` values of a scratch buffer, reallocated (zeroed) when it is shorter.
pub(crate) fn grow(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        *v = vec![0.0; n];
    }
    &mut v[..n]
}

/// Longest sequence the fused kernel takes.
const MAX_N: usize = 512;
/// Padding past the last token in the packed rows: at least the widest query block
/// (2 · 16) and key block (12) of any shape.
const PAD: usize = 32;

/// Fused scaled dot-product attention of one head over one sequence of `n` tokens, all
/// matrices feature-major: element (token `i`, dimension `d`) of the queries is
/// `q[d * rs + i]` (likewise `k`, `v`), and the output goes to `out[d * out_rs + i]`:
/// `out[:, i] = softmax(scale · q[:, i]ᵀ k) · vᵀ`, compiled for `isa`.
///
/// Takes `n <= 512`, `head_dim` a multiple of 8 (AVX-512) or 4 and `scale > 0`;
/// returns `false` (and does nothing) otherwise, so the caller can fall back to `gemm`
/// + softmax.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    isa: Isa,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    rs: usize,
    n: usize,
    head_dim: usize,
    scale: f32,
    out: &mut [f32],
    out_rs: usize,
    scratch: &mut AttnScratch,
) -> bool {
    let isa = isa.capped();
    let db = if isa == Isa::Avx512 { 8 } else { 4 };
    // The kernel's exp takes inputs <= 0, which needs a positive scale.
    let positive = scale > 0.0; // false for NaN too
    if head_dim == 0 || !head_dim.is_multiple_of(db) || n > MAX_N || !positive {
        return false;
    }
    if n == 0 {
        return true;
    }
    let in_span = span(head_dim, n, rs, 1);
    assert!(rs >= n && out_rs >= n, "attention: rows overlap");
    assert!(
        q.len() >= in_span && k.len() >= in_span && v.len() >= in_span,
        "attention: q/k/v too small"
    );
    assert!(
        out.len() >= span(head_dim, n, out_rs, 1),
        "attention: out too small"
    );
    let sr = if n <= 128 {
        128
    } else if n <= 256 {
        256
    } else {
        MAX_N
    } + PAD;
    let a = Args {
        q,
        k,
        v,
        rs,
        n,
        hd: head_dim,
        scale,
        out,
        out_rs,
        qp: grow(&mut scratch.q, head_dim * sr),
        kp: grow(&mut scratch.k, head_dim * sr),
        vp: grow(&mut scratch.v, head_dim * sr),
        st: grow(&mut scratch.st, (sr + PAD) * PAD),
    };
    attention_for(isa, a);
    true
}

/// [`head`] with the block shape of `isa` (capped at what the CPU runs by the caller),
/// compiled for it.
fn attention_for(isa: Isa, a: Args<'_>) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi1,bmi2")]
        unsafe fn avx512(a: Args<'_>) {
            by_length::<true, 16, 2, 12, 8>(a)
        }
        #[target_feature(enable = "avx2,fma,bmi1,bmi2")]
        unsafe fn avx2(a: Args<'_>) {
            by_length::<true, 8, 2, 6, 4>(a)
        }
        match isa {
            // SAFETY: the caller capped `isa` at what the CPU runs.
            Isa::Avx512 => return unsafe { avx512(a) },
            // SAFETY: as above.
            Isa::Avx2 => return unsafe { avx2(a) },
            Isa::Portable => {}
        }
    }
    let _ = isa;
    by_length::<PORTABLE_FMA, 4, 2, 4, 4>(a)
}

/// [`head`] with the packed row stride for `a.n` tokens.
#[inline(always)]
fn by_length<const FMA: bool, const W: usize, const QV: usize, const KB: usize, const DB: usize>(
    a: Args<'_>,
) {
    debug_assert!(W * QV <= PAD && KB <= PAD && a.hd.is_multiple_of(DB));
    // SAFETY: `attention` sized the packed rows for this stride (`n + PAD` columns at
    // least) and the transposed scores (`(SR + PAD) · PAD` values).
    unsafe {
        match a.n {
            0..=128 => head::<FMA, { 128 + PAD }, W, QV, KB, DB>(a),
            129..=256 => head::<FMA, { 256 + PAD }, W, QV, KB, DB>(a),
            _ => head::<FMA, { MAX_N + PAD }, W, QV, KB, DB>(a),
        }
    }
}

struct Args<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    rs: usize,
    n: usize,
    hd: usize,
    scale: f32,
    out: &'a mut [f32],
    out_rs: usize,
    qp: &'a mut [f32],
    kp: &'a mut [f32],
    vp: &'a mut [f32],
    st: &'a mut [f32],
}

/// `W` lanes.
type V<const W: usize> = [f32; W];

/// # Safety
/// `p .. p + W` must be readable.
#[inline(always)]
unsafe fn ld<const W: usize>(p: *const f32) -> V<W> {
    std::ptr::read_unaligned(p.cast::<V<W>>())
}

/// # Safety
/// `p .. p + W` must be writable.
#[inline(always)]
unsafe fn st<const W: usize>(p: *mut f32, v: V<W>) {
    std::ptr::write_unaligned(p.cast::<V<W>>(), v)
}

/// `a · b + c` lane by lane.
#[inline(always)]
fn vfma<const FMA: bool, const W: usize>(a: V<W>, b: V<W>, mut c: V<W>) -> V<W> {
    for l in 0..W {
        c[l] = fma::<FMA>(a[l], b[l], c[l]);
    }
    c
}

/// `2^x` for `x <= 0` (clamped at -126): split into integer `n` and `f` in
/// [-0.5, 0.5], degree-6 Taylor polynomial of `e^(f ln 2)` (truncation < 1.2e-7
/// relative), times `2^n` from the exponent bits.
#[inline(always)]
fn exp2_neg<const FMA: bool>(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let x = if x < -126.0 { -126.0 } else { x };
    let t = x + MAGIC;
    let f = x - (t - MAGIC);
    let mut p: f32 = 1.540_353e-4;
    p = fma::<FMA>(p, f, 1.333_355_8e-3);
    p = fma::<FMA>(p, f, 9.618_129e-3);
    p = fma::<FMA>(p, f, 5.550_411e-2);
    p = fma::<FMA>(p, f, 0.240_226_5);
    p = fma::<FMA>(p, f, std::f32::consts::LN_2);
    let y = fma::<FMA>(p, f, 1.0);
    let bits = t
        .to_bits()
        .wrapping_sub(MAGIC.to_bits())
        .wrapping_add(127)
        .wrapping_shl(23);
    y * f32::from_bits(bits)
}

/// See [`attention`]; `SR` is the row stride of the packed queries, keys and values;
/// blocks of `QB = W · QV` queries.
///
/// # Safety
/// `a` must satisfy the bounds that [`attention`] asserts, with `a.n + PAD <= SR`,
/// `qp`, `kp`, `vp` of `hd · SR` and `st` of `(SR + PAD) · PAD` values, `W · QV <= PAD`,
/// `KB <= PAD` and `hd` a multiple of `DB`.
#[inline(always)]
unsafe fn head<
    const FMA: bool,
    const SR: usize,
    const W: usize,
    const QV: usize,
    const KB: usize,
    const DB: usize,
>(
    a: Args<'_>,
) {
    let qb = W * QV;
    let (n, hd, rs) = (a.n, a.hd, a.rs);
    // This head's rows copied to a constant stride; queries past `n` are zero.
    for d in 0..hd {
        let src = d * rs..d * rs + n;
        let dst = d * SR..d * SR + n;
        a.qp[dst.clone()].copy_from_slice(&a.q[src.clone()]);
        a.qp[d * SR + n..d * SR + n + PAD].fill(0.0);
        a.kp[dst.clone()].copy_from_slice(&a.k[src.clone()]);
        a.vp[dst].copy_from_slice(&a.v[src]);
    }
    let (qp, kp, vp) = (a.qp.as_ptr(), a.kp.as_ptr(), a.vp.as_ptr());
    let stp = a.st.as_mut_ptr();
    let mut ib = 0;
    while ib < n {
        let mut mx = [[f32::NEG_INFINITY; W]; QV];
        // Transposed scores: `st[j * qb + i]` for key `j`, query `ib + i`.
        let mut jb = 0;
        while jb < n {
            let mut acc = [[[0f32; W]; QV]; KB];
            for d in 0..hd {
                let qr = qp.add(d * SR + ib);
                let qv: [V<W>; QV] = std::array::from_fn(|c| ld::<W>(qr.add(c * W)));
                let kr = kp.add(d * SR + jb);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let kb = [*kr.add(r); W];
                    for c in 0..QV {
                        acc[c] = vfma::<FMA, W>(kb, qv[c], acc[c]);
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                let dst = stp.add((jb + r) * qb);
                for c in 0..QV {
                    st::<W>(dst.add(c * W), acc[c]);
                }
                if jb + r < n {
                    for (m, x) in mx.iter_mut().zip(acc) {
                        for l in 0..W {
                            m[l] = if x[l] > m[l] { x[l] } else { m[l] };
                        }
                    }
                }
            }
            jb += KB;
        }
        // Softmax over keys, per query lane (max taken above): exp and sum in place,
        // as 2^(log2(e) · scale · (x - max)).
        let l2 = a.scale * std::f32::consts::LOG2_E;
        let shift = mx.map(|m| m.map(|m| -m * l2));
        let mut sum = [[0f32; W]; QV];
        for j in 0..n {
            for c in 0..QV {
                let p = stp.add(j * qb + W * c);
                let mut x = ld::<W>(p);
                for l in 0..W {
                    x[l] = exp2_neg::<FMA>(fma::<FMA>(x[l], l2, shift[c][l]));
                    sum[c][l] += x[l];
                }
                st::<W>(p, x);
            }
        }
        let inv = sum.map(|s| s.map(|s| 1.0 / s));
        // out[d, ib..] = Σ_j v[d, j] · p[j, ..] / sum, `DB` dimensions at a time.
        let stq = stp as *const f32;
        let valid = (n - ib).min(qb);
        let mut d0 = 0;
        while d0 < hd {
            let mut acc = [[[0f32; W]; QV]; DB];
            let vb = vp.add(d0 * SR);
            for j in 0..n {
                let p: [V<W>; QV] = std::array::from_fn(|c| ld::<W>(stq.add(j * qb + c * W)));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let vv = [*vb.add(r * SR + j); W];
                    for c in 0..QV {
                        acc[c] = vfma::<FMA, W>(vv, p[c], acc[c]);
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                let mut res = [0f32; PAD];
                for c in 0..QV {
                    for l in 0..W {
                        res[c * W + l] = acc[c][l] * inv[c][l];
                    }
                }
                let o = (d0 + r) * a.out_rs + ib;
                a.out[o..o + valid].copy_from_slice(&res[..valid]);
            }
            d0 += DB;
        }
        ib += qb;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_attention_matches_naive_on_every_isa() {
        for isa in Isa::supported() {
            let mut scratch = AttnScratch::default();
            for hd in [8, 32, 64] {
                for n in [1usize, 5, 16, 17, 33, 64, 100, 129, 300] {
                    let rs = n + 7;
                    let x: Vec<f32> = (0..3 * hd * rs)
                        .map(|i| ((i * 7919 + 13) % 211) as f32 * 0.023 - 2.4)
                        .collect();
                    let (q, k, v) = (&x[..], &x[hd * rs..], &x[2 * hd * rs..]);
                    let scale = 1.0 / (hd as f32).sqrt();
                    let out_rs = n + 3;
                    let mut out = vec![f32::NAN; hd * out_rs];
                    assert!(attention(
                        isa,
                        q,
                        k,
                        v,
                        rs,
                        n,
                        hd,
                        scale,
                        &mut out,
                        out_rs,
                        &mut scratch
                    ));
                    for i in 0..n {
                        let sc: Vec<f64> = (0..n)
                            .map(|j| {
                                (0..hd)
                                    .map(|d| q[d * rs + i] as f64 * k[d * rs + j] as f64)
                                    .sum::<f64>()
                                    * scale as f64
                            })
                            .collect();
                        let m = sc.iter().cloned().fold(f64::MIN, f64::max);
                        let e: Vec<f64> = sc.iter().map(|s| (s - m).exp()).collect();
                        let sum: f64 = e.iter().sum();
                        for d in 0..hd {
                            let want: f64 =
                                (0..n).map(|j| e[j] * v[d * rs + j] as f64).sum::<f64>() / sum;
                            let got = out[d * out_rs + i] as f64;
                            assert!(
                                (want - got).abs() < 1e-5,
                                "{isa} hd {hd} n {n} ({i}, {d}): {want} vs {got}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn shapes_it_does_not_take_are_declined() {
        let mut scratch = AttnScratch::default();
        let x = vec![0.5f32; 6 * 600];
        let mut out = vec![0f32; 6 * 600];
        for isa in Isa::supported() {
            // A head dimension of 6 is not a multiple of 4; 513 tokens is too long.
            assert!(!attention(
                isa,
                &x,
                &x,
                &x,
                10,
                10,
                6,
                1.0,
                &mut out,
                10,
                &mut scratch
            ));
            assert!(!attention(
                isa,
                &x,
                &x,
                &x,
                513,
                513,
                4,
                1.0,
                &mut out,
                513,
                &mut scratch
            ));
        }
    }
}
