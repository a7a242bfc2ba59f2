//! CPU feature detection: which kernel path runs, and the execution policy.
//!
//! [`SimdPath`] names the kernel implementations (portable, SSE4.1, AVX2 + FMA,
//! AVX-512 F + BW) and detects the fastest one this CPU supports at run time;
//! [`Execution`] pairs a path with whether a stage splits its row bands over
//! the current rayon pool. Every path gives the same bytes, so the choice only
//! changes speed. The thread pools themselves live in `par`.

/// How a stage (the resize, or the pad / normalise / patchify) executes: the
/// kernel path and whether its row bands run in parallel on the current rayon pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Execution {
    /// Kernel implementation.
    pub path: SimdPath,
    /// Split the passes over row bands on the current rayon pool.
    pub parallel: bool,
}

/// Which implementation of the kernels runs (the resize kernels, and the
/// normalise kernel of [`crate::normalize`]). Every path gives the same bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimdPath {
    /// Portable Rust.
    Scalar,
    /// x86-64 SSE4.1 intrinsics (for CPUs without AVX2).
    Sse41,
    /// x86-64 AVX2 + FMA intrinsics (every AVX2 CPU has FMA in practice; the
    /// normalise kernel uses it).
    Avx2,
    /// x86-64 AVX-512 F + BW intrinsics for the resize kernels (and everything
    /// [`SimdPath::Avx2`] has, which the rest of the pipeline uses).
    Avx512,
}

impl SimdPath {
    /// Every path, slowest first.
    pub const ALL: [Self; 4] = [Self::Scalar, Self::Sse41, Self::Avx2, Self::Avx512];

    /// The fastest path this CPU supports.
    #[must_use]
    pub fn detect() -> Self {
        Self::ALL
            .into_iter()
            .rev()
            .find(|path| path.is_supported())
            .unwrap_or(Self::Scalar)
    }

    /// Whether this CPU can run the path.
    #[must_use]
    pub fn is_supported(self) -> bool {
        match self {
            Self::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Self::Sse41 => std::arch::is_x86_feature_detected!("sse4.1"),
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            Self::Avx512 => {
                Self::Avx2.is_supported()
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Self::Sse41 | Self::Avx2 | Self::Avx512 => false,
        }
    }

    /// Lower-case name (`"scalar"`, `"sse4.1"`, `"avx2"`, `"avx512"`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Scalar => "scalar",
            Self::Sse41 => "sse4.1",
            Self::Avx2 => "avx2",
            Self::Avx512 => "avx512",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detect_picks_the_fastest_supported_path() {
        let best = SimdPath::detect();
        let rank = SimdPath::ALL.iter().position(|&p| p == best).unwrap();
        assert!(best.is_supported());
        assert!(SimdPath::ALL[rank + 1..].iter().all(|p| !p.is_supported()));
        // Each path implies the ones before it (the kernels hand their tails down).
        assert!(SimdPath::ALL[..rank].iter().all(|p| p.is_supported()));
    }
}
