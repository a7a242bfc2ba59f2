//! The libjpeg 6.2 API, loaded at run time, and decodes through it, whole or
//! a few rows at a time.
//!
//! The `#[repr(C)]` declarations follow libjpeg-turbo's `jpeglib.h` (2.1 and
//! 3.x, identical for `JPEG_LIB_VERSION` 62): `struct jpeg_decompress_struct`,
//! `jpeg_error_mgr`, `jpeg_source_mgr`, `jpeg_progress_mgr`. The decode mirrors
//! Pillow's `libImaging/JpegDecode.c` (`ImagingJpegDecode`): a suspending source
//! (so running out of data is "image file is truncated", as `ImageFile.load`
//! says, not libjpeg's inserted EOI), warnings counted but not printed,
//! `jpeg_read_header(FALSE)` repeated over tables-only streams, only
//! `out_color_space` set, and a suspended `jpeg_finish_decompress` after the
//! last row accepted.
//!
//! libjpeg's `error_exit` must not return: ours unwinds (`extern "C-unwind"`,
//! `resume_unwind`, so no panic hook runs) through the library's frames, which
//! carry unwind tables (`.eh_frame`), to the `catch_unwind` in [`Reader`]'s calls.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_long, c_uint, c_void, CStr};
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::Path;

use libloading::Library;

type Boolean = c_int;
type JDimension = c_uint;

const JPEG_LIB_VERSION: c_int = 62;
const JCS_GRAYSCALE: c_int = 1;
const JCS_RGB: c_int = 2;
const JPEG_HEADER_OK: c_int = 1;
const JPEG_HEADER_TABLES_ONLY: c_int = 2;
const JMSG_LENGTH_MAX: usize = 200;
/// Rows handed to one `jpeg_read_scanlines` call.
const ROWS_PER_CALL: usize = 16;

type CommonFn = Option<unsafe extern "C-unwind" fn(*mut Common)>;
type DecompFn = Option<unsafe extern "C-unwind" fn(*mut Decompress)>;
type ResyncFn = unsafe extern "C-unwind" fn(*mut Decompress, c_int) -> Boolean;

/// `jpeg_common_fields`, the head of every libjpeg object.
#[repr(C)]
pub(super) struct Common {
    err: *mut ErrorMgr,
    mem: *mut c_void,
    progress: *mut ProgressMgr,
    client_data: *mut c_void,
    is_decompressor: Boolean,
    global_state: c_int,
}

/// `struct jpeg_decompress_struct` (`JPEG_LIB_VERSION` 62).
#[repr(C)]
pub(super) struct Decompress {
    common: Common,
    src: *mut SourceMgr,
    image_width: JDimension,
    image_height: JDimension,
    num_components: c_int,
    jpeg_color_space: c_int,
    out_color_space: c_int,
    scale_num: c_uint,
    scale_denom: c_uint,
    output_gamma: f64,
    buffered_image: Boolean,
    raw_data_out: Boolean,
    dct_method: c_int,
    do_fancy_upsampling: Boolean,
    do_block_smoothing: Boolean,
    quantize_colors: Boolean,
    dither_mode: c_int,
    two_pass_quantize: Boolean,
    desired_number_of_colors: c_int,
    enable_1pass_quant: Boolean,
    enable_external_quant: Boolean,
    enable_2pass_quant: Boolean,
    output_width: JDimension,
    output_height: JDimension,
    out_color_components: c_int,
    output_components: c_int,
    rec_outbuf_height: c_int,
    actual_number_of_colors: c_int,
    colormap: *mut *mut u8,
    output_scanline: JDimension,
    input_scan_number: c_int,
    input_iMCU_row: JDimension,
    output_scan_number: c_int,
    output_iMCU_row: JDimension,
    coef_bits: *mut [c_int; 64],
    quant_tbl_ptrs: [*mut c_void; 4],
    dc_huff_tbl_ptrs: [*mut c_void; 4],
    ac_huff_tbl_ptrs: [*mut c_void; 4],
    data_precision: c_int,
    comp_info: *mut c_void,
    progressive_mode: Boolean,
    arith_code: Boolean,
    arith_dc_L: [u8; 16],
    arith_dc_U: [u8; 16],
    arith_ac_K: [u8; 16],
    restart_interval: c_uint,
    saw_JFIF_marker: Boolean,
    JFIF_major_version: u8,
    JFIF_minor_version: u8,
    density_unit: u8,
    X_density: u16,
    Y_density: u16,
    saw_Adobe_marker: Boolean,
    Adobe_transform: u8,
    CCIR601_sampling: Boolean,
    marker_list: *mut c_void,
    max_h_samp_factor: c_int,
    max_v_samp_factor: c_int,
    min_DCT_scaled_size: c_int,
    total_iMCU_rows: JDimension,
    sample_range_limit: *mut u8,
    comps_in_scan: c_int,
    cur_comp_info: [*mut c_void; 4],
    MCUs_per_row: JDimension,
    MCU_rows_in_scan: JDimension,
    blocks_in_MCU: c_int,
    MCU_membership: [c_int; 10],
    Ss: c_int,
    Se: c_int,
    Ah: c_int,
    Al: c_int,
    unread_marker: c_int,
    /// `master`, `main`, `coef`, `post`, `inputctl`, `marker`, `entropy`,
    /// `idct`, `upsample`, `cconvert`, `cquantize`: the library's modules.
    modules: [*mut c_void; 11],
}

