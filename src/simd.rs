//! CPU feature detection: which kernel path runs, and the execution policy.
//!
//! [`SimdPath`] names the kernel implementations (portable, SSE4.1, AVX2 + FMA,
//! AVX-512 F + BW) and detects the fastest one this CPU supports at run time
//! (or the one [`SimdPath::choose`] set for the process);
//! [`Execution`] pairs a path with whether a stage splits its row bands over
//! the current rayon pool. Every path gives the same bytes, so the choice only
//! changes speed. The thread pools themselves live in `par`.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::error::KimiError;

/// How a stage (the resize, or the pad / normalise / patchify) executes: the
/// kernel path and whether its row bands run in parallel on the current rayon pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Execution {
    /// Kernel implementation.
    pub path: SimdPath,
    /// Split the passes over row bands on the current rayon pool.
    pub parallel: bool,
}

/// The index in [`SimdPath::ALL`] of the path [`SimdPath::choose`] set, or
/// `u8::MAX` for none.
static CHOSEN: AtomicU8 = AtomicU8::new(u8::MAX);

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

    /// The path the kernels run on: the one [`SimdPath::choose`] set for this
    /// process, else the fastest path this CPU supports.
    #[must_use]
    pub fn detect() -> Self {
        match CHOSEN.load(Ordering::Relaxed) {
            i if usize::from(i) < Self::ALL.len() => Self::ALL[usize::from(i)],
            _ => Self::fastest(),
        }
    }

    /// The fastest path this CPU supports.
    #[must_use]
    pub fn fastest() -> Self {
        Self::ALL
            .into_iter()
            .rev()
            .find(|path| path.is_supported())
            .unwrap_or(Self::Scalar)
    }

    /// Make [`SimdPath::detect`] return `path` from now on in this process
    /// (`None`: the fastest again), so that every call that detects its path
    /// runs those kernels: for tests and comparisons of the paths, as every
    /// path gives the same bytes. Returns the path in force.
    ///
    /// # Errors
    /// `KimiError::Option` when this CPU cannot run `path`.
    pub fn choose(path: Option<Self>) -> Result<Self, KimiError> {
        let index = match path {
            None => u8::MAX,
            // the declaration order, that of `ALL`
            Some(path) if path.is_supported() => path as u8,
            Some(path) => {
                return Err(KimiError::Option {
                    name: "simd path",
                    rule: "a path this CPU runs",
                    value: format!("'{}'", path.name()),
                })
            }
        };
        CHOSEN.store(index, Ordering::Relaxed);
        Ok(Self::detect())
    }

    /// The path of a [`SimdPath::name`] (`"scalar"`, `"sse4.1"`, `"avx2"`,
    /// `"avx512"`), or `None` for another text.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
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
        let best = SimdPath::fastest();
        let rank = SimdPath::ALL.iter().position(|&p| p == best).unwrap();
        assert!(best.is_supported());
        assert!(SimdPath::ALL[rank + 1..].iter().all(|p| !p.is_supported()));
        // Each path implies the ones before it (the kernels hand their tails down).
        assert!(SimdPath::ALL[..rank].iter().all(|p| p.is_supported()));
        for path in SimdPath::ALL {
            assert_eq!(SimdPath::from_name(path.name()), Some(path));
        }
        assert_eq!(SimdPath::from_name("AVX2"), None);
    }

    #[test]
    fn a_chosen_path_is_detected_until_unset() {
        // Other tests running meanwhile detect the scalar path for a while:
        // every path gives the same bytes, so their results do not change.
        assert_eq!(
            SimdPath::choose(Some(SimdPath::Scalar)).ok(),
            Some(SimdPath::Scalar)
        );
        assert_eq!(SimdPath::detect(), SimdPath::Scalar);
        assert_eq!(SimdPath::choose(None).ok(), Some(SimdPath::fastest()));
        assert_eq!(SimdPath::detect(), SimdPath::fastest());
        if let Some(&missing) = SimdPath::ALL.iter().find(|p| !p.is_supported()) {
            let err = SimdPath::choose(Some(missing)).unwrap_err().to_string();
            assert_eq!(
                err,
                format!(
                    "simd path must be a path this CPU runs, got '{}'",
                    missing.name()
                )
            );
            assert_eq!(SimdPath::detect(), SimdPath::fastest());
        }
    }
}
