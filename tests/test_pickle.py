"""Pickling: the processor, the configs, the options, the exceptions, the deferred inputs.

Every class round-trips through ``pickle`` (every protocol), ``copy.copy`` and
``copy.deepcopy`` with the same behaviour (the same outputs, the same options); a
processor captured by a ``multiprocessing`` spawn pool and by ``datasets.map(num_proc=2)``
gives the bits of the in-process call, and a worker's ``ImageError`` reaches the driver.
"""

from __future__ import annotations

import copy
import copyreg
import functools
import hashlib
import io
import multiprocessing
import pickle
import pickletools
import sys

import kimi_k3_rs
import numpy as np
import pytest
from helpers import (
    CLIP_MEAN,
    CLIP_STD,
    alpha_pattern_la,
    alpha_pattern_rgba,
    assert_bit_equal,
    cfg,
    encode,
    exact,
    mode_image,
    noise,
    noise_array,
)
from kimi_k3_rs import _native, hf
from kimi_k3_rs.config import VideoConfig
from kimi_k3_rs.deferred import KimiK3EncoderInputs, prepare_kimi_k25_encoder_inputs
from kimi_k3_rs.options import CallOptions
from PIL import Image

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


def round_trips(value):
    """``value`` through every pickle protocol, ``copy.copy`` and ``copy.deepcopy``."""
    out = [(f"pickle protocol {p}", pickle.loads(pickle.dumps(value, protocol=p))) for p in PROTOCOLS]
    return [*out, ("copy.copy", copy.copy(value)), ("copy.deepcopy", copy.deepcopy(value))]


CONFIGS = {
    "k3": kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG,
    "k25": kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG,
    "k3 white before_resize": cfg("kimi_k3", transparent_bg_config={"pattern": "white"},
                                  transparent_bg_fill_stage="before_resize"),
    "clip fixed tokens": cfg("kimi_k25", image_mean=CLIP_MEAN, image_std=CLIP_STD, fixed_output_tokens=77.9),
}


def images():
    return [noise_array(300, 200, "RGB", 1), np.asarray(alpha_pattern_rgba(150, 260, 2)),
            noise_array(90, 40, "L", 3)]


def items():
    return [_native.BatchItem.image(image, k) for k, image in enumerate(images())]


def native_attrs(native_cfg):
    names = ("patch_size", "merge_kernel_size", "in_patch_limit", "patch_limit_on_one_side", "image_mean",
             "image_std", "fixed_output_tokens", "transparent_bg_config", "transparent_bg_fill_stage")
    return {name: getattr(native_cfg, name) for name in names}


@pytest.mark.parametrize("name", CONFIGS)
def test_native_media_proc_config(name):
    native = kimi_k3_rs.MediaProcConfig.from_dict(CONFIGS[name]).native
    options = _native.Options("13", "float32", 1)
    want_pv, want_grid = _native.preprocess(items(), native, options)
    for how, copied in round_trips(native):
        assert type(copied) is _native.MediaProcConfig, how
        assert native_attrs(copied) == native_attrs(native), how
        pv, grid = _native.preprocess(items(), copied, options)
        assert_bit_equal(grid, want_grid, f"{how}: grid_thws")
        assert_bit_equal(pv, want_pv, f"{how}: pixel_values")


@pytest.mark.parametrize("args", [("12", "float32", 1), ("12.2", "float32", 2), ("13", "bfloat16", 2), ("13", "float16", 3)])
def test_native_options(args):
    options = _native.Options(*args)
    native = kimi_k3_rs.MediaProcConfig.from_dict(CONFIGS["k3"]).native
    want = _native.preprocess(items(), native, options)[0]
    for how, copied in round_trips(options):
        assert type(copied) is _native.Options, how
        assert (copied.pillow_compat, copied.dtype, copied.num_threads) == args, how
        assert_bit_equal(_native.preprocess(items(), native, copied)[0].view(np.uint16), want.view(np.uint16), how)