/// `msg_parm` of `jpeg_error_mgr`.
#[repr(C)]
union MsgParm {
    i: [c_int; 8],
    s: [c_char; 80],
}

/// `struct jpeg_error_mgr`.
#[repr(C)]
pub(super) struct ErrorMgr {
    error_exit: CommonFn,
    emit_message: Option<unsafe extern "C-unwind" fn(*mut Common, c_int)>,
    output_message: CommonFn,
    format_message: Option<unsafe extern "C-unwind" fn(*mut Common, *mut c_char)>,
    reset_error_mgr: CommonFn,
    msg_code: c_int,
    msg_parm: MsgParm,
    trace_level: c_int,
    num_warnings: c_long,
    jpeg_message_table: *const *const c_char,
    last_jpeg_message: c_int,
    addon_message_table: *const *const c_char,
    first_addon_message: c_int,
    last_addon_message: c_int,
}

/// `struct jpeg_source_mgr`.
#[repr(C)]
pub(super) struct SourceMgr {
    next_input_byte: *const u8,
    bytes_in_buffer: usize,
    init_source: DecompFn,
    fill_input_buffer: Option<unsafe extern "C-unwind" fn(*mut Decompress) -> Boolean>,
    skip_input_data: Option<unsafe extern "C-unwind" fn(*mut Decompress, c_long)>,
    resync_to_restart: Option<ResyncFn>,
    term_source: DecompFn,
}

/// `struct jpeg_progress_mgr`.
#[repr(C)]
pub(super) struct ProgressMgr {
    progress_monitor: CommonFn,
    pass_counter: c_long,
    pass_limit: c_long,
    completed_passes: c_int,
    total_passes: c_int,
}

/// The library's entry points this module calls; the `Library` keeps them valid.
pub(super) struct Api {
    std_error: unsafe extern "C-unwind" fn(*mut ErrorMgr) -> *mut ErrorMgr,
    create: unsafe extern "C-unwind" fn(*mut Decompress, c_int, usize),
    destroy: unsafe extern "C-unwind" fn(*mut Decompress),
    read_header: unsafe extern "C-unwind" fn(*mut Decompress, Boolean) -> c_int,
    start: unsafe extern "C-unwind" fn(*mut Decompress) -> Boolean,
    read_scanlines:
        unsafe extern "C-unwind" fn(*mut Decompress, *mut *mut u8, JDimension) -> JDimension,
    finish: unsafe extern "C-unwind" fn(*mut Decompress) -> Boolean,
    skip_scanlines: unsafe extern "C-unwind" fn(*mut Decompress, JDimension) -> JDimension,
    has_multiple_scans: unsafe extern "C-unwind" fn(*mut Decompress) -> Boolean,
    resync: ResyncFn,
    /// What [`Api::open`] found, for `load`'s answer.
    pub(super) description: String,
    _lib: Library,
}

