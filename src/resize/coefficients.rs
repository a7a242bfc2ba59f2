//! Pillow's bicubic filter and its fixed-point taps for one axis.
//!
//! `precompute_coeffs` + `normalize_coeffs_8bpc` of `libImaging/Resample.c`:
//! the f64 arithmetic keeps Pillow's operation order (no FMA), then each weight
//! is scaled by `2^PRECISION_BITS` and rounded half away from zero.

use std::sync::OnceLock;

use super::PRECISION_BITS;

/// Keys cubic kernel with `a = -0.5` (Pillow `bicubic_filter`), support 2.
#[must_use]
pub fn bicubic_filter(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// Fixed-point filter taps for one axis, `in_size -> out_size`.
#[derive(Debug, Clone)]
pub struct Coefficients {
    /// Per output index: `(first input index, number of taps)`.
    pub bounds: Vec<(usize, usize)>,
    /// Row stride of `weights`: `ceil(support) * 2 + 1`.
    pub ksize: usize,
    /// `out_size * ksize` weights scaled by `2^22`, rounded half away from zero.
    pub weights: Vec<i32>,
    /// The weights as the AVX-512 VNNI kernel on rows reads them, made on
    /// its first use ([`Coefficients::groups`]; the other kernels never read
    /// them, and they were a third of this struct's making): per output,
    /// `ksize.div_ceil(4)` groups of four taps, each three `u32`s (digit 0, 1
    /// and 2 of [`digits`]) whose bytes are that digit of the group's taps in
    /// order, 0 past the output's last tap. `None` when a weight has no such
    /// digits (never for Pillow's weights, whose magnitude stays under `2^23`).
    groups: OnceLock<Option<Vec<[u32; 3]>>>,
}

/// Equal taps: the groups, made from the weights when first asked for, are
/// not compared.
impl PartialEq for Coefficients {
    fn eq(&self, other: &Self) -> bool {
        (&self.bounds, self.ksize, &self.weights) == (&other.bounds, other.ksize, &other.weights)
    }
}

impl Eq for Coefficients {}

/// The taps of one output: its weights.
#[derive(Debug, Clone, Copy)]
pub(super) struct Taps<'a> {
    pub(super) weights: &'a [i32],
}

/// `k` in balanced base-256 digits `[d0, d1, d2]`, `k = d2 * 2^16 + d1 * 2^8 + d0`,
/// each in `-128..=127` (the signed bytes of `vpdpbusd`), or `None` when `k` is
/// outside the range this spans (`-8_421_504..=8_355_711`).
#[allow(clippy::cast_possible_truncation)]
fn digits(k: i32) -> Option<[i8; 3]> {
    let balanced = |v: i64| ((v + 128) & 255) - 128;
    let k = i64::from(k);
    let d0 = balanced(k);
    let k1 = (k - d0) >> 8; // exact: k - d0 is a multiple of 256
    let d1 = balanced(k1);
    let d2 = (k1 - d1) >> 8;
    Some([d0 as i8, d1 as i8, i8::try_from(d2).ok()?])
}

/// The digit groups of one output's `weights` into `groups`
/// (`weights.len().div_ceil(4)` of them, zeroed), as [`Coefficients`] holds
/// them, or `None` when a weight has no digits.
#[allow(clippy::cast_sign_loss)]
pub(super) fn group_digits(weights: &[i32], groups: &mut [[u32; 3]]) -> Option<()> {
    for (taps, group) in weights.chunks(4).zip(groups) {
        for (j, &k) in taps.iter().enumerate() {
            for (word, d) in group.iter_mut().zip(digits(k)?) {
                *word |= u32::from(d as u8) << (8 * j);
            }
        }
    }
    Some(())
}

impl Coefficients {
    /// Pillow's `precompute_coeffs` + `normalize_coeffs_8bpc` for the full box
    /// `(0, in_size)`.
    ///
    /// # Arguments
    /// * `in_size` - input length in pixels (>= 1).
    /// * `out_size` - output length in pixels (>= 1).
    ///
    /// # Panics
    /// Never for `in_size, out_size >= 1` (sizes are validated by the pipeline).
    #[must_use]
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    pub fn new(in_size: usize, out_size: usize) -> Self {
        let scale = in_size as f64 / out_size as f64;
        let filterscale = scale.max(1.0);
        let support = 2.0 * filterscale;
        let ksize = (support.ceil() as usize) * 2 + 1;
        let ss = 1.0 / filterscale;
        let mut bounds = Vec::with_capacity(out_size);
        let mut weights = vec![0i32; out_size * ksize];
        let mut w = vec![0f64; ksize];
        for xx in 0..out_size {
            let center = (xx as f64 + 0.5) * scale;
            // C `(int)` truncates toward zero.
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
            let n = xmax - xmin;
            let mut ww = 0.0;
            for (x, wx) in w.iter_mut().enumerate().take(n) {
                let v = bicubic_filter(((x + xmin) as f64 - center + 0.5) * ss);
                *wx = v;
                ww += v;
            }
            let row = &mut weights[xx * ksize..xx * ksize + n];
            for (k, &wx) in row.iter_mut().zip(&w[..n]) {
                let v = if ww == 0.0 { wx } else { wx / ww };
                let scaled = v * f64::from(1u32 << PRECISION_BITS);
                *k = if v < 0.0 {
                    (-0.5 + scaled) as i32
                } else {
                    (0.5 + scaled) as i32
                };
            }
            bounds.push((xmin, n));
        }
        Self {
            bounds,
            ksize,
            weights,
            groups: OnceLock::new(),
        }
    }

