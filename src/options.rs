//! The per-call options of the pipeline: pass order, output dtype and threads.

use crate::config::PillowCompat;
use crate::error::{quoted, KimiError};

/// Most threads one call may ask for.
pub const MAX_THREADS: usize = 1024;

/// The element type of `pixel_values`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputDtype {
    /// The reference's float32 values, bit for bit.
    #[default]
    Float32,
    /// bfloat16, rounded to nearest-even from the exact float32 value (stored as `u16` bits).
    Bfloat16,
    /// IEEE float16, rounded to nearest-even from the exact float32 value (stored as `u16` bits).
    Float16,
}

impl OutputDtype {
    /// Every dtype, in the order the error message lists them.
    pub const ALL: [Self; 3] = [Self::Float32, Self::Bfloat16, Self::Float16];

    /// Parse the dtype's name (`"float32"`, `"bfloat16"`, `"float16"`).
    ///
    /// # Errors
    /// `KimiError::Option` for any other name.
    pub fn parse(name: &str) -> Result<Self, KimiError> {
        Self::ALL
            .into_iter()
            .find(|d| d.name() == name)
            .ok_or_else(|| {
                KimiError::option("dtype", "'float32', 'bfloat16' or 'float16'", &quoted(name))
            })
    }

    /// The dtype's name, as the `dtype` option and the messages spell it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Float32 => "float32",
            Self::Bfloat16 => "bfloat16",
            Self::Float16 => "float16",
        }
    }
}

/// How one call runs: the Pillow pass order to reproduce, the output dtype and
/// the threads. Validated on construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    compat: PillowCompat,
    dtype: OutputDtype,
    threads: usize,
}

impl Options {
    /// Validate the options of a call.
    ///
    /// # Arguments
    /// * `compat` - the Pillow release whose resize pass order is reproduced.
    /// * `dtype` - the element type of `pixel_values`.
    /// * `threads` - 1 runs on the calling thread; 2..=[`MAX_THREADS`] run the
    ///   images of a batch and the bands of each image on the crate's pool.
    ///
    /// # Errors
    /// `KimiError::Option` when `threads` is outside `1..=MAX_THREADS`.
    pub fn new(
        compat: PillowCompat,
        dtype: OutputDtype,
        threads: usize,
    ) -> Result<Self, KimiError> {
        if !(1..=MAX_THREADS).contains(&threads) {
            return Err(threads_error(&threads.to_string()));
        }
        Ok(Self {
            compat,
            dtype,
            threads,
        })
    }

    /// The pass order.
    #[must_use]
    pub fn compat(&self) -> PillowCompat {
        self.compat
    }

    /// The output dtype.
    #[must_use]
    pub fn dtype(&self) -> OutputDtype {
        self.dtype
    }

    /// The threads of a call.
    #[must_use]
    pub fn threads(&self) -> usize {
        self.threads
    }
}

impl Default for Options {
    /// Pillow 13's pass order, float32, one thread.
    fn default() -> Self {
        Self {
            compat: PillowCompat::V13,
            dtype: OutputDtype::Float32,
            threads: 1,
        }
    }
}

/// The error of a `num_threads` outside `1..=MAX_THREADS`, `value` rendered.
#[must_use]
pub fn threads_error(value: &str) -> KimiError {
    KimiError::option("num_threads", "an integer in 1..=1024", value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_check() {
        assert_eq!(OutputDtype::parse("bfloat16"), Ok(OutputDtype::Bfloat16));
        assert_eq!(
            OutputDtype::parse("int8").unwrap_err().to_string(),
            "dtype must be 'float32', 'bfloat16' or 'float16', got 'int8'"
        );
        assert_eq!(
            Options::new(PillowCompat::V12, OutputDtype::Float32, 0)
                .unwrap_err()
                .to_string(),
            "num_threads must be an integer in 1..=1024, got 0"
        );
        assert_eq!(
            PillowCompat::parse("14").unwrap_err().to_string(),
            "pillow_compat must be 'auto', '12', '12.2' or '13', got '14'"
        );
        let o = Options::new(PillowCompat::V12, OutputDtype::Float16, 1024).unwrap();
        assert_eq!(
            (o.compat(), o.dtype(), o.threads()),
            (PillowCompat::V12, OutputDtype::Float16, 1024)
        );
    }
}