/// Why a decode stopped.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Fault {
    /// libjpeg's `error_exit`, with its message.
    Lib(String),
    /// The data ran out before the last row (Pillow: "image file is truncated").
    Truncated,
    /// The progress monitor saw this many scans, over the limit.
    TooManyScans(usize),
    /// The library's header disagrees with the one [`super::route`] read.
    Mismatch(String),
}

impl Api {
    /// dlopen `path`, look up the entry points, require libjpeg-turbo (it has
    /// `jpeg_skip_scanlines`) with unwind tables, and check that a decompress
    /// object of our struct's size can be created (API 6.2, same layout).
    pub(super) fn open(path: &Path) -> Result<Self, String> {
        let shown = path.display();
        let name = path.to_str().ok_or(format!("{shown}: not a UTF-8 path"))?;
        // SAFETY: loading a shared library runs its initialisers; libjpeg's
        // have no side effects beyond its own state (Pillow has loaded it already).
        let lib = unsafe { Library::new(name) }.map_err(|e| format!("cannot load {shown}: {e}"))?;
        macro_rules! sym {
            // SAFETY: each field's type is the libjpeg 6.2 prototype of $name.
            ($name:literal) => {
                unsafe { lib.get($name) }
                    .map(|s| *s)
                    .map_err(|e| format!("{shown} is not libjpeg: {e}"))?
            };
        }
        // SAFETY: only the symbol's presence is used.
        let turbo = unsafe { lib.get::<*const c_void>(c"jpeg_skip_scanlines") }.is_ok();
        if !turbo {
            return Err(format!(
                "{shown} is not libjpeg-turbo (no jpeg_skip_scanlines)"
            ));
        }
        let mut api = Self {
            std_error: sym!(c"jpeg_std_error"),
            create: sym!(c"jpeg_CreateDecompress"),
            destroy: sym!(c"jpeg_destroy_decompress"),
            read_header: sym!(c"jpeg_read_header"),
            start: sym!(c"jpeg_start_decompress"),
            read_scanlines: sym!(c"jpeg_read_scanlines"),
            finish: sym!(c"jpeg_finish_decompress"),
            skip_scanlines: sym!(c"jpeg_skip_scanlines"),
            has_multiple_scans: sym!(c"jpeg_has_multiple_scans"),
            resync: sym!(c"jpeg_resync_to_restart"),
            description: String::new(),
            _lib: lib,
        };
        // error_exit unwinds through the library's frames: it needs their unwind
        // tables (ELF `.eh_frame`, Mach-O `__eh_frame`), or the process aborts.
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
        if !bytes.windows(8).any(|w| w == b"eh_frame") {
            return Err(format!("{shown} has no unwind tables (.eh_frame)"));
        }
        api.create_destroy(size_of::<Decompress>())
            .map_err(|e| format!("{shown} does not take libjpeg 6.2 objects: {e}"))?;
        let name = turbo_version(&bytes).unwrap_or_else(|| "libjpeg-turbo".into());
        api.description = format!("{name} (libjpeg API 6.2) at {shown}");
        Ok(api)
    }

    /// Create and destroy one decompress object declared `size` bytes long:
    /// libjpeg's own message when it refuses (wrong version or struct size).
    pub(super) fn create_destroy(&self, size: usize) -> Result<(), String> {
        let s = Session::new(self, 0);
        // SAFETY: `s` holds a zeroed object whose `err` points at a set-up error manager.
        let res = catch(|| unsafe { (self.create)(&raw mut (*s.0).cinfo, JPEG_LIB_VERSION, size) });
        drop(s);
        res.map_err(|f| match f {
            Fault::Lib(m) => m,
            other => format!("{other:?}"),
        })
    }
}

/// libjpeg-turbo's "libjpeg-turbo version X.Y.Z (build N)" text, if the file has it.
fn turbo_version(bytes: &[u8]) -> Option<String> {
    let key = b"libjpeg-turbo version ";
    let at = bytes.windows(key.len()).position(|w| w == key)?;
    let tail = &bytes[at..bytes.len().min(at + 64)];
    let end = tail.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&tail[..end]).ok().map(str::to_owned)
}