@pytest.mark.parametrize("name", CONFIGS)
def test_media_proc_config_and_background(name):
    config = kimi_k3_rs.MediaProcConfig.from_dict(CONFIGS[name])
    want = kimi_k3_rs.preprocess(images(), config)
    for how, copied in round_trips(config):
        assert type(copied) is kimi_k3_rs.MediaProcConfig and copied == config, how
        assert native_attrs(copied.native) == native_attrs(config.native), how
        got = kimi_k3_rs.preprocess(images(), copied)
        assert_bit_equal(got["pixel_values"], want["pixel_values"], how)
    background = config.transparent_bg_config
    if background is not None:
        for how, copied in round_trips(background):
            assert type(copied) is kimi_k3_rs.TransparentBgConfig and copied == background, how
            assert copied.as_dict() == background.as_dict(), how


def test_options():
    options = CallOptions.make("12", True, "bfloat16", 2, 10**6)
    for how, copied in round_trips(options):
        assert type(copied) is CallOptions, how
        fields = ("compat", "exif_transpose", "dtype", "num_threads", "max_image_pixels")
        assert [getattr(copied, f) for f in fields] == ["12", True, "bfloat16", 2, 10**6], how
        assert type(copied.native) is _native.Options, how


def processors():
    yield kimi_k3_rs.KimiK3VisionProcessor(kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
    media_proc_cfg = dict(kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG, future_key={"nested": [1, 2]})
    yield kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg, pillow_compat="12", exif_transpose=True,
                                           dtype="bfloat16", num_threads=2, max_image_pixels=10**6)


@pytest.mark.parametrize("processor", list(processors()), ids=["k3 defaults", "k25 options"])
def test_processor(processor):
    medias = [{"type": "image", "image": im} for im in images()]
    want = processor.preprocess(medias, return_tensors="np")
    for how, copied in round_trips(processor):
        assert type(copied) is type(processor), how
        assert copied.media_proc_cfg == processor.media_proc_cfg, how
        assert copied.to_dict() == processor.to_dict(), how
        assert copied.config == processor.config, how
        assert copied.options == processor.options, how
        assert (copied.pillow_compat, copied.exif_transpose) == (processor.pillow_compat, processor.exif_transpose)
        got = copied.preprocess(medias, return_tensors="np")
        assert_bit_equal(got["grid_thws"], want["grid_thws"], how)
        assert_bit_equal(got["pixel_values"].view(np.uint16), want["pixel_values"].view(np.uint16), how)
    # a deep copy is independent: the copied processor's dict is its own
    deep = copy.deepcopy(processor)
    assert deep._media_proc_cfg is not processor._media_proc_cfg