    /// Every output's digit groups (see [`Coefficients`]), made on the first
    /// call; `None` when a weight has no digits. [`Coefficients::output_groups`]
    /// picks one output's.
    pub(super) fn groups(&self) -> Option<&[[u32; 3]]> {
        self.groups
            .get_or_init(|| {
                let gsize = self.ksize.div_ceil(4);
                let mut groups = vec![[0u32; 3]; self.bounds.len() * gsize];
                let has_digits = self.bounds.iter().enumerate().all(|(i, &(_, n))| {
                    let row = &self.weights[i * self.ksize..i * self.ksize + n];
                    group_digits(row, &mut groups[i * gsize..(i + 1) * gsize]).is_some()
                });
                has_digits.then_some(groups)
            })
            .as_deref()
    }

    /// The groups of output `out_index` in `groups` ([`Coefficients::groups`]),
    /// `n.div_ceil(4)` of them for its `n` taps.
    pub(super) fn output_groups<'g>(
        &self,
        groups: &'g [[u32; 3]],
        out_index: usize,
    ) -> &'g [[u32; 3]] {
        let first = out_index * self.ksize.div_ceil(4);
        &groups[first..first + self.bounds[out_index].1.div_ceil(4)]
    }

    /// The first input index and the taps of output `out_index`.
    #[inline]
    pub(super) fn taps(&self, out_index: usize) -> (usize, Taps<'_>) {
        let (start, n) = self.bounds[out_index];
        let base = out_index * self.ksize;
        let weights = &self.weights[base..base + n];
        (start, Taps { weights })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_values() {
        assert_eq!(bicubic_filter(0.0), 1.0);
        assert_eq!(bicubic_filter(1.0), 0.0);
        assert_eq!(bicubic_filter(0.5), 0.5625);
        assert_eq!(bicubic_filter(1.5), -0.0625);
        assert_eq!(bicubic_filter(2.0), 0.0);
    }

    #[test]
    fn identity_scale_coefficients_are_a_single_tap() {
        // in == out: filterscale 1, center 2.5 for output 2, taps 1..5 at
        // offsets -1, 0, 1, 2: only offset 0 has a weight.
        let c = Coefficients::new(5, 5);
        assert_eq!(c.ksize, 5);
        assert_eq!(c.bounds[2], (1, 4));
        assert_eq!(&c.weights[2 * 5..2 * 5 + 4], &[0, 1 << 22, 0, 0]);
    }

    #[test]
    fn digits_rebuild_every_weight_in_their_range_and_no_other() {
        let rebuild =
            |d: [i8; 3]| i32::from(d[2]) * 65_536 + i32::from(d[1]) * 256 + i32::from(d[0]);
        let samples = (-8_421_504..=8_355_711).step_by(997);
        let ends = [
            -8_421_504, -129, -128, -1, 0, 1, 127, 128, 32_768, 8_355_711,
        ];
        for k in samples.chain(ends) {
            assert_eq!(digits(k).map(rebuild), Some(k), "{k}");
        }
        for k in [-8_421_505, 8_355_712, 8_388_607, i32::MIN, i32::MAX] {
            assert_eq!(digits(k), None, "{k}");
        }
        // A downscale's groups: the digits of each output's taps, 0 past them.
        let c = Coefficients::new(4, 2);
        let (_, taps) = c.taps(0);
        let groups = c.output_groups(c.groups().unwrap(), 0);
        assert_eq!(groups.len(), 1);
        for (j, &k) in taps.weights.iter().enumerate() {
            let d = groups[0].map(|word| (word >> (8 * j)) as u8 as i8);
            assert_eq!(rebuild(d), k);
        }
        let c = Coefficients::new(5, 5);
        let fresh = c.clone();
        let groups = c.output_groups(c.groups().unwrap(), 2);
        assert_eq!(groups, &[[0, 0, 64 << 8]]); // tap 1: 2^22 = 64 * 2^16
        assert_eq!(c, fresh, "the groups made are not compared");
    }

    #[test]
    fn downscale_by_two_coefficients() {
        // 4 -> 2: scale 2, support 4, ksize 9. Output 0: center 1, taps 0..=3 of
        // the filter at (x - 0.5) / 2 normalised by their sum, times 2^22.
        let c = Coefficients::new(4, 2);
        assert_eq!(c.ksize, 9);
        assert_eq!(c.bounds, vec![(0, 4), (0, 4)]);
        let raw: Vec<f64> = (0..4)
            .map(|x| bicubic_filter((f64::from(x) - 1.0 + 0.5) * 0.5))
            .collect();
        let sum: f64 = raw.iter().sum();
        let expected: Vec<i32> = raw
            .iter()
            .map(|w| {
                let v = w / sum * 4_194_304.0;
                #[allow(clippy::cast_possible_truncation)]
                if v < 0.0 {
                    (v - 0.5) as i32
                } else {
                    (v + 0.5) as i32
                }
            })
            .collect();
        assert_eq!(&c.weights[..4], expected.as_slice());
        // Pinned values of this case.
        assert_eq!(&c.weights[..4], &[1_923_834, 1_923_834, 502_623, -155_987]);
    }
}