/// One decompress object and the managers it points at, boxed so their
/// addresses hold still; dropping it destroys the object.
struct Session<'a>(*mut State, &'a Api);

struct State {
    cinfo: Decompress,
    err: ErrorMgr,
    src: SourceMgr,
    progress: ProgressMgr,
    client: Client,
}

/// What the callbacks read and write, at `client_data`.
struct Client {
    /// The progress monitor stops the decode past this many scans.
    max_scans: usize,
    /// The source was asked for more data than the file has (it suspended).
    ran_out: bool,
}

impl<'a> Session<'a> {
    fn new(api: &'a Api, max_scans: usize) -> Self {
        // SAFETY: every field of `State` is an integer, float, raw pointer,
        // `Option` of a fn pointer or an array of those: all-zero is valid.
        let state: Box<State> = Box::new(unsafe { std::mem::zeroed() });
        let p = Box::into_raw(state);
        // SAFETY: `p` is a live allocation; `jpeg_std_error` only fills `err`.
        unsafe {
            (api.std_error)(&raw mut (*p).err);
            (*p).err.error_exit = Some(error_exit);
            (*p).err.output_message = Some(output_message);
            (*p).cinfo.common.err = &raw mut (*p).err;
            (*p).cinfo.common.client_data = (&raw mut (*p).client).cast();
            (*p).client.max_scans = max_scans;
        }
        Self(p, api)
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        let (p, api) = (self.0, self.1);
        // SAFETY: destroying is valid on a zeroed, a created and a failed
        // object (it frees through `mem`, null when nothing was allocated).
        let _ = catch(|| unsafe { (api.destroy)(&raw mut (*p).cinfo) });
        // SAFETY: `p` came from `Box::into_raw` in `Session::new`.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// Run `f`, turning an unwind from [`error_exit`] or [`progress_monitor`] into its fault.
fn catch<T>(f: impl FnOnce() -> T) -> Result<T, Fault> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| match payload.downcast::<Fault>() {
        Ok(fault) => *fault,
        Err(_) => Fault::Lib("internal panic during JPEG decode".into()),
    })
}

unsafe extern "C-unwind" fn error_exit(cinfo: *mut Common) {
    let mut buf = [0 as c_char; JMSG_LENGTH_MAX + 1];
    // SAFETY: libjpeg passes its object, whose `err` is ours; `format_message`
    // writes at most JMSG_LENGTH_MAX bytes including the NUL.
    let message = unsafe {
        if let Some(format) = (*(*cinfo).err).format_message {
            format(cinfo, buf.as_mut_ptr());
        }
        CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
    };
    resume_unwind(Box::new(Fault::Lib(message)))
}

/// Warnings and traces are not printed (Pillow's `output`); the library's
/// `emit_message` still counts them.
unsafe extern "C-unwind" fn output_message(_cinfo: *mut Common) {}

unsafe extern "C-unwind" fn progress_monitor(cinfo: *mut Common) {
    // SAFETY: set on decompress objects only; `client_data` is `State::client`.
    let (scans, limit) = unsafe {
        let scans = (*cinfo.cast::<Decompress>()).input_scan_number;
        (
            usize::try_from(scans).unwrap_or(0),
            (*(*cinfo).client_data.cast::<Client>()).max_scans,
        )
    };
    if scans > limit {
        resume_unwind(Box::new(Fault::TooManyScans(scans)))
    }
}

unsafe extern "C-unwind" fn source_noop(_cinfo: *mut Decompress) {}

/// All the data is in the buffer from the start: asking for more suspends, as
/// Pillow's `fill_input_buffer` does; with no more to feed, that is truncation.
unsafe extern "C-unwind" fn fill_input_buffer(cinfo: *mut Decompress) -> Boolean {
    // SAFETY: `client_data` is `State::client` (`Session::new`).
    unsafe { (*(*cinfo).common.client_data.cast::<Client>()).ran_out = true };
    0
}