def test_processor_classes_pickle_by_their_public_paths():
    """A pickled processor names its class by its public path: ``kimi_k3_rs.hf`` for the
    plain class (whichever file of that package defines it), ``kimi_k3_rs`` for the
    transformers subclass; so pickles load across versions of the package's layout."""
    for cls in (hf.KimiK3VisionProcessor, kimi_k3_rs.KimiK3VisionProcessor):
        module = "kimi_k3_rs.hf" if cls is hf.KimiK3VisionProcessor else "kimi_k3_rs"
        processor = cls(kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
        named = [arg for op, arg, _ in pickletools.genops(pickle.dumps(processor, protocol=2)) if op.name == "GLOBAL"]
        assert f"{module} KimiK3VisionProcessor" in named
        assert not any(arg.startswith("kimi_k3_rs.hf.") for arg in named), named
        for how, copied in round_trips(processor):
            assert type(copied) is cls and copied.to_dict() == processor.to_dict(), how


def test_processor_keeps_the_checkpoints_attributes():
    """The attributes a processor keeps as the checkpoint's class does (the keys of the
    checkpoint's ``to_dict()``: K2.5's ``num_frames_per_chunk``, ``auto_map``, any other;
    one set afterwards) survive every pickle and copy, as in the checkpoint's (which
    pickles its ``__dict__``), and ``to_dict`` / ``from_dict`` after it; the K2.5 class
    the dict names stays K2.5's."""
    config = dict(kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)
    del config["in_patch_limit_video"]  # the keys alone would say K3
    checkpoint_dict = {"image_processor_type": "KimiK25VisionProcessor", "media_proc_cfg": config,
                       "num_frames_per_chunk": 4, "auto_map": {"AutoImageProcessor": "m.KimiK25VisionProcessor"},
                       "do_resize": True, "size": {"height": 28}}
    processor = kimi_k3_rs.KimiK3VisionProcessor.from_dict(checkpoint_dict, dtype="bfloat16")
    processor.note = ["set", "afterwards"]
    want = {**checkpoint_dict, "note": ["set", "afterwards"]}
    if kimi_k3_rs.KimiK3VisionProcessor._image_processor_base.__module__.startswith("transformers") and \
            sys.modules["transformers"].__version__.startswith("4."):
        want["_processor_class"] = None  # transformers 4.x keeps it, as the checkpoint's
    assert processor.to_dict() == want
    for how, copied in round_trips(processor):
        assert copied.to_dict() == want, how
        assert (copied.num_frames_per_chunk, copied.note, copied.do_resize) == (4, ["set", "afterwards"], True), how
        assert repr(copied) == f"KimiK25VisionProcessor(media_proc_cfg={config})", how
        assert copied.options == processor.options, how
        assert kimi_k3_rs.KimiK3VisionProcessor.from_dict(copied.to_dict()).to_dict() == want, how
    # a copy's kept attributes are its own
    deep = copy.deepcopy(processor)
    deep.note.append("x")
    assert processor.note == ["set", "afterwards"]


EXCEPTIONS = [
    kimi_k3_rs.KimiK3Error("max_image_pixels must be a positive int or None, got 0"),
    kimi_k3_rs.ConfigError("Kimi-K3 image processor is missing deferred-preprocessing config: patch_size"),
    kimi_k3_rs.ImageError("image 3: cannot read or decode it: OSError: truncated"),
    kimi_k3_rs.ImageTooLargeError("image of 20000x20000 = 400000000 pixels is over max_image_pixels=1"),
]


def raised():
    """Exceptions as the package raises them (core and Python messages)."""
    cases = [
        lambda: kimi_k3_rs.preprocess([b"not an image"], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG),
        lambda: kimi_k3_rs.preprocess([np.zeros((2, 2, 2, 2), np.uint8)], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG),
        lambda: kimi_k3_rs.MediaProcConfig.from_dict(cfg("kimi_k3", patch_size=0)),
        lambda: kimi_k3_rs.MediaProcConfig.from_dict({"patch_size": 14}),
        lambda: kimi_k3_rs.preprocess([encode(noise(64, 64), "PNG")], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG,
                                      max_image_pixels=100),
        lambda: kimi_k3_rs.preprocess([noise(8, 8)], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG, num_threads=0),
    ]
    out = []
    for case in cases:
        with pytest.raises(kimi_k3_rs.KimiK3Error) as info:
            case()
        out.append(info.value)
    return out


def test_exceptions():
    errors = EXCEPTIONS + raised()
    assert {type(e) for e in errors} == {type(e) for e in EXCEPTIONS}
    for error in errors:
        for how, copied in round_trips(error):
            assert type(copied) is type(error), how
            assert str(copied) == str(error) and copied.args == error.args, how
            assert isinstance(copied, ValueError) and isinstance(copied, kimi_k3_rs.KimiK3Error), how
    for cls in (kimi_k3_rs.KimiK3Error, kimi_k3_rs.ConfigError, kimi_k3_rs.ImageError,
                kimi_k3_rs.ImageTooLargeError):
        assert pickle.loads(pickle.dumps(cls)) is cls
        assert cls.__module__ == "kimi_k3_rs"


def encoder_items(tmp_path):
    path = tmp_path / "photo.png"
    noise(400, 300, "RGB", 4).save(path)
    lazy_path = tmp_path / "lazy.png"
    alpha_pattern_la(90, 70, 5).save(lazy_path)
    lazy = Image.open(lazy_path)  # opened, not loaded
    jpeg = encode(noise(200, 120, "RGB", 6), "JPEG")
    return [
        noise(2300, 1700, "RGB", 1),
        {"type": "image", "image": alpha_pattern_rgba(300, 200, 2), "content_hash": "h"},
        mode_image("P+bytes_trns", 70, 50, 3),
        mode_image("P+rgba_palette", 70, 50, 3),
        mode_image("CMYK", 60, 90, 3),
        lazy,
        str(path),
        path,
        jpeg,
        "data:image/jpeg;base64," + __import__("base64").b64encode(jpeg).decode(),
        noise_array(50, 30, "RGBA", 7)[:, ::2],
    ]


@pytest.mark.parametrize("entry", ["k3", "k25"])
@pytest.mark.parametrize("preset", ["k3", "k25"])
def test_encoder_inputs(tmp_path, entry, preset):
    prepare = kimi_k3_rs.prepare_kimi_k3_encoder_inputs if entry == "k3" else prepare_kimi_k25_encoder_inputs
    processor = kimi_k3_rs.KimiK3VisionProcessor(CONFIGS[preset], dtype="bfloat16")
    enc = prepare(encoder_items(tmp_path), processor)
    want = enc.materialize()
    for how, copied in round_trips(enc):
        assert type(copied) is type(enc), how
        assert_bit_equal(copied.grid_thws, enc.grid_thws, how)
        assert (copied.resize_configs, copied.num_tokens, copied.original_image_sizes, copied.content_hashes) == (
            enc.resize_configs, enc.num_tokens, enc.original_image_sizes, enc.content_hashes), how
        got = copied.materialize([10, 0, 5, 2, 3])
        for i, g in zip([10, 0, 5, 2, 3], got):
            assert_bit_equal(g.view(np.uint16), want[i].view(np.uint16), f"{how}: image {i}")
        for i, g in enumerate(copied.materialize()):
            assert_bit_equal(g.view(np.uint16), want[i].view(np.uint16), f"{how}: image {i}")


def test_encoder_inputs_grid_message_survives_pickling(tmp_path):
    path = tmp_path / "img.png"
    noise(300, 200, "RGB", 0).save(path)
    k3 = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([str(path)], kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)
    k25 = prepare_kimi_k25_encoder_inputs([str(path)], kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)
    k3, k25 = pickle.loads(pickle.dumps(k3)), pickle.loads(pickle.dumps(k25))
    noise(200, 300, "RGB", 1).save(path)  # replaced where materialize runs
    with pytest.raises(ValueError, match=exact("Kimi-K3 deferred CPU preprocessing produced wrong grids")):
        k3.materialize()
    with pytest.raises(ValueError, match=exact("Kimi-K2.5 deferred CPU preprocessing produced wrong grids")):
        k25.materialize()


# ---------------------------------------------------------------------------
# across processes
# ---------------------------------------------------------------------------


def _preprocess_in_worker(processor, image):
    """What a worker runs: the captured processor on one image."""
    out = processor.preprocess([image], return_tensors="np")
    return np.asarray(out["pixel_values"]).view(np.uint16).copy(), np.asarray(out["grid_thws"])


def _pool_images():
    return [noise_array(60, 40, "RGB", 0), encode(alpha_pattern_rgba(50, 70, 1), "PNG"),
            noise_array(30, 30, "L", 2), encode(mode_image("P+bytes_trns", 40, 20, 3), "PNG")]


@pytest.mark.parametrize("preset", ["k3", "k25"])
def test_spawn_pool(tmp_path, preset):
    processor = kimi_k3_rs.KimiK3VisionProcessor(CONFIGS[preset], pillow_compat="12", dtype="bfloat16")
    items = _pool_images()
    want = [_preprocess_in_worker(processor, image) for image in items]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        got = pool.map(functools.partial(_preprocess_in_worker, processor), items)
        # a worker's ImageError reaches the driver: class and message
        missing = str(tmp_path / "missing.png")
        with pytest.raises(kimi_k3_rs.ImageError) as local:
            _preprocess_in_worker(processor, missing)
        with pytest.raises(kimi_k3_rs.ImageError) as remote:
            pool.apply(_preprocess_in_worker, (processor, missing))
        assert type(remote.value) is type(local.value) and str(remote.value) == str(local.value)
        with pytest.raises(kimi_k3_rs.ImageTooLargeError, match="max_image_pixels=100"):
            limited = kimi_k3_rs.KimiK3VisionProcessor(CONFIGS[preset], max_image_pixels=100)
            pool.apply(_preprocess_in_worker, (limited, items[1]))
    for (pv, grid), (want_pv, want_grid) in zip(got, want):
        assert_bit_equal(grid, want_grid, "grid_thws")
        assert_bit_equal(pv, want_pv, "pixel_values")


def _materialize_in_worker(enc, indices):
    """What an owner rank runs on deferred inputs it received."""
    return [f.view(np.uint32).copy() for f in enc.materialize(indices)]


@pytest.mark.parametrize("entry", ["k3", "k25"])
def test_spawn_pool_owners_materialize(tmp_path, entry):
    """sglang's flow across processes: the driver prepares, owners materialise their images."""
    prepare = kimi_k3_rs.prepare_kimi_k3_encoder_inputs if entry == "k3" else prepare_kimi_k25_encoder_inputs
    path = tmp_path / "photo.png"
    alpha_pattern_rgba(90, 60, 1).save(path)
    items = [*_pool_images(), str(path), {"type": "image", "image": Image.open(path), "content_hash": "h"}]
    enc = prepare(items, kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
    owned = [[0, 2, 4], [5, 3, 1]]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.map(functools.partial(_materialize_in_worker, enc), owned)
    want = enc.materialize()
    for indices, features in zip(owned, results):
        for i, feature in zip(indices, features):
            assert_bit_equal(feature, want[i].view(np.uint32), f"image {i}")


def test_datasets_map_num_proc(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    processor = kimi_k3_rs.KimiK3VisionProcessor(CONFIGS["k3"])
    pngs = [encode(im, "PNG") for im in (noise(40, 30, "RGB", 0), alpha_pattern_rgba(30, 50, 1),
                                          noise(20, 20, "L", 2), alpha_pattern_la(30, 20, 3))]

    def run(example):
        out = processor.preprocess([io.BytesIO(example["png"]).getvalue()], return_tensors="np")
        pv = np.asarray(out["pixel_values"])
        return {"digest": hashlib.sha256(pv.tobytes()).hexdigest(), "grid": out["grid_thws"][0].tolist()}

    want = [run({"png": png}) for png in pngs]
    ds = datasets.Dataset.from_dict({"png": pngs})
    mapped = ds.map(run, num_proc=2, remove_columns=["png"])
    assert [{"digest": d, "grid": g} for d, g in zip(mapped["digest"], mapped["grid"])] == want


# ---------------------------------------------------------------------------
# a pickle's state is loaded through the constructor (#21 defect 6)
# ---------------------------------------------------------------------------


def load_with_state(obj, state):
    """``obj`` pickled with ``state`` in place of the one it writes (what a crafted,
    damaged or older pickle holds: ``copyreg.__newobj__`` and a BUILD of ``state``),
    then loaded."""

    class Crafted(pickle.Pickler):
        def reducer_override(self, value):
            return (copyreg.__newobj__, (type(obj),), state) if value is obj else NotImplemented

    buffer = io.BytesIO()
    Crafted(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return pickle.loads(buffer.getvalue())


def changed(state, **changes):
    """``state`` with ``changes`` (``...`` drops a key)."""
    out = {**state, **changes}
    return {key: value for key, value in out.items() if value is not ...}


def options():
    return CallOptions.make("12", True, "bfloat16", 2, 10**6)


def encoder_inputs():
    return kimi_k3_rs.prepare_kimi_k3_encoder_inputs([noise_array(56, 28, "RGB", 0), noise_array(30, 30, "RGB", 1)],
                                                     kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)


K25 = kimi_k3_rs.MediaProcConfig.from_dict(kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)
VIDEO_RULE = ('media_proc_cfg["video"] must be None or a dict with all six video keys (in_patch_limit_each_frame, '
              "in_patch_limit_video, sample_fps, max_num_frames_each_video, temporal_merge_kernel_size, timestamp_mode)")

#: (object, its constructor, state changes, exception class, exact message); each state
#: is what the object pickles as, with the changes.
CRAFTED = {
    "options max_image_pixels=0": (options, CallOptions.make, {"max_image_pixels": 0}, kimi_k3_rs.KimiK3Error,
                                   "max_image_pixels must be a positive int or None, got 0"),
    "options max_decoded_bytes='1'": (options, CallOptions.make, {"max_decoded_bytes": "1"}, kimi_k3_rs.KimiK3Error,
                                      "max_decoded_bytes must be a positive int or None, got '1'"),
    "options num_threads=0": (options, CallOptions.make, {"num_threads": 0}, kimi_k3_rs.KimiK3Error,
                              "num_threads must be an integer in 1..=1024, got 0"),
    "options exif_transpose='yes'": (options, CallOptions.make, {"exif_transpose": "yes"}, TypeError,
                                     "exif_transpose must be True or False, got 'yes'"),
    "options allowed_formats='PNG'": (options, CallOptions.make, {"allowed_formats": "PNG"}, TypeError,
                                      "allowed_formats must be None or a list of Pillow format names, got 'PNG'"),
    "options, the attributes of a bare __dict__": (options, CallOptions.make, {"native": _native.Options("13", "float32", 1)},
                                                   TypeError, "CallOptions.make() got an unexpected keyword argument 'native'"),
    "processor without media_proc_cfg": (processors, kimi_k3_rs.KimiK3VisionProcessor, {"media_proc_cfg": ...}, TypeError,
                                         ("KimiK3VisionProcessor.__init__() missing 1 required positional argument: "
                                         "'media_proc_cfg'")),
    "processor media_proc_cfg missing keys": (processors, kimi_k3_rs.KimiK3VisionProcessor,
                                              {"media_proc_cfg": {"patch_size": 14}}, kimi_k3_rs.ConfigError,
                                              ("Kimi-K3 image processor is missing deferred-preprocessing config: "
                                              "merge_kernel_size, in_patch_limit, patch_limit_on_one_side, image_mean, "
                                              "image_std")),
    "processor media_proc_cfg not a dict": (processors, kimi_k3_rs.KimiK3VisionProcessor, {"media_proc_cfg": None},
                                            TypeError, "media_proc_cfg must be a dict, got NoneType"),
    "processor max_image_pixels=-1": (processors, kimi_k3_rs.KimiK3VisionProcessor, {"max_image_pixels": -1},
                                      kimi_k3_rs.KimiK3Error, "max_image_pixels must be a positive int or None, got -1"),
    "processor, the attributes of a bare __dict__": (processors, kimi_k3_rs.KimiK3VisionProcessor,
                                                     {"config": K25, "options": ...}, TypeError,
                                                     ("KimiK3VisionProcessor.__init__() got an unexpected keyword "
                                                     "argument 'config'")),
    "encoder inputs, one size for two images": (encoder_inputs, KimiK3EncoderInputs,
                                                {"original_image_sizes": [[56, 28]]}, TypeError,
                                                ("KimiK3EncoderInputs.original_image_sizes must be a list of 2 [width, "
                                                "height] pairs of ints in 0..2**64 (one per item), got [[56, 28]]")),
    "encoder inputs, a negative side": (encoder_inputs, KimiK3EncoderInputs,
                                        {"original_image_sizes": [[56, 28], [-1, 30]]}, TypeError,
                                        ("KimiK3EncoderInputs.original_image_sizes must be a list of 2 [width, height] "
                                        "pairs of ints in 0..2**64 (one per item), got [[56, 28], [-1, 30]]")),
    "encoder inputs, a zero side": (encoder_inputs, KimiK3EncoderInputs,
                                    {"original_image_sizes": [[56, 28], [0, 30]]}, kimi_k3_rs.ImageError,
                                    "image 1: image width and height must be positive, got 0x30"),
    "encoder inputs, one image fewer": (encoder_inputs, KimiK3EncoderInputs,
                                        {"_images": [noise_array(56, 28, "RGB", 0)]}, TypeError,
                                        ("KimiK3EncoderInputs.original_image_sizes must be a list of 1 [width, height] "
                                        "pairs of ints in 0..2**64 (one per item), got [[56, 28], [30, 30]]")),
    "encoder inputs, images not a list": (encoder_inputs, KimiK3EncoderInputs, {"_images": None}, TypeError,
                                          "KimiK3EncoderInputs._images must be a list, got None"),
    "encoder inputs, hashes of another length": (encoder_inputs, KimiK3EncoderInputs, {"content_hashes": []},
                                                 TypeError, ("KimiK3EncoderInputs.content_hashes must be a list of 2 "
                                                 "entries (one per item), got []")),
    "encoder inputs, no options": (encoder_inputs, KimiK3EncoderInputs, {"_options": None}, TypeError,
                                   ("KimiK3EncoderInputs._options must be the options of a call "
                                   "(kimi_k3_rs.options.CallOptions), got None")),
    "encoder inputs, a config dict": (encoder_inputs, KimiK3EncoderInputs, {"_config": {"patch_size": 14}}, TypeError,
                                      ("KimiK3EncoderInputs._config must be a kimi_k3_rs.MediaProcConfig, got "
                                      "{'patch_size': 14}")),
    "encoder inputs, a chunk without video keys": (encoder_inputs, KimiK3EncoderInputs,
                                                   {"_images": [{"type": "video_chunk", "video_chunk": [np.zeros((2, 2, 3),
                                                                                                            np.uint8)]},
                                                                noise_array(30, 30, "RGB", 1)]},
                                                   ValueError, ("Unsupported Kimi-K3 encoder media item: {'type': "
                                                   "'video_chunk', 'video_chunk': [<numpy.ndarray shape=(2, 2, 3) "
                                                   "dtype=uint8>]}")),
    "encoder inputs, the geometry of the old layout": (encoder_inputs, KimiK3EncoderInputs,
                                                       {"grid_thws": np.array([[1, 2, 4]]), "num_tokens": [2]}, TypeError,
                                                       ("KimiK3EncoderInputs.__init__() got an unexpected keyword argument "
                                                       "'grid_thws'")),
    "config with a partial video dict": (lambda: K25, kimi_k3_rs.MediaProcConfig, {"video": {"sample_fps": 2.0}},
                                         TypeError, VIDEO_RULE + ", got {'sample_fps': 2.0}"),
    "config patch_size=0": (lambda: K25, kimi_k3_rs.MediaProcConfig, {"patch_size": 0}, kimi_k3_rs.ConfigError,
                            'media_proc_cfg["patch_size"] must be an integer in 1..=2**31-1, got 0'),
    "config background pattern": (lambda: K25, kimi_k3_rs.MediaProcConfig,
                                  {"transparent_bg_config": {"pattern": "plaid"}}, kimi_k3_rs.ConfigError,
                                  "Invalid background pattern: plaid"),
    "config with its native object": (lambda: K25, kimi_k3_rs.MediaProcConfig, {"native": K25.native}, TypeError,
                                      "MediaProcConfig.__init__() got an unexpected keyword argument 'native'"),
    "background with an unknown key": (kimi_k3_rs.TransparentBgConfig, kimi_k3_rs.TransparentBgConfig,
                                       {"colour": "red"}, TypeError,
                                       "TransparentBgConfig.__init__() got an unexpected keyword argument 'colour'"),
    "video config without a key": (lambda: K25.video, VideoConfig, {"timestamp_mode": ...}, TypeError,
                                   "VideoConfig.__init__() missing 1 required positional argument: 'timestamp_mode'"),
}


@pytest.mark.parametrize("name", CRAFTED)
def test_crafted_state_raises_the_constructors_error(name):
    """A state that is not what the object pickles as raises, on load, exactly what its
    constructor raises on those arguments (was: loaded as given, failing later or never)."""
    make, constructor, changes, error, message = CRAFTED[name]
    obj = next(iter(make())) if make is processors else make()
    state = changed(obj.__getstate__(), **changes)
    with pytest.raises(error, match=exact(message)) as direct:
        constructor(**state)
    with pytest.raises(error, match=exact(message)) as loaded:
        load_with_state(obj, state)
    assert type(loaded.value) is type(direct.value)


@pytest.mark.parametrize("obj", [options(), next(processors()), K25, K25.video, kimi_k3_rs.TransparentBgConfig()],
                         ids=["options", "processor", "config", "video", "background"])
def test_a_state_that_is_not_a_dict_is_refused(obj):
    with pytest.raises(TypeError, match=r"argument after \*\* must be a mapping, not list$"):
        load_with_state(obj, ["not", "a", "state"])


def test_a_state_is_loaded_as_the_constructor_builds_it():
    """What loads is the constructor's object, not the state as given: a limit the
    constructor takes (2**80 pixels) loads as ``make`` gives it; the deferred geometry
    is sized again from the sizes a state holds, so it can never disagree with them."""
    big = load_with_state(options(), changed(options().__getstate__(), max_image_pixels=2**80))
    assert big == CallOptions.make("12", True, "bfloat16", 2, 2**80) and type(big.native) is _native.Options
    enc = encoder_inputs()
    swapped = load_with_state(enc, changed(enc.__getstate__(), original_image_sizes=[[28, 56], [30, 30]]))
    assert swapped.grid_thws.tolist() == [[1, 4, 2], [1, 4, 4]] and swapped.num_tokens == [2, 4]
    assert swapped.resize_configs[0] == kimi_k3_rs.navit_resize_config(28, 56, 14, 2, 65536, 512)
    with pytest.raises(ValueError, match=exact("Kimi-K3 deferred CPU preprocessing produced wrong grids")):
        swapped.materialize([0])  # the images are not of those sizes: materialize's own check
    assert_bit_equal(swapped.materialize([1])[0], enc.materialize([1])[0], "image 1")


def test_native_pickles_go_through_their_constructors():
    """``_native.MediaProcConfig`` / ``_native.Options`` pickle as their constructors'
    arguments; crafted arguments raise the constructors' errors (a partial video dict
    raised a KeyError)."""
    cfg = K25.native
    newobj_ex, (cls, args, kwargs) = cfg.__reduce__()
    for change, error, message in [
        ({"video": {"sample_fps": 2.0}}, TypeError, VIDEO_RULE + ", got {'sample_fps': 2.0}"),
        ({"video": 5}, TypeError, VIDEO_RULE + ", got 5"),
        ({"fixed_output_tokens": -1}, kimi_k3_rs.ConfigError,
         'media_proc_cfg["fixed_output_tokens"] must be None or a number in 0..=2**31-1, got -1'),
    ]:
        crafted = (newobj_ex, (cls, args, {**kwargs, **change}))
        with pytest.raises(error, match=exact(message)):
            pickle.loads(pickle.dumps(_Reduced(crafted)))
    with pytest.raises(kimi_k3_rs.KimiK3Error, match=exact("num_threads must be an integer in 1..=1024, got 0")):
        pickle.loads(pickle.dumps(_Reduced((_native.Options, ("13", "float32", 0)))))


class _Reduced:
    """Pickles as the reduce value it is given (a crafted pickle of a native object)."""

    def __init__(self, reduced):
        self.reduced = reduced

    def __reduce__(self):
        return self.reduced


def test_video_and_background_round_trip():
    for value in (K25.video, kimi_k3_rs.TransparentBgConfig(pattern="white", chessboard_square_size=4)):
        for how, copied in round_trips(value):
            assert type(copied) is type(value) and copied == value, how