unsafe extern "C-unwind" fn skip_input_data(cinfo: *mut Decompress, num_bytes: c_long) {
    // SAFETY: `src` is the `State::src` this module set.
    let src = unsafe { &mut *(*cinfo).src };
    let n = usize::try_from(num_bytes)
        .unwrap_or(0)
        .min(src.bytes_in_buffer);
    // SAFETY: `n` <= the bytes left, so the pointer stays within the data.
    src.next_input_byte = unsafe { src.next_input_byte.add(n) };
    src.bytes_in_buffer -= n;
}

/// A decode under way, as `ImagingJpegDecode` runs it with rawmode `L` or
/// `RGB`: the header read and the decompression started ([`Reader::start`]),
/// then the rows in order, as many at a time as the caller asks
/// ([`Reader::read`]), `jpeg_finish_decompress` after the last. After a
/// fault the object is not used again: the reader is dropped (which destroys
/// it).
pub(super) struct Reader<'a> {
    session: Session<'a>,
    /// Bytes of a row: `width * channels`.
    stride: usize,
    height: usize,
    /// Rows read so far.
    next: usize,
    /// The data the source manager reads: borrowed for as long as the object lives.
    _data: &'a [u8],
}

// SAFETY: a decompress object is plain memory that the library reaches only
// through the pointers in `State`; `Reader` is used by one thread at a time
// (`&mut self`), and the library keeps no thread-local state for it.
unsafe impl Send for Reader<'_> {}

impl<'a> Reader<'a> {
    /// Read `data`'s header and start the decompression, checking the
    /// library's `(width, height, channels)` against the headers' and
    /// stopping past `max_scans` scans (a progressive file's scans are all
    /// read here).
    pub(super) fn start(
        api: &'a Api,
        data: &'a [u8],
        (width, height, channels): (usize, usize, usize),
        max_scans: usize,
    ) -> Result<Self, Fault> {
        let session = Session::new(api, max_scans);
        let p = session.0;
        // SAFETY: `p` lives as long as `session`, which the reader keeps;
        // libjpeg only reads `data` (through `src`), borrowed as long.
        let run = || unsafe {
            let cinfo = &raw mut (*p).cinfo;
            (api.create)(cinfo, JPEG_LIB_VERSION, size_of::<Decompress>());
            (*p).progress.progress_monitor = Some(progress_monitor);
            (*cinfo).common.progress = &raw mut (*p).progress;
            (*p).src = SourceMgr {
                next_input_byte: data.as_ptr(),
                bytes_in_buffer: data.len(),
                init_source: Some(source_noop),
                fill_input_buffer: Some(fill_input_buffer),
                skip_input_data: Some(skip_input_data),
                resync_to_restart: Some(api.resync),
                term_source: Some(source_noop),
            };
            (*cinfo).src = &raw mut (*p).src;
            let mut status = (api.read_header)(cinfo, 0);
            while status == JPEG_HEADER_TABLES_ONLY {
                status = (api.read_header)(cinfo, 0);
            }
            if status != JPEG_HEADER_OK {
                return Err(Fault::Truncated);
            }
            let seen = |w: JDimension, h: JDimension, c: c_int| {
                (w as usize, h as usize, usize::try_from(c).unwrap_or(0))
            };
            let header = seen(
                (*cinfo).image_width,
                (*cinfo).image_height,
                (*cinfo).num_components,
            );
            if header != (width, height, channels) {
                return Err(Fault::Mismatch(format!("{header:?}")));
            }
            (*cinfo).out_color_space = if channels == 1 {
                JCS_GRAYSCALE
            } else {
                JCS_RGB
            };
            if (api.start)(cinfo) == 0 {
                return Err(Fault::Truncated);
            }
            let output = seen(
                (*cinfo).output_width,
                (*cinfo).output_height,
                (*cinfo).output_components,
            );
            if output != (width, height, channels) {
                return Err(Fault::Mismatch(format!("output {output:?}")));
            }
            Ok(())
        };
        catch(run).and_then(|r| r)?;
        Ok(Self {
            session,
            stride: width * channels,
            height,
            next: 0,
            _data: data,
        })
    }

    /// The next rows into `out` (whole rows of `width * channels` bytes, no
    /// more than are left): all of them are written, or the fault is
    /// returned (so on success every byte of `out` is initialised, whatever
    /// it held before). After the last row, the decompression is finished.
    pub(super) fn read(&mut self, out: &mut [MaybeUninit<u8>]) -> Result<(), Fault> {
        let (stride, api, p) = (self.stride, self.session.1, self.session.0);
        let n_rows = out.len() / stride;
        if !out.len().is_multiple_of(stride) || n_rows > self.height - self.next {
            return Err(Fault::Mismatch(format!(
                "{} bytes asked for after row {}",
                out.len(),
                self.next
            )));
        }
        let last = self.next + n_rows == self.height;
        // SAFETY: `p` is the started object of `start`; libjpeg writes rows of
        // `stride` bytes (its output width times components, checked against
        // the shape by `start`) at the pointers given, all inside `out`. A
        // row's pointer is handed out again until the library counts the row
        // as written, so `y` reaches `n_rows` only when every row is.
        let run = || unsafe {
            let cinfo = &raw mut (*p).cinfo;
            let base = out.as_mut_ptr().cast::<u8>();
            let mut rows = [std::ptr::null_mut::<u8>(); ROWS_PER_CALL];
            let mut y = 0;
            while y < n_rows {
                let n = ROWS_PER_CALL.min(n_rows - y);
                for (i, row) in rows.iter_mut().take(n).enumerate() {
                    *row = base.add((y + i) * stride);
                }
                // Rows come out in order; 0 means the data ran out (suspension).
                match (api.read_scanlines)(cinfo, rows.as_mut_ptr(), n as JDimension) as usize {
                    0 => return Err(Fault::Truncated),
                    got => y += got.min(n),
                }
            }
            if last {
                // FALSE: suspended before EOI with every row out, which Pillow accepts.
                (api.finish)(cinfo);
            }
            Ok(())
        };
        catch(run).and_then(|r| r)?;
        self.next += n_rows;
        Ok(())
    }

    /// Go past the next `rows` rows (fewer than are left) without producing
    /// them: `jpeg_skip_scanlines`, which entropy-decodes the whole iMCU rows
    /// it passes (no IDCT, upsampling or colour conversion) and reads the rows
    /// an upsampler's context needs, so the rows after are the ones
    /// [`Reader::read`] would give. The library assumes a source that never
    /// suspends there: data that runs out on the way is
    /// `Fault::Truncated`, and the reader is not used again.
    pub(super) fn skip(&mut self, rows: usize) -> Result<(), Fault> {
        let (api, p) = (self.session.1, self.session.0);
        if rows >= self.height - self.next {
            return Err(Fault::Mismatch(format!(
                "{rows} rows skipped after row {}",
                self.next
            )));
        }
        // SAFETY: `p` is the started object of `start`; skipping writes no row.
        let run = || unsafe {
            let cinfo = &raw mut (*p).cinfo;
            (api.skip_scanlines)(cinfo, rows as JDimension);
            (*p).client.ran_out
        };
        if catch(run)? {
            return Err(Fault::Truncated);
        }
        self.next += rows;
        Ok(())
    }

    /// Whether the file is one scan of every component (baseline or
    /// extended sequential, interleaved): its rows are entropy-decoded as
    /// they are read, so [`Reader::skip`] saves the rest of the work. A file
    /// of several scans was decoded whole by `jpeg_start_decompress`.
    pub(super) fn single_scan(&self) -> bool {
        let (api, p) = (self.session.1, self.session.0);
        // SAFETY: `p` is the started object of `start`, in the state
        // `jpeg_has_multiple_scans` asks for (between header and finish).
        catch(|| unsafe { (api.has_multiple_scans)(&raw mut (*p).cinfo) }).is_ok_and(|m| m == 0)
    }
}

/// Decode `data` into `out` (`height` rows of `width * channels` bytes) as
/// `ImagingJpegDecode` does with rawmode `L` or `RGB`, stopping past
/// `max_scans`: every byte of `out` is written, or the fault is returned.
pub(super) fn decode(
    api: &Api,
    data: &[u8],
    shape: (usize, usize, usize),
    max_scans: usize,
    out: &mut [MaybeUninit<u8>],
) -> Result<(), Fault> {
    let (width, height, channels) = shape;
    if out.len() != width * channels * height {
        return Err(Fault::Mismatch(format!(
            "output buffer of {} bytes",
            out.len()
        )));
    }
    Reader::start(api, data, shape, max_scans)?.read(out)
}

/// [`decode`] into the spare capacity of the empty `out` (at least
/// `width * channels * height` bytes, of any contents), then its length set
/// to those bytes, all written. On a fault `out` stays empty.
pub(super) fn decode_to_vec(
    api: &Api,
    data: &[u8],
    shape: (usize, usize, usize),
    max_scans: usize,
    out: &mut Vec<u8>,
) -> Result<(), Fault> {
    let (width, height, channels) = shape;
    let len = width * channels * height;
    if !out.is_empty() || out.capacity() < len {
        return Err(Fault::Mismatch(format!(
            "output vector of {} bytes and room for {}",
            out.len(),
            out.capacity()
        )));
    }
    decode(
        api,
        data,
        shape,
        max_scans,
        &mut out.spare_capacity_mut()[..len],
    )?;
    // SAFETY: `decode` returned Ok, so it wrote all `len` bytes of the spare
    // capacity, which starts at `out`'s (empty) length.
    unsafe { out.set_len(len) };
    Ok(())
}

/// `out` as memory for [`Reader::read`] and [`decode`] to write.
pub(super) fn writable(out: &mut [u8]) -> &mut [MaybeUninit<u8>] {
    // SAFETY: `MaybeUninit<u8>` has the size and alignment of `u8`, and the
    // view is used only by this module's readers, which store bytes (never an
    // uninitialised value) through it.
    unsafe { &mut *(std::ptr::from_mut(out) as *mut [MaybeUninit<u8>]) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    /// Offsets and sizes gcc gives for libjpeg-turbo's `jpeglib.h` on x86_64 Linux.
    #[test]
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    fn layout_matches_jpeglib_h() {
        assert_eq!(size_of::<Decompress>(), 632);
        assert_eq!(size_of::<ErrorMgr>(), 168);
        assert_eq!(size_of::<SourceMgr>(), 56);
        assert_eq!(size_of::<ProgressMgr>(), 32);
        assert_eq!(offset_of!(Decompress, image_width), 48);
        assert_eq!(offset_of!(Decompress, out_color_space), 64);
        assert_eq!(offset_of!(Decompress, output_gamma), 80);
        assert_eq!(offset_of!(Decompress, output_width), 136);
        assert_eq!(offset_of!(Decompress, output_scanline), 168);
        assert_eq!(offset_of!(Decompress, input_scan_number), 172);
        assert_eq!(offset_of!(Decompress, data_precision), 296);
        assert_eq!(offset_of!(Decompress, restart_interval), 368);
        assert_eq!(offset_of!(Decompress, saw_JFIF_marker), 372);
        assert_eq!(offset_of!(Decompress, Adobe_transform), 388);
        assert_eq!(offset_of!(Decompress, CCIR601_sampling), 392);
        assert_eq!(offset_of!(Decompress, marker_list), 400);
        assert_eq!(offset_of!(Decompress, total_iMCU_rows), 420);
        assert_eq!(offset_of!(Decompress, Ss), 524);
        assert_eq!(offset_of!(Decompress, unread_marker), 540);
        assert_eq!(offset_of!(Decompress, modules), 544);
        assert_eq!(offset_of!(ErrorMgr, msg_code), 40);
        assert_eq!(offset_of!(ErrorMgr, num_warnings), 128);
    }

    #[test]
    fn turbo_version_reads_the_banner() {
        let bytes = b"xx\0libjpeg-turbo version 3.2.0 (build 20261016)\0yy";
        let v = turbo_version(bytes);
        assert_eq!(
            v.as_deref(),
            Some("libjpeg-turbo version 3.2.0 (build 20261016)")
        );
        assert_eq!(turbo_version(b"libjpeg version"), None);
    }
}
